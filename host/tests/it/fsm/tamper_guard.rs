//! Issue 32: `tamper_guard` and `prepatch_check` run sandboxed, from granted
//! `git` and `sha256sum` commands. The guard fails closed: without its
//! grants, or against a test file swapped for a link out of the workspace,
//! the run goes to the failure terminal; a test file named like a flag
//! stays a name; `validate --grants` lists what the guards need.

use std::path::Path;
use std::process::Command;

use super::*;

const GRANTS: &str = "[shell]\nscripts = true\nallow = [[\"git\", \"ls-files\"], [\"git\", \"diff\"], [\"sha256sum\"]]\n";

/// A git repository with one committed test file, and the loop.
fn repo(config: &str, loop_yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("tests")).unwrap();
    std::fs::write(d.join("tests/test_a.py"), "def test_a():\n    assert 1\n").unwrap();
    std::fs::write(d.join("l.yaml"), loop_yaml).unwrap();
    std::fs::write(d.join("loopbox.toml"), config).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "tests"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "base",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(d)
            .status()
            .unwrap();
        assert!(ok.success(), "git {args:?}");
    }
    dir
}

fn guarded(action: &str) -> String {
    format!(
        "name: g\ninitial: work\ntamper_guard: fail\nstates:\n  work:\n    action: '{action}'\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n  failed:\n    terminal: true\n"
    )
}

fn run(dir: &Path) -> (Vec<String>, String) {
    let o = loopbox(dir, &["run", "l.yaml", "--json"]);
    let result = json_of(&o);
    (path_of(&result), log_of(dir, &result))
}

#[test]
fn an_edit_with_its_mtime_put_back_or_a_link_out_goes_to_the_failure_terminal() {
    // Content, not time: the edit is seen though the mtime is restored.
    let dir = repo(
        GRANTS,
        &guarded(
            "T=$(stat -c %Y tests/test_a.py); echo pass > tests/test_a.py; touch -d @$T tests/test_a.py",
        ),
    );
    let (path, log) = run(dir.path());
    assert_eq!(path, ["work", "failed"], "{log}");
    assert!(log.contains("`tests/test_a.py` modified"), "{log}");

    // A test file swapped for a link out of the workspace.
    let dir = repo(GRANTS, &guarded("ln -sf /etc/hostname tests/test_a.py"));
    let (path, log) = run(dir.path());
    assert_eq!(path, ["work", "failed"], "{log}");

    // A clean state passes, and a file that is not a test is no finding.
    let dir = repo(GRANTS, &guarded("echo x > notes.txt"));
    let (path, log) = run(dir.path());
    assert_eq!(path, ["work", "done"], "{log}");
}

#[test]
fn without_its_grants_the_guard_is_a_finding_never_a_pass() {
    let dir = repo("[shell]\nscripts = true\n", &guarded("echo untouched"));
    let (path, log) = run(dir.path());
    assert_eq!(path, ["work", "failed"], "{log}");
    assert!(
        log.contains("the guard could not check") && log.contains("validate --grants"),
        "{log}"
    );
    let v = loopbox(dir.path(), &["validate", "l.yaml", "--grants"]);
    let out = text(&v.stdout) + &text(&v.stderr);
    for need in [
        "missing  shell.allow [\"git\", \"ls-files\"]",
        "missing  shell.allow [\"git\", \"diff\"]",
        "missing  shell.allow [\"sha256sum\"]",
    ] {
        assert!(out.contains(need), "{need}: {out}");
    }
}

#[test]
fn a_test_file_named_like_a_flag_is_hashed_as_a_name() {
    let dir = repo(GRANTS, &guarded("echo weaker > ./-c_test.py"));
    std::fs::create_dir_all(dir.path().join(".ll")).unwrap();
    std::fs::write(
        dir.path().join(".ll/ll-config.json"),
        r#"{"project": {"test_patterns": ["*_test.py"]}}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("-c_test.py"), "assert 1\n").unwrap();
    let (path, log) = run(dir.path());
    assert_eq!(path, ["work", "failed"], "{log}");
    assert!(log.contains("`-c_test.py` modified"), "{log}");
    assert!(log.contains("sha256sum -z -- -c_test.py"), "{log}");
}

#[test]
fn a_conftest_the_step_gitignores_is_still_seen() {
    // A root conftest.py that skips every test, hidden from `--exclude-standard`,
    // with the `.gitignore` that hides it hiding itself too.
    let dir = repo(
        GRANTS,
        &guarded(
            "printf \"import pytest\\\\npytestmark = pytest.mark.skip\\\\n\" > conftest.py; printf \"conftest.py\\\\n.gitignore\\\\n\" >> .gitignore",
        ),
    );
    let (path, log) = run(dir.path());
    assert!(dir.path().join("conftest.py").is_file(), "{log}");
    assert_eq!(path, ["work", "failed"], "{log}");
    assert!(log.contains("`conftest.py` added"), "{log}");
}
