//! The serving lifecycle, written once for `rlun mount`, `rlun serve` and
//! `rlun attach`.
//!
//! Every command that serves a target's LUNs until it is told to stop goes
//! through the same steps; only its front end differs (a FUSE mount, an NBD
//! listener, a kernel block device):
//!
//! 1. [`launch`]: in the foreground, or as a `--daemon` parent that waits
//!    for its background child's word ([`crate::daemon::launch`]); the
//!    command's own local checks run inside, before any network I/O.
//! 2. [`serve`]: log in ([`LoggedIn`]) and open the exports (one LUN, or
//!    every disk LUN: [`open_luns`], [`ExportSet`]); catch SIGINT and
//!    SIGTERM ([`Signals`]); let the front end start over the exports
//!    ([`FrontEnd::start`]); write the pid file ([`PidFile`]); say it is
//!    ready ([`Live::announce`]: the `--daemon` pipe, `sd_notify`); serve
//!    until a stop signal or until the front end ends by itself
//!    ([`Live::serve`]); then write back and flush ([`finish_exports`]),
//!    log out, report lost data ([`ServiceError::DataLost`]) and leave the
//!    exit status for `rlun umount` / `rlun detach` ([`PidFile::finish`]).
//! 3. The end is told to whoever waits ([`Readiness::finished`]).
//!
//! The session is logged out on every path, awaited: a failure to open the
//! exports or to start the front end logs out before the error is returned
//! ([`LoggedIn::or_logout`]).
//!
//! A layer between the commands (`cmd`, `cli`) and the process machinery
//! ([`crate::daemon`]); it stands on the front ends' common ground
//! ([`crate::export`], [`crate::client`]) and knows none of them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::client::{ClientError, LoggedIn, Lun, Target};
use crate::control::{self, ControlSocket};
use crate::daemon::{self, DaemonError, Launched, PidFile, Readiness, Signals};
use crate::device::{DeviceConfig, DeviceError};
use crate::exit;
use crate::export::{open_luns, DataLost, ExportSet, LunBackend, OpenError};
use crate::metrics::{self, MetricsError};
use crate::session::SessionConfig;
use rlun_iscsi::scsi::TargetChange;
use rlun_iscsi::ErrorKind;

/// What can end a serving command in the steps every front end shares.
#[derive(Debug, Error)]
pub enum ServiceError {
    /// The login, or opening the LUNs, failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The process machinery failed: `--daemon`, the signal handlers.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// The target has nothing this command can serve.
    #[error("{error}{purpose}")]
    NothingToServe {
        error: OpenError,
        /// What the LUNs were wanted for ([`FrontEnd::PURPOSE`]).
        purpose: &'static str,
    },
    /// The exports could not be set up with the cache options given.
    #[error("cannot set up the exports")]
    Exports(#[source] DeviceError),
    /// `--metrics-listen` could not be set up.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// Serving ended, but written data did not reach the target.
    #[error("{stopped}, but written data did not reach the target: {lost}")]
    DataLost {
        /// How the front end ended ([`FrontEnd::STOPPED`]).
        stopped: &'static str,
        lost: DataLost,
    },
}

impl ServiceError {
    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ServiceError::Client(e) => e.kind(),
            ServiceError::Daemon(e) => e.kind(),
            ServiceError::Exports(_) => ErrorKind::Usage,
            ServiceError::Metrics(e) => e.kind(),
            ServiceError::NothingToServe { .. } | ServiceError::DataLost { .. } => {
                ErrorKind::Failure
            }
        }
    }
}

impl exit::Code for ServiceError {
    fn exit_code(&self) -> i32 {
        match self {
            ServiceError::Daemon(e) => e.exit_code(),
            other => exit::of_kind(other.kind()),
        }
    }
}

