//! Command-line mistakes of people who know the tools rlun stands beside
//! (iscsiadm, qemu-nbd, nbd-client, mount(8), fio): a flag, subcommand or
//! value of theirs gets the rlun way of saying it, instead of clap's
//! generic tip ("to pass '-p' as a value, use '-- -p'"). A suggested value
//! is never a destructive one (a write pattern of `bench`).
//!
//! A leaf of `cmd`: `main.rs` calls [`explain`] when parsing fails.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// A flag another tool has and what rlun uses instead: (subcommands it
/// applies to, empty for all; the flag; the tip).
const FLAGS: &[(&[&str], &str, &str)] = &[
    // qemu-nbd
    (&["serve"], "-k", "rlun serve uses `--socket PATH` where qemu-nbd uses `-k`"),
    (&["serve"], "-p", "rlun serve uses `--listen ADDR:PORT` where qemu-nbd uses `-p PORT`"),
    (&["serve"], "--port", "rlun serve uses `--listen ADDR:PORT` where qemu-nbd uses `--port`"),
    (&["serve"], "-b", "rlun serve uses `--listen ADDR:PORT` where qemu-nbd uses `-b ADDR`"),
    (&["serve"], "--bind", "rlun serve uses `--listen ADDR:PORT` where qemu-nbd uses `--bind`"),
    (&["serve"], "-t", "rlun serve keeps serving after a client leaves, as qemu-nbd -t does"),
    (&["serve"], "--persistent", "rlun serve keeps serving after a client leaves, as qemu-nbd --persistent does"),
    (&["serve"], "-x", "rlun serve names each export after its LUN (lun1, lun2…): it prints their URIs"),
    (&["serve"], "--export-name", "rlun serve names each export after its LUN (lun1, lun2…): it prints their URIs"),
    (&[], "--fork", "rlun uses `--daemon` (-d) where qemu-nbd uses `--fork`"),
    (&[], "-c", "rlun attaches a LUN with `rlun attach URL [/dev/nbdN]` where qemu-nbd uses `-c /dev/nbdN`"),
    (&[], "--connect", "rlun attaches a LUN with `rlun attach URL [/dev/nbdN]` where qemu-nbd uses `--connect`"),
    (&[], "--disconnect", "rlun uses `rlun detach /dev/nbdN` where qemu-nbd and nbd-client use `-d`"),
    // iscsiadm
    (&[], "-m", "rlun has a subcommand for each iscsiadm mode: `rlun discover PORTAL` (-m discovery), `rlun ls URL` (-m node), `rlun list` (-m session)"),
    (&[], "--mode", "rlun has a subcommand for each iscsiadm mode: `rlun discover PORTAL` (-m discovery), `rlun ls URL` (-m node), `rlun list` (-m session)"),
    (&["discover", "ls", "info"], "-p", "rlun takes the portal as its argument: `rlun discover HOST[:PORT]` where iscsiadm uses `-p HOST:PORT`"),
    (&["discover", "ls", "info"], "--portal", "rlun takes the portal as its argument: `rlun discover HOST[:PORT]` where iscsiadm uses `--portal`"),
    (&[], "-T", "rlun takes the target in the URL: iscsi://HOST[:PORT]/IQN[/LUN] where iscsiadm uses `-T IQN -p PORTAL`"),
    (&[], "--targetname", "rlun takes the target in the URL: iscsi://HOST[:PORT]/IQN[/LUN] where iscsiadm uses `--targetname`"),
    (&["discover"], "-t", "rlun discover always uses SendTargets (iscsiadm's `-t st`); drop `-t`"),
    (&[], "--login", "rlun logs in for each command: `rlun mount URL DIR` or `rlun attach URL` where iscsiadm uses `--login`"),
    (&[], "-l", "rlun logs in for each command: `rlun mount URL DIR` or `rlun attach URL` where iscsiadm uses `-l`"),
    (&[], "--logout", "rlun logs out when it stops: `rlun umount DIR` or `rlun detach /dev/nbdN` where iscsiadm uses `--logout`"),
    (&[], "-u", "rlun logs out when it stops: `rlun umount DIR` or `rlun detach /dev/nbdN` where iscsiadm uses `-u`"),
    // mount(8) and FUSE
    (&["mount"], "-o", "rlun mount takes options as flags: `-o ro` is `--read-only`, `-o allow_other` is `--allow-other`, `-o uid=N,gid=N` is `--uid N --gid N`"),
    (&["mount"], "--options", "rlun mount takes options as flags: `-o ro` is `--read-only`, `-o allow_other` is `--allow-other`, `-o uid=N,gid=N` is `--uid N --gid N`"),
    (&["mount", "umount"], "-f", "rlun umount waits for the write-back; `--lazy` detaches a busy mount"),
    (&["umount"], "-l", "rlun uses `--lazy` where umount(8) uses `-l`"),
    // fio
    (&["bench"], "--runtime", "rlun bench uses `--duration 10s` where fio uses `--runtime`"),
    (&["bench"], "--time_based", "rlun bench always runs for `--duration`"),
    (&["bench"], "--iodepth", "rlun bench uses `--qd N` where fio uses `--iodepth`"),
    (&["bench"], "--rw", "rlun bench uses `--pattern read|randread|write|randwrite` where fio uses `--rw`"),
    (&["bench"], "--readwrite", "rlun bench uses `--pattern read|randread|write|randwrite` where fio uses `--readwrite`"),
    (&["bench", "cp"], "--blocksize", "rlun uses `--bs SIZE` where fio uses `--blocksize`"),
    (&["bench"], "--numjobs", "rlun bench runs one job; raise `--qd` for more I/O in flight"),
    (&["bench", "cp"], "--direct", "rlun bench and cp always bypass caches unless `--cache` is given"),
    // nbdcopy, nbd-client
    (&["cp"], "--requests", "rlun cp uses `--qd N` where nbdcopy uses `--requests`"),
    (&["cp"], "-R", "rlun cp uses `--qd N` where nbdcopy uses `-R`"),
    (&["attach"], "-N", "rlun attach takes the LUN in the URL: iscsi://HOST/IQN/LUN where nbd-client uses `-N NAME`"),
    (&["attach"], "-b", "rlun attach takes the LUN's own block size"),
    (&["attach"], "-timeout", "rlun attach uses `--io-timeout` where nbd-client uses `-timeout`"),
    (&["attach"], "--timeout", "rlun attach uses `--io-timeout` where nbd-client uses `--timeout`"),
    (&["attach"], "-C", "rlun attach uses `--connections N` where nbd-client uses `-C N`"),
    (&["attach"], "-d", "rlun uses `rlun detach /dev/nbdN` where nbd-client uses `-d`"),
];

