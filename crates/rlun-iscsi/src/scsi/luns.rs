//! REPORT LUNS data (SPC-5 6.33.2) and the 8-byte LUN structure (SAM-5 4.7).
//!
//! A LUN travels as 8 bytes (in REPORT LUNS data and in the LUN field of
//! iSCSI PDUs, RFC 7143 11.3). Its first byte's top two bits choose the
//! address method (SAM-5 4.7.7):
//!
//! | method | byte 0 | number |
//! | --- | --- | --- |
//! | peripheral (00b) | bus id in bits 5..0 | byte 1 (bus id as the high byte, as Linux and LIO count) |
//! | flat space (01b) | high 6 bits of the LUN | 14-bit LUN in bytes 0..2 |
//! | extended flat space (0xD2) | | 24-bit LUN in bytes 1..4 |
//! | long extended flat space (0xE2) | | 40-bit LUN in bytes 1..6 |
//!
//! Targets differ in how they number LUNs ≥ 256 (tgtd expects flat space,
//! Linux LIO uses the peripheral form with a "bus" byte). [`lun_to_bytes`]
//! follows SAM (flat space); to address a LUN the target listed, send the
//! raw bytes of its [`Lun`] from [`ReportLuns`] ([`ReportLuns::find`]).

use super::{be32_at, need, slice_at, ParseError};

/// A decoded 8-byte LUN structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LunAddress {
    /// Peripheral device addressing (00b), single level.
    Peripheral { bus: u8, lun: u8 },
    /// Flat space addressing (01b), single level: 14 bits.
    Flat(u16),
    /// Extended flat space (0xD2): 24 bits.
    ExtendedFlat(u32),
    /// Long extended flat space (0xE2): 40 bits.
    LongExtendedFlat(u64),
    /// Anything else: hierarchical (multi-level) LUNs, logical unit
    /// addressing (10b), other extended methods.
    Other([u8; 8]),
}

impl LunAddress {
    /// Decodes the 8 bytes. Single-level forms require the unused bytes to
    /// be zero, else the LUN is [`LunAddress::Other`].
    pub fn decode(raw: [u8; 8]) -> LunAddress {
        let zero_from = |i: usize| raw[i..].iter().all(|&b| b == 0);
        match raw[0] >> 6 {
            0b00 if zero_from(2) => LunAddress::Peripheral {
                bus: raw[0] & 0x3F,
                lun: raw[1],
            },
            0b01 if zero_from(2) => LunAddress::Flat(u16::from_be_bytes([raw[0] & 0x3F, raw[1]])),
            0b11 if raw[0] == 0xD2 && zero_from(4) => {
                LunAddress::ExtendedFlat(u32::from_be_bytes([0, raw[1], raw[2], raw[3]]))
            }
            0b11 if raw[0] == 0xE2 && zero_from(6) => {
                LunAddress::LongExtendedFlat(u64::from_be_bytes([
                    0, 0, 0, raw[1], raw[2], raw[3], raw[4], raw[5],
                ]))
            }
            _ => LunAddress::Other(raw),
        }
    }

    /// The LUN as a number: see [`lun_from_bytes`].
    pub fn number(&self) -> u64 {
        match *self {
            LunAddress::Peripheral { bus, lun } => u64::from(bus) << 8 | u64::from(lun),
            LunAddress::Flat(n) => n.into(),
            LunAddress::ExtendedFlat(n) => n.into(),
            LunAddress::LongExtendedFlat(n) => n,
            LunAddress::Other(raw) => u64::from_be_bytes(raw),
        }
    }
}

/// The LUN number of an 8-byte LUN structure: peripheral and flat space
/// give `(byte0 & 0x3F) << 8 | byte1`, extended flat spaces their 24/40
/// bits. Other structures (multi-level, logical unit addressing) come back
/// as the 8 bytes read as a big-endian u64.
pub fn lun_from_bytes(raw: [u8; 8]) -> u64 {
    LunAddress::decode(raw).number()
}

/// The 8-byte LUN structure for a LUN number (SAM-5 4.7.7): peripheral for
/// 0..=255, flat space up to 16383, extended flat space up to 2²⁴ − 1,
/// long extended flat space up to 2⁴⁰ − 1; larger values are taken as an
/// already encoded structure (big-endian), the inverse of [`lun_from_bytes`]
/// for [`LunAddress::Other`].
pub fn lun_to_bytes(lun: u64) -> [u8; 8] {
    let b = lun.to_be_bytes();
    if lun < 0x100 {
        [0x00, b[7], 0, 0, 0, 0, 0, 0]
    } else if lun < 0x4000 {
        [0x40 | b[6], b[7], 0, 0, 0, 0, 0, 0]
    } else if lun < 1 << 24 {
        [0xD2, b[5], b[6], b[7], 0, 0, 0, 0]
    } else if lun < 1 << 40 {
        [0xE2, b[3], b[4], b[5], b[6], b[7], 0, 0]
    } else {
        b
    }
}

/// One LUN as the target reported it: keep and send these raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lun(pub [u8; 8]);

impl Lun {
    /// A LUN from a number (as a URL gives it), encoded per [`lun_to_bytes`].
    pub fn from_number(n: u64) -> Lun {
        Lun(lun_to_bytes(n))
    }

    pub fn number(&self) -> u64 {
        lun_from_bytes(self.0)
    }

    pub fn address(&self) -> LunAddress {
        LunAddress::decode(self.0)
    }

    /// The 8 bytes for the LUN field of an iSCSI PDU.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }
}

impl std::fmt::Debug for Lun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lun({} {:?})", self.number(), self.address())
    }
}

