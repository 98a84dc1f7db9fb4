//! `worktree-at` (contract 0.4.0, `prepatch_check`): a detached worktree at a
//! revision, with workspace files copied in. git runs outside the sandbox on
//! names a policy chose, and the host writes into the fork: a revision that
//! would be a flag, a copy that is a link or a protected path, and a commit
//! holding a link out are each refused; hooks do not run; the fork goes.

use std::os::unix::fs::symlink;
use std::process::Command;

use loopbox_tests::*;
use serde_json::json;

use super::err_kind;

fn git(ws: &Workspace, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(ws.root())
        .status()
        .unwrap();
    assert!(ok.success(), "git {args:?}");
}

/// A repository with a commit holding `src/` and a test, and a post-checkout
/// hook that would leave a mark if it ran.
fn repo() -> Workspace {
    let ws = Workspace::new();
    git(&ws, &["init", "-q"]);
    ws.write("src/pkg.py", "X = 1\n");
    ws.write("tests/test_a.py", "def test_a():\n    assert 1\n");
    git(&ws, &["add", "src", "tests"]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    ws.write(
        ".git/hooks/post-checkout",
        &format!("#!/bin/sh\ntouch {}/hook-ran\n", ws.root().display()),
    );
    std::fs::set_permissions(
        ws.root().join(".git/hooks/post-checkout"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    ws
}

const GRANT: &str = "[shell]\nscripts = true\n\n[worktree]\nallow = true\n";

#[tokio::test]
async fn a_fork_at_the_base_holds_the_copies_and_goes_when_removed() {
    let ws = repo();
    ws.write(
        "tests/test_a.py",
        "def test_a():\n    assert 2\n\ndef test_new():\n    pass\n",
    );
    let ctx = ws.run(&load("probe"), GRANT);
    let v = probe(
        &ctx,
        json!({"op": "worktree_at", "revision": "HEAD", "copy": ["tests/test_a.py", "tests/gone.py"]}),
    )
    .await
    .unwrap();
    let rel = v["ok"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string();
    assert!(rel.starts_with(".worktrees/prepatch-"), "{rel}");
    let fork = ws.root().join(&rel);
    assert_eq!(
        std::fs::read_to_string(fork.join("src/pkg.py")).unwrap(),
        "X = 1\n"
    );
    assert!(
        std::fs::read_to_string(fork.join("tests/test_a.py"))
            .unwrap()
            .contains("test_new")
    );
    assert!(
        !ws.root().join("hook-ran").exists(),
        "the post-checkout hook ran"
    );
    // The fork's `.git` file is read-only to commands while it is open.
    let v = probe(
        &ctx,
        json!({"op": "script", "source": format!("echo 'gitdir: /tmp/evil' > {rel}/.git && echo wrote || echo refused")}),
    )
    .await
    .unwrap();
    assert_eq!(v["ok"]["stdout"], "refused\n", "{v}");
    let v = probe(&ctx, json!({"op": "worktree_remove", "path": rel}))
        .await
        .unwrap();
    assert_eq!(v["ok"], json!(null), "{v}");
    assert!(!fork.exists());
}

#[tokio::test]
async fn a_revision_that_would_be_a_flag_or_a_copy_that_is_a_link_is_refused() {
    let ws = repo();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    symlink(
        outside.path().join("secret"),
        ws.root().join("tests/test_link.py"),
    )
    .unwrap();
    let ctx = ws.run(&load("probe"), GRANT);
    for rev in ["--output=/tmp/x", "-b", "HEAD~1", "a b", "main:x"] {
        let v = probe(
            &ctx,
            json!({"op": "worktree_at", "revision": rev, "copy": []}),
        )
        .await
        .unwrap();
        assert_eq!(err_kind(&v).0, "invalid", "{rev}: {v}");
    }
    let v = probe(
        &ctx,
        json!({"op": "worktree_at", "revision": "HEAD", "copy": ["tests/test_link.py"]}),
    )
    .await
    .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "invalid", "{v}");
    assert!(msg.contains("is a link"), "{msg}");
    for protected in [".git/config", ".claude/settings.json", "sub/.git/hooks/x"] {
        let v = probe(
            &ctx,
            json!({"op": "worktree_at", "revision": "HEAD", "copy": [protected]}),
        )
        .await
        .unwrap();
        assert_eq!(err_kind(&v).0, "denied", "{protected}: {v}");
    }
    // Nothing was left behind by the refusals.
    let left = std::fs::read_dir(ws.root().join(".worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0);
    // And without `[worktree]`, nothing at all.
    let ctx = ws.run(&load("probe"), "[shell]\nscripts = true\n");
    let v = probe(
        &ctx,
        json!({"op": "worktree_at", "revision": "HEAD", "copy": []}),
    )
    .await
    .unwrap();
    assert_eq!(err_kind(&v).0, "denied", "{v}");
}

#[tokio::test]
async fn a_commit_holding_a_link_out_cannot_carry_a_copy_outside() {
    let ws = repo();
    let outside = tempfile::tempdir().unwrap();
    // The base commit has `tests/evil` as a link to a directory outside.
    symlink(outside.path(), ws.root().join("tests/evil")).unwrap();
    git(&ws, &["add", "tests/evil"]);
    git(&ws, &["commit", "-q", "-m", "link"]);
    std::fs::remove_file(ws.root().join("tests/evil")).unwrap();
    ws.write("tests/evil/test_x.py", "pwned\n");
    let ctx = ws.run(&load("probe"), GRANT);
    let v = probe(
        &ctx,
        json!({"op": "worktree_at", "revision": "HEAD", "copy": ["tests/evil/test_x.py"]}),
    )
    .await
    .unwrap();
    assert_eq!(err_kind(&v).0, "unavailable", "{v}");
    assert!(err_kind(&v).1.contains("is a link"), "{v}");
    assert!(!outside.path().join("test_x.py").exists());
}
