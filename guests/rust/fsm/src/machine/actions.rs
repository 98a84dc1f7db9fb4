//! A state's action: built into a host request with its text interpolated,
//! run, and read for stop markers and `capture`.

use serde_json::{Map, Value, json};

use crate::interp::{self};
use crate::markers::{self, Signal};
use crate::spec::{Action, Param, State};

use super::world::{Level, Out, Request, World};
use super::{End, Finish, Machine, Run, failed};

/// What running a state's action gave.
pub(super) enum Acted {
    /// No action.
    Nothing,
    Ran(Out),
    /// The host refused it (or the request could not be built).
    Refused(String),
}

impl Acted {
    /// What the action produced, when it ran.
    pub(super) fn out(&self) -> Option<&Out> {
        match self {
            Acted::Ran(out) => Some(out),
            _ => None,
        }
    }
}

impl<'a> Machine<'a> {
    /// A fragment state's `${param.*}`: its `with:` values, interpolated, and
    /// the defaults of parameters it does not bind.
    pub(super) fn params(&self, state: &State) -> Result<Map<String, Value>, String> {
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
    pub(super) fn act(&self, state: &State, world: &mut dyn World) -> Acted {
        let Some(action) = &state.action else {
            return Acted::Nothing;
        };
        if let Action::Mcp { tool, params } = action {
            return match mcp_call(&self.r, state, tool, params, world) {
                Ok(out) => Acted::Ran(out),
                Err(e) => Acted::Refused(e),
            };
        }
        match request(&self.r, state, action) {
            Err(e) => Acted::Refused(e),
            Ok(req) => match world.act(req) {
                Ok(mut out) => {
                    if idle_secs(&self.r, state, action).is_some() {
                        crate::idle::read(&mut out);
                    }
                    Acted::Ran(out)
                }
                Err(e) => Acted::Refused(e),
            },
        }
    }

    /// Read what the action did: its stop markers, and its `capture`.
    pub(super) fn observe(
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
            self.capture(name, out, world);
        }
        // little-loops appends after the capture, reading this state's.
        if let Some(text) = &state.append_to_messages {
            let message = interp::render(text, &self.r).map_err(|e| {
                failed(
                    End::Error,
                    format!("state `{}`: append_to_messages: {e}", state.name),
                )
            })?;
            self.r.messages.push(message);
        }
        Ok(())
    }

    fn capture(&mut self, name: &str, out: &Out, world: &mut dyn World) {
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
            name.to_string(),
            json!({
                "output": output, "stderr": out.stderr, "exit_code": out.code(),
                "duration_ms": out.duration_ms, "result": markers::action_result(&out.stdout),
            }),
        );
    }
}

/// What `${prev.*}` reads after a state ran.
pub(super) fn prev_record(state: &State, acted: &Acted) -> Value {
    match acted {
        // `timeout_kind`: "wall" when the action ran out of time, "idle" when
        // `idle_timeout` ended it, else None (little-loops' `executor.py`,
        // `prev_result`).
        Acted::Ran(out) => json!({
            "output": out.stdout, "exit_code": out.code(), "state": state.name,
            "stderr": out.stderr, "duration_ms": out.duration_ms,
            "result": markers::action_result(&out.stdout),
            "timeout_kind": if out.timed_out {
                json!("wall")
            } else if out.idle {
                json!("idle")
            } else {
                Value::Null
            },
        }),
        _ => json!({"output": "", "exit_code": 0, "state": state.name, "timeout_kind": null}),
    }
}

/// Interpolate every string in a `with:` mapping.
pub(super) fn render_json_map(
    m: &Map<String, Value>,
    r: &Run,
) -> Result<Map<String, Value>, String> {
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

/// An `mcp_tool` state's call: `server/tool` and `params` interpolated, with
/// little-loops' time limit for it (the state's `timeout`, else the loop's
/// `default_timeout`, else 30 s).
fn mcp_call(
    r: &Run,
    state: &State,
    tool: &str,
    params: &Map<String, Value>,
    world: &mut dyn World,
) -> Result<Out, String> {
    let spec = interp::render(tool, r).map_err(|e| format!("action: {e}"))?;
    let args = render_json_map(params, r).map_err(|e| format!("params: {e}"))?;
    let timeout_ms = state.timeout_s.or(r.lp.default_timeout_s).unwrap_or(30) * 1000;
    crate::mcp::call(world, &spec, &Value::Object(args), timeout_ms)
}

/// The seconds of silence that end a shell action: the state's
/// `idle_timeout`, else the loop's `default_idle_timeout` (0 is off, as
/// little-loops' `state.idle_timeout or fsm.default_idle_timeout or 0`).
/// Prompts and `exec:` states are not watched (`validate` notes it).
fn idle_secs(r: &Run, state: &State, action: &Action) -> Option<u64> {
    if !matches!(action, Action::Shell(_)) {
        return None;
    }
    [state.idle_timeout_s, r.lp.default_idle_timeout_s]
        .into_iter()
        .flatten()
        .find(|s| *s > 0)
}

/// The state's action as a host request, its text interpolated.
pub(super) fn request(r: &Run, state: &State, action: &Action) -> Result<Request, String> {
    let render = |t: &str| interp::render(t, r).map_err(|e| format!("action: {e}"));
    // The action keeps its own limit; the loop's `timeout` is checked between
    // states (little-loops' `FSMExecutor._run_action`, `run`).
    let timeout_ms = state.timeout_s.or(r.lp.default_timeout_s).map(|s| s * 1000);
    Ok(match action {
        Action::Shell(text) => Request::Script {
            source: match idle_secs(r, state, action) {
                Some(secs) => crate::idle::wrap(&render(text)?, secs),
                None => render(text)?,
            },
            timeout_ms,
        },
        Action::Exec(argv) => Request::Exec {
            argv: argv.iter().map(|a| render(a)).collect::<Result<_, _>>()?,
            timeout_ms,
            stdin: None,
        },
        // `agent:` is read as written, never interpolated; a slash command
        // (the learning remedy included) keeps it, as little-loops'
        // `FSMExecutor._run_action` passes `agent=state.agent` to both.
        Action::Prompt(text) => Request::Prompt {
            text: render(text)?,
            slash: false,
            model: state.model.clone(),
            timeout_ms,
            profile: state.agent.clone(),
        },
        Action::SlashCommand(text) => Request::Prompt {
            text: render(text)?,
            slash: true,
            model: state.model.clone(),
            timeout_ms,
            profile: state.agent.clone(),
        },
        Action::Mcp { .. } => return Err("an MCP tool call is not a host request".into()),
        Action::HumanApproval(_) => {
            return Err("a human approval is not a host request".into());
        }
    })
}
