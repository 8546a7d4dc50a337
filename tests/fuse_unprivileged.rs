//! `rlun mount` as an unprivileged user (uid 65534, `nobody`) through the
//! setuid fusermount3, with `/dev/fuse` at mode 0666 (Debian's udev) and
//! 0600 (no udev: containers, CI runners), and as root with 0600.
//!
//! fusermount3 opens `/dev/fuse` with the user's permissions (it drops to
//! the caller's file system ids first), so with 0600 no user can mount:
//! rlun must say so and name the fix, before any network I/O. With 0666 the
//! user mounts, reads and writes through the mount, `rlun umount`s it, and
//! the bytes reach the target; a SIGKILLed user mount is removed even
//! without `user_allow_other` in /etc/fuse.conf.
//!
//! The tests change the mode of `/dev/fuse`: a [`FuseMode`] guard puts the
//! original back (also when a test panics), and [`MODE_LOCK`] keeps the
//! tests of this binary from changing it under each other. cargo runs test
//! binaries one after the other, so no other binary sees the change.

mod common;

use std::fs;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::cli::both;
use common::{make_backing_file, pattern_bytes, rlun_bin, run_with_timeout, ChildGuard, Tgtd};
use rlun::fuse::find_mount;

const IQN: &str = "iqn.2026-11.org.example:fuseuser";
const MIB: u64 = 1 << 20;
/// `nobody` on Debian.
const USER: u32 = 65534;
const TIMEOUT: Duration = Duration::from_secs(60);
const FUSE_DEVICE: &str = "/dev/fuse";

/// Held while a test depends on the mode of `/dev/fuse`.
static MODE_LOCK: Mutex<()> = Mutex::new(());

/// `/dev/fuse` at a given mode until dropped; then its mode from before.
struct FuseMode {
    original: u32,
    _lock: MutexGuard<'static, ()>,
}

impl FuseMode {
    fn set(mode: u32) -> FuseMode {
        let lock = MODE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let original = fs::metadata(FUSE_DEVICE).expect("stat /dev/fuse").mode() & 0o7777;
        fs::set_permissions(FUSE_DEVICE, fs::Permissions::from_mode(mode))
            .expect("chmod /dev/fuse");
        FuseMode {
            original,
            _lock: lock,
        }
    }
}

impl Drop for FuseMode {
    fn drop(&mut self) {
        let _ = fs::set_permissions(FUSE_DEVICE, fs::Permissions::from_mode(self.original));
    }
}

/// A directory tree owned by [`USER`]: its home, runtime dir and mount
/// point.
struct UserDir {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl UserDir {
    fn new() -> UserDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        for sub in ["", "run", "mnt"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).expect("mkdir");
            chown(&p, Some(USER), Some(USER)).expect("chown");
        }
        UserDir { _dir: dir, root }
    }

    fn mp(&self) -> PathBuf {
        self.root.join("mnt")
    }

    /// `PROGRAM ARGS...` as [`USER`], with a clean environment whose
    /// HOME and XDG_RUNTIME_DIR are the user's directories.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={USER}"))
            .arg(format!("--regid={USER}"))
            .args(["--clear-groups", "--reset-env", "--", "env"])
            .arg(format!("HOME={}", self.root.display()))
            .arg(format!(
                "XDG_RUNTIME_DIR={}",
                self.root.join("run").display()
            ))
            .arg(program)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, program: &Path, args: &[&str]) -> Output {
        run_with_timeout(&mut self.command(program, args), TIMEOUT)
    }

    fn rlun(&self, args: &[&str]) -> Output {
        self.run(&rlun_bin(), args)
    }
}

/// Lazily unmounts `mp` when dropped (a failed test leaves no mount).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if mount_options(&self.0).is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.0).output();
        }
    }
}

/// The FUSE mount at `mp`: its super-block options, if it is one of rlun's.
fn mount_options(mp: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let m = find_mount(&info, &mp.to_string_lossy())?;
    if m.fstype != "fuse.rlun" {
        return None;
    }
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(&*mp.to_string_lossy()))
        .map(str::to_string)
}

fn wait_unmounted(mp: &Path, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while mount_options(mp).is_some() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        both(out)
    );
}

/// A tgtd whose LUN 1 is a 16 MiB file of pattern bytes.
fn target(dir: &Path) -> (Tgtd, PathBuf, String) {
    let backing = make_backing_file(dir, 16 * MIB, 51);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &backing, 512)
        .create()
        .expect("create target");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    (tgtd, backing, url)
}

