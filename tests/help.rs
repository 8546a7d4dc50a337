//! `-h` fits a screen: for `rlun` and every subcommand it is brief (the
//! first line of each option), while `--help` and the man pages hold the
//! detail. The `--threads` explanation is written once, in `rlun --help`.

use std::process::Command;

/// Most lines `-h` may print (a terminal of 50 lines shows it whole).
const MAX_SHORT_HELP_LINES: usize = 50;

/// Words of the one `--threads` explanation (`rlun --help`, rlun(8)).
const THREADS_EXPLANATION: &str = "completing an I/O wakes no other thread";

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rlun"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("run rlun");
    assert!(out.status.success(), "rlun {args:?} failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands `rlun -h` lists, but `help`.
fn subcommands() -> Vec<String> {
    let top = help(&["-h"]);
    let list = top
        .split("Commands:\n")
        .nth(1)
        .expect("rlun -h lists its commands");
    let names: Vec<String> = list
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 12, "too few commands found: {names:?}");
    names
}

#[test]
fn short_help_fits_a_screen_and_long_help_says_more() {
    let mut commands: Vec<Vec<String>> = vec![vec![]];
    commands.extend(subcommands().into_iter().map(|s| vec![s]));
    let mut report = Vec::new();
    for cmd in &commands {
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let short = help(&[&cmd[..], &["-h"]].concat());
        let long = help(&[&cmd[..], &["--help"]].concat());
        let (s, l) = (short.lines().count(), long.lines().count());
        report.push(format!("rlun {} -h: {s} lines, --help: {l}", cmd.join(" ")));
        assert!(
            s <= MAX_SHORT_HELP_LINES,
            "`rlun {} -h` has {s} lines, more than {MAX_SHORT_HELP_LINES}:\n{short}",
            cmd.join(" ")
        );
        assert!(
            long.len() > short.len(),
            "`rlun {} --help` says no more than -h",
            cmd.join(" ")
        );
        if !cmd.is_empty() {
            assert!(
                !long.contains(THREADS_EXPLANATION) && !short.contains(THREADS_EXPLANATION),
                "`rlun {}` repeats the --threads explanation",
                cmd.join(" ")
            );
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(help(&["--help"]).contains(THREADS_EXPLANATION));
    assert!(!help(&["-h"]).contains(THREADS_EXPLANATION));
}
