//! CHAP (RFC 7143 §12.1.3) against a private tgtd: one-way and mutual, right
//! and wrong secrets, and secrets kept out of rlun's output.

mod common;

use std::process::Output;

use common::cli::{assert_failure, assert_success, both, json, stderr};
use common::{run_rlun, Tgtd};

const IQN: &str = "iqn.2026-11.org.example:chap";
const USER: &str = "alice";
const SECRET: &str = "alice-secret-0123";
const WRONG_SECRET: &str = "not-alices-secret-987";
const TARGET_USER: &str = "the-target";
const TARGET_SECRET: &str = "target-secret-4567";
const WRONG_TARGET_SECRET: &str = "forged-target-secret-66";
/// rlun's exit code for a refused login (`rlun::cli::exit::AUTH`).
const EXIT_AUTH: i32 = 4;

/// A tgtd with one null LUN behind one-way CHAP (`alice`).
fn one_way_target() -> Tgtd {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_null(1)
        .chap(USER, SECRET)
        .create()
        .expect("CHAP target");
    tgtd
}

/// A tgtd with one null LUN behind mutual CHAP: we are `alice`, the target
/// proves itself as `the-target` with `TARGET_SECRET`.
fn mutual_target() -> Tgtd {
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_null(1)
        .chap(USER, SECRET)
        .mutual_chap(TARGET_USER, TARGET_SECRET)
        .create()
        .expect("mutual CHAP target");
    tgtd
}

fn info(tgtd: &Tgtd, envs: &[(&str, &str)], extra: &[&str]) -> Output {
    let url = tgtd.url(IQN, 1);
    let mut args = vec!["info", "--json", url.as_str()];
    args.extend_from_slice(extra);
    run_rlun(&args, envs)
}

#[track_caller]
fn assert_no_secret(out: &Output, secrets: &[&str]) {
    let all = both(out);
    for s in secrets {
        assert!(
            !all.contains(s),
            "secret {s:?} appears in rlun's output:\n{all}"
        );
    }
}

#[test]
fn one_way_chap_with_the_right_secret_from_the_environment_logs_in() {
    let tgtd = one_way_target();

    let out = info(
        &tgtd,
        &[("RLUN_CHAP_USER", USER), ("RLUN_CHAP_SECRET", SECRET)],
        &[],
    );

    let v = json(&assert_success(&out, "info with the right CHAP secret"));
    assert_eq!(v["target"], IQN);
    assert_eq!(v["capacity"]["block_size"], 512);
}

#[test]
fn one_way_chap_with_the_secret_in_the_url_logs_in() {
    let tgtd = one_way_target();

    let out = run_rlun(
        ["info", "--json", &tgtd.url_with_chap(USER, SECRET, IQN, 1)],
        &[],
    );

    let v = json(&assert_success(&out, "info with CHAP in the URL"));
    assert_eq!(v["lun"], 1);
}

#[test]
fn one_way_chap_with_a_wrong_secret_fails_with_auth_exit_code() {
    let tgtd = one_way_target();

    let out = info(
        &tgtd,
        &[("RLUN_CHAP_USER", USER), ("RLUN_CHAP_SECRET", WRONG_SECRET)],
        &[],
    );

    assert_failure(&out, EXIT_AUTH, &["authentication"]);
    assert!(out.stdout.is_empty(), "{}", both(&out));
}

#[test]
fn one_way_chap_with_an_unknown_user_fails_with_auth_exit_code() {
    let tgtd = one_way_target();

    let out = info(
        &tgtd,
        &[("RLUN_CHAP_USER", "mallory"), ("RLUN_CHAP_SECRET", SECRET)],
        &[],
    );

    assert_failure(&out, EXIT_AUTH, &["authentication"]);
}

#[test]
fn chap_target_without_credentials_fails_with_auth_exit_code() {
    let tgtd = one_way_target();

    let out = info(&tgtd, &[], &[]);

    assert_failure(&out, EXIT_AUTH, &["authentication"]);
}

#[test]
fn mutual_chap_logs_in_when_the_target_proves_the_right_secret() {
    let tgtd = mutual_target();

    let out = info(
        &tgtd,
        &[
            ("RLUN_CHAP_USER", USER),
            ("RLUN_CHAP_SECRET", SECRET),
            ("RLUN_CHAP_MUTUAL_USER", TARGET_USER),
            ("RLUN_CHAP_MUTUAL_SECRET", TARGET_SECRET),
        ],
        &[],
    );

    let v = json(&assert_success(&out, "info with mutual CHAP"));
    assert_eq!(v["target"], IQN);
}

