//! The unmount watcher: a small process `rlun mount` starts just before it
//! mounts, which removes the mount when rlun dies without unmounting
//! (SIGKILL, the OOM killer, a crash), so that no dead mount ("Transport
//! endpoint is not connected") stays behind.
//!
//! fusermount3's `auto_unmount` helper does the same, but not always:
//!
//! - It wakes when rlun's end of its socket is closed, and at exit the
//!   kernel may release that socket before the last `/dev/fuse` file of the
//!   dying process. The helper then checks that the mount is dead by
//!   opening the mount point, which must fail with `ENOTCONN`; while the
//!   connection is still up that open becomes a request, the kernel ends it
//!   with `ECONNABORTED` when the connection goes, and the helper leaves
//!   the mount alone — a dead mount until someone runs `fusermount3 -u`.
//!   A heavily loaded machine widens the window.
//! - Non-root users get it only with `user_allow_other` in /etc/fuse.conf
//!   (fuser asks for `allow_root` along with `auto_unmount`).
//!
//! The watcher is rlun itself, run again with [`WATCH_ENV`] set (no `fork`
//! in a threaded process). Its standard input is a pipe from rlun that
//! nothing writes to: end of file means rlun is gone, however it died. It
//! runs in its own process group (a `kill -9 -PGID` of rlun's group, or a
//! Ctrl-C, does not reach it) with `/` as working directory, and inherits
//! neither `/dev/fuse` nor fusermount3's socket (both close on exec). When
//! rlun is gone and the mount is still there, it opens the mount point: an
//! answer means someone serves the mount, and it is left alone; `ENOTCONN`
//! or `ECONNABORTED` means the connection is dead, and the watcher unmounts
//! it lazily (`fusermount3 -u -z`, or `umount -l` without fusermount3).

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt as _;

use super::{find_mount, MountEntry};

/// Set in the environment of the watcher process: `main` runs
/// [`run_watcher`] instead of the command line.
pub const WATCH_ENV: &str = "RLUN_UNMOUNT_WATCH";

/// How long after rlun's end the watcher waits for a mount nobody answers
/// to die (a `/dev/fuse` file that leaked into another process keeps it
/// up) before it gives up.
const GIVE_UP: Duration = Duration::from_secs(60);

/// A running watcher: rlun's end of its standard input, which stays open
/// until rlun exits even when the `Watcher` is dropped earlier (the mount
/// may outlive the front end, e.g. after a second signal), so that end of
/// file always means "rlun is gone".
#[derive(Debug)]
pub struct Watcher {
    _pipe: std::mem::ManuallyDrop<ChildStdin>,
}

