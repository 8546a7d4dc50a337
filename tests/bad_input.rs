//! Bad input of every kind, one test each: malformed URLs, portals that do
//! not answer, names that do not exist, writes the LUN must refuse, and
//! options that need confirmation. Each must end with the documented exit
//! code and one `rlun: ` line that names the problem, and must leave the
//! LUN's data untouched.

mod common;

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::cli::{assert_failure, assert_success, timed_rlun};
use common::{make_backing_file, pattern_bytes, rlun_bin, run_rlun, run_with_timeout, Tgtd};

const MIB: u64 = 1 << 20;
const IQN: &str = "iqn.2026-11.org.example:bad";

// rlun's documented exit codes (`rlun::cli::exit`).
const EXIT_USAGE: i32 = 2;
const EXIT_UNREACHABLE: i32 = 3;
const EXIT_NOT_FOUND: i32 = 5;
const EXIT_IO: i32 = 6;
const EXIT_LOCAL_FILE: i32 = 8;

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// The backing file still holds exactly the pattern it was made with.
#[track_caller]
fn assert_untouched(path: &Path, size: u64, seed: u64) {
    let now = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert_eq!(now.len() as u64, size, "backing file size changed");
    assert!(
        now == pattern_bytes(seed, 0, size as usize),
        "backing file {} was modified",
        path.display()
    );
}

/// A tgtd with one writable 512-byte-block LUN 1 of `size` bytes (pattern `seed`).
fn one_lun(dir: &Path, size: u64, seed: u64) -> (Tgtd, std::path::PathBuf) {
    let img = make_backing_file(dir, size, seed);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &img, 512)
        .create()
        .expect("target");
    (tgtd, img)
}

// ---------------------------------------------------------------- URLs

#[test]
fn url_with_an_unsupported_scheme_exits_2_and_names_the_scheme() {
    let out = run_rlun(["info", &format!("http://127.0.0.1/{IQN}/1")], &[]);

    assert_failure(&out, EXIT_USAGE, &["bad url", "scheme 'http'"]);
}

#[test]
fn url_with_a_non_numeric_lun_exits_2_and_names_the_lun() {
    let out = run_rlun(["info", &format!("iscsi://127.0.0.1/{IQN}/first")], &[]);

    assert_failure(&out, EXIT_USAGE, &["bad lun 'first'"]);
}

#[test]
fn url_with_a_port_out_of_range_exits_2_and_names_the_port() {
    let out = run_rlun(["info", &format!("iscsi://127.0.0.1:70000/{IQN}/1")], &[]);

    assert_failure(&out, EXIT_USAGE, &["bad port '70000'"]);
}

#[test]
fn url_with_a_single_slash_after_the_scheme_exits_2() {
    let out = run_rlun(["ls", &format!("iscsi:/127.0.0.1/{IQN}")], &[]);

    assert_failure(&out, EXIT_USAGE, &["must be followed by '//'"]);
}

#[test]
fn info_on_a_url_without_a_lun_exits_2_and_says_so() {
    let out = run_rlun(["info", &format!("iscsi://127.0.0.1/{IQN}")], &[]);

    assert_failure(&out, EXIT_USAGE, &["names no lun"]);
}

#[test]
fn info_on_a_config_target_without_a_lun_exits_2_and_says_how_to_name_one() {
    let dir = tempdir();
    let cfg = dir.path().join("rlun.toml");
    // As the README's systemd example names it: a whole target, for mount.
    fs::write(
        &cfg,
        format!("[targets.store]\nurl = \"iscsi://127.0.0.1/{IQN}\"\n"),
    )
    .expect("write the config file");

    let out = run_rlun(["--config", cfg.to_str().unwrap(), "info", "store"], &[]);

    assert_failure(
        &out,
        EXIT_USAGE,
        &[
            "config-file target 'store'",
            "names no lun",
            "rlun ls store",
            &format!("iscsi://127.0.0.1:3260/{IQN}/<lun>"),
        ],
    );
}

