//! Transparent reconnect against a real tgtd: the target is killed and
//! restarted, its TCP connection is destroyed from outside (`ss -K`), or it
//! is frozen past the NOP timeout - in the middle of a whole-LUN copy. The
//! copy must finish with exit 0 and byte-exact data; a target gone for good
//! must end the copy cleanly after the replacement timeout.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

const IQN: &str = "iqn.2026-11.org.example:reconnect";
/// Big enough that a copy with small transfers at queue depth 1 takes a
/// few seconds, so the fault lands in its middle.
const LUN_SIZE: u64 = 192 << 20;

/// Fast failure detection, so the tests do not wait for the defaults.
const FAST: [&str; 8] = [
    "--nop-interval",
    "1s",
    "--nop-timeout",
    "2s",
    "--login-timeout",
    "3s",
    "--connect-timeout",
    "2s",
];

fn slow_copy_args<'a>(src: &'a str, dst: &'a str, replacement: &'a str) -> Vec<&'a str> {
    let mut v = vec!["cp", "--bs", "8k", "--qd", "1", "-v"];
    v.extend(FAST);
    v.extend(["--replacement-timeout", replacement, src, dst]);
    v
}

/// Start rlun, wait `before`, run `fault`, then wait for rlun (at most 120 s).
fn run_with_fault(args: &[&str], before: Duration, fault: impl FnOnce()) -> Output {
    let mut child = ChildGuard(
        Command::new(rlun_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rlun"),
    );
    thread::sleep(before);
    assert!(
        child.try_wait().expect("poll rlun").is_none(),
        "rlun finished before the fault was injected; the test proves nothing"
    );
    fault();
    let start = Instant::now();
    loop {
        if child.try_wait().expect("poll rlun").is_some() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rlun still running 120 s after the fault"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().expect("reap rlun");
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    use std::io::Read;
    if let Some(mut p) = child.stdout.take() {
        p.read_to_end(&mut stdout).expect("read stdout");
    }
    if let Some(mut p) = child.stderr.take() {
        p.read_to_end(&mut stderr).expect("read stderr");
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

fn files_equal(a: &Path, b: &Path) -> bool {
    std::fs::read(a).expect("read a") == std::fs::read(b).expect("read b")
}

fn setup(dir: &Path) -> (Tgtd, String, std::path::PathBuf) {
    let backing = make_backing_file(dir, LUN_SIZE, 1);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &backing, 512)
        .create()
        .expect("target");
    let url = tgtd.url(IQN, 1);
    (tgtd, url, backing)
}

#[test]
fn write_survives_tgtd_killed_and_restarted_mid_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tgtd, url, backing) = setup(dir.path());
    let src = make_backing_file(dir.path(), LUN_SIZE, 2);
    let src_s = src.to_str().unwrap().to_string();

    let out = run_with_fault(
        &slow_copy_args(&src_s, &url, "60s"),
        Duration::from_millis(700),
        || {
            tgtd.kill();
            thread::sleep(Duration::from_millis(1500));
            tgtd.restart().expect("restart tgtd");
        },
    );

    assert_success(&out, "cp across a tgtd restart");
    assert!(
        stderr(&out).contains("re-established"),
        "rlun did reconnect: {}",
        stderr(&out)
    );
    assert!(
        files_equal(&src, &backing),
        "LUN content equals the source after the restart"
    );
}

#[test]
fn read_survives_tgtd_killed_and_restarted_mid_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tgtd, url, backing) = setup(dir.path());
    let dst = dir.path().join("copy.img");
    let dst_s = dst.to_str().unwrap().to_string();

    let out = run_with_fault(
        &slow_copy_args(&url, &dst_s, "60s"),
        Duration::from_millis(700),
        || {
            tgtd.kill();
            thread::sleep(Duration::from_millis(1500));
            tgtd.restart().expect("restart tgtd");
        },
    );

    assert_success(&out, "cp across a tgtd restart");
    assert!(stderr(&out).contains("re-established"), "{}", stderr(&out));
    assert!(files_equal(&dst, &backing), "copy equals the LUN");
}

#[test]
fn write_survives_its_tcp_connection_destroyed_from_outside() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, url, backing) = setup(dir.path());
    let src = make_backing_file(dir.path(), LUN_SIZE, 3);
    let src_s = src.to_str().unwrap().to_string();
    let port = tgtd.port();

    let out = run_with_fault(
        &slow_copy_args(&src_s, &url, "60s"),
        Duration::from_millis(700),
        || {
            let status = Command::new("ss")
                .args(["-K", "dst", "127.0.0.1", "dport", "=", &format!(":{port}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run ss -K");
            assert!(status.success(), "ss -K failed");
        },
    );

    assert_success(&out, "cp across a destroyed connection");
    assert!(stderr(&out).contains("re-established"), "{}", stderr(&out));
    assert!(files_equal(&src, &backing));
}

#[test]
fn read_survives_target_frozen_longer_than_the_nop_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, url, backing) = setup(dir.path());
    let dst = dir.path().join("copy.img");
    let dst_s = dst.to_str().unwrap().to_string();

    let out = run_with_fault(
        &slow_copy_args(&url, &dst_s, "60s"),
        Duration::from_millis(700),
        || {
            tgtd.pause().expect("pause tgtd");
            // NOP interval 1 s + NOP timeout 2 s: rlun gives up on the connection
            // well within these 5 s and starts logging in again.
            thread::sleep(Duration::from_secs(5));
            tgtd.resume().expect("resume tgtd");
        },
    );

    assert_success(&out, "cp across a frozen target");
    let err = stderr(&out);
    assert!(err.contains("stopped answering"), "{err}");
    assert!(err.contains("re-established"), "{err}");
    assert!(files_equal(&dst, &backing));
}

