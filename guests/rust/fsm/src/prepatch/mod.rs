//! `prepatch_check`: would the tests a green step added or changed have
//! passed before the patch too? As little-loops 1.156 answers it
//! (`fsm/executor.py` `_check_prepatch_check`, `_prepatch_step_diff`;
//! `prepatch_check.py` `run_prepatch_check`; `worktree_utils.py`
//! `setup_prepatch_worktree`):
//!
//! - a red step (the action failed), or `prepatch_check.enabled` not true in
//!   the project's `.ll/ll-config.json` (false by default): `skipped`;
//! - the base is `git merge-base HEAD <parallel.base_branch>` (the branch
//!   itself when that fails); the step's diff is `git diff <base>` with each
//!   untracked file as added; the tests it touched are its candidates
//!   ([`candidates`]): none is `skipped`;
//! - else the host makes a detached worktree at the base with the touched
//!   test files copied in as they are now (`actions.worktree-at`), the
//!   project's `src_dir` must exist there, and the candidates run there with
//!   `python -m pytest ... --junit-xml` (a granted script, in the sandbox),
//!   those that pass once more; the report is read through the workspace
//!   ([`junit`]) and each outcome flagged as little-loops flags it. A newly
//!   added test that passes before the patch is a hard flag: the verdict is
//!   `flagged`, and under `fail` the loop goes to its failure terminal.
//!
//! What little-loops would raise on (the base does not resolve, `src_dir`
//! is missing in the fork) ends the run in error under any policy, as the
//! exception ends little-loops' run. What loopbox cannot do here (a command
//! not granted) gives no verdict: an error under `fail`, a warning else.
//! Evidence is kept for the run by (diff hash, base), as little-loops'
//! memo, so an unchanged diff is not tested again.

mod candidates;
mod junit;
mod pyfuncs;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::machine::{Request, World};
use crate::tamper::{Project, matches_pattern};
use candidates::Candidate;

const GIT_TIMEOUT_MS: u64 = 30_000;
/// The pre-patch pytest runs' reports, inside the worktree.
const RUN_DIR: &str = ".prepatch-run";

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

/// Why the check gave no verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Trouble {
    /// What loopbox could not do (a command or the worktree not granted):
    /// no verdict, an error only under `fail`.
    Refused(String),
    /// What little-loops raises on: the run ends in error whatever the policy.
    Raised(String),
}

/// What the check found: the record little-loops appends to
/// `context._prepatch_check`, and whether it is `flagged`.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub record: Value,
    pub flagged: bool,
}

/// Run the check after a guarded state's action. `memo` is the run's evidence
/// by (diff hash, base).
pub fn check(
    world: &mut dyn World,
    project: &Project,
    policy: Policy,
    state: &str,
    succeeded: bool,
    memo: &mut std::collections::BTreeMap<(String, String), Value>,
) -> Result<Checked, Trouble> {
    let skipped = |reason: &str| Checked {
        record: json!({"state": state, "policy": policy.name(), "verdict": "skipped",
               "skipped_reason": reason, "memoized": false}),
        flagged: false,
    };
    if !succeeded {
        return Ok(skipped("guarded state's action did not succeed (red path)"));
    }
    if !project.prepatch_enabled {
        return Ok(skipped("pre-patch check skipped by config"));
    }
    let branch = &project.base_branch;
    if branch.starts_with('-') {
        return Err(Trouble::Refused(format!(
            "`parallel.base_branch` is `{branch}`, which git would read as an option"
        )));
    }
    let base = git(world, &["merge-base", "HEAD", branch])?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| branch.clone());
    let diff = step_diff(world, project, &base)?;
    let key = (hex(&Sha256::digest(diff.text.as_bytes())), base.clone());
    let (evidence, memoized) = match memo.get(&key) {
        Some(e) => (e.clone(), true),
        None => {
            let e = evidence(world, project, &base, &diff)?;
            memo.insert(key, e.clone());
            (e, false)
        }
    };
    let flagged = evidence["verdict"] == "flagged";
    Ok(Checked {
        record: json!({
            "state": state, "policy": policy.name(), "verdict": evidence["verdict"],
            "base_ref": base, "base_source": "merge-base",
            "skipped_reason": evidence["skipped_reason"], "memoized": memoized,
        }),
        flagged,
    })
}

