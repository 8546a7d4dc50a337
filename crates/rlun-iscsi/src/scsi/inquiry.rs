//! Standard INQUIRY data (SPC-5 6.7.2).

use super::{ascii_field, be16_at, need, slice_at, u8_at, ParseError};

/// PERIPHERAL QUALIFIER (SPC-5 6.7.2, table 147): byte 0 bits 7..5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeripheralQualifier {
    /// 000b: a device of the given type is connected to this LUN.
    Connected,
    /// 001b: the LUN could hold such a device but none is connected now.
    NotConnected,
    /// 011b: the target cannot have a device at this LUN.
    NotSupported,
    /// 010b (reserved) or 1xxb (vendor specific).
    Other(u8),
}

impl PeripheralQualifier {
    fn from_bits(v: u8) -> Self {
        match v & 0x07 {
            0 => PeripheralQualifier::Connected,
            1 => PeripheralQualifier::NotConnected,
            3 => PeripheralQualifier::NotSupported,
            other => PeripheralQualifier::Other(other),
        }
    }
}

/// PERIPHERAL DEVICE TYPE (SPC-5 table 148): byte 0 bits 4..0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// 0x00: direct access block device (SBC): disks, what rlun serves.
    DirectAccess,
    SequentialAccess,
    Printer,
    Processor,
    WriteOnce,
    CdDvd,
    OpticalMemory,
    MediumChanger,
    StorageArrayController,
    EnclosureServices,
    SimplifiedDirectAccess,
    OpticalCardReader,
    ObjectStorage,
    AutomationDriveInterface,
    HostManagedZoned,
    WellKnownLu,
    /// 0x1F: unknown or no device type.
    Unknown,
    Other(u8),
}

impl DeviceType {
    pub fn from_bits(v: u8) -> Self {
        match v & 0x1F {
            0x00 => DeviceType::DirectAccess,
            0x01 => DeviceType::SequentialAccess,
            0x02 => DeviceType::Printer,
            0x03 => DeviceType::Processor,
            0x04 => DeviceType::WriteOnce,
            0x05 => DeviceType::CdDvd,
            0x07 => DeviceType::OpticalMemory,
            0x08 => DeviceType::MediumChanger,
            0x0C => DeviceType::StorageArrayController,
            0x0D => DeviceType::EnclosureServices,
            0x0E => DeviceType::SimplifiedDirectAccess,
            0x0F => DeviceType::OpticalCardReader,
            0x11 => DeviceType::ObjectStorage,
            0x12 => DeviceType::AutomationDriveInterface,
            0x14 => DeviceType::HostManagedZoned,
            0x1E => DeviceType::WellKnownLu,
            0x1F => DeviceType::Unknown,
            other => DeviceType::Other(other),
        }
    }

    /// A short human name ("disk", "cd/dvd").
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::DirectAccess => "disk",
            DeviceType::SequentialAccess => "tape",
            DeviceType::Printer => "printer",
            DeviceType::Processor => "processor",
            DeviceType::WriteOnce => "write-once",
            DeviceType::CdDvd => "cd/dvd",
            DeviceType::OpticalMemory => "optical memory",
            DeviceType::MediumChanger => "medium changer",
            DeviceType::StorageArrayController => "storage array controller",
            DeviceType::EnclosureServices => "enclosure services",
            DeviceType::SimplifiedDirectAccess => "simplified disk",
            DeviceType::OpticalCardReader => "optical card reader",
            DeviceType::ObjectStorage => "object storage",
            DeviceType::AutomationDriveInterface => "automation/drive interface",
            DeviceType::HostManagedZoned => "host managed zoned disk",
            DeviceType::WellKnownLu => "well known LU",
            DeviceType::Unknown => "unknown",
            DeviceType::Other(_) => "reserved type",
        }
    }
}

/// TPGS (SPC-5 6.7.2, table 150): byte 5 bits 5..4, ALUA support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tpgs {
    NotSupported,
    Implicit,
    Explicit,
    Both,
}

