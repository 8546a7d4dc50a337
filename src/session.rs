//! The session driver: one tokio task per connection that owns the sans-IO
//! protocol core ([`crate::proto::session::Session`]) and the receive half
//! of a [`Transport`], plus a small writer task that owns its send half
//! ([`FrameWriter::run`]). The driver is generic over the transport
//! (`Driver<T>`); [`SessionConfig::transport`] picks it.
//!
//! ```text
//!  callers ──Request──► driver task ──frames──► writer task ──writev──► socket
//!     ▲                   │  ▲ reads PDUs itself (PduReader)
//!     └──oneshot result───┘  └──────────────────────────────────────── socket
//! ```
//!
//! Reading in the driver task keeps the hot path (Data-In → core → caller)
//! free of channel hops; writing in its own task means a target that is
//! busy sending us Data-In can never deadlock against us while we push
//! Data-Out. The driver turns requests into core calls, hands whatever the
//! core wants sent to the writer in batches, arms the core's timer (NOP
//! keepalive) and delivers completions.
//!
//! Buffers belong to the core's task table until their completion arrives:
//! a caller that drops its future early leaves the command running
//! harmlessly; its result is discarded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, trace, warn};

use crate::proto::digest::DigestType;
use crate::proto::login::{ChapSettings, Login, LoginConfig, LoginError, LoginResult, LoginStep};
use crate::proto::negotiate::{
    parse_send_targets, DiscoveredTarget, InitiatorProposal, OperationalParams, SessionType,
    TargetAddress,
};
use crate::proto::pdu::{self, async_event, Digests, FrameLimits};
use crate::proto::session::{
    CommandRequest, CommandResult, Event, FeatureParams, ProtocolError, Session, TaskError, TaskId,
    TmfOutcome,
};
use crate::proto::text::{encode_text, parse_text};
use crate::transport::tcp::TcpTransport;
use crate::transport::{
    DataMovement, FrameWriter, PduReader, Transmit, Transport, TransportError, TransportKind,
};

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
}

