//! The session layer: one iSCSI session with a target (or, for discovery,
//! a portal), kept up by a driver task, and the [`SessionHandle`] callers
//! reach it through.
//!
//! The driver is one tokio task per session that does the I/O and the
//! timers around two sans-IO state machines — the recovery policy
//! ([`rlun_iscsi::proto::recovery::Recovery`]) and, inside it, the current
//! connection's protocol core ([`rlun_iscsi::proto::connection::Connection`])
//! — and the receive half of a [`Transport`], plus a small writer task that
//! owns its send half ([`crate::transport::FrameWriter::run`]).
//!
//! ```text
//!  callers ──Request──► driver task ──frames──► writer task ──writev──► socket
//!     ▲                   │  ▲ reads PDUs itself (PduReader)
//!     └──oneshot result───┘  └──────────────────────────────────────── socket
//!        or a batch per turn (CommandQueue)
//! ```
//!
//! Reading in the driver task keeps the hot path (Data-In → core → caller)
//! free of channel hops; writing in its own task means a target that is
//! busy sending us Data-In can never deadlock against us while we push
//! Data-Out. The driver turns requests into machine inputs, hands whatever
//! the core wants sent to the writer in batches, sleeps until the machine's
//! next deadline, connects and logs in when the machine asks for it, and
//! delivers the machine's answers to their callers. Every decision about
//! retries, aborts, reconnects and logout is the machine's.
//!
//! Past the replacement timeout the driver keeps logging in on the
//! machine's back-off for as long as handles are open; a caller about to
//! give up on data it holds asks for an attempt at once with
//! [`SessionHandle::reconnect`].
//!
//! Buffers belong to the machine's command records until their final
//! answer arrives: a caller that drops its future early leaves the command
//! running harmlessly; its result is discarded.
//!
//! # Transports
//!
//! The driver is generic over the transport (`Driver<T>`: no `dyn` on the
//! hot path), and everything it needs to know about one comes through the
//! [`Transport`] trait: how data moves, the most one command may move,
//! what the login proposes. This layer names a concrete transport in one
//! place only: [`SessionHandle::connect`] maps [`SessionConfig::transport`]
//! (the URL scheme: `iscsi://` is TCP, `iser://` is iSER) to a transport
//! type. Everything else, [`SessionHandle::connect_over`] included, works
//! for any `T: Transport`; keep it that way.
//!
//! # Files
//!
//! Each file uses only the ones listed after it:
//!
//! - `mod.rs` (this file): [`SessionHandle`], the API callers use, and
//!   [`discover`].
//! - `driver.rs`: the driver task: its loop, its timer, taking a logged-in
//!   connection into its full feature phase, delivering answers.
//! - `login.rs`: connecting and logging in, following redirections;
//!   [`SessionInfo`], what a login established.
//! - `queue.rs`: the requests handles send the driver, the inbox that
//!   carries [`SessionHandle::submit`]'s commands to it in batches, and
//!   the completion queue ([`CommandQueue`]) with its tickets.
//! - `config.rs`: [`SessionConfig`].
//! - `error.rs`: [`SessionError`] and how it is classified.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rlun_iscsi::proto::connection::{CommandRequest, CommandResult, TmfOutcome};
use rlun_iscsi::proto::negotiate::{parse_send_targets, DiscoveredTarget};
use rlun_iscsi::proto::pdu;
use rlun_iscsi::proto::recovery::Released;
use rlun_iscsi::proto::text::{encode_text, parse_text};
use rlun_iscsi::scsi::TargetChange;
use tokio::sync::{mpsc, oneshot};

use crate::transport::{Transport, TransportKind};

mod config;
mod driver;
mod error;
mod login;
mod queue;

pub use config::{MultipathConfig, SessionConfig};
pub use error::SessionError;
pub use login::{portal_string, SessionInfo};
pub use queue::{CommandQueue, Completion};

use driver::{start_driver, Shared};
use login::establish;
use queue::Request;

/// A cheap, cloneable handle to a running session.
#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::UnboundedSender<Request>,
    shared: Arc<Shared>,
}

/// A command submitted with [`SessionHandle::submit`], awaiting its result.
#[derive(Debug)]
pub struct PendingCommand {
    rx: oneshot::Receiver<Result<CommandResult, SessionError>>,
}

