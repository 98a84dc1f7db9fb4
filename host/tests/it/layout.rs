//! The library's layering. Each file's `crate::`, `super::` and `self::` paths,
//! and the paths of its `use` items that start at one of its child modules
//! (outside comments and `#[cfg(test)]` items), name the modules it uses.
//!
//! - Folder ranks: every top-level module of `host/src` has a rank
//!   ([`RANKS`], written out in docs/architecture.md's map), and a file may use
//!   another top-level module only if that module ranks lower. A `pub use` of a
//!   higher module's item counts like any other use: a re-export does not hide
//!   an upward edge.
//! - No module cycles: the graph of modules has no strongly connected part
//!   bigger than one module. A cycle makes two modules one in all but name.
//! - One run lifecycle: nothing outside `run/` (the command in `bin/`
//!   included) puts a run together or decides what it may do: every front end
//!   goes through `run::lifecycle`'s start and resume, which take the source of
//!   trust as a value ([`ASSEMBLING`]). `Launch::prepare` is private to `run/`,
//!   which the compiler checks.

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
    without_test_modules(out)
}

/// `mods` without the files only tests compile: one its parent declares with
/// `#[cfg(test)] mod NAME;`, and whatever such a file declares in turn.
fn without_test_modules(mut mods: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let test_only: Vec<String> = mods
        .keys()
        .filter(|m| is_test_only(m, &mods))
        .cloned()
        .collect();
    for m in test_only {
        mods.remove(&m);
    }
    mods
}

fn is_test_only(m: &str, mods: &BTreeMap<String, String>) -> bool {
    let Some((parent, name)) = m
        .rsplit_once("::")
        .or_else(|| (!m.is_empty()).then_some(("", m)))
    else {
        return false;
    };
    let Some(text) = mods.get(parent) else {
        return false;
    };
    let declared =
        |t: &str| t.contains(&format!("mod {name};")) || t.contains(&format!("mod {name} {{"));
    (declared(text) && !declared(&code(text))) || is_test_only(parent, mods)
}

/// The code of a file without its comments and its `#[cfg(test)]` items (a
/// test-only function in the middle of a file, or the `tests` module), each
/// replaced by as many empty lines, so line numbers stay those of the file.
fn code(text: &str) -> String {
    let mut body = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        body.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = item_end(item);
        body.extend(std::iter::repeat_n('\n', item[..end].matches('\n').count()));
        rest = &item[end..];
    }
    body.push_str(rest);
    body.lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the item starting at `item` (its attribute first) ends: after its
/// `;` or its closing brace. Braces inside string and char literals and in
/// comments are skipped.
fn item_end(item: &str) -> usize {
    let b = item.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') => {
                i += if b[i + 1] == b'\\' { 3 } else { 2 };
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The path at the start of `rest`: `a::b::c` for `a::b::c`, and `a::b`,
/// `a::c::d` for `a::{b, c::d}` (one level of braces).
fn path_at(rest: &str) -> Vec<String> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let end = rest.find(|c| !is_path(c)).unwrap_or(rest.len());
    let path = rest[..end].trim_end_matches(':');
    if path.is_empty() {
        return vec![];
    }
    let mut out = vec![path.to_string()];
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
    out
}

/// The paths after each `prefix` in `code`, each with the byte offset where it is.
fn paths_after(code: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        out.extend(
            path_at(&code[i + prefix.len()..])
                .into_iter()
                .map(|p| (i, p)),
        );
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

/// One use of another module: the line (1-based), the path as written, the
/// module it reaches.
struct Use {
    line: usize,
    path: String,
    module: String,
}

/// What module `m` (whose source is `text`) uses, in the order written.
fn uses(m: &str, text: &str, mods: &BTreeMap<String, String>) -> Vec<Use> {
    let code = code(text);
    let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
    let within = |base: &str, p: &str| {
        if base.is_empty() {
            p.to_string()
        } else {
            format!("{base}::{p}")
        }
    };
    let mut found: Vec<(usize, String, String)> = vec![];
    for (at, p) in paths_after(&code, "crate::") {
        found.push((at, format!("crate::{p}"), p));
    }
    for (at, p) in paths_after(&code, "super::") {
        found.push((at, format!("super::{p}"), within(parent, &p)));
    }
    for (at, p) in paths_after(&code, "self::") {
        found.push((at, format!("self::{p}"), within(m, &p)));
    }
    // `use child::item;` and `pub use child::item;`: a path from one of the
    // module's own children, which 2018 paths allow without `self::`.
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| !(c.is_whitespace() || c == ')' || c == '{' || c == ';')) {
            continue;
        }
        let start = at + "use ".len();
        for p in path_at(&code[start..]) {
            let first = p.split("::").next().unwrap_or("");
            if !matches!(first, "crate" | "super" | "self") && mods.contains_key(&within(m, first))
            {
                found.push((start, p.clone(), within(m, &p)));
            }
        }
    }
    found.sort();
    found
        .into_iter()
        .filter_map(|(at, path, full)| {
            let module = owner(&full, mods)?;
            // A module's use of itself or of its own ancestors (their items) is no edge.
            let ancestor = module.is_empty() || m.starts_with(&format!("{module}::"));
            (module != m && !ancestor).then(|| Use {
                line: code[..at].matches('\n').count() + 1,
                path,
                module,
            })
        })
        .collect()
}