#[test]
fn url_with_a_malformed_target_name_exits_2() {
    let out = run_rlun(["info", "iscsi://127.0.0.1/not an iqn/1"], &[]);

    assert_failure(&out, EXIT_USAGE, &["bad url"]);
}

// ---------------------------------------------------------------- portals

#[test]
fn closed_port_exits_3_quickly() {
    // A port that was free a moment ago and has no listener now.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();

    let (out, took) = timed_rlun(
        &["info", &format!("iscsi://127.0.0.1:{port}/{IQN}/1")],
        &[],
        Duration::from_secs(20),
    );

    assert_failure(&out, EXIT_UNREACHABLE, &["cannot reach portal", "refused"]);
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn several_closed_portals_exit_3_naming_each_without_promising_a_retry() {
    let free = || {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port()
    };
    let (a, b) = (free(), free());

    let (out, took) = timed_rlun(
        &[
            "info",
            "--portal",
            &format!("127.0.0.1:{b}"),
            &format!("iscsi://127.0.0.1:{a}/{IQN}/1"),
        ],
        &[],
        Duration::from_secs(20),
    );

    let both = format!("none of the 2 portals answered (127.0.0.1:{a}, 127.0.0.1:{b})");
    assert_failure(&out, EXIT_UNREACHABLE, &[&both, "refused"]);
    // A one-shot command that gives up must not say it keeps trying.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("trying again"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// A listener with a backlog of 0 whose accept queue is already full: the
/// kernel drops further SYNs, so a connect neither succeeds nor fails.
fn full_listener() -> (socket2::Socket, Vec<TcpStream>, SocketAddr) {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    sock.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    sock.listen(0).expect("listen");
    let addr = sock
        .local_addr()
        .expect("local address")
        .as_socket()
        .expect("inet");
    let mut fillers = Vec::new();
    // Fill the queue until a probe connect hangs (one queued connection is
    // enough on Linux; a few more tolerate other kernels' accounting).
    for _ in 0..8 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(s) => fillers.push(s),
            Err(_) => return (sock, fillers, addr),
        }
    }
    panic!("could not fill the accept queue of {addr}");
}

#[test]
fn portal_that_never_completes_the_connection_hits_the_connect_timeout() {
    let (_listener, _fillers, addr) = full_listener();

    let (out, took) = timed_rlun(
        &[
            "info",
            "--connect-timeout",
            "1s",
            &format!("iscsi://{addr}/{IQN}/1"),
        ],
        &[],
        Duration::from_secs(20),
    );

    assert_failure(
        &out,
        EXIT_UNREACHABLE,
        &["cannot reach portal", "connect timeout"],
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "took {took:?}"
    );
}

#[test]
fn portal_that_accepts_nothing_hits_the_login_timeout() {
    // The kernel completes the TCP handshake from the listen queue, but
    // nobody ever reads the login request.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");

    let (out, took) = timed_rlun(
        &[
            "info",
            "--login-timeout",
            "2s",
            &format!("iscsi://{addr}/{IQN}/1"),
        ],
        &[],
        Duration::from_secs(20),
    );

    assert_failure(&out, EXIT_UNREACHABLE, &["timed out"]);
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "took {took:?}"
    );
    drop(listener);
}

// ---------------------------------------------------------------- names

#[test]
fn unknown_target_iqn_exits_5_and_says_not_found() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), MIB, 1);

    let out = run_rlun(
        ["info", &tgtd.url("iqn.2026-11.org.example:nobody", 1)],
        &[],
    );

    // The name is repeated, and the names the portal offers are listed.
    assert_failure(
        &out,
        EXIT_NOT_FOUND,
        &["target iqn.2026-11.org.example:nobody not found", IQN],
    );
    assert_untouched(&img, MIB, 1);
}

#[test]
fn lun_that_does_not_exist_exits_5_and_names_the_lun() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), MIB, 2);

    let out = run_rlun(["info", &tgtd.url(IQN, 7)], &[]);

    assert_failure(&out, EXIT_NOT_FOUND, &["lun 7", "does not exist"]);
}

