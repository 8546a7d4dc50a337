//! `rlun serve` driven by real NBD clients against a private tgtd: qemu-img
//! and qemu-io (qemu's NBD client), nbdinfo, nbdcopy and nbdsh (libnbd),
//! plus a raw Python client for what no well-behaved client does (a
//! disconnect inside a WRITE payload, never reading replies). Every data
//! check compares with tgtd's backing file.
//!
//! Each server is held by a [`Served`] guard that stops rlun (SIGTERM, then
//! SIGKILL) when the test ends, also on failure.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::cli::{assert_failure, assert_same_bytes, both, json};
use common::{
    make_backing_file, pattern_bytes, recv_notify, run_rlun, run_with_timeout, spawn_rlun,
    ChildGuard, Tgtd,
};

const IQN: &str = "iqn.2026-11.org.example:nbd";
const MIB: u64 = 1 << 20;
const SIZE: u64 = 32 * MIB;
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `rlun serve`.
struct Served {
    child: Option<ChildGuard>,
    socket: Option<PathBuf>,
    tcp: Option<String>,
}

impl Served {
    fn uri(&self, export: &str) -> String {
        match (&self.socket, &self.tcp) {
            (Some(s), _) => format!("nbd+unix:///{export}?socket={}", s.display()),
            (_, Some(a)) => format!("nbd://{a}/{export}"),
            _ => unreachable!(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM and wait for a clean exit; the exit code.
    fn stop(&mut self) -> i32 {
        let mut child = self.child.take().expect("running");
        sh("kill", &["-TERM", &child.id().to_string()]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "rlun serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .output();
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Start `rlun serve URL --socket DIR/nbd.sock ARGS...` and wait until an
/// NBD client gets the export list.
fn serve(url: &str, dir: &Path, args: &[&str]) -> Served {
    let socket = dir.join("nbd.sock");
    let mut argv = vec![
        "serve".to_string(),
        url.to_string(),
        "--socket".into(),
        socket.display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let s = Served {
        child: Some(spawn_rlun(&argv, &[])),
        socket: Some(socket),
        tcp: None,
    };
    wait_ready(s, "")
}

/// `rlun serve ... --listen 127.0.0.1:PORT ARGS...` on a free port.
fn serve_tcp(url: &str, args: &[&str], tls: bool) -> Served {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut argv = vec![
        "serve".to_string(),
        url.to_string(),
        "--listen".into(),
        addr.clone(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let s = Served {
        child: Some(spawn_rlun(&argv, &[])),
        socket: None,
        tcp: Some(addr.clone()),
    };
    if tls {
        // A TLS server answers plain clients only with errors: wait for the port.
        let deadline = Instant::now() + READY_TIMEOUT;
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "rlun serve never listened on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        return s;
    }
    wait_ready(s, "")
}

fn wait_ready(mut s: Served, export: &str) -> Served {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = s.child.as_mut().unwrap().try_wait().expect("try_wait") {
            panic!("rlun serve exited early: {status}");
        }
        let out = Command::new("nbdinfo")
            .arg("--size")
            .arg(s.uri(export))
            .output()
            .expect("nbdinfo");
        if out.status.success() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "rlun serve not ready: {}",
            both(&out)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run a tool with [`TOOL_TIMEOUT`]; it must succeed.
fn sh(program: &str, args: &[&str]) -> Output {
    let out = run_with_timeout(Command::new(program).args(args), TOOL_TIMEOUT);
    assert!(
        out.status.success(),
        "{program} {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        both(&out)
    );
    out
}

/// Run a Python script with libnbd (`nbdsh` is Debian's python3 with the
/// `nbd` module; the script is passed as nbdsh's `-c`). Returns stdout.
fn nbdsh(script: &str) -> String {
    let out = run_with_timeout(
        Command::new("nbdsh")
            .env("PATH", "/usr/bin:/bin")
            .arg("-c")
            .arg(script),
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "nbdsh script failed ({}):\n{}\n--- script:\n{script}",
        out.status,
        both(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A raw socket client in Debian's python3 (no libnbd).
fn python(script: &str) -> String {
    let out = run_with_timeout(
        Command::new("/usr/bin/python3").arg("-c").arg(script),
        TOOL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "python script failed ({}):\n{}\n--- script:\n{script}",
        out.status,
        both(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_range(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let data = fs::read(path).expect("read backing file");
    data[offset as usize..offset as usize + len].to_vec()
}

/// tgtd with LUN 1 (a thick file of pattern bytes, seed 1) and LUN 2 (a
/// thin-provisioned file, seed 2: UNMAP works and reads back zeros).
fn tgtd_two_luns(dir: &Path) -> (Tgtd, PathBuf, PathBuf) {
    let f1 = make_backing_file(dir, SIZE, 1);
    let f2 = make_backing_file(dir, SIZE, 2);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &f1, 512)
        .lun_file(2, &f2, 512)
        .create()
        .expect("create target");
    tgtd.tgtadm(&[
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "2",
        "--params",
        "thin_provisioning=1",
    ])
    .expect("thin LUN 2");
    (tgtd, f1, f2)
}

/// `rlun -v serve` of `tgtd`'s target on a socket in `dir`, write-back
/// cache that never flushes by itself (`--writeback-delay 1h`), stats every
/// 100 ms, plus `extra` arguments; its log file is returned with it.
fn serve_write_back_logged(dir: &Path, tgtd: &Tgtd, extra: &[&str]) -> (Served, PathBuf) {
    let log_path = dir.join("serve.log");
    let socket = dir.join("nbd.sock");
    let log = fs::File::create(&log_path).unwrap();
    let child = Command::new(common::rlun_bin())
        .args(["-v", "serve", &target_url(tgtd), "--socket"])
        .arg(&socket)
        .args(["--cache", "write-back", "--writeback-delay", "1h"])
        .args(["--stats-interval", "100ms"])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start rlun serve");
    let served = Served {
        child: Some(ChildGuard(child)),
        socket: Some(socket),
        tcp: None,
    };
    (wait_ready(served, ""), log_path)
}

fn target_url(tgtd: &Tgtd) -> String {
    format!("iscsi://{}/{IQN}", tgtd.portal())
}

#[test]
fn qemu_img_info_and_convert_from_and_to_the_export_match_the_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let mut s = serve(&target_url(&tgtd), dir.path(), &[]);
    let uri = s.uri("lun1");

    let info = String::from_utf8_lossy(&sh("qemu-img", &["info", "--output=json", &uri]).stdout)
        .into_owned();
    assert_eq!(json(&info)["virtual-size"], SIZE, "{info}");

    let copy = dir.path().join("copy.img");
    sh(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            &copy.display().to_string(),
        ],
    );
    assert_same_bytes(
        &fs::read(&copy).unwrap(),
        &fs::read(&f1).unwrap(),
        "qemu-img convert from lun1",
    );

    let src = dir.path().join("src.img");
    fs::write(&src, pattern_bytes(9, 0, SIZE as usize)).unwrap();
    sh(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            &src.display().to_string(),
            &uri,
        ],
    );
    assert_eq!(s.stop(), 0, "clean exit after SIGTERM");
    assert_same_bytes(
        &fs::read(&f1).unwrap(),
        &fs::read(&src).unwrap(),
        "qemu-img convert to lun1",
    );
}

#[test]
fn qemu_io_patterns_write_zeroes_and_discard_reach_the_lun() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, f2) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);

    let out = sh(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 4096 1M",
            "-c",
            "read -P 0xab 4096 1M",
            "-c",
            "write -P 0x5a -f 3M 4k", // FUA
            "-c",
            "write -z 2M 64k",
            "-c",
            "read -P 0 2M 64k",
            "-c",
            "flush",
            &s.uri("lun1"),
        ],
    );
    assert!(
        !both(&out).contains("Pattern verification failed"),
        "{}",
        both(&out)
    );
    assert_eq!(
        read_range(&f1, 4096, MIB as usize),
        vec![0xab; MIB as usize]
    );
    assert_eq!(read_range(&f1, 3 * MIB, 4096), vec![0x5a; 4096]);
    assert_eq!(read_range(&f1, 2 * MIB, 65536), vec![0; 65536]);
    assert_eq!(
        read_range(&f1, 2 * MIB + 65536, 512),
        pattern_bytes(1, 2 * MIB + 65536, 512),
        "untouched after the zeroed range"
    );

    // LUN 2 is thin: discard unmaps, and the range reads back as zeros.
    sh(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "discard 1M 1M",
            "-c",
            "read -P 0 1M 1M",
            &s.uri("lun2"),
        ],
    );
    assert_eq!(read_range(&f2, MIB, MIB as usize), vec![0; MIB as usize]);
    assert_eq!(read_range(&f2, 0, 4096), pattern_bytes(2, 0, 4096));

    // base:allocation comes from tgtd's GET LBA STATUS on the thin LUN.
    let map =
        String::from_utf8_lossy(&sh("nbdinfo", &["--map", &s.uri("lun2")]).stdout).into_owned();
    let rows: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let want: Vec<Vec<String>> = [
        (0, MIB, "0", "data"),
        (MIB, MIB, "3", "hole,zero"),
        (2 * MIB, SIZE - 2 * MIB, "0", "data"),
    ]
    .iter()
    .map(|(o, l, f, d)| vec![o.to_string(), l.to_string(), f.to_string(), d.to_string()])
    .collect();
    assert_eq!(rows, want, "{map}");
}

#[test]
fn nbdinfo_lists_exports_with_flags_block_sizes_and_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);

    let out = sh("nbdinfo", &["--list", "--json", &s.uri("")]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    let exports = v["exports"].as_array().expect("exports");
    let names: Vec<&str> = exports
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lun1", "lun2"]);
    for e in exports {
        assert_eq!(e["export-size"], SIZE);
        assert_eq!(e["block_size_minimum"], 512);
        assert_eq!(e["block_size_preferred"], 4096);
        assert_eq!(e["block_size_maximum"], u64::from(u32::MAX));
        for flag in [
            "can_flush",
            "can_fua",
            "can_multi_conn",
            "can_zero",
            "can_cache",
            "can_df",
        ] {
            assert_eq!(e[flag], true, "{flag} on {}", e["export-name"]);
        }
        assert_eq!(e["is_read_only"], false);
        assert!(e["description"].as_str().unwrap().contains(IQN), "{e}");
        assert_eq!(e["contexts"], serde_json::json!(["base:allocation"]));
    }
    // Only the thin LUN (LBPU + LBPRZ) can trim and zero fast.
    assert_eq!(exports[0]["can_trim"], false);
    assert_eq!(exports[1]["can_trim"], true);
    assert_eq!(exports[0]["can_fast_zero"], false);
    assert_eq!(exports[1]["can_fast_zero"], true);

    let map =
        String::from_utf8_lossy(&sh("nbdinfo", &["--map", &s.uri("lun1")]).stdout).into_owned();
    let fields: Vec<&str> = map.split_whitespace().collect();
    assert_eq!(fields, ["0", &SIZE.to_string(), "0", "data"], "{map}");
}

#[test]
fn nbdcopy_round_trips_match_the_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);
    let uri = s.uri("lun1");

    let copy = dir.path().join("copy.img");
    sh("nbdcopy", &[&uri, &copy.display().to_string()]);
    assert_same_bytes(
        &fs::read(&copy).unwrap(),
        &fs::read(&f1).unwrap(),
        "nbdcopy from lun1",
    );

    let src = dir.path().join("src.img");
    fs::write(&src, pattern_bytes(5, 0, SIZE as usize)).unwrap();
    sh("nbdcopy", &["--flush", &src.display().to_string(), &uri]);
    assert_same_bytes(
        &fs::read(&f1).unwrap(),
        &fs::read(&src).unwrap(),
        "nbdcopy to lun1",
    );
}

#[test]
fn read_only_exports_refuse_writes_with_eperm() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &["--read-only"]);
    let out = nbdsh(&format!(
        r#"
h.connect_uri("{uri}")
assert h.is_read_only()
assert not h.can_trim()
h.set_strict_mode(0)   # send the write anyway: the server must refuse it
try:
    h.pwrite(b"x" * 512, 0)
    print("WRITTEN")
except nbd.Error as e:
    print("refused", e.errno)  # libnbd gives the errno's name
"#,
        uri = s.uri("lun1")
    ));
    assert_eq!(out.trim(), "refused EPERM");
    assert_eq!(read_range(&f1, 0, 512), pattern_bytes(1, 0, 512));
}

#[test]
fn protocol_edge_cases_get_the_errors_the_spec_names() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);
    let sock = s.socket.clone().unwrap();
    let sock = sock.display();
    let out = nbdsh(&format!(
        r#"
sock = "{sock}"
# An unknown export: NBD_REP_ERR_UNKNOWN ends the connect with an error.
bad = nbd.NBD()
bad.set_export_name("lun9")
try:
    bad.connect_unix(sock)
    print("unknown: connected")
except nbd.Error as e:
    print("unknown:", "lun9" in str(e) or "unknown" in str(e).lower())

h.set_export_name("lun1")
h.connect_unix(sock)
size = h.get_size()
h.set_strict_mode(0)  # let requests that break the rules reach the server
def err(f):
    try:
        f()
        return "ok"
    except nbd.Error as e:
        return str(e.errno)  # libnbd gives the errno's name
print("read past end:", err(lambda: h.pread(1024, size - 512)))
print("write past end:", err(lambda: h.pwrite(b"y" * 1024, size - 512)))
print("unaligned read:", err(lambda: h.pread(512, 100)))
print("unaligned write:", err(lambda: h.pwrite(b"z" * 100, 512)))
print("zero past end:", err(lambda: h.zero(1024, size - 512)))
print("block status past end:", err(lambda: h.block_status(512, size, lambda *a: 0)))
# Writes, then FLUSH: the data must be on the target when FLUSH returns.
for i in range(8):
    h.pwrite(bytes([i + 1]) * 65536, 8 * 1048576 + i * 65536)
h.flush()
print("flushed")
# Several connections at once see each other's writes (multi-conn).
h2 = nbd.NBD()
h2.set_export_name("lun1")
h2.connect_unix(sock)
print("multi-conn:", h.can_multi_conn(), h2.pread(65536, 8 * 1048576 + 7 * 65536) == bytes([8]) * 65536)
h2.pwrite(b"\xee" * 4096, 12 * 1048576, nbd.CMD_FLAG_FUA)
print("h sees h2:", h.pread(4096, 12 * 1048576) == b"\xee" * 4096)
# Many requests in flight on one connection, completed in any order.
cookies = [h.aio_pread(nbd.Buffer(65536), i * 65536) for i in range(64)]
while h.aio_in_flight() > 0:
    h.poll(-1)
print("in flight:", all(h.aio_command_completed(c) for c in cookies))
h.shutdown()
"#
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "unknown: True",
            "read past end: EINVAL",
            "write past end: ENOSPC",
            "unaligned read: EINVAL",
            "unaligned write: EINVAL",
            "zero past end: ENOSPC",
            "block status past end: EINVAL",
            "flushed",
            "multi-conn: True True",
            "h sees h2: True",
            "in flight: True",
        ],
        "{out}"
    );
    let mut want = Vec::new();
    for i in 0..8u8 {
        want.extend(std::iter::repeat_n(i + 1, 65536));
    }
    assert_eq!(
        read_range(&f1, 8 * MIB, 8 * 65536),
        want,
        "flushed writes on the target"
    );
    assert_eq!(read_range(&f1, 12 * MIB, 4096), vec![0xee; 4096]);
    assert_eq!(
        read_range(&f1, 0, 1024),
        pattern_bytes(1, 0, 1024),
        "refused requests wrote nothing"
    );
}