impl PendingCommand {
    pub async fn wait(self) -> Result<CommandResult, SessionError> {
        self.rx.await.unwrap_or(Err(SessionError::Closed))
    }

    /// [`PendingCommand::wait`] as a poll, for a hand-written future.
    /// Ready once; do not poll it again after.
    pub fn poll_answer(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<CommandResult, SessionError>> {
        std::future::Future::poll(std::pin::Pin::new(&mut self.rx), cx)
            .map(|r| r.unwrap_or(Err(SessionError::Closed)))
    }
}

impl SessionHandle {
    /// Connect and log in (following login redirections), then start the driver task.
    pub async fn connect(cfg: SessionConfig) -> Result<SessionHandle, SessionError> {
        match cfg.transport {
            TransportKind::Tcp => {
                Self::connect_over::<crate::transport::tcp::TcpTransport>(cfg).await
            }
            #[cfg(feature = "rdma")]
            TransportKind::Iser => {
                Self::connect_over::<crate::transport::iser::IserTransport>(cfg).await
            }
            #[cfg(not(feature = "rdma"))]
            kind @ TransportKind::Iser => Err(SessionError::Connect {
                portal: login::portal_string(&cfg.host, cfg.port),
                source: crate::transport::TransportError::Unavailable(kind),
            }),
        }
    }

    /// [`SessionHandle::connect`] over the transport `T` (whatever
    /// `cfg.transport` says).
    pub async fn connect_over<T: Transport>(
        cfg: SessionConfig,
    ) -> Result<SessionHandle, SessionError> {
        let isid = crate::entropy::random_isid();
        let conn = establish::<T>(&cfg, isid).await?;
        let (tx, shared) = start_driver(cfg, isid, conn);
        Ok(SessionHandle { tx, shared })
    }

    /// Facts about the session as of now (they change after a reconnect).
    pub fn info(&self) -> SessionInfo {
        self.shared
            .info
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes each time the session loses its connection.
    pub fn losses(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.losses.subscribe()
    }

    /// Whether the session has a logged-in connection now (false from a
    /// connection loss until it is re-established).
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Relaxed)
    }

    /// How many times the session has been re-established.
    pub fn reconnects(&self) -> u64 {
        self.shared.reconnects.load(Ordering::Relaxed)
    }

    /// Time the session has spent without a logged-in connection since it
    /// was first established (reconnecting, or given up), the current
    /// outage included; and how long the last outage that ended lasted.
    pub fn downtime(&self) -> (std::time::Duration, Option<std::time::Duration>) {
        let o = *self
            .shared
            .outages
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        (o.down(std::time::Instant::now()), o.last)
    }

    /// A counter bumped whenever the target reports that a LUN's capacity
    /// changed (UNIT ATTENTION 2A/09 or an asynchronous event), or a rescan
    /// was asked for; layers above compare it with the value they saw last
    /// and re-read the capacity.
    pub fn capacity_generation(&self) -> u64 {
        self.shared.capacity_changes.load(Ordering::Relaxed)
    }

    /// Like [`SessionHandle::capacity_generation`], for the LUN inventory:
    /// bumped on 3F/0E REPORTED LUNS DATA HAS CHANGED and 3F/03 INQUIRY
    /// DATA HAS CHANGED (or a rescan asked for); the LUNs are looked at
    /// again (REPORT LUNS, INQUIRY).
    pub fn lun_generation(&self) -> u64 {
        self.shared.lun_changes.load(Ordering::Relaxed)
    }

    /// Record a change seen in sense data, or one to look for anyway (a
    /// rescan: [`TargetChange::Capacity`] and [`TargetChange::Luns`]).
    pub fn note_change(&self, change: TargetChange) {
        self.shared.note_change(change);
    }

    /// Follow the target's changes: the receiver sees a new value after
    /// each one [`SessionHandle::note_change`] (or the driver) counted.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// Queue a SCSI command; the returned future resolves when it completes.
    pub fn submit(&self, req: CommandRequest) -> PendingCommand {
        let (tx, rx) = oneshot::channel();
        // The first command into an empty inbox tells the driver; if the
        // driver is gone the commands are dropped, and `wait` reports
        // Closed.
        if self.shared.inbox.push(req, tx) && self.tx.send(Request::Inbox).is_err() {
            self.shared.inbox.clear();
        }
        PendingCommand { rx }
    }

