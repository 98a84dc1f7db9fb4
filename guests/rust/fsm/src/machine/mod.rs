//! Running a loop as little-loops' executor does: enter a state, run its
//! action (or its sub-loop) through the [`World`], look for markers,
//! capture, evaluate, route; until a terminal state, a marker, the step cap
//! or the timeout ends it. The world is the host inside the sandbox and a
//! scripted double in tests.
//!
//! Where little-loops' documentation and its code disagree, this follows
//! the code (`little_loops/fsm/executor.py`, 1.156):
//! - a terminal state ends the loop on entry; its action never runs (but
//!   `on_max_steps`'s state runs its action, and the loop then ends as out
//!   of steps);
//! - the step cap is checked before each state, a terminal one included;
//! - `next` skips evaluation; a failing action (non-zero exit) takes
//!   `on_error` when the state has one;
//! - a state with neither action nor evaluator is a `yes`;
//! - an action the host refuses takes `on_error`, or ends the loop.
//!
//! Parts: `world` (what a loop asks of the outside), `step` (one state:
//! caps, action, verdict, route), `actions` (a state's action as a host
//! request, its markers and capture), `evaluate` (the verdict), `guards`
//! (throttle, retryable exit codes, the stall detector), `sub_loop`,
//! `learning` (learning states).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::interp::{self, Scope};
use crate::spec::Loop;

mod actions;
mod approval;
pub mod diff_stall;
mod evaluate;
mod guarded;
mod guards;
mod learning;
mod saved;
mod step;
mod sub_loop;
mod world;

pub use saved::Saved;

pub use world::{Level, Out, Request, World};

/// Why a loop ended, in little-loops' words (`terminated_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Terminal,
    MaxSteps,
    Timeout,
    /// An action failed with nowhere to go (or, before little-loops 1.167,
    /// any step that could not go on).
    Error,
    /// The step could not decide where to go: no route for its verdict, or
    /// an evaluator that failed (little-loops 1.167's `no_route`).
    NoRoute,
    /// `LOOP_STOP:` in an action's output.
    Stopped,
    /// A `next:` state's action was killed by a signal with no `on_error`:
    /// little-loops stops the run rather than advance (ENH-2522's
    /// `system_signal`, exit 1).
    SystemSignal,
    /// One route taken more than `max_edge_revisits` times.
    CycleDetected,
    /// The `circuit` stall detector, set to abort.
    StallDetected,
    /// A loopbox budget (`limits.actions_per_run`, `agent.max_prompts`) ran
    /// out. It ends the whole run, sub-loops' parents included: never a route.
    Budget,
}

/// How the host's refusal reads when a loopbox budget ran out (the guest SDK's
/// `ActionError::describe` for `budget-exhausted`).
pub const BUDGET_EXHAUSTED: &str = "budget exhausted: ";

/// A loopbox budget ran out: the whole run ends, naming the key.
fn budget_spent(why: &str, state: &str) -> Option<Finish> {
    why.starts_with(BUDGET_EXHAUSTED).then(|| {
        failed(
            End::Budget,
            format!("state `{state}`: {why}; the run ends (a loopbox limit, not the loop's own)"),
        )
    })
}

impl End {
    /// How a step that could not decide where to go ends under `release`.
    pub fn undecided(release: crate::spec::Release) -> End {
        if release >= crate::spec::Release::NO_ROUTE {
            End::NoRoute
        } else {
            End::Error
        }
    }

    /// Whether the loop crashed (`error`, or `no_route` since 1.167): the
    /// same to a parent loop, which routes it as `error`.
    pub fn crashed(self) -> bool {
        matches!(self, End::Error | End::NoRoute)
    }

    pub fn name(self) -> &'static str {
        match self {
            End::Terminal => "terminal",
            End::MaxSteps => "max_steps",
            End::Timeout => "timeout",
            End::Error => "error",
            End::NoRoute => "no_route",
            End::Stopped => "stopped",
            End::SystemSignal => "system_signal",
            End::CycleDetected => "cycle_detected",
            End::StallDetected => "stall_detected",
            End::Budget => "budget_exhausted",
        }
    }
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub success: bool,
    pub summary: String,
    pub end: End,
    /// The state the loop ended in.
    pub state: String,
    pub steps: u32,
    /// States entered, in order, and the terminal state it ended in (the first [`PATH_KEPT`]).
    pub path: Vec<String>,
    /// What the loop captured (a sub-loop's parent keeps it).
    pub captured: Map<String, Value>,
}

