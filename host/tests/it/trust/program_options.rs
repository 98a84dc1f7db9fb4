//! Issue 49, item 1: program-running options of allowed programs. With
//! `shell.allow = [["git"], ["sed"], ["zip"]]` a policy ran commands through
//! `git grep -O<cmd>`, `sed '1e <cmd>'`, `sed 's/x/<cmd>/e'` and `zip -TT <cmd>`.
//! Each attack is run for real through `loopbox run` (no OS sandbox, so only the
//! argv rules stand in the way); each must be refused naming the exact rule it
//! needs, and leave no trace. The whole table is `exec::grants` unit tests.

use std::path::Path;

use crate::common::*;
use serde_json::Value;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("notes.txt"), "hello\n").unwrap();
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(
        d.join("loopbox.toml"),
        "[shell]\nallow = [[\"git\"], [\"sed\"], [\"zip\"]]\nsandbox = \"none\"\n",
    )
    .unwrap();
    for args in [&["init", "-q"][..], &["add", "notes.txt"]] {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    }
    dir
}

/// Run the probe with an exec of `argv`: (whether it ran, the probe's result).
fn exec(dir: &Path, argv: &[&str]) -> (bool, String) {
    let input = serde_json::json!({"op": "exec", "argv": argv}).to_string();
    let o = loopbox(
        dir,
        &[
            "run",
            &probe().to_string_lossy(),
            "--input",
            &input,
            "--json",
        ],
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let data = out["outcome"]["data"].to_string();
    (
        data.contains(r#""ok""#) && !data.contains(r#""err""#),
        format!("{data} {}", String::from_utf8_lossy(&o.stderr)),
    )
}

#[test]
fn git_grep_o_sed_e_and_zip_tt_run_nothing_under_prefix_rules() {
    let dir = workspace();
    let d = dir.path();
    let attacks: [(&[&str], &str); 5] = [
        (&["git", "grep", "-Otouch out/git", "hello"], "out/git"),
        (
            &[
                "git",
                "grep",
                "--open-files-in-pager=touch out/git2",
                "hello",
            ],
            "out/git2",
        ),
        (&["sed", "-n", "1e touch out/sed", "notes.txt"], "out/sed"),
        (
            &["sed", "s|hello|touch out/sed2|e", "notes.txt"],
            "out/sed2",
        ),
        (
            &[
                "zip",
                "-T",
                "-TT",
                "touch out/zip",
                "out/z.zip",
                "notes.txt",
            ],
            "out/zip",
        ),
    ];
    for (argv, marker) in attacks {
        let (ran, why) = exec(d, argv);
        assert!(
            !ran && !d.join(marker).exists(),
            "{argv:?} ran a command: {why}"
        );
        assert!(
            why.contains("runs other programs")
                || why.contains("runs commands from its own language"),
            "{argv:?}: {why}"
        );
        assert!(
            why.contains("so only a rule naming the whole command exactly allows it"),
            "{argv:?}: {why}"
        );
    }
    // What the rules are for still runs.
    for argv in [
        &["git", "grep", "-n", "hello"][..],
        &["sed", "--sandbox", "-n", "1p", "notes.txt"],
        &["zip", "-q", "out/plain.zip", "notes.txt"],
    ] {
        let (ran, why) = exec(d, argv);
        assert!(ran, "{argv:?}: {why}");
    }
    // `doctor` says what the `["sed"]` rule really allows.
    let o = loopbox(d, &["doctor"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rule warning      shell.allow[1] = [\"sed\"] allows only `sed` exactly, never a longer command: `sed` runs commands from its own language"),
        "{out}"
    );
    // And so does `validate`, for a loop run under these rules.
    std::fs::write(
        d.join("loop.yaml"),
        "name: l\ninitial: a\nstates:\n  a:\n    exec: [sed, -n, 1p, notes.txt]\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let o = loopbox(d, &["validate", "loop.yaml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        code(&o) == 0
            && err.contains("warning: shell.allow[1] = [\"sed\"] allows only `sed` exactly")
            && err.contains("or allow [\"sed\", \"--sandbox\"]"),
        "{err}"
    );
}

/// Run the probe with an exec of `argv` fed `stdin`: as [`exec`].
fn exec_with_stdin(dir: &Path, argv: &[&str], stdin: &str) -> (bool, String) {
    let input = serde_json::json!({"op": "exec", "argv": argv, "stdin": stdin}).to_string();
    let o = loopbox(
        dir,
        &[
            "run",
            &probe().to_string_lossy(),
            "--input",
            &input,
            "--json",
        ],
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let data = out["outcome"]["data"].to_string();
    (
        data.contains(r#""ok""#) && !data.contains(r#""err""#),
        format!("{data} {}", String::from_utf8_lossy(&o.stderr)),
    )
}

/// The second round of issue 49: what still ran under `["make"]` and `["git"]`
/// prefix rules (a make assignment whose name is not a plain word, a makefile
/// from stdin or another directory, git's `remote-ext` helper and
/// `for-each-repo`). Each ran its command before; each is refused now.
#[test]
fn make_assignments_makefiles_from_elsewhere_and_git_helpers_run_nothing() {
    let dir = workspace();
    let d = dir.path();
    std::fs::write(
        d.join("loopbox.toml"),
        "[shell]\nallow = [[\"git\"], [\"make\"]]\nsandbox = \"none\"\n",
    )
    .unwrap();
    std::fs::write(d.join("Makefile"), "all:\n\t@echo built\n").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/Makefile"), "all:\n\ttouch ../out/mk-c\n").unwrap();
    // `git init false` is allowed, and makes `core.bare`'s value a repository.
    let (ran, why) = exec(d, &["git", "init", "-q", "false"]);
    assert!(ran, "{why}");
    let makefile = "all:\n\ttouch out/mk-f\n";
    let attacks: [(&[&str], &str, &str); 7] = [
        (
            &["make", " x=$(shell touch out/mk-name)"],
            "",
            "out/mk-name",
        ),
        (&["make", "-f", "/dev/stdin"], makefile, "out/mk-f"),
        (&["make", "-sf-"], makefile, "out/mk-f"),
        (&["make", "--makefile=/dev/stdin"], makefile, "out/mk-f"),
        (&["make", "-C", "sub"], "", "out/mk-c"),
        (
            &["git", "remote-ext", "x", "touch out/rext"],
            "connect git-upload-pack\n",
            "out/rext",
        ),
        (
            &[
                "git",
                "for-each-repo",
                "--config=core.bare",
                "--",
                "-c",
                "alias.z=!touch ../out/fer",
                "z",
            ],
            "",
            "out/fer",
        ),
    ];
    for (argv, stdin, marker) in attacks {
        let (ran, why) = exec_with_stdin(d, argv, stdin);
        assert!(
            !ran && !d.join(marker).exists(),
            "{argv:?} ran a command: {why}"
        );
        assert!(
            why.contains(
                "runs other programs, so only a rule naming the whole command exactly allows it"
            ),
            "{argv:?}: {why}"
        );
    }
    for argv in [
        &["make", ".SHELLFLAGS=-c touch out/x;"][..],
        &["make", "x != touch out/x"],
        &["make", "--eval=$(shell touch out/x)"],
    ] {
        let (ran, why) = exec(d, argv);
        assert!(
            !ran && why.contains("to allow exactly this, add"),
            "{argv:?}: {why}"
        );
    }
    // Plumbing that runs what its option names.
    for argv in [
        &["git", "fetch-pack", "--upload-pack=touch out/fp", "."][..],
        &["git", "send-pack", "--exec=touch out/fp", ".", "HEAD"],
    ] {
        let (ran, why) = exec(d, argv);
        assert!(!ran && !d.join("out/fp").exists(), "{argv:?}: {why}");
    }
    // git opens no editor for a policy's command: vi read its keys from the
    // policy's stdin, so `:!CMD` ran CMD under the `["git"]` rule.
    let (ran, why) = exec(d, &["git", "var", "GIT_EDITOR"]);
    assert!(ran && why.contains(r#""stdout":":\n""#), "{why}");
    let keys = ":!touch out/vi\n:q!\n";
    let (_, why) = exec_with_stdin(d, &["git", "commit", "--allow-empty"], keys);
    assert!(
        !d.join("out/vi").exists(),
        "the editor ran a command: {why}"
    );
    // The Makefile's own targets still build under the prefix rule.
    let (ran, why) = exec(d, &["make", "-j2", "all"]);
    assert!(ran && why.contains("built"), "{why}");
}
