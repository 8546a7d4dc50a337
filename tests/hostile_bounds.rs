//! Resource bounds under a hostile target (issue 12): text exchanges that
//! never end, a SendTargets answer of unbounded length, R2Ts asking for
//! more than the write holds, Data-In past the read buffer or out of
//! order, and sequence numbers going backwards. Each case ends within its
//! deadline with the documented exit code and one clear `rlun: ` line,
//! and rlun's peak memory stays under a stated bound.
//!
//! Text cases use a scripted target that completes any login
//! (tests/common/scripted.rs); the others put the rewriting proxy
//! (tests/common/proxy.rs, [`FaultProxy::set_rewrite`]) in front of a real
//! tgtd, which does all the SCSI work, and change one field of the PDUs it
//! sends.

mod common;

use std::time::Duration;

use std::path::Path;

use common::cli::{assert_failure, assert_success};
use common::process::Measured;
use common::{
    make_backing_file, run_rlun_measured, Fault, FaultProxy, Rewrite, ScriptedTarget, TextScript,
    Tgtd,
};

const IQN: &str = "iqn.2026-11.org.example:bounds";
/// Hard limit for one rlun run, after which the harness kills it (the test
/// then fails): every case must end well before.
const HARD_LIMIT: Duration = Duration::from_secs(90);

// rlun's documented exit codes (`rlun::cli::exit`).
const EXIT_UNREACHABLE: i32 = 3;
const EXIT_IO: i32 = 6;
const EXIT_PROTOCOL: i32 = 7;

/// Peak RSS allowed for one rlun command against a hostile target: the
/// 16 MiB of text rlun keeps at most per Text exchange
/// (`rlun_iscsi::proto::connection::MAX_TEXT_RESPONSE_BYTES`) on top of what the
/// debug binary needs anyway (about 10 MiB), with room for the allocator.
/// An unbounded answer left unchecked grows past it within seconds.
const PEAK_RSS_LIMIT_KIB: u64 = 64 * 1024;

/// Replacement timeout given to rlun where a target breaks every
/// connection the same way: commands are retried on new connections until
/// the session has made no progress for this long.
const REPLACEMENT_TIMEOUT: &str = "6s";

/// The run stayed under [`PEAK_RSS_LIMIT_KIB`].
#[track_caller]
fn assert_bounded_memory(m: &Measured) {
    eprintln!(
        "rlun peak RSS {} KiB, {:?}: {}",
        m.peak_rss_kib,
        m.took,
        String::from_utf8_lossy(&m.output.stderr)
            .lines()
            .last()
            .unwrap_or_default()
    );
    assert!(
        m.peak_rss_kib > 0 && m.peak_rss_kib < PEAK_RSS_LIMIT_KIB,
        "rlun's peak RSS was {} KiB (limit {PEAK_RSS_LIMIT_KIB} KiB)",
        m.peak_rss_kib
    );
}

// --- text exchanges (scripted target) ---------------------------------------

#[test]
fn endless_text_continuation_ends_discovery_with_a_protocol_error() {
    let target = ScriptedTarget::start(TextScript::EndlessContinuation);

    let m = run_rlun_measured(
        &["discover", "--login-timeout", "3s", &target.portal()],
        HARD_LIMIT,
    );

    assert_failure(&m.output, EXIT_PROTOCOL, &["more than 1024 responses"]);
    assert_bounded_memory(&m);
    assert_eq!(target.logins(), 1);
    // rlun stopped asking at its bound: 1024 answers, not one more.
    assert_eq!(target.text_responses(), 1024);
    assert!(m.took < Duration::from_secs(30), "{:?}", m.took);
}

#[test]
fn unbounded_send_targets_reply_ends_discovery_with_a_protocol_error_within_16_mib() {
    let target = ScriptedTarget::start(TextScript::UnboundedSendTargets);

    let m = run_rlun_measured(
        &["discover", "--login-timeout", "3s", &target.portal()],
        HARD_LIMIT,
    );

    assert_failure(&m.output, EXIT_PROTOCOL, &["over 16 MiB of text"]);
    assert_bounded_memory(&m);
    // Cut off at the first answer past 16 MiB.
    let sent = target.text_bytes();
    assert!(
        sent > 16 << 20 && sent < (16 << 20) + (512 << 10),
        "the target sent {sent} bytes of text"
    );
    assert!(m.took < Duration::from_secs(30), "{:?}", m.took);
}

