//! A private `tgtd` (Linux SCSI target framework daemon) per test.
//!
//! How several daemons coexist: `tgtd -C N` names its management socket
//! `/var/run/tgtd/socket.N` and takes a lock on `socket.N.lock` (a second
//! daemon with the same N exits at once with "another tgtd is using ...");
//! `tgtadm -C N` talks to that socket. The portal is a plain TCP listener.
//!
//! The harness reserves one number K per daemon and uses it both as the
//! control port N and as the portal TCP port. K comes from 10000..=32767:
//! tgtd accepts control ports up to 32767, and that range is below Linux's
//! ephemeral range (32768..), so outgoing connections never take the portal
//! port while a daemon is being restarted. The reservation is an abstract
//! Unix socket `@rlun-test-tgtd-K` held by the [`Tgtd`] value: the kernel
//! frees it when the value is dropped or its process dies, so it is
//! collision-free across test threads and test binaries, and leaves nothing
//! behind after a crash. Before K is used, the harness checks that
//! 127.0.0.1:K can be bound; after tgtd starts, it checks that tgtd itself
//! owns the listening socket (via `/proc`), and tries another K otherwise.
//!
//! tgtd is started through `setpriv --pdeathsig KILL`, so it dies with the
//! thread that started it even if the test process is killed. Keep a [`Tgtd`]
//! on the thread that created it (a test function's own thread).

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixSocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::{HarnessError, Result};
use super::process::{describe, try_run_with_timeout};

/// Size of a `--bstype null` LUN: tgtd's null backing store is fixed at 1 TiB
/// of zeros (reads return zeros, writes are discarded).
pub const NULL_LUN_SIZE: u64 = 1 << 40;

const SLOT_FIRST: u16 = 10_000;
const SLOT_LAST: u16 = 32_767;
const START_ATTEMPTS: usize = 8;
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
const TGTADM_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);

/// A reserved number used as both the control port and the portal port.
#[derive(Debug)]
struct Slot {
    port: u16,
    _reservation: UnixListener,
}

/// One LUN of a target, as given to the builder (kept to replay on restart).
#[derive(Debug, Clone)]
struct LunSpec {
    lun: u32,
    /// `None` for the null backing store.
    path: Option<PathBuf>,
    block_size: Option<u32>,
    readonly: bool,
}

/// One target definition, kept to replay it after a restart.
#[derive(Debug, Clone)]
struct TargetSpec {
    tid: u32,
    iqn: String,
    luns: Vec<LunSpec>,
    chap: Option<(String, String)>,
    mutual_chap: Option<(String, String)>,
    header_digest: bool,
    data_digest: bool,
}

/// A running tgtd with its own portal (`127.0.0.1:port`) and control port.
/// Dropping it SIGKILLs the daemon and reaps it.
#[derive(Debug)]
pub struct Tgtd {
    slot: Slot,
    child: Option<Child>,
    dir: tempfile::TempDir,
    starts: u32,
    targets: Vec<TargetSpec>,
    accounts: BTreeMap<String, String>,
}

impl Tgtd {
    /// Start a fresh tgtd on a free loopback portal with no targets, and wait
    /// until `tgtadm` answers and the portal listens.
    pub fn start() -> Result<Tgtd> {
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            let mut tgtd = Tgtd {
                slot: reserve_slot()?,
                child: None,
                dir: tempfile::Builder::new()
                    .prefix("rlun-tgtd-")
                    .tempdir()
                    .map_err(|e| HarnessError::io("creating a temporary directory for tgtd", e))?,
                starts: 0,
                targets: Vec::new(),
                accounts: BTreeMap::new(),
            };
            match tgtd.spawn_daemon(READY_TIMEOUT) {
                Ok(()) => return Ok(tgtd),
                // Someone else's daemon or listener got the number first.
                Err(e @ HarnessError::SlotTaken { .. }) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(HarnessError::NoFreeSlot {
            tries: START_ATTEMPTS,
        }))
    }

    /// The portal as `127.0.0.1:PORT`.
    pub fn portal(&self) -> String {
        format!("127.0.0.1:{}", self.slot.port)
    }

    /// The portal TCP port.
    pub fn port(&self) -> u16 {
        self.slot.port
    }

    /// The tgtd control port (`tgtd -C N`, `tgtadm -C N`).
    pub fn control_port(&self) -> u16 {
        self.slot.port
    }

    /// The daemon's process id (changes on restart); `None` while killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `iscsi://127.0.0.1:PORT/IQN/LUN`.
    pub fn url(&self, iqn: &str, lun: u32) -> String {
        format!("iscsi://{}/{iqn}/{lun}", self.portal())
    }