pub const PATH_KEPT: usize = 1000;

impl Ending {
    pub fn data(&self, lp: &Loop) -> Value {
        json!({
            "loop": lp.name, "state": self.state, "steps": self.steps, "path": self.path,
            "terminated_by": self.end.name(),
        })
    }
}

struct Run<'a> {
    lp: &'a Loop,
    context: Map<String, Value>,
    captured: Map<String, Value>,
    prev: Option<Value>,
    /// `${param.*}`: the current state's fragment bindings.
    param: Map<String, Value>,
    state: String,
    step: u32,
    started: u64,
    now: u64,
    /// `diff_stall` / `action_stall`: the last value and its repeat count, by key.
    stalls: BTreeMap<String, Option<(String, u32)>>,
    /// `${env.PWD}`.
    workspace: Option<String>,
    /// `${messages}`: what `append_to_messages` added, in order.
    messages: Vec<String>,
}

impl Scope for Run<'_> {
    fn release(&self) -> crate::spec::Release {
        self.lp.release()
    }

    fn lookup(&self, path: &[String]) -> Result<Option<Value>, String> {
        let rest = &path[1..];
        let found = match path[0].as_str() {
            "context" => self
                .context
                .get(&rest[0])
                .and_then(|c| interp::walk(c, &rest[1..]))
                .cloned(),
            "captured" => self
                .captured
                .get(&rest[0])
                .and_then(|c| interp::walk(c, &rest[1..]))
                .cloned(),
            "prev" => self
                .prev
                .as_ref()
                .and_then(|p| interp::walk(p, rest))
                .cloned(),
            // little-loops: `os.environ`; loopbox: what its config passes to
            // commands (checked at load), and the workspace as `PWD`.
            // little-loops' `_get_messages_value`: the log, its last N, or
            // its summary, which little-loops never fills in.
            "messages" => match rest.first().map(String::as_str) {
                None | Some("output") => Some(Value::String(self.messages.join("\n"))),
                Some("summary") => Some(Value::String(String::new())),
                Some(p) => p
                    .strip_prefix("last(")
                    .and_then(|n| n.strip_suffix(')'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .map(|n| {
                        let from = self.messages.len().saturating_sub(n);
                        Value::String(self.messages[from..].join("\n"))
                    }),
            },
            "env" if rest[0] == "PWD" => self.workspace.clone().map(Value::String),
            "env" => self.lp.env.get(&rest[0]).cloned().map(Value::String),
            "param" => self
                .param
                .get(&rest[0])
                .and_then(|c| interp::walk(c, &rest[1..]))
                .cloned(),
            "state" => match rest[0].as_str() {
                "name" => Some(json!(self.state)),
                // little-loops: the loop's step count, not visits to this state.
                "iteration" => Some(json!(self.step)),
                _ => None,
            },
            "loop" => {
                let elapsed = self.now.saturating_sub(self.started);
                match rest[0].as_str() {
                    "name" => Some(json!(self.lp.name)),
                    "step" => Some(json!(self.step)),
                    "started_at" => Some(json!(self.started)),
                    "elapsed_ms" => Some(json!(elapsed)),
                    "elapsed" => Some(json!(duration_text(elapsed))),
                    _ => None,
                }
            }
            _ => None,
        };
        Ok(found)
    }
}

/// `500ms`, `30s`, `2m 15s`, as little-loops writes `${loop.elapsed}`.
fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    match (ms, s / 60, s % 60) {
        (ms, _, _) if ms < 1000 => format!("{ms}ms"),
        (_, 0, s) => format!("{s}s"),
        (_, m, 0) => format!("{m}m"),
        (_, m, s) => format!("{m}m {s}s"),
    }
}