// --- the rewriting proxy in front of tgtd ------------------------------------

const OP_NOP_IN: u8 = 0x20;
const OP_SCSI_RESPONSE: u8 = 0x21;
const OP_TASK_MGMT_RESPONSE: u8 = 0x22;
const OP_DATA_IN: u8 = 0x25;
const OP_R2T: u8 = 0x31;
/// Responses that carry StatSN, ExpCmdSN and MaxCmdSN at bytes 24, 28, 32.
const NUMBERED: [u8; 5] = [
    OP_NOP_IN,
    OP_SCSI_RESPONSE,
    OP_TASK_MGMT_RESPONSE,
    OP_DATA_IN,
    OP_R2T,
];

fn get32(bhs: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bhs[at], bhs[at + 1], bhs[at + 2], bhs[at + 3]])
}

fn put32(bhs: &mut [u8], at: usize, v: u32) {
    bhs[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn opcode(bhs: &[u8]) -> u8 {
    bhs[0] & 0x3f
}

/// Data-In 1 MiB further than tgtd put it: past any buffer rlun reads into.
fn data_in_past_the_buffer(bhs: &mut [u8], _: &mut Vec<u8>) -> bool {
    if opcode(bhs) != OP_DATA_IN {
        return false;
    }
    put32(bhs, 40, get32(bhs, 40).wrapping_add(1 << 20)); // BufferOffset
    true
}

/// Data-In numbered five ahead: out of order.
fn data_in_out_of_order(bhs: &mut [u8], _: &mut Vec<u8>) -> bool {
    if opcode(bhs) != OP_DATA_IN {
        return false;
    }
    put32(bhs, 36, get32(bhs, 36).wrapping_add(5)); // DataSN
    true
}

/// R2T asking for 4 MiB more than tgtd asked for: more than was sent.
fn r2t_for_more_than_the_write(bhs: &mut [u8], _: &mut Vec<u8>) -> bool {
    if opcode(bhs) != OP_R2T {
        return false;
    }
    put32(bhs, 44, get32(bhs, 44).wrapping_add(4 << 20)); // DesiredDataTransferLength
    true
}

/// Every answer closes the command window (MaxCmdSN = ExpCmdSN - 1), so
/// MaxCmdSN moves backwards and the window never opens again.
fn window_closed_for_good(bhs: &mut [u8], _: &mut Vec<u8>) -> bool {
    if !NUMBERED.contains(&opcode(bhs)) {
        return false;
    }
    put32(bhs, 32, get32(bhs, 28).wrapping_sub(1)); // MaxCmdSN
    true
}

/// StatSN and ExpCmdSN 1000 behind what tgtd sent: both go backwards.
fn numbers_going_backwards(bhs: &mut [u8], _: &mut Vec<u8>) -> bool {
    if !NUMBERED.contains(&opcode(bhs)) {
        return false;
    }
    put32(bhs, 24, get32(bhs, 24).wrapping_sub(1000)); // StatSN
    put32(bhs, 28, get32(bhs, 28).wrapping_sub(1000)); // ExpCmdSN
    true
}

/// tgtd with one 16 MiB file LUN, a proxy rewriting its PDUs with
/// `rewrite`, and an 8 MiB source file of known bytes.
struct Setup {
    _dir: tempfile::TempDir,
    _tgtd: Tgtd,
    proxy: FaultProxy,
    lun: std::path::PathBuf,
    src: std::path::PathBuf,
}

fn setup(rewrite: Rewrite) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let lun = dir.path().join("lun.img");
    std::fs::write(&lun, vec![0u8; 16 << 20]).expect("LUN backing file");
    let src = make_backing_file(dir.path(), 8 << 20, 7);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &lun, 512)
        .create()
        .expect("target");
    let upstream = tgtd.portal().parse().expect("tgtd portal address");
    let proxy = FaultProxy::start(upstream, Fault::None);
    proxy.set_rewrite(Some(rewrite));
    Setup {
        _dir: dir,
        _tgtd: tgtd,
        proxy,
        lun,
        src,
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// `rlun info` through the proxy, with [`REPLACEMENT_TIMEOUT`].
fn info(s: &Setup) -> Measured {
    run_rlun_measured(
        &[
            "info",
            "--replacement-timeout",
            REPLACEMENT_TIMEOUT,
            &s.proxy.url(IQN, 1),
        ],
        HARD_LIMIT,
    )
}

/// A protocol violation on every connection: each command is retried on a
/// new one until the replacement timeout, then rlun fails naming it.
#[track_caller]
fn assert_violation_ends_the_run(s: &Setup, m: &Measured, needles: &[&str]) {
    let mut all = vec!["replacement timeout", "violated the iSCSI protocol"];
    all.extend_from_slice(needles);
    assert_failure(&m.output, EXIT_UNREACHABLE, &all);
    assert_bounded_memory(m);
    assert!(s.proxy.rewritten() >= 1, "the proxy changed nothing");
    // 6 s replacement timeout with logins at about 0, 2 and 6 s; the bound
    // only catches a run that keeps going (slack for a loaded machine).
    assert!(s.proxy.logins() <= 4, "{} logins", s.proxy.logins());
    assert!(m.took < Duration::from_secs(45), "{:?}", m.took);
}

#[test]
fn data_in_past_the_read_buffer_is_refused_and_ends_the_run() {
    let s = setup(data_in_past_the_buffer);
    let m = info(&s);
    assert_violation_ends_the_run(&s, &m, &["Data-In", "overruns"]);
}

#[test]
fn data_in_out_of_order_is_refused_and_ends_the_run() {
    let s = setup(data_in_out_of_order);
    let m = info(&s);
    assert_violation_ends_the_run(&s, &m, &["Data-In", "out of order", "DataSN"]);
}

#[test]
fn r2t_for_more_than_the_write_is_refused_and_ends_the_copy() {
    let s = setup(r2t_for_more_than_the_write);
    let m = run_rlun_measured(
        &[
            "cp",
            "--replacement-timeout",
            REPLACEMENT_TIMEOUT,
            path(&s.src),
            &s.proxy.url(IQN, 1),
        ],
        HARD_LIMIT,
    );
    assert_violation_ends_the_run(&s, &m, &["R2T", "asks for bytes"]);
}

#[test]
fn command_window_closed_for_good_fails_the_command_saying_so() {
    // Only the login response's window is ever open; every later answer
    // closes it. Commands past it wait, time out unsent (2 s each, retried
    // three times) and fail naming the window: no hang.
    let s = setup(window_closed_for_good);
    let m = run_rlun_measured(
        &[
            "cp",
            "--command-timeout",
            "2s",
            path(&s.src),
            &s.proxy.url(IQN, 1),
        ],
        HARD_LIMIT,
    );
    assert_failure(&m.output, EXIT_IO, &["command window closed", "MaxCmdSN"]);
    assert_bounded_memory(&m);
    assert!(s.proxy.rewritten() >= 1, "the proxy changed nothing");
    // Four 2 s deadlines; the bound only catches a run that keeps going.
    assert!(m.took < Duration::from_secs(45), "{:?}", m.took);
}

#[test]
fn stat_sn_and_exp_cmd_sn_going_backwards_are_ignored_and_the_copy_is_exact() {
    // RFC 7143 §4.2.2.1 and §3.2.2.1: a stale ExpCmdSN/MaxCmdSN is ignored;
    // a StatSN behind the one expected acknowledges nothing new. The session
    // carries on, and every byte arrives.
    let s = setup(numbers_going_backwards);
    let url = s.proxy.url(IQN, 1);
    let m = run_rlun_measured(&["cp", path(&s.src), &url], HARD_LIMIT);
    assert_success(&m.output, "rlun cp file -> LUN through the rewriting proxy");
    assert_bounded_memory(&m);
    let back = s.lun.with_file_name("back.img");
    let m = run_rlun_measured(&["cp", &url, path(&back)], HARD_LIMIT);
    assert_success(&m.output, "rlun cp LUN -> file through the rewriting proxy");
    assert!(
        s.proxy.rewritten() >= 10,
        "{} PDUs rewritten",
        s.proxy.rewritten()
    );
    let want = std::fs::read(&s.src).expect("read the source");
    let lun = std::fs::read(&s.lun).expect("read the LUN backing file");
    let got = std::fs::read(&back).expect("read the copy back");
    assert!(
        lun[..want.len()] == want[..],
        "the LUN does not hold the source"
    );
    assert!(got[..want.len()] == want[..], "the copy read back differs");
}