#[test]
fn write_to_a_target_gone_for_good_fails_cleanly_after_the_replacement_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tgtd, url, backing) = setup(dir.path());
    let before = std::fs::read(&backing).unwrap();
    let src = make_backing_file(dir.path(), LUN_SIZE, 4);
    let src_s = src.to_str().unwrap().to_string();
    let mut killed_at = None;

    let out = run_with_fault(
        &slow_copy_args(&src_s, &url, "3s"),
        Duration::from_millis(700),
        || {
            tgtd.kill();
            killed_at = Some(Instant::now());
        },
    );
    let took = killed_at.unwrap().elapsed();

    assert_failure(&out, 3, &["replacement timeout"]);
    assert!(
        took < Duration::from_secs(30),
        "ended {took:?} after the kill"
    );
    // What reached the LUN before the kill is a prefix of the source, block
    // by block; every block after that prefix is exactly what it was before.
    let after = std::fs::read(&backing).unwrap();
    let src_bytes = std::fs::read(&src).unwrap();
    assert_eq!(after.len(), before.len(), "the backing file changed size");
    const BLOCK: usize = 512;
    let blocks = after.len() / BLOCK;
    let block = |buf: &[u8], i: usize| buf[i * BLOCK..(i + 1) * BLOCK].to_vec();
    let written = (0..blocks)
        .find(|&i| block(&after, i) != block(&src_bytes, i))
        .unwrap_or(blocks);
    assert!(
        written > 0,
        "nothing reached the LUN before the kill; the test proves nothing"
    );
    assert!(
        written < blocks,
        "the whole source arrived despite the kill"
    );
    for i in written..blocks {
        assert!(
            block(&after, i) == block(&before, i),
            "block {i} changed, past the {written}-block prefix the copy wrote"
        );
    }
}

/// A copy through a [`FaultProxy`] in front of tgtd.
fn setup_proxied(dir: &Path) -> (Tgtd, FaultProxy, std::path::PathBuf) {
    let backing = make_backing_file(dir, LUN_SIZE, 1);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &backing, 512)
        .create()
        .expect("target");
    let upstream = tgtd.portal().parse().expect("tgtd portal address");
    let proxy = FaultProxy::start(upstream, Fault::None);
    (tgtd, proxy, backing)
}

#[test]
fn read_survives_every_connection_dropped_for_two_seconds_mid_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (_tgtd, proxy, backing) = setup_proxied(dir.path());
    let dst = dir.path().join("copy.img");
    let dst_s = dst.to_str().unwrap().to_string();
    let url = proxy.url(IQN, 1);

    let out = run_with_fault(
        &slow_copy_args(&url, &dst_s, "60s"),
        Duration::from_millis(700),
        || {
            proxy.set_fault(Fault::Drop);
            thread::sleep(Duration::from_secs(2));
            proxy.set_fault(Fault::None);
        },
    );

    assert_success(&out, "cp across dropped connections");
    assert!(stderr(&out).contains("re-established"), "{}", stderr(&out));
    assert!(proxy.logins() >= 2, "logins: {}", proxy.logins());
    assert!(files_equal(&dst, &backing), "copy equals the LUN");
}

#[test]
fn read_survives_target_traffic_delayed_past_the_nop_timeout_mid_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (_tgtd, proxy, backing) = setup_proxied(dir.path());
    let dst = dir.path().join("copy.img");
    let dst_s = dst.to_str().unwrap().to_string();
    let url = proxy.url(IQN, 1);

    let out = run_with_fault(
        &slow_copy_args(&url, &dst_s, "60s"),
        Duration::from_millis(700),
        || {
            // 2.5 s per chunk is more than the 2 s NOP timeout: rlun gives
            // up on the connection and logs in again once it is fast again.
            proxy.set_fault(Fault::Delay(Duration::from_millis(2500)));
            thread::sleep(Duration::from_secs(4));
            proxy.set_fault(Fault::None);
        },
    );

    assert_success(&out, "cp across a slow spell");
    let err = stderr(&out);
    assert!(err.contains("NOP-Out"), "{err}");
    assert!(err.contains("re-established"), "{err}");
    assert!(files_equal(&dst, &backing), "copy equals the LUN");
}
