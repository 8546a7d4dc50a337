//! `rlun stats` and the control socket of a serving rlun (issue 24),
//! against a tgtd LUN mounted with `rlun mount --daemon` through the
//! kernel's FUSE, with fio as the judge of what was read: its own counts
//! of I/Os and bytes, and its completion latencies.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cli::{assert_failure, assert_success, both, json, stdout};
use common::{make_backing_file, recv_notify, run_rlun, run_with_timeout, Tgtd};
use serde_json::Value;

const IQN: &str = "iqn.2026-12.org.example:stats";
const LUN_SIZE: u64 = 64 << 20;
const O_DIRECT: i32 = 0o40000;

/// A daemon mount of the test's target, unmounted when the test ends.
struct Mount {
    mp: PathBuf,
}

impl Mount {
    fn start(tgtd: &Tgtd, dir: &Path, extra: &[&str]) -> Mount {
        let mp = dir.join("mnt");
        fs::create_dir(&mp).unwrap();
        let log = dir.join("rlun.log");
        let url = format!("iscsi://{}/{IQN}", tgtd.portal());
        let mut args = vec![
            "mount".to_string(),
            "--daemon".into(),
            "--log-file".into(),
            log.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend([url, mp.display().to_string()]);
        let out = run_rlun(&args, &[]);
        assert_success(&out, "rlun mount --daemon");
        Mount { mp }
    }

    fn path(&self) -> String {
        self.mp.display().to_string()
    }

    fn file(&self) -> PathBuf {
        self.mp.join("lun1")
    }

    /// `rlun stats MP --json`: LUN 1 of the one process.
    fn stats(&self) -> Value {
        let out = run_rlun(["stats", &self.path(), "--json"], &[]);
        let v = json(&assert_success(&out, "rlun stats --json"));
        assert_eq!(v["version"], 1, "{v}");
        let procs = v["processes"].as_array().expect("processes");
        assert_eq!(procs.len(), 1, "one process serves the mount: {v}");
        assert_eq!(procs[0]["what"], self.path().as_str(), "{v}");
        let luns = procs[0]["luns"].as_array().expect("luns");
        luns.iter()
            .find(|l| l["lun"] == 1)
            .cloned()
            .unwrap_or_else(|| panic!("LUN 1 in {v}"))
    }

    /// `rlun stats MP --json`: the one process.
    fn stats_process(&self) -> Value {
        let out = run_rlun(["stats", &self.path(), "--json"], &[]);
        let v = json(&assert_success(&out, "rlun stats --json"));
        v["processes"][0].clone()
    }

    /// The control socket, from `rlun list`'s pid file naming.
    fn control_socket(&self) -> PathBuf {
        let name = self.path().replace('%', "%25").replace('/', "%2F");
        Path::new("/run/rlun").join(format!("{name}.sock"))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run_rlun(["umount", &self.path()], &[]);
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&self.mp)
            .output();
    }
}

