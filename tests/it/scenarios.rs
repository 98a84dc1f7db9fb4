//! The scenarios shipped beside the example policies and in the `loopbox new`
//! templates, run as `loopbox test` runs them (`loopbox::scenario`) against
//! the guests built from source: one scenario file tests the Rust, Python and
//! JavaScript builds of the same policy alike.

use std::path::{Path, PathBuf};

use loopbox::scenario::{self, Verdict};
use loopbox_tests::{load, runtime};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every scenario under `dir` against the guest `build` (loaded once per
/// process, shared with the other tests), or the policy each names.
async fn verdicts(dir: &Path, build: Option<&str>) -> Vec<(PathBuf, Verdict)> {
    let files = scenario::find(dir).unwrap();
    assert!(!files.is_empty(), "no scenarios under {}", dir.display());
    let mut out = Vec::new();
    for f in files {
        let o = match build {
            Some(name) => scenario::run_file_with(&f, runtime(), &load(name)).await,
            None => scenario::run_file(&f, runtime(), None).await,
        };
        out.push((f, o.verdict));
    }
    out
}

async fn all_pass(dir: &str, policy: Option<&str>) {
    for (file, verdict) in verdicts(&repo().join(dir), policy).await {
        assert_eq!(verdict, Verdict::Pass, "{}", file.display());
    }
}

#[tokio::test]
async fn ralphs_scenario_passes_against_the_rust_python_and_javascript_builds() {
    all_pass("guests/rust/ralph", None).await;
    for build in ["ralph", "ralph-py", "ralph-js"] {
        all_pass("guests/rust/ralph", Some(build)).await;
    }
    all_pass("guests/python/ralph", Some("ralph-py")).await;
    all_pass("guests/js/ralph", Some("ralph-js")).await;
}

/// A wrong expectation fails the same way whichever language the policy is in.
#[tokio::test]
async fn a_wrong_expectation_fails_alike_in_every_language() {
    let text = std::fs::read_to_string(repo().join("guests/rust/ralph/ralph.scenario.yaml"))
        .unwrap()
        .replace("iteration: 2", "iteration: 3");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wrong.scenario.yaml");
    std::fs::write(&file, text).unwrap();
    let mut seen = Vec::new();
    for build in ["ralph", "ralph-py", "ralph-js"] {
        let mut v = verdicts(dir.path(), Some(build)).await;
        seen.push(v.remove(0).1);
    }
    let Verdict::Fail { line, message } = &seen[0] else {
        panic!("{:?}", seen[0])
    };
    assert_eq!(*line, 23);
    assert!(
        message
            .starts_with("the state at the end differs: at `.ralph.iteration`: expected 3, got 2"),
        "{message}"
    );
    assert!(seen.iter().all(|v| *v == seen[0]), "{seen:?}");
}

#[tokio::test]
async fn the_example_policies_scenarios_pass() {
    all_pass("guests/rust/todo-enforcer", Some("todo-enforcer")).await;
    all_pass("guests/rust/todo-enforcer", Some("todo-enforcer-js")).await;
    all_pass("guests/js/todo-enforcer", Some("todo-enforcer-js")).await;
    all_pass("guests/rust/fix-forward", Some("fix-forward")).await;
    all_pass("guests/js/tool-gate", Some("tool-gate-js")).await;
    all_pass("guests/js/green-tests-ts", Some("green-tests-ts")).await;
    all_pass("guests/python/ccw", Some("ccw-py")).await;
}

/// Each `loopbox new` template ships scenarios; they pass against
/// green-tests-ts, the example that does what the templates do, and until the
/// project is built they say to build it.
#[tokio::test]
async fn every_templates_scenarios_pass_and_ask_for_a_build_first() {
    use loopbox::project::Language;
    for (language, lang) in [
        ("rust", Language::Rust),
        ("python", Language::Python),
        ("js", Language::Js),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let project = loopbox::project::scaffold::create(dir.path(), "green", lang).unwrap();
        let found = scenario::find(&project).unwrap();
        assert_eq!(found.len(), 2, "{language}: {found:?}");
        for (file, v) in verdicts(&project, None).await {
            let Verdict::Error(e) = v else {
                panic!("{language}: {}: {v:?}", file.display())
            };
            assert!(
                e.contains("is not built yet: run `loopbox build` there first"),
                "{e}"
            );
        }
        for (file, v) in verdicts(&project, Some("green-tests-ts")).await {
            assert_eq!(v, Verdict::Pass, "{language}: {}", file.display());
        }
    }
}
