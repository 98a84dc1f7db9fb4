//! The loop file's top level: name, initial state, budgets, context, `llm`,
//! the stall detector (`circuit`).

use crate::problem::Problems;
use crate::yaml::{Node, Value};

use super::evaluators::{read_count, read_strings};
use super::fields::{Fields, key_line, leftover, unknown};
use super::known::LOOP_FIELD_SETS;
use super::params::read_params;
use super::states::read_states;
use super::{Circuit, DEFAULT_MAX_EDGE_REVISITS, DEFAULT_MAX_STEPS, Llm, Loop, Target};

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
    let default_idle_timeout_s = f.uint(p, "default_idle_timeout", "");
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
    let release_line = key_line(entries, "little_loops").unwrap_or(root.line);
    let little_loops = f
        .string(p, "little_loops", "")
        .and_then(|text| match super::Release::parse(&text) {
            Some(r) if r.0 == 1 => Some(r),
            _ => {
                p.at(
                    release_line,
                    format!("`little_loops` names the little-loops release the loop follows, like `1.156` or `1.167.0`, not `{text}`"),
                );
                None
            }
        });
    let guards = super::guards::read_guards(&mut f, p, "");
    let maintain = f.boolean(p, "maintain", "").unwrap_or(false);
    let backoff_line = key_line(entries, "backoff").unwrap_or(root.line);
    let backoff_ms = match f.number(p, "backoff", "") {
        None => 0,
        Some(super::Number::Value(v)) if v >= 0.0 && v.is_finite() => (v * 1000.0).round() as u64,
        Some(super::Number::Value(v)) => {
            p.at(backoff_line, format!("backoff must be >= 0, got {v}"));
            0
        }
        Some(super::Number::Expr(t)) => match t.trim().parse::<f64>() {
            Ok(v) if v >= 0.0 && v.is_finite() => (v * 1000.0).round() as u64,
            _ => {
                p.at(
                    backoff_line,
                    format!("`backoff` must be a number of seconds, not `{t}`"),
                );
                0
            }
        },
    };
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
        default_idle_timeout_s,
        llm,
        input_key,
        required_inputs,
        parameters,
        circuit,
        max_edge_revisits,
        capture_reachability_ok,
        guards,
        maintain,
        backoff_ms,
        files: Vec::new(),
        notes: Vec::new(),
        little_loops,
        env: Default::default(),
        asks: false,
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

pub(super) fn read_context(
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
    // little-loops 1.167 (ENH-3527): a capability hint, not a model.
    let refused = [(
        "model_hint",
        "loopbox has no model-hint table: name the model with `model:`",
    )];
    for (key, _) in f.unused() {
        unknown(
            p,
            key,
            "llm: ",
            &refused,
            &["model", "max_tokens", "timeout"],
        );
    }
    llm
}
