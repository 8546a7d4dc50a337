//! Settings from the config file take effect against a private tgtd, and
//! the command line overrides them: command line > the target's
//! `[targets.NAME]` entry > `[defaults]` > the built-in default. Values are
//! written in the command line's syntax (`"64k"`, `"3s"`), and a bad one is
//! refused naming the file, the line and the key.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cli::{assert_failure, assert_success, json, stderr, timed_rlun};
use common::{run_rlun, Tgtd};

const IQN: &str = "iqn.2026-11.org.example:settings";
/// rlun's exit code for a usage error, which a bad config file is.
const EXIT_USAGE: i32 = 2;

fn target() -> Tgtd {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_null(1)
        .digests(true, true)
        .create()
        .expect("target with a null LUN");
    tgtd
}

fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path
}

/// `rlun info --json` with the config file `config` and `extra` options;
/// it must succeed. Returns the JSON and standard error.
fn info(config: &Path, arg: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let config = config.to_str().unwrap();
    let mut args = vec!["--config", config, "info", "--json", arg];
    args.extend_from_slice(extra);
    let out = run_rlun(&args, &[]);
    let text = assert_success(&out, "rlun info --json");
    (json(&text), stderr(&out))
}

fn session_value(v: &serde_json::Value, key: &str) -> serde_json::Value {
    v["session"][key].clone()
}

#[test]
fn a_setting_from_the_file_takes_effect_and_the_command_line_overrides_it() {
    let tgtd = target();
    let dir = tempfile::tempdir().unwrap();
    let url = tgtd.url(IQN, 1);
    let config = write_config(
        dir.path(),
        "named.toml",
        &format!(
            "[defaults]\nmax_recv_segment = \"64k\"\nheader_digest = \"none\"\n\n\
             [targets.named]\nurl = \"{url}\"\nmax_recv_segment = \"32k\"\n\
             header_digest = \"crc32c\"\n"
        ),
    );

    // Without an entry for the target: [defaults] applies.
    let plain = write_config(
        dir.path(),
        "defaults.toml",
        "[defaults]\nmax_recv_segment = \"64k\"\nheader_digest = \"none\"\n",
    );
    let (v, _) = info(&plain, &url, &[]);
    assert_eq!(session_value(&v, "max_recv_data_segment_length"), 65536);
    assert_eq!(session_value(&v, "header_digest"), "None");

    // The entry, by name: its values beat [defaults].
    let (v, _) = info(&config, "named", &[]);
    assert_eq!(session_value(&v, "max_recv_data_segment_length"), 32768);
    assert_eq!(session_value(&v, "header_digest"), "Crc32c");

    // The command line beats the entry.
    let (v, _) = info(
        &config,
        "named",
        &["--max-recv-segment", "128k", "--header-digest", "none"],
    );
    assert_eq!(session_value(&v, "max_recv_data_segment_length"), 131072);
    assert_eq!(session_value(&v, "header_digest"), "None");

    // The entry's URL written out picks up the entry too.
    let (v, _) = info(&config, &url, &[]);
    assert_eq!(session_value(&v, "max_recv_data_segment_length"), 32768);

    // No file at all: the built-in default (256k).
    let empty = write_config(dir.path(), "empty.toml", "");
    let (v, _) = info(&empty, &url, &[]);
    assert_eq!(session_value(&v, "max_recv_data_segment_length"), 262144);
    // (rlun then offers None,CRC32C, and this tgtd picks CRC32C.)
    assert_eq!(session_value(&v, "header_digest"), "Crc32c");
}

#[test]
fn effective_timeouts_are_logged_and_come_from_the_file_unless_given() {
    let tgtd = target();
    let dir = tempfile::tempdir().unwrap();
    let url = tgtd.url(IQN, 1);
    let config = write_config(
        dir.path(),
        "rlun.toml",
        "[defaults]\nconnect_timeout = \"7s\"\nreplacement_timeout = \"2m\"\nnop_interval = \"0\"\n",
    );
    let (_, err) = info(&config, &url, &["-vv", "--nop-interval", "3s"]);
    let line = err
        .lines()
        .find(|l| l.contains("session settings"))
        .unwrap_or_else(|| panic!("no `session settings` line with -vv:\n{err}"));
    for want in [
        "connect_timeout=7s",
        "replacement_timeout=120s",
        "nop_interval=3s",
        "login_timeout=15s",
    ] {
        assert!(line.contains(want), "{want} not in {line}");
    }
}

#[test]
fn a_login_timeout_from_the_file_bounds_the_wait_for_a_paused_target() {
    let tgtd = target();
    let dir = tempfile::tempdir().unwrap();
    let url = tgtd.url(IQN, 1);
    let config = write_config(
        dir.path(),
        "rlun.toml",
        "[defaults]\nlogin_timeout = \"3s\"\n",
    );
    let config = config.to_str().unwrap();
    tgtd.pause().expect("pause tgtd");
    // The file's 3 s, not the built-in 15 s.
    let (out, took) = timed_rlun(
        &["--config", config, "info", &url],
        &[],
        Duration::from_secs(30),
    );
    // The command line's 1 s, not the file's 3 s.
    let (out_cli, took_cli) = timed_rlun(
        &["--config", config, "info", &url, "--login-timeout", "1s"],
        &[],
        Duration::from_secs(30),
    );
    tgtd.resume().expect("resume tgtd");
    assert!(
        !out.status.success(),
        "info against a paused target succeeded"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(10),
        "with login_timeout = \"3s\" rlun gave up after {took:?}:\n{}",
        stderr(&out)
    );
    assert!(!out_cli.status.success());
    assert!(
        took_cli >= Duration::from_secs(1) && took_cli < Duration::from_millis(2900),
        "with --login-timeout 1s rlun gave up after {took_cli:?}:\n{}",
        stderr(&out_cli)
    );
}

#[test]
fn the_old_integer_keys_still_work_with_a_warning() {
    let tgtd = target();
    let dir = tempfile::tempdir().unwrap();
    let url = tgtd.url(IQN, 1);
    let config = write_config(
        dir.path(),
        "rlun.toml",
        "[defaults]\nconnect_timeout_secs = 7\nlogin_timeout_secs = 9\n",
    );
    let (_, err) = info(&config, &url, &["-vv"]);
    assert!(
        err.contains(
            "key `defaults.connect_timeout_secs` is deprecated: write connect_timeout = \"7s\""
        ),
        "{err}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("session settings"))
        .unwrap();
    assert!(
        line.contains("connect_timeout=7s") && line.contains("login_timeout=9s"),
        "{line}"
    );
}

#[test]
fn a_bad_value_is_refused_alike_in_the_file_and_on_the_command_line() {
    let tgtd = target();
    let dir = tempfile::tempdir().unwrap();
    let url = tgtd.url(IQN, 1);
    let config = write_config(
        dir.path(),
        "rlun.toml",
        "[defaults]\n\nconnect_timeout = \"0\"\n",
    );
    let config = config.to_str().unwrap();
    let out = run_rlun(["--config", config, "info", &url], &[]);
    assert_failure(
        &out,
        EXIT_USAGE,
        &[
            config,
            "line 3",
            "defaults.connect_timeout",
            "must be more than 0",
        ],
    );
    let empty = write_config(dir.path(), "empty.toml", "");
    let out = run_rlun(
        [
            "--config",
            empty.to_str().unwrap(),
            "info",
            &url,
            "--connect-timeout",
            "0",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("must be more than 0"),
        "{}",
        stderr(&out)
    );
}
