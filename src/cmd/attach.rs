//! `rlun attach` / `rlun detach`: one LUN as a kernel block device
//! (`/dev/nbdN`) through the kernel's NBD client (see
//! [`crate::nbd::kernel`]); `--ublk` goes to [`super::attach_ublk`].
//!
//! rlun creates `--connections` socketpairs, serves one end of each with
//! the NBD server in transmission phase (no handshake: the kernel is told
//! size, block size and flags over netlink) and hands the other ends to
//! the kernel. Local problems come first, before any network I/O: not
//! root, the nbd module not loaded ("modprobe nbd"), the named device in
//! use. On SIGINT/SIGTERM (or `rlun detach`) rlun first fsyncs the device
//! (so what the kernel still buffers for it, written by a process that
//! holds it open, reaches the target), then disconnects it, lets the
//! requests in flight finish, writes back its cache and logs out.
//!
//! The lifecycle around that (`--daemon`, readiness, the pid file, the
//! write-back and logout) is [`crate::service`]'s; this module is the
//! kernel block device front end (`Kernel`), and `rlun detach` and
//! `rlun list`.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::context::Ctx;
use super::error::CliError;
use crate::cli::{AttachOpts, CacheOpts, ConnectOpts, DaemonOpts};
use crate::client::Lun;
use crate::daemon::{self, process_alive, Readiness, Signals};
use crate::export::{Export, ExportSet};
use crate::nbd::kernel::{self, flags, ConnectParams, Interface, IoctlSession, KernelError};
use crate::nbd::server::{Limits, Server};
use crate::service::{self, ChangeHook, ExportChange, FrontEnd, Live};

/// Longest wait for the fsync of `/dev/nbdN` before a disconnect (see
/// [`kernel::flush_device`]); then the device is disconnected anyway.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// The index N of `/dev/nbdN` (or `nbdN`).
pub fn parse_device(dev: &Path) -> Result<u32, CliError> {
    let s = dev.to_string_lossy();
    s.strip_prefix("/dev/")
        .unwrap_or(&s)
        .strip_prefix("nbd")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| CliError::Usage(format!("{s} is not an NBD device (expected /dev/nbd<N>)")))
}

use super::attach_ublk::{accept_one, kernel_timeout, prepare, Attachment};

fn kernel_error(e: KernelError) -> CliError {
    CliError::Other(e.to_string())
}

/// The checks that need no network: root, the nbd module, a free device.
/// Returns the kernel interface to use (netlink, or the ioctls).
pub fn check_local(index: Option<u32>) -> Result<Interface, CliError> {
    if daemon::current_uid() != 0 {
        return Err(kernel_error(KernelError::NotRoot));
    }
    let iface = kernel::interface().map_err(kernel_error)?;
    if let Some(i) = index {
        if !Path::new(&format!("/sys/block/nbd{i}")).exists() {
            return Err(CliError::Usage(format!(
                "/dev/nbd{i} does not exist (the nbd module's nbds_max is lower)"
            )));
        }
        if kernel::connected(i) {
            return Err(kernel_error(KernelError::Busy(i)));
        }
    }
    Ok(iface)
}

fn state_key(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nbd{index}"))
}

/// `rlun attach`.
pub async fn run(
    ctx: &Ctx,
    arg: &str,
    device: Option<&Path>,
    o: &AttachOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    if o.ublk || o.recover || device.is_some_and(crate::ublk::is_ublk_path) {
        return super::attach_ublk::run(ctx, arg, device, o, d, cache, conn).await;
    }
    let index = device.map(parse_device).transpose()?;
    if o.connections == 0 {
        return Err(CliError::Usage("--connections must be at least 1".into()));
    }
    let iface = check_local(index)?;
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
            let front = Kernel {
                arg,
                iqn,
                url: url.to_string(),
                index,
                iface,
                options: o,
                replacement_timeout: settings.replacement_timeout,
            };
            service::serve(plan, front, readiness).await
        },
    )
    .await
}

/// The kernel block device front end of [`service::serve`]: one export
/// served to the kernel's NBD client over socketpairs, as `/dev/nbdN`.
struct Kernel<'a> {
    /// The target argument as given (for messages).
    arg: &'a str,
    iqn: String,
    url: String,
    /// The device asked for; `None`: the kernel picks a free one.
    index: Option<u32>,
    iface: Interface,
    options: &'a AttachOpts,
    /// rlun's own reconnect window (`--replacement-timeout`).
    replacement_timeout: Duration,
}

