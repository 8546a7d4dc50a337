//! The session driver: one tokio task per session that does the I/O and
//! the timers around two sans-IO state machines — the recovery policy
//! ([`rlun_iscsi::proto::recovery::Recovery`]) and, inside it, the current
//! connection's protocol core ([`rlun_iscsi::proto::connection::Connection`]) — and
//! the receive half of a [`Transport`], plus a small writer task that owns
//! its send half ([`FrameWriter::run`]). The driver is generic over the
//! transport (`Driver<T>`); [`SessionConfig::transport`] picks it.
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
//! Buffers belong to the machine's command records until their final
//! answer arrives: a caller that drops its future early leaves the command
//! running harmlessly; its result is discarded.

use rlun_iscsi::proto::idmap::IdMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rlun_iscsi::ErrorKind;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, trace, warn};

use crate::clock;
use crate::stats;
use crate::transport::tcp::TcpTransport;
use crate::transport::{
    DataMovement, Encoded, FrameEncoder, FrameWriter, Lent, NoPlacement, PduReader, Placement,
    Received, Transmit, Transport, TransportError, TransportKind,
};
use rlun_iscsi::error_chain;
use rlun_iscsi::proto::connection::{
    CommandRequest, CommandResult, Connection, FeatureParams, ProtocolError, TaskError, TmfOutcome,
};
use rlun_iscsi::proto::digest::DigestType;
use rlun_iscsi::proto::login::{
    ChapSettings, Login, LoginConfig, LoginError, LoginResult, LoginStep,
};
use rlun_iscsi::proto::negotiate::{
    parse_send_targets, DiscoveredTarget, InitiatorProposal, OperationalParams, SessionType,
    TargetAddress,
};
use rlun_iscsi::proto::pdu::{self, DataIn, Digests, FrameLimits};
use rlun_iscsi::proto::recovery::{
    Failure, Loss, Notice, Output, Recovery, RecoveryConfig, RequestId,
};
use rlun_iscsi::proto::text::{encode_text, parse_text};

/// How to reach and log in to a target (or a portal, for discovery).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Which transport carries the session (`iscsi://` is TCP, `iser://`
    /// is iSER, which is not available yet).
    pub transport: TransportKind,
    pub host: String,
    pub port: u16,
    pub initiator_name: String,
    pub initiator_alias: Option<String>,
    /// `None` opens a discovery session.
    pub target_name: Option<String>,
    pub chap: Option<ChapSettings>,
    pub proposal: InitiatorProposal,
    pub connect_timeout: Duration,
    pub login_timeout: Duration,
    /// Commands kept in flight at most (the target's window may allow fewer).
    pub queue_depth: u32,
    /// Ping the target after this much silence (`None`: never).
    pub nop_interval: Option<Duration>,
    pub nop_timeout: Duration,
    /// A command without an answer for this long is aborted (ABORT TASK,
    /// then LOGICAL UNIT RESET, then a new connection) and retried.
    pub command_timeout: Duration,
    /// How long to keep reconnecting before pending and new I/O fail.
    /// Zero turns reconnection off (discovery sessions never reconnect).
    pub replacement_timeout: Duration,
}

impl SessionConfig {
    pub fn new(host: impl Into<String>, port: u16, initiator_name: impl Into<String>) -> Self {
        SessionConfig {
            transport: TransportKind::Tcp,
            host: host.into(),
            port,
            initiator_name: initiator_name.into(),
            initiator_alias: None,
            target_name: None,
            chap: None,
            proposal: InitiatorProposal::default(),
            connect_timeout: Duration::from_secs(10),
            login_timeout: Duration::from_secs(15),
            queue_depth: 128,
            nop_interval: Some(Duration::from_secs(5)),
            nop_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
            replacement_timeout: Duration::from_secs(120),
        }
    }
}

/// Errors of the session layer. Each says which step failed; the cause is
/// in `source()`.
#[derive(Debug, Error)]
pub enum SessionError {
    #[error("cannot reach portal {portal}")]
    Connect {
        portal: String,
        #[source]
        source: TransportError,
    },
    #[error("login to {portal} failed")]
    Login {
        portal: String,
        #[source]
        source: LoginError,
    },
    #[error("login to {portal} timed out after {timeout:?}")]
    LoginTimeout { portal: String, timeout: Duration },
    #[error("login to {portal}: connection failed during login")]
    LoginTransport {
        portal: String,
        #[source]
        source: TransportError,
    },
    #[error("too many login redirections (last: {0})")]
    TooManyRedirects(String),
    #[error("connection to the target lost")]
    ConnectionLost(#[source] Arc<TransportError>),
    #[error("target violated the iSCSI protocol")]
    Protocol(#[source] ProtocolError),
    #[error("task failed")]
    Task(#[source] TaskError),
    #[error("session is closed")]
    Closed,
    #[error("discovery answer is malformed: {0}")]
    BadDiscovery(String),
    #[error("target unreachable for more than the replacement timeout ({timeout:?})")]
    ReplacementTimeout {
        timeout: Duration,
        #[source]
        last: Arc<SessionError>,
    },
    #[error("task management did not answer within {0:?}")]
    TaskManagementTimeout(Duration),
    #[error("target asked us to log out")]
    LogoutRequested,
    #[error("target stopped answering (no answer to a NOP-Out ping within {0:?})")]
    NotResponding(Duration),
}

impl SessionError {
    /// How this failure is classified.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SessionError::Connect { .. }
            | SessionError::LoginTimeout { .. }
            | SessionError::ConnectionLost(_)
            | SessionError::Closed
            | SessionError::TooManyRedirects(_)
            | SessionError::ReplacementTimeout { .. }
            | SessionError::TaskManagementTimeout(_)
            | SessionError::LogoutRequested
            | SessionError::NotResponding(_) => ErrorKind::Unreachable,
            SessionError::LoginTransport { source, .. } => source.kind(),
            SessionError::Login { source, .. } => source.kind(),
            SessionError::Protocol(_) | SessionError::BadDiscovery(_) => ErrorKind::Protocol,
            SessionError::Task(t) => t.kind(),
        }
    }
}

impl SessionError {
    /// True when the network or target went away (as opposed to the target refusing).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            SessionError::ConnectionLost(_)
                | SessionError::Closed
                | SessionError::ReplacementTimeout { .. }
                | SessionError::NotResponding(_)
                | SessionError::Task(TaskError::ConnectionLost(_))
        )
    }
}

