//! little-loops conformance: each loop in `tests/conformance/loops/` runs
//! through `loopbox run` (the real `builtin:fsm` component, real `sh`
//! processes in the sandbox) and must take the path little-loops took and end
//! the way it ended. `tests/conformance/traces.json` holds what little-loops
//! 1.156 did, and `traces-1.167.json` what 1.167 did with the cases of what it
//! changed (issue 46), each recorded by `tests/conformance/record.py` from a
//! fetched copy; loopbox runs each file's cases following that release
//! (`--little-loops`).

use crate::common;

mod answered;
mod real;

pub use answered::{LATE, answered, lines};

use std::path::Path;

use common::*;
use serde_json::Value;

/// The traces of `file`, which must name `release` as the one they were recorded with.
fn traces(file: &str, release: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("tests/conformance").join(file)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["little_loops"], release, "the traces name their version");
    v["traces"].as_array().unwrap().clone()
}

/// What loopbox did: the path, how it ended, and whether it succeeded.
struct Ran {
    path: Vec<String>,
    terminated_by: String,
    success: Option<bool>,
    code: i32,
    stderr: String,
}

fn run(dir: &Path, loop_file: &str, input: Option<&str>, release: &str) -> Ran {
    let file = format!(".loops/{loop_file}");
    let mut args = vec!["run", file.as_str(), "--json", "--little-loops", release];
    if let Some(i) = input {
        args.extend(["--input", i]);
    }
    let o = loopbox(dir, &args);
    let stderr = format!(
        "exit {:?}; stdout: {}; stderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let result: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let data = &result["outcome"]["data"];
    Ran {
        path: data["path"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default(),
        terminated_by: data["terminated_by"]
            .as_str()
            .unwrap_or("refused")
            .to_string(),
        success: result["outcome"]["success"].as_bool(),
        code: code(&o),
        stderr,
    }
}

#[test]
fn loops_take_the_path_little_loops_takes_and_end_the_same_way() {
    let traces = traces("traces.json", "1.156.0");
    assert!(traces.len() >= 20, "{} traces", traces.len());
    same_paths(&traces, "1.156.0");
}

/// What little-loops 1.167 changed or added: `:shell` with a default, the
/// exit-3 abstention, convergence's reference, `idle_timeout`, an approval
/// nobody can answer, and `diff_stall`'s fingerprint; and the corners of its
/// Python dialect (issue 46): `output_json`, `re` patterns, `float()`,
/// `${prev.*}`, big integers, a timeout during the backoff, `${env.*}`,
/// `${messages}`.
#[test]
fn loops_take_the_path_little_loops_1_167_takes() {
    let traces = traces("traces-1.167.json", "1.167.0");
    assert!(traces.len() >= 6, "{} traces", traces.len());
    same_paths(&traces, "1.167.0");
}

fn same_paths(traces: &[Value], release: &str) {
    let mut failures = Vec::new();
    // Answered traces: `answered` gives their answers.
    for t in traces.iter().filter(|t| t["answer"].is_null()) {
        let loop_file = t["loop"].as_str().unwrap();
        let input = t["input"].as_str();
        let dir = conformance_workspace();
        if loop_file == "worktree.yaml" {
            branch_fixture(dir.path());
        }
        fixture_commit(dir.path(), loop_file.trim_end_matches(".yaml"));
        let ran = run(dir.path(), loop_file, input, release);
        let want_path: Vec<String> = t["path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let want_end = t["terminated_by"].as_str().unwrap();
        let ll_code = t["exit_code"].as_i64().unwrap();
        let label = format!("{loop_file} (input {input:?})");
        if want_end == "refused" {
            // little-loops refused to start (exit 1); loopbox refuses too (exit 2, usage).
            if ran.code != 2 || !ran.path.is_empty() {
                failures.push(format!(
                    "{label}: little-loops refused to start; loopbox exited {} with path {:?}\n{}",
                    ran.code, ran.path, ran.stderr
                ));
            }
            continue;
        }
        // A `LOOP_STOP:` line: little-loops shuts the run down (`interrupted`),
        // loopbox ends it (`stopped`); both exit 0.
        let same_end = ran.terminated_by == want_end
            || (want_end == "interrupted" && ran.terminated_by == "stopped");
        if ran.path != want_path || !same_end {
            failures.push(format!(
                "{label}: little-loops went {want_path:?} and ended `{want_end}`; loopbox went {:?} and ended `{}`\n{}",
                ran.path, ran.terminated_by, ran.stderr
            ));
            continue;
        }
        // The same exit code: 0 for a success, 2 for a failure terminal
        // (little-loops' `FAILURE_TERMINAL_EXIT_CODE`), 1 for any other ending.
        let ll_success = ll_code == 0;
        if ran.success != Some(ll_success) || i64::from(ran.code) != ll_code {
            failures.push(format!(
                "{label}: little-loops exited {ll_code}; loopbox exited {} (success {:?})",
                ran.code, ran.success
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} traces differ:\n{}",
        failures.len(),
        traces.len(),
        failures.join("\n")
    );
}

/// The test above must be able to fail: a trace with a path little-loops
/// never took is caught.
#[test]
fn a_different_path_is_caught() {
    let dir = conformance_workspace();
    let ran = run(dir.path(), "next-on-error.yaml", None, "1.156.0");
    assert_eq!(ran.path, ["fails", "passes", "done"], "{}", ran.stderr);
    assert_ne!(ran.path, ["fails", "unreachable_by_next", "done"]);
}