impl FrontEnd for Kernel<'_> {
    type Error = CliError;
    type Live = Attached;
    const STOPPED: &'static str = "detached";
    const KIND: &'static str = "attached";
    const PURPOSE: &'static str = " to attach";
    const FIXED_LUNS: bool = true;

    fn accept(&self, count: usize) -> Result<(), CliError> {
        accept_one(count, self.arg, &self.iqn)
    }

    async fn start(self, exports: Arc<ExportSet<Lun>>) -> Result<Attached, CliError> {
        let o = self.options;
        let (stop_tx, stop_rx) = watch::channel(false);
        let export = exports
            .exports()
            .first()
            .cloned()
            .ok_or_else(|| CliError::Other("no export to attach".into()))?;
        let server = Arc::new(Server::new(
            exports.clone(),
            Arc::new(|_: &Export<Lun>| String::new()),
            None,
            Limits::default(),
            stop_rx,
        ));
        // SEND_FUA is offered as the server offers it: a FUA request becomes a
        // WRITE with FUA where the LUN reports DPOFUA, WRITE + SYNCHRONIZE
        // CACHE of the range elsewhere (client::Lun::write).
        let info = server.preset_info(&export).await;

        let mut conns = JoinSet::new();
        let mut kernel_ends: Vec<OwnedFd> = Vec::new();
        for n in 0..o.connections {
            let (ours, theirs) =
                std::os::unix::net::UnixStream::pair().map_err(|source| CliError::LocalFile {
                    what: "cannot create a socketpair for",
                    path: PathBuf::from("the kernel NBD client"),
                    source,
                })?;
            // Replies go out through ours, the kernel's requests (WRITE data)
            // through theirs.
            crate::nbd::server::enlarge_send_buffer(&ours);
            crate::nbd::server::enlarge_send_buffer(&theirs);
            ours.set_nonblocking(true)
                .and_then(|()| tokio::net::UnixStream::from_std(ours))
                .map(|s| {
                    let server = server.clone();
                    let info = info.clone();
                    let export = export.clone();
                    conns.spawn(async move {
                        if let Err(e) = server
                            .serve_negotiated(s, export, &info, &format!("kernel#{n}"))
                            .await
                        {
                            warn!(error = %e, "kernel NBD connection failed");
                        }
                    });
                })
                .map_err(|source| CliError::LocalFile {
                    what: "cannot use a socketpair for",
                    path: PathBuf::from("the kernel NBD client"),
                    source,
                })?;
            kernel_ends.push(theirs.into());
        }
        let mut server_flags = u64::from(info.flags) | flags::HAS_FLAGS;
        if o.connections > 1 {
            server_flags |= flags::CAN_MULTI_CONN;
        }
        // A request waits in the kernel while rlun reconnects to the target;
        // rlun itself fails it after --replacement-timeout without progress,
        // so the kernel must wait longer than that (plus a margin) before it
        // fails requests on its own.
        let replacement = self.replacement_timeout;
        let timeout = kernel_timeout(o.io_timeout, replacement);
        if o.io_timeout.is_some() && timeout <= replacement.as_secs() {
            warn!(
                "--io-timeout {timeout}s is not longer than --replacement-timeout {}s: \
                 I/O on the device fails with EIO when a reconnect takes longer than {timeout}s",
                replacement.as_secs()
            );
        }
        let params_block_size = u64::from(info.block.minimum.clamp(512, 4096));
        let params = ConnectParams {
            index: self.index,
            size: info.size,
            block_size: params_block_size,
            server_flags,
            timeout,
            dead_conn_timeout: timeout,
        };
        let iface = self.iface;
        let connected = tokio::task::spawn_blocking(move || {
            let r = match iface {
                Interface::Netlink => kernel::connect(&params, &kernel_ends).map(|i| (i, None)),
                Interface::Ioctl => {
                    kernel::connect_ioctl(&params, &kernel_ends).map(|s| (s.index(), Some(s)))
                }
            };
            drop(kernel_ends); // the kernel holds its own references
            r
        })
        .await
        .map_err(|e| CliError::Other(format!("nbd connect task failed: {e}")))?;
        let (index, ioctl_session) = match connected {
            Ok(c) => c,
            Err(e) => {
                let _ = stop_tx.send(true);
                conns.shutdown().await;
                exports.shut_down();
                return Err(kernel_error(e));
            }
        };
        Ok(Attached {
            dev: state_key(index),
            index,
            iface,
            block_size: params_block_size,
            url: self.url,
            exports,
            conns,
            stop_tx,
            ioctl_session,
        })
    }
}

