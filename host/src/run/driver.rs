//! The standalone driver behind `loopbox run` and `loopbox runs resume`:
//! delivers events and acts on each decision until the run ends. `inject` goes
//! to the configured agent and its reply comes back as `turn-complete`; `ask`
//! goes to a person on a terminal or parks the run; a turn budget stops any
//! policy that never ends, and a spend budget (`run.max_cost_usd`,
//! `run.max_tokens`) any turn once the run has spent it.
//!
//! Every step leaves the store able to say where the run stands, and
//! [`resume_point`] reads it back: an event a crash interrupted is delivered
//! again from its journal; a committed decision is acted on; an agent turn is
//! journaled like an action, so a finished turn is not sent twice.

use std::collections::VecDeque;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::bindings::{Decision, Event, Outcome, Turn};
use crate::caps::actions::NotNow;
use crate::db::{Budget, Db, JournalRow, RunRecord, RunStatus};
use crate::exec::agent::AgentRequest;
use crate::exec::confirm::AskRequest;
use crate::exec::sandbox::Sandbox;
use crate::limits::stop::StopReason;
use crate::limits::{Limit, LimitExceeded};
use crate::run::RunContext;
use crate::run::record::parse_decision;
use crate::wasm::fault::PolicyFault;
use crate::wasm::policy::Policy;

/// How a run ended (or stopped for now).
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// The policy finished with this outcome.
    Done(Outcome),
    /// After a turn, the policy let the agent stop.
    Stopped { turns: u32 },
    /// The policy handed the run to a person.
    Escalated(String),
    /// The policy refused to continue.
    Blocked(String),
    /// The run is parked until something arrives (a tick, a timer's time).
    Waiting(String),
    /// The policy asked a person (`ask`) and none answers here: the run is
    /// parked until the answer comes (`loopbox runs answer`, a server's
    /// dashboard). The question, sanitized.
    Asked(String),
    /// An ask-tier action waits for a person's approval (`loopbox runs approve`,
    /// or a server's dashboard); the run goes on once it is decided.
    AwaitingApproval(String),
    /// The policy failed: a trap, a limit, an error, a malformed decision, non-determinism.
    Fault(PolicyFault),
    /// The run used its turns (`run.max_turns`).
    TurnBudget(u32),
    /// A budget shared with other runs is used up (a server tenant's quota): its key and value.
    Quota(String),
    /// The run spent its budget (`run.max_cost_usd`, `run.max_tokens`): the key,
    /// and a message naming it, its value and what was spent.
    Budget { key: String, message: String },
    /// The agent could not be reached or failed.
    Agent(String),
    /// `loopbox runs cancel` stopped the run.
    Cancelled,
    /// SIGINT or SIGTERM stopped the run where it stood; it can be resumed.
    Interrupted,
    /// Agent turn N was being sent when the run stopped: whether the agent
    /// acted on it cannot be known, so a person decides whether to send it again.
    TurnUnknown(u32),
}

impl RunEnd {
    /// The status stored for the run.
    pub fn status(&self) -> RunStatus {
        match self {
            RunEnd::Done(o) if o.success => RunStatus::Done,
            RunEnd::Stopped { .. } => RunStatus::Done,
            RunEnd::Escalated(_) => RunStatus::Escalated,
            RunEnd::Waiting(_) | RunEnd::Asked(_) | RunEnd::AwaitingApproval(_) => {
                RunStatus::Waiting
            }
            RunEnd::Cancelled => RunStatus::Cancelled,
            RunEnd::TurnUnknown(_) | RunEnd::Interrupted => RunStatus::Interrupted,
            RunEnd::Done(_)
            | RunEnd::Blocked(_)
            | RunEnd::Fault(_)
            | RunEnd::TurnBudget(_)
            | RunEnd::Quota(_)
            | RunEnd::Budget { .. }
            | RunEnd::Agent(_) => RunStatus::Failed,
        }
    }

