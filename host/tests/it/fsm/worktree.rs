//! Issue 32: a sub-loop's `worktree:` runs the child, sandboxed, in a git
//! worktree the host checks out (`[worktree]` in loopbox.toml) and removes
//! after. The worktree's `.git` file is read-only to the child, the
//! repository's `post-checkout` hook does not run, and without the grant the
//! refusal names the key and the state routes as little-loops routes it.

use std::path::Path;
use std::process::Command;

use super::*;

const GRANTS: &str = "[shell]\nscripts = true\n\n[worktree]\nallow = [\"feat*\"]\n";

const PARENT: &str = "name: p\ninitial: sub\ncontext:\n  branch: none\nstates:\n  sub:\n    loop: child\n    worktree: '${context.branch}'\n    on_yes: done\n    on_no: done\n    on_error: broke\n  done:\n    terminal: true\n  broke:\n    terminal: true\n";

/// The child reports where it ran, what it sees of the branch, and whether it
/// could aim the worktree's `.git` pointer elsewhere.
const CHILD: &str = r#"name: child
initial: work
states:
  work:
    action: |
      pwd > ../../where.txt
      cat feat.txt >> ../../where.txt
      echo new > new.txt && cp new.txt ../../made.txt
      if printf 'gitdir: /tmp/evil\n' 2> ../../err.txt > .git; then echo wrote; else echo refused; fi > ../../git.txt
    next: ask
  ask:
    action: hello
    action_type: prompt
    next: end
  end:
    terminal: true
"#;

/// The agent does what the child's command did: it may write the worktree, not
/// its `.git` pointer.
const AGENT: &str = "[agent]\ncommand = [\"sh\", \"-c\", \"pwd > ../../agent-where.txt; if printf x 2> ../../agent-err.txt > .git; then echo wrote; else echo refused; fi > ../../agent-git.txt; echo ok\"]\nprompt_input = \"stdin\"\n";