/// Facts about a logged-in session, for `rlun info` and logs.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub portal: String,
    pub target_name: Option<String>,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub params: OperationalParams,
    pub target_alias: Option<String>,
    pub target_portal_group_tag: Option<u16>,
    /// The most data one SCSI command may move on this session's
    /// transport ([`Transport::MAX_TRANSFER`]).
    pub max_transfer: Option<u64>,
}

enum Request {
    Command(CommandRequest, CmdWaiter),
    /// A [`CommandQueue`]'s commands since its last flush; the emptied
    /// vector goes back to the queue for the next batch.
    Batch(Arc<Completions>, Vec<(CommandRequest, Ticket)>),
    Text(Bytes, oneshot::Sender<Result<Bytes, SessionError>>),
    Ping(oneshot::Sender<Result<Duration, SessionError>>),
    LunReset([u8; 8], oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
}

/// A cheap, cloneable handle to a running session.
#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::UnboundedSender<Request>,
    shared: Arc<Shared>,
}

/// State the driver shares with handles.
struct Shared {
    info: std::sync::RwLock<SessionInfo>,
    reconnects: AtomicU64,
    capacity_changes: AtomicU64,
}

/// A command submitted with [`SessionHandle::submit`], awaiting its result.
pub struct PendingCommand {
    rx: oneshot::Receiver<Result<CommandResult, SessionError>>,
}

impl PendingCommand {
    pub async fn wait(self) -> Result<CommandResult, SessionError> {
        self.rx.await.unwrap_or(Err(SessionError::Closed))
    }
}

