//! Proves the test harness itself works, with libiscsi's and QEMU's tools as
//! the initiator (not rlun): private tgtd instances side by side, LUN kinds,
//! CHAP, digests, read-only LUNs, kill/restart, pause/resume, the hostile
//! target and the process timeout.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use common::hostile::{self, Behaviour, HostileTarget, LoginResponse, BHS_LEN};
use common::{make_backing_file, pattern_bytes, run_with_timeout, Tgtd, NULL_LUN_SIZE};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;

/// Run an external client tool with a deadline.
fn tool(program: &str, args: &[&str]) -> Output {
    run_with_timeout(Command::new(program).args(args), TOOL_TIMEOUT)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_ok(out: &Output, what: &str) -> String {
    let all = text(out);
    assert!(
        out.status.success(),
        "{what} failed ({}): {all}",
        out.status
    );
    all
}

/// Value after `KEY:` in iscsi-readcapacity16's output.
fn readcap_field(output: &str, key: &str) -> u64 {
    output
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in: {output}"))
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// Log in to `portal` with a raw operational-stage login request and return
/// the response's status class, detail and text keys.
fn raw_login(portal: &str, iqn: &str, offer: &[(&str, &str)]) -> (u8, u8, Vec<(String, String)>) {
    let mut keys = vec![
        ("InitiatorName", "iqn.2026-11.org.example:harness"),
        ("SessionType", "Normal"),
        ("TargetName", iqn),
    ];
    keys.extend_from_slice(offer);
    let req = hostile::login_request(
        0x1234,
        hostile::STAGE_OPERATIONAL,
        hostile::STAGE_FULL_FEATURE,
        &hostile::text_keys(&keys),
    );
    let mut s = TcpStream::connect(portal).expect("connect to portal");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&req).expect("send login request");
    let (bhs, data) = hostile::read_pdu(&mut s).expect("read login response");
    assert_eq!(bhs[0] & 0x3f, hostile::OP_LOGIN_RESPONSE, "opcode");
    assert_eq!(hostile::itt(&bhs), 0x1234, "ITT echoed");
    let dsl = hostile::data_segment_length(&bhs) as usize;
    (bhs[36], bhs[37], hostile::parse_text_keys(&data[..dsl]))
}

fn key<'a>(keys: &'a [(String, String)], name: &str) -> Option<&'a str> {
    keys.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn two_tgtd_instances_answer_each_on_its_own_portal() {
    let dir = tempdir();
    let img = make_backing_file(dir.path(), 8 * MIB, 1);
    let mut a = Tgtd::start().expect("start tgtd a");
    let mut b = Tgtd::start().expect("start tgtd b");
    a.add_target("iqn.2026-11.org.example:a")
        .lun_file(1, &img, 512)
        .create()
        .expect("target a");
    b.add_target("iqn.2026-11.org.example:b")
        .lun_null(1)
        .create()
        .expect("target b");

    assert_ne!(a.port(), b.port());
    let ls_a = assert_ok(
        &tool("iscsi-ls", &[&format!("iscsi://{}", a.portal())]),
        "iscsi-ls a",
    );
    let ls_b = assert_ok(
        &tool("iscsi-ls", &[&format!("iscsi://{}", b.portal())]),
        "iscsi-ls b",
    );
    assert!(
        ls_a.contains("iqn.2026-11.org.example:a") && !ls_a.contains("example:b"),
        "{ls_a}"
    );
    assert!(
        ls_b.contains("iqn.2026-11.org.example:b") && !ls_b.contains("example:a"),
        "{ls_b}"
    );

    let inq = assert_ok(
        &tool("iscsi-inq", &[&a.url("iqn.2026-11.org.example:a", 1)]),
        "iscsi-inq",
    );
    assert!(inq.contains("DIRECT_ACCESS"), "{inq}");
    let cap_a = assert_ok(
        &tool(
            "iscsi-readcapacity16",
            &[&a.url("iqn.2026-11.org.example:a", 1)],
        ),
        "readcapacity a",
    );
    let cap_b = assert_ok(
        &tool(
            "iscsi-readcapacity16",
            &[&b.url("iqn.2026-11.org.example:b", 1)],
        ),
        "readcapacity b",
    );
    assert_eq!(readcap_field(&cap_a, "Total size:"), 8 * MIB);
    assert_eq!(readcap_field(&cap_b, "Total size:"), NULL_LUN_SIZE);
}

