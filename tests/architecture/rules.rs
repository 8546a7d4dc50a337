//! The rules the architecture check holds the sources to, and the layer
//! order they are checked against, read from ARCHITECTURE.md (the one
//! place it is written).

use std::collections::BTreeMap;
use std::fmt;

use crate::graph::{cycles, edges, test_files, ModPath, SourceFile};
use crate::lex::{blank_comments_and_literals, lines_outside_tests};

/// Most lines a source file may have outside its `#[cfg(test)]` items.
pub const MAX_LINES: usize = 1000;

/// The declared layers of each crate, top to bottom; each layer holds one
/// or more modules (peers, which must not use each other).
#[derive(Debug, Clone, Default)]
pub struct Layers {
    pub crates: BTreeMap<String, Vec<Vec<ModPath>>>,
}

impl Layers {
    /// Reads the ```` ```layers ```` block of ARCHITECTURE.md: `crate
    /// NAME` starts a crate's list, then one layer per line, top first,
    /// modules separated by spaces, `a::b` for a submodule; `#` starts a
    /// comment.
    pub fn parse(markdown: &str) -> Result<Layers, String> {
        let start = markdown
            .find("```layers\n")
            .ok_or("ARCHITECTURE.md has no ```layers block")?;
        let body = &markdown[start + "```layers\n".len()..];
        let end = body
            .find("```")
            .ok_or("the ```layers block is not closed")?;
        let mut layers = Layers::default();
        let mut current: Option<String> = None;
        for (n, raw) in body[..end].lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix("crate ") {
                current = Some(name.trim().to_string());
                layers.crates.entry(name.trim().to_string()).or_default();
                continue;
            }
            let krate = current.as_ref().ok_or(format!(
                "layers line {}: a layer before any `crate NAME`",
                n + 1
            ))?;
            let layer = line
                .split_whitespace()
                .map(|m| m.split("::").map(str::to_string).collect())
                .collect();
            layers.crates.get_mut(krate).expect("entered").push(layer);
        }
        Ok(layers)
    }

    /// Whether a declared module lies inside `module` (which is then a
    /// container of placed modules).
    fn contains_below(&self, krate: &str, module: &ModPath) -> bool {
        self.crates.get(krate).is_some_and(|layers| {
            layers
                .iter()
                .flatten()
                .any(|m| m.len() > module.len() && m.starts_with(module))
        })
    }

    /// The layer index and the declared module that `module` belongs to
    /// (the longest declared prefix).
    fn place(&self, krate: &str, module: &ModPath) -> Option<(usize, ModPath)> {
        let mut best: Option<(usize, ModPath)> = None;
        for (i, layer) in self.crates.get(krate)?.iter().enumerate() {
            for m in layer {
                if module.starts_with(m) && best.as_ref().is_none_or(|(_, b)| m.len() > b.len()) {
                    best = Some((i, m.clone()));
                }
            }
        }
        best
    }
}

/// One broken rule, in words a reader can act on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    Unplaced {
        krate: String,
        file: String,
    },
    Upward {
        krate: String,
        file: String,
        line: usize,
        uses: String,
        path: String,
        why: String,
    },
    Cycle {
        krate: String,
        files: Vec<String>,
    },
    TooLong {
        krate: String,
        file: String,
        lines: usize,
    },
    Unsafe {
        file: String,
        line: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Unplaced { krate, file } => write!(
                f,
                "{krate}: {file} belongs to no module of the layer list in ARCHITECTURE.md: add its module to a layer"
            ),
            Violation::Upward { krate, file, line, uses, path, why } => write!(
                f,
                "{krate}: {file}:{line} uses {uses} (`{path}`), {why}"
            ),
            Violation::Cycle { krate, files } => write!(
                f,
                "{krate}: import cycle between {}",
                files.join(", ")
            ),
            Violation::TooLong { krate, file, lines } => write!(
                f,
                "{krate}: {file} has {lines} lines outside its tests (at most {MAX_LINES}): split it along a seam"
            ),
            Violation::Unsafe { file, line } => write!(
                f,
                "{file}:{line}: `unsafe` outside crates/rlun-sys (the one crate that may hold it)"
            ),
        }
    }
}

fn show(m: &ModPath) -> String {
    if m.is_empty() {
        "the crate root".into()
    } else {
        m.join("::")
    }
}

/// Layering, cycles and file sizes of one crate's sources.
pub fn check_crate(krate: &str, files: &[SourceFile], layers: &Layers) -> Vec<Violation> {
    let mut out = Vec::new();
    let tests = test_files(files);
    let name_of = |m: &ModPath| {
        files
            .iter()
            .find(|f| &f.module == m)
            .map_or_else(|| show(m), |f| f.rel.display().to_string())
    };
    for f in files.iter().filter(|f| !tests.contains(&f.module)) {
        // A module that only holds placed submodules (`proto/mod.rs`)
        // needs no place of its own.
        if !f.module.is_empty()
            && layers.place(krate, &f.module).is_none()
            && !layers.contains_below(krate, &f.module)
        {
            out.push(Violation::Unplaced {
                krate: krate.into(),
                file: f.rel.display().to_string(),
            });
        }
        let lines = lines_outside_tests(&f.text);
        if lines > MAX_LINES {
            out.push(Violation::TooLong {
                krate: krate.into(),
                file: f.rel.display().to_string(),
                lines,
            });
        }
    }
    let edges = edges(files);
    for e in &edges {
        let (Some((li, lm)), Some((lj, ln))) =
            (layers.place(krate, &e.from), layers.place(krate, &e.to))
        else {
            continue;
        };
        if lm == ln {
            continue;
        }
        let why = if lj < li {
            format!(
                "which is in a higher layer ({} above {})",
                show(&ln),
                show(&lm)
            )
        } else if lj == li {
            format!(
                "a peer in the same layer ({} beside {}); peers must not use each other",
                show(&ln),
                show(&lm)
            )
        } else {
            continue;
        };
        out.push(Violation::Upward {
            krate: krate.into(),
            file: name_of(&e.from),
            line: e.line,
            uses: name_of(&e.to),
            path: e.path.clone(),
            why,
        });
    }
    for c in cycles(&edges) {
        out.push(Violation::Cycle {
            krate: krate.into(),
            files: c.iter().map(name_of).collect(),
        });
    }
    out.sort();
    out
}

/// `unsafe` in code (not in comments or strings) of `file`: the lines.
pub fn unsafe_lines(text: &str) -> Vec<usize> {
    let code = blank_comments_and_literals(text);
    code.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.match_indices("unsafe").any(|(i, _)| {
                let b = l.as_bytes();
                let before = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
                let after = b
                    .get(i + 6)
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
                before && after
            })
        })
        .map(|(n, _)| n + 1)
        .collect()
}
