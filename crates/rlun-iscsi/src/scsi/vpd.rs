//! Vital product data pages (SPC-5 7.7, SBC-4 6.6).
//!
//! Every page starts with the same 4-byte header (SPC-5 7.7.1): byte 0
//! qualifier/device type, byte 1 PAGE CODE, bytes 2..4 PAGE LENGTH (bytes
//! that follow). A page whose declared length is longer than the buffer is
//! [`ParseError::Truncated`] with the full length as `needed`, so the
//! caller can re-issue INQUIRY with that allocation length.

use super::{ascii_field, be16_at, be32_at, be64_at, hex_upper, need, slice_at, u8_at, ParseError};

/// VPD page codes.
pub mod page {
    pub const SUPPORTED_PAGES: u8 = 0x00;
    pub const UNIT_SERIAL_NUMBER: u8 = 0x80;
    pub const DEVICE_IDENTIFICATION: u8 = 0x83;
    pub const BLOCK_LIMITS: u8 = 0xB0;
    pub const BLOCK_DEVICE_CHARACTERISTICS: u8 = 0xB1;
    pub const LOGICAL_BLOCK_PROVISIONING: u8 = 0xB2;
}

/// Total length (header + PAGE LENGTH) a VPD page says it has, once the
/// first 4 bytes are in.
pub fn page_length(buf: &[u8]) -> Option<usize> {
    (buf.len() >= 4).then(|| 4 + usize::from(be16_at(buf, 2)))
}

/// Checks the header and returns the page body (bytes after the header).
fn body<'a>(buf: &'a [u8], expected: u8, what: &'static str) -> Result<&'a [u8], ParseError> {
    need(buf, 4, what)?;
    let got = u8_at(buf, 1);
    if got != expected {
        return Err(ParseError::WrongPage {
            what,
            expected,
            got,
        });
    }
    let len = usize::from(be16_at(buf, 2));
    need(buf, 4 + len, what)?;
    Ok(slice_at(buf, 4, len))
}

/// Supported VPD pages (SPC-5 7.7.16): the page codes, one per byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedPages {
    pub pages: Vec<u8>,
}

impl SupportedPages {
    pub fn parse(buf: &[u8]) -> Result<SupportedPages, ParseError> {
        let b = body(
            buf,
            page::SUPPORTED_PAGES,
            "VPD page 0x00 (supported pages)",
        )?;
        Ok(SupportedPages { pages: b.to_vec() })
    }

    pub fn supports(&self, page: u8) -> bool {
        self.pages.contains(&page)
    }
}

/// Unit serial number (SPC-5 7.7.18): ASCII, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSerialNumber {
    pub serial: String,
}

impl UnitSerialNumber {
    pub fn parse(buf: &[u8]) -> Result<UnitSerialNumber, ParseError> {
        let b = body(
            buf,
            page::UNIT_SERIAL_NUMBER,
            "VPD page 0x80 (unit serial number)",
        )?;
        Ok(UnitSerialNumber {
            serial: ascii_field(b),
        })
    }
}

/// CODE SET of a designator (SPC-5 table 500).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodeSet {
    Binary,
    Ascii,
    Utf8,
    Other(u8),
}

/// ASSOCIATION of a designator (SPC-5 table 502): what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Association {
    LogicalUnit,
    TargetPort,
    TargetDevice,
    Reserved,
}

/// DESIGNATOR TYPE (SPC-5 table 503).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DesignatorType {
    VendorSpecific,
    T10VendorId,
    Eui64,
    Naa,
    RelativeTargetPort,
    TargetPortGroup,
    LogicalUnitGroup,
    Md5LogicalUnitId,
    ScsiNameString,
    ProtocolSpecificPortId,
    Uuid,
    Other(u8),
}

impl DesignatorType {
    fn from_bits(v: u8) -> Self {
        match v & 0x0F {
            0x0 => DesignatorType::VendorSpecific,
            0x1 => DesignatorType::T10VendorId,
            0x2 => DesignatorType::Eui64,
            0x3 => DesignatorType::Naa,
            0x4 => DesignatorType::RelativeTargetPort,
            0x5 => DesignatorType::TargetPortGroup,
            0x6 => DesignatorType::LogicalUnitGroup,
            0x7 => DesignatorType::Md5LogicalUnitId,
            0x8 => DesignatorType::ScsiNameString,
            0x9 => DesignatorType::ProtocolSpecificPortId,
            0xA => DesignatorType::Uuid,
            other => DesignatorType::Other(other),
        }
    }
}