fn target(dir: &Path) -> Tgtd {
    let file = make_backing_file(dir, LUN_SIZE, 1);
    let mut tgtd = Tgtd::start().expect("tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &file, 512)
        .create()
        .expect("target");
    tgtd
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{} in {v}", path.join(".")))
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{} in {v}", path.join(".")))
}

fn within(got: u64, want: u64, what: &str) {
    let diff = (got as f64 - want as f64).abs();
    assert!(
        diff <= want as f64 * 0.05,
        "{what}: rlun stats counted {got}, fio {want} (more than 5% apart)"
    );
}

/// fio: 4 KiB random reads of `file` (O_DIRECT, libaio, queue depth 4,
/// the first 32 MiB) for `secs` seconds, its report as JSON on stdout.
fn fio_randread(file: &Path, secs: u32) -> std::process::Output {
    run_with_timeout(
        Command::new("fio").args([
            "--name=randread",
            &format!("--filename={}", file.display()),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--size=32m",
            "--time_based",
            &format!("--runtime={secs}"),
            "--allow_file_create=0",
            "--output-format=json",
        ]),
        Duration::from_secs(60),
    )
}

#[test]
fn stats_json_agrees_with_fio_on_requests_bytes_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    // No cache: every read goes to tgtd, so rlun's latencies are of the
    // same requests fio times (plus the kernel's share in fio's).
    let m = Mount::start(&tgtd, dir.path(), &["--cache", "none"]);
    let before = m.stats();

    let out = fio_randread(&m.file(), 3);
    assert!(out.status.success(), "fio: {}", both(&out));
    let after = m.stats();
    let fio = json(&stdout(&out));
    let read = &fio["jobs"][0]["read"];

    let ios = u(read, &["total_ios"]);
    let bytes = u(read, &["io_bytes"]);
    eprintln!(
        "fio: {ios} reads, {bytes} bytes, clat {}..{} ns; rlun stats: {} reads, {} bytes, {}",
        read["clat_ns"]["min"],
        read["clat_ns"]["max"],
        u(&after, &["total", "reads"]) - u(&before, &["total", "reads"]),
        u(&after, &["total", "read_bytes"]) - u(&before, &["total", "read_bytes"]),
        after["total"]["read_latency_us"]
    );
    assert!(ios > 100, "fio read something: {read}");
    within(
        u(&after, &["total", "reads"]) - u(&before, &["total", "reads"]),
        ios,
        "reads",
    );
    within(
        u(&after, &["total", "read_bytes"]) - u(&before, &["total", "read_bytes"]),
        bytes,
        "bytes read",
    );
    assert_eq!(u(&after, &["total", "read_errors"]), 0, "{after}");
    assert_eq!(u(&after, &["in_flight"]), 0, "{after}");
    let (min, max) = (
        f(read, &["clat_ns", "min"]) / 1000.0,
        f(read, &["clat_ns", "max"]) / 1000.0,
    );
    for p in ["p50", "p99", "p99_9"] {
        let got = f(&after, &["total", "read_latency_us", p]);
        assert!(
            min <= got && got <= max,
            "{p} {got} µs outside fio's completion latencies {min}..{max} µs: {after}"
        );
    }
    assert!(after["total"]["write_latency_us"].is_null(), "{after}");

    // The table says the same, a line per LUN.
    let table = assert_success(&run_rlun(["stats", &m.path()], &[]), "rlun stats");
    let line = table
        .lines()
        .find(|l| l.starts_with(&m.path()))
        .unwrap_or_else(|| panic!("a line for the mount:\n{table}"));
    assert_eq!(line.split_whitespace().nth(1), Some("1"), "{table}");
}

/// Read `len` bytes at 0 with O_DIRECT (each read reaches rlun).
fn read_direct(file: &Path, len: usize) {
    let out = run_with_timeout(
        Command::new("dd").args([
            &format!("if={}", file.display()),
            "of=/dev/null",
            "bs=64k",
            &format!("count={}", len / 65536),
            "iflag=direct",
            "status=none",
        ]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "dd: {}", both(&out));
}

#[test]
fn a_re_read_shows_cache_hits_and_a_cold_read_misses() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let m = Mount::start(&tgtd, dir.path(), &["--cache", "write-through"]);
    let start = m.stats();

    read_direct(&m.file(), 4 << 20);
    let cold = m.stats();
    read_direct(&m.file(), 4 << 20);
    let warm = m.stats();

    let d = |a: &Value, b: &Value, k: &str| u(b, &["cache", k]) - u(a, &["cache", k]);
    assert!(
        d(&start, &cold, "misses") + d(&start, &cold, "readahead_hits") > 0,
        "the cold read went to the target: {cold}"
    );
    assert!(d(&cold, &warm, "hits") > 0, "the re-read hit: {warm}");
    assert_eq!(
        d(&cold, &warm, "misses"),
        0,
        "the re-read missed nothing: {warm}"
    );
    assert_eq!(u(&warm, &["total", "read_bytes"]), 8 << 20, "{warm}");
    assert!(f(&warm, &["cache", "hit_ratio"]) > 0.0, "{warm}");
}

/// One request line to `sock`, the answer line.
fn ask(sock: &Path, line: &[u8]) -> Value {
    let mut s = UnixStream::connect(sock).expect("connect to the control socket");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(line).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    json(&answer)
}