#[test]
fn many_tgtd_instances_start_in_parallel_on_distinct_ports() {
    let handles: Vec<_> = (0..6)
        .map(|_| {
            thread::spawn(|| {
                let mut tgtd = Tgtd::start().expect("start tgtd");
                let iqn = format!("iqn.2026-11.org.example:p{}", tgtd.port());
                tgtd.add_target(&iqn).lun_null(1).create().expect("target");
                // (iscsi-ls fails against a tgtd with no targets at all.)
                let out = tool("iscsi-ls", &[&format!("iscsi://{}", tgtd.portal())]);
                assert!(assert_ok(&out, "iscsi-ls").contains(&iqn));
                tgtd.port()
            })
        })
        .collect();
    let mut ports: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 6, "ports reused: {ports:?}");
}

#[test]
fn lun_with_4096_byte_blocks_reports_4096_in_readcapacity16() {
    let dir = tempdir();
    let img = make_backing_file(dir.path(), 16 * MIB, 2);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:4k";
    tgtd.add_target(iqn)
        .lun_file(1, &img, 4096)
        .create()
        .expect("target");

    let out = assert_ok(
        &tool("iscsi-readcapacity16", &[&tgtd.url(iqn, 1)]),
        "readcapacity16",
    );

    assert_eq!(readcap_field(&out, "LOGICAL BLOCK LENGTH IN BYTES:"), 4096);
    assert_eq!(
        readcap_field(&out, "RETURNED LOGICAL BLOCK ADDRESS:"),
        16 * MIB / 4096 - 1
    );
}

#[test]
fn chap_target_accepts_right_secret_and_refuses_wrong_one() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:chap";
    tgtd.add_target(iqn)
        .lun_null(1)
        .chap("alice", "secret-alice-12")
        .create()
        .expect("target");

    let right = tool(
        "iscsi-inq",
        &[&tgtd.url_with_chap("alice", "secret-alice-12", iqn, 1)],
    );
    let wrong = tool(
        "iscsi-inq",
        &[&tgtd.url_with_chap("alice", "wrong-secret-99", iqn, 1)],
    );
    let none = tool("iscsi-inq", &[&tgtd.url(iqn, 1)]);

    assert_ok(&right, "login with the right CHAP secret");
    assert!(
        !wrong.status.success(),
        "wrong secret accepted: {}",
        text(&wrong)
    );
    assert!(
        text(&wrong).contains("Authentication failure"),
        "{}",
        text(&wrong)
    );
    assert!(!none.status.success(), "no CHAP accepted: {}", text(&none));
}

#[test]
fn mutual_chap_target_proves_itself_with_outgoing_secret() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:mutual";
    tgtd.add_target(iqn)
        .lun_null(1)
        .chap("bob", "secret-bob-1234")
        .mutual_chap("tgt", "secret-tgt-5678")
        .create()
        .expect("target");
    let base = tgtd.url_with_chap("bob", "secret-bob-1234", iqn, 1);

    let right = tool(
        "iscsi-inq",
        &[&format!(
            "{base}?target_user=tgt&target_password=secret-tgt-5678"
        )],
    );
    let wrong = tool(
        "iscsi-inq",
        &[&format!(
            "{base}?target_user=tgt&target_password=not-the-secret"
        )],
    );

    assert_ok(&right, "mutual CHAP with the right target secret");
    assert!(
        !wrong.status.success(),
        "wrong target secret accepted: {}",
        text(&wrong)
    );
    // libiscsi refuses the target's CHAP_R: the target proved the wrong secret.
    assert!(text(&wrong).contains("CHAP_R"), "{}", text(&wrong));
}

