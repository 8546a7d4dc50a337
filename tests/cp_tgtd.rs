//! `rlun cp` as a user of nbdcopy or `qemu-img convert` expects it, against
//! a private tgtd: sparse output files, progress on a pipe, `-q`, the
//! summary line, resuming with `--offset`, `| head`, and refusing a copy
//! onto itself. tgtd's backing files are the oracle for what a LUN holds.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::cli::{assert_failure, assert_same_bytes, assert_success, stderr};
use common::{make_backing_file, pattern_bytes, rlun_bin, run_rlun, ChildGuard, Tgtd};

const MIB: u64 = 1 << 20;

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Bytes the file system allocated for `path`.
fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

/// A `size`-byte backing file of zeros (a hole) with pattern data in
/// three places: 1 MiB at the start, 4 KiB in the middle (off any 4 KiB
/// boundary), 1 MiB at the end.
fn mostly_zero_backing(dir: &Path, size: u64) -> PathBuf {
    let path = dir.join("mostly-zero.img");
    let f = fs::File::create(&path).expect("create backing file");
    f.set_len(size).expect("size backing file");
    for (at, len) in [(0, MIB), (size / 2 + 1234, 4096), (size - MIB, MIB)] {
        f.write_all_at(&pattern_bytes(at, at, len as usize), at)
            .expect("write backing file");
    }
    path
}

/// One tgtd with target `iqn` and `backing` as LUN 1 (512-byte blocks).
fn one_lun(iqn: &str, backing: &Path) -> (Tgtd, String) {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(iqn)
        .lun_file(1, backing, 512)
        .create()
        .expect("target");
    let url = tgtd.url(iqn, 1);
    (tgtd, url)
}

/// `rlun ARGS…` in the background with every stream piped.
fn spawn(args: &[&str]) -> ChildGuard {
    ChildGuard(
        Command::new(rlun_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rlun"),
    )
}

/// Wait (at most 60 s) until `cond` holds while `child` still runs.
fn wait_until(child: &mut ChildGuard, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} within 60 s"
        );
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("rlun ended ({status}) before {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn send_signal(pid: u32, signal: &str) {
    let killed = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill -{signal} {pid} failed");
}

/// The exit status and output of a spawned rlun, killing it after 60 s.
fn wait_output(mut child: ChildGuard) -> Output {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "rlun did not stop within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut stderr);
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The N of "--offset N" in a stopped copy's message.
fn offered_offset(err: &str) -> u64 {
    let rest = err
        .split("--offset ")
        .nth(1)
        .unwrap_or_else(|| panic!("no --offset to resume with in: {err}"));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a byte count after --offset")
}

// ------------------------------------------------------------ sparse

#[test]
fn a_mostly_zero_lun_copies_into_a_sparse_file_over_old_data() {
    let dir = tempdir();
    let size = 64 * MIB;
    let backing = mostly_zero_backing(dir.path(), size);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:sparse", &backing);
    // A destination full of other data: where the LUN has zeros, the copy
    // must have zeros too, holes or not.
    let dst = make_backing_file(dir.path(), size + 3 * MIB, 99);

    let out = run_rlun(["cp", &url, s(&dst)], &[]);

    assert_success(&out, "rlun cp LUN FILE");
    assert_same_bytes(&read(&dst), &read(&backing), "the copy");
    let used = allocated(&dst);
    assert!(
        used <= 4 * MIB,
        "{used} bytes allocated for a copy of 2 MiB and 4 KiB of data"
    );
    assert!(
        stderr(&out).contains("of zeros left as holes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn no_sparse_allocates_every_byte_of_the_copy() {
    let dir = tempdir();
    let size = 16 * MIB;
    let backing = mostly_zero_backing(dir.path(), size);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:nosparse", &backing);
    let dst = dir.path().join("copy.img");

    let out = run_rlun(["cp", "--no-sparse", &url, s(&dst)], &[]);

    assert_success(&out, "rlun cp --no-sparse");
    assert_same_bytes(&read(&dst), &read(&backing), "the copy");
    assert!(
        allocated(&dst) >= size,
        "{} bytes allocated",
        allocated(&dst)
    );
}

// ------------------------------------------------ progress and summary

#[test]
fn progress_on_a_pipe_prints_a_line_a_second() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:progress";
    // 1 TiB of zeros: still copying after two seconds.
    tgtd.add_target(iqn).lun_null(1).create().expect("target");
    let child = spawn(&["cp", "--progress", &tgtd.url(iqn, 1), "/dev/null"]);
    // Two lines a second apart, with time to spare for a slow login.
    std::thread::sleep(Duration::from_millis(3500));
    send_signal(child.id(), "INT");

    let out = wait_output(child);

    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("copying: ")).collect();
    assert!(lines.len() >= 2, "fewer than two progress lines:\n{err}");
    assert!(
        lines[0].contains(" of 1.0 TiB (") && lines[0].contains("%), ") && lines[0].ends_with("/s"),
        "{}",
        lines[0]
    );
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
}

#[test]
fn a_finished_copy_prints_one_summary_line_unless_quiet() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 8 * MIB, 5);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:summary", &backing);
    let dst = dir.path().join("copy.img");

    let out = run_rlun(["cp", &url, s(&dst)], &[]);
    let quiet = run_rlun(["-q", "cp", &url, s(&dst)], &[]);

    assert_success(&out, "rlun cp");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("copied 8.0 MiB (8388608 bytes) in ") && lines[0].ends_with("iB/s"),
        "{}",
        lines[0]
    );
    assert_success(&quiet, "rlun -q cp");
    assert_eq!(stderr(&quiet), "", "-q printed something");
}

