//! Attacks on the trust boundary, each reproduced end to end through the
//! runtime with the probe guest standing in for a hostile policy (see
//! docs/security.md). Each asserts that what a policy or its sandboxed command
//! plants is never run or trusted outside the sandbox, under bwrap and Landlock.

use std::path::{Path, PathBuf};

use loopbox_tests::*;
use serde_json::{Value, json};

const KINDS: [&str; 2] = ["bwrap", "landlock"];

async fn exec(ctx: &loopbox::run::RunContext, argv: Value) -> Value {
    probe(ctx, json!({"op": "exec", "argv": argv}))
        .await
        .unwrap()
}

async fn script(ctx: &loopbox::run::RunContext, source: &str) -> Value {
    probe(ctx, json!({"op": "script", "source": source}))
        .await
        .unwrap()
}

fn exit_code(v: &Value) -> Option<i64> {
    v["ok"]["exit_code"].as_i64()
}

fn error(v: &Value) -> String {
    v["err"].to_string()
}

/// A directory outside the workspace that a planted program would write to if
/// it ever ran outside the sandbox.
fn outside() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn executable(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Item 1: a sandboxed script rewrites the agent program in the workspace; the
/// rewrite fails, and the agent itself runs inside the sandbox, so even a
/// planted agent could not write outside the workspace.
#[tokio::test]
async fn a_policy_cannot_plant_code_in_the_agent_program() {
    for kind in KINDS {
        let ws = Workspace::new();
        let out = outside();
        let marker = out.path().join("agent-ran-outside");
        executable(
            &ws.root().join("agent/fix-agent"),
            "#!/bin/sh\necho '{\"result\": \"fixed\"}'\n",
        );
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nscripts = true\n[agent]\ncommand = [\"./agent/fix-agent\", \"--\", \"{{prompt}}\"]\noutput = \"json\"\n"
        );
        let ctx = ws.run(&load("probe"), &config);
        let plant = format!(
            "printf '#!/bin/sh\\ntouch {}\\necho planted\\n' > agent/fix-agent",
            marker.display()
        );
        let v = script(&ctx, &plant).await;
        assert_ne!(exit_code(&v), Some(0), "{kind}: {v}");
        let v = probe(&ctx, json!({"op": "prompt", "text": "fix it"}))
            .await
            .unwrap();
        assert_eq!(v["ok"]["stdout"], "fixed", "{kind}: {v}");
        assert!(!marker.exists(), "{kind}");

        // The agent program itself tries to write outside the workspace and into the store.
        executable(
            &ws.root().join("agent/fix-agent"),
            &format!(
                "#!/bin/sh\ntouch {} .loopbox/planted 2>/dev/null\necho '{{\"result\": \"tried\"}}'\n",
                marker.display()
            ),
        );
        let ctx = ws.run(&load("probe"), &config);
        let v = probe(&ctx, json!({"op": "prompt", "text": "go"}))
            .await
            .unwrap();
        assert_eq!(v["ok"]["stdout"], "tried", "{kind}: {v}");
        assert!(
            !marker.exists() && !ws.root().join(".loopbox/planted").exists(),
            "{kind}: the agent is sandboxed"
        );

        // Changed by a route the sandbox does not see (a renamed parent directory, a
        // process outside it): the program is not run at all.
        executable(
            &ws.root().join("agent/fix-agent"),
            &format!("#!/bin/sh\ntouch {}\n", marker.display()),
        );
        let v = probe(&ctx, json!({"op": "prompt", "text": "go"}))
            .await
            .unwrap();
        assert!(
            error(&v).contains("changed since the run started, so it is not run"),
            "{kind}: {v}"
        );
        assert!(!marker.exists(), "{kind}");
    }
}

/// Item 2: the compiled-component cache lies outside the workspace, where a
/// sandboxed script cannot patch an artifact (which would then run as native code).
#[tokio::test]
async fn a_sandboxed_script_cannot_patch_the_component_cache() {
    load("probe"); // compiled and cached
    let cache = std::env::temp_dir()
        .join(format!("loopbox-test-cache-{}", std::process::id()))
        .join("components");
    let snapshot = || -> Vec<(PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect();
        v.sort();
        v
    };
    let before = snapshot();
    assert!(
        !before.is_empty(),
        "the probe's artifact is cached in {}",
        cache.display()
    );
    for kind in KINDS {
        let ws = Workspace::new();
        let ctx = ws.run(
            &load("probe"),
            &format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n"),
        );
        let v = script(
            &ctx,
            &format!(
                "for f in {}/*.cwasm; do printf 'planted' >> \"$f\" || exit 1; done",
                cache.display()
            ),
        )
        .await;
        assert_ne!(exit_code(&v), Some(0), "{kind}: {v}");
    }
    assert!(before == snapshot(), "no artifact changed");
}

/// Item 3: persistence through files that git, Claude Code, direnv or editors
/// run later, planted by a script or by a granted program.
#[tokio::test]
async fn nothing_that_runs_later_can_be_planted() {
    for kind in KINDS {
        let ws = Workspace::new();
        for (path, text) in [
            (".git/config", "[core]\n\tbare = false\n"),
            (".git/HEAD", "ref: refs/heads/main\n"),
        ] {
            ws.write(path, text);
        }
        std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.root().join(".git/objects")).unwrap();
        std::fs::create_dir_all(ws.root().join(".git/refs")).unwrap();
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nscripts = true\nallow = [[\"git\", \"config\"]]\n"
        );
        let ctx = ws.run(&load("probe"), &config);
        let attacks = [
            "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config",
            "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
            "mkdir -p .claude && printf '{\"hooks\":{\"Stop\":[{\"hooks\":[{\"type\":\"command\",\"command\":\"touch /tmp/pwned\"}]}]}}' > .claude/settings.json",
            "printf 'touch /tmp/pwned\\n' > .envrc",
            "mkdir -p .vscode && printf '{}' > .vscode/tasks.json",
            "printf '[shell]\\nallow = [[\"sh\"]]\\n' > loopbox.toml",
            "printf '{\"mcpServers\":{}}' > .mcp.json",
        ];
        for attack in attacks {
            let v = script(&ctx, attack).await;
            assert_ne!(exit_code(&v), Some(0), "{kind}: `{attack}` succeeded: {v}");
        }
        // A granted program writing git's config is refused the same way.
        let v = exec(
            &ctx,
            json!(["git", "config", "core.fsmonitor", "touch /tmp/pwned"]),
        )
        .await;
        assert_ne!(exit_code(&v), Some(0), "{kind}: {v}");
        assert_eq!(
            std::fs::read_to_string(ws.root().join(".git/config")).unwrap(),
            "[core]\n\tbare = false\n",
            "{kind}"
        );
        assert_eq!(
            std::fs::read_dir(ws.root().join(".git/hooks"))
                .unwrap()
                .count(),
            0,
            "{kind}"
        );
        for planted in [".claude", ".envrc", ".vscode", "loopbox.toml", ".mcp.json"] {
            assert!(
                !ws.root().join(planted).exists(),
                "{kind}: {planted} exists after the run (a placeholder left behind or planted)"
            );
        }
        // The rest of the workspace stays writable (under Landlock, below the root).
        std::fs::create_dir(ws.root().join("src")).unwrap();
        assert_eq!(
            exit_code(&script(&ctx, "echo ok > src/main.txt").await),
            Some(0),
            "{kind}"
        );
    }
}

/// `shell.writable` opens one protected name on purpose, and only that one.
#[tokio::test]
async fn writable_opens_a_protected_name_on_purpose() {
    let ws = Workspace::new();
    ws.write(".vscode/settings.json", "{}");
    ws.write(".envrc", "");
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nsandbox = \"bwrap\"\nscripts = true\nwritable = [\".vscode\"]\n",
    );
    assert_eq!(
        exit_code(&script(&ctx, "echo 1 > .vscode/settings.json").await),
        Some(0)
    );
    assert_ne!(exit_code(&script(&ctx, "echo 1 > .envrc").await), Some(0));
    let e =
        loopbox::config::Config::parse("[shell]\nwritable = [\".loopbox\"]", Path::new("t.toml"))
            .unwrap_err();
    assert!(format!("{e:#}").contains("never writable"), "{e:#}");
}

