//! The process machinery of a command that serves until told to stop
//! (`rlun mount`, `rlun serve`, `rlun attach`), and of the commands that
//! stop one (`rlun umount`, `rlun detach`). The serving lifecycle that puts
//! these pieces in order is the `service` module's; this module knows
//! nothing of sessions, exports or front ends.
//!
//! - **Foreground or `--daemon`.** [`launch`] runs the command in the
//!   foreground, or — with `--daemon` — runs rlun again in the background
//!   (no `fork`: that is unsafe in a threaded process) with [`NOTIFY_ENV`]
//!   set and its standard output on a pipe, and waits for the child's word:
//!   `ready` (the parent exits 0) or `error <message>` (the parent fails
//!   with that message and the child's exit code).
//! - **A deadline for readiness.** The parent waits at most the deadline it
//!   is given (the connect and login timeouts plus [`STARTUP_ALLOWANCE`]);
//!   past it the child is killed and the parent fails. The child never
//!   outlives a parent that gave up: until it is ready it writes a
//!   keepalive line to the pipe every [`KEEPALIVE`], and exits as soon as
//!   that write fails (the parent is gone), or when its own deadline passes.
//! - **Readiness to systemd.** With `$NOTIFY_SOCKET` set (a `Type=notify`
//!   unit), [`Readiness`] also sends `READY=1` (with `MAINPID`) when the
//!   command is really ready, `STOPPING=1` when it starts to stop and
//!   `STATUS=` lines — the `sd_notify(3)` datagram protocol, a few lines
//!   over a Unix datagram socket (path or abstract name).
//! - **Pid files** ([`PidFile`], [`state_file`]): one per thing served
//!   (a mount point, a socket or address, a device), under `/run/rlun/`
//!   for root, so `rlun umount` and `rlun detach` can find the process and
//!   wait for it ([`process_alive`], [`wait_for_exit`]). A command that stops such a process and waits for it
//!   first says so in a `.wait` file next to the pid file ([`Waiter`]);
//!   when the process ends it leaves its exit status next to the pid file
//!   ([`PidFile::finish`], [`read_exit_status`]) only for such a waiter, so
//!   the command that stopped it can fail when written data did not reach
//!   the target. Nothing stays behind when no one waits (a SIGTERM from
//!   systemd or `kill`), and statuses or waiter files left by processes
//!   that are gone are swept when the next pid file is written.
//! - **Signals** ([`Signals`]): SIGINT and SIGTERM ask to stop (the first
//!   one: stop cleanly; a second one: cut off what still hangs on), SIGHUP
//!   is ignored.
//! - **Its own errors** ([`DaemonError`]), each with its exit code
//!   ([`crate::exit::Code`]); the pid file records any error that does.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rlun_iscsi::ErrorKind;
use thiserror::Error;
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{debug, error, warn};

use crate::exit;

/// What can go wrong in the process machinery itself.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// `--daemon` could not start or follow its background child, or the
    /// signal handlers could not be installed.
    #[error("{0}")]
    Failed(String),
    /// The `--log-file` of `--daemon` could not be opened.
    #[error("{what} {}", path.display())]
    LocalFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The background child of `--daemon` failed before it was ready,
    /// with this message and exit code.
    #[error("{message}")]
    Child { message: String, code: i32 },
}

impl DaemonError {
    /// How this failure is classified ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            DaemonError::Failed(_) | DaemonError::Child { .. } => ErrorKind::Failure,
            DaemonError::LocalFile { .. } => ErrorKind::LocalFile,
        }
    }
}

impl exit::Code for DaemonError {
    fn exit_code(&self) -> i32 {
        match self {
            DaemonError::Child { code, .. } => *code,
            other => exit::of_kind(other.kind()),
        }
    }
}

/// Foreground or background: what [`launch`] is asked to do (the
/// command line's `--daemon` and `--log-file`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Run in the background once ready (`--daemon`).
    pub background: bool,
    /// Where the background child's log messages go (default: discarded).
    pub log_file: Option<PathBuf>,
}