impl SessionHandle {
    /// Connect and log in (following login redirections), then start the driver task.
    pub async fn connect(cfg: SessionConfig) -> Result<SessionHandle, SessionError> {
        match cfg.transport {
            TransportKind::Tcp => Self::connect_over::<TcpTransport>(cfg).await,
            #[cfg(feature = "rdma")]
            TransportKind::Iser => {
                Self::connect_over::<crate::transport::iser::IserTransport>(cfg).await
            }
            #[cfg(not(feature = "rdma"))]
            kind @ TransportKind::Iser => Err(SessionError::Connect {
                portal: portal_string(&cfg.host, cfg.port),
                source: TransportError::Unavailable(kind),
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
        Ok(start_driver(cfg, isid, conn))
    }

    /// Facts about the session as of now (they change after a reconnect).
    pub fn info(&self) -> SessionInfo {
        self.shared
            .info
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many times the session has been re-established.
    pub fn reconnects(&self) -> u64 {
        self.shared.reconnects.load(Ordering::Relaxed)
    }

    /// A counter bumped whenever the target reports that a LUN's capacity
    /// changed (UNIT ATTENTION 2A/09 or an asynchronous event); layers above
    /// compare it with the value they saw last and re-read the capacity.
    pub fn capacity_generation(&self) -> u64 {
        self.shared.capacity_changes.load(Ordering::Relaxed)
    }

    /// Record a capacity change seen in sense data.
    pub fn note_capacity_change(&self) {
        self.shared.capacity_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Queue a SCSI command; the returned future resolves when it completes.
    pub fn submit(&self, req: CommandRequest) -> PendingCommand {
        let (tx, rx) = oneshot::channel();
        // If the driver is gone, `tx` is dropped and `wait` reports Closed.
        let _ = self.tx.send(Request::Command(req, CmdWaiter::One(tx)));
        PendingCommand { rx }
    }

    /// A completion queue on this session, for a task that keeps many
    /// commands in flight (see [`CommandQueue`]).
    pub fn queue(&self) -> CommandQueue {
        CommandQueue {
            tx: self.tx.clone(),
            done: Arc::new(Completions::default()),
            pending: Vec::new(),
        }
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

    /// Log out cleanly (waits for in-flight commands to finish first).
    pub async fn logout(&self) -> Result<(), SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Logout(tx))
            .map_err(|_| SessionError::Closed)?;
        rx.await.unwrap_or(Err(SessionError::Closed))
    }
}

/// A command's answer as a [`CommandQueue`] hands it out: the caller's tag
/// and the result.
pub type Completion = (u64, Result<CommandResult, SessionError>);

/// Commands submitted through a queue complete into it, and the one task
/// that reads it is woken once per driver turn with every command that
/// finished in that turn — not once per command through a channel of its
/// own, as [`SessionHandle::submit`] does. For a caller that keeps many
/// commands in flight (`rlun bench`, [`crate::client::LunQueue`]) that
/// saves a channel allocation, a wake-up and a task switch per I/O.
///
/// Submissions are batched the same way: commands submitted go to the
/// session together, in one message, at the next
/// [`CommandQueue::completions`] or [`CommandQueue::flush`] (or when the
/// queue is dropped).
///
/// Every command submitted gets exactly one completion with its tag:
/// its answer, or [`SessionError::Closed`] when the session ended
/// without one. Dropping the queue with commands in flight leaves them
/// running harmlessly (their buffers stay with the session until the
/// target answers); their results are dropped.
pub struct CommandQueue {
    tx: mpsc::UnboundedSender<Request>,
    done: Arc<Completions>,
    /// Submitted, not yet handed to the session.
    pending: Vec<(CommandRequest, Ticket)>,
}

/// What a queue's commands completed into, shared by the queue and the
/// driver; the driver wakes the reader after its turn ([`Driver::deliver`]).
#[derive(Default)]
struct Completions {
    state: std::sync::Mutex<CompletionState>,
}

#[derive(Default)]
struct CompletionState {
    done: Vec<Completion>,
    waker: Option<std::task::Waker>,
    /// A submission vector the driver emptied, for the next batch.
    spare: Vec<(CommandRequest, Ticket)>,
}

impl Completions {
    fn push(&self, c: Completion) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .done
            .push(c);
    }

    fn wake(&self) {
        let waker = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waker
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A queue's command on its way: delivered exactly once, by the driver
/// with its answer ([`Ticket::complete`]) or, if it is dropped unanswered
/// (the session ended, the driver is gone), as [`SessionError::Closed`].
struct Ticket {
    done: Arc<Completions>,
    tag: u64,
    delivered: bool,
}

impl Ticket {
    /// Deliver `result`; the caller wakes the queue's reader after the
    /// turn. Returns the queue for that.
    fn complete(mut self, result: Result<CommandResult, SessionError>) -> Arc<Completions> {
        self.delivered = true;
        self.done.push((self.tag, result));
        self.done.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.delivered {
            self.done.push((self.tag, Err(SessionError::Closed)));
            self.done.wake();
        }
    }
}

impl CommandQueue {
    /// Queue a SCSI command; its completion comes with `tag`. It goes to
    /// the session at the next [`CommandQueue::completions`] or
    /// [`CommandQueue::flush`].
    pub fn submit(&mut self, req: CommandRequest, tag: u64) {
        if self.pending.capacity() == 0 {
            // The vector the driver emptied last time, if it is back.
            self.pending = std::mem::take(
                &mut self
                    .done
                    .state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spare,
            );
        }
        let ticket = Ticket {
            done: self.done.clone(),
            tag,
            delivered: false,
        };
        self.pending.push((req, ticket));
    }

    /// Hand the commands submitted since the last flush to the session,
    /// in one message.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        // If the driver is gone the batch comes back here, dropped, and
        // its tickets complete the commands as Closed.
        let _ = self.tx.send(Request::Batch(self.done.clone(), batch));
    }

    /// Send what was submitted ([`CommandQueue::flush`]), wait until at
    /// least one command has completed, then move every completion there
    /// is into `out` (appended).
    pub async fn completions(&mut self, out: &mut Vec<Completion>) {
        self.flush();
        std::future::poll_fn(|cx| {
            let mut st = self.done.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.done.is_empty() {
                if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.waker = Some(cx.waker().clone());
                }
                return std::task::Poll::Pending;
            }
            if out.is_empty() {
                // Hand over the filled vector and keep the caller's empty
                // one (with its capacity) for the next batch.
                std::mem::swap(out, &mut st.done);
            } else {
                out.append(&mut st.done);
            }
            std::task::Poll::Ready(())
        })
        .await
    }
}

impl Drop for CommandQueue {
    /// Commands submitted but not yet sent still go (see the type's docs).
    fn drop(&mut self) {
        self.flush();
    }
}

fn portal_string(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A connected transport that has completed login.
struct LoggedIn<T: Transport> {
    portal: String,
    reader: T::Reader,
    wr: T::Writer,
    encoder: T::Encoder,
    result: LoginResult,
}

/// Connect and log in with `isid`, following up to five redirections.
/// Reusing the ISID of a lost session (with TSIH 0) makes the target
/// reinstate it: the old session's tasks are cleaned up (RFC 7143 §6.3.5).
async fn establish<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
) -> Result<LoggedIn<T>, SessionError> {
    let mut host = cfg.host.clone();
    let mut port = cfg.port;
    for _ in 0..5 {
        let portal = portal_string(&host, port);
        let transport = T::connect(&host, port, cfg.connect_timeout)
            .await
            .map_err(|source| SessionError::Connect {
                portal: portal.clone(),
                source,
            })?;
        let (mut reader, mut wr, mut encoder) = transport.split(FrameLimits::default());
        let outcome = tokio::time::timeout(
            cfg.login_timeout,
            run_login::<T>(cfg, isid, &mut reader, &mut wr, &mut encoder, &portal),
        )
        .await
        .map_err(|_| SessionError::LoginTimeout {
            portal: portal.clone(),
            timeout: cfg.login_timeout,
        })??;
        match outcome {
            LoginStep::Complete(result) => {
                return Ok(LoggedIn {
                    portal,
                    reader,
                    wr,
                    encoder,
                    result,
                })
            }
            LoginStep::Redirect { address, permanent } => {
                info!(%portal, %address, permanent, "login redirected");
                let target = TargetAddress::parse(&address).map_err(|e| {
                    SessionError::BadDiscovery(format!("bad redirect address {address}: {e}"))
                })?;
                port = target.port.unwrap_or(port);
                host = target.host;
            }
            LoginStep::Send { .. } => unreachable!("run_login loops until done"),
        }
    }
    Err(SessionError::TooManyRedirects(portal_string(&host, port)))
}

async fn run_login<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
    reader: &mut T::Reader,
    wr: &mut T::Writer,
    encoder: &mut T::Encoder,
    portal: &str,
) -> Result<LoginStep, SessionError> {
    let mut proposal = cfg.proposal.clone();
    T::adjust_proposal(&mut proposal);
    // A transport that moves data itself needs iSER-assisted mode.
    proposal.rdma_extensions = T::DATA_MOVEMENT == DataMovement::Direct;
    let login_cfg = LoginConfig {
        initiator_name: cfg.initiator_name.clone(),
        initiator_alias: cfg.initiator_alias.clone(),
        target_name: cfg.target_name.clone(),
        session_type: if cfg.target_name.is_some() {
            SessionType::Normal
        } else {
            SessionType::Discovery
        },
        isid,
        tsih: 0,
        cid: 0,
        cmd_sn: 1,
        chap: cfg.chap.clone(),
        chap_nonce: crate::entropy::chap_nonce(),
        proposal,
    };
    let transport_err = |source| SessionError::LoginTransport {
        portal: portal.to_string(),
        source,
    };
    let (mut login, mut pdu) = Login::start(login_cfg).map_err(|source| SessionError::Login {
        portal: portal.to_string(),
        source,
    })?;
    loop {
        let frame = encoder
            .encode(Transmit::from(pdu))
            .map_err(transport_err)?
            .frame;
        wr.write_frames(std::slice::from_ref(&frame))
            .await
            .map_err(|e| transport_err(TransportError::Io(e)))?;
        let rsp = reader
            .read_pdu(&mut NoPlacement)
            .await
            .map_err(transport_err)?
            .pdu;
        match login
            .handle_response(rsp)
            .map_err(|source| SessionError::Login {
                portal: portal.to_string(),
                source,
            })? {
            LoginStep::Send { next, pdu: p } => {
                login = *next;
                pdu = p;
            }
            done => return Ok(done),
        }
    }
}

fn session_info<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
    conn: &LoggedIn<T>,
) -> SessionInfo {
    SessionInfo {
        portal: conn.portal.clone(),
        target_name: cfg.target_name.clone(),
        isid,
        tsih: conn.result.tsih,
        params: conn.result.params.clone(),
        target_alias: conn.result.target_alias.clone(),
        target_portal_group_tag: conn.result.target_portal_group_tag,
        max_transfer: T::MAX_TRANSFER,
    }
}

fn start_driver<T: Transport>(
    cfg: SessionConfig,
    isid: [u8; 6],
    conn: LoggedIn<T>,
) -> SessionHandle {
    let shared = Arc::new(Shared {
        info: std::sync::RwLock::new(session_info(&cfg, isid, &conn)),
        reconnects: AtomicU64::new(0),
        capacity_changes: AtomicU64::new(0),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let policy = RecoveryConfig::new(
        cfg.command_timeout,
        cfg.replacement_timeout,
        cfg.target_name.is_some(),
    );
    let (live, core, time2wait) = go_live::<T>(&cfg, isid, &shared, conn);
    let driver = Driver::<T> {
        cfg,
        isid,
        shared: shared.clone(),
        machine: Recovery::new(policy, core, time2wait, Instant::now()),
        live: Some(live),
        attempt: None,
        waiters: IdMap::default(),
        to_wake: Vec::new(),
        // Replaced by the cause of the first loss before anyone sees it.
        last: Arc::new(SessionError::Closed),
        requests_open: true,
        timer: Timer::new(),
    };
    tokio::spawn(driver.run(rx));
    SessionHandle { tx, shared }
}

/// How a command's answer reaches its caller. It travels inside the
/// recovery machine's record of the command ([`Recovery::handle_command`])
/// and comes back with [`Output::Command`]: one record per command above
/// the core, no map of waiters beside it.
enum CmdWaiter {
    /// One caller awaits this one command ([`SessionHandle::submit`]).
    One(oneshot::Sender<Result<CommandResult, SessionError>>),
    /// A [`CommandQueue`]'s command.
    Queue(Ticket),
}

impl std::fmt::Debug for CmdWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmdWaiter::One(_) => f.write_str("One"),
            CmdWaiter::Queue(t) => write!(f, "Queue({})", t.tag),
        }
    }
}

