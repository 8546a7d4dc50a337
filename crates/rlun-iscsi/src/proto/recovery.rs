//! Connection recovery, sans-IO: what happens to the caller's work when a
//! command, a task management request or the whole connection fails.
//!
//! [`Recovery`] sits on top of the connection core ([`Connection`]) and owns
//! what must outlive one connection: every SCSI command until it has a
//! final answer (so it can be re-issued after an abort or on a new
//! connection), the requests that live only as long as one connection
//! (text, ping, task management, logout), and the policy:
//!
//! - **Command deadlines.** A command without an answer for
//!   `command_timeout` is aborted (ABORT TASK, RFC 7143 §11.5.1) and
//!   re-issued; after [`MAX_TIMEOUT_RETRIES`] re-issues it fails as aborted.
//!   The timeout counts time on the wire: a command the core holds back
//!   for the queue depth is looked at every [`QUEUED_RECHECK`] and its
//!   timeout starts once it is sent; one held back by a command window the
//!   target keeps closed for a whole `command_timeout` times out unsent and
//!   finally fails as `WindowClosed`.
//!   An ABORT TASK that fails or is unanswered for `tmf_timeout` escalates to
//!   LOGICAL UNIT RESET; a reset that fails or is unanswered ends the
//!   connection, and the kept commands go to a new one.
//! - **Connection loss.** The connection-scoped requests fail, the core is
//!   dropped, and after DefaultTime2Wait (§6.1) the driver is asked to
//!   connect and log in again ([`Output::Connect`]), then again after 1 s,
//!   2 s, 4 s… (at most [`MAX_BACKOFF`]) while attempts fail. On success the
//!   kept commands are re-issued oldest first. Requests keep being accepted
//!   while disconnected; once commands have waited for the replacement
//!   timeout *without the session making progress* (a command completing),
//!   the kept and new commands fail with [`Failure::ReplacementTimeout`].
//!   A successful login is not progress: a target that accepts every login
//!   and then breaks the connection cannot keep commands waiting for ever.
//!   Connections that fail right after login (within [`FLAP_WINDOW`], before
//!   any command completed on them) meet a growing pause, DefaultTime2Wait
//!   doubled per repeat up to [`MAX_FLAP_BACKOFF`], and are summarised as
//!   [`Notice::RepeatedLoginFailures`] instead of one warning each.
//! - **Logout.** A caller's logout waits until in-flight work has drained;
//!   a target's Asynchronous Message asking for logout (§11.9.1) is answered
//!   with a logout and a new login (commands are kept); announcements that
//!   the target drops the connection or session, and renegotiation
//!   requests, lead to a new connection too. When every handle is gone and
//!   nothing is pending the session logs out politely.
//! - **Capacity changes** announced by an asynchronous SCSI event (sense
//!   2A/09) are reported as [`Output::CapacityChanged`].
//!
//! Like the login and the connection core it does no I/O and reads no
//! clock. The driver feeds it requests (`handle_command`, `handle_text`…,
//! each returning the [`RequestId`] its answer will carry), received PDUs
//! ([`Recovery::handle_pdu`]), transport failures
//! ([`Recovery::handle_connection_lost`]), the outcome of the connection
//! attempts it was asked to make ([`Recovery::handle_connected`],
//! [`Recovery::handle_connect_failed`]) and the time
//! ([`Recovery::handle_timeout`] at [`Recovery::poll_timeout`]); it drains
//! [`Recovery::poll_transmit`] (PDUs for the current connection) and
//! [`Recovery::poll_output`] (answers for callers, connection orders and
//! notices to log).

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::connection::{
    CommandRequest, CommandResult, Connection, Event, Lent, ProtocolError, TaskError, TaskHold,
    TaskId, TmfOutcome, Transmit, CALLER_TASK_IDS,
};
use super::idmap::{IdMap, SlotTable};
use super::pdu::{async_event, DataIn, Pdu};
use crate::scsi::Sense;

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
}

/// What the driver must do or deliver. `W` is what the driver handed in
/// with each command ([`Recovery::handle_command`]) to reach its caller;
/// it comes back with the answer.
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
    Connect,
    /// A new connection is live; `after` is the time since the loss.
    Reconnected { after: Duration, reissued: usize },
    /// The target announced that a LUN's capacity changed.
    CapacityChanged,
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

/// A SCSI command kept until it has a final answer: the one record of it
/// above the connection core, with whatever reaches its caller.
#[derive(Debug)]
struct CmdRecord<W> {
    req: CommandRequest,
    /// The driver's way back to the caller, returned with the answer.
    waiter: W,
    /// Task in the current connection's core, if submitted there.
    task: Option<TaskId>,
    /// When it times out (only while submitted and not being aborted);
    /// while it waits in the core for the command window or the queue
    /// depth, when to look again whether it has been sent.
    deadline: Option<Instant>,
    /// Submitted but not yet seen on the wire: its `command_timeout` starts
    /// when a look finds it sent.
    queued: bool,
    /// When it was last handed to the core (for a command held back by a
    /// command window the target keeps closed).
    submitted: Option<Instant>,
    /// Times it was aborted because it timed out.
    timeouts: u32,
}

/// Requests that live only as long as one connection.
#[derive(Debug, Clone, Copy)]
enum Other {
    Text(RequestId),
    Ping(RequestId),
    Tmf(RequestId),
}

/// A task management request of our own.
#[derive(Debug, Clone, Copy)]
enum OwnTmf {
    /// ABORT TASK for a timed-out command.
    Abort { lun: [u8; 8], sent: Instant },
    /// LOGICAL UNIT RESET after an abort failed.
    Reset { sent: Instant },
}

/// Who sent the Logout Request that is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogoutBy {
    /// A caller (or every handle gone): the session ends.
    Us,
    /// The target asked: log in again afterwards.
    Target,
}

#[derive(Debug)]
enum Conn {
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

/// The recovery state machine. See the module docs. `W` travels with each
/// command from [`Recovery::handle_command`] to its [`Output::Command`].
#[derive(Debug)]
pub struct Recovery<W = ()> {
    cfg: RecoveryConfig,
    conn: Conn,
    /// DefaultTime2Wait of the last login.
    time2wait: Duration,
    /// Pause before the next attempt.
    delay: Duration,
    next_id: u64,
    /// The kept commands, by request id. A command submitted to the core
    /// runs there under task id `CALLER_TASK_IDS | id` ([`task_of`]), so
    /// the core's completion names its record without a map between them.
    cmds: SlotTable<CmdRecord<W>>,
    deadlines: Deadlines,
    others: IdMap<TaskId, Other>,
    tmfs: IdMap<TaskId, OwnTmf>,
    /// Someone wants the session closed: the caller to answer (`None` when
    /// every handle was dropped). The logout goes out once work has drained.
    closing: Option<Option<RequestId>>,
    /// The Logout Request on the wire, and why.
    logout_sent: Option<(TaskId, LogoutBy)>,
    requests_open: bool,
    /// The replacement timeout passed and no reconnect has succeeded since:
    /// new commands fail at once while disconnected.
    gave_up: bool,
    /// Since when commands have been waiting without the session making
    /// progress (a command completing). Set by a connection loss, cleared by
    /// progress — not by a login, so a target that accepts every login and
    /// then fails cannot keep commands waiting past the replacement timeout.
    stall_since: Option<Instant>,
    /// When the current connection logged in, and whether a command has
    /// completed on it since.
    live_since: Instant,
    progress_on_conn: bool,
    /// Connections in a row that failed right after login.
    flaps: u32,
    outputs: VecDeque<Output<W>>,
    /// Cores let go of, waiting for the driver to drop them.
    retired: Vec<Connection>,
    /// Bytes retired cores copied that [`Recovery::take_copied_bytes`] has
    /// not reported yet.
    copied_untaken: u64,
}

/// The core's task id for kept command `id`.
fn task_of(id: RequestId) -> TaskId {
    TaskId(CALLER_TASK_IDS | id.0)
}

impl<W> Recovery<W> {
    /// Start on a connection that has just completed login; `time2wait` is
    /// its negotiated DefaultTime2Wait.
    pub fn new(
        cfg: RecoveryConfig,
        mut core: Connection,
        time2wait: Duration,
        now: Instant,
    ) -> Self {
        core.start(now);
        Recovery {
            cfg,
            conn: Conn::Live(Box::new(core)),
            time2wait,
            delay: time2wait,
            next_id: 0,
            cmds: SlotTable::default(),
            deadlines: Deadlines::default(),
            others: IdMap::default(),
            tmfs: IdMap::default(),
            closing: None,
            logout_sent: None,
            requests_open: true,
            gave_up: false,
            stall_since: None,
            live_since: now,
            progress_on_conn: false,
            flaps: 0,
            outputs: VecDeque::new(),
            retired: Vec::new(),
            copied_untaken: 0,
        }
    }

    /// The policy in force.
    pub fn config(&self) -> &RecoveryConfig {
        &self.cfg
    }

    /// True while a connection is in its full feature phase.
    pub fn is_live(&self) -> bool {
        matches!(self.conn, Conn::Live(_))
    }

    /// True once the session is over.
    pub fn is_finished(&self) -> bool {
        matches!(self.conn, Conn::Closed)
    }

    /// SCSI commands kept (in flight, waiting for the window or for a connection).
    pub fn pending_commands(&self) -> usize {
        self.cmds.len()
    }

    /// The current connection's core, when live (for diagnostics and tests).
    pub fn core(&self) -> Option<&Connection> {
        match &self.conn {
            Conn::Live(core) => Some(core),
            _ => None,
        }
    }

    /// The next request id: ids count up, skipping one whose slot in the
    /// command table a long-lived command holds (see [`SlotTable`]).
    fn alloc_id(&mut self) -> RequestId {
        loop {
            let id = self.next_id;
            self.next_id += 1;
            if self.cmds.is_free(id) {
                return RequestId(id);
            }
        }
    }

    // ---- requests from callers -------------------------------------------

