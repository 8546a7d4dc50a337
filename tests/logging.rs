//! `--log-format` where no journald runs (the host): `journal` falls back
//! to text on stderr with one warning and the command's own outcome;
//! `auto` with JOURNAL_STREAM naming stderr falls back silently. The
//! journal itself is tested in the VM lab (`rlun-journal`).

use std::os::unix::fs::MetadataExt as _;
use std::process::{Command, Stdio};

const SOCKET: &str = "/run/systemd/journal/socket";
const FALLBACK: &str = "cannot reach the systemd journal";

/// Run `rlun ARGS discover 127.0.0.1:1` (connection refused, exit 3)
/// with stderr in a file; `journal_stream`: set JOURNAL_STREAM to that
/// file's dev:ino. Returns stderr.
fn refused(args: &[&str], journal_stream: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stderr");
    let file = std::fs::File::create(&path).unwrap();
    let meta = file.metadata().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlun"));
    cmd.args(args)
        .args(["discover", "127.0.0.1:1"])
        .env_remove("RLUN_LOG_FORMAT")
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    if journal_stream {
        cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    }
    let status = cmd.status().unwrap();
    let err = std::fs::read_to_string(&path).unwrap();
    assert_eq!(status.code(), Some(3), "{args:?}: {err}");
    assert!(
        err.contains("rlun: cannot reach portal 127.0.0.1:1"),
        "{args:?}: the error on stderr as text: {err}"
    );
    err
}

fn no_journal() -> bool {
    if std::path::Path::new(SOCKET).exists() {
        eprintln!("SKIP: {SOCKET} exists: journald runs here, the fallback cannot be seen");
        return false;
    }
    true
}

#[test]
fn journal_without_journald_falls_back_to_text_with_a_warning() {
    if !no_journal() {
        return;
    }
    let err = refused(&["--log-format", "journal"], false);
    assert_eq!(err.matches(FALLBACK).count(), 1, "{err}");
    assert!(err.contains(" WARN "), "{err}");
}

#[test]
fn auto_under_a_journal_stream_without_journald_is_silent_text() {
    if !no_journal() {
        return;
    }
    let err = refused(&[], true);
    assert!(!err.contains(FALLBACK), "{err}");
    // Nothing but the error line: the default level shows no more.
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn text_and_json_ignore_the_journal_stream() {
    let err = refused(&["--log-format", "text"], true);
    assert!(!err.contains(FALLBACK), "{err}");
    let err = refused(&["--log-format", "json", "-v"], true);
    assert!(!err.contains(FALLBACK), "{err}");
}