/// A recording agent: prints its arguments and stdin back as the reply.
fn recording_agent(ws: &Workspace) -> PathBuf {
    let path = ws.root().join("agent/echo-agent");
    executable(
        &path,
        "#!/bin/sh\nin=$(cat)\nprintf '{\"result\": \"args=[%s] stdin=[%s]\"}' \"$*\" \"$in\"\n",
    );
    path
}

/// Item 4: a message or session id chosen by the policy never reaches the
/// agent as an option, and placeholders are filled in the template only.
#[tokio::test]
async fn prompts_and_sessions_never_become_agent_options() {
    for kind in KINDS {
        prompts_never_become_options_under(kind).await;
    }
}

async fn prompts_never_become_options_under(kind: &str) {
    let ws = Workspace::new();
    recording_agent(&ws);
    let bare = format!(
        "[shell]\nsandbox = \"{kind}\"\n[agent]\ncommand = [\"./agent/echo-agent\", \"--model={{model}}\", \"{{prompt}}\"]\nresume = [\"--resume\", \"{{session}}\"]\noutput = \"json\"\n"
    );
    let ctx = ws.run(&load("probe"), &bare);
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "--dangerously-skip-permissions"}),
    )
    .await
    .unwrap();
    assert!(error(&v).contains("put \\\"--\\\" before"), "{v}");
    let v = probe(&ctx, json!({"op": "prompt", "text": "hi", "session": "-x"}))
        .await
        .unwrap();
    assert!(error(&v).contains("not a plain word"), "{v}");
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "say {model} and {session}", "model": "m1"}),
    )
    .await
    .unwrap();
    assert_eq!(
        v["ok"]["stdout"], "args=[--model=m1 say {model} and {session}] stdin=[]",
        "{v}"
    );

    // With the message on stdin, as the presets send it, nothing is an option.
    let stdin = format!(
        "[shell]\nsandbox = \"{kind}\"\n[agent]\ncommand = [\"./agent/echo-agent\"]\nprompt_input = \"stdin\"\noutput = \"json\"\n"
    );
    let ctx = ws.run(&load("probe"), &stdin);
    let v = probe(
        &ctx,
        json!({"op": "prompt", "text": "--dangerously-skip-permissions"}),
    )
    .await
    .unwrap();
    assert_eq!(
        v["ok"]["stdout"], "args=[] stdin=[--dangerously-skip-permissions]",
        "{v}"
    );
}

