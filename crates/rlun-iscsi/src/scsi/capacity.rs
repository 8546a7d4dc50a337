//! READ CAPACITY(10) and (16) parameter data (SBC-4 5.20.2, 5.21.2).
//!
//! Procedure (SBC-4 4.4, 5.20.1): send READ CAPACITY(10) first; when it
//! returns a last LBA of 0xFFFFFFFF ([`ReadCapacity10::needs_16`]) the
//! device is too large for it and READ CAPACITY(16) must be used. Devices
//! that support thin provisioning or protection information report those
//! only through (16), so callers that care may send (16) directly.

use super::{be32_at, be64_at, need, u8_at, ParseError};

/// A block length of 0 would make every offset calculation above divide by
/// zero; refuse it here.
fn check_block_length(what: &'static str, len: u32) -> Result<(), ParseError> {
    if len == 0 {
        return Err(ParseError::BadField {
            what,
            field: "LOGICAL BLOCK LENGTH",
            value: 0,
        });
    }
    Ok(())
}

/// READ CAPACITY(10) data: bytes 0..4 RETURNED LOGICAL BLOCK ADDRESS (the
/// last LBA), 4..8 LOGICAL BLOCK LENGTH IN BYTES.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCapacity10 {
    pub last_lba: u32,
    pub block_length: u32,
}

impl ReadCapacity10 {
    pub fn parse(buf: &[u8]) -> Result<ReadCapacity10, ParseError> {
        const WHAT: &str = "READ CAPACITY(10) data";
        need(buf, 8, WHAT)?;
        let block_length = be32_at(buf, 4);
        check_block_length(WHAT, block_length)?;
        Ok(ReadCapacity10 {
            last_lba: be32_at(buf, 0),
            block_length,
        })
    }

    /// The last LBA is 0xFFFFFFFF: the capacity does not fit; use READ
    /// CAPACITY(16).
    pub fn needs_16(&self) -> bool {
        self.last_lba == u32::MAX
    }

    /// Number of logical blocks, `None` when [`Self::needs_16`].
    pub fn block_count(&self) -> Option<u64> {
        (!self.needs_16()).then(|| u64::from(self.last_lba) + 1)
    }

    /// Capacity in bytes, `None` when [`Self::needs_16`]. Always fits a u64
    /// otherwise: (2³² − 1) × (2³² − 1) < 2⁶⁴.
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.block_count().map(|n| n * u64::from(self.block_length))
    }
}

/// Protection type, when PROT_EN is set (SBC-4 4.22.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtectionType {
    Type1,
    Type2,
    Type3,
    Reserved(u8),
}

/// READ CAPACITY(16) data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCapacity16 {
    pub last_lba: u64,
    pub block_length: u32,
    /// Protection information type, `None` when PROT_EN is clear.
    pub protection: Option<ProtectionType>,
    /// P_I EXPONENT: protection information intervals per block = 2^n.
    pub p_i_exponent: u8,
    /// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT: 2^n logical blocks per
    /// physical block (e.g. 3 for 512e on 4 KiB sectors).
    pub lbppb_exponent: u8,
    /// LBPME: logical block provisioning (thin provisioning) enabled.
    pub lbpme: bool,
    /// LBPRZ: unmapped blocks read as zeros.
    pub lbprz: bool,
    /// LOWEST ALIGNED LOGICAL BLOCK ADDRESS (14 bits).
    pub lowest_aligned_lba: u16,
}

impl ReadCapacity16 {
    /// Bytes 0..8 RETURNED LOGICAL BLOCK ADDRESS, 8..12 LOGICAL BLOCK
    /// LENGTH, byte 12 P_TYPE (3..1) PROT_EN (0), byte 13 P_I EXPONENT
    /// (7..4) LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (3..0), byte 14
    /// LBPME (7) LBPRZ (6) + bytes 14..16 LOWEST ALIGNED LBA (13..0).
    ///
    /// Needs the first 12 bytes; bytes 12..16 read as 0 when absent (old
    /// devices and small allocation lengths).
    pub fn parse(buf: &[u8]) -> Result<ReadCapacity16, ParseError> {
        const WHAT: &str = "READ CAPACITY(16) data";
        need(buf, 12, WHAT)?;
        let block_length = be32_at(buf, 8);
        check_block_length(WHAT, block_length)?;
        let b12 = u8_at(buf, 12);
        let b13 = u8_at(buf, 13);
        let b14 = u8_at(buf, 14);
        Ok(ReadCapacity16 {
            last_lba: be64_at(buf, 0),
            block_length,
            protection: (b12 & 0x01 != 0).then_some(match (b12 >> 1) & 0x07 {
                0 => ProtectionType::Type1,
                1 => ProtectionType::Type2,
                2 => ProtectionType::Type3,
                other => ProtectionType::Reserved(other),
            }),
            p_i_exponent: b13 >> 4,
            lbppb_exponent: b13 & 0x0F,
            lbpme: b14 & 0x80 != 0,
            lbprz: b14 & 0x40 != 0,
            lowest_aligned_lba: u16::from_be_bytes([b14 & 0x3F, u8_at(buf, 15)]),
        })
    }