/// Callers waiting for the answer to a request other than a command
/// (rare), by the id the recovery machine gave their request.
enum Waiter {
    Text(oneshot::Sender<Result<Bytes, SessionError>>),
    Ping(oneshot::Sender<Result<Duration, SessionError>>),
    Tmf(oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
}

/// The I/O of the current connection: the transport's receive half and
/// the channel to the writer task that owns its send half. The recovery
/// machine hands a connection's core back for dropping only after this is
/// gone ([`Recovery::take_retired`]): a direct transport revokes remote
/// access to the tasks' buffers when the receive half drops, before the
/// core frees them (the send half lives on in the writer task until it
/// sees `frames` closed).
struct Live<T: Transport> {
    reader: T::Reader,
    /// To the writer task ([`FrameWriter::run`]), which owns `T::Writer`;
    /// dropping it ends that task.
    frames: mpsc::UnboundedSender<Vec<<T::Writer as FrameWriter>::Frame>>,
    write_error: oneshot::Receiver<std::io::Error>,
    /// Encodes what the core wants sent, with the negotiated digests.
    encoder: T::Encoder,
}

/// A connection attempt (connect and log in) under way.
type Attempt<T> = Pin<Box<dyn Future<Output = Result<LoggedIn<T>, SessionError>> + Send>>;

/// The thin tokio loop around [`Recovery`]: it does the I/O, sleeps until
/// the machine's next deadline, turns requests into machine inputs and
/// hands the machine's answers to their callers.
struct Driver<T: Transport> {
    cfg: SessionConfig,
    isid: [u8; 6],
    shared: Arc<Shared>,
    machine: Recovery<CmdWaiter>,
    live: Option<Live<T>>,
    attempt: Option<Attempt<T>>,
    waiters: IdMap<RequestId, Waiter>,
    /// Queues that got completions this turn, to wake once each.
    to_wake: Vec<Arc<Completions>>,
    /// Why the last connection (or connection attempt) failed: the cause
    /// reported to callers whose requests fail because of it.
    last: Arc<SessionError>,
    requests_open: bool,
    timer: Timer,
}

/// The driver's one timer. The machine's next deadline moves with nearly
/// every PDU (the NOP-Out interval counts from the last one heard, command
/// deadlines from their submission), almost always later. Registering a
/// fresh tokio timer on each loop turn costs a timer-wheel insert and
/// removal per completion; instead the timer stays armed at the earliest
/// instant asked for and is moved only when a deadline comes *earlier*.
/// When it fires before anything is due, [`Recovery::handle_timeout`] finds
/// nothing to do and the loop re-arms it at the then-current deadline: one
/// spurious wake-up per deadline period instead of timer churn per I/O.
struct Timer {
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: Option<Instant>,
}

impl Timer {
    fn new() -> Self {
        // Far future; never polled until armed.
        let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        Timer {
            sleep: Box::pin(tokio::time::sleep_until(far)),
            armed: None,
        }
    }