/// Ask the control socket `sock` for stats as user nobody, past the
/// socket's mode: the server's own check of who asks is what answers.
fn ask_as_nobody(sock: &Path) -> Value {
    use std::os::unix::fs::PermissionsExt;
    // A hard link in a directory nobody may enter, to the same socket
    // made connectable by anyone for the moment.
    let shared = Path::new("/run").join(format!("rlun-stats-foreign-{}", std::process::id()));
    fs::create_dir_all(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o755)).unwrap();
    let link = shared.join("ctl.sock");
    let _ = fs::remove_file(&link);
    fs::hard_link(sock, &link).expect("hard link to the control socket");
    fs::set_permissions(sock, fs::Permissions::from_mode(0o666)).unwrap();
    let client = "import socket,sys\n\
        s=socket.socket(socket.AF_UNIX)\n\
        s.connect(sys.argv[1])\n\
        s.sendall(b'{\"version\":1,\"request\":\"stats\"}\\n')\n\
        print(s.makefile().readline(), end='')\n";
    let out = run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", client])
            .arg(&link),
        Duration::from_secs(30),
    );
    fs::set_permissions(sock, fs::Permissions::from_mode(0o600)).unwrap();
    let _ = fs::remove_dir_all(&shared);
    assert!(out.status.success(), "the client as nobody: {}", both(&out));
    json(&stdout(&out))
}

#[test]
fn garbled_requests_get_an_error_and_the_mount_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let m = Mount::start(&tgtd, dir.path(), &[]);
    let sock = m.control_socket();
    let mode = fs::metadata(&sock).expect("control socket").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    let garbled = ask(&sock, b"hello, what are you doing?\n");
    let wrong_version = ask(&sock, b"{\"version\":99,\"request\":\"stats\"}\n");
    let unknown = ask(&sock, b"{\"version\":1,\"request\":\"dance\"}\n");
    let long = ask(&sock, &[b'x'; 10_000]);
    // A client that connects and says nothing, then goes.
    drop(UnixStream::connect(&sock).unwrap());

    for (v, says) in [
        (&garbled, "not a request"),
        (&wrong_version, "version 99"),
        (&unknown, "unknown request \"dance\""),
        (&long, "longer than 4096 bytes"),
    ] {
        assert_eq!(v["version"], 1, "{v}");
        assert_eq!(v["ok"], false, "{v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{says:?} in {v}");
    }
    let foreign = ask_as_nobody(&sock);
    assert_eq!(foreign["ok"], false, "{foreign}");
    let error = foreign["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("user 65534 may not ask the rlun of user 0"),
        "{foreign}"
    );
    let good = ask(&sock, b"{\"version\":1,\"request\":\"stats\"}\n");
    assert_eq!(good["ok"], true, "{good}");
    let mut buf = vec![0u8; 4096];
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_DIRECT)
        .open(m.file())
        .unwrap();
    f.read_exact(&mut buf).expect("the mount still reads");
    assert!(u(&m.stats(), &["total", "reads"]) >= 1);
}

#[test]
fn stale_foreign_and_missing_sockets_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A socket whose listener is gone: what a killed rlun leaves.
    let stale = dir.path().join("gone.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let out = run_rlun(["stats", &stale.display().to_string()], &[]);
    assert_failure(&out, 5, &["nobody listens on", "stale socket"]);

    let out = run_rlun(["stats", "/nonexistent/mount"], &[]);
    assert_failure(&out, 5, &["no rlun of this user serves /nonexistent/mount"]);

    let plain = dir.path().join("plain.sock");
    fs::write(&plain, "").unwrap();
    let out = run_rlun(["stats", &plain.display().to_string()], &[]);
    assert_failure(&out, 2, &["is not a socket"]);

    // Root's socket asked by another user (in a directory both can enter).
    let shared = Path::new("/tmp").join(format!("rlun-stats-test-{}", std::process::id()));
    fs::create_dir_all(&shared).unwrap();
    let foreign = shared.join("root.sock");
    let _ = fs::remove_file(&foreign);
    let _listener = UnixListener::bind(&foreign).unwrap();
    let out = run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(common::rlun_bin())
            .args(["stats", &foreign.display().to_string()]),
        Duration::from_secs(30),
    );
    let _ = fs::remove_dir_all(&shared);
    assert_failure(&out, 4, &["belongs to user 0"]);
}

