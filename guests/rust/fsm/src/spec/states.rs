//! One state: its fields read, then checked against each other.

use crate::problem::Problems;
use crate::yaml::{Key, Node, Value};

use super::actions::{Action, FragmentUse, SubLoop, read_action, read_fragment_use, read_sub_loop};
use super::evaluators::{Evaluate, read_count, read_evaluate};
use super::fields::{Fields, key_line, leftover, unknown, value_line};
use super::known::STATE_FIELD_SETS;
use super::routes::{Routes, read_route_table, read_shorthand_routes};
use super::{CURRENT, Target};

/// Per-state tool-call throttling: the `hard_max`-th consecutive run of a
/// state goes to `on_throttle_hard` (or `on_error`); one more stops the loop.
pub const DEFAULT_THROTTLE_HARD_MAX: u32 = 12;

#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub name: String,
    pub line: u32,
    /// The file the state was written in (the loop or an import).
    pub file: String,
    pub action: Option<Action>,
    /// Where `action` (or `exec`) is written.
    pub action_line: u32,
    pub evaluate: Option<Evaluate>,
    /// `evaluate` was given but has problems (so its verdicts are unknown).
    pub evaluate_invalid: bool,
    pub routes: Routes,
    pub terminal: bool,
    pub failure: bool,
    pub capture: Option<String>,
    /// After the action runs, this text (interpolated) is added to the run's
    /// message log, which `${messages}` reads (little-loops' shared log).
    pub append_to_messages: Option<String>,
    pub timeout_s: Option<u64>,
    /// `idle_timeout`: seconds without a line of output that end a shell
    /// action (0 is off; see [`crate::idle`]).
    pub idle_timeout_s: Option<u64>,
    pub model: Option<String>,
    /// `agent: NAME`: the user's agent profile (`[agents.NAME]` in
    /// loopbox.toml) its prompts go to, as written (little-loops'
    /// `StateConfig.agent`, never interpolated).
    pub agent: Option<String>,
    pub max_retries: Option<u32>,
    pub on_retry_exhausted: Option<Target>,
    pub sub: Option<SubLoop>,
    pub fragment: Option<FragmentUse>,
    /// Consecutive runs before `on_throttle_hard` (little-loops' default 12).
    pub throttle_hard_max: u32,
    /// `type: learning` without a `learning:` block: little-loops' hint that
    /// the state makes many calls, which exempts it from the throttle's stops.
    pub throttle_exempt: bool,
    pub on_throttle_hard: Option<Target>,
    /// Exit codes an `error` may retry with; any other goes to
    /// `on_retry_exhausted` (or `on_error`) at once.
    pub retryable_exit_codes: Option<Vec<i32>>,
    /// Its own `tamper_guard` and `prepatch_check`, over the loop's.
    pub guards: super::Guards,
    /// `type: learning` with a `learning:` block: the state proves its
    /// targets instead of running an action (see [`crate::learning`]).
    pub learning: Option<super::Learning>,
    /// Where a `maintain: true` loop starts again after this state (when it is
    /// terminal, or routes nowhere); the loop's `initial` when absent.
    pub on_maintain: Option<Target>,
}

pub(super) fn read_states(node: &Node, p: &mut Problems) -> Vec<State> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "`states` must be a mapping of state names to states, not {}",
                node.kind()
            ),
        );
        return Vec::new();
    };
    if entries.is_empty() {
        p.at(
            node.line,
            "`states` is empty: a loop needs at least one state",
        );
    }
    entries
        .iter()
        .filter_map(|(key, body)| read_state(key, body, p))
        .collect()
}