    /// `iscsi://USER%SECRET@127.0.0.1:PORT/IQN/LUN` (libiscsi's CHAP form).
    pub fn url_with_chap(&self, user: &str, secret: &str, iqn: &str, lun: u32) -> String {
        format!("iscsi://{user}%{secret}@{}/{iqn}/{lun}", self.portal())
    }

    /// Everything tgtd printed so far (all starts), for failure messages.
    pub fn log(&self) -> String {
        let mut all = String::new();
        for n in 1..=self.starts {
            if let Ok(text) = fs::read_to_string(self.log_path(n)) {
                all.push_str(&text);
            }
        }
        all
    }

    /// Begin defining target `iqn`; nothing reaches tgtd until
    /// [`TargetBuilder::create`].
    pub fn add_target(&mut self, iqn: &str) -> TargetBuilder<'_> {
        let tid = self.targets.len() as u32 + 1;
        TargetBuilder {
            tgtd: self,
            spec: TargetSpec {
                tid,
                iqn: iqn.to_string(),
                luns: Vec::new(),
                chap: None,
                mutual_chap: None,
                header_digest: false,
                data_digest: false,
            },
        }
    }

    /// Run `tgtadm -C N --lld iscsi ARGS...` and return its stdout.
    pub fn tgtadm(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("tgtadm");
        cmd.arg("-C")
            .arg(self.slot.port.to_string())
            .args(["--lld", "iscsi"])
            .args(args);
        let out = try_run_with_timeout(&mut cmd, TGTADM_TIMEOUT)?;
        if !out.status.success() {
            return Err(HarnessError::CommandFailed {
                command: describe(&cmd),
                status: out.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// SIGKILL the daemon and reap it (the portal stops answering).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the daemon again on the same portal and control port and replay
    /// every account and target defined so far (same tids).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        let deadline = Instant::now() + RESTART_TIMEOUT;
        // The old daemon's socket may linger briefly; keep trying until the deadline.
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.spawn_daemon(remaining.min(READY_TIMEOUT)) {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(HarnessError::SlotTaken { .. }) => thread::sleep(Duration::from_millis(200)),
                Err(e) => return Err(e),
            }
        }
        for (user, password) in self.accounts.clone() {
            self.adm(
                "--op new --mode account",
                &["--user", &user, "--password", &password],
            )?;
        }
        for spec in self.targets.clone() {
            self.apply(&spec)?;
        }
        Ok(())
    }

    /// SIGKILL the daemon, then [`restart`](Self::restart) it: a target crash
    /// and recovery as an initiator sees it.
    pub fn kill_and_restart(&mut self) -> Result<()> {
        self.kill();
        self.restart()
    }

    /// SIGSTOP the daemon: connections stay open but nothing is answered.
    pub fn pause(&self) -> Result<()> {
        self.signal("-STOP")?;
        // SIGSTOP takes effect asynchronously: wait until the kernel reports
        // the process stopped, so a test never races a still-running daemon.
        let pid = self.pid().unwrap_or(0);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next());
            if matches!(state, Some("T") | Some("t")) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(HarnessError::Invalid(format!(
            "tgtd {pid} did not stop after SIGSTOP"
        )))
    }

    /// SIGCONT a paused daemon.
    pub fn resume(&self) -> Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| HarnessError::Invalid("tgtd is not running".into()))?;
        let mut cmd = Command::new("kill");
        cmd.arg(sig).arg(pid.to_string());
        let out = try_run_with_timeout(&mut cmd, TGTADM_TIMEOUT)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(HarnessError::CommandFailed {
                command: describe(&cmd),
                status: out.status.to_string(),
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.dir.path().join(format!("tgtd.{start}.log"))
    }

    /// Start tgtd for this slot and wait until it is ready and owns the portal.
    fn spawn_daemon(&mut self, timeout: Duration) -> Result<()> {
        self.starts += 1;
        let log_path = self.log_path(self.starts);
        let log = File::create(&log_path)
            .map_err(|e| HarnessError::io(format!("creating {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the tgtd log handle", e))?;
        let port = self.slot.port.to_string();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "tgtd", "-f", "-C", &port, "--iscsi"])
            .arg(format!("portal=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: describe(&cmd),
            source,
        })?;
        let pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + timeout;
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Ok(None)) => None,
                Some(Err(e)) => Some(e.to_string()),
                None => Some("not started".into()),
            };
            if let Some(status) = exited {
                let log = self.failed(&log_path);
                if log.contains("another tgtd is using") {
                    return Err(HarnessError::SlotTaken {
                        port: self.slot.port,
                    });
                }
                return Err(self.not_ready(format!("tgtd exited ({status})"), log));
            }
            // tgtd binds its portal before it serves tgtadm, so once tgtadm
            // answers, the portal is either ours or was taken by someone else.
            let answers = self
                .tgtadm(&["--op", "show", "--mode", "sys"])
                .is_ok_and(|s| s.contains("State: ready"));
            if answers {
                if owns_listener(pid, self.slot.port) {
                    return Ok(());
                }
                self.failed(&log_path);
                return Err(HarnessError::SlotTaken {
                    port: self.slot.port,
                });
            }
            if Instant::now() >= deadline {
                let log = self.failed(&log_path);
                return Err(self.not_ready(format!("tgtadm got no answer in {timeout:?}"), log));
            }
            thread::sleep(POLL);
        }
    }

    /// Kill a daemon that failed to come up; return its log.
    fn failed(&mut self, log_path: &Path) -> String {
        self.kill();
        fs::read_to_string(log_path).unwrap_or_default()
    }

    fn not_ready(&self, reason: String, log: String) -> HarnessError {
        HarnessError::TgtdNotReady {
            control_port: self.slot.port,
            reason,
            log,
        }
    }

    fn ensure_account(&mut self, user: &str, password: &str) -> Result<()> {
        match self.accounts.get(user) {
            Some(existing) if existing == password => Ok(()),
            Some(_) => Err(HarnessError::Invalid(format!(
                "tgtd account {user:?} already exists with another password (accounts are per daemon)"
            ))),
            None => {
                self.adm("--op new --mode account", &["--user", user, "--password", password])?;
                self.accounts.insert(user.to_string(), password.to_string());
                Ok(())
            }
        }
    }

    /// `tgtadm` with whitespace-separated `words` followed by `extra`
    /// arguments (those may contain anything, e.g. paths and secrets).
    fn adm(&self, words: &str, extra: &[&str]) -> Result<String> {
        let mut args: Vec<&str> = words.split_whitespace().collect();
        args.extend_from_slice(extra);
        self.tgtadm(&args)
    }

    /// Issue the tgtadm commands for one target (accounts must exist).
    fn apply(&self, spec: &TargetSpec) -> Result<()> {
        let t = spec.tid;
        self.adm(
            &format!("--op new --mode target --tid {t}"),
            &["-T", &spec.iqn],
        )?;
        for lun in &spec.luns {
            let n = lun.lun;
            let new_lun = format!("--op new --mode logicalunit --tid {t} --lun {n}");
            let block_size = lun.block_size.map(|bs| bs.to_string());
            let mut extra = Vec::new();
            if let Some(bs) = &block_size {
                extra.extend(["--blocksize", bs.as_str()]);
            }
            match &lun.path {
                Some(path) => {
                    let path = path.to_string_lossy();
                    extra.extend(["-b", &*path]);
                    self.adm(&new_lun, &extra)?;
                }
                None => {
                    extra.extend(["--bstype", "null", "-b", "/dev/null"]);
                    self.adm(&new_lun, &extra)?;
                }
            }
            if lun.readonly {
                // tgtadm refuses `--params readonly=1` at creation; it is an update.
                self.adm(
                    &format!(
                        "--op update --mode logicalunit --tid {t} --lun {n} --params readonly=1"
                    ),
                    &[],
                )?;
            }
        }
        if let Some((user, _)) = &spec.chap {
            self.adm(
                &format!("--op bind --mode account --tid {t}"),
                &["--user", user],
            )?;
        }
        if let Some((user, _)) = &spec.mutual_chap {
            self.adm(
                &format!("--op bind --mode account --tid {t} --outgoing"),
                &["--user", user],
            )?;
        }
        // The value is the list the target accepts. With only CRC32C, tgtd
        // answers CRC32C to an offer of "CRC32C,None" or "None,CRC32C", but
        // (leniently) answers None to an offer of only "None".
        if spec.header_digest {
            self.adm(
                &format!("--op update --mode target --tid {t} -n HeaderDigest -v CRC32C"),
                &[],
            )?;
        }
        if spec.data_digest {
            self.adm(
                &format!("--op update --mode target --tid {t} -n DataDigest -v CRC32C"),
                &[],
            )?;
        }
        self.adm(&format!("--op bind --mode target --tid {t} -I ALL"), &[])?;
        Ok(())
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            eprintln!(
                "--- tgtd on {} (control port {}) log ---\n{}",
                self.portal(),
                self.slot.port,
                self.log()
            );
        }
    }
}

