//! What a driver of [`Connection`]
//! sees: the parameters of the Full Feature Phase (RFC 7143 §4.2.5,
//! negotiated at login), the SCSI commands it submits and their results,
//! the [`Event`]s it drains, the PDUs it sends ([`Transmit`], with a direct
//! command's buffers for an iSER transport, RFC 7145), the errors —
//! [`TaskError`] fails one task, [`ProtocolError`] the connection (§7.1.5)
//! — and RFC 1982 serial-number arithmetic on CmdSN and StatSN (§4.2.2).
//!
//! [`Connection`]: crate::proto::connection::Connection

use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::error::ErrorKind;
use crate::proto::pdu::{Pdu, Residual, TaskAttr};

/// Parameters of the Full Feature Phase, as negotiated at login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureParams {
    pub immediate_data: bool,
    pub initial_r2t: bool,
    pub first_burst_length: u32,
    pub max_burst_length: u32,
    /// Largest data segment we may send (the target's MaxRecvDataSegmentLength).
    pub max_xmit_data_segment_length: u32,
    /// Largest data segment the target may send us (our declaration).
    pub max_recv_data_segment_length: u32,
    /// Most commands we keep in flight, whatever the window allows.
    pub queue_depth: u32,
    /// Send a NOP-Out ping after this long without hearing from the target.
    pub nop_interval: Option<Duration>,
    /// Declare the connection dead when a ping is unanswered for this long.
    pub nop_timeout: Duration,
    /// Whether Data-In/R2T/Data-Out carry the data or the transport moves
    /// it directly (see [`DataMovement`]).
    pub data_movement: DataMovement,
}

impl Default for FeatureParams {
    fn default() -> Self {
        FeatureParams {
            immediate_data: true,
            initial_r2t: true,
            first_burst_length: 65536,
            max_burst_length: 262144,
            max_xmit_data_segment_length: 8192,
            max_recv_data_segment_length: 262144,
            queue_depth: 128,
            nop_interval: Some(Duration::from_secs(5)),
            nop_timeout: Duration::from_secs(10),
            data_movement: DataMovement::InBand,
        }
    }
}

/// How SCSI data moves on the connection (the transport decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMovement {
    /// Data-In, R2T and Data-Out PDUs carry the data (iSCSI on TCP): the
    /// core reassembles reads and answers each R2T with Data-Out.
    #[default]
    InBand,
    /// The target moves the data itself (iSER, RFC 7145: RDMA Write for
    /// our reads, RDMA Read for our writes). The core hands the transport
    /// each command's buffers with its SCSI Command PDU
    /// ([`Transmit::direct`]); immediate data and unsolicited Data-Out are
    /// still sent as PDUs, and a Data-In or R2T for such a task is a
    /// protocol error.
    Direct,
}

/// A PDU the core wants sent, with what a transport needs to know about
/// it besides its bytes: what kind of PDU it is and, for a direct command,
/// the task's buffers.
#[derive(Debug, Clone)]
pub struct Transmit {
    pub pdu: Pdu,
    pub kind: TransmitKind,
    /// Set on a SCSI Command PDU when the data moves directly (never with
    /// [`DataMovement::InBand`]).
    pub direct: Option<DirectBuffers>,
}

/// What a PDU to send is, as far as a transport cares: whether its data
/// segment is SCSI write data (which a direct transport sends from the
/// caller's registered buffer) or protocol text and the like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitKind {
    /// A SCSI Command; its data segment, if any, is immediate write data.
    ScsiCommand,
    /// A SCSI Data-Out; its data segment is write data.
    DataOut,
    /// Anything else: login, text, NOP-Out, task management, logout.
    Control,
}

impl From<Pdu> for Transmit {
    /// A control PDU (login, text…) with no buffers of a task.
    fn from(pdu: Pdu) -> Self {
        Transmit {
            pdu,
            kind: TransmitKind::Control,
            direct: None,
        }
    }
}

/// Something a transport keeps alive for exactly as long as a task lives:
/// a direct transport's registration of the task's buffers with its
/// device. The transport hands it to the core right after encoding the
/// task's command ([`Connection::hold`]); the core drops it when the task
/// ends (its final response, task management ending it, a failure, or the
/// core itself being dropped), before the task's buffers, so no
/// bookkeeping of task lifetimes is needed outside the core.
///
/// [`Connection::hold`]: crate::proto::connection::Connection::hold
pub type TaskHold = Box<dyn std::any::Any + Send>;