/// A subcommand another tool has (or a guess) and the rlun command for it.
const SUBCOMMANDS: &[(&str, &str)] = &[
    ("logout", "rlun logs out when it stops: `rlun umount DIR` for a mount, `rlun detach /dev/nbdN` for a device"),
    ("login", "rlun logs in for each command: `rlun mount URL DIR`, `rlun attach URL` or `rlun serve URL`"),
    ("discovery", "rlun uses `rlun discover PORTAL` where iscsiadm uses `-m discovery`"),
    ("node", "rlun uses `rlun ls URL` where iscsiadm uses `-m node`"),
    ("session", "rlun uses `rlun list` where iscsiadm uses `-m session`"),
    ("sessions", "rlun uses `rlun list` where iscsiadm uses `-m session`"),
    ("status", "`rlun list` shows what rlun has mounted, served and attached"),
    ("ps", "`rlun list` shows what rlun has mounted, served and attached"),
    ("connect", "rlun uses `rlun attach URL [/dev/nbdN]` where qemu-nbd uses `-c`"),
    ("disconnect", "rlun uses `rlun detach /dev/nbdN` where qemu-nbd uses `-d`"),
    ("unmount", "rlun uses `rlun umount DIR`"),
    ("copy", "rlun uses `rlun cp SRC DST`"),
    ("convert", "rlun uses `rlun cp SRC DST` where qemu-img uses `convert`"),
    ("export", "rlun uses `rlun serve URL` to export LUNs over NBD"),
    ("map", "rlun uses `rlun attach URL` to map a LUN to /dev/nbdN"),
    ("unmap", "rlun uses `rlun detach /dev/nbdN`"),
    ("scan", "rlun uses `rlun ls PORTAL` to list the LUNs of every target of a portal"),
];

/// The subcommands of rlun, to find which one the command line names.
const RLUN_SUBCOMMANDS: &[&str] = &[
    "discover",
    "ls",
    "info",
    "cp",
    "bench",
    "mount",
    "umount",
    "serve",
    "attach",
    "detach",
    "list",
    "completions",
];

/// Values of `bench --pattern` that write: never suggested.
const DESTRUCTIVE_VALUES: &[&str] = &["write", "randwrite"];

/// The text to print for a parse error of `args` (argv without the program
/// name): clap's own message, its tip replaced by rlun's where rlun knows
/// better. `None` when clap's text stands as it is.
pub fn explain(err: &clap::Error, args: &[String]) -> Option<String> {
    let tip = tip_for(err, args)?;
    let text = err.render().to_string();
    // clap's text without its tips; rlun's tip after the first line
    // ("error: ..."), and no blank line twice.
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("tip:"))
        .map(String::from)
        .collect();
    let at = 1.min(lines.len());
    lines.insert(at, format!("\n  tip: {tip}"));
    let mut out = String::new();
    for line in lines {
        if line.is_empty() && (out.ends_with("\n\n") || out.is_empty()) {
            continue;
        }
        out.push_str(&line);
        out.push('\n');
    }
    Some(out)
}

