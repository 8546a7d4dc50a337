//! The architecture check: a fitness function that fails `cargo test` when
//! the code stops having the shape ARCHITECTURE.md describes.
//!
//! - **Layers.** Every module of `rlun`, `rlun-iscsi` and `rlun-sys` sits
//!   in a layer of the ```` ```layers ```` block of ARCHITECTURE.md; a
//!   file may use only modules of lower layers (and its own module). An
//!   upward use, or a use between peers of one layer, fails with the file,
//!   the line and the path.
//! - **No import cycles** between files, within a module too (see
//!   `graph.rs` for what counts as a use).
//! - **Files a person can hold in their head**: at most 1000 lines outside
//!   `#[cfg(test)]` items per source file.
//! - **`unsafe` only in `crates/rlun-sys`**, and the other crates forbid it.
//! - **The sans-IO core stays pure**: `rlun-iscsi` depends on no async
//!   runtime, socket or FFI crate.
//!
//! The checker is tested on itself too: a violation planted in a copy of
//! the real tree (an upward import, a cycle, an `unsafe` block, a long
//! file) must be reported, so the check is known to be able to fail.

mod graph;
mod lex;
mod rules;

use std::path::{Path, PathBuf};

use graph::{read_crate, SourceFile};
use rules::{check_crate, unsafe_lines, Layers, Violation};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crates of the workspace and their source directories.
const CRATES: [(&str, &str); 3] = [
    ("rlun", "src"),
    ("rlun-iscsi", "crates/rlun-iscsi/src"),
    ("rlun-sys", "crates/rlun-sys/src"),
];

fn layers() -> Layers {
    let md = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    Layers::parse(&md).expect("the layer list of ARCHITECTURE.md parses")
}

fn check_all(trees: &[(&str, Vec<SourceFile>)], layers: &Layers) -> Vec<Violation> {
    let mut out = Vec::new();
    for (krate, files) in trees {
        assert!(
            layers.crates.contains_key(*krate),
            "ARCHITECTURE.md's layer list has no `crate {krate}`"
        );
        out.extend(check_crate(krate, files, layers));
    }
    out
}

fn real_trees() -> Vec<(&'static str, Vec<SourceFile>)> {
    CRATES
        .iter()
        .map(|(name, dir)| (*name, read_crate(&root().join(dir))))
        .collect()
}

fn report(v: &[Violation]) -> String {
    v.iter().map(|v| format!("  - {v}\n")).collect()
}

#[test]
fn every_crate_keeps_its_layers_has_no_import_cycle_and_no_file_over_1000_lines() {
    let v = check_all(&real_trees(), &layers());
    assert!(
        v.is_empty(),
        "the architecture check failed ({} violations):\n{}",
        v.len(),
        report(&v)
    );
}

/// Every Rust file of the repository outside `crates/rlun-sys`.
fn rust_files_outside_sys() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [
        "src",
        "crates",
        "tests",
        "benches",
        "examples",
        "fuzz/fuzz_targets",
        "fuzz/src",
    ] {
        collect(&root().join(dir), &mut out);
    }
    out.retain(|p| !p.starts_with(root().join("crates/rlun-sys")));
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.expect("directory entry").path();
        if p.is_dir() && !p.ends_with("target") {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn unsafe_appears_only_in_rlun_sys_and_the_other_crates_forbid_it() {
    let mut found = Vec::new();
    for p in rust_files_outside_sys() {
        let text = std::fs::read_to_string(&p).expect("readable");
        for line in unsafe_lines(&text) {
            found.push(Violation::Unsafe {
                file: p.strip_prefix(root()).unwrap_or(&p).display().to_string(),
                line,
            });
        }
    }
    assert!(found.is_empty(), "{}", report(&found));
    for root_file in ["src/lib.rs", "src/main.rs", "crates/rlun-iscsi/src/lib.rs"] {
        let text = std::fs::read_to_string(root().join(root_file)).expect("readable");
        assert!(
            text.contains("#![forbid(unsafe_code)]"),
            "{root_file} must say #![forbid(unsafe_code)]"
        );
    }
    let sys = std::fs::read_to_string(root().join("crates/rlun-sys/src/lib.rs")).expect("readable");
    assert!(
        sys.contains("#![deny(clippy::undocumented_unsafe_blocks)]"),
        "rlun-sys must deny undocumented unsafe blocks"
    );
}

#[test]
fn the_sans_io_core_depends_on_no_runtime_socket_or_ffi_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "-p",
            "rlun-iscsi",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"rlun-iscsi"), "{tree}");
    for banned in [
        "tokio",
        "mio",
        "socket2",
        "libc",
        "nix",
        "rustix",
        "getrandom",
        "rand",
        "ibverbs",
        "rlun-sys",
        "async-std",
        "futures",
    ] {
        assert!(
            !crates.contains(&banned),
            "rlun-iscsi must not depend on {banned}:\n{tree}"
        );
    }
}

