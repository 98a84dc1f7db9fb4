//! Each capability through the runtime: what is granted works, everything else
//! is denied as an `action-error` (or a workspace error) the policy can handle.

use loopbox_tests::*;
use serde_json::json;

mod mcp;
mod profiles;
mod restore;
mod server_access;
mod worktree_at;

fn err_kind(v: &serde_json::Value) -> (&str, &str) {
    (
        v["err"]["kind"].as_str().unwrap_or("<ok>"),
        v["err"]["message"].as_str().unwrap_or(""),
    )
}

#[tokio::test]
async fn exec_runs_only_what_a_rule_allows() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[shell]\nallow = [[\"echo\", \"hi\"]]");
    let ok = probe(
        &ctx,
        json!({"op": "exec", "argv": ["echo", "hi", "there; rm -rf /"]}),
    )
    .await
    .unwrap();
    assert_eq!(ok["ok"]["stdout"], "hi there; rm -rf /\n");
    // The rule names a program, not a string: the same program by its path matches.
    let ok = probe(&ctx, json!({"op": "exec", "argv": ["/bin/echo", "hi"]}))
        .await
        .unwrap();
    assert_eq!(ok["ok"]["stdout"], "hi\n");
    for argv in [
        json!(["echo", "bye"]),
        json!(["ls"]),
        json!(["sh", "-c", "echo hi"]),
    ] {
        let denied = probe(&ctx, json!({"op": "exec", "argv": argv}))
            .await
            .unwrap();
        let (kind, msg) = err_kind(&denied);
        assert_eq!(kind, "denied", "{argv}: {denied}");
        assert!(msg.contains("shell.allow"), "{msg}");
    }
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l.contains("denied exec `ls`"))
    );
}

#[tokio::test]
async fn nothing_runs_without_a_config() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let v = probe(&ctx, json!({"op": "exec", "argv": ["true"]}))
        .await
        .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(
        (kind, msg.contains("add [\"true\"] to `shell.allow`")),
        ("denied", true),
        "{msg}"
    );
}

#[tokio::test]
async fn scripts_need_the_scripts_grant() {
    let ws = Workspace::new();
    let denied = ws.run(&load("probe"), "[shell]\nallow = [[\"sh\"]]");
    let v = probe(&denied, json!({"op": "script", "source": "echo $((1+2))"}))
        .await
        .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "denied");
    assert!(msg.contains("shell.scripts = true"), "{msg}");
    let granted = ws.run(&load("probe"), "[shell]\nscripts = true");
    let v = probe(&granted, json!({"op": "script", "source": "echo $((1+2))"}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "3\n");
}

#[tokio::test]
async fn policy_set_environment_needs_a_grant() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"env\"]]\npass_env = []",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["env"], "env": {"LD_PRELOAD": "/tmp/x.so"}}),
    )
    .await
    .unwrap();
    assert!(err_kind(&v).1.contains("shell.pass_env_from_policy"), "{v}");
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"env\"]]\npass_env = []\npass_env_from_policy = [\"GREETING\"]",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["env"], "env": {"GREETING": "hi"}}),
    )
    .await
    .unwrap();
    // The child sees PATH and what was granted, nothing of the host's environment,
    // and git's editors set to `:` (a policy's stdin never drives an editor: issue 49).
    // The sandbox adds its private TMPDIR (and bwrap the PWD it changed to); nothing of the host's leaks.
    let mut lines: Vec<&str> = v["ok"]["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("TMPDIR=") && !l.starts_with("PWD="))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "GIT_EDITOR=:",
            "GIT_SEQUENCE_EDITOR=:",
            "GREETING=hi",
            "PATH=/usr/local/bin:/usr/bin:/bin"
        ]
    );
}

#[tokio::test]
async fn cwd_must_stay_in_the_workspace() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.root().join("sub")).unwrap();
    let ctx = ws.run(&load("probe"), "[shell]\nallow = [[\"pwd\"]]");
    let v = probe(&ctx, json!({"op": "exec", "argv": ["pwd"], "cwd": "sub"}))
        .await
        .unwrap();
    assert!(
        v["ok"]["stdout"]
            .as_str()
            .unwrap()
            .trim_end()
            .ends_with("/sub"),
        "{v}"
    );
    for cwd in ["..", "/tmp", "sub/../.."] {
        let v = probe(&ctx, json!({"op": "exec", "argv": ["pwd"], "cwd": cwd}))
            .await
            .unwrap();
        assert_eq!(err_kind(&v).0, "invalid", "{cwd}: {v}");
    }
}