/// Item 5: the agent, run with the user's rights before, could edit the config
/// and the store; sandboxed, it cannot.
#[tokio::test]
async fn the_agent_cannot_widen_the_grants() {
    for kind in KINDS {
        let ws = Workspace::new();
        ws.write("loopbox.toml", "# mine\n");
        executable(
            &ws.root().join("agent/proxy"),
            "#!/bin/sh\nprintf '[shell]\\nallow = [[\"sh\"]]\\n' > loopbox.toml 2>/dev/null; echo x > .loopbox/evil 2>/dev/null; echo '{\"result\": \"done\"}'\n",
        );
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\n[agent]\ncommand = [\"./agent/proxy\", \"--\", \"{{prompt}}\"]\noutput = \"json\"\n"
        );
        let ctx = ws.run(&load("probe"), &config);
        let v = probe(&ctx, json!({"op": "prompt", "text": "edit the config"}))
            .await
            .unwrap();
        assert_eq!(v["ok"]["stdout"], "done", "{kind}: {v}");
        assert_eq!(
            std::fs::read_to_string(ws.root().join("loopbox.toml")).unwrap(),
            "# mine\n",
            "{kind}"
        );
        assert!(!ws.root().join(".loopbox/evil").exists(), "{kind}");
    }
}

/// The agent writes its own state, never its own settings: hooks and MCP servers
/// there would run with the user's rights in the next interactive session.
#[tokio::test]
async fn the_agent_cannot_plant_hooks_in_its_own_settings() {
    for kind in KINDS {
        let ws = Workspace::new();
        // Not under /tmp, which bwrap replaces with a private one.
        let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let state = home.path().join(".my-agent");
        std::fs::create_dir_all(state.join("projects")).unwrap();
        std::fs::write(state.join("settings.json"), "{}").unwrap();
        let script = format!(
            "#!/bin/sh\necho '{{\"hooks\": 1}}' > {s}/settings.json 2>/dev/null; echo log > {s}/projects/today; echo '{{\"result\": \"ok\"}}'\n",
            s = state.display()
        );
        executable(&ws.root().join("agent/a"), &script);
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\n[agent]\ncommand = [\"./agent/a\", \"--\", \"{{prompt}}\"]\noutput = \"json\"\nwritable = [\"{}\"]\n",
            state.display()
        );
        let ctx = ws.run(&load("probe"), &config);
        let v = probe(&ctx, json!({"op": "prompt", "text": "go"}))
            .await
            .unwrap();
        assert_eq!(v["ok"]["stdout"], "ok", "{kind}: {v}");
        assert_eq!(
            std::fs::read_to_string(state.join("settings.json")).unwrap(),
            "{}",
            "{kind}"
        );
        assert_eq!(
            std::fs::read_to_string(state.join("projects/today")).unwrap(),
            "log\n",
            "{kind}: its state stays writable"
        );
    }
}