#[test]
fn a_dead_process_s_socket_in_the_state_dir_is_swept_when_another_serves() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    // What an rlun killed with SIGKILL leaves: a pid file of a process
    // that is gone and its control socket.
    fs::create_dir_all("/run/rlun").unwrap();
    let key = format!("%2Fnonexistent%2Fstats-test-{}", std::process::id());
    let pid_file = Path::new("/run/rlun").join(format!("{key}.pid"));
    let sock = pid_file.with_extension("sock");
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    fs::write(&pid_file, format!("{dead_pid}\n")).unwrap();
    drop(UnixListener::bind(&sock).unwrap());

    let out = run_rlun(["stats", &sock.display().to_string()], &[]);
    assert_failure(&out, 5, &["stale socket"]);
    let _m = Mount::start(&tgtd, dir.path(), &[]);

    assert!(!sock.exists(), "the stale socket was swept");
    assert!(!pid_file.exists(), "the stale pid file was swept");
}

/// The visible text of a tmux pane.
fn pane(server: &str) -> String {
    let out = Command::new("tmux")
        .args(["-L", server, "capture-pane", "-p", "-t", "watch"])
        .output()
        .expect("tmux capture-pane");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_pane(server: &str, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = pane(server);
        if text.contains(needle) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{needle:?} never showed in the pane:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A private tmux server, killed when the test ends.
struct Tmux(String);

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .output();
    }
}

#[test]
fn watch_redraws_in_place_in_a_terminal_and_quits_on_q() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let m = Mount::start(&tgtd, dir.path(), &[]);
    let tmux = Tmux(format!("rlun-stats-{}", std::process::id()));
    let shell = format!(
        "{} stats {} --watch 0.2s; echo EXITED $?; sleep 60",
        common::rlun_bin().display(),
        m.path()
    );
    let started = Command::new("tmux")
        .args(["-L", &tmux.0, "new-session", "-d", "-s", "watch"])
        .args(["-x", "220", "-y", "20", &shell])
        .status()
        .expect("tmux");
    assert!(started.success());

    wait_pane(&tmux.0, "q or Ctrl-C to quit");
    read_direct(&m.file(), 1 << 20);
    std::thread::sleep(Duration::from_millis(800));
    let text = pane(&tmux.0);
    let send = Command::new("tmux")
        .args(["-L", &tmux.0, "send-keys", "-t", "watch", "q"])
        .status()
        .unwrap();
    assert!(send.success());
    let end = wait_pane(&tmux.0, "EXITED");

    assert_eq!(
        text.matches("WHAT").count(),
        1,
        "redrawn in place, one table on the screen:\n{text}"
    );
    assert!(text.contains(&m.path()), "{text}");
    assert!(end.contains("EXITED 0"), "q ends it cleanly:\n{end}");
}

/// `GET /metrics` over plain HTTP/1.1: status line and body.
fn scrape(addr: &str) -> (String, String) {
    http_get(addr, "/metrics")
}

/// `GET path` over plain HTTP/1.1 (closing the connection): status line
/// and body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

/// The value of the sample `name{…labels…}` whose labels contain every
/// one of `labels`.
fn sample(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} {labels:?} in:\n{body}"))
}