/// One designation descriptor of the device identification page
/// (SPC-5 7.7.6.1): byte 0 PROTOCOL IDENTIFIER (7..4) CODE SET (3..0),
/// byte 1 PIV (7) ASSOCIATION (5..4) DESIGNATOR TYPE (3..0), byte 3
/// DESIGNATOR LENGTH, then the designator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Designator {
    /// The protocol (5 = iSCSI), when PIV is set and the designator names a
    /// port or target device.
    pub protocol_id: Option<u8>,
    pub code_set: CodeSet,
    pub association: Association,
    pub designator_type: DesignatorType,
    pub value: Vec<u8>,
}

impl Designator {
    /// The designator as text:
    /// NAA `naa.6001405…` and EUI-64 `eui.…` (uppercase hex), T10 vendor id
    /// `t10.VENDOR specific`, SCSI name string as sent (`iqn.…`), UUID
    /// `uuid.xxxxxxxx-…`, relative port / port group / LU group as
    /// `relative port 1` etc.; other binary designators as `0x` hex, other
    /// text designators as text.
    pub fn to_text(&self) -> String {
        let v = &self.value;
        match self.designator_type {
            DesignatorType::Naa => format!("naa.{}", hex_upper(v)),
            DesignatorType::Eui64 => format!("eui.{}", hex_upper(v)),
            DesignatorType::T10VendorId => {
                let vendor = ascii_field(slice_at(v, 0, 8));
                let rest = ascii_field(slice_at(v, 8, v.len()));
                if rest.is_empty() {
                    format!("t10.{vendor}")
                } else {
                    format!("t10.{vendor} {rest}")
                }
            }
            DesignatorType::ScsiNameString => {
                let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
                String::from_utf8_lossy(slice_at(v, 0, end))
                    .trim()
                    .to_string()
            }
            // SPC-5 7.7.6.10: byte 0 bits 7..4 = 1 for an RFC 4122 UUID in bytes 2..18.
            DesignatorType::Uuid if v.len() >= 18 && v[0] >> 4 == 1 => {
                let h = hex_upper(slice_at(v, 2, 16)).to_lowercase();
                format!(
                    "uuid.{}-{}-{}-{}-{}",
                    &h[0..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..32]
                )
            }
            DesignatorType::RelativeTargetPort if v.len() >= 4 => {
                format!("relative port {}", be16_at(v, 2))
            }
            DesignatorType::TargetPortGroup if v.len() >= 4 => {
                format!("target port group {}", be16_at(v, 2))
            }
            DesignatorType::LogicalUnitGroup if v.len() >= 4 => {
                format!("LU group {}", be16_at(v, 2))
            }
            _ => match self.code_set {
                CodeSet::Ascii | CodeSet::Utf8 => String::from_utf8_lossy(v)
                    .trim_end_matches(['\0', ' '])
                    .to_string(),
                _ => format!("0x{}", hex_upper(v).to_lowercase()),
            },
        }
    }
}

/// Device identification (SPC-5 7.7.6): the list of designators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentification {
    pub designators: Vec<Designator>,
}

impl DeviceIdentification {
    pub fn parse(buf: &[u8]) -> Result<DeviceIdentification, ParseError> {
        const WHAT: &str = "VPD page 0x83 (device identification)";
        let b = body(buf, page::DEVICE_IDENTIFICATION, WHAT)?;
        let mut designators = Vec::new();
        let mut at = 0usize;
        while at < b.len() {
            if at + 4 > b.len() {
                return Err(ParseError::Malformed {
                    what: WHAT,
                    reason: "designation descriptor header runs past the page",
                });
            }
            let (b0, b1) = (u8_at(b, at), u8_at(b, at + 1));
            let len = usize::from(u8_at(b, at + 3));
            if at + 4 + len > b.len() {
                return Err(ParseError::Malformed {
                    what: WHAT,
                    reason: "designator runs past the page",
                });
            }
            let association = match (b1 >> 4) & 0x03 {
                0 => Association::LogicalUnit,
                1 => Association::TargetPort,
                2 => Association::TargetDevice,
                _ => Association::Reserved,
            };
            let piv = b1 & 0x80 != 0;
            designators.push(Designator {
                protocol_id: (piv && association != Association::LogicalUnit).then_some(b0 >> 4),
                code_set: match b0 & 0x0F {
                    1 => CodeSet::Binary,
                    2 => CodeSet::Ascii,
                    3 => CodeSet::Utf8,
                    other => CodeSet::Other(other),
                },
                association,
                designator_type: DesignatorType::from_bits(b1),
                value: slice_at(b, at + 4, len).to_vec(),
            });
            at += 4 + len;
        }
        Ok(DeviceIdentification { designators })
    }

