//! The OS sandbox under policy commands, for each kind: a child may write the
//! workspace and its private temp dir, never the store, the config or the
//! policy file, nothing outside, and no network unless granted.
//!
//! These need bubblewrap and a kernel with Landlock ABI 3+; `./scripts/test.sh`
//! installs bubblewrap, and `loopbox doctor` says what a machine supports.

use loopbox_tests::*;
use serde_json::{Value, json};

const KINDS: [&str; 2] = ["bwrap", "landlock"];

fn config(kind: &str, extra: &str) -> String {
    format!(
        "[shell]\nsandbox = \"{kind}\"\nscripts = true\nallow = [[\"touch\"], [\"sh\", \"-c\", \"echo x >> loopbox.toml\"], [\"sh\", \"-c\", \"echo y > sub/new.txt\"], [\"sh\", \"-c\", \"echo t > $TMPDIR/t && cat $TMPDIR/t\"]]\n{extra}"
    )
}

async fn exec(ctx: &loopbox::run::RunContext, argv: Value) -> Value {
    probe(ctx, json!({"op": "exec", "argv": argv}))
        .await
        .unwrap()
}

fn ok_exit(v: &Value) -> Option<i64> {
    v["ok"]["exit_code"].as_i64()
}

#[tokio::test]
async fn each_sandbox_is_available_here() {
    let s = loopbox::exec::sandbox::support();
    assert!(s.bwrap.is_ok(), "bubblewrap: {:?}", s.bwrap);
    assert!(
        s.landlock_usable().is_ok(),
        "landlock: {:?}",
        s.landlock_usable()
    );
}

#[tokio::test]
async fn protected_files_are_never_writable() {
    for kind in KINDS {
        let ws = Workspace::new();
        ws.write("loopbox.toml", "# the user's config\n");
        ws.write("sub/keep.txt", "keep");
        ws.write("policies/mine.wasm", "not really wasm");
        let policy = ws.root().join("policies/mine.wasm");
        let access = loopbox::run::Access {
            protected: vec![policy.clone()],
            ..Default::default()
        };
        let ctx = ws.run_access(&load("probe"), &config(kind, ""), access);
        assert_ne!(
            ok_exit(&exec(&ctx, json!(["sh", "-c", "echo x >> loopbox.toml"])).await),
            Some(0),
            "{kind}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.root().join("loopbox.toml")).unwrap(),
            "# the user's config\n",
            "{kind}"
        );
        let v = probe(&ctx, json!({"op": "script", "source": "echo bad > .loopbox/loopbox.db; echo bad > .loopbox/new; truncate -s 0 policies/mine.wasm; rm -f policies/mine.wasm"})).await.unwrap();
        assert!(
            v["ok"]["stderr"].as_str().unwrap().contains(".loopbox"),
            "{kind}: {v}"
        );
        assert!(!ws.root().join(".loopbox/new").exists(), "{kind}");
        assert_eq!(
            std::fs::read_to_string(&policy).unwrap(),
            "not really wasm",
            "{kind}"
        );
        // The store still works.
        assert_eq!(
            probe(&ctx, json!({"op": "state", "set": {"k": 1}, "get": ["k"]}))
                .await
                .unwrap()["k"],
            "1",
            "{kind}"
        );
        // Other files in the workspace are writable.
        assert_eq!(
            ok_exit(&exec(&ctx, json!(["sh", "-c", "echo y > sub/new.txt"])).await),
            Some(0),
            "{kind}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.root().join("sub/new.txt")).unwrap(),
            "y\n"
        );
    }
}

#[tokio::test]
async fn nothing_outside_the_workspace_is_writable_and_temp_is_private() {
    for kind in KINDS {
        let ws = Workspace::new();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("escaped");
        let ctx = ws.run(&load("probe"), &config(kind, ""));
        let v = exec(&ctx, json!(["touch", target])).await;
        assert!(!target.exists(), "{kind}: {v}");
        let v = exec(
            &ctx,
            json!(["sh", "-c", "echo t > $TMPDIR/t && cat $TMPDIR/t"]),
        )
        .await;
        assert_eq!(v["ok"]["stdout"], "t\n", "{kind}: {v}");
        // Landlock's temp dir lies in the shared one: only its owner may enter it
        // (bwrap's is a tmpfs of the child's own).
        if kind == "landlock" {
            let v = probe(
                &ctx,
                json!({"op": "script", "source": "stat -c %a \"$TMPDIR\""}),
            )
            .await
            .unwrap();
            assert_eq!(v["ok"]["stdout"], "700\n", "{kind}: {v}");
        }
        let v = probe(
            &ctx,
            json!({"op": "script", "source": "echo x > $HOME/.loopbox-escape-test"}),
        )
        .await
        .unwrap();
        assert_ne!(ok_exit(&v), Some(0), "{kind}: {v}");
    }
}

