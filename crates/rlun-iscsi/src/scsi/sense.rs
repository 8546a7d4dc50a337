//! SCSI status, sense data and the typed command error.
//!
//! - [`Status`]: the status byte (SAM-5 5.3).
//! - [`Sense`]: fixed (0x70/0x71) and descriptor (0x72/0x73) format sense
//!   data (SPC-5 4.4).
//! - [`ScsiError`]: a command that ended in anything but GOOD, with a human
//!   message, predicates for the layers above and the one mapping to a Linux
//!   errno ([`ScsiError::to_errno`]) that the FUSE and NBD front ends use.

use std::fmt;

use super::{be16_at, be32_at, be64_at, need, slice_at, u8_at, ParseError};

/// Linux errno values (asm-generic/errno-base.h, errno.h), kept local so the
/// crate needs no libc.
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const EBADE: i32 = 52;
    pub const EILSEQ: i32 = 84;
}

/// The SCSI status byte (SAM-5 5.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Good,
    CheckCondition,
    ConditionMet,
    Busy,
    ReservationConflict,
    TaskSetFull,
    AcaActive,
    TaskAborted,
    Unknown(u8),
}

impl Status {
    pub fn as_u8(self) -> u8 {
        match self {
            Status::Good => 0x00,
            Status::CheckCondition => 0x02,
            Status::ConditionMet => 0x04,
            Status::Busy => 0x08,
            Status::ReservationConflict => 0x18,
            Status::TaskSetFull => 0x28,
            Status::AcaActive => 0x30,
            Status::TaskAborted => 0x40,
            Status::Unknown(v) => v,
        }
    }

    /// GOOD and CONDITION MET complete the command successfully.
    pub fn is_success(self) -> bool {
        matches!(self, Status::Good | Status::ConditionMet)
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Good => "GOOD",
            Status::CheckCondition => "CHECK CONDITION",
            Status::ConditionMet => "CONDITION MET",
            Status::Busy => "BUSY",
            Status::ReservationConflict => "RESERVATION CONFLICT",
            Status::TaskSetFull => "TASK SET FULL",
            Status::AcaActive => "ACA ACTIVE",
            Status::TaskAborted => "TASK ABORTED",
            Status::Unknown(_) => "unknown status",
        }
    }
}

impl From<u8> for Status {
    fn from(v: u8) -> Status {
        match v {
            0x00 => Status::Good,
            0x02 => Status::CheckCondition,
            0x04 => Status::ConditionMet,
            0x08 => Status::Busy,
            0x18 => Status::ReservationConflict,
            0x28 => Status::TaskSetFull,
            0x30 => Status::AcaActive,
            0x40 => Status::TaskAborted,
            other => Status::Unknown(other),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown(v) => write!(f, "unknown status {v:#04x}"),
            s => f.write_str(s.name()),
        }
    }
}

/// The sense key (SPC-5 4.4.5, table 50): 4 bits, so every value has a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenseKey {
    NoSense,
    RecoveredError,
    NotReady,
    MediumError,
    HardwareError,
    IllegalRequest,
    UnitAttention,
    DataProtect,
    BlankCheck,
    VendorSpecific,
    CopyAborted,
    AbortedCommand,
    /// 0x0C, obsolete/reserved.
    Reserved,
    VolumeOverflow,
    Miscompare,
    Completed,
}

impl SenseKey {
    /// The key in the low 4 bits of `v`.
    pub fn from_nibble(v: u8) -> SenseKey {
        match v & 0x0F {
            0x0 => SenseKey::NoSense,
            0x1 => SenseKey::RecoveredError,
            0x2 => SenseKey::NotReady,
            0x3 => SenseKey::MediumError,
            0x4 => SenseKey::HardwareError,
            0x5 => SenseKey::IllegalRequest,
            0x6 => SenseKey::UnitAttention,
            0x7 => SenseKey::DataProtect,
            0x8 => SenseKey::BlankCheck,
            0x9 => SenseKey::VendorSpecific,
            0xA => SenseKey::CopyAborted,
            0xB => SenseKey::AbortedCommand,
            0xC => SenseKey::Reserved,
            0xD => SenseKey::VolumeOverflow,
            0xE => SenseKey::Miscompare,
            _ => SenseKey::Completed,
        }
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The name SPC uses ("ILLEGAL REQUEST").
    pub fn name(self) -> &'static str {
        match self {
            SenseKey::NoSense => "NO SENSE",
            SenseKey::RecoveredError => "RECOVERED ERROR",
            SenseKey::NotReady => "NOT READY",
            SenseKey::MediumError => "MEDIUM ERROR",
            SenseKey::HardwareError => "HARDWARE ERROR",
            SenseKey::IllegalRequest => "ILLEGAL REQUEST",
            SenseKey::UnitAttention => "UNIT ATTENTION",
            SenseKey::DataProtect => "DATA PROTECT",
            SenseKey::BlankCheck => "BLANK CHECK",
            SenseKey::VendorSpecific => "VENDOR SPECIFIC",
            SenseKey::CopyAborted => "COPY ABORTED",
            SenseKey::AbortedCommand => "ABORTED COMMAND",
            SenseKey::Reserved => "RESERVED",
            SenseKey::VolumeOverflow => "VOLUME OVERFLOW",
            SenseKey::Miscompare => "MISCOMPARE",
            SenseKey::Completed => "COMPLETED",
        }
    }
}