    /// The best name of the logical unit itself: an NAA (longest first),
    /// else EUI-64, UUID, SCSI name string, T10 vendor id.
    pub fn lu_name(&self) -> Option<&Designator> {
        let rank = |t: DesignatorType| match t {
            DesignatorType::Naa => Some(0),
            DesignatorType::Eui64 => Some(1),
            DesignatorType::Uuid => Some(2),
            DesignatorType::ScsiNameString => Some(3),
            DesignatorType::T10VendorId => Some(4),
            _ => None,
        };
        self.designators
            .iter()
            .filter(|d| d.association == Association::LogicalUnit)
            .filter_map(|d| rank(d.designator_type).map(|r| (r, usize::MAX - d.value.len(), d)))
            .min_by_key(|(r, l, _)| (*r, *l))
            .map(|(_, _, d)| d)
    }
}

/// Block limits (SBC-4 6.6.4). A 0 in a length or count field means "not
/// reported" (no limit) unless noted. Devices before SBC-3 return a short
/// page; fields it does not reach read as 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockLimits {
    /// WSNZ: WRITE SAME with NUMBER OF LOGICAL BLOCKS 0 is refused.
    pub wsnz: bool,
    /// MAXIMUM COMPARE AND WRITE LENGTH (blocks).
    pub max_compare_and_write_len: u8,
    /// OPTIMAL TRANSFER LENGTH GRANULARITY (blocks).
    pub optimal_transfer_granularity: u16,
    /// MAXIMUM TRANSFER LENGTH (blocks per READ/WRITE).
    pub max_transfer_len: u32,
    /// OPTIMAL TRANSFER LENGTH (blocks).
    pub optimal_transfer_len: u32,
    /// MAXIMUM PREFETCH LENGTH (blocks).
    pub max_prefetch_len: u32,
    /// MAXIMUM UNMAP LBA COUNT: 0 = UNMAP not supported, 0xFFFFFFFF = no limit.
    pub max_unmap_lba_count: u32,
    /// MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT: 0 = UNMAP not supported,
    /// 0xFFFFFFFF = no limit.
    pub max_unmap_descriptor_count: u32,
    /// OPTIMAL UNMAP GRANULARITY (blocks).
    pub optimal_unmap_granularity: u32,
    /// UNMAP GRANULARITY ALIGNMENT, when UGAVALID is set.
    pub unmap_granularity_alignment: Option<u32>,
    /// MAXIMUM WRITE SAME LENGTH (blocks).
    pub max_write_same_len: u64,
}

impl BlockLimits {
    /// Field offsets from the page start: byte 4 WSNZ (bit 0), 5 MAXIMUM
    /// COMPARE AND WRITE LENGTH, 6..8 OPTIMAL TRANSFER LENGTH GRANULARITY,
    /// 8..12 MAXIMUM TRANSFER LENGTH, 12..16 OPTIMAL TRANSFER LENGTH,
    /// 16..20 MAXIMUM PREFETCH LENGTH, 20..24 MAXIMUM UNMAP LBA COUNT,
    /// 24..28 MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT, 28..32 OPTIMAL UNMAP
    /// GRANULARITY, 32..36 UGAVALID (bit 31) + UNMAP GRANULARITY ALIGNMENT,
    /// 36..44 MAXIMUM WRITE SAME LENGTH.
    pub fn parse(buf: &[u8]) -> Result<BlockLimits, ParseError> {
        let b = body(buf, page::BLOCK_LIMITS, "VPD page 0xB0 (block limits)")?;
        // Offsets below are relative to the body (page offset − 4).
        let uga = be32_at(b, 28);
        Ok(BlockLimits {
            wsnz: u8_at(b, 0) & 0x01 != 0,
            max_compare_and_write_len: u8_at(b, 1),
            optimal_transfer_granularity: be16_at(b, 2),
            max_transfer_len: be32_at(b, 4),
            optimal_transfer_len: be32_at(b, 8),
            max_prefetch_len: be32_at(b, 12),
            max_unmap_lba_count: be32_at(b, 16),
            max_unmap_descriptor_count: be32_at(b, 20),
            optimal_unmap_granularity: be32_at(b, 24),
            unmap_granularity_alignment: (uga & 0x8000_0000 != 0).then_some(uga & 0x7FFF_FFFF),
            max_write_same_len: be64_at(b, 32),
        })
    }