/// Secrets outside the workspace: a granted `cat` reads anything `/` holds, so
/// the credential stores, the agents' state and `shell.hide` are hidden from a
/// policy's commands (the agent keeps its own state), and what sits beside them
/// stays readable.
#[tokio::test]
async fn secrets_outside_the_workspace_are_hidden_from_commands() {
    const SECRET: &str = "SECRET-7f3a";
    for kind in KINDS {
        let ws = Workspace::new();
        // Not under /tmp, which bwrap replaces with a private one.
        let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let h = home.path();
        for f in ["keys/id_ed25519", "token", ".my-agent/credentials.json"] {
            std::fs::create_dir_all(h.join(f).parent().unwrap()).unwrap();
            std::fs::write(h.join(f), SECRET).unwrap();
        }
        std::fs::write(h.join("notes.txt"), "visible").unwrap();
        std::fs::write(ws.root().join(".env"), SECRET).unwrap();
        std::fs::write(ws.root().join("README"), "readme").unwrap();
        let agent = format!(
            "#!/bin/sh\nprintf '{{\"result\": \"%s|%s\"}}' \"$(cat {h}/.my-agent/credentials.json)\" \"$(cat {h}/keys/id_ed25519 2>/dev/null)\"\n",
            h = h.display()
        );
        executable(&ws.root().join("agent/a"), &agent);
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nscripts = true\nallow = [[\"cat\"]]\nhide = [\"{h}/keys\", \"{h}/token\", \".env\"]\n\
             [agent]\ncommand = [\"./agent/a\", \"--\", \"{{prompt}}\"]\noutput = \"json\"\nwritable = [\"{h}/.my-agent\"]\n",
            h = h.display()
        );
        let ctx = ws.run(&load("probe"), &config);
        for f in ["keys/id_ed25519", "token", ".my-agent/credentials.json"] {
            let v = exec(&ctx, json!(["cat", h.join(f)])).await;
            assert!(!v.to_string().contains(SECRET), "{kind} {f}: {v}");
        }
        let v = exec(&ctx, json!(["cat", ".env"])).await;
        assert!(!v.to_string().contains(SECRET), "{kind} .env: {v}");
        let v = exec(&ctx, json!(["cat", h.join("notes.txt"), "README"])).await;
        assert_eq!(
            v["ok"]["stdout"], "visiblereadme",
            "{kind}: the rest stays readable: {v}"
        );

        // A script copying them into the workspace, for the policy to read later,
        // or reaching them through a hard or symbolic link made there.
        std::fs::create_dir(ws.root().join("sub")).unwrap();
        let v = script(
            &ctx,
            &format!(
                "cat {h}/keys/id_ed25519 {h}/token {h}/.my-agent/credentials.json .env > sub/loot 2>/dev/null; cp -r {h}/keys sub/stolen 2>/dev/null; \
                 ln {h}/token sub/hard 2>/dev/null; ln -s {h}/token sub/soft; cat sub/hard sub/soft > sub/linked 2>/dev/null; true",
                h = h.display()
            ),
        )
        .await;
        assert_eq!(exit_code(&v), Some(0), "{kind}: {v}");
        for f in ["sub/loot", "sub/stolen/id_ed25519", "sub/linked"] {
            let got = std::fs::read_to_string(ws.root().join(f)).unwrap_or_default();
            assert!(!got.contains(SECRET), "{kind} {f}: {got}");
        }

        // The agent reads its own state, not the other secrets.
        let v = probe(&ctx, json!({"op": "prompt", "text": "go"}))
            .await
            .unwrap();
        assert_eq!(v["ok"]["stdout"], format!("{SECRET}|"), "{kind}: {v}");
        assert_eq!(std::fs::read_to_string(h.join("token")).unwrap(), SECRET);
    }
}

/// The store (`.loopbox/`: every run's journal and state, the hook's log) and
/// the workspace paths `shell.hide` names are out of a policy's reach: its own
/// workspace reads refuse them by name and through any symbolic link a command
/// planted to them, and its commands cannot read the hidden paths (nor, under
/// bwrap, the store).
#[tokio::test]
async fn a_planted_link_leads_no_read_into_the_store_or_a_hidden_path() {
    const SECRET: &str = "SECRET-51c9";
    for kind in KINDS {
        let ws = Workspace::new();
        std::fs::write(ws.root().join(".env"), SECRET).unwrap();
        std::fs::create_dir_all(ws.root().join("private")).unwrap();
        std::fs::write(ws.root().join("private/key"), SECRET).unwrap();
        std::fs::create_dir(ws.root().join("sub")).unwrap();
        std::fs::write(ws.root().join("README"), "readme").unwrap();
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nscripts = true\nallow = [[\"cat\"], [\"ls\"]]\nhide = [\".env\", \"private\"]\n"
        );
        let ctx = ws.run(&load("probe"), &config);
        // What the hook writes there, in text a policy could read.
        std::fs::write(ws.root().join(".loopbox/hook.log"), SECRET).unwrap();

        // bwrap covers the store for commands too; Landlock leaves it readable
        // to them (its cost is named in security.md); the policy's own reads
        // below refuse it under both.
        if kind == "bwrap" {
            let v = exec(&ctx, json!(["cat", ".loopbox/hook.log"])).await;
            assert!(!v.to_string().contains(SECRET), "{kind} cat the store: {v}");
            let v = exec(&ctx, json!(["ls", "-a", ".loopbox"])).await;
            assert!(
                !v.to_string().contains("hook.log"),
                "{kind} ls the store: {v}"
            );
        }
        let v = exec(&ctx, json!(["cat", "README"])).await;
        assert_eq!(v["ok"]["stdout"], "readme", "{kind}: {v}");

        // Links a command may make, in a directory it may write.
        let v = script(
            &ctx,
            "ln -s ../.loopbox sub/store && ln -s ../.env sub/env && ln -s ../private sub/priv && \
             ln -s ../.loopbox/hook.log sub/log && ln -s ../README sub/readme && echo planted",
        )
        .await;
        assert_eq!(v["ok"]["stdout"], "planted\n", "{kind}: {v}");
        let v = exec(&ctx, json!(["cat", "sub/env", "sub/priv/key"])).await;
        assert!(
            !v.to_string().contains(SECRET),
            "{kind} cat through links: {v}"
        );

        for path in [
            ".env",
            "private/key",
            "sub/store/hook.log",
            "sub/log",
            "sub/env",
            "sub/priv/key",
        ] {
            let v = probe(&ctx, json!({"op": "read", "path": path}))
                .await
                .unwrap();
            assert!(!v.to_string().contains(SECRET), "{kind} read {path}: {v}");
            assert!(
                v["err"]
                    .as_str()
                    .unwrap_or("")
                    .contains("hidden from policies"),
                "{kind} read {path}: {v}"
            );
        }
        for dir in ["private", "sub/store", "sub/priv"] {
            let v = probe(&ctx, json!({"op": "list", "dir": dir}))
                .await
                .unwrap();
            assert!(
                v["err"]
                    .as_str()
                    .unwrap_or("")
                    .contains("hidden from policies"),
                "{kind} list {dir}: {v}"
            );
        }
        // What is not hidden reads as before, through a link too.
        let v = probe(&ctx, json!({"op": "read", "path": "sub/readme"}))
            .await
            .unwrap();
        assert_eq!(v["ok"], "readme", "{kind}: {v}");
        let v = probe(&ctx, json!({"op": "list", "dir": ""})).await.unwrap();
        assert_eq!(v["ok"], json!(["README", "sub/"]), "{kind}: {v}");
    }
}

/// bubblewrap's private `/tmp` is a tmpfs, memory: a command filling it stops
/// at `shell.tmp_bytes` (1 GiB by default), not at half the machine's memory.
#[tokio::test]
async fn a_command_cannot_fill_memory_through_its_tmp() {
    let fill = "head -c 3000000 /dev/zero > /tmp/fill; echo rc=$?; df -B1 /tmp | tail -1";
    let ws = Workspace::new();
    let config = "[shell]\nsandbox = \"bwrap\"\nscripts = true\ntmp_bytes = 1048576\n";
    let ctx = ws.run(&load("probe"), config);
    let v = script(&ctx, fill).await;
    let out = v["ok"]["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with("rc=1\n"), "{v}");
    assert!(out.contains(" 1048576 "), "the tmpfs's size: {v}");
    assert!(
        v["ok"]["stderr"]
            .to_string()
            .contains("No space left on device"),
        "{v}"
    );
    // The default is larger, and the same write fits.
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nsandbox = \"bwrap\"\nscripts = true\n",
    );
    let v = script(&ctx, fill).await;
    let out = v["ok"]["stdout"].as_str().unwrap_or_default();
    assert!(
        out.starts_with("rc=0\n") && out.contains(" 1073741824 "),
        "{v}"
    );
}

/// A multi-call program (one file, many names) outside the workspace.
struct MultiCall {
    dir: tempfile::TempDir,
}

impl MultiCall {
    fn new() -> MultiCall {
        // Not under /tmp, which bwrap replaces with a private one.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        executable(
            &dir.path().join("multi"),
            "#!/bin/sh\necho \"called as $(basename \"$0\")\"\n",
        );
        for name in ["alpha", "beta"] {
            std::os::unix::fs::symlink("multi", dir.path().join(name)).unwrap();
        }
        MultiCall { dir }
    }

    fn path_var(&self) -> String {
        format!("{}:/usr/bin:/bin", self.dir.path().display())
    }
}

/// Item 6: a program runs by the name the policy wrote, and a rule allows a
/// multi-call binary only under the rule's name.
#[tokio::test]
async fn a_multi_call_program_runs_only_as_the_rule_names_it() {
    let multi = MultiCall::new();
    for kind in ["bwrap", "landlock", "none"] {
        let ws = Workspace::new();
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\npath = \"{}\"\nallow = [[\"alpha\"], [\"vi\"]]\n",
            multi.path_var()
        );
        let ctx = ws.run(&load("probe"), &config);
        let v = exec(&ctx, json!(["alpha"])).await;
        assert_eq!(v["ok"]["stdout"], "called as alpha\n", "{kind}: {v}");
        for other in ["beta", "multi"] {
            let v = exec(&ctx, json!([other])).await;
            assert!(
                error(&v).contains("acts by the name it is called by"),
                "{kind} {other}: {v}"
            );
        }
        // `vi` is vim under another name: still an editor that runs commands.
        if Path::new("/usr/bin/vi").exists() {
            let v = exec(&ctx, json!(["vi", "-c", "!touch /tmp/pwned", "-c", "q"])).await;
            assert!(
                error(&v).contains("only a rule naming the whole command exactly"),
                "{kind}: {v}"
            );
        }
    }
    // A rule naming the real path allows every name.
    let ws = Workspace::new();
    let real = multi.dir.path().join("multi").canonicalize().unwrap();
    let config = format!(
        "[shell]\nsandbox = \"none\"\npath = \"{}\"\nallow = [[\"{}\"]]\n",
        multi.path_var(),
        real.display()
    );
    let ctx = ws.run(&load("probe"), &config);
    assert_eq!(
        exec(&ctx, json!(["beta"])).await["ok"]["stdout"],
        "called as beta\n"
    );
}

