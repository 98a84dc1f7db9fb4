//! `loopbox runs show ID`: one run's status, counters, driver, events and
//! journal, as text or one JSON object.

use std::path::Path;

use clap::Args;
use serde_json::{Value, json};

use super::super::{Failure, exit};
use super::read_store;
use loopbox::db::JournalRow;
use loopbox::loops::view;
use loopbox::ui::{Untrusted, one_line, rfc3339, shorten, utc};

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run's id (see `loopbox runs`)
    pub(super) id: String,
}

/// What a journaled call came to: `ok`, `error`, `unknown` (in flight when the run stopped) or `running`.
fn outcome(r: &JournalRow, driver_alive: bool) -> &'static str {
    match r.result.as_deref() {
        None if driver_alive => "running",
        None => "unknown",
        Some(t) if t.contains("\"outcome-unknown\"") => "unknown",
        Some(t) if t.starts_with("{\"ok\"") => "ok",
        Some(_) => "error",
    }
}

/// The contract version the run's policy was built for, read from the component
/// (without compiling it) when it is still the one the run started with; `None`
/// when it is gone or changed (a rebuilt file, a loopbox with other builtins).
fn contract_of(run: &loopbox::db::RunRecord) -> Option<loopbox::wasm::contract::Contract> {
    let source = match &run.options.policy_path {
        Some(p) => loopbox::wasm::policy::PolicySource::Path(p.clone()),
        None => loopbox::wasm::policy::PolicySource::parse(&run.policy),
    };
    let wasm = source.read().ok()?;
    (blake3::hash(&wasm).to_hex().as_str() == run.policy_digest)
        .then(|| loopbox::wasm::contract::of_component(&wasm))
        .flatten()
}