/// The step's diff against the base: its text (for the memo) and its touched
/// lines per file, tracked files first, then untracked ones (all added).
struct StepDiff {
    text: String,
    touched: Vec<(String, Vec<u32>)>,
}

fn step_diff(world: &mut dyn World, project: &Project, base: &str) -> Result<StepDiff, Trouble> {
    let tracked = git(world, &["diff", base, "--"])?.unwrap_or_default();
    let mut touched = candidates::touched(&tracked);
    let mut text = tracked;
    let untracked = git(world, &["ls-files", "-z", "--others", "--exclude-standard"])?;
    for p in untracked
        .as_deref()
        .unwrap_or("")
        .split('\0')
        .filter(|p| !p.is_empty())
    {
        text.push_str(&format!("\n+++ b/{p}\n"));
        // Only a test file's lines matter; an unreadable one has none.
        if !is_test(p, project) {
            continue;
        }
        if let Ok(content) = world.read(p) {
            let n = content.lines().count() as u32;
            if n > 0 && !touched.iter().any(|(q, _)| q == p) {
                touched.push((p.to_string(), (1..=n).collect()));
            }
            text.push_str(&hex(&Sha256::digest(content.as_bytes())));
        }
    }
    Ok(StepDiff { text, touched })
}

/// `run_prepatch_check`'s evidence for a diff: `{"verdict", "skipped_reason", "outcomes"}`.
fn evidence(
    world: &mut dyn World,
    project: &Project,
    base: &str,
    diff: &StepDiff,
) -> Result<Value, Trouble> {
    let test_paths: Vec<&(String, Vec<u32>)> = diff
        .touched
        .iter()
        .filter(|(p, _)| is_test(p, project))
        .collect();
    let mut cands: Vec<Candidate> = Vec::new();
    let mut copy: Vec<String> = Vec::new();
    for (path, lines) in &test_paths {
        // `abs_path.is_file()`: what cannot be read as a file is not there.
        let Ok(after) = world.read(path) else {
            continue;
        };
        copy.push(path.clone());
        if path.rsplit('/').next() == Some("conftest.py") || lines.is_empty() {
            continue;
        }
        let before = git(world, &["show", &format!("{base}:{path}")])?;
        cands.extend(candidates::for_file(path, lines, &after, before.as_deref()));
    }
    if cands.is_empty() {
        return Ok(
            json!({"verdict": "skipped", "skipped_reason": "no candidate tests identified", "outcomes": []}),
        );
    }
    let wt = world.worktree_at(base, &copy).map_err(|e| {
        if e.starts_with("unavailable: ") {
            Trouble::Raised(format!("Failed to create the pre-patch worktree: {e}"))
        } else {
            Trouble::Refused(format!("the pre-patch worktree was not made: {e}"))
        }
    })?;
    let ran = in_fork(world, project, base, &wt, &cands);
    let _ = world.worktree_remove(&wt);
    ran
}

/// The candidates run in the fork `wt`, twice for those that pass.
fn in_fork(
    world: &mut dyn World,
    project: &Project,
    base: &str,
    wt: &str,
    cands: &[Candidate],
) -> Result<Value, Trouble> {
    let src_dir = project.src_dir.trim_end_matches('/');
    if !src_dir.is_empty()
        && let Err(e) = world.read(&format!("{wt}/{src_dir}"))
        && e.contains("does not exist")
    {
        return Err(Trouble::Raised(format!(
            "src_dir '{}' not found in pre-patch worktree forked at '{base}'",
            project.src_dir
        )));
    }
    let mut targets: Vec<&str> = cands.iter().map(|c| c.nodeid.as_str()).collect();
    targets.sort();
    targets.dedup();
    let (first, timed_out) = pytest(world, project, wt, &targets, "prepatch.xml")?;
    let passing: Vec<&str> = first
        .iter()
        .filter(|(_, (c, _))| c == "pass")
        .map(|(n, _)| n.as_str())
        .collect();
    let retry = if passing.is_empty() {
        junit::Results::new()
    } else {
        pytest(world, project, wt, &passing, "prepatch-retry.xml")?.0
    };
    let (default_cat, default_err) = if timed_out {
        ("timeout", None)
    } else {
        ("error", Some("infrastructure"))
    };
    let mut outcomes = Vec::new();
    for c in cands {
        let matches: Vec<(String, (String, Option<String>))> = if c.attribution == "file-fallback" {
            let prefix = format!("{}::", c.file);
            let m: Vec<_> = first
                .iter()
                .filter(|(n, _)| n.starts_with(&prefix))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect();
            if m.is_empty() {
                vec![(
                    c.nodeid.clone(),
                    (default_cat.into(), default_err.map(String::from)),
                )]
            } else {
                m
            }
        } else {
            let r = first
                .get(&c.nodeid)
                .cloned()
                .unwrap_or((default_cat.into(), default_err.map(String::from)));
            vec![(c.nodeid.clone(), r)]
        };
        for (nodeid, (cat, err)) in matches {
            // `_apply_retry`: a pass not confirmed on retry is flaky.
            let (cat, err) = match retry.get(&nodeid) {
                Some((rc, re)) if cat == "pass" && rc != "pass" => {
                    ("flaky".to_string(), re.clone())
                }
                _ => (cat, err),
            };
            let (flag, reason) = flag(c.added, &cat, project.modified_hard);
            outcomes.push(json!({
                "nodeid": nodeid, "file": c.file, "added": c.added, "category": cat,
                "error_kind": err, "flag": flag, "flag_reason": reason,
            }));
        }
    }
    let flagged = outcomes.iter().any(|o| o["flag"] == "hard");
    Ok(json!({
        "verdict": if flagged { "flagged" } else { "clean" },
        "skipped_reason": null,
        "outcomes": outcomes,
    }))
}