    /// Make sure the timer fires no later than `deadline`.
    fn arm(&mut self, deadline: Option<Instant>) {
        let Some(d) = deadline else { return };
        if self.armed.is_some_and(|a| a <= d) {
            return;
        }
        self.sleep.as_mut().reset(d.into());
        self.armed = Some(d);
    }

    /// Wait for the armed instant; pending forever while disarmed.
    async fn fired(&mut self) {
        if self.armed.is_none() {
            return std::future::pending().await;
        }
        self.sleep.as_mut().await;
        self.armed = None;
    }
}

impl<T: Transport> Driver<T> {
    /// Take a logged-in connection into use (see [`go_live`]).
    fn go_live(&mut self, conn: LoggedIn<T>) -> (Connection, Duration) {
        let (live, core, time2wait) = go_live::<T>(&self.cfg, self.isid, &self.shared, conn);
        self.live = Some(live);
        (core, time2wait)
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        let one_thread = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread;
        loop {
            self.flush();
            if self.deliver() {
                break;
            }
            self.timer.arm(self.machine.poll_timeout());
            let (reader, write_error) = match self.live.as_mut() {
                Some(l) => (Some(&mut l.reader), Some(&mut l.write_error)),
                None => (None, None),
            };
            // The clock reading of a turn that handled PDUs.
            let mut processed = None;
            tokio::select! {
                biased;
                pdu = read_pdu(reader, &mut self.machine) => {
                    let now = clock::now();
                    processed = Some(now);
                    let mut next = pdu.map(Some);
                    let mut payload = 0;
                    // Handle what arrived with it, up to a bound, before
                    // handing out completions and sending.
                    for turn in 1.. {
                        match next {
                            Ok(Some(Received { pdu, placed: None })) => {
                                trace!(opcode = %pdu.bhs.opcode(), data = pdu.data.len(), "received");
                                payload += pdu.data.len();
                                self.machine.handle_pdu(pdu, now);
                            }
                            Ok(Some(Received { pdu, placed: Some(lent) })) => {
                                trace!(opcode = %pdu.bhs.opcode(), itt = lent.itt(), "received in place");
                                payload += lent.payload().len();
                                self.machine.handle_placed(pdu, lent, now);
                            }
                            Ok(None) => break,
                            Err(e) => {
                                self.connection_failed(e);
                                break;
                            }
                        }
                        let Some(live) = self.live.as_mut() else { break };
                        if !self.machine.is_live()
                            || turn == MAX_PDUS_PER_TURN
                            || payload >= MAX_PAYLOAD_PER_TURN
                        {
                            break;
                        }
                        next = live.reader.try_next(&mut self.machine);
                    }
                }
                req = rx.recv(), if self.requests_open => match req {
                    Some(req) => {
                        // One clock read for the whole batch.
                        let now = clock::now();
                        self.request(req, now);
                        while let Ok(req) = rx.try_recv() {
                            self.request(req, now);
                        }
                    }
                    None => {
                        self.requests_open = false;
                        self.machine.handle_requests_closed();
                    }
                },
                e = write_failed(write_error) => {
                    let e = e.unwrap_or_else(|_| std::io::Error::other("writer stopped"));
                    self.connection_failed(TransportError::Io(e));
                }
                r = attempt_done(self.attempt.as_mut()) => {
                    self.attempt = None;
                    let now = Instant::now();
                    match r {
                        Ok(conn) => {
                            let (core, time2wait) = self.go_live(conn);
                            self.machine.handle_connected(core, time2wait, Instant::now());
                            if !self.machine.is_live() {
                                self.live = None;
                                drop(self.machine.take_retired());
                            }
                        }
                        Err(e) => {
                            debug!(error = %error_chain(&e), "reconnect attempt failed");
                            self.last = Arc::new(e);
                            self.machine.handle_connect_failed(now);
                        }
                    }
                }
                _ = self.timer.fired() => self.machine.handle_timeout(clock::now()),
            }
            if let Some(now) = processed {
                // Hand out completions and queue what the core wants sent,
                // then let the callers and the writer run before reading
                // more: on a one-thread runtime a target streaming Data-In
                // would otherwise keep this task busy and starve them,
                // collapsing the queue depth.
                let copied = self.machine.take_copied_bytes();
                if copied > 0 {
                    stats::add_copied(copied);
                }
                self.flush();
                if self.deliver() {
                    break;
                }
                if one_thread {
                    // Behind the tasks just woken, without the I/O poll
                    // (an epoll_wait) that `yield_now` waits for.
                    YieldToPeers(false).await;
                } else {
                    tokio::task::yield_now().await;
                }
                // What the callers just woken asked for meanwhile, under
                // this turn's clock reading rather than one more of its
                // own: a command's deadline then counts from the turn
                // that woke its caller, at most one pass of the other
                // tasks earlier than its submission.
                if self.requests_open {
                    while let Ok(req) = rx.try_recv() {
                        self.request(req, now);
                    }
                }
            }
        }
        // Whatever still waits finds its sender dropped and reports Closed;
        // later requests find the channel closed.
        self.live = None;
        self.waiters.clear();
        rx.close();
        while let Ok(req) = rx.try_recv() {
            drop(req);
        }
    }