/// A raw client: handshake with NBD_OPT_EXPORT_NAME, then helpers to send
/// requests. Python, because no NBD library misbehaves on purpose.
const RAW_CLIENT: &str = r#"
import socket, struct, sys
def connect(path, name=b"lun1"):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    hello = recv(s, 18)
    assert hello[:16] == b"NBDMAGICIHAVEOPT", hello
    s.sendall(struct.pack(">I", 3))                       # fixed newstyle, no zeroes
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 1, len(name)) + name)
    size, flags = struct.unpack(">QH", recv(s, 10))
    return s, size
def recv(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b
def request(s, cmd, cookie, offset, length, flags=0):
    s.sendall(struct.pack(">IHHQQI", 0x25609513, flags, cmd, cookie, offset, length))
"#;

#[test]
fn a_client_that_disconnects_inside_a_write_leaves_whole_writes_only() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);
    let sock = s.socket.clone().unwrap();
    python(&format!(
        r#"{RAW_CLIENT}
s, size = connect("{sock}", b"lun1")
# Eight whole 256 KiB writes, none of whose replies we wait for...
for i in range(8):
    request(s, 1, i, i * 262144, 262144)
    s.sendall(bytes([0x40 + i]) * 262144)
# ...then a write whose payload stops halfway, and the connection drops.
request(s, 1, 99, 4 * 1048576, 1048576)
s.sendall(b"\xff" * 524288)
s.close()
"#,
        sock = sock.display()
    ));
    // The server finishes what it read in full; ask it over a new connection.
    let out = nbdsh(&format!(
        r#"
h.connect_uri("{uri}")
h.flush()
ok = all(h.pread(262144, i * 262144) == bytes([0x40 + i]) * 262144 for i in range(8))
print("whole writes:", ok)
print("partial write applied:", h.pread(1048576, 4 * 1048576) != open("{f1}", "rb").read()[4 * 1048576:5 * 1048576])
"#,
        uri = s.uri("lun1"),
        f1 = f1.display()
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["whole writes: True", "partial write applied: False"],
        "{out}"
    );
    assert_eq!(
        read_range(&f1, 4 * MIB, MIB as usize),
        pattern_bytes(1, 4 * MIB, MIB as usize)
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_client_that_never_reads_replies_is_bounded_and_others_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &["--cache-size", "64M"]);
    let sock = s.socket.clone().unwrap();
    // 100000 reads of 1 MiB (about 100 GiB of replies) that are never
    // read: the server must stop reading requests instead of queueing the
    // replies (the requests alone, 2.8 MB, overflow the socket buffers).
    let script = format!(
        r#"{RAW_CLIENT}
import time
s, size = connect("{sock}", b"lun1")
s.settimeout(5)
sent = 0
try:
    for i in range(100000):
        request(s, 0, i, (i % 32) * 1048576, 1048576)
        sent += 1
except socket.timeout:
    pass
print("sent", sent, flush=True)
time.sleep(3)  # the server is stuck on us; the test checks the others
"#,
        sock = sock.display()
    );
    let mut hog = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start python");
    std::thread::sleep(Duration::from_secs(3));
    // Another client is served normally meanwhile.
    let copy = dir.path().join("copy.img");
    sh("nbdcopy", &[&s.uri("lun1"), &copy.display().to_string()]);
    assert_same_bytes(
        &fs::read(&copy).unwrap(),
        &fs::read(&f1).unwrap(),
        "nbdcopy beside a stuck client",
    );
    let rss = rss_kib(s.pid());
    let status = hog.wait().expect("python");
    assert!(status.success());
    let mut sent = String::new();
    std::io::Read::read_to_string(hog.stdout.as_mut().unwrap(), &mut sent).unwrap();
    let sent: u64 = sent
        .trim()
        .strip_prefix("sent ")
        .and_then(|n| n.parse().ok())
        .expect(&sent);
    assert!(
        sent < 100000,
        "the server kept reading requests it could not answer ({sent} sent)"
    );
    // 64 MiB of replies per connection + 64 MiB cache + base: far below 4 GiB.
    assert!(rss < 512 * 1024, "rlun serve grew to {rss} KiB");
}