    /// A SCSI command; its answer comes as [`Output::Command`] with
    /// `waiter`.
    pub fn handle_command(&mut self, req: CommandRequest, waiter: W, now: Instant) -> RequestId {
        let id = self.alloc_id();
        let fail = match &self.conn {
            Conn::Closed => Some(Failure::Closed),
            Conn::Live(_) if self.closing.is_some() || self.logout_by() == Some(LogoutBy::Us) => {
                Some(Failure::Closed)
            }
            Conn::Down { .. } if self.gave_up => Some(Failure::ReplacementTimeout),
            _ => None,
        };
        if let Some(f) = fail {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(f),
                waiter,
            });
            return id;
        }
        self.cmds.insert(
            id.0,
            CmdRecord {
                req,
                waiter,
                task: None,
                deadline: None,
                queued: false,
                submitted: None,
                timeouts: 0,
            },
        );
        // While the target's logout request is being served, commands wait
        // for the next connection.
        if self.logout_by() != Some(LogoutBy::Target) {
            self.submit(id, now);
        }
        self.step();
        id
    }

    /// A Text Request exchange; the answer comes as [`Output::Text`].
    pub fn handle_text(&mut self, data: Bytes, now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.submit_text(data);
                self.others.insert(task, Other::Text(id));
                self.drain_core(now);
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs.push_back(Output::Text { id, result: Err(f) });
            }
        }
        id
    }

    /// A NOP-Out ping; the answer comes as [`Output::Pong`].
    pub fn handle_ping(&mut self, now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.ping(now);
                self.others.insert(task, Other::Ping(id));
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs.push_back(Output::Pong { id, result: Err(f) });
            }
        }
        id
    }

    /// A caller's LOGICAL UNIT RESET; the answer comes as [`Output::TaskMgmt`].
    pub fn handle_lun_reset(&mut self, lun: [u8; 8], now: Instant) -> RequestId {
        let id = self.alloc_id();
        match &mut self.conn {
            Conn::Live(core) => {
                let task = core.lun_reset(lun);
                self.others.insert(task, Other::Tmf(id));
                self.drain_core(now);
            }
            conn => {
                let f = not_live_failure(conn);
                self.outputs
                    .push_back(Output::TaskMgmt { id, result: Err(f) });
            }
        }
        id
    }

    /// A caller wants the session closed: in-flight work drains first, then
    /// the Logout Request goes out. The answer comes as [`Output::Logout`].
    pub fn handle_logout(&mut self) -> RequestId {
        let id = self.alloc_id();
        match &self.conn {
            Conn::Closed => self
                .outputs
                .push_back(Output::Logout { id, result: Ok(()) }),
            Conn::Down { .. } => {
                // Nothing to log out of: stop reconnecting.
                self.closing = Some(Some(id));
                self.finish(Failure::Closed);
            }
            Conn::Live(_) => {
                if self.closing.is_some() || self.logout_by() == Some(LogoutBy::Us) {
                    self.outputs
                        .push_back(Output::Logout { id, result: Ok(()) });
                } else {
                    // Also while the target's logout is on the wire: the
                    // session then ends instead of logging in again.
                    self.closing = Some(Some(id));
                    self.step();
                }
            }
        }
        id
    }

    /// Every handle is gone: no more requests will come. Pending commands
    /// still finish; then the session logs out politely.
    pub fn handle_requests_closed(&mut self) {
        self.requests_open = false;
        if matches!(self.conn, Conn::Down { .. }) && self.cmds.is_empty() {
            self.finish(Failure::Closed);
        } else {
            self.step();
        }
    }

    // ---- the connection ---------------------------------------------------

    /// A PDU received on the current connection.
    pub fn handle_pdu(&mut self, pdu: Pdu, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let result = core.handle_pdu(pdu, now);
        self.drain_core(now);
        match result {
            Ok(()) => self.step(),
            Err(e) => self.lose(Loss::Protocol(e), now),
        }
    }

    /// Lend the current connection's core's read buffer for a Data-In
    /// payload ([`Connection::lend_read_buffer`]); `None` when no connection
    /// is live or the header names no place for it.
    pub fn lend_read_buffer(&mut self, h: &DataIn, len: u32) -> Option<Lent> {
        match &mut self.conn {
            Conn::Live(core) => core.lend_read_buffer(h, len),
            _ => None,
        }
    }

    /// A Data-In whose payload was read into a lent buffer
    /// ([`Connection::handle_placed`]). A buffer lent by a connection that is
    /// no longer live is dropped.
    pub fn handle_placed(&mut self, pdu: Pdu, lent: Lent, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let result = core.handle_placed(pdu, lent, now);
        self.drain_core(now);
        match result {
            Ok(()) => self.step(),
            Err(e) => self.lose(Loss::Protocol(e), now),
        }
    }

    /// The driver saw the current connection fail (EOF, I/O error).
    pub fn handle_connection_lost(&mut self, now: Instant) {
        if self.is_live() {
            self.lose(Loss::Transport, now);
        }
    }

    /// The attempt asked for by [`Output::Connect`] logged in; `core` is the
    /// new connection's full feature phase, `time2wait` its DefaultTime2Wait.
    /// Ignored when no attempt was wanted any more (the core then goes
    /// straight to [`Recovery::take_retired`]).
    pub fn handle_connected(&mut self, mut core: Connection, time2wait: Duration, now: Instant) {
        let Conn::Down { since, wake: None } = self.conn else {
            self.retired.push(core);
            return;
        };
        core.start(now);
        self.conn = Conn::Live(Box::new(core));
        self.time2wait = time2wait;
        self.delay = time2wait;
        self.live_since = now;
        self.progress_on_conn = false;
        if self.cmds.is_empty() {
            // Nobody is waiting: the next stall starts afresh.
            self.stall_since = None;
            self.gave_up = false;
        }
        // Re-issue what the old connection left unfinished, oldest first.
        let mut ids: Vec<RequestId> = self.cmds.keys().map(RequestId).collect();
        ids.sort_unstable();
        for &id in &ids {
            self.submit(id, now);
        }
        self.outputs.push_back(Output::Reconnected {
            after: now.saturating_duration_since(since),
            reissued: ids.len(),
        });
        self.step();
    }

    /// The attempt asked for by [`Output::Connect`] failed.
    pub fn handle_connect_failed(&mut self, now: Instant) {
        let Conn::Down { since, wake: None } = self.conn else {
            return;
        };
        self.outputs
            .push_back(Output::Notice(Notice::AttemptFailed));
        self.check_stall(now);
        if !self.requests_open && self.cmds.is_empty() {
            self.finish(Failure::Closed);
            return;
        }
        self.delay = next_backoff(self.delay);
        self.conn = Conn::Down {
            since,
            wake: Some(now + self.delay),
        };
    }

    // ---- time ---------------------------------------------------------------

    /// When [`Recovery::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.conn {
            Conn::Live(core) => {
                let cmd = self.deadlines.first(&self.cmds);
                let tmf = self
                    .tmfs
                    .values()
                    .map(|t| match t {
                        OwnTmf::Abort { sent, .. } | OwnTmf::Reset { sent } => {
                            *sent + self.cfg.tmf_timeout
                        }
                    })
                    .min();
                [core.poll_timeout(), cmd, tmf].into_iter().flatten().min()
            }
            Conn::Down { wake, .. } => [*wake, self.give_up_at()].into_iter().flatten().min(),
            Conn::Closed => None,
        }
    }

    /// When the kept commands fail if the session makes no progress before.
    fn give_up_at(&self) -> Option<Instant> {
        if self.gave_up || self.cmds.is_empty() {
            return None;
        }
        Some(self.stall_since? + self.cfg.replacement_timeout)
    }

    /// Give up when commands have waited without progress for the
    /// replacement timeout; end the session when nobody is left to wait.
    /// Only while disconnected: a live connection has its own deadlines.
    fn check_stall(&mut self, now: Instant) {
        if self.give_up_at().is_some_and(|t| t <= now) {
            self.give_up();
        }
    }

    /// Called at (or after) the instant from [`Recovery::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        match &mut self.conn {
            Conn::Live(core) => {
                if core.poll_timeout().is_some_and(|t| t <= now) {
                    let result = core.handle_timeout(now);
                    self.drain_core(now);
                    match result {
                        Ok(()) => {}
                        Err(ProtocolError::PingTimeout(d)) => {
                            return self.lose(Loss::NotResponding(d), now)
                        }
                        Err(e) => return self.lose(Loss::Protocol(e), now),
                    }
                }
                if self.check_tmfs(now) {
                    self.check_deadlines(now);
                }
                self.drain_core(now);
                self.step();
            }
            Conn::Down { since, wake } => {
                let (since, wake) = (*since, *wake);
                self.check_stall(now);
                if !self.requests_open && self.cmds.is_empty() {
                    return self.finish(Failure::Closed);
                }
                if wake.is_some_and(|w| w <= now) {
                    self.conn = Conn::Down { since, wake: None };
                    self.outputs.push_back(Output::Connect);
                }
            }
            Conn::Closed => {}
        }
    }

    // ---- outputs ------------------------------------------------------------

    /// Next PDU to send on the current connection (with the task's buffers
    /// when the transport moves data directly).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        match &mut self.conn {
            Conn::Live(core) => core.poll_transmit(),
            _ => None,
        }
    }

    /// Keep `hold` with task `itt` of the current connection (see
    /// [`TaskHold`]): right after [`Recovery::poll_transmit`] gave out that
    /// task's command. Dropped at once when the task is not there.
    pub fn hold(&mut self, itt: u32, hold: TaskHold) {
        if let Conn::Live(core) = &mut self.conn {
            let _ = core.hold(itt, hold);
        }
    }

    /// Cores of connections the machine is done with. The driver drops them
    /// after the connection's transport (on [`Output::Disconnect`] and
    /// [`Output::Finished`]): tasks' buffers must outlive any remote access
    /// to them.
    pub fn take_retired(&mut self) -> Vec<Connection> {
        std::mem::take(&mut self.retired)
    }

    /// SCSI data bytes the connections' cores copied since the last call
    /// (see [`Connection::take_copied_bytes`]), the current one's and those
    /// of connections already let go of.
    pub fn take_copied_bytes(&mut self) -> u64 {
        let live = match &mut self.conn {
            Conn::Live(core) => core.take_copied_bytes(),
            _ => 0,
        };
        std::mem::take(&mut self.copied_untaken) + live
    }

    /// Next answer, order or notice.
    pub fn poll_output(&mut self) -> Option<Output<W>> {
        self.outputs.pop_front()
    }

    // ---- internals ------------------------------------------------------------

    fn logout_by(&self) -> Option<LogoutBy> {
        self.logout_sent.map(|(_, by)| by)
    }

    /// Hand a kept command to the live core with a fresh deadline.
    fn submit(&mut self, id: RequestId, now: Instant) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        let Some(cmd) = self.cmds.get_mut(id.0) else {
            return;
        };
        let task = task_of(id);
        core.submit_as(task, cmd.req.clone());
        // A command the window or the queue depth holds back has not reached
        // the target: its timeout starts once it is sent, so that waiting
        // behind other commands neither aborts it (locally, unseen by the
        // target, and re-queued behind younger commands) nor leaves it less
        // than `command_timeout` on the wire.
        cmd.queued = core.is_waiting(task);
        cmd.submitted = Some(now);
        let deadline = if cmd.queued {
            now + QUEUED_RECHECK
        } else {
            now + self.cfg.command_timeout
        };
        // A replaced deadline's entry goes stale in the queue.
        let replaced = cmd.deadline.replace(deadline).is_some();
        cmd.task = Some(task);
        self.deadlines.push(deadline, id, &self.cmds);
        if replaced {
            self.deadlines.prune(&self.cmds);
        }
    }

    /// Things that follow from the state rather than from one event: the
    /// caller's logout once work has drained, the polite logout when every
    /// handle is gone.
    fn step(&mut self) {
        let Conn::Live(core) = &mut self.conn else {
            return;
        };
        if !self.requests_open
            && self.cmds.is_empty()
            && self.others.is_empty()
            && self.closing.is_none()
            && self.logout_sent.is_none()
        {
            self.closing = Some(None);
        }
        if self.closing.is_some() && self.logout_sent.is_none() && core.outstanding() == 0 {
            let task = core.logout();
            self.logout_sent = Some((task, LogoutBy::Us));
        }
    }

    /// Handle everything the core reported; a loss decided on the way is
    /// acted on after the whole batch (completions in it are real answers).
    fn drain_core(&mut self, now: Instant) {
        let mut loss = None;
        let mut finished = false;
        loop {
            let Conn::Live(core) = &mut self.conn else {
                return;
            };
            let Some(ev) = core.poll_event() else {
                break;
            };
            match ev {
                Event::Command { id, result } => self.command_done(id, result, now),
                Event::Text { id, result } => {
                    if let Some(Other::Text(rid)) = self.others.remove(&id) {
                        self.outputs.push_back(Output::Text {
                            id: rid,
                            result: result.map_err(Failure::Task),
                        });
                    }
                }
                Event::Pong { id, rtt } => {
                    if let Some(Other::Ping(rid)) = self.others.remove(&id) {
                        self.outputs.push_back(Output::Pong {
                            id: rid,
                            result: Ok(rtt),
                        });
                    }
                }
                Event::TaskMgmt { id, result } => {
                    if let Some(l) = self.tmf_done(id, result, now) {
                        loss.get_or_insert(l);
                    }
                }
                Event::Logout { id, result } => match self.logout_sent {
                    Some((task, by)) if task == id => {
                        if let Ok(code) = result {
                            if code != 0 {
                                self.outputs
                                    .push_back(Output::Notice(Notice::LogoutResponse { code }));
                            }
                        }
                        if by == LogoutBy::Us || self.closing.is_some() {
                            finished = true;
                        } else {
                            loss.get_or_insert(Loss::TargetLogout);
                        }
                    }
                    _ => {}
                },
                Event::Async {
                    event,
                    vcode,
                    parameters,
                    data,
                } => {
                    if let Some(l) = self.async_event(event, vcode, parameters, &data) {
                        loss.get_or_insert(l);
                    }
                }
                Event::Reject { reason } => {
                    self.outputs
                        .push_back(Output::Notice(Notice::Reject { reason }));
                }
            }
        }
        if finished {
            self.finish(Failure::Closed);
        } else if let Some(l) = loss {
            self.lose(l, now);
        }
    }

    fn command_done(
        &mut self,
        task: TaskId,
        result: Result<CommandResult, TaskError>,
        now: Instant,
    ) {
        if task.0 & CALLER_TASK_IDS == 0 {
            return;
        }
        let id = RequestId(task.0 & !CALLER_TASK_IDS);
        // Only the answer for the command's current task counts.
        let Some(cmd) = self.cmds.get_mut(id.0).filter(|c| c.task == Some(task)) else {
            return;
        };
        cmd.task = None;
        let had_deadline = cmd.deadline.take().is_some();
        let timeouts = cmd.timeouts;
        if had_deadline {
            self.deadlines.prune(&self.cmds);
        }
        // Aborted after its deadline, or never sent because the target
        // kept the command window closed that long: retried the same way.
        let timed_out = matches!(
            result,
            Err(TaskError::Aborted | TaskError::WindowClosed { .. })
        );
        if timed_out && timeouts > 0 {
            if timeouts > self.cfg.max_timeout_retries {
                if let Some(cmd) = self.cmds.remove(id.0) {
                    self.outputs.push_back(Output::Command {
                        id,
                        result: result.map_err(Failure::Task),
                        waiter: cmd.waiter,
                    });
                }
            } else {
                self.outputs
                    .push_back(Output::Notice(Notice::ReissuingAborted { id }));
                self.submit(id, now);
            }
            return;
        }
        if result == Err(TaskError::Aborted) {
            // Aborted by a LUN reset (ours or a caller's): not its fault.
            self.submit(id, now);
            return;
        }
        let Some(cmd) = self.cmds.remove(id.0) else {
            return;
        };
        if matches!(
            result,
            Ok(_) | Err(TaskError::TargetFailure(_)) | Err(TaskError::Rejected(_))
        ) {
            // The target answered: the session makes progress.
            self.stall_since = None;
            self.gave_up = false;
            self.progress_on_conn = true;
            self.flaps = 0;
        }
        self.outputs.push_back(Output::Command {
            id,
            result: result.map_err(Failure::Task),
            waiter: cmd.waiter,
        });
    }

    /// A task management request finished; returns a loss when the
    /// connection must go.
    fn tmf_done(
        &mut self,
        task: TaskId,
        result: Result<TmfOutcome, TaskError>,
        now: Instant,
    ) -> Option<Loss> {
        if let Some(own) = self.tmfs.remove(&task) {
            let ok = matches!(
                result,
                Ok(TmfOutcome::Complete) | Ok(TmfOutcome::TaskDoesNotExist)
            );
            match own {
                OwnTmf::Abort { lun, .. } if !ok => {
                    self.outputs
                        .push_back(Output::Notice(Notice::AbortFailed { result }));
                    self.reset_lun(lun, now);
                }
                OwnTmf::Reset { .. } if result != Ok(TmfOutcome::Complete) => {
                    return Some(Loss::LunResetFailed);
                }
                _ => self
                    .outputs
                    .push_back(Output::Notice(Notice::TaskMgmtDone { result })),
            }
        } else if let Some(Other::Tmf(rid)) = self.others.remove(&task) {
            self.outputs.push_back(Output::TaskMgmt {
                id: rid,
                result: result.map_err(Failure::Task),
            });
        }
        None
    }

    fn reset_lun(&mut self, lun: [u8; 8], now: Instant) {
        if let Conn::Live(core) = &mut self.conn {
            let task = core.lun_reset(lun);
            self.tmfs.insert(task, OwnTmf::Reset { sent: now });
        }
    }

    /// Escalate our task management that has not answered: ABORT TASK →
    /// LOGICAL UNIT RESET → new connection. Returns false when the
    /// connection was dropped.
    fn check_tmfs(&mut self, now: Instant) -> bool {
        let mut expired: Vec<(TaskId, OwnTmf)> = self
            .tmfs
            .iter()
            .filter(|(_, t)| match t {
                OwnTmf::Abort { sent, .. } | OwnTmf::Reset { sent } => {
                    now >= *sent + self.cfg.tmf_timeout
                }
            })
            .map(|(id, t)| (*id, *t))
            .collect();
        expired.sort_by_key(|(id, _)| *id);
        if expired
            .iter()
            .any(|(_, t)| matches!(t, OwnTmf::Reset { .. }))
        {
            self.lose(Loss::TaskManagementTimeout(self.cfg.tmf_timeout), now);
            return false;
        }
        for (id, t) in expired {
            self.tmfs.remove(&id);
            if let OwnTmf::Abort { lun, .. } = t {
                self.outputs
                    .push_back(Output::Notice(Notice::AbortUnanswered));
                self.reset_lun(lun, now);
            }
        }
        true
    }

    /// Abort commands past their deadline.
    fn check_deadlines(&mut self, now: Instant) {
        while let Some((_, id)) = self.deadlines.pop_due(now, &self.cmds) {
            let Conn::Live(core) = &mut self.conn else {
                return;
            };
            let Some(cmd) = self.cmds.get_mut(id.0) else {
                continue;
            };
            cmd.deadline = None;
            let Some(task) = cmd.task else {
                continue;
            };
            // Held back by a window the *target* has kept closed for a whole
            // command timeout: that is the target's doing, and the command
            // times out as before (aborted locally, re-issued, and failing
            // as WindowClosed after its retries). Held back by our own queue
            // depth, or by a window that is open again, it only waits.
            let window_stuck = cmd.queued
                && !core.window_open()
                && cmd
                    .submitted
                    .is_some_and(|t| now >= t + self.cfg.command_timeout);
            if cmd.queued && !window_stuck {
                // Still waiting here: look again shortly. Sent since the
                // last look: the full timeout from now.
                cmd.queued = core.is_waiting(task);
                let next = now
                    + if cmd.queued {
                        QUEUED_RECHECK
                    } else {
                        self.cfg.command_timeout
                    };
                cmd.deadline = Some(next);
                self.deadlines.push(next, id, &self.cmds);
                continue;
            }
            cmd.timeouts += 1;
            self.outputs
                .push_back(Output::Notice(Notice::CommandTimedOut {
                    opcode: cmd.req.cdb[0],
                    timeout: self.cfg.command_timeout,
                }));
            let lun = cmd.req.lun;
            let tmf = core.abort_task(task);
            self.tmfs.insert(tmf, OwnTmf::Abort { lun, sent: now });
        }
    }

    /// An Asynchronous Message (RFC 7143 §11.9); returns a loss when the
    /// connection must go.
    fn async_event(
        &mut self,
        event: u8,
        vcode: u8,
        parameters: [u16; 3],
        data: &[u8],
    ) -> Option<Loss> {
        match event {
            async_event::SCSI_ASYNC_EVENT => {
                // Sense data: SenseLength (2 bytes) then the sense bytes.
                let sense = Sense::from_iscsi_data_segment(data).ok().flatten();
                if sense
                    .as_ref()
                    .is_some_and(|s| s.asc == 0x2a && s.ascq == 0x09)
                {
                    self.outputs.push_back(Output::CapacityChanged);
                }
                self.outputs
                    .push_back(Output::Notice(Notice::ScsiEvent { sense }));
                None
            }
            async_event::LOGOUT_REQUESTED => {
                self.outputs
                    .push_back(Output::Notice(Notice::TargetRequestsLogout {
                        within_secs: parameters[2],
                    }));
                if self.logout_sent.is_none() {
                    if let Conn::Live(core) = &mut self.conn {
                        let task = core.logout();
                        self.logout_sent = Some((task, LogoutBy::Target));
                    }
                }
                None
            }
            async_event::CONNECTION_DROP | async_event::SESSION_DROP => {
                let time2wait = parameters[1];
                self.outputs
                    .push_back(Output::Notice(Notice::TargetDropping { event, time2wait }));
                Some(Loss::TargetDropping { event, time2wait })
            }
            async_event::NEGOTIATION_REQUEST => {
                self.outputs
                    .push_back(Output::Notice(Notice::RenegotiationRequested));
                Some(Loss::Renegotiation)
            }
            _ => {
                self.outputs.push_back(Output::Notice(Notice::AsyncMessage {
                    event,
                    vcode,
                    parameters,
                }));
                None
            }
        }
    }

    /// The current connection is over: connection-scoped requests fail,
    /// commands are kept for the next connection (or fail when there will be
    /// none).
    fn lose(&mut self, cause: Loss, now: Instant) {
        if !self.is_live() {
            return;
        }
        self.retire(Conn::Down {
            since: now,
            wake: Some(now + self.time2wait),
        });
        self.tmfs.clear();
        self.deadlines.clear();
        for cmd in self.cmds.values_mut() {
            cmd.task = None;
            cmd.deadline = None;
        }
        let our_logout = self.logout_by() == Some(LogoutBy::Us);
        self.logout_sent = None;
        let reconnect = self.cfg.reconnect && self.closing.is_none() && !our_logout;
        let right_after_login =
            !self.progress_on_conn && now.saturating_duration_since(self.live_since) < FLAP_WINDOW;
        self.flaps = if right_after_login { self.flaps + 1 } else { 0 };
        // The cause goes out before the failures it explains, so a driver
        // reporting `Failure::ConnectionLost` can name it.
        self.outputs.push_back(Output::Disconnect {
            cause: cause.clone(),
            reconnect,
            pending: self.cmds.len(),
            // Repeats are summarised below instead of each one warned of.
            quiet: our_logout && self.cmds.is_empty() || reconnect && self.flaps > 1,
        });
        self.fail_others(Failure::ConnectionLost);
        if !reconnect {
            self.finish(Failure::ConnectionLost);
            return;
        }
        if self.flaps > 1 && self.flaps.is_power_of_two() {
            self.outputs
                .push_back(Output::Notice(Notice::RepeatedLoginFailures {
                    count: self.flaps,
                    cause,
                }));
        }
        // A target that fails the same way right after every login meets a
        // growing pause: DefaultTime2Wait (at least 1 s), doubled for each
        // repeat, up to MAX_FLAP_BACKOFF.
        self.delay = if self.flaps > 1 {
            let doublings = (self.flaps - 1).min(16);
            (self.time2wait.max(MIN_BACKOFF) * (1u32 << doublings)).min(MAX_FLAP_BACKOFF)
        } else {
            self.time2wait
        };
        self.conn = Conn::Down {
            since: now,
            wake: Some(now + self.delay),
        };
        self.stall_since.get_or_insert(now);
        self.check_stall(now);
        if !self.requests_open && self.cmds.is_empty() {
            self.finish(Failure::Closed);
        }
    }

    /// Every connection-scoped request fails with `f`, oldest first.
    fn fail_others(&mut self, f: Failure) {
        let mut others: Vec<(TaskId, Other)> = self.others.drain().collect();
        others.sort_by_key(|(t, _)| *t);
        for (_, other) in others {
            self.outputs.push_back(match other {
                Other::Text(id) => Output::Text {
                    id,
                    result: Err(f.clone()),
                },
                Other::Ping(id) => Output::Pong {
                    id,
                    result: Err(f.clone()),
                },
                Other::Tmf(id) => Output::TaskMgmt {
                    id,
                    result: Err(f.clone()),
                },
            });
        }
    }

    /// The replacement timeout passed: every kept command fails.
    fn give_up(&mut self) {
        self.gave_up = true;
        let failed = self.cmds.len();
        self.outputs
            .push_back(Output::Notice(Notice::GaveUp { failed }));
        for (id, waiter) in self.take_cmds() {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(Failure::ReplacementTimeout),
                waiter,
            });
        }
    }

    /// Forget every kept command; their ids and waiters, oldest first
    /// (callers hear about them in submission order).
    fn take_cmds(&mut self) -> Vec<(RequestId, W)> {
        let mut ids: Vec<(RequestId, W)> = self
            .cmds
            .drain()
            .into_iter()
            .map(|(id, c)| (RequestId(id), c.waiter))
            .collect();
        ids.sort_unstable_by_key(|(id, _)| *id);
        ids
    }

    /// Leave the current state for `next`; a live connection's core is kept
    /// for [`Recovery::take_retired`].
    fn retire(&mut self, next: Conn) {
        if let Conn::Live(mut core) = std::mem::replace(&mut self.conn, next) {
            self.copied_untaken += core.take_copied_bytes();
            self.retired.push(*core);
        }
    }

    /// End the session: kept commands fail with `failure`, a caller's logout
    /// is answered, and the driver is told to stop.
    fn finish(&mut self, failure: Failure) {
        if matches!(self.conn, Conn::Closed) {
            return;
        }
        self.retire(Conn::Closed);
        self.tmfs.clear();
        self.deadlines.clear();
        self.logout_sent = None;
        for (id, waiter) in self.take_cmds() {
            self.outputs.push_back(Output::Command {
                id,
                result: Err(failure.clone()),
                waiter,
            });
        }
        self.fail_others(Failure::Closed);
        if let Some(Some(id)) = self.closing.take() {
            self.outputs
                .push_back(Output::Logout { id, result: Ok(()) });
        }
        self.outputs.push_back(Output::Finished);
    }
}

