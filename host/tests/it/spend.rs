//! What runs spend on their agent, and the budgets that stop them. The agent
//! is `fixtures/agents/costly-claude`, a script that prints Claude Code's
//! result object with growing costs (turn N costs N x $0.10), run through the
//! real `claude` preset; the hook reads a Claude Code transcript in the
//! recorded format (`fixtures/usage/claude-code.transcript.json`).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::{Value, json};

use crate::common::{self, loopbox, trusted_command};

/// Ralph with a promise the agent never makes: it injects until something stops it.
const NEVER: &str =
    r#"{"prompt": "Fix the build.", "completion_promise": "NEVER", "max_iterations": 50}"#;

/// A workspace whose agent is the costly script as `claude` (the preset), with `run` keys added.
fn costly(run: &str) -> (tempfile::TempDir, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let agent = bin.path().join("claude");
    std::fs::copy(
        common::repo().join("host/tests/fixtures/agents/costly-claude"),
        &agent,
    )
    .unwrap();
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!(
            "[shell]\npath = \"{}:/usr/local/bin:/usr/bin:/bin\"\n\n[agent]\nrunner = \"claude\"\nwritable = []\npass_env = []\n\n[run]\nmax_turns = 20\n{run}\n",
            bin.path().display()
        ),
    )
    .unwrap();
    (ws, bin)
}

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// How many times the agent was run.
fn agent_calls(ws: &Path) -> u32 {
    std::fs::read_to_string(ws.join(".costly-agent/turns"))
        .map(|t| t.trim().parse().unwrap())
        .unwrap_or(0)
}

