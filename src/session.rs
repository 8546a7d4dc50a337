//! The session driver: one tokio task per connection that owns the sans-IO
//! protocol core ([`crate::proto::session::Session`]) and reads the socket,
//! plus a small writer task that owns the socket's write half.
//!
//! ```text
//!  callers ──Request──► driver task ──frames──► writer task ──writev──► socket
//!     ▲                   │  ▲ reads and frames PDUs itself
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use thiserror::Error;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::proto::digest::DigestType;
use crate::proto::login::{ChapSettings, Login, LoginConfig, LoginError, LoginResult, LoginStep};
use crate::proto::negotiate::{InitiatorProposal, OperationalParams, SessionType};
use crate::proto::pdu::{self, async_event, Digests, FrameLimits, WireFrame};
use crate::proto::session::{
    CommandRequest, CommandResult, Event, FeatureParams, ProtocolError, Session, TaskError, TaskId,
    TmfOutcome,
};
use crate::proto::text::{encode_text, parse_text};
use crate::transport::tcp::{self, FrameReader, TransportError};

/// How to reach and log in to a target (or a portal, for discovery).
#[derive(Debug, Clone)]
pub struct SessionConfig {
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
}

impl SessionConfig {
    pub fn new(host: impl Into<String>, port: u16, initiator_name: impl Into<String>) -> Self {
        SessionConfig {
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
            nop_timeout: Duration::from_secs(15),
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
}

impl SessionError {
    /// True when the network or target went away (as opposed to the target refusing).
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            SessionError::ConnectionLost(_)
                | SessionError::Closed
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
    Abort(TaskRef, oneshot::Sender<Result<TmfOutcome, SessionError>>),
    LunReset([u8; 8], oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
}

/// Refers to a command for ABORT TASK; obtained from [`SessionHandle::submit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRef(TaskId);

/// A cheap, cloneable handle to a running session.
#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::UnboundedSender<Request>,
    info: Arc<SessionInfo>,
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
        let mut host = cfg.host.clone();
        let mut port = cfg.port;
        for _ in 0..5 {
            let portal = portal_string(&host, port);
            let stream = tcp::connect(&host, port, cfg.connect_timeout)
                .await
                .map_err(|source| SessionError::Connect {
                    portal: portal.clone(),
                    source,
                })?;
            let (rd, mut wr) = stream.into_split();
            let mut reader = FrameReader::new(rd, FrameLimits::default());
            let outcome = tokio::time::timeout(
                cfg.login_timeout,
                run_login(&cfg, &mut reader, &mut wr, &portal),
            )
            .await
            .map_err(|_| SessionError::LoginTimeout {
                portal: portal.clone(),
                timeout: cfg.login_timeout,
            })??;
            match outcome {
                LoginStep::Complete(result) => {
                    return Ok(start_driver(cfg, portal, reader, wr, result));
                }
                LoginStep::Redirect { address, permanent } => {
                    info!(%portal, %address, permanent, "login redirected");
                    let (h, p) = parse_target_address(&address, port).ok_or_else(|| {
                        SessionError::BadDiscovery(format!("bad redirect address {address}"))
                    })?;
                    host = h;
                    port = p;
                }
                LoginStep::Send { .. } => unreachable!("run_login loops until done"),
            }
        }
        Err(SessionError::TooManyRedirects(portal_string(&host, port)))
    }

    pub fn info(&self) -> &SessionInfo {
        &self.info
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

    /// ABORT TASK.
    pub async fn abort(&self, task: TaskRef) -> Result<TmfOutcome, SessionError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Abort(task, tx))
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

/// Parse a TargetAddress value `host[:port][,tpgt]` (§13.8), IPv6 in brackets.
pub fn parse_target_address(value: &str, default_port: u16) -> Option<(String, u16)> {
    let addr = value.split(',').next()?.trim();
    if let Some(rest) = addr.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h.to_string(), p.parse().ok()?)),
        Some(_) => Some((addr.to_string(), default_port)),
        None if !addr.is_empty() => Some((addr.to_string(), default_port)),
        None => None,
    }
}