    pub fn summary(&self) -> String {
        match self {
            RunEnd::Done(o) => o.summary.clone(),
            RunEnd::Stopped { turns } => {
                format!("the policy let the agent stop after {turns} turn(s)")
            }
            RunEnd::Escalated(r) => r.clone(),
            RunEnd::Blocked(r) => format!("blocked: {r}"),
            RunEnd::Waiting(w) | RunEnd::AwaitingApproval(w) => w.clone(),
            RunEnd::Asked(q) => format!("the policy asks: {q}"),
            RunEnd::Fault(f) => f.to_string(),
            RunEnd::TurnBudget(n) => format!(
                "the run used all {n} of its turns (run.max_turns) without the policy finishing"
            ),
            RunEnd::Agent(e) | RunEnd::Quota(e) => e.clone(),
            RunEnd::Budget { message, .. } => message.clone(),
            RunEnd::Cancelled => "the run was cancelled".into(),
            RunEnd::Interrupted => {
                "loopbox was interrupted (SIGINT or SIGTERM); the run stopped where it stood".into()
            }
            RunEnd::TurnUnknown(n) => format!(
                "agent turn {n} was being sent when the run stopped, so whether the agent acted on it is unknown; \
                 check the workspace, then resume with --resend-turn to send it again, or cancel the run"
            ),
        }
    }
}

/// Where a run picks up.
#[derive(Debug, Clone)]
pub enum Next {
    /// Deliver a new event.
    Deliver(Event),
    /// Deliver again event `seq` (its stored JSON), which a crash interrupted.
    Redeliver { seq: i64, event: String },
    /// Act on the decision event `seq` got.
    Act {
        seq: i64,
        decision: Decision,
        after_turn: bool,
    },
    /// Nothing to do: the run ended like this.
    Ended(RunEnd),
}

/// Where the run stands, read from the store.
pub fn resume_point(db: &Db, run: &RunRecord) -> Result<Next> {
    let Some(last) = db.last_event(&run.id)? else {
        return Ok(Next::Deliver(Event::Start(run.input.clone())));
    };
    if last.pending {
        return Ok(Next::Redeliver {
            seq: last.seq,
            event: last.event,
        });
    }
    if let Some(error) = last.error {
        let message = serde_json::from_str::<Value>(&error)
            .ok()
            .and_then(|v| v["message"].as_str().map(String::from))
            .unwrap_or(error);
        return Ok(Next::Ended(RunEnd::Fault(PolicyFault::Recorded(message))));
    }
    let text = last
        .decision
        .context("the last event has neither a decision nor an error")?;
    let decision = parse_decision(&text).with_context(|| {
        format!(
            "the stored decision of event {} cannot be read back",
            last.seq
        )
    })?;
    let after_turn =
        serde_json::from_str::<Value>(&last.event).is_ok_and(|v| v["type"] == "turn-complete");
    Ok(Next::Act {
        seq: last.seq,
        decision,
        after_turn,
    })
}

/// Where `ask` questions go.
pub trait Asker {
    /// The person's answer, or None when nobody can be asked.
    fn ask(&self, question: &str) -> Option<String>;
}

/// Nobody to ask: every `ask` parks the run.
pub struct NoAsker;

impl Asker for NoAsker {
    fn ask(&self, _: &str) -> Option<String> {
        None
    }
}

pub struct DriveOptions<'a> {
    pub max_turns: u32,
    pub asker: &'a (dyn Asker + Sync),
    /// Ticks delivered, in order, whenever the policy passes outside a turn.
    pub ticks: VecDeque<String>,
    /// Send again an agent turn whose outcome a crash left unknown.
    pub resend_turn: bool,
    /// End the drive when the policy sleeps (the run parked until its wake
    /// time), rather than sleeping here: a server's runs, which its sweep wakes.
    pub park_sleeps: bool,
}

