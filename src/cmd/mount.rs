//! `rlun mount` and `rlun umount`: a target's LUNs as files through FUSE
//! (see [`crate::fuse`] for the filesystem itself).
//!
//! `mount` checks the mount point and `/dev/fuse`, logs in, opens every
//! disk LUN (or the one the URL names), mounts through `fuser` (which runs
//! `fusermount3`; with auto-unmount, fusermount3 stays behind and unmounts
//! if rlun dies) and then waits in the foreground:
//!
//! - SIGINT/SIGTERM: unmount (lazily if files are still open, serving them
//!   until they are closed; a second signal refuses their I/O and exits,
//!   which ends the FUSE connection), write back cached data, log out.
//! - the mount disappears (`rlun umount`, `fusermount3 -u`, `umount`):
//!   write back, log out, exit 0.
//!
//! The serving lifecycle — foreground or `--daemon`, login, readiness (to
//! the `--daemon` parent and to systemd), the pid file `rlun umount` waits
//! on, signals, write-back and logout at the end, and whether data was
//! lost — is [`crate::service`]'s; the rules of the LUN files are
//! [`crate::export`]'s. This module is the FUSE front end (`Fuse`):
//! checking the mount point and `/dev/fuse`, mounting through `fuser`,
//! unmounting (lazily when files are still open), the kernel's read-ahead
//! window, and `rlun umount`.
//!
//! `rlun umount` unmounts, waits for the rlun process serving the mount
//! to finish writing back and logging out, and fails with its message when
//! written data did not reach the target.

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};
use tracing::{debug, info, warn};

use super::context::device_config;
use super::context::Ctx;
use super::error::CliError;
use crate::cli::{CacheChoice, CacheOpts, ConnectOpts, DaemonOpts, MountOpts, OnOff};
use crate::client::Lun;
use crate::daemon::{self, current_ids, Readiness, Signals};
use crate::export::ExportSet;
use crate::fuse::{
    find_mount, is_rlun_mount, spawn_watcher, FsOptions, FuseFs, FuseStats, LunFs, MountEntry,
    Watcher,
};
use crate::service::{self, human_size, ChangeHook, ExportChange, FrontEnd, Live, Plan};

pub use crate::daemon::state_file;

/// The FUSE device.
const FUSE_DEVICE: &str = "/dev/fuse";

/// `rlun mount`.
pub async fn run(
    ctx: &Ctx,
    target: &str,
    mountpoint: &Path,
    o: &MountOpts,
    d: &DaemonOpts,
    cache: &CacheOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    service::launch(
        &d.options(),
        ctx.ready_deadline(target, conn),
        async |readiness: &mut Readiness| {
            mount(ctx, target, mountpoint, (o, d), cache, conn, readiness).await
        },
    )
    .await
}

