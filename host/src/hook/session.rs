//! One hook invocation: find (or start) the run for this agent session, deliver
//! the event, and turn the decision into the hook's answer.
//!
//! A session's run is keyed by the agent, the policy, the agent's `session_id`
//! and, for events inside a subagent, its `agent_id`: the policy's state (the
//! Ralph loop's iteration count) survives from one hook process to the next,
//! and a subagent's stops do not count toward the main thread's loop.
//! `start(input)` is delivered the first time a session is seen (and again on
//! the next event if it failed). Once the policy has finished the session's
//! run (`done`, `escalate`), later events of that session are answered with nothing.
//!
//! What the session spent is read from the agent's transcript at each event
//! ([`transcript::read_usage`]); once it reaches `run.max_cost_usd` or
//! `run.max_tokens`, the run ends and this event and every later one are
//! answered so the agent stops: a finished turn is let stop, a tool call or
//! permission request is denied, naming the budget.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow};

use crate::bindings::{Decision, Event, Outcome};
use crate::db::{Db, RunRecord, RunStatus, lock};
use crate::exec::confirm::Asking;
use crate::hook::agents::{Agent, Kind};
use crate::hook::input::HookInput;
use crate::hook::render::{HookOutput, render};
use crate::hook::transcript;
use crate::run::RunContext;
use crate::run::launch::Prepared;
use crate::run::lifecycle::{Changes, resume_with};
use crate::run::record::decision_json;
use crate::spend::Totals;
use crate::spend::transcript::{Format, Tally};
use crate::ui::Ui;
use crate::wasm::policy::{Policy, PolicySource};

/// The run id for a session of a policy: stable across hook processes.
/// `session` is [`HookInput::session_key`].
pub fn session_run_id(agent: Agent, source: &PolicySource, session: &str) -> String {
    let h = blake3::hash(format!("{source}\0{session}").as_bytes());
    format!("{}-{}", agent.run_prefix(), &h.to_hex()[..16])
}

/// How long a hook waits for the hooks of its session before it that are still running.
const SESSION_WAIT: Duration = Duration::from_secs(300);

/// Answer one hook event of `input`'s session with `policy`, started by
/// [`crate::run::lifecycle::start`] (its config, rules and YAML-loop treatment
/// are a run's like any other); a session seen before goes on through
/// [`resume_with`], held to the policy and grants it started with.
pub async fn answer(
    prepared: &Prepared<'_>,
    policy: &Policy,
    start_input: &str,
    input: &HookInput,
    accept_config_change: bool,
) -> Result<HookOutput> {
    let workspace = prepared.workspace;
    let db = Db::open_workspace(workspace)?;
    let id = session_run_id(input.agent, &policy.source, &input.session_key());
    // The session's trace: this event's span, under the run's root (see crate::telemetry).
    let span = if crate::telemetry::enabled() {
        let first = db.run(&id)?.is_none();
        crate::telemetry::process_span(
            &id,
            &policy.source.to_string(),
            first,
            &format!("loopbox hook {}", input.event_name),
        )
    } else {
        tracing::Span::none()
    };
    tracing::Instrument::instrument(
        answer_in_session(
            prepared,
            policy,
            start_input,
            input,
            accept_config_change,
            db,
            id,
        ),
        span,
    )
    .await
}

