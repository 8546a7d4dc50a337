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
//! `--daemon` does not fork (that is unsafe in a threaded process): it runs
//! itself again in the background with [`NOTIFY_ENV`] set and its standard
//! output on a pipe, on which the child writes `ready` once the mount
//! answers, or `error <message>` before it exits. The parent relays that
//! and exits 0, or with the child's exit code.
//!
//! While it serves, rlun keeps its pid in a state file named after the
//! mount point ([`state_file`]); `rlun umount` unmounts and then waits for
//! that process to finish writing back and remove the file.

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{debug, info, warn};

use super::{human_size, CliError, Ctx};
use crate::cli::{CacheChoice, ConnectOpts, MountOpts, OnOff};
use crate::client::{ClientError, Lun, Target};
use crate::device::DeviceConfig;
use crate::fuse::{find_mount, is_rlun_mount, FsOptions, FuseFs, LunFs, MountEntry};

/// Set in the environment of the background child of `--daemon`.
pub const NOTIFY_ENV: &str = "RLUN_MOUNT_NOTIFY";
/// The FUSE device.
const FUSE_DEVICE: &str = "/dev/fuse";

/// `rlun mount`.
pub async fn run(
    ctx: &Ctx,
    target: &str,
    mountpoint: &Path,
    o: &MountOpts,
    conn: &ConnectOpts,
) -> Result<(), CliError> {
    if o.daemon && std::env::var_os(NOTIFY_ENV).is_none() {
        return daemonize(o).await;
    }
    let mut notify = Notify {
        enabled: std::env::var_os(NOTIFY_ENV).is_some(),
    };
    let result = serve(ctx, target, mountpoint, o, conn, &mut notify).await;
    if let Err(e) = &result {
        notify.failed(&crate::session::error_chain(e));
    }
    result
}

/// The readiness pipe of a `--daemon` child (its standard output).
struct Notify {
    enabled: bool,
}

impl Notify {
    fn send(&mut self, line: &str) {
        if self.enabled {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
    fn ready(&mut self) {
        self.send("ready");
        // Nothing more goes to the pipe: the parent is gone after this.
        self.enabled = false;
    }
    fn failed(&mut self, message: &str) {
        self.send(&format!("error {}", message.replace('\n', " ")));
        self.enabled = false;
    }
}

/// The parent side of `--daemon`: start the child and wait for its word.
async fn daemonize(o: &MountOpts) -> Result<(), CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Other(format!("--daemon: cannot find the rlun executable: {e}")))?;
    let stderr = match &o.log_file {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| CliError::LocalFile {
                    what: "cannot open log file",
                    path: path.clone(),
                    source,
                })?,
        ),
        None => Stdio::null(),
    };
    let mut child = tokio::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(NOTIFY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Its own process group: a Ctrl-C meant for the shell's foreground
        // job does not reach the daemon.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            CliError::Other(format!(
                "--daemon: cannot start rlun in the background: {e}"
            ))
        })?;
    let mut message = None;
    if let Some(out) = child.stdout.take() {
        let mut lines = tokio::io::BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "ready" {
                return Ok(());
            }
            if let Some(m) = line.strip_prefix("error ") {
                message = Some(m.to_string());
            }
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| CliError::Other(format!("--daemon: waiting for the background rlun: {e}")))?;
    Err(CliError::Child {
        message: message.unwrap_or_else(|| {
            format!("the background rlun exited ({status}) before the mount was ready")
        }),
        code: status.code().unwrap_or(crate::cli::exit::FAILURE).max(1),
    })
}

/// The user and group running this process (owner of `/proc/self`).
fn current_ids() -> (u32, u32) {
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
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
    std::fs::canonicalize(mp).map_err(local)
}

/// `/dev/fuse` must be a character device we can open for reading and
/// writing.
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
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(FUSE_DEVICE)
        .map_err(|e| fail(e.to_string()))?;
    Ok(())
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