    /// A completion queue on this session, for a task that keeps many
    /// commands in flight (see [`CommandQueue`]).
    pub fn queue(&self) -> CommandQueue {
        CommandQueue::new(self.tx.clone())
    }

    /// A queue whose commands go to this session and complete into `q`
    /// (which may belong to another session): [`CommandQueue::completions`]
    /// of `q` hands out the answers of both.
    pub fn queue_beside(&self, q: &CommandQueue) -> CommandQueue {
        q.sibling(self.tx.clone())
    }

    /// Execute a SCSI command and wait for its result.
    pub async fn command(&self, req: CommandRequest) -> Result<CommandResult, SessionError> {
        self.submit(req).wait().await
    }

    /// A Text Request exchange; returns the reassembled answer.
    pub async fn text(&self, data: Bytes) -> Result<Bytes, SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Text(data, tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    /// Send a NOP-Out ping and wait for the answer; returns the round trip.
    pub async fn ping(&self) -> Result<Duration, SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Ping(tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    /// LOGICAL UNIT RESET on `lun` (8-byte LUN field).
    pub async fn lun_reset(&self, lun: [u8; 8]) -> Result<TmfOutcome, SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::LunReset(lun, tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    /// While the session is down, try to log in again now rather than at
    /// the next step of the back-off, and wait for that attempt (or for
    /// the one under way): `Ok` once a connection is live (at once when
    /// one already is), else [`SessionError::StillUnreachable`] with the
    /// attempt's own error. Bounded by the connect and login timeouts.
    ///
    /// Commands are not held for it: past the replacement timeout they
    /// still fail at once while the session is down. This is for a caller
    /// about to give up on data it holds (the final write-back of a
    /// cache): it learns whether the target is back *now*, not what the
    /// last attempt before found.
    pub async fn reconnect(&self) -> Result<(), SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Reconnect(tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    /// Give the live connection up now, as if it had been lost: for a
    /// path the multipath checker found unanswering, so that its
    /// commands move on after the replacement timeout rather than after
    /// the ping timeout too. `reason` is logged.
    pub fn abandon(&self, reason: String) {
        let _ = self.tx.send(Request::Abandon(reason));
    }

    /// While the connection is down, give back the commands of LUN `lun`
    /// that it keeps for the next one: those that change nothing
    /// (reads), and with `all` the rest too. Each fails with
    /// [`SessionError::Released`] for the multipath router to send
    /// through another path. Nothing happens while a connection is live.
    /// Sent after [`SessionHandle::abandon`], it acts once the connection
    /// is given up (requests are handled in order).
    pub async fn release(&self, lun: [u8; 8], all: bool) -> Released {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Request::Release { lun, all, tx }).is_err() {
            return Released::default();
        }
        rx.await.unwrap_or_default()
    }

    /// Log out cleanly (waits for in-flight commands to finish first).
    pub async fn logout(&self) -> Result<(), SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Logout(tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }
}

/// Log in to a portal with a discovery session, ask `SendTargets=All`, log out.
/// Targets come back as [`DiscoveredTarget`]s (RFC 7143 Appendix C).
pub async fn discover(cfg: SessionConfig) -> Result<Vec<DiscoveredTarget>, SessionError> {
    let mut cfg = cfg;
    cfg.target_name = None;
    let session = SessionHandle::connect(cfg).await?;
    let text = session
        .text(Bytes::from(encode_text(&[(
            "SendTargets".to_string(),
            "All".to_string(),
        )])))
        .await?;
    let _ = session.logout().await;
    let keys = parse_text(&text).map_err(|e| SessionError::BadDiscovery(e.to_string()))?;
    parse_send_targets(&keys).map_err(|e| SessionError::BadDiscovery(e.to_string()))
}

/// Re-exported so users of the driver need not reach into `proto`.
pub use rlun_iscsi::proto::pdu::RESERVED_TAG as NO_TASK;

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<SessionHandle>();
    is_send::<pdu::Pdu>();
}
