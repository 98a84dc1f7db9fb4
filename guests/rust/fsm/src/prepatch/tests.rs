use std::collections::BTreeMap;

use super::*;
use crate::machine::{Level, Out};

/// A repository in a map: `git` answers from it, `worktree-at` makes a fork
/// path, the pytest script answers with `report` (or nothing).
#[derive(Default)]
struct Repo {
    diff: String,
    untracked: Vec<&'static str>,
    files: BTreeMap<String, String>,
    at_base: BTreeMap<String, String>,
    /// The junit report each pytest run writes, in turn.
    reports: Vec<String>,
    fork_fails: Option<&'static str>,
    calls: Vec<String>,
    removed: Vec<String>,
    copied: Vec<String>,
    cwd: Option<String>,
}

impl World for Repo {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        let (stdout, code) = match req {
            Request::Exec { argv, .. } => {
                self.calls.push(argv[1..].join(" "));
                match argv[1].as_str() {
                    "merge-base" => ("abc123\n".to_string(), 0),
                    "diff" => (self.diff.clone(), 0),
                    "ls-files" => (self.untracked.iter().map(|p| format!("{p}\0")).collect(), 0),
                    "show" => {
                        let path = argv[2].split_once(':').unwrap().1;
                        match self.at_base.get(path) {
                            Some(t) => (t.clone(), 0),
                            None => (String::new(), 128),
                        }
                    }
                    _ => return Err("denied".into()),
                }
            }
            Request::Script { source, .. } => {
                self.calls.push(format!("in {:?}: {source}", self.cwd));
                let report = if self.reports.is_empty() {
                    None
                } else {
                    Some(self.reports.remove(0))
                };
                let name = if source.contains("prepatch-retry.xml") {
                    "prepatch-retry.xml"
                } else {
                    "prepatch.xml"
                };
                if let (Some(r), Some(wt)) = (report, &self.cwd) {
                    self.files.insert(format!("{wt}/.prepatch-run/{name}"), r);
                }
                (String::new(), 0)
            }
            Request::Prompt { .. } => return Err("no".into()),
        };
        Ok(Out {
            exit_code: Some(code),
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
        if self
            .files
            .keys()
            .any(|k| k.starts_with(&format!("{path}/")))
        {
            return Err(format!("`{path}` is a directory; use list-dir"));
        }
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| format!("`{path}` does not exist in the workspace"))
    }
    fn worktree_at(&mut self, revision: &str, copy: &[String]) -> Result<String, String> {
        if let Some(e) = self.fork_fails {
            return Err(e.into());
        }
        self.calls.push(format!("worktree-at {revision}"));
        self.copied = copy.to_vec();
        let wt = ".worktrees/prepatch-1".to_string();
        self.files
            .insert(format!("{wt}/src/pkg.py"), "x = 1\n".into());
        Ok(wt)
    }
    fn worktree_remove(&mut self, path: &str) -> Result<(), String> {
        self.removed.push(path.into());
        Ok(())
    }
    fn set_cwd(&mut self, cwd: Option<String>) -> Option<String> {
        std::mem::replace(&mut self.cwd, cwd)
    }
}

fn enabled() -> Project {
    Project {
        prepatch_enabled: true,
        ..Project::default()
    }
}

fn report(cases: &[(&str, &str)]) -> String {
    let body: String = cases
        .iter()
        .map(|(name, inner)| {
            format!(
                "<testcase classname=\"tests.test_a\" name=\"{name}\" file=\"tests/test_a.py\">{inner}</testcase>"
            )
        })
        .collect();
    format!("<?xml version=\"1.0\"?><testsuites><testsuite>{body}</testsuite></testsuites>")
}

/// A step that adds `test_new` to a file whose `test_old` it leaves alone.
fn added_test() -> Repo {
    let mut r = Repo {
        diff: "+++ b/tests/test_a.py\n@@ -1,2 +1,5 @@\n def test_old():\n     assert 1\n+\n+def test_new():\n+    assert 1\n"
            .into(),
        ..Default::default()
    };
    r.files.insert(
        "tests/test_a.py".into(),
        "def test_old():\n    assert 1\n\ndef test_new():\n    assert 1\n".into(),
    );
    r.at_base.insert(
        "tests/test_a.py".into(),
        "def test_old():\n    assert 1\n".into(),
    );
    r
}

fn run(r: &mut Repo, memo: &mut BTreeMap<(String, String), Value>) -> Result<Checked, Trouble> {
    check(r, &enabled(), Policy::Fail, "s", true, memo)
}

