//! Multipath against a real tgtd that listens on two portals of one
//! target (127.0.0.1:P and 127.0.0.2:P, one target portal group): fio
//! verify through `rlun mount` (failover policy) and `rlun serve` (round
//! robin) while paths are black-holed, reset and restored, one at a time
//! and both together; a write in flight on a cut path must not land after
//! its retry; `rlun bench` under a cut with round-robin and queue-length;
//! `--failback manual` keeping I/O where it moved; another initiator's
//! I/O on the same LUN (libiscsi's iscsi-perf) running through rlun's
//! failover; and paths that reach two different logical units are
//! refused.
//!
//! Paths are cut with nftables rules in the input hook that match only
//! this tgtd's port on one address: packets vanish as on a dead link
//! (`drop`), or the connection is refused and reset (`reject with tcp
//! reset`). The rules live in a table of the test's own, removed on drop.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

const IQN: &str = "iqn.2026-12.org.example:multipath";
const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;

/// Quick path checks, so that the test does not wait for the defaults.
const FAST: [&str; 8] = [
    "--path-check-interval",
    "1s",
    "--path-timeout",
    "2s",
    "--nop-interval",
    "1s",
    "--nop-timeout",
    "2s",
];

/// An nftables table of this test's; deleted on drop.
struct Cut {
    table: String,
}

impl Cut {
    /// A table named after the process, `tag` and a count: tests run in
    /// parallel, several with the same tag.
    fn new(tag: &str) -> Cut {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let table = format!("rlun_mp_{}_{tag}_{n}", std::process::id());
        nft(&["add", "table", "inet", &table]);
        nft(&[
            "add",
            "chain",
            "inet",
            &table,
            "input",
            "{ type filter hook input priority 0; }",
        ]);
        Cut { table }
    }

    /// Both directions of `addr:port` vanish (`drop`) or are reset.
    fn cut(&self, addr: &str, port: u16, reset: bool) {
        let verdict = if reset {
            vec!["reject", "with", "tcp", "reset"]
        } else {
            vec!["drop"]
        };
        let p = port.to_string();
        for (a, dir) in [("daddr", "dport"), ("saddr", "sport")] {
            let mut args = vec![
                "add",
                "rule",
                "inet",
                &self.table,
                "input",
                "ip",
                a,
                addr,
                "tcp",
                dir,
                &p,
            ];
            args.extend(&verdict);
            nft(&args);
        }
    }

    /// Every path is whole again.
    fn restore(&self) {
        nft(&["flush", "chain", "inet", &self.table, "input"]);
    }

    /// After `after` seconds, `addr:port` vanishes for `lasting` seconds
    /// (dropped, no reset), then every path is whole again.
    fn outage(&self, after: u64, addr: &str, port: u16, lasting: u64) {
        thread::sleep(Duration::from_secs(after));
        self.cut(addr, port, false);
        thread::sleep(Duration::from_secs(lasting));
        self.restore();
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .output();
    }
}

fn nft(args: &[&str]) {
    let out = run_with_timeout(Command::new("nft").args(args), Duration::from_secs(10));
    assert!(out.status.success(), "nft {args:?}: {}", both(&out));
}

/// tgtd with target IQN (LUNs 1 and 2 on files) on its own portal and on
/// 127.0.0.2 at the same port.
fn two_portal_tgtd(dir: &Path) -> (Tgtd, PathBuf, PathBuf) {
    let one = make_backing_file(dir, SIZE, 31);
    let two = make_backing_file(dir, SIZE, 32);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &one, 512)
        .lun_file(2, &two, 512)
        .create()
        .expect("create target");
    let second = format!("portal=127.0.0.2:{}", tgtd.port());
    tgtd.tgtadm(&["--op", "new", "--mode", "portal", "--param", &second])
        .expect("tgtd listens on 127.0.0.2 too");
    (tgtd, one, two)
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn is_rlun_mount(mp: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    rlun::fuse::find_mount(&info, &mp.to_string_lossy()).is_some_and(|m| m.fstype == "fuse.rlun")
}

