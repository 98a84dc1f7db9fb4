//! `prepatch_check`: would the tests a green step added or changed have
//! passed before the patch too? little-loops 1.156 (`fsm/executor.py`
//! `_effective_prepatch_check_policy`, `_check_prepatch_check`,
//! `_prepatch_step_diff`; `prepatch_check.py` `run_prepatch_check`,
//! `collect_candidates`) runs them with pytest in a git worktree forked at
//! the base. What loopbox does of it:
//!
//! - a red step (the action failed), or `prepatch_check.enabled` not true in
//!   the project's `.ll/ll-config.json` (little-loops' default is false):
//!   `skipped`, as in little-loops, with the same reason, and no command run;
//! - enabled, and the diff against the base (`git merge-base HEAD
//!   <parallel.base_branch>`) touches no test file with added lines:
//!   `skipped`, "no candidate tests identified", as in little-loops;
//! - enabled with candidates: loopbox does not run pytest against a
//!   pre-patch tree. Under `fail` that ends the run with an error that says
//!   so (never a pass); under `warn`/`allow`, whose verdict routes nothing in
//!   little-loops either, a warning.

use serde_json::{Value, json};

use crate::machine::{Request, World};
use crate::tamper::{Project, matches_pattern};

const GIT_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Fail,
    Warn,
    Allow,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fail => "fail",
            Policy::Warn => "warn",
            Policy::Allow => "allow",
        }
    }
}

/// The state's value when set, else the loop's; an unknown value is no
/// check (`state.prepatch_check or self.fsm.prepatch_check`).
pub fn effective(state: Option<&str>, lp: Option<&str>) -> Option<Policy> {
    match state.filter(|s| !s.is_empty()).or(lp)? {
        "fail" => Some(Policy::Fail),
        "warn" => Some(Policy::Warn),
        "allow" => Some(Policy::Allow),
        _ => None,
    }
}