#[test]
fn skipped_as_little_loops_skips_and_no_command_runs() {
    let mut w = Repo::default();
    let mut memo = BTreeMap::new();
    let r = check(
        &mut w,
        &Project::default(),
        Policy::Fail,
        "s",
        false,
        &mut memo,
    )
    .unwrap();
    assert_eq!(
        r.record["skipped_reason"],
        "guarded state's action did not succeed (red path)"
    );
    let r = check(
        &mut w,
        &Project::default(),
        Policy::Fail,
        "s",
        true,
        &mut memo,
    )
    .unwrap();
    assert_eq!(
        r.record["skipped_reason"],
        "pre-patch check skipped by config"
    );
    assert!(w.calls.is_empty());
    // Enabled, but only conftest and non-test files touched: no candidates, no fork.
    let mut w = Repo {
        diff: "+++ b/src/a.py\n@@ -0,0 +1 @@\n+x\n+++ b/tests/conftest.py\n@@ -0,0 +1 @@\n+y\n"
            .into(),
        untracked: vec!["notes.txt", "tests/test_empty.py"],
        ..Default::default()
    };
    w.files.insert("tests/conftest.py".into(), "y\n".into());
    w.files.insert("tests/test_empty.py".into(), String::new());
    let r = run(&mut w, &mut memo).unwrap();
    assert_eq!(r.record["skipped_reason"], "no candidate tests identified");
    assert!(!w.calls.iter().any(|c| c.starts_with("worktree-at")));
}

#[test]
fn a_new_test_that_passes_before_the_patch_is_flagged_and_the_fork_goes() {
    let mut w = added_test();
    w.reports = vec![report(&[("test_new", "")]), report(&[("test_new", "")])];
    let mut memo = BTreeMap::new();
    let r = run(&mut w, &mut memo).unwrap();
    assert!(r.flagged, "{}", r.record);
    assert_eq!(r.record["verdict"], "flagged");
    assert_eq!(r.record["base_ref"], "abc123");
    assert_eq!(w.copied, ["tests/test_a.py"]);
    assert_eq!(w.removed, [".worktrees/prepatch-1"]);
    let pytest: Vec<&String> = w.calls.iter().filter(|c| c.contains("pytest")).collect();
    assert_eq!(pytest.len(), 2, "{pytest:?}");
    assert!(
        pytest[0].contains("in Some(\".worktrees/prepatch-1\")")
            && pytest[0]
                .contains("tests/test_a.py::test_new --junit-xml=.prepatch-run/prepatch.xml"),
        "{}",
        pytest[0]
    );
    // The same diff again: the memo answers, nothing runs.
    let calls = w.calls.len();
    let r = run(&mut w, &mut memo).unwrap();
    assert!(r.flagged && r.record["memoized"] == true);
    assert!(!w.calls[calls..].iter().any(|c| c.contains("pytest")));
}

#[test]
fn a_new_test_that_fails_before_the_patch_or_a_flaky_one_is_not_flagged() {
    let mut memo = BTreeMap::new();
    let mut w = added_test();
    w.reports = vec![report(&[("test_new", "<failure message=\"x\"/>")])];
    assert_eq!(run(&mut w, &mut memo).unwrap().record["verdict"], "clean");
    let mut memo = BTreeMap::new();
    let mut w = added_test();
    w.reports = vec![
        report(&[("test_new", "")]),
        report(&[("test_new", "<failure message=\"x\"/>")]),
    ];
    assert_eq!(run(&mut w, &mut memo).unwrap().record["verdict"], "clean");
    // No report at all (pytest missing): every candidate is an error, not a pass.
    let mut memo = BTreeMap::new();
    let mut w = added_test();
    assert_eq!(run(&mut w, &mut memo).unwrap().record["verdict"], "clean");
}

#[test]
fn what_little_loops_raises_on_ends_the_run_and_what_loopbox_cannot_do_is_refused() {
    let mut memo = BTreeMap::new();
    let mut w = added_test();
    w.fork_fails = Some("unavailable: `main` does not resolve to a commit");
    assert!(
        matches!(run(&mut w, &mut memo), Err(Trouble::Raised(m)) if m.contains("does not resolve"))
    );
    let mut w = added_test();
    w.fork_fails = Some("denied: git worktrees are not granted");
    assert!(matches!(run(&mut w, &mut memo), Err(Trouble::Refused(_))));
    // `src_dir` missing in the fork.
    let mut w = added_test();
    let p = Project {
        src_dir: "lib/".into(),
        ..enabled()
    };
    let e = check(&mut w, &p, Policy::Warn, "s", true, &mut memo).unwrap_err();
    assert!(
        matches!(&e, Trouble::Raised(m) if m.contains("src_dir 'lib/' not found")),
        "{e:?}"
    );
    assert_eq!(w.removed.len(), 1, "the fork goes whatever happens");
    let bad = Project {
        base_branch: "--output=/tmp/x".into(),
        ..enabled()
    };
    let e = check(&mut added_test(), &bad, Policy::Fail, "s", true, &mut memo).unwrap_err();
    assert!(matches!(e, Trouble::Refused(m) if m.contains("as an option")));
}

#[test]
fn the_policy_is_the_states_then_the_loops() {
    assert_eq!(effective(None, Some("fail")), Some(Policy::Fail));
    assert_eq!(effective(Some("warn"), Some("fail")), Some(Policy::Warn));
    assert_eq!(effective(Some("nope"), None), None);
}