impl fmt::Display for SenseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A description of common ASC/ASCQ pairs (SPC-5 annex F.2, table F.1).
/// `None` for pairs not in this table.
pub fn asc_ascq_description(asc: u8, ascq: u8) -> Option<&'static str> {
    Some(match (asc, ascq) {
        (0x00, 0x00) => "no additional sense information",
        (0x04, 0x00) => "logical unit not ready, cause not reportable",
        (0x04, 0x01) => "logical unit is in process of becoming ready",
        (0x04, 0x02) => "logical unit not ready, initializing command required",
        (0x04, 0x03) => "logical unit not ready, manual intervention required",
        (0x04, 0x04) => "logical unit not ready, format in progress",
        (0x04, 0x07) => "logical unit not ready, operation in progress",
        (0x04, 0x0A) => "logical unit not accessible, asymmetric access state transition",
        (0x04, 0x0B) => "logical unit not accessible, target port in standby state",
        (0x04, 0x0C) => "logical unit not accessible, target port in unavailable state",
        (0x04, _) => "logical unit not ready",
        (0x08, 0x00) => "logical unit communication failure",
        (0x0C, 0x00) => "write error",
        (0x10, 0x01) => "logical block guard check failed",
        (0x10, 0x02) => "logical block application tag check failed",
        (0x10, 0x03) => "logical block reference tag check failed",
        (0x11, 0x00) => "unrecovered read error",
        (0x14, 0x01) => "record not found",
        (0x1A, 0x00) => "parameter list length error",
        (0x1D, 0x00) => "miscompare during verify operation",
        (0x20, 0x00) => "invalid command operation code",
        (0x21, 0x00) => "logical block address out of range",
        (0x24, 0x00) => "invalid field in CDB",
        (0x25, 0x00) => "logical unit not supported",
        (0x26, 0x00) => "invalid field in parameter list",
        (0x27, 0x00) => "write protected",
        (0x27, 0x01) => "hardware write protected",
        (0x27, 0x02) => "logical unit software write protected",
        (0x27, 0x07) => "space allocation failed write protect",
        (0x27, _) => "write protected",
        (0x28, 0x00) => "not ready to ready change, medium may have changed",
        (0x29, 0x00) => "power on, reset, or bus device reset occurred",
        (0x29, 0x01) => "power on occurred",
        (0x29, 0x02) => "SCSI bus reset occurred",
        (0x29, 0x03) => "bus device reset function occurred",
        (0x29, 0x04) => "device internal reset",
        (0x29, 0x07) => "I_T nexus loss occurred",
        (0x29, _) => "power on or reset occurred",
        (0x2A, 0x01) => "mode parameters changed",
        (0x2A, 0x06) => "asymmetric access state changed",
        (0x2A, 0x09) => "capacity data has changed",
        (0x2C, 0x00) => "command sequence error",
        (0x31, 0x00) => "medium format corrupted",
        (0x38, 0x07) => "thin provisioning soft threshold reached",
        (0x3A, _) => "medium not present",
        (0x3F, 0x03) => "inquiry data has changed",
        (0x3F, 0x0E) => "reported luns data has changed",
        (0x44, 0x00) => "internal target failure",
        (0x47, 0x00) => "SCSI parity error",
        (0x47, 0x03) => "information unit iuCRC error detected",
        (0x4B, 0x00) => "data phase error",
        (0x55, 0x03) => "insufficient resources",
        _ => return None,
    })
}

/// Which of the two sense data formats (SPC-5 4.4.1) the target used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenseFormat {
    /// Response code 0x70 (current) / 0x71 (deferred).
    Fixed,
    /// Response code 0x72 (current) / 0x73 (deferred).
    Descriptor,
}

/// The sense-key-specific field pointer for ILLEGAL REQUEST (SPC-5 4.4.2.4.2):
/// which byte (and bit) of the CDB or parameter list was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldPointer {
    /// True when the error is in the CDB, false for the parameter list.
    pub in_cdb: bool,
    pub byte: u16,
    /// The bit, when the target reported one (BPV set).
    pub bit: Option<u8>,
}

/// A change on the target that its sense data announces and an initiator
/// has to act on beyond retrying the command (see [`Sense::target_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetChange {
    /// 2A/09: a LUN's capacity changed: read it again.
    Capacity,
    /// 3F/0E: LUNs were added or removed: REPORT LUNS again.
    Luns,
    /// 3F/03: standard or VPD INQUIRY data changed (device type,
    /// protection, identifiers): look at the LUNs again.
    Inquiry,
}

