//! `rlun attach --ublk` / `rlun detach /dev/ublkbN`: one LUN as a ublk
//! block device (see [`crate::ublk`]).
//!
//! Local problems come first, before any network I/O: not root, no
//! `ublk_drv`, io_uring disabled, a named device that exists (unless
//! `--recover`). On SIGINT/SIGTERM (or `rlun detach`) rlun fsyncs the
//! device, stops it (its queues end, the kernel fails what is left),
//! deletes it, writes back its cache and logs out. A kill -9 leaves the
//! device to the kernel, holding its I/O until `rlun attach --recover`
//! takes it over or `rlun detach` deletes it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{info, warn};

use super::context::device_config;
use super::context::Ctx;
use super::error::CliError;
use crate::cli::{AttachOpts, CacheChoice, CacheOpts, ConnectOpts, DaemonOpts};
use crate::client::Lun;
use crate::config::settings::Effective;
use crate::daemon::{self, process_alive, Readiness, Signals};
use crate::export::ExportSet;
use crate::nbd::kernel;
use crate::service::{self, ChangeHook, ExportChange, FrontEnd, Live, Plan};
use crate::ublk::{self, Event, UblkFailure};
use crate::url::TargetUrl;

/// Longest wait for the fsync of `/dev/ublkbN` before it is stopped, and
/// for its queues to end after (as `attach`'s for `/dev/nbdN`).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// Seconds the kernel waits on a request (and on a dead connection)
/// before failing it (`/dev/nbdN`), or a device whose rlun died waits for
/// a recovery (`/dev/ublkbN`): `--io-timeout`, or by default longer than
/// rlun's own reconnect window (`--replacement-timeout`, at least 30 s,
/// plus 30 s).
pub fn kernel_timeout(io_timeout: Option<Duration>, replacement: Duration) -> u64 {
    match io_timeout {
        Some(t) => t.as_secs().max(1),
        None => replacement.as_secs().max(30) + 30,
    }
}

fn failure(e: UblkFailure) -> CliError {
    match e {
        UblkFailure::NotUblk(_) => CliError::Usage(e.to_string()),
        e => CliError::Other(e.to_string()),
    }
}

/// Queues by default: one per CPU, at most 4 (each is a thread with
/// `--queue-depth` buffers of up to 512 KiB).
fn default_queues() -> u16 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(4) as u16)
        .unwrap_or(1)
}

/// `rlun attach --ublk`.
pub async fn run(
    ctx: &Ctx,
    arg: &str,
    device: Option<&Path>,
    o: &AttachOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    let id = device
        .map(ublk::parse_device)
        .transpose()
        .map_err(failure)?;
    ublk::check_local(daemon::current_uid() == 0).map_err(failure)?;
    match (id, o.recover) {
        (Some(i), false) if ublk::dev_state(i).is_some() => {
            return Err(failure(UblkFailure::Busy(i)));
        }
        (Some(i), true) if ublk::dev_state(i).is_none() => {
            return Err(failure(UblkFailure::NoSuchDevice(i)));
        }
        _ => {}
    }
    service::launch(
        &d.options(),
        ctx.ready_deadline(arg, conn),
        async |readiness: &mut Readiness| {
            let Attachment {
                url,
                iqn,
                settings,
                plan,
            } = prepare(ctx, arg, o, d, cache, conn)?;
            if plan.device.mode == crate::device::CacheMode::WriteBack {
                info!(
                    "--cache write-back on ublk: what this rlun holds unwritten when it dies \
                     is lost, even when a new rlun recovers the device"
                );
            }
            // A device an rlun attached to this LUN and then died (a
            // crash, kill -9, the unit's restart): take it over rather than
            // add a second device for the same LUN.
            let (id, recover) = match (id, o.recover) {
                (None, false) => match ublk::find_orphan(&url.to_string()) {
                    Some(orphan) => {
                        info!(
                            "/dev/ublkb{orphan} was attached to {url} by an rlun that died: \
                             recovering it"
                        );
                        (Some(orphan), true)
                    }
                    None => (None, false),
                },
                other => other,
            };
            let front = Ublk {
                arg,
                iqn,
                guard_timeout: kernel_timeout(o.io_timeout, settings.replacement_timeout),
                url: url.to_string(),
                opts: ublk::Options {
                    id,
                    queues: o.queues.unwrap_or_else(default_queues),
                    depth: o.queue_depth,
                    recover,
                    url: url.to_string(),
                },
            };
            service::serve(plan, front, readiness).await
        },
    )
    .await
}

/// What `attach` settles before its front end (nbd or ublk) starts: the
/// one LUN the argument names, the effective settings, the serving plan.
pub struct Attachment {
    pub url: TargetUrl,
    pub iqn: String,
    pub settings: Effective,
    pub plan: Plan,
}