/// The kept commands' deadlines, earliest first: a queue of `(deadline,
/// command)` entries instead of an ordered set, so that a command costs a
/// push when it is submitted and nothing when it completes. An entry is
/// current while its command still has that deadline
/// ([`CmdRecord::deadline`]); a completed command or a replaced deadline
/// leaves a stale entry behind, dropped when it reaches the front (the
/// front is always kept current) or when stale entries outnumber the
/// commands. Deadlines are pushed in time order (each is `now` plus a
/// fixed period; the queued-command recheck, shorter, is rare and takes
/// the slow, sorted insert).
#[derive(Debug, Default)]
struct Deadlines {
    q: VecDeque<(Instant, RequestId)>,
}

impl Deadlines {
    fn is_current<W>(cmds: &SlotTable<CmdRecord<W>>, t: Instant, id: RequestId) -> bool {
        cmds.get(id.0).and_then(|c| c.deadline) == Some(t)
    }

    /// Watch command `id`, which has just been given deadline `t`.
    fn push<W>(&mut self, t: Instant, id: RequestId, cmds: &SlotTable<CmdRecord<W>>) {
        if self.q.back().is_none_or(|&(last, _)| last <= t) {
            self.q.push_back((t, id));
        } else {
            let at = self.q.partition_point(|&(d, _)| d <= t);
            self.q.insert(at, (t, id));
        }
        // Stale entries behind a long-lived front: drop them all at once,
        // so the queue stays within a small multiple of the kept commands.
        if self.q.len() > 2 * cmds.len() + 64 {
            self.q.retain(|&(t, id)| Self::is_current(cmds, t, id));
        }
    }

