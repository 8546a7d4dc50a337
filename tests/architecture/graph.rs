//! The files of a crate as a graph of "uses": which file uses an item of
//! which other file of the same crate.
//!
//! A file uses another when one of its `use` declarations or one of its
//! paths (`crate::a::b`, `super::x`, `self::x`, or a path that starts with
//! the name of a module the file declares) names an item of that file's
//! module. Declarations (`mod x;`) and re-exports of the file's own child
//! modules (`pub use x::Y;` in the parent) are not uses: that is how a
//! module presents its parts. Items under `#[cfg(test)]` are not counted
//! (tests may reach anywhere), and neither are files that are test modules
//! themselves (`#[cfg(test)] mod tests;`). Paths into other crates are not
//! edges of this graph; the crate graph is Cargo's to enforce.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::lex::{blank_comments_and_literals, cut_test_items, declared_mod, matching_brace};

/// A module path inside a crate, e.g. `["proto", "connection"]`; empty for
/// the crate root.
pub type ModPath = Vec<String>;

/// One source file of a crate.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Relative to the crate's `src/`.
    pub rel: PathBuf,
    pub module: ModPath,
    pub text: String,
}

/// A use of one file by another, with the line it is on (1-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: ModPath,
    pub to: ModPath,
    pub line: usize,
    pub path: String,
}

/// The source files of a crate (everything under `src/` but `main.rs`,
/// the binary's root, which only uses the library as another crate does).
pub fn read_crate(src_dir: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    walk(src_dir, src_dir, &mut out);
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).expect("under root").to_path_buf();
            if rel == Path::new("main.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            out.push(SourceFile {
                module: module_of(&rel),
                rel,
                text,
            });
        }
    }
}

/// `proto/connection/mod.rs` and `proto/connection.rs` are module
/// `proto::connection`; `lib.rs` is the root.
pub fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The files that are tests: declared as `#[cfg(test)] mod name;` by
/// their parent.
pub fn test_files(files: &[SourceFile]) -> BTreeSet<ModPath> {
    let mut out = BTreeSet::new();
    for f in files {
        let (_, mods, _) = cut_test_items(&blank_comments_and_literals(&f.text));
        for m in mods {
            let mut p = f.module.clone();
            p.push(m);
            out.insert(p);
        }
    }
    out
}

/// Every use between two source files of the crate (test files left out).
pub fn edges(files: &[SourceFile]) -> Vec<Edge> {
    let tests = test_files(files);
    let known: BTreeSet<ModPath> = files.iter().map(|f| f.module.clone()).collect();
    let mut out = BTreeSet::new();
    for f in files.iter().filter(|f| !tests.contains(&f.module)) {
        let (code, _, _) = cut_test_items(&blank_comments_and_literals(&f.text));
        let inline = inline_modules(&code);
        let children = declared_children(&code);
        let mut add = |at: usize, path: &[String], written: &str| {
            if let Some(to) = resolve(&known, path) {
                if to != f.module && !to.is_empty() {
                    out.insert(Edge {
                        from: f.module.clone(),
                        to,
                        line: code[..at].matches('\n').count() + 1,
                        path: written.trim().to_string(),
                    });
                }
            }
        };
        let uses = use_declarations(&code);
        let mut rest = code.clone().into_bytes();
        for (at, end, vis, tree) in &uses {
            let (at, vis) = (*at, *vis);
            for c in &mut rest[at..*end] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
            let scope = scope_at(&f.module, &inline, at);
            for path in expand_use_tree(tree) {
                let Some(abs) = absolute(&scope, &children, &path) else {
                    continue;
                };
                // A module presenting its own parts is not using them.
                if vis && abs.len() > f.module.len() && abs.starts_with(&f.module) {
                    continue;
                }
                add(at, &abs, tree);
            }
        }
        let rest = String::from_utf8(rest).expect("ASCII blanks");
        for (at, path) in qualified_paths(&rest, &children) {
            let scope = scope_at(&f.module, &inline, at);
            if let Some(abs) = absolute(&scope, &children, &path) {
                add(at, &abs, &path.join("::"));
            }
        }
    }
    out.into_iter().collect()
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve(known: &BTreeSet<ModPath>, path: &[String]) -> Option<ModPath> {
    (0..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|p| known.contains(p))
}

/// `path` (as written in a file whose module is `scope`) from the crate
/// root; `None` for paths into other crates or the prelude.
fn absolute(scope: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<ModPath> {
    let (head, rest) = path.split_first()?;
    let mut base: Vec<String> = match head.as_str() {
        "crate" => Vec::new(),
        "self" => scope.to_vec(),
        "super" => scope[..scope.len().checked_sub(1)?].to_vec(),
        h if children.contains(h) => {
            let mut b = scope.to_vec();
            b.push(h.to_string());
            b
        }
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", r)) = rest.split_first().map(|(h, r)| (h.as_str(), r)) {
        base.pop()?;
        rest = r;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Non-test inline modules (`mod name { … }`): (start, end, name).
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if at > 0 && is_ident_byte(code.as_bytes()[at - 1]) {
            continue;
        }
        let rest = &code[at..];
        let Some(name) = declared_mod(rest) else {
            continue;
        };
        let after = at + 4 + rest[4..].find(name.as_str()).unwrap_or(0) + name.len();
        let next = code[after..].trim_start();
        if next.starts_with('{') {
            let open = after + code[after..].find('{').expect("seen");
            out.push((open, matching_brace(code, open), name));
        }
    }
    out
}

/// The module a byte offset of the file is in: the file's own, or an
/// inline module inside it.
fn scope_at(file: &[String], inline: &[(usize, usize, String)], at: usize) -> ModPath {
    let mut scope = file.to_vec();
    let mut spans: Vec<_> = inline
        .iter()
        .filter(|(s, e, _)| *s < at && at < *e)
        .collect();
    spans.sort_by_key(|(s, _, _)| *s);
    scope.extend(spans.into_iter().map(|(_, _, n)| n.clone()));
    scope
}

/// Modules the file declares with `mod name;` (their items are reached as
/// `name::…`).
fn declared_children(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("mod ") {
        if at > 0 && is_ident_byte(code.as_bytes()[at - 1]) {
            continue;
        }
        if let Some(name) = declared_mod(&code[at..]) {
            out.insert(name);
        }
    }
    out
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every `use …;`: (start, end, whether it is a `pub` re-export, the tree).
fn use_declarations(code: &str) -> Vec<(usize, usize, bool, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if at > 0 && is_ident_byte(b[at - 1]) {
            continue;
        }
        let before = code[..at].trim_end();
        let vis = before.ends_with("pub") || (before.ends_with(')') && visibility_paren(before));
        let prev = before.chars().last();
        // `use` starts an item: after `;`, `{`, `}`, an attribute, `pub…`
        // or the start of the file.
        if !(vis || matches!(prev, None | Some(';' | '{' | '}' | ']'))) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            continue;
        };
        out.push((at, at + end + 1, vis, code[at + 4..at + end].to_string()));
    }
    out
}

fn visibility_paren(before: &str) -> bool {
    before
        .rfind("pub")
        .is_some_and(|p| before[p + 3..].trim_start().starts_with('('))
}

/// The paths a use tree imports: `a::{b, c::{d as e, self}}` →
/// `a::b`, `a::c::d`, `a::c`.
pub fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    let t: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand(&t, &mut Vec::new(), &mut out);
    out
}