#[test]
fn the_controller_lun_0_is_described_by_info_and_refused_by_cp_as_no_disk() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), MIB, 17);
    let out_file = dir.path().join("lun0.img");

    // tgtd's LUN 0 is a storage array controller, not a block device: `ls`
    // lists it with its URL, so `info` says what it is.
    let info = run_rlun(["info", &tgtd.url(IQN, 0)], &[]);
    let cp = run_rlun(["cp", &tgtd.url(IQN, 0), out_file.to_str().unwrap()], &[]);

    let text = assert_success(&info, "info of LUN 0");
    assert!(text.contains("storage array controller"), "{text}");
    assert!(text.contains("Not a disk"), "{text}");
    assert_failure(&cp, EXIT_USAGE, &["lun 0", "not a disk"]);
    assert!(
        !out_file.exists(),
        "nothing is written for a LUN that is no disk"
    );
}

#[test]
fn cp_to_a_lun_that_does_not_exist_exits_5() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), MIB, 3);
    let src = make_backing_file(dir.path(), 4096, 4);

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            src.to_str().unwrap(),
            &tgtd.url(IQN, 3),
        ],
        &[],
    );

    assert_failure(&out, EXIT_NOT_FOUND, &["lun 3"]);
}

// ---------------------------------------------------------------- writes refused

#[test]
fn cp_to_a_read_only_lun_exits_6_and_leaves_the_backing_file_unchanged() {
    let dir = tempdir();
    let img = make_backing_file(dir.path(), 2 * MIB, 5);
    let src = make_backing_file(dir.path(), MIB, 6);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_readonly(1, &img, 512)
        .create()
        .expect("target");

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            src.to_str().unwrap(),
            &tgtd.url(IQN, 1),
        ],
        &[],
    );

    let line = assert_failure(&out, EXIT_IO, &[]);
    let lower = line.to_lowercase();
    assert!(
        lower.contains("write protected") || lower.contains("read-only"),
        "{line}"
    );
    assert_untouched(&img, 2 * MIB, 5);
}

#[test]
fn cp_of_a_file_bigger_than_the_lun_exits_6_and_writes_nothing() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), 2 * MIB, 7);
    let src = make_backing_file(dir.path(), 2 * MIB + 1, 8);

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            src.to_str().unwrap(),
            &tgtd.url(IQN, 1),
        ],
        &[],
    );

    assert_failure(&out, EXIT_IO, &["holds only"]);
    assert_untouched(&img, 2 * MIB, 7);
}

#[test]
fn cp_of_a_lun_into_a_smaller_lun_exits_6_and_writes_nothing() {
    let dir = tempdir();
    let big = make_backing_file(dir.path(), 2 * MIB, 9);
    let small = make_backing_file(dir.path(), MIB, 10);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &big, 512)
        .lun_file(2, &small, 512)
        .create()
        .expect("target");

    let out = run_rlun(
        ["cp", "--no-progress", &tgtd.url(IQN, 1), &tgtd.url(IQN, 2)],
        &[],
    );

    assert_failure(&out, EXIT_IO, &["holds only"]);
    assert_untouched(&small, MIB, 10);
    assert_untouched(&big, 2 * MIB, 9);
}

#[test]
fn bench_write_without_allow_write_exits_2_and_writes_nothing() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), MIB, 11);

    let out = run_rlun(
        [
            "bench",
            "--pattern",
            "write",
            "--duration",
            "1s",
            &tgtd.url(IQN, 1),
        ],
        &[],
    );

    assert_failure(&out, EXIT_USAGE, &["--allow-write"]);
    assert_untouched(&img, MIB, 11);
}

#[test]
fn bench_randwrite_without_allow_write_exits_2_and_writes_nothing() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), MIB, 12);

    let out = run_rlun(
        [
            "bench",
            "--pattern",
            "randwrite",
            "--duration",
            "1s",
            &tgtd.url(IQN, 1),
        ],
        &[],
    );

    assert_failure(&out, EXIT_USAGE, &["--allow-write"]);
    assert_untouched(&img, MIB, 12);
}