    /// Blocks one READ/WRITE may move, `None` when the device sets no limit.
    pub fn max_transfer_blocks(&self) -> Option<u32> {
        (self.max_transfer_len != 0).then_some(self.max_transfer_len)
    }

    /// Whether the device advertises UNMAP (both UNMAP counts non-zero).
    pub fn supports_unmap(&self) -> bool {
        self.max_unmap_lba_count != 0 && self.max_unmap_descriptor_count != 0
    }
}

/// PROVISIONING TYPE (SBC-4 table 238).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProvisioningType {
    /// 000b: fully provisioned (or not reported).
    Full,
    /// 001b: resource provisioned.
    Resource,
    /// 010b: thin provisioned.
    Thin,
    Reserved(u8),
}

/// Logical block provisioning (SBC-4 6.6.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalBlockProvisioning {
    pub threshold_exponent: u8,
    /// LBPU: UNMAP supported.
    pub lbpu: bool,
    /// LBPWS: WRITE SAME(16) with UNMAP supported.
    pub lbpws: bool,
    /// LBPWS10: WRITE SAME(10) with UNMAP supported.
    pub lbpws10: bool,
    /// LBPRZ (3 bits): xx1b = unmapped blocks read as zeros.
    pub lbprz: u8,
    /// ANC_SUP: anchored LBAs supported.
    pub anc_sup: bool,
    /// DP: a provisioning group descriptor follows.
    pub dp: bool,
    pub provisioning_type: ProvisioningType,
}

impl LogicalBlockProvisioning {
    /// Byte 4 THRESHOLD EXPONENT, byte 5 LBPU (7) LBPWS (6) LBPWS10 (5)
    /// LBPRZ (4..2) ANC_SUP (1) DP (0), byte 6 PROVISIONING TYPE (2..0).
    pub fn parse(buf: &[u8]) -> Result<LogicalBlockProvisioning, ParseError> {
        const WHAT: &str = "VPD page 0xB2 (logical block provisioning)";
        let b = body(buf, page::LOGICAL_BLOCK_PROVISIONING, WHAT)?;
        if b.len() < 3 {
            return Err(ParseError::Malformed {
                what: WHAT,
                reason: "page length below 4",
            });
        }
        let flags = u8_at(b, 1);
        Ok(LogicalBlockProvisioning {
            threshold_exponent: u8_at(b, 0),
            lbpu: flags & 0x80 != 0,
            lbpws: flags & 0x40 != 0,
            lbpws10: flags & 0x20 != 0,
            lbprz: (flags >> 2) & 0x07,
            anc_sup: flags & 0x02 != 0,
            dp: flags & 0x01 != 0,
            provisioning_type: match u8_at(b, 2) & 0x07 {
                0 => ProvisioningType::Full,
                1 => ProvisioningType::Resource,
                2 => ProvisioningType::Thin,
                other => ProvisioningType::Reserved(other),
            },
        })
    }