/// The mount point as an absolute, canonical directory path.
fn check_mountpoint(mp: &Path) -> Result<PathBuf, CliError> {
    let local = |source| CliError::LocalFile {
        what: "cannot mount on",
        path: mp.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(mp).map_err(local)?;
    if !meta.is_dir() {
        return Err(local(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    let canon = std::fs::canonicalize(mp).map_err(local)?;
    // The kernel would stack a second mount on top (as sshfs and nbdfuse
    // let it), hiding the first, and its pid file would be taken over so
    // `rlun umount` could no longer wait for the first rlun: refuse.
    if let Some(m) = find_mount(&mountinfo(), &canon.to_string_lossy()) {
        let how = if is_rlun_mount(&m) {
            format!("rlun umount {}", canon.display())
        } else {
            format!("umount {}", canon.display())
        };
        return Err(local(std::io::Error::new(
            std::io::ErrorKind::ResourceBusy,
            format!(
                "it is already a mount point ({} from {}); unmount it first (`{how}`) or pick \
                 another directory",
                m.fstype, m.source
            ),
        )));
    }
    Ok(canon)
}

/// `/dev/fuse` must be a character device we can open for reading and
/// writing. fusermount3 opens it with the caller's permissions too (it
/// drops to the user's file system ids first), so a user who cannot open
/// it cannot mount through FUSE at all: say so and name the fix.
fn check_fuse_device() -> Result<(), CliError> {
    let fail = |why: String| {
        CliError::Other(format!(
            "the FUSE device {FUSE_DEVICE} is unusable: {why} (is the fuse module loaded? in a \
             container, pass the device in, e.g. --device /dev/fuse)"
        ))
    };
    let meta = std::fs::metadata(FUSE_DEVICE).map_err(|e| fail(e.to_string()))?;
    if !meta.file_type().is_char_device() {
        return Err(fail("it is not a character device".into()));
    }
    // Linux's misc device 10:229 (Documentation/admin-guide/devices.txt).
    let (major, minor) = dev_major_minor(meta.rdev());
    if (major, minor) != (10, 229) {
        return Err(fail(format!(
            "it is device {major}:{minor}, not the FUSE device 10:229"
        )));
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(FUSE_DEVICE)
    {
        Ok(_) => Ok(()),
        // EACCES: the mode; EPERM would be a device cgroup (a container).
        Err(e) if e.raw_os_error() == Some(libc::EACCES) && current_ids().0 != 0 => {
            Err(CliError::Other(device_denied_message(&meta)))
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Why a user cannot mount when `/dev/fuse` is closed to them, and the fix.
fn device_denied_message(meta: &std::fs::Metadata) -> String {
    let (uid, _) = current_ids();
    format!(
        "the FUSE device {FUSE_DEVICE} (mode {:04o}, owner {}:{}) is closed to uid {uid}, and \
         fusermount3 opens it with the user's permissions too, so FUSE mounts without root are \
         impossible on this machine. Root can open it to users: `chmod 0666 {FUSE_DEVICE}` \
         (what udev's rules do on Debian and Ubuntu; without udev, as in containers and CI \
         runners, it stays 0600) — or mount as root",
        meta.mode() & 0o7777,
        meta.uid(),
        meta.gid()
    )
}

/// Major and minor of a Linux `dev_t` (glibc's `gnu_dev_major/minor`).
fn dev_major_minor(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & 0xffff_f000);
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// The first of `names` found in `$PATH` (or `/bin`, `/sbin`…).
fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(
        ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .map(PathBuf::from),
    );
    let dirs: Vec<PathBuf> = dirs.collect();
    names.iter().find_map(|n| {
        dirs.iter()
            .map(|d| d.join(n))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
    })
}

/// Non-root users may ask for allow_other/allow_root (which auto_unmount
/// needs) only when /etc/fuse.conf says `user_allow_other`.
fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|t| {
        t.lines()
            .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
    })
}

fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// Check what needs no network, then serve the LUNs as files until told
/// to stop ([`service::serve`] with the [`Fuse`] front end).
async fn mount(
    ctx: &Ctx,
    arg: &str,
    mountpoint: &Path,
    (o, d): (&MountOpts, &DaemonOpts),
    cache: &CacheOpts,
    conn: &ConnectOpts,
    readiness: &mut Readiness,
) -> Result<(), CliError> {
    // Local problems first: they need no network.
    let (url, entry) = ctx.resolve_target_url(arg)?;
    let Some(iqn) = url.target.clone() else {
        return Err(CliError::Usage(format!(
            "{arg} names a portal, not a target: mount one target (iscsi://host/<iqn>) or one \
             LUN (iscsi://host/<iqn>/<lun>); `rlun discover {arg}` lists the targets"
        )));
    };
    let mp = check_mountpoint(mountpoint)?;
    check_fuse_device()?;
    let cleanup = check_unmount_helper(o)?;
    let settings = ctx.settings(&url, entry.as_deref(), &cache.settings());
    let mode = settings.cache.unwrap_or(if o.direct_io {
        CacheChoice::WriteThrough
    } else {
        CacheChoice::None
    });
    let plan = Plan {
        session: ctx.session_config(&url, entry.as_deref(), conn)?,
        target: iqn.clone(),
        lun: url.lun,
        device: device_config(&settings, mode.mode()),
        read_only: o.read_only,
        metrics: ctx.metrics(entry.as_deref(), d.metrics()),
    };
    let fsname = match url.lun {
        Some(n) => format!("rlun:{iqn}/{n}"),
        None => format!("rlun:{iqn}"),
    };
    let front = Fuse {
        mp,
        iqn,
        fsname,
        options: o,
        cleanup,
        kernel_readahead: settings.readahead == OnOff::On,
    };
    service::serve(plan, front, readiness).await
}

/// The FUSE front end of [`service::serve`]: each export a file in a
/// mount.
struct Fuse<'a> {
    /// The mount point (absolute, canonical).
    mp: PathBuf,
    iqn: String,
    fsname: String,
    options: &'a MountOpts,
    cleanup: Cleanup,
    /// Widen the kernel's read-ahead window on the mount.
    kernel_readahead: bool,
}

impl FrontEnd for Fuse<'_> {
    type Error = CliError;
    type Live = Mounted;
    const STOPPED: &'static str = "unmounted";
    const KIND: &'static str = "mounted";
    const PURPOSE: &'static str = "";

    async fn start(self, exports: Arc<ExportSet<Lun>>) -> Result<Mounted, CliError> {
        let o = self.options;
        let fs = Arc::new(LunFs::from_exports(exports, fs_options(o)));
        let config = fuse_config(
            o,
            self.fsname.clone(),
            self.cleanup.fusermount_helper,
            fs.all_read_only(),
        );
        // The watcher first: a kill between the mount and its start would
        // leave a dead mount. Started before there is a mount, it finds
        // none when rlun dies early and simply ends.
        let watcher = if self.cleanup.watcher {
            let unmounter = find_program(&["fusermount3", "fusermount"]);
            match spawn_watcher(&self.mp, &self.fsname, unmounter.as_deref()) {
                Ok(w) => Some(w),
                Err(e) => {
                    warn!(error = %e, "cannot start the unmount watcher; a killed rlun may leave a dead mount (fusermount3 -u -z cleans it)");
                    None
                }
            }
        } else {
            None
        };
        let adapter = FuseFs::new(fs.clone(), tokio::runtime::Handle::current());
        let fuse_stats = adapter.stats();
        let mp = self.mp.clone();
        let session =
            tokio::task::spawn_blocking(move || fuser::Session::new(adapter, &mp, &config)).await;
        let session = match session {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(CliError::Other(format!(
                    "cannot mount on {}: {}",
                    self.mp.display(),
                    e.to_string().trim()
                )))
            }
            Err(e) => return Err(CliError::Other(format!("mounting failed: {e}"))),
        };
        if let Some(m) = find_mount(&mountinfo(), &self.mp.to_string_lossy()) {
            set_kernel_readahead(&m, self.kernel_readahead);
        }
        let notifier = session.notifier();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("rlun-fuse".into())
            .spawn(move || {
                let r = session.run();
                let _ = done_tx.send(r);
            })
            .map_err(|e| CliError::Other(format!("cannot start the FUSE thread: {e}")))?;
        Ok(Mounted {
            fs,
            notifier,
            mp: self.mp,
            iqn: self.iqn,
            fuse_stats,
            thread: Some(thread),
            done_rx,
            _watcher: watcher,
        })
    }
}

/// What the kernel is told about a file that changed.
#[derive(Clone, Copy)]
enum Inval {
    Resized { shrunk: bool },
    Removed,
    Added,
}

fn notify(n: &fuser::Notifier, ino: u64, lun: u64, what: Inval) {
    use fuser::INodeNo;
    let name = crate::fuse::lun_file_name(lun);
    let r = match what {
        // Attributes only (offset < 0), or the attributes and every page.
        Inval::Resized { shrunk: false } => n.inval_inode(INodeNo(ino), -1, 0),
        Inval::Resized { shrunk: true } => n.inval_inode(INodeNo(ino), 0, 0),
        Inval::Removed => n
            .inval_inode(INodeNo(ino), 0, 0)
            .and_then(|()| n.delete(INodeNo::ROOT, INodeNo(ino), name.as_ref())),
        Inval::Added => n.inval_entry(INodeNo::ROOT, name.as_ref()),
    };
    if let Err(e) = r {
        debug!(lun, error = %e, "FUSE cache notification not taken");
    }
}

/// The result of the FUSE session's thread (`fuser::Session::run`).
type SessionEnd = std::io::Result<()>;

/// A mounted [`Fuse`] front end.
struct Mounted {
    fs: Arc<LunFs<Lun>>,
    /// Tells the kernel what it caches of a file that changed.
    notifier: fuser::Notifier,
    mp: PathBuf,
    iqn: String,
    fuse_stats: Arc<FuseStats>,
    /// The thread that runs the FUSE session (`None` once joined or left).
    thread: Option<std::thread::JoinHandle<()>>,
    /// Fires when the FUSE session ends (the mount went away).
    done_rx: tokio::sync::oneshot::Receiver<SessionEnd>,
    /// Unmounts the mount if rlun exits without unmounting it.
    _watcher: Option<Watcher>,
}

impl Live for Mounted {
    fn exports(&self) -> &Arc<ExportSet<Lun>> {
        self.fs.export_set()
    }

    /// The directory follows the export set by itself (1 s entry and
    /// attribute timeouts); this tells the kernel at once what it caches:
    /// a resized file's attributes (and, when it shrank, its pages), a
    /// removed file's entry and pages (so reads of it reach rlun and fail
    /// with ENODEV instead of being served from the page cache).
    fn follow(&self) -> Option<ChangeHook> {
        let fs = self.fs.clone();
        let notifier = self.notifier.clone();
        Some(Box::new(move |c: &ExportChange| {
            let (lun, what) = match *c {
                ExportChange::Resized { lun, old, new } => {
                    (lun, Inval::Resized { shrunk: new < old })
                }
                ExportChange::Removed { lun, .. } => (lun, Inval::Removed),
                ExportChange::Added { lun } => (lun, Inval::Added),
            };
            let ino = fs.ino_of(lun)?;
            let notifier = notifier.clone();
            // The kernel may wait on pages a pending read holds: never on
            // a runtime thread.
            Some(tokio::task::spawn_blocking(move || {
                notify(&notifier, ino, lun, what)
            }))
        }))
    }

    fn state_key(&self) -> PathBuf {
        self.mp.clone()
    }

    fn announce(&self, readiness: &mut Readiness) {
        announce(readiness, &self.fs, &self.iqn, &self.mp);
    }

    /// Serve until a signal or until the mount goes away; then unmount
    /// (lazily if files are still open) and wait for the kernel to let go.
    async fn serve(&mut self, signals: &mut Signals, readiness: &mut Readiness) {
        let mp = &self.mp;
        let mut session_result = None;
        tokio::select! {
            r = &mut self.done_rx => session_result = Some(r),
            s = signals.recv() => info!("{}: unmounting {}", s.name(), mp.display()),
        }
        readiness.stopping(&format!("unmounting {}", mp.display()));
        let mut forced = false;
        if session_result.is_none() {
            unmount_self(mp).await;
            tokio::select! {
                r = &mut self.done_rx => session_result = Some(r),
                _ = signals.recv() => forced = true,
            }
        }
        if forced {
            // Refuse further I/O, write back, log out and exit: closing
            // /dev/fuse with the process ends the connection, and files still
            // open fail from then on. The FUSE thread is left to the exit.
            warn!(
                "second signal: files still open under {} fail from now on",
                mp.display()
            );
            self.fs.shut_down();
            drop(self.thread.take());
        } else if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(Ok(Err(e))) = session_result {
            warn!(error = %e, "the FUSE session ended with an error");
        }
        info!(
            "FUSE requests: {} (largest and most in flight at once: the kernel's read-ahead \
             and max_pages at work)",
            self.fuse_stats.counters()
        );
        // The kernel sends nothing more: the lifecycle writes back and logs out.
    }

    fn close(self) {
        drop(self.fs);
        let d = crate::stats::DataPathStats::now();
        info!(
            copied_bytes = d.copied_bytes,
            cache_copied_bytes = d.cache_copied_bytes,
            data_path_registrations = d.data_path_registrations,
            pool_registrations = d.pool_registrations,
            "data path at unmount (copied_bytes: SCSI data copied between the network and the callers' buffers)"
        );
    }
}

/// How a mount is cleaned up when rlun dies without unmounting.
#[derive(Clone, Copy, Debug)]
struct Cleanup {
    /// fusermount3's auto_unmount helper (root, or user_allow_other).
    fusermount_helper: bool,
    /// rlun's own unmount watcher ([`crate::fuse::spawn_watcher`]).
    watcher: bool,
}

/// How a killed rlun's mount gets removed (see [`Cleanup`]); fails when
/// fusermount3 is needed and missing or cannot work for this user.
fn check_unmount_helper(o: &MountOpts) -> Result<Cleanup, CliError> {
    let (my_uid, _) = current_ids();
    let wanted = !o.no_auto_unmount;
    let mut helper = wanted;
    if helper && my_uid != 0 && !o.allow_other && !user_allow_other() {
        // fuser asks fusermount3 for allow_root along with auto_unmount,
        // which needs user_allow_other; the watcher alone does the job.
        debug!("no user_allow_other in /etc/fuse.conf: rlun's own watcher unmounts if rlun dies");
        helper = false;
    }
    if my_uid != 0 && o.allow_other && !user_allow_other() {
        return Err(CliError::Other(
            "--allow-other needs `user_allow_other` in /etc/fuse.conf for users other than \
             root (fusermount3 refuses it otherwise): add that line as root, or drop \
             --allow-other"
                .into(),
        ));
    }
    let fusermount = find_program(&["fusermount3", "fusermount"]);
    if (helper || my_uid != 0) && fusermount.is_none() {
        return Err(CliError::Other(
            "fusermount3 is not installed (Debian/Ubuntu: apt-get install fuse3)".into(),
        ));
    }
    if my_uid != 0 {
        if let Some(p) = &fusermount {
            check_setuid_root(p)?;
        }
    }
    Ok(Cleanup {
        fusermount_helper: helper,
        watcher: wanted,
    })
}

/// A user mounts through fusermount3 only if it is setuid root.
fn check_setuid_root(program: &Path) -> Result<(), CliError> {
    let Ok(meta) = std::fs::metadata(program) else {
        return Ok(());
    };
    if meta.uid() == 0 && meta.mode() & 0o4000 != 0 {
        return Ok(());
    }
    Err(CliError::Other(format!(
        "{} is not setuid root (mode {:04o}, owner uid {}), so it cannot mount for users \
         other than root: `chmod 4755 {0}` as root (Debian and Ubuntu install it so), or mount \
         as root",
        program.display(),
        meta.mode() & 0o7777,
        meta.uid()
    )))
}

/// Owner, permissions and caching of the files.
fn fs_options(o: &MountOpts) -> FsOptions {
    let (my_uid, my_gid) = current_ids();
    if !o.allow_other && (o.uid.is_some_and(|u| u != my_uid) || o.gid.is_some_and(|g| g != my_gid))
    {
        warn!("--uid/--gid set the files' owner, but only with --allow-other can other users use the mount");
    }
    FsOptions {
        uid: o.uid.unwrap_or(my_uid),
        gid: o.gid.unwrap_or(my_gid),
        mode: o.mode,
        read_only: o.read_only,
        direct_io: o.direct_io,
        writeback_cache: o.writeback_cache == OnOff::On,
    }
}

/// fuser's mount options, access control and threads.
fn fuse_config(o: &MountOpts, fsname: String, auto_unmount: bool, read_only: bool) -> Config {
    let mut options = vec![
        MountOption::FSName(fsname),
        MountOption::Subtype("rlun".into()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::NoAtime,
    ];
    if read_only {
        options.push(MountOption::RO);
    }
    if auto_unmount {
        options.push(MountOption::AutoUnmount);
    }
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = if o.allow_other {
        SessionACL::All
    } else if auto_unmount {
        // fusermount3 needs allow_other for auto_unmount; fuser then
        // still refuses everyone but the owner and root.
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(o.fuse_threads as usize);
    config.clone_fd = o.fuse_threads > 1;
    config
}

/// Report readiness (to the `--daemon` parent and systemd) and say what
/// is mounted: on the terminal, or in the log.
fn announce<B: crate::export::LunBackend>(
    readiness: &mut Readiness,
    fs: &LunFs<B>,
    iqn: &str,
    mp: &Path,
) {
    let files: Vec<String> = fs
        .files()
        .iter()
        .map(|f| {
            format!(
                "{} ({}{})",
                f.name(),
                human_size(f.size()),
                if f.read_only() { ", read-only" } else { "" }
            )
        })
        .collect();
    let line = format!("mounted {iqn} on {}: {}", mp.display(), files.join(", "));
    readiness.ready(&line);
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let _ = writeln!(
            std::io::stderr(),
            "{line}\nCtrl-C or `rlun umount {}` unmounts",
            mp.display()
        );
    } else {
        info!("{line}");
    }
}

/// Unmount our own mount: normally, or lazily when files are still open.
/// (fuser's own unmounter would only close fusermount3's auto-unmount
/// socket, and fusermount3 leaves a mount whose server is alive alone.)
async fn unmount_self(mp: &Path) {
    if let Err(e) = run_unmount_program(mp, false).await {
        warn!(
            "cannot unmount {} ({e}); detaching it: open files keep working until they are closed (signal again to cut them off)",
            mp.display()
        );
        if let Err(e) = run_unmount_program(mp, true).await {
            warn!("lazy unmount failed: {e}");
        }
    }
}

/// The kernel reads ahead 128 KiB on a FUSE file by default; a window of
/// [`crate::fuse::KERNEL_READAHEAD`] (8 requests of `MAX_IO`, all sent at
/// once) keeps that many large reads in flight. Needs write access to
/// `/sys/class/bdi/<major>:<minor>/read_ahead_kb` (root).
fn set_kernel_readahead(m: &MountEntry, on: bool) {
    let kib = if on {
        crate::fuse::KERNEL_READAHEAD / 1024
    } else {
        0
    };
    let path = format!("/sys/class/bdi/{}:{}/read_ahead_kb", m.major, m.minor);
    match std::fs::write(&path, kib.to_string()) {
        Ok(()) => debug!(path, kib, "kernel read-ahead set"),
        Err(e) => debug!(path, error = %e, "cannot set the kernel read-ahead; keeping its default"),
    }
}

/// `fusermount3 -u [-z] MP`, or `umount [-l] MP` without fusermount3.
async fn run_unmount_program(mp: &Path, lazy: bool) -> Result<(), String> {
    let mut cmd = match find_program(&["fusermount3", "fusermount"]) {
        Some(p) => {
            let mut c = tokio::process::Command::new(p);
            c.arg("-u");
            if lazy {
                c.arg("-z");
            }
            c
        }
        None => {
            let mut c = tokio::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c
        }
    };
    cmd.arg("--").arg(mp).stdin(Stdio::null());
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("cannot run the unmount program: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The processes that keep `mp` busy, as `PID (COMMAND, cwd|root|file)`
/// (at most eight; only those this user may inspect), for the hint of a
/// failed unmount.
fn holders(mp: &Path) -> Vec<String> {
    let inside = |p: &Path| p.starts_with(mp);
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let dir = e.path();
        let how = if std::fs::read_link(dir.join("cwd")).is_ok_and(|p| inside(&p)) {
            Some("cwd")
        } else if std::fs::read_link(dir.join("root"))
            .is_ok_and(|p| inside(&p) && p != Path::new("/"))
        {
            Some("root")
        } else {
            std::fs::read_dir(dir.join("fd")).ok().and_then(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| inside(&p)))
                    .then_some("open file")
            })
        };
        if let Some(how) = how {
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            found.push(format!("{pid} ({}, {how})", comm.trim()));
            if found.len() == 8 {
                break;
            }
        }
    }
    found
}

/// `rlun umount`.
pub async fn umount(mountpoint: &Path, lazy: bool, timeout: Duration) -> Result<(), CliError> {
    // A dead mount cannot be canonicalized (ENOTCONN): look it up by its
    // absolute path first.
    let abs = std::path::absolute(mountpoint).map_err(|source| CliError::LocalFile {
        what: "cannot unmount",
        path: mountpoint.to_path_buf(),
        source,
    })?;
    let info = mountinfo();
    let (path, entry) = match find_mount(&info, &abs.to_string_lossy()) {
        Some(m) => (abs, m),
        None => {
            let canon = std::fs::canonicalize(&abs).unwrap_or(abs.clone());
            match find_mount(&info, &canon.to_string_lossy()) {
                Some(m) => (canon, m),
                None => {
                    return Err(CliError::Other(format!(
                        "{} is not mounted",
                        mountpoint.display()
                    )))
                }
            }
        }
    };
    if !is_rlun_mount(&entry) {
        return Err(CliError::Other(format!(
            "{} is not an rlun mount ({} from {})",
            path.display(),
            entry.fstype,
            entry.source
        )));
    }
    let state = state_file(&path);
    let pid = std::fs::read_to_string(&state)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    // Say that we wait before the process can end, so that it leaves its
    // exit status for us (and only for us).
    let _waiter = pid.and_then(|_| daemon::Waiter::register(&state));
    run_unmount_program(&path, lazy).await.map_err(|e| {
        let mut message = format!("cannot unmount {}: {e}", path.display());
        if e.to_string().contains("busy") {
            let users = holders(&path);
            if !users.is_empty() {
                message.push_str(&format!("; in use by {}", users.join(", ")));
            }
            message.push_str(&format!(
                "; close what uses it, or `rlun umount --lazy {}` detaches it now and \
                 writes back once the last file is closed",
                path.display()
            ));
        }
        CliError::Other(message)
    })?;
    let Some(pid) = pid else {
        return Ok(());
    };
    // Wait for the rlun process to write back and log out, then collect
    // the exit status it left: fail when written data was lost.
    match daemon::wait_for_exit(pid, &state, timeout).await {
        daemon::Stopped::Clean => Ok(()),
        daemon::Stopped::Failed(code, message) => Err(CliError::Child {
            message: format!("rlun (pid {pid}) serving {}: {message}", path.display()),
            code,
        }),
        daemon::Stopped::Unknown => Err(CliError::Other(format!(
            "{} is unmounted, but rlun (pid {pid}) ended without saying whether written \
             data reached the target",
            path.display()
        ))),
        // A lazy unmount leaves open files working: rlun waits for them.
        daemon::Stopped::StillRunning if lazy => Err(CliError::Other(format!(
            "{} is detached (lazy), but files under it are still open after {:?}: rlun \
             (pid {pid}) serves them until they are closed, then writes back and logs out",
            path.display(),
            timeout
        ))),
        daemon::Stopped::StillRunning => Err(CliError::Other(format!(
            "{} is unmounted, but rlun (pid {pid}) is still writing back after {:?}",
            path.display(),
            timeout
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_splits_into_major_and_minor() {
        // glibc's makedev: major bits 8..20 and 44..64, minor 0..8 and 20..44.
        let makedev = |ma: u64, mi: u64| {
            ((ma & 0xfff) << 8) | ((ma & !0xfff) << 32) | (mi & 0xff) | ((mi & !0xff) << 12)
        };

        assert_eq!(dev_major_minor(0x0ae5), (10, 229));
        assert_eq!(dev_major_minor(makedev(1, 3)), (1, 3));
        assert_eq!(dev_major_minor(makedev(259, 300)), (259, 300));
        assert_eq!(dev_major_minor(makedev(5000, 70000)), (5000, 70000));
    }

    #[test]
    fn mountpoint_that_is_missing_or_a_file_is_a_local_file_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();

        let missing = check_mountpoint(&dir.path().join("nope")).unwrap_err();
        let not_dir = check_mountpoint(&file).unwrap_err();

        assert_eq!(missing.exit_code(), crate::cli::exit::LOCAL_FILE);
        assert!(rlun_iscsi::error_chain(&not_dir).contains("not a directory"));
        assert_eq!(
            check_mountpoint(dir.path()).unwrap(),
            dir.path().canonicalize().unwrap()
        );
    }
}