/// A connected [`Kernel`] front end: `/dev/nbdN` is live.
struct Attached {
    /// `/dev/nbdN`.
    dev: PathBuf,
    index: u32,
    iface: Interface,
    /// The block size the kernel was given.
    block_size: u64,
    url: String,
    exports: Arc<ExportSet<Lun>>,
    /// The tasks serving the kernel's connections.
    conns: JoinSet<()>,
    /// Tells the connections to stop reading requests.
    stop_tx: watch::Sender<bool>,
    /// The thread in NBD_DO_IT when the ioctl interface connected it.
    ioctl_session: Option<IoctlSession>,
}

impl Live for Attached {
    fn exports(&self) -> &Arc<ExportSet<Lun>> {
        &self.exports
    }

    fn state_key(&self) -> PathBuf {
        self.dev.clone()
    }

    /// A LUN that grew or shrank resizes the device (netlink
    /// NBD_CMD_RECONFIGURE, or NBD_SET_SIZE for a device the ioctls
    /// connected: [`kernel::resize`]); `blockdev --getsize64` and
    /// `resize2fs` see the new size at once. A removed LUN leaves the
    /// device connected with every request failing (ENODEV from rlun, EIO
    /// in the kernel) until `rlun detach`.
    fn follow(&self) -> Option<ChangeHook> {
        let (index, iface, block_size) = (self.index, self.iface, self.block_size);
        let dev = self.dev.clone();
        Some(Box::new(move |c: &ExportChange| match *c {
            ExportChange::Resized { new, .. } => {
                let dev = dev.clone();
                Some(tokio::task::spawn_blocking(move || {
                    match kernel::resize(index, new, block_size, iface) {
                        Ok(()) => info!("{} resized to {new} bytes", dev.display()),
                        Err(e) => warn!(error = %e, "cannot resize {}", dev.display()),
                    }
                }))
            }
            ExportChange::Removed { lun, replaced } => {
                let what = match replaced {
                    false => "removed",
                    true => "put another logical unit under",
                };
                warn!(
                    "the target {what} LUN {lun}: I/O on {} fails until `rlun detach {}`",
                    dev.display(),
                    dev.display()
                );
                None
            }
            ExportChange::Added { .. } => None,
        }))
    }

    fn announce(&self, readiness: &mut Readiness) {
        info!(interface = ?self.iface, "attached {} as {}", self.url, self.dev.display());
        // The device on standard output (with --daemon, from the parent).
        readiness.print(&self.dev.display().to_string());
        readiness.ready(&format!("attached {}", self.dev.display()));
    }

    /// Serve until a signal or until the kernel lets go of the device;
    /// then fsync the device, disconnect it and let the requests in flight
    /// finish.
    async fn serve(&mut self, signals: &mut Signals, readiness: &mut Readiness) {
        let dev = self.dev.clone();
        let conns = &mut self.conns;
        let ended_by_kernel = tokio::select! {
            s = signals.recv() => {
                info!("{}: disconnecting {}", s.name(), dev.display());
                false
            }
            _ = async { while conns.join_next().await.is_some() {} } => true,
        };
        readiness.stopping("disconnecting the device");
        if !ended_by_kernel {
            self.disconnect(signals).await;
        }
        let _ = self.stop_tx.send(true);
        self.exports.shut_down();
        self.conns.shutdown().await;
        if let Some(s) = self.ioctl_session.take() {
            // NBD_DO_IT returns once the kernel has let go of the sockets,
            // which are closed by now.
            match tokio::task::spawn_blocking(move || s.wait()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "NBD_DO_IT ended with an error"),
                Err(e) => warn!(error = %e, "NBD_DO_IT thread failed"),
            }
        }
    }
}