#[test]
fn readonly_lun_refuses_writes_and_serves_reads() {
    let dir = tempdir();
    let ro_img = make_backing_file(dir.path(), 4 * MIB, 3);
    let rw_img = make_backing_file(dir.path(), 4 * MIB, 4);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:ro";
    tgtd.add_target(iqn)
        .lun_readonly(1, &ro_img, 512)
        .lun_file(2, &rw_img, 512)
        .create()
        .expect("target");

    let write_ro = tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 0x5a 0 4k", &tgtd.url(iqn, 1)],
    );
    let read_ro = tool(
        "qemu-io",
        &["-r", "-f", "raw", "-c", "read 0 4k", &tgtd.url(iqn, 1)],
    );
    let write_rw = tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 0x5a 0 4k", &tgtd.url(iqn, 2)],
    );

    let w = text(&write_ro);
    assert!(
        !write_ro.status.success() && w.contains("write protected"),
        "{w}"
    );
    assert_ok(&read_ro, "read from the read-only LUN");
    assert_ok(&write_rw, "write to the writable LUN");
    let on_disk = std::fs::read(&rw_img).unwrap();
    assert!(
        on_disk[..4096].iter().all(|&b| b == 0x5a),
        "write did not land"
    );
    assert_eq!(
        std::fs::read(&ro_img).unwrap(),
        pattern_bytes(3, 0, 4 * MIB as usize)
    );
}

#[test]
fn digests_make_target_answer_crc32c_and_default_answers_none() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target("iqn.2026-11.org.example:dig")
        .lun_null(1)
        .digests(true, true)
        .create()
        .expect("target with digests");
    tgtd.add_target("iqn.2026-11.org.example:plain")
        .lun_null(1)
        .create()
        .expect("target without digests");
    let offer = [
        ("HeaderDigest", "CRC32C,None"),
        ("DataDigest", "CRC32C,None"),
    ];

    let (class, detail, dig) = raw_login(&tgtd.portal(), "iqn.2026-11.org.example:dig", &offer);
    let (_, _, plain) = raw_login(&tgtd.portal(), "iqn.2026-11.org.example:plain", &offer);
    let (_, _, none_first) = raw_login(
        &tgtd.portal(),
        "iqn.2026-11.org.example:dig",
        &[
            ("HeaderDigest", "None,CRC32C"),
            ("DataDigest", "None,CRC32C"),
        ],
    );
    let (none_class, _, only_none) = raw_login(
        &tgtd.portal(),
        "iqn.2026-11.org.example:dig",
        &[("HeaderDigest", "None"), ("DataDigest", "None")],
    );
    let libiscsi = tool("iscsi-inq", &[&tgtd.url("iqn.2026-11.org.example:dig", 1)]);

    assert_eq!((class, detail), (0, 0), "login status, keys {dig:?}");
    assert_eq!(key(&dig, "HeaderDigest"), Some("CRC32C"), "{dig:?}");
    assert_eq!(key(&dig, "DataDigest"), Some("CRC32C"), "{dig:?}");
    assert_eq!(key(&plain, "HeaderDigest"), Some("None"), "{plain:?}");
    assert_eq!(key(&plain, "DataDigest"), Some("None"), "{plain:?}");
    assert_eq!(
        key(&none_first, "HeaderDigest"),
        Some("CRC32C"),
        "{none_first:?}"
    );
    assert_eq!(
        key(&none_first, "DataDigest"),
        Some("CRC32C"),
        "{none_first:?}"
    );
    // tgtd is lenient: an initiator offering only None is not refused.
    assert_eq!(none_class, 0);
    assert_eq!(
        key(&only_none, "HeaderDigest"),
        Some("None"),
        "{only_none:?}"
    );
    // libiscsi offers header digests (not data digests) and still works.
    assert_ok(&libiscsi, "iscsi-inq against the digest target");
}

#[test]
fn kill_and_restart_brings_the_target_back_with_its_data() {
    let dir = tempdir();
    let img = make_backing_file(dir.path(), 4 * MIB, 5);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:restart";
    tgtd.add_target(iqn)
        .lun_file(1, &img, 512)
        .chap("carol", "secret-carol-1")
        .create()
        .expect("target");
    let url = tgtd.url_with_chap("carol", "secret-carol-1", iqn, 1);
    assert_ok(
        &tool("qemu-io", &["-f", "raw", "-c", "write -P 0xa5 8k 4k", &url]),
        "write before restart",
    );
    // An open connection at kill time must not keep the port from being reused.
    let held = TcpStream::connect(tgtd.portal()).expect("connect");
    let old_pid = tgtd.pid();

    tgtd.kill();
    let while_down = TcpStream::connect(tgtd.portal());
    tgtd.restart().expect("restart tgtd");

    assert!(while_down.is_err(), "portal answered while tgtd was dead");
    assert_ne!(tgtd.pid(), old_pid);
    assert_ok(
        &tool(
            "qemu-io",
            &["-r", "-f", "raw", "-c", "read -P 0xa5 8k 4k", &url],
        ),
        "read back after restart",
    );
    tgtd.kill_and_restart().expect("kill_and_restart");
    assert_ok(
        &tool("iscsi-inq", &[&url]),
        "iscsi-inq after kill_and_restart",
    );
    drop(held);
}

