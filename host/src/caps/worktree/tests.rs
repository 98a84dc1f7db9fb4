//! `worktree-add`/`worktree-remove` against real git repositories.

use super::*;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository on `main` with a branch `feat` that holds `feat.txt`, and a
/// `post-checkout` hook that leaves `hook-ran` beside the repository.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&root, &["checkout", "-q", "-b", "feat"]);
    std::fs::write(root.join("feat.txt"), "on feat\n").unwrap();
    git(&root, &["add", "feat.txt"]);
    git(&root, &["commit", "-q", "-m", "feat"]);
    git(&root, &["checkout", "-q", "main"]);
    let hook = root.join(".git/hooks/post-checkout");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ntouch '{}/hook-ran'\n", dir.path().display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, root)
}

fn granted() -> WorktreeConfig {
    WorktreeConfig {
        allow: Allow::All(true),
        ..Default::default()
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn add_checks_out_the_branch_without_hooks_and_remove_leaves_nothing() {
    let (tmp, root) = repo();
    let w = Worktrees::new(&granted(), &root, PATH);
    let rel = w.add("feat").unwrap();
    assert!(
        rel.starts_with(".worktrees/") && rel.ends_with("-subloop-feat"),
        "{rel}"
    );
    let dir = root.join(&rel);
    assert_eq!(
        std::fs::read_to_string(dir.join("feat.txt")).unwrap(),
        "on feat\n"
    );
    assert!(dir.join(".git").is_file());
    assert!(
        !tmp.path().join("hook-ran").exists(),
        "the repository's post-checkout hook ran"
    );
    assert_eq!(
        w.protected(),
        vec![Protected {
            path: dir.join(".git"),
            kind: Kind::File
        }]
    );
    assert_eq!(
        entries(&root.join(".loopbox/worktrees")).len(),
        1,
        "a record while open"
    );
    // Only what this run added, by its exact path.
    for other in ["../ws", ".worktrees", "feat", &format!("{rel}/")] {
        let e = w.remove(other).unwrap_err();
        assert!(
            matches!(&e, ActionError::Denied(m) if m.contains("not a worktree this run added")),
            "{other}: {e:?}"
        );
    }
    w.remove(&rel).unwrap();
    assert!(!dir.exists());
    assert!(w.protected().is_empty());
    assert_eq!(git(&root, &["worktree", "list"]).lines().count(), 1);
    assert!(entries(&root.join(".loopbox/worktrees")).is_empty());
    assert!(w.remove(&rel).is_err(), "removed once only");
}

#[test]
fn hostile_branch_names_never_reach_git() {
    let (_tmp, root) = repo();
    let w = Worktrees::new(&granted(), &root, PATH);
    let long = "a".repeat(10 * 1024);
    for b in [
        "--upload-pack=touch x",
        "-x",
        "../x",
        "a..b",
        "x/../../y",
        ".hidden",
        "a b",
        "a\nb",
        "x.lock",
        "@{-1}",
        "",
        long.as_str(),
    ] {
        let e = w.add(b).unwrap_err();
        assert!(
            matches!(&e, ActionError::Invalid(m) if m.contains("is not a branch name")),
            "{b:.40}: {e:?}"
        );
    }
    assert!(!root.join(".worktrees").exists() && !root.join("x").exists());
    // A good name git does not know: git's own message, and nothing left.
    let e = w.add("no-such-branch").unwrap_err();
    assert!(
        matches!(&e, ActionError::Unavailable(m) if m.contains("invalid reference")),
        "{e:?}"
    );
    assert!(entries(&root.join(".worktrees")).is_empty());
}

#[test]
fn not_granted_names_the_key_and_patterns_choose_branches() {
    let (_tmp, root) = repo();
    let w = Worktrees::new(&WorktreeConfig::default(), &root, PATH);
    let e = w.add("feat").unwrap_err();
    assert!(
        matches!(&e, ActionError::Denied(m) if m.contains("`[worktree]`") && m.contains("allow = true")),
        "{e:?}"
    );
    let only = WorktreeConfig {
        allow: Allow::Branches(vec!["release/*".into(), "feat".into()]),
        ..Default::default()
    };
    assert!(only.permits("feat").is_ok() && only.permits("release/1.2").is_ok());
    let e = only.permits("main").unwrap_err();
    assert!(e.contains("worktree.allow"), "{e}");
    let parsed: WorktreeConfig = toml::from_str("allow = [\"a*\"]\nmax_open = 2").unwrap();
    assert_eq!(parsed.allow, Allow::Branches(vec!["a*".into()]));
    assert!(toml::from_str::<WorktreeConfig>("allw = true").is_err());
    let parse = |t: &str| crate::config::Config::parse(t, Path::new("loopbox.toml"));
    let e = format!("{:#}", parse("[worktree]\nmax_open = 0\n").unwrap_err());
    assert!(e.contains("worktree.max_open"), "{e}");
    assert_eq!(
        parse("[worktree]\nallow = true\n").unwrap().worktree.allow,
        Allow::All(true)
    );
}

#[test]
fn links_in_the_way_and_the_cap_are_refused() {
    let (tmp, root) = repo();
    git(&root, &["branch", "two"]);
    git(&root, &["branch", "three"]);
    let one = WorktreeConfig {
        max_open: 2,
        ..granted()
    };
    let w = Worktrees::new(&one, &root, PATH);
    let a = w.add("feat").unwrap();
    w.add("two").unwrap();
    let e = w.add("three").unwrap_err();
    assert!(
        matches!(&e, ActionError::Denied(m) if m.contains("worktree.max_open")),
        "{e:?}"
    );
    w.remove(&a).unwrap();
    drop(w);
    assert!(entries(&root.join(".worktrees")).is_empty(), "drop removes");
    // `.worktrees` as a link out of the workspace: git is never sent there.
    std::fs::remove_dir(root.join(".worktrees")).unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join(".worktrees")).unwrap();
    let w = Worktrees::new(&granted(), &root, PATH);
    let e = w.add("feat").unwrap_err();
    assert!(
        matches!(&e, ActionError::Unavailable(m) if m.contains("not a directory")),
        "{e:?}"
    );
    assert!(entries(&outside).is_empty());
}

#[test]
fn a_killed_process_s_worktrees_go_at_the_next_start() {
    let (_tmp, root) = repo();
    let w = Worktrees::new(&granted(), &root, PATH);
    let rel = w.add("feat").unwrap();
    // As if the process died: the record stays and its lock goes.
    std::mem::forget(w);
    let records = root.join(".loopbox/worktrees");
    let name = entries(&records).pop().unwrap();
    let text = std::fs::read_to_string(records.join(&name)).unwrap();
    std::fs::remove_file(records.join(&name)).unwrap();
    std::fs::write(records.join(&name), text).unwrap();
    assert!(root.join(&rel).exists());
    let _w = Worktrees::new(&WorktreeConfig::default(), &root, PATH);
    assert!(!root.join(&rel).exists());
    assert!(entries(&records).is_empty());
    assert_eq!(git(&root, &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn a_replayed_add_is_made_again_where_it_is_gone() {
    let (_tmp, root) = repo();
    let w = Worktrees::new(&granted(), &root, PATH);
    let rel = ".worktrees/20260101-000000-subloop-feat";
    w.adopt(rel, "feat").unwrap();
    assert!(root.join(rel).join("feat.txt").is_file());
    w.forget(rel);
    assert!(!root.join(rel).exists());
    assert!(w.adopt("../x", "feat").is_err());
}
