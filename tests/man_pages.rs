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