async fn answer_in_session(
    prepared: &Prepared<'_>,
    policy: &Policy,
    start_input: &str,
    input: &HookInput,
    accept_config_change: bool,
    db: Db,
    id: String,
) -> Result<HookOutput> {
    let workspace = prepared.workspace;
    // One event of a session at a time: parallel subagents fire hooks at once.
    let store_dir = db.path().parent().unwrap_or(workspace);
    let _session = lock::acquire(&lock::path(store_dir, &id), SESSION_WAIT).await?;
    let existing = db.run(&id)?;
    if let Some(run) = existing.as_ref().filter(|r| r.status.is_final()) {
        // A session stopped by its budget stays stopped: the agent is told again.
        return match budget_ended(run) {
            Some(why) => budget_answer(input, &why),
            None => Ok(HookOutput::nothing()),
        };
    }
    if let Some(run) = &existing {
        // A later event of the session keeps the policy and the grants it started with.
        let changes = Changes {
            accept_config: accept_config_change,
            how_to_accept_config: "start a new agent session to use it (or add --accept-config-change to the hook's command)",
            allow_policy: false,
            how_to_allow_policy: "start a new agent session to use the new one",
        };
        resume_with(prepared, policy, &db, run, &changes).map_err(|e| e.error)?;
    }
    // Stdin carries the hook's JSON and the agent waits for the answer: an
    // ask-tier action records a pending approval and is declined, naming it; a
    // later event with the same request finds the decision.
    let ctx = prepared
        .context(&id, db.clone(), Ui::quiet(), Asking::Hook)
        .map_err(|e| e.error)?;
    if existing.is_none() {
        db.create_hook_run(
            &id,
            &policy.source.to_string(),
            &policy.digest,
            start_input,
            prepared.options.grants.clone().unwrap_or_default(),
        )?;
        let who = input
            .agent_id
            .as_ref()
            .map_or(String::new(), |a| format!(" (subagent {a})"));
        ctx.log.host(
            "info",
            format!(
                "{} session {}{who} seen for the first time",
                input.agent.title(),
                input.session_id
            ),
        );
    }
    // A start that failed (a bad --input, say) is tried again on the next event.
    if !db.started(&id)? {
        ctx.deliver(policy, &Event::Start(start_input.to_string()))
            .await?
            .map_err(|f| anyhow!("the policy failed on start: {f}"))?;
    }

    // No event reaches the policy once the session has spent its budget.
    // The transcript is read whether or not a budget is set: its tally is kept
    // with the event; the run's totals are read only when a budget needs them.
    let tally = session_spend(&ctx, input, &id)?;
    let budget = ctx.spend_budget();
    let over = match &tally {
        _ if !budget.is_set() => Ok(()),
        Some((_, grown)) => budget.check(grown),
        None => budget.check(&db.spent(&id)?),
    };
    if let Err(e) = over {
        ctx.log.host("warn", e.message.clone());
        db.append_log(&id, &ctx.log.take())?;
        if let Some((tally, totals)) = &tally {
            db.set_tally(&id, tally, totals)?;
        }
        let outcome = serde_json::json!({"success": false, "summary": e.message, "budget": e.key});
        db.set_status(&id, RunStatus::Failed, Some(&outcome.to_string()))?;
        return budget_answer(input, &e.message);
    }

    let spec = input.spec();
    let turn = spec.kind == Kind::Turn;
    let response = if turn {
        turn_response(input, ctx.root())?
    } else {
        None
    };
    // The turn's number comes from the turns already handled, and counts once this
    // event commits: a hook killed before that (an agent's timeout) leaves no phantom turn.
    let index = if turn { db.turns_handled(&id)? + 1 } else { 0 };
    let event = input.event(response, index).map_err(|e| anyhow!(e))?;
    crate::journal::crashpoint::hit("hook-event");
    // What the transcript added is kept with the event, in its transaction.
    let delivered = ctx.deliver_keeping(policy, &event, tally).await?;
    if turn {
        db.note_turns(&id, index)?;
    }
    let decision = delivered.map_err(|f| anyhow!("{f}"))?;
    let output = render(input.agent, &spec, &decision).map_err(|e| anyhow!(e))?;
    match &decision {
        Decision::Done(o) => db.set_status(
            &id,
            if o.success {
                RunStatus::Done
            } else {
                RunStatus::Failed
            },
            Some(&decision_json(&decision).to_string()),
        )?,
        Decision::Escalate(_) => db.set_status(
            &id,
            RunStatus::Escalated,
            Some(&decision_json(&decision).to_string()),
        )?,
        _ => {}
    }
    Ok(output)
}

