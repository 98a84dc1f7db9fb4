//! The loop as loopbox runs it, read from the YAML tree: every field is
//! checked for its type, every unknown or unsupported field is named with its
//! line, and all problems are collected rather than stopping at the first.

use std::collections::BTreeMap;

use crate::problem::{Problem, Problems};
use crate::yaml::{Key, Node, Value};

/// The default cap on state executions.
pub const DEFAULT_MAX_STEPS: u32 = 50;
/// little-loops' default cap on taking one route (`a -> b`) again.
pub const DEFAULT_MAX_EDGE_REVISITS: u32 = 100;
/// The target that re-runs the state it appears in.
pub const CURRENT: &str = "$current";

#[derive(Debug, Clone, PartialEq)]
pub struct Loop {
    /// The loop's file, as messages name it.
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    pub initial: Target,
    /// In the order they were written (imports after the loop's own states).
    pub states: Vec<State>,
    pub context: serde_json::Map<String, serde_json::Value>,
    pub max_steps: u32,
    pub on_max_steps: Option<Target>,
    /// Whole-loop limit, in seconds.
    pub timeout_s: Option<u64>,
    /// Per-action limit when a state gives none, in seconds.
    pub default_timeout_s: Option<u64>,
    pub llm: Llm,
    /// Where `--input` text that is not a JSON object goes (`input_key`, default `input`).
    pub input_key: String,
    /// Context values a run must be given, non-empty, before it starts.
    pub required_inputs: Vec<String>,
    /// What a parent's `with:` may bind when this loop runs as a sub-loop.
    pub parameters: Vec<Param>,
    /// `circuit.repeated_failure`: the stall detector.
    pub circuit: Option<Circuit>,
    /// How often one route (`a -> b`) may be taken before the loop ends as a cycle.
    pub max_edge_revisits: u32,
    /// `capture_reachability_ok: true`: a `${captured.X}` no state captures
    /// is not refused (little-loops' `_validate_capture_reachability`).
    pub capture_reachability_ok: bool,
    /// The files the loop was put together from; tagged lines index it.
    pub files: Vec<String>,
    /// What loopbox reads but does not act on; the loop runs anyway.
    pub notes: Vec<Problem>,
}

/// little-loops' stall detector: the same (state, exit code, verdict) for
/// `window` evaluated steps in a row (or `recurrent_window` times in all)
/// ends the loop, or goes to `on_repeated_failure`.
#[derive(Debug, Clone, PartialEq)]
pub struct Circuit {
    pub window: u32,
    /// `None`: abort the loop.
    pub on_repeated: Option<Target>,
    pub recurrent_window: Option<u32>,
    /// Files whose change between visits counts as progress (reset the window).
    pub progress_paths: Vec<String>,
    pub exclude_paths: Vec<String>,
}

/// Per-state tool-call throttling: the `hard_max`-th consecutive run of a
/// state goes to `on_throttle_hard` (or `on_error`); one more stops the loop.
pub const DEFAULT_THROTTLE_HARD_MAX: u32 = 12;

/// A declared parameter (a loop's, for sub-loop calls, or a fragment's).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub required: bool,
    pub default: Option<serde_json::Value>,
}

impl Param {
    /// Fill in the defaults of `params` that `values` does not bind; the
    /// first required one still unbound is the error.
    pub fn bind<'a>(
        params: &'a [Param],
        values: &mut serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), &'a Param> {
        for p in params {
            if let (false, Some(d)) = (values.contains_key(&p.name), &p.default) {
                values.insert(p.name.clone(), d.clone());
            }
        }
        match params
            .iter()
            .find(|p| p.required && !values.contains_key(&p.name))
        {
            Some(missing) => Err(missing),
            None => Ok(()),
        }
    }
}

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
    pub line: u32,
}

/// `fragment:` the state was built from, and what its `with:` binds for `${param.*}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentUse {
    pub name: String,
    pub bindings: serde_json::Map<String, serde_json::Value>,
    pub parameters: Vec<Param>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Llm {
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub timeout_s: Option<u64>,
}

/// A state name where the loop goes next, with the line that named it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub state: String,
    pub line: u32,
}

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
    pub timeout_s: Option<u64>,
    pub model: Option<String>,
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
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Shell text, run with `sh -c` (needs the user's scripts grant).
    Shell(String),
    /// A program and its arguments, run without a shell.
    Exec(Vec<String>),
    Prompt(String),
    SlashCommand(String),
}

impl Action {
    pub fn is_prompt(&self) -> bool {
        matches!(self, Action::Prompt(_) | Action::SlashCommand(_))
    }
}

/// Where each verdict leads. `on_success` is stored as `yes`, `on_failure`
/// as `no`; route table keys are kept as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routes {
    pub by_verdict: BTreeMap<String, Target>,
    /// `_` in a route table: any verdict not listed.
    pub default: Option<Target>,
    /// `_error` in a route table, or `on_error` (a table's `error:` key is
    /// in `by_verdict`, a literal verdict).
    pub error: Option<Target>,
    /// `next`: unconditional; the state is not evaluated.
    pub next: Option<Target>,
    /// A `route:` table was given: it alone decides (`on_*` beside it are ignored).
    pub table: bool,
}