/// fio verify, as scripts/soak.sh runs it, for `secs` seconds; its JSON
/// goes to `out`.
fn fio(target: &[&str], secs: u32, out: &Path) -> ChildGuard {
    let runtime = format!("--runtime={secs}");
    let output = format!("--output={}", out.display());
    ChildGuard(
        Command::new("fio")
            .args([
                "--name=mp",
                "--rw=randwrite",
                "--bsrange=4k-64k",
                "--size=16M",
                "--verify=crc32c",
                "--verify_backlog=32",
                "--do_verify=1",
                "--continue_on_error=all",
                "--verify_state_save=0",
                "--time_based",
                &runtime,
                "--output-format=json",
                &output,
            ])
            .args(target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fio"),
    )
}

/// fio's errors (I/O and verify), and the bytes it wrote.
fn fio_result(mut child: ChildGuard, out: &Path) -> (u64, u64, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("poll fio") {
            break s;
        }
        assert!(Instant::now() < deadline, "fio did not finish");
        thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.0.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let text = fs::read_to_string(out).unwrap_or_default();
    let start = text.find('{').unwrap_or(0);
    let v = json(&text[start..]);
    let job = &v["jobs"][0];
    let errors = job["error"].as_u64().unwrap_or(u64::MAX) + job["total_err"].as_u64().unwrap_or(0);
    let written = job["write"]["io_bytes"].as_u64().unwrap_or(0);
    (
        errors + u64::from(!status.success()),
        written,
        format!("{status}: {stderr}"),
    )
}

#[test]
fn fio_verify_through_mount_and_serve_survives_cut_reset_and_restored_paths() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, one, two) = two_portal_tgtd(dir.path());
    let port = tgtd.port();
    let second = format!("127.0.0.2:{port}");
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).expect("mount point");
    let socket = dir.path().join("nbd.sock");

    let mut margs = vec![
        "mount".to_string(),
        tgtd.url(IQN, 1),
        mp.display().to_string(),
        "--portal".into(),
        second.clone(),
        "-v".into(),
    ];
    margs.extend(FAST.iter().map(|s| s.to_string()));
    let m_log = dir.path().join("mount.log");
    let s_log = dir.path().join("serve.log");
    let mut mount = spawn_logged(&margs, &m_log);
    let mut sargs = vec![
        "serve".to_string(),
        tgtd.url(IQN, 2),
        "--socket".into(),
        socket.display().to_string(),
        "--portal".into(),
        second.clone(),
        "--multipath-policy".into(),
        "round-robin".into(),
        "-v".into(),
    ];
    sargs.extend(FAST.iter().map(|s| s.to_string()));
    let mut serve = spawn_logged(&sargs, &s_log);
    wait_for("the mount", Duration::from_secs(30), || is_rlun_mount(&mp));
    wait_for("the NBD socket", Duration::from_secs(30), || {
        socket.exists()
    });

    let secs = 34;
    let out_m = dir.path().join("fio-mount.json");
    let out_s = dir.path().join("fio-nbd.json");
    let file = format!("--filename={}", mp.join("lun1").display());
    let uri = format!("--uri=nbd+unix:///lun2?socket={}", socket.display());
    let fio_m = fio(&["--ioengine=psync", &file], secs, &out_m);
    let fio_s = fio(&["--ioengine=nbd", &uri], secs, &out_s);

    let cut = Cut::new("fio");
    let phase = |what: &str, secs: u64| {
        eprintln!("{what} for {secs} s");
        thread::sleep(Duration::from_secs(secs));
    };
    phase("warm-up", 3);
    cut.cut("127.0.0.1", port, false);
    phase("the first portal black-holed", 7);
    // `rlun paths` sees it: the first path down, I/O on the second.
    let out = run_rlun(["paths", &mp.display().to_string(), "--json"], &[]);
    let text = assert_success(&out, "rlun paths");
    let v = json(&text);
    let m = &v[0]["luns"][0]["multipath"];
    let down = m["paths"].as_array().expect("paths");
    cut.restore();
    assert_eq!(m["policy"], "failover", "{text}");
    assert_eq!(down.len(), 2, "{text}");
    assert_eq!(down[0]["up"], false, "the cut path is shown down: {text}");
    assert_eq!(down[1]["in_use"], true, "I/O is on the other path: {text}");
    assert!(m["failovers"].as_u64() >= Some(1), "{text}");
    phase("restored", 4);
    cut.cut("127.0.0.1", port, true);
    phase("the first portal reset", 3);
    cut.restore();
    phase("restored", 4);
    cut.cut("127.0.0.2", port, false);
    phase("the second portal black-holed", 4);
    cut.restore();
    phase("restored", 3);
    cut.cut("127.0.0.1", port, false);
    cut.cut("127.0.0.2", port, false);
    phase(
        "both portals black-holed (less than the replacement timeout)",
        3,
    );
    cut.restore();

    let (err_m, wrote_m, status_m) = fio_result(fio_m, &out_m);
    let (err_s, wrote_s, status_s) = fio_result(fio_s, &out_s);

    // Read back what fio left through the mount, then stop both and
    // compare with the backing files.
    let through_mount = fs::read(mp.join("lun1")).expect("read lun1 through the mount");
    let through_nbd = dir.path().join("lun2.copy");
    let copy = run_with_timeout(
        Command::new("nbdcopy").args([
            &format!("nbd+unix:///lun2?socket={}", socket.display()),
            &through_nbd.display().to_string(),
        ]),
        Duration::from_secs(60),
    );
    assert!(copy.status.success(), "nbdcopy: {}", both(&copy));
    let _ = Command::new("fusermount3").arg("-u").arg(&mp).output();
    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .output();
    let m_exit = wait_exit(&mut mount);
    let s_exit = wait_exit(&mut serve);
    let m_log = fs::read_to_string(&m_log).unwrap_or_default();
    let s_log = fs::read_to_string(&s_log).unwrap_or_default();

    assert_eq!(err_m, 0, "fio through the mount: {status_m}\n{m_log}");
    assert_eq!(err_s, 0, "fio through NBD: {status_s}\n{s_log}");
    assert!(wrote_m > 0 && wrote_s > 0, "fio wrote nothing");
    assert_eq!(m_exit, Some(0), "rlun mount exit:\n{m_log}");
    assert_eq!(s_exit, Some(0), "rlun serve exit:\n{s_log}");
    assert_same_bytes(
        &fs::read(&one).expect("backing 1"),
        &through_mount,
        "LUN 1: backing file vs. the mount",
    );
    assert_same_bytes(
        &fs::read(&two).expect("backing 2"),
        &fs::read(&through_nbd).expect("copy"),
        "LUN 2: backing file vs. NBD",
    );
    // The paths really failed and came back, in both processes.
    for (what, log) in [("mount", &m_log), ("serve", &s_log)] {
        assert!(
            log.contains("path failed"),
            "{what}: no path failed:\n{log}"
        );
        assert!(
            log.contains("path is back"),
            "{what}: no path came back:\n{log}"
        );
    }
    assert!(
        m_log.contains("I/O moves to another path"),
        "mount never failed over:\n{m_log}"
    );
}