/// What one serving command adds to the lifecycle: its front end, before
/// it starts.
// The lifecycle awaits these in place, on the command's own task (never
// spawned), so their futures need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait FrontEnd {
    /// The command's error: what the front end's own steps fail with and
    /// what the shared steps' failures ([`ServiceError`]) become.
    type Error: std::error::Error + exit::Code + From<ServiceError>;
    /// The front end once started.
    type Live: Live;
    /// How the end reads when written data was lost: "unmounted",
    /// "stopped", "detached".
    const STOPPED: &'static str;
    /// What the LUNs are for, after "target T has no disk LUNs": empty,
    /// " to serve", " to attach".
    const PURPOSE: &'static str;
    /// What `rlun list` calls it: "mounted", "served", "attached".
    const KIND: &'static str;

    /// Whether `count` opened LUNs can be served (`attach` serves exactly
    /// one). Checked before the exports are set up.
    fn accept(&self, count: usize) -> Result<(), Self::Error> {
        let _ = count;
        Ok(())
    }

    /// The front end serves only the LUNs it started with (`attach`: one
    /// device); LUNs the target adds later are not opened for it.
    const FIXED_LUNS: bool = false;

    /// Start serving `exports` (mount, set up the NBD server, connect the
    /// kernel device). Stop signals are already caught: one that arrives
    /// now waits for [`Live::serve`]. On failure the front end has undone
    /// what it started; the lifecycle logs out. The set gains and loses
    /// exports while it serves, as the target adds and removes LUNs.
    async fn start(self, exports: Arc<ExportSet<Lun>>) -> Result<Self::Live, Self::Error>;
}

/// A change of the exports while serving ([`follow_target`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportChange {
    /// LUN `lun`'s capacity changed from `old` to `new` bytes.
    Resized { lun: u64, old: u64, new: u64 },
    /// The target reports a new disk LUN; it is exported.
    Added { lun: u64 },
    /// The target no longer reports LUN `lun`, or (`replaced`) reports
    /// another logical unit under its number (another identity in VPD
    /// 0x80/0x83); its requests fail with `ENODEV`. A replaced LUN is
    /// added again as a new export when the front end takes new LUNs.
    Removed { lun: u64, replaced: bool },
}

impl ExportChange {
    /// The LUN it is about.
    pub fn lun(&self) -> u64 {
        match *self {
            ExportChange::Resized { lun, .. }
            | ExportChange::Added { lun }
            | ExportChange::Removed { lun, .. } => lun,
        }
    }
}

/// What a front end does about an [`ExportChange`] beyond what the export
/// layer does (resize a kernel block device…). Called on the task that
/// follows the target; must not block: work that may block goes to
/// `spawn_blocking`, whose handle it returns. The change counts as followed
/// (`rlun rescan` returns) once that work ended.
pub type ChangeHook = Box<dyn Fn(&ExportChange) -> Option<JoinHandle<()>> + Send + Sync>;

/// A started front end.
#[allow(async_fn_in_trait)]
pub trait Live {
    /// The exports it serves, for the final write-back.
    fn exports(&self) -> &Arc<ExportSet<Lun>>;

    /// What it does when the exports change ([`ExportChange`]); `None`:
    /// nothing beyond what the export layer does (the FUSE directory and
    /// the NBD server's handshake read the set as it is).
    fn follow(&self) -> Option<ChangeHook> {
        None
    }

    /// What its pid file is named after ([`daemon::state_file`]): the
    /// mount point, the socket or address, the device.
    fn state_key(&self) -> PathBuf;

    /// Where users reach it, for `rlun list`: the mount point, the NBD
    /// URIs, the device.
    fn endpoints(&self) -> Vec<String> {
        vec![self.state_key().display().to_string()]
    }

    /// Say that it is ready: [`Readiness::ready`], and what the user sees.
    fn announce(&self, readiness: &mut Readiness);

    /// Serve until a stop signal, or until the front end ends by itself;
    /// then say so ([`Readiness::stopping`]), stop taking requests and let
    /// those in flight finish (a second signal cuts that short). When this
    /// returns no more I/O comes: the exports are written back next.
    async fn serve(&mut self, signals: &mut Signals, readiness: &mut Readiness);

    /// After the write-back and the logout: release what is left and say
    /// what is worth saying.
    fn close(self)
    where
        Self: Sized,
    {
    }
}

