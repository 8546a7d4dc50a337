//! Multipath: one target reached through several portals, one session
//! (I_T nexus) per portal, combined so that the layers above never see a
//! path fail while another one works.
//!
//! - [`Route`] is what the client sends a command through: one session
//!   (the usual case, and then nothing here runs on the I/O path) or a
//!   [`Router`] over several.
//! - [`PathSet`] holds the sessions of a target, one per portal. A portal
//!   that cannot be logged in to at start is tried again every check
//!   interval and joins when it answers.
//! - [`Router`] is one LUN's view of them: a [`select::Selector`] (the
//!   policy, sans-IO) and the ALUA state of each path. A command goes to
//!   the path the selector picks; when it fails for a path reason (no
//!   answer: the connection lost past the path timeout, a command timeout,
//!   a transport error) or the target answers with ALUA sense (standby,
//!   unavailable, transitioning), the path is marked and the command is
//!   sent again on another path. Only when no path is usable does it wait,
//!   for at most the replacement timeout.
//! - The checker (one task per router) sends TEST UNIT READY through every
//!   path every check interval, reads the target port groups (REPORT
//!   TARGET PORT GROUPS) when the LUN has ALUA, and brings paths back.
//!
//! # A command caught on a path that failed
//!
//! A command is never outstanding on two paths: it moves to another path
//! only after the session of the first gave it up. When a path fails
//! (its connection lost, reset, or given up because the check found it
//! unanswering), its session keeps the commands of the lost connection
//! for its next one, and the router at once asks for them back:
//!
//! - Reads (anything that changes nothing, `cdb::changes_nothing`) move
//!   to another path at once: a copy still on its way on the failed
//!   path can only be answered into a connection that no longer exists.
//! - Writes with `--path-fence lun-reset` (opt-in) move once a
//!   LOGICAL UNIT RESET sent through another path has completed. The
//!   failed connection was closed with a TCP reset first, so nothing
//!   rlun had queued on it is delivered later; the LUN reset ends every
//!   task of the LUN the target still holds, from every I_T nexus (SAM-5
//!   §7.11), including a write of the failed path that the target had
//!   wholly received and still held in its back end. After the reset
//!   answered, no copy of the write is left to land after its retry.
//!   Commands of other hosts on the LUN are aborted by the reset too, and
//!   a target without TAS (tgtd) ends them without an answer: those
//!   hosts wait for their own command timeouts (libiscsi's iscsi-perf,
//!   which has none, waited for ever in our test). That is why it is not
//!   the default.
//!   With three or more paths the reset is sent only while no third path
//!   carries (or, under round-robin and queue-length, may be given) this
//!   LUN's commands: it would abort them there too.
//! - Writes with `--path-fence path-timeout` (the default), or when no other path can
//!   carry the reset or it fails, wait for the path timeout
//!   (`--path-timeout`, the session's replacement timeout). If the path
//!   logs in again within it, its session resends them itself after a
//!   session reinstatement (same ISID, RFC 7143 §6.3.5), by which the
//!   target has ended every task of the old connection first; past it
//!   they move on. This is what dm-multipath over open-iscsi does
//!   (replacement_timeout, then the request is requeued on another path),
//!   and it leaves a window: a write the target had fully received on the
//!   failed path and still holds in its back end after the path timeout
//!   could land after its retry. Its bound is the target's own command
//!   processing time.
//!
//! Either way a write still held in the network itself (a link that
//! delays rather than drops, for longer than detection takes) is beyond
//! any initiator's reach; dm-multipath has the same exposure.

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rlun_iscsi::proto::connection::{CommandRequest, CommandResult};
use rlun_iscsi::proto::negotiate::TargetAddress;
use rlun_iscsi::scsi::alua::{AluaSense, AluaState, PortIdentity};
use rlun_iscsi::scsi::{ScsiError, Status};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use rlun_iscsi::proto::connection::TmfOutcome;
use rlun_iscsi::proto::recovery::TMF_TIMEOUT;

use crate::config::settings::PathFence;
use crate::session::{portal_string, MultipathConfig, SessionConfig, SessionError, SessionHandle};
use crate::transport::TransportKind;

