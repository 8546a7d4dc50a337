//! The committed man pages must be what the current CLI definitions
//! generate, so `--help` and `man rlun` never drift apart.
//! Regenerate with: cargo run -- generate-man man

use std::path::Path;
use std::process::Command;

#[test]
fn committed_man_pages_match_the_cli_definitions() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_rlun"))
        .arg("generate-man")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut generated: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    generated.sort();
    assert!(generated.len() >= 7, "pages: {generated:?}");
    for name in generated {
        let want = std::fs::read(out.path().join(&name)).unwrap();
        let have = std::fs::read(committed.join(&name)).unwrap_or_default();
        assert!(
            want == have,
            "man/{} is stale; run `cargo run -- generate-man man`",
            name.to_string_lossy()
        );
    }
}

/// The committed completion scripts (packaging/completions/) must be what
/// `rlun completions <shell>` prints for the current CLI definitions.
#[test]
fn committed_completion_scripts_match_the_cli_definitions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/completions");
    for (shell, file) in [
        ("bash", "rlun.bash"),
        ("zsh", "_rlun"),
        ("fish", "rlun.fish"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rlun"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "rlun completions {shell} failed");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("rlun"),
            "the {shell} script does not mention rlun"
        );
        let have = std::fs::read(dir.join(file)).unwrap_or_default();
        assert!(
            out.stdout == have,
            "packaging/completions/{file} is stale; run scripts/gen-docs.sh"
        );
    }
}

/// bash really loads the generated script and registers a completion for rlun.
#[test]
fn bash_completion_script_registers_a_completion_for_rlun() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/completions/rlun.bash");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && complete -p rlun", script.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("rlun"), "complete -p rlun printed: {text}");
}

/// Every page has EXIT STATUS and SEE ALSO sections, and every rlun page
/// a page names (in SEE ALSO or its list of subcommands) is shipped.
#[test]
fn every_page_has_exit_status_and_see_also_naming_only_pages_that_exist() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut pages = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".8") {
            continue;
        }
        pages += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(".SH \"EXIT STATUS\""),
            "{name} has no EXIT STATUS"
        );
        for code in ["\\fB0\\fR", "\\fB2\\fR", "\\fB5\\fR", "\\fB8\\fR"] {
            assert!(text.contains(code), "{name}: EXIT STATUS lacks {code}");
        }
        let see_also = text
            .split(".SH \"SEE ALSO\"")
            .nth(1)
            .unwrap_or_else(|| panic!("{name} has no SEE ALSO"));
        assert!(see_also.contains("rlun.toml\\fR(5)"), "{name}");
        // rlun\-x(8) anywhere in the page: a page that must exist.
        let mut named = 0;
        for (i, _) in text.match_indices("rlun\\-") {
            let rest = &text[i..];
            let Some(end) = rest.find("(8)") else {
                continue;
            };
            let page = rest[..end].replace("\\fR", "").replace("\\-", "-");
            if page.contains(char::is_whitespace) {
                continue;
            }
            named += 1;
            assert!(
                dir.join(format!("{page}.8")).exists(),
                "{name} names {page}(8), which is not in man/"
            );
        }
        assert!(named >= 10, "{name} names only {named} rlun pages");
    }
    assert!(pages >= 13, "{pages} pages");
    assert!(!dir.join("rlun-help.8").exists());
}