/// Exit code of a child that was asked to stop.
fn wait_exit(child: &mut ChildGuard) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().expect("poll") {
            return s.code();
        }
        assert!(Instant::now() < deadline, "rlun did not exit");
        thread::sleep(Duration::from_millis(50));
    }
}

/// `rlun mount` of LUN 1 through both portals of `tgtd` (the URL's and
/// 127.0.0.2) with FAST checks and `extra` arguments, at `dir`/mnt, its
/// log in `dir`/mount.log; returns once it is mounted.
fn two_path_mount(tgtd: &Tgtd, dir: &Path, extra: &[&str]) -> (ChildGuard, PathBuf, PathBuf) {
    let mp = dir.join("mnt");
    fs::create_dir(&mp).expect("mount point");
    let mut args = vec![
        "mount".to_string(),
        tgtd.url(IQN, 1),
        mp.display().to_string(),
        "--portal".into(),
        format!("127.0.0.2:{}", tgtd.port()),
        "-v".into(),
    ];
    args.extend(FAST.iter().chain(extra).map(|s| s.to_string()));
    let log = dir.join("mount.log");
    let mount = spawn_logged(&args, &log);
    wait_for("the mount", Duration::from_secs(30), || is_rlun_mount(&mp));
    (mount, mp, log)
}

