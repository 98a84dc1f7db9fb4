//! What a state does: shell or `exec`, a prompt or slash command, another
//! loop (`loop:`), and the fragment it was built from.

use crate::problem::Problems;
use crate::yaml::{Key, Node, Value};

use super::fields::{Fields, value_line};
use super::known::ACTION_TYPES;
use super::params::{Param, read_params};

/// `loop:`: run another loop as this state's action.
#[derive(Debug, Clone, PartialEq)]
pub struct SubLoop {
    /// The loop's name or file, interpolated when the state runs.
    pub name: String,
    /// `with:` values, interpolated, laid over the child's `context`.
    pub with: Option<serde_json::Map<String, serde_json::Value>>,
    /// `context_passthrough: true`: the child sees this loop's context and captures.
    pub passthrough: bool,
    /// `sub_loop_markers: true` (loopbox's own key): `LOOP_STOP:` and
    /// `FATAL_ERROR:` in the child's output end the child, as they end a
    /// top-level loop. little-loops ignores them in a child (its child
    /// executors get no signal detector), and so does loopbox by default.
    pub markers: bool,
    /// `worktree:` (interpolated; empty after that is no worktree): the branch the
    /// child runs in, checked out by the host in a scratch git worktree.
    pub worktree: Option<String>,
    pub line: u32,
}

/// `fragment:` the state was built from, and what its `with:` binds for `${param.*}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentUse {
    pub name: String,
    pub bindings: serde_json::Map<String, serde_json::Value>,
    pub parameters: Vec<Param>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Shell text, run with `sh -c` (needs the user's scripts grant).
    Shell(String),
    /// A program and its arguments, run without a shell.
    Exec(Vec<String>),
    Prompt(String),
    SlashCommand(String),
    /// `action_type: mcp_tool`: `server/tool` (interpolated), with `params`,
    /// the tool's arguments (their strings interpolated).
    Mcp {
        tool: String,
        params: serde_json::Map<String, serde_json::Value>,
    },
    /// `action_type: human_approval`: the question for a person (see
    /// [`crate::machine`]'s approval module: nobody is asked yet).
    HumanApproval(String),
}

impl Action {
    pub fn is_prompt(&self) -> bool {
        matches!(self, Action::Prompt(_) | Action::SlashCommand(_))
    }
}

/// `loop:` with `with:` / `context_passthrough:`.
pub(super) fn read_sub_loop(
    f: &mut Fields,
    entries: &[(Key, Node)],
    what: &str,
    p: &mut Problems,
) -> Option<SubLoop> {
    let line = value_line(entries, "loop")?;
    let name = f.string(p, "loop", what)?;
    let with = match f.take("with") {
        None => None,
        Some(n) => match n.to_json() {
            serde_json::Value::Object(m) => Some(m),
            serde_json::Value::Null => Some(serde_json::Map::new()),
            _ => {
                p.at(
                    n.line,
                    format!("{what}`with` must map the sub-loop's parameters to values"),
                );
                None
            }
        },
    };
    let passthrough = f.boolean(p, "context_passthrough", what).unwrap_or(false);
    let markers = f.boolean(p, "sub_loop_markers", what).unwrap_or(false);
    let worktree = f.string(p, "worktree", what);
    Some(SubLoop {
        name,
        with,
        passthrough,
        markers,
        worktree,
        line,
    })
}

/// What the loader left of a `fragment:` reference (see [`crate::resolve`]).
pub(super) fn read_fragment_use(
    f: &mut Fields,
    line: u32,
    what: &str,
    p: &mut Problems,
) -> Option<FragmentUse> {
    let bindings = f.take("fragment_bindings")?;
    let name = f
        .take("fragment_name")
        .and_then(|n| n.as_str().map(str::to_string))
        .unwrap_or_default();
    let bindings = match bindings.to_json() {
        serde_json::Value::Object(m) => m,
        serde_json::Value::Null => serde_json::Map::new(),
        _ => {
            p.at(
                bindings.line,
                format!("{what}`with` must map the fragment's parameters to values"),
            );
            serde_json::Map::new()
        }
    };
    let parameters = f
        .take("fragment_parameters")
        .map(|n| read_params(n, &format!("{what}fragment `{name}`: "), p))
        .unwrap_or_default();
    for param in &parameters {
        if param.required && !bindings.contains_key(&param.name) {
            p.at(
                line,
                format!(
                    "{what}fragment `{name}` needs parameter `{}`: bind it under `with:`",
                    param.name
                ),
            );
        }
    }
    Some(FragmentUse {
        name,
        bindings,
        parameters,
    })
}