fn tip_for(err: &clap::Error, args: &[String]) -> Option<String> {
    let sub = args
        .iter()
        .find(|a| RLUN_SUBCOMMANDS.contains(&a.as_str()))
        .map(String::as_str);
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    match err.kind() {
        ErrorKind::UnknownArgument => {
            let arg = context(ContextKind::InvalidArg)?;
            // `--flag=value` is looked up as `--flag`.
            let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
            FLAGS
                .iter()
                .find(|(subs, f, _)| {
                    *f == flag && (subs.is_empty() || sub.is_some_and(|s| subs.contains(&s)))
                })
                .map(|(_, _, tip)| tip.to_string())
        }
        ErrorKind::InvalidSubcommand => {
            let name = context(ContextKind::InvalidSubcommand)?;
            SUBCOMMANDS
                .iter()
                .find(|(s, _)| *s == name)
                .map(|(_, tip)| tip.to_string())
        }
        ErrorKind::InvalidValue => {
            let arg = context(ContextKind::InvalidArg)?;
            let value = context(ContextKind::InvalidValue)?;
            if !arg.starts_with("--pattern") {
                return None;
            }
            if value.contains("rw") || value.contains("mix") {
                return Some(
                    "rlun bench has no mixed pattern: run `--pattern randread`, then \
                     `--pattern randwrite --allow-write` (which overwrites the LUN)"
                        .into(),
                );
            }
            // clap suggests the closest name, which may be a write pattern:
            // name the read patterns instead and say what writes.
            let suggested = match err.get(ContextKind::SuggestedValue) {
                Some(ContextValue::String(s)) => Some(s.clone()),
                _ => None,
            };
            suggested
                .filter(|s| DESTRUCTIVE_VALUES.contains(&s.as_str()))
                .map(|_| {
                    "the read patterns are `read` and `randread`; `write` and `randwrite` \
                     overwrite the LUN (with --allow-write)"
                        .into()
                })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn explained(line: &str) -> String {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let argv = std::iter::once("rlun".to_string()).chain(args.iter().cloned());
        let err = Cli::try_parse_from(argv).expect_err("the line is wrong");
        explain(&err, &args).unwrap_or_else(|| err.render().to_string())
    }

    #[test]
    fn anchor_flags_get_the_rlun_equivalent() {
        let cases = [
            (
                "serve iscsi://h/iqn.2026-12.x:y -p 10809",
                "--listen ADDR:PORT",
            ),
            ("serve iscsi://h/iqn.2026-12.x:y -k /tmp/s", "--socket PATH"),
            ("serve iscsi://h/iqn.2026-12.x:y --fork", "--daemon"),
            ("mount iscsi://h/iqn.2026-12.x:y /mnt -o ro", "--read-only"),
            (
                "bench iscsi://h/iqn.2026-12.x:y/1 --runtime 10",
                "--duration",
            ),
            ("discover -p 127.0.0.1", "as its argument"),
            ("attach iscsi://h/iqn.2026-12.x:y/1 -N x", "in the URL"),
        ];
        for (line, want) in cases {
            let text = explained(line);
            assert!(text.contains(want), "{line}: {text}");
            assert!(!text.contains("as a value, use '--"), "{line}: {text}");
            assert!(text.starts_with("error: "), "{line}: {text}");
            assert!(text.contains("Usage: rlun"), "{line}: {text}");
        }
    }

    #[test]
    fn anchor_subcommands_get_the_rlun_command() {
        let text = explained("logout");
        assert!(text.contains("rlun umount DIR"), "{text}");
        assert!(!text.contains("similar subcommand"), "{text}");
        assert!(explained("session").contains("rlun list"));
    }

    #[test]
    fn no_destructive_value_is_suggested() {
        let text = explained("bench iscsi://h/iqn.2026-12.x:y/1 --pattern randrw");
        assert!(text.contains("no mixed pattern"), "{text}");
        assert!(!text.contains("'randwrite'"), "{text}");
        let text = explained("bench iscsi://h/iqn.2026-12.x:y/1 --pattern randwrit");
        assert!(!text.contains("a similar value exists"), "{text}");
        assert!(text.contains("`randread`"), "{text}");
    }

    #[test]
    fn other_errors_keep_clap_s_text() {
        let args = vec!["info".to_string()];
        let err = Cli::try_parse_from(["rlun", "info"]).unwrap_err();
        assert!(explain(&err, &args).is_none());
    }

    #[test]
    fn every_named_subcommand_exists() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        for name in RLUN_SUBCOMMANDS {
            assert!(cmd.find_subcommand(name).is_some(), "{name}");
        }
    }
}