pub fn execute(args: ShowArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    // Read only (it works on a full disk): a run whose driver is gone shows as
    // interrupted without being marked so.
    let db = read_store(workspace)?;
    let run = db.existing_run(&args.id).map_err(Failure::lookup)?;
    let events = db.events(&run.id).map_err(Failure::internal)?;
    let journal = db.journal_of_run(&run.id).map_err(Failure::internal)?;
    let alive = run.lease.as_ref().is_some_and(|o| o.is_alive());
    let approvals = db
        .approvals(&loopbox::db::approvals::ApprovalFilter {
            run: Some(run.id.clone()),
            ..Default::default()
        })
        .map_err(Failure::internal)?;
    let contract = contract_of(&run);
    let charges = db.charges(&run.id).map_err(Failure::internal)?;
    let wakes = db.wake_at(&run.id).map_err(Failure::internal)?;
    let network = db.connections(&run.id).map_err(Failure::internal)?;
    let actions: Vec<&(i64, JournalRow)> = journal
        .iter()
        .filter(|(_, r)| matches!(r.kind.as_str(), "shell" | "prompt" | "turn"))
        .collect();
    let marks: Vec<(i64, i64, String)> = journal
        .iter()
        .filter(|(_, r)| r.kind == loopbox::journal::MARK)
        .map(|(e, r)| (*e, r.seq, r.request.clone()))
        .collect();
    let entered = view::entered(&marks);
    let the_loop = view::loop_json(
        &run.policy,
        &run.options,
        &run.input,
        run.outcome.as_deref(),
        &entered.0,
        false,
    );
    let count = |o: &str| {
        actions
            .iter()
            .filter(|(_, r)| outcome(r, alive) == o)
            .count()
    };

    if json {
        let parse = |t: &Option<String>| {
            t.as_deref()
                .map(|t| serde_json::from_str::<Value>(t).unwrap_or(Value::String(t.into())))
        };
        let out = json!({
            "id": run.id, "policy": run.policy, "policy_digest": run.policy_digest, "status": run.seen_status(),
            "contract": contract.map(|c| c.to_string()),
            "policy_name": view::shown_name(&run.options), "loop": the_loop,
            "grants": super::super::drive::grant_set(&run.options),
            "started": rfc3339(run.created_at_ms), "updated": rfc3339(run.updated_at_ms),
            "turns": run.turns, "actions": run.actions, "prompts": run.prompts,
            "outcome": parse(&run.outcome), "input": parse(&Some(run.input.clone())),
            "driver": run.lease.as_ref().map(|o| json!({"pid": o.pid, "host": o.host, "alive": o.is_alive()})),
            "cancel_requested": run.cancel_requested,
            "wakes": wakes.map(rfc3339),
            "started_by": run.place.started_by,
            "spend": super::spend_json(&run.spent),
            "agent_turns": charges.iter().map(|c| json!({
                "event": c.event_seq, "seq": c.seq, "kind": c.kind, "at": rfc3339(c.at_ms),
                "model": c.charge.model, "tokens": c.charge.tokens, "cost_usd": c.charge.cost_usd,
                "cost_source": c.charge.source, "unmetered": c.charge.unmetered,
            })).collect::<Vec<_>>(),
            "approvals": approvals.iter().map(|a| json!({
                "id": a.id, "status": a.status, "what": a.what, "rule": a.rule, "digest": a.digest,
                "request": a.request, "requested": rfc3339(a.requested_at_ms), "deadline": rfc3339(a.deadline_ms),
                "decided_by": a.decided_by, "decided": a.decided_at_ms.map(rfc3339), "reason": a.reason,
                "used": a.consumed_at_ms.map(rfc3339),
            })).collect::<Vec<_>>(),
            "events": events.iter().map(|e| json!({
                "seq": e.seq, "at": rfc3339(e.at_ms), "event": parse(&Some(e.event.clone())),
                "decision": parse(&e.decision), "error": parse(&e.error), "pending": e.pending,
            })).collect::<Vec<_>>(),
            "network": network.iter().map(|c| json!({
                "at": rfc3339(c.at_ms), "side": c.side, "host": c.host, "port": c.port,
                "address": c.address, "allowed": c.allowed, "rule": c.rule,
                "bytes_out": c.bytes_out, "bytes_in": c.bytes_in, "ms": c.ms,
            })).collect::<Vec<_>>(),
            "journal": actions.iter().map(|(event, r)| {
                let placed = view::around(&entered, view::ended_in(the_loop.as_ref()), *event, r.seq);
                let request = parse(&Some(r.request.clone())).unwrap_or_default();
                json!({
                    "event": event, "seq": r.seq, "kind": r.kind, "command": view::command(&request),
                    "request": request, "state": placed.state, "verdict": placed.verdict, "then": placed.then,
                    "outcome": outcome(r, alive), "result": parse(&r.result),
                })
            }).collect::<Vec<_>>(),
        });
        loopbox::outln!("{out}");
        return Ok(exit::OK);
    }

    match &the_loop {
        Some(lp) => loopbox::outln!(
            "run {} of loop {} ({})",
            run.id,
            one_line(lp["name"].as_str().unwrap_or("?")),
            one_line(&run.policy)
        ),
        None => loopbox::outln!("run {} of {}", run.id, one_line(&run.policy)),
    }
    let outcome_line = run
        .outcome
        .as_deref()
        .and_then(|o| serde_json::from_str::<Value>(o).ok())
        .and_then(|o| o["summary"].as_str().map(|s| format!(": {}", Untrusted(s))))
        .unwrap_or_default();
    loopbox::outln!("status:   {}{outcome_line}", run.seen_status());
    if let Some(w) = wakes {
        loopbox::outln!(
            "wakes:    {} UTC (`loopbox runs resume {}` goes on then; `loopbox runs tick {}` now)",
            utc(w),
            run.id,
            run.id
        );
    }
    if let Some(lp) = &the_loop {
        show_loop(lp);
    }
    loopbox::outln!("grants:   {}", super::super::drive::grant_set(&run.options));
    loopbox::outln!(
        "contract: {}",
        contract.map_or(
            "unknown (the policy file is gone or changed since the run started)".into(),
            |c| c.to_string()
        )
    );
    loopbox::outln!(
        "started:  {} UTC; last change {} UTC",
        utc(run.created_at_ms),
        utc(run.updated_at_ms)
    );
    loopbox::outln!(
        "counts:   {} turn(s), {} action(s), {} prompt(s)",
        run.turns,
        run.actions,
        run.prompts
    );
    show_spend(&run.spent, &charges);
    if let Some(o) = &run.lease {
        loopbox::outln!(
            "driver:   pid {} on {} ({})",
            o.pid,
            one_line(&o.host),
            if o.is_alive() { "running" } else { "gone" }
        );
    }
    for a in &approvals {
        show_approval(a, &run.id, None);
    }
    show_network(&network);
    loopbox::outln!("events:");
    let waits_for_approval = approvals
        .iter()
        .any(|a| a.status == loopbox::db::approvals::ApprovalStatus::Pending);
    for e in &events {
        let kind = serde_json::from_str::<Value>(&e.event)
            .ok()
            .and_then(|v| v["type"].as_str().map(String::from))
            .unwrap_or_default();
        let after = match (&e.decision, &e.error, e.pending) {
            (_, _, true) if waits_for_approval => "(waiting for an approval)".to_string(),
            (_, _, true) => "(interrupted while it was handled)".to_string(),
            (Some(d), _, _) => loopbox::run::record::parse_decision(d)
                .map(|d| format!("-> {}", loopbox::run::record::describe_decision(&d)))
                .unwrap_or_default(),
            (_, Some(err), _) => format!("-> failed: {}", one_line(&shorten(err, 100))),
            _ => String::new(),
        };
        loopbox::outln!(
            "  {:>3}  {:<14} {}",
            e.seq,
            one_line(&kind),
            Untrusted(&after)
        );
    }
    loopbox::outln!(
        "journal:  {} action(s): {} ok, {} failed or refused, {} outcome unknown, {} running",
        actions.len(),
        count("ok"),
        count("error"),
        count("unknown"),
        count("running")
    );
    if the_loop.is_some() {
        let rows: Vec<Value> = actions
            .iter()
            .map(|(event, r)| {
                let placed = view::around(&entered, view::ended_in(the_loop.as_ref()), *event, r.seq);
                let result: Value = r
                    .result
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_default();
                let request = serde_json::from_str(&r.request).unwrap_or_default();
                json!({
                    "event": event, "seq": r.seq, "kind": r.kind, "state": placed.state,
                    "verdict": placed.verdict, "then": placed.then,
                    "command": view::command(&request), "outcome": outcome(r, alive),
                    "exit_code": result["ok"]["exit_code"], "duration_ms": result["ok"]["duration_ms"],
                    "error": result["err"],
                })
            })
            .collect();
        show_loop_journal(&rows);
    }
    // Which agent profile (`[agents.NAME]`) each prompt went to; `[agent]` when none.
    let profile = |r: &JournalRow| {
        (r.kind == "prompt")
            .then(|| serde_json::from_str::<Value>(&r.request).ok())
            .flatten()
            .and_then(|v| v["profile"].as_str().map(String::from))
    };
    let mut profiles = std::collections::BTreeMap::<String, usize>::new();
    for (_, r) in &actions {
        if let Some(p) = profile(r) {
            *profiles.entry(p).or_default() += 1;
        }
    }
    if !profiles.is_empty() {
        let list: Vec<String> = profiles
            .iter()
            .map(|(p, n)| format!("{} {n}", one_line(&shorten(p, 64))))
            .collect();
        loopbox::outln!("profiles: prompts to [agents.NAME]: {}", list.join(", "));
    }
    for (event, r) in actions
        .iter()
        .filter(|(_, r)| matches!(outcome(r, alive), "unknown" | "running"))
    {
        let to = profile(r)
            .map(|p| format!(" to agent profile `{}`", one_line(&shorten(&p, 64))))
            .unwrap_or_default();
        loopbox::outln!(
            "  event {event} call {}: {} {}{to} ({})",
            r.seq,
            one_line(&r.kind),
            Untrusted(&shorten(
                &view::command(&serde_json::from_str(&r.request).unwrap_or_default()),
                100
            )),
            outcome(r, alive)
        );
    }
    Ok(exit::OK)
}

