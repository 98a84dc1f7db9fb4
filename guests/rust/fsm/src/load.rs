//! Loading a loop: its YAML, the files it imports (read through whatever
//! [`Files`] the caller has: the workspace capability inside the sandbox, the
//! workspace directory for `loopbox validate`), then the static checks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::check;
use crate::problem::{Problem, Problems};
use crate::resolve;
use crate::spec::{self, Loop};
use crate::yaml::{self, Node};

/// The most files one loop may import, transitively.
pub const MAX_IMPORTS: usize = 64;
/// How deep sub-loops may nest, when checked and when run.
pub const MAX_SUB_LOOP_DEPTH: usize = 8;

/// Where imported files come from. Paths are relative to the workspace root.
pub trait Files {
    fn read(&mut self, path: &str) -> Result<String, String>;
}

/// Parse, put together and check the loop written at `path`
/// (workspace-relative, used to find the files it names and in messages).
/// All problems come back together. Sub-loops it names by a fixed name are
/// loaded and checked too.
pub fn load(path: &str, text: &str, files: &mut dyn Files) -> Result<Loop, Vec<Problem>> {
    let mut subs = SubLoops {
        stack: vec![path.to_string()],
        checked: BTreeMap::new(),
    };
    load_in(path, text, files, Some(&mut subs))
}

/// Sub-loops being checked: the chain from the top loop (a loop on it is
/// recursion, allowed), and each one checked already with its parameters
/// (`None` when it had problems, reported once), so a loop that names the
/// same child from many states, at many levels, loads it once.
struct SubLoops {
    stack: Vec<String>,
    checked: BTreeMap<String, Option<Vec<crate::spec::Param>>>,
}

/// Load a loop a sub-loop state names, as [`load`] does, without checking
/// its own sub-loops (each is loaded when it runs).
pub fn load_child(path: &str, text: &str, files: &mut dyn Files) -> Result<Loop, Vec<Problem>> {
    load_in(path, text, files, None)
}

fn load_in(
    path: &str,
    text: &str,
    files: &mut dyn Files,
    subs: Option<&mut SubLoops>,
) -> Result<Loop, Vec<Problem>> {
    let mut p = Problems::new(path);
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            p.at(e.line, format!("not valid YAML: {}", e.message));
            return Err(p.list);
        }
    };
    if root.as_map().is_none() {
        p.at(
            root.line,
            format!(
                "a loop must be a mapping with `name`, `initial` and `states`, not {}",
                root.kind()
            ),
        );
        return Err(p.list);
    }
    let mut root = resolve::inherit(root, path, files, &mut p);
    resolve::expand_flow(&mut root, &mut p);
    if yaml::get(&root, "states").is_none() {
        p.at(0, "the loop has no `states` (or `flow`)");
    }

    let (libs, mut fragments) = read_imports(path, &root, files, &mut p);
    if let Some((_, local)) = resolve::take(&mut root, "fragments") {
        resolve::collect_fragments(Some(&local), &mut fragments, &mut p);
    }
    resolve::expand_fragments(&mut root, &fragments, &mut p);
    let Some(mut lp) = spec::read_loop(&root, &mut p) else {
        return Err(p.list);
    };
    for mut node in libs {
        resolve::expand_fragments(&mut node, &fragments, &mut p);
        let spec::Imported { states, context } = spec::read_import(&node, &mut p);
        for state in states {
            if let Some(old) = lp.states.iter().find(|s| s.name == state.name) {
                p.at(
                    state.line,
                    format!(
                        "state `{}` is already defined in {} (line {})",
                        state.name,
                        old.file,
                        crate::problem::line_of(old.line)
                    ),
                );
            } else {
                lp.states.push(state);
            }
        }
        for (k, v) in context {
            lp.context.entry(k).or_insert(v); // the importing loop's own values win
        }
    }
    lp.files = p.files.clone();
    let mut problems = p.list;
    let mut notes = p.notes;
    problems.extend(check::check(&lp, &mut notes));
    notes.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    notes.dedup();
    lp.notes = notes;
    if let Some(subs) = subs {
        problems.extend(check_sub_loops(&lp, files, subs));
    }
    problems.dedup();
    if problems.is_empty() {
        Ok(lp)
    } else {
        Err(problems)
    }
}