#[tokio::test]
async fn timeouts_kill_the_command_and_output_is_capped() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\noutput_bytes = 100\n[shell]\nallow = [[\"sleep\"], [\"head\"]]",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["sleep", "30"], "timeout_ms": 200}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            v["ok"]["timed_out"].as_bool(),
            v["ok"]["exit_code"].is_null()
        ),
        (Some(true), true),
        "{v}"
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["head", "-c", "100000", "/dev/zero"]}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            v["ok"]["truncated"].as_bool(),
            v["ok"]["stdout"].as_str().unwrap().len()
        ),
        (Some(true), 100)
    );
}

#[tokio::test]
async fn a_missing_program_is_unavailable_and_stdin_is_delivered() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"no-such-program-anywhere\"], [\"cat\"]]",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["no-such-program-anywhere"]}),
    )
    .await
    .unwrap();
    assert_eq!(err_kind(&v).0, "unavailable");
    let v = probe(&ctx, json!({"op": "exec", "argv": ["cat"], "stdin": "fed"}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "fed");
}

#[tokio::test]
async fn prompt_needs_an_agent() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let v = probe(&ctx, json!({"op": "prompt", "text": "hello"}))
        .await
        .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "denied");
    assert!(msg.contains("[agent]"), "{msg}");
}

#[tokio::test]
async fn prompt_goes_through_the_agent_template_and_keeps_the_session() {
    let ws = Workspace::new();
    let config = ws.scripted_agent(&["first reply\nline two", "second reply"]);
    let ctx = ws.run(&load("probe"), config);
    let v = probe(&ctx, json!({"op": "prompt", "text": "do it; $(rm -rf /)"}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "first reply\nline two");
    let session = v["ok"]["session"].as_str().unwrap().to_string();
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "again", "session": session}),
    )
    .await
    .unwrap();
    assert_eq!(
        (v["ok"]["stdout"].as_str(), v["ok"]["session"].as_str()),
        (Some("second reply"), Some(session.as_str()))
    );
    // The prompt reached the agent as one argument, uninterpreted.
    assert_eq!(ws.agent_prompts()[0], "do it; $(rm -rf /)");
}

#[tokio::test]
async fn workspace_reads_stay_inside_the_root() {
    let ws = Workspace::new();
    ws.write("notes/todo.md", "- [ ] one");
    std::os::unix::fs::symlink("/etc/passwd", ws.root().join("passwd")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.root().join("etc")).unwrap();
    std::os::unix::fs::symlink("notes/todo.md", ws.root().join("inside")).unwrap();
    let ctx = ws.run(&load("probe"), "");
    assert_eq!(
        probe(&ctx, json!({"op": "read", "path": "notes/todo.md"}))
            .await
            .unwrap()["ok"],
        "- [ ] one"
    );
    assert_eq!(
        probe(&ctx, json!({"op": "read", "path": "inside"}))
            .await
            .unwrap()["ok"],
        "- [ ] one"
    );
    for (path, why) in [
        ("../x", "leaves the workspace"),
        ("/etc/passwd", "absolute"),
        ("passwd", "outside the workspace"),
        ("etc/hostname", "outside the workspace"),
        (".loopbox/loopbox.db", "store"),
        ("missing.txt", "does not exist"),
    ] {
        let v = probe(&ctx, json!({"op": "read", "path": path}))
            .await
            .unwrap();
        assert!(v["err"].as_str().unwrap_or("").contains(why), "{path}: {v}");
    }
    let v = probe(&ctx, json!({"op": "list", "dir": ""})).await.unwrap();
    assert_eq!(v["ok"], json!(["etc", "inside", "notes/", "passwd"]));
    assert!(
        probe(&ctx, json!({"op": "list", "dir": "etc"}))
            .await
            .unwrap()["err"]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );
}

