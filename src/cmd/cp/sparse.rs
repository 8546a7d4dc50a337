//! Sparse output: the all-zero blocks of a chunk are not written into a
//! regular destination file, whose unwritten ranges read as zeros because
//! the copy made them holes first (`set_len`). Zeros are found in blocks of
//! [`BLOCK`] bytes aligned to the file's offsets (what nbdcopy and
//! `qemu-img convert` default to), with a scan that costs about one pass
//! over memory and stops at the first non-zero byte.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The size of the blocks checked for zeros and left as holes.
pub const BLOCK: u64 = 4096;

/// Whether every byte of `buf` is zero.
pub fn is_zero(buf: &[u8]) -> bool {
    // OR 256-byte groups together 16 bytes at a time: the loop vectorises,
    // and the test after each group still stops early on data.
    let groups = buf.chunks_exact(256);
    let tail = groups.remainder();
    tail.iter().all(|&b| b == 0)
        && groups.into_iter().all(|g| {
            g.chunks_exact(16).fold(0u128, |a, w| {
                a | u128::from_ne_bytes(w.try_into().expect("16 bytes"))
            }) == 0
        })
}

/// Write `data` at offset `at` of `file`, leaving out every [`BLOCK`] (at
/// the file's block boundaries; partial at the ends) that holds only
/// zeros. The file must read as zeros there already (a hole). Returns the
/// number of bytes left out.
pub fn write_sparse(file: &File, data: &[u8], at: u64) -> std::io::Result<u64> {
    let mut holes = 0u64;
    let mut run: Option<usize> = None;
    let mut pos = 0usize;
    while pos < data.len() {
        let abs = at + pos as u64;
        let end = ((abs / BLOCK + 1) * BLOCK - at).min(data.len() as u64) as usize;
        if is_zero(&data[pos..end]) {
            holes += (end - pos) as u64;
            if let Some(start) = run.take() {
                file.write_all_at(&data[start..pos], at + start as u64)?;
            }
        } else if run.is_none() {
            run = Some(pos);
        }
        pos = end;
    }
    if let Some(start) = run {
        file.write_all_at(&data[start..], at + start as u64)?;
    }
    Ok(holes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn zero_detection_finds_any_non_zero_byte() {
        let mut buf = vec![0u8; 8192 + 7];
        assert!(is_zero(&buf));
        assert!(is_zero(&[]));
        for i in [0, 15, 16, 255, 256, 4095, 8191, 8192, 8198] {
            buf[i] = 1;
            assert!(!is_zero(&buf), "byte {i}");
            buf[i] = 0;
        }
    }

    #[test]
    fn zero_blocks_become_holes_and_the_rest_lands_in_place() {
        let f = tempfile::tempfile().unwrap();
        let size = 64 * BLOCK;
        f.set_len(size).unwrap();
        // From 100 bytes into a block: data in the first partial block, in
        // block 10 and in the last partial block; zeros elsewhere.
        let at = 100u64;
        let mut data = vec![0u8; (size - at - 50) as usize];
        data[0] = 7;
        data[(10 * BLOCK - at) as usize + 5] = 8;
        let last = data.len() - 1;
        data[last] = 9;

        let holes = write_sparse(&f, &data, at).unwrap();

        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, at).unwrap();
        assert!(back == data);
        // Three blocks written, the rest skipped.
        let written = (BLOCK - at) + BLOCK + (BLOCK - 50);
        assert_eq!(holes, data.len() as u64 - written);
        f.sync_all().unwrap();
        let allocated = f.metadata().unwrap().blocks() * 512;
        assert!(allocated <= 8 * BLOCK, "{allocated} bytes allocated");
    }
}