mod checker;
mod report;
pub mod select;

pub use report::{PathReport, PathsReport};

pub use select::{Failback, PathState, Policy, Selector, Switch};

/// Where a command goes: one session, or a router over several.
#[derive(Clone)]
pub enum Route {
    One(SessionHandle),
    Many(Arc<Router>),
}

impl Route {
    /// The session the target's announcements (capacity, LUN inventory)
    /// are counted on, and whose facts `rlun list` shows: the only one, or
    /// the first path that logged in.
    pub fn primary(&self) -> &SessionHandle {
        match self {
            Route::One(s) => s,
            Route::Many(r) => r.set.primary(),
        }
    }

    /// Send one command and wait for its answer (through whichever path).
    pub async fn command(&self, req: CommandRequest) -> Result<CommandResult, SessionError> {
        match self {
            Route::One(s) => s.command(req).await,
            // Boxed: the router's future (its retries, its fence) is about
            // 850 bytes, and every future that awaits a command (a READ
            // through the device, the export, a front end's request) would
            // otherwise carry that much for one path too. A front end boxes
            // its request's future, and past 1 KiB that costs a slower
            // allocation and a longer copy per I/O.
            Route::Many(r) => Box::pin(r.command(req)).await,
        }
    }

    /// The most one command may move: the session's, or with several
    /// paths the least any of them carries (a command may go on any).
    pub fn max_transfer(&self) -> Option<u64> {
        match self {
            Route::One(s) => s.info().max_transfer,
            Route::Many(r) => r
                .set
                .paths
                .iter()
                .filter_map(|p| p.transport.max_transfer())
                .min(),
        }
    }

    /// The router, when there are several paths.
    pub fn router(&self) -> Option<&Arc<Router>> {
        match self {
            Route::One(_) => None,
            Route::Many(r) => Some(r),
        }
    }

    /// A route for LUN `lun` (8-byte LUN field) of the same target: the
    /// same session, or a router of its own over the same paths (ALUA
    /// states are a logical unit's).
    pub fn for_lun(&self, lun: [u8; 8]) -> Route {
        match self {
            Route::One(s) => Route::One(s.clone()),
            Route::Many(r) => Route::Many(Router::new(r.set.clone(), lun)),
        }
    }

    /// Try every lost path's login now; `Ok` when some path is up.
    pub async fn reconnect(&self) -> Result<(), SessionError> {
        match self {
            Route::One(s) => s.reconnect().await,
            Route::Many(r) => {
                let mut last = None;
                let mut any = false;
                for s in r.set.sessions() {
                    match s.reconnect().await {
                        Ok(()) => any = true,
                        Err(e) => last = Some(e),
                    }
                }
                match (any, last) {
                    (true, _) => Ok(()),
                    (false, Some(e)) => Err(e),
                    (false, None) => Err(SessionError::Closed),
                }
            }
        }
    }

    /// Log out of every path.
    pub async fn logout(&self) -> Result<(), SessionError> {
        match self {
            Route::One(s) => s.logout().await,
            Route::Many(r) => {
                let mut result = Ok(());
                for s in r.set.sessions() {
                    if let Err(e) = s.logout().await {
                        result = Err(e);
                    }
                }
                result
            }
        }
    }
}

/// One portal of the target and its session, once logged in.
pub struct Path {
    pub portal: String,
    pub transport: TransportKind,
    cfg: SessionConfig,
    session: OnceLock<SessionHandle>,
}

impl Path {
    pub fn session(&self) -> Option<&SessionHandle> {
        self.session.get()
    }
}

/// The sessions of one target, one per portal.
pub struct PathSet {
    paths: Vec<Path>,
    config: MultipathConfig,
    /// How long a command waits while no path is usable.
    replacement_timeout: Duration,
    primary: usize,
}