fn read_state(key: &Key, body: &Node, p: &mut Problems) -> Option<State> {
    let name = key.name.clone();
    let what = format!("state `{name}`: ");
    if name.is_empty() || name == CURRENT {
        p.at(
            key.line,
            format!("`{name}` cannot name a state (it is empty or `$current`)"),
        );
        return None;
    }
    let Some(entries) = body.as_fields() else {
        p.at(
            body.line,
            format!("{what}must be a mapping of fields, not {}", body.kind()),
        );
        return None;
    };
    let mut f = Fields::new(entries);
    let action_line = value_line(entries, "action")
        .or_else(|| value_line(entries, "exec"))
        .unwrap_or(key.line);
    let action = read_action(&mut f, entries, key, &what, p);
    let evaluate_node = f.take("evaluate");
    let evaluate = evaluate_node.and_then(|n| read_evaluate(n, &what, p));
    let evaluate_invalid = evaluate_node.is_some() && evaluate.is_none();
    let mut routes = Routes {
        next: f.target(p, "next", &what),
        ..Routes::default()
    };
    if let Some(node) = f.take("route") {
        read_route_table(node, &what, &mut routes, p);
        routes.table = true;
    }
    let terminal = f.boolean(p, "terminal", &what).unwrap_or(false);
    let failure_line = key_line(entries, "failure");
    // little-loops: a terminal state named like a failure is one unless it says otherwise.
    let failure = f
        .boolean(p, "failure", &what)
        .unwrap_or(terminal && FAILURE_NAMES.contains(&name.as_str()));
    let throttle_hard_max = f
        .take("throttle")
        .map(|n| read_throttle(n, &what, p))
        .unwrap_or(DEFAULT_THROTTLE_HARD_MAX);
    let on_throttle_hard = f.target(p, "on_throttle_hard", &what);
    let type_line = value_line(entries, "type");
    let throttle_exempt = match f.string(p, "type", &what) {
        None => false,
        // With a `learning:` block the state is a learning state, read below.
        Some(t) if t == "learning" => {
            if !entries.iter().any(|(k, _)| k.name == "learning") {
                p.note(
                    type_line.unwrap_or(key.line),
                    format!("{what}`type: learning` without `learning:` marks a busy state: the throttle does not stop it (as in little-loops)"),
                );
            }
            true
        }
        Some(t) => {
            p.note(
                type_line.unwrap_or(key.line),
                format!("{what}`type: {t}` has no meaning here and is ignored"),
            );
            false
        }
    };
    // little-loops runs the learning handler only with both (`executor.py`
    // `_execute_state`); a block without the type is never read.
    let learning = match (f.take("learning"), throttle_exempt) {
        (Some(n), true) => super::learning::read_learning(n, &what, p),
        (Some(n), false) => {
            p.note(
                n.line,
                format!("{what}`learning` is read only with `type: learning` (as in little-loops); it is ignored"),
            );
            None
        }
        (None, _) => None,
    };
    let retryable_exit_codes = f.take("retryable_exit_codes").and_then(|n| match &n.value {
        Value::Seq(items) => Some(
            items
                .iter()
                .filter_map(|i| match i.value {
                    Value::Int(c) => Some(c as i32),
                    _ => None,
                })
                .collect(),
        ),
        _ => {
            p.at(
                n.line,
                format!("{what}`retryable_exit_codes` must be a list of exit codes"),
            );
            None
        }
    });
    let sub = read_sub_loop(&mut f, entries, &what, p);
    let fragment = read_fragment_use(&mut f, key.line, &what, p);
    if let (None, Some(with)) = (&sub, f.take("with")) {
        p.at(with.line, format!("{what}`with` binds a sub-loop's parameters (`loop:`) or a fragment's (`fragment:`); this state has neither"));
    }
    if sub.is_none() {
        // little-loops reads `worktree:` only where a sub-loop runs (`_run_sub_loop`).
        f.take("worktree");
    }
    if let (None, Some(m)) = (&sub, f.take("sub_loop_markers")) {
        p.at(
            m.line,
            format!("{what}`sub_loop_markers` is for a state that runs a sub-loop (`loop:`); a loop's own markers always count"),
        );
    }
    let capture = f.string(p, "capture", &what);
    let append_line = value_line(entries, "append_to_messages").unwrap_or(key.line);
    let append_to_messages = f.string(p, "append_to_messages", &what);
    // little-loops refuses a fixed text (its structural rule for the field).
    if append_to_messages
        .as_deref()
        .is_some_and(|t| !t.contains("${"))
    {
        p.at(
            append_line,
            format!("{what}`append_to_messages` must contain a `${{...}}` reference, like `${{captured.{name}.output}}` (little-loops refuses fixed text)"),
        );
    }
    if let Some(c) = &capture
        && !valid_name(c)
    {
        p.at(
            key.line,
            format!("{what}`capture: {c}` must be a name of letters, digits, `_` and `-`"),
        );
    }
    let timeout_s = f.positive(p, "timeout", &what);
    let idle_timeout_s = f.uint(p, "idle_timeout", &what);
    let model = f.string(p, "model", &what);
    let agent_line = value_line(entries, "agent").unwrap_or(key.line);
    let agent = f.string(p, "agent", &what).and_then(|a| {
        if profile_name(&a) {
            Some(a)
        } else {
            p.at(
                agent_line,
                format!("{what}`agent: {a}` must name an agent profile: 1 to 64 letters, digits, `_` or `-`, not starting with `-`"),
            );
            None
        }
    });
    // little-loops hands `agent` to prompt actions only (`_run_action`); a
    // learning state's remedy is a slash command, so it applies there too.
    let prompts = action.as_ref().is_some_and(|a| a.is_prompt()) || learning.is_some();
    if agent.is_some() && !prompts {
        p.note(
            agent_line,
            format!("{what}`agent` applies to prompts; ignored (as in little-loops)"),
        );
    }
    let max_retries = f
        .uint(p, "max_retries", &what)
        .map(|n| n.min(u32::MAX as u64) as u32);
    let on_retry_exhausted = f.target(p, "on_retry_exhausted", &what);
    let on_maintain = f.target(p, "on_maintain", &what);

    if routes.table {
        // little-loops: a `route` table decides alone; `on_*` beside it are never read.
        let mut ignored = Routes::default();
        read_shorthand_routes(&mut f, &mut ignored, &what, p);
        if let Some(t) = ignored.targets().next() {
            p.note(t.line, format!("{what}`on_*` routes beside a `route` table are ignored (as in little-loops); put them in the table (`_error`, `_`)"));
        }
    } else {
        read_shorthand_routes(&mut f, &mut routes, &what, p);
    }
    let guards = super::guards::read_guards(&mut f, p, &what);
    for (k, _) in f.unused() {
        leftover(p, k, &what, &STATE_FIELD_SETS);
    }

    if let Some(l) = &learning {
        let acts = action.is_some() || evaluate.is_some();
        super::learning::check_learning(&routes, acts, l.line, &what, p);
    }
    let state = State {
        name,
        line: key.line,
        file: p.file(key.line).to_string(),
        action,
        action_line,
        evaluate,
        evaluate_invalid,
        routes,
        terminal,
        failure,
        capture,
        append_to_messages,
        timeout_s,
        idle_timeout_s,
        model,
        agent,
        max_retries,
        on_retry_exhausted,
        sub,
        fragment,
        throttle_hard_max,
        throttle_exempt,
        on_throttle_hard,
        retryable_exit_codes,
        guards,
        learning,
        on_maintain,
    };
    check_state(&state, key, failure_line, &what, p);
    Some(state)
}

