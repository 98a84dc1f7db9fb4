//! The standalone driver behind `loopbox run`: delivers `start`, then acts on
//! each decision until the run ends. `inject` goes to the configured agent and
//! its reply comes back as `turn-complete`; `ask` goes to a person on a
//! terminal or parks the run; a turn budget stops any policy that never ends.

use std::collections::VecDeque;

use anyhow::Result;

use crate::agent::AgentRequest;
use crate::bindings::{Decision, Event, Outcome, Turn};
use crate::fault::PolicyFault;
use crate::policy::Policy;
use crate::run::RunContext;

/// How a run ended.
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
    /// The run is parked until something arrives (an answer, a tick).
    Waiting(String),
    /// The policy failed: a trap, a limit, an error, a malformed decision.
    Fault(PolicyFault),
    /// The run used its turns (`run.max_turns`).
    TurnBudget(u32),
    /// The agent could not be reached or failed.
    Agent(String),
}

impl RunEnd {
    /// The status stored for the run.
    pub fn status(&self) -> &'static str {
        match self {
            RunEnd::Done(o) if o.success => "done",
            RunEnd::Stopped { .. } => "done",
            RunEnd::Escalated(_) => "escalated",
            RunEnd::Waiting(_) => "waiting",
            _ => "failed",
        }
    }

    /// The process exit code `loopbox run` ends with (see the README's table).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunEnd::Done(o) if o.success => 0,
            RunEnd::Stopped { .. } => 0,
            RunEnd::Done(_) | RunEnd::Blocked(_) => 1,
            RunEnd::Escalated(_) => 3,
            RunEnd::Waiting(_) => 4,
            RunEnd::Fault(_) => 5,
            RunEnd::TurnBudget(_) => 6,
            RunEnd::Agent(_) => 7,
        }
    }

    pub fn summary(&self) -> String {
        match self {
            RunEnd::Done(o) => o.summary.clone(),
            RunEnd::Stopped { turns } => format!("the policy let the agent stop after {turns} turn(s)"),
            RunEnd::Escalated(r) => r.clone(),
            RunEnd::Blocked(r) => format!("blocked: {r}"),
            RunEnd::Waiting(w) => w.clone(),
            RunEnd::Fault(f) => f.to_string(),
            RunEnd::TurnBudget(n) => format!("the run used all {n} of its turns (run.max_turns) without the policy finishing"),
            RunEnd::Agent(e) => e.clone(),
        }
    }
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
    pub asker: &'a dyn Asker,
    /// Ticks delivered, in order, whenever the policy passes outside a turn.
    pub ticks: VecDeque<String>,
}

/// Run `policy` from `start(input)` to its end.
pub async fn drive(ctx: &RunContext, policy: &Policy, input: &str, mut opts: DriveOptions<'_>) -> Result<RunEnd> {
    let mut event = Event::Start(input.to_string());
    let mut turns = 0u32;
    let mut session: Option<String> = None;
    loop {
        let after_turn = matches!(event, Event::TurnComplete(_));
        let decision = match ctx.deliver(policy, &event).await? {
            Ok(d) => d,
            Err(f) => return Ok(RunEnd::Fault(f)),
        };
        event = match decision {
            Decision::Done(o) => return Ok(RunEnd::Done(o)),
            Decision::Escalate(r) => return Ok(RunEnd::Escalated(r)),
            Decision::Block(r) => return Ok(RunEnd::Blocked(r)),
            Decision::Rewrite(_) => {
                return Ok(RunEnd::Fault(PolicyFault::Malformed("`rewrite` answers a tool-call event, and a standalone run has none".into())));
            }
            // Queued ticks are delivered whenever the policy has nothing to add.
            Decision::Pass => match opts.ticks.pop_front() {
                Some(tick) => Event::Tick(tick),
                None if after_turn => return Ok(RunEnd::Stopped { turns }),
                None => return Ok(RunEnd::Waiting("the policy is waiting for events and none are queued (give ticks with --tick JSON)".into())),
            },
            Decision::Ask(q) => match opts.asker.ask(&q) {
                Some(answer) => Event::UserInput(answer),
                None => return Ok(RunEnd::Waiting(format!("the policy asks: {}", crate::ui::sanitize(&q)))),
            },
            Decision::Inject(message) => {
                if turns >= opts.max_turns {
                    return Ok(RunEnd::TurnBudget(opts.max_turns));
                }
                let Some(agent) = ctx.agent() else {
                    return Ok(RunEnd::Agent(
                        "the policy sent a message to the agent, but no agent is configured: add an `[agent]` section with `command = [...]` to loopbox.toml"
                            .into(),
                    ));
                };
                turns += 1;
                ctx.db.add_turn(&ctx.id)?;
                ctx.log.ui().status(format!("turn {turns}: waiting for the agent"));
                let reply = match agent.send(AgentRequest { text: &message, session: session.as_deref(), timeout: None, model: None }).await {
                    Ok(r) => r,
                    Err(e) => return Ok(RunEnd::Agent(e.to_string())),
                };
                let p = &reply.process;
                if p.timed_out || p.exit_code != Some(0) {
                    let why = if p.timed_out { "timed out (agent.timeout_ms)".to_string() } else { format!("exited with {:?}", p.exit_code) };
                    let stderr = crate::ui::shorten(p.stderr.trim(), 400);
                    return Ok(RunEnd::Agent(format!("the agent {why} on turn {turns}: {stderr}")));
                }
                ctx.log.host("info", format!("agent turn {turns} finished in {:.1}s", p.duration.as_secs_f64()));
                session = reply.session.or(session);
                Event::TurnComplete(Turn {
                    session_id: session.clone().unwrap_or_else(|| ctx.id.clone()),
                    response: reply.text,
                    index: turns,
                    continuation: after_turn,
                })
            }
        };
        tokio::task::yield_now().await;
    }
}
