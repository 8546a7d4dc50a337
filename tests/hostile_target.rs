//! rlun against a raw-TCP "target" that answers the login with malformed or
//! unfriendly bytes (tests/common/hostile.rs). Whatever the target does,
//! rlun must end within its timeout with the documented exit code and one
//! clear `rlun: ` line, never panic and never hang.
//!
//! The last tests use a real tgtd instead: one freezes it in the middle of a
//! session, one puts a proxy in front of it that lets every login through
//! and then breaks the connection (tests/common/proxy.rs).
//!
//! Each case runs both `rlun info` (a normal session) and `rlun discover`
//! (a discovery session): both go through the same login code, but from
//! different entry points.

mod common;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::cli::{assert_failure, both, timed_rlun};
use common::hostile::{self, Behaviour, HostileTarget};
use common::{rlun_bin, ChildGuard, Fault, FaultProxy, Tgtd};

const IQN: &str = "iqn.2026-11.org.example:hostile";
/// Login timeout given to rlun in every case; a hostile target that keeps
/// the connection open must not keep rlun longer than this.
const LOGIN_TIMEOUT: &str = "3s";
/// Hard limit for one rlun run, after which the harness kills it.
const HARD_LIMIT: Duration = Duration::from_secs(20);

// rlun's documented exit codes (`rlun::cli::exit`).
const EXIT_UNREACHABLE: i32 = 3;
const EXIT_NOT_FOUND: i32 = 5;
const EXIT_PROTOCOL: i32 = 7;