/// Run `lp` to its end. `input` replaces `context` values (the guest passes
/// the whole starting context, see [`crate::start::context`]).
pub fn run(lp: &Loop, input: &Map<String, Value>, world: &mut dyn World) -> Ending {
    run_in(lp, input, None, world)
}

/// [`run`], with the workspace directory `${env.PWD}` names. The loop's
/// `backoff` does not park it (see [`start`]).
pub fn run_in(
    lp: &Loop,
    input: &Map<String, Value>,
    workspace: Option<&str>,
    world: &mut dyn World,
) -> Ending {
    run_at(lp, input, workspace.map(str::to_string), world, 0, true)
}

/// How a top-level run stands when [`start`] or [`resume`] returns.
#[derive(Debug)]
pub enum Outcome {
    Ended(Ending),
    /// The loop's `backoff` is due and the world parks the run: it goes on with
    /// [`resume`] once `ms` have passed, from `saved`.
    Parked {
        saved: Box<Saved>,
        ms: u64,
    },
    /// A `human_approval` state asks a person: the run waits for the answer,
    /// which [`answer`] takes, from `saved`.
    Asking {
        saved: Box<Saved>,
        question: String,
    },
}

/// Run a top-level loop until it ends, or until a `backoff` pause the world
/// parks it for ([`World::backoff`]).
pub fn start(
    lp: &Loop,
    input: &Map<String, Value>,
    workspace: Option<&str>,
    world: &mut dyn World,
) -> Outcome {
    let m = Machine::new(lp, input, workspace.map(str::to_string), world, 0, true);
    m.drive(world, true)
}

/// Go on with a run [`start`] (or an earlier `resume`) parked.
pub fn resume(lp: &Loop, saved: Saved, world: &mut dyn World) -> Outcome {
    Machine::restore(lp, saved).drive(world, true)
}

/// Go on with a run that asked a person ([`Outcome::Asking`]), with their answer.
pub fn answer(lp: &Loop, saved: Saved, text: &str, world: &mut dyn World) -> Outcome {
    let mut m = Machine::restore(lp, saved);
    let first = m.answered(text, world);
    m.drive_from(world, true, Some(first))
}

/// `markers`: act on `LOOP_STOP:`/`FATAL_ERROR:` (a top-level loop, or a
/// sub-loop whose state says `sub_loop_markers: true`).
fn run_at(
    lp: &Loop,
    input: &Map<String, Value>,
    workspace: Option<String>,
    world: &mut dyn World,
    depth: usize,
    markers: bool,
) -> Ending {
    match Machine::new(lp, input, workspace, world, depth, markers).drive(world, false) {
        Outcome::Ended(e) => e,
        // `drive` parks nothing when told not to.
        Outcome::Parked { .. } | Outcome::Asking { .. } => {
            unreachable!("a run that may not park parked")
        }
    }
}