#[test]
fn sigterm_writes_back_the_write_back_cache_before_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let mut s = serve(
        &target_url(&tgtd),
        dir.path(),
        &["--cache", "write-back", "--writeback-delay", "1h"],
    );
    nbdsh(&format!(
        r#"
h.connect_uri("{uri}")
h.pwrite(b"\x77" * 1048576, 1048576)
"#,
        uri = s.uri("lun1")
    ));
    assert_eq!(s.stop(), 0);
    assert_eq!(read_range(&f1, MIB, MIB as usize), vec![0x77; MIB as usize]);
    assert!(
        !s.socket.as_ref().unwrap().exists(),
        "socket removed at exit"
    );
}

/// nbdcopy keeps many 256 KiB reads in flight per connection: those reads
/// bypass the page cache (straight from the target into the reply), yet
/// data that sits only in the write-back cache (not flushed, so not on the
/// target) is still what they return.
#[test]
fn nbdcopy_streams_past_the_cache_and_still_sees_unflushed_write_back_data() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let (mut s, log_path) = serve_write_back_logged(dir.path(), &tgtd, &[]);
    let uri = s.uri("lun1");
    // Two pages (the export's minimum block size is 4 KiB), in write-back
    // memory only.
    nbdsh(&format!(
        r#"
h.connect_uri("{uri}")
h.pwrite(b"\x5a" * 4096, 5 * 1048576 + 8192)
h.pwrite(b"newer" * 819 + b"\x00", 20 * 1048576 + 12288)
"#
    ));
    let mut want = fs::read(&f1).unwrap();
    let block: Vec<u8> = b"newer".repeat(819).into_iter().chain([0]).collect();
    assert_ne!(
        &want[20 * MIB as usize + 12288..][..4096],
        &block[..],
        "not on the target yet"
    );
    want[5 * MIB as usize + 8192..][..4096].fill(0x5a);
    want[20 * MIB as usize + 12288..][..4096].copy_from_slice(&block);

    let copy = dir.path().join("copy.img");
    sh("nbdcopy", &[&uri, &copy.display().to_string()]);
    assert_same_bytes(&fs::read(&copy).unwrap(), &want, "nbdcopy from lun1");

    // The stats line (every 100 ms) counts the reads that bypassed.
    std::thread::sleep(Duration::from_millis(400));
    let text = fs::read_to_string(&log_path).unwrap();
    let bypassed = text
        .lines()
        .filter_map(|l| l.split("bypassed_reads=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        bypassed >= 32,
        "nbdcopy's 128 reads of 256 KiB mostly bypass the cache: {bypassed}\n{text}"
    );
    assert_eq!(s.stop(), 0);
}

