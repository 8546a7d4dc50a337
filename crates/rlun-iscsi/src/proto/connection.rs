//! Full Feature Phase of one iSCSI connection, sans-IO (RFC 7143 §3.2, §4.2).
//!
//! [`Connection`] owns everything a logged-in connection has to track: the
//! Initiator Task Tags in use, the command window (CmdSN, ExpCmdSN, MaxCmdSN,
//! §3.2.2.1), ExpStatSN (§3.2.2.2), Data-In reassembly with DataSN checks
//! (§11.7.5), R2T → Data-Out sequences (§11.8) within MaxBurstLength,
//! immediate and unsolicited data within FirstBurstLength (§3.2.4.2), NOP
//! keepalives in both directions (§11.18/§11.19), Text exchanges with
//! continuation (SendTargets, §11.10), task management and logout.
//!
//! It does no I/O and reads no clock. The driver feeds it:
//! - [`Connection::submit`] / [`Connection::submit_text`] / [`Connection::abort_task`]…
//!   for work from above;
//! - [`Connection::handle_pdu`] for every PDU received, with the current time;
//! - [`Connection::handle_timeout`] when the instant from
//!   [`Connection::poll_timeout`] has passed;
//!
//! and drains [`Connection::poll_transmit`] (PDUs to send, in order) and
//! [`Connection::poll_event`] (completed tasks and notable target events).
//!
//! # Data movement
//!
//! [`FeatureParams::data_movement`] says who moves SCSI data. In-band (TCP)
//! the core reassembles Data-In and answers R2Ts with Data-Out. Direct
//! (iSER) the target moves the data by RDMA: [`Connection::poll_transmit`]
//! hands the transport each SCSI Command PDU together with the task's
//! buffers ([`DirectBuffers`]: the read destination and the write data
//! from the first byte not sent as immediate or unsolicited data), the
//! core still sends immediate data and unsolicited Data-Out, a Data-In or
//! R2T for such a task is a protocol error, and the SCSI Response completes
//! it with the data already in place (length from the residual).
//!
//! In both modes a command's buffers belong to its task until the task
//! completes (final response, task management, `fail_all`) or the core is
//! dropped; the caller's future going away changes nothing. The read
//! buffer comes back in [`CommandResult::data`].
//!
//! An `Err` from `handle_pdu` or `handle_timeout` means the target broke the
//! protocol or stopped answering: at ErrorRecoveryLevel 0 the connection must
//! be dropped (§7.1.5); [`Connection::fail_all`] then completes every task with
//! the error so no caller waits forever.
//!
//! # Resource bounds
//!
//! Nothing a target sends makes the core hold more than the caller asked
//! for plus these fixed amounts (tests/hostile_bounds.rs checks each against
//! a hostile target, with rlun's peak RSS under 64 MiB):
//!
//! - a PDU's data segment is at most the MaxRecvDataSegmentLength rlun
//!   declared (256 KiB by default, 16 MiB - 1 at most), refused from the
//!   header before the data is read (`transport`);
//! - Data-In lands only in the read buffer of its command, whose size the
//!   caller chose: data past it ([`ProtocolError::DataOverrun`]), out of
//!   order ([`ProtocolError::DataSn`], [`ProtocolError::DataOffset`]) or for
//!   an unknown task ends the connection;
//! - an R2T may only ask for bytes of the write, at most MaxBurstLength of
//!   them ([`ProtocolError::BadR2t`]): Data-Out never reads past the
//!   caller's buffer;
//! - one Text exchange keeps at most [`MAX_TEXT_RESPONSE_BYTES`] (16 MiB)
//!   of text over at most [`MAX_TEXT_RESPONSES`] (1024) responses;
//! - StatSN, ExpCmdSN and MaxCmdSN that go backwards are ignored
//!   (§3.2.2.1, §4.2.2.1); a command window that never reopens holds
//!   commands back only until their deadline: aborted unsent, they fail
//!   with [`TaskError::WindowClosed`] after the recovery layer's retries;
//! - tasks in flight are bounded by the queue depth, and an ITT is freed
//!   when its task completes.

use std::collections::VecDeque;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use super::idmap::SlotTable;
use crate::error::ErrorKind;
use crate::iobuf::{IoBuf, Pool};

use super::pdu::{
    logout_reason, tmf, Bhs, DataIn, DataOut, LogoutRequest, NopOut, Pdu, Residual, ScsiCommand,
    TaskAttr, TaskMgmtRequest, TextRequest, RESERVED_TAG,
};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRegion {
    pub addr: usize,
    pub len: u32,
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

/// Sequence numbers at the moment login completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionNumbers {
    /// CmdSN of the next non-immediate command.
    pub cmd_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_stat_sn: u32,
}

/// Handle for a task submitted to the session. The ids the core allocates
/// are unique for the session's life and count up from 1; ids with
/// [`CALLER_TASK_IDS`] set are chosen by the caller ([`Connection::submit_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// The bit that marks a [`TaskId`] chosen by the caller
/// ([`Connection::submit_as`]); the core's own ids never reach it.
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
    /// closed (MaxCmdSN below the next CmdSN, §3.2.2.1) until the command's
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
    fn from_code(c: u8) -> TmfOutcome {
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

/// Things the session reports to its driver.
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

#[derive(Debug)]
enum TaskKind {
    Command(CommandTask),
    Text {
        received: BytesMut,
        /// Text Responses received so far for this exchange.
        responses: u32,
    },
    TaskMgmt {
        function: u8,
        lun: [u8; 8],
        ref_itt: u32,
    },
    Ping {
        sent: Instant,
    },
    Logout,
}

#[derive(Debug)]
struct CommandTask {
    /// What the transport keeps for this task ([`TaskHold`]). The first
    /// field, so it is dropped before the buffers it may name.
    hold: Option<TaskHold>,
    lun: [u8; 8],
    /// The caller's write data, held (shared, not copied) until the final
    /// response: in-band it feeds the Data-Out for each R2T, direct the
    /// target reads it by RDMA.
    data_out: Bytes,
    read_len: u32,
    /// The read destination, owned by the task until its final response
    /// and then handed to the caller in [`CommandResult::data`]. In-band
    /// the receive path reads each Data-In payload straight into it
    /// ([`Lent`]); direct it is `read_len` long from submission on, and
    /// the transport has its address ([`ReadRegion`]).
    read_buf: ReadBuf,
    received: u32,
    next_data_sn: u32,
    /// Status delivered in the final Data-In (S bit).
    status_from_data_in: Option<(u8, Residual)>,
    /// The data moves directly: no Data-In and no R2T may name this task.
    direct: bool,
    /// The in-band read buffer is lent to the receive path ([`Lent`]),
    /// which is reading one Data-In payload straight into it.
    lent: bool,
}

/// Where a command's read data goes: in-band a buffer of the read length,
/// taken from a pool when the first Data-In arrives
/// ([`crate::iobuf::read_pool`]; empty until then), that the receive path
/// reads each payload straight into ([`Connection::lend_read_buffer`]), or a
/// PDU's data segment is copied into ([`Connection::handle_pdu`]); direct a
/// fixed-address buffer (from the registered pool when the transport
/// enabled it, see [`crate::iobuf`]) that the target writes by RDMA.
///
/// A pooled in-band buffer is not zeroed: it holds whatever an earlier
/// buffer left. That is safe because Data-In fills it strictly in order
/// from offset 0 (see [`check_data_in`]) and the caller gets exactly the
/// `received` bytes, never more, whatever the residual says: a short
/// Data-In sequence yields a short result (which a client reports
/// as a short transfer), never bytes the target did not send.
#[derive(Debug)]
enum ReadBuf {
    InBand(IoBuf),
    Direct(IoBuf),
}

impl ReadBuf {
    fn into_bytes(self, len: usize) -> Bytes {
        match self {
            ReadBuf::InBand(mut b) | ReadBuf::Direct(mut b) => {
                b.truncate(len);
                b.into_bytes()
            }
        }
    }
}

/// A Data-In payload on its way into a command's read buffer.
enum Payload {
    /// In a PDU's data segment: copied into the buffer.
    Copy(Bytes),
    /// Already read into the buffer by the receive path.
    Placed(Lent),
}

/// Whether `h` with a `len`-byte payload is the next Data-In of in-band
/// command `c`, inside its read buffer (RFC 7143 §11.7).
fn check_data_in(c: &CommandTask, h: &DataIn, len: u32) -> Result<(), ProtocolError> {
    if c.direct {
        return Err(ProtocolError::DirectTaskData {
            what: "Data-In",
            itt: h.itt,
        });
    }
    if h.data_sn != c.next_data_sn {
        return Err(ProtocolError::DataSn {
            itt: h.itt,
            got: h.data_sn,
            expected: c.next_data_sn,
        });
    }
    let end = h.buffer_offset as u64 + len as u64;
    if end > c.read_len as u64 {
        return Err(ProtocolError::DataOverrun {
            itt: h.itt,
            offset: h.buffer_offset,
            len,
            expected: c.read_len,
        });
    }
    // rlun always offers DataPDUInOrder=Yes and DataSequenceInOrder=Yes,
    // which the OR rule makes the outcome whatever the target answers
    // (§13.19, §13.20): the Data-In PDUs of a read cover it in order, each
    // starting where the previous one ended. Anything else (a gap, an
    // overlap, a resend) would leave holes or stale bytes in the result,
    // so it ends the connection.
    if h.buffer_offset != c.received {
        return Err(ProtocolError::DataOffset {
            itt: h.itt,
            offset: h.buffer_offset,
            expected: c.received,
        });
    }
    if h.status_present && !h.final_ {
        return Err(ProtocolError::MalformedData {
            what: "Data-In with S bit but without F bit",
        });
    }
    Ok(())
}

/// The read buffer of one in-band command, lent to the receive path while
/// one Data-In payload is read straight into it
/// ([`Connection::lend_read_buffer`]). It holds the buffer itself, not a
/// reference: whatever happens to the command meanwhile (abort, timeout,
/// connection loss), the payload lands in memory no caller has, and
/// [`Connection::handle_placed`] gives it back to the command only if that
/// command still exists.
#[derive(Debug)]
pub struct Lent {
    itt: u32,
    task: TaskId,
    buf: IoBuf,
    offset: usize,
    len: usize,
}

impl Lent {
    /// The Initiator Task Tag of the command the buffer belongs to.
    pub fn itt(&self) -> u32 {
        self.itt
    }

    /// Where the payload goes: exactly its length, at its buffer offset.
    pub fn dest(&mut self) -> &mut [u8] {
        &mut self.buf[self.offset..self.offset + self.len]
    }

    /// The payload bytes (what [`Lent::dest`] received).
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }
}

impl TaskKind {
    fn command(&mut self) -> Option<&mut CommandTask> {
        match self {
            TaskKind::Command(c) => Some(c),
            _ => None,
        }
    }

    fn text(&mut self) -> Option<(&mut BytesMut, &mut u32)> {
        match self {
            TaskKind::Text {
                received,
                responses,
            } => Some((received, responses)),
            _ => None,
        }
    }

    fn ping(&mut self) -> Option<Instant> {
        match self {
            TaskKind::Ping { sent } => Some(*sent),
            _ => None,
        }
    }

    fn task_mgmt(&mut self) -> Option<()> {
        matches!(self, TaskKind::TaskMgmt { .. }).then_some(())
    }

    fn logout(&mut self) -> Option<()> {
        matches!(self, TaskKind::Logout).then_some(())
    }
}

#[derive(Debug)]
struct Task {
    id: TaskId,
    itt: u32,
    cmd_sn: u32,
    kind: TaskKind,
}