impl Attached {
    /// Stopped by a signal: fsync the device (what the kernel still
    /// buffers for it, written by a process that holds it open, would be
    /// dropped at the disconnect), disconnect it, and wait for the kernel
    /// to close its sockets.
    async fn disconnect(&mut self, signals: &mut Signals) {
        let dev = self.dev.clone();
        let path = dev.clone();
        let flush = tokio::task::spawn_blocking(move || kernel::flush_device(&path, FLUSH_TIMEOUT));
        tokio::select! {
            r = flush => match r {
                Ok(Ok(())) => info!("flushed {}", dev.display()),
                Ok(Err(e)) => warn!(error = %e, "flushing {} before the disconnect failed", dev.display()),
                Err(e) => warn!(error = %e, "flushing {} before the disconnect failed", dev.display()),
            },
            _ = signals.recv() => warn!("second signal: disconnecting without waiting for the flush"),
        }
        let (iface, index) = (self.iface, self.index);
        let disconnect = move || match iface {
            Interface::Netlink => kernel::disconnect(index),
            Interface::Ioctl => kernel::disconnect_ioctl(index),
        };
        if let Err(e) = tokio::task::spawn_blocking(disconnect)
            .await
            .unwrap_or_else(|e| Err(KernelError::Io(std::io::Error::other(e))))
        {
            warn!(error = %e, "disconnecting the device failed");
        }
        let grace = Limits::default().drain_timeout + Duration::from_secs(5);
        let conns = &mut self.conns;
        tokio::select! {
            _ = async { while conns.join_next().await.is_some() {} } => {}
            _ = tokio::time::sleep(grace) => warn!("the kernel did not close its sockets in {grace:?}"),
            _ = signals.recv() => warn!("second signal: closing the connections"),
        }
    }
}

/// `rlun detach /dev/nbdN`: ask the rlun that attached it to stop, wait,
/// and fail when written data did not reach the target.
pub async fn detach(device: &Path, timeout: Duration) -> Result<(), CliError> {
    let ublk_id = crate::ublk::parse_device(device).ok();
    let dev = match ublk_id {
        Some(id) => crate::ublk::block_path(id),
        None => state_key(parse_device(device).map_err(|_| {
            CliError::Usage(format!(
                "{} is not a device rlun attaches (expected /dev/nbd<N> or /dev/ublkb<N>)",
                device.display()
            ))
        })?),
    };
    let state = daemon::state_file(&dev);
    let pid = std::fs::read_to_string(&state)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|p| process_alive(*p));
    let Some(pid) = pid else {
        return match ublk_id {
            Some(id) => super::attach_ublk::detach_orphan(id, &state),
            None => detach_orphan(parse_device(device)?, &state),
        };
    };
    // Flush the device from here too, before rlun is asked to stop (rlun
    // flushes again before it disconnects; the second one finds nothing
    // dirty). A failure is reported, and the detach goes on.
    let flush_wait = timeout.min(FLUSH_TIMEOUT);
    let path = dev.clone();
    match tokio::task::spawn_blocking(move || kernel::flush_device(&path, flush_wait)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("rlun: warning: flushing {} failed: {e}", dev.display()),
        Err(e) => eprintln!("rlun: warning: flushing {} failed: {e}", dev.display()),
    }
    let _waiter = daemon::Waiter::register(&state);
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await
        .map_err(|e| CliError::Other(format!("cannot run kill: {e}")))?;
    if !status.success() {
        return Err(CliError::Other(format!("cannot signal rlun (pid {pid})")));
    }
    match daemon::wait_for_exit(pid, &state, timeout).await {
        daemon::Stopped::Clean => Ok(()),
        daemon::Stopped::Failed(code, message) => Err(CliError::Child {
            message: format!("rlun (pid {pid}) attached as {}: {message}", dev.display()),
            code,
        }),
        daemon::Stopped::Unknown => Err(CliError::Other(format!(
            "rlun (pid {pid}) ended without saying whether written data reached the target"
        ))),
        daemon::Stopped::StillRunning => Err(CliError::Other(format!(
            "rlun (pid {pid}) is still detaching {} after {timeout:?}",
            dev.display()
        ))),
    }
}