/// Item 6 on a real rustup install: `cargo` is rustup under another name.
#[tokio::test]
async fn cargo_runs_as_cargo_and_rustup_is_not_cargo() {
    let Some(home) = std::env::var_os("HOME") else {
        return;
    };
    let bin = PathBuf::from(home).join(".cargo/bin");
    let is_rustup_proxy =
        std::fs::read_link(bin.join("cargo")).is_ok_and(|t| t.ends_with("rustup"));
    if !is_rustup_proxy {
        eprintln!("skipped: cargo here is not a rustup proxy");
        return;
    }
    let ws = Workspace::new();
    let config = format!(
        "[shell]\nsandbox = \"bwrap\"\npath = \"{}:/usr/bin:/bin\"\nallow = [[\"cargo\", \"--version\"]]\n",
        bin.display()
    );
    let ctx = ws.run(&load("probe"), &config);
    let v = exec(&ctx, json!(["cargo", "--version"])).await;
    assert!(
        v["ok"]["stdout"]
            .as_str()
            .unwrap_or("")
            .starts_with("cargo "),
        "{v}"
    );
    let v = exec(&ctx, json!(["rustup", "--version"])).await;
    assert!(
        error(&v).contains("acts by the name it is called by"),
        "{v}"
    );
}

/// Item 7: a deny rule holds however the flags are spelled.
#[tokio::test]
async fn deny_rules_hold_for_every_spelling() {
    let ws = Workspace::new();
    ws.write("victim/file", "keep");
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nsandbox = \"bwrap\"\nallow = [[\"rm\"]]\ndeny = [[\"rm\", \"-rf\"]]\n",
    );
    for flags in [
        vec!["-Rf"],
        vec!["-fR"],
        vec!["--recursive", "--force"],
        vec!["-r", "--force"],
        vec!["--rec", "--forc"],
        vec!["-R", "-f"],
    ] {
        let mut argv = vec!["rm"];
        argv.extend(flags.iter().copied());
        argv.push("victim");
        let v = exec(&ctx, json!(argv)).await;
        assert!(
            error(&v).contains("denied by shell.deny[0]"),
            "{argv:?}: {v}"
        );
    }
    assert!(ws.root().join("victim/file").exists());
}