/// [`Attachment`] for `arg`: a URL or config-file name of one LUN (or of a
/// target with one disk LUN, which [`accept_one`] checks after login).
pub fn prepare(
    ctx: &Ctx,
    arg: &str,
    o: &AttachOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<Attachment, CliError> {
    let (url, entry) = ctx.resolve_url(arg)?;
    let Some(iqn) = url.target.clone() else {
        return Err(CliError::Usage(format!(
            "{arg} names a portal, not a LUN: attach one LUN (iscsi://host/<iqn>/<lun>)"
        )));
    };
    let settings = ctx.settings(
        &url,
        entry.as_deref(),
        &conn.settings().or(&cache.settings()),
    );
    let mode = settings.cache.unwrap_or(CacheChoice::WriteThrough).mode();
    let plan = Plan {
        session: ctx.session_config(&url, entry.as_deref(), conn)?,
        target: iqn.clone(),
        lun: url.lun,
        device: device_config(&settings, mode),
        read_only: o.read_only,
        metrics: ctx.metrics(entry.as_deref(), d.metrics()),
    };
    Ok(Attachment {
        url,
        iqn,
        settings,
        plan,
    })
}

/// `attach` serves exactly one LUN: `count` opened LUNs of `arg`'s target
/// `iqn` other than one are a usage error.
pub fn accept_one(count: usize, arg: &str, iqn: &str) -> Result<(), CliError> {
    if count == 1 {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "{arg} has {count} disk LUNs: name one (iscsi://host/{iqn}/<lun>)"
    )))
}

/// The ublk front end of [`service::serve`].
struct Ublk<'a> {
    arg: &'a str,
    iqn: String,
    /// Seconds a device whose rlun died waits for a recovery.
    guard_timeout: u64,
    url: String,
    opts: ublk::Options,
}

impl FrontEnd for Ublk<'_> {
    type Error = CliError;
    type Live = UblkAttached;
    const STOPPED: &'static str = "detached";
    const KIND: &'static str = "attached";
    const PURPOSE: &'static str = " to attach";
    const FIXED_LUNS: bool = true;

    fn accept(&self, count: usize) -> Result<(), CliError> {
        accept_one(count, self.arg, &self.iqn)
    }

    async fn start(self, exports: Arc<ExportSet<Lun>>) -> Result<UblkAttached, CliError> {
        let export = exports
            .exports()
            .first()
            .cloned()
            .ok_or_else(|| CliError::Other("no export to attach".into()))?;
        let info = export.info();
        let mut events = ublk::start(
            export,
            info,
            self.opts.clone(),
            tokio::runtime::Handle::current(),
        )
        .map_err(failure)?;
        match events.recv().await {
            Some(Event::Live(id)) => {
                spawn_guard(id, self.guard_timeout);
                Ok(UblkAttached {
                    id,
                    dev: ublk::block_path(id),
                    url: self.url,
                    recovered: self.opts.recover,
                    queues: self.opts.queues,
                    exports,
                    events,
                })
            }
            Some(Event::Ended(Err(e))) => {
                exports.shut_down();
                Err(failure(e))
            }
            Some(Event::Ended(Ok(()))) | None => {
                exports.shut_down();
                Err(failure(UblkFailure::Ended))
            }
        }
    }
}

/// A live `/dev/ublkbN`.
struct UblkAttached {
    id: u32,
    dev: PathBuf,
    url: String,
    recovered: bool,
    queues: u16,
    exports: Arc<ExportSet<Lun>>,
    /// The server thread's end.
    events: mpsc::UnboundedReceiver<Event>,
}

impl Live for UblkAttached {
    fn exports(&self) -> &Arc<ExportSet<Lun>> {
        &self.exports
    }

    fn state_key(&self) -> PathBuf {
        self.dev.clone()
    }

    /// ublk on the kernels rlun targets (before UBLK_F_UPDATE_SIZE, 6.16)
    /// cannot change a live device's size: a resize is logged, and the
    /// device keeps its size until it is attached again.
    fn follow(&self) -> Option<ChangeHook> {
        let dev = self.dev.clone();
        Some(Box::new(move |c: &ExportChange| {
            match *c {
                ExportChange::Resized { old, new, .. } => warn!(
                    "the LUN was resized from {old} to {new} bytes: {} keeps {old} bytes until \
                     it is detached and attached again",
                    dev.display()
                ),
                ExportChange::Removed { lun, .. } => warn!(
                    "the target removed LUN {lun}: I/O on {} fails until `rlun detach {}`",
                    dev.display(),
                    dev.display()
                ),
                ExportChange::Added { .. } => {}
            }
            None
        }))
    }

    fn announce(&self, readiness: &mut Readiness) {
        let how = if self.recovered {
            "recovered"
        } else {
            "attached"
        };
        info!(
            queues = self.queues,
            "{how} {} as {} (ublk)",
            self.url,
            self.dev.display()
        );
        readiness.print(&self.dev.display().to_string());
        readiness.ready(&format!("{how} {}", self.dev.display()));
    }

