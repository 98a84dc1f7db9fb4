//! `loopbox runs approve|deny ID`: decide an ask-tier action a run waits for,
//! then continue the run in this process (a standalone run; a hook session
//! finds the decision at its next event, a server's run is moved on by the
//! server). The decision is an audited act, bound to the request shown here.
//! A run that waits on a YAML loop's `human_approval` question instead is
//! answered `approve`, or `reject` with the reason ([`verdict_answer`]).

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::cont;
use super::open_store;
use loopbox::db::approvals::{
    Approval, ApprovalFilter, ApprovalStatus, Decide, Verdict, digest_given, digest_names,
};
use loopbox::db::{RunStatus, local_actor};
use loopbox::ui::{Untrusted, one_line};

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The run's id (see `loopbox runs`)
    pub(super) id: String,
    /// Which pending approval, when the run waits for more than one (see `loopbox runs show ID`)
    #[arg(long, value_name = "APPROVAL")]
    pub(super) approval: Option<String>,
    /// Why: kept in the audit log, and given to the policy with a denial
    #[arg(long)]
    pub(super) reason: Option<String>,
    /// Record the decision only; do not continue the run here
    #[arg(long)]
    pub(super) no_resume: bool,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    pub(super) allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    pub(super) accept_config_change: bool,
    /// The digest of the request you reviewed (`loopbox runs show ID` prints it, or its
    /// first 12 digits or more): a request that is not that one is refused
    #[arg(long, value_name = "DIGEST")]
    pub(super) digest: Option<String>,
}

/// The approval `wanted` names (or the only one), among the pending ones of
/// run `id`, which is `status`.
pub(super) fn pick(
    id: &str,
    status: &str,
    pending: &[Approval],
    wanted: Option<&str>,
) -> Result<Approval, Failure> {
    match (wanted, pending) {
        (Some(w), _) => pending.iter().find(|a| a.id == w).cloned().ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "run {id} has no pending approval `{}`; `loopbox runs show {id}` lists its approvals",
                one_line(w)
            ))
        }),
        (None, []) => Err(Failure::usage(anyhow::anyhow!(
            "run {id} is not waiting for an approval (it is {status}); `loopbox runs show {id}` says what it waits for",
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

/// The most of a request's input shown on the terminal; `runs show ID --json` has it whole.
const STDIN_SHOWN: usize = 16 * 1024;

/// The request a person decides, a line each, as `runs show` shows it before
/// the decision and `runs approve` with it: the command word by word (never
/// shortened), the program, its directory, variables and input, the policy
/// and the digest. Untrusted text: each line goes out through `Untrusted`.
pub fn describe(a: &Approval) -> Vec<String> {
    let r = &a.request;
    let req = &r["request"];
    let mut lines = vec![format!("{} (needs a yes: {})", a.what, a.rule)];
    if let Some(argv) = req["argv"].as_array() {
        let words: Vec<String> = argv
            .iter()
            .map(|w| loopbox::exec::grants::shell_quote(w.as_str().unwrap_or_default()))
            .collect();
        lines.push(format!("command: {}", one_line(&words.join(" "))));
    }
    if req["kind"] == "network" {
        lines.push(format!(
            "connect: {}:{} (the run's {})",
            one_line(req["host"].as_str().unwrap_or_default()),
            req["port"],
            one_line(req["side"].as_str().unwrap_or_default())
        ));
    }
    if let Some(p) = req["program"].as_str() {
        lines.push(format!("program: {p}"));
    }
    if let Some(d) = req["cwd"].as_str() {
        lines.push(format!("cwd:     {d}"));
    }
    for (k, v) in env_pairs(&req["env"]) {
        lines.push(format!("env:     {}={}", one_line(&k), one_line(&v)));
    }
    if let Some(text) = req["stdin"].as_str() {
        let shown: String = text.chars().take(STDIN_SHOWN).collect();
        let more = if shown.len() < text.len() {
            format!(
                "\n… ({} bytes in all; `loopbox runs show {} --json` has it whole)",
                text.len(),
                a.run_id
            )
        } else {
            String::new()
        };
        lines.push(format!("input ({} bytes):\n{shown}{more}", text.len()));
    }
    if let Some(session) = req["session"].as_str() {
        lines.push(format!("session: {}", one_line(session)));
    }
    for key in ["text", "message"] {
        if let Some(text) = req[key].as_str() {
            lines.push(format!("{key}:\n{text}"));
        }
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

/// A request's variables, `[[K, V], ...]` or `{K: V}`, as pairs.
fn env_pairs(env: &serde_json::Value) -> Vec<(String, String)> {
    let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), String::from);
    match env {
        serde_json::Value::Array(pairs) => pairs
            .iter()
            .filter_map(|p| Some((text(p.get(0)?), text(p.get(1)?))))
            .collect(),
        serde_json::Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), text(v))).collect(),
        _ => Vec::new(),
    }
}

/// The approval's digest, when `seen` (all of it, or its first 12 digits or
/// more: the API's rule, `digest_names`) names it.
pub(super) fn digest_seen(a: &Approval, seen: &str) -> Result<(), Failure> {
    let seen = digest_given(seen).map_err(|e| Failure::usage(anyhow::anyhow!("{e}")))?;
    if digest_names(&a.digest, seen) {
        return Ok(());
    }
    Err(Failure::usage(anyhow::anyhow!(
        "approval {} is for request digest {}, not {}: the request is not the one you reviewed; look at it again with `loopbox runs show {}`",
        a.id,
        a.digest,
        one_line(seen),
        a.run_id
    )))
}

/// The answer `approve` or `deny` gives a run that waits on a question (a
/// YAML loop's `human_approval` state, which reads it as little-loops reads
/// a verdict typed at its terminal): `approve`, or `reject` and the reason.
pub(super) fn verdict_answer(verdict: Verdict, reason: Option<&str>) -> String {
    match (verdict, reason.map(str::trim).filter(|r| !r.is_empty())) {
        (Verdict::Approve, _) => "approve".into(),
        (Verdict::Deny, Some(r)) => format!("reject {r}"),
        (Verdict::Deny, None) => "reject".into(),
    }
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
    // A YAML loop's `human_approval` state asks a question, not for an
    // approval: the verdict is its answer.
    if pending.is_empty()
        && args.approval.is_none()
        && args.digest.is_none()
        && !args.no_resume
        && matches!(
            loopbox::run::driver::resume_point(&db, &run).map_err(Failure::internal)?,
            loopbox::run::driver::Next::Act {
                decision: loopbox::bindings::Decision::Ask(_),
                ..
            }
        )
    {
        drop(db);
        let answer = cont::AnswerArgs {
            id: run.id.clone(),
            text: verdict_answer(verdict, args.reason.as_deref()),
            allow_policy_change: args.allow_policy_change,
            accept_config_change: args.accept_config_change,
        };
        return cont::answer(answer, json, workspace);
    }
    let a = pick(
        &run.id,
        run.seen_status().as_str(),
        &pending,
        args.approval.as_deref(),
    )?;
    if let Some(seen) = &args.digest {
        digest_seen(&a, seen)?;
    }
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
