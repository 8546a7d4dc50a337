//! The target changes under a serving rlun (issue 25): tgtd adds, removes
//! and replaces LUNs while `rlun mount` and `rlun serve` run. tgtd reports
//! REPORTED LUNS DATA HAS CHANGED (UNIT ATTENTION 3F/0E) on the next
//! command; rlun must follow it — the mount's directory gains and loses
//! `lunN` files, an open file of a removed LUN fails with ENODEV, a LUN
//! replaced by a bigger one shows its new size, `serve` offers what the
//! target has now — and `rlun rescan` asks for the same look at once.
//!
//! Against the real tgtd, the kernel's FUSE and libnbd's nbdinfo.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::{assert_success, both, stdout};
use common::{make_backing_file, pattern_bytes, run_rlun, run_with_timeout, Tgtd};

const IQN: &str = "iqn.2026-12.org.example:changes";
const LUN_SIZE: u64 = 8 << 20;

/// A daemon mount, unmounted (and its rlun stopped) when the test ends.
struct Mount {
    mp: PathBuf,
    log: PathBuf,
}

impl Mount {
    /// `rlun -v mount --daemon --log-file DIR/rlun.log ARGS… URL DIR/mnt`.
    fn start(tgtd: &Tgtd, dir: &Path, args: &[&str]) -> Mount {
        let mp = dir.join("mnt");
        fs::create_dir(&mp).unwrap();
        let log = dir.join("rlun.log");
        let url = format!("iscsi://{}/{IQN}", tgtd.portal());
        let (log_s, mp_s) = (log.display().to_string(), mp.display().to_string());
        let mut argv = vec!["-v", "mount", "--daemon", "--log-file", &log_s];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&[&url, &mp_s]);
        let out = run_rlun(&argv, &[]);
        assert_success(&out, "rlun mount --daemon");
        Mount { mp, log }
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.mp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the directory lists `want`.
    fn wait_for(&self, want: &[&str], what: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.names() == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{what}: the mount lists {:?}, not {want:?}\n{}",
            self.names(),
            self.log()
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run_rlun(["umount", &self.mp.display().to_string()], &[]);
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&self.mp)
            .output();
    }
}

/// tgtd with the target, LUNs `1..=luns` backed by pattern files (seed =
/// LUN number), and the backing files.
fn target_with(dir: &Path, luns: u32) -> (Tgtd, Vec<PathBuf>) {
    let files: Vec<PathBuf> = (1..=luns)
        .map(|n| {
            let d = dir.join(format!("lun{n}"));
            fs::create_dir(&d).unwrap();
            make_backing_file(&d, LUN_SIZE, n as u64)
        })
        .collect();
    let mut tgtd = Tgtd::start().expect("tgtd");
    let mut t = tgtd.add_target(IQN);
    for (n, f) in files.iter().enumerate() {
        t = t.lun_file(n as u32 + 1, f, 512);
    }
    t.create().expect("target");
    (tgtd, files)
}

/// A backing file for a LUN added later (pattern seed `seed`).
fn spare_file(dir: &Path, seed: u64) -> PathBuf {
    let d = dir.join(format!("spare{seed}"));
    fs::create_dir(&d).unwrap();
    make_backing_file(&d, LUN_SIZE, seed)
}

fn tid(tgtd: &Tgtd) -> String {
    let show = tgtd.tgtadm(&["--op", "show", "--mode", "target"]).unwrap();
    show.lines()
        .find_map(|l| {
            l.strip_prefix("Target ")
                .and_then(|r| r.split_once(':'))
                .filter(|(_, name)| name.trim() == IQN)
                .map(|(t, _)| t.trim().to_string())
        })
        .expect("tid of the target")
}

/// `tgtadm --op OP --mode logicalunit --tid T --lun LUN ARGS…` on the
/// test's target.
fn lun_op(tgtd: &Tgtd, op: &str, lun: u32, args: &[&str]) {
    let (t, n) = (tid(tgtd), lun.to_string());
    let mut argv = vec![
        "--op",
        op,
        "--mode",
        "logicalunit",
        "--tid",
        &t,
        "--lun",
        &n,
    ];
    argv.extend_from_slice(args);
    tgtd.tgtadm(&argv)
        .unwrap_or_else(|e| panic!("tgtadm --op {op} LUN {lun}: {e}"));
}