fn expand(t: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Some(open) = t.find('{') {
        let pre = &t[..open];
        let close = matching_brace(t, open);
        let inner = &t[open + 1..close];
        let before = prefix.len();
        prefix.extend(segments(pre));
        for item in split_top(inner) {
            expand(item, prefix, out);
        }
        prefix.truncate(before);
    } else {
        let path = t.split("as").next().unwrap_or(t);
        let mut p = prefix.clone();
        for s in segments(path) {
            if s != "self" || p.is_empty() {
                p.push(s);
            }
        }
        if !p.is_empty() {
            out.push(p);
        }
    }
}

fn segments(s: &str) -> Vec<String> {
    s.split("::")
        .filter(|x| !x.is_empty() && *x != "*")
        .map(str::to_string)
        .collect()
}

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|x| !x.is_empty()).collect()
}

/// Paths in expressions and types: `crate::…`, `super::…`, `self::…` and
/// `child::…` for a declared child module, each not part of a longer path.
fn qualified_paths(code: &str, children: &BTreeSet<String>) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident_byte(b[i]) && (i == 0 || !(is_ident_byte(b[i - 1]) || b[i - 1] == b':')) {
            let start = i;
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < b.len() && is_ident_byte(b[j]) {
                    j += 1;
                }
                if s == j {
                    break;
                }
                segs.push(code[s..j].to_string());
                if code[j..].starts_with("::") {
                    j += 2;
                } else {
                    break;
                }
            }
            let head = segs[0].as_str();
            if segs.len() > 1
                && (matches!(head, "crate" | "super" | "self") || children.contains(head))
            {
                out.push((start, segs));
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Files in strongly connected groups of more than one file: the import
/// cycles (Tarjan's algorithm).
pub fn cycles(edges: &[Edge]) -> Vec<Vec<ModPath>> {
    let mut adj: BTreeMap<&ModPath, BTreeSet<&ModPath>> = BTreeMap::new();
    for e in edges {
        adj.entry(&e.from).or_default().insert(&e.to);
        adj.entry(&e.to).or_default();
    }
    struct T<'a> {
        adj: BTreeMap<&'a ModPath, BTreeSet<&'a ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        let next: Vec<&ModPath> = t.adj[v].iter().copied().collect();
        for w in next {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let nodes: Vec<&ModPath> = adj.keys().copied().collect();
    let mut t = T {
        adj,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}