/// The buffers of one SCSI command in [`DataMovement::Direct`] mode, for
/// the transport to register and name in its header (iSER: Read STag/VA,
/// Write STag/VA). The memory stays owned by the core's task until the
/// task completes (see [`ReadRegion`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectBuffers {
    /// The command's Initiator Task Tag (its completion names it).
    pub itt: u32,
    /// Where the target writes the read data, from its offset 0.
    pub read: Option<ReadRegion>,
    /// What the target fetches of the write data; `None` when the
    /// immediate and unsolicited data already carried all of it.
    pub write: Option<WriteRegion>,
}

/// The read buffer of a direct task: `len` bytes at address `addr`.
///
/// The core allocated these bytes (or took them from the caller) and keeps
/// them, neither moved nor resized, in the task until the task completes
/// or the core is dropped; the result hands them back to the caller. Only
/// a direct transport dereferences the address (to register it with the
/// RDMA device), under that guarantee.
///
/// Only the core makes one (its fields are private), so a region a
/// transport holds always names memory of a live direct task: that is what
/// lets `rlun-sys` register it without the caller promising anything more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRegion {
    pub(crate) addr: usize,
    pub(crate) len: u32,
}

impl ReadRegion {
    /// The address of the buffer's first byte.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the buffer is empty (a read of 0 bytes has none at all).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The write data of a direct task that the target fetches itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRegion {
    /// The command's whole write buffer (shared, not copied).
    pub data: Bytes,
    /// The first byte not sent as immediate or unsolicited data: the
    /// target reads `data[offset..]` into its buffer at `offset`. (LIO
    /// reads from the write base offset as given, so the transport must
    /// point it here, not at `data[0]`.)
    pub offset: u32,
}

/// The command and status sequence numbers of a connection (RFC 7143
/// §4.2.2.1, §4.2.2.2): where login left them ([`Connection::new`]) or
/// where they are now ([`Connection::numbers`]).
///
/// [`Connection::new`]: crate::proto::connection::Connection::new
/// [`Connection::numbers`]: crate::proto::connection::Connection::numbers
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceNumbers {
    /// CmdSN of the next non-immediate command.
    pub cmd_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Handle for a task submitted to the connection. The ids the core
/// allocates are unique for the connection's life and count up from 1; ids with
/// [`CALLER_TASK_IDS`] set are chosen by the caller ([`Connection::submit_as`]).
///
/// [`Connection::submit_as`]: crate::proto::connection::Connection::submit_as
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// The bit that marks a [`TaskId`] chosen by the caller
/// ([`Connection::submit_as`]); the core's own ids never reach it.
///
/// [`Connection::submit_as`]: crate::proto::connection::Connection::submit_as
pub const CALLER_TASK_IDS: u64 = 1 << 63;

/// A SCSI command to execute.
#[derive(Debug, Clone)]
pub struct CommandRequest {
    /// The 8-byte LUN field (SAM encoding).
    pub lun: [u8; 8],
    /// CDB, zero-padded to 16 bytes.
    pub cdb: [u8; 16],
    /// Data to write; empty when the command moves no data out.
    pub data_out: Bytes,
    /// Bytes expected from the target; 0 when the command reads nothing.
    pub read_len: u32,
    pub attr: TaskAttr,
}

/// What the target answered to a SCSI command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandResult {
    /// SCSI status byte (SAM-5): 0x00 GOOD, 0x02 CHECK CONDITION…
    pub status: u8,
    /// Sense data (without the 2-byte SenseLength prefix), if any.
    pub sense: Option<Bytes>,
    /// Read data actually received.
    pub data: Bytes,
    pub residual: Residual,
}

/// Why a task did not complete with a SCSI status.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TaskError {
    #[error("target failure: iSCSI response code {0:#04x}")]
    TargetFailure(u8),
    #[error("target rejected the request: {0}")]
    Rejected(&'static str),
    #[error("task aborted")]
    Aborted,
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    #[error("command does not fit in a PDU: {0}")]
    Invalid(&'static str),
    /// Aborted before it could be sent: the target kept the command window
    /// closed (MaxCmdSN below the next CmdSN, §4.2.2.1) until the command's
    /// deadline.
    #[error(
        "not sent: the target kept its command window closed (next CmdSN {cmd_sn}, \
         MaxCmdSN {max_cmd_sn})"
    )]
    WindowClosed { cmd_sn: u32, max_cmd_sn: u32 },
}