fn add_lun(tgtd: &Tgtd, lun: u32, file: &Path) {
    lun_op(tgtd, "new", lun, &["-b", &file.display().to_string()]);
}

fn delete_lun(tgtd: &Tgtd, lun: u32) {
    lun_op(tgtd, "delete", lun, &[]);
}

/// A write that goes to the target at once (O_DIRECT + O_SYNC): the
/// command that collects tgtd's UNIT ATTENTION.
fn touch_target(file: &Path) {
    let out = run_with_timeout(
        Command::new("dd").args([
            "if=/dev/zero",
            &format!("of={}", file.display()),
            "bs=4096",
            "count=1",
            "seek=100",
            "oflag=direct,sync",
            "conv=notrunc",
            "status=none",
        ]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "dd: {}", both(&out));
}

#[test]
fn a_mount_follows_luns_the_target_adds_removes_and_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _) = target_with(dir.path(), 1);
    let two = spare_file(dir.path(), 2);
    let m = Mount::start(&tgtd, dir.path(), &[]);
    assert_eq!(m.names(), ["lun1"]);

    // Added: the UNIT ATTENTION on the next command is enough.
    add_lun(&tgtd, 2, &two);
    touch_target(&m.mp.join("lun1"));
    m.wait_for(&["lun1", "lun2"], "after tgtd added LUN 2");
    let mut got = Vec::new();
    fs::File::open(m.mp.join("lun2"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    common::cli::assert_same_bytes(&got, &pattern_bytes(2, 0, LUN_SIZE as usize), "lun2");
    assert!(
        m.log().contains("lun2: added"),
        "the log says what changed:\n{}",
        m.log()
    );

    // Removed, with files of it open: `rlun rescan` looks at once. The
    // buffered file's pages are all in the kernel's page cache (read
    // above): rlun has the kernel drop them, so its reads fail too.
    let buffered = fs::File::open(m.mp.join("lun2")).unwrap();
    let open = fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_DIRECT)
        .open(m.mp.join("lun2"))
        .unwrap();
    delete_lun(&tgtd, 2);
    let out = run_rlun(["rescan", &m.mp.display().to_string()], &[]);
    let said = assert_success(&out, "rlun rescan");
    assert!(said.contains("lun2: removed"), "rescan says: {said}");
    m.wait_for(&["lun1"], "after tgtd removed LUN 2");
    let mut buf = AlignedPage([0u8; 4096]);
    let err = open
        .read_at(&mut buf.0, 1 << 20)
        .expect_err("a read of the removed LUN fails");
    assert_eq!(err.raw_os_error(), Some(libc_enodev()), "ENODEV, not {err}");
    let mut page = vec![0u8; 4096];
    let err = buffered
        .read_at(&mut page, 2 << 20)
        .expect_err("a buffered read of the removed LUN fails");
    assert_eq!(err.raw_os_error(), Some(libc_enodev()), "ENODEV, not {err}");

    // Replaced by a bigger one under the same number: the new size shows.
    let big = dir.path().join("big.img");
    fs::write(&big, vec![0u8; 2 * LUN_SIZE as usize]).unwrap();
    add_lun(&tgtd, 2, &big);
    let out = run_rlun(["rescan", &m.mp.display().to_string()], &[]);
    let said = assert_success(&out, "rlun rescan");
    assert!(said.contains("lun2: added"), "rescan says: {said}");
    m.wait_for(&["lun1", "lun2"], "after tgtd added LUN 2 again");
    assert_eq!(fs::metadata(m.mp.join("lun2")).unwrap().len(), 2 * LUN_SIZE);

    // A rescan with nothing new says so; lun1 kept its data throughout.
    let out = run_rlun(["rescan", &m.mp.display().to_string()], &[]);
    let said = assert_success(&out, "rlun rescan");
    assert!(said.contains("no change"), "rescan says: {said}");
    let mut head = vec![0u8; 4096];
    fs::File::open(m.mp.join("lun1"))
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    assert_eq!(head, pattern_bytes(1, 0, 4096));
}