impl Routes {
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.by_verdict
            .values()
            .chain(self.default.iter())
            .chain(self.error.iter())
            .chain(self.next.iter())
    }

    pub fn is_empty(&self) -> bool {
        self.targets().next().is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "eq" | "==" => Op::Eq,
            "ne" | "!=" => Op::Ne,
            "lt" | "<" => Op::Lt,
            "le" | "<=" => Op::Le,
            "gt" | ">" => Op::Gt,
            "ge" | ">=" => Op::Ge,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
        }
    }
}

/// A number, or text that interpolates to one (`${context.target}`).
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    Value(f64),
    Expr(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Minimize,
    Maximize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Evaluate {
    pub kind: EvalKind,
    /// What to evaluate instead of the action's output (interpolated).
    pub source: Option<String>,
    pub line: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EvalKind {
    ExitCode,
    OutputContains {
        pattern: String,
        negate: bool,
        error_patterns: Vec<String>,
    },
    OutputNumeric {
        op: Op,
        target: Number,
        /// Read the last `KEY=NUMBER` instead of the whole output.
        key: Option<String>,
    },
    OutputJson {
        path: String,
        op: Op,
        target: serde_json::Value,
    },
    Convergence {
        target: Number,
        tolerance: Number,
        direction: Direction,
        previous: Option<String>,
    },
    LlmStructured {
        prompt: Option<String>,
        min_confidence: f64,
        uncertain_suffix: bool,
    },
    /// `git diff --stat` (run through the host, under the user's exec grant)
    /// unchanged `max_stall` times in a row is `no`.
    DiffStall {
        scope: Vec<String>,
        max_stall: u32,
    },
    /// The numbers in a history file (one per line) stopped improving by more
    /// than `epsilon` for `max_stall` rounds: `no`. `score_stall` wants them
    /// higher, `open_question_stall` lower.
    HistoryStall {
        history_file: Option<String>,
        max_stall: u32,
        epsilon: f64,
        lower_is_better: bool,
    },
    /// The tracked values unchanged `max_repeat` times in a row: `no`.
    ActionStall {
        track: Vec<String>,
        max_repeat: u32,
    },
    /// One line of the output is the verdict (`first`, `last`, or an index).
    Classify {
        line: Pick,
    },
    /// A scorer's exit 0 and a number is `yes`; a failing exit `no`.
    HarborScorer,
}

/// Which output line `classify` reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pick {
    First,
    Last,
    Index(i64),
}

impl EvalKind {
    pub fn name(&self) -> &'static str {
        match self {
            EvalKind::ExitCode => "exit_code",
            EvalKind::OutputContains { .. } => "output_contains",
            EvalKind::OutputNumeric { .. } => "output_numeric",
            EvalKind::OutputJson { .. } => "output_json",
            EvalKind::Convergence { .. } => "convergence",
            EvalKind::LlmStructured { .. } => "llm_structured",
            EvalKind::DiffStall { .. } => "diff_stall",
            EvalKind::HistoryStall {
                lower_is_better: false,
                ..
            } => "score_stall",
            EvalKind::HistoryStall { .. } => "open_question_stall",
            EvalKind::ActionStall { .. } => "action_stall",
            EvalKind::Classify { .. } => "classify",
            EvalKind::HarborScorer => "harbor_scorer",
        }
    }
}

/// The verdict an `on_VERDICT` shorthand routes: `on_success` is `on_yes`
/// and `on_failure` is `on_no`, as little-loops' `StateConfig.from_dict`
/// reads them; any other shorthand, and every `route:` key (`success`,
/// `pass` and `error` included), is the literal verdict (`RouteConfig`).
pub fn shorthand_verdict(v: &str) -> String {
    match v {
        "success" => "yes".into(),
        "failure" => "no".into(),
        other => other.to_string(),
    }
}

// Fields little-loops knows that loopbox refuses, with why. Anything else
// unknown is reported as unknown, with the fields that are supported.
const REFUSED_LOOP_FIELDS: &[(&str, &str)] = &[
    (
        "backoff",
        "a policy cannot sleep between steps; add a state that runs `sleep N` if you need a pause",
    ),
    (
        "maintain",
        "a finished loop ends its run; start it again with `loopbox run`",
    ),
    ("on_max_iterations", "use `max_steps` and `on_max_steps`"),
    (
        "config",
        "ll-config overrides do not apply; limits live under [limits] in loopbox.toml",
    ),
    (
        "targets",
        "little-loops target file specs are not supported",
    ),
    (
        "host_guard",
        "memory and process limits are the host's ([limits] in loopbox.toml)",
    ),
    (
        "tamper_guard",
        "it restores test files from git outside the sandbox; keep tests out of the loop's writable paths instead",
    ),
];
// Fields little-loops acts on that loopbox reads and leaves alone, with what
// the user should know; the loop runs.
const NOTED_LOOP_FIELDS: &[(&str, &str)] = &[
    (
        "scope",
        "little-loops' path locks are not taken; a loopbox run holds a lease on its own store, and two runs on one workspace are the user's choice",
    ),
    (
        "on_handoff",
        "loopbox has no context handoff: each prompt is its own agent turn, so a full context never stops the loop",
    ),
    (
        "artifact_versioning",
        "files the loop writes are not versioned per run",
    ),
    ("singleton", "a second run of the loop is not refused"),
];
const IGNORED_LOOP_FIELDS: &[&str] = &["category", "labels", "visibility", "commands", "version"];
const LOOP_FIELDS: &[&str] = &[
    "name",
    "description",
    "initial",
    "states",
    "context",
    "max_steps",
    "on_max_steps",
    "max_iterations",
    "timeout",
    "default_timeout",
    "llm",
    "import",
    "input_key",
    "required_inputs",
    "parameters",
    "circuit",
    "max_edge_revisits",
];

