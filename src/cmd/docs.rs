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
    let cmd = Cli::command();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .render(&mut buf)
        .map_err(io)?;
    std::fs::write(dir.join("rlun.8"), &buf).map_err(io)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rlun-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(name.clone());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub)
            .section("8")
            .render(&mut buf)
            .map_err(io)?;
        std::fs::write(dir.join(format!("{name}.8")), &buf).map_err(io)?;
    }
    std::fs::write(dir.join("rlun.toml.5"), config_man_page()).map_err(io)?;
    Ok(())
}

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