/// Start the watcher of the mount `fsname` at `mp`; it unmounts with
/// `unmounter` (fusermount3), or `umount -l` when that is `None`.
pub fn spawn_watcher(
    mp: &Path,
    fsname: &str,
    unmounter: Option<&Path>,
) -> std::io::Result<Watcher> {
    // current_exe names the process nicely in ps; /proc/self/exe still
    // works when the binary was replaced or deleted since rlun started.
    let exes = std::env::current_exe()
        .into_iter()
        .chain([PathBuf::from("/proc/self/exe")]);
    let mut last = std::io::Error::other("no rlun executable");
    for exe in exes {
        let spawned = Command::new(&exe)
            .env(WATCH_ENV, "1")
            .arg(mp)
            .arg(fsname)
            .arg(unmounter.map(Path::as_os_str).unwrap_or_default())
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            // The child is never waited for: it outlives rlun by design.
            Ok(mut child) => {
                let pipe = child
                    .stdin
                    .take()
                    .ok_or_else(|| std::io::Error::other("no pipe to the watcher"))?;
                return Ok(Watcher {
                    _pipe: std::mem::ManuallyDrop::new(pipe),
                });
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// What opening the mount point told.
#[derive(Debug, PartialEq)]
enum Probe {
    /// Someone answered (or it is no longer a FUSE mount).
    Answered,
    /// The FUSE connection is gone.
    Dead,
    /// Some other error (permission…): look again later.
    Unclear,
    /// No answer before the deadline.
    NoAnswer,
}

/// The watcher process: `ARGS` are the mount point, the file system name
/// and the unmount program (empty: `umount`). Its exit code.
pub fn run_watcher(args: &[OsString]) -> i32 {
    let [mp, fsname, unmounter] = args else {
        eprintln!("rlun: the unmount watcher takes a mount point, a name and a program");
        return 2;
    };
    let mp = PathBuf::from(mp);
    let fsname = fsname.to_string_lossy().into_owned();
    let unmounter = (!unmounter.is_empty()).then(|| PathBuf::from(unmounter));
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let deadline = Instant::now() + GIVE_UP;
    loop {
        if our_mount(&mp, &fsname).is_none() {
            return 0;
        }
        match probe(&mp, deadline.saturating_duration_since(Instant::now())) {
            Probe::Answered => return 0,
            Probe::Dead => break,
            Probe::Unclear if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Probe::Unclear | Probe::NoAnswer => {
                eprintln!(
                    "rlun: {}: the rlun serving it is gone but the mount still does not fail \
                     (a process may hold /dev/fuse); `fusermount3 -u -z {0}` removes it",
                    mp.display()
                );
                return 1;
            }
        }
    }
    if our_mount(&mp, &fsname).is_none() {
        return 0;
    }
    match unmount_lazily(&mp, unmounter.as_deref()) {
        Ok(()) => {
            eprintln!(
                "rlun: the rlun serving {} ended without unmounting; unmounted it",
                mp.display()
            );
            0
        }
        // fusermount3's own helper may have been quicker.
        Err(_) if our_mount(&mp, &fsname).is_none() => 0,
        Err(e) => {
            eprintln!("rlun: cannot unmount the dead mount {}: {e}", mp.display());
            1
        }
    }
}

/// The rlun mount `fsname` at `mp`, if it is still there.
fn our_mount(mp: &Path, fsname: &str) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find_mount(&info, &mp.to_string_lossy()).filter(|m| m.source == fsname)
}

/// Open the mount point (an OPENDIR request: the kernel caches no
/// answer to it) in a thread, waiting at most `wait`.
fn probe(mp: &Path, wait: Duration) -> Probe {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = mp.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("probe".into())
        .spawn(move || {
            let r = std::fs::File::open(&path).map(drop);
            let _ = tx.send(r);
        });
    if spawned.is_err() {
        return Probe::Unclear;
    }
    match rx.recv_timeout(wait) {
        Ok(Ok(())) => Probe::Answered,
        Ok(Err(e)) => match e.raw_os_error() {
            // Requests sent after the abort fail with ENOTCONN, those
            // pending at the abort with ECONNABORTED.
            Some(libc::ENOTCONN | libc::ECONNABORTED) => Probe::Dead,
            _ => Probe::Unclear,
        },
        Err(_) => Probe::NoAnswer,
    }
}

/// `fusermount3 -u -z -q MP`, or `umount -l MP`.
fn unmount_lazily(mp: &Path, unmounter: Option<&Path>) -> Result<(), String> {
    let mut cmd = match unmounter {
        Some(p) => {
            let mut c = Command::new(p);
            c.args(["-u", "-z", "-q"]);
            c
        }
        None => {
            let mut c = Command::new("umount");
            c.arg("-l");
            c
        }
    };
    let out = cmd
        .arg("--")
        .arg(mp)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the unmount program: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_answers() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(probe(dir.path(), Duration::from_secs(5)), Probe::Answered);
    }

    #[test]
    fn the_watcher_leaves_a_path_that_is_no_mount_alone() {
        let dir = tempfile::tempdir().unwrap();
        assert!(our_mount(dir.path(), "rlun:iqn.x").is_none());
    }
}
