//! Loading a loop: its YAML, the files it imports (read through whatever
//! [`Files`] the caller has: the workspace capability inside the sandbox, the
//! workspace directory for `loopbox validate`), then the static checks.

use std::collections::{BTreeSet, VecDeque};

use crate::check;
use crate::problem::{Problem, Problems};
use crate::spec::{self, Loop};
use crate::yaml;

/// The most files one loop may import, transitively.
pub const MAX_IMPORTS: usize = 64;

/// Where imported files come from. Paths are relative to the workspace root.
pub trait Files {
    fn read(&mut self, path: &str) -> Result<String, String>;
}

/// Parse, import and check the loop written at `path` (workspace-relative,
/// used for import resolution and messages). All problems come back together.
pub fn load(path: &str, text: &str, files: &mut dyn Files) -> Result<Loop, Vec<Problem>> {
    let mut p = Problems::new(path);
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            p.at(e.line, format!("not valid YAML: {}", e.message));
            return Err(p.list);
        }
    };
    let Some(mut lp) = spec::read_loop(&root, &mut p) else {
        return Err(p.list);
    };
    let mut problems = p.list;

    let mut seen = BTreeSet::from([normalize(path).unwrap_or_else(|| path.to_string())]);
    let mut queue: VecDeque<(String, String, u32)> = lp
        .imports
        .iter()
        .map(|(i, line)| (path.to_string(), i.clone(), *line))
        .collect();
    let mut imported = 0;
    while let Some((from, import, line)) = queue.pop_front() {
        let mut p = Problems::new(&from);
        let Some(target) = resolve(&from, &import) else {
            p.at(line, format!("import `{import}` leaves the workspace; imports are read through the workspace and must stay inside it"));
            problems.extend(p.list);
            continue;
        };
        if !seen.insert(target.clone()) {
            continue; // imported already (or an import cycle): its states are in once
        }
        imported += 1;
        if imported > MAX_IMPORTS {
            p.at(line, format!("more than {MAX_IMPORTS} imported files"));
            problems.extend(p.list);
            break;
        }
        let text = match files.read(&target) {
            Ok(t) => t,
            Err(e) => {
                p.at(line, format!("cannot import `{import}` ({target}): {e}"));
                problems.extend(p.list);
                continue;
            }
        };
        let mut ip = Problems::new(&target);
        match yaml::parse(&text) {
            Err(e) => ip.at(e.line, format!("not valid YAML: {}", e.message)),
            Ok(node) => {
                let spec::Imported {
                    states,
                    context,
                    imports: nested,
                } = spec::read_import(&node, &mut ip);
                for state in states {
                    if let Some(old) = lp.states.iter().find(|s| s.name == state.name) {
                        ip.at(
                            state.line,
                            format!(
                                "state `{}` is already defined in {} (line {})",
                                state.name, old.file, old.line
                            ),
                        );
                    } else {
                        lp.states.push(state);
                    }
                }
                for (k, v) in context {
                    lp.context.entry(k).or_insert(v); // the importing loop's own values win
                }
                queue.extend(nested.into_iter().map(|(i, l)| (target.clone(), i, l)));
            }
        }
        problems.extend(ip.list);
    }

    problems.extend(check::check(&lp));
    if problems.is_empty() {
        Ok(lp)
    } else {
        Err(problems)
    }
}

/// `import` relative to the directory of `from`, normalized; `None` when it
/// is absolute or climbs out of the workspace.
pub fn resolve(from: &str, import: &str) -> Option<String> {
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
                .ok_or_else(|| "no such file".into())
        }
    }

    #[test]
    fn imports_resolve_beside_the_importing_file() {
        assert_eq!(
            resolve("loops/a.yaml", "common.yaml").as_deref(),
            Some("loops/common.yaml")
        );
        assert_eq!(
            resolve("loops/a.yaml", "../shared/b.yaml").as_deref(),
            Some("shared/b.yaml")
        );
        assert_eq!(resolve("a.yaml", "../b.yaml"), None);
        assert_eq!(resolve("a.yaml", "/etc/passwd"), None);
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
                "loops/m.yaml:3: cannot import `missing.yaml` (loops/missing.yaml): no such file"
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
}
