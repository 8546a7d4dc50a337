//! The typed Basic Header Segment (RFC 7143 §11.2.1): one struct per
//! opcode with the fields of its BHS (§11.3–§11.19), the enum [`Bhs`] over
//! them, the opcode, login stage and task attribute values, the function,
//! reason and event codes some headers carry, the limits of the wire format
//! and [`PduError`], what can be wrong with a received PDU.
//!
//! The wire layout of each header is in `codec.rs`, framing and digests in
//! `frame.rs`.

use thiserror::Error;

/// Length of the Basic Header Segment.
pub const BHS_LEN: usize = 48;
/// The reserved Initiator Task Tag value (§11.2.1.8): "no task".
pub const RESERVED_TAG: u32 = 0xffff_ffff;
/// Largest value of the 24-bit DataSegmentLength field.
pub const MAX_DATA_SEGMENT: u32 = 0x00ff_ffff;

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
    /// The stage a 2-bit CSG/NSG field names; `None` for the reserved value 2.
    pub(super) fn from_bits(v: u8) -> Option<Stage> {
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
}
