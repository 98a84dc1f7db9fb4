//! `diff_stall` against a real git repository, as each little-loops release
//! reads the work tree: 1.156's `git diff --stat` does not see a new
//! untracked file, 1.166+'s content fingerprint does (the default; a run's
//! `--little-loops 1.156` or the loop's `little_loops:` picks the older one).

use super::*;

/// Each `work` adds an untracked note until there are two; `check` is
/// progress while the work tree changes.
const NOTES_LOOP: &str = r#"name: ds
initial: work
max_steps: 12
states:
  work:
    action: 'n=$(ls notes 2>/dev/null | wc -l); if [ "$n" -lt 2 ]; then mkdir -p notes; echo x > "notes/$n.md"; fi'
    next: check
  check:
    evaluate:
      type: diff_stall
    on_yes: work
    on_no: stalled
  stalled:
    terminal: true
"#;

fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
    };
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\nallow = [[\"git\", \"diff\"], [\"git\", \"ls-files\"], [\"git\", \"hash-object\"]]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("ds.yaml"), NOTES_LOOP).unwrap();
    std::fs::write(dir.path().join("README"), "a project\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "start"]);
    dir
}

#[test]
fn diff_stall_reads_the_work_tree_as_the_release_the_run_follows() {
    // 1.167 (the default): each new note is progress; the third `check`,
    // with nothing new, is the stall.
    let dir = repository();
    let o = loopbox(dir.path(), &["run", "ds.yaml", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        path_of(&json_of(&o)),
        ["work", "check", "work", "check", "work", "check", "stalled"]
    );
    // 1.156: `git diff --stat` stays empty (the notes are untracked), so
    // the second `check` already stalls.
    for how in [
        vec!["run", "ds.yaml", "--json", "--little-loops", "1.156.0"],
        vec!["run", "old.yaml", "--json"],
    ] {
        let dir = repository();
        std::fs::write(
            dir.path().join("old.yaml"),
            NOTES_LOOP.replace("name: ds\n", "name: ds\nlittle_loops: '1.156'\n"),
        )
        .unwrap();
        let o = loopbox(dir.path(), &how);
        assert_eq!(code(&o), 0, "{how:?}: {}", text(&o.stderr));
        assert_eq!(
            path_of(&json_of(&o)),
            ["work", "check", "work", "check", "stalled"],
            "{how:?}"
        );
    }
    let o = loopbox(dir.path(), &["run", "ds.yaml", "--little-loops", "newest"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains(
            "--little-loops must name a little-loops release like 1.156 or 1.167.0, not `newest`"
        ),
        "{}",
        text(&o.stderr)
    );
}
