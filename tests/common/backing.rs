//! Deterministic pseudo-random backing files.
//!
//! The byte at offset `o` of the pattern with seed `s` depends only on `s` and
//! `o`, so a test can compute what any range of a LUN must contain
//! ([`pattern_bytes`]) without keeping a copy of the file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 8-byte word of the pattern that covers offsets `8*index .. 8*index+8`.
fn word(seed: u64, index: u64) -> [u8; 8] {
    splitmix64(splitmix64(seed) ^ index).to_le_bytes()
}

/// Fill `buf` with the pattern bytes for `seed` starting at byte `offset`.
pub fn fill_pattern(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut filled = 0;
    while filled < buf.len() {
        let w = word(seed, pos / 8);
        let start = (pos % 8) as usize;
        let n = (8 - start).min(buf.len() - filled);
        buf[filled..filled + n].copy_from_slice(&w[start..start + n]);
        filled += n;
        pos += n as u64;
    }
}

/// The `len` pattern bytes for `seed` starting at byte `offset`.
pub fn pattern_bytes(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    fill_pattern(seed, offset, &mut buf);
    buf
}

/// Create `dir/backing-<seed>-<size>.img` holding `size` pattern bytes for
/// `seed` and return its path. Panics (failing the test) if it cannot be
/// written: this is test set-up, not the code under test.
pub fn make_backing_file(dir: &Path, size: u64, seed: u64) -> PathBuf {
    const CHUNK: usize = 1 << 20;
    let path = dir.join(format!("backing-{seed:016x}-{size}.img"));
    let file = File::create(&path)
        .unwrap_or_else(|e| panic!("creating backing file {}: {e}", path.display()));
    let mut out = BufWriter::with_capacity(CHUNK, file);
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(CHUNK as u64) as usize;
        fill_pattern(seed, offset, &mut buf[..n]);
        out.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("writing backing file {}: {e}", path.display()));
        offset += n as u64;
    }
    out.flush()
        .unwrap_or_else(|e| panic!("flushing backing file {}: {e}", path.display()));
    path
}