/// Start a serving command — in the foreground, or as the `--daemon`
/// parent that returns `Ok` once its background child is ready — run
/// `body` to serve, and tell whoever waits how it ended.
pub async fn launch<E, B>(opts: &daemon::Options, deadline: Duration, body: B) -> Result<(), E>
where
    E: std::error::Error + From<DaemonError>,
    B: AsyncFnOnce(&mut Readiness) -> Result<(), E>,
{
    let mut readiness = match daemon::launch(opts, deadline).await? {
        Launched::Detached => return Ok(()),
        Launched::Serve(r) => r,
    };
    let result = body(&mut readiness).await;
    readiness.finished(&result);
    result
}

/// What to serve: the session to log in with, and the target's LUNs to
/// open as exports.
pub struct Plan {
    pub session: SessionConfig,
    /// The target's name (for messages).
    pub target: String,
    /// The one LUN a LUN URL names; `None`: every disk LUN.
    pub lun: Option<u64>,
    /// The device (cache) configuration of every export.
    pub device: DeviceConfig,
    /// Make every export read-only.
    pub read_only: bool,
    /// Where to serve Prometheus metrics (`--metrics-listen`).
    pub metrics: Option<metrics::Listen>,
}

/// Log in, open the exports, serve them through `front` until stopped,
/// write back, log out and leave the exit status (the steps of the module
/// docs).
pub async fn serve<F: FrontEnd>(
    plan: Plan,
    front: F,
    readiness: &mut Readiness,
) -> Result<(), F::Error> {
    let portal = crate::session::portal_string(&plan.session.host, plan.session.port);
    crate::logging::set_serving(&plan.target, &portal);
    let metrics_listener = match plan.metrics {
        Some(listen) => Some(metrics::bind(listen).await.map_err(ServiceError::from)?),
        None => None,
    };
    let target = LoggedIn::login(plan.session)
        .await
        .map_err(ServiceError::from)?;
    let hangups = Arc::new(AtomicU64::new(0));
    let counted = hangups.clone();
    let (target, (mut signals, mut live)) = target
        .or_logout(async |t: &Target| {
            let luns = open_luns(t, &plan.target, plan.lun)
                .await
                .map_err(|e| match e {
                    OpenError::Client(e) => ServiceError::Client(e),
                    error => ServiceError::NothingToServe {
                        error,
                        purpose: F::PURPOSE,
                    },
                })?;
            front.accept(luns.len())?;
            if let Some(every) = plan.device.stats_interval {
                for (n, lun) in &luns {
                    if let Some(r) = lun.route().router() {
                        r.start_stats(*n, every);
                    }
                }
            }
            let exports = ExportSet::new(luns, &plan.device, plan.read_only)
                .map_err(ServiceError::Exports)?;
            let exports = Arc::new(exports);
            // From here on a signal must not kill rlun before it wrote
            // back: tokio queues it until the front end looks.
            let mut signals = Signals::install().map_err(ServiceError::from)?;
            let session = t.session().clone();
            signals.on_hangup(move || {
                info!("SIGHUP: rescanning the target (LUNs and capacities)");
                counted.fetch_add(1, Ordering::SeqCst);
                session.note_change(TargetChange::Luns);
                session.note_change(TargetChange::Capacity);
            });
            let live = front.start(exports).await?;
            Ok::<_, F::Error>((signals, live))
        })
        .await?;
    let pid_file = PidFile::create(daemon::state_file(&live.state_key()));
    let report = pid_file.as_ref().map(|p| Report {
        describer: p.describer(),
        base: serde_json::json!({
            "kind": F::KIND,
            "what": live.state_key(),
            "endpoints": live.endpoints(),
            "target": plan.target,
            "portal": portal,
        }),
        hangups: hangups.clone(),
    });
    if let Some(r) = &report {
        r.describe(live.exports(), 0, &[], None);
    }
    let source = Arc::new(control::Source {
        kind: F::KIND,
        what: live.state_key().display().to_string(),
        target: plan.target.clone(),
        portal: portal.clone(),
        started: std::time::Instant::now(),
        session: target.session().clone(),
        exports: live.exports().clone(),
    });
    let control = pid_file
        .as_ref()
        .and_then(|p| ControlSocket::open(control::socket_path(p.path()), source.clone()));
    let metrics = metrics_listener.map(|l| metrics::serve(l, source.clone()));
    live.announce(readiness);
    let health = readiness
        .status_line()
        .map(|line| tokio::spawn(report_health(line, source.clone())));
    let only = match (plan.lun, F::FIXED_LUNS) {
        (Some(n), _) => Some(Only::Lun(n)),
        (None, true) => Some(Only::Started),
        (None, false) => None,
    };
    let follower = tokio::spawn(follow_target(
        (*target).clone(),
        live.exports().clone(),
        only,
        live.follow(),
        report,
    ));
    live.serve(&mut signals, readiness).await;
    follower.abort();
    if let Some(h) = health {
        h.abort();
    }
    // Still answering while the cache is written back (dirty bytes drain).
    let finished = finish_exports(live.exports()).await;
    drop((control, metrics));
    if let Err(e) = target.logout().await {
        debug!(error = %e, "logout failed");
    }
    live.close();
    let result = finished.map_err(|lost| {
        F::Error::from(ServiceError::DataLost {
            stopped: F::STOPPED,
            lost,
        })
    });
    if let Some(p) = pid_file {
        p.finish(&result);
    }
    result
}