#[test]
fn bench_with_a_block_size_not_a_multiple_of_the_lun_block_exits_2() {
    let dir = tempdir();
    let img = make_backing_file(dir.path(), MIB, 13);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &img, 4096)
        .create()
        .expect("target");

    let out = run_rlun(
        ["bench", "--bs", "2k", "--duration", "1s", &tgtd.url(IQN, 1)],
        &[],
    );

    assert_failure(&out, EXIT_USAGE, &["--bs 2048", "4096-byte blocks"]);
}

// ---------------------------------------------------------------- local files

#[test]
fn zero_queue_depth_duration_or_block_size_exit_2_before_any_io() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), MIB, 16);
    let url = tgtd.url(IQN, 1);
    let copy = dir.path().join("copy.img");
    let copy = copy.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["cp", "--qd", "0", &url, copy], "--qd must be at least 1"),
        (
            &["bench", "--duration", "0s", &url],
            "--duration must be greater than 0",
        ),
        (
            &["bench", "--bs", "0", "--duration", "1s", &url],
            "--bs must be greater than 0",
        ),
        (
            &["cp", "--bs", "0", &url, copy],
            "--bs must be greater than 0",
        ),
    ];

    for (args, needle) in cases {
        let out = run_rlun(args, &[]);
        assert_failure(&out, EXIT_USAGE, &[needle]);
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
    }
    assert!(
        !Path::new(copy).exists(),
        "cp --qd 0 created its destination"
    );
    assert_untouched(&img, MIB, 16);
}

#[test]
fn cp_from_a_missing_local_file_exits_8_and_names_it() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), MIB, 14);
    let missing = dir.path().join("no-such-file.img");

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            missing.to_str().unwrap(),
            &tgtd.url(IQN, 1),
        ],
        &[],
    );

    assert_failure(&out, EXIT_LOCAL_FILE, &["no-such-file.img"]);
    assert_untouched(&img, MIB, 14);
}

#[test]
fn cp_into_a_missing_directory_exits_8_and_names_the_path() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), MIB, 15);
    let dest = dir.path().join("no-such-dir").join("copy.img");

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            &tgtd.url(IQN, 1),
            dest.to_str().unwrap(),
        ],
        &[],
    );

    assert_failure(&out, EXIT_LOCAL_FILE, &["no-such-dir"]);
}

#[test]
fn cp_between_two_local_files_exits_2() {
    let dir = tempdir();
    let src = make_backing_file(dir.path(), 4096, 16);
    let dst = dir.path().join("dst.img");

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
        ],
        &[],
    );

    assert_failure(&out, EXIT_USAGE, &["neither side is a lun"]);
    assert!(!dst.exists(), "cp created {}", dst.display());
}