/// Start `rlun ARGS...` with its stderr (the log) going to `log`.
fn spawn_logged(args: &[String], log: &Path) -> ChildGuard {
    let file = fs::File::create(log).expect("log file");
    ChildGuard(
        Command::new(rlun_bin())
            .args(args)
            .stdin(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start rlun"),
    )
}

#[test]
fn a_write_in_flight_on_a_cut_path_does_not_land_after_its_retry() {
    let log = stale_write_case("lun-reset");
    assert!(
        log.contains("LOGICAL UNIT RESET through another path ended the failed path's tasks; its writes move now")
            && log.contains("commands=1"),
        "the write did not move after a LUN reset:\n{log}"
    );
}

#[test]
fn with_path_timeout_fencing_a_caught_write_waits_out_the_path_timeout() {
    let log = stale_write_case("path-timeout");
    assert!(
        !log.contains("LOGICAL UNIT RESET"),
        "a reset was sent with --path-fence path-timeout:\n{log}"
    );
    assert!(
        log.contains("path unreachable past the path timeout; its commands move to another path"),
        "the write did not wait for the path timeout:\n{log}"
    );
}

/// Write "O" through a mount whose preferred path was just cut, then "N"
/// once it moved, restore the network and check that "N" stays: the
/// first write, caught on the cut path, never lands after its retry.
/// With `fence` as `--path-fence`; returns rlun's log.
fn stale_write_case(fence: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, one, _) = two_portal_tgtd(dir.path());
    let port = tgtd.port();
    let extra = ["--cache", "none", "--path-fence", fence];
    let (mut mount, mp, log) = two_path_mount(&tgtd, dir.path(), &extra);
    let lun = mp.join("lun1");
    let at = 100 * 4096u64;
    let write = |byte: u8| {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&lun)
            .expect("open lun1");
        f.write_all_at(&[byte; 4096], at).expect("write");
        f.sync_all().expect("fsync");
    };

    let cut = Cut::new("stale");
    // The first portal carries I/O (failover, preferred). Cut it, then
    // write "O": the write goes out on it and is lost in the network,
    // until the path is given up and it is sent again on the other.
    cut.cut("127.0.0.1", port, false);
    let started = Instant::now();
    write(b'O');
    let stall = started.elapsed();
    // Then "N" over the other path, and the network comes back: the first
    // write, still in our socket's send queue when the path was given up,
    // must not reach the target now.
    write(b'N');
    cut.restore();
    thread::sleep(Duration::from_secs(12));
    let _ = Command::new("fusermount3").arg("-u").arg(&mp).output();
    let exit = wait_exit(&mut mount);
    let log = fs::read_to_string(&log).unwrap_or_default();

    use std::os::unix::fs::FileExt;
    let mut got = [0u8; 4096];
    fs::File::open(&one)
        .expect("backing")
        .read_exact_at(&mut got, at)
        .expect("read backing");
    assert_eq!(exit, Some(0), "{log}");
    assert!(
        got.iter().all(|&b| b == b'N'),
        "the later write was overwritten by the one sent on the cut path (first byte {:?}):\n{log}",
        got[0] as char
    );
    assert!(
        stall >= Duration::from_secs(2),
        "the first write did not wait for the cut path ({stall:?}): the test proves nothing"
    );
    assert!(log.contains("I/O moves to another path"), "{log}");
    eprintln!("--path-fence {fence}: the caught write completed after {stall:?}");
    log
}

/// Another host's initiator (libiscsi's iscsi-perf, 32 reads in flight
/// through the second portal) on the LUN that a mount fails over, with
/// the default `--path-fence path-timeout`: no LUN reset is sent, and
/// its run ends in time and without an error. With `--path-fence
/// lun-reset` (tried by hand) the reset, sent when a write was caught on
/// the cut path, aborts the other host's reads, which tgtd then never
/// answers (no TAS): iscsi-perf, which has no command timeout, hung in 4
/// of 6 tries where the reset was sent.
#[test]
fn other_hosts_io_on_the_lun_runs_through_a_failover_with_the_default_fence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _, _) = two_portal_tgtd(dir.path());
    let port = tgtd.port();
    let (mut mount, mp, log) = two_path_mount(&tgtd, dir.path(), &["--cache", "none"]);
    let out = dir.path().join("fio.json");
    let file = format!("--filename={}", mp.join("lun1").display());
    let fio_m = fio(
        &["--ioengine=libaio", "--iodepth=4", "--direct=1", &file],
        14,
        &out,
    );
    let perf_out = dir.path().join("perf.txt");
    let url = format!("iscsi://127.0.0.2:{port}/{IQN}/1");
    let mut perf = ChildGuard(
        Command::new("iscsi-perf")
            .args(["-i", "iqn.2026-12.org.example:other-host", "-m", "32"])
            .args(["-t", "12", "-r", &url])
            .stdin(Stdio::null())
            .stdout(fs::File::create(&perf_out).expect("perf out"))
            .stderr(Stdio::null())
            .spawn()
            .expect("start iscsi-perf (libiscsi-bin)"),
    );
    // The mount's path (the URL's portal) vanishes; the other host's
    // path (127.0.0.2) stays.
    Cut::new("otherhost").outage(3, "127.0.0.1", port, 6);
    let deadline = Instant::now() + Duration::from_secs(40);
    let perf_exit = loop {
        if let Some(s) = perf.try_wait().expect("poll iscsi-perf") {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let perf_text = fs::read_to_string(&perf_out).unwrap_or_default();
    let perf_tail: String = perf_text
        .chars()
        .rev()
        .take(600)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let (errors, wrote, status) = fio_result(fio_m, &out);
    let _ = Command::new("fusermount3").arg("-u").arg(&mp).output();
    let exit = wait_exit(&mut mount);
    let log = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log.contains("I/O moves to another path"),
        "the mount did not fail over:\n{log}"
    );
    assert!(
        !log.contains("LOGICAL UNIT RESET"),
        "a LUN reset was sent with the default fence:\n{log}"
    );
    let perf_exit = perf_exit.unwrap_or_else(|| {
        panic!("the other host's iscsi-perf (12 s) had not ended 40 s after the cut was restored: its reads were lost\n{perf_tail}\n{log}")
    });
    assert!(
        perf_exit.success() && perf_text.contains("iops average"),
        "the other host's iscsi-perf failed ({perf_exit}):\n{perf_tail}"
    );
    assert_eq!(errors, 0, "fio through the mount: {status}\n{log}");
    assert!(wrote > 0, "fio wrote nothing");
    assert_eq!(exit, Some(0), "rlun mount exit:\n{log}");
}

