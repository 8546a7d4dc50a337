//! The driver task: the thin tokio loop around the recovery machine
//! ([`Recovery`]) that reads PDUs, hands what the core wants sent to the
//! writer task, sleeps until the machine's next deadline ([`Timer`]),
//! connects and logs in when the machine asks for it, and delivers the
//! machine's answers to their callers ([`Driver::deliver`]).
//!
//! This is the per-I/O hot path: one clock read per turn, up to
//! [`MAX_PDUS_PER_TURN`] PDUs (or [`MAX_PAYLOAD_PER_TURN`] bytes) handled
//! before completions go out in one wake-up per completion queue, frames
//! sent in one batch per turn, and then the other tasks let run
//! ([`YieldToPeers`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rlun_iscsi::error_chain;
use rlun_iscsi::proto::connection::{Connection, FeatureParams, TaskError, TmfOutcome};
use rlun_iscsi::proto::digest::DigestType;
use rlun_iscsi::proto::idmap::IdMap;
use rlun_iscsi::proto::pdu::{DataIn, Digests, FrameLimits};
use rlun_iscsi::proto::recovery::{
    Failure, Loss, Notice, Output, Recovery, RecoveryConfig, RequestId,
};
use rlun_iscsi::scsi::TargetChange;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, trace, warn};

use super::config::SessionConfig;
use super::error::SessionError;
use super::login::{establish, Established, SessionInfo};
use super::queue::{CmdWaiter, Completions, Inbox, Request};
use crate::clock;
use crate::stats;
use crate::transport::{
    Encoded, FrameEncoder, FrameWriter, Lent, PduReader, Placement, Received, Transport,
    TransportError,
};

/// State the driver shares with handles.
pub(super) struct Shared {
    pub(super) info: std::sync::RwLock<SessionInfo>,
    pub(super) reconnects: AtomicU64,
    /// A connection is in the full feature phase (false from a loss until
    /// the session is re-established).
    pub(super) up: AtomicBool,
    pub(super) capacity_changes: AtomicU64,
    pub(super) lun_changes: AtomicU64,
    /// Time without a logged-in connection (reconnecting).
    pub(super) outages: std::sync::Mutex<Outages>,
    /// Bumped after either count moved, for whoever follows the target.
    pub(super) changes: tokio::sync::watch::Sender<u64>,
    /// Bumped each time the connection is lost, for whoever must act at
    /// once (the multipath router).
    pub(super) losses: tokio::sync::watch::Sender<u64>,
    /// [`super::SessionHandle::submit`]'s commands on their way here.
    pub(super) inbox: Inbox,
}

/// The session's time without a connection, for `rlun stats`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Outages {
    /// When the connection was lost, while there is none.
    pub(super) since: Option<Instant>,
    /// The outages that ended, added up.
    pub(super) total: Duration,
    /// How long the last one that ended lasted.
    pub(super) last: Option<Duration>,
}

impl Outages {
    /// Time down so far: the ended outages and the current one.
    pub(super) fn down(&self, now: Instant) -> Duration {
        self.total
            + self
                .since
                .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }
}

impl Shared {
    fn outages(&self) -> std::sync::MutexGuard<'_, Outages> {
        self.outages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection was lost (the first loss of an outage counts).
    fn went_down(&self) {
        let mut o = self.outages();
        o.since.get_or_insert_with(Instant::now);
    }

    /// The session is logged in again.
    fn came_up(&self) {
        let mut o = self.outages();
        if let Some(t) = o.since.take() {
            let d = t.elapsed();
            o.total += d;
            o.last = Some(d);
        }
    }

    /// Count a change the target announced (asynchronous event or the
    /// sense of a command) and wake whoever follows them.
    pub(super) fn note_change(&self, change: TargetChange) {
        match change {
            TargetChange::Capacity => self.capacity_changes.fetch_add(1, Ordering::Relaxed),
            TargetChange::Luns | TargetChange::Inquiry => {
                self.lun_changes.fetch_add(1, Ordering::Relaxed)
            }
        };
        self.changes.send_modify(|n| *n += 1);
    }
}