/// `_assign_flag` (the base is never known to be dirty here: no issue id's
/// dequeue record).
fn flag(added: bool, category: &str, modified_hard: bool) -> (&'static str, Option<&'static str>) {
    match category {
        "flaky" => (
            "soft",
            Some("pre-patch pass was not confirmed on retry (flaky)"),
        ),
        "pass" if added => ("hard", Some("newly added test passed pre-patch")),
        "pass" if modified_hard => (
            "hard",
            Some("modified test passed pre-patch (modified_hard enabled)"),
        ),
        "pass" => ("soft", Some("modified test passed pre-patch")),
        _ => ("none", None),
    }
}

/// `_run_pytest` in the fork, then its report: the results, and whether it timed out.
fn pytest(
    world: &mut dyn World,
    project: &Project,
    wt: &str,
    targets: &[&str],
    report: &str,
) -> Result<(junit::Results, bool), Trouble> {
    use crate::interp::shell_quote;
    let words: Vec<String> = targets.iter().map(|t| shell_quote(t)).collect();
    let source = format!(
        "mkdir -p {RUN_DIR} && PYTHONPATH=\"$PWD\"/{} exec python -m pytest {} --junit-xml={RUN_DIR}/{report} -q",
        shell_quote(&project.src_dir),
        words.join(" ")
    );
    let before = world.set_cwd(Some(wt.to_string()));
    let out = world.act(Request::Script {
        source,
        timeout_ms: Some(project.prepatch_timeout_s.saturating_mul(1000)),
    });
    world.set_cwd(before);
    let out = out.map_err(|e| {
        Trouble::Refused(format!("pytest was not run in the pre-patch worktree: {e}"))
    })?;
    let results = world
        .read(&format!("{wt}/{RUN_DIR}/{report}"))
        .map(|xml| junit::results(&xml))
        .unwrap_or_default();
    Ok((results, out.timed_out))
}

fn git(world: &mut dyn World, args: &[&str]) -> Result<Option<String>, Trouble> {
    let argv: Vec<String> = std::iter::once("git")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let shown = argv[..argv.len().min(3)].join(" ");
    let out = world
        .act(Request::Exec {
            argv,
            timeout_ms: Some(GIT_TIMEOUT_MS),
            stdin: None,
        })
        .map_err(|e| {
            Trouble::Refused(format!(
                "`{shown}` was not run: {e}; `loopbox validate --grants` lists what it needs"
            ))
        })?;
    if out.timed_out || out.truncated {
        return Err(Trouble::Refused(format!(
            "`{shown}` {}",
            if out.timed_out {
                "timed out"
            } else {
                "printed more than `limits.output_bytes` allows"
            }
        )));
    }
    Ok((out.code() == 0).then_some(out.stdout))
}

fn is_test(p: &str, project: &Project) -> bool {
    !p.is_empty()
        && project
            .test_patterns
            .iter()
            .any(|pat| matches_pattern(p, pat))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
