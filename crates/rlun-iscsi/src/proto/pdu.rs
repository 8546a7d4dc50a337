//! iSCSI PDU codec (RFC 7143 §11).
//!
//! Every PDU starts with a 48-byte Basic Header Segment (BHS, §11.2.1),
//! optionally followed by Additional Header Segments (AHS, §11.2.2), an
//! optional header digest, a data segment padded to a multiple of 4 bytes and
//! an optional data digest (§11.2.3–§11.2.4). This module maps the BHS to a
//! typed form per opcode and back, checks a frame for completeness cheaply
//! before it is parsed ([`frame_length`]), and verifies digests on decode.
//!
//! Nothing here does I/O. Decoding takes an owned [`Bytes`] frame and hands
//! out the data segment as a zero-copy slice of it; encoding produces a
//! [`WireFrame`] whose three parts (header, data, padding+digest) are meant
//! for one vectored write, so data is never copied into a send buffer.

use bytes::Bytes;
use thiserror::Error;

use crc32c::crc32c;

/// Length of the Basic Header Segment.
pub const BHS_LEN: usize = 48;
/// The reserved Initiator Task Tag value (§11.2.1.8): "no task".
pub const RESERVED_TAG: u32 = 0xffff_ffff;
/// Largest value of the 24-bit DataSegmentLength field.
pub const MAX_DATA_SEGMENT: u32 = 0x00ff_ffff;

/// Which digests are in force on a connection (negotiated at login).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// Limits applied while framing received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    pub digests: Digests,
    /// The largest data segment we accept (our declared
    /// MaxRecvDataSegmentLength, or 8192 during login for safety margin the
    /// caller may raise).
    pub max_data_segment: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            digests: Digests::default(),
            // Login PDUs may legitimately carry up to 8192 bytes (§6.6 default).
            max_data_segment: 8192,
        }
    }
}

/// Errors found in a received PDU. Each one means the target misbehaved
/// (or the connection corrupted data): the connection cannot continue.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PduError {
    #[error("PDU data segment of {len} bytes exceeds the negotiated limit of {max} bytes")]
    DataSegmentTooLong { len: u32, max: u32 },
    #[error("PDU has {len} bytes of additional header segments; AHS length must be a multiple of 4 and at most 1020")]
    BadAhs { len: usize },
    #[error("header digest mismatch (received {received:#010x}, computed {computed:#010x})")]
    HeaderDigest { received: u32, computed: u32 },
    #[error("data digest mismatch (received {received:#010x}, computed {computed:#010x})")]
    DataDigest { received: u32, computed: u32 },
    #[error("frame is {got} bytes but its header says {expected}")]
    LengthMismatch { got: usize, expected: usize },
    #[error("malformed {opcode} PDU: {what}")]
    Malformed {
        opcode: &'static str,
        what: &'static str,
    },
}

/// iSCSI opcodes (§11.2.1.2). Initiator opcodes are 0x00–0x1f, target opcodes 0x20–0x3f.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    NopOut,
    ScsiCommand,
    TaskMgmtRequest,
    LoginRequest,
    TextRequest,
    DataOut,
    LogoutRequest,
    Snack,
    NopIn,
    ScsiResponse,
    TaskMgmtResponse,
    LoginResponse,
    TextResponse,
    DataIn,
    LogoutResponse,
    R2t,
    AsyncMessage,
    Reject,
    Unknown(u8),
}

impl Opcode {
    pub fn from_u8(v: u8) -> Opcode {
        match v & 0x3f {
            0x00 => Opcode::NopOut,
            0x01 => Opcode::ScsiCommand,
            0x02 => Opcode::TaskMgmtRequest,
            0x03 => Opcode::LoginRequest,
            0x04 => Opcode::TextRequest,
            0x05 => Opcode::DataOut,
            0x06 => Opcode::LogoutRequest,
            0x10 => Opcode::Snack,
            0x20 => Opcode::NopIn,
            0x21 => Opcode::ScsiResponse,
            0x22 => Opcode::TaskMgmtResponse,
            0x23 => Opcode::LoginResponse,
            0x24 => Opcode::TextResponse,
            0x25 => Opcode::DataIn,
            0x26 => Opcode::LogoutResponse,
            0x31 => Opcode::R2t,
            0x32 => Opcode::AsyncMessage,
            0x3f => Opcode::Reject,
            other => Opcode::Unknown(other),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Opcode::NopOut => 0x00,
            Opcode::ScsiCommand => 0x01,
            Opcode::TaskMgmtRequest => 0x02,
            Opcode::LoginRequest => 0x03,
            Opcode::TextRequest => 0x04,
            Opcode::DataOut => 0x05,
            Opcode::LogoutRequest => 0x06,
            Opcode::Snack => 0x10,
            Opcode::NopIn => 0x20,
            Opcode::ScsiResponse => 0x21,
            Opcode::TaskMgmtResponse => 0x22,
            Opcode::LoginResponse => 0x23,
            Opcode::TextResponse => 0x24,
            Opcode::DataIn => 0x25,
            Opcode::LogoutResponse => 0x26,
            Opcode::R2t => 0x31,
            Opcode::AsyncMessage => 0x32,
            Opcode::Reject => 0x3f,
            Opcode::Unknown(v) => v & 0x3f,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Opcode::NopOut => "NOP-Out",
            Opcode::ScsiCommand => "SCSI Command",
            Opcode::TaskMgmtRequest => "Task Management Request",
            Opcode::LoginRequest => "Login Request",
            Opcode::TextRequest => "Text Request",
            Opcode::DataOut => "SCSI Data-Out",
            Opcode::LogoutRequest => "Logout Request",
            Opcode::Snack => "SNACK Request",
            Opcode::NopIn => "NOP-In",
            Opcode::ScsiResponse => "SCSI Response",
            Opcode::TaskMgmtResponse => "Task Management Response",
            Opcode::LoginResponse => "Login Response",
            Opcode::TextResponse => "Text Response",
            Opcode::DataIn => "SCSI Data-In",
            Opcode::LogoutResponse => "Logout Response",
            Opcode::R2t => "R2T",
            Opcode::AsyncMessage => "Asynchronous Message",
            Opcode::Reject => "Reject",
            Opcode::Unknown(_) => "unknown opcode",
        }
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opcode::Unknown(v) => write!(f, "unknown opcode {v:#04x}"),
            o => f.write_str(o.name()),
        }
    }
}