/// Standard INQUIRY data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandardInquiry {
    pub qualifier: PeripheralQualifier,
    pub device_type: DeviceType,
    /// RMB: removable medium.
    pub removable: bool,
    /// VERSION: 0x05 SPC-3, 0x06 SPC-4, 0x07 SPC-5 (see [`Self::version_name`]).
    pub version: u8,
    /// NORMACA.
    pub norm_aca: bool,
    /// HISUP: hierarchical LUN addressing.
    pub hisup: bool,
    pub response_data_format: u8,
    /// ADDITIONAL LENGTH + 5: how long the full data is.
    pub full_length: usize,
    /// SCCS: embedded storage array controller.
    pub sccs: bool,
    /// ACC: access controls coordinator.
    pub acc: bool,
    pub tpgs: Tpgs,
    /// 3PC: third-party copy (EXTENDED COPY).
    pub third_party_copy: bool,
    /// PROTECT: protection information supported.
    pub protect: bool,
    /// ENCSERV: enclosure services.
    pub enc_serv: bool,
    /// MULTIP: multiple SCSI ports.
    pub multi_port: bool,
    /// CMDQUE: full task management (command queuing).
    pub cmd_que: bool,
    /// T10 VENDOR IDENTIFICATION, trimmed.
    pub vendor: String,
    /// PRODUCT IDENTIFICATION, trimmed.
    pub product: String,
    /// PRODUCT REVISION LEVEL, trimmed.
    pub revision: String,
    /// VERSION DESCRIPTORs (bytes 58..74), non-zero ones, when present.
    pub version_descriptors: Vec<u16>,
}

impl StandardInquiry {
    /// Parses standard INQUIRY data. SPC requires at least 36 bytes (up to
    /// the product revision); fewer is [`ParseError::Truncated`].
    ///
    /// Layout: byte 0 qualifier/type, 1 RMB (bit 7), 2 VERSION, 3 NORMACA
    /// (bit 5) HISUP (bit 4) format (3..0), 4 ADDITIONAL LENGTH, 5 SCCS ACC
    /// TPGS 3PC PROTECT, 6 ENCSERV (bit 6) MULTIP (bit 4), 7 CMDQUE (bit 1),
    /// 8..16 vendor, 16..32 product, 32..36 revision, 58..74 version
    /// descriptors.
    pub fn parse(buf: &[u8]) -> Result<StandardInquiry, ParseError> {
        need(buf, 36, "standard INQUIRY data")?;
        let b0 = u8_at(buf, 0);
        let b3 = u8_at(buf, 3);
        let b5 = u8_at(buf, 5);
        let b6 = u8_at(buf, 6);
        let full_length = usize::from(u8_at(buf, 4)) + 5;
        let avail = full_length.min(buf.len());
        let version_descriptors = (58..74)
            .step_by(2)
            .filter(|&at| at + 2 <= avail)
            .map(|at| be16_at(buf, at))
            .filter(|&v| v != 0)
            .collect();
        Ok(StandardInquiry {
            qualifier: PeripheralQualifier::from_bits(b0 >> 5),
            device_type: DeviceType::from_bits(b0),
            removable: u8_at(buf, 1) & 0x80 != 0,
            version: u8_at(buf, 2),
            norm_aca: b3 & 0x20 != 0,
            hisup: b3 & 0x10 != 0,
            response_data_format: b3 & 0x0F,
            full_length,
            sccs: b5 & 0x80 != 0,
            acc: b5 & 0x40 != 0,
            tpgs: match (b5 >> 4) & 0x03 {
                0 => Tpgs::NotSupported,
                1 => Tpgs::Implicit,
                2 => Tpgs::Explicit,
                _ => Tpgs::Both,
            },
            third_party_copy: b5 & 0x08 != 0,
            protect: b5 & 0x01 != 0,
            enc_serv: b6 & 0x40 != 0,
            multi_port: b6 & 0x10 != 0,
            cmd_que: u8_at(buf, 7) & 0x02 != 0,
            vendor: ascii_field(slice_at(buf, 8, 8)),
            product: ascii_field(slice_at(buf, 16, 16)),
            revision: ascii_field(slice_at(buf, 32, 4)),
            version_descriptors,
        })
    }