impl PathSet {
    /// Log in through the URL's portal of `cfg` and each of
    /// `cfg.multipath`'s, all at once. Fails only when no path logs in
    /// (with the first portal's error); the others are tried again every
    /// check interval.
    pub async fn login(cfg: SessionConfig) -> Result<Arc<PathSet>, SessionError> {
        let config = cfg
            .multipath
            .clone()
            .expect("PathSet::login is for a multipath configuration");
        let mut portals: Vec<(TransportKind, String, u16)> =
            std::iter::once((cfg.transport, cfg.host.clone(), cfg.port))
                .chain(config.portals.iter().cloned())
                .collect();
        if config.discover {
            match crate::session::discover(cfg.clone()).await {
                Ok(targets) => {
                    let name = cfg.target_name.as_deref().unwrap_or_default();
                    let found = targets
                        .iter()
                        .filter(|t| t.name == name)
                        .flat_map(|t| t.addresses.iter());
                    let added = add_discovered(&mut portals, found, cfg.transport);
                    info!(
                        added,
                        "discovery through {} reports {} portal(s) of the target",
                        portal_string(&cfg.host, cfg.port),
                        portals.len()
                    );
                }
                Err(e) => warn!(
                    error = %rlun_iscsi::error_chain(&e),
                    "--multipath auto: discovery failed; using the portals given"
                ),
            }
        }
        let portals = portals.into_iter();
        let paths: Vec<Path> = portals
            .map(|(transport, host, port)| Path {
                portal: portal_string(&host, port),
                transport,
                cfg: SessionConfig {
                    transport,
                    host,
                    port,
                    replacement_timeout: config.path_timeout,
                    multipath: None,
                    one_of_several_paths: true,
                    ..cfg.clone()
                },
                session: OnceLock::new(),
            })
            .collect();
        let logins: Vec<_> = paths
            .iter()
            .map(|p| tokio::spawn(SessionHandle::connect(p.cfg.clone())))
            .collect();
        let mut unreachable = Vec::new();
        let mut primary = None;
        for (i, login) in logins.into_iter().enumerate() {
            let result = login.await.unwrap_or(Err(SessionError::Closed));
            match result {
                Ok(s) => {
                    let _ = paths[i].session.set(s);
                    primary.get_or_insert(i);
                }
                // A portal that refuses the login (credentials, no such
                // target there) is a mistake in the paths given, not an
                // outage to wait out: say so now.
                Err(e) if e.kind() != rlun_iscsi::ErrorKind::Unreachable => {
                    return Err(SessionError::PathRefused {
                        portal: paths[i].portal.clone(),
                        source: Arc::new(e),
                    });
                }
                Err(e) => unreachable.push((i, e)),
            }
        }
        let Some(primary) = primary else {
            // Nothing to wait out the others with: one error names them all.
            let portals = unreachable.iter().map(|(i, _)| paths[*i].portal.clone());
            let portals = portals.collect();
            return Err(match unreachable.into_iter().next() {
                Some((_, first)) => SessionError::NoPortalAnswered {
                    portals,
                    first: Arc::new(first),
                },
                None => SessionError::Closed,
            });
        };
        for (i, e) in &unreachable {
            warn!(
                portal = %paths[*i].portal,
                error = %rlun_iscsi::error_chain(e),
                "path not logged in; trying again every {:?}",
                config.check_interval
            );
        }
        let set = Arc::new(PathSet {
            paths,
            replacement_timeout: cfg.replacement_timeout,
            config,
            primary,
        });
        if set.paths.iter().any(|p| p.session().is_none()) {
            tokio::spawn(join_late(Arc::downgrade(&set)));
        }
        info!(
            paths = set.paths.len(),
            up = set.sessions().count(),
            policy = set.config.policy.name(),
            fence = set.config.fence.name(),
            "multipath: logged in through every portal that answered"
        );
        Ok(set)
    }

    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    pub fn config(&self) -> &MultipathConfig {
        &self.config
    }

    /// The index of the primary path ([`Route::primary`]).
    pub fn primary_index(&self) -> usize {
        self.primary
    }

    fn primary(&self) -> &SessionHandle {
        self.paths[self.primary]
            .session()
            .expect("the primary path is logged in")
    }

    /// The sessions logged in so far.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionHandle> {
        self.paths.iter().filter_map(Path::session)
    }
}

