//! The SCSI layer: CDB builders and response/sense parsers (SPC-5, SBC-4).
//!
//! Everything here is a pure function over bytes: no I/O, no dependency on the
//! iSCSI layer. The layers above build a [`cdb::Cdb`] (which also carries the
//! data direction and expected transfer length the iSCSI SCSI Command PDU
//! needs), hand it to the connection core in a `CommandRequest`, and parse
//! what comes back with the typed parsers below. A failed command becomes a
//! [`sense::ScsiError`], which knows how to describe itself and which errno
//! the FUSE/NBD front ends should return.
//!
//! | module | what |
//! | --- | --- |
//! | [`cdb`] | INQUIRY, READ CAPACITY, REPORT LUNS, READ/WRITE(10/16), SYNCHRONIZE CACHE, UNMAP, WRITE SAME(16), MODE SENSE |
//! | [`inquiry`] | standard INQUIRY data |
//! | [`vpd`] | VPD pages 0x00, 0x80, 0x83, 0xB0, 0xB2 |
//! | [`capacity`] | READ CAPACITY(10)/(16) data |
//! | [`luns`] | REPORT LUNS data and the 8-byte LUN structure |
//! | [`mode`] | MODE SENSE(6)/(10) header, block descriptor, caching page |
//! | [`sense`] | status codes, sense data, [`sense::ScsiError`], errno mapping |
//!
//! Parsers never index out of bounds: a buffer too short for what the format
//! requires gives [`ParseError::Truncated`], whose [`ParseError::needed`] tells
//! the caller how large an allocation length to retry with.

pub mod alua;
pub mod capacity;
pub mod cdb;
pub mod inquiry;
pub mod lba_status;
pub mod luns;
pub mod mode;
pub mod sense;
pub mod vpd;

pub use capacity::{ReadCapacity10, ReadCapacity16};
pub use cdb::{Cdb, CdbError, DataDirection};
pub use inquiry::StandardInquiry;
pub use luns::{lun_from_bytes, lun_to_bytes, ReportLuns};
pub use sense::{ScsiError, Sense, SenseKey, Status, TargetChange};

/// Why a SCSI response (parameter data or sense data) could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The buffer ends before the format says it should. `needed` is the
    /// total length the response requires (retry with that allocation length).
    #[error("{what}: response too short: need {needed} bytes, got {got}")]
    Truncated {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    /// A VPD page came back with another page code than the one asked for.
    #[error("{what}: expected VPD page {expected:#04x}, got page {got:#04x}")]
    WrongPage {
        what: &'static str,
        expected: u8,
        got: u8,
    },
    /// A field holds a value the format does not allow.
    #[error("{what}: invalid {field} {value:#x}")]
    BadField {
        what: &'static str,
        field: &'static str,
        value: u64,
    },
    /// The data is internally inconsistent (e.g. a descriptor runs past the
    /// length its page declared).
    #[error("{what}: malformed: {reason}")]
    Malformed {
        what: &'static str,
        reason: &'static str,
    },
}

impl ParseError {
    /// For [`ParseError::Truncated`], the total length the response needs.
    pub fn needed(&self) -> Option<usize> {
        match self {
            ParseError::Truncated { needed, .. } => Some(*needed),
            _ => None,
        }
    }
}

/// Fails with [`ParseError::Truncated`] unless `buf` holds at least `needed` bytes.
pub(crate) fn need(buf: &[u8], needed: usize, what: &'static str) -> Result<(), ParseError> {
    if buf.len() < needed {
        Err(ParseError::Truncated {
            what,
            needed,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Byte `at`, or 0 when the buffer is shorter (absent optional fields read as 0,
/// which SPC/SBC use for "not reported").
pub(crate) fn u8_at(buf: &[u8], at: usize) -> u8 {
    buf.get(at).copied().unwrap_or(0)
}

/// Reads `N` bytes at `at`, zero when any of them is missing.
fn array_at<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(end) = at.checked_add(N) {
        if let Some(src) = buf.get(at..end) {
            out.copy_from_slice(src);
        }
    }
    out
}

/// Big-endian u16 at `at` (0 when missing).
pub(crate) fn be16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array_at(buf, at))
}

/// Big-endian u32 at `at` (0 when missing).
pub(crate) fn be32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array_at(buf, at))
}

/// Big-endian u64 at `at` (0 when missing).
pub(crate) fn be64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array_at(buf, at))
}

/// The bytes `at..at+len` clipped to the buffer (empty when out of range).
pub(crate) fn slice_at(buf: &[u8], at: usize, len: usize) -> &[u8] {
    let start = at.min(buf.len());
    let end = at.saturating_add(len).min(buf.len());
    &buf[start..end]
}

/// An ASCII text field (SPC-5 4.3.1): printable ASCII kept, other bytes shown
/// as `.`, leading/trailing spaces and trailing NULs removed.
pub(crate) fn ascii_field(bytes: &[u8]) -> String {
    let end = bytes
        .iter()
        .rposition(|&b| b != 0 && b != b' ')
        .map_or(0, |p| p + 1);
    let start = bytes[..end].iter().position(|&b| b != b' ').unwrap_or(end);
    bytes[start..end]
        .iter()
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                char::from(b)
            } else {
                '.'
            }
        })
        .collect()
}