/// Run `policy` from `next` until it ends or parks.
pub async fn drive(
    ctx: &RunContext,
    policy: &Policy,
    next: Next,
    mut opts: DriveOptions<'_>,
) -> Result<RunEnd> {
    let mut turns = ctx.db.existing_run(&ctx.id)?.turns;
    let mut session = last_session(&ctx.db, &ctx.id)?;
    let mut next = next;
    loop {
        if matches!(next, Next::Deliver(_) | Next::Redeliver { .. })
            && let Some(end) = stopped(ctx)?
        {
            return Ok(end);
        }
        let (seq, decision, after_turn) = match next {
            Next::Ended(end) => return Ok(end),
            Next::Act {
                seq,
                decision,
                after_turn,
            } => (seq, decision, after_turn),
            Next::Deliver(event) => {
                let after_turn = matches!(event, Event::TurnComplete(_));
                match ctx.deliver_numbered(policy, &event).await? {
                    (seq, Ok(d)) => (seq, d, after_turn),
                    (_, Err(f)) => return fault_end(ctx, f),
                }
            }
            Next::Redeliver { seq, event } => {
                let after_turn = serde_json::from_str::<Value>(&event)
                    .is_ok_and(|v| v["type"] == "turn-complete");
                match ctx.redeliver(policy, seq, event).await? {
                    Ok(d) => (seq, d, after_turn),
                    Err(f) => return fault_end(ctx, f),
                }
            }
        };
        if let Some(end) = stopped(ctx)? {
            return Ok(end);
        }
        // Every timer wakes the run by itself: a policy sleeping until a time
        // already past would loop without end, so the run's wakes are counted.
        if matches!(decision, Decision::Sleep(_))
            && let Some(over) = too_many_wakes(ctx)?
        {
            return Ok(RunEnd::Fault(PolicyFault::Limit(over)));
        }
        next = match decision {
            Decision::Done(o) => return Ok(RunEnd::Done(o)),
            Decision::Escalate(r) => return Ok(RunEnd::Escalated(r)),
            Decision::Block(r) => return Ok(RunEnd::Blocked(r)),
            Decision::Rewrite(_) => {
                return Ok(RunEnd::Fault(PolicyFault::Malformed(
                    "`rewrite` answers a tool-call event, and a standalone run has none".into(),
                )));
            }
            // Queued ticks are delivered whenever the policy has nothing to add.
            Decision::Pass => match opts.ticks.pop_front() {
                Some(tick) => Next::Deliver(Event::Tick(tick)),
                None if after_turn => return Ok(RunEnd::Stopped { turns }),
                None => {
                    return Ok(RunEnd::Waiting(format!(
                        "the policy is waiting for events and none are queued; deliver one with `loopbox runs tick {} JSON`",
                        ctx.id
                    )));
                }
            },
            Decision::Ask(q) => match opts.asker.ask(&q) {
                Some(answer) => Next::Deliver(Event::UserInput(answer)),
                None => return Ok(RunEnd::Asked(crate::ui::sanitize(&q))),
            },
            // A server parks a sleeping run and frees its slot: its sweep wakes it when due.
            Decision::Sleep(timer) if opts.park_sleeps && !crate::run::timer::due(&timer) => {
                return Ok(RunEnd::Waiting(crate::run::timer::park(ctx, &timer)?));
            }
            // A timer: sleep (parked) until it is due, then deliver its tick.
            Decision::Sleep(timer) => match crate::run::timer::sleep(ctx, &timer).await? {
                Ok(()) => Next::Deliver(Event::Tick(timer.tick)),
                Err(crate::run::timer::Woken::Cancelled) => return Ok(RunEnd::Cancelled),
                Err(crate::run::timer::Woken::Parked(why)) => return Ok(RunEnd::Waiting(why)),
            },
            Decision::Inject(message) => match agent_turn(
                ctx,
                seq,
                &message,
                (&mut turns, &mut session),
                after_turn,
                &opts,
            )
            .await?
            {
                Ok(turn) => Next::Deliver(Event::TurnComplete(turn)),
                Err(end) => return Ok(end),
            },
        };
        opts.resend_turn = false;
        tokio::task::yield_now().await;
    }
}

/// `limits.wakes_per_run`, when the run's `sleep` decisions (this one
/// included: its event is stored) went past it.
fn too_many_wakes(ctx: &RunContext) -> Result<Option<LimitExceeded>> {
    let limit = ctx.config.limits.wakes_per_run;
    let slept = ctx.db.sleeps(&ctx.id)?;
    Ok((slept > limit).then(|| LimitExceeded::new(Limit::Wakes, limit).attempted(slept)))
}