    /// The transport of the current connection failed.
    fn connection_failed(&mut self, e: TransportError) {
        if self.machine.is_live() {
            self.last = Arc::new(SessionError::ConnectionLost(Arc::new(e)));
        }
        self.machine.handle_connection_lost(Instant::now());
        // The machine always says Disconnect; drop the I/O now in case it
        // had already let go of the connection.
        self.live = None;
    }

    fn request(&mut self, req: Request, now: Instant) {
        let (id, waiter) = match req {
            Request::Command(c, tx) => {
                self.machine.handle_command(c, tx, now);
                return;
            }
            Request::Batch(queue, mut batch) => {
                for (c, ticket) in batch.drain(..) {
                    self.machine
                        .handle_command(c, CmdWaiter::Queue(ticket), now);
                }
                queue.state.lock().unwrap_or_else(|e| e.into_inner()).spare = batch;
                return;
            }
            Request::Text(data, tx) => (self.machine.handle_text(data, now), Waiter::Text(tx)),
            Request::Ping(tx) => (self.machine.handle_ping(now), Waiter::Ping(tx)),
            Request::LunReset(lun, tx) => {
                (self.machine.handle_lun_reset(lun, now), Waiter::Tmf(tx))
            }
            Request::Logout(tx) => (self.machine.handle_logout(), Waiter::Logout(tx)),
        };
        self.waiters.insert(id, waiter);
    }

    /// Hand everything the core wants sent to the writer task.
    fn flush(&mut self) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let mut frames = Vec::new();
        while let Some(tx) = self.machine.poll_transmit() {
            let itt = tx.direct.as_ref().map(|d| d.itt);
            match live.encoder.encode(tx) {
                Ok(Encoded { frame, hold }) => {
                    if let (Some(itt), Some(hold)) = (itt, hold) {
                        self.machine.hold(itt, hold);
                    }
                    frames.push(frame);
                }
                Err(e) => {
                    self.connection_failed(e);
                    return;
                }
            }
        }
        if frames.is_empty() {
            return;
        }
        if live.frames.send(frames).is_err() {
            self.connection_failed(TransportError::Closed);
        }
    }

    /// Act on everything the machine has to say; true when the session is
    /// over. Each completion queue that got answers is woken once, after
    /// all of them are in.
    fn deliver(&mut self) -> bool {
        let over = self.deliver_outputs();
        for q in self.to_wake.drain(..) {
            q.wake();
        }
        over
    }