#[test]
fn paths_that_reach_two_different_logical_units_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = make_backing_file(dir.path(), 8 * MIB, 1);
    let b = make_backing_file(dir.path(), 8 * MIB, 2);
    let mut first = Tgtd::start().expect("tgtd 1");
    first
        .add_target(IQN)
        .lun_file(1, &a, 512)
        .create()
        .expect("target 1");
    let mut other = Tgtd::start().expect("tgtd 2");
    let tid = other
        .add_target(IQN)
        .lun_file(1, &b, 512)
        .create()
        .expect("target 2");
    // tgtd derives the serial number from tid and LUN: make the second
    // unit say who it is.
    other
        .tgtadm(&[
            "--op",
            "update",
            "--mode",
            "logicalunit",
            "--tid",
            &tid.to_string(),
            "--lun",
            "1",
            "--params",
            "scsi_sn=OTHERUNIT,scsi_id=other-unit",
        ])
        .expect("set the serial");
    let out = run_rlun(
        ["info", &first.url(IQN, 1), "--portal", &other.portal()],
        &[],
    );
    assert_failure(&out, 2, &["reaches another logical unit", &other.portal()]);

    // A portal without the target refuses the login: an error at once
    // (the target is not there, exit 5), not a path to wait for.
    let mut empty = Tgtd::start().expect("tgtd 3");
    let c = make_backing_file(dir.path(), MIB, 3);
    empty
        .add_target("iqn.2026-12.org.example:another")
        .lun_file(1, &c, 512)
        .create()
        .expect("target 3");
    let out = run_rlun(
        ["info", &first.url(IQN, 1), "--portal", &empty.portal()],
        &[],
    );
    assert_failure(
        &out,
        5,
        &[
            "the path given with --portal",
            &empty.portal(),
            "it offers iqn.2026-12.org.example:another",
        ],
    );

    // The same unit through one portal given twice is refused as a usage
    // error before any login.
    let out = run_rlun(
        ["info", &first.url(IQN, 1), "--portal", &first.portal()],
        &[],
    );
    assert_failure(&out, 2, &["already a path"]);
}

#[test]
fn bench_keeps_its_queue_depth_on_the_paths_left_when_one_is_cut() {
    bench_under_a_cut("round-robin", &[], &[]);
}

#[test]
fn queue_length_keeps_the_queue_on_the_path_left_when_one_is_cut() {
    bench_under_a_cut("queue-length", &[], &[]);
}

