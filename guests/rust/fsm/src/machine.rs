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

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::eval::{self, Verdict, preview};
use crate::interp::{self, Scope};
use crate::markers::{self, Signal};
use crate::route::route;
use crate::spec::{Action, EvalKind, Loop, Number, Param, State, SubLoop};

/// What an action produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Out {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
}

impl Out {
    /// The exit code as little-loops sees it: 124 for a timeout, -1 for a
    /// process killed by a signal.
    pub fn code(&self) -> i32 {
        if self.timed_out {
            124
        } else {
            self.exit_code.unwrap_or(-1)
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Shell text; the host runs it with `bash -c` for `builtin:fsm`.
    Script {
        source: String,
        timeout_ms: Option<u64>,
    },
    Exec {
        argv: Vec<String>,
        timeout_ms: Option<u64>,
    },
    Prompt {
        text: String,
        slash: bool,
        model: Option<String>,
        timeout_ms: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// Everything the loop does outside itself.
pub trait World {
    /// Run an action; `Err` is the host's refusal or failure, described.
    fn act(&mut self, req: Request) -> Result<Out, String>;
    fn log(&mut self, level: Level, message: &str);
    /// The one-line status the user sees while the loop runs.
    fn progress(&mut self, message: &str);
    /// Milliseconds on a clock that only moves forward.
    fn now_ms(&mut self) -> u64;
    /// A workspace file: the loop a sub-loop state names.
    fn read(&mut self, path: &str) -> Result<String, String>;
}

/// Why a loop ended, in little-loops' words (`terminated_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Terminal,
    MaxSteps,
    Timeout,
    Error,
    /// `LOOP_STOP:` in an action's output.
    Stopped,
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
    pub fn name(self) -> &'static str {
        match self {
            End::Terminal => "terminal",
            End::MaxSteps => "max_steps",
            End::Timeout => "timeout",
            End::Error => "error",
            End::Stopped => "stopped",
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
}

impl Scope for Run<'_> {
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
            "env" => self.workspace.clone().map(Value::String),
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

/// [`run`], with the workspace directory `${env.PWD}` names.
pub fn run_in(
    lp: &Loop,
    input: &Map<String, Value>,
    workspace: Option<&str>,
    world: &mut dyn World,
) -> Ending {
    run_at(lp, input, workspace.map(str::to_string), world, 0, true)
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
    let mut context = lp.context.clone();
    context.extend(input.clone());
    let started = world.now_ms();
    let mut m = Machine {
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
    };
    let finish = loop {
        if let Err(finish) = m.step(world) {
            break finish;
        }
    };
    if finish.end == End::Terminal && m.path.len() < PATH_KEPT {
        m.path.push(m.r.state.clone());
    }
    Ending {
        success: finish.success,
        summary: finish.summary,
        end: finish.end,
        state: m.r.state,
        steps: m.r.step,
        path: m.path,
        captured: m.r.captured,
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
}

/// An undeclared `cannot_judge` re-runs its state this many times in a row,
/// then takes the error route (`executor.py` `_ABSTENTION_HOLD_CAP`).
const ABSTENTION_HOLD_CAP: u32 = 2;

/// What running a state's action gave.
enum Acted {
    /// No action.
    Nothing,
    Ran(Out),
    /// The host refused it (or the request could not be built).
    Refused(String),
}

impl Acted {
    /// What the action produced, when it ran.
    fn out(&self) -> Option<&Out> {
        match self {
            Acted::Ran(out) => Some(out),
            _ => None,
        }
    }
}

impl<'a> Machine<'a> {
    /// One turn of little-loops' main loop: the caps, then one state.
    fn step(&mut self, world: &mut dyn World) -> Result<(), Finish> {
        let lp = self.r.lp;
        if self.r.step >= lp.max_steps {
            match &lp.on_max_steps {
                Some(t) if !self.summary_ran => {
                    self.summary_ran = true;
                    world.log(
                        Level::Warn,
                        &format!(
                            "max_steps {} reached in `{}`; going to `{}`",
                            lp.max_steps, self.r.state, t.state
                        ),
                    );
                    self.r.state = t.state.clone();
                }
                _ => return Err(self.out_of_steps()),
            }
        }
        self.r.now = world.now_ms();
        if let Some(t) = lp.timeout_s
            && self.r.now.saturating_sub(self.r.started) > t * 1000
        {
            self.flush_pending(world);
            return Err(failed(
                End::Timeout,
                format!(
                    "the loop's timeout of {t}s ran out in state `{}` after {} steps",
                    self.r.state, self.r.step
                ),
            ));
        }
        let Some(state) = lp.states.iter().find(|s| s.name == self.r.state) else {
            return Err(failed(
                End::Error,
                format!("state `{}` is not defined", self.r.state),
            ));
        };
        match self.came_from.take() {
            Some(prev) if prev == state.name => *self.retries.entry(prev).or_default() += 1,
            Some(prev) => {
                self.retries.remove(&prev);
                self.throttle.remove(&prev);
            }
            None => {}
        }
        if state.terminal {
            let is_summary = lp
                .on_max_steps
                .as_ref()
                .is_some_and(|t| t.state == state.name);
            if !(self.summary_ran && is_summary) {
                return Err(if self.summary_ran {
                    self.out_of_steps()
                } else {
                    self.terminal(state)
                });
            }
        }
        if let (Some(max), Some(exhausted)) = (state.max_retries, &state.on_retry_exhausted) {
            let count = self.retries.get(&state.name).copied().unwrap_or(0);
            if count > max {
                world.log(
                    Level::Warn,
                    &format!(
                        "`{}` retried {max} times; going to `{}`",
                        state.name, exhausted.state
                    ),
                );
                self.retries.remove(&state.name);
                self.came_from = Some(state.name.clone());
                self.r.state = exhausted.state.clone();
                return Ok(());
            }
        }
        self.enter(state, world);
        let next = self.execute(state, world)?;
        let next = match next {
            Some(n) => n,
            None if self.summary_ran => return Err(self.out_of_steps()),
            None => {
                return Err(failed(
                    End::Error,
                    format!("state `{}` has no valid transition", state.name),
                ));
            }
        };
        let taken = self
            .edges
            .entry((state.name.clone(), next.clone()))
            .or_default();
        *taken += 1;
        if *taken > self.r.lp.max_edge_revisits {
            return Err(failed(
                End::CycleDetected,
                format!(
                    "cycle detected: `{}` -> `{next}` taken {taken} times (max_edge_revisits {})",
                    state.name, self.r.lp.max_edge_revisits
                ),
            ));
        }
        self.came_from = Some(state.name.clone());
        self.r.state = next;
        Ok(())
    }

    /// The loop's time ran out just after a route: run the pending state's
    /// shell action once, without evaluating or routing, so its side effect
    /// is not lost; the loop then ends in that state (little-loops'
    /// `FSMExecutor._flush_pending_shell_state`, BUG-1226: not for a terminal
    /// state, a sub-loop, or a prompt).
    fn flush_pending(&mut self, world: &mut dyn World) {
        if self.came_from.is_none() {
            return;
        }
        let Some(state) = self.r.lp.states.iter().find(|s| s.name == self.r.state) else {
            return;
        };
        if state.terminal
            || state.sub.is_some()
            || !matches!(state.action, Some(Action::Shell(_) | Action::Exec(_)))
        {
            return;
        }
        world.log(
            Level::Info,
            &format!(
                "the loop's timeout ran out; running the pending state `{}`'s action once",
                state.name
            ),
        );
        self.enter(state, world);
        self.came_from = None;
        if let Ok(params) = self.params(state) {
            self.r.param = params;
        }
        // Its outcome is not used, as in little-loops.
        let _ = self.act(state, world);
    }

    fn out_of_steps(&self) -> Finish {
        failed(
            End::MaxSteps,
            format!(
                "max_steps {} reached in state `{}` before a terminal state",
                self.r.lp.max_steps, self.r.state
            ),
        )
    }

    /// Count the step and show it.
    fn enter(&mut self, state: &State, world: &mut dyn World) {
        let lp = self.r.lp;
        self.r.step += 1;
        if self.path.len() < PATH_KEPT {
            self.path.push(state.name.clone());
        }
        let nest = "  ".repeat(self.depth);
        world.progress(&format!(
            "{nest}{} · {} · step {}/{}",
            lp.name, state.name, self.r.step, lp.max_steps
        ));
    }

    /// Run the state and choose the next one: `None` when nothing routes.
    fn execute(&mut self, state: &State, world: &mut dyn World) -> Result<Option<String>, Finish> {
        self.r.param = self
            .params(state)
            .map_err(|e| failed(End::Error, format!("state `{}`: {e}", state.name)))?;
        if let Some(sub) = &state.sub {
            return self.sub_loop(state, sub, world);
        }
        let acted = self.act(state, world);
        self.observe(state, &acted, world)?;
        if let Acted::Refused(e) = &acted {
            if let Some(end) = budget_spent(e, &state.name) {
                return Err(end);
            }
            world.log(
                Level::Warn,
                &format!("`{}`: the action failed: {e}", state.name),
            );
            return match crate::route::on_error(state) {
                Some(next) => {
                    self.log_step(state, &format!("error ({})", preview(e)), &next, world);
                    Ok(Some(next))
                }
                None => Err(failed(End::Error, format!("state `{}`: {e}", state.name))),
            };
        }
        let out = acted.out();
        if out.is_some()
            && let Some(next) = self.throttled(state, world)?
        {
            return Ok(Some(next));
        }
        // `${prev.*}` is this state's result from the next state on.
        let prev = prev_record(state, &acted);
        if let Some(next) = &state.routes.next {
            self.r.prev = Some(prev);
            let next = match (out, crate::route::on_error(state)) {
                (Some(o), Some(err)) if o.code() != 0 => {
                    let err = self.not_retryable(state, o.code()).unwrap_or(err);
                    self.log_step(
                        state,
                        &format!("exit {} with `next`", o.code()),
                        &err,
                        world,
                    );
                    err
                }
                (Some(o), None) if o.code() < 0 => {
                    return Err(failed(
                        End::Error,
                        format!("state `{}`: the action was killed by a signal", state.name),
                    ));
                }
                _ => {
                    let next = crate::route::resolve(state, next);
                    self.log_step(state, "next", &next, world);
                    next
                }
            };
            return Ok(Some(next));
        }
        let verdict = match (&state.evaluate, out) {
            (None, None) => Verdict {
                verdict: "yes".into(),
                detail: "no action".into(),
            },
            _ => evaluate(&mut self.r, state, out, world).map_err(|e| {
                budget_spent(&e, &state.name)
                    .unwrap_or_else(|| failed(End::Error, format!("state `{}`: {e}", state.name)))
            })?,
        };
        self.r.prev = Some(prev);
        if let Some(c) = &state.capture
            && let Some(Value::Object(rec)) = self.r.captured.get_mut(c)
        {
            rec.insert("verdict".into(), json!(verdict.verdict));
        }
        let code = out.map_or(0, Out::code);
        if let Some(next) = self.stalled(state, code, &verdict.verdict, world)? {
            self.log_step(
                state,
                &format!("{} again: the circuit opens", verdict.verdict),
                &next,
                world,
            );
            return Ok(Some(next));
        }
        if verdict.verdict == "error"
            && out.is_some()
            && let Some(next) = self.not_retryable(state, code)
        {
            self.log_step(
                state,
                &format!("error (exit {code} is not retryable)"),
                &next,
                world,
            );
            return Ok(Some(next));
        }
        // An abstention the state does not route re-runs it, twice, then
        // takes its error route (`executor.py` `_route_abstention_hold`).
        if eval::is_abstention(&verdict.verdict)
            && !state.routes.by_verdict.contains_key(&verdict.verdict)
        {
            let count = self.holds.entry(state.name.clone()).or_default();
            *count += 1;
            let (count, next) = if *count <= ABSTENTION_HOLD_CAP {
                (*count, Some(state.name.clone()))
            } else {
                let count = *count;
                self.holds.remove(&state.name);
                (count, crate::route::on_error(state))
            };
            let what = format!(
                "{} ({}; {count} in a row, re-run {ABSTENTION_HOLD_CAP} times before the error route)",
                verdict.verdict, verdict.detail
            );
            match &next {
                Some(n) => self.log_step(state, &what, n, world),
                None => world.log(
                    Level::Warn,
                    &format!("`{}`: {what}: no error route", state.name),
                ),
            }
            return Ok(next);
        }
        self.holds.remove(&state.name);
        match route(state, &verdict.verdict) {
            Ok(next) => {
                self.log_step(
                    state,
                    &format!("{} ({})", verdict.verdict, verdict.detail),
                    &next,
                    world,
                );
                Ok(Some(next))
            }
            Err(e) => {
                world.log(
                    Level::Warn,
                    &format!(
                        "`{}`: {} ({}): {e}",
                        state.name, verdict.verdict, verdict.detail
                    ),
                );
                Ok(None)
            }
        }
    }

    /// Count a run of the state's action: the `hard_max`-th in a row goes to
    /// `on_throttle_hard` (or `on_error`); past it the loop stops.
    fn throttled(
        &mut self,
        state: &State,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let count = self.throttle.entry(state.name.clone()).or_default();
        *count += 1;
        let (count, max) = (*count, state.throttle_hard_max);
        if state.throttle_exempt {
            return Ok(None);
        }
        if count == max {
            let target = state
                .on_throttle_hard
                .as_ref()
                .or(state.routes.error.as_ref());
            if let Some(next) = crate::route::to(state, target) {
                self.log_step(
                    state,
                    &format!("throttled ({count} runs in a row)"),
                    &next,
                    world,
                );
                return Ok(Some(next));
            }
        }
        if count > max {
            return Err(failed(
                End::Error,
                format!(
                    "state `{}` ran {count} times in a row, past its throttle hard_max of {max}",
                    state.name
                ),
            ));
        }
        Ok(None)
    }

    /// `retryable_exit_codes`: an exit code not in the list skips retrying,
    /// to `on_retry_exhausted` or else `on_error`.
    fn not_retryable(&self, state: &State, code: i32) -> Option<String> {
        let codes = state.retryable_exit_codes.as_ref()?;
        if codes.contains(&code) {
            return None;
        }
        let target = state
            .on_retry_exhausted
            .as_ref()
            .or(state.routes.error.as_ref());
        crate::route::to(state, target)
    }

    /// The stall detector (`circuit.repeated_failure`): the same
    /// (state, exit code, verdict) `window` times in a row, or
    /// `recurrent_window` times in all, goes to `on_repeated_failure`, or
    /// ends the loop. A change in a progress file resets the window.
    fn stalled(
        &mut self,
        state: &State,
        code: i32,
        verdict: &str,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let Some(c) = &self.r.lp.circuit else {
            return Ok(None);
        };
        if let Some(fp) = self.fingerprint(c, world) {
            let changed = self
                .fingerprints
                .get(&state.name)
                .is_some_and(|old| *old != fp);
            if changed {
                self.recent.clear();
                self.fingerprints.clear();
            }
            self.fingerprints.insert(state.name.clone(), fp);
        }
        let triple = (state.name.clone(), code, verdict.to_string());
        self.recent.push_back(triple.clone());
        while self.recent.len() > c.window as usize {
            self.recent.pop_front();
        }
        let consecutive =
            self.recent.len() == c.window as usize && self.recent.iter().all(|t| *t == triple);
        let total = self.seen.entry(triple).or_default();
        *total += 1;
        let recurrent = c.recurrent_window.is_some_and(|w| *total >= w);
        if !(consecutive || recurrent) {
            return Ok(None);
        }
        let why = format!(
            "state `{}` gave exit {code} and `{verdict}` {} times{}",
            state.name,
            if consecutive { c.window } else { *total },
            if consecutive { " in a row" } else { "" }
        );
        match &c.on_repeated {
            Some(t) => {
                world.log(
                    Level::Warn,
                    &format!("stall: {why}; going to `{}`", t.state),
                );
                Ok(Some(t.state.clone()))
            }
            None => Err(failed(End::StallDetected, format!("stall detected: {why}"))),
        }
    }

    /// What the progress files hold now, or `None` when there are none.
    fn fingerprint(&self, c: &crate::spec::Circuit, world: &mut dyn World) -> Option<String> {
        let excluded: Vec<String> = c
            .exclude_paths
            .iter()
            .filter_map(|t| interp::render(t, &self.r).ok())
            .collect();
        let mut parts = Vec::new();
        for t in &c.progress_paths {
            let Ok(path) = interp::render(t, &self.r) else {
                continue;
            };
            if excluded.contains(&path) {
                continue;
            }
            let text = world.read(&path).unwrap_or_default();
            parts.push(crate::start::sha256_hex(text.as_bytes()));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    fn log_step(&self, state: &State, because: &str, next: &str, world: &mut dyn World) {
        world.log(
            Level::Info,
            &format!(
                "step {} `{}`: {because} -> `{next}`",
                self.r.step, state.name
            ),
        );
    }

    /// A fragment state's `${param.*}`: its `with:` values, interpolated, and
    /// the defaults of parameters it does not bind.
    fn params(&self, state: &State) -> Result<Map<String, Value>, String> {
        let Some(f) = &state.fragment else {
            return Ok(Map::new());
        };
        let mut out = render_json_map(&f.bindings, &self.r).map_err(|e| format!("with: {e}"))?;
        if let Err(p) = Param::bind(&f.parameters, &mut out) {
            return Err(format!(
                "fragment `{}` requires parameter `{}` but it is not bound in `with`",
                f.name, p.name
            ));
        }
        Ok(out)
    }

    /// The state's action, if it has one.
    fn act(&self, state: &State, world: &mut dyn World) -> Acted {
        let Some(action) = &state.action else {
            return Acted::Nothing;
        };
        match request(&self.r, state, action) {
            Err(e) => Acted::Refused(e),
            Ok(req) => match world.act(req) {
                Ok(out) => Acted::Ran(out),
                Err(e) => Acted::Refused(e),
            },
        }
    }

    /// Read what the action did: its stop markers, and its `capture`.
    fn observe(
        &mut self,
        state: &State,
        acted: &Acted,
        world: &mut dyn World,
    ) -> Result<(), Finish> {
        let Acted::Ran(out) = acted else {
            return Ok(());
        };
        match markers::signal(&out.stdout).filter(|_| self.markers) {
            Some(Signal::Stop(why)) => {
                return Err(Finish {
                    success: true,
                    end: End::Stopped,
                    summary: format!("LOOP_STOP in `{}`: {why}", state.name),
                });
            }
            Some(Signal::Fatal(why)) => {
                return Err(failed(
                    End::Error,
                    format!("FATAL_ERROR in `{}`: {why}", state.name),
                ));
            }
            None => {}
        }
        if let Some(name) = &state.capture {
            world.log(
                Level::Info,
                &format!(
                    "captured `{name}`: exit {}, {} bytes of output",
                    out.code(),
                    out.stdout.len()
                ),
            );
            // little-loops strips the trailing newline of what it captures.
            let output = out.stdout.trim_end_matches(['\n', '\r']);
            self.r.captured.insert(
                name.clone(),
                json!({
                    "output": output, "stderr": out.stderr, "exit_code": out.code(),
                    "duration_ms": out.duration_ms, "result": markers::action_result(&out.stdout),
                }),
            );
        }
        Ok(())
    }

    fn terminal(&self, state: &State) -> Finish {
        let how = if state.failure {
            ", a failure state,"
        } else {
            ""
        };
        let mut path = self.path.clone();
        path.push(state.name.clone());
        Finish {
            success: !state.failure,
            end: End::Terminal,
            summary: format!(
                "reached `{}`{how} after {} steps ({})",
                state.name,
                self.r.step,
                trail(&path)
            ),
        }
    }

    /// A `loop:` state: the named loop runs here, in the same sandbox, as a
    /// child with its own context; its ending picks the route (`on_yes` for
    /// a success terminal, `on_no` for a failure one, `on_error` for an
    /// error, `on_timeout` when it ran out of time or steps).
    fn sub_loop(
        &mut self,
        state: &State,
        sub: &SubLoop,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        let to = |v: &str| crate::route::to(state, state.routes.by_verdict.get(v));
        let on_error = || crate::route::on_error(state);
        let child = match self.load_child(sub, world) {
            Ok(child) => child,
            Err(e) => {
                world.log(Level::Warn, &format!("`{}`: {e}", state.name));
                return match on_error() {
                    Some(next) => Ok(Some(next)),
                    None => Err(failed(End::Error, format!("state `{}`: {e}", state.name))),
                };
            }
        };
        let mut context = child.context.clone();
        if let Some(with) = &sub.with {
            let bound = render_json_map(with, &self.r)
                .map_err(|e| failed(End::Error, format!("state `{}`: with: {e}", state.name)))?;
            context.extend(bound);
            if let Err(p) = Param::bind(&child.parameters, &mut context) {
                let e = format!(
                    "sub-loop `{}` requires parameter `{}` but it is not bound in `with`",
                    sub.name, p.name
                );
                return match on_error() {
                    Some(next) => Ok(Some(next)),
                    None => Err(failed(End::Error, format!("state `{}`: {e}", state.name))),
                };
            }
        } else if sub.passthrough {
            let mut merged = self.r.context.clone();
            for (k, v) in &self.r.captured {
                let v = match v {
                    Value::Object(m) if m.contains_key("exit_code") => {
                        m.get("output").cloned().unwrap_or(Value::Null)
                    }
                    other => other.clone(),
                };
                merged.insert(k.clone(), v);
            }
            merged.extend(context);
            context = merged;
        }
        for key in [
            "run_dir",
            "readiness_threshold",
            "outcome_threshold",
            "design_tokens_context",
        ] {
            if let (false, Some(v)) = (context.contains_key(key), self.r.context.get(key)) {
                context.insert(key.into(), v.clone());
            }
        }
        context.entry("max_steps").or_insert(json!(child.max_steps));
        // The child has what is left of this loop's time, and this state's limit.
        let mut child = child;
        let left = self.r.lp.timeout_s.map(|t| {
            let used = world.now_ms().saturating_sub(self.r.started) / 1000;
            t.saturating_sub(used).max(1)
        });
        let cap = match (state.timeout_s, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(cap) = cap
            && child.timeout_s.is_none_or(|t| t > cap)
        {
            child.timeout_s = Some(cap);
        }
        world.log(
            Level::Info,
            &format!("`{}`: sub-loop `{}` starts", state.name, child.name),
        );
        let mut ending = run_at(
            &child,
            &context,
            self.r.workspace.clone(),
            world,
            self.depth + 1,
            sub.markers,
        );
        world.log(
            Level::Info,
            &format!(
                "`{}`: sub-loop `{}` ended: {}",
                state.name, child.name, ending.summary
            ),
        );
        if ending.end == End::Budget {
            // A loopbox budget is not the child's ending to route on.
            return Err(failed(End::Budget, ending.summary));
        }
        let verdict = match ending.end {
            End::Terminal if ending.success => "yes",
            End::Terminal => "no",
            End::Error => "error",
            _ => "no",
        };
        if let Some(c) = &state.capture {
            self.r.captured.insert(
                c.clone(),
                json!({"output": ending.summary, "exit_code": null, "verdict": verdict}),
            );
        }
        if (sub.with.is_some() || sub.passthrough) && !ending.captured.is_empty() {
            let captured = std::mem::take(&mut ending.captured);
            self.r
                .captured
                .insert(state.name.clone(), Value::Object(captured));
        }
        if let Value::Object(m) = self
            .r
            .captured
            .entry(state.name.clone())
            .or_insert_with(|| json!({}))
        {
            m.insert("terminated_by".into(), json!(ending.end.name()));
            if ending.end == End::Error {
                m.insert("error".into(), json!(ending.summary));
            }
        }
        let next = match ending.end {
            End::Terminal if ending.success => to("yes"),
            End::Terminal => to("no"),
            End::Error => on_error().or_else(|| to("no")),
            End::Timeout | End::MaxSteps => to("timeout").or_else(|| to("no")),
            End::Stopped | End::CycleDetected | End::StallDetected | End::Budget => to("no"),
        };
        if let Some(n) = &next {
            self.log_step(
                state,
                &format!("sub-loop {} ({})", ending.end.name(), verdict),
                n,
                world,
            );
        }
        Ok(next)
    }

    /// Find, read and check the loop a sub-loop state names.
    fn load_child(&self, sub: &SubLoop, world: &mut dyn World) -> Result<Loop, String> {
        if self.depth + 1 > crate::load::MAX_SUB_LOOP_DEPTH {
            return Err(format!(
                "sub-loops nest deeper than {}",
                crate::load::MAX_SUB_LOOP_DEPTH
            ));
        }
        let name = interp::render(&sub.name, &self.r).map_err(|e| format!("loop: {e}"))?;
        let mut files = WorldFiles(world);
        let candidates = crate::resolve::loop_candidates(&self.r.lp.file, name.trim());
        let (path, text) = crate::resolve::read_first(&mut files, &candidates)
            .map_err(|e| format!("sub-loop `{name}` cannot be read ({e})"))?;
        crate::load::load_child(&path, &text, &mut files).map_err(|problems| {
            format!(
                "sub-loop `{name}` ({path}) has problems:\n{}",
                crate::render(&problems)
            )
        })
    }
}

/// What `${prev.*}` reads after a state ran.
fn prev_record(state: &State, acted: &Acted) -> Value {
    match acted {
        // `timeout_kind`: "wall" when the action ran out of time, else None
        // (little-loops' `executor.py`, `prev_result`; loopbox has no idle timeout).
        Acted::Ran(out) => json!({
            "output": out.stdout, "exit_code": out.code(), "state": state.name,
            "stderr": out.stderr, "duration_ms": out.duration_ms,
            "result": markers::action_result(&out.stdout),
            "timeout_kind": if out.timed_out { json!("wall") } else { Value::Null },
        }),
        _ => json!({"output": "", "exit_code": 0, "state": state.name, "timeout_kind": null}),
    }
}

/// The world's workspace reads, as the loader wants them.
struct WorldFiles<'w>(&'w mut dyn World);

impl crate::Files for WorldFiles<'_> {
    fn read(&mut self, path: &str) -> Result<String, String> {
        self.0.read(path)
    }
}

/// Interpolate every string in a `with:` mapping.
fn render_json_map(m: &Map<String, Value>, r: &Run) -> Result<Map<String, Value>, String> {
    fn render(v: &Value, r: &Run) -> Result<Value, String> {
        Ok(match v {
            Value::String(t) => Value::String(interp::render(t, r)?),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| render(i, r))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(m) => Value::Object(render_json_map(m, r)?),
            other => other.clone(),
        })
    }
    m.iter()
        .map(|(k, v)| Ok((k.clone(), render(v, r)?)))
        .collect()
}

/// The path for a summary line: all of it when short, its ends when long.
fn trail(path: &[String]) -> String {
    if path.len() <= 12 {
        return path.join(" → ");
    }
    format!(
        "{} → … → {}",
        path[..3].join(" → "),
        path[path.len() - 6..].join(" → ")
    )
}

/// The state's action as a host request, its text interpolated.
fn request(r: &Run, state: &State, action: &Action) -> Result<Request, String> {
    let render = |t: &str| interp::render(t, r).map_err(|e| format!("action: {e}"));
    // The action keeps its own limit; the loop's `timeout` is checked between
    // states (little-loops' `FSMExecutor._run_action`, `run`).
    let timeout_ms = state.timeout_s.or(r.lp.default_timeout_s).map(|s| s * 1000);
    Ok(match action {
        Action::Shell(text) => Request::Script {
            source: render(text)?,
            timeout_ms,
        },
        Action::Exec(argv) => Request::Exec {
            argv: argv.iter().map(|a| render(a)).collect::<Result<_, _>>()?,
            timeout_ms,
        },
        Action::Prompt(text) => Request::Prompt {
            text: render(text)?,
            slash: false,
            model: state.model.clone(),
            timeout_ms,
        },
        Action::SlashCommand(text) => Request::Prompt {
            text: render(text)?,
            slash: true,
            model: state.model.clone(),
            timeout_ms,
        },
    })
}

fn number(n: &Number, r: &Run, what: &str) -> Result<f64, String> {
    match n {
        Number::Value(v) => Ok(*v),
        Number::Expr(t) => {
            let text = interp::render(t, r)?;
            text.trim()
                .parse::<f64>()
                .map_err(|_| format!("evaluate: {what} `{t}` is `{text}`, not a number"))
        }
    }
}

/// The state's verdict on its action's result (`out` is `None` when the
/// state has no action: an exit code of 0 and no output, as little-loops).
fn evaluate(
    r: &mut Run,
    state: &State,
    out: Option<&Out>,
    world: &mut dyn World,
) -> Result<Verdict, String> {
    let default_kind;
    let kind = match (&state.evaluate, &state.action) {
        (Some(e), _) => &e.kind,
        (None, Some(a)) if a.is_prompt() => {
            default_kind = EvalKind::LlmStructured {
                prompt: None,
                min_confidence: 0.5,
                uncertain_suffix: false,
            };
            &default_kind
        }
        _ => &EvalKind::ExitCode,
    };
    let code = out.map_or(0, Out::code);
    let text = match state.evaluate.as_ref().and_then(|e| e.source.as_ref()) {
        // little-loops: a source that cannot be filled in falls back to the output.
        Some(source) => interp::render(source, r)
            .unwrap_or_else(|_| out.map(|o| o.stdout.clone()).unwrap_or_default()),
        None => out.map(|o| o.stdout.clone()).unwrap_or_default(),
    };
    if state.evaluate.is_some() {
        // little-loops: a timed-out action is an error whatever the evaluator;
        // a failed one is for evaluators that do not read exit codes themselves.
        if code == 124 {
            return Ok(Verdict {
                verdict: "error".into(),
                detail: "the action timed out".into(),
            });
        }
        let reads_exit_code = matches!(
            kind,
            EvalKind::ExitCode
                | EvalKind::LlmStructured { .. }
                | EvalKind::DiffStall { .. }
                | EvalKind::HistoryStall { .. }
                | EvalKind::ActionStall { .. }
                | EvalKind::HarborScorer
        );
        if code != 0 && !reads_exit_code {
            return Ok(Verdict {
                verdict: "error".into(),
                detail: format!("the action exited with code {code}"),
            });
        }
    }
    Ok(match kind {
        EvalKind::ExitCode => eval::exit_code(code),
        EvalKind::OutputContains {
            pattern,
            negate,
            error_patterns,
        } => {
            let pattern =
                interp::render(pattern, r).map_err(|e| format!("evaluate.pattern: {e}"))?;
            eval::output_contains(&text, &pattern, *negate, error_patterns)
        }
        EvalKind::OutputNumeric { op, target, key } => {
            eval::output_numeric(&text, *op, number(target, r, "target")?, key.as_deref())
        }
        EvalKind::OutputJson { path, op, target } => eval::output_json(&text, path, *op, target),
        EvalKind::Convergence {
            target,
            tolerance,
            direction,
            previous,
        } => {
            let target = number(target, r, "target")?;
            let tolerance = number(tolerance, r, "tolerance")?;
            // little-loops compares with `previous:` only; without it there is
            // no earlier reading, so the verdict is `target` or `progress`.
            let previous = previous.as_ref().and_then(|t| {
                interp::render(t, r)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
            });
            eval::convergence(&text, previous, target, tolerance, *direction)
        }
        EvalKind::Classify { line } => eval::classify(&text, *line),
        EvalKind::HarborScorer => eval::harbor_scorer(&text, code),
        EvalKind::DiffStall { scope, max_stall } => {
            let mut argv: Vec<String> = ["git", "diff", "--stat"].map(String::from).to_vec();
            if !scope.is_empty() {
                argv.push("--".into());
                argv.extend(scope.iter().cloned());
            }
            let key = format!("diff:{}", scope.join("|"));
            match world.act(Request::Exec {
                argv,
                timeout_ms: Some(30_000),
            }) {
                Ok(o) if o.code() == 0 => {
                    let last = r.stalls.entry(key).or_default();
                    eval::repeat_stall(last, o.stdout, *max_stall, "git diff --stat")
                }
                Ok(o) => Verdict {
                    verdict: "error".into(),
                    detail: format!("git diff failed: {}", preview(&o.stderr)),
                },
                Err(e) if e.starts_with(BUDGET_EXHAUSTED) => return Err(e),
                Err(e) => Verdict {
                    verdict: "error".into(),
                    detail: format!("git diff: {}", preview(&e)),
                },
            }
        }
        EvalKind::HistoryStall {
            history_file,
            max_stall,
            epsilon,
            lower_is_better,
        } => {
            let default = if *lower_is_better {
                "${context.run_dir}/.open_questions_history"
            } else {
                "${context.run_dir}/.score_history"
            };
            let template = history_file.as_deref().unwrap_or(default);
            let path = interp::render(template, r).unwrap_or_else(|_| template.to_string());
            // `run_dir` is absolute: read it as the workspace path it is.
            let path = match r.workspace.as_deref().map(|w| w.trim_end_matches('/')) {
                Some(w) => path
                    .strip_prefix(w)
                    .and_then(|p| p.strip_prefix('/'))
                    .map_or(path.clone(), str::to_string),
                None => path,
            };
            let path = crate::load::resolve_path("x", &path).unwrap_or(path);
            // A history that is not there yet is an empty one.
            let history = world.read(&path).unwrap_or_default();
            eval::history_stall(&history, *max_stall, *epsilon, *lower_is_better)
        }
        EvalKind::ActionStall { track, max_repeat } => {
            let parts: Vec<String> = track
                .iter()
                .map(|key| {
                    let value = if key.contains('.') {
                        interp::render(&format!("${{{key}}}"), r).unwrap_or_default()
                    } else {
                        ["context", "captured", "prev"]
                            .iter()
                            .find_map(|ns| interp::render(&format!("${{{ns}.{key}}}"), r).ok())
                            .unwrap_or_default()
                    };
                    format!("{key}={value}")
                })
                .collect();
            let mut sorted = track.clone();
            sorted.sort();
            let last = r
                .stalls
                .entry(format!("action:{}", sorted.join("|")))
                .or_default();
            eval::repeat_stall(last, parts.join("|"), *max_repeat, "tracked values")
        }
        EvalKind::LlmStructured {
            prompt,
            min_confidence,
            uncertain_suffix,
        } => {
            let question = prompt
                .as_deref()
                .map(|p| interp::render(p, r))
                .transpose()
                .map_err(|e| format!("evaluate.prompt: {e}"))?;
            let req = Request::Prompt {
                text: eval::llm_prompt(question.as_deref(), &text, r.lp.llm.max_tokens),
                slash: false,
                model: state.model.clone().or_else(|| r.lp.llm.model.clone()),
                timeout_ms: r.lp.llm.timeout_s.map(|s| s * 1000),
            };
            match world.act(req) {
                Ok(reply) => eval::llm_reply(&reply.stdout, *min_confidence, *uncertain_suffix),
                Err(e) if e.starts_with(BUDGET_EXHAUSTED) => return Err(e),
                Err(e) => Verdict {
                    verdict: "error".into(),
                    detail: format!("the verdict prompt failed: {}", preview(&e)),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A world that answers actions from a script, in order, and keeps what it was asked.
    #[derive(Default)]
    struct Scripted {
        replies: VecDeque<Result<Out, String>>,
        asked: Vec<Request>,
        logs: Vec<String>,
        progress: Vec<String>,
        clock: u64,
        tick_ms: u64,
        files: std::collections::BTreeMap<String, String>,
    }

    impl Scripted {
        fn new(replies: Vec<Result<Out, String>>) -> Scripted {
            Scripted {
                replies: replies.into(),
                ..Default::default()
            }
        }
    }

    impl World for Scripted {
        fn act(&mut self, req: Request) -> Result<Out, String> {
            self.asked.push(req);
            self.replies
                .pop_front()
                .unwrap_or_else(|| panic!("no scripted reply for request {}", self.asked.len()))
        }
        fn log(&mut self, _: Level, message: &str) {
            self.logs.push(message.to_string());
        }
        fn progress(&mut self, message: &str) {
            self.progress.push(message.to_string());
        }
        fn now_ms(&mut self) -> u64 {
            self.clock += self.tick_ms;
            self.clock
        }
        fn read(&mut self, path: &str) -> Result<String, String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| format!("{path}: no such file"))
        }
    }

    fn exit(code: i32, stdout: &str) -> Result<Out, String> {
        Ok(Out {
            exit_code: Some(code),
            stdout: stdout.into(),
            ..Default::default()
        })
    }

    fn lp(yaml: &str) -> Loop {
        struct NoFiles;
        impl crate::Files for NoFiles {
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no files".into())
            }
        }
        crate::load("t.yaml", yaml, &mut NoFiles)
            .unwrap_or_else(|p| panic!("{}", crate::render(&p)))
    }

    const FIX_TESTS: &str = "
name: fix-tests
initial: test
max_steps: 10
states:
  test:
    action: cargo test
    capture: tests
    on_yes: done
    on_no: fix
  fix:
    action: 'The tests fail: ${captured.tests.output} -- fix the code.'
    action_type: prompt
    next: test
  done:
    terminal: true
";

    #[test]
    fn fix_the_tests_goes_test_fix_test_done() {
        let mut w = Scripted::new(vec![
            exit(1, "1 failed"),
            exit(0, "fixed it"),
            exit(0, "ok"),
        ]);
        let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
        assert_eq!(end.path, ["test", "fix", "test", "done"]);
        assert!(end.success, "{end:?}");
        assert_eq!(
            end.summary,
            "reached `done` after 3 steps (test → fix → test → done)"
        );
        assert_eq!(
            w.asked[1],
            Request::Prompt {
                text: "The tests fail: 1 failed -- fix the code.".into(),
                slash: false,
                model: None,
                timeout_ms: None
            }
        );
        assert_eq!(
            w.asked[0],
            Request::Script {
                source: "cargo test".into(),
                timeout_ms: None
            }
        );
        assert_eq!(w.progress[1], "fix-tests · fix · step 2/10");
        assert!(
            w.logs
                .contains(&"step 1 `test`: no (exit 1) -> `fix`".to_string()),
            "{:?}",
            w.logs
        );
        assert!(
            w.logs
                .contains(&"captured `tests`: exit 1, 8 bytes of output".to_string()),
            "{:?}",
            w.logs
        );
    }

    #[test]
    fn the_step_cap_ends_a_loop_that_never_converges() {
        let mut w = Scripted::new((0..10).map(|_| exit(1, "still failing")).collect());
        let yaml = FIX_TESTS.replace("max_steps: 10", "max_steps: 3");
        let end = run(&lp(&yaml), &Map::new(), &mut w);
        assert!(!end.success);
        assert_eq!(
            end.summary,
            "max_steps 3 reached in state `fix` before a terminal state"
        );
        assert_eq!(end.path, ["test", "fix", "test"]);
    }

    #[test]
    fn on_max_steps_goes_to_its_terminal_state() {
        let yaml = FIX_TESTS.replace("max_steps: 10", "max_steps: 2\non_max_steps: gave-up")
            + "  gave-up:\n    terminal: true\n    failure: true\n";
        let mut w = Scripted::new(vec![exit(1, "x"), exit(0, "y")]);
        let end = run(&lp(&yaml), &Map::new(), &mut w);
        assert_eq!(
            (end.success, end.state.as_str(), end.path.len()),
            (false, "gave-up", 3),
            "{end:?}"
        );
    }

    #[test]
    fn markers_stop_or_fail_the_loop() {
        let mut w = Scripted::new(vec![exit(1, "progress\nLOOP_STOP: nothing left to fix\n")]);
        let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
        assert_eq!(
            (end.success, end.summary.as_str()),
            (true, "LOOP_STOP in `test`: nothing left to fix")
        );
        let mut w = Scripted::new(vec![exit(0, "FATAL_ERROR: the database is gone")]);
        let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
        assert_eq!(
            (end.success, end.summary.as_str()),
            (false, "FATAL_ERROR in `test`: the database is gone")
        );
    }

    #[test]
    fn a_refused_action_is_an_error_verdict_routed_to_on_error() {
        let yaml = "name: g\ninitial: a\nstates:\n  a:\n    action: rm -rf /\n    on_yes: done\n    on_error: blocked\n  done:\n    terminal: true\n  blocked:\n    terminal: true\n    failure: true\n";
        let mut w = Scripted::new(vec![Err("denied: scripts are not granted".into())]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!((end.success, end.state.as_str()), (false, "blocked"));
        assert!(
            w.logs
                .iter()
                .any(|l| l
                    .contains("step 1 `a`: error (denied: scripts are not granted) -> `blocked`")),
            "{:?}",
            w.logs
        );
    }

    #[test]
    fn a_next_state_takes_on_error_when_its_action_fails_or_is_refused() {
        let yaml = "name: n\ninitial: a\nstates:\n  a:\n    action: x\n    next: done\n    on_error: blocked\n  done:\n    terminal: true\n  blocked:\n    terminal: true\n    failure: true\n";
        let ends = |yaml: &str, reply: Result<Out, String>| {
            run(&lp(yaml), &Map::new(), &mut Scripted::new(vec![reply])).state
        };
        assert_eq!(ends(yaml, exit(0, "")), "done");
        assert_eq!(ends(yaml, exit(3, "")), "blocked");
        assert_eq!(ends(yaml, exit(1, "")), "blocked");
        assert_eq!(ends(yaml, Err("denied: no".into())), "blocked");
        // Without `on_error`, `next` is taken whatever the exit code.
        let plain = yaml.replace("    on_error: blocked\n", "");
        assert_eq!(ends(&plain, exit(3, "")), "done");
        // A refusal with nowhere to go ends the loop.
        let end = run(
            &lp(&plain),
            &Map::new(),
            &mut Scripted::new(vec![Err("denied: no".into())]),
        );
        assert_eq!((end.success, end.end), (false, End::Error), "{end:?}");
    }

    #[test]
    fn prompts_get_an_llm_verdict_by_default() {
        let yaml = "name: p\ninitial: ask\nllm:\n  model: haiku\n  timeout: 30\nstates:\n  ask:\n    action: Is it done?\n    action_type: prompt\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![
            exit(0, "Not yet."),
            exit(
                0,
                r#"{"verdict": "no", "confidence": 0.9, "reason": "not yet", "evidence": "Not yet."}"#,
            ),
            exit(0, "All done."),
            exit(
                0,
                r#"```json
{"verdict": "yes", "confidence": 0.95, "reason": "done", "evidence": "All done."}
```"#,
            ),
        ]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.path, ["ask", "ask", "done"]);
        let Request::Prompt {
            text,
            model,
            timeout_ms,
            ..
        } = &w.asked[1]
        else {
            panic!()
        };
        assert!(text.contains("<action_output>\nNot yet.\n</action_output>"));
        assert_eq!(
            (model.as_deref(), *timeout_ms),
            (Some("haiku"), Some(30_000))
        );
    }

    /// `cannot_judge` with no route of its own re-runs the state twice, then
    /// takes `on_error` (`executor.py` `_route_abstention_hold`); a route
    /// for it is taken at once.
    #[test]
    fn cannot_judge_reruns_the_state_twice_then_takes_on_error() {
        let yaml = "name: j\ninitial: ask\nstates:\n  ask:\n    action: check\n    evaluate:\n      type: llm_structured\n    on_yes: done\n    on_no: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
        let abstain = || exit(0, r#"{"verdict": "cannot_judge", "confidence": 0.9}"#);
        let yes = || {
            exit(
                0,
                r#"{"verdict": "yes", "confidence": 0.9, "evidence": "ok"}"#,
            )
        };
        let mut replies = Vec::new();
        for _ in 0..3 {
            replies.extend([exit(0, "ok"), abstain()]);
        }
        let mut w = Scripted::new(replies);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.path, ["ask", "ask", "ask", "failed"], "{:?}", w.logs);
        // A verdict after two abstentions routes as usual, and the count restarts.
        let mut w = Scripted::new(vec![
            exit(0, "ok"),
            abstain(),
            exit(0, "ok"),
            abstain(),
            exit(0, "ok"),
            yes(),
        ]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.path, ["ask", "ask", "ask", "done"], "{:?}", w.logs);
        // Routed: taken at once.
        let routed = yaml.replace(
            "on_error: failed",
            "on_error: failed\n    on_cannot_judge: done",
        );
        let mut w = Scripted::new(vec![exit(0, "ok"), abstain()]);
        assert_eq!(run(&lp(&routed), &Map::new(), &mut w).path, ["ask", "done"]);
        // No error route: the run ends after the re-runs, "no valid transition".
        let bare = yaml.replace("    on_error: failed\n", "");
        let mut replies = Vec::new();
        for _ in 0..3 {
            replies.extend([exit(0, "ok"), abstain()]);
        }
        let mut w = Scripted::new(replies);
        let end = run(&lp(&bare), &Map::new(), &mut w);
        assert_eq!(
            (end.path.len(), end.summary.as_str()),
            (3, "state `ask` has no valid transition")
        );
    }

    #[test]
    fn max_retries_counts_consecutive_reentries() {
        let yaml = "name: r\ninitial: poll\nstates:\n  poll:\n    action: check\n    on_yes: done\n    on_no: $current\n    max_retries: 2\n    on_retry_exhausted: gave-up\n  done:\n    terminal: true\n  gave-up:\n    terminal: true\n    failure: true\n";
        let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.path, ["poll", "poll", "poll", "gave-up"]);
        assert_eq!(w.asked.len(), 3);
    }

    #[test]
    fn convergence_tracks_its_metric_between_visits() {
        let yaml = "name: c\ninitial: measure\nstates:\n  measure:\n    exec: [count-todos]\n    evaluate:\n      type: convergence\n      target: 0\n    route:\n      target: done\n      progress: work\n      stall: stuck\n  work:\n    action: reduce\n    next: measure\n  done:\n    terminal: true\n  stuck:\n    terminal: true\n    failure: true\n";
        // Without `previous:` there is no earlier reading (little-loops):
        // an unchanged value is still `progress`.
        let replies = vec![
            exit(0, "5"),
            exit(0, ""),
            exit(0, "5"),
            exit(0, ""),
            exit(0, "0"),
        ];
        let end = run(&lp(yaml), &Map::new(), &mut Scripted::new(replies));
        assert_eq!(
            end.path,
            ["measure", "work", "measure", "work", "measure", "done"]
        );
        // With `previous:` (here the `work` state prints the last value) it can stall.
        let with_prev = yaml.replace(
            "      target: 0\n",
            "      target: 0\n      previous: '${prev.output}'\n",
        );
        let replies = vec![exit(0, "5"), exit(0, "5"), exit(0, "5")];
        let end = run(&lp(&with_prev), &Map::new(), &mut Scripted::new(replies));
        assert_eq!(end.path, ["measure", "work", "measure", "stuck"]);
        let replies = vec![exit(0, "2"), exit(0, ""), exit(0, "0")];
        assert_eq!(
            run(&lp(yaml), &Map::new(), &mut Scripted::new(replies)).state,
            "done"
        );
    }

    #[test]
    fn captures_routes_and_context_feed_later_states() {
        let yaml = "name: cap\ninitial: build\ncontext:\n  target: release\nstates:\n  build:\n    exec: [make, '${context.target}']\n    capture: build\n    route:\n      yes: report\n      _: report\n  report:\n    action: 'echo ${captured.build.exit_code} ${captured.build.result.status} ${prev.state} ${state.iteration}'\n    next: done\n  done:\n    terminal: true\n";
        let mut input = Map::new();
        input.insert("target".into(), json!("debug"));
        let mut w = Scripted::new(vec![
            exit(0, "ACTION_RESULT:\n- status: built\n"),
            exit(0, ""),
        ]);
        run(&lp(yaml), &input, &mut w);
        assert_eq!(
            w.asked[0],
            Request::Exec {
                argv: vec!["make".into(), "debug".into()],
                timeout_ms: None
            }
        );
        assert_eq!(
            w.asked[1],
            Request::Script {
                source: "echo 0 built build 2".into(),
                timeout_ms: None
            }
        );
    }

    #[test]
    fn a_missing_capture_at_run_time_ends_the_loop_naming_it() {
        let yaml = "name: m\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: b\n    on_no: c\n  b:\n    action: echo ${captured.out.output}\n    next: done\n  c:\n    action: y\n    capture: out\n    next: b\n  done:\n    terminal: true\n";
        let end = run(
            &lp(yaml),
            &Map::new(),
            &mut Scripted::new(vec![exit(0, "")]),
        );
        assert!(!end.success);
        assert_eq!(
            end.summary,
            "state `b`: action: `${captured.out.output}` refers to nothing: no state has captured `out` yet (add `:default=` or `?` if that can happen)"
        );
    }

    #[test]
    fn the_loop_timeout_is_checked_between_states_and_flushes_the_pending_one() {
        // little-loops (`executor.py`, `run`, BUG-1226): an action keeps its own
        // limit; past the loop's timeout, the state just routed to runs its shell
        // action once, and the loop ends there.
        let yaml = "name: t\ninitial: a\ntimeout: 10\ndefault_timeout: 60\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: y\n    next: a\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
        w.tick_ms = 3000;
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.end, End::Timeout, "{end:?}");
        assert!(
            end.summary
                .starts_with("the loop's timeout of 10s ran out in state `"),
            "{}",
            end.summary
        );
        for req in &w.asked {
            let Request::Script { timeout_ms, .. } = req else {
                panic!("{req:?}")
            };
            assert_eq!(*timeout_ms, Some(60_000));
        }
        // The pending state was entered and its action ran: the loop ends in it.
        assert_eq!(end.path.last(), Some(&end.state), "{end:?}");
        assert_eq!(w.asked.len(), end.path.len());
        assert!(
            w.logs
                .iter()
                .any(|l| l.contains("running the pending state")),
            "{:?}",
            w.logs
        );
        // A prompt is not flushed.
        let yaml = "name: t\ninitial: a\ntimeout: 10\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: y\n    action_type: prompt\n    next: a\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
        w.tick_ms = 3000;
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.end, End::Timeout);
        assert_ne!(end.path.last(), Some(&end.state), "{end:?}");
    }

    #[test]
    fn a_spent_loopbox_budget_ends_the_run_even_inside_a_sub_loop() {
        let budget = || {
            Err(format!(
                "{BUDGET_EXHAUSTED}the run has used all 200 of its actions (limits.actions_per_run)"
            ))
        };
        // In the loop itself: not routed to on_error.
        let yaml = "name: p\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: done\n    on_error: done\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![budget()]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!((end.end, end.success), (End::Budget, false), "{end:?}");
        assert!(
            end.summary.contains("limits.actions_per_run"),
            "{}",
            end.summary
        );
        // In a sub-loop whose parent routes its errors to `done`.
        let parent = "name: parent\ninitial: sub\nstates:\n  sub:\n    loop: child\n    on_yes: done\n    on_no: done\n    on_error: done\n  done:\n    terminal: true\n";
        let child = "name: child\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: ok\n    on_error: ok\n  ok:\n    terminal: true\n";
        let l = lp_with("parent.yaml", parent, &[("child.yaml", child)]);
        let mut w = Scripted::new(vec![budget()]);
        w.files.insert("child.yaml".into(), child.into());
        let end = run(&l, &Map::new(), &mut w);
        assert_eq!((end.end, end.success), (End::Budget, false), "{end:?}");
        assert_eq!(end.data(&l)["terminated_by"], "budget_exhausted");
        // Another refusal still routes.
        let mut w = Scripted::new(vec![Err("denied: no".into())]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!((end.end, end.state.as_str()), (End::Terminal, "done"));
    }

    #[test]
    fn prev_timeout_kind_is_wall_after_a_timeout() {
        let yaml = "name: t\ninitial: a\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: 'kind=${prev.timeout_kind}'\n    next: done\n  done:\n    terminal: true\n";
        let timed_out = Ok(Out {
            timed_out: true,
            ..Default::default()
        });
        let mut w = Scripted::new(vec![timed_out, exit(0, "")]);
        run(&lp(yaml), &Map::new(), &mut w);
        assert!(
            matches!(&w.asked[1], Request::Script { source, .. } if source == "kind=wall"),
            "{:?}",
            w.asked
        );
        let mut w = Scripted::new(vec![exit(0, ""), exit(0, "")]);
        run(&lp(yaml), &Map::new(), &mut w);
        assert!(matches!(&w.asked[1], Request::Script { source, .. } if source == "kind="));
    }

    #[test]
    fn slash_commands_follow_the_leading_slash_heuristic() {
        let yaml = "name: s\ninitial: a\nstates:\n  a:\n    action: /review\n    next: done\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![exit(0, "")]);
        run(&lp(yaml), &Map::new(), &mut w);
        assert!(
            matches!(&w.asked[0], Request::Prompt { slash: true, text, .. } if text == "/review")
        );
    }

    fn lp_with(path: &str, yaml: &str, files: &[(&str, &str)]) -> Loop {
        struct Files(std::collections::BTreeMap<String, String>);
        impl crate::Files for Files {
            fn read(&mut self, p: &str) -> Result<String, String> {
                self.0
                    .get(p)
                    .cloned()
                    .ok_or_else(|| format!("`{p}` does not exist in the workspace"))
            }
        }
        let files = Files(
            files
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut files = files;
        crate::load(path, yaml, &mut files).unwrap_or_else(|p| panic!("{}", crate::render(&p)))
    }

    #[test]
    fn a_sub_loop_runs_in_the_same_world_and_its_ending_picks_the_route() {
        let child = "name: child\ninitial: check\nparameters:\n  word:\n    required: true\nstates:\n  check:\n    action: test ${context.word} = hi\n    capture: seen\n    on_yes: done\n    on_no: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
        let main = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    with:\n      word: '${context.w}'\n    on_yes: good\n    on_no: bad\n  good:\n    action: echo ${captured.call.seen.exit_code}\n    next: done\n  bad:\n    terminal: true\n    failure: true\n  done:\n    terminal: true\n";
        let lp = lp_with("loops/parent.yaml", main, &[("loops/child.yaml", child)]);
        let mut ctx = Map::new();
        ctx.insert("w".into(), json!("hi"));
        let mut w = Scripted::new(vec![exit(0, ""), exit(0, "")]);
        w.files.insert("loops/child.yaml".into(), child.into());
        let end = run(&lp, &ctx, &mut w);
        assert_eq!(end.path, ["call", "good", "done"], "{end:?}");
        assert_eq!(
            w.asked,
            [
                Request::Script {
                    source: "test hi = hi".into(),
                    timeout_ms: None
                },
                Request::Script {
                    source: "echo 0".into(),
                    timeout_ms: None
                },
            ]
        );
        // The child's failure terminal routes `on_no`.
        ctx.insert("w".into(), json!("no"));
        let mut w = Scripted::new(vec![exit(1, "")]);
        w.files.insert("loops/child.yaml".into(), child.into());
        assert_eq!(run(&lp, &ctx, &mut w).path, ["call", "bad"]);
    }

    /// A child's `LOOP_STOP:`/`FATAL_ERROR:` are plain output, as in
    /// little-loops (child executors get no signal detector), unless the
    /// sub-loop state says `sub_loop_markers: true`.
    #[test]
    fn markers_inside_a_sub_loop_are_ignored_unless_asked_for() {
        let child = "name: child\ninitial: a\nstates:\n  a:\n    action: work\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n";
        let main = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    on_yes: good\n    on_no: bad\n    on_error: broke\n  good:\n    terminal: true\n  bad:\n    terminal: true\n  broke:\n    terminal: true\n";
        let with_key = main.replace("loop: child\n", "loop: child\n    sub_loop_markers: true\n");
        for (parent, output, want) in [
            (main.to_string(), "LOOP_STOP: enough\n", "good"),
            (main.to_string(), "FATAL_ERROR: disk full\n", "good"),
            (with_key.clone(), "LOOP_STOP: enough\n", "bad"),
            (with_key, "FATAL_ERROR: disk full\n", "broke"),
        ] {
            let lp = lp_with("loops/parent.yaml", &parent, &[("loops/child.yaml", child)]);
            let mut w = Scripted::new(vec![exit(0, output)]);
            w.files.insert("loops/child.yaml".into(), child.into());
            let end = run(&lp, &Map::new(), &mut w);
            assert_eq!(
                end.path,
                ["call", want],
                "{parent} / {output}: {:?}",
                w.logs
            );
        }
        // The key belongs on a `loop:` state.
        struct NoFiles;
        impl crate::Files for NoFiles {
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no files".into())
            }
        }
        let bad = "name: b\ninitial: a\nstates:\n  a:\n    action: x\n    sub_loop_markers: true\n    next: done\n  done:\n    terminal: true\n";
        let problems = crate::render(&crate::load("b.yaml", bad, &mut NoFiles).unwrap_err());
        assert!(
            problems.contains(
                "b.yaml:6: state `a`: `sub_loop_markers` is for a state that runs a sub-loop"
            ),
            "{problems}"
        );
    }

    #[test]
    fn a_sub_loop_that_calls_itself_stops_at_the_depth_limit() {
        let me = "name: me\ninitial: again\nstates:\n  again:\n    loop: me\n    on_yes: done\n    on_no: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
        let lp = lp_with("me.yaml", me, &[("me.yaml", me)]);
        let mut w = Scripted::new(vec![]);
        w.files.insert("me.yaml".into(), me.into());
        let end = run(&lp, &Map::new(), &mut w);
        // Each level but the deepest ends `failed` by its error route; the top routes `on_no`.
        assert_eq!(end.path, ["again", "done"], "{end:?}");
        assert!(
            w.logs
                .iter()
                .any(|l| l.contains("sub-loops nest deeper than 8")),
            "{:?}",
            w.logs
        );
    }

    #[test]
    fn terminal_actions_never_run_and_the_cap_comes_before_a_terminal() {
        let yaml = "name: t\ninitial: a\nmax_steps: 1\nstates:\n  a:\n    action: one\n    next: b\n  b:\n    action: never\n    terminal: true\n";
        let mut w = Scripted::new(vec![exit(0, "")]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(
            (end.end, end.path.clone()),
            (End::MaxSteps, vec!["a".to_string()])
        );
        let mut w = Scripted::new(vec![exit(0, "")]);
        let end = run(
            &lp(&yaml.replace("max_steps: 1", "max_steps: 2")),
            &Map::new(),
            &mut w,
        );
        assert_eq!(
            (end.end, end.success, end.path.len()),
            (End::Terminal, true, 2)
        );
        assert_eq!(w.asked.len(), 1, "the terminal state's action did not run");
    }

    #[test]
    fn on_max_steps_runs_its_state_then_ends_out_of_steps() {
        let yaml = "name: t\ninitial: spin\nmax_steps: 2\non_max_steps: report\nstates:\n  spin:\n    action: 'false'\n    on_yes: done\n    on_no: spin\n  report:\n    action: report\n    next: done\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![exit(1, ""), exit(1, ""), exit(0, "")]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!((end.end, end.success), (End::MaxSteps, false));
        assert_eq!(end.path, ["spin", "spin", "report"]);
    }

    #[test]
    fn throttle_circuit_and_retryable_exit_codes_redirect() {
        let yaml = "name: t\ninitial: spin\nmax_steps: 40\nstates:\n  spin:\n    action: x\n    on_yes: done\n    on_no: spin\n    throttle:\n      hard_max: 3\n    on_throttle_hard: stopped\n  stopped:\n    terminal: true\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
        assert_eq!(
            run(&lp(yaml), &Map::new(), &mut w).path,
            ["spin", "spin", "spin", "stopped"]
        );
        // `type: learning` (no `learning:` block) is exempt, as in little-loops.
        let exempt = yaml.replace("    throttle:\n", "    type: learning\n    throttle:\n");
        let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
        let end = run(
            &lp(&exempt.replace("max_steps: 40", "max_steps: 5")),
            &Map::new(),
            &mut w,
        );
        assert_eq!((end.end, end.path.len()), (End::MaxSteps, 5), "{end:?}");
        // Past hard_max with nowhere to go, the loop stops.
        let yaml2 = yaml.replace("    on_throttle_hard: stopped\n", "");
        let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
        let end = run(&lp(&yaml2), &Map::new(), &mut w);
        assert_eq!((end.end, end.path.len()), (End::Error, 4), "{end:?}");

        let circuit = "name: c\ninitial: try\nmax_steps: 40\ncircuit:\n  repeated_failure:\n    window: 2\nstates:\n  try:\n    action: x\n    on_yes: done\n    on_no: try\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
        let end = run(&lp(circuit), &Map::new(), &mut w);
        assert_eq!(
            (end.end, end.path.len()),
            (End::StallDetected, 2),
            "{end:?}"
        );
        assert!(end.summary.contains("stall detected"), "{}", end.summary);

        let cycle = "name: y\ninitial: a\nmax_steps: 40\nmax_edge_revisits: 2\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: x\n    on_yes: a\n    on_no: done\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
        let end = run(&lp(cycle), &Map::new(), &mut w);
        assert_eq!(
            (end.end, end.path.len()),
            (End::CycleDetected, 5),
            "{end:?}"
        );

        let retry = "name: r\ninitial: a\nmax_steps: 40\nstates:\n  a:\n    action: x\n    on_yes: done\n    on_error: a\n    max_retries: 5\n    on_retry_exhausted: gave_up\n    retryable_exit_codes: [75]\n  gave_up:\n    terminal: true\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![exit(75, ""), exit(2, "")]);
        assert_eq!(
            run(&lp(retry), &Map::new(), &mut w).path,
            ["a", "a", "gave_up"]
        );
    }

    #[test]
    fn stall_evaluators_keep_their_state_in_the_run() {
        let yaml = "name: d\ninitial: work\nmax_steps: 20\nstates:\n  work:\n    action: x\n    next: check\n  check:\n    evaluate:\n      type: diff_stall\n      max_stall: 2\n    on_yes: work\n    on_no: stuck\n  stuck:\n    terminal: true\n";
        let diff = |s: &str| exit(0, s);
        let mut w = Scripted::new(vec![
            exit(0, ""),
            diff("a | 1"),
            exit(0, ""),
            diff("a | 2"),
            exit(0, ""),
            diff("a | 2"),
            exit(0, ""),
            diff("a | 2"),
        ]);
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert_eq!(end.state, "stuck", "{end:?}");
        assert_eq!(
            w.asked[1],
            Request::Exec {
                argv: vec!["git".into(), "diff".into(), "--stat".into()],
                timeout_ms: Some(30_000)
            }
        );

        let score = "name: s\ninitial: check\nstates:\n  check:\n    evaluate:\n      type: score_stall\n      history_file: scores.txt\n      max_stall: 2\n    on_yes: more\n    on_no: plateau\n  more:\n    terminal: true\n  plateau:\n    terminal: true\n";
        let mut w = Scripted::new(vec![]);
        w.files
            .insert("scores.txt".into(), "5\n7\n7.2\n7.4\n".into());
        assert_eq!(run(&lp(score), &Map::new(), &mut w).state, "plateau");
        w.files.insert("scores.txt".into(), "5\n7\n9\n".into());
        assert_eq!(run(&lp(score), &Map::new(), &mut w).state, "more");
    }
}