/// `SCRIPT` under `script(1)`, so that rlun's standard error is a
/// terminal; rlun writes its pid to `pidfile` first. Returns the child
/// (its output is the terminal's).
fn spawn_on_a_terminal(cmd: &str, pidfile: &Path) -> ChildGuard {
    let script = format!("echo $$ > '{}'; exec {cmd}", s(pidfile));
    ChildGuard(
        Command::new("script")
            .args(["-qfec", &script, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start script"),
    )
}

/// rlun cp of a null LUN on a terminal, with `flags`, stopped by SIGINT
/// once 2 MiB of it are in the file: what the terminal showed.
fn interrupted_on_a_terminal(tgtd: &Tgtd, url: &str, flags: &str) -> String {
    let dir = tempdir();
    let dst = dir.path().join("copy.img");
    let pidfile = dir.path().join("pid");
    let cmd = format!(
        "'{}' {flags} cp --no-sparse --bs 64k '{url}' '{}'",
        rlun_bin().display(),
        s(&dst)
    );
    let mut child = spawn_on_a_terminal(&cmd, &pidfile);
    wait_until(&mut child, "2 MiB copied", || {
        fs::metadata(&dst).is_ok_and(|m| m.blocks() * 512 >= 2 * MIB)
    });
    // Long enough for the bar's first redraws.
    std::thread::sleep(Duration::from_millis(500));
    let pid: u32 = fs::read_to_string(&pidfile)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    send_signal(pid, "INT");
    let out = wait_output(child);
    let _ = tgtd;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn quiet_shows_no_bar_but_an_interrupted_copy_still_says_how_far_it_got() {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    let iqn = "iqn.2026-11.org.example:quiet";
    tgtd.add_target(iqn).lun_null(1).create().expect("target");
    let url = tgtd.url(iqn, 1);

    let loud = interrupted_on_a_terminal(&tgtd, &url, "");
    let quiet = interrupted_on_a_terminal(&tgtd, &url, "-q");

    // The same run without -q draws a bar: the terminal works.
    assert!(loud.contains("eta"), "no progress bar without -q: {loud:?}");
    assert!(
        !quiet.contains("eta"),
        "a progress bar despite -q: {quiet:?}"
    );
    assert!(!quiet.contains("copying"), "progress despite -q: {quiet:?}");
    assert!(quiet.contains("interrupted by SIGINT"), "{quiet:?}");
    let at = offered_offset(&quiet);
    assert!(
        quiet.contains(&format!("holds the {at} bytes copied")) && at >= 2 * MIB,
        "no byte count under -q: {quiet:?}"
    );
}

// ------------------------------------------------------------ resume

#[test]
fn an_interrupted_copy_to_a_file_resumed_with_the_offered_offset_is_identical() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 32 * MIB, 41);
    let (tgtd, url) = one_lun("iqn.2026-11.org.example:resume", &backing);
    let dst = dir.path().join("copy.img");
    // Small transfers one at a time: still copying when the test looks.
    let mut child = spawn(&["cp", "--bs", "16k", "--qd", "1", &url, s(&dst)]);
    wait_until(&mut child, "4 MiB copied", || {
        fs::metadata(&dst).is_ok_and(|m| m.blocks() * 512 >= 4 * MIB)
    });
    // Freeze the target: the copy stops mid-way, whatever the speed.
    tgtd.pause().expect("pause tgtd");
    send_signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(300));
    tgtd.resume().expect("resume tgtd");
    let out = wait_output(child);

    let line = assert_failure(&out, 130, &["interrupted by SIGINT", "--offset"]);
    let at = offered_offset(&line);
    assert!(at > 0 && at < 32 * MIB, "stopped at {at}");
    assert_eq!(fs::metadata(&dst).unwrap().len(), at, "{line}");
    assert!(
        line.contains(&format!("holds the {at} bytes copied")),
        "{line}"
    );

    let again = run_rlun(["cp", "--offset", &at.to_string(), &url, s(&dst)], &[]);

    assert_success(&again, "the resumed copy");
    assert!(
        stderr(&again).contains(&format!("from byte {at} on")),
        "{}",
        stderr(&again)
    );
    assert_same_bytes(&read(&dst), &read(&backing), "the resumed copy");
}