#[test]
fn the_metrics_endpoint_passes_promtool_and_counts_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let m = Mount::start(
        &tgtd,
        dir.path(),
        &["--cache", "write-through", "--metrics-listen", &addr],
    );

    read_direct(&m.file(), 2 << 20);
    read_direct(&m.file(), 2 << 20);
    let (status, body) = scrape(&addr);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();

    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        checked.status.success(),
        "promtool check metrics: {}\n{body}",
        both(&checked)
    );
    let lun = ["lun=\"1\"", IQN];
    assert_eq!(
        sample(&body, "rlun_read_bytes_total", &lun),
        (4 << 20) as f64
    );
    assert_eq!(sample(&body, "rlun_reads_total", &lun), 64.0);
    let le_inf = ["lun=\"1\"", "op=\"read\"", "le=\"+Inf\""];
    assert_eq!(
        sample(&body, "rlun_command_duration_seconds_bucket", &le_inf),
        64.0
    );
    assert!(sample(&body, "rlun_cache_hits_total", &lun) > 0.0);
    assert!(sample(&body, "rlun_cache_bytes", &["state=\"cached\""]) > 0.0);
    assert_eq!(sample(&body, "rlun_cache_bytes", &["state=\"dirty\""]), 0.0);
    assert_eq!(sample(&body, "rlun_session_up", &[IQN]), 1.0);
    assert_eq!(sample(&body, "rlun_reconnects_total", &[IQN]), 0.0);
    assert_eq!(
        sample(&body, "rlun_session_down_seconds_total", &[IQN]),
        0.0
    );
    // Every kind of error is a series from the start (rate() needs it).
    for kind in ["unreachable", "target", "read_only", "no_space", "removed"] {
        let kind_label = format!("kind=\"{kind}\"");
        let labels = ["lun=\"1\"", kind_label.as_str()];
        assert_eq!(
            sample(&body, "rlun_request_errors_total", &labels),
            0.0,
            "{kind}"
        );
    }
    assert_eq!(sample(&body, "rlun_cache_dirty_age_seconds", &lun), 0.0);
    assert!(
        sample(&body, "rlun_readahead_pages_total", &lun)
            >= sample(&body, "rlun_readahead_hits_total", &lun)
    );
    assert_eq!(
        sample(&body, "rlun_readahead_wasted_pages_total", &lun),
        0.0,
        "nothing evicted in a 2 MiB read"
    );
}

#[test]
fn metrics_on_a_non_loopback_address_need_the_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());

    let refused = run_rlun(
        [
            "mount",
            "--metrics-listen",
            "0.0.0.0:0",
            &url,
            &mp.display().to_string(),
        ],
        &[],
    );
    let alone = run_rlun(["mount", "--metrics-allow-remote", &url, "/tmp"], &[]);

    assert_failure(
        &refused,
        2,
        &[
            "0.0.0.0:0 is not a loopback address",
            "--metrics-allow-remote",
        ],
    );
    // clap's own usage error.
    assert_eq!(alone.status.code(), Some(2), "{}", both(&alone));
    assert!(
        both(&alone).contains("--metrics-listen"),
        "{}",
        both(&alone)
    );
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Percent-encode a query parameter.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// Ask Prometheus' HTTP API for `query` now: the data of a successful
/// answer.
fn prom_query(addr: &str, query: &str) -> Value {
    let (status, body) = http_get(addr, &format!("/api/v1/query?query={}", encode(query)));
    // Chunked or not, the JSON is the one line that starts with '{'.
    let text = body
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{status}: {body}"));
    let v = json(text);
    assert_eq!(v["status"], "success", "{query}: {v}");
    v["data"].clone()
}

#[test]
fn a_prometheus_server_scrapes_the_read_rate_during_fio_and_the_dashboard_queries_work() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let metrics = format!("127.0.0.1:{}", free_port());
    let m = Mount::start(&tgtd, dir.path(), &["--metrics-listen", &metrics]);
    let web = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rlun\n    static_configs:\n      - targets: [\"{metrics}\"]\n"
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prometheus (Debian package prometheus)");
    let _prometheus = common::ChildGuard(prometheus);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&web).is_err()
        || !http_get(&web, "/-/ready").0.contains("200")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus never got ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its scrape manager starts the first scrape a few seconds later.
    while prom_query(&web, "up{job=\"rlun\"} == 1")["result"]
        .as_array()
        .is_none_or(|r| r.is_empty())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus never scraped rlun"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let out = fio_randread(&m.file(), 5);
    assert!(out.status.success(), "fio: {}", both(&out));
    let rate = prom_query(
        &web,
        &format!("rate(rlun_read_bytes_total{{target=\"{IQN}\",lun=\"1\"}}[30s])"),
    );

    let value = rate["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("a rate in {rate}"));
    assert!(value > 0.0, "Prometheus saw the reads: {rate}");
    // Every query of the Grafana dashboard runs and finds rlun's series.
    let dashboard: Value = serde_json::from_str(
        &fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/grafana/rlun-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "30s")
                .replace("$instance", ".*")
                .replace("$target", ".*");
            let data = prom_query(&web, &expr);
            assert!(
                !data["result"].as_array().unwrap().is_empty(),
                "{} ({expr}) found no series",
                panel["title"]
            );
        }
    }
}