    /// The standard named by VERSION ("SPC-4"), or "no standard claimed".
    pub fn version_name(&self) -> &'static str {
        match self.version {
            0x00 => "no standard claimed",
            0x03 => "SPC",
            0x04 => "SPC-2",
            0x05 => "SPC-3",
            0x06 => "SPC-4",
            0x07 => "SPC-5",
            _ => "unknown version",
        }
    }

    /// A LUN that is there and is a disk: what rlun can serve.
    pub fn is_connected_disk(&self) -> bool {
        self.qualifier == PeripheralQualifier::Connected
            && self.device_type == DeviceType::DirectAccess
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard INQUIRY as tgtd answers for a disk LUN (74 bytes, SPC-3).
    #[rustfmt::skip]
    const TGTD_DISK: [u8; 74] = [
        0x00,                   // qualifier 000b, type 0x00 (disk)
        0x00,                   // RMB = 0
        0x05,                   // VERSION: SPC-3
        0x12,                   // HISUP, response data format 2
        0x45,                   // additional length (74 - 5)
        0x00,                   // no SCCS/ACC/TPGS/3PC/PROTECT
        0x00,                   // no ENCSERV/MULTIP
        0x02,                   // CMDQUE
        b'I', b'E', b'T', b' ', b' ', b' ', b' ', b' ',  // vendor "IET"
        b'V', b'I', b'R', b'T', b'U', b'A', b'L', b'-',
        b'D', b'I', b'S', b'K', b' ', b' ', b' ', b' ',  // product "VIRTUAL-DISK"
        b'0', b'0', b'0', b'1', // revision "0001"
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // vendor specific 36..56
        0x00, 0x00,             // reserved 56..58
        0x00, 0x80,             // version descriptor: SAM-3
        0x09, 0x60,             // iSCSI
        0x03, 0x00,             // SPC-3
        0x03, 0x20,             // SBC-2
        0, 0, 0, 0, 0, 0, 0, 0, // unused descriptors
    ];

    #[test]
    fn tgtd_disk_inquiry_parses_identity_and_flags() {
        let inq = StandardInquiry::parse(&TGTD_DISK).unwrap();

        assert_eq!(inq.qualifier, PeripheralQualifier::Connected);
        assert_eq!(inq.device_type, DeviceType::DirectAccess);
        assert!(inq.is_connected_disk());
        assert!(!inq.removable);
        assert_eq!(inq.version_name(), "SPC-3");
        assert!(inq.hisup);
        assert_eq!(inq.response_data_format, 2);
        assert_eq!(inq.full_length, 74);
        assert!(inq.cmd_que);
        assert_eq!(inq.tpgs, Tpgs::NotSupported);
        assert_eq!(inq.vendor, "IET");
        assert_eq!(inq.product, "VIRTUAL-DISK");
        assert_eq!(inq.revision, "0001");
        assert_eq!(
            inq.version_descriptors,
            vec![0x0080, 0x0960, 0x0300, 0x0320]
        );
    }

    #[test]
    fn lio_style_inquiry_reports_alua_and_36_byte_form() {
        #[rustfmt::skip]
        let buf: [u8; 36] = [
            0x00,                   // disk, connected
            0x00,                   // not removable
            0x06,                   // SPC-4
            0x12,                   // HISUP, format 2
            0x1F,                   // additional length 31 -> 36 bytes
            0xB9,                   // SCCS, TPGS = 11b (both), 3PC, PROTECT
            0x10,                   // MULTIP
            0x02,                   // CMDQUE
            b'L', b'I', b'O', b'-', b'O', b'R', b'G', b' ',
            b'F', b'I', b'L', b'E', b'I', b'O', b' ', b' ',
            b' ', b' ', b' ', b' ', b' ', b' ', b' ', b' ',
            b'4', b'.', b'0', b' ',
        ];
        let inq = StandardInquiry::parse(&buf).unwrap();
        assert_eq!(inq.vendor, "LIO-ORG");
        assert_eq!(inq.product, "FILEIO");
        assert_eq!(inq.revision, "4.0");
        assert_eq!(inq.tpgs, Tpgs::Both);
        assert!(inq.sccs && inq.third_party_copy && inq.protect && inq.multi_port);
        assert!(!inq.acc && !inq.enc_serv);
        assert!(inq.version_descriptors.is_empty());
    }

    #[test]
    fn no_lun_here_is_qualifier_011_type_1f() {
        let mut buf = TGTD_DISK;
        buf[0] = 0x7F;
        let inq = StandardInquiry::parse(&buf).unwrap();
        assert_eq!(inq.qualifier, PeripheralQualifier::NotSupported);
        assert_eq!(inq.device_type, DeviceType::Unknown);
        assert!(!inq.is_connected_disk());
    }

    #[test]
    fn short_inquiry_is_truncated_error() {
        let err = StandardInquiry::parse(&TGTD_DISK[..20]).unwrap_err();
        assert_eq!(
            err,
            ParseError::Truncated {
                what: "standard INQUIRY data",
                needed: 36,
                got: 20
            }
        );
    }

    #[test]
    fn version_descriptors_beyond_additional_length_are_ignored() {
        let mut buf = TGTD_DISK;
        buf[4] = 31; // says 36 bytes although 74 were sent
        let inq = StandardInquiry::parse(&buf).unwrap();
        assert!(inq.version_descriptors.is_empty());
    }
}
