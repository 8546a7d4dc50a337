//! Running the `rlun` binary (or any helper command) with a deadline.
//!
//! A hung process must fail its test, not hang the whole run: every call here
//! kills the process when its time is up and reports what it printed so far.

use std::ffi::OsStr;
use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::error::{HarnessError, Result};

/// Default deadline for one `rlun` invocation in [`run_rlun`].
pub const RLUN_TIMEOUT: Duration = Duration::from_secs(60);

/// How long to wait for the output pipes after the process is gone (a
/// grandchild that inherited them could otherwise keep us waiting).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// The `rlun` binary cargo built for these tests (debug profile under plain
/// `cargo test`).
pub fn rlun_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rlun"))
}

/// Run `rlun ARGS...` with extra environment `envs` and [`RLUN_TIMEOUT`].
/// Panics with the command line and its output if it does not finish in time.
pub fn run_rlun<I, S>(args: I, envs: &[(&str, &str)]) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_rlun_with_timeout(args, envs, RLUN_TIMEOUT)
}

/// [`run_rlun`] with an explicit deadline.
pub fn run_rlun_with_timeout<I, S>(args: I, envs: &[(&str, &str)], timeout: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(rlun_bin());
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_with_timeout(&mut cmd, timeout)
}

/// Start `rlun ARGS...` in the background (for `mount`, `serve`, ...); it is
/// killed when the returned guard is dropped, also when the test panics.
pub fn spawn_rlun<I, S>(args: I, envs: &[(&str, &str)]) -> ChildGuard
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(rlun_bin());
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", describe(&cmd)));
    ChildGuard(child)
}

/// A child process that is SIGKILLed and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `cmd` to completion, capturing stdout and stderr; panics if it cannot
/// be started or does not finish within `timeout` (it is killed first).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    match try_run_with_timeout(cmd, timeout) {
        Ok(out) => out,
        Err(e) => panic!("{e}"),
    }
}

/// Like [`run_with_timeout`] but returns the failure instead of panicking.
/// A non-zero exit status is not an error here: it is in the `Output`.
pub fn try_run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let command = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| HarnessError::Spawn {
        program: command.clone(),
        source,
    })?;
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());

    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::io(format!("waiting for `{command}`"), source));
            }
        }
    };
    let status: ExitStatus = match status {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = stdout.recv_timeout(PIPE_GRACE).unwrap_or_default();
            let stderr = stderr.recv_timeout(PIPE_GRACE).unwrap_or_default();
            return Err(HarnessError::TimedOut {
                command,
                timeout,
                output: format!(
                    "stdout: {:?}, stderr: {:?}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                ),
            });
        }
    };
    Ok(Output {
        status,
        stdout: stdout.recv_timeout(PIPE_GRACE).unwrap_or_default(),
        stderr: stderr.recv_timeout(PIPE_GRACE).unwrap_or_default(),
    })
}

/// Read a pipe to its end on a helper thread; the result arrives on the channel.
fn collect<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        let _ = tx.send(buf);
    });
    rx
}

/// `program arg arg ...` for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// What [`run_rlun_measured`] saw of one rlun run.
#[derive(Debug)]
pub struct Measured {
    pub output: Output,
    pub took: Duration,
    /// The largest `VmHWM` (peak resident set, KiB) read from
    /// `/proc/PID/status` while the process ran. Sampled every 2 ms, so
    /// growth in the last instant before exit can escape it; a process
    /// that grows without bound is caught long before.
    pub peak_rss_kib: u64,
}

/// Run `rlun ARGS...` like [`run_rlun_with_timeout`] (panics if it does not
/// end within `timeout`), watching its peak memory.
pub fn run_rlun_measured(args: &[&str], timeout: Duration) -> Measured {
    let mut cmd = Command::new(rlun_bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let command = describe(&cmd);
    let start = Instant::now();
    let mut child = ChildGuard(
        cmd.spawn()
            .unwrap_or_else(|e| panic!("could not start {command}: {e}")),
    );
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            if let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kib);
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                let err = stderr.recv_timeout(PIPE_GRACE).unwrap_or_default();
                panic!(
                    "`{command}` still running after {timeout:?} (peak RSS {peak} KiB); \
                     stderr: {:?}",
                    String::from_utf8_lossy(&err)
                );
            }
            Ok(None) => thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("waiting for `{command}`: {e}"),
        }
    };
    let took = start.elapsed();
    Measured {
        output: Output {
            status,
            stdout: stdout.recv_timeout(PIPE_GRACE).unwrap_or_default(),
            stderr: stderr.recv_timeout(PIPE_GRACE).unwrap_or_default(),
        },
        took,
        peak_rss_kib: peak,
    }
}