/// How often systemd's `STATUS=` line is brought up to date.
const HEALTH_EVERY: Duration = Duration::from_secs(5);

/// Keep systemd's `STATUS=` line telling how the process does ("mounted
/// /mnt/x: 1 LUN, session up, 12.0 MiB dirty, 0 reconnects"), sent when
/// it changes: the line the front end said it was ready with stays until
/// then.
async fn report_health(line: daemon::StatusLine, source: Arc<control::Source>) {
    let mut last = health(&source.snapshot());
    loop {
        tokio::time::sleep(HEALTH_EVERY).await;
        let now = health(&source.snapshot());
        if now != last {
            line.set(&now);
            last = now;
        }
    }
}

/// One line of health for `systemctl status`.
pub fn health(s: &control::Snapshot) -> String {
    let dirty: u64 = s.luns.iter().map(|l| l.cache.dirty_bytes).sum();
    let n = s.luns.len();
    let paths = match paths_usable(s) {
        Some((usable, all)) => format!(", {usable}/{all} paths"),
        None => String::new(),
    };
    format!(
        "{} {}: {n} LUN{}, session {}{paths}, {} dirty, {} reconnect{}",
        s.kind,
        match s.what.strip_prefix("nbd-") {
            Some(addr) => format!("nbd://{addr}"),
            None => s.what.clone(),
        },
        if n == 1 { "" } else { "s" },
        if s.session_up { "up" } else { "down" },
        human_size(dirty),
        s.reconnects,
        if s.reconnects == 1 { "" } else { "s" },
    )
}

/// With several paths: the fewest any LUN can use now, and how many
/// there are.
pub fn paths_usable(s: &control::Snapshot) -> Option<(usize, usize)> {
    s.luns
        .iter()
        .filter_map(|l| l.multipath.as_ref())
        .map(|m| (m.usable, m.paths.len()))
        .min()
}

/// The description beside the pid file (`rlun list`, `rlun rescan`),
/// rewritten after each look at the target.
struct Report {
    describer: daemon::Describer,
    /// What does not change: kind, where, target, portal.
    base: serde_json::Value,
    /// SIGHUPs seen so far (each one asks for a rescan).
    hangups: Arc<AtomicU64>,
}