    /// Serve until a signal or until the device is stopped from outside;
    /// then fsync the device, stop it and wait for its queues to end.
    async fn serve(&mut self, signals: &mut Signals, readiness: &mut Readiness) {
        let dev = self.dev.clone();
        let events = &mut self.events;
        let ended = tokio::select! {
            s = signals.recv() => {
                info!("{}: detaching {}", s.name(), dev.display());
                None
            }
            e = events.recv() => Some(e),
        };
        readiness.stopping("detaching the device");
        if ended.is_none() {
            let path = dev.clone();
            let flush =
                tokio::task::spawn_blocking(move || kernel::flush_device(&path, FLUSH_TIMEOUT));
            tokio::select! {
                r = flush => match r {
                    Ok(Ok(())) => info!("flushed {}", dev.display()),
                    Ok(Err(e)) => warn!(error = %e, "flushing {} before the stop failed", dev.display()),
                    Err(e) => warn!(error = %e, "flushing {} before the stop failed", dev.display()),
                },
                _ = signals.recv() => warn!("second signal: stopping without waiting for the flush"),
            }
            let id = self.id;
            match tokio::task::spawn_blocking(move || ublk::stop(id)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "stopping {} failed", dev.display()),
                Err(e) => warn!(error = %e, "stopping {} failed", dev.display()),
            }
            let grace = FLUSH_TIMEOUT;
            tokio::select! {
                e = self.events.recv() => report_end(&dev, e),
                _ = tokio::time::sleep(grace) => warn!("the queues of {} did not end in {grace:?}", dev.display()),
                _ = signals.recv() => warn!("second signal: not waiting for the queues"),
            }
        } else if let Some(e) = ended {
            warn!("{} was stopped from outside rlun", dev.display());
            report_end(&dev, e);
        }
        self.exports.shut_down();
    }
}

fn report_end(dev: &Path, e: Option<Event>) {
    match e {
        Some(Event::Ended(Err(e))) => warn!(error = %e, "{} ended", dev.display()),
        Some(_) | None => info!("{} deleted", dev.display()),
    }
}

/// `rlun detach /dev/ublkbN` of a device with no live rlun behind its pid
/// file: delete a device whose server died (the I/O it holds fails);
/// refuse one another process serves.
pub fn detach_orphan(id: u32, state: &Path) -> Result<(), CliError> {
    let Some(st) = ublk::dev_state(id) else {
        return Err(CliError::Other(format!("/dev/ublkb{id} does not exist")));
    };
    if st.served && st.live {
        return Err(CliError::Other(format!(
            "/dev/ublkb{id} is not attached by rlun (no live process in {}; pid {} serves it)",
            state.display(),
            st.server_pid
        )));
    }
    ublk::delete(id).map_err(failure)?;
    let _ = std::fs::remove_file(state);
    eprintln!(
        "rlun: /dev/ublkb{id}: its rlun had died; deleted the device (I/O held on it fails, \
         writes it had not acknowledged are lost)"
    );
    Ok(())
}

/// Start `rlun ublk-guard` for device `id` in a process group of its own
/// (a kill of this rlun's group leaves it): if this rlun dies and no new
/// one recovers the device within `timeout` seconds, it deletes the
/// device, and the I/O held on it fails instead of waiting forever. Under
/// systemd the unit's cgroup goes with the main process, guard included:
/// there the unit's restart recovers the device.
fn spawn_guard(id: u32, timeout: u64) {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            warn!(error = %e, "cannot start the guard of /dev/ublkb{id}: a kill -9 of this rlun leaves the device waiting for `rlun attach --recover` or `rlun detach`");
            return;
        }
    };
    let r = std::process::Command::new(exe)
        .args([
            "ublk-guard",
            &id.to_string(),
            &std::process::id().to_string(),
            &timeout.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    match r {
        Ok(child) => info!(pid = child.id(), timeout, "guard of /dev/ublkb{id} started"),
        Err(e) => warn!(error = %e, "cannot start the guard of /dev/ublkb{id}"),
    }
}

/// `rlun ublk-guard`: see [`spawn_guard`]. Ends when the device is gone,
/// when a new rlun serves it (that one has its own guard), or after
/// deleting it.
pub async fn guard(id: u32, server: u32, timeout: Duration) -> Result<(), CliError> {
    let tick = Duration::from_millis(500);
    let mut dead_since: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(tick).await;
        let state = tokio::task::spawn_blocking(move || ublk::dev_state(id))
            .await
            .ok()
            .flatten();
        let dead_for = if process_alive(server) {
            None
        } else {
            Some(
                dead_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed(),
            )
        };
        match ublk::guard_step(state, server, dead_for, timeout) {
            ublk::GuardStep::Wait => {}
            ublk::GuardStep::Leave => return Ok(()),
            ublk::GuardStep::Delete => {
                let r = tokio::task::spawn_blocking(move || ublk::delete(id))
                    .await
                    .map_err(|e| CliError::Other(e.to_string()))?;
                eprintln!(
                    "rlun: /dev/ublkb{id}: its rlun (pid {server}) died and no rlun recovered \
                     the device in {}s: deleted it (the I/O held on it fails)",
                    timeout.as_secs()
                );
                return r.map_err(failure);
            }
        }
    }
}