const REFUSED_STATE_FIELDS: &[(&str, &str)] = &[
    ("params", "MCP tools are not reachable from the sandbox"),
    (
        "worktree",
        "a sub-loop in its own git worktree needs git outside the sandbox",
    ),
    (
        "agent",
        "the agent is the user's choice, set under [agent] in loopbox.toml",
    ),
    (
        "tools",
        "the agent's tools are the user's choice, not the loop's",
    ),
    (
        "append_to_messages",
        "message history is not kept between prompts",
    ),
    ("on_maintain", "`maintain` is not supported"),
    (
        "learning",
        "a learning state reads little-loops' learning-test registry through its Python package, outside the sandbox; write the `/ll:explore-api TARGET` step as a prompt state instead",
    ),
    (
        "prepatch_check",
        "it forks git worktrees outside the sandbox",
    ),
];
const NOTED_STATE_FIELDS: &[(&str, &str)] = &[
    (
        "max_rate_limit_retries",
        "rate-limit retries are the agent runner's; a rate-limited turn is an `error` verdict",
    ),
    (
        "on_rate_limit_exhausted",
        "rate-limit retries are the agent runner's; a rate-limited turn is an `error` verdict",
    ),
    (
        "rate_limit_backoff_base_seconds",
        "rate-limit retries are the agent runner's",
    ),
    (
        "rate_limit_max_wait_seconds",
        "rate-limit retries are the agent runner's",
    ),
    (
        "rate_limit_long_wait_ladder",
        "rate-limit retries are the agent runner's",
    ),
    (
        "pruning_profile",
        "context pruning is the agent's; each prompt is its own turn",
    ),
    ("session_mode", "each prompt is its own agent turn"),
];
const IGNORED_STATE_FIELDS: &[&str] = &["description", "fragment_name"];
const STATE_FIELDS: &[&str] = &[
    "action",
    "exec",
    "action_type",
    "evaluate",
    "route",
    "next",
    "terminal",
    "failure",
    "capture",
    "timeout",
    "model",
    "max_retries",
    "on_retry_exhausted",
    "loop",
    "with",
    "context_passthrough",
    "sub_loop_markers",
    "fragment",
    "description",
    "throttle",
    "retryable_exit_codes",
    "type",
    "on_<verdict>",
];
pub const ACTION_TYPES: &[&str] = &["shell", "prompt", "slash_command"];

const REFUSED_EVALUATORS: &[(&str, &str)] = &[
    ("mcp_result", "MCP tools are not reachable from the sandbox"),
    ("comparator", "it writes baseline files; not supported"),
    ("contract", "not supported"),
];
pub const EVALUATORS: &[&str] = &[
    "exit_code",
    "output_contains",
    "output_numeric",
    "output_json",
    "convergence",
    "llm_structured",
    "diff_stall",
    "score_stall",
    "open_question_stall",
    "action_stall",
    "classify",
    "harbor_scorer",
];
const EVAL_FIELDS: &[&str] = &[
    "type",
    "operator",
    "target",
    "tolerance",
    "pattern",
    "negate",
    "path",
    "prompt",
    "min_confidence",
    "uncertain_suffix",
    "source",
    "previous",
    "direction",
    "error_patterns",
    "key",
    "scope",
    "max_stall",
    "history_file",
    "epsilon",
    "track",
    "max_repeat",
    "line",
];

/// Reads one mapping's fields, remembering which were used.
struct Fields<'a> {
    entries: &'a [(Key, Node)],
    used: Vec<bool>,
}

impl<'a> Fields<'a> {
    fn new(entries: &'a [(Key, Node)]) -> Fields<'a> {
        Fields {
            entries,
            used: vec![false; entries.len()],
        }
    }

    fn take(&mut self, name: &str) -> Option<&'a Node> {
        let i = self.entries.iter().position(|(k, _)| k.name == name)?;
        self.used[i] = true;
        Some(&self.entries[i].1)
    }

    fn unused(&self) -> impl Iterator<Item = &'a (Key, Node)> + '_ {
        self.entries
            .iter()
            .zip(&self.used)
            .filter(|(_, u)| !**u)
            .map(|(e, _)| e)
    }

    fn string(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<String> {
        let node = self.take(name)?;
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            // Numbers and booleans written bare are still text here (`action: true`).
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => {
                p.at(
                    node.line,
                    format!("{what}`{name}` must be text, not {}", node.kind()),
                );
                None
            }
        }
    }