/// Set in the environment of the background child of `--daemon`.
pub const NOTIFY_ENV: &str = "RLUN_DAEMON_NOTIFY";
/// How often a background child that is not ready yet proves to itself
/// that its parent still waits.
pub const KEEPALIVE: Duration = Duration::from_secs(1);
/// What the readiness deadline allows beyond the connect and login
/// timeouts: opening the LUNs and setting up the front end.
pub const STARTUP_ALLOWANCE: Duration = Duration::from_secs(10);

/// The readiness deadline for a session with these timeouts.
pub fn ready_deadline(connect_timeout: Duration, login_timeout: Duration) -> Duration {
    connect_timeout + login_timeout + STARTUP_ALLOWANCE
}

/// What [`launch`] decided.
pub enum Launched {
    /// This is the `--daemon` parent and the child is ready: exit 0.
    Detached,
    /// Serve here (foreground, or the background child); report readiness
    /// through this.
    Serve(Readiness),
}

/// Start a serving command: in the foreground, or as a `--daemon` parent
/// that waits for its background child at most `deadline`.
pub async fn launch(opts: &Options, deadline: Duration) -> Result<Launched, DaemonError> {
    let child = std::env::var_os(NOTIFY_ENV).is_some();
    if opts.background && !child {
        detach(opts, deadline).await?;
        return Ok(Launched::Detached);
    }
    Ok(Launched::Serve(Readiness::new(child, deadline)))
}

/// The parent side of `--daemon`: start the child and wait for its word.
async fn detach(opts: &Options, deadline: Duration) -> Result<(), DaemonError> {
    let exe = std::env::current_exe().map_err(|e| {
        DaemonError::Failed(format!("--daemon: cannot find the rlun executable: {e}"))
    })?;
    let stderr = match &opts.log_file {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| DaemonError::LocalFile {
                    what: "cannot open log file",
                    path: path.clone(),
                    source,
                })?,
        ),
        None => Stdio::null(),
    };
    let mut child = tokio::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(NOTIFY_ENV, format!("{}", deadline.as_millis()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Its own process group: a Ctrl-C meant for the shell's foreground
        // job does not reach the daemon.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            DaemonError::Failed(format!(
                "--daemon: cannot start rlun in the background: {e}"
            ))
        })?;
    let mut message = None;
    if let Some(out) = child.stdout.take() {
        let mut lines = tokio::io::BufReader::new(out).lines();
        let wait = async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "ready" {
                    return true;
                }
                if let Some(m) = line.strip_prefix("error ") {
                    message = Some(m.to_string());
                }
                if let Some(m) = line.strip_prefix("print ") {
                    println!("{m}");
                }
            }
            false
        };
        match tokio::time::timeout(deadline, wait).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(_) => {
                // The child would notice our exit, but do not leave it
                // retrying until then.
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(DaemonError::Failed(format!(
                    "--daemon: not ready within {} (the connect and login timeouts plus {}s); \
                     the background rlun was stopped (see --log-file for what it was doing)",
                    humanize(deadline),
                    STARTUP_ALLOWANCE.as_secs()
                )));
            }
        }
    }
    let status = child.wait().await.map_err(|e| {
        DaemonError::Failed(format!("--daemon: waiting for the background rlun: {e}"))
    })?;
    Err(DaemonError::Child {
        message: message.unwrap_or_else(|| {
            format!("the background rlun exited ({status}) before it was ready")
        }),
        code: status.code().unwrap_or(exit::FAILURE).max(1),
    })
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Tells whoever waits — the `--daemon` parent through the pipe, systemd
/// through `$NOTIFY_SOCKET` — how the start went and when stopping begins.
pub struct Readiness {
    /// The pipe to the `--daemon` parent, until ready or failed.
    pipe: Option<Arc<PipeState>>,
    systemd: Option<Arc<SdNotify>>,
}

struct PipeState {
    /// Ready or failed: no more keepalives, and the watchdog stands down.
    done: AtomicBool,
}