#[test]
fn a_rescan_the_target_cannot_answer_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (mut tgtd, _) = target_with(dir.path(), 1);
    let m = Mount::start(&tgtd, dir.path(), &["--replacement-timeout", "1s"]);

    tgtd.kill();
    std::thread::sleep(Duration::from_secs(3));
    let out = run_rlun(
        ["rescan", "--timeout", "20s", &m.mp.display().to_string()],
        &[],
    );

    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let said = both(&out);
    assert!(
        said.contains("the rescan of") && said.contains("failed: REPORT LUNS failed"),
        "{said}"
    );
    assert!(!said.contains("no change"), "{said}");
}

#[test]
fn cached_data_of_a_removed_lun_is_reported_lost_at_umount() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _) = target_with(dir.path(), 2);
    let m = Mount::start(
        &tgtd,
        dir.path(),
        &["--cache", "write-back", "--writeback-delay", "1h"],
    );
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.mp.join("lun2"))
        .unwrap();
    f.write_all_at(&[7u8; 65536], 0).unwrap();
    drop(f);

    delete_lun(&tgtd, 2);
    let out = run_rlun(["rescan", &m.mp.display().to_string()], &[]);
    assert!(
        assert_success(&out, "rlun rescan").contains("lun2: removed"),
        "{}",
        both(&out)
    );
    let out = run_rlun(["umount", &m.mp.display().to_string()], &[]);

    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    let said = both(&out);
    assert!(
        said.contains("lun2: 65536 bytes of cached data could not be written")
            && said.contains("the LUN was removed from the target"),
        "{said}"
    );
}

/// Give LUN `lun` its own unit serial number (tgtd derives the NAA
/// designator from it too): how an admin tells tgtd's LUs apart. Without
/// it tgtd names every LU by its target and LUN numbers alone.
fn set_serial(tgtd: &Tgtd, lun: u32, serial: &str) {
    let params = format!("scsi_sn={serial},scsi_id={serial}");
    lun_op(tgtd, "update", lun, &["--params", &params]);
}

#[test]
fn a_lun_replaced_under_its_number_gets_none_of_the_old_ones_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _) = target_with(dir.path(), 1);
    set_serial(&tgtd, 1, "OLD0001");
    let fresh = spare_file(dir.path(), 5);
    // Write-back 3 s after a write: the old LU's flusher wakes after the
    // rescan below and must find its LUN fenced (not write to the new LU).
    let m = Mount::start(
        &tgtd,
        dir.path(),
        &["--cache", "write-back", "--writeback-delay", "3s"],
    );
    let lun1 = m.mp.join("lun1");
    // The old LU's data in rlun's cache, and 64 KiB of it dirty.
    let mut old = Vec::new();
    fs::File::open(&lun1)
        .unwrap()
        .read_to_end(&mut old)
        .unwrap();
    common::cli::assert_same_bytes(&old, &pattern_bytes(1, 0, LUN_SIZE as usize), "lun1");
    let f = fs::OpenOptions::new().write(true).open(&lun1).unwrap();
    f.write_all_at(&[7u8; 65536], 1 << 20).unwrap();
    drop(f);
    let written = Instant::now();

    // Between two looks of rlun's, the LUN is deleted and another LU of
    // the same size created under its number.
    delete_lun(&tgtd, 1);
    add_lun(&tgtd, 1, &fresh);
    set_serial(&tgtd, 1, "NEW0005");
    let out = run_rlun(["rescan", &m.mp.display().to_string()], &[]);
    let said = assert_success(&out, "rlun rescan");
    m.wait_for(&["lun1"], "after the replacement");
    let rescanned = written.elapsed();
    // Past the write-back delay: the old export's flusher has tried.
    std::thread::sleep(Duration::from_secs(5).saturating_sub(rescanned));
    let mut got = Vec::new();
    let read = fs::File::open(&lun1).and_then(|mut f| f.read_to_end(&mut got));
    let out = run_rlun(["umount", &m.mp.display().to_string()], &[]);
    let backing = fs::read(&fresh).unwrap();

    assert!(
        rescanned < Duration::from_secs(3),
        "the rescan ended before the write-back delay ({rescanned:?}): the test shows nothing otherwise"
    );
    assert!(
        said.contains("lun1: removed (another logical unit has its number now)")
            && said.contains("lun1: added"),
        "rescan says: {said}"
    );
    read.expect("the new LU reads");
    common::cli::assert_same_bytes(
        &got,
        &pattern_bytes(5, 0, LUN_SIZE as usize),
        "lun1 after the replacement: the new LU's data, none of the old cache",
    );
    common::cli::assert_same_bytes(
        &backing,
        &pattern_bytes(5, 0, LUN_SIZE as usize),
        "the new LU's backing file: the old LU's dirty data never reached it",
    );
    assert!(
        m.log().contains("is another logical unit now"),
        "the log says why:\n{}",
        m.log()
    );
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(
        both(&out).contains("lun1: 65536 bytes of cached data could not be written"),
        "the old LU's dirty data is reported lost: {}",
        both(&out)
    );
}