    fn target(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<Target> {
        let node = self.take(name)?;
        match node.as_str() {
            Some(s) => Some(Target {
                state: s.to_string(),
                line: node.line,
            }),
            None => {
                p.at(
                    node.line,
                    format!("{what}`{name}` must name a state, not {}", node.kind()),
                );
                None
            }
        }
    }

    fn uint(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<u64> {
        let node = self.take(name)?;
        match node.value {
            Value::Int(i) if i >= 0 => Some(i as u64),
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be a whole number of 0 or more, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }

    fn positive(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<u64> {
        let line = value_line(self.entries, name)?;
        match self.uint(p, name, what) {
            Some(0) => {
                p.at(line, format!("{what}`{name}` must be greater than 0"));
                None
            }
            other => other,
        }
    }

    fn boolean(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<bool> {
        let node = self.take(name)?;
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be true or false, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }

    fn number(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<Number> {
        let node = self.take(name)?;
        match &node.value {
            Value::Int(i) => Some(Number::Value(*i as f64)),
            Value::Float(f) => Some(Number::Value(*f)),
            // little-loops reads text as a number when the state runs (`"3"`, `${context.n}`).
            Value::Str(s) if s.contains("${") || s.trim().parse::<f64>().is_ok() => {
                Some(Number::Expr(s.clone()))
            }
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be a number or a `${{...}}` reference, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }
}

/// The line of `name`'s value in a mapping's entries, when the key is there.
fn value_line(entries: &[(Key, Node)], name: &str) -> Option<u32> {
    entries
        .iter()
        .find(|(k, _)| k.name == name)
        .map(|(_, v)| v.line)
}

/// The line of the key `name` itself.
fn key_line(entries: &[(Key, Node)], name: &str) -> Option<u32> {
    entries
        .iter()
        .find(|(k, _)| k.name == name)
        .map(|(k, _)| k.line)
}

fn describe(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => format!("`{s}`"),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => node.kind().to_string(),
    }
}

/// What a loop or a state may hold besides the fields loopbox reads.
struct FieldSets {
    /// Read by nobody, said nothing about (labels and the like).
    ignored: &'static [&'static str],
    /// little-loops acts on them, loopbox does not: a note each.
    noted: &'static [(&'static str, &'static str)],
    /// Needs what the sandbox does not give: a problem each, with why.
    refused: &'static [(&'static str, &'static str)],
    /// The fields loopbox reads, for messages.
    known: &'static [&'static str],
}

const LOOP_FIELD_SETS: FieldSets = FieldSets {
    ignored: IGNORED_LOOP_FIELDS,
    noted: NOTED_LOOP_FIELDS,
    refused: REFUSED_LOOP_FIELDS,
    known: LOOP_FIELDS,
};

const STATE_FIELD_SETS: FieldSets = FieldSets {
    ignored: IGNORED_STATE_FIELDS,
    noted: NOTED_STATE_FIELDS,
    refused: REFUSED_STATE_FIELDS,
    known: STATE_FIELDS,
};

/// A field no reader took: ignored, noted, refused with its reason, or
/// unknown, which little-loops ignores (warning at the top level) and so
/// does loopbox, with a note naming the fields it knows.
fn leftover(p: &mut Problems, key: &Key, what: &str, sets: &FieldSets) {
    let name = key.name.as_str();
    if sets.ignored.contains(&name) {
        return;
    }
    if let Some((_, note)) = sets.noted.iter().find(|(n, _)| *n == name) {
        p.note(
            key.line,
            format!("{what}`{name}` is read and not acted on: {note}"),
        );
    } else if sets.refused.iter().any(|(n, _)| *n == name) {
        unknown(p, key, what, sets.refused, sets.known);
    } else {
        p.note(
            key.line,
            format!(
                "{what}unknown field `{name}` is ignored (fields: {})",
                sets.known.join(", ")
            ),
        );
    }
}

fn unknown(p: &mut Problems, key: &Key, what: &str, refused: &[(&str, &str)], supported: &[&str]) {
    match refused.iter().find(|(name, _)| *name == key.name) {
        Some((_, why)) => p.at(
            key.line,
            format!("{what}`{}` is not supported by loopbox: {why}", key.name),
        ),
        None => p.at(
            key.line,
            format!(
                "{what}unknown field `{}` (fields: {})",
                key.name,
                supported.join(", ")
            ),
        ),
    }
}

/// Read a whole loop file. `states` from imports are added by [`crate::load`].
pub fn read_loop(root: &Node, p: &mut Problems) -> Option<Loop> {
    let Some(entries) = root.as_map() else {
        p.at(
            root.line,
            format!(
                "a loop must be a mapping with `name`, `initial` and `states`, not {}",
                root.kind()
            ),
        );
        return None;
    };
    let mut f = Fields::new(entries);
    let name = f.string(p, "name", "");
    let description = f.string(p, "description", "");
    let initial = f.target(p, "initial", "");
    let states = f
        .take("states")
        .map(|n| read_states(n, p))
        .unwrap_or_default();
    let context = read_context(f.take("context"), p);
    let max_steps = f.positive(p, "max_steps", "");
    let max_iterations_line = key_line(entries, "max_iterations");
    let max_iterations = f.positive(p, "max_iterations", "");
    if let (Some(_), Some(line)) = (max_steps, max_iterations_line) {
        p.at(line, "give `max_steps` or `max_iterations`, not both: loopbox reads `max_iterations` as the step cap, and has no separate full-pass cap");
    }
    let on_max_steps = f.target(p, "on_max_steps", "");
    let timeout_s = f.positive(p, "timeout", "");
    let default_timeout_s = f.positive(p, "default_timeout", "");
    let llm = f.take("llm").map(|n| read_llm(n, p)).unwrap_or_default();
    let _ = f.take("import"); // read by the loader, which merges what it names
    let input_key = f
        .string(p, "input_key", "")
        .unwrap_or_else(|| "input".into());
    let required_inputs = f
        .take("required_inputs")
        .map(|n| read_names(n, "required_inputs", p))
        .unwrap_or_default();
    let parameters = f
        .take("parameters")
        .map(|n| read_params(n, "", p))
        .unwrap_or_default();
    let circuit = f.take("circuit").and_then(|n| read_circuit(n, p));
    let max_edge_revisits = f
        .positive(p, "max_edge_revisits", "")
        .map_or(DEFAULT_MAX_EDGE_REVISITS, |n| n.min(u32::MAX as u64) as u32);
    let capture_reachability_ok = f.boolean(p, "capture_reachability_ok", "").unwrap_or(false);
    for (key, _) in f.unused() {
        if !key.name.ends_with("_ok") {
            leftover(p, key, "", &LOOP_FIELD_SETS);
        }
    }
    let name = match name {
        Some(n) if !n.trim().is_empty() => n,
        Some(_) => {
            p.at(root.line, "`name` must not be empty");
            String::new()
        }
        None => {
            p.at(root.line, "the loop has no `name`");
            String::new()
        }
    };
    let initial = initial.unwrap_or_else(|| {
        p.at(root.line, "the loop has no `initial` state");
        Target {
            state: String::new(),
            line: root.line,
        }
    });
    let max_steps = max_steps
        .or(max_iterations)
        .map(|n| n.min(u32::MAX as u64) as u32)
        .unwrap_or(DEFAULT_MAX_STEPS);
    Some(Loop {
        file: p.files[0].clone(),
        name,
        description,
        initial,
        states,
        context,
        max_steps,
        on_max_steps,
        timeout_s,
        default_timeout_s,
        llm,
        input_key,
        required_inputs,
        parameters,
        circuit,
        max_edge_revisits,
        capture_reachability_ok,
        files: Vec::new(),
        notes: Vec::new(),
    })
}

/// `circuit: {repeated_failure: {window, on_repeated_failure, ...}}`.
fn read_circuit(node: &Node, p: &mut Problems) -> Option<Circuit> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            "`circuit` must be a mapping with `repeated_failure`",
        );
        return None;
    };
    let mut f = Fields::new(entries);
    let rf = f.take("repeated_failure");
    for (key, _) in f.unused() {
        unknown(p, key, "circuit: ", &[], &["repeated_failure"]);
    }
    let rf = rf?;
    let Some(entries) = rf.as_map() else {
        p.at(
            rf.line,
            "`circuit.repeated_failure` must be a mapping (window, on_repeated_failure, ...)",
        );
        return None;
    };
    let w = "circuit.repeated_failure: ";
    let mut f = Fields::new(entries);
    let window = read_count(&mut f, "window", 3, w, p);
    let on_repeated = f
        .target(p, "on_repeated_failure", w)
        .filter(|t| t.state != "abort");
    let recurrent_window = f
        .positive(p, "recurrent_window", w)
        .map(|n| n.min(u32::MAX as u64) as u32);
    let progress_paths = read_strings(&mut f, "progress_paths", w, p);
    let exclude_paths = read_strings(&mut f, "exclude_paths", w, p);
    for (key, _) in f.unused() {
        unknown(
            p,
            key,
            w,
            &[],
            &[
                "window",
                "on_repeated_failure",
                "recurrent_window",
                "progress_paths",
                "exclude_paths",
            ],
        );
    }
    Some(Circuit {
        window,
        on_repeated,
        recurrent_window,
        progress_paths,
        exclude_paths,
    })
}

/// A list of names (`required_inputs`).
fn read_names(node: &Node, what: &str, p: &mut Problems) -> Vec<String> {
    let Value::Seq(items) = &node.value else {
        p.at(
            node.line,
            format!("`{what}` must be a list of names, not {}", node.kind()),
        );
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|i| match i.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                p.at(
                    i.line,
                    format!("`{what}` entries must be names, not {}", i.kind()),
                );
                None
            }
        })
        .collect()
}