/// Small READs that hit the cache are answered on the spot (no task of
/// their own): many of them in flight at once, over pages that hold
/// unflushed write-back data, return exactly the newest bytes, in any
/// completion order, and send no command to the target.
#[test]
fn pipelined_cache_hits_return_the_newest_bytes_including_unflushed_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    // Without read-ahead the warm pass reads exactly its MiB.
    let (mut s, log_path) = serve_write_back_logged(dir.path(), &tgtd, &["--readahead", "off"]);
    let uri = s.uri("lun1");
    let out = nbdsh(&format!(
        r#"
import random
want = bytearray(open("{backing}", "rb").read(1 << 20))
h.connect_uri("{uri}")
def write(off, data):
    h.pwrite(data, off)
    want[off:off + len(data)] = data
# Warm: the first MiB through the cache in 4 KiB reads.
for off in range(0, 1 << 20, 4096):
    assert h.pread(4096, off) == want[off:off + 4096], off
# Unflushed write-back data inside resident pages (whole 4 KiB blocks,
# the export's minimum).
write(8192, b"\x5a" * 4096)
write(300 * 1024, b"newer" * 819 + b"\x00")
rng = random.Random(7)
for rnd in range(3):
    bufs = []
    for _ in range(200):
        off = rng.randrange(0, (1 << 20) // 4096) * 4096
        n = rng.choice([4096, 8192, 16384])
        n = min(n, (1 << 20) - off)
        b = nbd.Buffer(n)
        bufs.append((off, b, h.aio_pread(b, off)))
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for off, b, c in bufs:
        assert h.aio_command_completed(c)
        assert b.to_bytearray() == want[off:off + len(b.to_bytearray())], (rnd, off)
    # Newer data again between the rounds.
    write(rng.randrange(0, 256) * 4096, bytes([rnd + 1]) * 4096)
print("ok")
"#,
        backing = f1.display()
    ));
    assert_eq!(out.trim(), "ok");
    // The stats line (every 100 ms): the rounds were hits; nothing but the
    // warm pass read from the target.
    std::thread::sleep(Duration::from_millis(400));
    let text = fs::read_to_string(&log_path).unwrap();
    let last = |key: &str| {
        text.lines()
            .filter_map(|l| l.split(key).nth(1))
            .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
    };
    assert!(last("hits=") >= 600, "{text}");
    assert_eq!(last("bytes_read="), MIB, "{text}");
    assert!(
        read_range(&f1, 8192, 4096) != vec![0x5a; 4096],
        "still only in the write-back cache"
    );
    assert_eq!(s.stop(), 0);
}

