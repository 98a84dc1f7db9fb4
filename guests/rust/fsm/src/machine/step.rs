//! One turn of the executor: the step and time caps, entering the state,
//! running it, and choosing where to go next.

use serde_json::{Value, json};

use crate::eval::{self, Verdict, preview};
use crate::route::route;
use crate::spec::{Action, State};

use super::actions::{Acted, prev_record};
use super::evaluate::evaluate;
use super::world::{Level, Out, World};
use super::{End, Finish, Machine, PATH_KEPT, budget_spent, failed};

/// An undeclared `cannot_judge` re-runs its state this many times in a row,
/// then takes the error route (`executor.py` `_ABSTENTION_HOLD_CAP`).
const ABSTENTION_HOLD_CAP: u32 = 2;

impl<'a> Machine<'a> {
    /// One turn of little-loops' main loop: the caps, then one state. `Some(ms)`:
    /// the loop's `backoff` pause is due before the next turn.
    pub(super) fn step(&mut self, world: &mut dyn World) -> Result<Option<u64>, Finish> {
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
        // `maintain`: a terminal state starts the loop again (a step of its
        // own, no state entered, no backoff), as `executor.py` `run` does.
        if state.terminal && lp.maintain {
            self.r.step += 1;
            self.maintained += 1;
            let target = state
                .on_maintain
                .as_ref()
                .map_or(&lp.initial.state, |t| &t.state);
            world.log(
                Level::Info,
                &format!(
                    "step {} `{}`: maintain -> `{target}` (pass {})",
                    self.r.step,
                    state.name,
                    self.maintained + 1
                ),
            );
            self.came_from = Some(state.name.clone());
            self.r.state = target.clone();
            return Ok(None);
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
                return Ok(None);
            }
        }
        self.enter(state, world);
        let next = self.execute(state, world)?;
        // A `human_approval` state waits for a person: the run parks here.
        if self.pending.is_some() {
            return Ok(None);
        }
        self.go_to(state, next)
    }

    /// Take the route a state chose (`None`: none did): the caps on routes,
    /// then the next state, and the `backoff` due after it.
    pub(super) fn go_to(
        &mut self,
        state: &State,
        next: Option<String>,
    ) -> Result<Option<u64>, Finish> {
        let lp = self.r.lp;
        let next = match next {
            Some(n) => n,
            // `maintain`: where nothing routes, the loop starts again.
            None if lp.maintain => state
                .on_maintain
                .as_ref()
                .map_or(&lp.initial.state, |t| &t.state)
                .clone(),
            None if self.summary_ran => return Err(self.out_of_steps()),
            None => {
                return Err(failed(
                    End::undecided(lp.release()),
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
        // little-loops sleeps `backoff` seconds after every route.
        Ok((lp.backoff_ms > 0).then_some(lp.backoff_ms))
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
        if let Some(crate::spec::Action::HumanApproval(text)) = &state.action {
            return self.human_approval(state, text, world);
        }
        if let Some(learning) = &state.learning {
            return self.learning(state, learning, world);
        }
        let guarded = self.guard_enter(state, world);
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
            // little-loops records a `next:` state's result only when it ran
            // an action: without one, `${prev.*}` stays the state before's.
            if out.is_some() {
                self.r.prev = Some(prev);
            }
            // little-loops checks a `next:` state only when it has an action.
            let green = out.is_some_and(|o| o.code() == 0);
            let guarded = guarded.filter(|_| out.is_some());
            if let Some(next) = self.guard_exit(state, guarded, green, world)? {
                self.log_step(state, "a guard's finding", &next, world);
                return Ok(Some(next));
            }
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
                        End::SystemSignal,
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
                budget_spent(&e, &state.name).unwrap_or_else(|| {
                    failed(
                        End::undecided(self.r.lp.release()),
                        format!("state `{}`: {e}", state.name),
                    )
                })
            })?,
        };
        self.r.prev = Some(prev);
        let green = out.is_none_or(|o| o.code() == 0);
        if let Some(next) = self.guard_exit(state, guarded, green, world)? {
            self.log_step(state, "a guard's finding", &next, world);
            return Ok(Some(next));
        }
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

    pub(super) fn log_step(&self, state: &State, because: &str, next: &str, world: &mut dyn World) {
        world.log(
            Level::Info,
            &format!(
                "step {} `{}`: {because} -> `{next}`",
                self.r.step, state.name
            ),
        );
        // The step's progress line again, with its verdict: the host journals
        // progress lines, so the verdict is shown beside the state's action.
        world.progress(&format!(
            "{}{} · {} · step {}/{} · {because} -> {next}",
            "  ".repeat(self.depth),
            self.r.lp.name,
            state.name,
            self.r.step,
            self.r.lp.max_steps
        ));
    }

    pub(super) fn terminal(&self, state: &State) -> Finish {
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