/// How the run ends when it was asked to stop (a signal or `runs cancel`), if it was.
fn stopped(ctx: &RunContext) -> Result<Option<RunEnd>> {
    if ctx.db.cancel_requested(&ctx.id)? {
        ctx.stop().request(StopReason::Cancelled);
    }
    Ok(ctx.stop().requested().map(stop_end))
}

fn stop_end(reason: StopReason) -> RunEnd {
    match reason {
        StopReason::Cancelled => RunEnd::Cancelled,
        StopReason::Interrupted => RunEnd::Interrupted,
        // Said with the approval it waits for by `fault_end`; a bare stop has none.
        StopReason::Waiting => {
            RunEnd::AwaitingApproval("an action waits for a person's approval".into())
        }
    }
}

/// How a failed event ends the run: a stop request is not the policy's fault,
/// and an action waiting for an approval parks the run.
fn fault_end(ctx: &RunContext, f: PolicyFault) -> Result<RunEnd> {
    Ok(match f {
        PolicyFault::Stopped(StopReason::Waiting) => awaiting(ctx)?,
        PolicyFault::Stopped(reason) => stop_end(reason),
        f => RunEnd::Fault(f),
    })
}

/// The run's end while its pending approvals wait, naming them and how to decide.
pub fn awaiting(ctx: &RunContext) -> Result<RunEnd> {
    let pending = ctx.db.approvals(&crate::db::approvals::ApprovalFilter {
        run: Some(ctx.id.clone()),
        status: Some(crate::db::approvals::ApprovalStatus::Pending),
        ..Default::default()
    })?;
    let what: Vec<String> = pending
        .iter()
        .map(|a| format!("approval {} of {} ({})", a.id, a.what, a.rule))
        .collect();
    let id = &ctx.id;
    Ok(RunEnd::AwaitingApproval(format!(
        "waiting for {}: approve it with `{}`, or deny it with `{}`",
        if what.is_empty() {
            "a person's approval".to_string()
        } else {
            what.join("; ")
        },
        crate::ui::runs_command(&format!("approve {id}")),
        crate::ui::runs_command(&format!("deny {id} --reason TEXT")),
    )))
}

/// What an agent turn returned, as journaled.
struct TurnReply {
    text: String,
    session: Option<String>,
}

/// A sent turn: its reply (or why there is none) and what it cost, when the
/// agent answered at all.
struct Sent {
    reply: Result<TurnReply, String>,
    charge: Option<crate::spend::Charge>,
    /// The failure's class, telemetry's `error.type` (`_OTHER`: none more precise).
    failure: &'static str,
}