/// Parsed sense data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sense {
    pub format: SenseFormat,
    /// The error belongs to an earlier command (0x71/0x73).
    pub deferred: bool,
    pub key: SenseKey,
    /// ADDITIONAL SENSE CODE (0 when the target sent too few bytes).
    pub asc: u8,
    /// ADDITIONAL SENSE CODE QUALIFIER.
    pub ascq: u8,
    /// The INFORMATION field when valid (for medium errors: the failing LBA).
    pub information: Option<u64>,
    /// COMMAND-SPECIFIC INFORMATION, when present and non-zero.
    pub command_specific: Option<u64>,
    /// The 3 sense-key-specific bytes, when SKSV is set.
    pub sense_key_specific: Option<[u8; 3]>,
}

impl Sense {
    /// Parses sense data in fixed or descriptor format (SPC-5 4.4).
    ///
    /// Needs only the bytes that hold the sense key (3 for fixed, 2 for
    /// descriptor); fields past the end of the buffer or past the
    /// ADDITIONAL SENSE LENGTH read as absent or 0.
    pub fn parse(buf: &[u8]) -> Result<Sense, ParseError> {
        const WHAT: &str = "sense data";
        need(buf, 1, WHAT)?;
        let code = buf[0] & 0x7F;
        match code {
            0x70 | 0x71 => Self::parse_fixed(buf, code == 0x71),
            0x72 | 0x73 => Self::parse_descriptor(buf, code == 0x73),
            other => Err(ParseError::BadField {
                what: WHAT,
                field: "RESPONSE CODE",
                value: other.into(),
            }),
        }
    }

    /// Fixed format (SPC-5 4.4.3): VALID in byte 0 bit 7, sense key in byte 2
    /// bits 3..0, INFORMATION in 3..7, ADDITIONAL SENSE LENGTH in 7,
    /// COMMAND-SPECIFIC INFORMATION in 8..12, ASC 12, ASCQ 13, sense key
    /// specific in 15..18 (SKSV = byte 15 bit 7).
    fn parse_fixed(buf: &[u8], deferred: bool) -> Result<Sense, ParseError> {
        need(buf, 3, "fixed format sense data")?;
        // Only trust bytes the target declared (8 + additional length).
        let declared = 8usize.saturating_add(usize::from(u8_at(buf, 7)));
        let b = slice_at(buf, 0, if buf.len() >= 8 { declared } else { buf.len() });
        let valid = u8_at(b, 0) & 0x80 != 0;
        let info = be32_at(b, 3);
        let cmd_specific = be32_at(b, 8);
        let sks = [u8_at(b, 15), u8_at(b, 16), u8_at(b, 17)];
        Ok(Sense {
            format: SenseFormat::Fixed,
            deferred,
            key: SenseKey::from_nibble(u8_at(b, 2)),
            asc: u8_at(b, 12),
            ascq: u8_at(b, 13),
            information: (valid && b.len() >= 7).then_some(u64::from(info)),
            command_specific: (cmd_specific != 0).then_some(u64::from(cmd_specific)),
            sense_key_specific: (sks[0] & 0x80 != 0).then_some(sks),
        })
    }

    /// Descriptor format (SPC-5 4.4.2): sense key in byte 1, ASC 2, ASCQ 3,
    /// ADDITIONAL SENSE LENGTH in 7, then descriptors (type, additional
    /// length, body). Reads the information (0x00), command-specific (0x01)
    /// and sense key specific (0x02) descriptors; skips others.
    fn parse_descriptor(buf: &[u8], deferred: bool) -> Result<Sense, ParseError> {
        need(buf, 2, "descriptor format sense data")?;
        let mut sense = Sense {
            format: SenseFormat::Descriptor,
            deferred,
            key: SenseKey::from_nibble(buf[1]),
            asc: u8_at(buf, 2),
            ascq: u8_at(buf, 3),
            information: None,
            command_specific: None,
            sense_key_specific: None,
        };
        let declared = 8usize.saturating_add(usize::from(u8_at(buf, 7)));
        let descriptors = slice_at(buf, 8, declared.saturating_sub(8));
        let mut at = 0usize;
        while at + 2 <= descriptors.len() {
            let kind = descriptors[at];
            let body_len = usize::from(descriptors[at + 1]);
            let d = slice_at(descriptors, at, 2 + body_len);
            if d.len() < 2 + body_len {
                break; // cut off by the buffer: keep what we have
            }
            match kind {
                // Information (SPC-5 4.4.2.2): VALID byte 2 bit 7, value in 4..12.
                0x00 if body_len >= 0x0A && d[2] & 0x80 != 0 => {
                    sense.information = Some(be64_at(d, 4));
                }
                // Command-specific information (4.4.2.3): value in 4..12.
                0x01 if body_len >= 0x0A => {
                    sense.command_specific = Some(be64_at(d, 4));
                }
                // Sense key specific (4.4.2.4): SKSV byte 4 bit 7, bytes 4..7.
                0x02 if body_len >= 0x06 && d[4] & 0x80 != 0 => {
                    sense.sense_key_specific = Some([d[4], d[5], d[6]]);
                }
                _ => {}
            }
            at += 2 + body_len;
        }
        Ok(sense)
    }