/// Where a serving rlun keeps its pid: `/run/rlun/` for root, else
/// `$XDG_RUNTIME_DIR/rlun/` or `/tmp/rlun-<uid>/`; one file per mount
/// point, named after its path.
pub fn state_file(mountpoint: &Path) -> PathBuf {
    let (uid, _) = current_ids();
    let dir = if uid == 0 {
        PathBuf::from("/run/rlun")
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        PathBuf::from(d).join("rlun")
    } else {
        PathBuf::from(format!("/tmp/rlun-{uid}"))
    };
    let name: String = mountpoint
        .to_string_lossy()
        .chars()
        .map(|c| match c {
            '%' => "%25".to_string(),
            '/' => "%2F".to_string(),
            c => c.to_string(),
        })
        .collect();
    dir.join(format!("{name}.pid"))
}

/// The pid file of this process, removed on drop.
struct PidFile(PathBuf);

impl PidFile {
    fn create(path: PathBuf) -> Option<PidFile> {
        let dir = path.parent()?;
        if let Err(e) = std::fs::create_dir_all(dir) {
            warn!(dir = %dir.display(), error = %e, "cannot create the state directory; `rlun umount` will not wait for write-back");
            return None;
        }
        sweep_stale_pid_files(dir);
        match std::fs::write(&path, format!("{}\n", std::process::id())) {
            Ok(()) => Some(PidFile(path)),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot write the pid file");
                None
            }
        }
    }
}