/// `parameters: {NAME: {type, required, default, description}}`.
fn read_params(node: &Node, what: &str, p: &mut Problems) -> Vec<Param> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "{what}`parameters` must map names to their specs, not {}",
                node.kind()
            ),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in entries {
        let Some(fields) = v.as_fields() else {
            p.at(
                v.line,
                format!(
                    "{what}parameter `{}` must be a mapping (type, required, default)",
                    k.name
                ),
            );
            continue;
        };
        let mut f = Fields::new(fields);
        let required = f.boolean(p, "required", what).unwrap_or(false);
        let default = f.take("default").map(Node::to_json);
        let _ = f.take("type");
        let _ = f.take("description");
        for (key, _) in f.unused() {
            unknown(
                p,
                key,
                &format!("{what}parameter `{}`: ", k.name),
                &[],
                &["type", "required", "default", "description"],
            );
        }
        out.push(Param {
            name: k.name.clone(),
            required,
            default,
        });
    }
    out
}

/// What an imported file contributes.
#[derive(Debug, Default)]
pub struct Imported {
    pub states: Vec<State>,
    pub context: serde_json::Map<String, serde_json::Value>,
}

/// An imported file: only `states`, `context` and `import` (a name is allowed).
pub fn read_import(root: &Node, p: &mut Problems) -> Imported {
    let Some(entries) = root.as_map() else {
        p.at(
            root.line,
            format!(
                "an imported file must be a mapping with `states` and/or `context`, not {}",
                root.kind()
            ),
        );
        return Default::default();
    };
    let mut f = Fields::new(entries);
    let _ = f.string(p, "name", "");
    let _ = f.string(p, "description", "");
    let states = f
        .take("states")
        .map(|n| read_states(n, p))
        .unwrap_or_default();
    let context = read_context(f.take("context"), p);
    let _ = f.take("import"); // read by the loader
    let _ = f.take("fragments"); // collected by the loader
    for (key, _) in f.unused() {
        if IGNORED_LOOP_FIELDS.contains(&key.name.as_str()) {
            continue;
        }
        p.at(key.line, format!("`{}` has no effect in an imported file: only `fragments`, `states`, `context` and `import` are merged", key.name));
    }
    Imported { states, context }
}