#[tokio::test]
async fn reads_over_the_limit_are_refused() {
    let ws = Workspace::new();
    ws.write("big.txt", &"z".repeat(5000));
    let ctx = ws.run(&load("probe"), "[limits]\nread_bytes = 4096");
    let v = probe(&ctx, json!({"op": "read", "path": "big.txt"}))
        .await
        .unwrap();
    assert!(
        v["err"]
            .as_str()
            .unwrap()
            .contains("limits.read_bytes = 4096"),
        "{v}"
    );
}

#[tokio::test]
async fn state_is_transactional_per_event() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let v = probe(
        &ctx,
        json!({"op": "state", "set": {"a": 1, "b": [2]}, "get": ["a"], "keys": ""}),
    )
    .await
    .unwrap();
    assert_eq!(
        (v["a"].as_str(), &v["keys"]),
        (Some("1"), &json!(["a", "b"])),
        "reads see the event's own writes"
    );
    // A failed event's writes are discarded.
    let f = probe(
        &ctx,
        json!({"op": "state", "set": {"a": 99, "c": 3}, "fail_after": true}),
    )
    .await
    .unwrap_err();
    assert!(f.to_string().contains("failing after state writes"));
    let v = probe(
        &ctx,
        json!({"op": "state", "get": ["a", "c"], "remove": ["b"], "keys": ""}),
    )
    .await
    .unwrap();
    assert_eq!(
        (v["a"].as_str(), v["c"].is_null(), &v["keys"]),
        (Some("1"), true, &json!(["a"]))
    );
    // Values must be JSON, and other runs do not see this run's state.
    let v = probe(&ctx, json!({"op": "state", "set_raw": {"bad": "{nope"}}))
        .await
        .unwrap();
    assert!(v["set-error:bad"].as_str().unwrap().contains("not JSON"));
    let other = ws.run(&load("probe"), "");
    assert_eq!(
        probe(&other, json!({"op": "state", "keys": ""}))
            .await
            .unwrap()["keys"],
        json!([])
    );
}

#[tokio::test]
async fn a_decider_cannot_import_actions() {
    let p = load("fix-forward");
    assert_eq!(p.world, loopbox::wasm::policy::World::Decider);
    assert!(
        !p.interface
            .imports
            .iter()
            .any(|i| i.contains("actions") || i.contains("workspace"))
    );
    assert_eq!(
        load("probe").world,
        loopbox::wasm::policy::World::LoopPolicy
    );
}

#[tokio::test]
async fn ask_tier_actions_are_declined_with_no_one_to_ask_and_run_when_approved() {
    let ws = Workspace::new();
    let config = "[shell]\nask = [[\"echo\"]]";
    let ctx = ws.run(&load("probe"), config);
    let v = probe(&ctx, json!({"op": "exec", "argv": ["echo", "hi"]}))
        .await
        .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "declined", "{v}");
    assert!(
        msg.contains("needs a person's yes (shell.ask[0] (echo))"),
        "{msg}"
    );
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l.contains("needs a yes (shell.ask[0] (echo)): declined"))
    );
    let approved = ws.run_with(
        &load("probe"),
        config,
        std::sync::Arc::new(loopbox::exec::confirm::ApproveAll),
    );
    let v = probe(&approved, json!({"op": "exec", "argv": ["echo", "hi"]}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "hi\n");
    assert!(
        log_messages(&approved)
            .iter()
            .any(|l| l.contains("needs a yes (shell.ask[0] (echo)): approved"))
    );
}