// ---- the check can fail ---------------------------------------------------

/// The real tree of `krate` with `edit` applied to the file `rel`.
fn planted(
    krate: &str,
    rel: &str,
    edit: impl Fn(&str) -> String,
) -> Vec<(&'static str, Vec<SourceFile>)> {
    let mut trees = real_trees();
    let (_, files) = trees.iter_mut().find(|(k, _)| *k == krate).expect("crate");
    let f = files
        .iter_mut()
        .find(|f| f.rel == Path::new(rel))
        .unwrap_or_else(|| panic!("{rel} exists in {krate}"));
    f.text = edit(&f.text);
    trees
}

/// The first non-test source file of a module, e.g. `device`: its
/// `mod.rs` or `.rs`.
fn file_of(krate: &str, module: &str) -> String {
    let dir = CRATES.iter().find(|(k, _)| *k == krate).expect("crate").1;
    let base = root().join(dir);
    let a = format!("{module}/mod.rs");
    let b = format!("{module}.rs");
    if base.join(&a).exists() {
        a
    } else {
        assert!(base.join(&b).exists(), "{module} has a file");
        b
    }
}

#[test]
fn an_upward_import_planted_in_the_real_tree_fails_the_check() {
    // The device layer (the page cache) reaching up into the commands.
    let rel = file_of("rlun", "device");
    let trees = planted("rlun", &rel, |t| {
        format!("{t}\n#[allow(unused_imports)]\nuse crate::cmd::run;\n")
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::Upward { file, uses, why, .. }
            if file == &rel && uses.starts_with("cmd") && why.contains("higher layer"))),
        "not reported:\n{}",
        report(&v)
    );
    // The same as a path in code rather than an import.
    let trees = planted("rlun", &rel, |t| {
        format!("{t}\nfn _planted() {{ let _ = crate::cli::exit::OK; }}\n")
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter().any(|v| matches!(v, Violation::Upward { file, path, .. } if file == &rel && path.starts_with("crate::cli"))),
        "not reported:\n{}",
        report(&v)
    );
}

#[test]
fn an_upward_import_in_the_core_crate_and_a_use_between_peers_fail_the_check() {
    // The PDU codec using the recovery policy above it.
    let rel = file_of("rlun-iscsi", "proto/pdu");
    let trees = planted("rlun-iscsi", &rel, |t| {
        format!("{t}\nuse crate::proto::recovery::Recovery;\n")
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::Upward { uses, .. } if uses.contains("recovery"))),
        "not reported:\n{}",
        report(&v)
    );
    // The FUSE front end using the NBD front end beside it.
    let rel = file_of("rlun", "fuse");
    let trees = planted("rlun", &rel, |t| {
        format!("{t}\nuse crate::nbd::proto::Handshake;\n")
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::Upward { why, .. } if why.contains("peer"))),
        "not reported:\n{}",
        report(&v)
    );
}

#[test]
fn a_planted_cycle_a_module_outside_the_layers_and_a_long_file_fail_the_check() {
    // The URL parser (a leaf) using the config file module that uses it.
    let url = file_of("rlun", "url");
    let trees = planted("rlun", &url, |t| {
        format!("{t}\nuse crate::config::Config;\n")
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter().any(|v| matches!(v, Violation::Cycle { files, .. }
            if files.contains(&url) && files.iter().any(|f| f.starts_with("config")))),
        "not reported:\n{}",
        report(&v)
    );

    let mut trees = real_trees();
    trees[0].1.push(SourceFile {
        rel: "newthing.rs".into(),
        module: vec!["newthing".into()],
        text: "pub fn f() {}\n".repeat(1001),
    });
    let v = check_all(&trees, &layers());
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::Unplaced { file, .. } if file == "newthing.rs")),
        "not reported:\n{}",
        report(&v)
    );
    assert!(
        v.iter().any(
            |v| matches!(v, Violation::TooLong { file, lines: 1001, .. } if file == "newthing.rs")
        ),
        "not reported:\n{}",
        report(&v)
    );
}

#[test]
fn unsafe_in_code_is_found_but_not_in_comments_strings_or_lint_names() {
    let text = "#![forbid(unsafe_code)]\n// unsafe in a comment\nlet s = \"unsafe\";\nlet p = unsafe { *q };\n";
    assert_eq!(unsafe_lines(text), vec![4]);
}