async fn run_login(
    cfg: &SessionConfig,
    reader: &mut FrameReader<OwnedReadHalf>,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
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
        isid: crate::proto::login::random_isid(),
        tsih: 0,
        cid: 0,
        cmd_sn: 1,
        chap: cfg.chap.clone(),
        proposal: cfg.proposal.clone(),
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
        let frame = pdu.encode(Digests::default());
        tcp::write_frames(wr, std::slice::from_ref(&frame))
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

fn start_driver(
    cfg: SessionConfig,
    portal: String,
    mut reader: FrameReader<OwnedReadHalf>,
    wr: tokio::net::tcp::OwnedWriteHalf,
    result: LoginResult,
) -> SessionHandle {
    let p = &result.params;
    let digests = Digests {
        header: p.header_digest == DigestType::Crc32c,
        data: p.data_digest == DigestType::Crc32c,
    };
    reader.set_limits(FrameLimits {
        digests,
        max_data_segment: p.max_recv_data_segment_length,
    });
    let feature = FeatureParams {
        immediate_data: p.immediate_data,
        initial_r2t: p.initial_r2t,
        first_burst_length: p.first_burst_length,
        max_burst_length: p.max_burst_length,
        max_xmit_data_segment_length: p.max_xmit_data_segment_length,
        max_recv_data_segment_length: p.max_recv_data_segment_length,
        queue_depth: cfg.queue_depth.max(1),
        nop_interval: cfg.nop_interval,
        nop_timeout: cfg.nop_timeout,
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
    let info = Arc::new(SessionInfo {
        portal,
        target_name: cfg.target_name.clone(),
        isid: result.isid,
        tsih: result.tsih,
        params: result.params.clone(),
        target_alias: result.target_alias.clone(),
        target_portal_group_tag: result.target_portal_group_tag,
    });
    let core = Session::new(feature, result.numbers);
    let (tx, rx) = mpsc::unbounded_channel();
    let (frames_tx, frames_rx) = mpsc::unbounded_channel();
    let (werr_tx, werr_rx) = oneshot::channel();
    tokio::spawn(write_loop(wr, frames_rx, werr_tx));
    tokio::spawn(
        Driver {
            core,
            reader,
            frames: frames_tx,
            digests,
            waiters: HashMap::new(),
            logout: None,
            logout_requested: false,
        }
        .run(rx, werr_rx),
    );
    SessionHandle { tx, info }
}

/// Owns the write half: writes batches of frames, merging what is queued.
async fn write_loop(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<WireFrame>>,
    err: oneshot::Sender<std::io::Error>,
) {
    let mut batch: Vec<WireFrame> = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.extend(first);
        while batch.len() < 4096 {
            match rx.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        if let Err(e) = tcp::write_frames(&mut wr, &batch).await {
            let _ = err.send(e);
            return;
        }
        batch.clear();
    }
    // The driver is gone: close our side so the target sees the end.
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut wr).await;
}

enum Waiter {
    Command(oneshot::Sender<Result<CommandResult, SessionError>>),
    Text(oneshot::Sender<Result<Bytes, SessionError>>),
    Ping(oneshot::Sender<Result<Duration, SessionError>>),
    Tmf(oneshot::Sender<Result<TmfOutcome, SessionError>>),
    Logout(oneshot::Sender<Result<(), SessionError>>),
}

struct Driver {
    core: Session,
    reader: FrameReader<OwnedReadHalf>,
    frames: mpsc::UnboundedSender<Vec<WireFrame>>,
    digests: Digests,
    waiters: HashMap<TaskId, Waiter>,
    /// Logout asked for; sent once in-flight work has drained.
    logout: Option<oneshot::Sender<Result<(), SessionError>>>,
    logout_requested: bool,
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Request>,
        mut write_error: oneshot::Receiver<std::io::Error>,
    ) {
        let now = Instant::now();
        self.core.start(now);
        let mut requests_open = true;
        let failure: SessionError = loop {
            if self.flush().is_err() {
                break SessionError::ConnectionLost(Arc::new(TransportError::Closed));
            }
            self.deliver();
            if self.logout.is_some() && !self.logout_requested && self.core.outstanding() == 0 {
                let id = self.core.logout();
                let tx = self.logout.take().expect("checked");
                self.waiters.insert(id, Waiter::Logout(tx));
                self.logout_requested = true;
                continue;
            }
            if self.logout_requested && self.waiters.is_empty() {
                // Logout answered: the target closes the connection.
                return;
            }
            if !requests_open && self.waiters.is_empty() && self.logout.is_none() {
                // Every handle dropped and nothing pending: log out politely.
                let (tx, _rx) = oneshot::channel();
                self.logout = Some(tx);
                continue;
            }
            let deadline = self.core.poll_timeout();
            tokio::select! {
                biased;
                pdu = self.reader.read_pdu() => {
                    let now = Instant::now();
                    let mut next = pdu.map(Some);
                    let mut failed = None;
                    // Handle everything already buffered before re-entering select.
                    loop {
                        match next {
                            Ok(Some(pdu)) => {
                                if let Err(e) = self.core.handle_pdu(pdu, now) {
                                    failed = Some(SessionError::Protocol(e));
                                    break;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                failed = Some(SessionError::ConnectionLost(Arc::new(e)));
                                break;
                            }
                        }
                        next = self.reader.try_next();
                    }
                    if let Some(f) = failed {
                        break f;
                    }
                }
                req = rx.recv(), if requests_open => match req {
                    Some(req) => {
                        self.request(req);
                        while let Ok(req) = rx.try_recv() {
                            self.request(req);
                        }
                    }
                    None => requests_open = false,
                },
                e = &mut write_error => {
                    let e = e.unwrap_or_else(|_| std::io::Error::other("writer stopped"));
                    break SessionError::ConnectionLost(Arc::new(TransportError::Io(e)));
                }
                _ = sleep_until(deadline) => {
                    if let Err(e) = self.core.handle_timeout(Instant::now()) {
                        break SessionError::Protocol(e);
                    }
                }
            }
        };
        // The target closes the connection right after its Logout Response,
        // possibly in the same batch of PDUs: that is the clean end.
        self.deliver();
        if self.logout_requested && self.waiters.is_empty() {
            debug!("connection closed after logout");
            return;
        }
        warn!(error = %error_chain(&failure), "session ended");
        self.core.fail_all(&error_chain(&failure));
        self.deliver();
        for (_, w) in self.waiters.drain() {
            drop(w);
        }
        // Requests that arrive after this point find the channel closed.
        rx.close();
        while let Ok(req) = rx.try_recv() {
            drop(req);
        }
    }

    fn request(&mut self, req: Request) {
        match req {
            Request::Command(c, tx) => {
                if self.logout.is_some() || self.logout_requested {
                    let _ = tx.send(Err(SessionError::Closed));
                    return;
                }
                let id = self.core.submit(c);
                self.waiters.insert(id, Waiter::Command(tx));
            }
            Request::Text(data, tx) => {
                let id = self.core.submit_text(data);
                self.waiters.insert(id, Waiter::Text(tx));
            }
            Request::Ping(tx) => {
                let id = self.core.ping(Instant::now());
                self.waiters.insert(id, Waiter::Ping(tx));
            }
            Request::Abort(TaskRef(t), tx) => {
                let id = self.core.abort_task(t);
                self.waiters.insert(id, Waiter::Tmf(tx));
            }
            Request::LunReset(lun, tx) => {
                let id = self.core.lun_reset(lun);
                self.waiters.insert(id, Waiter::Tmf(tx));
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
        let mut frames = Vec::new();
        while let Some(pdu) = self.core.poll_transmit() {
            frames.push(pdu.encode(self.digests));
        }
        if frames.is_empty() {
            return Ok(());
        }
        self.frames.send(frames).map_err(|_| ())
    }

    fn deliver(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                Event::Command { id, result } => {
                    if let Some(Waiter::Command(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result.map_err(SessionError::Task));
                    }
                }
                Event::Text { id, result } => {
                    if let Some(Waiter::Text(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result.map_err(SessionError::Task));
                    }
                }
                Event::TaskMgmt { id, result } => {
                    if let Some(Waiter::Tmf(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(result.map_err(SessionError::Task));
                    }
                }
                Event::Pong { id, rtt } => {
                    debug!(?rtt, "NOP-In");
                    if let Some(Waiter::Ping(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(Ok(rtt));
                    }
                }
                Event::Logout { id, result } => {
                    if let Some(Waiter::Logout(tx)) = self.waiters.remove(&id) {
                        let _ = tx.send(match result {
                            Ok(0) => Ok(()),
                            Ok(code) => {
                                warn!(code, "target answered logout with an error code");
                                Ok(())
                            }
                            Err(e) => Err(SessionError::Task(e)),
                        });
                    }
                }
                Event::Async {
                    event,
                    vcode,
                    parameters,
                    data,
                } => {
                    let what = match event {
                        async_event::SCSI_ASYNC_EVENT => "SCSI asynchronous event",
                        async_event::LOGOUT_REQUESTED => "target requests logout",
                        async_event::CONNECTION_DROP => "target will drop the connection",
                        async_event::SESSION_DROP => "target will drop the session",
                        async_event::NEGOTIATION_REQUEST => "target requests renegotiation",
                        async_event::TASK_TERMINATION => "target terminated tasks",
                        _ => "vendor-specific event",
                    };
                    warn!(
                        event,
                        vcode,
                        ?parameters,
                        data_len = data.len(),
                        "asynchronous message: {what}"
                    );
                }
                Event::Reject { reason } => warn!(reason, "target rejected a PDU"),
            }
        }
    }
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

/// A target found by a SendTargets discovery (§13.3, Appendix C).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredTarget {
    pub name: String,
    /// `host:port,tpgt` values as the target announced them.
    pub addresses: Vec<String>,
}

/// Log in to a portal with a discovery session, ask `SendTargets=All`, log out.
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
    parse_send_targets(&text)
}

/// Parse a SendTargets answer: each TargetName followed by its TargetAddress keys.
pub fn parse_send_targets(text: &[u8]) -> Result<Vec<DiscoveredTarget>, SessionError> {
    let keys = parse_text(text).map_err(|e| SessionError::BadDiscovery(e.to_string()))?;
    let mut out: Vec<DiscoveredTarget> = Vec::new();
    for (k, v) in keys {
        match k.as_str() {
            "TargetName" => out.push(DiscoveredTarget {
                name: v,
                addresses: Vec::new(),
            }),
            "TargetAddress" => match out.last_mut() {
                Some(t) => t.addresses.push(v),
                None => {
                    return Err(SessionError::BadDiscovery(
                        "TargetAddress before any TargetName".into(),
                    ))
                }
            },
            _ => debug!(key = %k, "ignoring key in SendTargets answer"),
        }
    }
    Ok(out)
}

/// Re-exported so users of the driver need not reach into `proto`.
pub use crate::proto::pdu::RESERVED_TAG as NO_TASK;

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
    fn target_address_forms_parse() {
        assert_eq!(
            parse_target_address("10.0.0.5:3261,1", 3260),
            Some(("10.0.0.5".into(), 3261))
        );
        assert_eq!(
            parse_target_address("[fe80::1]:3262,2", 3260),
            Some(("fe80::1".into(), 3262))
        );
        assert_eq!(
            parse_target_address("[::1]", 3260),
            Some(("::1".into(), 3260))
        );
        assert_eq!(
            parse_target_address("host.example", 3260),
            Some(("host.example".into(), 3260))
        );
        assert_eq!(parse_target_address("host:notaport", 3260), None);
    }

    #[test]
    fn send_targets_answer_groups_addresses_under_names() {
        let text = b"TargetName=iqn.a:1\0TargetAddress=127.0.0.1:3260,1\0TargetAddress=[::1]:3260,1\0TargetName=iqn.b:2\0TargetAddress=127.0.0.1:3260,1\0";
        let got = parse_send_targets(text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "iqn.a:1");
        assert_eq!(got[0].addresses, vec!["127.0.0.1:3260,1", "[::1]:3260,1"]);
        assert_eq!(got[1].addresses.len(), 1);
    }

    #[test]
    fn address_before_name_is_malformed() {
        assert!(parse_send_targets(b"TargetAddress=1.2.3.4:3260,1\0").is_err());
    }
}
