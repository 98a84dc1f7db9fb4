//! Contract versions at the command line: a policy built from source against
//! `wit/released/0.1.0` (`guests/rust/contract-0.1`) runs on today's host, by
//! `run` and by a hook whose event carries an `origin` 0.1.0 never had; one
//! built against 0.2.0 (`guests/rust/contract-0.2`) prompts the `[agent]`
//! section; one built against 0.3.0 (`guests/rust/contract-0.3`) keeps its
//! decisions (0.4.0 added `sleep`) and its calls (a prompt's profile, a
//! worktree); one claiming a contract newer than the host is refused with what
//! it needs.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::common::*;

/// `guests/rust/contract-0.2`, built from source by the guests' build machinery.
fn policy_0_2() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            loopbox_guest_build::Repo::containing(&repo())
                .build_rust_guests(&["contract-0-2"])
                .remove(0)
                .1
        })
        .clone()
}

/// `guests/rust/contract-0.3`, built from source by the guests' build machinery.
fn policy_0_3() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            loopbox_guest_build::Repo::containing(&repo())
                .build_rust_guests(&["contract-0-3"])
                .remove(0)
                .1
        })
        .clone()
}

/// `guests/rust/contract-0.1`, built from source by the guests' build machinery.
fn old_policy() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            loopbox_guest_build::Repo::containing(&repo())
                .build_rust_guests(&["contract-0-1"])
                .remove(0)
                .1
        })
        .clone()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `loopbox hook claude-code --policy POLICY` with `event` on stdin: its answer.
fn hook(ws: &Path, policy: &str, event: Value) -> (i32, Value, String) {
    let o = feed(
        trusted_command(ws)
            .args([
                "-C",
                &ws.to_string_lossy(),
                "hook",
                "claude-code",
                "--policy",
                policy,
            ])
            .args(["--input", "{}"])
            .current_dir(ws)
            .env("CI", "true")
            .env("CLAUDE_PROJECT_DIR", ws)
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            ),
        event.to_string().as_bytes(),
    );
    let answer = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code().unwrap_or(-1), answer, stderr(&o))
}

#[test]
fn a_policy_built_for_contract_0_1_0_runs_on_todays_host() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::copy(old_policy(), ws.join("old.wasm")).unwrap();

    // inspect names the contract it was built for, in text and JSON.
    let o = loopbox(ws, &["inspect", "old.wasm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("\ncontract     loopbox:policy@0.1.0\n"),
        "{text}"
    );
    assert!(
        text.contains("contract-0-1 0.1.0: a policy built against loopbox:policy@0.1.0"),
        "{text}"
    );
    let o = loopbox(ws, &["inspect", "old.wasm", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["contract"].as_str(), v["world"].as_str()),
        (Some("loopbox:policy@0.1.0"), Some("loop-policy")),
        "{v}"
    );

    // run: its action (adapted up to today's capability), state and log work,
    // and its decision counts.
    let o = loopbox(
        ws,
        &[
            "run",
            "old.wasm",
            "--input",
            r#"{"exec": ["echo", "hello"]}"#,
            "--allow",
            "echo",
        ],
    );
    assert_eq!(
        (code(&o), normalize(&o.stdout)),
        (0, "done: 0.1.0 ran it: hello\n".to_string()),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("contract 0.1.0 policy started"),
        "{}",
        stderr(&o)
    );
    // A refusal reaches it as 0.1.0's action error.
    let o = loopbox(
        ws,
        &[
            "run",
            "old.wasm",
            "--input",
            r#"{"exec": ["echo", "hello"]}"#,
        ],
    );
    assert!(
        normalize(&o.stdout).starts_with("escalated: 0.1.0 denied: "),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );

    // runs show names the contract too.
    let o = loopbox(ws, &["runs", "--json"]);
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = runs[0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{runs}"))
        .to_string();
    let o = loopbox(ws, &["runs", "show", &id]);
    assert!(
        stdout(&o).contains("\ncontract: loopbox:policy@0.1.0\n"),
        "{}",
        stdout(&o)
    );
    let o = loopbox(ws, &["runs", "show", &id, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["contract"], "loopbox:policy@0.1.0", "{v}");

    // A hook: today's events carry an `origin` the policy never sees; its
    // decisions are answered as any policy's.
    let stop = json!({
        "session_id": "s1", "transcript_path": ws.join("missing.jsonl"), "cwd": ws,
        "permission_mode": "plan", "hook_event_name": "Stop", "stop_hook_active": false,
        "last_assistant_message": "all done",
    });
    let (code, answer, err) = hook(ws, "old.wasm", stop);
    assert_eq!(
        (code, answer),
        (
            0,
            json!({"decision": "block", "reason": "0.1.0 saw turn 1 of s1 (continuation false, started true): all done"})
        ),
        "{err}"
    );
    let tool = json!({
        "session_id": "s1", "cwd": ws, "hook_event_name": "PreToolUse",
        "permission_mode": "plan", "tool_name": "Bash", "tool_input": {"command": "ls"},
    });
    let (_, answer, err) = hook(ws, "old.wasm", tool);
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecisionReason"], "0.1.0 blocks Bash",
        "{answer} {err}"
    );
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecision"], "deny",
        "{answer}"
    );
}