/// Send `message` to the agent as the turn after event `seq`'s `inject`, and
/// journal it; a turn already journaled is not sent again.
async fn agent_turn(
    ctx: &RunContext,
    seq: i64,
    message: &str,
    (turns, session): (&mut u32, &mut Option<String>),
    continuation: bool,
    opts: &DriveOptions<'_>,
) -> Result<Result<Turn, RunEnd>> {
    let journaled = ctx.config.run.journal;
    let recorded = if journaled {
        ctx.db
            .journal(&ctx.id, seq)?
            .into_iter()
            .find(|r| r.seq == 0)
    } else {
        None
    };
    let request = json!({"message": message, "session": session}).to_string();
    let reply = match recorded {
        Some(JournalRow {
            result: Some(result),
            ..
        }) => {
            ctx.log.host("info", format!("agent turn {turns} was answered before the run stopped; using the journaled reply"));
            match parse_turn(&result) {
                Ok(r) => r,
                Err(e) => return Ok(Err(RunEnd::Agent(e))),
            }
        }
        Some(JournalRow { result: None, .. }) if !opts.resend_turn => {
            return Ok(Err(RunEnd::TurnUnknown(*turns)));
        }
        recorded => {
            let resend = recorded.is_some();
            if !resend && *turns >= opts.max_turns {
                return Ok(Err(RunEnd::TurnBudget(opts.max_turns)));
            }
            // No turn starts (a resent one neither) once the run has spent its budget.
            let spent = match ctx.spend_allows_turn()? {
                Ok(spent) => spent,
                Err(e) => {
                    ctx.log.host("warn", e.message.clone());
                    return Ok(Err(RunEnd::Budget {
                        key: e.key,
                        message: e.message,
                    }));
                }
            };
            let budget_usd = ctx.spend_budget().remaining_usd(&spent);
            if !resend {
                let Some(agent) = ctx.agent() else {
                    return Ok(Err(RunEnd::Agent(format!(
                        "the policy sent a message to the agent, but no agent is configured: add an `[{}]` section with `command = [...]` to loopbox.toml",
                        ctx.config.shell.agent_section()
                    ))));
                };
                // An `inject` is a message from the policy like a `prompt` action: the
                // same tier governs it. Its place is call 0 of the injecting event.
                let ask = AskRequest {
                    what: format!(
                        "agent turn {}: `{}`",
                        *turns + 1,
                        crate::ui::shorten(&crate::ui::sanitize(message), 60)
                    ),
                    rule: String::new(),
                    request: json!({"kind": "turn", "message": message, "agent": agent.config().command}),
                    position: Some((seq, 0)),
                };
                match ctx.allow_message(agent.config().tier, ask).await {
                    Ok(()) => {}
                    Err(NotNow::Waiting(_)) => return Ok(Err(awaiting(ctx)?)),
                    Err(NotNow::Failed(e)) => return Err(e),
                    Err(NotNow::Denied(why) | NotNow::Declined(why)) => {
                        return Ok(Err(RunEnd::Agent(why)));
                    }
                }
                if let Err(why) = ctx.spend_quota(crate::limits::quota::Spend::AgentTurn)? {
                    return Ok(Err(RunEnd::Quota(why)));
                }
                if journaled {
                    let row = JournalRow {
                        seq: 0,
                        kind: "turn".into(),
                        request: request.clone(),
                        result: None,
                    };
                    ctx.db
                        .journal_intent(
                            &ctx.id,
                            (Some(seq), ""),
                            &[],
                            &row,
                            &Budget {
                                turn: true,
                                ..Default::default()
                            },
                        )?
                        .ok();
                    *turns += 1;
                } else {
                    *turns = ctx.db.add_turn(&ctx.id)?;
                }
                crate::journal::crashpoint::hit("turn-started");
            } else {
                ctx.log.host(
                    "warn",
                    format!("sending agent turn {turns} again (--resend-turn)"),
                );
            }
            // Stopped mid-turn, the turn's outcome is unknown, as after a crash.
            let who = ctx.agent().map(|a| a.invocation(None, None));
            let span = who.as_ref().map_or_else(tracing::Span::none, |w| {
                crate::telemetry::agent_span(w, "turn")
            });
            let started = crate::telemetry::enabled().then(std::time::Instant::now);
            let sending = send_turn(ctx, message, session.as_deref(), *turns, budget_usd);
            let sent = match ctx
                .until_stopped(tracing::Instrument::instrument(sending, span.clone()))
                .await
            {
                Ok(r) => r,
                Err(reason) => return Ok(Err(stop_end(reason))),
            };
            crate::journal::crashpoint::hit("turn-finished");
            if let (Some(started), Some(who)) = (started, &who) {
                let error = sent.reply.as_ref().err().map(|e| (sent.failure, e.clone()));
                let outcome = if error.is_none() { "ok" } else { "failed" };
                crate::telemetry::metrics::action(started.elapsed(), "turn", outcome);
                crate::telemetry::finish_turn(
                    &span,
                    who,
                    crate::telemetry::TurnEnd {
                        took: started.elapsed(),
                        charge: sent.charge.as_ref(),
                        conversation: sent.reply.as_ref().ok().and_then(|r| r.session.as_deref()),
                        error,
                    },
                );
            }
            // The reply and what it cost are one write: a crash keeps both or neither.
            if journaled {
                ctx.db
                    .journal_result(&ctx.id, seq, 0, &turn_json(&sent), sent.charge.as_ref())?;
                crate::journal::crashpoint::hit("turn-recorded");
            } else if let Some(c) = &sent.charge {
                ctx.db.add_charge(&ctx.id, c)?;
            }
            if let Some(c) = &sent.charge {
                ctx.charge_quota(c);
            }
            match sent.reply {
                Ok(r) => r,
                Err(e) => return Ok(Err(RunEnd::Agent(e))),
            }
        }
    };
    if reply.session.is_some() {
        *session = reply.session;
    }
    Ok(Ok(Turn {
        session_id: session.clone().unwrap_or_else(|| ctx.id.clone()),
        response: reply.text,
        index: *turns,
        continuation,
        origin: None,
    }))
}

