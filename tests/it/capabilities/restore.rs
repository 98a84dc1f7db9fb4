//! `snapshot`/`restore` (contract 0.4.0, `tamper_guard: revert`): the host
//! writes into the workspace outside the sandbox, so every way a policy or a
//! sandboxed command could aim that write elsewhere is tried here: a link at
//! the file's name, a directory swapped for a link out, a protected or hidden
//! path a pattern reaches, a snapshot of a link to a secret, and no grant.

use std::os::unix::fs::symlink;

use loopbox_tests::*;
use serde_json::{Value, json};

use super::err_kind;

const GRANT: &str =
    "[shell]\nscripts = true\n\n[workspace]\nrestore = [\"tests/\", \"conftest.py\"]\n";

fn paths(v: &[&str]) -> Value {
    json!(v)
}

#[tokio::test]
async fn a_restore_puts_back_what_the_step_changed_and_replaces_a_link_planted_at_the_name() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("bashrc");
    std::fs::write(&victim, "mine\n").unwrap();
    ws.write("tests/test_a.py", "assert 1\n");
    ws.write("tests/test_b.py", "assert 2\n");
    let ctx = ws.run(&load("probe"), GRANT);
    // The step weakens one test, deletes another, and swaps the first for a
    // link to a file outside the workspace.
    let v = probe(
        &ctx,
        json!({"op": "snapshot_restore", "paths": paths(&["tests/test_a.py", "tests/test_b.py"]),
               "then_script": format!("rm tests/test_b.py; rm tests/test_a.py; ln -s {} tests/test_a.py", victim.display()),
               "restore": paths(&["tests/test_a.py", "tests/test_b.py"])}),
    )
    .await
    .unwrap();
    assert_eq!(v["changed"]["ok"]["exit_code"], 0, "{v}");
    assert_eq!(
        v["restored"]["ok"],
        json!(["tests/test_a.py", "tests/test_b.py"]),
        "{v}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
    let a = ws.root().join("tests/test_a.py");
    assert!(std::fs::symlink_metadata(&a).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(a).unwrap(), "assert 1\n");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("tests/test_b.py")).unwrap(),
        "assert 2\n"
    );
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_out_is_never_written_through() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    ws.write("tests/test_a.py", "assert 1\n");
    let ctx = ws.run(&load("probe"), GRANT);
    let v = probe(
        &ctx,
        json!({"op": "snapshot_restore", "paths": paths(&["tests/test_a.py"]),
               "then_script": format!("rm -r tests && ln -s {} tests", outside.path().display()),
               "restore": paths(&["tests/test_a.py"])}),
    )
    .await
    .unwrap();
    assert_eq!(v["restored"]["ok"], json!([]), "{v}");
    assert!(!outside.path().join("test_a.py").exists());
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l.contains("not written") && l.contains("is a link")),
        "{:?}",
        log_messages(&ctx)
    );
}

#[tokio::test]
async fn a_link_to_a_secret_is_kept_as_absent_and_never_copied_into_the_workspace() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::create_dir_all(ws.root().join("tests")).unwrap();
    symlink(&secret, ws.root().join("tests/test_leak.py")).unwrap();
    let ctx = ws.run(&load("probe"), GRANT);
    let v = probe(
        &ctx,
        json!({"op": "snapshot_restore", "paths": paths(&["tests/test_leak.py"]),
               "then_script": "rm tests/test_leak.py", "restore": paths(&["tests/test_leak.py"])}),
    )
    .await
    .unwrap();
    assert_eq!(v["restored"]["ok"], json!([]), "{v}");
    assert!(!ws.root().join("tests/test_leak.py").exists());
}

#[tokio::test]
async fn protected_and_hidden_paths_are_refused_whatever_the_patterns() {
    let ws = Workspace::new();
    ws.write(".claude/settings.json", "{}");
    ws.write(".git/hooks/pre-commit", "#!/bin/sh\n");
    ws.write("secrets/key", "k");
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nscripts = true\nhide = [\"secrets\"]\n\n[workspace]\nrestore = [\"*\"]\n",
    );
    for path in [
        ".claude/settings.json",
        ".git/hooks/pre-commit",
        "loopbox.toml",
        ".loopbox/loopbox.db",
        ".envrc",
        "secrets/key",
        "sub/.git/config",
    ] {
        let v = probe(&ctx, json!({"op": "snapshot", "paths": paths(&[path])}))
            .await
            .unwrap();
        let (kind, msg) = err_kind(&v);
        assert_eq!(kind, "denied", "{path}: {v}");
        assert!(msg.contains("never writes it"), "{path}: {msg}");
    }
    // Nor by a path that climbs out.
    let v = probe(
        &ctx,
        json!({"op": "snapshot", "paths": paths(&["tests/../../x"])}),
    )
    .await
    .unwrap();
    assert_eq!(err_kind(&v).0, "invalid", "{v}");
}

#[tokio::test]
async fn without_the_grant_nothing_is_kept_and_the_copies_are_capped_by_a_named_limit() {
    let ws = Workspace::new();
    ws.write("tests/test_a.py", &"x".repeat(5000));
    let ctx = ws.run(&load("probe"), "[shell]\nscripts = true\n");
    let v = probe(
        &ctx,
        json!({"op": "snapshot", "paths": paths(&["tests/test_a.py"])}),
    )
    .await
    .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "denied", "{v}");
    assert!(msg.contains("workspace.restore"), "{msg}");
    let ctx = ws.run(
        &load("probe"),
        &format!("{GRANT}\n[limits]\nsnapshot_bytes = 4096\n"),
    );
    let v = probe(
        &ctx,
        json!({"op": "snapshot", "paths": paths(&["tests/test_a.py"])}),
    )
    .await
    .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "invalid", "{v}");
    assert!(msg.contains("limits.snapshot_bytes = 4096"), "{msg}");
    // A restore from a snapshot this run never took.
    let v = probe(
        &ctx,
        json!({"op": "restore", "snapshot": "77", "paths": paths(&["tests/test_a.py"])}),
    )
    .await
    .unwrap();
    assert_eq!(err_kind(&v).0, "invalid", "{v}");
}