#[test]
fn paused_target_answers_only_after_resume() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:pause";
    tgtd.add_target(iqn).lun_null(1).create().expect("target");
    let req = hostile::login_request(
        7,
        hostile::STAGE_OPERATIONAL,
        hostile::STAGE_FULL_FEATURE,
        &hostile::text_keys(&[
            ("InitiatorName", "iqn.2026-11.org.example:harness"),
            ("SessionType", "Normal"),
            ("TargetName", iqn),
        ]),
    );

    tgtd.pause().expect("pause");
    let mut s = TcpStream::connect(tgtd.portal()).expect("connect (kernel backlog)");
    s.write_all(&req).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut byte = [0u8; 1];
    let while_paused = s.read(&mut byte);
    tgtd.resume().expect("resume");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let after = hostile::read_pdu(&mut s);

    let err = while_paused.expect_err("a paused tgtd answered");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
        ),
        "{err}"
    );
    let (bhs, _) = after.expect("answer after resume");
    assert_eq!(bhs[0] & 0x3f, hostile::OP_LOGIN_RESPONSE);
    assert_eq!(bhs[36], 0, "status class");
}

#[test]
fn dropping_tgtd_leaves_no_process_even_when_paused() {
    let tgtd = Tgtd::start().expect("start tgtd");
    let pid = tgtd.pid().expect("running");
    tgtd.pause().expect("pause");

    drop(tgtd);

    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "tgtd {pid} survived"
    );
}

#[test]
fn tgtd_dies_with_a_panicking_test() {
    let pid = thread::spawn(|| {
        let tgtd = Tgtd::start().expect("start tgtd");
        let pid = tgtd.pid().expect("running");
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _tgtd = tgtd;
            panic!("simulated test failure");
        }))
        .expect_err("panicked");
        pid
    })
    .join()
    .unwrap();

    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "tgtd {pid} survived"
    );
}

#[test]
fn backing_file_holds_the_deterministic_pattern() {
    let dir = tempdir();

    let path = make_backing_file(dir.path(), MIB + 13, 42);
    let again = pattern_bytes(42, 0, (MIB + 13) as usize);
    let other = pattern_bytes(43, 0, 64);

    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len() as u64, MIB + 13);
    assert_eq!(data, again);
    assert_eq!(&data[1001..1101], &pattern_bytes(42, 1001, 100)[..]);
    assert_ne!(&data[..64], &other[..]);
}

#[test]
#[should_panic(expected = "did not finish within")]
fn run_with_timeout_kills_a_hung_process_and_fails_clearly() {
    let started = Instant::now();
    let _ = run_with_timeout(Command::new("sleep").arg("30"), Duration::from_millis(300));
    unreachable!("returned after {:?}", started.elapsed());
}

// ---- hostile target ----

/// Connect, send a fake login request (with a data segment), return the stream.
fn hostile_login(target: &HostileTarget, itt: u32) -> TcpStream {
    let mut s = TcpStream::connect(target.addr()).expect("connect to hostile target");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = hostile::login_request(
        itt,
        hostile::STAGE_SECURITY,
        hostile::STAGE_OPERATIONAL,
        &hostile::text_keys(&[("InitiatorName", "iqn.x:y"), ("AuthMethod", "None")]),
    );
    s.write_all(&req).expect("send login request");
    s
}

fn read_all_until_close(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .expect("read until the target closes");
    buf
}

