//! Write-back data that outlives the replacement timeout (issue 25, item
//! 2): `rlun mount --cache write-back` with data written and not synced,
//! tgtd killed and gone longer than `--replacement-timeout`, then back.
//! The data must reach the target — when `rlun umount` comes soon after
//! the return (the final write-back logs in afresh instead of failing with
//! the error of an attempt made before), and without any umount or fsync
//! (the session keeps trying while dirty data waits; an fsync meanwhile
//! fails with EIO and the data stays held). A target that never
//! returns still ends `rlun umount` within a bound, with the data-lost
//! error.
//!
//! Against the real tgtd and the kernel's FUSE (as root, /dev/fuse).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::cli::{assert_failure, assert_same_bytes, assert_success, both};
use common::{make_backing_file, pattern_bytes, run_rlun, run_with_timeout, Tgtd};

const IQN: &str = "iqn.2026-12.org.example:wbreturn";
const MIB: usize = 1 << 20;
/// What the issue writes: 8 MiB, no fsync.
const PAYLOAD: usize = 8 * MIB;
const LUN_SIZE: u64 = 16 << 20;

/// A daemon mount: lazily unmounted (and its rlun killed) when the test
/// ends, also on failure.
struct DaemonMount {
    mp: PathBuf,
    log: PathBuf,
    pid: u32,
}

impl DaemonMount {
    fn file(&self) -> PathBuf {
        self.mp.join("lun1")
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn umount(&self) -> (Output, Duration) {
        let started = Instant::now();
        let out = run_rlun(["umount", &self.mp.display().to_string()], &[]);
        (out, started.elapsed())
    }
}

impl Drop for DaemonMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&self.mp)
            .output();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && Path::new(&format!("/proc/{}", self.pid)).exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{}", self.pid)).exists() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .output();
        }
    }
}

/// tgtd with one target whose LUN 1 is a pattern file.
fn tgtd_with_file(dir: &Path) -> (Tgtd, PathBuf) {
    let file = make_backing_file(dir, LUN_SIZE, 3);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &file, 512)
        .create()
        .expect("create target");
    (tgtd, file)
}

/// `rlun -v mount --daemon --cache write-back --replacement-timeout 5s
/// --connect-timeout 2s` plus `args`.
fn mount(tgtd: &Tgtd, dir: &Path, args: &[&str]) -> DaemonMount {
    let mp = dir.join("mnt");
    fs::create_dir(&mp).expect("mount point");
    let log = dir.join("rlun.log");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let mp_s = mp.display().to_string();
    let log_s = log.display().to_string();
    let mut argv = vec![
        "-v",
        "mount",
        "--daemon",
        "--log-file",
        &log_s,
        "--cache",
        "write-back",
        "--replacement-timeout",
        "5s",
        "--connect-timeout",
        "2s",
    ];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[&url, &mp_s]);
    let out = run_rlun(&argv, &[]);
    assert_success(&out, "rlun mount --daemon");
    let state = rlun::cmd::mount::state_file(&mp.canonicalize().unwrap());
    let pid = fs::read_to_string(&state)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    DaemonMount { mp, log, pid }
}

/// Write the payload through the mount with dd, no fsync.
fn write_payload(m: &DaemonMount, dir: &Path) -> Vec<u8> {
    let payload = pattern_bytes(77, 0, PAYLOAD);
    let src = dir.join("src.bin");
    fs::write(&src, &payload).expect("write source");
    let out = run_with_timeout(
        Command::new("dd").args([
            &format!("if={}", src.display()),
            &format!("of={}", m.file().display()),
            "bs=1M",
            "conv=notrunc",
            "status=none",
        ]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "dd: {}", both(&out));
    payload
}

fn head(path: &Path, len: usize) -> Vec<u8> {
    let mut data = fs::read(path).expect("read backing file");
    data.truncate(len);
    data
}

/// Kill tgtd, check the data is only in rlun's cache, and wait past the
/// replacement timeout (5 s) as the issue does.
fn lose_target_past_the_timeout(tgtd: &mut Tgtd, backing: &Path, payload: &[u8]) {
    tgtd.kill();
    assert_ne!(
        head(backing, payload.len()),
        payload,
        "the data was written back before tgtd was killed: the test tests nothing"
    );
    std::thread::sleep(Duration::from_secs(8));
}

#[test]
fn umount_right_after_the_target_returns_writes_the_cached_data_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path());
    let m = mount(&tgtd, dir.path(), &["--writeback-delay", "60s"]);
    let payload = write_payload(&m, dir.path());

    lose_target_past_the_timeout(&mut tgtd, &backing, &payload);
    tgtd.restart().expect("restart tgtd");
    std::thread::sleep(Duration::from_secs(1));
    let (umount, took) = m.umount();

    assert_success(
        &umount,
        &format!("rlun umount 1 s after tgtd returned\n{}", m.log()),
    );
    assert!(took < Duration::from_secs(60), "umount took {took:?}");
    assert_same_bytes(
        &head(&backing, payload.len()),
        &payload,
        "backing file after umount",
    );
}

