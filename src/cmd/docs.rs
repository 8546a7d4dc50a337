//! `rlun generate-man` and `rlun completions`: the man pages and the
//! shell completion scripts, generated from the clap definitions in
//! [`crate::cli`] (and rlun.toml(5) from the config format text).

use super::error::CliError;
use crate::cli::Cli;

/// The completion script for `shell`, generated from the clap definitions.
pub fn write_completions(
    shell: crate::cli::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use clap::CommandFactory;
    use clap_complete::shells;
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    match shell {
        crate::cli::Shell::Bash => {
            clap_complete::generate(shells::Bash, &mut cmd, "rlun", &mut buf)
        }
        crate::cli::Shell::Zsh => clap_complete::generate(shells::Zsh, &mut cmd, "rlun", &mut buf),
        crate::cli::Shell::Fish => {
            clap_complete::generate(shells::Fish, &mut cmd, "rlun", &mut buf)
        }
    }
    out.write_all(&buf)?;
    out.flush()
}

pub(super) fn generate_man(dir: &std::path::Path) -> Result<(), CliError> {
    use clap::CommandFactory;
    let io = |source| CliError::LocalFile {
        what: "cannot write man page into",
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    // `rlun help` is clap's, not a page of its own.
    let cmd = Cli::command().disable_help_subcommand(true);
    let pages: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("rlun-{}", s.get_name()))
        .collect();
    std::fs::write(
        dir.join("rlun.8"),
        page(cmd.clone(), "rlun", &pages).map_err(io)?,
    )
    .map_err(io)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rlun-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(name.clone());
        std::fs::write(
            dir.join(format!("{name}.8")),
            page(sub, &name, &pages).map_err(io)?,
        )
        .map_err(io)?;
    }
    std::fs::write(dir.join("rlun.toml.5"), config_man_page()).map_err(io)?;
    Ok(())
}

/// One man page: clap_mangen's sections, then EXIT STATUS and SEE ALSO.
fn page(cmd: clap::Command, name: &str, pages: &[String]) -> std::io::Result<Vec<u8>> {
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_extra = cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some();
    let has_version = cmd.get_version().or(cmd.get_long_version()).is_some();
    let man = clap_mangen::Man::new(cmd).section("8");
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    if has_args {
        man.render_options_section(&mut buf)?;
    }
    if has_subs {
        man.render_subcommands_section(&mut buf)?;
    }
    if has_extra {
        man.render_extra_section(&mut buf)?;
    }
    buf.extend_from_slice(exit_status_section(name).as_bytes());
    buf.extend_from_slice(see_also_section(name, pages).as_bytes());
    if has_version {
        man.render_version_section(&mut buf)?;
    }
    // Each section rendered alone defines the quote string again: once is
    // enough.
    let text = String::from_utf8_lossy(&buf).into_owned();
    let mut seen = std::collections::HashSet::new();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            !(l.starts_with(".ie \\n(.g .ds Aq") || l.starts_with(".el .ds Aq")) || seen.insert(*l)
        })
        .collect();
    Ok((kept.join("\n") + "\n").into_bytes())
}

/// The exit codes of [`crate::exit`], as a man page section.
fn exit_status_section(name: &str) -> String {
    use crate::exit;
    let mut codes = vec![
        (exit::OK, "Success."),
        (exit::FAILURE, "A failure not covered below."),
        (
            exit::USAGE,
            "Usage error: unknown option, malformed URL or size, a LUN that is no disk.",
        ),
        (
            exit::UNREACHABLE,
            "The portal could not be reached (resolve, connect, timeout, lost connection).",
        ),
        (
            exit::AUTH,
            "The target refused the login: CHAP or authorization, or iSER refused.",
        ),
        (
            exit::NOT_FOUND,
            "No such target at the portal, or no such LUN on the target.",
        ),
        (
            exit::IO,
            "The LUN refused an I/O: write protected, out of range, medium error.",
        ),
        (exit::PROTOCOL, "The target broke the iSCSI protocol."),
        (
            exit::LOCAL_FILE,
            "A local file could not be read or written.",
        ),
    ];
    if name == "rlun" || name == "rlun-cp" {
        codes.push((
            129,
            "rlun cp stopped by SIGHUP (130: SIGINT, 143: SIGTERM).",
        ));
    }
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    for (code, what) in codes {
        out.push_str(&format!(".TP\n\\fB{code}\\fR\n{what}\n"));
    }
    out
}

/// The other rlun pages, rlun.toml(5) and the tools rlun stands beside.
fn see_also_section(name: &str, pages: &[String]) -> String {
    let mut refs: Vec<String> = std::iter::once("rlun".to_string())
        .chain(pages.iter().cloned())
        .filter(|p| p != name)
        .map(|p| format!("\\fB{}\\fR(8)", p.replace('-', "\\-")))
        .collect();
    refs.push("\\fBrlun.toml\\fR(5)".into());
    for (page, section) in ANCHOR_PAGES {
        refs.push(format!("\\fB{}\\fR({section})", page.replace('-', "\\-")));
    }
    format!(".SH \"SEE ALSO\"\n{}\n", refs.join(", "))
}

/// Pages of the tools an rlun user knows, for SEE ALSO.
const ANCHOR_PAGES: &[(&str, u8)] = &[
    ("iscsiadm", 8),
    ("qemu-nbd", 8),
    ("nbd-client", 8),
    ("nbdinfo", 1),
    ("nbdcopy", 1),
    ("fusermount3", 1),
];

/// rlun.toml(5): the config format text as a preformatted man page. Its
/// upper-case headings become `.SH` sections, and the NAME line reads
/// `rlun.toml \- ...`, so that mandb/whatis can index the page.
fn config_man_page() -> String {
    let mut out = String::from(".TH RLUN.TOML 5 \"rlun\" \"\" \"File Formats\"\n");
    let mut in_name = false;
    for line in crate::config::CONFIG_FORMAT_HELP.lines() {
        let heading = !line.is_empty() && line.chars().all(|c| c.is_ascii_uppercase() || c == ' ');
        if heading {
            out.push_str(&format!(".SH {line}\n.nf\n"));
            in_name = line == "NAME";
            continue;
        }
        if in_name {
            if let Some((name, what)) = line.trim().split_once(" - ") {
                out.push_str(&format!("{name} \\- {what}\n"));
                continue;
            }
        }
        // Escape roff: backslashes, and a leading dot or quote.
        let l = line.replace('\\', "\\e");
        if l.starts_with('.') || l.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}