/// Uppercase hex without separators.
pub(crate) fn hex_upper(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02X}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_field_trims_spaces_and_nuls_and_masks_control_bytes() {
        assert_eq!(ascii_field(b"  LIO-ORG \0\0"), "LIO-ORG");
        assert_eq!(ascii_field(b"A\x01B   "), "A.B");
        assert_eq!(ascii_field(b"    "), "");
        assert_eq!(ascii_field(b""), "");
    }

    #[test]
    fn byte_readers_return_zero_past_the_end_instead_of_panicking() {
        let buf = [0x12, 0x34, 0x56];
        assert_eq!(be16_at(&buf, 1), 0x3456);
        assert_eq!(be16_at(&buf, 2), 0);
        assert_eq!(be32_at(&buf, 0), 0);
        assert_eq!(be64_at(&buf, usize::MAX), 0);
        assert_eq!(u8_at(&buf, 3), 0);
        assert_eq!(slice_at(&buf, 2, 10), &[0x56]);
        assert_eq!(slice_at(&buf, usize::MAX, 10), &[] as &[u8]);
    }

    #[test]
    fn truncated_error_reports_the_length_to_retry_with() {
        let err = need(&[0u8; 4], 36, "standard INQUIRY").unwrap_err();
        assert_eq!(err.needed(), Some(36));
        assert_eq!(
            err.to_string(),
            "standard INQUIRY: response too short: need 36 bytes, got 4"
        );
    }
}

/// Every parser is fed random bytes and must return (Ok or Err), never panic.
#[cfg(test)]
mod never_panic {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic_any_parser(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = inquiry::StandardInquiry::parse(&buf);
            let _ = vpd::SupportedPages::parse(&buf);
            let _ = vpd::UnitSerialNumber::parse(&buf);
            if let Ok(id) = vpd::DeviceIdentification::parse(&buf) {
                for d in &id.designators {
                    let _ = d.to_text();
                }
                let _ = id.lu_name();
            }
            let _ = vpd::BlockLimits::parse(&buf);
            let _ = vpd::LogicalBlockProvisioning::parse(&buf);
            let _ = vpd::page_length(&buf);
            if let Ok(c) = capacity::ReadCapacity10::parse(&buf) {
                let _ = c.capacity_bytes();
            }
            if let Ok(c) = capacity::ReadCapacity16::parse(&buf) {
                let _ = c.capacity_bytes();
                let _ = c.physical_block_length();
            }
            let _ = luns::ReportLuns::parse(&buf);
            let _ = alua::TargetPortGroups::parse(&buf);
            let _ = mode::ModeSense::parse6(&buf).map(|m| m.caching());
            let _ = mode::ModeSense::parse10(&buf).map(|m| m.caching());
            if let Ok(s) = sense::Sense::parse(&buf) {
                let _ = s.to_string();
                let _ = s.field_pointer();
                let _ = s.progress();
            }
            let _ = sense::Sense::from_iscsi_data_segment(&buf);
            for status in [0x00u8, 0x02, 0x08, 0x18, 0x28, 0x77] {
                let e = sense::ScsiError::from_status_and_sense_bytes(sense::Status::from(status), &buf);
                let _ = e.to_string();
                let _ = e.to_errno();
                let _ = e.is_retryable();
            }
        }

        /// Random bodies behind valid-looking headers, so the parsers get past
        /// their first checks and walk descriptors, pages and LUN lists.
        #[test]
        fn shaped_bytes_never_panic_any_parser(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            slack in 0usize..16,
            code in 0x70u8..=0x73,
        ) {
            let declared = body.len().saturating_sub(slack);
            for page in [0x00u8, 0x80, 0x83, 0xB0, 0xB2] {
                let mut buf = vec![0x00, page];
                buf.extend_from_slice(&(declared as u16).to_be_bytes());
                buf.extend_from_slice(&body);
                let _ = vpd::SupportedPages::parse(&buf);
                let _ = vpd::UnitSerialNumber::parse(&buf);
                if let Ok(id) = vpd::DeviceIdentification::parse(&buf) {
                    for d in &id.designators {
                        let _ = d.to_text();
                    }
                }
                let _ = vpd::BlockLimits::parse(&buf);
                let _ = vpd::LogicalBlockProvisioning::parse(&buf);
            }

            let mut sense_buf = body.clone();
            if let Some(b) = sense_buf.first_mut() {
                *b = code;
            }
            if let Ok(s) = sense::Sense::parse(&sense_buf) {
                let _ = s.to_string();
            }

            let mut luns_buf = (declared as u32).to_be_bytes().to_vec();
            luns_buf.extend_from_slice(&[0; 4]);
            luns_buf.extend_from_slice(&body);
            if let Ok(r) = luns::ReportLuns::parse(&luns_buf) {
                let _ = r.numbers();
            }

            let mut m6 = vec![declared.min(255) as u8, 0, 0, (slack * 4) as u8];
            m6.extend_from_slice(&body);
            let _ = mode::ModeSense::parse6(&m6).map(|m| m.caching());
            let mut m10 = (declared as u16).to_be_bytes().to_vec();
            m10.extend_from_slice(&[0, 0, (slack & 1) as u8, 0, 0, (slack * 4) as u8]);
            m10.extend_from_slice(&body);
            let _ = mode::ModeSense::parse10(&m10).map(|m| m.caching());
        }

        #[test]
        fn random_lun_bytes_decode_without_panic(raw in any::<[u8; 8]>()) {
            let _ = luns::lun_from_bytes(raw);
            let _ = luns::LunAddress::decode(raw);
        }
    }
}