#[test]
fn a_policy_built_for_contract_0_2_0_runs_on_todays_host_and_prompts_the_agent_section() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::copy(policy_0_2(), ws.join("old.wasm")).unwrap();
    // A profile the 0.2.0 policy cannot name: its prompts go to `[agent]`.
    std::fs::write(
        ws.join("loopbox.toml"),
        "[agent]\ncommand = [\"echo\", \"default agent:\", \"{prompt}\"]\noutput = \"text\"\n\n\
         [agents.other]\nargs = [\"other profile\"]\n",
    )
    .unwrap();

    let o = loopbox(ws, &["inspect", "old.wasm"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\ncontract     loopbox:policy@0.2.0\n"),
        "{}",
        stdout(&o)
    );

    let o = loopbox(ws, &["run", "old.wasm", "--input", r#"{"prompt": "hi"}"#]);
    assert_eq!(
        (code(&o), normalize(&o.stdout)),
        (0, "done: 0.2.0 got: default agent: hi\n".to_string()),
        "{}",
        stderr(&o)
    );
    let o = loopbox(
        ws,
        &[
            "run",
            "old.wasm",
            "--input",
            r#"{"exec": ["echo", "hello"]}"#,
            "--allow",
            "echo",
        ],
    );
    assert_eq!(
        (code(&o), normalize(&o.stdout)),
        (0, "done: 0.2.0 got: hello\n".to_string()),
        "{}",
        stderr(&o)
    );

    // Its events keep the `origin` 0.2.0 has.
    let stop = json!({
        "session_id": "s1", "transcript_path": ws.join("missing.jsonl"), "cwd": ws,
        "permission_mode": "plan", "hook_event_name": "Stop", "stop_hook_active": false,
        "last_assistant_message": "all done",
    });
    let (code, answer, err) = hook(ws, "old.wasm", stop);
    assert_eq!(
        (code, answer),
        (
            0,
            json!({"decision": "block", "reason": "0.2.0 saw turn 1 of s1 from claude-code: all done"})
        ),
        "{err}"
    );
}

/// The same policy with its interface names rewritten to claim contract 9.0.0
/// (same length, so the component stays valid).
fn claiming(version: &str) -> Vec<u8> {
    renamed(&old_policy(), "0.1.0", version)
}

/// The component at `path` with its interface names of contract `was`
/// rewritten to `version` (same length, so the component stays valid).
fn renamed(path: &Path, was: &str, version: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    for iface in ["types", "actions", "state", "workspace", "log", "policy"] {
        let from = format!("loopbox:policy/{iface}@{was}");
        let to = format!("loopbox:policy/{iface}@{version}");
        assert_eq!(from.len(), to.len());
        let mut at = 0;
        while let Some(i) = bytes[at..]
            .windows(from.len())
            .position(|w| w == from.as_bytes())
        {
            bytes[at + i..at + i + to.len()].copy_from_slice(to.as_bytes());
            at += i + to.len();
        }
    }
    bytes
}

/// Issue 45, item 7: a component built from wit/ while 0.2.0 was being made,
/// when the contract still carried 0.1.0's name but `turn` had 5 fields (its
/// `origin`): 0.2.0's policy under 0.1.0's names. It is told for what it is,
/// and how to rebuild it, not taken for an edited copy of wit/.
#[test]
fn a_policy_built_between_releases_is_told_to_rebuild_not_called_edited() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("between.wasm"),
        renamed(&policy_0_2(), "0.2.0", "0.1.0"),
    )
    .unwrap();
    for args in [&["run", "between.wasm"][..], &["inspect", "between.wasm"]] {
        let o = loopbox(ws, args);
        assert_eq!(code(&o), 2, "{args:?}: {}{}", stdout(&o), stderr(&o));
        let said = stderr(&o);
        assert!(
            said.contains("it names contract `loopbox:policy@0.1.0` but its `policy` export has the types of `loopbox:policy@0.2.0`")
                && said.contains("Rebuild it against a released contract: `loopbox build`"),
            "{args:?}: {said}"
        );
        assert!(!said.contains("edited copy"), "{args:?}: {said}");
    }
}