/// The tasks on the wire, by Initiator Task Tag: a direct-mapped table
/// (task `itt` lives in slot `itt % len`), so finding the task a PDU names
/// is an index and a compare, and a command costs no hashing or
/// allocation. ITTs still count up and come round only after 2^32 tasks,
/// so a late answer for a finished task names an ITT that is in no slot
/// (the slot holds a newer task with another ITT, or nothing) and is
/// rejected, never delivered to the newer task. [`Connection::alloc_itt`]
/// skips an ITT whose slot is taken (by a long-lived task) and the table
/// doubles before it is half full.
#[derive(Debug, Default)]
struct TaskTable(SlotTable<Task>);

impl TaskTable {
    fn len(&self) -> usize {
        self.0.len()
    }

    /// True when a task with `itt` could be inserted now (its slot is
    /// free); makes room first when the table is half full.
    fn is_free(&mut self, itt: u32) -> bool {
        self.0.is_free(itt.into())
    }

    fn contains_key(&self, itt: &u32) -> bool {
        self.get(itt).is_some()
    }

    fn get(&self, itt: &u32) -> Option<&Task> {
        self.0.get((*itt).into())
    }

    fn get_mut(&mut self, itt: &u32) -> Option<&mut Task> {
        self.0.get_mut((*itt).into())
    }

    /// Insert a task whose slot [`TaskTable::is_free`] found free.
    fn insert(&mut self, task: Task) {
        debug_assert!(self.get(&task.itt).is_none(), "ITT in use");
        self.0.insert(task.itt.into(), task);
    }

    fn remove(&mut self, itt: &u32) -> Option<Task> {
        self.0.remove((*itt).into())
    }

    fn values(&self) -> impl Iterator<Item = &Task> {
        self.0.values()
    }

    fn itts(&self) -> impl Iterator<Item = u32> + '_ {
        self.values().map(|t| t.itt)
    }

    fn find_id(&self, id: TaskId) -> Option<u32> {
        self.values().find(|t| t.id == id).map(|t| t.itt)
    }
}

/// A request waiting for the command window (or queue depth) to open.
#[derive(Debug)]
enum Queued {
    Command(TaskId, CommandRequest),
    Text(TaskId, Bytes),
}

/// The Full Feature Phase state of one connection. See the module docs.
#[derive(Debug)]
pub struct Connection {
    params: FeatureParams,
    cmd_sn: u32,
    exp_cmd_sn: u32,
    max_cmd_sn: u32,
    exp_stat_sn: u32,
    next_itt: u32,
    next_task: u64,
    tasks: TaskTable,
    /// Non-immediate requests waiting for the window.
    waiting: VecDeque<Queued>,
    /// SCSI commands in flight (counted against `queue_depth`).
    commands_in_flight: u32,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
    last_heard: Option<Instant>,
    ping_outstanding: Option<(u32, Instant)>,
    /// SCSI data bytes this core copied from PDUs into read buffers
    /// (in-band Data-In); see [`Connection::take_copied_bytes`].
    copied_bytes: u64,
    /// Of `copied_bytes`, those not yet taken by [`Connection::take_copied_bytes`].
    copied_untaken: u64,
    /// Where in-band read buffers come from; `None`: the process's
    /// ([`crate::iobuf::read_pool`]).
    read_pool: Option<&'static Pool>,
}

/// Most text one Text exchange may return (a SendTargets answer from a big
/// array is far smaller); more ends the connection.
pub const MAX_TEXT_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most Text Responses one exchange may take. With the 256 KiB data
/// segments rlun declares, 16 MiB takes 64; targets using 16 KiB segments
/// still fit. A target that keeps asking to continue is cut off here.
pub const MAX_TEXT_RESPONSES: u32 = 1024;

/// RFC 1982 serial-number "less than" on 32-bit sequence numbers (§3.2.2.1).
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// RFC 1982 "less than or equal".
pub fn sn_lte(a: u32, b: u32) -> bool {
    a == b || sn_lt(a, b)
}

impl Connection {
    pub fn new(params: FeatureParams, numbers: SessionNumbers) -> Connection {
        Connection {
            params,
            cmd_sn: numbers.cmd_sn,
            exp_cmd_sn: numbers.exp_cmd_sn,
            max_cmd_sn: numbers.max_cmd_sn,
            exp_stat_sn: numbers.exp_stat_sn,
            next_itt: 1,
            next_task: 1,
            tasks: TaskTable::default(),
            waiting: VecDeque::new(),
            commands_in_flight: 0,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            last_heard: None,
            ping_outstanding: None,
            copied_bytes: 0,
            copied_untaken: 0,
            read_pool: None,
        }
    }

    /// Take in-band read buffers from `pool` instead of the process's
    /// ([`crate::iobuf::read_pool`]); tests count what comes back with
    /// [`Pool::in_use`].
    pub fn set_read_pool(&mut self, pool: &'static Pool) {
        self.read_pool = Some(pool);
    }

    pub fn params(&self) -> &FeatureParams {
        &self.params
    }