#[test]
fn mutual_chap_fails_with_auth_exit_code_when_the_target_answers_wrongly() {
    // The target proves TARGET_SECRET; rlun expects another secret, so from
    // rlun's side the target's CHAP_R is wrong.
    let tgtd = mutual_target();

    let out = info(
        &tgtd,
        &[
            ("RLUN_CHAP_USER", USER),
            ("RLUN_CHAP_SECRET", SECRET),
            ("RLUN_CHAP_MUTUAL_USER", TARGET_USER),
            ("RLUN_CHAP_MUTUAL_SECRET", WRONG_TARGET_SECRET),
        ],
        &[],
    );

    assert_failure(&out, EXIT_AUTH, &["chap"]);
    assert!(out.stdout.is_empty(), "{}", both(&out));
}

#[test]
fn mutual_chap_with_wrong_one_way_secret_fails_with_auth_exit_code() {
    let tgtd = mutual_target();

    let out = info(
        &tgtd,
        &[
            ("RLUN_CHAP_USER", USER),
            ("RLUN_CHAP_SECRET", WRONG_SECRET),
            ("RLUN_CHAP_MUTUAL_USER", TARGET_USER),
            ("RLUN_CHAP_MUTUAL_SECRET", TARGET_SECRET),
        ],
        &[],
    );

    assert_failure(&out, EXIT_AUTH, &["authentication"]);
}

#[test]
fn chap_secrets_never_appear_in_output_even_with_vvv() {
    let tgtd = mutual_target();
    let all_secrets = [SECRET, WRONG_SECRET, TARGET_SECRET, WRONG_TARGET_SECRET];
    let env = |secret: &'static str, target_secret: &'static str| {
        [
            ("RLUN_CHAP_USER", USER),
            ("RLUN_CHAP_SECRET", secret),
            ("RLUN_CHAP_MUTUAL_USER", TARGET_USER),
            ("RLUN_CHAP_MUTUAL_SECRET", target_secret),
        ]
    };

    let good = info(&tgtd, &env(SECRET, TARGET_SECRET), &["-vvv"]);
    let wrong_ours = info(&tgtd, &env(WRONG_SECRET, TARGET_SECRET), &["-vvv"]);
    let wrong_theirs = info(&tgtd, &env(SECRET, WRONG_TARGET_SECRET), &["-vvv"]);
    let in_url = run_rlun(
        [
            "info",
            "-vvv",
            &format!(
                "{}?target_user={TARGET_USER}&target_password={TARGET_SECRET}",
                tgtd.url_with_chap(USER, SECRET, IQN, 1)
            ),
        ],
        &[],
    );
    let mut trace_env = env(SECRET, TARGET_SECRET).to_vec();
    trace_env.push(("RUST_LOG", "trace"));
    let everything = info(&tgtd, &trace_env, &[]);
    let discovery = run_rlun(
        ["discover", "-vvv", &tgtd.portal()],
        &env(SECRET, TARGET_SECRET),
    );

    assert_success(&good, "mutual CHAP with -vvv");
    assert_success(&in_url, "mutual CHAP from the URL with -vvv");
    assert_eq!(
        wrong_ours.status.code(),
        Some(EXIT_AUTH),
        "{}",
        both(&wrong_ours)
    );
    assert_eq!(
        wrong_theirs.status.code(),
        Some(EXIT_AUTH),
        "{}",
        both(&wrong_theirs)
    );
    assert!(discovery.status.code().is_some(), "{}", both(&discovery));
    assert_success(&everything, "mutual CHAP with RUST_LOG=trace");
    // -vvv really turns logging on (otherwise this test proves nothing).
    assert!(
        stderr(&good).contains("logged in"),
        "no login log line in -vvv output:\n{}",
        stderr(&good)
    );
    for out in [
        &good,
        &wrong_ours,
        &wrong_theirs,
        &in_url,
        &discovery,
        &everything,
    ] {
        assert_no_secret(out, &all_secrets);
    }
}

#[test]
fn ls_of_a_portal_lists_the_open_targets_and_names_the_chap_one_with_auth_exit_code() {
    const OPEN: &str = "iqn.2026-11.org.example:open";
    let mut tgtd = one_way_target();
    tgtd.add_target(OPEN)
        .lun_null(1)
        .create()
        .expect("open target");

    let out = run_rlun(["ls", &tgtd.portal()], &[]);

    // One `rlun: ` line naming the target and why (assert_failure checks).
    assert_failure(&out, EXIT_AUTH, &["1 of 2 targets", IQN, "authentication"]);
    assert!(
        common::cli::stdout(&out).contains(&tgtd.url(OPEN, 1)),
        "the open target's LUN is listed:\n{}",
        both(&out)
    );
    assert!(
        !common::cli::stdout(&out).contains(IQN),
        "nothing of the CHAP target on stdout:\n{}",
        both(&out)
    );
}
