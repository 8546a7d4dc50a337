//! iSCSI header and data digests: CRC32C (RFC 7143 §13.1, RFC 3385).
//!
//! The only digest iSCSI defines besides `None` is CRC32C (Castagnoli
//! polynomial 0x1EDC6F41, reflected, initial value and final XOR 0xFFFFFFFF),
//! computed here by the hardware-accelerated `crc32c` crate.
//!
//! # Where the digest goes and in which byte order
//!
//! - The header digest follows the BHS and any AHS and covers both
//!   (RFC 7143 §11.2.3). Use [`header_digest`].
//! - The data digest follows the data segment *and its padding* and covers
//!   both; padding bytes are zero (RFC 7143 §11.2.4, §13.1). Use
//!   [`data_digest`], which adds the zero padding itself.
//! - On the wire the 32-bit CRC is sent **least significant byte first**
//!   (little-endian), unlike every other iSCSI field. RFC 3720 Appendix B.4
//!   shows it: 32 zero bytes have the CRC value `0x8A9136AA` and the example
//!   lists the digest bytes as `aa 36 91 8a`. [`digest_bytes`] and
//!   [`digest_from_bytes`] do that conversion; the unit tests below check
//!   all five Appendix B.4 vectors byte for byte.

use thiserror::Error;

/// Length in bytes of a CRC32C digest on the wire.
pub const DIGEST_LEN: usize = 4;

/// A digest kind as negotiated with `HeaderDigest` / `DataDigest`
/// (RFC 7143 §13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DigestType {
    /// No digest (the RFC default).
    #[default]
    None,
    /// CRC32C, four bytes on the wire.
    Crc32c,
}

impl DigestType {
    /// The value used for this digest in `HeaderDigest`/`DataDigest` keys.
    pub const fn key_value(self) -> &'static str {
        match self {
            DigestType::None => "None",
            DigestType::Crc32c => "CRC32C",
        }
    }

    /// Parses a key value (`None` or `CRC32C`, case-sensitive as RFC 7143
    /// §6.1 requires). Returns `None` for anything else.
    pub fn from_key_value(value: &str) -> Option<Self> {
        match value {
            "None" => Some(DigestType::None),
            "CRC32C" => Some(DigestType::Crc32c),
            _ => None,
        }
    }

    /// Bytes this digest occupies on the wire: 0 or [`DIGEST_LEN`].
    pub const fn wire_len(self) -> usize {
        match self {
            DigestType::None => 0,
            DigestType::Crc32c => DIGEST_LEN,
        }
    }
}

/// Which digest failed a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestKind {
    Header,
    Data,
}

impl std::fmt::Display for DigestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DigestKind::Header => "header",
            DigestKind::Data => "data",
        })
    }
}

/// Errors from checking a received digest.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DigestError {
    /// The CRC32C we computed differs from the one the peer sent.
    /// RFC 7143 §7.8: after a header digest error the PDU length cannot be
    /// trusted, so the connection is closed; a data digest error discards
    /// the PDU (and, at ErrorRecoveryLevel 0, ends the task or session).
    #[error("{kind} digest mismatch: received {received:#010x}, computed {computed:#010x}")]
    Mismatch {
        kind: DigestKind,
        received: u32,
        computed: u32,
    },
}