/// Add the portals of `found` (SendTargets addresses) that `portals`
/// does not have yet, over `transport`; how many were added.
fn add_discovered<'a>(
    portals: &mut Vec<(TransportKind, String, u16)>,
    found: impl Iterator<Item = &'a TargetAddress>,
    transport: TransportKind,
) -> usize {
    let mut added = 0;
    for a in found {
        let p = (transport, a.host.clone(), a.port_or_default());
        if !portals.contains(&p) {
            portals.push(p);
            added += 1;
        }
    }
    added
}

/// Log in the paths that did not at start, every check interval, until
/// all have or the set is gone.
async fn join_late(set: Weak<PathSet>) {
    loop {
        let Some(s) = set.upgrade() else { return };
        let interval = s.config.check_interval;
        drop(s);
        tokio::time::sleep(interval).await;
        let Some(s) = set.upgrade() else { return };
        let mut missing = false;
        for p in s.paths.iter().filter(|p| p.session().is_none()) {
            match SessionHandle::connect(p.cfg.clone()).await {
                Ok(session) => {
                    info!(portal = %p.portal, "path logged in; it joins at the next check");
                    let _ = p.session.set(session);
                }
                Err(e) => {
                    debug!(portal = %p.portal, error = %e, "path still not logged in");
                    missing = true;
                }
            }
        }
        if !missing {
            return;
        }
    }
}

/// Whether two reads of the identification pages (0x80, 0x83) name the
/// same logical unit: given by the client, which knows what an identity
/// is.
pub type SameUnit = Box<dyn Fn(Option<&[u8]>, Option<&[u8]>) -> bool + Send + Sync>;

/// One LUN's paths (see the module docs).
pub struct Router {
    /// This router, for the tasks it starts on a path failure.
    me: Weak<Router>,
    set: Arc<PathSet>,
    lun: [u8; 8],
    sel: Mutex<Selector>,
    /// Woken when a path comes back or changes state.
    changed: Notify,
    /// Asks the checker to look now (ALUA sense seen).
    look: Arc<Notify>,
    /// Each path's target port, as page 0x83 through it says.
    ports: Mutex<Vec<Option<PortIdentity>>>,
    /// Paths that reach another logical unit: never used.
    refused: Mutex<Vec<bool>>,
    same_unit: OnceLock<SameUnit>,
    alua: OnceLock<bool>,
    /// A command is trying a transitioning path.
    probing: AtomicBool,
}

/// The least time TEST UNIT READY gets before a path counts as failed
/// (else the check interval): a host that stalls for a second (a busy
/// VM) must not fail a healthy path.
const MIN_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Sleep between looks while no path is usable.
const TRANSITION_PAUSE: Duration = Duration::from_millis(200);

/// Sleep between tries through a transitioning path while no path is
/// usable (Linux retries such a command after a few milliseconds).
const PROBE_PAUSE: Duration = Duration::from_millis(20);

impl Router {
    /// A router for LUN `lun` over `set`: paths logged in now are up.
    pub fn new(set: Arc<PathSet>, lun: [u8; 8]) -> Arc<Router> {
        let n = set.paths.len();
        let c = &set.config;
        let mut sel = Selector::new(n, c.policy, c.failback);
        let now = Instant::now();
        for (i, p) in set.paths.iter().enumerate() {
            sel.set_up(i, p.session().is_some_and(|s| s.is_up()), now);
        }
        Arc::new_cyclic(|me| Router {
            me: me.clone(),
            set,
            lun,
            sel: Mutex::new(sel),
            changed: Notify::new(),
            look: Arc::new(Notify::new()),
            ports: Mutex::new(vec![None; n]),
            refused: Mutex::new(vec![false; n]),
            same_unit: OnceLock::new(),
            alua: OnceLock::new(),
            probing: AtomicBool::new(false),
        })
    }

    pub fn set(&self) -> &Arc<PathSet> {
        &self.set
    }

