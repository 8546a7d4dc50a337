//! Connection recovery, sans-IO: what happens to the caller's work when a
//! command, a task management request or the whole connection fails.
//!
//! [`Recovery`] sits on top of the connection core
//! ([`Connection`]) and owns
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
//!   dropped, and after DefaultTime2Wait (§13.15) the driver is asked to
//!   connect and log in again ([`Output::Connect`]), then again after 1 s,
//!   2 s, 4 s… (at most [`MAX_BACKOFF`]) while attempts fail. On success the
//!   kept commands are re-issued oldest first. Requests keep being accepted
//!   while disconnected; once commands have waited for the replacement
//!   timeout *without the session making progress* (a command completing),
//!   the kept and new commands fail with [`Failure::ReplacementTimeout`].
//!   A successful login is not progress: a target that accepts every login
//!   and then breaks the connection cannot keep commands waiting for ever.
//!   Attempts go on after that, on the same back-off, for as long as
//!   handles are open (a cache may hold data for the target);
//!   [`Recovery::handle_reconnect_now`] asks for the next one at once.
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
//! - **Target changes** announced by an asynchronous SCSI event (sense
//!   2A/09 capacity, 3F/0E LUN inventory, 3F/03 INQUIRY data) are reported
//!   as [`Output::TargetChanged`].
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
//!
//! # Files
//!
//! Bottom up; each file uses only those above it in this list:
//!
//! - `api.rs`: what the driver sees — [`RecoveryConfig`] and the policy's
//!   constants, [`RequestId`], [`Output`], [`Loss`], [`Failure`],
//!   [`Notice`];
//! - `records.rs`: what the machine keeps per request and the state of the
//!   connection (live, down, closed);
//! - `deadlines.rs`: the kept commands' deadlines in time order, and the
//!   back-off between connection attempts;
//! - `machine.rs`: [`Recovery`] and its reactions — submitting kept
//!   commands, draining the connection core's events, losing a connection,
//!   giving up, finishing;
//! - `handle.rs`: the requests of callers and the connection's events
//!   (`handle_*`) and the outputs (`poll_*`);
//! - `timers.rs`: the time input — when to be called next, command
//!   timeouts and the escalation ABORT TASK → LOGICAL UNIT RESET → new
//!   connection (RFC 7143 §7.1.5, §11.5, §13.15).
//!
//! [`Connection`]: crate::proto::connection::Connection

mod api;
mod deadlines;
#[cfg(test)]
mod fixtures;
mod handle;
mod machine;
mod records;
mod timers;

pub use api::{
    Failure, Loss, Notice, Output, RecoveryConfig, Released, RequestId, FLAP_WINDOW, MAX_BACKOFF,
    MAX_FLAP_BACKOFF, MAX_TIMEOUT_RETRIES, MIN_BACKOFF, QUEUED_RECHECK, TMF_TIMEOUT,
};
pub use machine::Recovery;