/// True when this machine has an RDMA device (then the no-device tests
/// below cannot show their message).
fn has_rdma_device() -> bool {
    fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn iser_url_without_an_rdma_device_exits_3_and_names_the_checks() {
    if has_rdma_device() {
        eprintln!("SKIP: this machine has an RDMA device");
        return;
    }
    // An address nothing answers and a connect timeout of an hour: only a
    // refusal before any connection attempt finishes within the deadline.
    for args in [
        vec![
            "info",
            "--connect-timeout",
            "1h",
            "iser://192.0.2.1/iqn.2026-11.org.example:x/1",
        ],
        vec!["discover", "--connect-timeout", "1h", "iser://192.0.2.1"],
    ] {
        let (out, _) = timed_rlun(&args, &[], Duration::from_secs(60));

        assert_failure(
            &out,
            EXIT_UNREACHABLE,
            &["no rdma device", "`rdma link`", "`ibv_devices`"],
        );
    }
}

#[test]
fn a_bad_iser_registration_mode_is_a_usage_error_before_any_connection() {
    // RLUN_ISER_REGISTRATION chooses pool or per-command registration
    // (the lab runs both); a misspelt value is refused before rdma-core is
    // even loaded, with an hour-long connect timeout that only an early
    // refusal beats.
    let (out, _) = timed_rlun(
        &[
            "info",
            "--connect-timeout",
            "1h",
            "iser://192.0.2.1/iqn.2026-11.org.example:x/1",
        ],
        &[("RLUN_ISER_REGISTRATION", "always")],
        Duration::from_secs(60),
    );
    assert_failure(
        &out,
        EXIT_USAGE,
        &["RLUN_ISER_REGISTRATION=always", "`pool` or `per-command`"],
    );
}

#[test]
fn iser_url_without_rdma_core_libraries_names_what_to_install() {
    // Hide libibverbs in a private mount namespace (root only), as on a
    // machine where rdma-core is not installed.
    let lib = std::process::Command::new("sh")
        .args([
            "-c",
            "ldconfig -p | awk '/libibverbs.so.1 /{print $NF; exit}'",
        ])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let unshare_ok = std::process::Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if lib.is_empty() || !unshare_ok {
        eprintln!("SKIP: needs libibverbs.so.1 installed and `unshare -m` (root)");
        return;
    }
    let script = format!(
        "mount --bind /dev/null '{lib}' && exec '{}' info iser://127.0.0.1/{IQN}/1",
        common::rlun_bin().display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("run rlun in a mount namespace");

    assert_failure(
        &out,
        EXIT_UNREACHABLE,
        &["libibverbs.so.1", "install rdma-core", "`ibv_devices`"],
    );
}

// ------------------------------------------------ copies to odd destinations

#[test]
fn cp_of_a_lun_to_dev_null_succeeds_without_a_sync_error() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), 2 * MIB, 11);

    let out = run_rlun(["cp", "--no-progress", &tgtd.url(IQN, 1), "/dev/null"], &[]);

    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("sync"), "{err}");
    assert_untouched(&img, 2 * MIB, 11);
}

#[test]
fn cp_of_a_lun_into_a_fifo_delivers_every_byte_in_order() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), 2 * MIB, 12);
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read(&fifo).expect("read the fifo"))
    };

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            "--bs",
            "64k",
            "--qd",
            "8",
            &tgtd.url(IQN, 1),
            fifo.to_str().unwrap(),
        ],
        &[],
    );

    let got = reader.join().expect("fifo reader");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        got == pattern_bytes(12, 0, (2 * MIB) as usize),
        "the fifo did not receive the LUN's bytes in order ({} bytes)",
        got.len()
    );
}

/// A tmpfs of `size` bytes mounted on a fresh directory, unmounted on drop.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(parent: &Path, size: u64) -> SmallFs {
        let dir = parent.join("smallfs");
        fs::create_dir(&dir).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("run mount");
        assert!(ok.success(), "cannot mount a tmpfs (the tests run as root)");
        SmallFs(dir)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn cp_from_standard_input_larger_than_the_lun_exits_6_and_fills_only_the_lun() {
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), 2 * MIB, 14);
    let source = make_backing_file(dir.path(), 3 * MIB, 15);

    let out = run_with_timeout(
        std::process::Command::new("sh").args([
            "-c",
            &format!(
                "cat '{}' | '{}' cp --no-progress - '{}'",
                source.display(),
                rlun_bin().display(),
                tgtd.url(IQN, 1)
            ),
        ]),
        Duration::from_secs(60),
    );

    assert_failure(
        &out,
        EXIT_IO,
        &["standard input holds more than the 2097152 bytes of LUN 1"],
    );
    let now = fs::read(&img).expect("read the backing file");
    assert_eq!(now.len() as u64, 2 * MIB, "backing file size changed");
    assert!(
        now == pattern_bytes(15, 0, (2 * MIB) as usize),
        "the LUN does not hold the first 2 MiB of the input"
    );
}

