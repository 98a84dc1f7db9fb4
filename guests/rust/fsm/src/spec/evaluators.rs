//! `evaluate:`: how a state's result becomes a verdict, one reader per
//! evaluator type.

use crate::problem::Problems;
use crate::yaml::{Node, Value};

use super::fields::{Fields, unknown, value_line};

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
    pub(super) fn parse(s: &str) -> Option<Op> {
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
    /// 0 `yes`, 1 `no`, else `error`; with `abstain_on_exit_3` (little-loops
    /// 1.167, the ll-harness ABSTAIN contract) 3 is `cannot_judge`.
    ExitCode { abstain_on_exit_3: bool },
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
        /// As PyYAML reads it: compared with Python's `==` and `<`.
        target: crate::pyjson::Py,
    },
    Convergence {
        target: Number,
        tolerance: Number,
        direction: Direction,
        previous: Option<String>,
        /// A frozen baseline (little-loops 1.167's ENH-3421): a value worse
        /// than it is `stall` even within the target's tolerance, and one
        /// that cannot be read as a number is `error`, not ignored.
        reference: Option<Number>,
    },
    LlmStructured {
        prompt: Option<String>,
        min_confidence: f64,
        uncertain_suffix: bool,
    },
    /// `git diff --stat` (run through the host, under the user's exec grant)
    /// unchanged `max_stall` times in a row is `no`.
    DiffStall { scope: Vec<String>, max_stall: u32 },
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
    ActionStall { track: Vec<String>, max_repeat: u32 },
    /// One line of the output is the verdict (`first`, `last`, or an index).
    Classify { line: Pick },
    /// A scorer's exit 0 and a number is `yes`; a failing exit `no`.
    HarborScorer,
    /// An MCP tool call's result: `success`, `tool_error`, `not_found` or
    /// `timeout` (see [`crate::mcp`]).
    McpResult,
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
            EvalKind::ExitCode { .. } => "exit_code",
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
            EvalKind::McpResult => "mcp_result",
        }
    }
}

const REFUSED_EVALUATORS: &[(&str, &str)] = &[
    ("comparator", "it writes baseline files; not supported"),
    ("contract", "not supported"),
    // little-loops 1.167 (ENH-3632): a second model consulted through its
    // `advisor` configuration (host, triggers, timeout_seconds).
    (
        "advisor_consult",
        "loopbox has no advisor: judge with `type: llm_structured` and a `prompt`, or run your own consult as the state's action and route on its answer with `type: classify`",
    ),
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
    "mcp_result",
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
    "abstain_on_exit_3",
    "source",
    "previous",
    "reference",
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
    // `advisor_consult`'s (refused); elsewhere little-loops ignores them too.
    "question",
    "verdict_map",
    "signal",
    "timeout",
    "context_from",
];

pub(super) fn read_evaluate(node: &Node, what: &str, p: &mut Problems) -> Option<Evaluate> {
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
        "exit_code" => Some(EvalKind::ExitCode {
            abstain_on_exit_3: f.boolean(p, "abstain_on_exit_3", &w).unwrap_or(false),
        }),
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
        "mcp_result" => Some(EvalKind::McpResult),
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
pub(super) fn read_strings(f: &mut Fields, name: &str, w: &str, p: &mut Problems) -> Vec<String> {
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
pub(super) fn read_count(
    f: &mut Fields,
    name: &str,
    default: u32,
    w: &str,
    p: &mut Problems,
) -> u32 {
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
    let pattern_line = value_line(f.entries, "pattern").unwrap_or(node.line);
    let pattern = f.string(p, "pattern", w);
    if let Some(crate::pyre::Pattern::Unsupported(why)) =
        pattern.as_deref().map(crate::pyre::translate)
    {
        p.at(
            pattern_line,
            format!(
                "{w}`pattern` uses {why}: little-loops matches with Python's `re`, and loopbox cannot match this alike; rewrite the pattern"
            ),
        );
    }
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
    let target = f.take("target").map(crate::pyjson::from_yaml);
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
    // little-loops tests `if config.reference:`: 0 and empty text are unset.
    let reference = f.number(p, "reference", w).filter(|r| match r {
        Number::Value(v) => *v != 0.0,
        Number::Expr(t) => !t.is_empty(),
    });
    Some(EvalKind::Convergence {
        target: target?,
        tolerance,
        direction: direction?,
        previous,
        reference,
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