impl Readiness {
    fn new(child: bool, deadline: Duration) -> Readiness {
        let pipe = child.then(|| {
            let state = Arc::new(PipeState {
                done: AtomicBool::new(false),
            });
            tokio::spawn(watch_parent(state.clone(), deadline));
            state
        });
        Readiness {
            pipe,
            systemd: SdNotify::from_env().map(Arc::new),
        }
    }

    /// A readiness that tells nobody (tests, and commands that never
    /// detach).
    pub fn silent() -> Readiness {
        Readiness {
            pipe: None,
            systemd: None,
        }
    }

    /// Whether this process is the background child of `--daemon`.
    pub fn is_daemon_child(&self) -> bool {
        self.pipe.is_some()
    }

    /// A line for the user's standard output (e.g. the device `rlun attach`
    /// picked): printed here, or in the `--daemon` child relayed to the
    /// parent, which prints it. Call before [`Readiness::ready`].
    pub fn print(&self, line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = if self
            .pipe
            .as_ref()
            .is_some_and(|p| !p.done.load(Ordering::Acquire))
        {
            writeln!(out, "print {line}")
        } else if self.pipe.is_none() {
            writeln!(out, "{line}")
        } else {
            Ok(())
        };
        let _ = out.flush();
    }

    /// The command is ready to use: tell the parent (which exits 0) and
    /// systemd (`READY=1`, with `status` as `STATUS=`).
    pub fn ready(&mut self, status: &str) {
        if let Some(p) = self.pipe.take() {
            send_line(&p, "ready");
        }
        if let Some(sd) = &self.systemd {
            sd.send(&format!(
                "READY=1\nMAINPID={}\nSTATUS={}",
                std::process::id(),
                one_line(status)
            ));
        }
    }

    /// Something that updates systemd's `STATUS=` line while the command
    /// serves, from another task; `None` without `$NOTIFY_SOCKET`.
    pub fn status_line(&self) -> Option<StatusLine> {
        self.systemd.clone().map(StatusLine)
    }

    /// The command is stopping (systemd: `STOPPING=1`).
    pub fn stopping(&mut self, status: &str) {
        if let Some(sd) = &self.systemd {
            sd.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
        }
    }