impl Report {
    /// The base, the LUNs now, `rescans`: the SIGHUPs seen when the last
    /// look began, and `changes`: what that look found.
    fn describe(
        &self,
        exports: &ExportSet<Lun>,
        rescans: u64,
        changes: &[ExportChange],
        error: Option<&str>,
    ) {
        let mut v = self.base.clone();
        let luns: Vec<u64> = exports.exports().iter().map(|e| e.number()).collect();
        v["luns"] = serde_json::json!(luns);
        v["rescans"] = serde_json::json!(rescans);
        v["changes"] = serde_json::json!(changes.iter().map(describe_change).collect::<Vec<_>>());
        v["rescan_error"] = serde_json::json!(error);
        self.describer.describe(&v);
    }
}

/// One line for a change: "lun1: 32.0 MiB -> 64.0 MiB", "lun3: added".
pub fn describe_change(c: &ExportChange) -> String {
    match c {
        ExportChange::Resized { lun, old, new } => {
            format!(
                "lun{lun}: resized from {} to {}",
                human_size(*old),
                human_size(*new)
            )
        }
        ExportChange::Added { lun } => format!("lun{lun}: added"),
        ExportChange::Removed {
            lun,
            replaced: false,
        } => format!("lun{lun}: removed"),
        ExportChange::Removed {
            lun,
            replaced: true,
        } => format!("lun{lun}: removed (another logical unit has its number now)"),
    }
}

/// Which LUNs [`follow_target`] may add.
#[derive(Debug, Clone, Copy)]
enum Only {
    /// The one LUN the URL names (when it comes back after a removal).
    Lun(u64),
    /// None: the front end serves what it started with.
    Started,
}

/// How long [`follow_target`] lets a burst of change reports gather (one
/// UNIT ATTENTION per LUN and nexus) before it looks at the target.
const SETTLE: Duration = Duration::from_millis(100);

/// Follow the target while serving: when the session counts a change (a
/// UNIT ATTENTION or asynchronous event of CAPACITY DATA HAS CHANGED,
/// REPORTED LUNS DATA HAS CHANGED or INQUIRY DATA HAS CHANGED, or a
/// rescan asked for with SIGHUP), look again — REPORT LUNS when the LUN
/// inventory may have changed (removed LUNs leave the set, new disk LUNs
/// join it), READ CAPACITY of every export whose capacity may have
/// changed ([`crate::export::Export::refresh_capacity`]) — and tell the
/// front end what changed.
async fn follow_target(
    target: Target,
    exports: Arc<ExportSet<Lun>>,
    only: Option<Only>,
    hook: Option<ChangeHook>,
    report: Option<Report>,
) {
    let session = target.session().clone();
    let mut changes = session.changes();
    let mut seen_luns = session.lun_generation();
    while changes.changed().await.is_ok() {
        tokio::time::sleep(SETTLE).await;
        changes.borrow_and_update();
        let hangups = report
            .as_ref()
            .map_or(0, |r| r.hangups.load(Ordering::SeqCst));
        let mut found = Vec::new();
        let luns = session.lun_generation();
        let inventory = luns != seen_luns;
        let mut error = None;
        if inventory {
            match rescan_luns(&target, &exports, only, &mut found).await {
                Ok(()) => seen_luns = luns,
                Err(e) => error = Some(e),
            }
        }
        for e in exports.exports().iter() {
            let old = e.size();
            // After an inventory change a LUN number may name another LU.
            let new = if inventory {
                e.recheck_capacity().await
            } else {
                e.refresh_capacity().await
            };
            if let Some(new) = new {
                found.push(ExportChange::Resized {
                    lun: e.number(),
                    old,
                    new,
                });
            }
        }
        for c in &found {
            info!(
                lun = c.lun(),
                "the exports follow the target: {}",
                describe_change(c)
            );
            if let Some(work) = hook.as_ref().and_then(|h| h(c)) {
                let _ = work.await;
            }
        }
        if let Some(r) = &report {
            r.describe(&exports, hangups, &found, error.as_deref());
        }
    }
}