    /// Sense data as carried in the data segment of an iSCSI SCSI Response
    /// PDU (RFC 7143 11.4.7.2): a 2-byte SenseLength, then the sense data.
    /// `Ok(None)` when the segment is empty or SenseLength is 0.
    pub fn from_iscsi_data_segment(segment: &[u8]) -> Result<Option<Sense>, ParseError> {
        if segment.is_empty() {
            return Ok(None);
        }
        need(segment, 2, "iSCSI sense data segment")?;
        let len = usize::from(be16_at(segment, 0));
        if len == 0 {
            return Ok(None);
        }
        need(segment, 2 + len, "iSCSI sense data segment")?;
        Sense::parse(slice_at(segment, 2, len)).map(Some)
    }

    /// What these sense bytes (of a UNIT ATTENTION or an asynchronous
    /// event) say changed: 2A/09 CAPACITY DATA HAS CHANGED, 3F/0E REPORTED
    /// LUNS DATA HAS CHANGED (SPC-4 §6.37), 3F/03 INQUIRY DATA HAS CHANGED.
    pub fn target_change(&self) -> Option<TargetChange> {
        match (self.asc, self.ascq) {
            (0x2a, 0x09) => Some(TargetChange::Capacity),
            (0x3f, 0x0e) => Some(TargetChange::Luns),
            (0x3f, 0x03) => Some(TargetChange::Inquiry),
            _ => None,
        }
    }

    /// The ASC/ASCQ description from [`asc_ascq_description`].
    pub fn description(&self) -> Option<&'static str> {
        asc_ascq_description(self.asc, self.ascq)
    }

    /// For ILLEGAL REQUEST with SKSV: where in the CDB / parameter list the
    /// bad field is (SPC-5 4.4.2.4.2: C/D byte 0 bit 6, BPV bit 3, BIT
    /// POINTER bits 2..0, FIELD POINTER bytes 1..3).
    pub fn field_pointer(&self) -> Option<FieldPointer> {
        if self.key != SenseKey::IllegalRequest {
            return None;
        }
        let s = self.sense_key_specific?;
        Some(FieldPointer {
            in_cdb: s[0] & 0x40 != 0,
            byte: u16::from_be_bytes([s[1], s[2]]),
            bit: (s[0] & 0x08 != 0).then_some(s[0] & 0x07),
        })
    }

    /// For NOT READY / NO SENSE with SKSV: progress of a long operation in
    /// 1/65536 units (SPC-5 4.4.2.4.4).
    pub fn progress(&self) -> Option<u16> {
        if !matches!(self.key, SenseKey::NotReady | SenseKey::NoSense) {
            return None;
        }
        let s = self.sense_key_specific?;
        Some(u16::from_be_bytes([s[1], s[2]]))
    }
}

impl fmt::Display for Sense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key)?;
        match self.description() {
            Some(d) => write!(f, ": {d}")?,
            None if self.asc == 0 && self.ascq == 0 => {}
            None => f.write_str(": unlisted additional sense code")?,
        }
        write!(f, " (ASC/ASCQ {:02X}h/{:02X}h)", self.asc, self.ascq)?;
        if let Some(p) = self.field_pointer() {
            let place = if p.in_cdb { "CDB" } else { "parameter list" };
            write!(f, ", {place} byte {}", p.byte)?;
            if let Some(bit) = p.bit {
                write!(f, " bit {bit}")?;
            }
        }
        if let Some(info) = self.information {
            write!(f, ", information {info:#x}")?;
        }
        if self.deferred {
            f.write_str(", deferred error")?;
        }
        Ok(())
    }
}

/// A SCSI command that did not complete with GOOD: the status and, for
/// CHECK CONDITION, the sense data. "The target refused" as opposed to
/// "the network failed" or "the target misbehaved".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct ScsiError {
    status: Status,
    sense: Option<Sense>,
    /// Why the sense bytes that came with the status could not be parsed.
    #[source]
    sense_error: Option<ParseError>,
}

impl ScsiError {
    pub fn new(status: Status, sense: Option<Sense>) -> ScsiError {
        ScsiError {
            status,
            sense,
            sense_error: None,
        }
    }

    /// From a status and raw sense bytes (empty when the target sent none).
    /// Unparseable sense data is kept as the error's source, not dropped
    /// silently.
    pub fn from_status_and_sense_bytes(status: Status, sense: &[u8]) -> ScsiError {
        if sense.is_empty() {
            return ScsiError::new(status, None);
        }
        match Sense::parse(sense) {
            Ok(s) => ScsiError::new(status, Some(s)),
            Err(e) => ScsiError {
                status,
                sense: None,
                sense_error: Some(e),
            },
        }
    }