/// A throwaway CA-less self-signed certificate for 127.0.0.1.
fn make_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    sh(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            &key.display().to_string(),
            "-out",
            &cert.display().to_string(),
        ],
    );
    // libnbd (GnuTLS) reads the CA from DIR/ca-cert.pem.
    let certs = dir.join("certs");
    fs::create_dir(&certs).unwrap();
    fs::copy(&cert, certs.join("ca-cert.pem")).unwrap();
    (cert, key)
}

#[test]
fn tls_exports_serve_nbds_clients_and_refuse_plaintext_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let (cert, key) = make_cert(dir.path());
    let s = serve_tcp(
        &target_url(&tgtd),
        &[
            "--tls-cert",
            &cert.display().to_string(),
            "--tls-key",
            &key.display().to_string(),
        ],
        true,
    );
    let addr = s.tcp.clone().unwrap();
    let certs = dir.path().join("certs");
    let tls_uri = format!("nbds://{addr}/lun1?tls-certificates={}", certs.display());

    let out = sh("nbdinfo", &["--json", &tls_uri]);
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["TLS"], true, "{v}");
    assert_eq!(v["exports"][0]["export-size"], SIZE);
    let copy = dir.path().join("copy.img");
    sh("nbdcopy", &[&tls_uri, &copy.display().to_string()]);
    assert_same_bytes(
        &fs::read(&copy).unwrap(),
        &fs::read(&f1).unwrap(),
        "nbdcopy over TLS",
    );

    // A plaintext client gets NBD_REP_ERR_TLS_REQD, not the export.
    let out = run_with_timeout(
        Command::new("nbdinfo").arg(format!("nbd://{addr}/lun1")),
        TOOL_TIMEOUT,
    );
    assert!(
        !out.status.success(),
        "plaintext client was served: {}",
        both(&out)
    );
    assert!(both(&out).to_lowercase().contains("tls"), "{}", both(&out));
}