/// The two commands that log in, with `LOGIN_TIMEOUT`.
fn runs(target: &HostileTarget) -> [(&'static str, Output, Duration); 2] {
    let url = target.url(IQN, 1);
    let portal = target.portal();
    let (info, info_took) = timed_rlun(
        &["info", "--login-timeout", LOGIN_TIMEOUT, &url],
        &[],
        HARD_LIMIT,
    );
    let (disc, disc_took) = timed_rlun(
        &["discover", "--login-timeout", LOGIN_TIMEOUT, &portal],
        &[],
        HARD_LIMIT,
    );
    [("info", info, info_took), ("discover", disc, disc_took)]
}

/// Every run failed with `code`, one `rlun: ` line holding `needles`, within
/// `max`; and the target saw a login request from each.
#[track_caller]
fn assert_all_fail(target: &HostileTarget, code: i32, needles: &[&str], max: Duration) {
    let results = runs(target);
    for (cmd, out, took) in &results {
        assert!(
            out.status.code().is_some(),
            "rlun {cmd} was killed by a signal: {}\n{}",
            out.status,
            both(out)
        );
        let line = assert_failure(out, code, needles);
        eprintln!("rlun {cmd} ({took:?}): {line}");
        assert!(
            *took < max,
            "rlun {cmd} took {took:?} (limit {max:?}): {line}"
        );
        assert!(out.stdout.is_empty(), "rlun {cmd} printed:\n{}", both(out));
    }
    assert!(
        target.received().len() >= results.len(),
        "the hostile target saw {} login requests",
        target.received().len()
    );
}

/// Within this a malformed answer must be refused: well below the login
/// timeout, so rlun did not just wait for it.
const PROMPT: Duration = Duration::from_secs(2);

#[test]
fn truncated_header_then_close_is_a_protocol_error() {
    let target = HostileTarget::start(Behaviour::ReplyThenClose(hostile::truncated_bhs));

    assert_all_fail(&target, EXIT_PROTOCOL, &["middle of a pdu"], PROMPT);
}

#[test]
fn oversized_data_segment_length_is_refused_without_waiting_for_the_data() {
    // The connection stays open: rlun must refuse the header, not wait for
    // 16 MiB that never come.
    let target = HostileTarget::start(Behaviour::Reply(hostile::oversized_data_segment));

    assert_all_fail(
        &target,
        EXIT_PROTOCOL,
        &["bad pdu", "16777215 bytes"],
        PROMPT,
    );
}

#[test]
fn unknown_opcode_in_the_login_answer_is_a_protocol_error() {
    let target = HostileTarget::start(Behaviour::Reply(hostile::unknown_opcode));

    assert_all_fail(&target, EXIT_PROTOCOL, &["unknown opcode 0x1c"], PROMPT);
}

#[test]
fn bogus_login_text_is_a_protocol_error() {
    let target = HostileTarget::start(Behaviour::Reply(hostile::bogus_text));

    assert_all_fail(&target, EXIT_PROTOCOL, &["malformed"], PROMPT);
}

#[test]
fn login_reject_target_not_found_exits_5() {
    let target = HostileTarget::start(Behaviour::Reply(hostile::target_not_found));

    assert_all_fail(&target, EXIT_NOT_FOUND, &["not found", "0x0203"], PROMPT);
}

#[test]
fn connection_closed_without_an_answer_exits_3() {
    let target = HostileTarget::start(Behaviour::CloseImmediately);

    assert_all_fail(&target, EXIT_UNREACHABLE, &["closed"], PROMPT);
}

#[test]
fn silent_target_hits_the_login_timeout_and_exits_3() {
    let target = HostileTarget::start(Behaviour::Silent);

    assert_all_fail(
        &target,
        EXIT_UNREACHABLE,
        &["timed out after 3s"],
        Duration::from_secs(8),
    );
}

#[test]
fn garbage_instead_of_a_pdu_is_a_protocol_error() {
    let target = HostileTarget::start(Behaviour::Bytes(vec![0x5a; 48]));

    assert_all_fail(&target, EXIT_PROTOCOL, &["bad pdu"], PROMPT);
}

#[test]
fn login_answer_with_a_foreign_itt_is_a_protocol_error() {
    fn wrong_itt(request: &[u8]) -> Vec<u8> {
        let mut rsp = hostile::LoginResponse::answering(request);
        rsp.itt = rsp.itt.wrapping_add(1);
        rsp.to_bytes()
    }
    let target = HostileTarget::start(Behaviour::Reply(wrong_itt));

    assert_all_fail(&target, EXIT_PROTOCOL, &["task tag"], PROMPT);
}

#[test]
fn target_frozen_for_good_ends_rlun_with_exit_3_after_the_replacement_timeout() {
    // A real target that logs in fine and then stops answering (SIGSTOP):
    // the NOP-Out keepalive must notice, rlun tries to log in again, and
    // once the replacement timeout has passed the run ends - never a hang.
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN).lun_null(1).create().expect("target");
    let url = tgtd.url(IQN, 1);
    let mut bench = ChildGuard(
        Command::new(rlun_bin())
            .args([
                "bench",
                "--duration",
                "120s",
                "--qd",
                "4",
                "-q",
                "--nop-interval",
                "1s",
                "--nop-timeout",
                "2s",
                "--login-timeout",
                "2s",
                "--replacement-timeout",
                "4s",
                &url,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rlun bench"),
    );
    thread::sleep(Duration::from_millis(1500));
    assert!(
        bench.try_wait().expect("poll rlun").is_none(),
        "rlun bench ended before the target froze"
    );

    tgtd.pause().expect("pause tgtd");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = bench.try_wait().expect("poll rlun") {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(45) {
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    tgtd.resume().expect("resume tgtd");

    let status = status.expect("rlun still running 45 s after the target froze");
    let mut stderr = Vec::new();
    if let Some(mut pipe) = bench.stderr.take() {
        pipe.read_to_end(&mut stderr).expect("read rlun's stderr");
    }
    let out = Output {
        status,
        stdout: Vec::new(),
        stderr,
    };
    assert_failure(&out, EXIT_UNREACHABLE, &["replacement timeout"]);
    // NOP interval 1 s + NOP timeout 2 s + replacement timeout 4 s + one
    // login attempt of 2 s in progress, with slack for a loaded machine.
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn target_breaking_every_connection_right_after_login_ends_rlun_with_exit_3_after_the_replacement_timeout(
) {
    // Each login succeeds, then the first PDU after it is garbage. Logins
    // must not restart the replacement timeout: the command waits without
    // the session making progress, so rlun gives up after 10 s. Before this
    // rule it reconnected for ever (the harness would kill it at the limit).
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN).lun_null(1).create().expect("target");
    let upstream = tgtd.portal().parse().expect("tgtd portal address");
    let proxy = FaultProxy::start(upstream, Fault::CorruptAfterLogin);

    let (out, took) = timed_rlun(
        &["info", "--replacement-timeout", "10s", &proxy.url(IQN, 1)],
        &[],
        Duration::from_secs(120),
    );

    assert_failure(&out, EXIT_UNREACHABLE, &["replacement timeout"]);
    assert!(
        proxy.logins() >= 2 && proxy.corrupted() == proxy.logins(),
        "logins {}, corrupted {}",
        proxy.logins(),
        proxy.corrupted()
    );
    // The clock runs from the first failure: logins at about 0 s, 2 s and
    // 6 s (DefaultTime2Wait 2 s, then 4 s, 8 s… back-off), give-up at 10 s.
    // Had each login restarted it, the fourth login (14 s) would come too.
    assert!(
        proxy.logins() <= 3,
        "{} logins: a login restarted the replacement timeout",
        proxy.logins()
    );
    let log = both(&out);
    assert!(
        log.contains("reconnects in a row failed right after login"),
        "no summary of the repeated failure in:\n{log}"
    );
    // 10 s replacement timeout; the bound only catches a run that keeps
    // going (slack for a loaded machine).
    assert!(took < Duration::from_secs(60), "{took:?}");
}