pub fn read_imports(node: Option<&Node>, p: &mut Problems) -> Vec<(String, u32)> {
    let Some(node) = node else { return Vec::new() };
    let items: Vec<&Node> = match &node.value {
        Value::Str(_) => vec![node],
        Value::Seq(items) => items.iter().collect(),
        _ => {
            p.at(
                node.line,
                format!(
                    "`import` must be a file name or a list of them, not {}",
                    node.kind()
                ),
            );
            return Vec::new();
        }
    };
    items
        .into_iter()
        .filter_map(|n| match n.as_str() {
            Some(s) => Some((s.to_string(), n.line)),
            None => {
                p.at(
                    n.line,
                    format!("an `import` entry must be a file name, not {}", n.kind()),
                );
                None
            }
        })
        .collect()
}

fn read_context(
    node: Option<&Node>,
    p: &mut Problems,
) -> serde_json::Map<String, serde_json::Value> {
    match node {
        None => serde_json::Map::new(),
        Some(n) if n.value == Value::Null => serde_json::Map::new(),
        Some(n) => match n.to_json() {
            serde_json::Value::Object(m) => m,
            _ => {
                p.at(
                    n.line,
                    format!(
                        "`context` must be a mapping of names to values, not {}",
                        n.kind()
                    ),
                );
                serde_json::Map::new()
            }
        },
    }
}

fn read_llm(node: &Node, p: &mut Problems) -> Llm {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "`llm` must be a mapping (model, max_tokens, timeout), not {}",
                node.kind()
            ),
        );
        return Llm::default();
    };
    let mut f = Fields::new(entries);
    let llm = Llm {
        model: f.string(p, "model", "llm: "),
        max_tokens: f.positive(p, "max_tokens", "llm: "),
        timeout_s: f.positive(p, "timeout", "llm: "),
    };
    let _ = f.boolean(p, "enabled", "llm: ").map(|enabled| {
        if !enabled {
            p.at(node.line, "llm: `enabled: false` is not supported: states that need an LLM verdict would have none; give them `evaluate` or `next`");
        }
    });
    for (key, _) in f.unused() {
        unknown(p, key, "llm: ", &[], &["model", "max_tokens", "timeout"]);
    }
    llm
}