    /// Unmapped blocks read back as zeros (LBPRZ xx1b).
    pub fn unmapped_reads_zero(&self) -> bool {
        self.lbprz & 0x01 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_pages_lists_codes() {
        #[rustfmt::skip]
        let buf = [
            0x00,       // disk
            0x00,       // page 0x00
            0x00, 0x06, // page length 6
            0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2, // supported pages
        ];
        let p = SupportedPages::parse(&buf).unwrap();
        assert_eq!(p.pages, vec![0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2]);
        assert!(p.supports(page::BLOCK_LIMITS));
        assert!(!p.supports(0x89));
    }

    #[test]
    fn page_longer_than_buffer_asks_for_the_full_length() {
        let buf = [0x00, 0x00, 0x00, 0x10, 0x00, 0x80];
        let err = SupportedPages::parse(&buf).unwrap_err();
        assert_eq!(err.needed(), Some(20));
        assert_eq!(page_length(&buf), Some(20));
        assert_eq!(page_length(&buf[..3]), None);
    }

    #[test]
    fn wrong_page_code_is_reported() {
        let buf = [0x00, 0x83, 0x00, 0x00];
        assert_eq!(
            SupportedPages::parse(&buf),
            Err(ParseError::WrongPage {
                what: "VPD page 0x00 (supported pages)",
                expected: 0x00,
                got: 0x83
            })
        );
    }

    #[test]
    fn unit_serial_number_is_trimmed_ascii() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0x80, 0x00, 0x0A,         // header, page length 10
            b'b', b'e', b'e', b'f', b'0', b'0', b'0', b'1', // serial
            b' ', 0x00,                     // padding
        ];
        assert_eq!(UnitSerialNumber::parse(&buf).unwrap().serial, "beef0001");
    }

    /// Device identification as a LIO-like target sends it.
    #[rustfmt::skip]
    fn lio_device_identification() -> Vec<u8> {
        let name = b"iqn.2026-11.org.example:disk1,t,0x0001\0\0"; // 40 bytes, NUL padded
        let mut body = vec![
            // NAA IEEE registered extended, LU
            0x01,       // protocol 0, code set binary
            0x03,       // PIV 0, association LU, type NAA
            0x00,       // reserved
            0x10,       // length 16
            0x60, 0x01, 0x40, 0x5A, 0xBC, 0xDE, 0xF0, 0x12,
            0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 0x12,
            // T10 vendor id, LU
            0x02,       // code set ASCII
            0x01,       // association LU, type T10 vendor id
            0x00,
            0x10,       // length 16
            b'L', b'I', b'O', b'-', b'O', b'R', b'G', b' ', // vendor
            b'b', b'e', b'e', b'f', b'0', b'0', b'0', b'1', // vendor specific
            // Relative target port, iSCSI
            0x51,       // protocol 5 (iSCSI), binary
            0x94,       // PIV, association target port, type relative port
            0x00,
            0x04,       // length 4
            0x00, 0x00, // obsolete
            0x00, 0x01, // relative target port 1
            // SCSI name string of the target port
            0x53,       // protocol 5, UTF-8
            0x98,       // PIV, association target port, type SCSI name string
            0x00,
            name.len() as u8,
        ];
        body.extend_from_slice(name);
        let mut page = vec![0x00, 0x83];
        page.extend_from_slice(&(body.len() as u16).to_be_bytes());
        page.extend_from_slice(&body);
        page
    }

    #[test]
    fn device_identification_lists_designators_with_text() {
        let id = DeviceIdentification::parse(&lio_device_identification()).unwrap();

        assert_eq!(id.designators.len(), 4);
        let naa = &id.designators[0];
        assert_eq!(naa.designator_type, DesignatorType::Naa);
        assert_eq!(naa.code_set, CodeSet::Binary);
        assert_eq!(naa.association, Association::LogicalUnit);
        assert_eq!(naa.to_text(), "naa.6001405ABCDEF0123456789ABCDEF012");
        assert_eq!(id.designators[1].to_text(), "t10.LIO-ORG beef0001");
        let port = &id.designators[2];
        assert_eq!(port.protocol_id, Some(5));
        assert_eq!(port.association, Association::TargetPort);
        assert_eq!(port.to_text(), "relative port 1");
        assert_eq!(
            id.designators[3].to_text(),
            "iqn.2026-11.org.example:disk1,t,0x0001"
        );
        assert_eq!(id.lu_name(), Some(naa));
    }

    #[test]
    fn eui64_and_uuid_designators_render_as_text() {
        let eui = Designator {
            protocol_id: None,
            code_set: CodeSet::Binary,
            association: Association::LogicalUnit,
            designator_type: DesignatorType::Eui64,
            value: vec![0x00, 0x14, 0x05, 0xAB, 0xCD, 0xEF, 0x01, 0x23],
        };
        assert_eq!(eui.to_text(), "eui.001405ABCDEF0123");
        let mut uuid = vec![0x10, 0x00];
        uuid.extend_from_slice(&[
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ]);
        let uuid = Designator {
            designator_type: DesignatorType::Uuid,
            value: uuid,
            ..eui.clone()
        };
        assert_eq!(uuid.to_text(), "uuid.12345678-9abc-def0-0123-456789abcdef");
    }

    #[test]
    fn designator_running_past_the_page_is_malformed() {
        let buf = [0x00, 0x83, 0x00, 0x06, 0x01, 0x03, 0x00, 0x10, 0x60, 0x01];
        assert!(matches!(
            DeviceIdentification::parse(&buf),
            Err(ParseError::Malformed { .. })
        ));
    }

    #[test]
    fn block_limits_reads_transfer_and_unmap_limits() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0xB0, 0x00, 0x3C,  // header, page length 60
            0x00,                    // WSNZ = 0
            0x01,                    // max COMPARE AND WRITE length 1
            0x00, 0x08,              // optimal transfer length granularity 8
            0x00, 0x00, 0x20, 0x00,  // max transfer length 8192
            0x00, 0x00, 0x02, 0x00,  // optimal transfer length 512
            0x00, 0x00, 0x00, 0x00,  // max prefetch length
            0x00, 0x40, 0x00, 0x00,  // max unmap LBA count 4Mi
            0x00, 0x00, 0x00, 0x01,  // max unmap descriptor count 1
            0x00, 0x00, 0x00, 0x08,  // optimal unmap granularity 8
            0x80, 0x00, 0x00, 0x00,  // UGAVALID, alignment 0
            0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, // max write same 4Mi
            0, 0, 0, 0,              // max atomic transfer length
            0, 0, 0, 0,              // atomic alignment
            0, 0, 0, 0,              // atomic transfer length granularity
            0, 0, 0, 0,              // max atomic transfer length with boundary
            0, 0, 0, 0,              // max atomic boundary size
        ];
        let bl = BlockLimits::parse(&buf).unwrap();
        assert!(!bl.wsnz);
        assert_eq!(bl.max_compare_and_write_len, 1);
        assert_eq!(bl.optimal_transfer_granularity, 8);
        assert_eq!(bl.max_transfer_blocks(), Some(8192));
        assert_eq!(bl.optimal_transfer_len, 512);
        assert_eq!(bl.max_unmap_lba_count, 0x40_0000);
        assert_eq!(bl.max_unmap_descriptor_count, 1);
        assert_eq!(bl.optimal_unmap_granularity, 8);
        assert_eq!(bl.unmap_granularity_alignment, Some(0));
        assert_eq!(bl.max_write_same_len, 0x40_0000);
        assert!(bl.supports_unmap());
    }

    #[test]
    fn short_sbc2_block_limits_page_leaves_later_fields_zero() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0xB0, 0x00, 0x0C,  // page length 12 (SBC-2)
            0x00, 0x00,
            0x00, 0x01,              // granularity 1
            0x00, 0x00, 0x04, 0x00,  // max transfer length 1024
            0x00, 0x00, 0x00, 0x80,  // optimal transfer length 128
        ];
        let bl = BlockLimits::parse(&buf).unwrap();
        assert_eq!(bl.max_transfer_len, 1024);
        assert_eq!(bl.optimal_transfer_len, 128);
        assert_eq!(bl.max_unmap_lba_count, 0);
        assert_eq!(bl.unmap_granularity_alignment, None);
        assert!(!bl.supports_unmap());
    }

    #[test]
    fn thin_provisioning_page_reports_unmap_support_and_zeroing() {
        #[rustfmt::skip]
        let buf = [
            0x00, 0xB2, 0x00, 0x04, // header, page length 4
            0x00,                   // threshold exponent
            0xE4,                   // LBPU, LBPWS, LBPWS10, LBPRZ = 001b
            0x02,                   // provisioning type: thin
            0x00,                   // threshold percentage
        ];
        let lbp = LogicalBlockProvisioning::parse(&buf).unwrap();
        assert!(lbp.lbpu && lbp.lbpws && lbp.lbpws10);
        assert_eq!(lbp.lbprz, 1);
        assert!(lbp.unmapped_reads_zero());
        assert!(!lbp.anc_sup && !lbp.dp);
        assert_eq!(lbp.provisioning_type, ProvisioningType::Thin);
    }

    #[test]
    fn provisioning_page_too_short_is_malformed() {
        let buf = [0x00, 0xB2, 0x00, 0x01, 0x00];
        assert!(matches!(
            LogicalBlockProvisioning::parse(&buf),
            Err(ParseError::Malformed { .. })
        ));
    }
}
