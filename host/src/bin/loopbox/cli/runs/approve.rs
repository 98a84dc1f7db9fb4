//! `loopbox runs approve|deny ID`: decide an ask-tier action a run waits for,
//! then continue the run in this process (a standalone run; a hook session
//! finds the decision at its next event, a server's run is moved on by the
//! server). The decision is an audited act, bound to the request shown here.

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::cont;
use super::open_store;
use loopbox::db::approvals::{Approval, ApprovalFilter, ApprovalStatus, Decide, Verdict};
use loopbox::db::{RunRecord, RunStatus, local_actor};
use loopbox::ui::{Untrusted, one_line};

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The run's id (see `loopbox runs`)
    id: String,
    /// Which pending approval, when the run waits for more than one (see `loopbox runs show ID`)
    #[arg(long, value_name = "APPROVAL")]
    approval: Option<String>,
    /// Why: kept in the audit log, and given to the policy with a denial
    #[arg(long)]
    reason: Option<String>,
    /// Record the decision only; do not continue the run here
    #[arg(long)]
    no_resume: bool,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
}

/// The approval `args` names, among the run's pending ones.
fn pick(run: &RunRecord, pending: &[Approval], wanted: Option<&str>) -> Result<Approval, Failure> {
    let id = &run.id;
    match (wanted, pending) {
        (Some(w), _) => pending.iter().find(|a| a.id == w).cloned().ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "run {id} has no pending approval `{}`; `loopbox runs show {id}` lists its approvals",
                one_line(w)
            ))
        }),
        (None, []) => Err(Failure::usage(anyhow::anyhow!(
            "run {id} is not waiting for an approval (it is {}); `loopbox runs show {id}` says what it waits for",
            run.seen_status()
        ))),
        (None, [one]) => Ok(one.clone()),
        (None, many) => Err(Failure::usage(anyhow::anyhow!(
            "run {id} waits for {} approvals ({}): choose one with --approval",
            many.len(),
            many.iter()
                .map(|a| format!("{} {}", a.id, one_line(&a.what)))
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}

/// The request a person decides, a line each, as it is shown with the decision.
pub fn describe(a: &Approval) -> Vec<String> {
    let r = &a.request;
    let mut lines = vec![format!("{} (needs a yes: {})", a.what, a.rule)];
    if let Some(p) = r["request"]["program"].as_str() {
        lines.push(format!("program: {p}"));
    }
    lines.push(format!(
        "policy:  {} ({}){}",
        r["policy"].as_str().unwrap_or("?"),
        r["policy_digest"].as_str().unwrap_or("?"),
        r["signer"]
            .as_str()
            .map(|s| format!(", signed by {s}"))
            .unwrap_or_default()
    ));
    lines.push(format!("digest:  {}", a.digest));
    lines
}

pub fn execute(
    args: DecideArgs,
    verdict: Verdict,
    json: bool,
    workspace: &Path,
) -> Result<i32, Failure> {
    let db = open_store(workspace)?;
    let run = db.existing_run(&args.id).map_err(Failure::lookup)?;
    let pending = db
        .approvals(&ApprovalFilter {
            run: Some(run.id.clone()),
            status: Some(ApprovalStatus::Pending),
            ..Default::default()
        })
        .map_err(Failure::internal)?;
    let a = pick(&run, &pending, args.approval.as_deref())?;
    let actor = local_actor();
    let decided = db
        .decide_approval(&Decide {
            id: &a.id,
            verdict,
            actor: &actor,
            tenant: run.place.tenant.as_deref(),
            reason: args.reason.as_deref(),
            // Bound to the request shown here: a changed one is refused.
            digest: Some(&a.digest),
        })
        .map_err(Failure::internal)?
        .map_err(|refused| Failure::usage(anyhow::anyhow!("{refused}")))?;
    let done = match verdict {
        Verdict::Approve => "approved",
        Verdict::Deny => "denied",
    };
    // What moves the run on: this process, the agent's next hook event, or its server.
    let moved_by = if run.options.hook {
        Some("the agent's next hook event with the same request uses it")
    } else if run.place.tenant.is_some() {
        Some("the server moves the run on")
    } else if args.no_resume || run.status != RunStatus::Waiting {
        Some("continue the run with `loopbox runs resume ID`")
    } else {
        None
    };
    if json && moved_by.is_some() {
        loopbox::outln!(
            "{}",
            json!({"run_id": run.id, "approval": decided, "resumed": false})
        );
        return Ok(exit::OK);
    }
    if !json {
        loopbox::errln!("{done} {} of run {} by {actor}:", a.id, run.id);
        for line in describe(&a) {
            loopbox::errln!("  {}", Untrusted(&line));
        }
    }
    if let Some(how) = moved_by {
        loopbox::outln!("{done} {}; {}", a.id, how.replace("ID", &run.id));
        return Ok(exit::OK);
    }
    drop(db);
    cont::resume_after_decision(
        &run.id,
        workspace,
        json,
        args.allow_policy_change,
        args.accept_config_change,
    )
}