    /// How the command ended: before it was ready, an error is relayed to
    /// the parent (`error <message>`); systemd gets a `STATUS=` line.
    pub fn finished<E: std::error::Error>(&mut self, result: &Result<(), E>) {
        if let Err(e) = result {
            let msg = rlun_iscsi::error_chain(e);
            if let Some(p) = self.pipe.take() {
                send_line(&p, &format!("error {}", one_line(&msg)));
            }
            if let Some(sd) = &self.systemd {
                sd.send(&format!("STATUS=failed: {}", one_line(&msg)));
            }
        }
        if let Some(p) = self.pipe.take() {
            p.done.store(true, Ordering::Release);
        }
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        if let Some(p) = self.pipe.take() {
            p.done.store(true, Ordering::Release);
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// Write a line to the pipe (our standard output) and stand the watchdog
/// down: nothing more goes to the pipe after the final word.
fn send_line(p: &PipeState, line: &str) {
    if p.done.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// In the `--daemon` child until it is ready: prove every [`KEEPALIVE`]
/// that the parent still reads the pipe, and give up at the deadline. A
/// child whose parent is gone, or that cannot get ready in time, exits.
async fn watch_parent(p: Arc<PipeState>, deadline: Duration) {
    let give_up = tokio::time::Instant::now() + deadline;
    loop {
        tokio::time::sleep(KEEPALIVE).await;
        if p.done.load(Ordering::Acquire) {
            return;
        }
        if tokio::time::Instant::now() >= give_up {
            error!(
                "not ready within {}; giving up (the parent rlun has failed)",
                humanize(deadline)
            );
            std::process::exit(exit::FAILURE);
        }
        let alive = {
            let mut out = std::io::stdout().lock();
            writeln!(out, "waiting").and_then(|()| out.flush()).is_ok()
        };
        // `ready` may have gone out meanwhile: then the parent left on
        // purpose and a failed write means nothing.
        if !alive && !p.done.load(Ordering::Acquire) {
            error!("the parent rlun stopped waiting for this background process; exiting");
            std::process::exit(exit::FAILURE);
        }
    }
}

/// Updates systemd's `STATUS=` line ([`Readiness::status_line`]).
#[derive(Clone)]
pub struct StatusLine(Arc<SdNotify>);

impl StatusLine {
    /// Say `status` (one line) in `systemctl status`.
    pub fn set(&self, status: &str) {
        self.0.send(&format!("STATUS={}", one_line(status)));
    }
}

/// `sd_notify(3)`: datagrams to the socket named in `$NOTIFY_SOCKET`.
struct SdNotify {
    socket: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl SdNotify {
    fn from_env() -> Option<SdNotify> {
        let name = std::env::var_os("NOTIFY_SOCKET")?;
        let name = name.to_string_lossy().into_owned();
        let addr = match notify_addr(&name) {
            Ok(a) => a,
            Err(e) => {
                warn!(socket = name, error = %e, "NOTIFY_SOCKET is unusable; not notifying systemd");
                return None;
            }
        };
        match UnixDatagram::unbound() {
            Ok(socket) => Some(SdNotify { socket, addr }),
            Err(e) => {
                warn!(error = %e, "cannot create a socket to notify systemd");
                None
            }
        }
    }

    fn send(&self, msg: &str) {
        match self.socket.send_to_addr(msg.as_bytes(), &self.addr) {
            Ok(_) => debug!(msg, "notified systemd"),
            Err(e) => warn!(error = %e, "cannot notify systemd"),
        }
    }
}

/// The address in `$NOTIFY_SOCKET`: a path, or `@name` for Linux's
/// abstract namespace.
fn notify_addr(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt as _;
    if let Some(abs) = name.strip_prefix('@') {
        std::os::unix::net::SocketAddr::from_abstract_name(abs.as_bytes())
    } else if name.starts_with('/') {
        std::os::unix::net::SocketAddr::from_pathname(name)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "neither an absolute path nor an @abstract name",
        ))
    }
}

/// Which stop signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
    /// Only `rlun cp` stops on it (its terminal or ssh session went away);
    /// serving commands ignore SIGHUP.
    Hangup,
}

impl StopSignal {
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Hangup => "SIGHUP",
        }
    }