fn git(d: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A repository on `main` with a branch `feat` holding `feat.txt`, a
/// `post-checkout` hook that leaves `hook-ran`, and the loops.
fn repo(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q", "-b", "main"]);
    git(d, &["commit", "-q", "--allow-empty", "-m", "base"]);
    git(d, &["checkout", "-q", "-b", "feat"]);
    std::fs::write(d.join("feat.txt"), "on feat\n").unwrap();
    git(d, &["add", "feat.txt"]);
    git(d, &["commit", "-q", "-m", "feat"]);
    git(d, &["checkout", "-q", "main"]);
    let hook = d.join(".git/hooks/post-checkout");
    std::fs::write(&hook, "#!/bin/sh\ntouch hook-ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.join("p.yaml"), PARENT).unwrap();
    std::fs::write(d.join("child.yaml"), CHILD).unwrap();
    std::fs::write(d.join("loopbox.toml"), config).unwrap();
    dir
}

fn run(d: &Path, branch: &str) -> (Vec<String>, String) {
    let input = format!("{{\"branch\": \"{branch}\"}}");
    let o = loopbox(d, &["run", "p.yaml", "--input", &input, "--json"]);
    let result = json_of(&o);
    (path_of(&result), log_of(d, &result))
}

#[test]
fn the_child_runs_sandboxed_in_the_worktree_which_goes_after() {
    let dir = repo(&format!("{GRANTS}{AGENT}"));
    let d = dir.path();
    let (path, log) = run(d, "feat");
    assert_eq!(path, ["sub", "done"], "{log}");
    let d = d.canonicalize().unwrap();
    let where_ = read(&d, "where.txt");
    let (pwd, seen) = where_
        .split_once('\n')
        .unwrap_or_else(|| panic!("the child did not run in a worktree: {where_:?}"));
    let name = pwd
        .strip_prefix(&format!("{}/.worktrees/", d.display()))
        .unwrap_or_else(|| panic!("ran in {pwd}"));
    assert!(name.ends_with("-subloop-feat"), "{name}");
    assert_eq!(seen, "on feat\n", "the branch is checked out");
    assert_eq!(read(&d, "made.txt"), "new\n", "the worktree is writable");
    assert_eq!(read(&d, "git.txt"), "refused\n", "{}", read(&d, "err.txt"));
    assert_eq!(
        read(&d, "agent-where.txt"),
        format!("{pwd}\n"),
        "the agent runs there too"
    );
    assert_eq!(
        read(&d, "agent-git.txt"),
        "refused\n",
        "{}",
        read(&d, "agent-err.txt")
    );
    assert!(
        read(&d, "err.txt").contains("Read-only file system"),
        "{}",
        read(&d, "err.txt")
    );
    assert!(
        !d.join("hook-ran").exists() && !d.join(".worktrees").join(name).join("hook-ran").exists(),
        "post-checkout ran"
    );
    assert!(
        log.contains("sub_loop_worktree_attached") && log.contains("sub_loop_worktree_detached"),
        "{log}"
    );
    assert!(
        !d.join(".worktrees").join(name).exists(),
        "the worktree stays"
    );
    assert_eq!(git(&d, &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn without_the_grant_the_state_routes_on_error_and_names_the_key() {
    let dir = repo("[shell]\nscripts = true\n");
    let (path, log) = run(dir.path(), "feat");
    assert_eq!(path, ["sub", "broke"], "{log}");
    assert!(
        log.contains("sub_loop_worktree_error") && log.contains("`[worktree]` with `allow = true`"),
        "{log}"
    );
    // A branch the allow-list does not name, and one that reads as an option.
    let dir = repo(GRANTS);
    for branch in ["main", "--upload-pack=touch x"] {
        let (path, log) = run(dir.path(), branch);
        assert_eq!(path, ["sub", "broke"], "{log}");
        assert!(log.contains("worktree.allow"), "{log}");
    }
    assert!(!dir.path().join("x").exists());
}

#[test]
fn validate_grants_lists_the_worktree_need() {
    let dir = repo("[shell]\nscripts = true\n");
    let o = loopbox(dir.path(), &["validate", "--grants", "p.yaml"]);
    let out = text(&o.stdout);
    assert!(out.contains("[worktree] allow = true"), "{out}");
    assert!(out.contains("missing"), "{out}");
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\n[worktree]\nallow = true\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["validate", "--grants", "p.yaml"]);
    let out = text(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("[worktree]") && l.contains("granted")),
        "{out}"
    );
}

#[test]
fn a_run_killed_in_the_worktree_resumes_there_and_leaves_nothing() {
    let dir = repo(GRANTS);
    let d = dir.path().canonicalize().unwrap();
    std::fs::write(
        d.join("k.yaml"),
        PARENT
            .replace("name: p", "name: k")
            .replace("branch: none", "branch: feat"),
    )
    .unwrap();
    std::fs::write(
        d.join("child.yaml"),
        "name: child\ninitial: one\nstates:\n  one:\n    action: pwd >> ../../log.txt\n    next: two\n  two:\n    action: pwd >> ../../log.txt\n    next: end\n  end:\n    terminal: true\n",
    )
    .unwrap();
    killed_at(&d, "k.yaml", "action-recorded:1");
    let first = read(&d, "log.txt");
    assert_eq!(
        std::fs::read_dir(d.join(".worktrees")).unwrap().count(),
        1,
        "the killed run left its worktree"
    );
    assert!(first.contains("/.worktrees/"), "{first}");
    let runs = json_of(&loopbox(&d, &["runs", "--json"]));
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let o = loopbox(&d, &["runs", "resume", &id, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(path_of(&json_of(&o)), ["sub", "done"]);
    assert_eq!(
        read(&d, "log.txt"),
        format!("{first}{first}"),
        "the second action ran in the same worktree, made again"
    );
    assert_eq!(std::fs::read_dir(d.join(".worktrees")).unwrap().count(), 0);
    assert_eq!(git(&d, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(
        std::fs::read_dir(d.join(".loopbox/worktrees"))
            .unwrap()
            .count(),
        0,
        "no record left"
    );
}

/// A repository nested in a wider workspace: a run there writes its `.git`
/// (only the workspace root's `.git` is protected), planting a filter driver;
/// a later run in the repository has the host's git check a worktree out. The
/// driver runs, but inside the sandbox: the marker it writes outside the
/// workspace never appears.
#[test]
fn a_filter_planted_in_a_nested_repository_never_runs_outside_the_sandbox() {
    // Outside /tmp, so the marker's directory is the real one in bwrap's view too.
    let outer = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = outer.path().canonicalize().unwrap();
    let marker = o.join("escaped.txt");
    std::fs::write(o.join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    std::fs::write(
        o.join("plant.yaml"),
        format!(
            "name: plant\ninitial: plant\nstates:\n  plant:\n    action: |\n      printf '[filter \"x\"]\\n\\tsmudge = sh -c \"id > {0}; cat\"\\n' >> proj/.git/config\n      mkdir -p proj/.git/info && echo '* filter=x' > proj/.git/info/attributes && echo planted\n    next: done\n  done:\n    terminal: true\n",
            marker.display()
        ),
    )
    .unwrap();
    let inner = o.join("proj");
    std::fs::create_dir(&inner).unwrap();
    git(&inner, &["init", "-q", "-b", "main"]);
    git(&inner, &["commit", "-q", "--allow-empty", "-m", "base"]);
    git(&inner, &["checkout", "-q", "-b", "feat"]);
    std::fs::write(inner.join("feat.txt"), "on feat\n").unwrap();
    git(&inner, &["add", "feat.txt"]);
    git(&inner, &["commit", "-q", "-m", "feat"]);
    git(&inner, &["checkout", "-q", "main"]);
    std::fs::write(inner.join("p.yaml"), PARENT).unwrap();
    std::fs::write(
        inner.join("child.yaml"),
        "name: child\ninitial: end\nstates:\n  end:\n    terminal: true\n",
    )
    .unwrap();
    let planted = loopbox(&o, &["run", "plant.yaml", "--json"]);
    assert_eq!(code(&planted), 0, "{}", text(&planted.stderr));
    assert!(
        git(&inner, &["config", "--get", "filter.x.smudge"]).contains("id >"),
        "the outer run could not write the nested .git: the attack needs another way in"
    );
    for sandbox in ["bwrap", "landlock"] {
        let grants = GRANTS.replace("[shell]\n", &format!("[shell]\nsandbox = \"{sandbox}\"\n"));
        std::fs::write(inner.join("loopbox.toml"), grants).unwrap();
        let (path, log) = run(&inner, "feat");
        assert!(
            !marker.exists(),
            "{sandbox}: the planted filter ran outside the sandbox: {:?}\n{log}",
            std::fs::read_to_string(&marker)
        );
        // The worktree was still made (the driver ran confined), and went after.
        assert_eq!(path, ["sub", "done"], "{sandbox}: {log}");
    }
}