/// Login stages (§11.12.3): the CSG/NSG field values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Security = 0,
    Operational = 1,
    FullFeature = 3,
}

impl Stage {
    fn from_bits(v: u8) -> Option<Stage> {
        match v & 3 {
            0 => Some(Stage::Security),
            1 => Some(Stage::Operational),
            3 => Some(Stage::FullFeature),
            _ => None,
        }
    }
}

/// SCSI task attributes (§11.3.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskAttr {
    Untagged = 0,
    #[default]
    Simple = 1,
    Ordered = 2,
    HeadOfQueue = 3,
    Aca = 4,
}

// ---- typed headers ------------------------------------------------------

/// NOP-Out (§11.18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SCSI Command (§11.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    /// F bit: no unsolicited Data-Out PDUs follow this command.
    pub final_: bool,
    pub read: bool,
    pub write: bool,
    pub attr: TaskAttr,
    pub lun: [u8; 8],
    pub itt: u32,
    pub expected_data_transfer_length: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    /// The CDB, zero-padded to 16 bytes (longer CDBs would need an extended-CDB AHS).
    pub cdb: [u8; 16],
}

/// Task Management Function Request (§11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtRequest {
    pub immediate: bool,
    pub function: u8,
    pub lun: [u8; 8],
    pub itt: u32,
    pub referenced_task_tag: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub ref_cmd_sn: u32,
    pub exp_data_sn: u32,
}

/// Task management function codes (§11.5.1).
pub mod tmf {
    pub const ABORT_TASK: u8 = 1;
    pub const ABORT_TASK_SET: u8 = 2;
    pub const CLEAR_ACA: u8 = 3;
    pub const CLEAR_TASK_SET: u8 = 4;
    pub const LOGICAL_UNIT_RESET: u8 = 5;
    pub const TARGET_WARM_RESET: u8 = 6;
    pub const TARGET_COLD_RESET: u8 = 7;
    pub const TASK_REASSIGN: u8 = 8;
}

/// Login Request (§11.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub continue_: bool,
    pub csg: Stage,
    pub nsg: Stage,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Text Request (§11.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_: bool,
    pub continue_: bool,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// SCSI Data-Out (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataOut {
    pub final_: bool,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
}

/// Logout Request (§11.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutRequest {
    pub immediate: bool,
    pub reason: u8,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Logout reason codes (§11.14.1).
pub mod logout_reason {
    pub const CLOSE_SESSION: u8 = 0;
    pub const CLOSE_CONNECTION: u8 = 1;
    pub const REMOVE_FOR_RECOVERY: u8 = 2;
}

/// SNACK Request (§11.16); encoded for completeness, only useful at ErrorRecoveryLevel > 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snack {
    pub snack_type: u8,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub beg_run: u32,
    pub run_length: u32,
}

/// NOP-In (§11.19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopIn {
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

/// Residual flags and count shared by SCSI Response and Data-In.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Residual {
    /// U bit: the target transferred fewer bytes than expected by `count`.
    pub underflow: bool,
    /// O bit: the target wanted to transfer `count` more bytes than expected.
    pub overflow: bool,
    pub count: u32,
}

/// SCSI Response (§11.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResponse {
    pub bidi_overflow: bool,
    pub bidi_underflow: bool,
    pub residual: Residual,
    /// iSCSI response code: 0x00 command completed at target, 0x01 target failure.
    pub response: u8,
    pub status: u8,
    pub itt: u32,
    pub snack_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_data_sn: u32,
    pub bidi_read_residual_count: u32,
}

/// Task Management Function Response (§11.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMgmtResponse {
    pub response: u8,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

/// Login Response (§11.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginResponse {
    pub transit: bool,
    pub continue_: bool,
    pub csg: Stage,
    pub nsg: Stage,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status_class: u8,
    pub status_detail: u8,
}

/// Text Response (§11.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextResponse {
    pub final_: bool,
    pub continue_: bool,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

/// SCSI Data-In (§11.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn {
    pub final_: bool,
    /// A bit: the target asks for a DataACK SNACK (only at ERL > 0).
    pub ack: bool,
    /// S bit: `status` and `residual` are valid and no SCSI Response follows.
    pub status_present: bool,
    pub residual: Residual,
    pub status: u8,
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
}

/// Logout Response (§11.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogoutResponse {
    pub response: u8,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub time2wait: u16,
    pub time2retain: u16,
}

/// Ready To Transfer (§11.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2t {
    pub lun: [u8; 8],
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub r2t_sn: u32,
    pub buffer_offset: u32,
    pub desired_length: u32,
}

/// Asynchronous Message (§11.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncMessage {
    pub lun: [u8; 8],
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub event: u8,
    pub vcode: u8,
    pub parameter1: u16,
    pub parameter2: u16,
    pub parameter3: u16,
}

/// Asynchronous event codes (§11.9.1).
pub mod async_event {
    pub const SCSI_ASYNC_EVENT: u8 = 0;
    pub const LOGOUT_REQUESTED: u8 = 1;
    pub const CONNECTION_DROP: u8 = 2;
    pub const SESSION_DROP: u8 = 3;
    pub const NEGOTIATION_REQUEST: u8 = 4;
    pub const TASK_TERMINATION: u8 = 5;
    pub const VENDOR_SPECIFIC: u8 = 255;
}

/// Reject (§11.17).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub reason: u8,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
}

impl Reject {
    /// Human text for the reason code (§11.17.1).
    pub fn reason_text(&self) -> &'static str {
        match self.reason {
            0x02 => "data (payload) digest error",
            0x03 => "SNACK reject",
            0x04 => "protocol error",
            0x05 => "command not supported",
            0x06 => "immediate command reject (too many immediate commands)",
            0x07 => "task in progress",
            0x08 => "invalid data ACK",
            0x09 => "invalid PDU field",
            0x0a => "long operation reject (out of resources)",
            0x0c => "waiting for logout",
            _ => "unknown reason",
        }
    }
}