#[test]
fn cp_interrupted_by_sigint_exits_130_and_leaves_only_what_was_copied() {
    assert_cp_stops_cleanly_on("INT", 130);
}

#[test]
fn cp_hung_up_on_exits_129_and_leaves_only_what_was_copied() {
    // An ssh session or terminal that goes away mid-copy.
    assert_cp_stops_cleanly_on("HUP", 129);
}

/// Poll `done` until it holds (at most 60 s), failing if the copy ends first.
fn wait_while_copying(
    child: &mut common::ChildGuard,
    failed: &str,
    mut done: impl FnMut() -> bool,
) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the copy {failed} within 60 s"
        );
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("rlun cp ended before the signal: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `kill -SIGNAL` the child (a name such as `INT`, as `kill` takes it).
fn send_signal(child: &common::ChildGuard, signal: &str) {
    let killed = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill -{signal} failed");
}

/// `rlun cp --no-progress ARGS… DST` in the background, stdout and stderr
/// piped for `wait_output`.
fn spawn_cp(args: &[&str], dst: &Path) -> common::ChildGuard {
    common::ChildGuard(
        std::process::Command::new(rlun_bin())
            .args(["cp", "--no-progress"])
            .args(args)
            .arg(dst)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start rlun cp"),
    )
}

/// SIG`signal` in the middle of a LUN → file copy: exit `code`, one message
/// naming the signal, and a file cut back to exactly the bytes it says.
fn assert_cp_stops_cleanly_on(signal: &str, code: i32) {
    let dir = tempdir();
    let mut tgtd = Tgtd::start().expect("start tgtd");
    // 1 TiB of zeros: the copy is still running when the signal comes.
    tgtd.add_target(IQN).lun_null(1).create().expect("target");
    let dst = dir.path().join("backup.img");
    // Zeros are copied as holes unless --no-sparse: make them land.
    let mut child = spawn_cp(&["--no-sparse", "--bs", "64k", &tgtd.url(IQN, 1)], &dst);
    // Wait until some data has landed in the (sparse, LUN-sized) file.
    wait_while_copying(&mut child, "wrote nothing", || {
        fs::metadata(&dst).is_ok_and(|m| m.blocks() >= 4096)
    });

    send_signal(&child, signal);
    let out = wait_output(child, Duration::from_secs(30));

    assert_failure(&out, code, &[&format!("interrupted by SIG{signal}")]);
    let err = String::from_utf8_lossy(&out.stderr);
    let left = fs::metadata(&dst)
        .expect("the partial destination is kept")
        .len();
    assert!(
        err.contains(&format!("holds the {left} bytes copied")),
        "the file is {left} bytes long, which the message does not say: {err}"
    );
    assert!(left < 1 << 40, "the file still claims the whole LUN");
}

#[test]
fn cp_to_a_lun_interrupted_by_sigint_flushes_what_it_wrote_and_says_how_much() {
    // Standard input delivers 4 MiB and then stays open: the copy waits for
    // more when the signal comes, with everything before written.
    let dir = tempdir();
    let (tgtd, img) = one_lun(dir.path(), 16 * MIB, 21);
    let sent = pattern_bytes(22, 0, (4 * MIB) as usize);
    let mut child = common::ChildGuard(
        std::process::Command::new(rlun_bin())
            .args(["cp", "--no-progress", "--bs", "64k", "-", &tgtd.url(IQN, 1)])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start rlun cp"),
    );
    let mut stdin = child.0.stdin.take().expect("stdin pipe");
    std::io::Write::write_all(&mut stdin, &sent).expect("feed standard input");
    wait_while_copying(&mut child, "did not write the 4 MiB sent", || {
        fs::read(&img).expect("read the backing file")[..sent.len()] == sent[..]
    });

    send_signal(&child, "INT");
    let out = wait_output(child, Duration::from_secs(30));
    drop(stdin);

    assert_failure(&out, 130, &["interrupted by SIGINT"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "LUN 1 holds the first 4194304 bytes of the source, flushed with SYNCHRONIZE CACHE"
        ),
        "no word of what the LUN holds and that it was flushed: {err}"
    );
    let now = fs::read(&img).expect("read the backing file");
    assert!(
        now[..sent.len()] == sent[..],
        "the LUN lost part of what was sent"
    );
    assert!(
        now[sent.len()..] == pattern_bytes(21, 4 * MIB, (12 * MIB) as usize)[..],
        "the LUN changed after the bytes the copy says it wrote"
    );
}

#[test]
fn cp_interrupted_by_sigint_while_logging_in_exits_130_at_once() {
    // Accepts connections (in the backlog) and never answers the login.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("iscsi://{}/{IQN}/1", silent.local_addr().unwrap());
    let dir = tempdir();
    let dst = dir.path().join("backup.img");
    let mut child = spawn_cp(&["--login-timeout", "120s", &url], &dst);
    // Let it connect and send its login request.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "rlun cp ended early"
    );

    send_signal(&child, "INT");
    // Far less than the 120 s login timeout.
    let out = wait_output(child, Duration::from_secs(20));

    assert_failure(&out, 130, &["interrupted by SIGINT"]);
    assert!(
        !dst.exists(),
        "the destination was created before the login"
    );
}

