//! Issue 32: `tamper_guard: revert`, end to end. The host keeps copies of the
//! test files when the guarded state begins and puts back the tracked ones the
//! action modified or deleted, as little-loops' `git checkout --` does; an
//! untracked one stays a finding; nothing routes to the failure terminal.

use std::path::Path;
use std::process::Command;

use super::*;

const CONFIG: &str = "[shell]\nscripts = true\nallow = [[\"git\", \"ls-files\"], [\"git\", \"diff\"], [\"sha256sum\"]]\n\n[workspace]\nread = [\".\"]\nrestore = [\"**/test_*.py\", \"**/tests/**\", \"conftest.py\"]\n";

const LOOP: &str = "name: r\ninitial: prep\nstates:\n  prep:\n    action: \"echo 'def test_u(): assert 1' > tests/test_untracked.py\"\n    next: weaken\n  weaken:\n    tamper_guard: revert\n    action: 'echo \"def test_a(): assert True\" > tests/test_a.py; rm tests/test_b.py; echo x >> tests/test_untracked.py; echo n > tests/test_new.py'\n    next: check\n  check:\n    action: 'grep -q \"assert 1\" tests/test_a.py && test -f tests/test_b.py'\n    on_yes: done\n    on_no: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";

fn repo(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("tests")).unwrap();
    std::fs::write(d.join("tests/test_a.py"), "def test_a():\n    assert 1\n").unwrap();
    std::fs::write(d.join("tests/test_b.py"), "def test_b():\n    assert 2\n").unwrap();
    std::fs::write(d.join("l.yaml"), LOOP).unwrap();
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

#[test]
fn revert_puts_back_the_tracked_test_files_and_leaves_the_rest() {
    let dir = repo(CONFIG);
    let (path, log) = run(dir.path());
    assert_eq!(path, ["prep", "weaken", "check", "done"], "{log}");
    assert_eq!(
        read(dir.path(), "tests/test_a.py"),
        "def test_a():\n    assert 1\n"
    );
    assert_eq!(
        read(dir.path(), "tests/test_b.py"),
        "def test_b():\n    assert 2\n"
    );
    // Untracked: little-loops has nothing to put it back from; added: left alone.
    assert!(read(dir.path(), "tests/test_untracked.py").ends_with("x\n"));
    assert_eq!(read(dir.path(), "tests/test_new.py"), "n\n");
    assert!(
        log.contains("put back: tests/test_a.py, tests/test_b.py"),
        "{log}"
    );
}

#[test]
fn without_the_restore_grant_nothing_is_put_back_and_validate_says_what_to_add() {
    let config = CONFIG.split("\n[workspace]").next().unwrap().to_string();
    let dir = repo(&config);
    let (path, log) = run(dir.path());
    assert_eq!(path, ["prep", "weaken", "check", "failed"], "{log}");
    assert!(
        log.contains("keeps no copies") && log.contains("workspace.restore"),
        "{log}"
    );
    let o = loopbox(dir.path(), &["validate", "--grants", "l.yaml"]);
    assert!(
        text(&o.stdout).contains("missing  workspace.restore = ["),
        "{}",
        text(&o.stdout)
    );
}