#[test]
fn write_back_resumes_by_itself_once_the_target_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path());
    // Short enough that the data is due when the target is back, long
    // enough that it is still dirty when tgtd is killed.
    let m = mount(&tgtd, dir.path(), &["--writeback-delay", "5s"]);
    let payload = write_payload(&m, dir.path());

    lose_target_past_the_timeout(&mut tgtd, &backing, &payload);
    // Past the replacement timeout an fsync fails (EIO) at once, like any
    // I/O that would wait for the target; the data stays held.
    let fsync = fs::OpenOptions::new()
        .write(true)
        .open(m.file())
        .and_then(|f| f.sync_all());
    tgtd.restart().expect("restart tgtd");
    let deadline = Instant::now() + Duration::from_secs(30);
    while head(&backing, payload.len()) != payload && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    let landed = head(&backing, payload.len()) == payload;
    let (umount, _) = m.umount();

    assert_eq!(
        fsync.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(5)),
        "fsync while the target is gone: {fsync:?}"
    );
    assert!(
        landed,
        "the data did not reach the returned target within 30 s\n{}",
        m.log()
    );
    assert_success(&umount, "rlun umount");
    assert!(
        m.log().contains("write-back resumed"),
        "no word that write-back resumed:\n{}",
        m.log()
    );
}

#[test]
fn umount_with_the_target_gone_for_good_reports_the_lost_data_within_a_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path());
    let m = mount(&tgtd, dir.path(), &["--writeback-delay", "60s"]);
    let payload = write_payload(&m, dir.path());

    lose_target_past_the_timeout(&mut tgtd, &backing, &payload);
    let (umount, took) = m.umount();

    let text = assert_failure(
        &umount,
        1,
        &[
            "8388608 bytes of cached data could not be written",
            "Connection refused",
        ],
    );
    assert!(
        took < Duration::from_secs(60),
        "umount took {took:?}: {text}"
    );
}

#[test]
fn writes_into_a_full_cache_fail_with_eio_while_the_target_is_gone_instead_of_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path());
    // 7 MiB of pages: 2 MiB held dirty stays below the background limit.
    let m = mount(
        &tgtd,
        dir.path(),
        &["--writeback-delay", "60s", "--cache-size", "8M"],
    );
    let held = pattern_bytes(78, 0, 2 * MIB);
    fs::write(dir.path().join("held.bin"), &held).expect("write source");
    let dd = |src: &str, seek: &str| {
        run_with_timeout(
            Command::new("dd").args([
                &format!("if={}", dir.path().join(src).display()),
                &format!("of={}", m.file().display()),
                "bs=1M",
                &format!("seek={seek}"),
                "conv=notrunc",
                "status=none",
            ]),
            Duration::from_secs(120),
        )
    };
    let first = dd("held.bin", "0");
    assert!(first.status.success(), "dd: {}", both(&first));

    lose_target_past_the_timeout(&mut tgtd, &backing, &held);
    fs::write(dir.path().join("more.bin"), pattern_bytes(79, 0, 12 * MIB)).expect("source");
    let started = Instant::now();
    let more = dd("more.bin", "2");
    let took = started.elapsed();
    tgtd.restart().expect("restart tgtd");
    let (umount, _) = m.umount();

    assert!(
        !more.status.success(),
        "12 MiB into an 8 MiB cache with the target gone"
    );
    assert!(
        String::from_utf8_lossy(&more.stderr).contains("Input/output error"),
        "{}",
        both(&more)
    );
    assert!(took < Duration::from_secs(60), "EIO took {took:?}");
    assert_success(
        &umount,
        &format!("rlun umount once tgtd is back\n{}", m.log()),
    );
    assert_same_bytes(&head(&backing, held.len()), &held, "the held data");
}

/// `rlun serve` finishes the same way: SIGTERM 1 s after tgtd returned
/// writes the cached data back and exits 0.
#[test]
fn serve_stopped_right_after_the_target_returns_writes_the_cached_data_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, backing) = tgtd_with_file(dir.path());
    let socket = dir.path().join("nbd.sock");
    let log_path = dir.path().join("serve.log");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let child = Command::new(common::rlun_bin())
        .args(["-v", "serve", &url, "--socket"])
        .arg(&socket)
        .args(["--cache", "write-back", "--writeback-delay", "60s"])
        .args(["--replacement-timeout", "5s", "--connect-timeout", "2s"])
        .stdin(std::process::Stdio::null())
        .stderr(fs::File::create(&log_path).expect("log file"))
        .spawn()
        .expect("start rlun serve");
    let mut child = common::ChildGuard(child);
    let uri = format!("nbd+unix:///lun1?socket={}", socket.display());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("nbdinfo")
        .args(["--size", &uri])
        .output()
        .expect("nbdinfo")
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "rlun serve not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let payload = pattern_bytes(80, 0, PAYLOAD);
    let src = dir.path().join("src.bin");
    fs::write(&src, &payload).expect("write source");
    // nbdcopy without --flush: the data stays in rlun's cache.
    let copy = run_with_timeout(
        Command::new("nbdcopy").args([&src.display().to_string(), &uri]),
        Duration::from_secs(60),
    );
    assert!(copy.status.success(), "nbdcopy: {}", both(&copy));

    lose_target_past_the_timeout(&mut tgtd, &backing, &payload);
    tgtd.restart().expect("restart tgtd");
    std::thread::sleep(Duration::from_secs(1));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .output();
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "rlun serve did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };

    assert_eq!(
        code,
        Some(0),
        "{}",
        fs::read_to_string(&log_path).unwrap_or_default()
    );
    assert_same_bytes(
        &head(&backing, payload.len()),
        &payload,
        "backing file after stop",
    );
}