#[test]
fn listen_beyond_loopback_without_tls_is_refused_with_the_reason() {
    let out = run_rlun(
        [
            "serve",
            "iscsi://127.0.0.1:1/iqn.2026-11.org.example:x",
            "--listen",
            "0.0.0.0:10809",
        ],
        &[],
    );
    let text = assert_failure(&out, 2, &["without TLS", "--allow-insecure"]);
    assert!(text.contains("--tls-cert"), "{text}");
}

/// A client CA (`ca.pem`) and a client certificate it signed, with its key:
/// (CA, certificate, key) paths. `v3`: signed with extensions (X.509 v3);
/// without, OpenSSL signs an X.509 v1 certificate.
fn client_ca(d: &Path, v3: bool) -> (String, String, String) {
    let p = |n: &str| d.join(n).display().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_key, ca_pem) = (p("ca.key"), p("ca.pem"));
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-days",
        "1",
        "-subj",
        "/CN=rlun test client CA",
        "-keyout",
        &ca_key,
        "-out",
        &ca_pem,
    ]);
    sh("openssl", &ca);
    let (client_key, client_csr, client_pem) = (p("client.key"), p("client.csr"), p("client.pem"));
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-subj",
        "/CN=client",
        "-keyout",
        &client_key,
        "-out",
        &client_csr,
    ]);
    sh("openssl", &csr);
    let ext = p("client.ext");
    fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let mut sign = vec![
        "x509",
        "-req",
        "-in",
        &client_csr,
        "-CA",
        &ca_pem,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        &client_pem,
    ];
    if v3 {
        sign.extend(["-extfile", &ext]);
    }
    sh("openssl", &sign);
    (ca_pem, client_pem, client_key)
}

