//! GET LBA STATUS parameter data (SBC-4 5.8.2): which blocks of a thin
//! LUN are mapped.
//!
//! Bytes 0..4 PARAMETER DATA LENGTH (the bytes after these four), 4..8
//! reserved, then 16-byte descriptors: 0..8 LBA STATUS LOGICAL BLOCK
//! ADDRESS, 8..12 NUMBER OF LOGICAL BLOCKS, byte 12 bits 3..0
//! PROVISIONING STATUS.

use super::{be32_at, be64_at, need, u8_at, ParseError};

/// PROVISIONING STATUS of a run of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisioning {
    /// 0: mapped (or unknown).
    Mapped,
    /// 1: deallocated.
    Deallocated,
    /// 2: anchored (no storage, but reserved).
    Anchored,
    Other(u8),
}

/// One LBA status descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbaStatus {
    pub lba: u64,
    pub blocks: u32,
    pub status: Provisioning,
}

/// Parse the descriptors of GET LBA STATUS data. A descriptor cut short by
/// the allocation length is left out; a header that claims more than was
/// received is not an error (the caller asked for what it can use).
pub fn parse(buf: &[u8]) -> Result<Vec<LbaStatus>, ParseError> {
    const WHAT: &str = "GET LBA STATUS data";
    need(buf, 8, WHAT)?;
    let len = (be32_at(buf, 0) as usize).saturating_add(4).min(buf.len());
    let mut out = Vec::new();
    let mut at = 8;
    while at + 16 <= len {
        let status = match u8_at(buf, at + 12) & 0x0f {
            0 => Provisioning::Mapped,
            1 => Provisioning::Deallocated,
            2 => Provisioning::Anchored,
            n => Provisioning::Other(n),
        };
        out.push(LbaStatus {
            lba: be64_at(buf, at),
            blocks: be32_at(buf, at + 8),
            status,
        });
        at += 16;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_parsed_in_order() {
        let mut b = vec![
            0, 0, 0, 36, // parameter data length: 4 reserved + 2 descriptors
            0, 0, 0, 0, // reserved
        ];
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // LBA 0
        b.extend_from_slice(&[0, 0, 0x08, 0]); // 2048 blocks
        b.extend_from_slice(&[0, 0, 0, 0]); // mapped
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x08, 0]); // LBA 2048
        b.extend_from_slice(&[0, 0, 0, 16]); // 16 blocks
        b.extend_from_slice(&[1, 0, 0, 0]); // deallocated

        let v = parse(&b).unwrap();

        assert_eq!(
            v,
            [
                LbaStatus {
                    lba: 0,
                    blocks: 2048,
                    status: Provisioning::Mapped
                },
                LbaStatus {
                    lba: 2048,
                    blocks: 16,
                    status: Provisioning::Deallocated
                },
            ]
        );
    }

    #[test]
    fn truncated_data_keeps_whole_descriptors_only() {
        let mut b = vec![0, 0, 0, 36, 0, 0, 0, 0];
        b.extend_from_slice(&[0; 20]);
        assert_eq!(parse(&b).unwrap().len(), 1);
        assert!(parse(&[0, 0, 0]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..100)) {
            let _ = parse(&b);
        }
    }
}