/// `rlun bench` spreading its queue over two paths with `policy`, one of
/// them black-holed for 4 s of its 10: it ends normally, with I/O done
/// and the cut seen.
/// `rlun bench` (random writes, QD16) through 127.0.0.1 and 127.0.0.2 and
/// the `more` addresses of the same tgtd, under `policy` (and `extra`
/// arguments), with the second portal cut for 4 s: it finishes and
/// completes I/O. Returns its log.
fn bench_under_a_cut(policy: &str, more: &[&str], extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _, _) = two_portal_tgtd(dir.path());
    let port = tgtd.port();
    for host in more {
        let portal = format!("portal={host}:{port}");
        tgtd.tgtadm(&["--op", "new", "--mode", "portal", "--param", &portal])
            .expect("tgtd listens on one more address");
    }
    let log = dir.path().join("bench.log");
    let mut args = vec![
        "bench".to_string(),
        tgtd.url(IQN, 1),
        "--pattern".into(),
        "randwrite".into(),
        "--allow-write".into(),
        "--qd".into(),
        "16".into(),
        "--duration".into(),
        "10s".into(),
        "--json".into(),
        "--portal".into(),
        format!("127.0.0.2:{port}"),
        "--multipath-policy".into(),
        policy.into(),
        "-v".into(),
    ];
    for host in more {
        args.extend(["--portal".to_string(), format!("{host}:{port}")]);
    }
    args.extend(FAST.iter().chain(extra).map(|s| s.to_string()));
    let out_path = dir.path().join("bench.json");
    let mut bench = ChildGuard(
        Command::new(rlun_bin())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out_path).expect("out"))
            .stderr(fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start rlun bench"),
    );
    Cut::new("bench").outage(2, "127.0.0.2", port, 4);
    let exit = wait_exit(&mut bench);
    let log = fs::read_to_string(&log).unwrap_or_default();
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    assert_eq!(exit, Some(0), "rlun bench ({policy}):\n{out}\n{log}");
    assert!(
        log.contains(&format!("policy=\"{policy}\"")),
        "the policy was not {policy}:\n{log}"
    );
    let v = json(out.lines().last().unwrap_or("{}"));
    assert!(v["ios"].as_u64() > Some(0), "{out}");
    assert!(log.contains("path failed"), "the cut was not seen:\n{log}");
    log
}

#[test]
fn with_a_third_path_carrying_io_the_cut_paths_writes_wait_instead_of_a_lun_reset() {
    // Round-robin over three paths: a LUN reset through one of the two
    // left would abort the commands in flight on the other.
    let log = bench_under_a_cut(
        "round-robin",
        &["127.0.0.3"],
        &["--path-fence", "lun-reset"],
    );
    assert!(
        log.contains("another path carries this LUN's I/O"),
        "the third path's I/O was not considered:\n{log}"
    );
    assert!(
        !log.contains("LOGICAL UNIT RESET through another path ended"),
        "a LUN reset was sent while a third path carried I/O:\n{log}"
    );
}

/// `--failback manual`: after a failover the I/O stays on the path it
/// moved to when the preferred path comes back (`--failback immediate`,
/// the default, is what the fio test above and the lab's ALUA scenario
/// see: I/O returns; with it this test fails at "manual failback").
#[test]
fn manual_failback_keeps_io_on_the_path_it_moved_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _, _) = two_portal_tgtd(dir.path());
    let port = tgtd.port();
    let (mut mount, mp, log) = two_path_mount(&tgtd, dir.path(), &["--failback", "manual"]);
    let out = dir.path().join("fio.json");
    let file = format!("--filename={}", mp.join("lun1").display());
    let fio_m = fio(&["--ioengine=psync", &file], 24, &out);
    let paths = || {
        let out = run_rlun(["paths", &mp.display().to_string(), "--json"], &[]);
        let text = assert_success(&out, "rlun paths");
        let v = json(&text);
        let p = v[0]["luns"][0]["multipath"]["paths"].clone();
        (p, text)
    };
    let cut = Cut::new("failback");
    thread::sleep(Duration::from_secs(3));
    let (p, text) = paths();
    assert_eq!(
        p[0]["in_use"], true,
        "I/O starts on the URL's portal: {text}"
    );
    cut.cut("127.0.0.1", port, false);
    wait_for("I/O on the second path", Duration::from_secs(20), || {
        let (p, _) = paths();
        p[0]["up"] == false && p[1]["in_use"] == true
    });
    cut.restore();
    wait_for("the first path back up", Duration::from_secs(40), || {
        paths().0[0]["up"] == true
    });
    thread::sleep(Duration::from_secs(4));
    let (p, text) = paths();
    assert_eq!(
        p[1]["in_use"], true,
        "manual failback: I/O stays on the second path: {text}"
    );
    assert_eq!(
        p[0]["in_use"], false,
        "manual failback: not back on the first: {text}"
    );
    let (errors, wrote, status) = fio_result(fio_m, &out);
    let _ = Command::new("fusermount3").arg("-u").arg(&mp).output();
    let exit = wait_exit(&mut mount);
    let log = fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(errors, 0, "fio through the mount: {status}\n{log}");
    assert!(wrote > 0, "fio wrote nothing");
    assert_eq!(exit, Some(0), "rlun mount exit:\n{log}");
    assert!(
        log.contains("path is back"),
        "the first path never came back:\n{log}"
    );
}