#[test]
fn tls_with_tls_ca_requires_a_client_certificate_from_that_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _, _) = tgtd_two_luns(dir.path());
    let (cert, key) = make_cert(dir.path());
    let d = dir.path();
    let (ca_pem, client_pem, client_key) = client_ca(d, true);
    // libnbd reads client-cert.pem and client-key.pem next to ca-cert.pem.
    let with_client = d.join("with-client");
    fs::create_dir(&with_client).unwrap();
    fs::copy(&cert, with_client.join("ca-cert.pem")).unwrap();
    fs::copy(&client_pem, with_client.join("client-cert.pem")).unwrap();
    fs::copy(&client_key, with_client.join("client-key.pem")).unwrap();

    let s = serve_tcp(
        &target_url(&tgtd),
        &[
            "--tls-cert",
            &cert.display().to_string(),
            "--tls-key",
            &key.display().to_string(),
            "--tls-ca",
            &ca_pem,
        ],
        true,
    );
    let addr = s.tcp.clone().unwrap();
    let uri = |certs: &Path| format!("nbds://{addr}/lun1?tls-certificates={}", certs.display());

    let out = sh("nbdinfo", &["--size", &uri(&with_client)]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        SIZE.to_string()
    );
    let out = run_with_timeout(
        Command::new("nbdinfo")
            .arg("--size")
            .arg(uri(&d.join("certs"))),
        TOOL_TIMEOUT,
    );
    assert!(
        !out.status.success(),
        "served without a client certificate: {}",
        both(&out)
    );
}

#[test]
fn daemon_mode_returns_when_ready_and_sigterm_via_the_pid_file_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _, _) = tgtd_two_luns(dir.path());
    let socket = dir.path().join("d.sock");
    let url = format!("{}/1", target_url(&tgtd));
    let log = dir.path().join("serve.log");
    let out = run_rlun(
        [
            "serve",
            "-v",
            &url,
            "--socket",
            &socket.display().to_string(),
            "--daemon",
            "--log-file",
            &log.display().to_string(),
        ],
        &[],
    );
    assert!(out.status.success(), "rlun serve --daemon: {}", both(&out));
    // Ready means served: no waiting needed.
    let uri = format!("nbd+unix:///lun1?socket={}", socket.display());
    let names =
        String::from_utf8_lossy(&sh("nbdinfo", &["--list", "--json", &uri]).stdout).into_owned();
    assert_eq!(
        json(&names)["exports"].as_array().unwrap().len(),
        1,
        "a LUN URL serves that LUN only"
    );

    let escaped: String = socket
        .display()
        .to_string()
        .replace('%', "%25")
        .replace('/', "%2F");
    let pid_file = PathBuf::from("/run/rlun").join(format!("{escaped}.pid"));
    let pid =
        fs::read_to_string(&pid_file).unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    let pid = pid.trim().to_string();
    sh("kill", &["-TERM", &pid]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!socket.exists(), "socket removed");
    assert!(
        fs::read_to_string(&log).unwrap().contains("serving"),
        "log file kept the messages"
    );
}

#[test]
fn garbage_closes_only_that_connection_and_a_big_write_past_the_end_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, f1, _) = tgtd_two_luns(dir.path());
    let s = serve(&target_url(&tgtd), dir.path(), &[]);
    let sock = s.socket.clone().unwrap();
    let out = python(&format!(
        r#"{RAW_CLIENT}
def closed(s):
    s.settimeout(10)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
# Garbage instead of client flags and options.
g = socket.socket(socket.AF_UNIX); g.connect("{sock}")
recv(g, 18); g.sendall(struct.pack(">I", 3) + b"NOTANOPT" + b"\xff" * 64)
print("bad option magic closed:", closed(g))
# Garbage instead of a request.
s, size = connect("{sock}")
s.sendall(b"\x00" * 28)
print("bad request magic closed:", closed(s))
# A 96 MiB WRITE past the end (any length is accepted; this range is
# not): its payload is skipped as it comes, ENOSPC, and the connection
# goes on.
s, size = connect("{sock}")
request(s, 1, 1, 0, 96 << 20)
for i in range(96):
    s.sendall(b"\xaa" * (1 << 20))
magic, error, cookie = struct.unpack(">IIQ", recv(s, 16))
print("write past the end:", error, cookie)
# An unknown command gets EINVAL and the connection goes on.
s, size = connect("{sock}")
request(s, 42, 7, 0, 0)
magic, error, cookie = struct.unpack(">IIQ", recv(s, 16))
print("unknown command:", hex(magic), error, cookie)
request(s, 0, 8, 0, 512)
magic, error, cookie = struct.unpack(">IIQ", recv(s, 16))
data = recv(s, 512)
print("then a read:", error, cookie, len(data))
"#,
        sock = sock.display()
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "bad option magic closed: True",
            "bad request magic closed: True",
            "write past the end: 28 1",
            "unknown command: 0x67446698 22 7",
            "then a read: 0 8 512",
        ],
        "{out}"
    );
    // The server is still there for everyone else, and nothing was written.
    let copy = dir.path().join("copy.img");
    sh("nbdcopy", &[&s.uri("lun1"), &copy.display().to_string()]);
    assert_same_bytes(
        &fs::read(&copy).unwrap(),
        &fs::read(&f1).unwrap(),
        "after the garbage",
    );
}