/// Every file `import:` names, transitively (each once): their trees, and
/// the fragments they define (later files win). A malformed `import:` list
/// is a problem of the file it is in.
fn read_imports(
    path: &str,
    root: &Node,
    files: &mut dyn Files,
    p: &mut Problems,
) -> (Vec<Node>, resolve::Fragments) {
    let mut queue: VecDeque<(String, String, u32)> =
        spec::read_imports(yaml::get(root, "import"), p)
            .into_iter()
            .map(|(i, line)| (path.to_string(), i, line))
            .collect();
    let mut seen = BTreeSet::from([normalize(path).unwrap_or_else(|| path.to_string())]);
    let (mut libs, mut fragments) = (Vec::new(), Vec::new());
    while let Some((from, import, line)) = queue.pop_front() {
        // Beside the importing file, then in each directory above it (little-loops
        // falls back to its built-in loops directory, where `lib/` lives).
        let candidates = resolve::candidates(&from, std::slice::from_ref(&import));
        if candidates.is_empty() {
            p.at(line, format!("import `{import}` leaves the workspace; imports are read through the workspace and must stay inside it"));
            continue;
        }
        if candidates.iter().any(|c| seen.contains(c)) {
            continue; // imported already (or an import cycle): its states are in once
        }
        let (target, text) = match resolve::read_first(files, &candidates) {
            Ok(found) => found,
            Err(e) if resolve::is_missing(&e) => {
                p.at(
                    line,
                    format!(
                        "cannot import `{import}`: no {} in the workspace",
                        candidates.join(" or ")
                    ),
                );
                continue;
            }
            Err(e) => {
                p.at(line, format!("cannot import `{import}`: {e}"));
                continue;
            }
        };
        seen.insert(target.clone());
        if seen.len() > MAX_IMPORTS + 1 {
            p.at(line, format!("more than {MAX_IMPORTS} imported files"));
            break;
        }
        let Some(node) = resolve::parse_file(&target, &text, p) else {
            continue;
        };
        resolve::collect_fragments(yaml::get(&node, "fragments"), &mut fragments, p);
        queue.extend(
            spec::read_imports(yaml::get(&node, "import"), p)
                .into_iter()
                .map(|(i, l)| (target.clone(), i, l)),
        );
        libs.push(node);
    }
    (libs, fragments)
}

/// Sub-loops named by a fixed name must exist, load, and be given their
/// required parameters. A loop already being checked (recursion) is not
/// checked again.
fn check_sub_loops(lp: &Loop, files: &mut dyn Files, subs: &mut SubLoops) -> Vec<Problem> {
    let mut out = Vec::new();
    for s in &lp.states {
        let Some(sub) = &s.sub else { continue };
        if sub.name.contains("${") {
            continue; // chosen at run time
        }
        let at = |m: String| Problem::at(&lp.files, sub.line, format!("state `{}`: {m}", s.name));
        if subs.stack.len() > MAX_SUB_LOOP_DEPTH {
            out.push(at(format!(
                "sub-loops nest deeper than {MAX_SUB_LOOP_DEPTH}"
            )));
            continue;
        }
        let (path, text) =
            match resolve::read_first(files, &resolve::loop_candidates(&lp.file, &sub.name)) {
                Ok(found) => found,
                Err(e) => {
                    out.push(at(format!("sub-loop `{}` cannot be read ({e})", sub.name)));
                    continue;
                }
            };
        if subs.stack.contains(&path) {
            continue;
        }
        let params = match subs.checked.get(&path) {
            Some(known) => known.clone(),
            None => {
                subs.stack.push(path.clone());
                let params = match load_in(&path, &text, files, Some(subs)) {
                    Ok(child) => Some(child.parameters),
                    Err(problems) => {
                        out.push(at(format!(
                            "sub-loop `{}` ({path}) has {} problem(s), listed with its file",
                            sub.name,
                            problems.len()
                        )));
                        out.extend(problems);
                        None
                    }
                };
                subs.stack.pop();
                subs.checked.insert(path.clone(), params.clone());
                params
            }
        };
        for param in params.iter().flatten().filter(|p| p.required) {
            if !sub
                .with
                .as_ref()
                .is_some_and(|w| w.contains_key(&param.name))
            {
                out.push(at(format!(
                    "sub-loop `{}` needs parameter `{}`: bind it under `with:`",
                    sub.name, param.name
                )));
            }
        }
    }
    out
}

