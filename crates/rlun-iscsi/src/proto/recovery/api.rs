//! What a driver of the recovery machine sees: its configuration and the
//! policy's constants (timeouts, retries, back-off), the ids of callers'
//! requests, the [`Output`]s it drains — answers, orders to connect or
//! disconnect, notices — and why a connection ended ([`Loss`]) or a
//! request failed ([`Failure`]). RFC 7143 §13.15 (DefaultTime2Wait),
//! §7 (error recovery at level 0), §11.5 (task management), §11.9
//! (asynchronous events).

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::proto::connection::{CommandResult, ProtocolError, TaskError, TmfOutcome};
use crate::proto::pdu::async_event;
use crate::scsi::Sense;
use crate::scsi::TargetChange;

/// Timed-out commands are re-issued this many times before they fail.
pub const MAX_TIMEOUT_RETRIES: u32 = 3;

/// How often a command held back by the command window or the queue depth
/// is looked at; once sent, its `command_timeout` runs from the look that
/// found it sent (so it gets at least the full timeout on the wire).
pub const QUEUED_RECHECK: Duration = Duration::from_secs(1);
/// Task management requests must answer within this long.
pub const TMF_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest pause between failed connection attempts.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest pause between failed connection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection lost within this long of its login, before any command
/// completed on it, failed "right after login".
pub const FLAP_WINDOW: Duration = Duration::from_secs(30);
/// Longest pause after connections that keep failing right after login.
pub const MAX_FLAP_BACKOFF: Duration = Duration::from_secs(30);

/// The recovery policy's knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// A command without an answer for this long is aborted and re-issued.
    pub command_timeout: Duration,
    /// How long commands may wait for the connection to come back.
    pub replacement_timeout: Duration,
    /// Log in again after a connection loss. Off for discovery sessions and
    /// when the replacement timeout is zero: then a loss ends the session.
    pub reconnect: bool,
    /// Task management requests that do not answer within this long escalate.
    pub tmf_timeout: Duration,
    /// Times a timed-out command is re-issued before it fails.
    pub max_timeout_retries: u32,
}

impl RecoveryConfig {
    /// The policy with the standard TMF timeout and retry count.
    pub fn new(
        command_timeout: Duration,
        replacement_timeout: Duration,
        reconnect: bool,
    ) -> RecoveryConfig {
        RecoveryConfig {
            command_timeout,
            replacement_timeout,
            reconnect: reconnect && !replacement_timeout.is_zero(),
            tmf_timeout: TMF_TIMEOUT,
            max_timeout_retries: MAX_TIMEOUT_RETRIES,
        }
    }
}

/// Names a caller's request; its answer carries the same id. Ids grow with
/// submission order, so sorting by id is oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loss {
    /// The transport failed (EOF, reset, write error); the driver that
    /// reported it knows the details.
    Transport,
    /// The target broke the protocol.
    Protocol(ProtocolError),
    /// A NOP-Out ping went unanswered for this long.
    NotResponding(Duration),
    /// A LOGICAL UNIT RESET did not answer within this long.
    TaskManagementTimeout(Duration),
    /// A LOGICAL UNIT RESET (after a failed ABORT TASK) failed.
    LunResetFailed,
    /// The target announced that it drops the connection or the session.
    TargetDropping { event: u8, time2wait: u16 },
    /// The target asked to renegotiate parameters: log in again.
    Renegotiation,
    /// The target asked us to log out; we did and log in again.
    TargetLogout,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Transport => write!(f, "connection to the target lost"),
            Loss::Protocol(e) => write!(f, "target violated the iSCSI protocol: {e}"),
            Loss::NotResponding(d) => write!(
                f,
                "target stopped answering (no answer to a NOP-Out ping within {d:?})"
            ),
            Loss::TaskManagementTimeout(d) => {
                write!(f, "task management did not answer within {d:?}")
            }
            Loss::LunResetFailed => write!(f, "LOGICAL UNIT RESET failed"),
            Loss::TargetDropping { event, .. } if *event == async_event::SESSION_DROP => {
                write!(f, "target dropped the session")
            }
            Loss::TargetDropping { .. } => write!(f, "target dropped the connection"),
            Loss::Renegotiation => write!(f, "target requested renegotiation"),
            Loss::TargetLogout => write!(f, "target asked us to log out"),
        }
    }
}