/// Item 8: variables that make programs load code are refused, in both lists,
/// unless named in `shell.unsafe_env`.
#[tokio::test]
async fn code_loading_variables_need_an_opt_in_per_name() {
    let parse = |t: &str| {
        loopbox::config::Config::parse(t, Path::new("t.toml"))
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    };
    for name in [
        "BASH_ENV",
        "ENV",
        "GCONV_PATH",
        "NODE_OPTIONS",
        "LD_PRELOAD",
        "PYTHONSTARTUP",
        "GIT_SSH_COMMAND",
        "PERL5OPT",
    ] {
        let e = parse(&format!("[shell]\npass_env_from_policy = [\"{name}\"]")).unwrap_err();
        assert!(e.contains("shell.unsafe_env"), "{name}: {e}");
        assert!(
            parse(&format!("[shell]\npass_env = [\"{name}\"]")).is_err(),
            "{name} from the host"
        );
        assert!(
            parse(&format!(
                "[shell]\npass_env_from_policy = [\"{name}\"]\nunsafe_env = [\"{name}\"]"
            ))
            .is_ok(),
            "{name} opted in"
        );
    }
    // The attack from the issue: BASH_ENV makes bash run a command substitution.
    let ws = Workspace::new();
    let out = outside();
    let ctx = ws.run(
        &load("probe"),
        "[shell]\nsandbox = \"bwrap\"\nallow = [[\"ldd\", \"--version\"]]\n",
    );
    let v = probe(&ctx, json!({"op": "exec", "argv": ["ldd", "--version"], "env": {"BASH_ENV": format!("$(touch {}/pwned)", out.path().display())}}))
        .await
        .unwrap();
    assert!(
        error(&v).contains("may not set environment variable `BASH_ENV`"),
        "{v}"
    );
    assert!(!out.path().join("pwned").exists());
}

/// Item 9: host UNIX sockets (a Docker daemon, an ssh-agent) and processes
/// outside the sandbox are out of reach.
#[tokio::test]
async fn host_sockets_and_processes_are_out_of_reach() {
    let out = outside();
    let socket = out.path().join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); print('connected')",
        socket.display()
    );
    let abstract_ = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0loopbox-test'); print('connected')";
    let pid = std::process::id().to_string();
    for kind in KINDS {
        let ws = Workspace::new();
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nnetwork = true\nallow = [[\"python3\", \"-c\", {c:?}], [\"python3\", \"-c\", {a:?}], [\"kill\", \"-0\", \"{pid}\"]]\n",
            c = connect,
            a = abstract_
        );
        let ctx = ws.run(&load("probe"), &config);
        for code in [&connect, &abstract_.to_string()] {
            let v = exec(&ctx, json!(["python3", "-c", code])).await;
            assert_ne!(exit_code(&v), Some(0), "{kind}: {v}");
            assert!(
                !v["ok"]["stdout"]
                    .as_str()
                    .unwrap_or("")
                    .contains("connected"),
                "{kind}: {v}"
            );
        }
        let v = exec(&ctx, json!(["kill", "-0", pid])).await;
        assert_ne!(
            exit_code(&v),
            Some(0),
            "{kind}: signalled a process outside the sandbox: {v}"
        );
    }
    assert!(listener.accept().is_err(), "nothing connected");
}

/// Whether this process runs as root (the attacks below need it to mean anything).
fn is_root() -> bool {
    // /proc/self belongs to the effective uid.
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0
}

/// Python's ctypes making the calls a root-owned sandboxed program would use
/// to reach the host (issue 31, section 1); each prints `ok` or the error.
const ROOT_ATTACKS: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
def call(*args):
    ctypes.set_errno(0)
    r = sc(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
attr = (ctypes.c_char * 128)(); attr[0] = 1; attr[4] = 128  # PERF_TYPE_SOFTWARE, CPU clock
bpf_attr = (ctypes.c_uint32 * 8)(2, 4, 4, 1)
print("mknod:", call(259, -100, b"sub/dev-null", 0o020000 | 0o666, (1 << 8) | 3))
print("reboot:", call(169, 0xfee1dead, 672274793, 0, 0))
print("bpf:", call(321, 0, bpf_attr, 32))
print("perf_event_open:", call(298, attr, -1, 0, -1, 0))
"#;

/// Issue 31 section 1: run as root, a granted script and the agent kept every
/// capability. Now both have empty capability sets (bounding included) and
/// no_new_privs under bwrap and Landlock, and the attacks that root made
/// from inside fail: remounting `/` read-write, a character device made and
/// written in the workspace, reboot(CAD_OFF), bpf(BPF_MAP_CREATE) and a
/// system-wide perf_event_open.
#[tokio::test]
async fn commands_and_the_agent_have_no_capabilities_even_as_root() {
    if !is_root() {
        eprintln!("skipped: the test runs the attacks root could make; run it as root (CI does)");
        return;
    }
    let caps = "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status";
    let empty = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
                 CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n";
    for kind in KINDS {
        let ws = Workspace::new();
        executable(
            &ws.root().join("agent/a"),
            &format!(
                "#!/bin/sh\nprintf '{{\"result\": \"%s\"}}' \"$({caps} | tr '\\t\\n' ' ;')\"\n"
            ),
        );
        let config = format!(
            "[shell]\nsandbox = \"{kind}\"\nscripts = true\n\
             [agent]\ncommand = [\"./agent/a\", \"--\", \"{{prompt}}\"]\noutput = \"json\"\n"
        );
        let ctx = ws.run(&load("probe"), &config);
        let v = script(&ctx, caps).await;
        assert_eq!(
            v["ok"]["stdout"], empty,
            "{kind}: a command's capabilities: {v}"
        );
        let v = probe(&ctx, json!({"op": "prompt", "text": "go"}))
            .await
            .unwrap();
        assert_eq!(
            v["ok"]["stdout"],
            empty.replace(['\t'], " ").replace('\n', ";"),
            "{kind}: the agent's capabilities: {v}"
        );

        let v = script(
            &ctx,
            "mount -o remount,bind,rw / && touch /loopbox-remounted && echo remounted",
        )
        .await;
        assert_ne!(exit_code(&v), Some(0), "{kind}: {v}");
        assert!(!Path::new("/loopbox-remounted").exists(), "{kind}: {v}");

        // Not in the workspace root, where Landlock lets nothing be created.
        std::fs::create_dir(ws.root().join("sub")).unwrap();
        let v = script(
            &ctx,
            &format!(
                "python3 - <<'PY'\n{ROOT_ATTACKS}\nPY\necho written > sub/dev-null && echo wrote"
            ),
        )
        .await;
        let out = v["ok"]["stdout"].as_str().unwrap_or_default();
        for call in ["mknod", "reboot", "bpf", "perf_event_open"] {
            assert!(
                out.contains(&format!("{call}: ")) && !out.contains(&format!("{call}: ok")),
                "{kind}: {call} succeeded: {v}"
            );
        }
        let node = std::fs::symlink_metadata(ws.root().join("sub/dev-null"));
        assert!(
            !node.is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type())),
            "{kind}: a device node was made: {v}"
        );
    }
}