/// Collect a spawned rlun's exit status and output, killing it after `timeout`.
fn wait_output(mut child: common::ChildGuard, timeout: Duration) -> std::process::Output {
    use std::io::Read;
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            start.elapsed() < timeout,
            "rlun did not stop within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut stderr);
    }
    std::process::Output {
        status,
        stdout,
        stderr,
    }
}

#[test]
fn cp_into_a_full_filesystem_fails_and_leaves_only_what_was_copied() {
    let dir = tempdir();
    let (tgtd, _img) = one_lun(dir.path(), 8 * MIB, 13);
    let fs_small = SmallFs::mount(dir.path(), 2 * MIB);
    let dst = fs_small.0.join("backup.img");

    let out = run_rlun(
        [
            "cp",
            "--no-progress",
            &tgtd.url(IQN, 1),
            dst.to_str().unwrap(),
        ],
        &[],
    );

    assert_failure(&out, EXIT_LOCAL_FILE, &["No space left"]);
    let left = fs::read(&dst).expect("the partial destination is kept");
    assert!(
        (left.len() as u64) < 8 * MIB,
        "the destination claims the whole LUN ({} bytes) although the copy failed",
        left.len()
    );
    assert!(
        left == pattern_bytes(13, 0, left.len()),
        "the {} bytes left are not the LUN's first bytes",
        left.len()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("holds the {} bytes copied", left.len())),
        "{err}"
    );
}

/// A tiny stand-in for a web server: every connection's first bytes get an
/// HTTP 400 answer, then the connection is closed. Deliberately not iSCSI.
/// Also returns the number of connections it accepted.
fn http_server() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 512];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
                  Content-Length: 11\r\nConnection: close\r\n\r\nBad Request",
            );
        }
    });
    (addr, accepted)
}

#[test]
fn a_web_server_on_the_port_is_named_as_not_an_iscsi_target_with_its_first_bytes() {
    use std::sync::atomic::Ordering;
    let (addr, accepted) = http_server();
    const EXIT_PROTOCOL: i32 = 7;

    let discover = run_rlun(["discover", &addr.to_string()], &[]);
    let after_discover = accepted.load(Ordering::SeqCst);
    let info = run_rlun(["info", &format!("iscsi://{addr}/{IQN}/1")], &[]);

    // What answered is named from the one connection's bytes: no second
    // connection to ask again.
    assert_eq!(after_discover, 1, "connections of discover");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "connections of discover and info"
    );
    for out in [&discover, &info] {
        let line = assert_failure(out, EXIT_PROTOCOL, &["\"HTTP/1.1 400 Bad Request"]);
        assert!(
            line.starts_with(&format!("rlun: {addr} does not look like an iSCSI target")),
            "says first what is wrong: {line}"
        );
    }
}