    /// Drop stale entries from the front (after a deadline went away).
    fn prune<W>(&mut self, cmds: &SlotTable<CmdRecord<W>>) {
        while let Some(&(t, id)) = self.q.front() {
            if Self::is_current(cmds, t, id) {
                break;
            }
            self.q.pop_front();
        }
    }

    /// The earliest current deadline.
    fn first<W>(&self, cmds: &SlotTable<CmdRecord<W>>) -> Option<Instant> {
        // The front is current after every change; the filter only guards.
        self.q
            .iter()
            .find(|&&(t, id)| Self::is_current(cmds, t, id))
            .map(|&(t, _)| t)
    }

    /// Take the earliest current entry if it is due at `now`.
    fn pop_due<W>(
        &mut self,
        now: Instant,
        cmds: &SlotTable<CmdRecord<W>>,
    ) -> Option<(Instant, RequestId)> {
        self.prune(cmds);
        match self.q.front() {
            Some(&(t, _)) if t <= now => self.q.pop_front(),
            _ => None,
        }
    }

    fn clear(&mut self) {
        self.q.clear();
    }
}

/// What a connection-scoped request gets when there is no connection.
fn not_live_failure(conn: &Conn) -> Failure {
    match conn {
        Conn::Closed => Failure::Closed,
        _ => Failure::Task(TaskError::ConnectionLost("reconnecting".into())),
    }
}

