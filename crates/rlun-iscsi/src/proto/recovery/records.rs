//! What the recovery machine keeps: each SCSI command until its final
//! answer ([`CmdRecord`], the one record of it above the connection core),
//! the requests that live as long as one connection, its own task
//! management and logout, and the state of the connection — live, down
//! (waiting for the next attempt) or closed.

use std::time::Instant;

use super::api::{Failure, RequestId};
use crate::proto::connection::{CommandRequest, Connection, TaskError, TaskId, CALLER_TASK_IDS};

/// A SCSI command kept until it has a final answer: the one record of it
/// above the connection core, with whatever reaches its caller.
#[derive(Debug)]
pub(super) struct CmdRecord<W> {
    pub(super) req: CommandRequest,
    /// The driver's way back to the caller, returned with the answer.
    pub(super) waiter: W,
    /// Task in the current connection's core, if submitted there.
    pub(super) task: Option<TaskId>,
    /// When it times out (only while submitted and not being aborted);
    /// while it waits in the core for the command window or the queue
    /// depth, when to look again whether it has been sent.
    pub(super) deadline: Option<Instant>,
    /// Submitted but not yet seen on the wire: its `command_timeout` starts
    /// when a look finds it sent.
    pub(super) queued: bool,
    /// When it was last handed to the core (for a command held back by a
    /// command window the target keeps closed).
    pub(super) submitted: Option<Instant>,
    /// Times it was aborted because it timed out.
    pub(super) timeouts: u32,
}

/// Requests that live only as long as one connection.
#[derive(Debug, Clone, Copy)]
pub(super) enum Other {
    Text(RequestId),
    Ping(RequestId),
    /// A caller's task management request, and when it was sent.
    Tmf(RequestId, Instant),
}

/// A task management request of our own.
#[derive(Debug, Clone, Copy)]
pub(super) enum OwnTmf {
    /// ABORT TASK for a timed-out command.
    Abort { lun: [u8; 8], sent: Instant },
    /// LOGICAL UNIT RESET after an abort failed.
    Reset { sent: Instant },
}

/// Who sent the Logout Request that is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogoutBy {
    /// A caller (or every handle gone): the session ends.
    Us,
    /// The target asked: log in again afterwards.
    Target,
}

#[derive(Debug)]
pub(super) enum Conn {
    /// Full feature phase on a connection.
    Live(Box<Connection>),
    /// No connection since `since`; the next attempt starts at `wake`
    /// (`None`: an attempt is under way).
    Down {
        since: Instant,
        wake: Option<Instant>,
    },
    /// The session is over.
    Closed,
}

/// The core's task id for kept command `id`.
pub(super) fn task_of(id: RequestId) -> TaskId {
    TaskId(CALLER_TASK_IDS | id.0)
}

/// What a connection-scoped request gets when there is no connection.
pub(super) fn not_live_failure(conn: &Conn) -> Failure {
    match conn {
        Conn::Closed => Failure::Closed,
        _ => Failure::Task(TaskError::ConnectionLost("reconnecting".into())),
    }
}
