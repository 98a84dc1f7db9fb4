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

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow};

use crate::bindings::{Decision, Event};
use crate::db::{Db, RunStatus, lock};
use crate::exec::confirm::Asking;
use crate::hook::agents::{Agent, Kind};
use crate::hook::input::HookInput;
use crate::hook::render::{HookOutput, render};
use crate::hook::transcript;
use crate::run::launch::Prepared;
use crate::run::record::decision_json;
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

/// Answer one hook event of `input`'s session with `policy`, prepared by the
/// launcher (its config, rules and YAML-loop treatment are a run's like any other).
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
    // One event of a session at a time: parallel subagents fire hooks at once.
    let store_dir = db.path().parent().unwrap_or(workspace);
    let _session = lock::acquire(&lock::path(store_dir, &id), SESSION_WAIT).await?;
    let existing = db.run(&id)?;
    if existing.as_ref().is_some_and(|r| r.status.is_final()) {
        return Ok(HookOutput::nothing());
    }
    let grants = prepared.pin();
    if let Some(run) = &existing {
        // A later event of the session keeps the policy and the grants it started with.
        if run.policy_digest != policy.digest {
            return Err(anyhow!(
                "the policy `{}` changed since this session's run {id} started; start a new agent session to use the new one",
                policy.source
            ));
        }
        let how = "start a new agent session to use it (or add --accept-config-change to the hook's command)";
        crate::run::pin::hold(
            &db,
            &id,
            run.options.grants.as_ref(),
            &grants,
            accept_config_change,
            how,
        )??;
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
            grants,
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
    let delivered = ctx.deliver(policy, &event).await?;
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
