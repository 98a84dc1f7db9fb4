//! The library's modules depend on each other without cycles: each file's
//! `crate::` and `super::` paths (outside comments and its tests) name the
//! modules it uses, and the graph they make has no strongly connected part
//! bigger than one module. A cycle makes two modules one in all but name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`wasm::policy`) to its source file, for every library file.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if path.is_dir() {
                if rel != "bin" {
                    stack.push(path);
                }
                continue;
            }
            let Some(stem) = rel.strip_suffix(".rs") else {
                continue;
            };
            let stem = stem.strip_suffix("/mod").unwrap_or(stem);
            let name = if stem == "lib" {
                String::new()
            } else {
                stem.replace('/', "::")
            };
            out.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The code of a file without its comments and its `#[cfg(test)]` part.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or("");
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `prefix` in `code`: `a::b::c` for `crate::a::b::c`, and
/// `a::b`, `a::c::d` for `crate::a::{b, c::d}` (one level of braces).
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let is_path = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':';
    let mut out = vec![];
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        let end = rest.find(|c| !is_path(c)).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(':');
        if path.is_empty() {
            continue;
        }
        out.push(path.to_string());
        if let Some(group) = rest[end..].strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let item = item.trim();
                let item: String = item.chars().take_while(|c| is_path(*c)).collect();
                let item = item.trim_end_matches(':');
                if !item.is_empty() && item != "self" {
                    out.push(format!("{path}::{item}"));
                }
            }
        }
    }
    out
}

/// The longest known module that `path` starts with.
fn owner(path: &str, mods: &BTreeMap<String, String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| mods.contains_key(m))
}

fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (m, text) in mods {
        let code = code(text);
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let mut deps = BTreeSet::new();
        for p in paths_after(&code, "crate::") {
            deps.extend(owner(&p, mods));
        }
        for p in paths_after(&code, "super::") {
            let full = if parent.is_empty() {
                p
            } else {
                format!("{parent}::{p}")
            };
            deps.extend(owner(&full, mods));
        }
        // A module's use of its own ancestors (their items) is not a dependency edge.
        deps.retain(|d| d != m && !d.is_empty() && !m.starts_with(&format!("{d}::")));
        g.insert(m.clone(), deps);
    }
    g
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, v: &'g str) {
        let i = w.index.len();
        w.index.insert(v, i);
        w.low.insert(v, i);
        w.stack.push(v);
        for d in w.g.get(v).into_iter().flatten() {
            let d = d.as_str();
            if !w.index.contains_key(d) {
                visit(w, d);
                let l = w.low[d].min(w.low[v]);
                w.low.insert(v, l);
            } else if w.stack.contains(&d) {
                let l = w.index[d].min(w.low[v]);
                w.low.insert(v, l);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().position(|s| *s == v).unwrap();
            let part: Vec<String> = w.stack.drain(at..).map(str::to_string).collect();
            if part.len() > 1 {
                w.found.push(part);
            }
        }
    }
    let mut w = Walk {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        found: vec![],
    };
    for v in g.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found
}

#[test]
fn the_library_has_no_module_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(
        mods.len() > 40,
        "found only {} modules in {}",
        mods.len(),
        src.display()
    );
    let g = graph(&mods);
    // The graph is real: the edges this layout is built around are seen.
    assert!(
        g["wasm::instance"].contains("caps::actions"),
        "{:?}",
        g["wasm::instance"]
    );
    assert!(
        g["db::events"].contains("db::journal"),
        "{:?}",
        g["db::events"]
    );
    assert_eq!(cycles(&g), Vec::<Vec<String>>::new(), "module cycles");
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    let mut found = cycles(&g);
    found[0].sort();
    assert_eq!(found, vec![vec!["a", "b", "c"]]);
}
