//! Full Feature Phase of one iSCSI connection, sans-IO (RFC 7143 §4.2.5).
//!
//! [`Connection`] owns everything a logged-in connection has to track: the
//! Initiator Task Tags in use, the command window (CmdSN, ExpCmdSN, MaxCmdSN,
//! §4.2.2.1), ExpStatSN (§4.2.2.2), Data-In reassembly with DataSN checks
//! (§11.7.5), R2T → Data-Out sequences (§11.8) within MaxBurstLength,
//! immediate and unsolicited data within FirstBurstLength (§4.2.5.2), NOP
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
//!   (§4.2.2.1); a command window that never reopens holds
//!   commands back only until their deadline: aborted unsent, they fail
//!   with [`TaskError::WindowClosed`] after the recovery layer's retries;
//! - tasks in flight are bounded by the queue depth, and an ITT is freed
//!   when its task completes.
//!
//! # Files
//!
//! Bottom up; each file uses only those above it in this list:
//!
//! - `api.rs`: what a driver sees — [`FeatureParams`], requests and
//!   results, [`Event`], [`Transmit`] with its [`DirectBuffers`], the
//!   errors ([`TaskError`], [`ProtocolError`]) and serial-number arithmetic;
//! - `tasks.rs`: the tasks on the wire, by ITT (the direct-mapped task
//!   table), and the requests waiting for the window;
//! - `direct.rs`: direct data movement (RFC 7145): a command's buffers for
//!   the transport, and how much of a read the target placed;
//! - `state.rs`: [`Connection`] itself, its sequence numbers (§4.2.2),
//!   task bookkeeping, completion and failure of tasks, the output queues;
//! - `inband.rs`: in-band data movement — Data-In into the read buffer
//!   (lent to the receive path, [`Lent`], or copied), Data-Out for
//!   immediate, unsolicited and solicited data (§11.7, §11.8);
//! - `submit.rs`: the command window and queue depth (§4.2.2.1), sending
//!   SCSI Commands and Text Requests;
//! - `control.rs`: NOP keepalives (§11.18, §11.19), task management
//!   (§11.5, §11.6, §4.2.3), logout (§11.14);
//! - `receive.rs`: every PDU from the target enters here
//!   ([`Connection::handle_pdu`], [`Connection::handle_placed`]).

mod api;
mod control;
mod direct;
#[cfg(test)]
mod fixtures;
mod inband;
mod receive;
mod state;
mod submit;
mod tasks;

pub use api::{
    sn_lt, sn_lte, CommandRequest, CommandResult, DataMovement, DirectBuffers, Event,
    FeatureParams, ProtocolError, ReadRegion, SequenceNumbers, TaskError, TaskHold, TaskId,
    TmfOutcome, Transmit, TransmitKind, WriteRegion, CALLER_TASK_IDS, MAX_TEXT_RESPONSES,
    MAX_TEXT_RESPONSE_BYTES,
};
pub use inband::Lent;
pub use state::Connection;
