//! Just enough of Rust's lexical structure to find the paths a file uses:
//! comments and literals blanked out (newlines kept, so line numbers stay
//! true), `#[cfg(test)]` items cut, inline `mod name { … }` blocks located.

/// `src` with every comment, string, byte string, raw string and character
/// literal replaced by spaces (newlines kept).
pub fn blank_comments_and_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                let mut j = i;
                while j < b.len() {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' | b'b' if !ident_before(b, i) => {
                // r"…", r#"…"#, b"…", br"…", br#"…"#, b'…'
                let mut j = i;
                if b[j] == b'b' {
                    j += 1;
                }
                let raw = b.get(j) == Some(&b'r');
                if raw {
                    j += 1;
                }
                let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
                j += hashes;
                match b.get(j) {
                    Some(b'"') if raw => {
                        let close: Vec<u8> = std::iter::once(b'"')
                            .chain(std::iter::repeat_n(b'#', hashes))
                            .collect();
                        let end = find(b, j + 1, &close).map_or(b.len(), |p| p + close.len());
                        blank(&mut out, i, end);
                        i = end;
                    }
                    Some(b'"') if hashes == 0 => {
                        let end = end_of_quoted(b, j, b'"');
                        blank(&mut out, i, end);
                        i = end;
                    }
                    Some(b'\'') if hashes == 0 && b[i] == b'b' && j == i + 1 => {
                        let end = end_of_quoted(b, j, b'\'');
                        blank(&mut out, i, end);
                        i = end;
                    }
                    _ => i += 1,
                }
            }
            b'"' => {
                let end = end_of_quoted(b, i, b'"');
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    let end = end_of_quoted(b, i, b'\'');
                    blank(&mut out, i, end);
                    i = end;
                } else if let Some(len) = char_len_at(src, i + 1) {
                    if b.get(i + 1 + len) == Some(&b'\'') {
                        blank(&mut out, i, i + len + 2);
                        i += len + 2;
                    } else {
                        i += 1;
                    }
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("only ASCII was replaced")
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// The index just past the closing quote of the literal opened at `open`.
fn end_of_quoted(b: &[u8], open: usize, quote: u8) -> usize {
    let mut j = open + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

fn char_len_at(src: &str, i: usize) -> Option<usize> {
    src.get(i..)?.chars().next().map(char::len_utf8)
}

/// The index of the `}` that closes the `{` at `open` (or the end).
pub fn matching_brace(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (j, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` (already blanked) with every item under `#[cfg(test)]` (or a
/// `cfg` that needs `test`, such as `#[cfg(all(test, …))]`) blanked out:
/// test modules inline or declared, test-only functions, imports and impls.
/// Returns the code, the names of test-only modules declared with
/// `mod name;` (whose files are tests, not sources) and the byte ranges
/// cut.
pub fn cut_test_items(code: &str) -> (String, Vec<String>, Vec<std::ops::Range<usize>>) {
    let mut out = code.as_bytes().to_vec();
    let mut test_mods = Vec::new();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(") {
        let at = from + p;
        let attr_end = matching_paren(code, at + 5).map_or(code.len(), |e| e + 1);
        let cond = &code[at + 6..attr_end.saturating_sub(1)];
        from = attr_end;
        if !needs_test(cond) {
            continue;
        }
        // The item after this attribute (and any further attributes).
        let rest = &code[attr_end..];
        let item_start = attr_end
            + rest
                .find(|c: char| c != ']' && !c.is_whitespace())
                .unwrap_or(0);
        let brace = code[item_start..].find('{').map(|q| item_start + q);
        let semi = code[item_start..].find(';').map(|q| item_start + q);
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => matching_brace(code, b) + 1,
            (None, Some(s)) => s + 1,
            (None, None) => code.len(),
        };
        let item = code[item_start..end].trim_start();
        if let Some(name) = declared_mod(item) {
            if item.trim_end().ends_with(';') {
                test_mods.push(name);
            }
        }
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        ranges.push(at..end);
        from = end;
    }
    (
        String::from_utf8(out).expect("ASCII blanks"),
        test_mods,
        ranges,
    )
}

fn matching_paren(code: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether a `cfg(…)` condition holds only under `cargo test`: `test`
/// itself or `all(…, test, …)`. (`any(test, feature = "x")` is also
/// compiled without tests, so it is not cut.)
fn needs_test(cond: &str) -> bool {
    let c: String = cond.chars().filter(|c| !c.is_whitespace()).collect();
    c == "test" || (c.starts_with("all(") && c[4..c.len() - 1].split(',').any(|p| p == "test"))
}

/// `name` when `item` is a module declaration or an inline module.
pub fn declared_mod(item: &str) -> Option<String> {
    let mut words = item.split_whitespace();
    let mut w = words.next()?;
    if w.starts_with("pub") {
        w = words.next()?;
    }
    if w != "mod" {
        return None;
    }
    let name: String = words
        .next()?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Counts the lines of `src` that are outside `#[cfg(test)]` items
/// (comment and blank lines included: they are part of what a reader
/// holds in their head).
pub fn lines_outside_tests(src: &str) -> usize {
    let (_, _, cut) = cut_test_items(&blank_comments_and_literals(src));
    let mut start = 0;
    let mut count = 0;
    for line in src.split_inclusive('\n') {
        let end = start + line.trim_end_matches('\n').len();
        if !cut.iter().any(|r| r.start <= start && end <= r.end) {
            count += 1;
        }
        start += line.len();
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_literals_are_blanked_but_lines_stay() {
        let src = "use crate::a; // crate::b\nlet s = \"crate::c\"; /* crate::d\n*/ let r = r#\"crate::e\"#; let c = '\"'; fn f<'a>() {}\n";
        let out = blank_comments_and_literals(src);
        assert!(out.contains("crate::a"));
        for hidden in ["crate::b", "crate::c", "crate::d", "crate::e"] {
            assert!(!out.contains(hidden), "{hidden} in {out}");
        }
        assert!(
            out.contains("fn f<'a>()"),
            "a lifetime is not a literal: {out}"
        );
        assert_eq!(out.lines().count(), src.lines().count());
    }

    #[test]
    fn test_items_are_cut_and_test_module_files_named() {
        let src = "use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n#[cfg(test)]\nmod more;\n#[cfg(test)]\nuse crate::c;\n#[cfg(any(test, feature = \"x\"))]\npub mod testing;\n";
        let (code, mods, _) = cut_test_items(&blank_comments_and_literals(src));
        assert!(code.contains("crate::a"));
        assert!(
            !code.contains("crate::b") && !code.contains("crate::c"),
            "{code}"
        );
        assert!(
            code.contains("pub mod testing"),
            "any(test, …) is not test-only"
        );
        assert_eq!(mods, vec!["more".to_string()]);
    }

    #[test]
    fn lines_of_test_modules_do_not_count() {
        let src = "fn a() {}\n// a comment counts\n\n#[cfg(test)]\nmod tests {\n    // nor this\n\n    #[test]\n    fn t() {}\n}\n";
        assert_eq!(lines_outside_tests(src), 3);
    }
}
