//! Running a loop: enter a state, run its action through the [`World`],
//! look for markers, capture, evaluate, route; until a terminal state, a
//! marker, the step cap or the timeout ends it. The world is the host inside
//! the sandbox and a scripted double in tests.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::eval::{self, Verdict, preview};
use crate::interp::{self, Scope};
use crate::markers::{self, Signal};
use crate::route::route;
use crate::spec::{Action, EvalKind, Loop, Number, State};

/// What an action produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Out {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Shell text for `sh -c`.
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
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub success: bool,
    pub summary: String,
    /// The state the loop ended in.
    pub state: String,
    pub steps: u32,
    /// States entered, in order (the first [`PATH_KEPT`]).
    pub path: Vec<String>,
}

pub const PATH_KEPT: usize = 1000;

impl Ending {
    pub fn data(&self, lp: &Loop) -> Value {
        json!({"loop": lp.name, "state": self.state, "steps": self.steps, "path": self.path})
    }
}

struct Run<'a> {
    lp: &'a Loop,
    context: Map<String, Value>,
    captured: Map<String, Value>,
    prev: Option<Value>,
    iterations: BTreeMap<String, u32>,
    /// Last value each convergence state saw.
    last_metric: BTreeMap<String, f64>,
    state: String,
    step: u32,
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
            "state" => match rest[0].as_str() {
                "name" => Some(json!(self.state)),
                "iteration" => Some(json!(
                    self.iterations.get(&self.state).copied().unwrap_or(0)
                )),
                _ => None,
            },
            "loop" => match rest[0].as_str() {
                "name" => Some(json!(self.lp.name)),
                "step" => Some(json!(self.step)),
                _ => None,
            },
            _ => None,
        };
        Ok(found)
    }
}

/// Run `lp` to its end. `input` (the run's `--input` object) replaces `context` values.
pub fn run(lp: &Loop, input: &Map<String, Value>, world: &mut dyn World) -> Ending {
    let mut context = lp.context.clone();
    context.extend(input.clone());
    let mut m = Machine {
        r: Run {
            lp,
            context,
            captured: Map::new(),
            prev: None,
            iterations: BTreeMap::new(),
            last_metric: BTreeMap::new(),
            state: lp.initial.state.clone(),
            step: 0,
        },
        started: world.now_ms(),
        path: Vec::new(),
        out_of_steps: false,
        streak: 0,
    };
    let finish = loop {
        if let Err(finish) = m.step(world) {
            break finish;
        }
    };
    Ending {
        success: finish.success,
        summary: finish.summary,
        state: m.r.state,
        steps: m.r.step,
        path: m.path,
    }
}

/// How a step ended the loop.
struct Finish {
    success: bool,
    summary: String,
}

fn failed(summary: String) -> Finish {
    Finish {
        success: false,
        summary,
    }
}

/// A run in progress, with what the loop keeps between steps.
struct Machine<'a> {
    r: Run<'a>,
    started: u64,
    /// States entered, in order (the first [`PATH_KEPT`]).
    path: Vec<String>,
    /// `on_max_steps` was taken already.
    out_of_steps: bool,
    /// Consecutive re-entries of the current state (`max_retries`).
    streak: u32,
}

impl<'a> Machine<'a> {
    /// One state: enter it, run its action, then end the loop or route onward.
    fn step(&mut self, world: &mut dyn World) -> Result<(), Finish> {
        self.check_budgets(world)?;
        let state = self.enter(world)?;
        let result = self.act(state, world)?;
        let record = self.observe(state, &result, world)?;
        if state.terminal {
            return Err(self.terminal(state));
        }
        let (verdict, next) = self.decide(state, result.as_ref(), world)?;
        self.r.prev = Some(record);
        let next = self.retry_limit(state, next, world);
        let because = match &verdict {
            Some(v) => format!("{} ({})", v.verdict, v.detail),
            None => "next".to_string(),
        };
        world.log(
            Level::Info,
            &format!(
                "step {} `{}`: {because} -> `{next}`",
                self.r.step, state.name
            ),
        );
        self.r.state = next;
        Ok(())
    }