/// What the check found: the record little-loops appends to
/// `context._prepatch_check`, and `Err` when it cannot give a verdict.
pub fn check(
    world: &mut dyn World,
    project: &Project,
    policy: Policy,
    state: &str,
    succeeded: bool,
) -> Result<Value, String> {
    let skipped = |reason: &str| {
        json!({"state": state, "policy": policy.name(), "verdict": "skipped",
               "skipped_reason": reason, "memoized": false})
    };
    if !succeeded {
        return Ok(skipped("guarded state's action did not succeed (red path)"));
    }
    if !project.prepatch_enabled {
        return Ok(skipped("pre-patch check skipped by config"));
    }
    let candidates = candidates(world, project)?;
    if candidates.is_empty() {
        return Ok(skipped("no candidate tests identified"));
    }
    Err(format!(
        "`prepatch_check.enabled` is true in the project's little-loops config and the step touched {} test file(s) ({}); loopbox does not run tests against a pre-patch tree: set `prepatch_check.enabled` to false in `.ll/ll-config.json`, or drop `prepatch_check` from the state",
        candidates.len(),
        candidates
            .iter()
            .take(3)
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn git(world: &mut dyn World, args: &[&str]) -> Result<Option<String>, String> {
    let argv: Vec<String> = std::iter::once("git")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let shown = argv[..argv.len().min(3)].join(" ");
    let out = world
        .act(Request::Exec {
            argv,
            timeout_ms: Some(GIT_TIMEOUT_MS),
        })
        .map_err(|e| {
            format!("prepatch_check: `{shown}` was not run: {e}; `loopbox validate --grants` lists what it needs")
        })?;
    if out.timed_out || out.truncated {
        return Err(format!(
            "prepatch_check: `{shown}` {}",
            if out.timed_out {
                "timed out"
            } else {
                "printed more than `limits.output_bytes` allows"
            }
        ));
    }
    Ok((out.code() == 0).then_some(out.stdout))
}

/// Test files (not `conftest.py`) the step diff adds lines to: the tracked
/// diff against the base, and untracked files with content
/// (`collect_candidates` makes at least one candidate of each).
fn candidates(world: &mut dyn World, project: &Project) -> Result<Vec<String>, String> {
    let branch = &project.base_branch;
    if branch.starts_with('-') {
        return Err(format!(
            "prepatch_check: `parallel.base_branch` is `{branch}`, which git would read as an option"
        ));
    }
    let base = git(world, &["merge-base", "HEAD", branch])?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| branch.clone());
    let mut touched: Vec<String> = Vec::new();
    if let Some(diff) = git(world, &["diff", &base, "--"])? {
        let mut current: Option<String> = None;
        for line in diff.lines() {
            if let Some(p) = line.strip_prefix("+++ ") {
                let p = p.strip_prefix("b/").unwrap_or(p).trim();
                current = (p != "/dev/null").then(|| p.to_string());
            } else if line.starts_with('+')
                && let Some(p) = current.take()
            {
                touched.push(p);
            }
        }
    }
    if let Some(list) = git(world, &["ls-files", "-z", "--others", "--exclude-standard"])? {
        for p in list.split('\0').filter(|p| is_candidate(p, project)) {
            // An empty new file has no `+` line; one too large to read has.
            if world.read(p).map(|t| !t.is_empty()).unwrap_or(true) {
                touched.push(p.to_string());
            }
        }
    }
    touched.retain(|p| is_candidate(p, project));
    touched.sort();
    touched.dedup();
    Ok(touched)
}

/// A test file that can be a pytest target (`conftest.py` never is).
fn is_candidate(p: &str, project: &Project) -> bool {
    !p.is_empty()
        && p.rsplit('/').next() != Some("conftest.py")
        && project
            .test_patterns
            .iter()
            .any(|pat| matches_pattern(p, pat))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Level, Out};

    struct Git {
        diff: String,
        untracked: Vec<(&'static str, &'static str)>,
        calls: Vec<Vec<String>>,
    }

    impl World for Git {
        fn act(&mut self, req: Request) -> Result<Out, String> {
            let Request::Exec { argv, .. } = req else {
                return Err("no".into());
            };
            self.calls.push(argv.clone());
            let stdout = match argv[1].as_str() {
                "merge-base" => "abc123\n".to_string(),
                "diff" => self.diff.clone(),
                _ => self
                    .untracked
                    .iter()
                    .map(|(p, _)| format!("{p}\0"))
                    .collect(),
            };
            Ok(Out {
                exit_code: Some(0),
                stdout,
                ..Default::default()
            })
        }
        fn log(&mut self, _: Level, _: &str) {}
        fn progress(&mut self, _: &str) {}
        fn now_ms(&mut self) -> u64 {
            0
        }
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.untracked
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, t)| t.to_string())
                .ok_or_else(|| "does not exist".into())
        }
    }

    fn git(diff: &str, untracked: Vec<(&'static str, &'static str)>) -> Git {
        Git {
            diff: diff.into(),
            untracked,
            calls: Vec::new(),
        }
    }

    #[test]
    fn skipped_as_little_loops_skips_and_no_command_runs() {
        let p = Project::default();
        let mut w = git("", vec![]);
        let r = check(&mut w, &p, Policy::Fail, "s", false).unwrap();
        assert_eq!(
            r["skipped_reason"],
            "guarded state's action did not succeed (red path)"
        );
        let r = check(&mut w, &p, Policy::Fail, "s", true).unwrap();
        assert_eq!(r["skipped_reason"], "pre-patch check skipped by config");
        assert!(w.calls.is_empty());
    }

    #[test]
    fn enabled_with_touched_tests_is_an_error_never_a_pass() {
        let p = Project {
            prepatch_enabled: true,
            ..Project::default()
        };
        let mut w = git(
            "+++ b/src/a.py\n+x\n+++ b/tests/conftest.py\n+y\n",
            vec![("notes.txt", "x"), ("tests/test_empty.py", "")],
        );
        let r = check(&mut w, &p, Policy::Fail, "s", true).unwrap();
        assert_eq!(r["skipped_reason"], "no candidate tests identified");
        assert_eq!(w.calls[1], ["git", "diff", "abc123", "--"]);
        let mut w = git("+++ b/tests/test_a.py\n@@ -1 +1 @@\n+assert 1\n", vec![]);
        let e = check(&mut w, &p, Policy::Fail, "s", true).unwrap_err();
        assert!(
            e.contains("`tests/test_a.py`") && e.contains("enabled"),
            "{e}"
        );
        let bad = Project {
            base_branch: "--output=/tmp/x".into(),
            ..p
        };
        let e = check(&mut git("", vec![]), &bad, Policy::Fail, "s", true).unwrap_err();
        assert!(e.contains("as an option"), "{e}");
    }

    #[test]
    fn the_policy_is_the_states_then_the_loops() {
        assert_eq!(effective(None, Some("fail")), Some(Policy::Fail));
        assert_eq!(effective(Some("warn"), Some("fail")), Some(Policy::Warn));
        assert_eq!(effective(Some("nope"), None), None);
    }
}