/// CRC32C of `data` (RFC 3385 / RFC 7143 §13.1).
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32C over more bytes: `crc32c_append(crc32c(a), b)` equals
/// `crc32c(a ++ b)`, so scattered buffers need no copy.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The four wire bytes of a digest value: least significant byte first
/// (RFC 3720 Appendix B.4).
pub const fn digest_bytes(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The digest value from its four wire bytes (inverse of [`digest_bytes`]).
pub const fn digest_from_bytes(bytes: [u8; 4]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// Header digest over the BHS followed by any AHS (RFC 7143 §11.2.3).
/// Pass the header bytes exactly as sent (48 bytes plus `4 * TotalAHSLength`).
pub fn header_digest(bhs_and_ahs: &[u8]) -> u32 {
    crc32c(bhs_and_ahs)
}

/// Number of zero bytes that pad a data segment of `len` bytes to a
/// four-byte boundary (RFC 7143 §11.2.4).
pub const fn padding_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// Data digest over `data` plus its zero padding to a multiple of four
/// bytes (RFC 7143 §11.2.4, §13.1). `data` is the data segment without
/// padding, i.e. `DataSegmentLength` bytes.
pub fn data_digest(data: &[u8]) -> u32 {
    const ZEROS: [u8; 3] = [0; 3];
    crc32c_append(crc32c(data), &ZEROS[..padding_len(data.len())])
}

/// Checks a received header digest (wire bytes) against the header bytes.
pub fn check_header_digest(bhs_and_ahs: &[u8], received: [u8; 4]) -> Result<(), DigestError> {
    check(DigestKind::Header, header_digest(bhs_and_ahs), received)
}

/// Checks a received data digest (wire bytes) against the unpadded data
/// segment (padding is assumed zero, as RFC 7143 §13.1 asks of senders).
///
/// A peer that sends non-zero padding bytes would fail this check; use
/// [`crc32c()`] over the segment including its received padding if that has
/// to be tolerated.
pub fn check_data_digest(data: &[u8], received: [u8; 4]) -> Result<(), DigestError> {
    check(DigestKind::Data, data_digest(data), received)
}

fn check(kind: DigestKind, computed: u32, received: [u8; 4]) -> Result<(), DigestError> {
    let received = digest_from_bytes(received);
    if computed == received {
        Ok(())
    } else {
        Err(DigestError::Mismatch {
            kind,
            received,
            computed,
        })
    }
}

/// What to offer for `HeaderDigest`/`DataDigest` (RFC 7143 §13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum DigestPref {
    /// Offer `None` only.
    #[default]
    None,
    /// Offer `CRC32C` only: the login fails if the target will not.
    Crc32c,
    /// Offer `CRC32C,None`: CRC32C when the target agrees. Spelled
    /// `prefer-crc32c` (canonical) or `prefer`, as on the command line.
    #[cfg_attr(feature = "serde", serde(alias = "prefer"))]
    PreferCrc32c,
}

impl DigestPref {
    /// The value to send in the login key (RFC 7143 §13.1).
    pub fn offer(self) -> &'static str {
        match self {
            DigestPref::None => "None",
            DigestPref::Crc32c => "CRC32C",
            DigestPref::PreferCrc32c => "CRC32C,None",
        }
    }
}

impl std::fmt::Display for DigestPref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DigestPref::None => "none",
            DigestPref::Crc32c => "crc32c",
            DigestPref::PreferCrc32c => "prefer-crc32c",
        })
    }
}

/// Error for a digest name that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown digest '{0}'; expected none, crc32c or prefer-crc32c (or prefer)")]
pub struct BadDigest(pub String);