/// Builder for one target; see [`Tgtd::add_target`].
#[derive(Debug)]
pub struct TargetBuilder<'a> {
    tgtd: &'a mut Tgtd,
    spec: TargetSpec,
}

impl TargetBuilder<'_> {
    /// A LUN backed by the file at `path` with logical blocks of `block_size`
    /// bytes (512 or 4096). LUN 0 is tgtd's own controller LUN: use 1 and up.
    pub fn lun_file(mut self, lun: u32, path: impl AsRef<Path>, block_size: u32) -> Self {
        self.spec.luns.push(LunSpec {
            lun,
            path: Some(path.as_ref().to_path_buf()),
            block_size: Some(block_size),
            readonly: false,
        });
        self
    }

    /// A LUN with tgtd's null backing store: [`NULL_LUN_SIZE`] bytes of zeros,
    /// 512-byte blocks; writes succeed and are discarded. tgtd cannot size it.
    pub fn lun_null(mut self, lun: u32) -> Self {
        self.spec.luns.push(LunSpec {
            lun,
            path: None,
            block_size: None,
            readonly: false,
        });
        self
    }

    /// Like [`lun_file`](Self::lun_file) but write-protected (`readonly=1`):
    /// writes fail with DATA PROTECT and MODE SENSE reports WP.
    pub fn lun_readonly(mut self, lun: u32, path: impl AsRef<Path>, block_size: u32) -> Self {
        self.spec.luns.push(LunSpec {
            lun,
            path: Some(path.as_ref().to_path_buf()),
            block_size: Some(block_size),
            readonly: true,
        });
        self
    }

    /// Require one-way CHAP: the initiator must answer as `user`/`secret`
    /// (a tgtd "incoming" account).
    pub fn chap(mut self, user: &str, secret: &str) -> Self {
        self.spec.chap = Some((user.to_string(), secret.to_string()));
        self
    }

    /// Mutual CHAP: the target proves itself as `user`/`secret` (a tgtd
    /// "outgoing" account). Use together with [`chap`](Self::chap).
    pub fn mutual_chap(mut self, user: &str, secret: &str) -> Self {
        self.spec.mutual_chap = Some((user.to_string(), secret.to_string()));
        self
    }

    /// Make the target choose CRC32C HeaderDigest and/or DataDigest
    /// (RFC 7143 §13.1) whenever the initiator offers it, even after None;
    /// `false` leaves tgtd's default `None`. tgtd still answers `None` (does
    /// not refuse the login) when the initiator offers only `None`.
    pub fn digests(mut self, header: bool, data: bool) -> Self {
        self.spec.header_digest = header;
        self.spec.data_digest = data;
        self
    }

    /// Create the target in tgtd, open to all initiators (`-I ALL`), and
    /// return its tid.
    pub fn create(self) -> Result<u32> {
        let TargetBuilder { tgtd, spec } = self;
        for lun in &spec.luns {
            if lun.lun == 0 {
                return Err(HarnessError::Invalid(
                    "LUN 0 is tgtd's controller LUN; number data LUNs from 1".into(),
                ));
            }
            if let Some(bs) = lun.block_size {
                if bs != 512 && bs != 4096 {
                    return Err(HarnessError::Invalid(format!(
                        "block size {bs}: use 512 or 4096"
                    )));
                }
            }
        }
        for (user, secret) in spec.chap.iter().chain(spec.mutual_chap.iter()) {
            tgtd.ensure_account(user, secret)?;
        }
        tgtd.apply(&spec)?;
        let tid = spec.tid;
        tgtd.targets.push(spec);
        Ok(tid)
    }
}