#[test]
fn a_policy_for_a_newer_contract_is_refused_with_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("new.wasm"), claiming("9.0.0")).unwrap();
    for args in [&["run", "new.wasm"][..], &["inspect", "new.wasm"]] {
        let o = loopbox(ws, args);
        assert_eq!(code(&o), 2, "{args:?}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(
            stderr(&o),
            "error: failed to load policy `new.wasm`: it was built for contract `loopbox:policy@9.0.0`, newer than this loopbox, which supports 0.1.0, 0.2.0, 0.3.0 and 0.4.0: upgrade loopbox to a version that supports 9.0.0, or rebuild the policy against `loopbox:policy@0.4.0`\n",
            "{args:?}"
        );
    }
}

#[test]
fn a_policy_built_for_contract_0_3_0_runs_on_todays_host_with_its_profiles_and_worktrees() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::copy(policy_0_3(), ws.join("old.wasm")).unwrap();
    std::fs::write(
        ws.join("loopbox.toml"),
        "[agent]\ncommand = [\"echo\", \"default agent:\", \"{prompt}\"]\noutput = \"text\"\n\n\
         [agents.other]\ncommand = [\"echo\", \"other profile:\", \"{prompt}\"]\n\n\
         [worktree]\nallow = true\n",
    )
    .unwrap();
    for args in [
        &["init", "-q"][..],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "base",
        ],
        &["branch", "feat"],
    ] {
        assert!(
            std::process::Command::new("git")
                .args(args)
                .current_dir(ws)
                .status()
                .unwrap()
                .success()
        );
    }
    let o = loopbox(ws, &["inspect", "old.wasm"]);
    assert!(
        stdout(&o).contains("\ncontract     loopbox:policy@0.3.0\n"),
        "{}",
        stdout(&o)
    );
    // Its decision (0.3.0's `done`) and its profile reach today's host.
    let o = loopbox(
        ws,
        &[
            "run",
            "old.wasm",
            "--input",
            r#"{"prompt": "hi", "profile": "other"}"#,
        ],
    );
    assert_eq!(
        (code(&o), normalize(&o.stdout)),
        (0, "done: 0.3.0 got: other profile: hi\n".to_string()),
        "{}",
        stderr(&o)
    );
    // Its worktree calls, linked under their 0.3.0 names.
    let o = loopbox(
        ws,
        &["run", "old.wasm", "--input", r#"{"worktree": "feat"}"#],
    );
    let out = normalize(&o.stdout);
    assert!(
        code(&o) == 0 && out.starts_with("done: 0.3.0 had a worktree at .worktrees/"),
        "{out}{}",
        stderr(&o)
    );
}