    /// The signal's number (exit code 128 + it when it ends a command).
    pub fn number(self) -> i32 {
        match self {
            StopSignal::Interrupt => 2,
            StopSignal::Terminate => 15,
            StopSignal::Hangup => 1,
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught. Install them before the command
/// starts to serve: from then on a signal is queued until the serving loop
/// looks, instead of killing rlun before it wrote back.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    /// What SIGHUP does while serving ([`Signals::on_hangup`]).
    on_hangup: Option<Box<dyn Fn() + Send>>,
}

impl Signals {
    pub fn install() -> Result<Signals, DaemonError> {
        let err =
            |e: std::io::Error| DaemonError::Failed(format!("cannot install signal handlers: {e}"));
        Ok(Signals {
            int: signal(SignalKind::interrupt()).map_err(err)?,
            term: signal(SignalKind::terminate()).map_err(err)?,
            hup: signal(SignalKind::hangup()).map_err(err)?,
            on_hangup: None,
        })
    }

    /// Run `action` on each SIGHUP [`Signals::recv`] sees (serving
    /// commands: rescan the target, as `rlun rescan` asks).
    pub fn on_hangup(&mut self, action: impl Fn() + Send + 'static) {
        self.on_hangup = Some(Box::new(action));
    }

    /// The next SIGINT or SIGTERM; SIGHUP runs the action given to
    /// [`Signals::on_hangup`], or is ignored. Cancel-safe.
    pub async fn recv(&mut self) -> StopSignal {
        loop {
            tokio::select! {
                _ = self.int.recv() => return StopSignal::Interrupt,
                _ = self.term.recv() => return StopSignal::Terminate,
                _ = self.hup.recv() => match &self.on_hangup {
                    Some(action) => action(),
                    None => debug!("SIGHUP ignored"),
                },
            }
        }
    }

    /// The next SIGINT, SIGTERM or SIGHUP: for a command that stops when its
    /// terminal goes away (`cp`). Cancel-safe.
    pub async fn recv_with_hangup(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.int.recv() => StopSignal::Interrupt,
            _ = self.term.recv() => StopSignal::Terminate,
            _ = self.hup.recv() => StopSignal::Hangup,
        }
    }
}

/// The user running this process (owner of `/proc/self`).
pub fn current_uid() -> u32 {
    current_ids().0
}

/// The user and group running this process (owner of `/proc/self`).
pub fn current_ids() -> (u32, u32) {
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
}

/// The directory of rlun's pid files: `/run/rlun/` for root, else
/// `$XDG_RUNTIME_DIR/rlun/` or `/tmp/rlun-<uid>/`.
pub fn state_dir() -> PathBuf {
    let uid = current_uid();
    if uid == 0 {
        PathBuf::from("/run/rlun")
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        PathBuf::from(d).join("rlun")
    } else {
        PathBuf::from(format!("/tmp/rlun-{uid}"))
    }
}

/// The pid file of the process serving `what` (a mount point, a socket
/// path or `nbd-ADDR`, a device path): in [`state_dir`], named after the
/// escaped path.
pub fn state_file(what: &Path) -> PathBuf {
    let name: String = what
        .to_string_lossy()
        .chars()
        .map(|c| match c {
            '%' => "%25".to_string(),
            '/' => "%2F".to_string(),
            c => c.to_string(),
        })
        .collect();
    state_dir().join(format!("{name}.pid"))
}

/// Where a process that used the pid file `pid_file` leaves its exit
/// status.
fn exit_file(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("exit")
}

/// What the process of the pid file `pid_file` serves ([`PidFile::describe`]):
/// its pid on the first line, a JSON object on the second.
fn info_file(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("info")
}

/// The description process `pid` left next to `pid_file`
/// ([`PidFile::describe`]), if it is still its own.
pub fn read_info(pid_file: &Path, pid: u32) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(info_file(pid_file)).ok()?;
    let (who, json) = text.split_once('\n')?;
    if who.trim().parse::<u32>().ok()? != pid {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// Where a command waiting for the process of the pid file `pid_file`
/// ([`Waiter`]) leaves its own pid.
fn wait_file(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("wait")
}

/// The pid in a small state file (a pid file, a `.wait` file or the first
/// word of an exit status).
fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether a live process waits for the exit status of the process of
/// `pid_file`.
fn has_live_waiter(pid_file: &Path) -> bool {
    pid_in(&wait_file(pid_file)).is_some_and(process_alive)
}

/// A command (`rlun umount`, `rlun detach`) that is about to stop the
/// process of a pid file and wants its exit status: while this lives, that
/// process leaves its exit status for [`read_exit_status`]. Create it
/// before stopping the process; removed on drop.
pub struct Waiter(PathBuf);

impl Waiter {
    /// Say that this process waits for the process of `pid_file`. `None`
    /// (with a debug log) when the file cannot be written: the exit status
    /// is then not left, and the wait ends as [`Stopped::Clean`].
    pub fn register(pid_file: &Path) -> Option<Waiter> {
        let path = wait_file(pid_file);
        match std::fs::write(&path, format!("{}\n", std::process::id())) {
            Ok(()) => Some(Waiter(path)),
            Err(e) => {
                debug!(path = %path.display(), error = %e, "cannot say that we wait for the exit status");
                None
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if pid_in(&self.0) == Some(std::process::id()) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// The pid file of this process, removed on drop.
pub struct PidFile(PathBuf);

impl PidFile {
    /// Write our pid to `path` (creating its directory, sweeping pid files
    /// of dead processes). `None`, with a warning, when that fails.
    pub fn create(path: PathBuf) -> Option<PidFile> {
        let dir = path.parent()?;
        if let Err(e) = std::fs::create_dir_all(dir) {
            warn!(dir = %dir.display(), error = %e, "cannot create the state directory; `rlun umount` will not wait for write-back");
            return None;
        }
        sweep_stale_pid_files(dir);
        let _ = std::fs::remove_file(exit_file(&path));
        match std::fs::write(&path, format!("{}\n", std::process::id())) {
            Ok(()) => Some(PidFile(path)),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot write the pid file");
                None
            }
        }
    }

    /// Leave the exit status next to the pid file for the command that
    /// waits for this process ([`Waiter`]: `rlun umount`, `rlun detach`),
    /// then remove the pid file. Without a live waiter nothing is left.
    pub fn finish<E: std::error::Error + exit::Code>(self, result: &Result<(), E>) {
        let (code, message) = match result {
            Ok(()) => (exit::OK, String::new()),
            Err(e) => (e.exit_code(), one_line(&rlun_iscsi::error_chain(e))),
        };
        let text = format!("{} {code} {message}\n", std::process::id());
        let exit = exit_file(&self.0);
        // Written before the waiter is looked for, so that a waiter that
        // registers meanwhile finds it; taken back when no one waits.
        if let Err(e) = std::fs::write(&exit, text) {
            debug!(error = %e, "cannot leave the exit status");
        } else if !has_live_waiter(&self.0) {
            let _ = std::fs::remove_file(&exit);
        }
        drop(self);
    }
}

impl PidFile {
    /// Where the pid file is.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Say what this process serves (target, LUNs, URIs), for `rlun list`:
    /// next to the pid file, removed with it.
    pub fn describe(&self, what: &serde_json::Value) {
        self.describer().describe(what);
    }

    /// Something that rewrites the description later, from another task.
    pub fn describer(&self) -> Describer {
        Describer(self.0.clone())
    }
}

/// Rewrites the description of a [`PidFile`] ([`PidFile::describer`]).
#[derive(Clone)]
pub struct Describer(PathBuf);

impl Describer {
    /// Describe this process for `rlun list` and `rlun rescan` (a JSON
    /// object; written whole, then renamed into place, so a reader never
    /// sees half of it).
    pub fn describe(&self, what: &serde_json::Value) {
        let text = format!("{}\n{what}\n", std::process::id());
        let info = info_file(&self.0);
        let tmp = info.with_extension("info.tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &info)) {
            debug!(error = %e, "cannot describe this process for `rlun list`");
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only remove it if it is still ours (a later process may own it).
        let me = std::process::id().to_string();
        if std::fs::read_to_string(&self.0).is_ok_and(|t| t.trim() == me) {
            let _ = std::fs::remove_file(&self.0);
        }
        let info = info_file(&self.0);
        if std::fs::read_to_string(&info)
            .is_ok_and(|t| t.split_whitespace().next() == Some(me.as_str()))
        {
            let _ = std::fs::remove_file(info);
        }
    }
}

/// How an rlun process that was asked to stop ended, as
/// [`wait_for_exit`] saw it.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It left exit code 0, or a later process took the pid file over
    /// (ours finished).
    Clean,
    /// It left a non-zero exit code and its message.
    Failed(i32, String),
    /// It is gone without leaving an exit status.
    Unknown,
    /// It still runs after the timeout.
    StillRunning,
}

/// Wait up to `timeout` for process `pid`, which wrote `pid_file`, to end
/// (`rlun umount` and `rlun detach` after they signalled it), then collect
/// the exit status it left there.
pub async fn wait_for_exit(pid: u32, pid_file: &Path, timeout: Duration) -> Stopped {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let alive = process_alive(pid);
        let file_ours =
            std::fs::read_to_string(pid_file).is_ok_and(|t| t.trim() == pid.to_string());
        if !alive || !file_ours {
            return match read_exit_status(pid_file, pid) {
                Some((0, _)) => Stopped::Clean,
                Some((code, message)) => Stopped::Failed(code, message),
                None if file_ours => Stopped::Unknown,
                None => Stopped::Clean,
            };
        }
        if std::time::Instant::now() >= deadline {
            return Stopped::StillRunning;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The exit status process `pid` left next to `pid_file`
/// ([`PidFile::finish`]): its exit code and message. The file is consumed.
pub fn read_exit_status(pid_file: &Path, pid: u32) -> Option<(i32, String)> {
    let path = exit_file(pid_file);
    let text = std::fs::read_to_string(&path).ok()?;
    let mut parts = text.trim_end_matches('\n').splitn(3, ' ');
    let who: u32 = parts.next()?.parse().ok()?;
    if who != pid {
        return None;
    }
    let code: i32 = parts.next()?.parse().ok()?;
    let message = parts.next().unwrap_or("").to_string();
    let _ = std::fs::remove_file(&path);
    Some((code, message))
}

/// How long an exit status nobody collected is kept.
const EXIT_STATUS_KEPT: Duration = Duration::from_secs(3600);

/// Remove pid files of rlun processes that died without cleaning up
/// (SIGKILL) and their control sockets and descriptions, `.wait` files of waiters that are gone, and exit statuses
/// nobody collects: their process is gone and no live waiter wants them,
/// or they are older than [`EXIT_STATUS_KEPT`].
pub fn sweep_stale_pid_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let gone = |pid: Option<u32>| pid.is_none_or(|p| !Path::new(&format!("/proc/{p}")).exists());
    for e in entries.flatten() {
        let path = e.path();
        match path.extension().and_then(|x| x.to_str()) {
            Some("exit") => {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > EXIT_STATUS_KEPT);
                let unwanted = gone(pid_in(&path)) && !has_live_waiter(&path.with_extension("pid"));
                if old || unwanted {
                    let _ = std::fs::remove_file(&path);
                }
            }
            Some("pid") | Some("wait") | Some("info") if gone(pid_in(&path)) => {
                let _ = std::fs::remove_file(&path);
            }
            // A control socket holds no pid: its process is its pid file's.
            Some("sock") if gone(pid_in(&path.with_extension("pid"))) => {
                let _ = std::fs::remove_file(&path);
            }
            _ => {}
        }
    }
}

/// Whether process `pid` still runs (a zombie does not).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which ends with the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }

    #[test]
    fn a_failed_background_child_keeps_its_exit_code() {
        use exit::Code as _;
        let child = DaemonError::Child {
            message: "login refused".into(),
            code: exit::AUTH,
        };
        let log = DaemonError::LocalFile {
            what: "cannot open log file",
            path: PathBuf::from("/nope/log"),
            source: std::io::ErrorKind::NotFound.into(),
        };

        assert_eq!(child.exit_code(), exit::AUTH);
        assert_eq!(log.exit_code(), exit::LOCAL_FILE);
        assert_eq!(DaemonError::Failed("x".into()).exit_code(), exit::FAILURE);
    }

    #[test]
    fn state_files_are_named_after_the_escaped_path() {
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
        let fresh_exit = dir.path().join("fresh.exit");
        let old_exit = dir.path().join("old.exit");
        std::fs::write(&fresh_exit, "1 0 \n").unwrap();
        std::fs::write(&old_exit, "1 0 \n").unwrap();
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(&old_exit)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
        std::fs::write(&dead, "4294967295\n").unwrap();
        std::fs::write(&live, format!("{}\n", std::process::id())).unwrap();
        std::fs::write(&junk, "not a pid").unwrap();
        std::fs::write(&other, "1").unwrap();

        sweep_stale_pid_files(dir.path());

        assert!(!dead.exists() && !junk.exists() && !old_exit.exists());
        assert!(live.exists() && other.exists() && fresh_exit.exists());
    }

    #[test]
    fn exit_status_is_left_for_the_waiter_and_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pid");
        let pid_file = PidFile::create(path.clone()).expect("pid file");
        let me = std::process::id();
        let waiter = Waiter::register(&path).expect("wait file");

        pid_file.finish(&Err(DaemonError::Failed("data lost\nreally".into())));

        assert!(!path.exists(), "pid file removed");
        assert_eq!(read_exit_status(&path, me + 1), None, "someone else's");
        assert_eq!(
            read_exit_status(&path, me),
            Some((exit::FAILURE, "data lost really".to_string()))
        );
        assert_eq!(read_exit_status(&path, me), None, "consumed");
        drop(waiter);
        assert!(!wait_file(&path).exists(), "wait file removed");
    }

    #[test]
    fn without_a_waiter_no_exit_status_is_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pid");
        let pid_file = PidFile::create(path.clone()).expect("pid file");

        pid_file.finish(&Err(DaemonError::Failed("data lost".into())));

        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn statuses_and_waits_of_processes_that_are_gone_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let me = std::process::id();
        // Writer gone, nobody waits: swept. Writer gone, a live waiter:
        // kept for it. A waiter that is gone: swept.
        std::fs::write(p("orphan.exit"), "4294967295 0 \n").unwrap();
        std::fs::write(p("wanted.exit"), "4294967295 1 lost\n").unwrap();
        std::fs::write(p("wanted.wait"), format!("{me}\n")).unwrap();
        std::fs::write(p("gone.wait"), "4294967295\n").unwrap();

        sweep_stale_pid_files(dir.path());

        assert!(!p("orphan.exit").exists() && !p("gone.wait").exists());
        assert!(p("wanted.exit").exists() && p("wanted.wait").exists());
    }

    #[test]
    fn a_new_pid_file_clears_an_old_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pid");
        PidFile::create(path.clone())
            .unwrap()
            .finish(&Ok::<(), DaemonError>(()));

        let again = PidFile::create(path.clone()).unwrap();

        assert_eq!(read_exit_status(&path, std::process::id()), None);
        drop(again);
        assert!(!path.exists());
    }

    #[test]
    fn notify_socket_names_are_paths_or_abstract() {
        use std::os::linux::net::SocketAddrExt as _;
        let path = notify_addr("/run/systemd/notify").unwrap();
        let abs = notify_addr("@sd-notify-1").unwrap();

        assert_eq!(path.as_pathname(), Some(Path::new("/run/systemd/notify")));
        assert_eq!(abs.as_abstract_name(), Some(&b"sd-notify-1"[..]));
        assert!(notify_addr("relative").is_err());
    }

    #[tokio::test]
    async fn readiness_sends_ready_and_stopping_to_the_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock_path = dir.path().join("notify");
        let server = UnixDatagram::bind(&sock_path).unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut r = Readiness {
            pipe: None,
            systemd: Some(Arc::new(SdNotify {
                socket: UnixDatagram::unbound().unwrap(),
                addr: notify_addr(&sock_path.to_string_lossy()).unwrap(),
            })),
        };
        let mut buf = [0u8; 512];

        r.ready("mounted\non /mnt");
        let n = server.recv(&mut buf).unwrap();
        let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
        r.stopping("unmounting");
        let n = server.recv(&mut buf).unwrap();
        let stopping = String::from_utf8_lossy(&buf[..n]).into_owned();

        assert_eq!(
            ready,
            format!(
                "READY=1\nMAINPID={}\nSTATUS=mounted on /mnt",
                std::process::id()
            )
        );
        assert_eq!(stopping, "STOPPING=1\nSTATUS=unmounting");
    }

    #[test]
    fn deadline_is_the_timeouts_plus_the_allowance() {
        assert_eq!(
            ready_deadline(Duration::from_secs(5), Duration::from_secs(15)),
            Duration::from_secs(20) + STARTUP_ALLOWANCE
        );
    }
}