/// A random u64 (std's per-process random hash keys; no extra crate).
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now ^ u128::from(std::process::id()));
    h.finish()
}

/// Reserve a number K whose abstract socket name is free and whose TCP port
/// on 127.0.0.1 can be bound right now.
fn reserve_slot() -> Result<Slot> {
    let span = u64::from(SLOT_LAST - SLOT_FIRST) + 1;
    let start = random_u64() % span;
    let tries = 4096usize;
    for i in 0..tries as u64 {
        let port = SLOT_FIRST + ((start + i) % span) as u16;
        let name = format!("rlun-test-tgtd-{port}");
        let Ok(addr) = UnixSocketAddr::from_abstract_name(name.as_bytes()) else {
            continue;
        };
        let Ok(reservation) = UnixListener::bind_addr(&addr) else {
            continue; // another harness holds it
        };
        if TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue; // some other program listens there
        }
        return Ok(Slot {
            port,
            _reservation: reservation,
        });
    }
    Err(HarnessError::NoFreeSlot { tries })
}

/// Whether process `pid` owns a socket listening on 127.0.0.1:`port`
/// (`/proc/net/tcp` gives the listener's inode, `/proc/PID/fd` its owner).
fn owns_listener(pid: u32, port: u16) -> bool {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| format!("socket:[{}]", f[9]))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path())
            .map(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
            .unwrap_or(false)
    })
}