/// Why a caller's request did not get an answer from the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The connection core's outcome (target failure, reject, abort…).
    Task(TaskError),
    /// The connection the request lived on ended and the request cannot
    /// move to another one (the cause is the last [`Output::Disconnect`]).
    ConnectionLost,
    /// The session could not be re-established within the replacement timeout.
    ReplacementTimeout,
    /// The session is closed (logged out, or closing).
    Closed,
    /// Given back while the connection was down, for its caller to send
    /// through another path ([`Recovery::handle_release`]).
    ///
    /// [`Recovery::handle_release`]: crate::proto::recovery::Recovery::handle_release
    Released,
}

/// What [`Recovery::handle_release`] did.
///
/// [`Recovery::handle_release`]: crate::proto::recovery::Recovery::handle_release
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Released {
    /// Commands given back.
    pub released: usize,
    /// Commands of the LUN still kept for the next connection (ones that
    /// may change the medium, when only the others were asked for); 0
    /// while a connection is live.
    pub kept: usize,
}

/// What the driver must do or deliver. `W` is what the driver handed in
/// with each command ([`Recovery::handle_command`]) to reach its caller;
/// it comes back with the answer.
///
/// [`Recovery::handle_command`]: crate::proto::recovery::Recovery::handle_command
#[derive(Debug)]
pub enum Output<W = ()> {
    /// A caller's SCSI command has its final answer.
    Command {
        id: RequestId,
        result: Result<CommandResult, Failure>,
        waiter: W,
    },
    /// A caller's text exchange finished.
    Text {
        id: RequestId,
        result: Result<Bytes, Failure>,
    },
    /// A caller's ping was answered (round trip) or failed.
    Pong {
        id: RequestId,
        result: Result<Duration, Failure>,
    },
    /// A caller's task management request finished.
    TaskMgmt {
        id: RequestId,
        result: Result<TmfOutcome, Failure>,
    },
    /// A caller's logout finished.
    Logout {
        id: RequestId,
        result: Result<(), Failure>,
    },
    /// The current connection is over: close its transport. `reconnect`
    /// says whether a new one will be attempted; `pending` counts the
    /// commands kept for it; `quiet` means the end was expected (a logout).
    Disconnect {
        cause: Loss,
        reconnect: bool,
        pending: usize,
        quiet: bool,
    },
    /// Connect and log in now; report with [`Recovery::handle_connected`]
    /// or [`Recovery::handle_connect_failed`].
    ///
    /// [`Recovery::handle_connected`]: crate::proto::recovery::Recovery::handle_connected
    /// [`Recovery::handle_connect_failed`]: crate::proto::recovery::Recovery::handle_connect_failed
    Connect,
    /// A new connection is live; `after` is the time since the loss.
    Reconnected { after: Duration, reissued: usize },
    /// The target announced, in an asynchronous event, a change an
    /// initiator must look at: a LUN's capacity, the LUN inventory, the
    /// INQUIRY data.
    TargetChanged(TargetChange),
    /// Something worth a log line.
    Notice(Notice),
    /// The session is over: nothing more will come out. Requests that
    /// still arrive are answered with [`Failure::Closed`].
    Finished,
}

/// Events worth logging; the driver chooses the level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A command passed its deadline and is being aborted.
    CommandTimedOut { opcode: u8, timeout: Duration },
    /// A command aborted after a timeout goes out again.
    ReissuingAborted { id: RequestId },
    /// ABORT TASK failed: resetting the logical unit.
    AbortFailed {
        result: Result<TmfOutcome, TaskError>,
    },
    /// ABORT TASK unanswered: resetting the logical unit.
    AbortUnanswered,
    /// One of our task management requests finished.
    TaskMgmtDone {
        result: Result<TmfOutcome, TaskError>,
    },
    /// An asynchronous SCSI event (with its sense data when it parses).
    ScsiEvent { sense: Option<Sense> },
    /// The target asks for a logout within this many seconds.
    TargetRequestsLogout { within_secs: u16 },
    /// The target announces that it drops the connection or session.
    TargetDropping { event: u8, time2wait: u16 },
    /// The target asks to renegotiate.
    RenegotiationRequested,
    /// An asynchronous message we do not act on.
    AsyncMessage {
        event: u8,
        vcode: u8,
        parameters: [u16; 3],
    },
    /// The target rejected a PDU that names no task of ours.
    Reject { reason: &'static str },
    /// The target answered a logout with a non-zero response code.
    LogoutResponse { code: u8 },
    /// A connection attempt failed (the driver has the details).
    AttemptFailed,
    /// The replacement timeout passed: `failed` commands failed.
    GaveUp { failed: usize },
    /// `count` connections in a row failed right after login (before any
    /// command completed on them); the last one because of `cause`.
    RepeatedLoginFailures { count: u32, cause: Loss },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_replacement_timeout_turns_reconnection_off() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::ZERO, true);
        assert!(!cfg.reconnect);
    }
}