fn graph(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    mods.iter()
        .map(|(m, text)| {
            let deps = uses(m, text, mods).into_iter().map(|u| u.module).collect();
            (m.clone(), deps)
        })
        .collect()
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

/// The rank of every top-level module of the library, lowest first; the modules
/// of one entry rank the same and may not use each other. The same list, with
/// what each owns, is the map in docs/architecture.md.
const RANKS: &[&[&str]] = &[
    &["files", "spend"],
    &["out"],
    &["error"],
    &["db"],
    &["ui"],
    &["bindings", "telemetry"],
    &["limits"],
    &["runlog"],
    &["journal"],
    &["exec"],
    &["caps"],
    &["dist"],
    &["wasm"],
    &["config"],
    &["loops", "trust"],
    &["run"],
    &["hook", "project"],
    &["scenario"],
    &["serve"],
];

fn rank(top: &str) -> Option<usize> {
    RANKS.iter().position(|r| r.contains(&top))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// Every use of a module that does not rank below the user's, as the message
/// that names it.
fn rank_violations(src: &Path, mods: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = vec![];
    for (m, text) in mods.iter().filter(|(m, _)| !m.is_empty()) {
        let file = module_file(src, m);
        let Some(mine) = rank(top(m)) else {
            out.push(format!(
                "{file}: the top-level module `{}` has no rank: add it to RANKS in host/tests/it/layout.rs and to the map in docs/architecture.md, above every module it uses",
                top(m)
            ));
            continue;
        };
        for u in uses(m, text, mods) {
            let theirs = top(&u.module);
            if theirs == top(m) {
                continue;
            }
            if rank(theirs).is_none_or(|r| r >= mine) {
                out.push(format!(
                    "{file}:{}: `{}` reaches `{}`, but `{}` does not rank below `{}` (see RANKS in host/tests/it/layout.rs): move the item it names down to a module below `{}`, or move this code up to a module above `{theirs}`; a `pub use` in the lower module is an upward edge too",
                    u.line,
                    u.path,
                    u.module,
                    theirs,
                    top(m),
                    top(m),
                ));
            }
        }
    }
    out
}

/// The file of module `m`, relative to the crate (`src/wasm/policy.rs`).
fn module_file(src: &Path, m: &str) -> String {
    let base = m.replace("::", "/");
    let flat = format!("{base}.rs");
    let rel = if src.join(&flat).is_file() {
        flat
    } else {
        format!("{base}/mod.rs")
    };
    format!("src/{rel}")
}

#[test]
fn each_folder_uses_only_folders_ranked_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let found = rank_violations(&src, &mods);
    assert!(
        found.is_empty(),
        "{} uses against the folder ranks:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_rank_check_sees_an_upward_use_and_a_re_export() {
    let mods: BTreeMap<String, String> = [
        ("files", "pub fn read() {}\n"),
        ("db", "use crate::files::read;\n"),
        ("db::rows", "// crate::wasm::x in a comment is no use\npub use crate::wasm::policy::Policy;\n"),
        ("wasm", "mod policy;\npub use policy::Policy;\n"),
        ("wasm::policy", "pub struct Policy;\n#[cfg(test)]\nfn t() { crate::run::go(\"}\"); }\nuse crate::files::read;\n"),
        ("run", "pub fn go() {}\n"),
        ("run::checks", "#[cfg(test)]\nmod tests;\n"),
        ("run::checks::tests", "use crate::scenario::Case;\n"),
        ("nowhere", ""),
    ]
    .into_iter()
    .map(|(m, t)| (m.to_string(), t.to_string()))
    .collect();
    // A file only tests compile (`#[cfg(test)] mod tests;`) is no part of the layering.
    let mods = without_test_modules(mods);
    assert!(!mods.contains_key("run::checks::tests"));
    let found = rank_violations(Path::new("/nonexistent"), &mods);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("src/db/rows/mod.rs:2: `crate::wasm::policy::Policy` reaches `wasm::policy`, but `wasm` does not rank below `db`"), "{}", found[0]);
    assert!(found[1].contains("`nowhere` has no rank"), "{}", found[1]);
    // A test-only item is skipped to its end, and the code after it still counts.
    let after = uses("wasm::policy", &mods["wasm::policy"], &mods);
    assert_eq!(after.len(), 1);
    assert_eq!((after[0].line, after[0].module.as_str()), (4, "files"));
    // `pub use child::Item` is a use of the child.
    assert_eq!(uses("wasm", &mods["wasm"], &mods)[0].module, "wasm::policy");
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

/// What puts a run together, or decides what it may do, by hand: each is
/// `run::lifecycle`'s alone (see the module's doc), with why it is refused.
const ASSEMBLING: &[(&str, &str)] = &[
    (
        "RunContext::new(",
        "a run's context made by hand, under no source of trust",
    ),
    (
        "RunContext::with_access(",
        "a run's context made by hand, under no source of trust",
    ),
    ("Access {", "a run's grants given by hand"),
    ("run::pin::", "a run's grants pinned or held by hand"),
    (".pin()", "a run's grants pinned by hand"),
    (
        ".set_pinned_grants(",
        "a change of a run's grants accepted by hand",
    ),
    (
        ".set_policy_digest(",
        "a change of a run's policy accepted by hand",
    ),
    (
        "driver::drive(",
        "a run driven without the launch that holds it",
    ),
    (
        ".require_discovered(",
        "a config judged outside `run::trust`, where each source of trust is one value",
    ),
];

/// Every `.rs` file under `src` (the command in `bin/` too) but `run/`'s and
/// those only tests compile (`tests.rs`), relative to the crate, with its code.
fn front_ends(src: &Path) -> BTreeMap<String, String> {
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
                if rel != "run" {
                    stack.push(path);
                }
            } else if rel.ends_with(".rs") && !rel.ends_with("tests.rs") {
                out.insert(
                    format!("src/{rel}"),
                    std::fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
    out
}

/// Each use of an [`ASSEMBLING`] call in `files`, as the message that names it.
fn assembling(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = vec![];
    for (file, text) in files {
        let code = code(text);
        for (call, why) in ASSEMBLING {
            for (at, _) in code.match_indices(call) {
                out.push(format!(
                    "{file}:{}: `{call}`: {why}; start or resume the run with `run::lifecycle` instead",
                    code[..at].matches('\n').count() + 1
                ));
            }
        }
    }
    out
}

#[test]
fn nothing_outside_run_puts_a_run_together() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = front_ends(&src);
    // The front ends are seen: the command, the hooks, the server.
    for f in [
        "src/bin/loopbox/cli/run.rs",
        "src/hook/session.rs",
        "src/serve/sched.rs",
        "src/scenario/mod.rs",
    ] {
        assert!(files.contains_key(f), "{f} not found");
    }
    assert!(!files.keys().any(|f| f.starts_with("src/run/")));
    let found = assembling(&files);
    assert!(
        found.is_empty(),
        "{} runs put together outside run/:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_lifecycle_check_sees_a_run_put_together_by_hand() {
    let files: BTreeMap<String, String> = [
        (
            "src/serve/x.rs",
            "// RunContext::new( in a comment is no use\nfn f() {\n    let c = RunContext::with_access(id, c, db, ws, ui, a);\n}\n",
        ),
        (
            "src/bin/loopbox/cli/y.rs",
            "fn g(db: &Db) {\n    loopbox::run::pin::hold(db, id, None, &now, true, \"\")?;\n}\n#[cfg(test)]\nfn t() { db.set_policy_digest(\"r\", \"d\"); }\n",
        ),
    ]
    .into_iter()
    .map(|(f, t)| (f.to_string(), t.to_string()))
    .collect();
    let found = assembling(&files);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("src/bin/loopbox/cli/y.rs:2: `run::pin::`"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with("src/serve/x.rs:3: `RunContext::with_access(`"),
        "{}",
        found[1]
    );
}