    fn sel(&self) -> std::sync::MutexGuard<'_, Selector> {
        self.sel.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the selector knows now, for `rlun list` and the stats.
    pub fn snapshot(&self) -> (Vec<PathState>, Option<usize>, u64, Option<Instant>) {
        let s = self.sel();
        (
            s.paths().to_vec(),
            s.current(),
            s.failovers,
            s.last_failover,
        )
    }

    /// Log a change of the failover policy's path.
    fn log_switch(&self, switch: Option<Switch>, why: &str) {
        let Some(Switch { from, to }) = switch else {
            return;
        };
        let name =
            |i: Option<usize>| i.map_or("none".to_string(), |i| self.set.paths[i].portal.clone());
        match to {
            Some(_) => {
                info!(from = %name(from), to = %name(to), "I/O moves to another path: {why}")
            }
            None => warn!(from = %name(from), "no usable path left: {why}"),
        }
    }

    /// Path `i` failed for `reason`.
    fn fail(&self, i: usize, reason: &str) {
        let (was_up, switch) = {
            let mut s = self.sel();
            let was_up = s.paths()[i].up;
            (was_up, s.failed(i, reason, Instant::now()))
        };
        // Once per failure, not once per command that was on the path.
        if was_up {
            warn!(portal = %self.set.paths[i].portal, "path failed: {reason}");
            if let (Some(me), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) {
                rt.spawn(me.move_kept(i));
            }
        } else {
            debug!(portal = %self.set.paths[i].portal, "command failed on a failed path: {reason}");
        }
        self.log_switch(switch, reason);
    }

    /// The path for the next command and its session; paths whose session
    /// is down are marked failed on the way.
    fn pick(&self) -> Option<(usize, SessionHandle)> {
        loop {
            let i = self.sel().pick()?;
            match self.set.paths[i].session() {
                Some(s) if s.is_up() => return Some((i, s.clone())),
                _ => {
                    self.sel().done(i, false);
                    self.fail(i, "connection lost");
                }
            }
        }
    }

    /// A command went through path `i`, which was transitioning: its
    /// transition is over. It carries I/O again now (as active/
    /// non-optimized until the groups, read at once, say better), and
    /// the commands waiting are woken.
    fn transition_over(&self, i: usize) {
        let switch = {
            let mut s = self.sel();
            let p = &s.paths()[i];
            if p.alua != AluaState::Transitioning {
                return;
            }
            let (group, preferred) = (p.group, p.preferred);
            s.set_alua(i, AluaState::ActiveNonOptimized, group, preferred)
        };
        info!(portal = %self.set.paths[i].portal, "a transitioning path answered: I/O resumes through it");
        self.log_switch(switch, "a transitioning path answered");
        self.changed.notify_waiters();
        self.look.notify_one();
    }

    /// While no path is usable, an up path in transition and its session
    /// (see [`Selector::pick_transitioning`]).
    fn pick_transitioning(&self) -> Option<(usize, SessionHandle)> {
        let i = self.sel().pick_transitioning()?;
        match self.set.paths[i].session() {
            Some(s) if s.is_up() => Some((i, s.clone())),
            _ => {
                self.sel().done(i, false);
                None
            }
        }
    }

    /// The path for one command of a caller that sends it itself (a
    /// queue of many in flight), counted in flight until
    /// [`Router::finished`]; `None` when no path is usable now.
    pub fn take_path(&self) -> Option<(usize, SessionHandle)> {
        self.pick()
    }

    /// A command sent on path `i` ([`Router::take_path`]) is over:
    /// `Ok` when the path answered, else why it failed (the path is
    /// marked failed).
    pub fn finished(&self, i: usize, outcome: Result<(), &SessionError>) {
        self.sel().done(i, outcome.is_ok());
        if let Err(e) = outcome {
            self.fail(i, &rlun_iscsi::error_chain(e));
        }
    }