/// REPORT LUNS parameter data: bytes 0..4 LUN LIST LENGTH (bytes of LUNs
/// that follow), 4..8 reserved, then 8 bytes per LUN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportLuns {
    pub luns: Vec<Lun>,
}

impl ReportLuns {
    /// Parses the data. When the allocation length cut the list short, the
    /// error is [`ParseError::Truncated`] with `needed` = 8 + LUN LIST
    /// LENGTH: re-issue REPORT LUNS with that allocation length. A list
    /// length that is not a multiple of 8 drops the partial entry.
    pub fn parse(buf: &[u8]) -> Result<ReportLuns, ParseError> {
        const WHAT: &str = "REPORT LUNS data";
        need(buf, 8, WHAT)?;
        let list_len = be32_at(buf, 0) as usize;
        need(buf, 8usize.saturating_add(list_len), WHAT)?;
        let luns = slice_at(buf, 8, list_len)
            .chunks_exact(8)
            .map(|c| {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(c);
                Lun(raw)
            })
            .collect();
        Ok(ReportLuns { luns })
    }

    /// The reported LUN with this number, with the bytes the target used.
    pub fn find(&self, number: u64) -> Option<Lun> {
        self.luns.iter().copied().find(|l| l.number() == number)
    }

    /// The LUN numbers in the order reported.
    pub fn numbers(&self) -> Vec<u64> {
        self.luns.iter().map(Lun::number).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tgtd_report_luns_lists_controller_and_disk() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x00, 0x00, 0x10, // LUN list length 16 (two LUNs)
            0x00, 0x00, 0x00, 0x00, // reserved
            0x00, 0x00, 0, 0, 0, 0, 0, 0, // LUN 0 (peripheral)
            0x00, 0x01, 0, 0, 0, 0, 0, 0, // LUN 1 (peripheral)
        ];
        let r = ReportLuns::parse(&buf).unwrap();
        assert_eq!(r.numbers(), vec![0, 1]);
        assert_eq!(
            r.find(1).unwrap().to_bytes(),
            [0x00, 0x01, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(r.find(2), None);
    }

    #[test]
    fn truncated_list_asks_for_the_full_allocation_length() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x00, 0x01, 0x00, // 256 bytes of LUNs (32 LUNs)
            0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0, 0, 0, 0, 0, 0, // only the first fits the 16-byte allocation
        ];
        let err = ReportLuns::parse(&buf).unwrap_err();
        assert_eq!(err.needed(), Some(8 + 256));
    }

    #[test]
    fn flat_and_lio_style_forms_of_lun_300_both_decode_to_300() {
        let flat = [0x41, 0x2C, 0, 0, 0, 0, 0, 0]; // 01b, 0x012C
        let lio = [0x01, 0x2C, 0, 0, 0, 0, 0, 0]; // 00b, bus 1, lun 0x2C
        assert_eq!(LunAddress::decode(flat), LunAddress::Flat(300));
        assert_eq!(
            LunAddress::decode(lio),
            LunAddress::Peripheral { bus: 1, lun: 0x2C }
        );
        assert_eq!(lun_from_bytes(flat), 300);
        assert_eq!(lun_from_bytes(lio), 300);
    }

    #[test]
    fn lun_to_bytes_picks_the_smallest_sam_form() {
        assert_eq!(lun_to_bytes(0), [0; 8]);
        assert_eq!(lun_to_bytes(5), [0x00, 0x05, 0, 0, 0, 0, 0, 0]);
        assert_eq!(lun_to_bytes(255), [0x00, 0xFF, 0, 0, 0, 0, 0, 0]);
        assert_eq!(lun_to_bytes(256), [0x41, 0x00, 0, 0, 0, 0, 0, 0]);
        assert_eq!(lun_to_bytes(0x3FFF), [0x7F, 0xFF, 0, 0, 0, 0, 0, 0]);
        assert_eq!(lun_to_bytes(0x4000), [0xD2, 0x00, 0x40, 0x00, 0, 0, 0, 0]);
        assert_eq!(
            lun_to_bytes(0x12_3456_789A),
            [0xE2, 0x12, 0x34, 0x56, 0x78, 0x9A, 0, 0]
        );
    }

    #[test]
    fn lun_numbers_round_trip_through_bytes() {
        for n in [
            0,
            1,
            255,
            256,
            16383,
            16384,
            0xFF_FFFF,
            0x100_0000,
            (1 << 40) - 1,
        ] {
            assert_eq!(lun_from_bytes(lun_to_bytes(n)), n, "lun {n}");
        }
    }

    #[test]
    fn multi_level_lun_is_other_and_round_trips_as_raw() {
        let raw = [0x00, 0x01, 0x00, 0x02, 0, 0, 0, 0]; // two levels
        assert_eq!(LunAddress::decode(raw), LunAddress::Other(raw));
        assert_eq!(lun_to_bytes(lun_from_bytes(raw)), raw);
    }

    #[test]
    fn short_report_luns_header_is_truncated() {
        assert_eq!(ReportLuns::parse(&[0, 0, 0]).unwrap_err().needed(), Some(8));
    }

    #[test]
    fn lun_debug_shows_number_and_form() {
        assert_eq!(format!("{:?}", Lun::from_number(300)), "Lun(300 Flat(300))");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn numbers_below_2_pow_40_round_trip(n in 0u64..(1 << 40)) {
                prop_assert_eq!(lun_from_bytes(lun_to_bytes(n)), n);
            }

            #[test]
            fn other_structures_with_nonzero_top_bytes_round_trip(raw in any::<[u8; 8]>()) {
                if let LunAddress::Other(_) = LunAddress::decode(raw) {
                    if raw[..3] != [0, 0, 0] {
                        prop_assert_eq!(lun_to_bytes(lun_from_bytes(raw)), raw);
                    }
                }
            }
        }
    }
}