    /// SCSI data bytes this core copied between PDUs and the callers'
    /// buffers: the Data-In payloads handed to [`Connection::handle_pdu`] in a
    /// PDU's data segment; none of those the receive path read in place
    /// ([`Connection::handle_placed`]) and none when the data moves directly
    /// (a driver adds them to its own counters with
    /// [`Connection::take_copied_bytes`]).
    pub fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }

    /// The bytes copied (see [`Connection::copied_bytes`]) since the last call:
    /// a driver adds them to its process-wide counters once per turn.
    pub fn take_copied_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.copied_untaken)
    }

    /// Current sequence numbers (for diagnostics and tests).
    pub fn numbers(&self) -> SessionNumbers {
        SessionNumbers {
            cmd_sn: self.cmd_sn,
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        }
    }

    /// Tasks of any kind not yet completed, plus those waiting for the window.
    pub fn outstanding(&self) -> usize {
        self.tasks.len() + self.waiting.len()
    }

    fn alloc_task_id(&mut self) -> TaskId {
        let id = TaskId(self.next_task);
        self.next_task += 1;
        id
    }

    fn alloc_itt(&mut self) -> u32 {
        loop {
            let itt = self.next_itt;
            self.next_itt = self.next_itt.wrapping_add(1);
            if itt != RESERVED_TAG && self.tasks.is_free(itt) {
                return itt;
            }
        }
    }

    /// True while command `task` still waits here for the command window or
    /// the queue depth: the target has not seen it yet.
    pub fn is_waiting(&self, task: TaskId) -> bool {
        // From the back: a command just submitted, if held back, is last.
        self.waiting.iter().rev().any(|q| match q {
            Queued::Command(t, _) => *t == task,
            Queued::Text(..) => false,
        })
    }

    /// True when the window admits one more non-immediate command (§3.2.2.1).
    pub fn window_open(&self) -> bool {
        sn_lte(self.cmd_sn, self.max_cmd_sn)
    }

    /// Queue a SCSI command. It is sent as soon as the command window and the
    /// queue depth allow; its result arrives as [`Event::Command`].
    pub fn submit(&mut self, req: CommandRequest) -> TaskId {
        let id = self.alloc_task_id();
        self.enqueue_command(id, req);
        id
    }

    /// [`Connection::submit`] under a task id the caller chose: one with
    /// [`CALLER_TASK_IDS`] set (the core's own ids never have it), not used
    /// by another task of this core that has not completed yet. The
    /// recovery machine puts its own request id there, so the
    /// [`Event::Command`] names its record directly (no map from task ids
    /// to requests).
    pub fn submit_as(&mut self, id: TaskId, req: CommandRequest) {
        debug_assert!(
            id.0 & CALLER_TASK_IDS != 0,
            "caller task ids have the top bit set"
        );
        self.enqueue_command(id, req);
    }

    fn enqueue_command(&mut self, id: TaskId, req: CommandRequest) {
        if !req.data_out.is_empty() && req.read_len > 0 {
            self.events.push_back(Event::Command {
                id,
                result: Err(TaskError::Invalid(
                    "bidirectional commands are not supported",
                )),
            });
            return;
        }
        self.waiting.push_back(Queued::Command(id, req));
        self.pump();
    }

    /// Start a Text Request exchange (e.g. `SendTargets=All`); the reassembled
    /// answer arrives as [`Event::Text`].
    pub fn submit_text(&mut self, data: Bytes) -> TaskId {
        let id = self.alloc_task_id();
        self.waiting.push_back(Queued::Text(id, data));
        self.pump();
        id
    }

    /// Send a NOP-Out ping now (immediate, so it ignores the window).
    pub fn ping(&mut self, now: Instant) -> TaskId {
        let id = self.alloc_task_id();
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::NopOut(NopOut {
            immediate: true,
            lun: [0; 8],
            itt,
            ttt: RESERVED_TAG,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::Ping { sent: now },
        });
        self.ping_outstanding = Some((itt, now));
        id
    }

    /// ABORT TASK for an in-flight command (§11.5.1). A command still waiting
    /// for the window is dropped locally and completes as aborted at once.
    pub fn abort_task(&mut self, target: TaskId) -> TaskId {
        let id = self.alloc_task_id();
        if let Some(pos) = self.waiting.iter().position(|q| match q {
            Queued::Command(t, _) | Queued::Text(t, _) => *t == target,
        }) {
            if let Some(q) = self.waiting.remove(pos) {
                // Still queued: say so when the window is what held it.
                let err = if self.window_open() {
                    TaskError::Aborted
                } else {
                    TaskError::WindowClosed {
                        cmd_sn: self.cmd_sn,
                        max_cmd_sn: self.max_cmd_sn,
                    }
                };
                self.complete_queued_with(q, err);
            }
            self.events.push_back(Event::TaskMgmt {
                id,
                result: Ok(TmfOutcome::Complete),
            });
            return id;
        }
        // A scan (ABORT TASK is rare) rather than a second map per command.
        let Some(ref_itt) = self.tasks.find_id(target) else {
            self.events.push_back(Event::TaskMgmt {
                id,
                result: Ok(TmfOutcome::TaskDoesNotExist),
            });
            return id;
        };
        let (lun, ref_cmd_sn) = match self.tasks.get(&ref_itt).expect("found above") {
            Task {
                kind: TaskKind::Command(c),
                cmd_sn,
                ..
            } => (c.lun, *cmd_sn),
            t => ([0; 8], t.cmd_sn),
        };
        self.send_tmf(id, tmf::ABORT_TASK, lun, ref_itt, ref_cmd_sn);
        id
    }

    /// LOGICAL UNIT RESET (§11.5.1): every task on the LUN is terminated.
    pub fn lun_reset(&mut self, lun: [u8; 8]) -> TaskId {
        let id = self.alloc_task_id();
        self.send_tmf(id, tmf::LOGICAL_UNIT_RESET, lun, RESERVED_TAG, self.cmd_sn);
        id
    }

    fn send_tmf(&mut self, id: TaskId, function: u8, lun: [u8; 8], ref_itt: u32, ref_cmd_sn: u32) {
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::TaskMgmtRequest(TaskMgmtRequest {
            immediate: true,
            function,
            lun,
            itt,
            referenced_task_tag: ref_itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            ref_cmd_sn,
            exp_data_sn: 0,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::TaskMgmt {
                function,
                lun,
                ref_itt,
            },
        });
    }

    /// Close the session (§11.14). Sent as an immediate command.
    pub fn logout(&mut self) -> TaskId {
        let id = self.alloc_task_id();
        let itt = self.alloc_itt();
        self.queue(Pdu::new(Bhs::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: logout_reason::CLOSE_SESSION,
            itt,
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        })));
        self.insert(Task {
            id,
            itt,
            cmd_sn: self.cmd_sn,
            kind: TaskKind::Logout,
        });
        id
    }

    /// The task a target PDU names by its ITT, as the kind of task that PDU
    /// answers (`pick` is one of `TaskKind::command`, `text`, `ping`…). A
    /// tag we did not hand out, or one of another kind of task, is a
    /// protocol error naming the PDU (`what`).
    fn lookup<'a, R>(
        &'a mut self,
        itt: u32,
        what: &'static str,
        pick: impl FnOnce(&'a mut TaskKind) -> Option<R>,
    ) -> Result<R, ProtocolError> {
        self.tasks
            .get_mut(&itt)
            .and_then(|t| pick(&mut t.kind))
            .ok_or(ProtocolError::UnknownTask { what, itt })
    }

    fn insert(&mut self, task: Task) {
        self.tasks.insert(task);
    }

    fn remove(&mut self, itt: u32) -> Option<Task> {
        let t = self.tasks.remove(&itt)?;
        if matches!(t.kind, TaskKind::Command(_)) {
            self.commands_in_flight -= 1;
        }
        Some(t)
    }

    /// Move waiting requests onto the wire while the window and queue depth allow.
    fn pump(&mut self) {
        while self.window_open() {
            let Some(front) = self.waiting.front() else {
                break;
            };
            if matches!(front, Queued::Command(..))
                && self.commands_in_flight >= self.params.queue_depth
            {
                break;
            }
            match self.waiting.pop_front().expect("front exists") {
                Queued::Command(id, req) => self.send_command(id, req),
                Queued::Text(id, data) => self.send_text(id, data),
            }
        }
    }

    fn send_command(&mut self, id: TaskId, req: CommandRequest) {
        let itt = self.alloc_itt();
        let cmd_sn = self.cmd_sn;
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        let total = req.data_out.len() as u32;
        let p = &self.params;
        // Immediate data (§3.2.4.2): in the command PDU itself.
        let immediate_len = if p.immediate_data {
            total
                .min(p.first_burst_length)
                .min(p.max_xmit_data_segment_length)
        } else {
            0
        };
        // Unsolicited Data-Out PDUs follow when InitialR2T=No, up to FirstBurstLength.
        let unsolicited_end = if !p.initial_r2t {
            total.min(p.first_burst_length)
        } else {
            immediate_len
        };
        let final_ = unsolicited_end <= immediate_len;
        let cmd = ScsiCommand {
            immediate: false,
            final_,
            read: req.read_len > 0,
            write: total > 0,
            attr: req.attr,
            lun: req.lun,
            itt,
            expected_data_transfer_length: if total > 0 { total } else { req.read_len },
            cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb: req.cdb,
        };
        let direct = p.data_movement == DataMovement::Direct;
        let mut read_buf = ReadBuf::InBand(IoBuf::empty());
        let mut buffers = None;
        if direct {
            // The target places the read data itself, anywhere in the
            // buffer and in any order: it must exist whole, at an address
            // that stays put, before the command leaves.
            let read = (req.read_len > 0).then(|| {
                let mut b = IoBuf::with_len(req.read_len as usize);
                let region = ReadRegion {
                    addr: b.as_mut_ptr() as usize,
                    len: req.read_len,
                };
                read_buf = ReadBuf::Direct(b);
                region
            });
            let write = (unsolicited_end < total).then(|| WriteRegion {
                data: req.data_out.clone(),
                offset: unsolicited_end,
            });
            if read.is_some() || write.is_some() {
                buffers = Some(DirectBuffers { itt, read, write });
            }
        }
        self.transmit.push_back(Transmit {
            pdu: Pdu::with_data(
                Bhs::ScsiCommand(cmd),
                req.data_out.slice(..immediate_len as usize),
            ),
            kind: TransmitKind::ScsiCommand,
            direct: buffers,
        });
        if unsolicited_end > immediate_len {
            self.queue_data_out(
                itt,
                req.lun,
                RESERVED_TAG,
                &req.data_out,
                immediate_len,
                unsolicited_end,
            );
        }
        self.commands_in_flight += 1;
        self.insert(Task {
            id,
            itt,
            cmd_sn,
            kind: TaskKind::Command(CommandTask {
                hold: None,
                lun: req.lun,
                data_out: req.data_out,
                read_len: req.read_len,
                read_buf,
                received: 0,
                next_data_sn: 0,
                status_from_data_in: None,
                direct,
                lent: false,
            }),
        });
    }

    /// Data-Out PDUs for bytes `start..end` of `data`, each within
    /// MaxXmitDataSegmentLength, DataSN from 0, F on the last (§11.7).
    fn queue_data_out(
        &mut self,
        itt: u32,
        lun: [u8; 8],
        ttt: u32,
        data: &Bytes,
        start: u32,
        end: u32,
    ) {
        let seg = self.params.max_xmit_data_segment_length.max(512);
        let mut offset = start;
        let mut data_sn = 0;
        while offset < end {
            let len = seg.min(end - offset);
            self.transmit.push_back(Transmit {
                pdu: Pdu::with_data(
                    Bhs::DataOut(DataOut {
                        final_: offset + len == end,
                        lun,
                        itt,
                        ttt,
                        exp_stat_sn: self.exp_stat_sn,
                        data_sn,
                        buffer_offset: offset,
                    }),
                    data.slice(offset as usize..(offset + len) as usize),
                ),
                kind: TransmitKind::DataOut,
                direct: None,
            });
            offset += len;
            data_sn += 1;
        }
    }

    fn send_text(&mut self, id: TaskId, data: Bytes) {
        let itt = self.alloc_itt();
        let cmd_sn = self.cmd_sn;
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.queue(Pdu::with_data(
            Bhs::TextRequest(TextRequest {
                immediate: false,
                final_: true,
                continue_: false,
                lun: [0; 8],
                itt,
                ttt: RESERVED_TAG,
                cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data,
        ));
        self.insert(Task {
            id,
            itt,
            cmd_sn,
            kind: TaskKind::Text {
                received: BytesMut::new(),
                responses: 0,
            },
        });
    }

    /// Update ExpCmdSN/MaxCmdSN from a target PDU (§3.2.2.1): ignore values
    /// that would move backwards or describe an invalid window.
    fn update_window(&mut self, exp_cmd_sn: u32, max_cmd_sn: u32) {
        if sn_lt(max_cmd_sn, exp_cmd_sn.wrapping_sub(1)) {
            return;
        }
        if sn_lt(self.exp_cmd_sn, exp_cmd_sn) || self.exp_cmd_sn == exp_cmd_sn {
            self.exp_cmd_sn = exp_cmd_sn;
        }
        if sn_lt(self.max_cmd_sn, max_cmd_sn) {
            self.max_cmd_sn = max_cmd_sn;
        }
    }

    fn update_stat_sn(&mut self, stat_sn: u32) {
        let next = stat_sn.wrapping_add(1);
        if sn_lt(self.exp_stat_sn, next) {
            self.exp_stat_sn = next;
        }
    }

    /// Lend the read buffer of the command a Data-In header names, so the
    /// receive path can read the header's `len`-byte payload straight into
    /// it ([`Lent::dest`]) and then hand both back with
    /// [`Connection::handle_placed`]: no copy of the payload in user space.
    ///
    /// `None` when the header is anything but the next in-order Data-In of
    /// a live in-band read with room for `len` bytes at its offset (unknown
    /// or finished task, a direct task, wrong DataSN or offset, overrun,
    /// an S bit without F): the receive path then reads the payload into a
    /// PDU as usual and [`Connection::handle_pdu`] reports the violation
    /// without writing the payload anywhere.
    pub fn lend_read_buffer(&mut self, h: &DataIn, len: u32) -> Option<Lent> {
        if len == 0 {
            return None;
        }
        let task = self.tasks.get_mut(&h.itt)?;
        let id = task.id;
        let c = task.kind.command()?;
        if c.lent || check_data_in(c, h, len).is_err() {
            return None;
        }
        let ReadBuf::InBand(buf) = &mut c.read_buf else {
            return None;
        };
        let mut buf = std::mem::replace(buf, IoBuf::empty());
        if buf.len() < c.read_len as usize {
            // First Data-In of the command: the whole read length, once,
            // from the pool (see [`ReadBuf`]); heap memory past its cap.
            buf = self
                .read_pool
                .unwrap_or_else(crate::iobuf::read_pool)
                .alloc(c.read_len as usize);
        }
        c.lent = true;
        Some(Lent {
            itt: h.itt,
            task: id,
            buf,
            offset: h.buffer_offset as usize,
            len: len as usize,
        })
    }

    /// A Data-In whose payload the receive path read into the buffer
    /// [`Connection::lend_read_buffer`] lent it (`pdu` carries the header and
    /// no data). The buffer goes back to its command, then the header is
    /// processed like any Data-In. Should the command be gone meanwhile,
    /// the buffer is dropped here: it never reaches a caller.
    pub fn handle_placed(
        &mut self,
        pdu: Pdu,
        lent: Lent,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        self.last_heard = Some(now);
        let result = match pdu.bhs {
            Bhs::DataIn(h) => self.data_in(h, Payload::Placed(lent)),
            other => Err(ProtocolError::UnexpectedPdu(other.opcode().name())),
        };
        self.pump();
        result
    }

    fn data_in(&mut self, h: DataIn, payload: Payload) -> Result<(), ProtocolError> {
        // Read buffers: a pool chunk (stale contents, see [`ReadBuf`]) or,
        // with the pool at its cap, zeroed heap memory; never waits.
        let pool = self.read_pool.unwrap_or_else(crate::iobuf::read_pool);
        self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
        if h.status_present {
            self.update_stat_sn(h.stat_sn);
        }
        let task = self.tasks.get_mut(&h.itt);
        let task_id = task.as_ref().map(|t| t.id);
        let Some(c) = task.and_then(|t| t.kind.command()) else {
            return Err(ProtocolError::UnknownTask {
                what: "Data-In",
                itt: h.itt,
            });
        };
        let len = match &payload {
            Payload::Copy(data) => data.len() as u32,
            Payload::Placed(lent) => {
                // The buffer lent for this header comes home, unless the
                // command it was lent by is gone (then it is dropped).
                if !c.lent || task_id != Some(lent.task) {
                    return Err(ProtocolError::UnknownTask {
                        what: "Data-In",
                        itt: h.itt,
                    });
                }
                lent.len as u32
            }
        };
        if let Payload::Placed(lent) = payload {
            c.read_buf = ReadBuf::InBand(lent.buf);
            c.lent = false;
            // Checked when the buffer was lent; nothing else ran between.
            debug_assert!(check_data_in(c, &h, len).is_ok());
        } else {
            if c.lent {
                // Cannot happen: the receive path hands back the buffer
                // before it reads the next PDU.
                return Err(ProtocolError::MalformedData {
                    what: "Data-In while the previous payload is still arriving",
                });
            }
            check_data_in(c, &h, len)?;
            if let (Payload::Copy(data), ReadBuf::InBand(buf)) = (&payload, &mut c.read_buf) {
                if len > 0 {
                    if buf.len() < c.read_len as usize {
                        *buf = pool.alloc(c.read_len as usize);
                    }
                    // The copy of a receive path that does not place
                    // payloads itself: into the caller's buffer.
                    let at = h.buffer_offset as usize;
                    buf[at..at + data.len()].copy_from_slice(data);
                    self.copied_bytes += u64::from(len);
                    self.copied_untaken += u64::from(len);
                }
            }
        }
        c.next_data_sn = c.next_data_sn.wrapping_add(1);
        c.received += len;
        if h.status_present {
            c.status_from_data_in = Some((h.status, h.residual));
            self.finish_command(h.itt, h.status, None, h.residual);
        }
        Ok(())
    }

    /// Process one PDU from the target.
    pub fn handle_pdu(&mut self, pdu: Pdu, now: Instant) -> Result<(), ProtocolError> {
        self.last_heard = Some(now);
        let result = self.dispatch(pdu, now);
        self.pump();
        result
    }

    fn dispatch(&mut self, pdu: Pdu, now: Instant) -> Result<(), ProtocolError> {
        match pdu.bhs {
            Bhs::DataIn(h) => self.data_in(h, Payload::Copy(pdu.data)),
            Bhs::ScsiResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "SCSI Response", TaskKind::command)?;
                if h.response != 0 {
                    let task = self.remove(h.itt).expect("checked above");
                    self.events.push_back(Event::Command {
                        id: task.id,
                        result: Err(TaskError::TargetFailure(h.response)),
                    });
                    return Ok(());
                }
                // §11.4.7: data segment = SenseLength (2 bytes) + sense data.
                let sense = if pdu.data.len() >= 2 {
                    let sl = u16::from_be_bytes([pdu.data[0], pdu.data[1]]) as usize;
                    if sl + 2 > pdu.data.len() {
                        return Err(ProtocolError::MalformedData {
                            what: "SCSI Response (SenseLength beyond the data segment)",
                        });
                    }
                    (sl > 0).then(|| pdu.data.slice(2..2 + sl))
                } else {
                    None
                };
                self.finish_command(h.itt, h.status, sense, h.residual);
                Ok(())
            }
            Bhs::R2t(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                let max_burst = self.params.max_burst_length;
                let c = self.lookup(h.itt, "R2T", TaskKind::command)?;
                if c.direct {
                    return Err(ProtocolError::DirectTaskData {
                        what: "R2T",
                        itt: h.itt,
                    });
                }
                let total = c.data_out.len() as u32;
                let end = h.buffer_offset as u64 + h.desired_length as u64;
                if h.desired_length == 0 || h.desired_length > max_burst || end > total as u64 {
                    return Err(ProtocolError::BadR2t {
                        itt: h.itt,
                        offset: h.buffer_offset,
                        len: h.desired_length,
                        total,
                    });
                }
                let (lun, data) = (c.lun, c.data_out.clone());
                self.queue_data_out(h.itt, lun, h.ttt, &data, h.buffer_offset, end as u32);
                Ok(())
            }
            Bhs::NopIn(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                if h.itt != RESERVED_TAG {
                    // Answer to our ping (§11.19.1).
                    self.update_stat_sn(h.stat_sn);
                    let sent = self.lookup(h.itt, "NOP-In", TaskKind::ping)?;
                    let rtt = now.saturating_duration_since(sent);
                    let task = self.remove(h.itt).expect("present");
                    if self.ping_outstanding.map(|p| p.0) == Some(h.itt) {
                        self.ping_outstanding = None;
                    }
                    self.events.push_back(Event::Pong { id: task.id, rtt });
                }
                if h.ttt != RESERVED_TAG {
                    // The target pings us: echo its TTT and data (§11.18.3).
                    self.queue(Pdu::with_data(
                        Bhs::NopOut(NopOut {
                            immediate: true,
                            lun: h.lun,
                            itt: RESERVED_TAG,
                            ttt: h.ttt,
                            cmd_sn: self.cmd_sn,
                            exp_stat_sn: self.exp_stat_sn,
                        }),
                        pdu.data,
                    ));
                }
                Ok(())
            }
            Bhs::TextResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                let exp_stat_sn = self.exp_stat_sn;
                let cmd_sn = self.cmd_sn;
                let (received, responses) = self.lookup(h.itt, "Text Response", TaskKind::text)?;
                // Bounds against a target that never ends the exchange:
                // the text kept, and the number of continuation rounds
                // (empty continued responses would otherwise go on forever).
                if received.len() + pdu.data.len() > MAX_TEXT_RESPONSE_BYTES {
                    return Err(ProtocolError::MalformedData {
                        what: "Text Response (over 16 MiB of text)",
                    });
                }
                *responses += 1;
                if !h.final_ && *responses >= MAX_TEXT_RESPONSES {
                    return Err(ProtocolError::MalformedData {
                        what: "Text Response (more than 1024 responses to one Text Request)",
                    });
                }
                received.extend_from_slice(&pdu.data);
                if h.final_ {
                    let task = self.remove(h.itt).expect("present");
                    if let TaskKind::Text { received, .. } = task.kind {
                        self.events.push_back(Event::Text {
                            id: task.id,
                            result: Ok(received.freeze()),
                        });
                    }
                } else {
                    // More to come (C bit or a long answer): ask for the next
                    // part with an empty Text Request echoing the TTT (§11.10.4).
                    self.queue(Pdu::new(Bhs::TextRequest(TextRequest {
                        immediate: false,
                        final_: true,
                        continue_: false,
                        lun: [0; 8],
                        itt: h.itt,
                        ttt: h.ttt,
                        cmd_sn,
                        exp_stat_sn,
                    })));
                }
                Ok(())
            }
            Bhs::TaskMgmtResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "Task Management Response", TaskKind::task_mgmt)?;
                let task = self.remove(h.itt).expect("present");
                let outcome = TmfOutcome::from_code(h.response);
                if let TaskKind::TaskMgmt {
                    function,
                    lun,
                    ref_itt,
                } = task.kind
                {
                    self.terminate_after_tmf(function, lun, ref_itt, outcome);
                }
                self.events.push_back(Event::TaskMgmt {
                    id: task.id,
                    result: Ok(outcome),
                });
                Ok(())
            }
            Bhs::LogoutResponse(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.lookup(h.itt, "Logout Response", TaskKind::logout)?;
                let task = self.remove(h.itt).expect("present");
                self.events.push_back(Event::Logout {
                    id: task.id,
                    result: Ok(h.response),
                });
                Ok(())
            }
            Bhs::AsyncMessage(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                self.events.push_back(Event::Async {
                    event: h.event,
                    vcode: h.vcode,
                    parameters: [h.parameter1, h.parameter2, h.parameter3],
                    data: pdu.data,
                });
                Ok(())
            }
            Bhs::Reject(h) => {
                self.update_window(h.exp_cmd_sn, h.max_cmd_sn);
                self.update_stat_sn(h.stat_sn);
                let reason = h.reason_text();
                // §11.17: the data segment holds the rejected PDU's header.
                let itt = (pdu.data.len() >= 48).then(|| {
                    u32::from_be_bytes([pdu.data[16], pdu.data[17], pdu.data[18], pdu.data[19]])
                });
                match itt.filter(|i| *i != RESERVED_TAG && self.tasks.contains_key(i)) {
                    Some(itt) => {
                        let task = self.remove(itt).expect("present");
                        let err = TaskError::Rejected(reason);
                        self.events.push_back(match task.kind {
                            TaskKind::Command(_) => Event::Command {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Text { .. } => Event::Text {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::TaskMgmt { .. } => Event::TaskMgmt {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Logout => Event::Logout {
                                id: task.id,
                                result: Err(err),
                            },
                            TaskKind::Ping { .. } => {
                                self.ping_outstanding = None;
                                Event::Reject { reason }
                            }
                        });
                    }
                    None => self.events.push_back(Event::Reject { reason }),
                }
                Ok(())
            }
            Bhs::LoginResponse(_) => Err(ProtocolError::UnexpectedPdu("Login Response")),
            Bhs::Unknown { opcode, .. } => Err(ProtocolError::UnknownOpcode(opcode)),
            other => Err(ProtocolError::UnexpectedPdu(other.opcode().name())),
        }
    }

    /// After ABORT TASK or LOGICAL UNIT RESET completes, the target sends
    /// nothing more for the affected tasks (RFC 7143 §4.2.3.3): complete them
    /// here as aborted so their buffers are released and callers can retry.
    fn terminate_after_tmf(
        &mut self,
        function: u8,
        lun: [u8; 8],
        ref_itt: u32,
        outcome: TmfOutcome,
    ) {
        let victims: Vec<u32> = match (function, outcome) {
            (tmf::ABORT_TASK, TmfOutcome::Complete | TmfOutcome::TaskDoesNotExist) => {
                vec![ref_itt]
            }
            (tmf::LOGICAL_UNIT_RESET, TmfOutcome::Complete) => {
                let mut v: Vec<(TaskId, u32)> = self
                    .tasks
                    .values()
                    .filter(|t| matches!(&t.kind, TaskKind::Command(c) if c.lun == lun))
                    .map(|t| (t.id, t.itt))
                    .collect();
                v.sort();
                v.into_iter().map(|(_, itt)| itt).collect()
            }
            _ => Vec::new(),
        };
        for itt in victims {
            if matches!(
                self.tasks.get(&itt),
                Some(Task {
                    kind: TaskKind::Command(_),
                    ..
                })
            ) {
                let task = self.remove(itt).expect("present");
                self.events.push_back(Event::Command {
                    id: task.id,
                    result: Err(TaskError::Aborted),
                });
            }
        }
    }

    fn finish_command(&mut self, itt: u32, status: u8, sense: Option<Bytes>, residual: Residual) {
        let Some(task) = self.remove(itt) else {
            return;
        };
        let TaskKind::Command(mut c) = task.kind else {
            return;
        };
        // The target is done with the buffers: let the transport release
        // what it kept for them before they change hands.
        drop(c.hold.take());
        let len = if c.direct {
            // The target placed the data without telling us how much: the
            // residual says (RFC 7143 §11.4.5).
            if residual.underflow {
                c.read_len.saturating_sub(residual.count)
            } else {
                c.read_len
            }
        } else {
            c.received
        };
        let data = c.read_buf.into_bytes(len as usize);
        self.events.push_back(Event::Command {
            id: task.id,
            result: Ok(CommandResult {
                status,
                sense,
                data,
                residual,
            }),
        });
    }

    /// Next PDU to send, in order (with the task's buffers when the data
    /// moves directly).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    fn queue(&mut self, pdu: Pdu) {
        self.transmit.push_back(Transmit::from(pdu));
    }

    /// Keep `hold` for as long as task `itt` lives (see [`TaskHold`]).
    /// Given back when no command task has that tag (it has ended already:
    /// the caller drops it).
    pub fn hold(&mut self, itt: u32, hold: TaskHold) -> Result<(), TaskHold> {
        match self.tasks.get_mut(&itt).and_then(|t| t.kind.command()) {
            Some(c) => {
                c.hold = Some(hold);
                Ok(())
            }
            None => Err(hold),
        }
    }

    /// Next completed task or target event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Connection::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some((_, sent)) = self.ping_outstanding {
            return Some(sent + self.params.nop_timeout);
        }
        let interval = self.params.nop_interval?;
        Some(self.last_heard? + interval)
    }

    /// Called at (or after) the instant from [`Connection::poll_timeout`]: sends
    /// a keepalive ping when the target has been quiet, and reports a dead
    /// connection when a ping went unanswered.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtocolError> {
        if let Some((_, sent)) = self.ping_outstanding {
            if now >= sent + self.params.nop_timeout {
                return Err(ProtocolError::PingTimeout(self.params.nop_timeout));
            }
            return Ok(());
        }
        let (Some(interval), Some(last)) = (self.params.nop_interval, self.last_heard) else {
            return Ok(());
        };
        if now >= last + interval {
            self.ping(now);
        }
        Ok(())
    }

    /// Record that the connection is up as of `now` (start of full feature phase).
    pub fn start(&mut self, now: Instant) {
        self.last_heard = Some(now);
    }

    fn complete_queued_with(&mut self, q: Queued, err: TaskError) {
        match q {
            Queued::Command(id, _) => self.events.push_back(Event::Command {
                id,
                result: Err(err),
            }),
            Queued::Text(id, _) => self.events.push_back(Event::Text {
                id,
                result: Err(err),
            }),
        }
    }

    /// The connection is gone: complete every task with `reason`.
    pub fn fail_all(&mut self, reason: &str) {
        let err = TaskError::ConnectionLost(reason.to_string());
        while let Some(q) = self.waiting.pop_front() {
            self.complete_queued_with(q, err.clone());
        }
        let itts: Vec<u32> = self.tasks.itts().collect();
        let mut tasks: Vec<Task> = itts.into_iter().filter_map(|i| self.remove(i)).collect();
        tasks.sort_by_key(|t| t.id);
        for task in tasks {
            let id = task.id;
            self.events.push_back(match task.kind {
                TaskKind::Command(_) => Event::Command {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Text { .. } => Event::Text {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::TaskMgmt { .. } => Event::TaskMgmt {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Logout => Event::Logout {
                    id,
                    result: Err(err.clone()),
                },
                TaskKind::Ping { .. } => continue,
            });
        }
        self.ping_outstanding = None;
        self.transmit.clear();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::pdu::{NopIn, R2t, ScsiResponse, TextResponse};
    use crate::testing::data_in;

    /// The tests below spell out the values they depend on (8 KiB segments,
    /// 64 KiB first burst, 5 s / 10 s keepalive): those are the defaults.
    fn params() -> FeatureParams {
        FeatureParams::default()
    }

    fn session(p: FeatureParams, max_cmd_sn: u32) -> Connection {
        Connection::new(
            p,
            SessionNumbers {
                cmd_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn,
                exp_stat_sn: 1,
            },
        )
    }

    fn read(len: u32) -> CommandRequest {
        CommandRequest {
            lun: [0; 8],
            cdb: [0x28; 16],
            data_out: Bytes::new(),
            read_len: len,
            attr: TaskAttr::Simple,
        }
    }

    fn write(data: Vec<u8>) -> CommandRequest {
        CommandRequest {
            lun: [0; 8],
            cdb: [0x2a; 16],
            data_out: Bytes::from(data),
            read_len: 0,
            attr: TaskAttr::Simple,
        }
    }

    fn drain(s: &mut Connection) -> Vec<Pdu> {
        std::iter::from_fn(|| s.poll_transmit().map(|t| t.pdu)).collect()
    }

    fn response(itt: u32, stat_sn: u32, exp_cmd_sn: u32, max_cmd_sn: u32, status: u8) -> Pdu {
        Pdu::new(Bhs::ScsiResponse(ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            residual: Residual::default(),
            response: 0,
            status,
            itt,
            snack_tag: 0,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            exp_data_sn: 0,
            bidi_read_residual_count: 0,
        }))
    }

    fn itt_of(p: &Pdu) -> u32 {
        match &p.bhs {
            Bhs::ScsiCommand(c) => c.itt,
            Bhs::DataOut(d) => d.itt,
            Bhs::TextRequest(t) => t.itt,
            Bhs::NopOut(n) => n.itt,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn commands_wait_while_the_window_is_closed_and_go_when_it_reopens() {
        // Window admits CmdSN 1..=3.
        let mut s = session(params(), 3);
        let now = Instant::now();
        for _ in 0..5 {
            s.submit(read(512));
        }
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 3, "only three commands fit in the window");
        let sns: Vec<u32> = sent
            .iter()
            .map(|p| match &p.bhs {
                Bhs::ScsiCommand(c) => c.cmd_sn,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(sns, vec![1, 2, 3]);

        // The target closes the window completely (MaxCmdSN = ExpCmdSN - 1)
        // while answering the first command: nothing new may go out.
        let first = itt_of(&sent[0]);
        s.handle_pdu(response(first, 1, 4, 3, 0), now).unwrap();
        assert!(drain(&mut s).is_empty());
        assert!(!s.window_open());

        // Reopening by two lets exactly the two queued commands through.
        let second = itt_of(&sent[1]);
        s.handle_pdu(response(second, 2, 4, 5, 0), now).unwrap();
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 2);
        assert_eq!(s.numbers().cmd_sn, 6);
        assert_eq!(s.numbers().exp_stat_sn, 3);
    }

    #[test]
    fn aborting_a_command_the_closed_window_held_back_says_so() {
        // Window admits CmdSN 1 only; the second command waits for it.
        let mut s = session(params(), 1);
        let now = Instant::now();
        let first = s.submit(read(512));
        let held = s.submit(read(512));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        // The target answers the first and keeps the window closed, moving
        // MaxCmdSN backwards too (ignored: the window cannot shrink).
        s.handle_pdu(response(itt_of(&sent[0]), 1, 2, 0, 0), now)
            .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Ok(_) }) if id == first)
        );
        assert!(drain(&mut s).is_empty());
        s.abort_task(held);
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { id, result: Err(TaskError::WindowClosed { cmd_sn: 2, max_cmd_sn: 1 }) }) if id == held
        ));
    }

    #[test]
    fn aborting_a_command_queued_behind_the_queue_depth_is_a_plain_abort() {
        let p = FeatureParams {
            queue_depth: 1,
            ..params()
        };
        let mut s = session(p, 100);
        s.submit(read(512));
        let held = s.submit(read(512));
        assert_eq!(drain(&mut s).len(), 1);
        assert!(s.window_open());
        s.abort_task(held);
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { id, result: Err(TaskError::Aborted) }) if id == held
        ));
    }

    #[test]
    fn stale_window_update_is_ignored() {
        let mut s = session(params(), 10);
        let id = s.submit(read(0));
        let itt = itt_of(&drain(&mut s)[0]);
        // MaxCmdSN behind ExpCmdSN-1 is invalid: keep the old window.
        s.handle_pdu(response(itt, 1, 2, 0, 0), Instant::now())
            .unwrap();
        assert_eq!(s.numbers().max_cmd_sn, 10);
        assert!(matches!(s.poll_event(), Some(Event::Command { id: got, .. }) if got == id));
    }

    #[test]
    fn queue_depth_limits_commands_in_flight() {
        let mut s = session(
            FeatureParams {
                queue_depth: 2,
                ..params()
            },
            100,
        );
        for _ in 0..4 {
            s.submit(read(512));
        }
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 2);
        s.handle_pdu(
            data_in(itt_of(&sent[0]), 0, 0, &[7u8; 512], true),
            Instant::now(),
        )
        .unwrap();
        assert_eq!(drain(&mut s).len(), 1);
    }

    #[test]
    fn data_in_pieces_are_reassembled_and_status_in_last_pdu_completes() {
        let mut s = session(params(), 10);
        let id = s.submit(read(12));
        let itt = itt_of(&drain(&mut s)[0]);
        let now = Instant::now();
        s.handle_pdu(data_in(itt, 0, 0, b"abcd", false), now)
            .unwrap();
        s.handle_pdu(data_in(itt, 1, 4, b"efgh", false), now)
            .unwrap();
        assert!(s.poll_event().is_none());
        s.handle_pdu(data_in(itt, 2, 8, b"ijkl", true), now)
            .unwrap();
        match s.poll_event() {
            Some(Event::Command { id: got, result }) => {
                assert_eq!(got, id);
                let r = result.unwrap();
                assert_eq!(r.status, 0);
                assert_eq!(&r.data[..], b"abcdefghijkl");
            }
            other => panic!("expected completion, got {other:?}"),
        }
        assert_eq!(s.outstanding(), 0);
        assert_eq!(
            s.copied_bytes(),
            12,
            "a payload handed over in a PDU is copied once"
        );
    }

    #[test]
    fn data_in_with_wrong_data_sn_is_a_protocol_error() {
        let mut s = session(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 1, 0, b"abcd", false), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataSn {
                itt,
                got: 1,
                expected: 0
            }
        );
    }

    #[test]
    fn data_in_past_the_buffer_is_a_protocol_error() {
        let mut s = session(params(), 10);
        s.submit(read(4));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 2, b"abcd", true), Instant::now())
            .unwrap_err();
        assert!(matches!(err, ProtocolError::DataOverrun { .. }));
    }

    #[test]
    fn data_in_out_of_order_or_with_a_gap_is_a_protocol_error() {
        // A gap: the first Data-In starts at 4 instead of 0. Accepting it
        // would complete the read with zeros where bytes 0..4 belong.
        let mut s = session(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 4, b"efgh", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataOffset {
                itt,
                offset: 4,
                expected: 0
            }
        );

        // An overlap: the second Data-In goes back to offset 0.
        let mut s = session(params(), 10);
        s.submit(read(8));
        let itt = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(data_in(itt, 0, 0, b"abcd", false), Instant::now())
            .unwrap();
        let err = s
            .handle_pdu(data_in(itt, 1, 0, b"abcd", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DataOffset {
                itt,
                offset: 0,
                expected: 4
            }
        );
        assert!(s.poll_event().is_none(), "the read must not complete");
    }

    /// Submit a read, answer it GOOD, and return its ITT; `sn` is the
    /// StatSN the answer carries (bumped).
    fn run_one(s: &mut Connection, sn: &mut u32) -> u32 {
        let id = s.submit(read(0));
        let itt = itt_of(&drain(s)[0]);
        s.handle_pdu(response(itt, *sn, *sn + 1, *sn + 1000, 0), Instant::now())
            .unwrap();
        *sn += 1;
        match s.poll_event() {
            Some(Event::Command {
                id: got,
                result: Ok(r),
            }) if got == id => assert_eq!(r.status, 0),
            other => panic!("expected the command's GOOD, got {other:?}"),
        }
        itt
    }

    #[test]
    fn late_answer_for_a_finished_itt_is_rejected_not_given_to_the_task_in_its_slot() {
        let mut s = session(params(), 10_000);
        let mut sn = 1;
        let old = run_one(&mut s, &mut sn);
        // Walk the ITTs round the table until a new command sits in the
        // slot the finished one used (ITTs count up; the table is a power
        // of two long, so one lap later lands on the same slot).
        let mut newer = None;
        for _ in 0..4096 {
            let id = s.submit(read(0));
            let itt = itt_of(&drain(&mut s)[0]);
            if itt & 63 == old & 63 {
                newer = Some((id, itt));
                break;
            }
            s.handle_pdu(response(itt, sn, sn + 1, sn + 1000, 0), Instant::now())
                .unwrap();
            sn += 1;
            assert!(
                matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
            );
        }
        let (id, itt) = newer.expect("an ITT in the finished command's slot");
        assert_ne!(itt, old, "ITTs are not reused");
        // The target answers the old ITT again: a protocol error naming it,
        // and the command now in that slot is untouched.
        let err = s
            .handle_pdu(response(old, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnknownTask {
                what: "SCSI Response",
                itt: old
            }
        );
        assert!(
            s.poll_event().is_none(),
            "nothing delivered for a stale ITT"
        );
        assert_eq!(s.outstanding(), 1);
        s.handle_pdu(response(itt, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
        );
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn long_lived_task_keeps_its_slot_while_thousands_of_commands_pass_it() {
        let p = FeatureParams {
            queue_depth: 1024,
            ..params()
        };
        let mut s = session(p, 100_000);
        let mut sn = 1;
        let long = s.submit(read(0));
        let long_itt = itt_of(&drain(&mut s)[0]);
        // Many commands in flight at once, so the table has to grow around
        // the long-lived task, then many one at a time past its slot.
        let ids: Vec<TaskId> = (0..300).map(|_| s.submit(read(0))).collect();
        let itts: Vec<u32> = drain(&mut s).iter().map(itt_of).collect();
        assert_eq!(itts.len(), 300);
        assert!(!itts.contains(&long_itt));
        for (id, itt) in ids.iter().zip(&itts).rev() {
            s.handle_pdu(response(*itt, sn, sn + 1, sn + 1000, 0), Instant::now())
                .unwrap();
            sn += 1;
            assert!(
                matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == *id)
            );
        }
        for _ in 0..3000 {
            assert_ne!(run_one(&mut s, &mut sn), long_itt);
        }
        assert_eq!(s.outstanding(), 1, "only the long-lived task is left");
        // ABORT TASK still finds it (by its TaskId) and names its ITT.
        s.abort_task(long);
        let tmf = drain(&mut s);
        match &tmf[0].bhs {
            Bhs::TaskMgmtRequest(t) => assert_eq!(t.referenced_task_tag, long_itt),
            other => panic!("expected ABORT TASK, got {other:?}"),
        }
        s.handle_pdu(response(long_itt, sn, sn + 1, sn + 1000, 0), Instant::now())
            .unwrap();
        assert!(matches!(s.poll_event(), Some(Event::Command { id, result: Ok(_) }) if id == long));
    }

    #[test]
    fn data_in_for_unknown_task_is_a_protocol_error() {
        let mut s = session(params(), 10);
        let err = s
            .handle_pdu(data_in(99, 0, 0, b"abcd", true), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnknownTask {
                what: "Data-In",
                itt: 99
            }
        );
    }

    #[test]
    fn scsi_response_sense_data_is_extracted() {
        let mut s = session(params(), 10);
        let id = s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let mut pdu = response(itt, 1, 2, 10, 2);
        let sense = [
            0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0,
        ];
        let mut data = vec![0, sense.len() as u8];
        data.extend_from_slice(&sense);
        pdu.data = Bytes::from(data);
        s.handle_pdu(pdu, Instant::now()).unwrap();
        match s.poll_event() {
            Some(Event::Command { id: got, result }) => {
                assert_eq!(got, id);
                let r = result.unwrap();
                assert_eq!(r.status, 2);
                assert_eq!(&r.sense.unwrap()[..], &sense[..]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sense_length_past_the_segment_is_malformed() {
        let mut s = session(params(), 10);
        s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let mut pdu = response(itt, 1, 2, 10, 2);
        pdu.data = Bytes::from_static(&[0, 40, 0x70, 0]);
        assert!(matches!(
            s.handle_pdu(pdu, Instant::now()),
            Err(ProtocolError::MalformedData { .. })
        ));
    }

    fn data_outs(pdus: &[Pdu]) -> Vec<(u32, u32, u32, usize, bool)> {
        pdus.iter()
            .filter_map(|p| match &p.bhs {
                Bhs::DataOut(d) => {
                    Some((d.ttt, d.data_sn, d.buffer_offset, p.data.len(), d.final_))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn write_with_immediate_data_and_initial_r2t_sends_first_segment_in_the_command() {
        let mut s = session(params(), 10);
        s.submit(write(vec![1u8; 20000]));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!()
        };
        assert!(c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 20000);
        assert_eq!(sent[0].data.len(), 8192, "immediate data within MaxXmitDSL");
    }

    #[test]
    fn unsolicited_data_out_fills_first_burst_when_initial_r2t_is_no() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..params()
        };
        let mut s = session(p, 10);
        s.submit(write((0..50000u32).map(|i| i as u8).collect()));
        let sent = drain(&mut s);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!()
        };
        assert!(!c.final_, "unsolicited Data-Out follows");
        assert_eq!(sent[0].data.len(), 8192);
        assert_eq!(
            data_outs(&sent),
            vec![
                (RESERVED_TAG, 0, 8192, 8192, false),
                (RESERVED_TAG, 1, 16384, 3616, true),
            ]
        );
    }

    #[test]
    fn r2t_is_answered_with_data_out_sequence_within_segment_size() {
        let p = FeatureParams {
            immediate_data: false,
            max_xmit_data_segment_length: 4096,
            ..params()
        };
        let mut s = session(p, 10);
        let data: Vec<u8> = (0..10000u32).map(|i| (i * 7) as u8).collect();
        let id = s.submit(write(data.clone()));
        let sent = drain(&mut s);
        assert_eq!(sent[0].data.len(), 0);
        let itt = itt_of(&sent[0]);
        let r2t = |ttt, r2t_sn, offset, len| {
            Pdu::new(Bhs::R2t(R2t {
                lun: [0; 8],
                itt,
                ttt,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 10,
                r2t_sn,
                buffer_offset: offset,
                desired_length: len,
            }))
        };
        let now = Instant::now();
        s.handle_pdu(r2t(0x11, 0, 0, 6000), now).unwrap();
        s.handle_pdu(r2t(0x12, 1, 6000, 4000), now).unwrap();
        let outs = drain(&mut s);
        assert_eq!(
            data_outs(&outs),
            vec![
                (0x11, 0, 0, 4096, false),
                (0x11, 1, 4096, 1904, true),
                (0x12, 0, 6000, 4000, true),
            ]
        );
        let mut rebuilt = vec![0u8; 10000];
        for p in &outs {
            if let Bhs::DataOut(d) = &p.bhs {
                let o = d.buffer_offset as usize;
                rebuilt[o..o + p.data.len()].copy_from_slice(&p.data);
            }
        }
        assert_eq!(rebuilt, data);
        s.handle_pdu(response(itt, 1, 2, 10, 0), now).unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id: got, result: Ok(_) }) if got == id)
        );
    }

    #[test]
    fn r2t_beyond_the_write_is_a_protocol_error() {
        let mut s = session(params(), 10);
        s.submit(write(vec![0; 1000]));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(
                Pdu::new(Bhs::R2t(R2t {
                    lun: [0; 8],
                    itt,
                    ttt: 1,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                    r2t_sn: 0,
                    buffer_offset: 512,
                    desired_length: 1024,
                })),
                Instant::now(),
            )
            .unwrap_err();
        assert!(matches!(err, ProtocolError::BadR2t { .. }));
    }

    #[test]
    fn target_nop_in_is_echoed_without_advancing_cmd_sn() {
        let mut s = session(params(), 10);
        s.handle_pdu(
            Pdu::with_data(
                Bhs::NopIn(NopIn {
                    lun: [0; 8],
                    itt: RESERVED_TAG,
                    ttt: 0x55,
                    stat_sn: 1,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 10,
                }),
                Bytes::from_static(b"ping"),
            ),
            Instant::now(),
        )
        .unwrap();
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::NopOut(n) = &sent[0].bhs else {
            panic!()
        };
        assert_eq!(
            (n.itt, n.ttt, n.cmd_sn, n.immediate),
            (RESERVED_TAG, 0x55, 1, true)
        );
        assert_eq!(&sent[0].data[..], b"ping");
        assert_eq!(s.numbers().cmd_sn, 1);
    }

    #[test]
    fn idle_connection_pings_and_unanswered_ping_is_fatal() {
        let mut s = session(params(), 10);
        let t0 = Instant::now();
        s.start(t0);
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(5)));
        s.handle_timeout(t0 + Duration::from_secs(5)).unwrap();
        let sent = drain(&mut s);
        assert!(matches!(&sent[0].bhs, Bhs::NopOut(n) if n.itt != RESERVED_TAG && n.immediate));
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + Duration::from_secs(15)),
            "deadline is the ping's timeout"
        );
        let err = s.handle_timeout(t0 + Duration::from_secs(15)).unwrap_err();
        assert_eq!(err, ProtocolError::PingTimeout(Duration::from_secs(10)));
    }

    #[test]
    fn answered_ping_yields_pong() {
        let mut s = session(params(), 10);
        let t0 = Instant::now();
        let id = s.ping(t0);
        let itt = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(
            Pdu::new(Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt,
                ttt: RESERVED_TAG,
                stat_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 10,
            })),
            t0 + Duration::from_millis(3),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Pong { id: got, rtt }) if got == id && rtt == Duration::from_millis(3))
        );
        assert_eq!(
            s.poll_timeout(),
            Some(t0 + Duration::from_millis(3) + Duration::from_secs(5))
        );
    }

    #[test]
    fn long_text_answer_is_fetched_with_continuation_requests() {
        let mut s = session(params(), 10);
        let id = s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let first = drain(&mut s);
        assert_eq!(&first[0].data[..], b"SendTargets=All\0");
        let itt = itt_of(&first[0]);
        let text = |final_, ttt, data: &'static [u8]| {
            Pdu::with_data(
                Bhs::TextResponse(TextResponse {
                    final_,
                    continue_: !final_,
                    lun: [0; 8],
                    itt,
                    ttt,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                }),
                Bytes::from_static(data),
            )
        };
        let now = Instant::now();
        s.handle_pdu(text(false, 0x77, b"TargetName=iqn.a\0TargetAdd"), now)
            .unwrap();
        let cont = drain(&mut s);
        assert!(
            matches!(&cont[0].bhs, Bhs::TextRequest(t) if t.ttt == 0x77 && t.itt == itt && cont[0].data.is_empty())
        );
        s.handle_pdu(text(true, RESERVED_TAG, b"ress=1.2.3.4:3260,1\0"), now)
            .unwrap();
        match s.poll_event() {
            Some(Event::Text { id: got, result }) => {
                assert_eq!(got, id);
                assert_eq!(
                    &result.unwrap()[..],
                    b"TargetName=iqn.a\0TargetAddress=1.2.3.4:3260,1\0"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn send_targets_reply_over_16_mib_is_a_protocol_error() {
        let mut s = session(params(), 10);
        s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let itt = itt_of(&drain(&mut s)[0]);
        let part = |final_: bool, data: Bytes| {
            Pdu::with_data(
                Bhs::TextResponse(TextResponse {
                    final_,
                    continue_: !final_,
                    lun: [0; 8],
                    itt,
                    ttt: 0x77,
                    stat_sn: 1,
                    exp_cmd_sn: 2,
                    max_cmd_sn: 10,
                }),
                data,
            )
        };
        // 64 segments of 256 KiB: exactly the 16 MiB bound, still accepted.
        let chunk = Bytes::from(vec![b'a'; 256 * 1024]);
        let now = Instant::now();
        for _ in 0..MAX_TEXT_RESPONSE_BYTES / chunk.len() {
            s.handle_pdu(part(false, chunk.clone()), now).unwrap();
        }
        let err = s
            .handle_pdu(part(true, Bytes::from_static(b"b")), now)
            .unwrap_err();
        assert!(err.to_string().contains("over 16 MiB"), "{err}");
        assert!(
            s.poll_event().is_none(),
            "no text result from a refused reply"
        );
    }

    #[test]
    fn endless_text_continuation_is_a_protocol_error() {
        let mut s = session(params(), 10);
        s.submit_text(Bytes::from_static(b"SendTargets=All\0"));
        let itt = itt_of(&drain(&mut s)[0]);
        let more = Pdu::new(Bhs::TextResponse(TextResponse {
            final_: false,
            continue_: false,
            lun: [0; 8],
            itt,
            ttt: 0x77,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 10,
        }));
        let now = Instant::now();
        for _ in 1..MAX_TEXT_RESPONSES {
            s.handle_pdu(more.clone(), now).unwrap();
            assert_eq!(drain(&mut s).len(), 1, "one continuation request each");
        }
        let err = s.handle_pdu(more, now).unwrap_err();
        assert!(matches!(err, ProtocolError::MalformedData { .. }), "{err}");
        assert!(
            err.to_string().contains("more than 1024 responses"),
            "{err}"
        );
    }

    #[test]
    fn reject_naming_a_command_fails_that_command_only() {
        let mut s = session(params(), 10);
        let a = s.submit(read(512));
        let b = s.submit(read(512));
        let sent = drain(&mut s);
        let head = sent[0].encode(Default::default()).head;
        s.handle_pdu(
            Pdu::with_data(
                Bhs::Reject(crate::proto::pdu::Reject {
                    reason: 0x09,
                    stat_sn: 1,
                    exp_cmd_sn: 3,
                    max_cmd_sn: 10,
                    data_sn: 0,
                }),
                Bytes::from(head[..48].to_vec()),
            ),
            Instant::now(),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::Rejected(_)) }) if id == a)
        );
        assert_eq!(s.outstanding(), 1);
        s.fail_all("gone");
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::ConnectionLost(_)) }) if id == b)
        );
    }

    #[test]
    fn completed_abort_task_terminates_the_referenced_command() {
        let mut s = session(params(), 10);
        let victim = s.submit(read(512));
        let other = s.submit(read(512));
        drain(&mut s);
        let abort = s.abort_task(victim);
        let sent = drain(&mut s);
        let Bhs::TaskMgmtRequest(t) = &sent[0].bhs else {
            panic!("{:?}", sent[0].bhs)
        };
        assert_eq!(t.function, tmf::ABORT_TASK);
        assert!(t.immediate);
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: t.itt,
                stat_sn: 1,
                exp_cmd_sn: 3,
                max_cmd_sn: 10,
            })),
            Instant::now(),
        )
        .unwrap();
        assert!(
            matches!(s.poll_event(), Some(Event::Command { id, result: Err(TaskError::Aborted) }) if id == victim)
        );
        assert!(
            matches!(s.poll_event(), Some(Event::TaskMgmt { id, result: Ok(TmfOutcome::Complete) }) if id == abort)
        );
        assert_eq!(s.outstanding(), 1, "{other:?} is still running");
    }

    #[test]
    fn completed_lun_reset_terminates_every_command_on_that_lun() {
        let mut s = session(params(), 10);
        let a = s.submit(read(512));
        let mut on_lun2 = read(512);
        on_lun2.lun = [0, 2, 0, 0, 0, 0, 0, 0];
        s.submit(on_lun2);
        let b = s.submit(read(512));
        drain(&mut s);
        s.lun_reset([0; 8]);
        let itt = match &drain(&mut s)[0].bhs {
            Bhs::TaskMgmtRequest(t) => t.itt,
            other => panic!("{other:?}"),
        };
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt,
                stat_sn: 1,
                exp_cmd_sn: 4,
                max_cmd_sn: 10,
            })),
            Instant::now(),
        )
        .unwrap();
        let aborted: Vec<TaskId> = std::iter::from_fn(|| s.poll_event())
            .filter_map(|e| match e {
                Event::Command {
                    id,
                    result: Err(TaskError::Aborted),
                } => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(aborted, vec![a, b]);
        assert_eq!(s.outstanding(), 1);
    }

    #[test]
    fn serial_number_comparison_wraps() {
        assert!(sn_lt(0xffff_fff0, 5));
        assert!(!sn_lt(5, 0xffff_fff0));
        assert!(sn_lte(7, 7));
    }

    #[test]
    fn window_works_across_cmd_sn_wraparound() {
        let mut s = Connection::new(
            params(),
            SessionNumbers {
                cmd_sn: 0xffff_fffe,
                exp_cmd_sn: 0xffff_fffe,
                max_cmd_sn: 1,
                exp_stat_sn: 0,
            },
        );
        for _ in 0..6 {
            s.submit(read(0));
        }
        assert_eq!(drain(&mut s).len(), 4, "SNs fffffffe, ffffffff, 0, 1");
    }

    // ---- Data movement: the same reads and writes in-band and direct ----

    fn direct() -> FeatureParams {
        FeatureParams {
            data_movement: DataMovement::Direct,
            ..params()
        }
    }

    fn transmits(s: &mut Connection) -> Vec<Transmit> {
        std::iter::from_fn(|| s.poll_transmit()).collect()
    }

    fn response_with_underflow(itt: u32, stat_sn: u32, short_by: u32) -> Pdu {
        let mut p = response(itt, stat_sn, 2, 40, 0);
        if let Bhs::ScsiResponse(r) = &mut p.bhs {
            r.residual = Residual {
                underflow: true,
                overflow: false,
                count: short_by,
            };
        }
        p
    }

    fn r2t(itt: u32, ttt: u32, offset: u32, len: u32) -> Pdu {
        Pdu::new(Bhs::R2t(R2t {
            lun: [0; 8],
            itt,
            ttt,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 40,
            r2t_sn: 0,
            buffer_offset: offset,
            desired_length: len,
        }))
    }

    fn completed(s: &mut Connection) -> CommandResult {
        match s.poll_event() {
            Some(Event::Command { result, .. }) => result.expect("command succeeds"),
            other => panic!("expected a command completion, got {other:?}"),
        }
    }

    // --- In-band read buffers come from a pool and always go back. --------

    fn private_pool() -> &'static Pool {
        Box::leak(Box::new(Pool::new(crate::iobuf::ARENA_LEN)))
    }

    fn pooled_session(pool: &'static Pool) -> Connection {
        let mut s = session(params(), 40);
        s.set_read_pool(pool);
        s
    }

    /// Submit a read of `len` bytes and send it; its ITT.
    fn sent_read(s: &mut Connection, len: u32) -> (TaskId, u32) {
        let id = s.submit(read(len));
        let itt = itt_of(&drain(s)[0]);
        (id, itt)
    }

    /// Lend `itt`'s buffer for a Data-In at `offset`, fill it with `data` as
    /// the receive path would, and hand it back.
    fn place(s: &mut Connection, h: Pdu, data: &[u8]) -> Result<(), ProtocolError> {
        let Bhs::DataIn(d) = &h.bhs else {
            panic!("not a Data-In")
        };
        let mut lent = s
            .lend_read_buffer(d, data.len() as u32)
            .expect("buffer lent");
        lent.dest().copy_from_slice(data);
        s.handle_placed(Pdu::new(h.bhs), lent, Instant::now())
    }

    #[test]
    fn in_band_read_buffers_return_to_the_pool_when_commands_complete_in_place_or_copied() {
        let pool = private_pool();
        let mut s = pooled_session(pool);
        let (_, copied) = sent_read(&mut s, 8192);
        let (_, placed) = sent_read(&mut s, 8192);
        assert_eq!(pool.in_use(), 0, "nothing is taken before data arrives");
        s.handle_pdu(data_in(copied, 0, 0, &[1; 8192], true), Instant::now())
            .unwrap();
        let pdu = data_in(placed, 0, 0, &[], true);
        place(&mut s, pdu, &[2; 8192]).unwrap();
        let (a, b) = (completed(&mut s), completed(&mut s));
        assert_eq!(pool.in_use(), 2 * 8192, "the callers hold both buffers");
        assert!(a.data.iter().all(|&x| x == 1) && b.data.iter().all(|&x| x == 2));
        drop((a, b));
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn in_band_read_buffers_return_to_the_pool_when_commands_fail_are_aborted_or_the_core_goes() {
        let pool = private_pool();
        let now = Instant::now();

        // A protocol error mid-read, then the connection is given up.
        let mut s = pooled_session(pool);
        let (_, itt) = sent_read(&mut s, 8192);
        s.handle_pdu(data_in(itt, 0, 0, &[1; 4096], false), now)
            .unwrap();
        assert_eq!(pool.in_use(), 8192);
        assert!(s
            .handle_pdu(data_in(itt, 7, 4096, &[1; 4096], true), now)
            .is_err());
        s.fail_all("connection lost");
        assert!(matches!(
            s.poll_event(),
            Some(Event::Command { result: Err(_), .. })
        ));
        assert_eq!(pool.in_use(), 0, "fail_all");

        // Aborted (ABORT TASK answered) with part of its data in.
        let (victim, itt) = sent_read(&mut s, 8192);
        s.handle_pdu(data_in(itt, 0, 0, &[1; 4096], false), now)
            .unwrap();
        s.abort_task(victim);
        let Bhs::TaskMgmtRequest(t) = &drain(&mut s)[0].bhs else {
            panic!("no TMF sent")
        };
        let tmf_itt = t.itt;
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: tmf_itt,
                stat_sn: 1,
                exp_cmd_sn: 3,
                max_cmd_sn: 40,
            })),
            now,
        )
        .unwrap();
        while s.poll_event().is_some() {}
        assert_eq!(pool.in_use(), 0, "abort");

        // The payload of a command given up while it arrives: the lent
        // buffer is dropped when it comes back.
        let (_, itt) = sent_read(&mut s, 8192);
        let h = data_in(itt, 0, 0, &[], true);
        let Bhs::DataIn(d) = &h.bhs else {
            unreachable!()
        };
        let lent = s.lend_read_buffer(d, 8192).expect("lent");
        s.fail_all("timed out");
        while s.poll_event().is_some() {}
        assert_eq!(pool.in_use(), 8192, "the reader still holds it");
        assert!(s.handle_placed(Pdu::new(h.bhs), lent, now).is_err());
        assert_eq!(pool.in_use(), 0, "late payload");

        // Reconnect: the old core is dropped with reads half done, one of
        // them with its buffer lent to the old connection's reader.
        let (_, a) = sent_read(&mut s, 8192);
        let (_, b) = sent_read(&mut s, 16384);
        s.handle_pdu(data_in(a, 0, 0, &[1; 4096], false), now)
            .unwrap();
        let h = data_in(b, 0, 0, &[], false);
        let Bhs::DataIn(d) = &h.bhs else {
            unreachable!()
        };
        let lent = s.lend_read_buffer(d, 4096).expect("lent");
        assert_eq!(pool.in_use(), 8192 + 16384);
        drop(s);
        drop(lent);
        assert_eq!(pool.in_use(), 0, "core and reader dropped");
    }

    #[test]
    fn a_short_in_band_read_never_hands_out_stale_pool_bytes() {
        let pool = private_pool();
        // A chunk full of another read's bytes, back in the pool.
        let mut dirty = pool.alloc(8192);
        dirty.fill(0xee);
        let dirty_addr = dirty.as_ptr() as usize;
        drop(dirty);
        for (placed, underflow) in [(false, true), (true, true), (false, false), (true, false)] {
            let mut s = pooled_session(pool);
            let (_, itt) = sent_read(&mut s, 8192);
            // 3000 bytes and the status: the target sent less than asked,
            // with or without saying so in the residual.
            let mut last = data_in(itt, 0, 0, &[], true);
            if let Bhs::DataIn(d) = &mut last.bhs {
                d.residual = Residual {
                    underflow,
                    overflow: false,
                    count: if underflow { 8192 - 3000 } else { 0 },
                };
            }
            if placed {
                place(&mut s, last, &[7; 3000]).unwrap();
            } else {
                last.data = Bytes::from(vec![7; 3000]);
                s.handle_pdu(last, Instant::now()).unwrap();
            }
            let r = completed(&mut s);
            assert_eq!(
                r.data.as_ptr() as usize,
                dirty_addr,
                "the dirty chunk was reused"
            );
            assert_eq!(r.data.len(), 3000, "only what the target sent");
            assert!(r.data.iter().all(|&x| x == 7), "{placed} {underflow}");
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn reads_past_the_pool_cap_get_heap_buffers_and_never_wait() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(crate::iobuf::ARENA_LEN)));
        let mut s = pooled_session(pool);
        let mut held = Vec::new();
        // 40 reads of 128 KiB: the 4 MiB cap holds 32 of them.
        for i in 0..40u8 {
            let (_, itt) = sent_read(&mut s, 128 << 10);
            s.handle_pdu(
                data_in(itt, 0, 0, &vec![i; 128 << 10], true),
                Instant::now(),
            )
            .unwrap();
            let r = completed(&mut s);
            assert!(r.data.iter().all(|&x| x == i));
            held.push(r);
        }
        assert_eq!(pool.in_use(), 32 * (128 << 10));
        drop(held);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn in_band_transmits_never_carry_buffers() {
        let mut s = session(params(), 10);
        s.submit(read(65536));
        s.submit(write(vec![7u8; 100_000]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn in_band_read_larger_than_one_burst_is_reassembled_across_sequences() {
        // 600000 bytes > MaxBurstLength 262144: the target sends three
        // Data-In sequences (F at each end), DataSN running on.
        let mut s = session(params(), 10);
        s.submit(read(600_000));
        let itt = itt_of(&drain(&mut s)[0]);
        let pattern: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        let now = Instant::now();
        let mut data_sn = 0;
        for (burst_start, burst_end) in [(0, 262_144), (262_144, 524_288), (524_288, 600_000)] {
            let mut off = burst_start;
            while off < burst_end {
                let end = (off + 65_536).min(burst_end);
                let mut pdu = data_in(
                    itt,
                    data_sn,
                    off,
                    &pattern[off as usize..end as usize],
                    false,
                );
                if let Bhs::DataIn(d) = &mut pdu.bhs {
                    d.final_ = end == burst_end;
                    d.status_present = end == 600_000;
                }
                s.handle_pdu(pdu, now).unwrap();
                data_sn += 1;
                off = end;
            }
        }
        let r = completed(&mut s);
        assert_eq!(r.data.len(), 600_000);
        assert!(r.data[..] == pattern[..], "data reassembled in order");
    }

    #[test]
    fn in_band_write_that_fits_in_immediate_data_is_one_pdu() {
        let mut s = session(params(), 10);
        s.submit(write(vec![9u8; 4096]));
        let sent = drain(&mut s);
        assert_eq!(sent.len(), 1);
        let Bhs::ScsiCommand(c) = &sent[0].bhs else {
            panic!("expected a SCSI Command, got {:?}", sent[0].bhs)
        };
        assert!(c.write && c.final_);
        assert_eq!(&sent[0].data[..], &[9u8; 4096][..]);
        s.handle_pdu(response(c.itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }

    #[test]
    fn in_band_write_sends_immediate_unsolicited_then_solicited_data() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..params()
        };
        let mut s = session(p, 10);
        let data: Vec<u8> = (0..50000u32).map(|i| i as u8).collect();
        s.submit(write(data.clone()));
        let sent = drain(&mut s);
        let itt = itt_of(&sent[0]);
        let mut got = vec![0u8; 50000];
        got[..8192].copy_from_slice(&sent[0].data);
        for p in &sent[1..] {
            let Bhs::DataOut(d) = &p.bhs else { panic!() };
            got[d.buffer_offset as usize..][..p.data.len()].copy_from_slice(&p.data);
        }
        s.handle_pdu(r2t(itt, 0x77, 20000, 30000), Instant::now())
            .unwrap();
        for p in drain(&mut s) {
            let Bhs::DataOut(d) = &p.bhs else { panic!() };
            assert_eq!(d.ttt, 0x77);
            got[d.buffer_offset as usize..][..p.data.len()].copy_from_slice(&p.data);
        }
        assert!(
            got == data,
            "immediate + unsolicited + solicited cover the write"
        );
        s.handle_pdu(response(itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }

    #[test]
    fn direct_read_hands_the_transport_the_task_buffer_and_completes_from_the_response() {
        let mut s = session(direct(), 10);
        s.submit(read(16384));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1, "only the command; no Data-In is expected");
        let Bhs::ScsiCommand(c) = &sent[0].pdu.bhs else {
            panic!("expected a SCSI Command")
        };
        assert!(c.read && !c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 16384);
        let d = sent[0].direct.clone().expect("buffers for the transport");
        assert_eq!(d.itt, c.itt);
        assert_eq!(d.write, None);
        let region = d.read.expect("read destination");
        assert_eq!(region.len, 16384);
        // Other tasks come and go while the target writes into the buffer.
        s.submit(read(512));
        let other = itt_of(&drain(&mut s)[0]);
        s.handle_pdu(response(other, 1, 3, 40, 0), Instant::now())
            .unwrap();
        let _ = completed(&mut s);
        // The target placed 12288 bytes and says so with the residual.
        s.handle_pdu(response_with_underflow(c.itt, 2, 4096), Instant::now())
            .unwrap();
        let r = completed(&mut s);
        assert_eq!(r.status, 0);
        assert_eq!(r.data.len(), 12288, "residual applied");
        assert_eq!(
            r.data.as_ptr() as usize,
            region.addr,
            "the caller gets the very memory the transport registered"
        );
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn direct_read_larger_than_one_burst_is_one_command_and_one_response() {
        let mut s = session(direct(), 10);
        s.submit(read(4 << 20));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1);
        let region = sent[0].direct.as_ref().unwrap().read.unwrap();
        assert_eq!(region.len, 4 << 20, "the whole read, not one burst");
        s.handle_pdu(response(itt_of(&sent[0].pdu), 1, 2, 40, 0), Instant::now())
            .unwrap();
        let r = completed(&mut s);
        assert_eq!(r.data.len(), 4 << 20);
        assert_eq!(r.data.as_ptr() as usize, region.addr);
        assert_eq!(s.copied_bytes(), 0, "direct: the core copies nothing");
    }

    #[test]
    fn direct_reads_and_writes_of_every_size_class_copy_nothing_in_the_core() {
        let mut s = session(direct(), 10);
        for len in [512u32, 8192, 65536, 262144, 1 << 20] {
            s.submit(read(len));
            s.submit(write(vec![7u8; len as usize]));
            for t in transmits(&mut s) {
                if let Bhs::ScsiCommand(_) = t.pdu.bhs {
                    s.handle_pdu(response(itt_of(&t.pdu), 1, 2, 40, 0), Instant::now())
                        .unwrap();
                }
            }
            let a = completed(&mut s);
            let b = completed(&mut s);
            assert_eq!(
                a.data.len() + b.data.len(),
                len as usize,
                "one read, one write"
            );
        }
        assert_eq!(s.copied_bytes(), 0);
    }

    #[test]
    fn direct_write_that_fits_in_immediate_data_leaves_nothing_to_fetch() {
        let mut s = session(direct(), 10);
        s.submit(write(vec![3u8; 4096]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1);
        assert_eq!(&sent[0].pdu.data[..], &[3u8; 4096][..]);
        assert!(sent[0].direct.is_none(), "no RDMA Read needed");
        s.handle_pdu(response(itt_of(&sent[0].pdu), 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).data.len(), 0);
    }

    #[test]
    fn direct_write_names_the_first_byte_not_sent_as_immediate_data() {
        // ImmediateData=Yes, InitialR2T=Yes: 8192 bytes ride in the command,
        // the target fetches the rest from offset 8192.
        let mut s = session(direct(), 10);
        let data = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        s.submit(CommandRequest {
            data_out: data.clone(),
            ..write(Vec::new())
        });
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 1, "no Data-Out: the rest moves by RDMA Read");
        let Bhs::ScsiCommand(c) = &sent[0].pdu.bhs else {
            panic!()
        };
        assert!(c.write && c.final_);
        assert_eq!(c.expected_data_transfer_length, 100_000);
        assert_eq!(&sent[0].pdu.data[..], &data[..8192]);
        let d = sent[0].direct.clone().unwrap();
        assert_eq!(d.read, None);
        let w = d.write.unwrap();
        assert_eq!(w.offset, 8192);
        assert_eq!(
            w.data.as_ptr(),
            data.as_ptr(),
            "the caller's bytes, not a copy"
        );
        assert_eq!(w.data.len(), 100_000);
        s.handle_pdu(response(c.itt, 1, 2, 40, 0), Instant::now())
            .unwrap();
        assert_eq!(completed(&mut s).status, 0);
    }

    #[test]
    fn direct_write_sends_unsolicited_data_out_then_leaves_the_rest_to_the_target() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..direct()
        };
        let mut s = session(p, 10);
        s.submit(write((0..50000u32).map(|i| i as u8).collect()));
        let sent = transmits(&mut s);
        let pdus: Vec<Pdu> = sent.iter().map(|t| t.pdu.clone()).collect();
        let Bhs::ScsiCommand(c) = &pdus[0].bhs else {
            panic!()
        };
        assert!(!c.final_, "unsolicited Data-Out follows");
        assert_eq!(pdus[0].data.len(), 8192);
        assert_eq!(
            data_outs(&pdus),
            vec![
                (RESERVED_TAG, 0, 8192, 8192, false),
                (RESERVED_TAG, 1, 16384, 3616, true),
            ]
        );
        let w = sent[0].direct.clone().unwrap().write.unwrap();
        assert_eq!(w.offset, 20000, "first byte after FirstBurstLength");
        assert!(sent[1..].iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn direct_write_of_exactly_the_first_burst_needs_no_rdma_read() {
        let p = FeatureParams {
            initial_r2t: false,
            first_burst_length: 20000,
            ..direct()
        };
        let mut s = session(p, 10);
        s.submit(write(vec![1u8; 20000]));
        let sent = transmits(&mut s);
        assert_eq!(sent.len(), 3, "command + two unsolicited Data-Out");
        assert!(sent.iter().all(|t| t.direct.is_none()));
    }

    #[test]
    fn data_in_for_a_direct_task_is_a_protocol_error() {
        let mut s = session(direct(), 10);
        s.submit(read(8192));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 0, &[0u8; 512], false), Instant::now())
            .unwrap_err();
        assert_eq!(
            err,
            ProtocolError::DirectTaskData {
                what: "Data-In",
                itt
            }
        );
    }

    #[test]
    fn data_in_with_status_for_a_direct_task_is_a_protocol_error() {
        let mut s = session(direct(), 10);
        s.submit(read(512));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(data_in(itt, 0, 0, &[0u8; 512], true), Instant::now())
            .unwrap_err();
        assert!(matches!(err, ProtocolError::DirectTaskData { .. }), "{err}");
        assert!(s.poll_event().is_none(), "the task did not complete");
    }

    #[test]
    fn r2t_for_a_direct_task_is_a_protocol_error() {
        let mut s = session(direct(), 10);
        s.submit(write(vec![0u8; 100_000]));
        let itt = itt_of(&drain(&mut s)[0]);
        let err = s
            .handle_pdu(r2t(itt, 1, 8192, 8192), Instant::now())
            .unwrap_err();
        assert_eq!(err, ProtocolError::DirectTaskData { what: "R2T", itt });
        assert!(drain(&mut s).is_empty(), "no Data-Out answers it");
    }

    #[test]
    fn direct_task_aborted_by_lun_reset_completes_as_aborted() {
        // The buffer is released only when the task ends: here by a
        // completed LOGICAL UNIT RESET, after which the target will not
        // touch it again (RFC 7143 §4.2.3.3).
        let mut s = session(direct(), 10);
        let id = s.submit(read(8192));
        let _ = drain(&mut s);
        let reset = s.lun_reset([0; 8]);
        let Bhs::TaskMgmtRequest(t) = &drain(&mut s)[0].bhs else {
            panic!("expected the reset request")
        };
        let tmf_itt = t.itt;
        assert_eq!(s.outstanding(), 2);
        s.handle_pdu(
            Pdu::new(Bhs::TaskMgmtResponse(crate::proto::pdu::TaskMgmtResponse {
                response: 0,
                itt: tmf_itt,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 40,
            })),
            Instant::now(),
        )
        .unwrap();
        let events: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(matches!(
            &events[0],
            Event::Command { id: got, result: Err(TaskError::Aborted) } if *got == id
        ));
        assert!(matches!(&events[1], Event::TaskMgmt { id: got, .. } if *got == reset));
        assert_eq!(s.outstanding(), 0);
    }
}