    /// Send `req` through the best path; on a path failure or ALUA sense,
    /// through another (see the module docs). Waits while no path is
    /// usable, for at most the replacement timeout.
    pub async fn command(&self, req: CommandRequest) -> Result<CommandResult, SessionError> {
        let start = Instant::now();
        let mut last_error: Option<SessionError> = None;
        let mut moved = false;
        // After a pause with no usable path: try a transitioning one
        // (one command of the LUN at a time; it tries again after a short
        // pause while the others wait to be woken).
        let mut probe_due = false;
        let mut probed = false;
        loop {
            let mut probe = false;
            let picked = match self.pick() {
                None if probe_due
                    && self
                        .probing
                        .compare_exchange(
                            false,
                            true,
                            AtomicOrdering::AcqRel,
                            AtomicOrdering::Acquire,
                        )
                        .is_ok() =>
                {
                    let p = self.pick_transitioning();
                    probe = p.is_some();
                    if !probe {
                        self.probing.store(false, AtomicOrdering::Release);
                    }
                    p
                }
                p => p,
            };
            probe_due = false;
            let Some((i, session)) = picked else {
                let waited = start.elapsed();
                if waited >= self.set.replacement_timeout {
                    return Err(last_error.unwrap_or(SessionError::NoPath(waited)));
                }
                let left = self.set.replacement_timeout - waited;
                let pause = if probed {
                    PROBE_PAUSE
                } else {
                    TRANSITION_PAUSE
                };
                probed = false;
                let _ = tokio::time::timeout(left.min(pause), self.changed.notified()).await;
                self.revive();
                probe_due = true;
                continue;
            };
            let result = session.command(req.clone()).await;
            if probe {
                self.probing.store(false, AtomicOrdering::Release);
                let over = result.as_ref().is_ok_and(|r| {
                    AluaSense::of(&ScsiError::from_status_and_sense_bytes(
                        Status::from(r.status),
                        r.sense.as_deref().unwrap_or(&[]),
                    ))
                    .is_none()
                });
                if over {
                    self.transition_over(i);
                } else {
                    probed = true;
                }
            }
            match result {
                Ok(r) if !Status::from(r.status).is_success() => {
                    let err = ScsiError::from_status_and_sense_bytes(
                        Status::from(r.status),
                        r.sense.as_deref().unwrap_or(&[]),
                    );
                    let Some(condition) = AluaSense::of(&err) else {
                        self.sel().done(i, true);
                        return Ok(r);
                    };
                    self.sel().done(i, false);
                    self.look.notify_one();
                    match condition.implied_state() {
                        Some(state) => {
                            let switch = {
                                let mut s = self.sel();
                                let p = &s.paths()[i];
                                let (group, preferred) = (p.group, p.preferred);
                                s.set_alua(i, state, group, preferred)
                            };
                            debug!(portal = %self.set.paths[i].portal, %state, "ALUA state from sense");
                            self.log_switch(
                                switch,
                                &format!("the target reports the path {state}"),
                            );
                            moved = true;
                        }
                        // A state change somewhere: read the groups now,
                        // then send again.
                        None => self.read_groups().await,
                    }
                }
                Ok(r) => {
                    self.sel().done(i, true);
                    if moved {
                        info!(
                            stall_ms = start.elapsed().as_millis() as u64,
                            portal = %self.set.paths[i].portal,
                            "a command moved to another path completed"
                        );
                    }
                    return Ok(r);
                }
                Err(e) => {
                    self.sel().done(i, false);
                    self.fail(i, &rlun_iscsi::error_chain(&e));
                    last_error = Some(e);
                    moved = true;
                }
            }
        }
    }