impl TaskError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TaskError::ConnectionLost(_) => ErrorKind::Unreachable,
            TaskError::TargetFailure(_)
            | TaskError::Rejected(_)
            | TaskError::Aborted
            | TaskError::Invalid(_)
            | TaskError::WindowClosed { .. } => ErrorKind::Io,
        }
    }
}

/// The target broke the protocol or stopped answering: drop the connection.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("target sent {what} for unknown task tag {itt:#010x}")]
    UnknownTask { what: &'static str, itt: u32 },
    #[error("Data-In for task {itt:#010x} out of order: DataSN {got}, expected {expected}")]
    DataSn { itt: u32, got: u32, expected: u32 },
    #[error("Data-In for task {itt:#010x} at offset {offset}+{len} overruns the {expected}-byte read buffer")]
    DataOverrun {
        itt: u32,
        offset: u32,
        len: u32,
        expected: u32,
    },
    #[error("Data-In for task {itt:#010x} at offset {offset}, expected the next in-order offset {expected} (DataPDUInOrder=Yes)")]
    DataOffset {
        itt: u32,
        offset: u32,
        expected: u32,
    },
    #[error("R2T for task {itt:#010x} asks for bytes {offset}+{len} of a {total}-byte write")]
    BadR2t {
        itt: u32,
        offset: u32,
        len: u32,
        total: u32,
    },
    #[error("target sent {what} for task {itt:#010x}, whose data the transport moves directly")]
    DirectTaskData { what: &'static str, itt: u32 },
    #[error("target sent a {0} PDU, which is not valid in the full feature phase")]
    UnexpectedPdu(&'static str),
    #[error("target sent unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("target sent a {what} with a malformed data segment")]
    MalformedData { what: &'static str },
    #[error("target did not answer a NOP-Out ping within {0:?}")]
    PingTimeout(Duration),
}

/// Task management outcome (§11.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfOutcome {
    Complete,
    TaskDoesNotExist,
    LunDoesNotExist,
    TaskStillAllegiant,
    NotSupported,
    Rejected,
    Other(u8),
}

impl TmfOutcome {
    /// The outcome a Task Management Function Response's code names.
    pub(super) fn from_code(c: u8) -> TmfOutcome {
        match c {
            0 => TmfOutcome::Complete,
            1 => TmfOutcome::TaskDoesNotExist,
            2 => TmfOutcome::LunDoesNotExist,
            3 => TmfOutcome::TaskStillAllegiant,
            5 => TmfOutcome::NotSupported,
            255 => TmfOutcome::Rejected,
            o => TmfOutcome::Other(o),
        }
    }
}

/// Things the connection reports to its driver.
#[derive(Debug)]
pub enum Event {
    /// A SCSI command finished (with any status) or failed.
    Command {
        id: TaskId,
        result: Result<CommandResult, TaskError>,
    },
    /// A text exchange finished: the whole (reassembled) text data.
    Text {
        id: TaskId,
        result: Result<Bytes, TaskError>,
    },
    /// A task management function finished.
    TaskMgmt {
        id: TaskId,
        result: Result<TmfOutcome, TaskError>,
    },
    /// A NOP-Out ping we sent was answered.
    Pong { id: TaskId, rtt: Duration },
    /// Logout finished (response code 0 = success).
    Logout {
        id: TaskId,
        result: Result<u8, TaskError>,
    },
    /// An Asynchronous Message from the target (§11.9).
    Async {
        event: u8,
        vcode: u8,
        parameters: [u16; 3],
        data: Bytes,
    },
    /// A Reject that names no task of ours (logged by the driver).
    Reject { reason: &'static str },
}

/// Most text one Text exchange may return (a SendTargets answer from a big
/// array is far smaller); more ends the connection.
pub const MAX_TEXT_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Most Text Responses one exchange may take. With the 256 KiB data
/// segments rlun declares, 16 MiB takes 64; targets using 16 KiB segments
/// still fit. A target that keeps asking to continue is cut off here.
pub const MAX_TEXT_RESPONSES: u32 = 1024;

/// RFC 1982 serial-number "less than" on 32-bit sequence numbers (§4.2.2.1).
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// RFC 1982 "less than or equal".
pub fn sn_lte(a: u32, b: u32) -> bool {
    a == b || sn_lt(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_number_comparison_wraps() {
        assert!(sn_lt(0xffff_fff0, 5));
        assert!(!sn_lt(5, 0xffff_fff0));
        assert!(sn_lte(7, 7));
    }
}
