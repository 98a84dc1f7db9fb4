//! `loopbox runs approve|deny ID --server URL`: decide the ask-tier action a
//! served run waits for, bound to the request shown here (its digest goes
//! with the decision, so a request that changed meanwhile is refused by the
//! server). The server queues the run at once; nothing runs in this process.

use serde_json::json;

use super::super::super::{Failure, exit};
use super::super::approve::{DecideArgs, describe, digest_seen, pick};
use super::client::Client;
use super::{approval, command, refuse_flag, segment};
use loopbox::db::approvals::{ApprovalStatus, Verdict};
use loopbox::ui::Untrusted;

pub fn execute(c: &Client, a: DecideArgs, verdict: Verdict, json: bool) -> Result<i32, Failure> {
    let moves = "the server continues the run itself once it is decided";
    refuse_flag(a.no_resume, "--no-resume", moves)?;
    refuse_flag(
        a.allow_policy_change || a.accept_config_change,
        "--allow-policy-change and --accept-config-change",
        &format!(
            "{moves}; a run it parks for a changed policy or config is resumed with `{}`",
            command(c, &format!("resume {} --accept-config-change", a.id))
        ),
    )?;
    let run = c.get(&format!("/api/v1/runs/{}", segment(&a.id)))?;
    let id = run["id"].as_str().unwrap_or(&a.id).to_string();
    let pending: Vec<_> = run["approvals"]
        .as_array()
        .map(|l| l.iter().map(approval).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.status == ApprovalStatus::Pending)
        .collect();
    let status = run["status"].as_str().unwrap_or("?");
    // No approval pending, and the run's last decision asks: a YAML loop's
    // `human_approval` question, answered with the verdict (the server's
    // refusal, a role or `approvals.self`, is this command's).
    let asks = run["events"]
        .as_array()
        .and_then(|e| e.last())
        .is_some_and(|e| e["decision"]["type"] == "ask");
    if pending.is_empty()
        && a.approval.is_none()
        && a.digest.is_none()
        && status == "waiting"
        && asks
    {
        let text = super::super::approve::verdict_answer(verdict, a.reason.as_deref());
        let answer = c.post(
            &format!("/api/v1/runs/{}/answer", segment(&id)),
            &json!({ "text": text }),
        )?;
        return super::deliver::done(c, "answered", &id, &answer, json);
    }
    let chosen =
        pick(&id, status, &pending, a.approval.as_deref()).map_err(|f| with_server(c, f))?;
    if let Some(seen) = &a.digest {
        digest_seen(&chosen, seen).map_err(|f| with_server(c, f))?;
    }
    let act = match verdict {
        Verdict::Approve => "approve",
        Verdict::Deny => "deny",
    };
    // The digest of the request shown here (or the one the person gave): the
    // server refuses the decision if the request is another by now.
    let digest = a.digest.clone().unwrap_or_else(|| chosen.digest.clone());
    let decided = c.post(
        &format!("/api/v1/approvals/{}/{act}", segment(&chosen.id)),
        &json!({"digest": digest, "reason": a.reason}),
    )?;
    let done = match verdict {
        Verdict::Approve => "approved",
        Verdict::Deny => "denied",
    };
    if json {
        loopbox::outln!(
            "{}",
            json!({"run_id": id, "approval": approval(&decided), "resumed": false})
        );
        return Ok(exit::OK);
    }
    let by = decided["decided_by"].as_str().unwrap_or("you");
    loopbox::errln!("{done} {} of run {id} by {}:", chosen.id, Untrusted(by));
    for line in describe(&chosen) {
        loopbox::errln!("  {}", Untrusted(&line));
    }
    loopbox::outln!(
        "{done} {}; the server moves the run on (`{}`)",
        chosen.id,
        command(c, &format!("log {id} --follow"))
    );
    Ok(exit::OK)
}

/// A local command's advice (`loopbox runs show ID`) with this server named.
fn with_server(c: &Client, f: Failure) -> Failure {
    let text = format!("{:#}", f.error);
    let text = text.replace(
        "`loopbox runs show ",
        &format!("`loopbox runs --server {} show ", c.url),
    );
    Failure {
        code: f.code,
        error: anyhow::anyhow!("{text}"),
    }
}