/// Issue 31, root in the sandbox: a granted script wrote
/// `/proc/sys/kernel/core_pattern = |/workspace/evil` under bwrap (uid 0 in its
/// user namespace is the host's root, and bwrap 0.8 left `/proc/sys` writable),
/// and the kernel ran `evil` as root on the host at the next crash. Now `/proc/sys`
/// and the other kernel knobs are read-only and the kernel's memory, keys and
/// timers masked under bwrap; under Landlock `/proc` was never granted for
/// writing. The script only ever writes back the value it read, and opens
/// `/proc/sysrq-trigger` without writing to it.
#[tokio::test]
async fn host_sysctls_stay_read_only_even_as_root() {
    if !is_root() {
        eprintln!("skipped: only root can write host sysctls at all; run it as root (CI does)");
        return;
    }
    let before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let attack = r#"for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/domainname; do
  v=$(cat "$f") && if printf '%s\n' "$v" 2>/dev/null > "$f"; then echo "wrote $f"; else echo "refused $f"; fi
done
if [ -e /proc/sysrq-trigger ]; then
  if (: > /proc/sysrq-trigger) 2>/dev/null; then echo "opened sysrq"; else echo "refused sysrq"; fi
fi
echo "timer_list $(cat /proc/timer_list 2>/dev/null | wc -c)"
echo "keys $(cat /proc/keys 2>/dev/null | wc -c)"
grep -q ' /sys sysfs ro[ ,]' /proc/self/mounts && echo "sys ro"
true"#;
    for kind in KINDS {
        let ws = Workspace::new();
        let config = format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n");
        let ctx = ws.run(&load("probe"), &config);
        let v = script(&ctx, attack).await;
        let out = v["ok"]["stdout"].as_str().unwrap_or_default().to_string();
        assert!(
            out.contains("refused /proc/sys/kernel/core_pattern"),
            "{kind}: {v}"
        );
        assert!(
            out.contains("refused /proc/sys/kernel/domainname"),
            "{kind}: {v}"
        );
        assert!(
            !out.contains("wrote") && !out.contains("opened sysrq"),
            "{kind}: {v}"
        );
        if kind == "bwrap" {
            assert!(
                out.contains("timer_list 0\n") && out.contains("keys 0\n"),
                "{kind}: {v}"
            );
            assert!(out.contains("sys ro"), "{kind}: {v}");
        }
    }
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
        before
    );
}

/// Issue 31: under Landlock `prlimit --pid $PPID --fsize=0:0` killed loopbox
/// (SIGXFSZ at its next write), and as root any process's limits could be
/// changed. Setting another process's limits is refused now in both
/// sandboxes; reading them still works.
#[tokio::test]
async fn commands_cannot_change_another_process_s_limits() {
    let mut target = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let limits = || {
        std::fs::read_to_string(format!("/proc/{}/limits", target.id()))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap()
            .to_string()
    };
    let nofile = limits();
    for kind in KINDS {
        let ws = Workspace::new();
        let config = format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n");
        let ctx = ws.run(&load("probe"), &config);
        // Under bwrap the test's process is in another PID namespace: its own
        // parent (bwrap's) stands in.
        let pid = if kind == "bwrap" {
            "$PPID".to_string()
        } else {
            target.id().to_string()
        };
        let v = script(
            &ctx,
            &format!(
                "prlimit --pid {pid} --nofile=64:64 && echo changed\n\
                 prlimit --pid $PPID --fsize=0:0 && echo changed-parent\n\
                 prlimit --pid {pid} --nofile --noheadings >/dev/null && echo read"
            ),
        )
        .await;
        let out = v["ok"]["stdout"].as_str().unwrap_or_default();
        assert!(!out.contains("changed"), "{kind}: {v}");
        assert!(
            out.contains("read"),
            "{kind}: reading limits stays allowed: {v}"
        );
        assert!(
            v["ok"]["stderr"]
                .as_str()
                .unwrap_or_default()
                .contains("Operation not permitted"),
            "{kind}: {v}"
        );
        // The run goes on: loopbox (this process) still writes files.
        std::fs::create_dir(ws.root().join("sub")).unwrap();
        std::fs::write(ws.root().join("sub/by-loopbox"), "x".repeat(4096)).unwrap();
        let v = script(&ctx, "echo after > sub/after.txt && cat sub/after.txt").await;
        assert_eq!(v["ok"]["stdout"], "after\n", "{kind}: {v}");
    }
    assert_eq!(limits(), nofile);
    target.kill().unwrap();
    target.wait().unwrap();
}

/// Python making a host SysV shared memory segment (key from argv) holding a
/// marker, printing its id; or, with `remove ID`, reading it back and removing it.
const HOST_SHM: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
if sys.argv[1] == "make":
    i = libc.shmget(int(sys.argv[2]), 4096, 0o1600)
    assert i >= 0, ctypes.get_errno()
    p = libc.shmat(i, None, 0)
    ctypes.memmove(p, b"loopbox-shm-marker", 18)
    print(i)