    /// The loop's timeout and `max_steps` (which may send it to `on_max_steps` once).
    fn check_budgets(&mut self, world: &mut dyn World) -> Result<(), Finish> {
        let (lp, r) = (self.r.lp, &mut self.r);
        if let Some(t) = lp.timeout_s
            && world.now_ms().saturating_sub(self.started) >= t * 1000
        {
            return Err(failed(format!(
                "the loop's timeout of {t}s ran out in state `{}` after {} steps",
                r.state, r.step
            )));
        }
        if r.step < lp.max_steps {
            return Ok(());
        }
        match &lp.on_max_steps {
            Some(t) if !self.out_of_steps => {
                self.out_of_steps = true;
                world.log(
                    Level::Warn,
                    &format!(
                        "max_steps {} reached in `{}`; going to `{}`",
                        lp.max_steps, r.state, t.state
                    ),
                );
                r.state = t.state.clone();
                Ok(())
            }
            _ => Err(failed(format!(
                "max_steps {} reached in state `{}` before a terminal state",
                lp.max_steps, r.state
            ))),
        }
    }

    /// Find the current state and count the visit.
    fn enter(&mut self, world: &mut dyn World) -> Result<&'a State, Finish> {
        let lp = self.r.lp;
        let Some(state) = lp.states.iter().find(|s| s.name == self.r.state) else {
            return Err(failed(format!("state `{}` is not defined", self.r.state)));
        };
        self.r.step += 1;
        *self.r.iterations.entry(state.name.clone()).or_default() += 1;
        if self.path.len() < PATH_KEPT {
            self.path.push(state.name.clone());
        }
        world.progress(&format!(
            "{} · {} · step {}/{}",
            lp.name, state.name, self.r.step, lp.max_steps
        ));
        Ok(state)
    }

    /// The state's action, if it has one: `Err` inside is the host's refusal.
    fn act(
        &self,
        state: &State,
        world: &mut dyn World,
    ) -> Result<Option<Result<Out, String>>, Finish> {
        let Some(action) = &state.action else {
            return Ok(None);
        };
        match request(&self.r, state, action, world, self.started) {
            Err(e) => Err(failed(format!("state `{}`: {e}", state.name))),
            Ok(req) => Ok(Some(world.act(req))),
        }
    }

    /// Read what the action did: its stop markers, its record (for `prev` and
    /// `capture`), and a line in the log when it failed.
    fn observe(
        &mut self,
        state: &State,
        result: &Option<Result<Out, String>>,
        world: &mut dyn World,
    ) -> Result<Value, Finish> {
        let output = match result {
            Some(Ok(out)) => out.stdout.clone(),
            Some(Err(e)) => e.clone(),
            None => String::new(),
        };
        if let Some(Ok(out)) = result {
            match markers::signal(&out.stdout) {
                Some(Signal::Stop(why)) => {
                    return Err(Finish {
                        success: true,
                        summary: format!("LOOP_STOP in `{}`: {why}", state.name),
                    });
                }
                Some(Signal::Fatal(why)) => {
                    return Err(failed(format!("FATAL_ERROR in `{}`: {why}", state.name)));
                }
                None => {}
            }
        }
        let record = match result {
            Some(Ok(out)) => json!({
                "output": out.stdout, "stderr": out.stderr, "exit_code": out.exit_code, "duration_ms": out.duration_ms,
                "state": state.name, "result": markers::action_result(&output),
            }),
            Some(Err(e)) => {
                json!({"output": "", "stderr": e, "exit_code": null, "duration_ms": 0, "state": state.name, "error": e})
            }
            None => {
                json!({"output": "", "stderr": "", "exit_code": null, "duration_ms": 0, "state": state.name})
            }
        };
        if let Some(name) = &state.capture {
            let line = match result {
                Some(Err(_)) => {
                    format!("captured `{name}`: the action failed, so there is no output")
                }
                _ => format!(
                    "captured `{name}`: exit {}, {} bytes of output",
                    exit_text(&record),
                    output.len()
                ),
            };
            world.log(Level::Info, &line);
            self.r.captured.insert(name.clone(), record.clone());
        }
        if let Some(Err(e)) = result {
            world.log(
                Level::Warn,
                &format!("`{}`: the action failed: {e}", state.name),
            );
        }
        Ok(record)
    }

    fn terminal(&self, state: &State) -> Finish {
        let how = if state.failure {
            ", a failure state,"
        } else {
            ""
        };
        Finish {
            success: !state.failure,
            summary: format!(
                "reached `{}`{how} after {} steps ({})",
                state.name,
                self.r.step,
                trail(&self.path)
            ),
        }
    }

    /// The verdict and the next state. A `next` state still takes its error
    /// route when the host refused its action.
    fn decide(
        &mut self,
        state: &State,
        result: Option<&Result<Out, String>>,
        world: &mut dyn World,
    ) -> Result<(Option<Verdict>, String), Finish> {
        let refused = matches!(result, Some(Err(_)));
        if let (Some(next), false) = (&state.routes.next, refused && state.routes.error.is_some()) {
            return Ok((None, crate::route::resolve(state, next)));
        }
        let v = evaluate(&mut self.r, state, result, world)
            .map_err(|e| failed(format!("state `{}`: {e}", state.name)))?;
        match route(state, &v.verdict) {
            Ok(next) => Ok((Some(v), next)),
            Err(e) => {
                world.log(
                    Level::Warn,
                    &format!("`{}`: {} ({})", state.name, v.verdict, v.detail),
                );
                Err(failed(e))
            }
        }
    }

    /// `max_retries`: past that many consecutive re-entries of a state, go to
    /// its `on_retry_exhausted`.
    fn retry_limit(&mut self, state: &State, next: String, world: &mut dyn World) -> String {
        if next != state.name {
            self.streak = 0;
            return next;
        }
        self.streak += 1;
        match (state.max_retries, &state.on_retry_exhausted) {
            (Some(max), Some(exhausted)) if self.streak > max => {
                world.log(
                    Level::Warn,
                    &format!(
                        "`{}` retried {max} times; going to `{}`",
                        state.name, exhausted.state
                    ),
                );
                self.streak = 0;
                exhausted.state.clone()
            }
            _ => next,
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

fn exit_text(record: &Value) -> String {
    match record.get("exit_code") {
        Some(Value::Number(n)) => n.to_string(),
        _ => "none".into(),
    }
}

/// The state's action as a host request, its text interpolated.
fn request(
    r: &Run,
    state: &State,
    action: &Action,
    world: &mut dyn World,
    started: u64,
) -> Result<Request, String> {
    let render = |t: &str| interp::render(t, r).map_err(|e| format!("action: {e}"));
    let mut timeout_ms = state.timeout_s.or(r.lp.default_timeout_s).map(|s| s * 1000);
    if let Some(t) = r.lp.timeout_s {
        let left = (t * 1000)
            .saturating_sub(world.now_ms().saturating_sub(started))
            .max(1);
        timeout_ms = Some(timeout_ms.map_or(left, |ms| ms.min(left)));
    }
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

/// The state's verdict. An action the host refused is an `error` verdict.
fn evaluate(
    r: &mut Run,
    state: &State,
    result: Option<&Result<Out, String>>,
    world: &mut dyn World,
) -> Result<Verdict, String> {
    if let Some(Err(e)) = result {
        return Ok(Verdict {
            verdict: "error".into(),
            detail: preview(e),
        });
    }
    let out = result.and_then(|r| r.as_ref().ok());
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
    let text = match state.evaluate.as_ref().and_then(|e| e.source.as_ref()) {
        Some(source) => interp::render(source, r).map_err(|e| format!("evaluate.source: {e}"))?,
        None => out.map(|o| o.stdout.clone()).unwrap_or_default(),
    };
    Ok(match kind {
        EvalKind::ExitCode => match out {
            Some(o) => eval::exit_code(o.exit_code, o.timed_out),
            None => Verdict {
                verdict: "error".into(),
                detail: "no action ran, so there is no exit code".into(),
            },
        },
        EvalKind::OutputContains {
            pattern,
            negate,
            error_patterns,
        } => {
            let pattern =
                interp::render(pattern, r).map_err(|e| format!("evaluate.pattern: {e}"))?;
            eval::output_contains(&text, &pattern, *negate, error_patterns)
        }
        EvalKind::OutputNumeric { op, target } => {
            eval::output_numeric(&text, *op, number(target, r, "target")?)
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
            let previous = match previous {
                Some(t) => interp::render(t, r)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok()),
                None => r.last_metric.get(&state.name).copied(),
            };
            let (verdict, current) =
                eval::convergence(&text, previous, target, tolerance, *direction);
            if let Some(c) = current {
                r.last_metric.insert(state.name.clone(), c);
            }
            verdict
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
                model: r.lp.llm.model.clone(),
                timeout_ms: r.lp.llm.timeout_s.map(|s| s * 1000),
            };
            match world.act(req) {
                Ok(reply) => eval::llm_reply(&reply.stdout, *min_confidence, *uncertain_suffix),
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
            "reached `done` after 4 steps (test → fix → test → done)"
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
    fn a_next_state_takes_its_error_route_only_when_its_action_is_refused() {
        let yaml = "name: n\ninitial: a\nstates:\n  a:\n    action: x\n    next: done\n    on_error: blocked\n  done:\n    terminal: true\n  blocked:\n    terminal: true\n    failure: true\n";
        let end = run(
            &lp(yaml),
            &Map::new(),
            &mut Scripted::new(vec![exit(3, "")]),
        );
        assert_eq!(end.state, "done");
        let end = run(
            &lp(yaml),
            &Map::new(),
            &mut Scripted::new(vec![Err("denied: no".into())]),
        );
        assert_eq!(end.state, "blocked");
    }

    #[test]
    fn prompts_get_an_llm_verdict_by_default() {
        let yaml = "name: p\ninitial: ask\nllm:\n  model: haiku\n  timeout: 30\nstates:\n  ask:\n    action: Is it done?\n    action_type: prompt\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n";
        let mut w = Scripted::new(vec![
            exit(0, "Not yet."),
            exit(
                0,
                r#"{"verdict": "no", "confidence": 0.9, "reason": "not yet"}"#,
            ),
            exit(0, "All done."),
            exit(
                0,
                r#"```json
{"verdict": "success", "confidence": 0.95, "reason": "done"}
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
        let replies = vec![
            exit(0, "5"),
            exit(0, ""),
            exit(0, "3"),
            exit(0, ""),
            exit(0, "3"),
        ];
        let end = run(&lp(yaml), &Map::new(), &mut Scripted::new(replies));
        assert_eq!(
            end.path,
            ["measure", "work", "measure", "work", "measure", "stuck"]
        );
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
                source: "echo 0 built build 1".into(),
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
    fn the_loop_timeout_ends_it_and_caps_action_timeouts() {
        let yaml = "name: t\ninitial: a\ntimeout: 10\ndefault_timeout: 60\nstates:\n  a:\n    action: x\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n";
        let mut w = Scripted::new((0..10).map(|_| exit(1, "")).collect());
        w.tick_ms = 3000;
        let end = run(&lp(yaml), &Map::new(), &mut w);
        assert!(!end.success);
        assert!(
            end.summary
                .starts_with("the loop's timeout of 10s ran out in state `a`"),
            "{}",
            end.summary
        );
        let Request::Script { timeout_ms, .. } = &w.asked[0] else {
            panic!()
        };
        assert!(timeout_ms.unwrap() <= 10_000, "{timeout_ms:?}");
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
}