/// No sandbox has the host's network, granted or not: `shell.network = true`
/// means "any public host, through loopbox's proxy" (issue 44), and a host
/// listener on loopback is reached by neither a direct connect nor the proxy.
#[tokio::test]
async fn the_host_network_is_denied_granted_or_not() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    );
    for kind in KINDS {
        let rule = format!(
            "allow = [[\"python3\", \"-c\", {}]]",
            serde_json::to_string(&code).unwrap()
        );
        for (network, expect) in [(false, false), (true, false)] {
            let ws = Workspace::new();
            let cfg = format!("[shell]\nsandbox = \"{kind}\"\nnetwork = {network}\n{rule}");
            let ctx = ws.run(&load("probe"), &cfg);
            let v = exec(&ctx, json!(["python3", "-c", code])).await;
            assert_eq!(
                v["ok"]["stdout"] == "connected\n",
                expect,
                "{kind}, network = {network}: {v}"
            );
        }
    }
}

#[tokio::test]
async fn scripts_are_refused_without_a_sandbox() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nsandbox = \"none\"\nscripts = true",
    );
    let v = probe(&ctx, json!({"op": "script", "source": "echo hi"}))
        .await
        .unwrap();
    assert_eq!(v["err"]["kind"], "denied");
    assert!(
        v["err"]["message"]
            .as_str()
            .unwrap()
            .contains("scripts run only inside the OS sandbox"),
        "{v}"
    );
}

#[tokio::test]
async fn landlock_cannot_create_files_in_the_workspace_root_but_bwrap_can() {
    for (kind, created) in [("bwrap", true), ("landlock", false)] {
        let ws = Workspace::new();
        let ctx = ws.run(&load("probe"), &config(kind, ""));
        exec(&ctx, json!(["touch", "fresh.txt"])).await;
        assert_eq!(ws.root().join("fresh.txt").exists(), created, "{kind}");
    }
}

#[tokio::test]
async fn a_sandbox_that_cannot_be_set_up_refuses_every_command() {
    let ws = Workspace::new();
    let machine = loopbox::exec::sandbox::Support {
        landlock: Err("no Landlock on this machine".into()),
        bwrap: Err("bubblewrap is not installed".into()),
    };
    for (kind, why) in [
        ("bwrap", "bubblewrap is not installed"),
        ("landlock", "no Landlock on this machine"),
    ] {
        let access = loopbox::run::Access {
            support: Some(machine.clone()),
            ..Default::default()
        };
        let ctx = ws.run_access(&load("probe"), &config(kind, ""), access);
        let v = exec(&ctx, json!(["touch", "x"])).await;
        assert_eq!(v["err"]["kind"], "unavailable", "{kind}: {v}");
        assert_eq!(
            v["err"]["message"],
            format!("shell.sandbox = \"{kind}\" cannot be enforced: {why}")
        );
        assert!(!ws.root().join("x").exists());
        assert!(
            log_messages(&ctx)
                .iter()
                .any(|l| l.contains("refused `touch x`: shell.sandbox")),
            "{kind}"
        );
        let v = probe(&ctx, json!({"op": "script", "source": "touch y"}))
            .await
            .unwrap();
        assert!(
            v["err"]["message"]
                .as_str()
                .unwrap()
                .contains("scripts run only inside the OS sandbox"),
            "{v}"
        );
    }
    // Under `auto` the same machine runs commands unconfined, and the run says so.
    let access = loopbox::run::Access {
        support: Some(machine),
        ..Default::default()
    };
    let ctx = ws.run_access(&load("probe"), &config("auto", ""), access);
    assert!(
        matches!(ctx.sandbox(), loopbox::exec::sandbox::Sandbox::None { why } if why.contains("no sandbox is available here"))
    );
}

#[tokio::test]
async fn a_path_entry_inside_the_workspace_is_refused() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.root().join("bin")).unwrap();
    let config = loopbox::config::Config::parse(
        &format!(
            "[shell]\npath = \"{}/bin:/usr/bin:/bin\"",
            ws.root().display()
        ),
        std::path::Path::new("t.toml"),
    )
    .unwrap();
    let err = loopbox::run::RunContext::new(
        "r".into(),
        std::sync::Arc::new(config),
        ws.db.clone(),
        ws.root(),
        loopbox::ui::Ui::quiet(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("inside the workspace"), "{err}");
}
