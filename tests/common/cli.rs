//! Assertions on a finished `rlun` run: exit code, the one-line `rlun: ...`
//! error message, and the absence of panics; plus small output parsers.

use std::process::Output;
use std::time::{Duration, Instant};

use super::process::run_rlun_with_timeout;

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Both streams, for failure messages.
pub fn both(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", stdout(out), stderr(out))
}

/// Assert that rlun exited 0; return its standard output.
pub fn assert_success(out: &Output, what: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: expected success, got {}\n{}",
        out.status,
        both(out)
    );
    stdout(out)
}

/// Assert that rlun failed the way scripts rely on: exit status `code`, no
/// panic, and an error message line starting with `rlun: ` that contains
/// every one of `needles` (case-insensitive). Returns that line.
pub fn assert_failure(out: &Output, code: i32, needles: &[&str]) -> String {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit code {code}, got {}\n{}",
        out.status,
        both(out)
    );
    assert!(!err.contains("panicked"), "rlun panicked:\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("rlun: ")).collect();
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one `rlun: ` error line\n{}",
        both(out)
    );
    let line = lines[0];
    let lower = line.to_lowercase();
    for needle in needles {
        assert!(
            lower.contains(&needle.to_lowercase()),
            "error message lacks {needle:?}: {line}"
        );
    }
    line.to_string()
}

/// Run rlun with `timeout` as a hard deadline and return the output and how
/// long it took.
pub fn timed_rlun(args: &[&str], envs: &[(&str, &str)], timeout: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let out = run_rlun_with_timeout(args, envs, timeout);
    (out, start.elapsed())
}

/// The value after `key` on the first line that starts with it (the output
/// format of libiscsi's `iscsi-inq` and `iscsi-readcapacity16`: `Key:value`).
pub fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
        .trim()
}

/// Parse JSON printed by rlun, failing the test with the text if it is not.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Compare two byte strings without printing megabytes on failure: report
/// the lengths and the first differing offset.
#[track_caller]
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: {} bytes vs {} expected, first difference at offset {first}",
        got.len(),
        want.len()
    );
}
