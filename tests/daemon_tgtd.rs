//! The daemon machinery of serving commands (`rlun mount` here), against a
//! private tgtd: `--daemon` gives up when the mount cannot become ready in
//! time and leaves no background process behind (also when its parent is
//! killed), and written data that does not reach the target makes both
//! `rlun umount` and the SIGTERM'd process fail.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::{assert_failure, assert_success, both};
use common::proxy::{Fault, FaultProxy};
use common::{make_backing_file, pattern_bytes, recv_notify, run_rlun, spawn_rlun, Tgtd};
use rlun::fuse::find_mount;

const IQN: &str = "iqn.2026-11.org.example:daemon";
const MIB: u64 = 1 << 20;

fn tgtd_with_file(dir: &Path, size: u64, seed: u64) -> (Tgtd, PathBuf) {
    let file = make_backing_file(dir, size, seed);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &file, 512)
        .create()
        .expect("create target");
    (tgtd, file)
}

fn mountpoint(dir: &Path) -> PathBuf {
    let mp = dir.join("mnt");
    fs::create_dir(&mp).expect("create mount point");
    mp
}

fn is_mounted(mp: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    find_mount(&info, &mp.to_string_lossy()).is_some()
}

/// Pids of running (not zombie) rlun processes whose command line names
/// `mp`.
fn rlun_processes_for(mp: &Path) -> Vec<u32> {
    let needle = mp.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for e in fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|s| s == "Z");
        // The unmount watcher (rlun run again with RLUN_UNMOUNT_WATCH) is
        // not the rlun that serves the mount.
        let watcher = fs::read(format!("/proc/{pid}/environ"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .any(|v| v.starts_with(b"RLUN_UNMOUNT_WATCH="));
        if !zombie
            && !watcher
            && args.first().is_some_and(|a| a.ends_with("rlun"))
            && args.iter().any(|a| a == &needle)
        {
            pids.push(pid);
        }
    }
    pids
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Unmounts lazily and kills whatever rlun still serves `mp` at the end of
/// a test, also when it fails.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&self.0)
            .output();
        for pid in rlun_processes_for(&self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
    }
}

#[test]
fn daemon_mount_gives_up_when_not_ready_within_the_timeouts_and_stops_its_child() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 21);
    let proxy = FaultProxy::start(
        tgtd.portal().parse().expect("portal address"),
        Fault::SwallowAfterLogin,
    );
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();

    let started = Instant::now();
    let out = run_rlun(
        [
            "mount",
            "--daemon",
            "--connect-timeout",
            "1s",
            "--login-timeout",
            "2s",
            &proxy.target_url(IQN),
            &mp_s,
        ],
        &[],
    );
    let took = started.elapsed();
    let child_gone = wait_until(Duration::from_secs(5), || {
        rlun_processes_for(&mp).is_empty()
    });

    assert_failure(&out, 1, &["not ready within 13s", "was stopped"]);
    assert!(
        took >= Duration::from_secs(12) && took < Duration::from_secs(30),
        "gave up after {took:?}"
    );
    assert!(proxy.swallowed() >= 1, "the login went through");
    assert!(child_gone, "background rlun still running");
    assert!(!is_mounted(&mp));
}

#[test]
fn background_child_exits_when_its_parent_is_killed_before_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 22);
    let proxy = FaultProxy::start(
        tgtd.portal().parse().expect("portal address"),
        Fault::SwallowAfterLogin,
    );
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();
    let mut parent = spawn_rlun(
        [
            "mount",
            "--daemon",
            "--command-timeout",
            "60s",
            &proxy.target_url(IQN),
            &mp_s,
        ],
        &[],
    );
    let parent_pid = parent.id();
    let child_started = wait_until(Duration::from_secs(10), || {
        proxy.swallowed() >= 1 && rlun_processes_for(&mp).iter().any(|p| *p != parent_pid)
    });
    assert!(child_started, "the background rlun logged in");

    parent.kill().expect("kill the parent");
    let _ = parent.wait();
    let killed = Instant::now();
    let child_gone = wait_until(Duration::from_secs(10), || {
        rlun_processes_for(&mp).is_empty()
    });

    assert!(
        child_gone,
        "background rlun outlived its parent by {:?}",
        killed.elapsed()
    );
    assert!(!is_mounted(&mp));
}

/// Mount options that keep written data in rlun's memory and give up on a
/// lost target quickly.
const WRITE_BACK_LOSES_TARGET_FAST: [&str; 12] = [
    "--cache",
    "write-back",
    "--writeback-delay",
    "60s",
    "--replacement-timeout",
    "2s",
    "--nop-interval",
    "1s",
    "--nop-timeout",
    "1s",
    "--connect-timeout",
    "1s",
];