/// Why a finished session's run ended on its budget, if it did.
fn budget_ended(run: &RunRecord) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(run.outcome.as_deref()?).ok()?;
    v.get("budget")?;
    v["summary"].as_str().map(String::from)
}

/// The answer that stops the agent once its session has spent its budget: a
/// turn that ended is let stop (saying why), a tool call or a permission
/// request is denied, anything else is told why.
fn budget_answer(input: &HookInput, why: &str) -> Result<HookOutput> {
    let spec = input.spec();
    // A system message says `loopbox:` itself; a refusal's reason is the agent's to show.
    let decision = match spec.kind {
        Kind::Tool | Kind::Permission => Decision::Block(format!("loopbox: {why}")),
        Kind::Turn | Kind::Other => Decision::Done(Outcome {
            success: false,
            summary: why.to_string(),
            data: None,
        }),
    };
    render(input.agent, &spec, &decision).map_err(|e| anyhow!(e))
}

/// A transcript tally to keep, and the totals priced from it.
type Kept = Option<(Tally, Totals)>;

/// What the session has spent when its transcript grew: the transcript read
/// on from where the last event left it, priced with `[prices]`, as the new
/// tally to keep (the caller writes it with the event) and the totals it gives.
/// `None` when nothing changed: the run's recorded totals stand. When the
/// transcript cannot be read they stand too, unless a budget needs them,
/// which then cannot be kept and says so.
fn session_spend(ctx: &RunContext, input: &HookInput, id: &str) -> Result<Kept> {
    let Some(path) = input.usage_transcript() else {
        return Ok(None);
    };
    let format = match input.agent {
        Agent::ClaudeCode => Format::ClaudeCode,
        Agent::Codex => Format::Codex,
        Agent::Gemini => Format::Gemini,
    };
    let before = ctx.db.spend_tally(id)?;
    let mut tally = before.clone().unwrap_or_else(|| Tally::of(path));
    if tally.path != path {
        tally.switch_to(path);
    }
    let roots = transcript::usage_roots(input.agent, ctx.root());
    if let Err(why) = transcript::read_usage(&mut tally, format, &roots) {
        let budget = ctx.spend_budget();
        if budget.is_set() {
            let key = if budget.max_cost_usd.is_some() {
                "max_cost_usd"
            } else {
                "max_tokens"
            };
            anyhow::bail!(
                "run.{key} cannot be kept: what the session spent cannot be read from its transcript: {why}"
            );
        }
        ctx.log.host(
            "warn",
            format!("what the session spent is not known: {why}"),
        );
        return Ok(None);
    }
    if before.as_ref() == Some(&tally) {
        return Ok(None);
    }
    let charge = crate::spend::price::charge(&tally.usage(), &ctx.config.prices, None);
    let totals = Totals {
        turns: tally.messages,
        unmetered: 0,
        unpriced: if charge.cost_usd.is_none() && !charge.tokens.is_zero() {
            tally.messages
        } else {
            0
        },
        tokens: charge.tokens,
        cost_usd: charge.cost_usd.unwrap_or(0.0),
    };
    Ok(Some((tally, totals)))
}

/// The assistant's last message for a turn event: from the input, else (older
/// Claude Code versions) from the transcript. Codex sends null and Gemini an
/// empty string for a turn that ended without text.
fn turn_response(input: &HookInput, workspace: &Path) -> Result<Option<String>> {
    if let Some(m) = &input.last_assistant_message {
        return Ok(Some(m.clone()));
    }
    if input.agent != Agent::ClaudeCode {
        return Ok(Some(String::new()));
    }
    match input.transcript() {
        Some(path) => Ok(Some(
            transcript::last_assistant_message(path, &transcript::allowed_roots(workspace))
                .map_err(|e| anyhow!(e))?,
        )),
        None => Ok(None),
    }
}
