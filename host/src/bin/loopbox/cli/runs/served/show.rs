//! `loopbox runs show ID --server URL`: one served run as `GET /api/v1/runs/ID`
//! gives it (its latest 500 events and actions), printed as `runs show`
//! prints a workspace's run; `--json` in the local command's shape.

use serde_json::{Value, json};

use super::super::super::{Failure, exit};
use super::super::show::{ShowArgs, show_approval, show_loop, show_loop_journal};
use super::client::Client;
use super::{approval, ms, segment};
use loopbox::ui::{Untrusted, one_line, shorten, utc};

/// The API's view in the shape of the local `runs show --json`: the same
/// keys; what a server does not say (the contract, the driver's pid) is null.
fn local_shape(v: &Value) -> Value {
    let approvals: Vec<Value> = v["approvals"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|a| {
                    json!({
                        "id": a["id"], "status": a["status"], "what": a["what"], "rule": a["rule"],
                        "digest": a["digest"], "request": a["request"], "requested": a["requested"],
                        "deadline": a["deadline"], "decided_by": a["decided_by"], "decided": a["decided"],
                        "reason": a["reason"], "used": a["consumed"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let journal: Vec<Value> = v["journal"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|j| {
                    json!({
                        "event": j["event"], "seq": j["seq"], "kind": j["kind"], "request": j["request"],
                        "command": j["command"], "state": j["state"], "verdict": j["verdict"], "then": j["then"],
                        "outcome": j["outcome"], "result": j["error"],
                        "exit_code": j["exit_code"], "duration_ms": j["duration_ms"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "id": v["id"], "policy": v["policy"], "policy_digest": v["policy_digest"], "status": v["status"],
        "contract": null, "policy_name": v["policy_name"], "loop": v["loop"], "grants": v["grants"],
        "started": v["started"], "updated": v["updated"],
        "turns": v["turns"], "actions": v["actions"], "prompts": v["prompts"],
        "outcome": v["outcome"], "input": v["input"],
        "driver": if v["driven"] == true { json!({"pid": null, "host": null, "alive": true}) } else { Value::Null },
        "cancel_requested": v["cancel_requested"], "wakes": v["wakes"], "started_by": v["started_by"],
        "spend": v["spend"], "agent_turns": v["agent_turns"], "approvals": approvals,
        "events": v["events"], "network": v["network"], "journal": journal,
    })
}

pub fn execute(c: &Client, a: ShowArgs, json: bool) -> Result<i32, Failure> {
    let v = c.get(&format!("/api/v1/runs/{}", segment(&a.id)))?;
    if json {
        loopbox::outln!("{}", local_shape(&v));
        return Ok(exit::OK);
    }
    let text = |k: &str| one_line(v[k].as_str().unwrap_or("-"));
    let id = text("id");
    if v["loop"].is_object() {
        loopbox::outln!(
            "run {id} of loop {} ({}) on {}",
            one_line(v["loop"]["name"].as_str().unwrap_or("?")),
            text("policy"),
            c.url
        );
    } else {
        let name = v["policy_name"]
            .as_str()
            .map(|n| format!(" ([policies.{}])", one_line(n)))
            .unwrap_or_default();
        loopbox::outln!("run {id} of {}{name} on {}", text("policy"), c.url);
    }
    let summary = v["outcome"]["summary"]
        .as_str()
        .map(|s| format!(": {}", Untrusted(s)))
        .unwrap_or_default();
    loopbox::outln!("status:   {}{summary}", text("status"));
    if let Some(w) = ms(&v["wakes"]) {
        loopbox::outln!("wakes:    {} UTC", utc(w));
    }
    if v["loop"].is_object() {
        show_loop(&v["loop"]);
    }
    loopbox::outln!("grants:   {}", text("grants"));
    loopbox::outln!(
        "started:  {} UTC by {}; last change {} UTC",
        ms(&v["started"]).map_or("?".into(), utc),
        text("started_by"),
        ms(&v["updated"]).map_or("?".into(), utc)
    );
    if let Some(w) = v["workspace"].as_str() {
        loopbox::outln!("workspace: {}", one_line(w));
    }
    loopbox::outln!(
        "counts:   {} turn(s), {} action(s), {} prompt(s)",
        v["turns"],
        v["actions"],
        v["prompts"]
    );
    let spent = loopbox::spend::Totals::from_json(&v["spend"]);
    if spent.turns > 0 {
        loopbox::outln!(
            "spend:    {} over {} agent turn(s); {} tokens",
            spent.cost_text(),
            spent.turns,
            spent.tokens.total()
        );
    }
    if v["driven"] == true {
        loopbox::outln!("driver:   the server (running)");
    }
    for a in v["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .map(approval)
    {
        show_approval(&a, &id, Some(&c.url));
    }
    let total = |k: &str| v[k].as_u64().unwrap_or(0);
    loopbox::outln!("events:   {} (the latest 500 below)", total("events_total"));
    for e in v["events"].as_array().into_iter().flatten() {
        let kind = e["event"]["type"].as_str().unwrap_or_default();
        let after = match (&e["decision"], &e["error"], e["pending"] == true) {
            (_, _, true) => "(in progress, or waiting)".to_string(),
            (d, _, _) if d.is_object() => {
                format!("-> {}", one_line(d["type"].as_str().unwrap_or("decision")))
            }
            (_, err, _) if !err.is_null() => {
                format!("-> failed: {}", one_line(&shorten(&err.to_string(), 100)))
            }
            _ => String::new(),
        };
        loopbox::outln!("  {:>3}  {:<14} {}", e["seq"], one_line(kind), after);
    }
    let journal = v["journal"].as_array().cloned().unwrap_or_default();
    let count = |o: &str| journal.iter().filter(|j| j["outcome"] == o).count();
    loopbox::outln!(
        "journal:  {} action(s): {} ok, {} failed or refused, {} outcome unknown, {} running",
        total("journal_total"),
        count("ok"),
        count("error"),
        count("unknown"),
        count("running")
    );
    if v["loop"].is_object() {
        show_loop_journal(&journal);
        return Ok(exit::OK);
    }
    for j in &journal {
        let shown = match (&j["exit_code"], &j["duration_ms"]) {
            (code, took) if !code.is_null() => format!("exit {code} in {took} ms"),
            _ => j["outcome"].as_str().unwrap_or("?").to_string(),
        };
        loopbox::outln!(
            "  event {} call {}: {} {} ({shown})",
            j["event"],
            j["seq"],
            one_line(j["kind"].as_str().unwrap_or_default()),
            // The command as it ran, not its request's JSON.
            Untrusted(&shorten(
                &j["command"]
                    .as_str()
                    .map_or_else(|| j["request"].to_string(), str::to_string),
                100
            )),
        );
    }
    Ok(exit::OK)
}