/// REPORT LUNS, and make the set match it; `Err` (what failed) when the
/// target could not be asked (the next change tries again).
async fn rescan_luns(
    target: &Target,
    exports: &ExportSet<Lun>,
    only: Option<Only>,
    found: &mut Vec<ExportChange>,
) -> Result<(), String> {
    let reported = match target.report_luns().await {
        Ok(v) => v,
        Err(e) => {
            let e = rlun_iscsi::error_chain(&e);
            warn!(error = %e, "cannot rescan the target's LUNs");
            return Err(format!("REPORT LUNS failed: {e}"));
        }
    };
    for e in exports.exports().iter() {
        let n = e.number();
        if !reported.contains(&n) {
            exports.remove(n);
            found.push(ExportChange::Removed {
                lun: n,
                replaced: false,
            });
            continue;
        }
        // Still there by number; is it still the same logical unit? A
        // target may have deleted the LUN and created another under its
        // number between two looks: data cached (or dirty) for the first
        // must not be served from or written to the second.
        let device = e.device();
        let was = device.backend().identity();
        let now = device.backend().read_identity().await;
        if was.differs_from(&now) {
            warn!(
                lun = n,
                was = %was,
                now = %now,
                "LUN {n} is another logical unit now: the export of the old one is removed"
            );
            exports.remove(n);
            found.push(ExportChange::Removed {
                lun: n,
                replaced: true,
            });
        }
    }
    for n in reported {
        let wanted = match only {
            None => true,
            Some(Only::Lun(l)) => l == n,
            Some(Only::Started) => false,
        };
        if !wanted || exports.by_number(n).is_some() {
            continue;
        }
        match target.open_lun(n).await {
            Ok(lun) => match exports.add(n, lun) {
                Ok(_) => found.push(ExportChange::Added { lun: n }),
                Err(e) => warn!(lun = n, error = %e, "cannot export the new LUN"),
            },
            Err(ClientError::NotADisk { .. } | ClientError::LunNotFound(_)) => {}
            Err(e) => {
                let e = rlun_iscsi::error_chain(&e);
                warn!(lun = n, error = %e, "cannot open the new LUN");
                return Err(format!("cannot open the new LUN {n}: {e}"));
            }
        }
    }
    Ok(())
}

/// Stop serving exports: write back and flush what was written, and say
/// whether written data did not reach the target. (The logout follows.)
pub async fn finish_exports<B: LunBackend>(exports: &ExportSet<B>) -> Result<(), DataLost> {
    let dirty = exports.dirty_bytes();
    if dirty > 0 {
        info!("writing back {} of cached data", human_size(dirty));
    }
    exports.finish().await.into_result()
}

/// Human size: 1.5 GiB, 512 B.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CacheMode, MemBackend};
    use crate::exit::Code as _;
    use crate::export::testing::TestLun;

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(64 << 20), "64.0 MiB");
        assert_eq!(human_size(3 << 29), "1.5 GiB");
    }

    #[test]
    fn shared_failures_keep_their_exit_codes() {
        let not_found = ServiceError::Client(ClientError::LunNotFound(3));
        let no_luns = ServiceError::NothingToServe {
            error: OpenError::NoDiskLuns {
                target: "iqn.x".into(),
            },
            purpose: " to serve",
        };
        let child = ServiceError::Daemon(DaemonError::Child {
            message: "m".into(),
            code: 5,
        });

        assert_eq!(not_found.exit_code(), exit::NOT_FOUND);
        assert_eq!(no_luns.exit_code(), exit::FAILURE);
        assert_eq!(
            no_luns.to_string(),
            "target iqn.x has no disk LUNs to serve"
        );
        assert_eq!(child.exit_code(), 5);
    }

    #[tokio::test]
    async fn finishing_clean_exports_reports_no_lost_data() {
        let lun = TestLun::new(MemBackend::new(512, 64));
        let cfg = DeviceConfig {
            mode: CacheMode::WriteBack,
            ..DeviceConfig::default()
        };
        let set = ExportSet::new(vec![(1, lun)], &cfg, false).unwrap();
        set.exports()[0]
            .write(0, bytes::Bytes::from(vec![7u8; 512]), false)
            .await
            .unwrap();

        let finished = finish_exports(&set).await;

        assert!(finished.is_ok());
        assert_eq!(set.dirty_bytes(), 0, "written back");
    }
}