/// Actions of a loop's journal shown, the latest.
const LOOP_ACTIONS_SHOWN: usize = 50;

/// A YAML loop's file, path of states and the state it is in (the API's `loop`).
pub(super) fn show_loop(lp: &Value) {
    loopbox::outln!("loop:     {}", one_line(lp["file"].as_str().unwrap_or("-")));
    let path: Vec<String> = lp["path"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| one_line(s.as_str().unwrap_or("?")))
        .collect();
    let cut = if lp["path_cut"] == true {
        "… → "
    } else {
        ""
    };
    let steps = lp["steps"].as_u64().unwrap_or(0);
    if path.is_empty() {
        loopbox::outln!("path:     (no state entered yet)");
    } else {
        loopbox::outln!("path:     {cut}{} ({steps} step(s))", path.join(" → "));
    }
    if lp["ended"] != true
        && let Some(state) = lp["state"].as_str()
    {
        let sub = lp["sub_loop"]
            .as_str()
            .map(|s| format!(" (in sub-loop {})", one_line(s)))
            .unwrap_or_default();
        loopbox::outln!("state:    {}{sub}", one_line(state));
    }
}

/// A loop's actions as state, command and outcome:
/// `  1.3  check  shell  CMD  -> exit 1 in 44 ms: no (exit 1), then fix`.
pub(super) fn show_loop_journal(rows: &[Value]) {
    let skip = rows.len().saturating_sub(LOOP_ACTIONS_SHOWN);
    if skip > 0 {
        loopbox::outln!(
            "  (the latest {LOOP_ACTIONS_SHOWN} of {} actions)",
            rows.len()
        );
    }
    for j in &rows[skip..] {
        let ran = match (
            j["outcome"].as_str().unwrap_or("?"),
            j["exit_code"].as_i64(),
        ) {
            ("ok", Some(code)) => format!("exit {code}"),
            ("ok", None) => "done".to_string(),
            ("error", _) => format!(
                "failed: {}",
                one_line(&shorten(
                    j["error"]["message"]
                        .as_str()
                        .or(j["error"]["kind"].as_str())
                        .unwrap_or("?"),
                    100
                ))
            ),
            (other, _) => other.to_string(),
        };
        let took = j["duration_ms"]
            .as_u64()
            .map(|ms| format!(" in {ms} ms"))
            .unwrap_or_default();
        let verdict = j["verdict"]
            .as_str()
            .map(|v| format!(": {}", one_line(v)))
            .unwrap_or_default();
        let then = j["then"]
            .as_str()
            .filter(|_| j["outcome"] != "running")
            .map(|n| format!(", then {}", one_line(n)))
            .unwrap_or_default();
        loopbox::outln!(
            "  {:>5}  {:<12} {:<6} {}  -> {}",
            format!("{}.{}", j["event"], j["seq"]),
            one_line(j["state"].as_str().unwrap_or("-")),
            one_line(j["kind"].as_str().unwrap_or("")),
            Untrusted(&shorten(j["command"].as_str().unwrap_or(""), 100)),
            Untrusted(&format!("{ran}{took}{verdict}{then}"))
        );
    }
}

