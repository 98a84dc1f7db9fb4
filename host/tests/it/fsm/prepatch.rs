//! Issue 32: `prepatch_check` in a pre-patch tree, end to end with a real
//! pytest: the host forks a detached worktree at the base with the new tests
//! copied in, pytest runs there in the sandbox, its junit report is read
//! through the workspace, and a new test that passes before the patch is
//! flagged (the failure terminal under `fail`); one that cannot pass before
//! it is clean. The fork is gone afterwards.

use std::path::Path;
use std::process::Command;

use super::*;

fn config() -> String {
    format!(
        "[shell]\nscripts = true\npath = \"{}:/usr/local/bin:/usr/bin:/bin\"\nallow = [[\"git\", \"merge-base\"], [\"git\", \"diff\"], [\"git\", \"ls-files\"], [\"git\", \"show\"]]\n\n[worktree]\nallow = true\n",
        python_with_pytest().display()
    )
}

/// A repository on `main`: a package in `src/`, a test, pytest writing junit
/// reports with `file` attributes (xunit1), and the pre-patch check enabled.
fn repo(action: &str, junit_family: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |rel: &str, text: &str| {
        std::fs::create_dir_all(d.join(rel).parent().unwrap()).unwrap();
        std::fs::write(d.join(rel), text).unwrap();
    };
    write("src/pkg.py", "def old():\n    return 1\n");
    write(
        "tests/test_old.py",
        "from pkg import old\n\ndef test_old():\n    assert old() == 1\n",
    );
    write(
        "pytest.ini",
        &format!("[pytest]\njunit_family = {junit_family}\npythonpath = src\n"),
    );
    write(
        ".ll/ll-config.json",
        "{\"prepatch_check\": {\"enabled\": true}}\n",
    );
    write(
        "l.yaml",
        &format!(
            "name: pp\ninitial: add\nstates:\n  add:\n    prepatch_check: fail\n    action: {action:?}\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n  failed:\n    terminal: true\n"
        ),
    );
    write("loopbox.toml", &config());
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "src", "tests", "pytest.ini"],
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
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(d)
                .status()
                .unwrap()
                .success()
        );
    }
    dir
}

fn run(dir: &Path) -> (Vec<String>, String) {
    let o = loopbox(dir, &["run", "l.yaml", "--json"]);
    let result = json_of(&o);
    (path_of(&result), log_of(dir, &result))
}

fn forks_left(dir: &Path) -> usize {
    std::fs::read_dir(dir.join(".worktrees"))
        .map(|d| d.count())
        .unwrap_or(0)
}

const TRIVIAL: &str = "printf 'def test_new():\\n    assert True\\n' > tests/test_new.py";
const NEEDS_THE_PATCH: &str = "printf 'def old():\\n    return 1\\n\\ndef new():\\n    return 2\\n' > src/pkg.py && printf 'from pkg import new\\n\\ndef test_new():\\n    assert new() == 2\\n' > tests/test_new.py";

#[test]
fn a_new_test_that_passes_before_the_patch_is_flagged_and_fails_the_run() {
    let dir = repo(TRIVIAL, "xunit1");
    let (path, log) = run(dir.path());
    assert_eq!(path, ["add", "failed"], "{log}");
    assert!(
        log.contains("passes before the patch too (flagged)"),
        "{log}"
    );
    assert!(log.contains("worktree-at"), "{log}");
    assert_eq!(
        forks_left(dir.path()),
        0,
        "the pre-patch worktree is removed"
    );
}

#[test]
fn a_new_test_that_needs_the_patch_is_clean() {
    let dir = repo(NEEDS_THE_PATCH, "xunit1");
    let (path, log) = run(dir.path());
    assert_eq!(path, ["add", "done"], "{log}");
    assert!(!log.contains("flagged"), "{log}");
    assert_eq!(forks_left(dir.path()), 0);
}

#[test]
fn with_pytests_default_report_no_test_is_matched_and_the_check_is_clean_as_in_little_loops() {
    // xunit2 (pytest's default) writes no `file`: little-loops rebuilds ids that
    // name no candidate, so nothing is flagged there either.
    let dir = repo(TRIVIAL, "xunit2");
    let (path, log) = run(dir.path());
    assert_eq!(path, ["add", "done"], "{log}");
}

#[test]
fn without_its_grants_the_check_gives_no_verdict_and_fail_ends_the_run() {
    let dir = repo(TRIVIAL, "xunit1");
    let no_fork = config().replace("\n[worktree]\nallow = true\n", "");
    std::fs::write(dir.path().join("loopbox.toml"), no_fork).unwrap();
    let o = loopbox(dir.path(), &["run", "l.yaml", "--json"]);
    let result = json_of(&o);
    assert_eq!(
        result["outcome"]["data"]["terminated_by"], "error",
        "{result}"
    );
    assert!(
        result["summary"]
            .as_str()
            .unwrap_or("")
            .contains("prepatch_check gave no verdict"),
        "{result}"
    );
}
