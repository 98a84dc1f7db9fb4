//! A state's verdict on its action's result, one arm per evaluator.

use crate::eval::{self, Verdict, preview};
use crate::interp::{self};
use crate::spec::{EvalKind, Number, State};

use super::world::{Out, Request, World};
use super::{BUDGET_EXHAUSTED, Run};

fn number(n: &Number, r: &Run, what: &str) -> Result<f64, String> {
    match n {
        Number::Value(v) => Ok(*v),
        Number::Expr(t) => {
            let text = interp::render(t, r)?;
            // Python's `float()`, as little-loops reads a target given as text.
            eval::number_in(&text)
                .ok_or_else(|| format!("evaluate: {what} `{t}` is `{text}`, not a number"))
        }
    }
}

/// The state's verdict on its action's result (`out` is `None` when the
/// state has no action: an exit code of 0 and no output, as little-loops).
pub(super) fn evaluate(
    r: &mut Run,
    state: &State,
    out: Option<&Out>,
    world: &mut dyn World,
) -> Result<Verdict, String> {
    let default_kind;
    let kind = match (&state.evaluate, &state.action) {
        (Some(e), _) => &e.kind,
        (None, Some(crate::spec::Action::Mcp { .. })) => &EvalKind::McpResult,
        (None, Some(a)) if a.is_prompt() => {
            default_kind = EvalKind::LlmStructured {
                prompt: None,
                min_confidence: 0.5,
                uncertain_suffix: false,
            };
            &default_kind
        }
        _ => &EvalKind::ExitCode {
            abstain_on_exit_3: false,
        },
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
        if code == 124 && !matches!(kind, EvalKind::McpResult) {
            return Ok(Verdict {
                verdict: "error".into(),
                detail: "the action timed out".into(),
            });
        }
        let reads_exit_code = matches!(
            kind,
            EvalKind::ExitCode { .. }
                | EvalKind::LlmStructured { .. }
                | EvalKind::DiffStall { .. }
                | EvalKind::HistoryStall { .. }
                | EvalKind::ActionStall { .. }
                | EvalKind::HarborScorer
                | EvalKind::McpResult
        );
        if code != 0 && !reads_exit_code {
            return Ok(Verdict {
                verdict: "error".into(),
                detail: format!("the action exited with code {code}"),
            });
        }
    }
    Ok(match kind {
        EvalKind::ExitCode { abstain_on_exit_3 } => {
            let v = eval::exit_code(code);
            if *abstain_on_exit_3 && code == 3 {
                Verdict {
                    verdict: eval::CANNOT_JUDGE.into(),
                    detail: "exit 3: the check abstained (abstain_on_exit_3)".into(),
                }
            } else {
                v
            }
        }
        EvalKind::OutputContains {
            pattern,
            negate,
            error_patterns,
        } => {
            // little-loops passes the pattern to `re.search` as written:
            // `${...}` in it is regex text, not a reference.
            eval::output_contains(&text, pattern, *negate, error_patterns)
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
            reference,
        } => {
            // little-loops reads the frozen baseline first; one that is set
            // but is no number fails closed.
            let reference = match reference {
                None => None,
                Some(n) => match number(n, r, "reference") {
                    Ok(v) => Some(v),
                    Err(e) => {
                        return Ok(Verdict {
                            verdict: "error".into(),
                            detail: format!("cannot resolve the reference: {e}"),
                        });
                    }
                },
            };
            let target = number(target, r, "target")?;
            let tolerance = number(tolerance, r, "tolerance")?;
            // little-loops compares with `previous:` only; without it there is
            // no earlier reading, so the verdict is `target` or `progress`.
            let previous = previous
                .as_ref()
                .and_then(|t| interp::render(t, r).ok().and_then(|s| eval::number_in(&s)));
            eval::convergence(&text, previous, reference, target, tolerance, *direction)
        }
        EvalKind::Classify { line } => eval::classify(&text, *line),
        EvalKind::HarborScorer => eval::harbor_scorer(&text, code),
        EvalKind::McpResult => crate::mcp::verdict(&text, code),
        EvalKind::DiffStall { scope, max_stall } => {
            let reading = super::diff_stall::read(r.lp.release(), &state.name, scope, world)?;
            match reading.text {
                Ok(text) => {
                    let last = r.stalls.entry(reading.key).or_default();
                    eval::repeat_stall(last, text, *max_stall, reading.what)
                }
                Err(detail) => Verdict {
                    verdict: "error".into(),
                    detail,
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
                // little-loops' judge (`llm_structured`) does not use `agent`.
                profile: None,
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