    /// Path `i` failed: move the commands its session keeps for its next
    /// connection to another path, once that connection is given up (a
    /// live one is sending them again; then nothing happens). Reads move
    /// at once: a late answer to them changes nothing. The rest (writes)
    /// move with `--path-fence lun-reset` after a LOGICAL UNIT RESET
    /// through another path has ended every task of this LUN the target
    /// still holds, including any of the failed path's that reached it;
    /// otherwise, or when no path can carry the reset, they wait for the
    /// path timeout (see the module docs).
    async fn move_kept(self: Arc<Self>, i: usize) {
        let Some(session) = self.set.paths[i].session().cloned() else {
            return;
        };
        let portal = &self.set.paths[i].portal;
        let reads = session.release(self.lun, false).await;
        if reads.released > 0 {
            info!(%portal, commands = reads.released, "reads caught on the failed path move to another path");
        }
        if reads.kept == 0 || self.set.config.fence != PathFence::LunReset {
            return;
        }
        let picked = match self.pick() {
            Some((j, _)) if j == i => {
                self.sel().done(j, false);
                None
            }
            other => other,
        };
        let Some((j, other)) = picked else {
            info!(%portal, commands = reads.kept, "no other path for a LOGICAL UNIT RESET: the failed path's writes wait for the path timeout");
            return;
        };
        // The reset would also abort this LUN's commands on a third path
        // (a nexus of ours that neither sent it nor is dead): only fence
        // while no third path carries or may be given any.
        let third_busy = {
            let s = self.sel();
            let spreads = s.policy() != Policy::Failover;
            s.paths()
                .iter()
                .enumerate()
                .any(|(k, p)| k != i && k != j && (p.in_flight > 0 || (spreads && p.usable())))
        };
        if third_busy {
            self.sel().done(j, false);
            info!(%portal, commands = reads.kept, "another path carries this LUN's I/O, which a LOGICAL UNIT RESET would abort: the failed path's writes wait for the path timeout");
            return;
        }
        let started = Instant::now();
        let reset = tokio::time::timeout(TMF_TIMEOUT, other.lun_reset(self.lun)).await;
        // `pick` counted the reset in flight on `j`.
        self.sel().done(j, matches!(reset, Ok(Ok(_))));
        match reset {
            Ok(Ok(TmfOutcome::Complete)) => {
                let writes = session.release(self.lun, true).await;
                info!(
                    %portal,
                    through = %self.set.paths[j].portal,
                    reset_ms = started.elapsed().as_millis() as u64,
                    commands = writes.released,
                    "LOGICAL UNIT RESET through another path ended the failed path's tasks; its writes move now"
                );
            }
            other => {
                let why = match other {
                    Ok(Ok(outcome)) => format!("{outcome:?}"),
                    Ok(Err(e)) => rlun_iscsi::error_chain(&e),
                    Err(_) => format!("no answer within {TMF_TIMEOUT:?}"),
                };
                warn!(
                    %portal,
                    through = %self.set.paths[j].portal,
                    "LOGICAL UNIT RESET failed ({why}): the failed path's writes wait for the path timeout"
                );
            }
        }
    }

    /// Paths whose session is up again while the selector has them down
    /// are let back in at once when no path is usable (the checker would
    /// only see them at its next round).
    fn revive(&self) {
        let now = Instant::now();
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut s = self.sel();
        if s.usable() > 0 {
            return;
        }
        for (i, p) in self.set.paths.iter().enumerate() {
            if !refused[i] && !s.paths()[i].up && p.session().is_some_and(|s| s.is_up()) {
                s.set_up(i, true, now);
            }
        }
    }

    /// Paths usable now, and all paths, for a status line ("2/2 paths").
    pub fn usable(&self) -> (usize, usize) {
        (self.sel().usable(), self.set.paths.len())
    }

    /// The ALUA state of path `i` as the selector has it.
    pub fn state_of(&self, i: usize) -> AluaState {
        self.sel().paths()[i].alua
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovered_portals_join_once_with_the_default_port() {
        let mut portals = vec![(TransportKind::Tcp, "10.0.0.1".to_string(), 3260)];
        let found = [
            TargetAddress {
                host: "10.0.0.1".into(),
                port: Some(3260),
                portal_group_tag: Some(1),
            },
            TargetAddress {
                host: "10.0.1.1".into(),
                port: None,
                portal_group_tag: Some(2),
            },
            TargetAddress {
                host: "10.0.1.1".into(),
                port: Some(3260),
                portal_group_tag: Some(2),
            },
        ];
        assert_eq!(
            add_discovered(&mut portals, found.iter(), TransportKind::Tcp),
            1
        );
        assert_eq!(
            portals,
            vec![
                (TransportKind::Tcp, "10.0.0.1".to_string(), 3260),
                (TransportKind::Tcp, "10.0.1.1".to_string(), 3260),
            ]
        );
    }
}