/// Added to an agent failure that reads like a refused write under Landlock alone.
const LANDLOCK_ROOT_HINT: &str = " (under the Landlock sandbox a command cannot create new entries in the workspace root, only write to existing ones: install bubblewrap for `sandbox = \"bwrap\"`, or create the entry before the run)";

async fn send_turn(
    ctx: &RunContext,
    message: &str,
    session: Option<&str>,
    turn: u32,
    budget_usd: Option<f64>,
) -> Sent {
    let Some(agent) = ctx.agent() else {
        return Sent {
            reply: Err("no agent is configured".into()),
            charge: None,
            failure: "not_configured",
        };
    };
    ctx.log
        .ui()
        .status(format!("turn {turn}: waiting for the agent"));
    let reply = agent
        .send(AgentRequest {
            text: message,
            session,
            timeout: None,
            model: None,
            cwd: None,
            protected: &[],
            budget_usd,
        })
        .await;
    match reply {
        Ok(reply) => {
            let charge = Some(reply.charge.clone());
            let failure = match &reply.process {
                p if p.timed_out => "timeout",
                p if p.exit_code != Some(0) => "exit",
                _ => "_OTHER",
            };
            Sent {
                reply: turn_reply(ctx, reply, turn),
                charge,
                failure,
            }
        }
        Err(e) => Sent {
            reply: Err(e.to_string()),
            charge: None,
            failure: e.kind(),
        },
    }
}

/// The reply of a turn the agent answered, or why it failed.
fn turn_reply(
    ctx: &RunContext,
    reply: crate::exec::agent::AgentReply,
    turn: u32,
) -> Result<TurnReply, String> {
    let p = &reply.process;
    if p.timed_out || p.exit_code != Some(0) {
        let why = match p.exit_code {
            _ if p.timed_out => "timed out (agent.timeout_ms)".to_string(),
            Some(code) => format!("exited with code {code}"),
            None => "was killed by a signal".to_string(),
        };
        let stderr = crate::ui::shorten(p.stderr.trim(), 400);
        let mut msg = format!("the agent {why} on turn {turn}: {stderr}");
        if matches!(ctx.sandbox(), Sandbox::Landlock(_)) && p.stderr.contains("Permission denied") {
            msg.push_str(LANDLOCK_ROOT_HINT);
        }
        return Err(msg);
    }
    ctx.log.host(
        "info",
        format!(
            "agent turn {turn} finished in {:.1}s",
            p.duration.as_secs_f64()
        ),
    );
    Ok(TurnReply {
        text: reply.text,
        session: reply.session,
    })
}

/// A sent turn as journaled: `ok` or `err`, and `usage` (its charge) when the agent answered.
fn turn_json(sent: &Sent) -> String {
    let mut v = match &sent.reply {
        Ok(t) => json!({"ok": {"text": t.text, "session": t.session}}),
        Err(e) => json!({"err": e}),
    };
    if let Some(c) = &sent.charge {
        v["usage"] = serde_json::to_value(c).unwrap_or(Value::Null);
    }
    v.to_string()
}

fn parse_turn(text: &str) -> Result<TurnReply, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("the journaled agent turn cannot be read back: {e}"))?;
    if let Some(e) = v["err"].as_str() {
        return Err(e.to_string());
    }
    let ok = &v["ok"];
    Ok(TurnReply {
        text: ok["text"].as_str().unwrap_or_default().to_string(),
        session: ok["session"].as_str().map(String::from),
    })
}

/// The agent conversation the run's last answered turn reported.
fn last_session(db: &Db, run: &str) -> Result<Option<String>> {
    let turns = db.journal_of_run(run)?;
    Ok(turns
        .iter()
        .rev()
        .filter(|(_, r)| r.kind == "turn")
        .find_map(|(_, r)| {
            r.result
                .as_deref()
                .and_then(|t| parse_turn(t).ok())
                .and_then(|t| t.session)
        }))
}