impl std::str::FromStr for DigestPref {
    type Err = BadDigest;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(DigestPref::None),
            "crc32c" => Ok(DigestPref::Crc32c),
            "prefer-crc32c" | "prefer" => Ok(DigestPref::PreferCrc32c),
            _ => Err(BadDigest(s.chars().take(64).collect())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 3720 Appendix B.4 "CRC Examples". Each `CRC:` line there lists the
    // digest bytes in wire order.

    #[test]
    fn thirty_two_zero_bytes_match_rfc3720_b4() {
        // Arrange
        let data = [0u8; 32];
        // Act
        let crc = crc32c(&data);
        // Assert
        assert_eq!(crc, 0x8A91_36AA);
        assert_eq!(digest_bytes(crc), [0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn thirty_two_ff_bytes_match_rfc3720_b4() {
        let data = [0xffu8; 32];
        let crc = crc32c(&data);
        assert_eq!(crc, 0x62A8_AB43);
        assert_eq!(digest_bytes(crc), [0x43, 0xab, 0xa8, 0x62]);
    }

    #[test]
    fn thirty_two_incrementing_bytes_match_rfc3720_b4() {
        let data: Vec<u8> = (0u8..32).collect();
        let crc = crc32c(&data);
        assert_eq!(crc, 0x46DD_794E);
        assert_eq!(digest_bytes(crc), [0x4e, 0x79, 0xdd, 0x46]);
    }

    #[test]
    fn thirty_two_decrementing_bytes_match_rfc3720_b4() {
        let data: Vec<u8> = (0u8..32).rev().collect();
        let crc = crc32c(&data);
        assert_eq!(crc, 0x113F_DB5C);
        assert_eq!(digest_bytes(crc), [0x5c, 0xdb, 0x3f, 0x11]);
    }

    /// RFC 3720 Appendix B.4: "An iSCSI - SCSI Read (10) Command PDU".
    const READ10_PDU: [u8; 48] = [
        0x01, 0xc0, 0x00, 0x00, // opcode 0x01 SCSI Command, F+R flags, reserved
        0x00, 0x00, 0x00, 0x00, // TotalAHSLength 0, DataSegmentLength 0
        0x00, 0x00, 0x00, 0x00, // LUN (bytes 8..12)
        0x00, 0x00, 0x00, 0x00, // LUN (bytes 12..16)
        0x14, 0x00, 0x00, 0x00, // Initiator Task Tag
        0x00, 0x00, 0x04, 0x00, // Expected Data Transfer Length = 1024
        0x00, 0x00, 0x00, 0x14, // CmdSN = 20
        0x00, 0x00, 0x00, 0x18, // ExpStatSN = 24
        0x28, 0x00, 0x00, 0x00, // CDB: READ(10) opcode 0x28, flags, LBA 0..
        0x00, 0x00, 0x00, 0x00, // CDB: ..LBA, group
        0x02, 0x00, 0x00, 0x00, // CDB: transfer length 2 blocks, control
        0x00, 0x00, 0x00, 0x00, // CDB: unused bytes
    ];

    #[test]
    fn scsi_read10_command_pdu_header_digest_matches_rfc3720_b4() {
        let crc = header_digest(&READ10_PDU);
        assert_eq!(crc, 0xD996_3A56);
        assert_eq!(digest_bytes(crc), [0x56, 0x3a, 0x96, 0xd9]);
        assert_eq!(
            check_header_digest(&READ10_PDU, [0x56, 0x3a, 0x96, 0xd9]),
            Ok(())
        );
    }

    #[test]
    fn append_over_split_buffers_equals_one_pass() {
        for split in 0..=READ10_PDU.len() {
            let (a, b) = READ10_PDU.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), 0xD996_3A56, "split at {split}");
        }
    }

    #[test]
    fn digest_bytes_round_trip() {
        let crc = 0x0102_0304;
        assert_eq!(digest_bytes(crc), [0x04, 0x03, 0x02, 0x01]);
        assert_eq!(digest_from_bytes(digest_bytes(crc)), crc);
    }

    #[test]
    fn data_digest_covers_zero_padding() {
        // Arrange: 5 data bytes are padded with 3 zero bytes on the wire.
        let data = [1u8, 2, 3, 4, 5];
        let padded = [1u8, 2, 3, 4, 5, 0, 0, 0];
        // Act / Assert
        assert_eq!(data_digest(&data), crc32c(&padded));
        assert_eq!(data_digest(&padded), crc32c(&padded));
        assert_eq!(data_digest(&[]), 0);
        assert_eq!(padding_len(0), 0);
        assert_eq!(padding_len(1), 3);
        assert_eq!(padding_len(4), 0);
        assert_eq!(padding_len(7), 1);
    }

    #[test]
    fn corrupted_data_fails_data_digest_check() {
        let data = [0u8; 32];
        let good = digest_bytes(data_digest(&data));
        let mut bad_data = data;
        bad_data[7] ^= 0x10;

        let err = check_data_digest(&bad_data, good).unwrap_err();

        assert_eq!(
            err,
            DigestError::Mismatch {
                kind: DigestKind::Data,
                received: 0x8A91_36AA,
                computed: crc32c(&bad_data),
            }
        );
        assert!(err.to_string().starts_with("data digest mismatch"));
    }

    #[test]
    fn digest_type_key_values_round_trip() {
        for d in [DigestType::None, DigestType::Crc32c] {
            assert_eq!(DigestType::from_key_value(d.key_value()), Some(d));
        }
        assert_eq!(DigestType::from_key_value("crc32c"), None);
        assert_eq!(DigestType::Crc32c.wire_len(), 4);
        assert_eq!(DigestType::None.wire_len(), 0);
        assert_eq!(DigestType::default(), DigestType::None);
    }
}