#[test]
fn log_format_json_writes_one_object_per_line_from_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let log = dir.path().join("rlun.log");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let out = run_rlun(
        [
            "-v",
            "--log-format",
            "json",
            "mount",
            "--daemon",
            "--log-file",
            &log.display().to_string(),
            &url,
            &mp.display().to_string(),
        ],
        &[],
    );
    // Unmounted however the test ends.
    let _unmount = Mount { mp: mp.clone() };
    assert_success(&out, "rlun mount --daemon --log-format json");
    let out = run_rlun(["umount", &mp.display().to_string()], &[]);
    assert_success(&out, "rlun umount");

    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text.lines().map(json).collect();
    assert!(!lines.is_empty(), "the daemon logged something");
    for l in &lines {
        assert!(l["timestamp"].is_string(), "{l}");
        assert!(l["level"].is_string(), "{l}");
        assert!(l["fields"]["message"].is_string(), "{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "logged in" && l["fields"]["target"] == IQN),
        "the login, with its target as a field:\n{text}"
    );
}

#[test]
fn stats_finds_a_server_by_its_socket_and_by_nbd_address() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let sock = dir.path().join("nbd.sock");
    let sock = sock.display().to_string();
    let addr = format!("127.0.0.1:{}", free_port());
    let by_socket = common::spawn_rlun(["serve", "--socket", &sock, &url], &[]);
    let by_addr = common::spawn_rlun(["serve", "--listen", &addr, &url], &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(Path::new(&sock).exists() && std::net::TcpStream::connect(&addr).is_ok()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the servers never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let read = run_with_timeout(
        Command::new("qemu-io").args([
            "-f",
            "raw",
            "-r",
            "-c",
            "read 0 1M",
            &format!("nbd+unix:///lun1?socket={sock}"),
        ]),
        Duration::from_secs(30),
    );
    assert!(read.status.success(), "qemu-io: {}", both(&read));
    // The TCP server listens before it has logged in and registered
    // itself with `rlun stats`; a handshake (no read) waits for that.
    let info = run_with_timeout(
        Command::new("nbdinfo").args(["--size", &format!("nbd://{addr}/lun1")]),
        Duration::from_secs(30),
    );
    assert!(info.status.success(), "nbdinfo: {}", both(&info));

    let one = |what: &str| -> Value {
        let out = run_rlun(["stats", what, "--json"], &[]);
        let v = json(&assert_success(&out, &format!("rlun stats {what}")));
        assert_eq!(v["processes"].as_array().map(Vec::len), Some(1), "{v}");
        v["processes"][0].clone()
    };
    let s = one(&sock);
    let a = one(&format!("nbd://{addr}"));

    assert_eq!(s["kind"], "served");
    assert_eq!(s["what"], sock.as_str());
    assert_eq!(u(&s["luns"][0], &["total", "read_bytes"]), 1 << 20, "{s}");
    assert_eq!(a["what"], format!("nbd://{addr}").as_str());
    assert_eq!(u(&a["luns"][0], &["total", "reads"]), 0, "{a}");
    drop((by_socket, by_addr));
}

#[test]
fn a_config_file_target_serves_metrics_where_its_entry_says() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let addr = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("rlun.toml");
    fs::write(
        &config,
        format!(
            "[targets.store]\nurl = \"iscsi://{}/{IQN}\"\nmetrics_listen = \"{addr}\"\n",
            tgtd.portal()
        ),
    )
    .unwrap();
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let config = config.display().to_string();
    let mount = Mount { mp };

    let out = run_rlun(
        [
            "--config",
            &config,
            "mount",
            "--daemon",
            "store",
            &mount.path(),
        ],
        &[],
    );
    assert_success(&out, "rlun mount --daemon store");
    let (status, body) = scrape(&addr);
    drop(mount);

    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(sample(&body, "rlun_session_up", &[IQN]), 1.0, "{body}");
}