/// What the run's agent turns spent: the total, then one line per turn.
/// One approval of run `run`, and for a pending one what it would let run and
/// the commands that decide it (`--server URL` in them for a served run).
pub(super) fn show_approval(a: &loopbox::db::approvals::Approval, run: &str, server: Option<&str>) {
    let decided = match (&a.decided_by, a.decided_at_ms) {
        (Some(who), Some(at)) => format!(" by {} at {} UTC", one_line(who), utc(at)),
        _ => format!(" until {} UTC", utc(a.deadline_ms)),
    };
    let reason = a
        .reason
        .as_deref()
        .map(|r| format!(": {}", one_line(&shorten(r, 100))))
        .unwrap_or_default();
    loopbox::outln!(
        "approval: {} {}{decided}{reason}: {} ({})",
        a.id,
        a.status,
        one_line(&a.what),
        one_line(&a.rule)
    );
    // What a pending one would let run, whole: the person decides on this.
    if a.status == loopbox::db::approvals::ApprovalStatus::Pending {
        for line in super::approve::describe(a).iter().skip(1) {
            loopbox::outln!("          {}", Untrusted(line));
        }
        let digest: String = a.digest.chars().take(16).collect();
        let command = |args: String| loopbox::ui::runs_command_at(server, &args);
        loopbox::outln!(
            "          decide with `{}` or `{}`",
            command(format!(
                "approve {run} --approval {} --digest {digest}",
                a.id
            )),
            command(format!("deny {run} --approval {} --reason TEXT", a.id))
        );
    }
}

fn show_spend(total: &loopbox::spend::Totals, charges: &[loopbox::db::TurnCharge]) {
    if total.turns == 0 {
        return;
    }
    let t = &total.tokens;
    let unknown = match (total.unpriced, total.unmetered) {
        (0, 0) => String::new(),
        (p, m) => format!(
            " (at least: {} turn(s) without a price, {} without usage)",
            p, m
        ),
    };
    loopbox::outln!(
        "spend:    {}{unknown} over {} agent turn(s); {} tokens ({} in, {} of them cached, {} out)",
        total.cost_text(),
        total.turns,
        t.total(),
        t.input,
        t.cache_read + t.cache_write,
        t.output
    );
    for c in charges {
        let what = if c.kind == "turn" {
            format!("event {} turn", c.event_seq)
        } else {
            format!("event {} prompt {}", c.event_seq, c.seq)
        };
        let model = c
            .charge
            .model
            .as_deref()
            .map_or("-".to_string(), |m| one_line(&shorten(m, 40)));
        let tokens = if c.charge.unmetered {
            "no usage reported".to_string()
        } else {
            format!(
                "{} in ({} cached), {} out",
                c.charge.tokens.input,
                c.charge.tokens.cache_read + c.charge.tokens.cache_write,
                c.charge.tokens.output
            )
        };
        loopbox::outln!(
            "  {:<22} {:>10}  {:<32} {}",
            what,
            c.charge.cost_text(),
            model,
            tokens
        );
    }
}

/// The run's connections through the proxy, one line each (the last 50).
fn show_network(network: &[loopbox::db::network::Connection]) {
    if network.is_empty() {
        return;
    }
    let refused = network.iter().filter(|c| !c.allowed).count();
    loopbox::outln!(
        "network:  {} connection(s), {refused} refused",
        network.len()
    );
    let skip = network.len().saturating_sub(50);
    for c in &network[skip..] {
        let what = if c.allowed {
            format!(
                "allowed ({}), {} B out, {} B in, {} ms",
                c.rule, c.bytes_out, c.bytes_in, c.ms
            )
        } else {
            format!("refused: {}", c.rule)
        };
        loopbox::outln!(
            "          {} {} {}:{} {}",
            utc(c.at_ms),
            one_line(&c.side),
            one_line(&c.host),
            c.port,
            one_line(&shorten(&what, 200))
        );
    }
}