    /// Number of logical blocks (last LBA + 1), `None` if that overflows.
    pub fn block_count(&self) -> Option<u64> {
        self.last_lba.checked_add(1)
    }

    /// Capacity in bytes, `None` if it does not fit a u64.
    pub fn capacity_bytes(&self) -> Option<u64> {
        self.block_count()?
            .checked_mul(u64::from(self.block_length))
    }

    /// Physical block size in bytes (block length × 2^exponent), `None`
    /// if it overflows a u32.
    pub fn physical_block_length(&self) -> Option<u32> {
        1u32.checked_shl(u32::from(self.lbppb_exponent))?
            .checked_mul(self.block_length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_capacity10_gives_blocks_and_bytes() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x1F, 0xFF, 0xFF, // last LBA 0x1FFFFF
            0x00, 0x00, 0x02, 0x00, // block length 512
        ];
        let c = ReadCapacity10::parse(&buf).unwrap();
        assert_eq!(c.last_lba, 0x1F_FFFF);
        assert_eq!(c.block_length, 512);
        assert!(!c.needs_16());
        assert_eq!(c.block_count(), Some(0x20_0000));
        assert_eq!(c.capacity_bytes(), Some(1 << 30));
    }

    #[test]
    fn read_capacity10_all_ones_means_use_16() {
        let buf = [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x10, 0x00];
        let c = ReadCapacity10::parse(&buf).unwrap();
        assert!(c.needs_16());
        assert_eq!(c.capacity_bytes(), None);
    }

    #[test]
    fn read_capacity10_largest_real_value_does_not_overflow() {
        let c = ReadCapacity10 {
            last_lba: u32::MAX - 1,
            block_length: u32::MAX,
        };
        assert_eq!(
            c.capacity_bytes(),
            Some(u64::from(u32::MAX) * u64::from(u32::MAX))
        );
    }

    #[test]
    fn zero_block_length_is_rejected() {
        let err = ReadCapacity10::parse(&[0, 0, 0, 1, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            err,
            ParseError::BadField {
                what: "READ CAPACITY(10) data",
                field: "LOGICAL BLOCK LENGTH",
                value: 0
            }
        );
    }

    #[test]
    fn short_read_capacity10_is_truncated() {
        assert_eq!(
            ReadCapacity10::parse(&[0; 7]).unwrap_err().needed(),
            Some(8)
        );
    }

    #[test]
    fn read_capacity16_decodes_thin_provisioning_and_4k_physical() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x00, 0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, // last LBA 0x1_FFFF_FFFF
            0x00, 0x00, 0x02, 0x00, // block length 512
            0x00,                   // P_TYPE 0, PROT_EN 0
            0x03,                   // P_I exponent 0, 2^3 logical per physical
            0xC0,                   // LBPME, LBPRZ, lowest aligned LBA high bits 0
            0x00,                   // lowest aligned LBA 0
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
        ];
        let c = ReadCapacity16::parse(&buf).unwrap();
        assert_eq!(c.last_lba, 0x1_FFFF_FFFF);
        assert_eq!(c.block_count(), Some(0x2_0000_0000));
        assert_eq!(c.capacity_bytes(), Some(4 << 40));
        assert_eq!(c.physical_block_length(), Some(4096));
        assert!(c.lbpme && c.lbprz);
        assert_eq!(c.protection, None);
        assert_eq!(c.lowest_aligned_lba, 0);
    }

    #[test]
    fn read_capacity16_decodes_protection_and_alignment() {
        #[rustfmt::skip]
        let buf = [
            0, 0, 0, 0, 0, 0, 0x0F, 0xFF, // last LBA 4095
            0x00, 0x00, 0x10, 0x00,       // block length 4096
            0x05,                         // P_TYPE 010b -> Type 3, PROT_EN
            0x20,                         // P_I exponent 2, LBPPB exponent 0
            0x01, 0x23,                   // lowest aligned LBA 0x123
        ];
        let c = ReadCapacity16::parse(&buf).unwrap();
        assert_eq!(c.protection, Some(ProtectionType::Type3));
        assert_eq!(c.p_i_exponent, 2);
        assert_eq!(c.lowest_aligned_lba, 0x123);
        assert!(!c.lbpme);
    }

    #[test]
    fn read_capacity16_accepts_twelve_bytes_and_reads_rest_as_zero() {
        let buf = [0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 2, 0];
        let c = ReadCapacity16::parse(&buf).unwrap();
        assert_eq!(c.capacity_bytes(), Some(8 * 512));
        assert_eq!(c.lbppb_exponent, 0);
    }

    #[test]
    fn read_capacity16_overflowing_capacity_is_none() {
        let mut buf = [0xFFu8; 16];
        buf[8..12].copy_from_slice(&512u32.to_be_bytes());
        let c = ReadCapacity16::parse(&buf).unwrap();
        assert_eq!(c.block_count(), None);
        assert_eq!(c.capacity_bytes(), None);
        assert_eq!(c.physical_block_length(), Some(512 << 15));
    }
}