/// A typed Basic Header Segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bhs {
    NopOut(NopOut),
    ScsiCommand(ScsiCommand),
    TaskMgmtRequest(TaskMgmtRequest),
    LoginRequest(LoginRequest),
    TextRequest(TextRequest),
    DataOut(DataOut),
    LogoutRequest(LogoutRequest),
    Snack(Snack),
    NopIn(NopIn),
    ScsiResponse(ScsiResponse),
    TaskMgmtResponse(TaskMgmtResponse),
    LoginResponse(LoginResponse),
    TextResponse(TextResponse),
    DataIn(DataIn),
    LogoutResponse(LogoutResponse),
    R2t(R2t),
    AsyncMessage(AsyncMessage),
    Reject(Reject),
    /// An opcode this codec does not know; kept raw so the caller can report it.
    Unknown {
        opcode: u8,
        raw: Box<[u8; BHS_LEN]>,
    },
}

impl Bhs {
    pub fn opcode(&self) -> Opcode {
        match self {
            Bhs::NopOut(_) => Opcode::NopOut,
            Bhs::ScsiCommand(_) => Opcode::ScsiCommand,
            Bhs::TaskMgmtRequest(_) => Opcode::TaskMgmtRequest,
            Bhs::LoginRequest(_) => Opcode::LoginRequest,
            Bhs::TextRequest(_) => Opcode::TextRequest,
            Bhs::DataOut(_) => Opcode::DataOut,
            Bhs::LogoutRequest(_) => Opcode::LogoutRequest,
            Bhs::Snack(_) => Opcode::Snack,
            Bhs::NopIn(_) => Opcode::NopIn,
            Bhs::ScsiResponse(_) => Opcode::ScsiResponse,
            Bhs::TaskMgmtResponse(_) => Opcode::TaskMgmtResponse,
            Bhs::LoginResponse(_) => Opcode::LoginResponse,
            Bhs::TextResponse(_) => Opcode::TextResponse,
            Bhs::DataIn(_) => Opcode::DataIn,
            Bhs::LogoutResponse(_) => Opcode::LogoutResponse,
            Bhs::R2t(_) => Opcode::R2t,
            Bhs::AsyncMessage(_) => Opcode::AsyncMessage,
            Bhs::Reject(_) => Opcode::Reject,
            Bhs::Unknown { opcode, .. } => Opcode::Unknown(*opcode),
        }
    }