#[test]
fn hostile_bytes_then_close_sends_exactly_those_bytes() {
    let target = HostileTarget::start(Behaviour::BytesThenClose(vec![1, 2, 3, 4, 5]));
    let mut s = hostile_login(&target, 9);

    let got = read_all_until_close(&mut s);

    assert_eq!(got, vec![1, 2, 3, 4, 5]);
    assert_eq!(target.connections(), 1);
    let received = target.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0][0], 0x43, "login request opcode with I bit");
    assert!(received[0].len() > BHS_LEN, "data segment was read too");
}

#[test]
fn hostile_bytes_keeps_the_connection_open() {
    let target = HostileTarget::start(Behaviour::Bytes(vec![0xaa; 8]));
    let mut s = hostile_login(&target, 9);
    let mut got = [0u8; 8];
    s.read_exact(&mut got).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    let more = s.read(&mut [0u8; 1]);

    assert_eq!(got, [0xaa; 8]);
    let err = more.expect_err("connection should stay open and silent");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
        ),
        "{err}"
    );
}

#[test]
fn hostile_close_immediately_and_silent() {
    let closing = HostileTarget::start(Behaviour::CloseImmediately);
    let silent = HostileTarget::start(Behaviour::Silent);

    let closed = read_all_until_close(&mut hostile_login(&closing, 1));
    let mut s = hostile_login(&silent, 2);
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let quiet = s.read(&mut [0u8; 1]);

    assert!(closed.is_empty());
    assert!(quiet.is_err(), "silent target answered: {quiet:?}");
}

#[test]
fn hostile_responders_echo_the_itt_and_build_the_promised_pdus() {
    let cases: [(hostile::Responder, &str); 5] = [
        (hostile::truncated_bhs, "truncated"),
        (hostile::oversized_data_segment, "oversized"),
        (hostile::unknown_opcode, "unknown opcode"),
        (hostile::bogus_text, "bogus text"),
        (hostile::target_not_found, "not found"),
    ];
    for (responder, name) in cases {
        let target = HostileTarget::start(Behaviour::ReplyThenClose(responder));
        let got = read_all_until_close(&mut hostile_login(&target, 0xdead_beef));

        match name {
            "truncated" => assert_eq!(got.len(), 20, "{name}"),
            _ => assert!(got.len() >= BHS_LEN, "{name}: {} bytes", got.len()),
        }
        assert_eq!(
            &got[16..20],
            &0xdead_beef_u32.to_be_bytes(),
            "{name}: ITT echoed"
        );
        match name {
            "oversized" => {
                assert_eq!(got[0], 0x23);
                assert_eq!(hostile::data_segment_length(&got), 0xFF_FFFF);
                assert_eq!(got.len(), BHS_LEN, "no data actually follows");
            }
            "unknown opcode" => assert_eq!(got[0], 0x1c),
            "bogus text" => {
                let dsl = hostile::data_segment_length(&got) as usize;
                let data = &got[BHS_LEN..BHS_LEN + dsl];
                assert!(std::str::from_utf8(data).is_err() && !data.contains(&b'='));
                assert_eq!((got[36], got[37]), (0, 0));
            }
            "not found" => {
                assert_eq!(got[0], 0x23);
                assert_eq!((got[36], got[37]), (0x02, 0x03));
                assert_eq!(got[1] & 0x80, 0, "no Transit on a reject");
            }
            _ => {}
        }
    }
}

#[test]
fn login_response_fields_land_at_their_rfc_offsets() {
    let request = hostile::login_request(0x0102_0304, 0, 1, b"");
    let mut rsp = LoginResponse::answering(&request);
    rsp.stat_sn = 0x1111_1111;
    rsp.data = b"A=B\0".to_vec();

    let pdu = rsp.to_bytes();

    assert_eq!(pdu[0], 0x23); // opcode: Login Response
    assert_eq!(pdu[1], 0x81); // T=1, C=0, CSG=0, NSG=1
    assert_eq!(&pdu[5..8], &[0, 0, 4]); // DataSegmentLength
    assert_eq!(&pdu[8..14], &request[8..14]); // ISID echoed
    assert_eq!(&pdu[16..20], &[1, 2, 3, 4]); // ITT echoed
    assert_eq!(&pdu[24..28], &[0x11; 4]); // StatSN
    assert_eq!(&pdu[28..32], &request[24..28]); // ExpCmdSN = request CmdSN
    assert_eq!(&pdu[BHS_LEN..], b"A=B\0");
}