fn read_states(node: &Node, p: &mut Problems) -> Vec<State> {
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
        // With a `learning:` block the state is a learning state, refused below.
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
    if let (None, Some(m)) = (&sub, f.take("sub_loop_markers")) {
        p.at(
            m.line,
            format!("{what}`sub_loop_markers` is for a state that runs a sub-loop (`loop:`); a loop's own markers always count"),
        );
    }
    let capture = f.string(p, "capture", &what);
    if let Some(c) = &capture
        && !valid_name(c)
    {
        p.at(
            key.line,
            format!("{what}`capture: {c}` must be a name of letters, digits, `_` and `-`"),
        );
    }
    let timeout_s = f.positive(p, "timeout", &what);
    let model = f.string(p, "model", &what);
    let max_retries = f
        .uint(p, "max_retries", &what)
        .map(|n| n.min(u32::MAX as u64) as u32);
    let on_retry_exhausted = f.target(p, "on_retry_exhausted", &what);

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
    for (k, _) in f.unused() {
        leftover(p, k, &what, &STATE_FIELD_SETS);
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
        timeout_s,
        model,
        max_retries,
        on_retry_exhausted,
        sub,
        fragment,
        throttle_hard_max,
        throttle_exempt,
        on_throttle_hard,
        retryable_exit_codes,
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

/// `loop:` with `with:` / `context_passthrough:`.
fn read_sub_loop(
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
    Some(SubLoop {
        name,
        with,
        passthrough,
        markers,
        line,
    })
}

/// What the loader left of a `fragment:` reference (see [`crate::resolve`]).
fn read_fragment_use(
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
fn read_action(
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
            Some("mcp_tool") => {
                p.at(action_type_line, format!("{what}`action_type: mcp_tool` is not supported by loopbox: MCP tools are not reachable from the sandbox"));
                None
            }
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

/// Shorthand routes: on_yes / on_success, on_no / on_failure, on_error, on_<verdict>.
fn read_shorthand_routes(f: &mut Fields, routes: &mut Routes, what: &str, p: &mut Problems) {
    let shorthand: Vec<Key> = f
        .unused()
        .filter(|(k, _)| k.name.starts_with("on_"))
        .map(|(k, _)| k.clone())
        .collect();
    for k in shorthand {
        if REFUSED_STATE_FIELDS.iter().any(|(n, _)| *n == k.name) {
            continue;
        }
        let Some(target) = f.target(p, &k.name, what) else {
            continue;
        };
        let verdict = shorthand_verdict(&k.name[3..]);
        if verdict.is_empty() {
            p.at(k.line, format!("{what}`on_` names no verdict"));
            continue;
        }
        if verdict == "error" {
            put_route(&mut routes.error, target, what, "on_error", p);
        } else if let Some(old) = routes.by_verdict.get(&verdict) {
            p.at(
                k.line,
                format!(
                    "{what}verdict `{verdict}` is routed twice (also on line {})",
                    old.line
                ),
            );
        } else {
            routes.by_verdict.insert(verdict, target);
        }
    }
}

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

fn put_route(slot: &mut Option<Target>, target: Target, what: &str, name: &str, p: &mut Problems) {
    match slot {
        Some(old) => p.at(
            target.line,
            format!("{what}`{name}` is given twice (also on line {})", old.line),
        ),
        None => *slot = Some(target),
    }
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
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

fn read_route_table(node: &Node, what: &str, routes: &mut Routes, p: &mut Problems) {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "{what}`route` must map verdicts to states, not {}",
                node.kind()
            ),
        );
        return;
    };
    for (key, value) in entries {
        let Some(state) = value.as_str() else {
            p.at(
                value.line,
                format!(
                    "{what}route `{}` must name a state, not {}",
                    key.name,
                    value.kind()
                ),
            );
            continue;
        };
        let target = Target {
            state: state.to_string(),
            line: value.line,
        };
        match key.name.as_str() {
            "_" => put_route(&mut routes.default, target, what, "_", p),
            "_error" => put_route(&mut routes.error, target, what, "_error", p),
            k if k.starts_with('_') => p.at(key.line, format!("{what}route key `{k}`: only `_` (any other verdict) and `_error` start with `_`")),
            k => {
                // Literal: `error`, `success` and `pass` are verdicts of their own.
                let verdict = k.to_string();
                if let Some(old) = routes.by_verdict.get(&verdict) {
                    p.at(key.line, format!("{what}verdict `{verdict}` is routed twice (also on line {})", old.line));
                } else {
                    routes.by_verdict.insert(verdict, target);
                }
            }
        }
    }
}

fn read_evaluate(node: &Node, what: &str, p: &mut Problems) -> Option<Evaluate> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "{what}`evaluate` must be a mapping with a `type`, not {}",
                node.kind()
            ),
        );
        return None;
    };
    let w = format!("{what}evaluate: ");
    let mut f = Fields::new(entries);
    let type_line = value_line(entries, "type").unwrap_or(node.line);
    let Some(ty) = f.string(p, "type", &w) else {
        p.at(
            node.line,
            format!("{w}`type` is missing (one of {})", EVALUATORS.join(", ")),
        );
        return None;
    };
    let source = f.string(p, "source", &w);
    let kind = match ty.as_str() {
        "exit_code" => Some(EvalKind::ExitCode),
        "output_contains" => read_output_contains(&mut f, node, &w, p),
        "output_numeric" => read_output_numeric(&mut f, node, &w, p),
        "output_json" => read_output_json(&mut f, node, &w, p),
        "convergence" => read_convergence(&mut f, node, &w, p),
        "llm_structured" => read_llm_structured(&mut f, node, &w, p),
        "diff_stall" => Some(EvalKind::DiffStall {
            scope: read_strings(&mut f, "scope", &w, p),
            max_stall: read_count(&mut f, "max_stall", 1, &w, p),
        }),
        "score_stall" | "open_question_stall" => Some(EvalKind::HistoryStall {
            history_file: f.string(p, "history_file", &w),
            max_stall: read_count(&mut f, "max_stall", 1, &w, p),
            epsilon: match f.number(p, "epsilon", &w) {
                Some(Number::Value(e)) => e,
                _ => 0.5,
            },
            lower_is_better: ty == "open_question_stall",
        }),
        "action_stall" => Some(EvalKind::ActionStall {
            track: {
                let t = read_strings(&mut f, "track", &w, p);
                if t.is_empty() {
                    vec!["action".to_string()]
                } else {
                    t
                }
            },
            max_repeat: read_count(&mut f, "max_repeat", 2, &w, p),
        }),
        "harbor_scorer" => Some(EvalKind::HarborScorer),
        "classify" => Some(EvalKind::Classify {
            line: match f.take("line").map(|n| &n.value) {
                None => Pick::Last,
                Some(Value::Int(i)) => Pick::Index(*i),
                Some(Value::Str(s)) if s == "first" => Pick::First,
                Some(_) => Pick::Last,
            },
        }),
        other => {
            match REFUSED_EVALUATORS.iter().find(|(n, _)| *n == other) {
                Some((_, why)) => p.at(
                    type_line,
                    format!("{w}evaluator `{other}` is not supported by loopbox: {why}"),
                ),
                None => p.at(
                    type_line,
                    format!(
                        "{w}unknown evaluator type `{other}` (types: {})",
                        EVALUATORS.join(", ")
                    ),
                ),
            }
            return None;
        }
    };
    for (key, _) in f.unused() {
        if EVAL_FIELDS.contains(&key.name.as_str()) {
            p.note(
                key.line,
                format!("{w}`{}` has no meaning for `{ty}` and is ignored", key.name),
            );
        } else {
            unknown(p, key, &w, &[], EVAL_FIELDS);
        }
    }
    Some(Evaluate {
        kind: kind?,
        source,
        line: node.line,
    })
}