    fn deliver_outputs(&mut self) -> bool {
        while let Some(out) = self.machine.poll_output() {
            match out {
                Output::Command { result, waiter, .. } => {
                    let result = result.map_err(|f| self.failure(f));
                    match waiter {
                        CmdWaiter::One(tx) => {
                            let _ = tx.send(result);
                        }
                        CmdWaiter::Queue(ticket) => {
                            let q = ticket.complete(result);
                            if !self.to_wake.iter().any(|w| Arc::ptr_eq(w, &q)) {
                                self.to_wake.push(q);
                            }
                        }
                    }
                }
                Output::Text { id, result } => {
                    let result = result.map_err(|f| self.failure(f));
                    if let Some(Waiter::Text(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Output::Pong { id, result } => {
                    if let Ok(rtt) = &result {
                        debug!(?rtt, "NOP-In");
                    }
                    let result = result.map_err(|f| self.failure(f));
                    if let Some(Waiter::Ping(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Output::TaskMgmt { id, result } => {
                    let result = result.map_err(|f| self.failure(f));
                    if let Some(Waiter::Tmf(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Output::Logout { id, result } => {
                    let result = result.map_err(|f| self.failure(f));
                    if let Some(Waiter::Logout(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Output::Disconnect {
                    cause,
                    reconnect,
                    pending,
                    quiet,
                } => {
                    // The transport goes first, then the core (see `Live`).
                    self.live = None;
                    drop(self.machine.take_retired());
                    if let Some(e) = loss_error(&cause) {
                        self.last = Arc::new(e);
                    }
                    if reconnect && quiet {
                        debug!(
                            error = %error_chain(&*self.last),
                            pending,
                            "connection lost again right after login; reconnecting"
                        );
                    } else if reconnect {
                        warn!(
                            error = %error_chain(&*self.last),
                            replacement_timeout = ?self.cfg.replacement_timeout,
                            pending,
                            "connection lost; reconnecting"
                        );
                    } else if !quiet {
                        warn!(error = %error_chain(&*self.last), "session ended");
                    }
                }
                Output::Connect => {
                    let cfg = self.cfg.clone();
                    let isid = self.isid;
                    self.attempt = Some(Box::pin(async move { establish::<T>(&cfg, isid).await }));
                }
                Output::Reconnected { after, reissued } => {
                    self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                    info!(?after, "session re-established");
                    if reissued > 0 {
                        info!(commands = reissued, "re-issuing commands after reconnect");
                    }
                }
                Output::CapacityChanged => {
                    info!("target reports a capacity change");
                    self.shared.capacity_changes.fetch_add(1, Ordering::Relaxed);
                }
                Output::Notice(n) => self.log_notice(n),
                Output::Finished => {
                    self.live = None;
                    drop(self.machine.take_retired());
                    return true;
                }
            }
        }
        false
    }

    /// The error a caller gets for a machine [`Failure`].
    fn failure(&self, f: Failure) -> SessionError {
        match f {
            Failure::Task(e) => SessionError::Task(e),
            // A request lost because the target broke the protocol fails
            // as a protocol error (exit 7), naming the violation.
            Failure::ConnectionLost => match &*self.last {
                SessionError::Protocol(e) => SessionError::Protocol(e.clone()),
                last => SessionError::Task(TaskError::ConnectionLost(error_chain(last))),
            },
            Failure::ReplacementTimeout => SessionError::ReplacementTimeout {
                timeout: self.cfg.replacement_timeout,
                last: self.last.clone(),
            },
            Failure::Closed => SessionError::Closed,
        }
    }

    fn log_notice(&self, n: Notice) {
        match n {
            Notice::CommandTimedOut { opcode, timeout } => {
                warn!(opcode, ?timeout, "command timed out; aborting it")
            }
            Notice::ReissuingAborted { id } => debug!(id = id.0, "re-issuing aborted command"),
            Notice::AbortFailed { result } => {
                warn!(?result, "ABORT TASK failed; resetting the logical unit")
            }
            Notice::AbortUnanswered => warn!("ABORT TASK unanswered; resetting the logical unit"),
            Notice::TaskMgmtDone { result } => debug!(?result, "task management done"),
            Notice::ScsiEvent { sense } => info!(?sense, "SCSI asynchronous event"),
            Notice::TargetRequestsLogout { within_secs } => warn!(
                within_secs,
                "target requests logout; logging out and in again"
            ),
            Notice::TargetDropping { event, time2wait } => {
                warn!(event, time2wait, "target is dropping the connection")
            }
            Notice::RenegotiationRequested => {
                warn!("target requests renegotiation; reconnecting to renegotiate")
            }
            Notice::AsyncMessage {
                event,
                vcode,
                parameters,
            } => warn!(event, vcode, ?parameters, "asynchronous message"),
            Notice::Reject { reason } => warn!(reason, "target rejected a PDU"),
            Notice::LogoutResponse { code } => {
                warn!(code, "target answered logout with an error code")
            }
            Notice::AttemptFailed => {}
            Notice::RepeatedLoginFailures { count, cause: _ } => warn!(
                "{count} reconnects in a row failed right after login: {}; backing off",
                error_chain(&*self.last)
            ),
            Notice::GaveUp { failed } => warn!(
                error = %error_chain(&*self.last),
                failed,
                "target unreachable past the replacement timeout; failing I/O"
            ),
        }
    }
}

/// The session error that stands for a loss the machine decided on
/// (`None` for a transport failure: the driver recorded that one itself).
fn loss_error(cause: &Loss) -> Option<SessionError> {
    Some(match cause {
        Loss::Transport => return None,
        Loss::Protocol(e) => SessionError::Protocol(e.clone()),
        Loss::NotResponding(d) => SessionError::NotResponding(*d),
        Loss::TaskManagementTimeout(d) => SessionError::TaskManagementTimeout(*d),
        Loss::LunResetFailed => {
            SessionError::Task(TaskError::Rejected("LOGICAL UNIT RESET failed"))
        }
        Loss::TargetDropping { .. } => {
            SessionError::ConnectionLost(Arc::new(TransportError::Closed))
        }
        Loss::Renegotiation | Loss::TargetLogout => SessionError::LogoutRequested,
    })
}

/// Take a logged-in connection into use: reader limits, writer task, the
/// facts handles see; returns its I/O, its protocol core and its
/// DefaultTime2Wait.
fn go_live<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
    shared: &Shared,
    conn: LoggedIn<T>,
) -> (Live<T>, Connection, Duration) {
    let info = session_info(cfg, isid, &conn);
    let LoggedIn {
        portal,
        mut reader,
        wr,
        mut encoder,
        result,
    } = conn;
    let p = &result.params;
    let digests = Digests {
        header: p.header_digest == DigestType::Crc32c,
        data: p.data_digest == DigestType::Crc32c,
    };
    reader.set_limits(FrameLimits {
        digests,
        max_data_segment: p.recv_data_segment_limit(),
    });
    encoder.set_digests(digests);
    let feature = FeatureParams {
        immediate_data: p.immediate_data,
        initial_r2t: p.initial_r2t,
        first_burst_length: p.first_burst_length,
        max_burst_length: p.max_burst_length,
        max_xmit_data_segment_length: p.xmit_data_segment_limit(),
        max_recv_data_segment_length: p.recv_data_segment_limit(),
        queue_depth: cfg.queue_depth.max(1),
        nop_interval: cfg.nop_interval,
        nop_timeout: cfg.nop_timeout,
        data_movement: T::DATA_MOVEMENT,
    };
    info!(
        %portal,
        target = cfg.target_name.as_deref().unwrap_or("(discovery)"),
        tsih = result.tsih,
        header_digest = digests.header,
        data_digest = digests.data,
        max_burst = p.max_burst_length,
        "logged in"
    );
    let time2wait = Duration::from_secs(u64::from(p.default_time2wait.min(3600)));
    *shared.info.write().unwrap_or_else(|e| e.into_inner()) = info;
    let core = Connection::new(feature, result.numbers);
    let (frames_tx, frames_rx) = mpsc::unbounded_channel();
    let (werr_tx, werr_rx) = oneshot::channel();
    tokio::spawn(wr.run(frames_rx, werr_tx));
    let live = Live {
        reader,
        frames: frames_tx,
        write_error: werr_rx,
        encoder,
    };
    (live, core, time2wait)
}

async fn read_pdu<W: Send>(
    reader: Option<&mut impl PduReader>,
    machine: &mut Recovery<W>,
) -> Result<Received, TransportError> {
    match reader {
        Some(r) => r.read_pdu(machine).await,
        None => std::future::pending().await,
    }
}

/// Data-In payloads go straight into the read buffer of their command in
/// the current connection's core.
impl<W: Send> Placement for Recovery<W> {
    fn lend(&mut self, header: &DataIn, len: u32) -> Option<Lent> {
        self.lend_read_buffer(header, len)
    }
}

/// Let the other tasks of a one-thread runtime run once: the task wakes
/// itself and goes to the back of the run queue, behind the callers its
/// completions woke. (`tokio::task::yield_now` instead defers the wake-up
/// until the runtime has polled its I/O driver: one more `epoll_wait` per
/// batch of completions. On a multi-thread runtime a self-wake would put
/// the task in its worker's LIFO slot, ahead of those callers, so the
/// driver uses `yield_now` there.)
struct YieldToPeers(bool);

impl Future for YieldToPeers {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// PDUs the driver handles in one turn before it hands out completions,
/// sends what the core queued and lets other tasks run.
const MAX_PDUS_PER_TURN: usize = 64;

/// Data-In payload bytes the driver takes in one turn before it hands out
/// the completions: their callers then drop (or use) their buffers before
/// more arrive, so the read buffer pool hands the same few chunks out
/// again while they are still in the CPU's cache. With 128 KiB reads, 64
/// PDUs per turn put up to 8 MiB of buffers in rotation, and the kernel's
/// copy into them cost twice what it costs into one hot buffer
/// (`perf record`, against libiscsi's `iscsi-perf`). 4 KiB reads still
/// take 64 PDUs per turn.
const MAX_PAYLOAD_PER_TURN: usize = 256 << 10;

async fn write_failed(
    rx: Option<&mut oneshot::Receiver<std::io::Error>>,
) -> Result<std::io::Error, oneshot::error::RecvError> {
    match rx {
        Some(rx) => rx.await,
        None => std::future::pending().await,
    }
}

async fn attempt_done<T: Transport>(
    attempt: Option<&mut Attempt<T>>,
) -> Result<LoggedIn<T>, SessionError> {
    match attempt {
        Some(a) => a.await,
        None => std::future::pending().await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_errors_look_through_to_the_login_and_the_transport() {
        let e = SessionError::Login {
            portal: "p".into(),
            source: LoginError::NotAuthorized,
        };
        assert_eq!(e.kind(), ErrorKind::Auth);
        let e = SessionError::LoginTransport {
            portal: "p".into(),
            source: TransportError::Truncated { have: 1, need: 48 },
        };
        assert_eq!(e.kind(), ErrorKind::Protocol);
        let e = SessionError::LoginTransport {
            portal: "p".into(),
            source: TransportError::Closed,
        };
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        let e = SessionError::Task(TaskError::ConnectionLost("x".into()));
        assert_eq!(e.kind(), ErrorKind::Unreachable);
        assert_eq!(SessionError::Task(TaskError::Aborted).kind(), ErrorKind::Io);
    }
}