#[test]
fn systemd_status_tells_the_dirty_bytes_once_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = target(dir.path());
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let mp_s = mp.display().to_string();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let child = common::spawn_rlun(
        [
            "mount",
            "--direct-io",
            "--cache",
            "write-back",
            "--writeback-delay",
            "60s",
            &url,
            &mp_s,
        ],
        &[("NOTIFY_SOCKET", &sock_path.to_string_lossy())],
    );
    let _unmount = Mount { mp: mp.clone() };
    assert!(recv_notify(&sock, "READY=1").starts_with("READY=1"));

    let out = run_with_timeout(
        Command::new("dd").args([
            "if=/dev/zero",
            &format!("of={}", mp.join("lun1").display()),
            "bs=64k",
            "count=16",
            "oflag=direct",
            "conv=notrunc",
            "status=none",
        ]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "dd: {}", both(&out));
    let status = recv_notify(&sock, "STATUS= update");
    drop(child);

    assert_eq!(
        status,
        format!("STATUS=mounted {mp_s}: 1 LUN, session up, 1.0 MiB dirty, 0 reconnects")
    );
}

/// One O_DIRECT read of 4 KiB by dd: whether it succeeded.
fn dd_once(file: &Path) -> bool {
    run_with_timeout(
        Command::new("dd").args([
            &format!("if={}", file.display()),
            "of=/dev/null",
            "bs=4k",
            "count=1",
            "iflag=direct",
            "status=none",
        ]),
        Duration::from_secs(60),
    )
    .status
    .success()
}

#[test]
fn an_outage_shows_as_session_down_unreachable_errors_and_time_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut tgtd = target(dir.path());
    let m = Mount::start(
        &tgtd,
        dir.path(),
        &["--cache", "none", "--replacement-timeout", "2s"],
    );
    assert!(dd_once(&m.file()), "a read before the outage");
    let up = m.stats_process();
    assert_eq!(up["session_up"], true, "{up}");
    assert_eq!(f(&up, &["down_seconds"]), 0.0, "{up}");

    tgtd.kill();
    let failed = !dd_once(&m.file());
    let down = m.stats_process();
    let list = json(&assert_success(&run_rlun(["list", "--json"], &[]), "list"));
    let table = assert_success(&run_rlun(["list"], &[]), "list");

    assert!(failed, "a read past the replacement timeout fails");
    assert_eq!(down["session_up"], false, "{down}");
    assert!(f(&down, &["down_seconds"]) >= 1.5, "{down}");
    let lun = &down["luns"][0];
    assert!(u(lun, &["errors", "unreachable"]) >= 1, "{lun}");
    assert_eq!(lun["errors"].as_object().map(|o| o.len()), Some(1), "{lun}");
    let row = list
        .as_array()
        .and_then(|a| a.iter().find(|r| r["what"] == m.path().as_str()))
        .unwrap_or_else(|| panic!("the mount in {list}"));
    assert_eq!(row["session_up"], false, "{row}");
    let line = table
        .lines()
        .find(|l| l.contains(&m.path()))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains(" down "), "STATE column: {line}");

    tgtd.restart().expect("tgtd restarts");
    let back = (0..60).any(|_| {
        dd_once(&m.file()) || {
            std::thread::sleep(Duration::from_millis(500));
            false
        }
    });
    let again = m.stats_process();

    assert!(back, "reads work again once tgtd is back");
    assert_eq!(again["session_up"], true, "{again}");
    assert!(u(&again, &["reconnects"]) >= 1, "{again}");
    let last = f(&again, &["last_outage_seconds"]);
    assert!(
        last >= 1.5,
        "the outage lasted past the failed read: {again}"
    );
    assert!(f(&again, &["down_seconds"]) >= last, "{again}");
}