#[tokio::test]
async fn wrappers_and_interpreters_cannot_smuggle_a_command() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"env\"], [\"xargs\"], [\"find\"], [\"git\"], [\"timeout\"]]",
    );
    for argv in [
        json!(["env", "rm", "-rf", "x"]),
        json!(["xargs", "rm"]),
        json!(["find", ".", "-exec", "rm", "{}", ";"]),
        json!(["git", "-c", "core.pager=sh -c id", "log"]),
        json!(["timeout", "5", "sh", "-c", "id"]),
    ] {
        let v = probe(&ctx, json!({"op": "exec", "argv": argv}))
            .await
            .unwrap();
        let (kind, msg) = err_kind(&v);
        assert_eq!(kind, "denied", "{argv}: {v}");
        assert!(
            msg.contains("only a rule naming the whole command exactly allows it"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn a_workspace_program_named_like_an_allowed_one_is_denied() {
    let ws = Workspace::new();
    ws.write("npm", "#!/bin/sh\necho pwned > pwned\n");
    std::fs::set_permissions(
        ws.root().join("npm"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ctx = ws.run(&load("probe"), "[shell]\nallow = [[\"npm\"], [\"ls\"]]");
    let v = probe(&ctx, json!({"op": "exec", "argv": ["./npm", "test"]}))
        .await
        .unwrap();
    assert_eq!(err_kind(&v).0, "denied", "{v}");
    assert!(!ws.root().join("pwned").exists());
}

#[tokio::test]
async fn deny_rules_catch_reordered_flags() {
    let ws = Workspace::new();
    ws.write("junk/x", "x");
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"rm\"]]\ndeny = [[\"rm\", \"-rf\"]]",
    );
    for argv in [
        json!(["rm", "-fr", "junk"]),
        json!(["rm", "-r", "-f", "junk"]),
    ] {
        let v = probe(&ctx, json!({"op": "exec", "argv": argv}))
            .await
            .unwrap();
        assert!(
            err_kind(&v).1.contains("denied by shell.deny[0] (rm -rf)"),
            "{v}"
        );
    }
    assert!(ws.root().join("junk/x").exists());
}

#[tokio::test]
async fn child_rlimits_apply() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nallow = [[\"dd\"]]\n[shell.rlimits]\nfile_size_bytes = 1048576",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["dd", "if=/dev/zero", "of=big", "bs=1048576", "count=4"]}),
    )
    .await
    .unwrap();
    assert_ne!(v["ok"]["exit_code"], 0, "{v}");
    assert!(std::fs::metadata(ws.root().join("big")).unwrap().len() <= 1 << 20);
}

#[tokio::test]
async fn prompt_tiers_and_agent_failures() {
    let ws = Workspace::new();
    let deny = ws.run(
        &load("probe"),
        "[agent]\ncommand = [\"echo\", \"{prompt}\"]\ntier = \"deny\"",
    );
    assert!(
        err_kind(
            &probe(&deny, json!({"op": "prompt", "text": "hi"}))
                .await
                .unwrap()
        )
        .1
        .contains("agent.tier = \"deny\"")
    );
    let ask = ws.run(
        &load("probe"),
        "[agent]\ncommand = [\"echo\", \"{prompt}\"]\ntier = \"ask\"",
    );
    assert_eq!(
        err_kind(
            &probe(&ask, json!({"op": "prompt", "text": "hi"}))
                .await
                .unwrap()
        )
        .0,
        "declined"
    );
    let missing = ws.run(
        &load("probe"),
        "[agent]\ncommand = [\"no-such-agent-cli\", \"{prompt}\"]",
    );
    let v = probe(&missing, json!({"op": "prompt", "text": "hi"}))
        .await
        .unwrap();
    assert_eq!(
        err_kind(&v),
        (
            "unavailable",
            "the agent command `no-such-agent-cli` was not found (agent.command[0]; looked in shell.path = `/usr/local/bin:/usr/bin:/bin`)"
        )
    );
    let hangs = ws.run(
        &load("probe"),
        "[agent]\ncommand = [\"sleep\", \"{prompt}\"]\ntimeout_ms = 300",
    );
    let started = std::time::Instant::now();
    let v = probe(&hangs, json!({"op": "prompt", "text": "30"}))
        .await
        .unwrap();
    assert_eq!(err_kind(&v).0, "unavailable", "{v}");
    assert!(err_kind(&v).1.contains("timeout"), "{v}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn a_command_printing_forever_costs_only_the_cap_and_its_timeout() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\noutput_bytes = 1000\n[shell]\nallow = [[\"yes\"]]",
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["yes", "loopbox"], "timeout_ms": 500}),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            v["ok"]["timed_out"].as_bool(),
            v["ok"]["truncated"].as_bool()
        ),
        (Some(true), Some(true)),
        "{v}"
    );
    assert_eq!(v["ok"]["stdout"].as_str().unwrap().len(), 1000);
}