/// `action` (with `action_type`) or `exec`: what the state does, if anything.
pub(super) fn read_action(
    f: &mut Fields,
    entries: &[(Key, Node)],
    key: &Key,
    what: &str,
    p: &mut Problems,
) -> Option<Action> {
    let action_text = f.string(p, "action", what);
    let exec = f.take("exec").and_then(|n| read_exec(n, what, p));
    let action_type_line = value_line(entries, "action_type").unwrap_or(key.line);
    let action_type = f.string(p, "action_type", what);
    let params = f.take("params").map(|n| (n.line, n.to_json()));
    let params = match params {
        None => serde_json::Map::new(),
        // little-loops: `params` only with `action_type: mcp_tool` (structural_rules.py).
        Some((line, _)) if action_type.as_deref() != Some("mcp_tool") => {
            p.at(
                line,
                format!("{what}'params' field is only valid when action_type is 'mcp_tool'"),
            );
            serde_json::Map::new()
        }
        Some((_, serde_json::Value::Object(m))) => m,
        Some((_, serde_json::Value::Null)) => serde_json::Map::new(),
        Some((line, _)) => {
            p.at(
                line,
                format!("{what}`params` must map the tool's argument names to values"),
            );
            serde_json::Map::new()
        }
    };
    match (action_text, exec) {
        (Some(_), Some(_)) => {
            p.at(key.line, format!("{what}has both `action` and `exec`; keep one (`exec` runs a program without a shell)"));
            None
        }
        (None, Some(argv)) => {
            if let Some(t) = &action_type
                && t != "shell"
            {
                p.at(action_type_line, format!("{what}`exec` runs a program, so `action_type` can only be `shell`, not `{t}`"));
            }
            Some(Action::Exec(argv))
        }
        (Some(text), None) => match action_type.as_deref() {
            Some("shell") => Some(Action::Shell(text)),
            Some("prompt") => Some(Action::Prompt(text)),
            Some("slash_command") => Some(Action::SlashCommand(text)),
            Some("mcp_tool") => Some(Action::Mcp { tool: text, params }),
            // little-loops 1.167 (FEAT-1794); `check` notes that nobody is asked.
            Some("human_approval") => Some(Action::HumanApproval(text)),
            Some(other) => {
                p.at(
                    action_type_line,
                    format!(
                        "{what}`action_type` must be one of {}, not `{other}`",
                        ACTION_TYPES.join(", ")
                    ),
                );
                None
            }
            // The little-loops heuristic: a leading `/` is a slash command.
            None if text.trim_start().starts_with('/') => Some(Action::SlashCommand(text)),
            None => Some(Action::Shell(text)),
        },
        (None, None) => {
            if let Some(t) = action_type {
                p.at(
                    action_type_line,
                    format!("{what}`action_type: {t}` without an `action` does nothing"),
                );
            }
            None
        }
    }
}

fn read_exec(node: &Node, what: &str, p: &mut Problems) -> Option<Vec<String>> {
    let Value::Seq(items) = &node.value else {
        p.at(
            node.line,
            format!("{what}`exec` must be a list: the program, then its arguments"),
        );
        return None;
    };
    if items.is_empty() {
        p.at(
            node.line,
            format!("{what}`exec` is empty: give the program to run"),
        );
        return None;
    }
    let mut argv = Vec::new();
    for item in items {
        match &item.value {
            Value::Str(s) => argv.push(s.clone()),
            Value::Int(i) => argv.push(i.to_string()),
            Value::BigInt(d) => argv.push(d.clone()),
            Value::Float(f) => argv.push(f.to_string()),
            Value::Bool(b) => argv.push(b.to_string()),
            _ => {
                p.at(
                    item.line,
                    format!(
                        "{what}each `exec` argument must be text, not {}",
                        item.kind()
                    ),
                );
                return None;
            }
        }
    }
    Some(argv)
}