else:
    i = int(sys.argv[2])
    p = libc.shmat(i, None, 0)
    print(ctypes.string_at(p, 18).decode(errors="replace"))
    libc.shmdt(ctypes.c_void_p(p))
    libc.shmctl(i, 0, None)  # IPC_RMID
"#;

/// Issue 31: with no IPC namespace under Landlock, a command attached to a
/// host shared memory segment of the same user by its key and read and wrote
/// it. Now the Landlock child gets its own IPC namespace (as root) or the
/// SysV and POSIX message queue calls are refused (otherwise); bwrap has
/// `--unshare-ipc`. The segment, made here, is neither read nor changed.
#[tokio::test]
async fn host_shared_memory_is_out_of_reach() {
    let key = 0x10b0_0000 + (std::process::id() & 0xffff);
    let made = std::process::Command::new("python3")
        .args(["-c", HOST_SHM, "make", &key.to_string()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let id = String::from_utf8(made.stdout).unwrap().trim().to_string();
    let attack = format!(
        r#"python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
i = libc.shmget({key}, 0, 0)
if i < 0:
    print("shmget:", os.strerror(ctypes.get_errno()))
else:
    p = libc.shmat(i, None, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        print("shmat:", os.strerror(ctypes.get_errno()))
    else:
        print("read:", ctypes.string_at(p, 18))
        ctypes.memmove(p, b"written-by-command", 18)
PY"#
    );
    let mut outcomes = Vec::new();
    for kind in KINDS {
        let ws = Workspace::new();
        let config = format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n");
        let ctx = ws.run(&load("probe"), &config);
        let v = script(&ctx, &attack).await;
        outcomes.push(format!("{kind}: {v}"));
    }
    let back = std::process::Command::new("python3")
        .args(["-c", HOST_SHM, "remove", &id])
        .output()
        .unwrap();
    let content = String::from_utf8_lossy(&back.stdout).trim().to_string();
    for o in &outcomes {
        assert!(o.contains("shmget: "), "{o}");
        assert!(!o.contains("read:"), "{o}");
    }
    assert_eq!(content, "loopbox-shm-marker", "{outcomes:?}");
}

/// Issue 31: under Landlock reads were granted on all of `/`, `/dev` included,
/// and as root a `brw-------` disk opens by owner match (a loop device read
/// back its image). Now only the devices programs use are readable in `/dev`;
/// bwrap's `/dev` has no disks at all.
#[tokio::test]
async fn disks_cannot_be_read_even_as_root() {
    if !is_root() {
        eprintln!(
            "skipped: a disk is root's, and only root can attach a loop device; run it as root (CI does)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    let mut bytes = b"loopbox-disk-marker".to_vec();
    bytes.resize(1 << 20, 0);
    std::fs::write(&image, bytes).unwrap();
    let attach = std::process::Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&image)
        .output()
        .unwrap();
    if !attach.status.success() {
        eprintln!(
            "skipped: losetup cannot attach a loop device here: {}",
            String::from_utf8_lossy(&attach.stderr)
        );
        return;
    }
    let device = String::from_utf8(attach.stdout).unwrap().trim().to_string();
    let mut outcomes = Vec::new();
    for kind in KINDS {
        let ws = Workspace::new();
        let config = format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n");
        let ctx = ws.run(&load("probe"), &config);
        let v = script(
            &ctx,
            &format!("head -c 19 {device}; echo; head -c 4 /dev/urandom | wc -c; ls /dev/null /dev/pts >/dev/null && echo listed"),
        )
        .await;
        outcomes.push((kind, v));
    }
    let detach = std::process::Command::new("losetup")
        .args(["-d", &device])
        .status();
    for (kind, v) in &outcomes {
        let out = v["ok"]["stdout"].as_str().unwrap_or_default();
        assert!(!out.contains("loopbox-disk-marker"), "{kind}: {v}");
        assert!(
            out.contains("4\nlisted"),
            "{kind}: what programs use stays: {v}"
        );
    }
    assert!(detach.unwrap().success());
}

/// Issue 31: Landlock does not cover metadata, so as root under it
/// `chmod 4777` made a root-owned program outside the workspace set-user-ID
/// (and under bwrap, one in the workspace, which is root's on the host). Set-ID
/// bits are refused by the seccomp filter in both sandboxes now.
#[tokio::test]
async fn commands_cannot_make_set_id_programs() {
    let out = outside();
    let victim = out.path().join("victim");
    executable(&victim, "#!/bin/sh\n");
    for kind in KINDS {
        let ws = Workspace::new();
        std::fs::create_dir(ws.root().join("sub")).unwrap();
        executable(&ws.root().join("sub/evil"), "#!/bin/sh\n");
        executable(&ws.root().join("sub/plain"), "#!/bin/sh\n");
        let config = format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n");
        let ctx = ws.run(&load("probe"), &config);
        let v = script(
            &ctx,
            &format!(
                "for f in {} sub/evil; do chmod 4755 $f; chmod g+s $f; done; chmod 700 sub/plain && echo plain",
                victim.display()
            ),
        )
        .await;
        assert!(
            v["ok"]["stdout"]
                .as_str()
                .unwrap_or_default()
                .contains("plain"),
            "{kind}: {v}"
        );
        for f in [victim.clone(), ws.root().join("sub/evil")] {
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&f).unwrap().permissions(),
            );
            assert_eq!(mode & 0o6000, 0, "{kind}: {} is set-ID: {v}", f.display());
        }
    }
}