    /// `Ok` for GOOD and CONDITION MET, else the error. RECOVERED ERROR
    /// (the command did complete) is still returned as an error; callers
    /// that accept it check [`ScsiError::is_recovered`].
    pub fn check(status: Status, sense: &[u8]) -> Result<(), ScsiError> {
        if status.is_success() {
            Ok(())
        } else {
            Err(ScsiError::from_status_and_sense_bytes(status, sense))
        }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn sense(&self) -> Option<&Sense> {
        self.sense.as_ref()
    }

    pub fn sense_key(&self) -> Option<SenseKey> {
        self.sense.as_ref().map(|s| s.key)
    }

    /// What a UNIT ATTENTION says changed on the target, when it is something
    /// an initiator must look at again ([`TargetChange`]); `None` for any
    /// other condition (reset, mode parameters…: retrying is enough).
    pub fn target_change(&self) -> Option<TargetChange> {
        if !self.is_unit_attention() {
            return None;
        }
        self.sense.as_ref().and_then(Sense::target_change)
    }

    /// (ASC, ASCQ) when sense data was present.
    pub fn asc_ascq(&self) -> Option<(u8, u8)> {
        self.sense.as_ref().map(|s| (s.asc, s.ascq))
    }

    fn has_key(&self, key: SenseKey) -> bool {
        self.sense_key() == Some(key)
    }

    fn has_asc(&self, asc: u8) -> bool {
        matches!(self.asc_ascq(), Some((a, _)) if a == asc)
    }

    fn has_asc_ascq(&self, asc: u8, ascq: u8) -> bool {
        self.asc_ascq() == Some((asc, ascq))
    }

    /// UNIT ATTENTION: something changed (reset, capacity, LUN inventory);
    /// the command was not executed and can be retried.
    pub fn is_unit_attention(&self) -> bool {
        self.has_key(SenseKey::UnitAttention)
    }

    /// Writes refused because the LUN is write protected (ASC 0x27, except
    /// 0x27/0x07, which is a thin pool out of space).
    pub fn is_write_protected(&self) -> bool {
        self.has_asc(0x27) && !self.is_space_allocation_failed()
    }

    /// 0x27/0x07: a thin-provisioned LUN could not allocate space.
    pub fn is_space_allocation_failed(&self) -> bool {
        self.has_asc_ascq(0x27, 0x07)
    }

    /// 0x21/0x00: logical block address out of range.
    pub fn is_lba_out_of_range(&self) -> bool {
        self.has_asc_ascq(0x21, 0x00)
    }

    /// 0x25/0x00: the addressed LUN does not exist.
    pub fn is_lun_not_supported(&self) -> bool {
        self.has_asc_ascq(0x25, 0x00)
    }

    /// 0x20/0x00 or 0x24/0x00: the device does not support the command or
    /// one of its fields (e.g. UNMAP, WRITE SAME with UNMAP, FUA).
    pub fn is_unsupported_command(&self) -> bool {
        self.has_key(SenseKey::IllegalRequest)
            && (self.has_asc_ascq(0x20, 0x00) || self.has_asc_ascq(0x24, 0x00))
    }

    /// RECOVERED ERROR: the command completed after the device recovered.
    pub fn is_recovered(&self) -> bool {
        self.status == Status::CheckCondition && self.has_key(SenseKey::RecoveredError)
    }

    /// Worth sending the same command again: UNIT ATTENTION, NOT READY while
    /// becoming ready (0x04/0x01) or in an ALUA transition (0x04/0x0A), and
    /// the BUSY, TASK SET FULL and TASK ABORTED statuses.
    pub fn is_retryable(&self) -> bool {
        match self.status {
            Status::Busy | Status::TaskSetFull => true,
            // Aborted by another I_T nexus's task management (a LUN reset
            // elsewhere, with TAS set): not this command's fault.
            Status::TaskAborted => true,
            Status::CheckCondition => {
                self.is_unit_attention()
                    || (self.has_key(SenseKey::NotReady)
                        && (self.has_asc_ascq(0x04, 0x01) || self.has_asc_ascq(0x04, 0x0A)))
            }
            _ => false,
        }
    }

    /// The Linux errno a file or block front end should report for this
    /// error; the one place this mapping lives.
    ///
    /// | condition | errno |
    /// | --- | --- |
    /// | 0x27/0x07 space allocation failed | `ENOSPC` |
    /// | other 0x27 write protect, DATA PROTECT | `EROFS` |
    /// | 0x25/0x00 LUN not supported | `ENXIO` |
    /// | ILLEGAL REQUEST: invalid opcode / field / parameter list, LBA out of range | `EINVAL` |
    /// | MISCOMPARE, protection information check failed (0x10/xx) | `EILSEQ` |
    /// | RESERVATION CONFLICT | `EBADE` (as Linux's block layer) |
    /// | anything else (medium, hardware, aborted, BUSY…) | `EIO` |
    pub fn to_errno(&self) -> i32 {
        use errno::*;
        if self.status == Status::ReservationConflict {
            return EBADE;
        }
        let Some(sense) = &self.sense else {
            return EIO;
        };
        if self.is_space_allocation_failed() {
            ENOSPC
        } else if self.is_write_protected() || sense.key == SenseKey::DataProtect {
            EROFS
        } else if self.is_lun_not_supported() {
            ENXIO
        } else if sense.key == SenseKey::Miscompare || sense.asc == 0x10 {
            EILSEQ
        } else if sense.key == SenseKey::IllegalRequest {
            EINVAL
        } else {
            EIO
        }
    }

    fn message(&self) -> String {
        let mut m = format!("SCSI command failed with {}", self.status);
        match (&self.sense, &self.sense_error) {
            (Some(s), _) => m.push_str(&format!(": {s}")),
            (None, Some(_)) => m.push_str(" (sense data unreadable)"),
            (None, None) if self.status == Status::CheckCondition => {
                m.push_str(" but no sense data")
            }
            (None, None) => {}
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const FIXED_LBA_OUT_OF_RANGE: [u8; 18] = [
        0x70,                   // current error, fixed format, VALID = 0
        0x00,                   // obsolete
        0x05,                   // sense key ILLEGAL REQUEST
        0x00, 0x00, 0x00, 0x00, // information
        0x0A,                   // additional sense length (18 - 8)
        0x00, 0x00, 0x00, 0x00, // command-specific information
        0x21,                   // ASC: LBA out of range
        0x00,                   // ASCQ
        0x00,                   // FRU code
        0x00, 0x00, 0x00,       // sense key specific, SKSV = 0
    ];

    #[test]
    fn fixed_sense_yields_key_asc_ascq() {
        let s = Sense::parse(&FIXED_LBA_OUT_OF_RANGE).unwrap();
        assert_eq!(s.format, SenseFormat::Fixed);
        assert!(!s.deferred);
        assert_eq!(s.key, SenseKey::IllegalRequest);
        assert_eq!((s.asc, s.ascq), (0x21, 0x00));
        assert_eq!(s.information, None);
        assert_eq!(s.sense_key_specific, None);
    }

    #[test]
    fn fixed_sense_with_valid_bit_reports_information_and_field_pointer() {
        #[rustfmt::skip]
        let buf = [
            0xF0,                   // VALID, current error, fixed
            0x00,                   // obsolete
            0x05,                   // ILLEGAL REQUEST
            0x00, 0x00, 0x12, 0x34, // information 0x1234
            0x0A,                   // additional sense length
            0x00, 0x00, 0x00, 0x00, // command-specific information
            0x24, 0x00,             // invalid field in CDB
            0x00,                   // FRU
            0xCB, 0x00, 0x02,       // SKSV, C/D = CDB, BPV, bit 3; field byte 2
        ];
        let s = Sense::parse(&buf).unwrap();
        assert_eq!(s.information, Some(0x1234));
        assert_eq!(
            s.field_pointer(),
            Some(FieldPointer {
                in_cdb: true,
                byte: 2,
                bit: Some(3)
            })
        );
        assert_eq!(
            s.to_string(),
            "ILLEGAL REQUEST: invalid field in CDB (ASC/ASCQ 24h/00h), CDB byte 2 bit 3, information 0x1234"
        );
    }

    #[test]
    fn tgtd_style_short_fixed_sense_parses() {
        // tgtd sends 18 bytes; some targets send only 8 + a short tail.
        #[rustfmt::skip]
        let buf = [
            0x70, 0x00,
            0x06,                   // UNIT ATTENTION
            0, 0, 0, 0,
            0x06,                   // additional sense length 6 -> bytes 8..14
            0, 0, 0, 0,
            0x29, 0x00,             // power on, reset
        ];
        let s = Sense::parse(&buf).unwrap();
        assert_eq!(s.key, SenseKey::UnitAttention);
        assert_eq!((s.asc, s.ascq), (0x29, 0x00));
    }

    #[test]
    fn fixed_sense_ignores_bytes_past_additional_sense_length() {
        let mut buf = FIXED_LBA_OUT_OF_RANGE;
        buf[7] = 0x00; // target declares no additional bytes
        let s = Sense::parse(&buf).unwrap();
        assert_eq!((s.asc, s.ascq), (0, 0));
        assert_eq!(s.key, SenseKey::IllegalRequest);
    }

    #[test]
    fn descriptor_sense_reads_information_descriptor() {
        #[rustfmt::skip]
        let buf = [
            0x72,                   // current error, descriptor format
            0x03,                   // MEDIUM ERROR
            0x11, 0x00,             // unrecovered read error
            0x00, 0x00, 0x00,       // reserved
            0x0C,                   // additional sense length: one 12-byte descriptor
            0x00,                   // descriptor type: information
            0x0A,                   // additional length
            0x80,                   // VALID
            0x00,                   // reserved
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2A, // information: LBA
        ];
        let s = Sense::parse(&buf).unwrap();
        assert_eq!(s.format, SenseFormat::Descriptor);
        assert_eq!(s.key, SenseKey::MediumError);
        assert_eq!((s.asc, s.ascq), (0x11, 0x00));
        assert_eq!(s.information, Some(0x1_0000_002A));
    }

    #[test]
    fn deferred_descriptor_sense_with_sks_descriptor_and_unknown_descriptor() {
        #[rustfmt::skip]
        let buf = [
            0x73,                   // deferred error, descriptor format
            0x02,                   // NOT READY
            0x04, 0x04,             // format in progress
            0x00, 0x00, 0x00,
            0x0C,                   // additional sense length 12
            0x09, 0x02, 0xAA, 0xBB, // unknown descriptor type 0x09, 2 bytes
            0x02,                   // sense key specific descriptor
            0x06,                   // additional length
            0x00, 0x00,             // reserved
            0x80, 0x80, 0x00,       // SKSV, progress 0x8000 (50%)
            0x00,                   // reserved
        ];
        let s = Sense::parse(&buf).unwrap();
        assert!(s.deferred);
        assert_eq!(s.progress(), Some(0x8000));
        assert_eq!(s.information, None);
        assert!(s.to_string().ends_with(", deferred error"));
    }

    #[test]
    fn descriptor_cut_off_by_buffer_is_skipped_not_read() {
        #[rustfmt::skip]
        let buf = [
            0x72, 0x05, 0x24, 0x00, 0, 0, 0,
            0x0C,       // declares 12 more bytes
            0x00, 0x0A, // information descriptor...
            0x80, 0x00, 0x00, // ...but the buffer ends here
        ];
        let s = Sense::parse(&buf).unwrap();
        assert_eq!(s.information, None);
        assert_eq!(s.asc, 0x24);
    }

    #[test]
    fn unknown_response_code_is_an_error() {
        let err = Sense::parse(&[0x7F, 0, 0]).unwrap_err();
        assert_eq!(
            err,
            ParseError::BadField {
                what: "sense data",
                field: "RESPONSE CODE",
                value: 0x7F
            }
        );
        assert!(matches!(
            Sense::parse(&[]),
            Err(ParseError::Truncated { .. })
        ));
    }

    #[test]
    fn iscsi_data_segment_strips_sense_length() {
        let mut seg = vec![0x00, 18];
        seg.extend_from_slice(&FIXED_LBA_OUT_OF_RANGE);
        seg.extend_from_slice(&[0xEE; 3]); // response data / padding after sense
        let s = Sense::from_iscsi_data_segment(&seg).unwrap().unwrap();
        assert_eq!(s.asc, 0x21);
        assert_eq!(Sense::from_iscsi_data_segment(&[]), Ok(None));
        assert_eq!(Sense::from_iscsi_data_segment(&[0, 0]), Ok(None));
        assert_eq!(
            Sense::from_iscsi_data_segment(&[0, 18, 0x70])
                .unwrap_err()
                .needed(),
            Some(20)
        );
    }

    #[test]
    fn status_round_trips_through_u8_and_keeps_unknown_values() {
        for v in 0..=255u8 {
            assert_eq!(Status::from(v).as_u8(), v);
        }
        assert_eq!(Status::from(0x18), Status::ReservationConflict);
        assert_eq!(Status::from(0x22), Status::Unknown(0x22));
        assert_eq!(Status::Unknown(0x22).to_string(), "unknown status 0x22");
    }

    #[test]
    fn sense_key_names_follow_spc() {
        assert_eq!(SenseKey::from_nibble(0xF5).name(), "ILLEGAL REQUEST");
        assert_eq!(SenseKey::from_nibble(0x0F), SenseKey::Completed);
        for v in 0..16u8 {
            assert_eq!(SenseKey::from_nibble(v).as_u8(), v);
        }
    }

    fn check_condition(key: u8, asc: u8, ascq: u8) -> ScsiError {
        let mut buf = FIXED_LBA_OUT_OF_RANGE;
        buf[2] = key;
        buf[12] = asc;
        buf[13] = ascq;
        ScsiError::from_status_and_sense_bytes(Status::CheckCondition, &buf)
    }

    #[test]
    fn scsi_error_message_names_status_sense_key_and_asc() {
        let e = check_condition(0x05, 0x21, 0x00);
        assert_eq!(
            e.to_string(),
            "SCSI command failed with CHECK CONDITION: ILLEGAL REQUEST: \
             logical block address out of range (ASC/ASCQ 21h/00h)"
        );
        assert!(e.is_lba_out_of_range());
    }

    #[test]
    fn scsi_error_message_for_unlisted_asc_keeps_the_codes() {
        let e = check_condition(0x04, 0x99, 0x42);
        assert_eq!(
            e.to_string(),
            "SCSI command failed with CHECK CONDITION: HARDWARE ERROR: \
             unlisted additional sense code (ASC/ASCQ 99h/42h)"
        );
    }

    #[test]
    fn required_asc_ascq_pairs_have_descriptions() {
        for (asc, ascq, text) in [
            (0x04, 0x33, "logical unit not ready"),
            (0x20, 0x00, "invalid command operation code"),
            (0x21, 0x00, "logical block address out of range"),
            (0x24, 0x00, "invalid field in CDB"),
            (0x25, 0x00, "logical unit not supported"),
            (0x27, 0x00, "write protected"),
            (
                0x28,
                0x00,
                "not ready to ready change, medium may have changed",
            ),
            (0x29, 0x05, "power on or reset occurred"),
            (0x2A, 0x09, "capacity data has changed"),
            (0x3F, 0x0E, "reported luns data has changed"),
            (0x11, 0x00, "unrecovered read error"),
            (0x0C, 0x00, "write error"),
            (0x1A, 0x00, "parameter list length error"),
            (0x26, 0x00, "invalid field in parameter list"),
        ] {
            assert_eq!(
                asc_ascq_description(asc, ascq),
                Some(text),
                "{asc:02x}/{ascq:02x}"
            );
        }
    }

    #[test]
    fn check_condition_without_sense_says_so() {
        let e = ScsiError::from_status_and_sense_bytes(Status::CheckCondition, &[]);
        assert_eq!(
            e.to_string(),
            "SCSI command failed with CHECK CONDITION but no sense data"
        );
        assert_eq!(e.to_errno(), errno::EIO);
    }

    #[test]
    fn unreadable_sense_is_kept_as_source() {
        use std::error::Error;
        let e = ScsiError::from_status_and_sense_bytes(Status::CheckCondition, &[0x00, 0x01]);
        assert!(e.to_string().ends_with("(sense data unreadable)"));
        assert!(e.source().is_some());
    }

    #[test]
    fn check_accepts_good_and_condition_met_only() {
        assert_eq!(ScsiError::check(Status::Good, &[]), Ok(()));
        assert_eq!(ScsiError::check(Status::ConditionMet, &[]), Ok(()));
        let e = ScsiError::check(Status::Busy, &[]).unwrap_err();
        assert_eq!(e.to_string(), "SCSI command failed with BUSY");
    }

    #[test]
    fn unit_attention_and_becoming_ready_and_busy_are_retryable() {
        assert!(check_condition(0x06, 0x29, 0x00).is_retryable());
        assert!(check_condition(0x06, 0x2A, 0x09).is_unit_attention());
        assert!(check_condition(0x02, 0x04, 0x01).is_retryable());
        assert!(ScsiError::new(Status::Busy, None).is_retryable());
        assert!(ScsiError::new(Status::TaskSetFull, None).is_retryable());
        assert!(ScsiError::new(Status::TaskAborted, None).is_retryable());
    }

    #[test]
    fn unit_attentions_name_the_changes_an_initiator_follows() {
        assert_eq!(
            check_condition(0x06, 0x2A, 0x09).target_change(),
            Some(TargetChange::Capacity)
        );
        assert_eq!(
            check_condition(0x06, 0x3F, 0x0E).target_change(),
            Some(TargetChange::Luns)
        );
        assert_eq!(
            check_condition(0x06, 0x3F, 0x03).target_change(),
            Some(TargetChange::Inquiry)
        );
        // A reset is retried, nothing more; 3F/0E without UNIT ATTENTION
        // is not a report.
        assert_eq!(check_condition(0x06, 0x29, 0x00).target_change(), None);
        assert_eq!(check_condition(0x05, 0x3F, 0x0E).target_change(), None);
    }

    #[test]
    fn hard_errors_are_not_retryable() {
        assert!(!check_condition(0x02, 0x04, 0x03).is_retryable());
        assert!(!check_condition(0x03, 0x11, 0x00).is_retryable());
        assert!(!check_condition(0x05, 0x24, 0x00).is_retryable());
        assert!(!ScsiError::new(Status::ReservationConflict, None).is_retryable());
    }

    #[test]
    fn errno_mapping_matches_the_table() {
        assert_eq!(check_condition(0x07, 0x27, 0x00).to_errno(), errno::EROFS);
        assert_eq!(check_condition(0x07, 0x27, 0x07).to_errno(), errno::ENOSPC);
        assert_eq!(check_condition(0x05, 0x24, 0x00).to_errno(), errno::EINVAL);
        assert_eq!(check_condition(0x05, 0x20, 0x00).to_errno(), errno::EINVAL);
        assert_eq!(check_condition(0x05, 0x21, 0x00).to_errno(), errno::EINVAL);
        assert_eq!(check_condition(0x05, 0x25, 0x00).to_errno(), errno::ENXIO);
        assert_eq!(check_condition(0x03, 0x11, 0x00).to_errno(), errno::EIO);
        assert_eq!(check_condition(0x04, 0x44, 0x00).to_errno(), errno::EIO);
        assert_eq!(check_condition(0x0E, 0x1D, 0x00).to_errno(), errno::EILSEQ);
        assert_eq!(check_condition(0x0B, 0x10, 0x01).to_errno(), errno::EILSEQ);
        assert_eq!(
            ScsiError::new(Status::ReservationConflict, None).to_errno(),
            errno::EBADE
        );
        assert_eq!(ScsiError::new(Status::Busy, None).to_errno(), errno::EIO);
    }

    #[test]
    fn predicates_distinguish_write_protect_from_out_of_space() {
        let wp = check_condition(0x07, 0x27, 0x00);
        let full = check_condition(0x07, 0x27, 0x07);
        assert!(wp.is_write_protected() && !wp.is_space_allocation_failed());
        assert!(full.is_space_allocation_failed() && !full.is_write_protected());
        assert!(check_condition(0x05, 0x25, 0x00).is_lun_not_supported());
        assert!(check_condition(0x05, 0x20, 0x00).is_unsupported_command());
        assert!(check_condition(0x01, 0x00, 0x00).is_recovered());
    }
}