enum Request {
    Command(
        CommandRequest,
        oneshot::Sender<Result<CommandResult, SessionError>>,
    ),
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
        let _ = self.tx.send(Request::Command(req, tx));
        PendingCommand { rx }
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

fn portal_string(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A connected transport that has completed login.
struct Connection<T: Transport> {
    portal: String,
    reader: T::Reader,
    wr: T::Writer,
    result: LoginResult,
}

/// Connect and log in with `isid`, following up to five redirections.
/// Reusing the ISID of a lost session (with TSIH 0) makes the target
/// reinstate it: the old session's tasks are cleaned up (RFC 7143 §6.3.5).
async fn establish<T: Transport>(
    cfg: &SessionConfig,
    isid: [u8; 6],
) -> Result<Connection<T>, SessionError> {
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
        let (mut reader, mut wr) = transport.split(FrameLimits::default());
        let outcome = tokio::time::timeout(
            cfg.login_timeout,
            run_login::<T>(cfg, isid, &mut reader, &mut wr, &portal),
        )
        .await
        .map_err(|_| SessionError::LoginTimeout {
            portal: portal.clone(),
            timeout: cfg.login_timeout,
        })??;
        match outcome {
            LoginStep::Complete(result) => {
                return Ok(Connection {
                    portal,
                    reader,
                    wr,
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
    portal: &str,
) -> Result<LoginStep, SessionError> {
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
        proposal: InitiatorProposal {
            // A transport that moves data itself needs iSER-assisted mode.
            rdma_extensions: T::DATA_MOVEMENT == DataMovement::Direct,
            ..cfg.proposal.clone()
        },
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
        let frame = T::Writer::encode(Transmit::from(pdu), Digests::default());
        wr.write_frames(std::slice::from_ref(&frame))
            .await
            .map_err(|e| transport_err(TransportError::Io(e)))?;
        let rsp = reader.read_pdu().await.map_err(transport_err)?;
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
    conn: &Connection<T>,
) -> SessionInfo {
    SessionInfo {
        portal: conn.portal.clone(),
        target_name: cfg.target_name.clone(),
        isid,
        tsih: conn.result.tsih,
        params: conn.result.params.clone(),
        target_alias: conn.result.target_alias.clone(),
        target_portal_group_tag: conn.result.target_portal_group_tag,
    }
}

fn start_driver<T: Transport>(
    cfg: SessionConfig,
    isid: [u8; 6],
    conn: Connection<T>,
) -> SessionHandle {
    let shared = Arc::new(Shared {
        info: std::sync::RwLock::new(session_info(&cfg, isid, &conn)),
        reconnects: AtomicU64::new(0),
        capacity_changes: AtomicU64::new(0),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let mut driver = Driver::<T> {
        cfg,
        isid,
        shared: shared.clone(),
        live: None,
        cmds: HashMap::new(),
        next_rid: 0,
        core_ids: HashMap::new(),
        others: HashMap::new(),
        tmfs: HashMap::new(),
        logout: None,
        logout_requested: false,
        target_logout: false,
        requests_open: true,
    };
    driver.go_live(conn);
    tokio::spawn(driver.run(rx));
    SessionHandle { tx, shared }
}

/// Waiters whose requests live only as long as one connection.
enum Waiter {
    Text(oneshot::Sender<Result<Bytes, SessionError>>),
    Ping(oneshot::Sender<Result<Duration, SessionError>>),
    Tmf(oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
}

/// A SCSI command the driver keeps until it has a final answer, so it can
/// be re-issued after an abort or on a new connection.
struct Cmd {
    req: CommandRequest,
    tx: oneshot::Sender<Result<CommandResult, SessionError>>,
    /// Task in the current connection's core, if submitted there.
    core_id: Option<TaskId>,
    deadline: Instant,
    /// Times this command was aborted because it timed out.
    timeouts: u32,
    aborting: bool,
}

/// Why the driver sent a task management request.
enum TmfPurpose {
    /// ABORT TASK for a timed-out command.
    Abort {
        rid: u64,
        lun: [u8; 8],
        sent: Instant,
    },
    /// LOGICAL UNIT RESET after an abort failed.
    Reset { sent: Instant },
}

/// The live part: transport and core of the current connection. The
/// receive half comes first so it drops before the core: a direct
/// transport revokes remote access to the tasks' buffers there, before the
/// core frees them (the send half lives on in the writer task until it
/// sees `frames` closed).
struct Live<T: Transport> {
    reader: T::Reader,
    /// To the writer task ([`FrameWriter::run`]), which owns `T::Writer`;
    /// dropping it ends that task.
    frames: mpsc::UnboundedSender<Vec<<T::Writer as FrameWriter>::Frame>>,
    write_error: oneshot::Receiver<std::io::Error>,
    digests: Digests,
    core: Session,
}

/// Timed-out commands are retried this many times before failing.
const MAX_TIMEOUT_RETRIES: u32 = 3;
/// Task management requests must answer within this long.
const TMF_TIMEOUT: Duration = Duration::from_secs(10);

struct Driver<T: Transport> {
    cfg: SessionConfig,
    isid: [u8; 6],
    shared: Arc<Shared>,
    live: Option<Live<T>>,
    cmds: HashMap<u64, Cmd>,
    next_rid: u64,
    core_ids: HashMap<TaskId, u64>,
    others: HashMap<TaskId, Waiter>,
    tmfs: HashMap<TaskId, TmfPurpose>,
    /// Logout asked for; sent once in-flight commands have drained.
    logout: Option<oneshot::Sender<Result<(), SessionError>>>,
    logout_requested: bool,
    /// The target asked for a logout: log out, then log in again.
    target_logout: bool,
    requests_open: bool,
}

enum End {
    /// Logged out or every handle gone: the driver stops.
    Done,
    /// The connection failed.
    Lost(SessionError),
}

impl<T: Transport> Driver<T> {
    fn go_live(&mut self, conn: Connection<T>) {
        let Connection {
            portal,
            mut reader,
            wr,
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
        let feature = FeatureParams {
            immediate_data: p.immediate_data,
            initial_r2t: p.initial_r2t,
            first_burst_length: p.first_burst_length,
            max_burst_length: p.max_burst_length,
            max_xmit_data_segment_length: p.xmit_data_segment_limit(),
            max_recv_data_segment_length: p.recv_data_segment_limit(),
            queue_depth: self.cfg.queue_depth.max(1),
            nop_interval: self.cfg.nop_interval,
            nop_timeout: self.cfg.nop_timeout,
            data_movement: T::DATA_MOVEMENT,
        };
        info!(
            %portal,
            target = self.cfg.target_name.as_deref().unwrap_or("(discovery)"),
            tsih = result.tsih,
            header_digest = digests.header,
            data_digest = digests.data,
            max_burst = p.max_burst_length,
            "logged in"
        );
        let info = SessionInfo {
            portal,
            target_name: self.cfg.target_name.clone(),
            isid: self.isid,
            tsih: result.tsih,
            params: result.params.clone(),
            target_alias: result.target_alias.clone(),
            target_portal_group_tag: result.target_portal_group_tag,
        };
        *self.shared.info.write().unwrap_or_else(|e| e.into_inner()) = info;
        let mut core = Session::new(feature, result.numbers);
        core.start(Instant::now());
        let (frames_tx, frames_rx) = mpsc::unbounded_channel();
        let (werr_tx, werr_rx) = oneshot::channel();
        tokio::spawn(wr.run(frames_rx, werr_tx));
        self.live = Some(Live {
            reader,
            frames: frames_tx,
            write_error: werr_rx,
            digests,
            core,
        });
        // Re-issue what the old connection left unfinished, oldest first.
        let mut rids: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.core_id.is_none())
            .map(|(r, _)| *r)
            .collect();
        rids.sort_unstable();
        if !rids.is_empty() {
            info!(commands = rids.len(), "re-issuing commands after reconnect");
        }
        for rid in rids {
            self.submit_cmd(rid);
        }
    }

    fn reconnect_enabled(&self) -> bool {
        self.cfg.target_name.is_some() && !self.cfg.replacement_timeout.is_zero()
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Request>) {
        loop {
            let end = self.run_live(&mut rx).await;
            let err = match end {
                End::Done => break,
                End::Lost(e) => e,
            };
            self.drop_connection(&err);
            let wanted = self.logout.is_some() || self.logout_requested;
            if !self.reconnect_enabled() || wanted && !self.target_logout {
                if !(self.logout_requested && self.cmds.is_empty()) {
                    warn!(error = %error_chain(&err), "session ended");
                }
                self.fail_all_cmds(|| clone_error(&err));
                break;
            }
            if !self.reconnect(&mut rx, err).await {
                break;
            }
        }
        // Whatever still waits gets a clean error; later requests find the
        // channel closed.
        self.fail_all_cmds(|| SessionError::Closed);
        if let Some(tx) = self.logout.take() {
            let _ = tx.send(Ok(()));
        }
        rx.close();
        while let Ok(req) = rx.try_recv() {
            drop(req);
        }
    }

    /// Serve the current connection until it ends.
    async fn run_live(&mut self, rx: &mut mpsc::UnboundedReceiver<Request>) -> End {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.flush().is_err() {
                return End::Lost(SessionError::ConnectionLost(Arc::new(
                    TransportError::Closed,
                )));
            }
            if let Some(end) = self.deliver() {
                return end;
            }
            let live = self.live.as_mut().expect("live connection");
            if self.logout.is_some() && !self.logout_requested && live.core.outstanding() == 0 {
                let id = live.core.logout();
                let tx = self.logout.take().expect("checked");
                self.others.insert(id, Waiter::Logout(tx));
                self.logout_requested = true;
                continue;
            }
            if self.logout_requested && !self.target_logout && self.others.is_empty() {
                return End::Done;
            }
            if !self.requests_open
                && self.cmds.is_empty()
                && self.others.is_empty()
                && self.logout.is_none()
                && !self.logout_requested
            {
                // Every handle dropped and nothing pending: log out politely.
                let (tx, _rx) = oneshot::channel();
                self.logout = Some(tx);
                continue;
            }
            let deadline = live.core.poll_timeout();
            let mut processed = false;
            tokio::select! {
                biased;
                pdu = live.reader.read_pdu() => {
                    processed = true;
                    let now = Instant::now();
                    let mut next = pdu.map(Some);
                    // Handle everything already buffered before re-entering select.
                    loop {
                        match next {
                            Ok(Some(pdu)) => {
                                trace!(opcode = %pdu.bhs.opcode(), data = pdu.data.len(), "received");
                                if let Err(e) = live.core.handle_pdu(pdu, now) {
                                    return End::Lost(SessionError::Protocol(e));
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                // The target closes the connection right after
                                // its Logout Response: that is the clean end.
                                if let Some(end) = self.deliver() {
                                    return end;
                                }
                                if self.logout_requested && !self.target_logout && self.others.is_empty() {
                                    return End::Done;
                                }
                                return End::Lost(SessionError::ConnectionLost(Arc::new(e)));
                            }
                        }
                        next = live.reader.try_next();
                    }
                }
                req = rx.recv(), if self.requests_open => match req {
                    Some(req) => {
                        self.request(req);
                        while let Ok(req) = rx.try_recv() {
                            self.request(req);
                        }
                    }
                    None => self.requests_open = false,
                },
                e = &mut live.write_error => {
                    let e = e.unwrap_or_else(|_| std::io::Error::other("writer stopped"));
                    return End::Lost(SessionError::ConnectionLost(Arc::new(TransportError::Io(e))));
                }
                _ = sleep_until(deadline) => {
                    match live.core.handle_timeout(Instant::now()) {
                        Ok(()) => {}
                        Err(ProtocolError::PingTimeout(d)) => return End::Lost(SessionError::NotResponding(d)),
                        Err(e) => return End::Lost(SessionError::Protocol(e)),
                    }
                }
                _ = tick.tick() => {
                    if let Some(end) = self.check_timeouts() {
                        return end;
                    }
                }
            }
            if processed {
                // Hand out completions and queue what the core wants sent,
                // then let the callers and the writer run before reading
                // more: on a one-thread runtime a target streaming Data-In
                // would otherwise keep this task busy and starve them,
                // collapsing the queue depth.
                if self.flush().is_err() {
                    return End::Lost(SessionError::ConnectionLost(Arc::new(
                        TransportError::Closed,
                    )));
                }
                if let Some(end) = self.deliver() {
                    return end;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    /// Abort commands past their deadline; escalate task management that
    /// does not answer: ABORT TASK → LOGICAL UNIT RESET → new connection.
    fn check_timeouts(&mut self) -> Option<End> {
        let now = Instant::now();
        let live = self.live.as_mut()?;
        let mut escalate = Vec::new();
        for (id, purpose) in &self.tmfs {
            match purpose {
                TmfPurpose::Abort { lun, sent, .. } if now >= *sent + TMF_TIMEOUT => {
                    escalate.push((*id, Some(*lun)));
                }
                TmfPurpose::Reset { sent } if now >= *sent + TMF_TIMEOUT => {
                    return Some(End::Lost(SessionError::TaskManagementTimeout(TMF_TIMEOUT)));
                }
                _ => {}
            }
        }
        for (id, lun) in escalate {
            self.tmfs.remove(&id);
            if let Some(lun) = lun {
                warn!("ABORT TASK unanswered; resetting the logical unit");
                let reset = live.core.lun_reset(lun);
                self.tmfs.insert(reset, TmfPurpose::Reset { sent: now });
            }
        }
        let mut timed_out: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.core_id.is_some() && !c.aborting && now >= c.deadline)
            .map(|(r, _)| *r)
            .collect();
        timed_out.sort_unstable();
        for rid in timed_out {
            let cmd = self.cmds.get_mut(&rid).expect("listed");
            cmd.aborting = true;
            cmd.timeouts += 1;
            warn!(
                opcode = cmd.req.cdb[0],
                timeout = ?self.cfg.command_timeout,
                "command timed out; aborting it"
            );
            let tmf = live.core.abort_task(cmd.core_id.expect("filtered"));
            self.tmfs.insert(
                tmf,
                TmfPurpose::Abort {
                    rid,
                    lun: cmd.req.lun,
                    sent: now,
                },
            );
        }
        None
    }

    fn submit_cmd(&mut self, rid: u64) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let cmd = self.cmds.get_mut(&rid).expect("known command");
        let id = live.core.submit(cmd.req.clone());
        cmd.core_id = Some(id);
        cmd.aborting = false;
        cmd.deadline = Instant::now() + self.cfg.command_timeout;
        self.core_ids.insert(id, rid);
    }

    fn new_cmd(
        &mut self,
        req: CommandRequest,
        tx: oneshot::Sender<Result<CommandResult, SessionError>>,
    ) -> u64 {
        let rid = self.next_rid;
        self.next_rid += 1;
        self.cmds.insert(
            rid,
            Cmd {
                req,
                tx,
                core_id: None,
                deadline: Instant::now() + self.cfg.command_timeout,
                timeouts: 0,
                aborting: false,
            },
        );
        rid
    }

    fn request(&mut self, req: Request) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        match req {
            Request::Command(c, tx) => {
                if self.logout.is_some() || self.logout_requested && !self.target_logout {
                    let _ = tx.send(Err(SessionError::Closed));
                    return;
                }
                let rid = self.new_cmd(c, tx);
                if !self.target_logout {
                    self.submit_cmd(rid);
                }
            }
            Request::Text(data, tx) => {
                let id = live.core.submit_text(data);
                self.others.insert(id, Waiter::Text(tx));
            }
            Request::Ping(tx) => {
                let id = live.core.ping(Instant::now());
                self.others.insert(id, Waiter::Ping(tx));
            }
            Request::LunReset(lun, tx) => {
                let id = live.core.lun_reset(lun);
                self.others.insert(id, Waiter::Tmf(tx));
            }
            Request::Logout(tx) => {
                if self.logout.is_none() && !self.logout_requested {
                    self.logout = Some(tx);
                } else {
                    let _ = tx.send(Ok(()));
                }
            }
        }
    }

    /// Hand everything the core wants sent to the writer task.
    fn flush(&mut self) -> Result<(), ()> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        let mut frames = Vec::new();
        while let Some(tx) = live.core.poll_transmit() {
            frames.push(T::Writer::encode(tx, live.digests));
        }
        if frames.is_empty() {
            return Ok(());
        }
        live.frames.send(frames).map_err(|_| ())
    }

    /// Hand completions to their callers; returns `Some` when an event ends
    /// the connection.
    fn deliver(&mut self) -> Option<End> {
        let mut end = None;
        loop {
            let Some(ev) = self.live.as_mut().and_then(|l| l.core.poll_event()) else {
                break;
            };
            match ev {
                Event::Command { id, result } => self.command_done(id, result),
                Event::Text { id, result } => {
                    if let Some(Waiter::Text(tx)) = self.others.remove(&id) {
                        let _ = tx.send(result.map_err(SessionError::Task));
                    }
                }
                Event::TaskMgmt { id, result } => {
                    if let Some(purpose) = self.tmfs.remove(&id) {
                        let ok = matches!(
                            result,
                            Ok(TmfOutcome::Complete) | Ok(TmfOutcome::TaskDoesNotExist)
                        );
                        match purpose {
                            TmfPurpose::Abort { lun, rid, .. } if !ok => {
                                warn!(?result, "ABORT TASK failed; resetting the logical unit");
                                if let Some(live) = self.live.as_mut() {
                                    let reset = live.core.lun_reset(lun);
                                    self.tmfs.insert(
                                        reset,
                                        TmfPurpose::Reset {
                                            sent: Instant::now(),
                                        },
                                    );
                                }
                                let _ = rid;
                            }
                            TmfPurpose::Reset { .. } if result != Ok(TmfOutcome::Complete) => {
                                end = Some(End::Lost(SessionError::Task(TaskError::Rejected(
                                    "LOGICAL UNIT RESET failed",
                                ))));
                            }
                            _ => debug!(?result, "task management done"),
                        }
                    } else if let Some(Waiter::Tmf(tx)) = self.others.remove(&id) {
                        let _ = tx.send(result.map_err(SessionError::Task));
                    }
                }
                Event::Pong { id, rtt } => {
                    debug!(?rtt, "NOP-In");
                    if let Some(Waiter::Ping(tx)) = self.others.remove(&id) {
                        let _ = tx.send(Ok(rtt));
                    }
                }
                Event::Logout { id, result } => {
                    if let Some(Waiter::Logout(tx)) = self.others.remove(&id) {
                        if let Ok(code) = result {
                            if code != 0 {
                                warn!(code, "target answered logout with an error code");
                            }
                        }
                        let _ = tx.send(result.map(|_| ()).map_err(SessionError::Task));
                    }
                    if self.target_logout {
                        end = Some(End::Lost(SessionError::LogoutRequested));
                    }
                }
                Event::Async {
                    event,
                    vcode,
                    parameters,
                    data,
                } => {
                    if let Some(e) = self.async_event(event, vcode, parameters, &data) {
                        end = Some(e);
                    }
                }
                Event::Reject { reason } => warn!(reason, "target rejected a PDU"),
            }
        }
        end
    }

    fn command_done(&mut self, id: TaskId, result: Result<CommandResult, TaskError>) {
        let Some(rid) = self.core_ids.remove(&id) else {
            return;
        };
        match result {
            Err(TaskError::Aborted) => {
                let cmd = self.cmds.get_mut(&rid).expect("known command");
                cmd.core_id = None;
                if cmd.timeouts > MAX_TIMEOUT_RETRIES {
                    let cmd = self.cmds.remove(&rid).expect("known");
                    let _ = cmd.tx.send(Err(SessionError::Task(TaskError::Aborted)));
                } else {
                    debug!(rid, "re-issuing aborted command");
                    self.submit_cmd(rid);
                }
            }
            other => {
                if let Some(cmd) = self.cmds.remove(&rid) {
                    let _ = cmd.tx.send(other.map_err(SessionError::Task));
                }
            }
        }
    }

    fn async_event(
        &mut self,
        event: u8,
        vcode: u8,
        parameters: [u16; 3],
        data: &[u8],
    ) -> Option<End> {
        match event {
            async_event::SCSI_ASYNC_EVENT => {
                // Sense data: SenseLength (2 bytes) then the sense bytes.
                let sense = crate::scsi::Sense::from_iscsi_data_segment(data)
                    .ok()
                    .flatten();
                if let Some(s) = &sense {
                    if s.asc == 0x2a && s.ascq == 0x09 {
                        info!("target reports a capacity change");
                        self.shared.capacity_changes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                info!(?sense, "SCSI asynchronous event");
                None
            }
            async_event::LOGOUT_REQUESTED => {
                warn!(
                    within_secs = parameters[2],
                    "target requests logout; logging out and in again"
                );
                if let Some(live) = self.live.as_mut() {
                    if !self.logout_requested {
                        self.target_logout = true;
                        self.logout_requested = true;
                        let id = live.core.logout();
                        let (tx, _rx) = oneshot::channel();
                        self.others.insert(id, Waiter::Logout(tx));
                    }
                }
                None
            }
            async_event::CONNECTION_DROP | async_event::SESSION_DROP => {
                warn!(
                    event,
                    time2wait = parameters[1],
                    "target is dropping the connection"
                );
                Some(End::Lost(SessionError::ConnectionLost(Arc::new(
                    TransportError::Closed,
                ))))
            }
            async_event::NEGOTIATION_REQUEST => {
                warn!("target requests renegotiation; reconnecting to renegotiate");
                Some(End::Lost(SessionError::LogoutRequested))
            }
            _ => {
                warn!(event, vcode, ?parameters, "asynchronous message");
                None
            }
        }
    }

    /// Forget the current connection: connection-scoped waiters fail, commands
    /// stay to be re-issued (or failed by the caller of this).
    fn drop_connection(&mut self, err: &SessionError) {
        self.live = None;
        self.core_ids.clear();
        self.tmfs.clear();
        for cmd in self.cmds.values_mut() {
            cmd.core_id = None;
            cmd.aborting = false;
        }
        let keep_logout = self.logout_requested && !self.target_logout;
        for (_, w) in self.others.drain() {
            let e = SessionError::Task(TaskError::ConnectionLost(error_chain(err)));
            match w {
                Waiter::Text(tx) => drop(tx.send(Err(e))),
                Waiter::Ping(tx) => drop(tx.send(Err(e))),
                Waiter::Tmf(tx) => drop(tx.send(Err(e))),
                Waiter::Logout(tx) => drop(tx.send(if keep_logout { Ok(()) } else { Err(e) })),
            }
        }
        self.logout_requested = false;
        self.target_logout = false;
    }

    fn fail_all_cmds(&mut self, err: impl Fn() -> SessionError) {
        let mut rids: Vec<u64> = self.cmds.keys().copied().collect();
        rids.sort_unstable();
        for rid in rids {
            if let Some(cmd) = self.cmds.remove(&rid) {
                let _ = cmd.tx.send(Err(err()));
            }
        }
    }

    /// Log in again with the same ISID until it works. Requests keep being
    /// accepted meanwhile; past the replacement timeout they fail at once.
    /// Returns false when there is nothing left to reconnect for.
    async fn reconnect(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Request>,
        cause: SessionError,
    ) -> bool {
        let started = Instant::now();
        let timeout = self.cfg.replacement_timeout;
        let time2wait = self
            .shared
            .info
            .read()
            .map(|i| i.params.default_time2wait)
            .unwrap_or(2);
        warn!(
            error = %error_chain(&cause),
            replacement_timeout = ?timeout,
            pending = self.cmds.len(),
            "connection lost; reconnecting"
        );
        let mut last = Arc::new(cause);
        let mut delay = Duration::from_secs(u64::from(time2wait.min(3600)));
        let mut gave_up = false;
        loop {
            let wake = Instant::now() + delay;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(wake.into()) => break,
                    req = rx.recv(), if self.requests_open => match req {
                        Some(req) => {
                            if !self.request_while_down(req, gave_up, &last) {
                                return false;
                            }
                        }
                        None => self.requests_open = false,
                    },
                }
                if !self.requests_open && self.cmds.is_empty() {
                    return false;
                }
            }
            let cfg = self.cfg.clone();
            let attempt = establish::<T>(&cfg, self.isid);
            tokio::pin!(attempt);
            let result = loop {
                tokio::select! {
                    r = &mut attempt => break r,
                    req = rx.recv(), if self.requests_open => match req {
                        Some(req) => {
                            if !self.request_while_down(req, gave_up, &last) {
                                return false;
                            }
                        }
                        None => self.requests_open = false,
                    },
                }
            };
            match result {
                Ok(conn) => {
                    self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                    info!(after = ?started.elapsed(), "session re-established");
                    self.go_live(conn);
                    return true;
                }
                Err(e) => {
                    debug!(error = %error_chain(&e), "reconnect attempt failed");
                    last = Arc::new(e);
                    if !gave_up && started.elapsed() >= timeout {
                        warn!(
                            error = %error_chain(&*last),
                            "target unreachable past the replacement timeout; failing I/O"
                        );
                        gave_up = true;
                        let last = last.clone();
                        self.fail_all_cmds(|| SessionError::ReplacementTimeout {
                            timeout,
                            last: last.clone(),
                        });
                    }
                    if !self.requests_open && self.cmds.is_empty() {
                        return false;
                    }
                    delay = Duration::from_secs(1)
                        .max(delay.min(Duration::from_secs(2)) * 2)
                        .min(Duration::from_secs(5));
                }
            }
        }
    }

    /// A request that arrives while there is no connection. Returns false
    /// when the caller asked to log out (stop reconnecting).
    fn request_while_down(
        &mut self,
        req: Request,
        gave_up: bool,
        last: &Arc<SessionError>,
    ) -> bool {
        let down = || SessionError::Task(TaskError::ConnectionLost("reconnecting".into()));
        match req {
            Request::Command(c, tx) => {
                if gave_up {
                    let _ = tx.send(Err(SessionError::ReplacementTimeout {
                        timeout: self.cfg.replacement_timeout,
                        last: last.clone(),
                    }));
                } else {
                    self.new_cmd(c, tx);
                }
            }
            Request::Text(_, tx) => drop(tx.send(Err(down()))),
            Request::Ping(tx) => drop(tx.send(Err(down()))),
            Request::LunReset(_, tx) => drop(tx.send(Err(down()))),
            Request::Logout(tx) => {
                // Nothing to log out of: stop reconnecting.
                self.fail_all_cmds(|| SessionError::Closed);
                let _ = tx.send(Ok(()));
                return false;
            }
        }
        true
    }
}

/// SessionError is not Clone (it holds sources); make an equivalent value
/// for each waiter.
fn clone_error(e: &SessionError) -> SessionError {
    SessionError::Task(TaskError::ConnectionLost(error_chain(e)))
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// "outer: inner: innermost", the way the CLI prints errors.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
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
pub use crate::proto::pdu::RESERVED_TAG as NO_TASK;

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<SessionHandle>();
    is_send::<pdu::Pdu>();
}