/// A list of text values (`scope`, `track`); one value alone is a list of one.
fn read_strings(f: &mut Fields, name: &str, w: &str, p: &mut Problems) -> Vec<String> {
    let Some(node) = f.take(name) else {
        return Vec::new();
    };
    match &node.value {
        Value::Str(s) => vec![s.clone()],
        Value::Seq(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => {
            p.at(node.line, format!("{w}`{name}` must be a list of text"));
            Vec::new()
        }
    }
}

/// A count of 1 or more, `default` when absent.
fn read_count(f: &mut Fields, name: &str, default: u32, w: &str, p: &mut Problems) -> u32 {
    f.positive(p, name, w)
        .map(|n| n.min(u32::MAX as u64) as u32)
        .unwrap_or(default)
}

/// `output_contains`: a pattern in the output (or not), and patterns that mean an error.
fn read_output_contains(
    f: &mut Fields,
    node: &Node,
    w: &str,
    p: &mut Problems,
) -> Option<EvalKind> {
    let pattern = f.string(p, "pattern", w);
    let negate = f.boolean(p, "negate", w).unwrap_or(false);
    let error_patterns = match f.take("error_patterns") {
        None => Vec::new(),
        Some(n) => match &n.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect(),
            _ => {
                p.at(
                    n.line,
                    format!("{w}`error_patterns` must be a list of patterns"),
                );
                Vec::new()
            }
        },
    };
    match pattern {
        Some(pattern) => Some(EvalKind::OutputContains {
            pattern,
            negate,
            error_patterns,
        }),
        None => {
            p.at(node.line, format!("{w}`output_contains` needs a `pattern`"));
            None
        }
    }
}

/// `output_numeric`: the output as a number, compared with a target.
fn read_output_numeric(f: &mut Fields, node: &Node, w: &str, p: &mut Problems) -> Option<EvalKind> {
    let op = read_operator(f, node, w, p);
    let target = f.number(p, "target", w);
    if target.is_none() && !f.entries.iter().any(|(k, _)| k.name == "target") {
        p.at(node.line, format!("{w}`output_numeric` needs a `target`"));
    }
    let key = f.string(p, "key", w);
    Some(EvalKind::OutputNumeric {
        op: op?,
        target: target?,
        key,
    })
}

/// `output_json`: a value at a path of the output's JSON, compared with a target.
fn read_output_json(f: &mut Fields, node: &Node, w: &str, p: &mut Problems) -> Option<EvalKind> {
    let path = f.string(p, "path", w);
    let op = read_operator(f, node, w, p);
    let target = f.take("target").map(Node::to_json);
    if path.is_none() {
        p.at(
            node.line,
            format!("{w}`output_json` needs a `path` (like `.summary.failed`)"),
        );
    }
    if target.is_none() {
        p.at(node.line, format!("{w}`output_json` needs a `target`"));
    }
    Some(EvalKind::OutputJson {
        path: path?,
        op: op?,
        target: target?,
    })
}

/// `convergence`: a metric moving toward a target, within a tolerance.
fn read_convergence(f: &mut Fields, node: &Node, w: &str, p: &mut Problems) -> Option<EvalKind> {
    let target = f.number(p, "target", w);
    if target.is_none() && !f.entries.iter().any(|(k, _)| k.name == "target") {
        p.at(node.line, format!("{w}`convergence` needs a `target`"));
    }
    let tolerance = f.number(p, "tolerance", w).unwrap_or(Number::Value(0.0));
    let direction_line = value_line(f.entries, "direction").unwrap_or(node.line);
    let direction = match f.string(p, "direction", w).as_deref() {
        None | Some("minimize") => Some(Direction::Minimize),
        Some("maximize") => Some(Direction::Maximize),
        Some(other) => {
            p.at(
                direction_line,
                format!("{w}`direction` must be `minimize` or `maximize`, not `{other}`"),
            );
            None
        }
    };
    let previous = f.string(p, "previous", w);
    Some(EvalKind::Convergence {
        target: target?,
        tolerance,
        direction: direction?,
        previous,
    })
}

/// `llm_structured`: the agent's verdict on the output, with its confidence.
fn read_llm_structured(f: &mut Fields, node: &Node, w: &str, p: &mut Problems) -> Option<EvalKind> {
    let prompt = f.string(p, "prompt", w);
    let mc_line = value_line(f.entries, "min_confidence").unwrap_or(node.line);
    let min_confidence = match f.number(p, "min_confidence", w) {
        None => 0.5,
        Some(Number::Value(v)) if (0.0..=1.0).contains(&v) => v,
        Some(_) => {
            p.at(
                mc_line,
                format!("{w}`min_confidence` must be a number from 0 to 1"),
            );
            0.5
        }
    };
    let uncertain_suffix = f.boolean(p, "uncertain_suffix", w).unwrap_or(false);
    if let Some(n) = f.take("schema") {
        p.at(n.line, format!("{w}`schema` is not supported by loopbox: the verdict reply is always {{verdict, confidence, reason}}"));
    }
    Some(EvalKind::LlmStructured {
        prompt,
        min_confidence,
        uncertain_suffix,
    })
}

/// `operator`: how a value compares with its target (`eq` when absent).
fn read_operator(f: &mut Fields, node: &Node, w: &str, p: &mut Problems) -> Option<Op> {
    let line = value_line(f.entries, "operator").unwrap_or(node.line);
    match f.string(p, "operator", w) {
        None => Some(Op::Eq),
        Some(s) => Op::parse(&s).or_else(|| {
            p.at(
                line,
                format!("{w}`operator` must be one of eq, ne, lt, le, gt, ge, not `{s}`"),
            );
            None
        }),
    }
}