    /// Encode into the 48 wire bytes. `data_len` and `ahs_len` (bytes, a
    /// multiple of 4) fill the length fields.
    pub fn encode(&self, ahs_len: usize, data_len: u32) -> [u8; BHS_LEN] {
        let mut b = [0u8; BHS_LEN];
        let op = self.opcode().to_u8();
        b[0] = op;
        match self {
            Bhs::NopOut(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::ScsiCommand(h) => {
                imm(&mut b, h.immediate);
                b[1] = flag(h.final_, 0x80)
                    | flag(h.read, 0x40)
                    | flag(h.write, 0x20)
                    | (h.attr as u8 & 7);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.expected_data_transfer_length);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
                b[32..48].copy_from_slice(&h.cdb);
            }
            Bhs::TaskMgmtRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80 | (h.function & 0x7f);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.referenced_task_tag);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 32, h.ref_cmd_sn);
                put32(&mut b, 36, h.exp_data_sn);
            }
            Bhs::LoginRequest(h) => {
                // Login requests always carry the I bit (§11.12).
                imm(&mut b, true);
                b[1] = flag(h.transit, 0x80)
                    | flag(h.continue_, 0x40)
                    | ((h.csg as u8) << 2)
                    | (h.nsg as u8);
                b[2] = h.version_max;
                b[3] = h.version_min;
                b[8..14].copy_from_slice(&h.isid);
                b[14..16].copy_from_slice(&h.tsih.to_be_bytes());
                put32(&mut b, 16, h.itt);
                b[20..22].copy_from_slice(&h.cid.to_be_bytes());
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::TextRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = flag(h.final_, 0x80) | flag(h.continue_, 0x40);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::DataOut(h) => {
                b[1] = flag(h.final_, 0x80);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 36, h.data_sn);
                put32(&mut b, 40, h.buffer_offset);
            }
            Bhs::LogoutRequest(h) => {
                imm(&mut b, h.immediate);
                b[1] = 0x80 | (h.reason & 0x7f);
                put32(&mut b, 16, h.itt);
                b[20..22].copy_from_slice(&h.cid.to_be_bytes());
                put32(&mut b, 24, h.cmd_sn);
                put32(&mut b, 28, h.exp_stat_sn);
            }
            Bhs::Snack(h) => {
                b[1] = 0x80 | (h.snack_type & 0x0f);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 28, h.exp_stat_sn);
                put32(&mut b, 40, h.beg_run);
                put32(&mut b, 44, h.run_length);
            }
            Bhs::NopIn(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::ScsiResponse(h) => {
                b[1] = 0x80
                    | flag(h.bidi_overflow, 0x10)
                    | flag(h.bidi_underflow, 0x08)
                    | flag(h.residual.overflow, 0x04)
                    | flag(h.residual.underflow, 0x02);
                b[2] = h.response;
                b[3] = h.status;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.snack_tag);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.exp_data_sn);
                put32(&mut b, 40, h.bidi_read_residual_count);
                put32(&mut b, 44, h.residual.count);
            }
            Bhs::TaskMgmtResponse(h) => {
                b[1] = 0x80;
                b[2] = h.response;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::LoginResponse(h) => {
                b[1] = flag(h.transit, 0x80)
                    | flag(h.continue_, 0x40)
                    | ((h.csg as u8) << 2)
                    | (h.nsg as u8);
                b[2] = h.version_max;
                b[3] = h.version_active;
                b[8..14].copy_from_slice(&h.isid);
                b[14..16].copy_from_slice(&h.tsih.to_be_bytes());
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[36] = h.status_class;
                b[37] = h.status_detail;
            }
            Bhs::TextResponse(h) => {
                b[1] = flag(h.final_, 0x80) | flag(h.continue_, 0x40);
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
            }
            Bhs::DataIn(h) => {
                b[1] = flag(h.final_, 0x80)
                    | flag(h.ack, 0x40)
                    | flag(h.residual.overflow, 0x04)
                    | flag(h.residual.underflow, 0x02)
                    | flag(h.status_present, 0x01);
                b[3] = h.status;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.data_sn);
                put32(&mut b, 40, h.buffer_offset);
                put32(&mut b, 44, h.residual.count);
            }
            Bhs::LogoutResponse(h) => {
                b[1] = 0x80;
                b[2] = h.response;
                put32(&mut b, 16, h.itt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[40..42].copy_from_slice(&h.time2wait.to_be_bytes());
                b[42..44].copy_from_slice(&h.time2retain.to_be_bytes());
            }
            Bhs::R2t(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, h.itt);
                put32(&mut b, 20, h.ttt);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.r2t_sn);
                put32(&mut b, 40, h.buffer_offset);
                put32(&mut b, 44, h.desired_length);
            }
            Bhs::AsyncMessage(h) => {
                b[1] = 0x80;
                b[8..16].copy_from_slice(&h.lun);
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                b[36] = h.event;
                b[37] = h.vcode;
                b[38..40].copy_from_slice(&h.parameter1.to_be_bytes());
                b[40..42].copy_from_slice(&h.parameter2.to_be_bytes());
                b[42..44].copy_from_slice(&h.parameter3.to_be_bytes());
            }
            Bhs::Reject(h) => {
                b[1] = 0x80;
                b[2] = h.reason;
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, h.stat_sn);
                put32(&mut b, 28, h.exp_cmd_sn);
                put32(&mut b, 32, h.max_cmd_sn);
                put32(&mut b, 36, h.data_sn);
            }
            Bhs::Unknown { raw, .. } => {
                b.copy_from_slice(&raw[..]);
            }
        }
        b[4] = (ahs_len / 4) as u8;
        let dl = data_len.min(MAX_DATA_SEGMENT);
        b[5] = (dl >> 16) as u8;
        b[6] = (dl >> 8) as u8;
        b[7] = dl as u8;
        b
    }

    /// Decode the 48 BHS bytes into the typed form.
    pub fn decode(b: &[u8; BHS_LEN]) -> Result<Bhs, PduError> {
        let op = Opcode::from_u8(b[0]);
        let immediate = b[0] & 0x40 != 0;
        let lun = || -> [u8; 8] { b[8..16].try_into().expect("8 bytes") };
        let f = b[1];
        Ok(match op {
            Opcode::NopOut => Bhs::NopOut(NopOut {
                immediate,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::ScsiCommand => Bhs::ScsiCommand(ScsiCommand {
                immediate,
                final_: f & 0x80 != 0,
                read: f & 0x40 != 0,
                write: f & 0x20 != 0,
                attr: match f & 7 {
                    0 => TaskAttr::Untagged,
                    1 => TaskAttr::Simple,
                    2 => TaskAttr::Ordered,
                    3 => TaskAttr::HeadOfQueue,
                    4 => TaskAttr::Aca,
                    _ => {
                        return Err(PduError::Malformed {
                            opcode: "SCSI Command",
                            what: "reserved task attribute",
                        })
                    }
                },
                lun: lun(),
                itt: get32(b, 16),
                expected_data_transfer_length: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
                cdb: b[32..48].try_into().expect("16 bytes"),
            }),
            Opcode::TaskMgmtRequest => Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate,
                function: f & 0x7f,
                lun: lun(),
                itt: get32(b, 16),
                referenced_task_tag: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
                ref_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
            }),
            Opcode::LoginRequest => Bhs::LoginRequest(LoginRequest {
                transit: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                csg: stage(f >> 2, "Login Request")?,
                nsg: stage(f, "Login Request")?,
                version_max: b[2],
                version_min: b[3],
                isid: b[8..14].try_into().expect("6 bytes"),
                tsih: u16::from_be_bytes([b[14], b[15]]),
                itt: get32(b, 16),
                cid: u16::from_be_bytes([b[20], b[21]]),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::TextRequest => Bhs::TextRequest(TextRequest {
                immediate,
                final_: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::DataOut => Bhs::DataOut(DataOut {
                final_: f & 0x80 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
            }),
            Opcode::LogoutRequest => Bhs::LogoutRequest(LogoutRequest {
                immediate,
                reason: f & 0x7f,
                itt: get32(b, 16),
                cid: u16::from_be_bytes([b[20], b[21]]),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            Opcode::Snack => Bhs::Snack(Snack {
                snack_type: f & 0x0f,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                beg_run: get32(b, 40),
                run_length: get32(b, 44),
            }),
            Opcode::NopIn => Bhs::NopIn(NopIn {
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::ScsiResponse => Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: f & 0x10 != 0,
                bidi_underflow: f & 0x08 != 0,
                residual: Residual {
                    overflow: f & 0x04 != 0,
                    underflow: f & 0x02 != 0,
                    count: get32(b, 44),
                },
                response: b[2],
                status: b[3],
                itt: get32(b, 16),
                snack_tag: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
                bidi_read_residual_count: get32(b, 40),
            }),
            Opcode::TaskMgmtResponse => Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::LoginResponse => Bhs::LoginResponse(LoginResponse {
                transit: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                csg: stage(f >> 2, "Login Response")?,
                nsg: stage(f, "Login Response")?,
                version_max: b[2],
                version_active: b[3],
                isid: b[8..14].try_into().expect("6 bytes"),
                tsih: u16::from_be_bytes([b[14], b[15]]),
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                status_class: b[36],
                status_detail: b[37],
            }),
            Opcode::TextResponse => Bhs::TextResponse(TextResponse {
                final_: f & 0x80 != 0,
                continue_: f & 0x40 != 0,
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            Opcode::DataIn => Bhs::DataIn(DataIn {
                final_: f & 0x80 != 0,
                ack: f & 0x40 != 0,
                status_present: f & 0x01 != 0,
                residual: Residual {
                    overflow: f & 0x04 != 0,
                    underflow: f & 0x02 != 0,
                    count: get32(b, 44),
                },
                status: b[3],
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
            }),
            Opcode::LogoutResponse => Bhs::LogoutResponse(LogoutResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                time2wait: u16::from_be_bytes([b[40], b[41]]),
                time2retain: u16::from_be_bytes([b[42], b[43]]),
            }),
            Opcode::R2t => Bhs::R2t(R2t {
                lun: lun(),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                r2t_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
                desired_length: get32(b, 44),
            }),
            Opcode::AsyncMessage => Bhs::AsyncMessage(AsyncMessage {
                lun: lun(),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                event: b[36],
                vcode: b[37],
                parameter1: u16::from_be_bytes([b[38], b[39]]),
                parameter2: u16::from_be_bytes([b[40], b[41]]),
                parameter3: u16::from_be_bytes([b[42], b[43]]),
            }),
            Opcode::Reject => Bhs::Reject(Reject {
                reason: b[2],
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
            }),
            Opcode::Unknown(opcode) => Bhs::Unknown {
                opcode,
                raw: Box::new(*b),
            },
        })
    }
}

fn stage(bits: u8, opcode: &'static str) -> Result<Stage, PduError> {
    Stage::from_bits(bits).ok_or(PduError::Malformed {
        opcode,
        what: "reserved login stage value 2",
    })
}

fn flag(on: bool, bit: u8) -> u8 {
    if on {
        bit
    } else {
        0
    }
}

fn imm(b: &mut [u8; BHS_LEN], on: bool) {
    if on {
        b[0] |= 0x40;
    }
}

fn put32(b: &mut [u8; BHS_LEN], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get32(b: &[u8; BHS_LEN], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Bytes of padding that follow `len` bytes of data to reach a 4-byte boundary.
pub fn pad_len(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// A whole PDU: header, optional AHS, data segment (without padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: Bhs,
    /// Raw AHS bytes (a multiple of 4; empty in practice for an initiator).
    pub ahs: Bytes,
    pub data: Bytes,
}

impl Pdu {
    pub fn new(bhs: Bhs) -> Pdu {
        Pdu {
            bhs,
            ahs: Bytes::new(),
            data: Bytes::new(),
        }
    }

    pub fn with_data(bhs: Bhs, data: Bytes) -> Pdu {
        Pdu {
            bhs,
            ahs: Bytes::new(),
            data,
        }
    }

    /// Encode for sending. The data segment is not copied: the returned
    /// frame references it.
    pub fn encode(&self, digests: Digests) -> WireFrame {
        debug_assert!(self.ahs.len().is_multiple_of(4) && self.ahs.len() <= 1020);
        debug_assert!(self.data.len() <= MAX_DATA_SEGMENT as usize);
        let bhs = self.bhs.encode(self.ahs.len(), self.data.len() as u32);
        let mut head = FrameHead::new(&bhs, &self.ahs);
        if digests.header {
            let crc = crc32c(&head);
            head.push_digest(crc.to_le_bytes());
        }
        let mut tail = [0u8; 7];
        let pad = pad_len(self.data.len());
        let mut tail_len = 0;
        if !self.data.is_empty() {
            tail_len = pad;
            if digests.data {
                let mut crc = crc32c::crc32c(&self.data);
                crc = crc32c::crc32c_append(crc, &[0u8; 3][..pad]);
                tail[pad..pad + 4].copy_from_slice(&crc.to_le_bytes());
                tail_len += 4;
            }
        }
        WireFrame {
            head,
            data: self.data.clone(),
            tail,
            tail_len,
        }
    }
}

/// The header part of a [`WireFrame`]: BHS, AHS and header digest. A
/// frame without AHS (every PDU rlun sends but a command with an extended
/// CDB) keeps it inline, so encoding a command allocates nothing; it reads
/// as a byte slice.
#[derive(Debug, Clone)]
pub enum FrameHead {
    /// BHS and, with header digests, the digest: `len` bytes of `buf`.
    Inline { buf: [u8; BHS_LEN + 4], len: u8 },
    /// With an AHS.
    Heap(Vec<u8>),
}

impl FrameHead {
    fn new(bhs: &[u8; BHS_LEN], ahs: &[u8]) -> FrameHead {
        if ahs.is_empty() {
            let mut buf = [0u8; BHS_LEN + 4];
            buf[..BHS_LEN].copy_from_slice(bhs);
            FrameHead::Inline {
                buf,
                len: BHS_LEN as u8,
            }
        } else {
            let mut v = Vec::with_capacity(BHS_LEN + ahs.len() + 4);
            v.extend_from_slice(bhs);
            v.extend_from_slice(ahs);
            FrameHead::Heap(v)
        }
    }

    fn push_digest(&mut self, crc: [u8; 4]) {
        match self {
            FrameHead::Inline { buf, len } => {
                let at = usize::from(*len);
                buf[at..at + 4].copy_from_slice(&crc);
                *len += 4;
            }
            FrameHead::Heap(v) => v.extend_from_slice(&crc),
        }
    }
}

impl std::ops::Deref for FrameHead {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FrameHead::Inline { buf, len } => &buf[..usize::from(*len)],
            FrameHead::Heap(v) => v,
        }
    }
}

/// An encoded PDU, in three parts for one vectored write.
#[derive(Debug, Clone)]
pub struct WireFrame {
    /// BHS, AHS and header digest.
    pub head: FrameHead,
    /// The data segment (shared, not copied).
    pub data: Bytes,
    tail: [u8; 7],
    tail_len: usize,
}

impl WireFrame {
    /// Padding and data digest that follow the data.
    pub fn tail(&self) -> &[u8] {
        &self.tail[..self.tail_len]
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.data.len() + self.tail_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one contiguous buffer (tests and small PDUs).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head);
        v.extend_from_slice(&self.data);
        v.extend_from_slice(self.tail());
        v
    }
}

/// How many bytes the PDU at the start of `buf` occupies, once at least the
/// BHS is present; `Ok(None)` when fewer than 48 bytes are there (a normal
/// outcome: wait for more). Rejects data segments over the limit before any
/// of it is buffered.
pub fn frame_length(buf: &[u8], limits: &FrameLimits) -> Result<Option<usize>, PduError> {
    if buf.len() < BHS_LEN {
        return Ok(None);
    }
    let ahs = buf[4] as usize * 4;
    let dlen = (u32::from(buf[5]) << 16) | (u32::from(buf[6]) << 8) | u32::from(buf[7]);
    if dlen > limits.max_data_segment {
        return Err(PduError::DataSegmentTooLong {
            len: dlen,
            max: limits.max_data_segment,
        });
    }
    let mut total = BHS_LEN + ahs;
    if limits.digests.header {
        total += 4;
    }
    if dlen > 0 {
        total += dlen as usize + pad_len(dlen as usize);
        if limits.digests.data {
            total += 4;
        }
    }
    Ok(Some(total))
}

/// Lengths of the PDU whose BHS starts `bhs` (at least 48 bytes): its
/// header (BHS, AHS and header digest) and its data segment (without
/// padding and digest). Rejects data segments over the limit.
pub fn header_lengths(bhs: &[u8], limits: &FrameLimits) -> Result<(usize, usize), PduError> {
    let total = frame_length(bhs, limits)?.ok_or(PduError::LengthMismatch {
        got: bhs.len(),
        expected: BHS_LEN,
    })?;
    let head = BHS_LEN + bhs[4] as usize * 4 + if limits.digests.header { 4 } else { 0 };
    let dlen = (usize::from(bhs[5]) << 16) | (usize::from(bhs[6]) << 8) | usize::from(bhs[7]);
    debug_assert!(total >= head + dlen);
    Ok((head, dlen))
}

/// Decode a whole header (exactly the header length [`header_lengths`]
/// gives), verifying its digest: the BHS and the raw AHS.
pub fn decode_header(head: &[u8], limits: &FrameLimits) -> Result<(Bhs, Bytes), PduError> {
    let (want, _) = header_lengths(head, limits)?;
    if head.len() != want {
        return Err(PduError::LengthMismatch {
            got: head.len(),
            expected: want,
        });
    }
    decode_measured_header(head, limits)
}

/// [`decode_header`] of a header whose length [`header_lengths`] already
/// checked (`head` is exactly that long): the reader measures each header
/// once, as it arrives, and does not check it again here.
pub fn decode_measured_header(head: &[u8], limits: &FrameLimits) -> Result<(Bhs, Bytes), PduError> {
    let ahs_end = BHS_LEN + head[4] as usize * 4;
    if limits.digests.header {
        let received = u32::from_le_bytes(head[ahs_end..ahs_end + 4].try_into().expect("4 bytes"));
        let computed = crc32c(&head[..ahs_end]);
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
    }
    let bhs_bytes: &[u8; BHS_LEN] = head[..BHS_LEN].try_into().expect("checked length");
    let bhs = Bhs::decode(bhs_bytes)?;
    // Nearly every PDU has no AHS: no copy (nor allocation) for it.
    let ahs = if ahs_end == BHS_LEN {
        Bytes::new()
    } else {
        Bytes::copy_from_slice(&head[BHS_LEN..ahs_end])
    };
    Ok((bhs, ahs))
}

/// Check a data digest received as the four wire bytes `wire`: CRC32C over
/// `data` and the padding bytes that followed it on the wire.
pub fn check_data_digest(data: &[u8], pad: &[u8], wire: [u8; 4]) -> Result<(), PduError> {
    let received = u32::from_le_bytes(wire);
    let computed = crc32c::crc32c_append(crc32c(data), pad);
    if received != computed {
        return Err(PduError::DataDigest { received, computed });
    }
    Ok(())
}

/// Decode one complete frame (exactly [`frame_length`] bytes), verifying
/// digests. The data segment of the result shares `frame`'s memory.
pub fn decode(frame: Bytes, limits: &FrameLimits) -> Result<Pdu, PduError> {
    let expected = frame_length(&frame, limits)?.ok_or(PduError::LengthMismatch {
        got: frame.len(),
        expected: BHS_LEN,
    })?;
    if frame.len() != expected {
        return Err(PduError::LengthMismatch {
            got: frame.len(),
            expected,
        });
    }
    let bhs_bytes: &[u8; BHS_LEN] = frame[..BHS_LEN].try_into().expect("checked length");
    let ahs_len = frame[4] as usize * 4;
    let dlen = (usize::from(frame[5]) << 16) | (usize::from(frame[6]) << 8) | usize::from(frame[7]);
    let mut at = BHS_LEN + ahs_len;
    if limits.digests.header {
        let received = u32::from_le_bytes(frame[at..at + 4].try_into().expect("4 bytes"));
        let computed = crc32c(&frame[..at]);
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
        at += 4;
    }
    let ahs = frame.slice(BHS_LEN..BHS_LEN + ahs_len);
    let data = frame.slice(at..at + dlen);
    if dlen > 0 && limits.digests.data {
        let padded_end = at + dlen + pad_len(dlen);
        let received = u32::from_le_bytes(
            frame[padded_end..padded_end + 4]
                .try_into()
                .expect("4 bytes"),
        );
        let computed = crc32c(&frame[at..padded_end]);
        if received != computed {
            return Err(PduError::DataDigest { received, computed });
        }
    }
    let bhs = Bhs::decode(bhs_bytes)?;
    Ok(Pdu { bhs, ahs, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ");
        s.split_whitespace()
            .flat_map(|w| {
                (0..w.len())
                    .step_by(2)
                    .map(move |i| u8::from_str_radix(&w[i..i + 2], 16).unwrap())
            })
            .collect()
    }

    fn roundtrip(pdu: Pdu, digests: Digests) -> Pdu {
        let wire = pdu.encode(digests).to_vec();
        let limits = FrameLimits {
            digests,
            max_data_segment: MAX_DATA_SEGMENT,
        };
        assert_eq!(frame_length(&wire, &limits).unwrap(), Some(wire.len()));
        let back = decode(Bytes::from(wire), &limits).unwrap();
        assert_eq!(back, pdu);
        back
    }

    #[test]
    fn scsi_read10_command_encodes_to_the_annotated_bytes() {
        let pdu = Pdu::new(Bhs::ScsiCommand(ScsiCommand {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            attr: TaskAttr::Simple,
            lun: [0, 1, 0, 0, 0, 0, 0, 0],
            itt: 0x0000_0007,
            expected_data_transfer_length: 4096,
            cmd_sn: 0x10,
            exp_stat_sn: 0x20,
            cdb: [0x28, 0, 0, 0, 0, 8, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0],
        }));
        let expected = hex("01                // opcode SCSI Command, I=0
             c1                // F=1 R=1 W=0 ATTR=Simple
             0000              // reserved
             00                // TotalAHSLength
             000000            // DataSegmentLength
             0001000000000000  // LUN 1 (peripheral addressing)
             00000007          // ITT
             00001000          // Expected Data Transfer Length 4096
             00000010          // CmdSN
             00000020          // ExpStatSN
             28000000000800000800000000000000 // CDB READ(10) lba 8 len 8");
        assert_eq!(pdu.encode(Digests::default()).to_vec(), expected);
        roundtrip(pdu, Digests::default());
    }

    #[test]
    fn login_request_carries_immediate_bit_stages_and_isid() {
        let pdu = Pdu::with_data(
            Bhs::LoginRequest(LoginRequest {
                transit: true,
                continue_: false,
                csg: Stage::Operational,
                nsg: Stage::FullFeature,
                version_max: 0,
                version_min: 0,
                isid: [0x80, 0x12, 0x34, 0x56, 0x00, 0x01],
                tsih: 0,
                itt: 0,
                cid: 0,
                cmd_sn: 1,
                exp_stat_sn: 0,
            }),
            Bytes::from_static(b"MaxBurstLength=262144\0"),
        );
        let wire = pdu.encode(Digests::default()).to_vec();
        let expected_head = hex("43           // I=1, opcode Login Request
             87           // T=1 C=0 CSG=1 (operational) NSG=3 (full feature)
             00 00        // version max / min
             00           // TotalAHSLength
             000016       // DataSegmentLength 22
             801234560001 // ISID: type 2 (random), A/B/C/D
             0000         // TSIH 0 (new session)
             00000000     // ITT
             0000 0000    // CID, reserved
             00000001     // CmdSN
             00000000     // ExpStatSN
             00000000000000000000000000000000 // reserved");
        assert_eq!(&wire[..48], &expected_head[..]);
        // 22 data bytes padded to 24.
        assert_eq!(wire.len(), 48 + 24);
        assert_eq!(&wire[70..72], &[0, 0]);
        roundtrip(pdu, Digests::default());
    }

    #[test]
    fn data_in_with_status_decodes_flags_residual_and_offset() {
        let mut wire = hex("25        // opcode SCSI Data-In
             83        // F=1, U=1 (underflow), S=1 (status present)
             00        // reserved
             00        // status GOOD
             00        // TotalAHSLength
             000004    // DataSegmentLength 4
             0000000000000000 // LUN
             0000002a  // ITT 42
             ffffffff  // TTT
             00000005  // StatSN
             00000006  // ExpCmdSN
             00000025  // MaxCmdSN
             00000000  // DataSN
             00000200  // Buffer Offset 512
             00000100  // Residual Count 256");
        wire.extend_from_slice(b"abcd");
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        let Bhs::DataIn(h) = &pdu.bhs else {
            panic!("expected Data-In, got {:?}", pdu.bhs)
        };
        assert!(h.final_ && h.status_present && !h.ack);
        assert_eq!(
            h.residual,
            Residual {
                underflow: true,
                overflow: false,
                count: 256
            }
        );
        assert_eq!((h.itt, h.stat_sn, h.max_cmd_sn), (42, 5, 0x25));
        assert_eq!(h.buffer_offset, 512);
        assert_eq!(&pdu.data[..], b"abcd");
    }

    #[test]
    fn r2t_decodes_offset_and_desired_length() {
        let wire = hex("31 80 0000 00 000000    // R2T, F=1, no data
             0000000000000000        // LUN
             00000009                // ITT
             00000abc                // TTT
             00000001 00000002 00000022 // StatSN ExpCmdSN MaxCmdSN
             00000003                // R2TSN
             00010000                // Buffer Offset 65536
             00040000                // Desired Data Transfer Length 262144");
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        assert_eq!(
            pdu.bhs,
            Bhs::R2t(R2t {
                lun: [0; 8],
                itt: 9,
                ttt: 0xabc,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 0x22,
                r2t_sn: 3,
                buffer_offset: 65536,
                desired_length: 262144,
            })
        );
    }

    #[test]
    fn login_response_decodes_status_class_and_detail() {
        let wire = hex(
            "23 00 00 00 00 000000   // Login Response, T=0, CSG/NSG 0, versions 0
             801234560001 0000       // ISID, TSIH
             00000000 00000000       // ITT, reserved
             00000000 00000001 00000001 // StatSN ExpCmdSN MaxCmdSN
             02 03 0000              // Status-Class 2 (initiator error), Detail 3 (not found)
             0000000000000000",
        );
        let pdu = decode(Bytes::from(wire), &FrameLimits::default()).unwrap();
        let Bhs::LoginResponse(h) = pdu.bhs else {
            panic!("expected login response")
        };
        assert_eq!((h.status_class, h.status_detail), (2, 3));
    }

    #[test]
    fn every_opcode_roundtrips_with_both_digests() {
        let lun = [0, 2, 0, 0, 0, 0, 0, 0];
        let pdus = vec![
            Bhs::NopOut(NopOut {
                immediate: true,
                lun,
                itt: 1,
                ttt: RESERVED_TAG,
                cmd_sn: 3,
                exp_stat_sn: 4,
            }),
            Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate: true,
                function: tmf::ABORT_TASK,
                lun,
                itt: 5,
                referenced_task_tag: 6,
                cmd_sn: 7,
                exp_stat_sn: 8,
                ref_cmd_sn: 9,
                exp_data_sn: 10,
            }),
            Bhs::TextRequest(TextRequest {
                immediate: false,
                final_: true,
                continue_: false,
                lun: [0; 8],
                itt: 11,
                ttt: RESERVED_TAG,
                cmd_sn: 12,
                exp_stat_sn: 13,
            }),
            Bhs::DataOut(DataOut {
                final_: true,
                lun,
                itt: 14,
                ttt: 15,
                exp_stat_sn: 16,
                data_sn: 17,
                buffer_offset: 18,
            }),
            Bhs::LogoutRequest(LogoutRequest {
                immediate: true,
                reason: logout_reason::CLOSE_SESSION,
                itt: 19,
                cid: 1,
                cmd_sn: 20,
                exp_stat_sn: 21,
            }),
            Bhs::Snack(Snack {
                snack_type: 1,
                lun,
                itt: 22,
                ttt: 23,
                exp_stat_sn: 24,
                beg_run: 25,
                run_length: 26,
            }),
            Bhs::NopIn(NopIn {
                lun,
                itt: RESERVED_TAG,
                ttt: 27,
                stat_sn: 28,
                exp_cmd_sn: 29,
                max_cmd_sn: 30,
            }),
            Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: false,
                bidi_underflow: true,
                residual: Residual {
                    underflow: false,
                    overflow: true,
                    count: 31,
                },
                response: 0,
                status: 2,
                itt: 32,
                snack_tag: 0,
                stat_sn: 33,
                exp_cmd_sn: 34,
                max_cmd_sn: 35,
                exp_data_sn: 36,
                bidi_read_residual_count: 37,
            }),
            Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response: 0,
                itt: 38,
                stat_sn: 39,
                exp_cmd_sn: 40,
                max_cmd_sn: 41,
            }),
            Bhs::TextResponse(TextResponse {
                final_: false,
                continue_: true,
                lun: [0; 8],
                itt: 42,
                ttt: 43,
                stat_sn: 44,
                exp_cmd_sn: 45,
                max_cmd_sn: 46,
            }),
            Bhs::LogoutResponse(LogoutResponse {
                response: 0,
                itt: 47,
                stat_sn: 48,
                exp_cmd_sn: 49,
                max_cmd_sn: 50,
                time2wait: 2,
                time2retain: 20,
            }),
            Bhs::AsyncMessage(AsyncMessage {
                lun,
                stat_sn: 51,
                exp_cmd_sn: 52,
                max_cmd_sn: 53,
                event: async_event::LOGOUT_REQUESTED,
                vcode: 0,
                parameter1: 0,
                parameter2: 2,
                parameter3: 20,
            }),
            Bhs::Reject(Reject {
                reason: 0x04,
                stat_sn: 54,
                exp_cmd_sn: 55,
                max_cmd_sn: 56,
                data_sn: 0,
            }),
        ];
        for bhs in pdus {
            for digests in [
                Digests::default(),
                Digests {
                    header: true,
                    data: true,
                },
            ] {
                roundtrip(Pdu::new(bhs.clone()), digests);
                roundtrip(
                    Pdu::with_data(bhs.clone(), Bytes::from_static(b"odd")),
                    digests,
                );
            }
        }
    }

    #[test]
    fn header_with_ahs_and_digest_encodes_and_decodes_in_both_head_forms() {
        let bhs = Bhs::NopIn(NopIn {
            lun: [0; 8],
            itt: 7,
            ttt: RESERVED_TAG,
            stat_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 1,
        });
        for digests in [
            Digests::default(),
            Digests {
                header: true,
                data: true,
            },
        ] {
            let digest = if digests.header { 4 } else { 0 };
            // Without AHS the head is inline; with one it is on the heap.
            let plain = Pdu::with_data(bhs.clone(), Bytes::from_static(b"abc"));
            let f = plain.encode(digests);
            assert!(matches!(f.head, FrameHead::Inline { .. }));
            assert_eq!(f.head.len(), BHS_LEN + digest);
            roundtrip(plain, digests);
            let with_ahs = Pdu {
                bhs: bhs.clone(),
                ahs: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
                data: Bytes::from_static(b"abc"),
            };
            let f = with_ahs.encode(digests);
            assert!(matches!(f.head, FrameHead::Heap(_)));
            assert_eq!(f.head.len(), BHS_LEN + 8 + digest);
            assert_eq!(&f.head[BHS_LEN..BHS_LEN + 8], &[1, 2, 3, 4, 5, 6, 7, 8]);
            roundtrip(with_ahs, digests);
        }
    }

    #[test]
    fn corrupted_header_digest_is_detected() {
        let pdu = Pdu::new(Bhs::NopIn(NopIn {
            lun: [0; 8],
            itt: RESERVED_TAG,
            ttt: 1,
            stat_sn: 1,
            exp_cmd_sn: 1,
            max_cmd_sn: 1,
        }));
        let digests = Digests {
            header: true,
            data: false,
        };
        let mut wire = pdu.encode(digests).to_vec();
        wire[20] ^= 1;
        let err = decode(
            Bytes::from(wire),
            &FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        )
        .unwrap_err();
        assert!(matches!(err, PduError::HeaderDigest { .. }), "{err}");
    }

    #[test]
    fn corrupted_data_digest_is_detected() {
        let pdu = Pdu::with_data(
            Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt: 1,
                ttt: RESERVED_TAG,
                stat_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 1,
            }),
            Bytes::from_static(b"ping data"),
        );
        let digests = Digests {
            header: true,
            data: true,
        };
        let mut wire = pdu.encode(digests).to_vec();
        wire[52] ^= 0x80;
        let err = decode(
            Bytes::from(wire),
            &FrameLimits {
                digests,
                max_data_segment: 8192,
            },
        )
        .unwrap_err();
        assert!(matches!(err, PduError::DataDigest { .. }), "{err}");
    }

    #[test]
    fn oversized_data_segment_is_refused_before_buffering() {
        let mut wire = [0u8; 48];
        wire[0] = 0x25;
        wire[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
        let err = frame_length(&wire, &FrameLimits::default()).unwrap_err();
        assert_eq!(
            err,
            PduError::DataSegmentTooLong {
                len: 0xff_ffff,
                max: 8192
            }
        );
    }

    #[test]
    fn fewer_than_48_bytes_is_incomplete_not_an_error() {
        assert_eq!(frame_length(&[0u8; 47], &FrameLimits::default()), Ok(None));
    }

    #[test]
    fn unknown_opcode_is_kept_raw() {
        let mut wire = [0u8; 48];
        wire[0] = 0x1c;
        let pdu = decode(Bytes::copy_from_slice(&wire), &FrameLimits::default()).unwrap();
        assert_eq!(pdu.bhs.opcode(), Opcode::Unknown(0x1c));
    }

    #[test]
    fn reserved_login_stage_is_malformed() {
        let mut wire = [0u8; 48];
        wire[0] = 0x23;
        wire[1] = 0x80 | (2 << 2) | 3;
        let err = decode(Bytes::copy_from_slice(&wire), &FrameLimits::default()).unwrap_err();
        assert!(matches!(err, PduError::Malformed { .. }));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                                hd in any::<bool>(), dd in any::<bool>()) {
            let limits = FrameLimits { digests: Digests { header: hd, data: dd }, max_data_segment: 256 };
            if let Ok(Some(n)) = frame_length(&bytes, &limits) {
                if n <= bytes.len() {
                    let _ = decode(Bytes::copy_from_slice(&bytes[..n]), &limits);
                }
            }
            let _ = decode(Bytes::from(bytes), &limits);
        }
    }
}