/// `import` relative to the directory of `from`, normalized; `None` when it
/// is absolute or climbs out of the workspace.
pub fn resolve_path(from: &str, import: &str) -> Option<String> {
    if import.starts_with('/') || from.starts_with('/') {
        return None;
    }
    let dir = match from.rfind('/') {
        Some(i) => &from[..i],
        None => "",
    };
    normalize(&format!("{dir}/{import}"))
}

fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    struct Mem(BTreeMap<&'static str, &'static str>);

    impl Files for Mem {
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.0
                .get(path)
                .map(|s| s.to_string())
                .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
        }
    }

    #[test]
    fn imports_resolve_beside_the_importing_file() {
        assert_eq!(
            resolve_path("loops/a.yaml", "common.yaml").as_deref(),
            Some("loops/common.yaml")
        );
        assert_eq!(
            resolve_path("loops/a.yaml", "../shared/b.yaml").as_deref(),
            Some("shared/b.yaml")
        );
        assert_eq!(resolve_path("a.yaml", "../b.yaml"), None);
        assert_eq!(resolve_path("a.yaml", "/etc/passwd"), None);
    }

    #[test]
    fn imported_states_and_context_merge_and_clashes_are_named() {
        let mut files = Mem(BTreeMap::from([
            (
                "loops/common.yaml",
                "context:\n  retries: 2\n  who: import\nstates:\n  done:\n    terminal: true\n",
            ),
            ("loops/clash.yaml", "states:\n  start:\n    next: done\n"),
        ]));
        let main = "name: m\ninitial: start\nimport: [common.yaml]\ncontext:\n  who: main\nstates:\n  start:\n    action: echo\n    next: done\n";
        let lp = load("loops/m.yaml", main, &mut files).unwrap();
        assert_eq!(
            lp.states
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["start", "done"]
        );
        assert_eq!(lp.context["who"], "main");
        assert_eq!(lp.context["retries"], 2);

        let main = main.replace("[common.yaml]", "[common.yaml, clash.yaml, missing.yaml]");
        let problems = load("loops/m.yaml", &main, &mut files).unwrap_err();
        let text = crate::problem::render(&problems);
        assert!(
            text.contains(
                "loops/clash.yaml:2: state `start` is already defined in loops/m.yaml (line 7)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "loops/m.yaml:3: cannot import `missing.yaml`: no loops/missing.yaml or missing.yaml in the workspace"
            ),
            "{text}"
        );
    }

    #[test]
    fn an_import_cycle_loads_each_file_once() {
        let mut files = Mem(BTreeMap::from([(
            "b.yaml",
            "import: a.yaml\nstates:\n  done:\n    terminal: true\n",
        )]));
        let main = "name: a\ninitial: s\nimport: b.yaml\nstates:\n  s:\n    next: done\n";
        assert_eq!(load("a.yaml", main, &mut files).unwrap().states.len(), 2);
    }

    fn problems_of(main: &str, files: &[(&'static str, &'static str)]) -> String {
        let mut files = Mem(files.iter().copied().collect());
        match load("loops/m.yaml", main, &mut files) {
            Ok(_) => String::new(),
            Err(p) => crate::problem::render(&p),
        }
    }

    #[test]
    fn fragments_come_from_libraries_found_beside_or_above_the_loop() {
        let lib = "fragments:\n  sh:\n    action_type: shell\n    evaluate:\n      type: exit_code\n    parameters:\n      word:\n        default: hi\n";
        let mut files = Mem(BTreeMap::from([("loops/lib/common.yaml", lib)]));
        // From a loop in loops/oracles/, `lib/common.yaml` is found in loops/.
        let main = "name: m\ninitial: a\nimport: [lib/common.yaml]\nstates:\n  a:\n    fragment: sh\n    action: echo ${param.word}\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n";
        let lp = load("loops/oracles/m.yaml", main, &mut files)
            .unwrap_or_else(|p| panic!("{}", crate::render(&p)));
        let a = &lp.states[0];
        assert!(matches!(
            a.evaluate.as_ref().map(|e| &e.kind),
            Some(crate::spec::EvalKind::ExitCode { .. })
        ));
        let f = a.fragment.as_ref().unwrap();
        assert_eq!(
            (f.name.as_str(), f.parameters[0].default.clone()),
            ("sh", Some(serde_json::json!("hi")))
        );
        // An unknown fragment names the ones there are; `${param.x}` must be bound.
        let bad = main.replace("fragment: sh", "fragment: nope");
        let text = match load("loops/oracles/m.yaml", &bad, &mut files) {
            Err(p) => crate::render(&p),
            Ok(_) => panic!("accepted"),
        };
        assert!(
            text.contains("fragment `nope` is not defined (fragments: sh)"),
            "{text}"
        );
    }

    #[test]
    fn from_merges_the_parent_and_refuses_cycles_and_escapes() {
        let parent = "name: p\ninitial: a\nmax_steps: 7\nstates:\n  a:\n    action: exit 1\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n";
        let mut files = Mem(BTreeMap::from([("loops/p.yaml", parent)]));
        let child = "from: p\nname: c\nstates:\n  a:\n    action: exit 0\n";
        let lp = load("loops/c.yaml", child, &mut files).unwrap();
        assert_eq!(
            (lp.name.as_str(), lp.max_steps, lp.initial.state.as_str()),
            ("c", 7, "a")
        );
        assert_eq!(
            lp.states[0].action,
            Some(crate::spec::Action::Shell("exit 0".into()))
        );

        let looped = problems_of("from: m\nname: m\n", &[("loops/m.yaml", "from: m\n")]);
        assert!(
            looped.contains("`from` makes a cycle: loops/m.yaml -> loops/m.yaml"),
            "{looped}"
        );
        let out = problems_of("from: ../../../etc/passwd\nname: m\n", &[]);
        assert!(out.contains("cannot read the parent loop"), "{out}");
        let missing = problems_of("from: nobody\nname: m\n", &[]);
        assert!(
            missing.contains("`from: nobody`: cannot read the parent loop (nobody.yaml:"),
            "{missing}"
        );
    }

    #[test]
    fn sub_loops_are_checked_where_their_names_are_fixed() {
        let child = "name: k\ninitial: a\nparameters:\n  word:\n    required: true\nstates:\n  a:\n    terminal: true\n";
        let main = "name: m\ninitial: s\nstates:\n  s:\n    loop: k\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n";
        let text = problems_of(main, &[("loops/k.yaml", child)]);
        assert!(
            text.contains("sub-loop `k` needs parameter `word`: bind it under `with:`"),
            "{text}"
        );
        let bound = main.replace("    loop: k\n", "    loop: k\n    with:\n      word: hi\n");
        assert_eq!(problems_of(&bound, &[("loops/k.yaml", child)]), "");
        // A loop that names itself is checked once (it may recurse at run time, bounded).
        let recursive = main.replace("loop: k", "loop: m");
        assert_eq!(problems_of(&recursive, &[("loops/m.yaml", "")]), "");
        // A name chosen at run time is not looked up; a missing one is named.
        assert_eq!(
            problems_of(&main.replace("loop: k", "loop: ${context.x}"), &[]),
            ""
        );
        let text = problems_of(main, &[]);
        assert!(text.contains("sub-loop `k` cannot be read"), "{text}");
        let text = problems_of(&main.replace("loop: k", "loop: ../../x"), &[]);
        assert!(
            text.contains("sub-loop `../../x` cannot be read (the name leaves the workspace)"),
            "{text}"
        );
    }

    #[test]
    fn fragment_expansion_is_bounded() {
        // A fragment of ~20k values used by 30 states would be 600k values.
        let big: String = (0..10_000).map(|i| format!("      k{i}: v\n")).collect();
        let lib: &'static str = Box::leak(
            format!("fragments:\n  big:\n    action: x\n    meta:\n{big}").into_boxed_str(),
        );
        let states: String = (0..30)
            .map(|i| format!("  s{i}:\n    fragment: big\n    next: done\n"))
            .collect();
        let main = format!(
            "name: m\ninitial: s0\nimport: [lib.yaml]\nstates:\n{states}  done:\n    terminal: true\n"
        );
        let text = problems_of(&main, &[("loops/lib.yaml", lib)]);
        assert!(
            text.contains("fragments expand to more than 400000 values in all"),
            "{text}"
        );
    }

    #[test]
    fn little_loops_metadata_is_read_and_noted() {
        let main = "name: m\ninitial: a\nscope: [src/]\non_handoff: spawn\ncategory: x\nartifact_versioning: true\nstates:\n  a:\n    action: echo\n    next: done\n    pruning_profile: lean\n  done:\n    terminal: true\n";
        let lp = load("m.yaml", main, &mut Mem(BTreeMap::new())).unwrap();
        let notes: Vec<String> = lp.notes.iter().map(|n| n.to_string()).collect();
        assert_eq!(notes.len(), 4, "{notes:#?}");
        assert!(
            notes[0].starts_with("m.yaml:3: `scope` is read and not acted on"),
            "{notes:#?}"
        );
        assert!(
            notes[3]
                .starts_with("m.yaml:11: state `a`: `pruning_profile` is read and not acted on"),
            "{notes:#?}"
        );
    }

    #[test]
    fn a_wide_tree_of_sub_loops_is_checked_once_per_file() {
        // Ten states at each of nine levels naming the next level: 10^8 loads
        // if each name were loaded again.
        struct Counting(BTreeMap<String, String>, usize);
        impl Files for Counting {
            fn read(&mut self, path: &str) -> Result<String, String> {
                self.1 += 1;
                self.0
                    .get(path)
                    .cloned()
                    .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
            }
        }
        let level = |i: usize| {
            let states: String = (0..10)
                .map(|s| {
                    format!(
                        "  s{s}:\n    loop: l{}\n    on_yes: done\n    on_no: done\n",
                        i + 1
                    )
                })
                .collect();
            format!("name: l{i}\ninitial: s0\nstates:\n{states}  done:\n    terminal: true\n")
        };
        let mut files = Counting(BTreeMap::new(), 0);
        for i in 1..=8 {
            files.0.insert(format!("l{i}.yaml"), level(i));
        }
        files.0.insert(
            "l9.yaml".into(),
            "name: l9\ninitial: a\nstates:\n  a:\n    terminal: true\n".into(),
        );
        let top = level(0);
        let lp = load("l0.yaml", &top, &mut files);
        // Nesting this deep is a problem of its own, named once per state at the limit.
        let text = match lp {
            Ok(_) => String::new(),
            Err(p) => crate::render(&p),
        };
        assert!(text.contains("sub-loops nest deeper than 8"), "{text}");
        // Each of the 90 states looks its child up (`NAME.fsm.yaml`, then
        // `NAME.yaml`); each file is loaded and checked once.
        assert!(files.1 <= 2 * 90, "{} reads", files.1);
    }

    #[test]
    fn a_from_chain_is_bounded() {
        // p0 <- p1 <- ... <- p20: each names the next as its parent.
        let mut files = BTreeMap::new();
        let texts: Vec<&'static str> = (0..=20)
            .map(|i| &*Box::leak(format!("from: p{}\nname: p{i}\n", i + 1).into_boxed_str()))
            .collect();
        let names: Vec<&'static str> = (0..=20)
            .map(|i| &*Box::leak(format!("loops/p{i}.yaml").into_boxed_str()))
            .collect();
        for (n, t) in names.iter().zip(&texts) {
            files.insert(*n, *t);
        }
        let mut files = Mem(files);
        let text = match load("loops/p0.yaml", texts[0], &mut files) {
            Err(p) => crate::render(&p),
            Ok(_) => panic!("accepted"),
        };
        assert!(
            text.contains(&format!(
                "`from` chains more than {} parents",
                crate::resolve::MAX_PARENTS
            )),
            "{text}"
        );
    }
}