/// `throttle: {normal_max, warn_max, hard_max}`: only `hard_max` changes where the loop goes.
fn read_throttle(node: &Node, what: &str, p: &mut Problems) -> u32 {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!("{what}`throttle` must be a mapping (normal_max, warn_max, hard_max)"),
        );
        return DEFAULT_THROTTLE_HARD_MAX;
    };
    let w = format!("{what}throttle: ");
    let mut f = Fields::new(entries);
    let _ = f.take("normal_max");
    let _ = f.take("warn_max");
    let hard = read_count(&mut f, "hard_max", DEFAULT_THROTTLE_HARD_MAX, &w, p);
    for (key, _) in f.unused() {
        unknown(p, key, &w, &[], &["normal_max", "warn_max", "hard_max"]);
    }
    hard
}

/// Terminal states little-loops counts as failures when `failure` is not given.
pub const FAILURE_NAMES: &[&str] = &["failed", "error", "aborted", "finalize_aborted"];

/// What makes a state's fields contradict each other, or leave it with nothing to do.
fn check_state(state: &State, key: &Key, failure_line: Option<u32>, what: &str, p: &mut Problems) {
    let State {
        action,
        evaluate,
        routes,
        terminal,
        failure,
        max_retries,
        on_retry_exhausted,
        ..
    } = state;
    let (terminal, failure) = (*terminal, *failure);
    if failure && !terminal {
        p.at(
            failure_line.unwrap_or(key.line),
            format!("{what}`failure: true` marks how a terminal state ends; add `terminal: true`"),
        );
    }
    if terminal && (action.is_some() || state.sub.is_some()) {
        p.note(state.action_line, format!("{what}a terminal state's action never runs (as in little-loops): the loop ends on entering it"));
    }
    if state.sub.is_some() && action.is_some() {
        p.at(key.line, format!("{what}give `loop` or `action`, not both"));
    }
    if max_retries.is_some() != on_retry_exhausted.is_some() {
        p.at(
            key.line,
            format!("{what}`max_retries` and `on_retry_exhausted` go together; give both"),
        );
    }
    if terminal && !routes.is_empty() {
        p.note(
            key.line,
            format!("{what}a terminal state ends the loop, so its routes are never used"),
        );
    }
    if let Some(next) = &routes.next {
        if routes
            .by_verdict
            .values()
            .chain(routes.default.iter())
            .next()
            .is_some()
        {
            p.note(next.line, format!("{what}`next` is unconditional, so its verdict routes are never used (only `on_error`, when the action fails)"));
        }
        if evaluate.is_some() {
            p.note(
                next.line,
                format!("{what}`next` is unconditional, so `evaluate` is never used"),
            );
        }
    }
    if !terminal && routes.is_empty() {
        p.at(key.line, format!("{what}has no routes: add `next`, `on_yes`/`on_no`, a `route` table, or `terminal: true`"));
    }
}

/// An agent profile's name, as loopbox.toml's `[agents.NAME]` takes it.
fn profile_name(s: &str) -> bool {
    (1..=64).contains(&s.len()) && !s.starts_with('-') && valid_name(s)
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