#[test]
fn a_copy_from_standard_input_resumes_by_skipping_what_the_lun_holds() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 8 * MIB, 51);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:resumein", &backing);
    let source = make_backing_file(dir.path(), 8 * MIB, 52);
    let sent = read(&source)[..(3 * MIB) as usize].to_vec();
    // Standard input delivers 3 MiB and stays open: the copy waits.
    let mut child = ChildGuard(
        Command::new(rlun_bin())
            .args(["cp", "--bs", "64k", "-", &url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rlun"),
    );
    let mut stdin = child.0.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, &sent).expect("feed rlun");
    wait_until(&mut child, "3 MiB on the LUN", || {
        read(&backing)[..sent.len()] == sent[..]
    });
    send_signal(child.id(), "INT");
    let out = wait_output(child);
    drop(stdin);

    let line = assert_failure(&out, 130, &["interrupted by SIGINT"]);
    let at = offered_offset(&line);
    assert_eq!(at, 3 * MIB, "{line}");

    let again = Command::new("sh")
        .args([
            "-c",
            &format!(
                "'{}' cp --offset {at} - '{url}' < '{}'",
                rlun_bin().display(),
                s(&source)
            ),
        ])
        .output()
        .expect("run the resumed copy");

    assert_success(&again, "the resumed copy from standard input");
    assert_same_bytes(&read(&backing), &read(&source), "the LUN");
}

#[test]
fn offset_must_be_a_block_multiple_and_within_the_source() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 4 * MIB, 61);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:offset", &backing);
    let dst = dir.path().join("copy.img");
    fs::write(&dst, b"short").unwrap();

    let odd = run_rlun(["cp", "--offset", "1000", &url, s(&dst)], &[]);
    let past = run_rlun(["cp", "--offset", "8M", &url, s(&dst)], &[]);
    let gap = run_rlun(["cp", "--offset", "1M", &url, s(&dst)], &[]);

    assert_failure(&odd, 2, &["--offset 1000", "512-byte blocks"]);
    assert_failure(
        &past,
        2,
        &["--offset 8388608", "past the end of the source"],
    );
    assert_failure(&gap, 2, &["--offset 1048576", "past the end of", "5 bytes"]);
    assert_eq!(
        read(&dst),
        b"short",
        "a refused copy changed the destination"
    );
}

// ---------------------------------------------------------- | head

#[test]
fn a_reader_that_stops_early_ends_the_copy_quietly_with_exit_code_0() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 16 * MIB, 71);
    let (_tgtd, url) = one_lun("iqn.2026-11.org.example:head", &backing);

    // What `rlun cp URL - | head -c 100` does to rlun.
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
                "'{}' cp '{url}' - | head -c 100 > /dev/null; echo ${{PIPESTATUS[0]}}",
                rlun_bin().display()
            ),
        ])
        .output()
        .expect("run the pipeline");

    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "rlun's exit status; stderr: {}",
        stderr(&out)
    );
    assert_eq!(stderr(&out), "", "rlun said something");
}

// ------------------------------------------------------ onto itself

#[test]
fn a_lun_copied_onto_itself_is_refused_before_anything_is_written() {
    let dir = tempdir();
    let backing = make_backing_file(dir.path(), 4 * MIB, 81);
    let (tgtd, url) = one_lun("iqn.2026-11.org.example:self", &backing);
    let before = fs::metadata(&backing).unwrap().modified().unwrap();
    // The same LUN by another spelling, and by a config-file name.
    let other = format!(
        "iscsi://localhost:{}/IQN.2026-11.ORG.EXAMPLE:SELF/1",
        tgtd.port()
    );
    let config = dir.path().join("rlun.toml");
    fs::write(&config, format!("[targets.backup]\nurl = \"{url}\"\n")).unwrap();

    let same = run_rlun(["cp", &url, &url], &[]);
    let spelled = run_rlun(["cp", &url, &other], &[]);
    let named = run_rlun(["--config", s(&config), "cp", "backup", &url], &[]);

    for out in [&same, &spelled, &named] {
        assert_failure(out, 2, &["same LUN", "onto itself"]);
    }
    assert_eq!(
        fs::metadata(&backing).unwrap().modified().unwrap(),
        before,
        "the LUN was written"
    );
}

#[test]
fn a_file_copied_onto_itself_is_refused() {
    let dir = tempdir();
    let file = make_backing_file(dir.path(), MIB, 91);
    let link = dir.path().join("link.img");
    fs::hard_link(&file, &link).unwrap();

    let out = run_rlun(["cp", s(&file), s(&link)], &[]);

    assert_failure(&out, 2, &["same file", "onto itself"]);
    assert_same_bytes(
        &read(&file),
        &pattern_bytes(91, 0, MIB as usize),
        "the file",
    );
}