#[test]
fn rescan_of_nothing_served_says_so() {
    let out = run_rlun(["rescan", "/nonexistent/mount"], &[]);
    assert_eq!(out.status.code(), Some(5), "{}", both(&out));
    assert!(
        both(&out).contains("no rlun of this user serves /nonexistent/mount"),
        "{}",
        both(&out)
    );
    let _ = stdout(&out);
}

#[test]
fn serve_offers_the_luns_the_target_has_now() {
    let dir = tempfile::tempdir().unwrap();
    let (tgtd, _) = target_with(dir.path(), 1);
    let two = spare_file(dir.path(), 2);
    let sock = dir.path().join("nbd.sock");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let out = run_rlun(
        [
            "serve",
            "--daemon",
            "--socket",
            &sock.display().to_string(),
            &url,
        ],
        &[],
    );
    assert_success(&out, "rlun serve --daemon");
    let sock_s = sock.display().to_string();
    let _stop = StopServe(sock.clone());
    let list = || {
        let out = run_with_timeout(
            Command::new("nbdinfo").args(["--list", &format!("nbd+unix:///?socket={sock_s}")]),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "nbdinfo --list: {}", both(&out));
        stdout(&out)
    };
    assert!(list().contains("export=\"lun1\""));
    assert!(!list().contains("export=\"lun2\""));

    add_lun(&tgtd, 2, &two);
    let out = run_rlun(["rescan", &sock_s], &[]);
    let said = assert_success(&out, "rlun rescan");
    assert!(said.contains("lun2: added"), "rescan says: {said}");
    let listed = list();
    assert!(listed.contains("export=\"lun2\""), "{listed}");
    let out = run_with_timeout(
        Command::new("nbdinfo").args(["--size", &format!("nbd+unix:///lun2?socket={sock_s}")]),
        Duration::from_secs(30),
    );
    assert_eq!(stdout(&out).trim(), LUN_SIZE.to_string(), "{}", both(&out));

    delete_lun(&tgtd, 2);
    let out = run_rlun(["rescan", &sock_s], &[]);
    let said = assert_success(&out, "rlun rescan");
    assert!(said.contains("lun2: removed"), "rescan says: {said}");
    assert!(!list().contains("export=\"lun2\""));
}

/// Stop a daemon `rlun serve` on its socket when the test ends.
struct StopServe(PathBuf);

impl Drop for StopServe {
    fn drop(&mut self) {
        let state = rlun::daemon::state_file(&self.0);
        if let Some(pid) = fs::read_to_string(state)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            let _ = Command::new("kill").arg(pid.to_string()).output();
        }
    }
}

fn libc_enodev() -> i32 {
    19
}

const O_DIRECT: i32 = 0o40000;

/// A page-aligned buffer for an O_DIRECT read.
#[repr(C, align(4096))]
struct AlignedPage([u8; 4096]);