/// The pause after a failed attempt: doubles from at least [`MIN_BACKOFF`],
/// 1 s → 2 s → 4 s, never more than [`MAX_BACKOFF`].
fn next_backoff(delay: Duration) -> Duration {
    MIN_BACKOFF
        .max(delay.min(Duration::from_secs(2)) * 2)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    //! Every path driven with a real connection core and hand-made target
    //! PDUs: no socket, no clock (instants are `t0` plus offsets).

    use super::*;
    use crate::proto::connection::{FeatureParams, SequenceNumbers};
    use crate::proto::pdu::{
        tmf, AsyncMessage, Bhs, LogoutResponse, NopIn, Residual, ScsiResponse, TaskAttr,
        TaskMgmtResponse, RESERVED_TAG,
    };

    const T2W: Duration = Duration::from_secs(2);
    const GOOD: u8 = 0;

    fn cfg() -> RecoveryConfig {
        RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(120), true)
    }

    fn core_with(nop_interval: Option<Duration>) -> Connection {
        core_of(FeatureParams {
            nop_interval,
            ..FeatureParams::default()
        })
    }

    /// A core with `params`, at CmdSN 1 with a window of 64.
    fn core_of(params: FeatureParams) -> Connection {
        Connection::new(
            params,
            SequenceNumbers {
                cmd_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
                exp_stat_sn: 1,
            },
        )
    }

    fn core() -> Connection {
        core_with(None)
    }

    /// A read whose CDB starts with `tag`, so re-issues can be recognised.
    fn read(tag: u8) -> CommandRequest {
        let mut cdb = [0u8; 16];
        cdb[0] = tag;
        CommandRequest {
            lun: [0; 8],
            cdb,
            data_out: Bytes::new(),
            read_len: 0,
            attr: TaskAttr::Simple,
        }
    }

    /// What the machine sent, in a form tests can compare.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Sent {
        /// SCSI command: (CDB tag, ITT).
        Cmd(u8, u32),
        /// Task management: (function, ITT, referenced ITT).
        Tmf(u8, u32, u32),
        Logout(u32),
        Text(u32),
        Nop(u32),
    }

    struct Harness<W = ()> {
        r: Recovery<W>,
        t0: Instant,
        stat_sn: u32,
    }

    impl Harness {
        fn new() -> Harness {
            Harness::with(cfg(), core())
        }

        fn with(cfg: RecoveryConfig, core: Connection) -> Harness {
            Harness::with_waiters(cfg, core)
        }

        fn cmd(&mut self, tag: u8, secs: f64) -> RequestId {
            let now = self.at(secs);
            self.r.handle_command(read(tag), (), now)
        }

        /// Run to `secs`, when the command with CDB tag `tag` and ITT `itt`
        /// times out (30 s): the timeout notice, then one ABORT TASK for it.
        /// Returns the ABORT TASK's own ITT.
        fn times_out_and_is_aborted(&mut self, secs: f64, tag: u8, itt: u32) -> u32 {
            self.run_until(secs);
            assert!(notices(&self.outputs()).contains(&Notice::CommandTimedOut {
                opcode: tag,
                timeout: Duration::from_secs(30)
            }));
            let sent = self.sent();
            let [Sent::Tmf(tmf::ABORT_TASK, abort, referenced)] = sent[..] else {
                panic!("{sent:?}")
            };
            assert_eq!(referenced, itt);
            abort
        }

        /// The ITT of the command with `tag` in `sent`.
        fn itt_of(sent: &[Sent], tag: u8) -> u32 {
            sent.iter()
                .find_map(|s| match s {
                    Sent::Cmd(t, itt) if *t == tag => Some(*itt),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("command {tag:#x} not in {sent:?}"))
        }
    }

    impl<W> Harness<W> {
        fn with_waiters(cfg: RecoveryConfig, core: Connection) -> Harness<W> {
            let t0 = Instant::now();
            Harness {
                r: Recovery::new(cfg, core, T2W, t0),
                t0,
                stat_sn: 1,
            }
        }

        fn at(&self, secs: f64) -> Instant {
            self.t0 + Duration::from_secs_f64(secs)
        }

        fn sent(&mut self) -> Vec<Sent> {
            std::iter::from_fn(|| self.r.poll_transmit())
                .map(|t| match t.pdu.bhs {
                    Bhs::ScsiCommand(c) => Sent::Cmd(c.cdb[0], c.itt),
                    Bhs::TaskMgmtRequest(t) => Sent::Tmf(t.function, t.itt, t.referenced_task_tag),
                    Bhs::LogoutRequest(l) => Sent::Logout(l.itt),
                    Bhs::TextRequest(t) => Sent::Text(t.itt),
                    Bhs::NopOut(n) => Sent::Nop(n.itt),
                    other => panic!("unexpected PDU {other:?}"),
                })
                .collect()
        }

        fn outputs(&mut self) -> Vec<Output<W>> {
            std::iter::from_fn(|| self.r.poll_output()).collect()
        }

        fn next_stat_sn(&mut self) -> u32 {
            self.stat_sn += 1;
            self.stat_sn - 1
        }

        fn pdu(&mut self, bhs: Bhs, data: Bytes, secs: f64) {
            let now = self.at(secs);
            self.r.handle_pdu(Pdu::with_data(bhs, data), now);
        }

        fn answer(&mut self, itt: u32, status: u8, secs: f64) {
            let stat_sn = self.next_stat_sn();
            self.pdu(
                Bhs::ScsiResponse(ScsiResponse {
                    bidi_overflow: false,
                    bidi_underflow: false,
                    residual: Residual::default(),
                    response: 0,
                    status,
                    itt,
                    snack_tag: 0,
                    stat_sn,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 64,
                    exp_data_sn: 0,
                    bidi_read_residual_count: 0,
                }),
                Bytes::new(),
                secs,
            );
        }

        fn tmf_answer(&mut self, itt: u32, response: u8, secs: f64) {
            let stat_sn = self.next_stat_sn();
            self.pdu(
                Bhs::TaskMgmtResponse(TaskMgmtResponse {
                    response,
                    itt,
                    stat_sn,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 64,
                }),
                Bytes::new(),
                secs,
            );
        }

        fn logout_answer(&mut self, itt: u32, secs: f64) {
            let stat_sn = self.next_stat_sn();
            self.pdu(
                Bhs::LogoutResponse(LogoutResponse {
                    response: 0,
                    itt,
                    stat_sn,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 64,
                    time2wait: 0,
                    time2retain: 0,
                }),
                Bytes::new(),
                secs,
            );
        }

        fn async_message(&mut self, event: u8, parameters: [u16; 3], data: Bytes, secs: f64) {
            let stat_sn = self.next_stat_sn();
            self.pdu(
                Bhs::AsyncMessage(AsyncMessage {
                    lun: [0; 8],
                    stat_sn,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 64,
                    event,
                    vcode: 0,
                    parameter1: parameters[0],
                    parameter2: parameters[1],
                    parameter3: parameters[2],
                }),
                data,
                secs,
            );
        }

        fn timeout(&mut self, secs: f64) {
            let now = self.at(secs);
            self.r.handle_timeout(now);
        }

        /// Run the timer up to `secs`, as a driver sleeping to each deadline would.
        fn run_until(&mut self, secs: f64) {
            let end = self.at(secs);
            while let Some(t) = self.r.poll_timeout() {
                if t > end {
                    break;
                }
                self.r.handle_timeout(t);
            }
        }

        fn lose(&mut self, secs: f64) {
            let now = self.at(secs);
            self.r.handle_connection_lost(now);
        }

        fn connected(&mut self, secs: f64) {
            let now = self.at(secs);
            self.r.handle_connected(core(), T2W, now);
        }

        fn connect_failed(&mut self, secs: f64) {
            let now = self.at(secs);
            self.r.handle_connect_failed(now);
        }
    }

    fn command_results(outputs: &[Output]) -> Vec<(RequestId, Result<u8, Failure>)> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Command { id, result, .. } => {
                    Some((*id, result.as_ref().map(|r| r.status).map_err(Clone::clone)))
                }
                _ => None,
            })
            .collect()
    }

    fn connects(outputs: &[Output]) -> usize {
        outputs
            .iter()
            .filter(|o| matches!(o, Output::Connect))
            .count()
    }

    fn disconnect(outputs: &[Output]) -> Option<(Loss, bool)> {
        outputs.iter().find_map(|o| match o {
            Output::Disconnect {
                cause, reconnect, ..
            } => Some((cause.clone(), *reconnect)),
            _ => None,
        })
    }

    fn finished(outputs: &[Output]) -> bool {
        outputs.iter().any(|o| matches!(o, Output::Finished))
    }

    fn notices(outputs: &[Output]) -> Vec<Notice> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Notice(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    /// Sense data of a UNIT ATTENTION with the given ASC/ASCQ, as an iSCSI
    /// data segment: SenseLength (2 bytes), then fixed-format sense.
    fn sense_segment(asc: u8, ascq: u8) -> Bytes {
        let mut s = vec![0u8; 2 + 18];
        s[1] = 18; // SenseLength
        s[2] = 0x70; // response code: current, fixed format
        s[2 + 2] = 0x06; // sense key: UNIT ATTENTION
        s[2 + 7] = 10; // additional sense length
        s[2 + 12] = asc;
        s[2 + 13] = ascq;
        Bytes::from(s)
    }

    /// The waiters that came back with command answers, in order, with
    /// the outcome (status or failure).
    fn waiters_back(outputs: Vec<Output<u32>>) -> Vec<(u32, Result<u8, Failure>)> {
        outputs
            .into_iter()
            .filter_map(|o| match o {
                Output::Command { result, waiter, .. } => Some((waiter, result.map(|r| r.status))),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_command_path_hands_its_waiter_back_exactly_once_and_frees_its_record() {
        let mut h: Harness<u32> = Harness::with_waiters(cfg(), core());
        let cmd = |h: &mut Harness<u32>, tag: u8, secs: f64| {
            let now = h.at(secs);
            h.r.handle_command(read(tag), u32::from(tag), now)
        };
        let mut back = Vec::new();
        // Answered.
        cmd(&mut h, 0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 0.1);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back, vec![(0xa1, Ok(GOOD))]);
        // A second answer for the same (retired) ITT names no task: the
        // connection goes as a protocol error, and nothing is delivered twice.
        // (Checked below, after the other paths, on its own connection.)

        // Timed out four times: fails as aborted.
        cmd(&mut h, 0xa2, 1.0);
        h.sent();
        let mut now = 1.0;
        for _ in 0..4 {
            now += 30.0;
            h.run_until(now);
            let sent = h.sent();
            let abort = sent
                .iter()
                .find_map(|s| match s {
                    Sent::Tmf(tmf::ABORT_TASK, itt, _) => Some(*itt),
                    _ => None,
                })
                .expect("an ABORT TASK");
            h.tmf_answer(abort, 0, now);
            back.extend(waiters_back(h.outputs()));
        }
        assert_eq!(back[1..], [(0xa2, Err(Failure::Task(TaskError::Aborted)))]);
        assert_eq!(h.r.pending_commands(), 0);

        // Kept over a connection loss, re-issued and answered there.
        cmd(&mut h, 0xa3, now);
        h.sent();
        h.lose(now + 1.0);
        back.extend(waiters_back(h.outputs()));
        h.run_until(now + 3.0);
        h.outputs();
        h.connected(now + 3.5);
        back.extend(waiters_back(h.outputs()));
        let itt = Harness::itt_of(&h.sent(), 0xa3);
        h.answer(itt, GOOD, now + 4.0);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[2..], [(0xa3, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);

        // The same ITT answered again on this connection: a late answer for
        // a finished task is a protocol error, never a second delivery.
        h.answer(itt, GOOD, now + 4.1);
        let out = h.outputs();
        assert!(
            matches!(disconnect_of(&out), Some(Loss::Protocol(_))),
            "{out:?}"
        );
        back.extend(waiters_back(out));
        assert_eq!(back.len(), 3, "{back:?}");

        // Waiting past the replacement timeout while down (the attempt
        // the machine asked for never reports): fails with it.
        let t = now + 5.0;
        cmd(&mut h, 0xa4, t);
        h.run_until(t + 200.0);
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[3..], [(0xa4, Err(Failure::ReplacementTimeout))]);
        assert_eq!(h.r.pending_commands(), 0);

        // After giving up, a new command fails at once; the caller's logout
        // then ends the session with nothing left behind.
        cmd(&mut h, 0xa5, t + 201.0);
        h.r.handle_logout();
        back.extend(waiters_back(h.outputs()));
        assert_eq!(back[4..], [(0xa5, Err(Failure::ReplacementTimeout))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert!(h.r.is_finished());
        let mut tags: Vec<u32> = back.iter().map(|(w, _)| *w).collect();
        tags.dedup();
        assert_eq!(
            tags,
            vec![0xa1, 0xa2, 0xa3, 0xa4, 0xa5],
            "each exactly once"
        );
    }

    fn disconnect_of<W>(outputs: &[Output<W>]) -> Option<&Loss> {
        outputs.iter().find_map(|o| match o {
            Output::Disconnect { cause, .. } => Some(cause),
            _ => None,
        })
    }

    #[test]
    fn answered_command_reaches_its_caller_and_is_forgotten() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);

        h.answer(itt, GOOD, 0.1);

        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert_eq!(h.r.poll_timeout(), None, "no deadline left to watch");
    }

    /// A core that keeps at most `depth` commands in flight.
    fn core_with_depth(depth: u32) -> Connection {
        core_of(FeatureParams {
            queue_depth: depth,
            nop_interval: None,
            ..FeatureParams::default()
        })
    }

    /// A core whose command window ends at `max_cmd_sn`.
    fn core_with_window(max_cmd_sn: u32) -> Connection {
        Connection::new(
            FeatureParams {
                nop_interval: None,
                ..FeatureParams::default()
            },
            SequenceNumbers {
                cmd_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn,
                exp_stat_sn: 1,
            },
        )
    }

    #[test]
    fn command_held_back_by_the_queue_depth_gets_its_full_timeout_once_sent() {
        // Queue depth 1: B waits in rlun behind A, unseen by the target.
        let mut h = Harness::with(cfg(), core_with_depth(1));
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        let sent = h.sent();
        assert_eq!(sent.len(), 1, "only A goes out: {sent:?}");
        // A is answered after 29 s; only then does B go out.
        h.run_until(28.5);
        assert!(h.sent().is_empty());
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 29.0);
        let sent = h.sent();
        let b_itt = Harness::itt_of(&sent, 0xa2);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);
        // 30 s after B was *submitted* it has been on the wire for 1 s: no
        // ABORT TASK, no timeout notice.
        h.run_until(45.0);
        assert!(
            h.sent().is_empty(),
            "B aborted after a short time on the wire"
        );
        assert!(
            !h.outputs()
                .iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "B timed out while it waited for the queue depth"
        );
        h.answer(b_itt, GOOD, 50.0);
        assert_eq!(command_results(&h.outputs()), vec![(b, Ok(GOOD))]);
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn command_held_back_by_a_closed_window_waits_a_whole_command_timeout() {
        // The target's window is closed (MaxCmdSN = ExpCmdSN - 1): the
        // command waits in rlun, unseen by the target, and is looked at
        // every QUEUED_RECHECK. Those looks must not time it out before the
        // target has kept the window closed for a whole command timeout
        // (then it fails as WindowClosed after its retries:
        // command_the_closed_window_holds_back_fails_saying_so_after_its_retries).
        let mut h = Harness::with(cfg(), core_with_window(0));
        let a = h.cmd(0xa1, 0.0);
        assert!(h.sent().is_empty(), "the window is closed");
        h.run_until(29.5);
        let out = h.outputs();
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "timed out before the command timeout: {out:?}"
        );
        assert!(command_results(&out).is_empty(), "{a:?} failed: {out:?}");
        assert!(h.sent().is_empty());
        h.run_until(31.0);
        assert!(
            h.outputs()
                .iter()
                .any(|o| matches!(o, Output::Notice(Notice::CommandTimedOut { .. }))),
            "a window kept closed for the whole command timeout times the command out"
        );
    }

    #[test]
    fn command_deadline_is_the_next_timeout() {
        let mut h = Harness::new();
        h.cmd(0xa1, 1.0);
        h.cmd(0xa2, 2.0);
        assert_eq!(h.r.poll_timeout(), Some(h.at(31.0)));
    }

    #[test]
    fn early_timeout_call_changes_nothing() {
        // The driver keeps one timer armed at the earliest deadline it was
        // asked for and does not move it later, so it may call
        // handle_timeout before anything is due: live and while down,
        // that must be a no-op.
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 1.0);
        let sent = h.sent();
        assert_eq!(sent.len(), 1);
        h.outputs();
        for secs in [1.5, 10.0, 30.9] {
            h.timeout(secs);
            assert!(h.sent().is_empty(), "nothing to send at {secs}s");
            assert!(h.outputs().is_empty(), "nothing to say at {secs}s");
        }
        assert_eq!(h.r.poll_timeout(), Some(h.at(31.0)), "deadline unchanged");
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 31.5);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);

        h.cmd(0xa2, 40.0);
        h.sent();
        h.lose(41.0);
        h.outputs();
        h.timeout(42.0);
        assert_eq!(connects(&h.outputs()), 0, "not before DefaultTime2Wait");
        assert_eq!(h.r.poll_timeout(), Some(h.at(43.0)));
    }

    #[test]
    fn lost_connection_waits_time2wait_then_reissues_kept_commands_oldest_first() {
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        let c = h.cmd(0xa3, 0.0);
        let sent = h.sent();
        h.answer(Harness::itt_of(&sent, 0xa2), GOOD, 0.5);
        h.outputs();

        h.lose(1.0);
        let out = h.outputs();
        assert_eq!(disconnect(&out), Some((Loss::Transport, true)));
        assert!(command_results(&out).is_empty(), "commands are kept");
        assert_eq!(h.r.poll_timeout(), Some(h.at(3.0)), "DefaultTime2Wait");
        h.timeout(2.9);
        assert_eq!(connects(&h.outputs()), 0, "not before DefaultTime2Wait");
        h.timeout(3.0);
        assert_eq!(connects(&h.outputs()), 1);
        assert_eq!(
            h.r.poll_timeout(),
            Some(h.at(121.0)),
            "the attempt is the driver's; only the replacement timeout is ours"
        );

        h.connected(3.5);
        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Reconnected { reissued: 2, after } if *after == Duration::from_millis(2500))));
        let sent = h.sent();
        let tags: Vec<u8> = sent
            .iter()
            .map(|s| match s {
                Sent::Cmd(t, _) => *t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            tags,
            vec![0xa1, 0xa3],
            "oldest first, the answered one not again"
        );
        h.answer(Harness::itt_of(&sent, 0xa3), GOOD, 4.0);
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 4.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(c, Ok(GOOD)), (a, Ok(GOOD))]
        );
        let _ = b;
    }

    #[test]
    fn failed_attempts_back_off_one_two_four_seconds() {
        let mut h = Harness::with(cfg(), core());
        h.r = Recovery::new(cfg(), core(), Duration::ZERO, h.t0);
        h.cmd(0xa1, 0.0);
        h.lose(0.0);
        h.timeout(0.0);
        let mut now = 0.0;
        let mut pauses = Vec::new();
        for _ in 0..5 {
            assert_eq!(connects(&h.outputs()), 1);
            now += 0.25; // the attempt itself
            h.connect_failed(now);
            let wake = h.r.poll_timeout().expect("next attempt scheduled");
            pauses.push(wake.duration_since(h.at(now)).as_secs_f64());
            now = wake.duration_since(h.t0).as_secs_f64();
            h.timeout(now);
        }
        assert_eq!(pauses, vec![1.0, 2.0, 4.0, 4.0, 4.0]);
    }

    #[test]
    fn replacement_timeout_fails_kept_commands_and_new_ones_fail_fast_while_down() {
        let mut h = Harness::new();
        let kept = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.outputs();
        let mut failed = Vec::new();
        let mut now = 1.0;
        while failed.is_empty() {
            let wake = h.r.poll_timeout().expect("an attempt is scheduled");
            h.r.handle_timeout(wake);
            now = wake.duration_since(h.t0).as_secs_f64() + 0.5;
            h.connect_failed(now);
            failed = command_results(&h.outputs());
            assert!(now < 200.0, "never gave up");
        }
        assert!(
            now >= 121.0,
            "gave up at {now}, before the replacement timeout"
        );
        assert_eq!(failed, vec![(kept, Err(Failure::ReplacementTimeout))]);

        let late = h.cmd(0xa3, now + 0.1);

        assert_eq!(
            command_results(&h.outputs()),
            vec![(late, Err(Failure::ReplacementTimeout))],
            "new commands fail at once once given up"
        );
    }

    #[test]
    fn replacement_timeout_fails_every_kept_command_including_ones_that_arrived_while_down() {
        let mut h = Harness::new();
        let kept = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        let arrived = h.cmd(0xa2, 10.0);
        h.timeout(3.0);
        h.outputs();
        h.connect_failed(125.0);
        let out = h.outputs();
        assert_eq!(
            command_results(&out),
            vec![
                (kept, Err(Failure::ReplacementTimeout)),
                (arrived, Err(Failure::ReplacementTimeout))
            ]
        );
        assert!(notices(&out).contains(&Notice::GaveUp { failed: 2 }));
        assert!(!finished(&out), "handles are still open: keep trying");
        assert!(h.r.poll_timeout().is_some());
    }

    #[test]
    fn successful_reconnect_after_giving_up_accepts_commands_again() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.timeout(3.0);
        h.connect_failed(125.0);
        h.outputs();
        let wake = h.r.poll_timeout().unwrap();
        h.r.handle_timeout(wake);
        h.connected(130.0);
        h.outputs();
        let id = h.cmd(0xa2, 131.0);
        let itt = Harness::itt_of(&h.sent(), 0xa2);
        h.answer(itt, GOOD, 131.5);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
    }

    #[test]
    fn text_ping_and_reset_fail_at_once_while_down() {
        let mut h = Harness::new();
        h.lose(0.0);
        h.outputs();
        let now = h.at(0.5);
        let t =
            h.r.handle_text(Bytes::from_static(b"SendTargets=All\0"), now);
        let p = h.r.handle_ping(now);
        let m = h.r.handle_lun_reset([0; 8], now);
        let down = Failure::Task(TaskError::ConnectionLost("reconnecting".into()));
        let out = h.outputs();
        assert!(matches!(&out[0], Output::Text { id, result: Err(f) } if *id == t && *f == down));
        assert!(matches!(&out[1], Output::Pong { id, result: Err(f) } if *id == p && *f == down));
        assert!(
            matches!(&out[2], Output::TaskMgmt { id, result: Err(f) } if *id == m && *f == down)
        );
    }

    #[test]
    fn connection_scoped_requests_fail_with_the_connection_and_commands_are_kept() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let now = h.at(0.0);
        let t =
            h.r.handle_text(Bytes::from_static(b"SendTargets=All\0"), now);
        let p = h.r.handle_ping(now);
        h.sent();

        h.lose(1.0);

        let out = h.outputs();
        assert!(out.iter().any(
            |o| matches!(o, Output::Text { id, result: Err(Failure::ConnectionLost) } if *id == t)
        ));
        assert!(out.iter().any(
            |o| matches!(o, Output::Pong { id, result: Err(Failure::ConnectionLost) } if *id == p)
        ));
        // The cause comes first, so the driver can name it in the failures.
        let disconnect_at = out
            .iter()
            .position(|o| matches!(o, Output::Disconnect { .. }))
            .expect("a Disconnect");
        let text_at = out
            .iter()
            .position(|o| matches!(o, Output::Text { .. }))
            .expect("the Text failure");
        assert!(disconnect_at < text_at, "{out:?}");
        assert!(command_results(&out).is_empty());
        assert_eq!(h.r.pending_commands(), 1);
        let _ = c;
    }

    #[test]
    fn caller_requests_get_their_answers() {
        let mut h = Harness::new();
        let now = h.at(0.0);
        let p = h.r.handle_ping(now);
        let m = h.r.handle_lun_reset([0; 8], now);
        let sent = h.sent();
        let (Sent::Nop(nop), Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)) = (&sent[0], &sent[1])
        else {
            panic!("{sent:?}")
        };
        let stat_sn = h.next_stat_sn();
        h.pdu(
            Bhs::NopIn(NopIn {
                lun: [0; 8],
                itt: *nop,
                ttt: RESERVED_TAG,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 64,
            }),
            Bytes::new(),
            0.004,
        );
        h.tmf_answer(*reset, 0, 0.01);
        let out = h.outputs();
        assert!(
            matches!(&out[0], Output::Pong { id, result: Ok(rtt) } if *id == p && *rtt == Duration::from_millis(4))
        );
        assert!(
            matches!(&out[1], Output::TaskMgmt { id, result: Ok(TmfOutcome::Complete) } if *id == m)
        );
    }

    #[test]
    fn timed_out_command_is_aborted_and_reissued() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);

        let abort = h.times_out_and_is_aborted(30.0, 0xa1, itt);
        h.tmf_answer(abort, 0, 30.5);
        let sent = h.sent();
        let again = Harness::itt_of(&sent, 0xa1);
        assert_ne!(again, itt, "a new task");
        assert_eq!(h.r.poll_timeout(), Some(h.at(60.5)), "a fresh deadline");
        h.answer(again, GOOD, 31.0);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
    }

    #[test]
    fn deadlines_fire_on_time_under_load_and_completed_commands_leave_nothing_behind() {
        let mut h = Harness::new();
        let stuck = h.cmd(0xa1, 0.0);
        let stuck_itt = Harness::itt_of(&h.sent(), 0xa1);
        // A window that stays open however many commands go by.
        let mut answered = 1u32;
        let mut answer = |h: &mut Harness, itt: u32, secs: f64| {
            answered += 1;
            let stat_sn = h.next_stat_sn();
            h.pdu(
                Bhs::ScsiResponse(ScsiResponse {
                    bidi_overflow: false,
                    bidi_underflow: false,
                    residual: Residual::default(),
                    response: 0,
                    status: GOOD,
                    itt,
                    snack_tag: 0,
                    stat_sn,
                    exp_cmd_sn: answered,
                    max_cmd_sn: answered + 64,
                    exp_data_sn: 0,
                    bidi_read_residual_count: 0,
                }),
                Bytes::new(),
                secs,
            );
        };
        // 4,800 commands come and go around the stuck one, in bursts of 16
        // answered newest first (the deadline queue sees completions out of
        // order), over 29 s.
        for burst in 0..300 {
            let secs = f64::from(burst) * 0.097;
            let ids: Vec<RequestId> = (0..16).map(|_| h.cmd(0x28, secs)).collect();
            let itts: Vec<u32> = h
                .sent()
                .iter()
                .map(|s| match s {
                    Sent::Cmd(0x28, itt) => *itt,
                    other => panic!("unexpected {other:?}"),
                })
                .collect();
            assert_eq!(itts.len(), 16);
            for &itt in itts.iter().rev() {
                answer(&mut h, itt, secs + 0.001);
            }
            let done: Vec<RequestId> = command_results(&h.outputs())
                .into_iter()
                .map(|(id, r)| {
                    assert_eq!(r, Ok(GOOD));
                    id
                })
                .collect();
            assert_eq!(done.len(), 16);
            assert!(ids.iter().all(|id| done.contains(id)));
            assert_eq!(
                h.r.poll_timeout(),
                Some(h.at(30.0)),
                "the stuck command's deadline stays the next one"
            );
            assert_eq!(h.r.pending_commands(), 1);
            assert!(
                h.r.deadlines.q.len() <= 2 * h.r.pending_commands() + 64 + 16,
                "{} deadline entries kept for one command",
                h.r.deadlines.q.len()
            );
        }
        h.run_until(29.99);
        assert!(!notices(&h.outputs())
            .iter()
            .any(|n| matches!(n, Notice::CommandTimedOut { .. })));
        let abort = h.times_out_and_is_aborted(30.0, 0xa1, stuck_itt);
        // Aborted, re-issued, answered: nothing is left to watch anywhere.
        h.tmf_answer(abort, 0, 30.5);
        let again = Harness::itt_of(&h.sent(), 0xa1);
        answer(&mut h, again, 31.0);
        assert_eq!(command_results(&h.outputs()), vec![(stuck, Ok(GOOD))]);
        assert_eq!(h.r.pending_commands(), 0);
        assert_eq!(h.r.core().map(Connection::outstanding), Some(0));
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn commands_on_a_lost_connection_free_their_deadlines_and_get_fresh_ones_after() {
        let mut h = Harness::new();
        let a = h.cmd(0xa1, 0.0);
        h.sent();
        h.lose(1.0);
        h.outputs();
        assert!(
            h.r.deadlines.q.is_empty(),
            "deadlines go with the connection"
        );
        h.run_until(1.0 + T2W.as_secs_f64());
        h.connected(3.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        assert_eq!(h.r.poll_timeout(), Some(h.at(33.0)), "a fresh deadline");
        h.answer(itt, GOOD, 4.0);
        assert_eq!(command_results(&h.outputs()), vec![(a, Ok(GOOD))]);
        assert_eq!(h.r.poll_timeout(), None);
        assert_eq!(h.r.core().map(Connection::outstanding), Some(0));
    }

    #[test]
    fn command_that_times_out_four_times_fails_as_aborted() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        let mut now = 0.0;
        for round in 0..4 {
            now += 30.0;
            h.run_until(now);
            let sent = h.sent();
            let [Sent::Tmf(tmf::ABORT_TASK, abort, _)] = sent[..] else {
                panic!("round {round}: {sent:?}")
            };
            h.tmf_answer(abort, 0, now);
            let out = h.outputs();
            if round < 3 {
                assert!(command_results(&out).is_empty(), "round {round}");
                assert!(
                    matches!(h.sent()[..], [Sent::Cmd(0xa1, _)]),
                    "round {round}"
                );
            } else {
                assert_eq!(
                    command_results(&out),
                    vec![(id, Err(Failure::Task(TaskError::Aborted)))]
                );
                assert!(h.sent().is_empty());
            }
        }
        assert_eq!(h.r.pending_commands(), 0);
    }

    #[test]
    fn command_the_closed_window_holds_back_fails_saying_so_after_its_retries() {
        // The target's window admits nothing (MaxCmdSN = ExpCmdSN - 1) and
        // never opens: the command times out unsent, is retried like an
        // aborted one, and finally fails naming the closed window.
        let core = Connection::new(
            FeatureParams {
                nop_interval: None,
                ..FeatureParams::default()
            },
            SequenceNumbers {
                cmd_sn: 1,
                exp_cmd_sn: 1,
                max_cmd_sn: 0,
                exp_stat_sn: 1,
            },
        );
        let mut h = Harness::with(cfg(), core);
        let id = h.cmd(0xa1, 0.0);
        assert!(h.sent().is_empty(), "nothing fits in the window");
        for round in 1..=4 {
            h.run_until(30.0 * f64::from(round) + 1.0);
            let out = h.outputs();
            assert!(h.sent().is_empty(), "round {round}: nothing is sent");
            if round < 4 {
                assert!(command_results(&out).is_empty(), "round {round}");
            } else {
                assert_eq!(
                    command_results(&out),
                    vec![(
                        id,
                        Err(Failure::Task(TaskError::WindowClosed {
                            cmd_sn: 1,
                            max_cmd_sn: 0
                        }))
                    )]
                );
            }
        }
        assert_eq!(h.r.pending_commands(), 0);
    }

    #[test]
    fn failed_abort_escalates_to_lun_reset_and_the_command_goes_again() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        let sent = h.sent();
        let [Sent::Tmf(tmf::ABORT_TASK, abort, _)] = sent[..] else {
            panic!("{sent:?}")
        };

        h.tmf_answer(abort, 5, 30.1); // function not supported

        let out = h.outputs();
        assert!(notices(&out).contains(&Notice::AbortFailed {
            result: Ok(TmfOutcome::NotSupported)
        }));
        let sent = h.sent();
        let [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.tmf_answer(reset, 0, 30.2);
        let again = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(again, GOOD, 30.3);
        assert_eq!(command_results(&h.outputs()), vec![(id, Ok(GOOD))]);
        assert!(h.r.is_live());
    }

    #[test]
    fn unanswered_abort_escalates_to_lun_reset_after_the_tmf_timeout() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        h.sent();
        h.outputs();

        h.run_until(39.9);
        assert!(h.sent().is_empty(), "not before the TMF timeout");
        h.run_until(40.0);

        assert!(notices(&h.outputs()).contains(&Notice::AbortUnanswered));
        assert!(matches!(
            h.sent()[..],
            [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, _, _)]
        ));
    }

    #[test]
    fn lun_reset_that_never_answers_drops_the_connection_and_keeps_the_command() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(40.0); // timeout at 30, abort unanswered at 40 → reset
        h.sent();
        h.outputs();

        h.run_until(50.0);

        let out = h.outputs();
        assert_eq!(
            disconnect(&out),
            Some((Loss::TaskManagementTimeout(TMF_TIMEOUT), true))
        );
        assert!(command_results(&out).is_empty());
        h.run_until(52.0);
        assert_eq!(connects(&h.outputs()), 1);
        h.connected(52.5);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 53.0);
        assert!(command_results(&h.outputs()).contains(&(id, Ok(GOOD))));
    }

    #[test]
    fn lun_reset_failing_drops_the_connection() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        h.run_until(30.0);
        let sent = h.sent();
        let [Sent::Tmf(_, abort, _)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.tmf_answer(abort, 255, 30.1); // rejected
        let sent = h.sent();
        let [Sent::Tmf(tmf::LOGICAL_UNIT_RESET, reset, _)] = sent[..] else {
            panic!("{sent:?}")
        };

        h.tmf_answer(reset, 255, 30.2);

        assert_eq!(disconnect(&h.outputs()), Some((Loss::LunResetFailed, true)));
        assert!(!h.r.is_live());
        assert_eq!(h.r.pending_commands(), 1);
    }

    #[test]
    fn unanswered_ping_drops_the_connection_as_not_responding() {
        let mut h = Harness::with(cfg(), core_with(Some(Duration::from_secs(5))));
        h.run_until(5.0);
        assert!(matches!(h.sent()[..], [Sent::Nop(_)]));

        h.run_until(15.0);

        assert_eq!(
            disconnect(&h.outputs()),
            Some((Loss::NotResponding(Duration::from_secs(10)), true))
        );
    }

    #[test]
    fn protocol_error_drops_the_connection_and_the_command_goes_again() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.sent();

        h.answer(0x7777, GOOD, 0.1); // a tag we never used

        let out = h.outputs();
        assert!(matches!(
            disconnect(&out),
            Some((
                Loss::Protocol(ProtocolError::UnknownTask { itt: 0x7777, .. }),
                true
            ))
        ));
        h.run_until(2.1);
        h.connected(2.2);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, 2.3);
        assert!(command_results(&h.outputs()).contains(&(id, Ok(GOOD))));
    }

    #[test]
    fn target_logout_request_logs_out_then_logs_in_again_keeping_commands() {
        let mut h = Harness::new();
        let before = h.cmd(0xa1, 0.0);
        h.sent();

        h.async_message(async_event::LOGOUT_REQUESTED, [0, 0, 5], Bytes::new(), 1.0);

        assert!(notices(&h.outputs()).contains(&Notice::TargetRequestsLogout { within_secs: 5 }));
        let sent = h.sent();
        let [Sent::Logout(logout)] = sent[..] else {
            panic!("{sent:?}")
        };
        // A command arriving meanwhile waits for the next connection.
        let during = h.cmd(0xa2, 1.1);
        assert!(h.sent().is_empty());
        assert!(command_results(&h.outputs()).is_empty());

        h.logout_answer(logout, 1.2);

        assert_eq!(disconnect(&h.outputs()), Some((Loss::TargetLogout, true)));
        h.run_until(3.2);
        assert_eq!(connects(&h.outputs()), 1);
        h.connected(3.3);
        let sent = h.sent();
        assert!(
            matches!(sent[..], [Sent::Cmd(0xa1, _), Sent::Cmd(0xa2, _)]),
            "{sent:?}"
        );
        let _ = (before, during);
    }

    #[test]
    fn caller_logout_during_a_target_logout_ends_the_session() {
        let mut h = Harness::new();
        h.async_message(async_event::LOGOUT_REQUESTED, [0, 0, 5], Bytes::new(), 1.0);
        let sent = h.sent();
        let [Sent::Logout(logout)] = sent[..] else {
            panic!("{sent:?}")
        };
        let id = h.r.handle_logout();
        assert!(h.sent().is_empty(), "one logout is enough");

        h.logout_answer(logout, 1.2);

        let out = h.outputs();
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id: got, result: Ok(()) } if *got == id)));
        assert!(finished(&out));
        assert_eq!(connects(&out), 0);
    }

    #[test]
    fn connection_drop_announcement_reconnects() {
        for event in [async_event::CONNECTION_DROP, async_event::SESSION_DROP] {
            let mut h = Harness::new();
            h.cmd(0xa1, 0.0);
            h.sent();

            h.async_message(event, [0, 2, 20], Bytes::new(), 1.0);

            let out = h.outputs();
            assert!(notices(&out).contains(&Notice::TargetDropping {
                event,
                time2wait: 2
            }));
            assert_eq!(
                disconnect(&out),
                Some((
                    Loss::TargetDropping {
                        event,
                        time2wait: 2
                    },
                    true
                ))
            );
            assert_eq!(h.r.pending_commands(), 1);
            h.run_until(3.0);
            assert_eq!(connects(&h.outputs()), 1);
        }
    }

    #[test]
    fn renegotiation_request_reconnects() {
        let mut h = Harness::new();
        h.async_message(
            async_event::NEGOTIATION_REQUEST,
            [0, 0, 0],
            Bytes::new(),
            1.0,
        );
        let out = h.outputs();
        assert!(notices(&out).contains(&Notice::RenegotiationRequested));
        assert_eq!(disconnect(&out), Some((Loss::Renegotiation, true)));
    }

    #[test]
    fn capacity_change_event_is_reported_and_other_scsi_events_are_not() {
        let mut h = Harness::new();
        h.async_message(
            async_event::SCSI_ASYNC_EVENT,
            [0; 3],
            sense_segment(0x2a, 0x09),
            1.0,
        );
        let out = h.outputs();
        assert!(out.iter().any(|o| matches!(o, Output::CapacityChanged)));
        assert!(matches!(
            &notices(&out)[..],
            [Notice::ScsiEvent { sense: Some(s) }] if s.asc == 0x2a && s.ascq == 0x09
        ));

        h.async_message(
            async_event::SCSI_ASYNC_EVENT,
            [0; 3],
            sense_segment(0x29, 0x00),
            2.0,
        );
        let out = h.outputs();
        assert!(!out.iter().any(|o| matches!(o, Output::CapacityChanged)));
        assert!(h.r.is_live());
    }

    #[test]
    fn unknown_async_message_is_only_noted() {
        let mut h = Harness::new();
        h.async_message(async_event::VENDOR_SPECIFIC, [1, 2, 3], Bytes::new(), 1.0);
        let out = h.outputs();
        assert_eq!(
            notices(&out),
            vec![Notice::AsyncMessage {
                event: async_event::VENDOR_SPECIFIC,
                vcode: 0,
                parameters: [1, 2, 3]
            }]
        );
        assert!(h.r.is_live());
    }

    #[test]
    fn caller_logout_waits_for_in_flight_commands_then_finishes() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        let logout = h.r.handle_logout();
        assert!(h.sent().is_empty(), "not while a command is in flight");
        let refused = h.cmd(0xa2, 0.2);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(refused, Err(Failure::Closed))]
        );

        h.answer(itt, GOOD, 0.3);

        let sent = h.sent();
        let [Sent::Logout(l)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.logout_answer(l, 0.4);
        let out = h.outputs();
        assert_eq!(command_results(&out), vec![(c, Ok(GOOD))]);
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
        assert!(h.r.is_finished());
        let after = h.cmd(0xa3, 0.5);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(after, Err(Failure::Closed))]
        );
    }

    #[test]
    fn connection_lost_after_our_logout_went_out_counts_as_logged_out() {
        let mut h = Harness::new();
        let logout = h.r.handle_logout();
        assert!(matches!(h.sent()[..], [Sent::Logout(_)]));

        h.lose(0.1);

        let out = h.outputs();
        assert!(matches!(
            out.iter().find(|o| matches!(o, Output::Disconnect { .. })),
            Some(Output::Disconnect {
                reconnect: false,
                quiet: true,
                ..
            })
        ));
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
    }

    #[test]
    fn logout_while_down_fails_kept_commands_and_finishes() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        h.lose(0.5);
        h.outputs();

        let logout = h.r.handle_logout();

        let out = h.outputs();
        assert_eq!(command_results(&out), vec![(c, Err(Failure::Closed))]);
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::Logout { id, result: Ok(()) } if *id == logout)));
        assert!(finished(&out));
        assert_eq!(h.r.poll_timeout(), None, "no more attempts");
    }

    #[test]
    fn handles_dropped_with_nothing_pending_logs_out_politely() {
        let mut h = Harness::new();
        h.r.handle_requests_closed();
        let sent = h.sent();
        let [Sent::Logout(l)] = sent[..] else {
            panic!("{sent:?}")
        };
        h.logout_answer(l, 1.1);
        assert!(finished(&h.outputs()));
    }

    #[test]
    fn handles_dropped_with_a_command_pending_log_out_after_it() {
        let mut h = Harness::new();
        let c = h.cmd(0xa1, 0.0);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.r.handle_requests_closed();
        assert!(h.sent().is_empty());
        h.answer(itt, GOOD, 0.2);
        assert!(matches!(h.sent()[..], [Sent::Logout(_)]));
        assert_eq!(command_results(&h.outputs()), vec![(c, Ok(GOOD))]);
    }

    #[test]
    fn handles_dropped_while_down_with_nothing_pending_finishes() {
        let mut h = Harness::new();
        h.lose(0.0);
        h.outputs();
        h.r.handle_requests_closed();
        assert!(finished(&h.outputs()));
        assert_eq!(h.r.poll_timeout(), None);
    }

    #[test]
    fn discovery_session_fails_pending_work_when_the_connection_is_lost() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(120), false);
        let mut h = Harness::with(cfg, core());
        let c = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        let out = h.outputs();
        assert_eq!(disconnect(&out), Some((Loss::Transport, false)));
        assert_eq!(
            command_results(&out),
            vec![(c, Err(Failure::ConnectionLost))]
        );
        assert!(finished(&out));
    }

    #[test]
    fn zero_replacement_timeout_turns_reconnection_off() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::ZERO, true);
        assert!(!cfg.reconnect);
    }
    // ---- issue 12: a target that accepts every login and then fails ----------

    /// One flap: the connection attempt succeeds, and the target breaks the
    /// new connection right away (here: a PDU with an unknown task tag).
    /// Returns the time and everything the machine said.
    fn flap(h: &mut Harness) -> (f64, Vec<Output>) {
        let wake =
            h.r.poll_timeout()
                .expect("an attempt or give-up is scheduled");
        h.r.handle_timeout(wake);
        let now = wake.duration_since(h.t0).as_secs_f64();
        let mut out = h.outputs();
        if connects(&out) == 1 {
            h.connected(now + 0.1);
            h.sent();
            h.answer(0xdead_beef, GOOD, now + 0.2);
            out.extend(h.outputs());
        }
        (now + 0.2, out)
    }

    #[test]
    fn target_failing_right_after_every_login_cannot_keep_a_command_waiting_past_the_replacement_timeout(
    ) {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        let id = h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.1); // the first connection breaks at once
        let mut results = command_results(&h.outputs());
        let mut now = 0.1;
        let mut logins = 0;
        while results.is_empty() {
            let (t, out) = flap(&mut h);
            now = t;
            logins += out
                .iter()
                .filter(|o| matches!(o, Output::Reconnected { .. }))
                .count();
            results = command_results(&out);
            assert!(now < 60.0, "still waiting at {now} s");
        }
        assert_eq!(results, vec![(id, Err(Failure::ReplacementTimeout))]);
        assert!(
            (10.0..=10.3).contains(&now),
            "failed at {now} s, not at 10.1 s"
        );
        assert_eq!(
            logins, 2,
            "each login succeeded and did not restart the clock"
        );
        // New commands fail at once while the target keeps failing.
        let late = h.cmd(0xa2, now + 0.1);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(late, Err(Failure::ReplacementTimeout))]
        );
    }

    #[test]
    fn connections_failing_right_after_login_meet_growing_back_off() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(3600), true);
        let mut h = Harness::with(cfg, core());
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        let mut pauses = Vec::new();
        for _ in 0..7 {
            let (now, _) = flap(&mut h);
            let next = h.r.poll_timeout().unwrap();
            pauses.push(next.duration_since(h.at(now)).as_secs());
        }
        // The first loss waits DefaultTime2Wait (2 s); each repeat doubles
        // it up to MAX_FLAP_BACKOFF.
        assert_eq!(pauses, vec![4, 8, 16, 30, 30, 30, 30]);
    }

    #[test]
    fn repeated_failures_right_after_login_are_summarised_with_their_cause() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        let mut summaries = Vec::new();
        let mut loud = 0;
        let mut all = h.outputs();
        for _ in 0..8 {
            all.extend(flap(&mut h).1);
        }
        for o in &all {
            match o {
                Output::Notice(Notice::RepeatedLoginFailures { count, cause }) => {
                    assert!(matches!(
                        cause,
                        Loss::Protocol(ProtocolError::UnknownTask { .. })
                    ));
                    summaries.push(*count);
                }
                Output::Disconnect { quiet: false, .. } => loud += 1,
                _ => {}
            }
        }
        assert_eq!(summaries, vec![2, 4, 8]);
        assert_eq!(loud, 1, "only the first loss is warned of on its own");
    }

    #[test]
    fn a_completed_command_restarts_the_replacement_clock() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        let a = h.cmd(0xa1, 0.0);
        let b = h.cmd(0xa2, 0.0);
        h.lose(0.0);
        h.run_until(2.0);
        h.connected(8.0);
        let sent = h.sent();
        h.answer(Harness::itt_of(&sent, 0xa1), GOOD, 8.5); // progress
        h.lose(9.0);
        h.outputs();
        h.run_until(11.0);
        h.connect_failed(11.5);

        h.run_until(18.9);
        assert!(
            command_results(&h.outputs()).is_empty(),
            "10 s counted from the loss after the progress, not from the first loss"
        );
        h.run_until(19.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(b, Err(Failure::ReplacementTimeout))]
        );
        let _ = a;
    }

    #[test]
    fn a_connection_that_completes_a_command_ends_the_streak_of_failures() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.answer(0xdead_beef, GOOD, 0.0);
        flap(&mut h);
        flap(&mut h);
        h.outputs();
        let wake = h.r.poll_timeout().unwrap();
        h.r.handle_timeout(wake);
        let now = wake.duration_since(h.t0).as_secs_f64();
        h.connected(now);
        let itt = Harness::itt_of(&h.sent(), 0xa1);
        h.answer(itt, GOOD, now + 0.1);
        h.lose(now + 0.2);

        assert_eq!(
            h.r.poll_timeout(),
            Some(h.at(now + 2.2)),
            "back to DefaultTime2Wait"
        );
    }

    #[test]
    fn replacement_timeout_fires_on_time_during_a_slow_connection_attempt() {
        let mut h = Harness::new();
        let id = h.cmd(0xa1, 0.0);
        h.lose(1.0);
        h.run_until(3.0);
        assert_eq!(connects(&h.outputs()), 1);

        h.run_until(121.0); // the attempt has not finished

        assert_eq!(
            command_results(&h.outputs()),
            vec![(id, Err(Failure::ReplacementTimeout))]
        );
    }

    #[test]
    fn idle_session_that_reconnected_gives_the_next_loss_a_full_replacement_timeout() {
        let cfg = RecoveryConfig::new(Duration::from_secs(30), Duration::from_secs(10), true);
        let mut h = Harness::with(cfg, core());
        h.lose(0.0);
        h.run_until(2.0);
        h.connected(2.0); // nothing pending: the stall is over
        h.lose(500.0);
        let id = h.cmd(0xa1, 500.5);
        h.run_until(509.9);
        assert!(command_results(&h.outputs()).is_empty());
        h.run_until(510.0);
        assert_eq!(
            command_results(&h.outputs()),
            vec![(id, Err(Failure::ReplacementTimeout))]
        );
    }

    #[test]
    fn lost_connection_core_is_handed_back_for_the_driver_to_drop_after_its_transport() {
        let mut h = Harness::new();
        h.cmd(0xa1, 0.0);
        h.sent();
        assert!(h.r.take_retired().is_empty());

        h.lose(1.0);

        let retired = h.r.take_retired();
        assert_eq!(retired.len(), 1);
        assert_eq!(
            retired[0].outstanding(),
            1,
            "the task (and its buffers) still lives in the retired core"
        );
        assert!(h.r.take_retired().is_empty());
    }
}