#[test]
fn umount_fails_when_written_data_cannot_reach_a_lost_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path(), 8 * MIB, 23);
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let mut args = vec!["mount", "--daemon"];
    args.extend(WRITE_BACK_LOSES_TARGET_FAST);
    args.extend([url.as_str(), mp_s.as_str()]);
    let mount = run_rlun(&args, &[]);
    assert_success(&mount, "rlun mount --daemon");

    fs::write(mp.join("lun1"), vec![0x5a; 8192]).expect("write through the mount");
    tgtd.kill();
    let umount = run_rlun(["umount", &mp_s], &[]);

    assert_failure(
        &umount,
        1,
        &["did not reach the target", "8192 bytes of cached data"],
    );
    assert!(!is_mounted(&mp));
    assert_eq!(
        fs::read(&backing).expect("backing")[..8192],
        pattern_bytes(23, 0, 8192)[..],
        "nothing was written to the backing file"
    );
    assert!(wait_until(Duration::from_secs(5), || rlun_processes_for(
        &mp
    )
    .is_empty()));
}

#[test]
fn lazy_umount_with_a_file_still_open_says_so_and_rlun_ends_when_it_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 24);
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let mount = run_rlun(["mount", "--daemon", &url, &mp_s], &[]);
    assert_success(&mount, "rlun mount --daemon");
    let open = fs::File::open(mp.join("lun1")).expect("open lun1");

    let umount = run_rlun(["umount", "--lazy", "--timeout", "2s", &mp_s], &[]);

    let line = assert_failure(&umount, 1, &["detached (lazy)", "still open"]);
    assert!(!line.contains("writing back"), "{line}");
    assert!(!is_mounted(&mp));
    assert_eq!(
        rlun_processes_for(&mp).len(),
        1,
        "rlun serves the open file"
    );
    drop(open);
    assert!(
        wait_until(Duration::from_secs(10), || rlun_processes_for(&mp)
            .is_empty()),
        "rlun did not end after the last file was closed"
    );
}

#[test]
fn sigterm_exit_status_fails_when_written_data_cannot_reach_a_lost_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, _backing) = tgtd_with_file(dir.path(), 8 * MIB, 24);
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let log = dir.path().join("rlun.log");
    let mut args = vec!["mount"];
    args.extend(WRITE_BACK_LOSES_TARGET_FAST);
    args.extend([url.as_str(), mp_s.as_str()]);
    let mut child = {
        let mut cmd = Command::new(common::rlun_bin());
        cmd.args(&args)
            .stdin(std::process::Stdio::null())
            .stderr(fs::File::create(&log).expect("log file"));
        common::ChildGuard(cmd.spawn().expect("start rlun mount"))
    };
    assert!(
        wait_until(Duration::from_secs(30), || is_mounted(&mp)),
        "mounted"
    );

    fs::write(mp.join("lun1"), vec![0x5a; 4096]).expect("write through the mount");
    tgtd.kill();
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output()
        .expect("kill");
    assert!(term.status.success(), "{}", both(&term));
    let mut status = None;
    wait_until(Duration::from_secs(60), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    let log = fs::read_to_string(&log).unwrap_or_default();

    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(
        log.contains("did not reach the target") && log.contains("4096 bytes of cached data"),
        "{log}"
    );
    assert!(!is_mounted(&mp));
}

#[test]
fn systemd_hears_ready_only_once_the_mount_works_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 25);
    let mp = mountpoint(dir.path());
    let _cleanup = Cleanup(mp.clone());
    let mp_s = mp.display().to_string();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("bind notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let mut child = spawn_rlun(
        ["mount", url.as_str(), mp_s.as_str()],
        &[("NOTIFY_SOCKET", &sock_path.to_string_lossy())],
    );

    let ready = recv_notify(&sock, "READY=1");
    let mounted_then = is_mounted(&mp);
    let first_block = fs::read(mp.join("lun1")).map(|d| d[..512].to_vec());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output()
        .expect("kill");
    let stopping = recv_notify(&sock, "STOPPING=1");
    let mut status = None;
    wait_until(Duration::from_secs(30), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });

    assert!(
        ready.starts_with(&format!("READY=1\nMAINPID={}\nSTATUS=mounted ", child.id())),
        "{ready:?}"
    );
    assert!(mounted_then, "READY=1 came before the mount");
    assert_eq!(first_block.expect("read lun1"), pattern_bytes(25, 0, 512));
    assert_eq!(stopping, format!("STOPPING=1\nSTATUS=unmounting {mp_s}"));
    assert_eq!(status.and_then(|s| s.code()), Some(0));
}

#[test]
fn a_sigterm_with_no_one_waiting_leaves_no_state_files_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 26);
    let sock = dir.path().join("nbd.sock");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let pid_file = rlun::daemon::state_file(&sock);
    let mut child = spawn_rlun(
        ["serve", url.as_str(), "--socket", &sock.to_string_lossy()],
        &[],
    );
    assert!(
        wait_until(Duration::from_secs(30), || sock.exists()
            && pid_file.exists()),
        "serving with a pid file"
    );

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output()
        .expect("kill");
    let mut status = None;
    wait_until(Duration::from_secs(30), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });

    assert_eq!(status.and_then(|s| s.code()), Some(0));
    let left: Vec<PathBuf> = ["pid", "exit", "wait"]
        .iter()
        .map(|x| pid_file.with_extension(x))
        .filter(|p| p.exists())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