/// What `rlun-serve@store.service` runs (`rlun serve store --socket ...`, a
/// config-file target by name) under systemd's notify protocol: READY=1
/// arrives only once the socket answers NBD clients, STOPPING=1 on SIGTERM.
#[test]
fn systemd_hears_ready_only_once_the_socket_serves_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _f1, _) = tgtd_two_luns(dir.path());
    let config = dir.path().join("rlun.toml");
    fs::write(
        &config,
        format!("[targets.store]\nurl = \"{}\"\n", target_url(&tgtd)),
    )
    .unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).expect("bind notify socket");
    notify
        .set_read_timeout(Some(READY_TIMEOUT))
        .expect("timeout");
    let socket = dir.path().join("store.sock");
    let argv = [
        "--config".to_string(),
        config.display().to_string(),
        "serve".into(),
        "store".into(),
        "--socket".into(),
        socket.display().to_string(),
    ];
    let mut s = Served {
        child: Some(spawn_rlun(
            &argv,
            &[("NOTIFY_SOCKET", &notify_path.to_string_lossy())],
        )),
        socket: Some(socket),
        tcp: None,
    };

    let ready = recv_notify(&notify, "READY=1");
    // Straight after READY=1, with no retry: the export must answer.
    let size_then = Command::new("nbdinfo")
        .args(["--size", &s.uri("lun1")])
        .output()
        .expect("nbdinfo");
    let pid = s.pid();
    let code = {
        let mut child = s.child.take().expect("running");
        sh("kill", &["-TERM", &child.id().to_string()]);
        let stopping = recv_notify(&notify, "STOPPING=1");
        assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
        run_with_timeout_wait(&mut child)
    };

    assert!(
        ready.starts_with(&format!("READY=1\nMAINPID={pid}\nSTATUS=serving ")),
        "{ready:?}"
    );
    assert!(size_then.status.success(), "{}", both(&size_then));
    assert_eq!(
        String::from_utf8_lossy(&size_then.stdout).trim(),
        SIZE.to_string()
    );
    assert_eq!(code, 0);
}

/// Wait (at most 30 s) for a stopped child's exit code.
fn run_with_timeout_wait(child: &mut ChildGuard) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "rlun serve did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client certificate without extensions (X.509 v1) is refused, and the
/// operator reads why at the default log level; clients that connect by IP
/// address put no "Illegal SNI" warning into the log.
#[test]
fn a_v1_client_certificate_is_refused_with_the_reason_and_ip_clients_log_no_sni_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _, _) = tgtd_two_luns(dir.path());
    let (cert, key) = make_cert(dir.path());
    let d = dir.path();
    let (ca_pem, client_pem, client_key) = client_ca(d, false);
    let v1 = d.join("v1");
    fs::create_dir(&v1).unwrap();
    fs::copy(&cert, v1.join("ca-cert.pem")).unwrap();
    fs::copy(&client_pem, v1.join("client-cert.pem")).unwrap();
    fs::copy(&client_key, v1.join("client-key.pem")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let log = d.join("serve.log");
    let child = Command::new(common::rlun_bin())
        .args(["serve", &target_url(&tgtd), "--listen", &addr])
        .args(["--tls-cert", &cert.display().to_string()])
        .args(["--tls-key", &key.display().to_string(), "--tls-ca", &ca_pem])
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut serve = ChildGuard(child);
    let deadline = Instant::now() + READY_TIMEOUT;
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "rlun serve never listened on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let out = run_with_timeout(
        Command::new("nbdinfo").arg("--size").arg(format!(
            "nbds://{addr}/lun1?tls-certificates={}",
            v1.display()
        )),
        TOOL_TIMEOUT,
    );
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    let _ = serve.0.wait();
    let text = fs::read_to_string(&log).unwrap();

    assert!(
        !out.status.success(),
        "served a v1 client certificate: {}",
        both(&out)
    );
    assert!(
        text.contains("client certificate must be X.509 v3"),
        "{text}"
    );
    assert!(text.contains("WARN"), "said at the default level: {text}");
    assert!(!text.contains("Illegal SNI"), "{text}");
}