/// Start the driver task on a logged-in connection; returns the channel
/// its requests go to and the state it shares with handles.
pub(super) fn start_driver<T: Transport>(
    cfg: SessionConfig,
    isid: [u8; 6],
    conn: Established<T>,
) -> (mpsc::UnboundedSender<Request>, Arc<Shared>) {
    let ffp = enter_full_feature_phase(&cfg, conn);
    let shared = Arc::new(Shared {
        info: std::sync::RwLock::new(ffp.info),
        reconnects: AtomicU64::new(0),
        up: AtomicBool::new(true),
        capacity_changes: AtomicU64::new(0),
        lun_changes: AtomicU64::new(0),
        outages: std::sync::Mutex::new(Outages::default()),
        changes: tokio::sync::watch::Sender::new(0),
        losses: tokio::sync::watch::Sender::new(0),
        inbox: Inbox::default(),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let policy = RecoveryConfig::new(
        cfg.command_timeout,
        cfg.replacement_timeout,
        cfg.target_name.is_some(),
    );
    let driver = Driver::<T> {
        cfg,
        isid,
        shared: shared.clone(),
        machine: Recovery::new(policy, ffp.core, ffp.time2wait, Instant::now()),
        live: Some(ffp.live),
        attempt: None,
        waiters: IdMap::default(),
        to_wake: Vec::new(),
        // Replaced by the cause of the first loss before anyone sees it.
        last: Arc::new(SessionError::Closed),
        requests_open: true,
        timer: Timer::new(),
        reconnecting: Vec::new(),
    };
    tokio::spawn(driver.run(rx));
    (tx, shared)
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
    /// How many frames the last batch had: the next batch's vector is
    /// allocated that large at once instead of growing (and copying its
    /// frames) four or five times on the way to a queue depth's worth.
    batch_hint: usize,
}

/// A connection attempt (connect and log in) under way.
type Attempt<T> = Pin<Box<dyn Future<Output = Result<Established<T>, SessionError>> + Send>>;

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
    /// Callers of [`super::SessionHandle::reconnect`] waiting for the
    /// outcome of the current connection attempt.
    reconnecting: Vec<oneshot::Sender<Result<(), SessionError>>>,
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
    /// A reconnect attempt logged in: the new connection replaces the lost
    /// one. Its facts become what handles see and the machine gets its
    /// core; when the machine no longer wanted a connection it retires the
    /// core at once, and the new connection's I/O is dropped before it.
    fn replace_connection(&mut self, conn: Established<T>) {
        let ffp = enter_full_feature_phase(&self.cfg, conn);
        *self.shared.info.write().unwrap_or_else(|e| e.into_inner()) = ffp.info;
        self.live = Some(ffp.live);
        self.machine
            .handle_connected(ffp.core, ffp.time2wait, Instant::now());
        if !self.machine.is_live() {
            self.live = None;
            drop(self.machine.take_retired());
        }
    }

    /// The task's body, one turn per loop: send and deliver what the
    /// machine has, then wait for the first of a PDU, a request, a write
    /// failure, a connection attempt's end or the timer; ends when the
    /// machine says the session is over.
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
                        Ok(conn) => self.replace_connection(conn),
                        Err(e) => {
                            debug!(error = %error_chain(&e), "reconnect attempt failed");
                            self.last = Arc::new(e);
                            self.machine.handle_connect_failed(now);
                        }
                    }
                    self.answer_reconnecting();
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
        self.reconnecting.clear();
        rx.close();
        while let Ok(req) = rx.try_recv() {
            drop(req);
        }
        // After the channel: a caller whose `Inbox` message found it
        // closed clears what it queued itself.
        self.shared.inbox.clear();
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
            Request::Inbox => {
                let mut batch = self.shared.inbox.take();
                for (c, tx) in batch.drain(..) {
                    self.machine.handle_command(c, CmdWaiter::One(tx), now);
                }
                self.shared.inbox.recycle(batch);
                return;
            }
            Request::Batch(queue, mut batch) => {
                for (c, ticket) in batch.drain(..) {
                    self.machine
                        .handle_command(c, CmdWaiter::Queue(ticket), now);
                }
                queue.recycle(batch);
                return;
            }
            Request::Text(data, tx) => (self.machine.handle_text(data, now), Waiter::Text(tx)),
            Request::Ping(tx) => (self.machine.handle_ping(now), Waiter::Ping(tx)),
            Request::LunReset(lun, tx) => {
                (self.machine.handle_lun_reset(lun, now), Waiter::Tmf(tx))
            }
            Request::Logout(tx) => (self.machine.handle_logout(), Waiter::Logout(tx)),
            Request::Abandon(reason) => {
                if self.machine.is_live() {
                    warn!(%reason, "giving the connection up");
                    self.last = Arc::new(SessionError::Abandoned(reason));
                    self.machine.handle_connection_lost(now);
                    self.live = None;
                }
                return;
            }
            Request::Release { lun, all, tx } => {
                let _ = tx.send(self.machine.handle_release(lun, all));
                return;
            }
            Request::Reconnect(tx) => {
                if self.machine.handle_reconnect_now() {
                    self.reconnecting.push(tx);
                } else if self.machine.is_live() {
                    let _ = tx.send(Ok(()));
                } else {
                    let _ = tx.send(Err(SessionError::Closed));
                }
                return;
            }
        };
        self.waiters.insert(id, waiter);
    }

    /// A connection attempt ended: tell those waiting for it whether the
    /// session is live now, or the attempt's own error.
    fn answer_reconnecting(&mut self) {
        for tx in self.reconnecting.drain(..) {
            let _ = tx.send(if self.machine.is_live() {
                Ok(())
            } else if self.machine.is_finished() {
                Err(SessionError::Closed)
            } else {
                Err(SessionError::StillUnreachable(self.last.clone()))
            });
        }
    }

    /// Hand everything the core wants sent to the writer task.
    fn flush(&mut self) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        // Allocated at the first frame: most turns that only receive send
        // nothing, and must not pay for an empty batch.
        let mut frames = Vec::new();
        while let Some(tx) = self.machine.poll_transmit() {
            if frames.capacity() == 0 {
                frames.reserve_exact(live.batch_hint);
            }
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
        live.batch_hint = frames.len().clamp(4, 256);
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
                    self.shared.up.store(false, Ordering::Relaxed);
                    self.shared.went_down();
                    self.shared.losses.send_modify(|n| *n += 1);
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
                    self.shared.up.store(true, Ordering::Relaxed);
                    self.shared.came_up();
                    info!(?after, "session re-established");
                    if reissued > 0 {
                        info!(commands = reissued, "re-issuing commands after reconnect");
                    }
                }
                Output::TargetChanged(change) => {
                    info!(?change, "the target announces a change");
                    self.shared.note_change(change);
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
            Failure::Released => SessionError::Released(self.last.clone()),
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
            // One path of several: its commands go on through another.
            Notice::GaveUp { failed } if self.cfg.one_of_several_paths => info!(
                error = %error_chain(&*self.last),
                failed,
                "path unreachable past the path timeout; its commands move to another path"
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

/// A logged-in connection, taken into use by the driver
/// ([`enter_full_feature_phase`]).
struct FullFeature<T: Transport> {
    /// Its I/O: the receive half, and the channel to its writer task.
    live: Live<T>,
    /// Its protocol core, set up with the negotiated parameters.
    core: Connection,
    /// The negotiated DefaultTime2Wait: how long to wait before
    /// reconnecting once it is lost.
    time2wait: Duration,
    /// What handles see of the session while it lasts.
    info: SessionInfo,
}

/// Take a logged-in connection into its full feature phase: the reader's
/// limits and the encoder's digests from the negotiated parameters, its
/// writer task started, its protocol core built, and the facts handles
/// see. The one place a connection's [`SessionInfo`] is made, for the
/// first connection ([`start_driver`]) and every reconnect
/// ([`Driver::replace_connection`]).
fn enter_full_feature_phase<T: Transport>(
    cfg: &SessionConfig,
    conn: Established<T>,
) -> FullFeature<T> {
    let info = conn.info(cfg);
    let Established {
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
        auth = ?result.auth_method,
        chap_offered = cfg.chap.is_some(),
        header_digest = digests.header,
        data_digest = digests.data,
        max_burst = p.max_burst_length,
        "logged in"
    );
    let time2wait = Duration::from_secs(u64::from(p.default_time2wait.min(3600)));
    let core = Connection::new(feature, result.numbers);
    let (frames_tx, frames_rx) = mpsc::unbounded_channel();
    let (werr_tx, werr_rx) = oneshot::channel();
    tokio::spawn(wr.run(frames_rx, werr_tx));
    let live = Live {
        reader,
        frames: frames_tx,
        write_error: werr_rx,
        encoder,
        batch_hint: 4,
    };
    FullFeature {
        live,
        core,
        time2wait,
        info,
    }
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
) -> Result<Established<T>, SessionError> {
    match attempt {
        Some(a) => a.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rlun_iscsi::proto::connection::SequenceNumbers;
    use rlun_iscsi::proto::login::LoginResult;
    use rlun_iscsi::proto::negotiate::OperationalParams;

    use super::*;
    use crate::transport::{DataMovement, Transmit};

    /// What the driver did to a [`Fake`] connection's halves.
    #[derive(Default)]
    struct Seen {
        limits: Option<FrameLimits>,
        digests: Option<Digests>,
        shut_down: bool,
    }

    /// A transport that carries nothing and records how the driver sets
    /// its halves up.
    struct Fake(Arc<Mutex<Seen>>);
    struct FakeReader(Arc<Mutex<Seen>>);
    struct FakeWriter(Arc<Mutex<Seen>>);
    struct FakeEncoder(Arc<Mutex<Seen>>);

    impl Transport for Fake {
        const DATA_MOVEMENT: DataMovement = DataMovement::InBand;
        const MAX_TRANSFER: Option<u64> = Some(1 << 20);
        type Reader = FakeReader;
        type Writer = FakeWriter;
        type Encoder = FakeEncoder;

        async fn connect(_: &str, _: u16, _: Duration) -> Result<Self, TransportError> {
            Err(TransportError::Closed)
        }

        fn split(self, limits: FrameLimits) -> (FakeReader, FakeWriter, FakeEncoder) {
            self.0.lock().unwrap().limits = Some(limits);
            (
                FakeReader(self.0.clone()),
                FakeWriter(self.0.clone()),
                FakeEncoder(self.0),
            )
        }
    }

    impl PduReader for FakeReader {
        fn set_limits(&mut self, limits: FrameLimits) {
            self.0.lock().unwrap().limits = Some(limits);
        }

        async fn read_pdu(
            &mut self,
            _: &mut (dyn Placement + Send),
        ) -> Result<Received, TransportError> {
            std::future::pending().await
        }

        fn try_next(
            &mut self,
            _: &mut (dyn Placement + Send),
        ) -> Result<Option<Received>, TransportError> {
            Ok(None)
        }
    }

    impl FrameWriter for FakeWriter {
        type Frame = ();

        async fn write_frames(&mut self, _: &[()]) -> std::io::Result<()> {
            Ok(())
        }

        async fn shutdown(&mut self) {
            self.0.lock().unwrap().shut_down = true;
        }
    }

    impl FrameEncoder for FakeEncoder {
        type Frame = ();

        fn set_digests(&mut self, digests: Digests) {
            self.0.lock().unwrap().digests = Some(digests);
        }

        fn encode(&mut self, _: Transmit) -> Result<Encoded<()>, TransportError> {
            Ok(Encoded {
                frame: (),
                hold: None,
            })
        }
    }

    #[tokio::test]
    async fn a_logged_in_connection_enters_its_full_feature_phase_with_what_login_negotiated() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (reader, wr, encoder) = Fake(seen.clone()).split(FrameLimits::default());
        let params = OperationalParams {
            header_digest: DigestType::Crc32c,
            max_recv_data_segment_length: 65536,
            default_time2wait: 7,
            ..OperationalParams::default()
        };
        let conn = Established::<Fake> {
            portal: "192.0.2.1:3260".into(),
            reader,
            wr,
            encoder,
            result: LoginResult {
                tsih: 0x1234,
                isid: [0x80, 1, 2, 3, 4, 5],
                params: params.clone(),
                numbers: SequenceNumbers {
                    cmd_sn: 1,
                    exp_cmd_sn: 1,
                    max_cmd_sn: 32,
                    exp_stat_sn: 1,
                },
                target_alias: Some("store".into()),
                target_portal_group_tag: Some(1),
                auth_method: rlun_iscsi::proto::chap::AuthMethod::None,
            },
        };
        let mut cfg = SessionConfig::new("192.0.2.1", 3260, "iqn.2026-12.org.example:host");
        cfg.target_name = Some("iqn.2026-12.org.example:store".into());

        let ffp = enter_full_feature_phase(&cfg, conn);

        let digests = Digests {
            header: true,
            data: false,
        };
        {
            let seen = seen.lock().unwrap();
            let limits = FrameLimits {
                digests,
                max_data_segment: 65536,
            };
            assert_eq!(seen.limits, Some(limits), "the reader's limits");
            assert_eq!(seen.digests, Some(digests), "the encoder's digests");
        }
        assert_eq!(ffp.time2wait, Duration::from_secs(7));
        let info = &ffp.info;
        assert_eq!(info.portal, "192.0.2.1:3260");
        assert_eq!(info.target_name, cfg.target_name);
        assert_eq!(info.isid, [0x80, 1, 2, 3, 4, 5]);
        assert_eq!(info.tsih, 0x1234);
        assert_eq!(info.params, params);
        assert_eq!(info.target_alias.as_deref(), Some("store"));
        assert_eq!(info.target_portal_group_tag, Some(1));
        assert_eq!(info.max_transfer, Some(1 << 20));

        // The writer task lives until the connection's I/O is dropped,
        // then closes its half.
        assert!(!seen.lock().unwrap().shut_down);
        drop(ffp.live);
        tokio::time::timeout(Duration::from_secs(5), async {
            while !seen.lock().unwrap().shut_down {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the writer task shuts its half down");
    }

    #[tokio::test]
    async fn the_timer_moves_only_to_an_earlier_deadline_and_disarms_when_it_fires() {
        let mut timer = Timer::new();
        let now = Instant::now();
        timer.arm(None);
        assert_eq!(timer.armed, None);

        timer.arm(Some(now + Duration::from_secs(10)));
        timer.arm(Some(now + Duration::from_secs(20)));
        assert_eq!(timer.armed, Some(now + Duration::from_secs(10)), "later");
        timer.arm(None);
        assert_eq!(timer.armed, Some(now + Duration::from_secs(10)), "none");
        timer.arm(Some(now + Duration::from_millis(1)));
        assert_eq!(timer.armed, Some(now + Duration::from_millis(1)), "earlier");

        tokio::time::timeout(Duration::from_secs(5), timer.fired())
            .await
            .expect("the timer fires at its deadline");
        assert_eq!(timer.armed, None);
    }
}