#[test]
fn with_dev_fuse_0666_a_user_mounts_reads_writes_and_unmounts() {
    let _mode = FuseMode::set(0o666);
    let user = UserDir::new();
    let (_tgtd, backing, url) = target(&user.root);
    let mp = user.mp();
    let mp_s = mp.to_string_lossy().into_owned();
    let _unmount = Unmount(mp.clone());

    let mounted = user.rlun(&["mount", "--daemon", &url, &mp_s]);
    assert_ok(&mounted, "rlun mount --daemon as a user");
    let opts = mount_options(&mp).expect("the user's mount is there");
    assert!(
        opts.contains(&format!("user_id={USER}")),
        "the mount is the user's: {opts}"
    );

    // Read as the user (root may not enter a user's FUSE mount).
    let lun = mp.join("lun1");
    let copy = user.root.join("copy");
    let read = user.run(
        Path::new("dd"),
        &[
            &format!("if={}", lun.display()),
            &format!("of={}", copy.display()),
            "bs=64k",
            "count=16",
            "status=none",
        ],
    );
    assert_ok(&read, "dd from the mount as the user");
    assert_eq!(
        fs::read(&copy).expect("copy"),
        pattern_bytes(51, 0, MIB as usize),
        "the first MiB read through the user's mount"
    );

    // Write 1 MiB at 4 MiB as the user, then unmount as the user.
    let data = pattern_bytes(77, 0, MIB as usize);
    let src = user.root.join("src");
    fs::write(&src, &data).expect("source file");
    let write = user.run(
        Path::new("dd"),
        &[
            &format!("if={}", src.display()),
            &format!("of={}", lun.display()),
            "bs=64k",
            "seek=64",
            "conv=notrunc,fsync",
            "status=none",
        ],
    );
    assert_ok(&write, "dd into the mount as the user");
    let umount = user.rlun(&["umount", &mp_s]);
    assert_ok(&umount, "rlun umount as the user");
    assert!(wait_unmounted(&mp, Duration::from_secs(10)));

    let on_target = fs::read(&backing).expect("backing file");
    assert!(
        on_target[4 * MIB as usize..5 * MIB as usize] == data[..],
        "the user's write reached the backing file"
    );
    assert!(
        on_target[..MIB as usize] == pattern_bytes(51, 0, MIB as usize)[..],
        "the rest is untouched"
    );
}

#[test]
fn with_dev_fuse_0600_a_user_mount_fails_saying_why_and_how_to_fix_it() {
    let _mode = FuseMode::set(0o600);
    let user = UserDir::new();
    let mp = user.mp();
    let _unmount = Unmount(mp.clone());
    // No target: the local check comes before any network I/O.
    let url = "iscsi://127.0.0.1:1/iqn.2026-11.org.example:nowhere";

    let out = user.rlun(&["mount", url, &mp.to_string_lossy()]);

    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("is closed to uid {USER}"))
            && text.contains("mode 0600")
            && text.contains("fusermount3 opens it with the user's permissions")
            && text.contains("chmod 0666 /dev/fuse"),
        "says why and names the fix: {text}"
    );
    assert!(!text.contains("127.0.0.1"), "no network I/O: {text}");
    assert!(mount_options(&mp).is_none());
}

#[test]
fn with_dev_fuse_0600_root_still_mounts() {
    let _mode = FuseMode::set(0o600);
    let dir = tempfile::tempdir().expect("tempdir");
    let (_tgtd, backing, url) = target(dir.path());
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).expect("mount point");
    let mp_s = mp.to_string_lossy().into_owned();
    let _unmount = Unmount(mp.clone());

    let mut cmd = Command::new(rlun_bin());
    cmd.args(["mount", "--daemon", &url, &mp_s]);
    assert_ok(&run_with_timeout(&mut cmd, TIMEOUT), "rlun mount as root");
    let data = pattern_bytes(78, 0, 64 * 1024);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(mp.join("lun1"))
            .expect("open lun1");
        f.seek(SeekFrom::Start(MIB)).expect("seek");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
    let mut cmd = Command::new(rlun_bin());
    cmd.args(["umount", &mp_s]);
    assert_ok(&run_with_timeout(&mut cmd, TIMEOUT), "rlun umount as root");

    let on_target = fs::read(&backing).expect("backing file");
    assert!(on_target[MIB as usize..MIB as usize + data.len()] == data[..]);
}

#[test]
fn a_killed_user_mount_is_removed_without_user_allow_other() {
    let _mode = FuseMode::set(0o666);
    let user = UserDir::new();
    let (_tgtd, _backing, url) = target(&user.root);
    let mp = user.mp();
    let _unmount = Unmount(mp.clone());
    let conf = fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    let allow_other = conf
        .lines()
        .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other");

    // setpriv and env exec: the child is rlun itself.
    let child = user
        .command(&rlun_bin(), &["mount", &url, &mp.to_string_lossy()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rlun mount");
    let mut child = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while mount_options(&mp).is_none() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "rlun exited early"
        );
        assert!(Instant::now() < deadline, "no mount in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL rlun");
    let _ = child.wait();

    assert!(
        wait_unmounted(&mp, Duration::from_secs(5)),
        "a dead mount stayed behind (user_allow_other in /etc/fuse.conf: {allow_other})"
    );
}