impl<'a> Machine<'a> {
    fn new(
        lp: &'a Loop,
        input: &Map<String, Value>,
        workspace: Option<String>,
        world: &mut dyn World,
        depth: usize,
        markers: bool,
    ) -> Machine<'a> {
        let mut context = lp.context.clone();
        context.extend(input.clone());
        let started = world.now_ms();
        Machine {
            r: Run {
                lp,
                context,
                captured: Map::new(),
                prev: None,
                param: Map::new(),
                state: lp.initial.state.clone(),
                step: 0,
                started,
                now: started,
                stalls: BTreeMap::new(),
                workspace,
                messages: Vec::new(),
            },
            path: Vec::new(),
            summary_ran: false,
            retries: BTreeMap::new(),
            throttle: BTreeMap::new(),
            recent: Default::default(),
            seen: BTreeMap::new(),
            fingerprints: BTreeMap::new(),
            edges: BTreeMap::new(),
            came_from: None,
            depth,
            markers,
            holds: BTreeMap::new(),
            maintained: 0,
            backoff_warned: false,
            prepatch_memo: BTreeMap::new(),
            pending: None,
            parks: false,
        }
    }

    /// Step until the loop ends; with `park`, until a `backoff` the world
    /// parks for. A sub-loop never parks (its parent's event is in flight):
    /// its `backoff` is skipped, with a warning.
    fn drive(self, world: &mut dyn World, park: bool) -> Outcome {
        self.drive_from(world, park, None)
    }

    /// [`Machine::drive`], the first turn's result `first` when given (an
    /// answer taken by [`answer`]).
    fn drive_from(
        mut self,
        world: &mut dyn World,
        park: bool,
        mut first: Option<Result<Option<u64>, Finish>>,
    ) -> Outcome {
        self.parks = park && self.depth == 0;
        let finish = loop {
            let turn = match first.take() {
                Some(t) => t,
                None => self.step(world),
            };
            match turn {
                Err(finish) => break finish,
                Ok(None) if self.pending.is_some() => {
                    let question = self.question(world);
                    return Outcome::Asking {
                        saved: Box::new(self.save()),
                        question,
                    };
                }
                Ok(None) => {}
                Ok(Some(ms)) if park && self.depth == 0 => {
                    if world.backoff(ms) {
                        return Outcome::Parked {
                            saved: Box::new(self.save()),
                            ms,
                        };
                    }
                }
                Ok(Some(ms)) => {
                    if !self.backoff_warned {
                        self.backoff_warned = true;
                        world.log(
                            Level::Warn,
                            &format!(
                                "`{}`: `backoff: {}s` is not kept here: {}",
                                self.r.lp.name,
                                ms as f64 / 1000.0,
                                if self.depth > 0 {
                                    "a sub-loop runs within its parent's step, so it does not pause between its states"
                                } else {
                                    "this run goes on at once"
                                }
                            ),
                        );
                    }
                }
            }
        };
        if finish.end == End::Terminal && self.path.len() < PATH_KEPT {
            self.path.push(self.r.state.clone());
        }
        Outcome::Ended(Ending {
            success: finish.success,
            summary: finish.summary,
            end: finish.end,
            state: self.r.state,
            steps: self.r.step,
            path: self.path,
            captured: self.r.captured,
        })
    }
}

/// How a step ended the loop.
struct Finish {
    success: bool,
    end: End,
    summary: String,
}

fn failed(end: End, summary: String) -> Finish {
    Finish {
        success: false,
        end,
        summary,
    }
}

/// A run in progress, with what the loop keeps between steps.
struct Machine<'a> {
    r: Run<'a>,
    /// States entered, in order (the first [`PATH_KEPT`]).
    path: Vec<String>,
    /// `on_max_steps` was taken already.
    summary_ran: bool,
    /// Consecutive re-entries of each state (`max_retries`).
    retries: BTreeMap<String, u32>,
    /// Consecutive runs of each state's action (`throttle`).
    throttle: BTreeMap<String, u32>,
    /// The stall detector's recent (state, exit code, verdict) steps, all
    /// counts of each, and each state's last progress fingerprint.
    recent: std::collections::VecDeque<(String, i32, String)>,
    seen: BTreeMap<(String, i32, String), u32>,
    fingerprints: BTreeMap<String, String>,
    /// Times each route (`from`, `to`) was taken.
    edges: BTreeMap<(String, String), u32>,
    /// The state the last step was in.
    came_from: Option<String>,
    /// How many sub-loops this one runs inside.
    depth: usize,
    /// Stop and fatal markers end this loop (see [`run_at`]).
    markers: bool,
    /// Consecutive `cannot_judge` re-runs of each state.
    holds: BTreeMap<String, u32>,
    /// `maintain` restarts so far (little-loops' `_iteration_count`).
    maintained: u32,
    /// The `human_approval` question the run waits on.
    pending: Option<approval::Pending>,
    /// This machine can wait for a person (a top-level run that parks).
    parks: bool,
    /// A skipped `backoff` was said once.
    backoff_warned: bool,
    /// `prepatch_check` evidence by (step diff hash, base), as little-loops'
    /// `_prepatch_check_memo` keeps it for the run.
    prepatch_memo: BTreeMap<(String, String), Value>,
}

#[cfg(test)]
mod tests;