/// Remove pid files of rlun processes that died without cleaning up
/// (SIGKILL).
fn sweep_stale_pid_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "pid") {
            continue;
        }
        let pid = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if pid.is_none_or(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only remove it if it is still ours (a later mount may own it).
        if std::fs::read_to_string(&self.0)
            .is_ok_and(|t| t.trim() == std::process::id().to_string())
        {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn mountinfo() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// Log in, open the LUNs to show, mount, serve until told to stop.
async fn serve(
    ctx: &Ctx,
    arg: &str,
    mountpoint: &Path,
    o: &MountOpts,
    conn: &ConnectOpts,
    notify: &mut Notify,
) -> Result<(), CliError> {
    // Local problems first: they need no network.
    let (url, entry) = ctx.resolve_url(arg)?;
    let Some(iqn) = url.target.clone() else {
        return Err(CliError::Usage(format!(
            "{arg} names a portal, not a target: mount one target (iscsi://host/<iqn>) or one \
             LUN (iscsi://host/<iqn>/<lun>); `rlun discover {arg}` lists the targets"
        )));
    };
    let mp = check_mountpoint(mountpoint)?;
    check_fuse_device()?;
    let (my_uid, my_gid) = current_ids();
    let mut auto_unmount = !o.no_auto_unmount;
    if auto_unmount && my_uid != 0 && !o.allow_other && !user_allow_other() {
        warn!("auto-unmount needs user_allow_other in /etc/fuse.conf for non-root users; a killed rlun will leave a dead mount (fusermount3 -u cleans it)");
        auto_unmount = false;
    }
    if (auto_unmount || my_uid != 0) && find_program(&["fusermount3", "fusermount"]).is_none() {
        return Err(CliError::Other(
            "fusermount3 is not installed (Debian/Ubuntu: apt-get install fuse3)".into(),
        ));
    }
    let cache = o.cache.unwrap_or(if o.direct_io {
        CacheChoice::WriteThrough
    } else {
        CacheChoice::None
    });
    let dev_cfg = DeviceConfig {
        mode: cache.mode(),
        cache_size: o.cache_size,
        readahead: o.readahead == OnOff::On,
        writeback_delay: o.writeback_delay,
        stats_interval: o.stats_interval,
        ..DeviceConfig::default()
    };

    let cfg = ctx.session_config(&url, entry.as_deref(), conn)?;
    let target = Target::login(cfg).await?;
    let luns = match open_luns(&target, url.lun).await {
        Ok(l) if l.is_empty() => Err(CliError::Other(format!(
            "target {iqn} has no disk LUNs to mount"
        ))),
        other => other,
    };
    let luns = match luns {
        Ok(l) => l,
        Err(e) => {
            let _ = target.logout().await;
            return Err(e);
        }
    };
    if !o.allow_other && (o.uid.is_some_and(|u| u != my_uid) || o.gid.is_some_and(|g| g != my_gid))
    {
        warn!("--uid/--gid set the files' owner, but only with --allow-other can other users use the mount");
    }
    let fs_opts = FsOptions {
        uid: o.uid.unwrap_or(my_uid),
        gid: o.gid.unwrap_or(my_gid),
        mode: o.mode,
        read_only: o.read_only,
        direct_io: o.direct_io,
    };
    let listing: Vec<(u64, u64, bool)> = luns
        .iter()
        .map(|(n, l)| (*n, l.capacity_bytes(), l.write_protected()))
        .collect();
    let fs = match LunFs::new(luns, &dev_cfg, fs_opts) {
        Ok(fs) => Arc::new(fs),
        Err(e) => {
            let _ = target.logout().await;
            return Err(CliError::Usage(crate::session::error_chain(&e)));
        }
    };

    let fsname = match url.lun {
        Some(n) => format!("rlun:{iqn}/{n}"),
        None => format!("rlun:{iqn}"),
    };
    let mut options = vec![
        MountOption::FSName(fsname),
        MountOption::Subtype("rlun".into()),
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::NoAtime,
    ];
    if fs.all_read_only() {
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

    // From here on a signal must not kill rlun before it unmounted and
    // wrote back: tokio queues it until the serving loop below looks.
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut sighup = signal(SignalKind::hangup()).map_err(signal_error)?;
    let adapter = FuseFs::new(fs.clone(), tokio::runtime::Handle::current());
    let mp2 = mp.clone();
    let session =
        tokio::task::spawn_blocking(move || fuser::Session::new(adapter, &mp2, &config)).await;
    let session = match session {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let _ = target.logout().await;
            return Err(CliError::Other(format!(
                "cannot mount on {}: {}",
                mp.display(),
                e.to_string().trim()
            )));
        }
        Err(e) => {
            let _ = target.logout().await;
            return Err(CliError::Other(format!("mounting failed: {e}")));
        }
    };
    let conn_entry = find_mount(&mountinfo(), &mp.to_string_lossy());
    if let Some(m) = &conn_entry {
        set_kernel_readahead(m, o.readahead == OnOff::On);
    }
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("rlun-fuse".into())
        .spawn(move || {
            let r = session.run();
            let _ = done_tx.send(r);
        })
        .map_err(|e| CliError::Other(format!("cannot start the FUSE thread: {e}")))?;

    let pid_file = PidFile::create(state_file(&mp));
    notify.ready();
    {
        let files: Vec<String> = listing
            .iter()
            .map(|(n, size, ro)| {
                format!(
                    "{} ({}{})",
                    crate::fuse::lun_file_name(*n),
                    human_size(*size),
                    if *ro || o.read_only {
                        ", read-only"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        let line = format!("mounted {iqn} on {}: {}", mp.display(), files.join(", "));
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

    // Serve until a signal or until the mount goes away.
    let mut session_result = None;
    loop {
        tokio::select! {
            r = &mut done_rx => { session_result = Some(r); break; }
            _ = sigint.recv() => { info!("SIGINT: unmounting {}", mp.display()); break; }
            _ = sigterm.recv() => { info!("SIGTERM: unmounting {}", mp.display()); break; }
            _ = sighup.recv() => { debug!("SIGHUP ignored"); }
        }
    }
    let mut forced = false;
    if session_result.is_none() {
        unmount_self(&mp).await;
        loop {
            tokio::select! {
                r = &mut done_rx => { session_result = Some(r); break; }
                _ = sigint.recv() => { forced = true; break; }
                _ = sigterm.recv() => { forced = true; break; }
                _ = sighup.recv() => {}
            }
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
        fs.shut_down();
        drop(thread);
    } else {
        let _ = thread.join();
    }
    if let Some(Ok(Err(e))) = session_result {
        warn!(error = %e, "the FUSE session ended with an error");
    }

    // The kernel sends nothing more: write back and log out.
    let dirty = fs.dirty_bytes();
    if dirty > 0 {
        info!("writing back {} of cached data", human_size(dirty));
    }
    let flushed = fs.flush_all().await;
    drop(fs);
    if let Err(e) = target.logout().await {
        debug!(error = %e, "logout failed");
    }
    drop(pid_file);
    flushed.map_err(|e| {
        CliError::Other(format!(
            "unmounted, but cached data could not be written to the target: {}",
            crate::session::error_chain(&e)
        ))
    })
}

pub(crate) fn signal_error(e: std::io::Error) -> CliError {
    CliError::Other(format!("cannot install signal handlers: {e}"))
}

/// Open the LUN `only`, or every disk LUN of the target.
pub(crate) async fn open_luns(
    target: &Target,
    only: Option<u64>,
) -> Result<Vec<(u64, Lun)>, CliError> {
    if let Some(n) = only {
        return Ok(vec![(n, target.open_lun(n).await?)]);
    }
    let mut luns = Vec::new();
    for n in target.report_luns().await? {
        match target.open_lun(n).await {
            Ok(l) => luns.push((n, l)),
            Err(ClientError::NotADisk { device_type, .. }) => {
                debug!(lun = n, device_type, "not a disk; not shown");
            }
            Err(ClientError::LunNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(luns)
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

/// The kernel reads ahead 128 KiB on a FUSE file by default; a 1 MiB
/// window (one request of `MAX_IO`) keeps several large reads in flight and
/// roughly doubles sequential reads. Needs write access to
/// `/sys/class/bdi/<major>:<minor>/read_ahead_kb` (root).
fn set_kernel_readahead(m: &MountEntry, on: bool) {
    let kib = if on { crate::fuse::MAX_IO / 1024 } else { 0 };
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
    run_unmount_program(&path, lazy)
        .await
        .map_err(|e| CliError::Other(format!("cannot unmount {}: {e}", path.display())))?;
    let Some(pid) = pid else {
        return Ok(());
    };
    // Wait for the rlun process to write back and log out.
    let deadline = Instant::now() + timeout;
    loop {
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        let file_ours = std::fs::read_to_string(&state).is_ok_and(|t| t.trim() == pid.to_string());
        if !alive || !file_ours {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CliError::Other(format!(
                "{} is unmounted, but rlun (pid {pid}) is still writing back after {:?}",
                path.display(),
                timeout
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_are_named_after_the_escaped_mount_point() {
        let a = state_file(Path::new("/mnt/a%b/c"));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();

        assert_eq!(name, "%2Fmnt%2Fa%25b%2Fc.pid");
        assert_ne!(
            state_file(Path::new("/mnt/a-b")),
            state_file(Path::new("/mnt/a/b"))
        );
    }

    #[test]
    fn stale_pid_files_are_swept_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join("dead.pid");
        let live = dir.path().join("live.pid");
        let junk = dir.path().join("junk.pid");
        let other = dir.path().join("notes.txt");
        std::fs::write(&dead, "4294967295\n").unwrap();
        std::fs::write(&live, format!("{}\n", std::process::id())).unwrap();
        std::fs::write(&junk, "not a pid").unwrap();
        std::fs::write(&other, "1").unwrap();

        sweep_stale_pid_files(dir.path());

        assert!(!dead.exists() && !junk.exists());
        assert!(live.exists() && other.exists());
    }

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
        assert!(crate::session::error_chain(&not_dir).contains("not a directory"));
        assert_eq!(
            check_mountpoint(dir.path()).unwrap(),
            dir.path().canonicalize().unwrap()
        );
    }
}