/// `rlun detach` of a device with no live rlun behind its pid file: a
/// device left connected by an rlun that was killed (its sockets dead, I/O
/// failing after the dead-connection timeout) is disconnected; a device
/// another program connected, or a free one, is refused.
fn detach_orphan(index: u32, state: &Path) -> Result<(), CliError> {
    let not_ours = |why: &str| {
        CliError::Other(format!(
            "/dev/nbd{index} is not attached by rlun (no live process in {}; {why})",
            state.display()
        ))
    };
    // The task that connected the device (a thread id for netlink).
    let Some(owner) = std::fs::read_to_string(format!("/sys/block/nbd{index}/pid"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    else {
        return Err(not_ours("the device is not connected"));
    };
    if process_alive(owner) {
        return Err(not_ours(&format!("pid {owner} holds it")));
    }
    if !std::fs::read_to_string(state).is_ok_and(|t| !t.trim().is_empty()) {
        return Err(not_ours(&format!(
            "it was connected by pid {owner}, which is gone"
        )));
    }
    kernel::disconnect_any(index).map_err(kernel_error)?;
    let _ = std::fs::remove_file(state);
    eprintln!(
        "rlun: /dev/nbd{index}: its rlun had died (connected by pid {owner}); disconnected the \
         device (writes it had not acknowledged are lost)"
    );
    Ok(())
}

/// What one live rlun process of this user holds, from its pid file.
#[derive(Debug, PartialEq, Eq)]
pub struct Held {
    pub kind: &'static str,
    pub what: String,
    pub pid: u32,
}

/// Undo [`daemon::state_file`]'s escaping of a pid file's name.
fn unescape(name: &str) -> String {
    name.replace("%2F", "/").replace("%25", "%")
}

/// How a pid file's key reads: `attached` (`/dev/nbdN`), `served` (an
/// NBD socket or TCP address) or `mounted` (a mount point).
fn classify(what: &str) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if what.starts_with("/dev/nbd") || what.starts_with("/dev/ublkb") {
        "attached"
    } else if what.starts_with("nbd-")
        || std::fs::metadata(what).is_ok_and(|m| m.file_type().is_socket())
    {
        "served"
    } else {
        "mounted"
    }
}

/// The live rlun processes under `dir`, sorted by what they hold.
pub fn held(dir: &Path) -> Vec<Held> {
    let mut v = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return v;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(key) = name.strip_suffix(".pid") else {
            continue;
        };
        let pid = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|p| process_alive(*p));
        if let Some(pid) = pid {
            let what = unescape(key);
            v.push(Held {
                kind: classify(&what),
                what,
                pid,
            });
        }
    }
    v.sort_by(|a, b| a.what.cmp(&b.what));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_waits_longer_than_a_reconnect_unless_told_otherwise() {
        let r = |s| Duration::from_secs(s);
        assert_eq!(kernel_timeout(None, r(5)), 60);
        assert_eq!(kernel_timeout(None, r(120)), 150);
        assert_eq!(kernel_timeout(None, r(0)), 60);
        assert_eq!(kernel_timeout(Some(r(10)), r(120)), 10);
        assert_eq!(kernel_timeout(Some(r(0)), r(5)), 1);
    }

    #[test]
    fn device_names() {
        assert_eq!(parse_device(Path::new("/dev/nbd3")).unwrap(), 3);
        assert_eq!(parse_device(Path::new("nbd12")).unwrap(), 12);
        assert!(parse_device(Path::new("/dev/sda")).is_err());
        assert!(parse_device(Path::new("/dev/nbd")).is_err());
    }

    #[test]
    fn list_reads_live_pid_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        std::fs::write(dir.path().join("%2Fdev%2Fnbd3.pid"), format!("{me}\n")).unwrap();
        std::fs::write(dir.path().join("%2Fmnt%2Fa%25b.pid"), format!("{me}\n")).unwrap();
        std::fs::write(
            dir.path().join("nbd-127.0.0.1:10809.pid"),
            format!("{me}\n"),
        )
        .unwrap();
        // A dead pid and an exit status are not listed.
        std::fs::write(dir.path().join("%2Fdev%2Fnbd4.pid"), "999999999\n").unwrap();
        std::fs::write(dir.path().join("%2Fdev%2Fnbd5.exit"), "1 0 \n").unwrap();
        let h = held(dir.path());
        let got: Vec<(&str, &str)> = h.iter().map(|h| (h.kind, h.what.as_str())).collect();
        assert_eq!(
            got,
            [
                ("attached", "/dev/nbd3"),
                ("mounted", "/mnt/a%b"),
                ("served", "nbd-127.0.0.1:10809")
            ]
        );
        assert!(h.iter().all(|h| h.pid == me));
    }
}
