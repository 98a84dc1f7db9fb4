//! Which tests a step's diff added or changed (`prepatch_check.py`
//! `_parse_diff`, `collect_candidates`): the touched lines of each test file,
//! attributed to the top-level test functions around them, or to the whole
//! file when a touched line lies outside every one of them.

use std::collections::BTreeMap;

/// One candidate test (`PrePatchCandidate`).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub nodeid: String,
    pub file: String,
    pub added: bool,
    /// `function`, or `file-fallback` for the whole file.
    pub attribution: &'static str,
}

/// `_parse_diff`: each file a `+++` header names, with the post-patch line
/// numbers of its `+` lines, in the order the diff names them.
pub fn touched(diff: &str) -> Vec<(String, Vec<u32>)> {
    let mut out: Vec<(String, Vec<u32>)> = Vec::new();
    let mut current: Option<usize> = None;
    let mut line_no = 0u32;
    for line in diff.lines() {
        if let Some(p) = line.strip_prefix("+++ ") {
            let p = p.strip_prefix("b/").unwrap_or(p).trim();
            current = if p == "/dev/null" {
                None
            } else {
                Some(match out.iter().position(|(q, _)| q == p) {
                    Some(i) => i,
                    None => {
                        out.push((p.to_string(), Vec::new()));
                        out.len() - 1
                    }
                })
            };
            continue;
        }
        if let Some(h) = line.strip_prefix("@@ -") {
            // `@@ -a[,b] +c[,d] @@`: the post-patch side starts at line c.
            if let Some(start) = h
                .split_once(" +")
                .and_then(|(_, r)| r.split([',', ' ']).next())
                .and_then(|n| n.parse().ok())
            {
                line_no = start;
                continue;
            }
        }
        let Some(i) = current else {
            continue;
        };
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            out[i].1.push(line_no);
            line_no += 1;
        } else if line.starts_with('-') {
            continue;
        } else if line.starts_with(' ') || line.is_empty() {
            line_no += 1;
        }
    }
    out
}

/// `collect_candidates`, for one test file: its touched lines, its text after
/// the patch, and before it (`None`: the file is new).
pub fn for_file(path: &str, lines: &[u32], after: &str, before: Option<&str>) -> Vec<Candidate> {
    let new_file = before.is_none();
    let fallback = || {
        vec![Candidate {
            nodeid: path.to_string(),
            file: path.to_string(),
            added: new_file,
            attribution: "file-fallback",
        }]
    };
    let after_map = super::pyfuncs::test_functions(after);
    let before_map = match before {
        Some(b) => super::pyfuncs::test_functions(b),
        None => Some(BTreeMap::new()),
    };
    let (Some(after_map), Some(before_map)) = (after_map, before_map) else {
        return fallback();
    };
    if after_map.is_empty() {
        return fallback();
    }
    let after_lines: Vec<&str> = after.lines().collect();
    // Blank lines between functions do not make the attribution ambiguous.
    let significant: Vec<u32> = lines
        .iter()
        .copied()
        .filter(|ln| {
            (1..=after_lines.len() as u32).contains(ln)
                && !after_lines[*ln as usize - 1].trim().is_empty()
        })
        .collect();
    let within = |ln: u32, (a, b): (u32, u32)| a <= ln && ln <= b;
    let names: Vec<&String> = after_map
        .iter()
        .filter(|(_, r)| lines.iter().any(|ln| within(*ln, **r)))
        .map(|(n, _)| n)
        .collect();
    let covered = |ln: &u32| names.iter().any(|n| within(*ln, after_map[*n]));
    if names.is_empty() || !significant.iter().all(covered) {
        return fallback();
    }
    names
        .into_iter()
        .map(|n| Candidate {
            nodeid: format!("{path}::{n}"),
            file: path.to_string(),
            added: !before_map.contains_key(n),
            attribution: "function",
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_lines_are_the_post_patch_numbers_of_added_lines() {
        let diff = "\
diff --git a/tests/test_a.py b/tests/test_a.py
--- a/tests/test_a.py
+++ b/tests/test_a.py
@@ -1,3 +1,5 @@
 def test_old():
-    assert 1
+    assert 2
+
+def test_new(): assert 1
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x
";
        assert_eq!(
            touched(diff),
            [("tests/test_a.py".to_string(), vec![2, 3, 4])]
        );
    }

    #[test]
    fn tests_are_attributed_to_functions_or_to_the_file() {
        let before = "def test_old():\n    assert 1\n";
        let after = "def test_old():\n    assert 2\n\ndef test_new():\n    assert 1\n";
        let c = for_file("t/test_a.py", &[2, 3, 4, 5], after, Some(before));
        assert_eq!(
            c.iter()
                .map(|c| (c.nodeid.as_str(), c.added, c.attribution))
                .collect::<Vec<_>>(),
            [
                ("t/test_a.py::test_new", true, "function"),
                ("t/test_a.py::test_old", false, "function")
            ]
        );
        // A touched line outside every test function: the whole file.
        let after = "import os\ndef test_old():\n    assert 2\n";
        let c = for_file("t/test_a.py", &[1, 3], after, Some(before));
        assert_eq!(
            (c[0].nodeid.as_str(), c[0].attribution),
            ("t/test_a.py", "file-fallback")
        );
        // A new file: every candidate is added.
        let c = for_file("t/test_n.py", &[1, 2], "def test_n():\n    pass\n", None);
        assert!(c[0].added && c[0].attribution == "function");
        // A class-based test is not a top-level function.
        let c = for_file(
            "t/test_k.py",
            &[1, 2, 3],
            "class TestK:\n    def test_m(self):\n        pass\n",
            None,
        );
        assert_eq!(c[0].attribution, "file-fallback");
    }
}