fn show(ws: &Path, id: &str) -> Value {
    json_of(&loopbox(ws, &["runs", "show", id, "--json"]))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a_cost_budget_stops_the_run_before_the_turn_that_would_pass_it() {
    let (ws, _bin) = costly("max_cost_usd = 0.9");
    let o = loopbox(
        ws.path(),
        &["run", "builtin:ralph", "--input", NEVER, "--json"],
    );
    let out = json_of(&o);
    // Turns cost 0.1, 0.2, 0.3, 0.4: $1.00 after four, past $0.90, so no fifth starts.
    assert_eq!(common::code(&o), 6, "{out}");
    assert_eq!(out["status"], "failed");
    assert_eq!(
        out["summary"],
        "the run reached run.max_cost_usd = 0.9: it has spent $1.0000 over 4 agent turn(s)"
    );
    assert_eq!(agent_calls(ws.path()), 4);
    // Claude Code was told what was left each time, so it could stop itself mid-turn.
    let argv = std::fs::read_to_string(ws.path().join(".costly-agent/argv")).unwrap();
    let left: Vec<&str> = argv
        .lines()
        .map(|l| l.rsplit("--max-budget-usd ").next().unwrap())
        .collect();
    assert_eq!(left, ["0.9000", "0.8000", "0.6000", "0.3000"], "{argv}");

    let id = out["run_id"].as_str().unwrap();
    let s = show(ws.path(), id);
    assert_eq!(s["outcome"]["budget"], "run.max_cost_usd", "{s}");
    assert!(close(s["spend"]["cost_usd"].as_f64().unwrap(), 1.0), "{s}");
    assert_eq!(s["spend"]["cost_known"], true);
    assert_eq!(s["spend"]["tokens"]["total"], 1150 * (1 + 2 + 3 + 4));
    let turns = s["agent_turns"].as_array().unwrap();
    let costs: Vec<f64> = turns
        .iter()
        .map(|t| t["cost_usd"].as_f64().unwrap())
        .collect();
    assert_eq!(costs, [0.1, 0.2, 0.3, 0.4]);
    assert!(turns.iter().all(|t| t["kind"] == "turn"
        && t["model"] == "claude-sonnet-4-5-20250929"
        && t["cost_source"] == "agent"));
    // The text views say the same.
    let text =
        String::from_utf8_lossy(&loopbox(ws.path(), &["runs", "show", id]).stdout).into_owned();
    assert!(
        text.contains("spend:    $1.0000 over 4 agent turn(s); 11500 tokens (11000 in, 10000 of them cached, 500 out)"),
        "{text}"
    );
    assert!(
        text.contains("$0.4000  claude-sonnet-4-5-20250929"),
        "{text}"
    );
    let list = String::from_utf8_lossy(&loopbox(ws.path(), &["runs"]).stdout).into_owned();
    assert!(
        list.lines()
            .any(|l| l.starts_with(id) && l.split_whitespace().any(|w| w == "$1.0000")),
        "{list}"
    );
    let listed = json_of(&loopbox(ws.path(), &["runs", "--json"]));
    assert!(close(listed[0]["spend"]["cost_usd"].as_f64().unwrap(), 1.0));
}

#[test]
fn a_token_budget_counts_cached_input_and_output() {
    // Each turn N uses 1150 x N tokens (1100 N in, 1000 N of them cached, 50 N out):
    // 1150, 3450, 6900 after three, past 5000.
    let (ws, _bin) = costly("max_tokens = 5000");
    let o = loopbox(
        ws.path(),
        &["run", "builtin:ralph", "--input", NEVER, "--json"],
    );
    let out = json_of(&o);
    assert_eq!(common::code(&o), 6, "{out}");
    assert_eq!(
        out["summary"],
        "the run reached run.max_tokens = 5000: it has used 6900 tokens over 3 agent turn(s)"
    );
    assert_eq!(agent_calls(ws.path()), 3);
    // No cost budget: Claude Code gets no budget flag.
    let argv = std::fs::read_to_string(ws.path().join(".costly-agent/argv")).unwrap();
    assert!(!argv.contains("--max-budget-usd"), "{argv}");
}

/// Start the costly run with a crash point, killed by SIGKILL there; its id.
fn killed_at(ws: &Path, point: &str) -> String {
    let o = trusted_command(ws)
        .args(["-C"])
        .arg(ws)
        .args(["run", "builtin:ralph", "--input", NEVER, "--json"])
        .env("LOOPBOX_CRASH_AT", point)
        .env("CI", "true")
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .current_dir(ws)
        .output()
        .unwrap();
    assert_eq!(
        o.status.signal(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let runs = json_of(&loopbox(ws, &["runs", "--json"]));
    runs[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_budget_holds_across_kill_9_and_resume_counting_each_turn_once() {
    // Killed right after turn 2's reply and charge were written (one transaction):
    // the resumed run has $0.30 already, sends turns 3 and 4, and stops at $1.00.
    let (ws, _bin) = costly("max_cost_usd = 0.9");
    let id = killed_at(ws.path(), "turn-recorded:2");
    assert!(close(
        show(ws.path(), &id)["spend"]["cost_usd"].as_f64().unwrap(),
        0.3
    ));
    let o = loopbox(ws.path(), &["runs", "resume", &id, "--json"]);
    let out = json_of(&o);
    assert_eq!(common::code(&o), 6, "{out}");
    assert_eq!(agent_calls(ws.path()), 4);
    let s = show(ws.path(), &id);
    assert_eq!(s["spend"]["turns"], 4, "{s}");
    assert!(close(s["spend"]["cost_usd"].as_f64().unwrap(), 1.0), "{s}");
    assert_eq!(s["agent_turns"].as_array().unwrap().len(), 4);

    // Killed after the agent answered turn 3 but before loopbox wrote it down: the
    // turn's outcome is unknown (exit 10). Resent, the new reply is charged; the
    // lost one was never read, so it is not (the README's "Budgets" says so).
    let (ws, _bin) = costly("max_cost_usd = 0.9");
    let id = killed_at(ws.path(), "turn-finished:3");
    let o = loopbox(ws.path(), &["runs", "resume", &id, "--json"]);
    assert_eq!(common::code(&o), 10, "{}", json_of(&o));
    let o = loopbox(
        ws.path(),
        &["runs", "resume", &id, "--resend-turn", "--json"],
    );
    let out = json_of(&o);
    assert_eq!(common::code(&o), 6, "{out}");
    // Calls cost 0.1, 0.2, (0.3 lost), 0.4, 0.5: four charged, $1.20, past $0.90.
    assert_eq!(agent_calls(ws.path()), 5);
    let s = show(ws.path(), &id);
    assert_eq!(s["spend"]["turns"], 4, "{s}");
    assert!(close(s["spend"]["cost_usd"].as_f64().unwrap(), 1.2), "{s}");
}

#[test]
fn a_policy_section_has_a_budget_of_its_own_within_the_top_levels() {
    let (ws, _bin) = costly("max_cost_usd = 5.0");
    // The section's own shell and agent: the same script, found on the same path.
    let toml = std::fs::read_to_string(ws.path().join("loopbox.toml")).unwrap();
    let section = |name: &str| {
        toml.split(&format!("[{name}]"))
            .nth(1)
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap()
            .to_string()
    };
    let (shell, agent) = (section("shell"), section("agent"));
    std::fs::write(
        ws.path().join("loopbox.toml"),
        format!(
            "{toml}\n[policies.loop]\nsource = \"builtin:ralph\"\n\n[policies.loop.shell]{shell}\n\n[policies.loop.agent]{agent}\n\n[policies.loop.run]\nmax_cost_usd = 0.25\n"
        ),
    )
    .unwrap();
    let o = loopbox(ws.path(), &["run", "loop", "--input", NEVER, "--json"]);
    let out = json_of(&o);
    assert_eq!(common::code(&o), 6, "{out}");
    assert_eq!(
        out["summary"],
        "the run reached policies.loop.run.max_cost_usd = 0.25: it has spent $0.3000 over 2 agent turn(s)"
    );
}

/// The recorded Claude Code transcript's lines (two messages, $0.05274165 at the prices below).
fn transcript_lines() -> Vec<String> {
    let f: Value = serde_json::from_str(
        &std::fs::read_to_string(
            common::repo().join("host/tests/fixtures/usage/claude-code.transcript.json"),
        )
        .unwrap(),
    )
    .unwrap();
    f["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

fn hook(ws: &Path, input: Value) -> (i32, Value, String) {
    let o = common::feed(
        trusted_command(ws)
            .args([
                "hook",
                "claude-code",
                "--policy",
                "builtin:ralph",
                "--input",
                NEVER,
            ])
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            )
            .current_dir(ws),
        input.to_string().as_bytes(),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let json = if out.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&out).unwrap()
    };
    (
        o.status.code().unwrap(),
        json,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_hook_session_is_stopped_by_what_its_transcript_says_it_spent() {
    let ws = tempfile::tempdir().unwrap();
    let d = ws.path();
    std::fs::write(
        d.join("loopbox.toml"),
        "[run]\nmax_cost_usd = 0.06\n\n[prices.\"claude-sonnet-4-5\"]\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\ncache_read_per_mtok = 0.3\ncache_write_per_mtok = 3.75\n",
    )
    .unwrap();
    let transcript = d.join("session.jsonl");
    std::fs::write(&transcript, transcript_lines().join("\n") + "\n").unwrap();
    let event = |name: &str| {
        let mut v = json!({"session_id": "s1", "transcript_path": transcript, "cwd": d,
            "permission_mode": "default", "hook_event_name": name});
        if name == "Stop" {
            v["stop_hook_active"] = json!(false);
            v["last_assistant_message"] = json!("still working");
        } else {
            v["tool_name"] = json!("Bash");
            v["tool_input"] = json!({"command": "npm test"});
            v["tool_use_id"] = json!("toolu_9");
        }
        v
    };
    // $0.0527 so far: under the budget, the policy decides (Ralph keeps the agent working).
    let (code, out, err) = hook(d, event("Stop"));
    assert_eq!(
        (code, out["decision"].as_str()),
        (0, Some("block")),
        "{err}"
    );

    // A third message ($0.0101) takes the session to $0.0628: the next Stop lets the agent stop.
    let third = json!({"type": "assistant", "message": {"id": "msg_01C", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "more"}],
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 500, "cache_read_input_tokens": 12205, "output_tokens": 300}}});
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&transcript)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{third}\n").as_bytes()).unwrap();
    let (code, out, err) = hook(d, event("Stop"));
    assert_eq!(code, 0, "{err}");
    assert!(out.get("decision").is_none(), "{out}");
    let said = out["systemMessage"].as_str().unwrap();
    assert_eq!(
        said,
        "loopbox: the run reached run.max_cost_usd = 0.06: it has spent $0.0628 over 3 agent turn(s)"
    );
    // And every later gate is denied, naming the budget.
    let (code, out, err) = hook(d, event("PreToolUse"));
    assert_eq!(
        (
            code,
            out["hookSpecificOutput"]["permissionDecision"].as_str()
        ),
        (0, Some("deny")),
        "{err}"
    );
    assert!(
        out["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("run.max_cost_usd = 0.06"),
        "{out}"
    );
    let runs = json_of(&loopbox(d, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "failed");
    assert!(
        close(runs[0]["spend"]["cost_usd"].as_f64().unwrap(), 0.06280815),
        "{runs}"
    );
    assert_eq!(runs[0]["spend"]["turns"], 3);
}

#[test]
fn a_prompt_action_past_the_budget_is_refused_as_budget_exhausted() {
    // The probe sends one prompt per event: $0.10, then $0.20; the third finds $0.30
    // spent of run.max_cost_usd = 0.25, and the policy reads why.
    let (ws, _bin) = costly("max_cost_usd = 0.25");
    let probe = common::probe().to_string_lossy().into_owned();
    let o = loopbox(
        ws.path(),
        &[
            "run",
            &probe,
            "--input",
            r#"{"op": "prompt", "text": "first", "then": "pass"}"#,
            "--tick",
            r#"{"op": "prompt", "text": "second", "then": "pass"}"#,
            "--tick",
            r#"{"op": "prompt", "text": "third"}"#,
            "--json",
        ],
    );
    let out = json_of(&o);
    assert_eq!(common::code(&o), 0, "{out}");
    let data = match &out["outcome"]["data"] {
        Value::String(text) => serde_json::from_str(text).unwrap(),
        v => v.clone(),
    };
    assert_eq!(
        data,
        json!({"err": {"kind": "budget-exhausted", "message": "the run reached run.max_cost_usd = 0.25: it has spent $0.3000 over 2 agent turn(s)"}})
    );
    assert_eq!(agent_calls(ws.path()), 2);
    let s = show(ws.path(), out["run_id"].as_str().unwrap());
    let kinds: Vec<&str> = s["agent_turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["prompt", "prompt"]);
    assert_eq!(s["prompts"], 2);
}

#[test]
fn a_policy_reads_what_the_run_spent_and_its_budget() {
    // One prompt ($0.10, 1100 tokens in, 1000 of them cached, 50 out), then a tick
    // whose handler reads the totals through the `spend` interface (contract 0.4.0).
    let (ws, _bin) = costly("max_cost_usd = 0.9\nmax_tokens = 1000000");
    let probe = common::probe().to_string_lossy().into_owned();
    let o = loopbox(
        ws.path(),
        &[
            "run",
            &probe,
            "--input",
            r#"{"op": "prompt", "text": "first", "then": "pass"}"#,
            "--tick",
            r#"{"op": "spend"}"#,
            "--json",
        ],
    );
    let out = json_of(&o);
    assert_eq!(common::code(&o), 0, "{out}");
    assert_eq!(
        out["outcome"]["data"],
        json!({
            "spent": {"turns": 1, "input_tokens": 1100, "cache_read_tokens": 1000, "cache_write_tokens": 0,
                      "output_tokens": 50, "cost_usd": 0.1, "cost_known": true},
            "budget": {"max_cost_usd": 0.9, "max_tokens": 1000000},
        })
    );
    // The read is journaled with the tick's event, so a replay answers what it read.
    let db = loopbox::db::Db::open_read_only(&ws.path().join(".loopbox/loopbox.db")).unwrap();
    let journal = db.journal_of_run(out["run_id"].as_str().unwrap()).unwrap();
    let read = journal
        .iter()
        .find(|(_, r)| r.kind == "spend")
        .expect("the spend read is in the journal");
    let recorded: Value = serde_json::from_str(read.1.result.as_deref().unwrap()).unwrap();
    assert!(
        close(recorded["cost_usd"].as_f64().unwrap(), 0.1),
        "{recorded}"
    );
}
