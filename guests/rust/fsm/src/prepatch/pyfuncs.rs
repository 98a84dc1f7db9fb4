//! little-loops' `extract_test_functions` (`test_tamper_guard.py`): the
//! top-level `def test*` / `async def test*` functions of a Python file, each
//! with the lines `ast` gives it (`lineno`, the `def` line; `end_lineno`, the
//! last line of its body). loopbox has no Python parser in the sandbox, so
//! this reads the file's layout as Python's tokenizer would for that purpose:
//! strings (triple-quoted ones across lines), brackets and backslash
//! continuations keep a line from starting a statement; a statement that
//! starts at column 0 ends the function before it. `None` where `ast.parse`
//! would fail as far as layout can tell (a string or bracket left open).

use std::collections::BTreeMap;

/// Each top-level test function's name and `(first, last)` line, 1-based.
pub fn test_functions(src: &str) -> Option<BTreeMap<String, (u32, u32)>> {
    let mut out = BTreeMap::new();
    let mut open: Option<(String, u32)> = None;
    // The last line of a statement seen in the open function's body.
    let mut last_stmt = 0u32;
    let mut depth = 0i32;
    let mut in_triple: Option<&str> = None;
    let mut continued = false;
    for (i, line) in src.lines().enumerate() {
        let n = i as u32 + 1;
        let starts_statement = in_triple.is_none() && depth == 0 && !continued;
        let trimmed = line.trim_start();
        let code = !trimmed.is_empty() && !trimmed.starts_with('#');
        if starts_statement && code && !line.starts_with([' ', '\t']) {
            // A top-level statement: it ends the open function.
            if let Some((name, first)) = open.take() {
                out.insert(name, (first, last_stmt.max(first)));
            }
            if let Some(name) = def_name(trimmed) {
                open = Some((name, n));
            }
        }
        if code || in_triple.is_some() || continued || depth > 0 {
            last_stmt = n;
        }
        // Track strings, brackets and continuations to the end of the line.
        let (t, d, c) = scan(line, in_triple, depth)?;
        in_triple = t;
        depth = d;
        continued = c;
    }
    if in_triple.is_some() || depth != 0 {
        return None;
    }
    if let Some((name, first)) = open {
        out.insert(name, (first, last_stmt.max(first)));
    }
    Some(out)
}

/// `test_x` for `def test_x(` or `async def test_x(`.
fn def_name(stmt: &str) -> Option<String> {
    let rest = stmt
        .strip_prefix("async ")
        .map(str::trim_start)
        .unwrap_or(stmt);
    let rest = rest.strip_prefix("def ")?.trim_start();
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    name.starts_with("test").then_some(name)
}

/// Read one line from the state the last left: still in a triple-quoted
/// string (which quote), the bracket depth, and whether a `\` continues it.
/// `None` on a closing bracket with none open.
fn scan(
    line: &str,
    mut triple: Option<&'static str>,
    mut depth: i32,
) -> Option<(Option<&'static str>, i32, bool)> {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if let Some(q) = triple {
            match line[i..].find(q) {
                Some(j) if !escaped(b, i + j) => {
                    i += j + 3;
                    triple = None;
                }
                Some(j) => i += j + 1,
                None => return Some((triple, depth, false)),
            }
            continue;
        }
        match b[i] {
            b'#' => break,
            b'"' | b'\'' => {
                let q = if b[i] == b'"' { "\"\"\"" } else { "'''" };
                if line[i..].starts_with(q) {
                    triple = Some(q);
                    i += 3;
                    continue;
                }
                // A one-line string: to its closing quote, or the line's end.
                let quote = b[i];
                i += 1;
                while i < b.len() && b[i] != quote {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let continued = triple.is_none() && line.trim_end().ends_with('\\');
    Some((triple, depth, continued))
}

/// Whether the byte at `at` is escaped by an odd run of backslashes.
fn escaped(b: &[u8], at: usize) -> bool {
    let mut n = 0;
    let mut i = at;
    while i > 0 && b[i - 1] == b'\\' {
        n += 1;
        i -= 1;
    }
    n % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_tests_get_the_lines_ast_gives_them() {
        let src = "\
import pytest


def helper():
    return 1


@pytest.mark.slow
def test_a():
    x = (1,
         2)
    assert x

    # a comment inside
# a comment at column 0 does not end it
    assert helper()


async def test_b(): pass
class TestC:
    def test_method(self):
        pass
def test_d():
    s = \"\"\"
def test_not_a_function():
\"\"\"
    assert s
";
        let f = test_functions(src).unwrap();
        assert_eq!(f.get("test_a"), Some(&(9, 16)));
        assert_eq!(f.get("test_b"), Some(&(19, 19)));
        assert_eq!(f.get("test_d"), Some(&(23, 27)));
        assert!(!f.contains_key("helper") && !f.contains_key("test_method"));
        assert!(!f.contains_key("test_not_a_function"));
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn what_cannot_parse_is_none() {
        assert_eq!(test_functions("def test_a():\n    x = (1,\n"), None);
        assert_eq!(test_functions("s = '''\nnever closed\n"), None);
        assert_eq!(test_functions("x = )\n"), None);
        assert_eq!(test_functions("").unwrap().len(), 0);
    }
}
