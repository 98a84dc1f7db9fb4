//! The loop as loopbox runs it, read from the YAML tree: every field is
//! checked for its type, every unknown or unsupported field is named with its
//! line, and all problems are collected rather than stopping at the first.
//!
//! This module holds the loop's own shape. Its parts are read by `top` (the
//! loop file's top level), `imports`, `params`, `states`, `actions` (what a
//! state does, sub-loops and fragments), `routes` and `evaluators`; `fields`
//! reads one mapping, and `known` lists the fields little-loops has with what
//! loopbox does with each.

use crate::problem::Problem;

mod actions;
mod evaluators;
mod fields;
mod guards;
mod imports;
mod known;
mod learning;
mod params;
mod routes;
mod states;
mod top;

pub use actions::{Action, FragmentUse, SubLoop};
pub use evaluators::{Direction, EVALUATORS, EvalKind, Evaluate, Number, Op, Pick};
pub use guards::Guards;
pub use imports::{Imported, read_import, read_imports};
pub use known::ACTION_TYPES;
pub use learning::Learning;
pub use params::Param;
pub use routes::{Routes, shorthand_verdict};
pub use states::{DEFAULT_THROTTLE_HARD_MAX, FAILURE_NAMES, State, valid_name};
pub use top::read_loop;

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
    /// `default_idle_timeout`: the states' `idle_timeout` when they give none.
    pub default_idle_timeout_s: Option<u64>,
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
    /// The loop's `tamper_guard` and `prepatch_check`, every state's default.
    pub guards: Guards,
    /// `maintain: true`: a terminal state (or a state nothing routes from)
    /// starts the loop again at its `on_maintain`, else `initial`, until
    /// `max_steps` or the timeout ends it.
    pub maintain: bool,
    /// `backoff`, in milliseconds: the pause after each route between states
    /// (a top-level loop's run parks that long, see [`crate::machine`]).
    pub backoff_ms: u64,
    /// The files the loop was put together from; tagged lines index it.
    pub files: Vec<String>,
    /// What loopbox reads but does not act on; the loop runs anyway.
    pub notes: Vec<Problem>,
    /// `little_loops: "1.156"` (loopbox's own key), or the run's
    /// `--little-loops`: the little-loops release whose behaviour the run
    /// follows where releases differ (see [`Loop::release`]).
    pub little_loops: Option<Release>,
    /// `${env.NAME}`: the variables loopbox.toml passes to commands (`[shell]
    /// path` as `PATH`, and `pass_env`'s), as the host gave them at the start.
    pub env: std::collections::BTreeMap<String, String>,
    /// A `human_approval` state asks a person (at the terminal, or parked
    /// until someone answers from elsewhere) rather than taking little-loops'
    /// headless `timeout` route at once: the host says so at the start.
    pub asks: bool,
}

impl Loop {
    /// The release the run follows: the one named, else the newest loopbox
    /// is measured against.
    pub fn release(&self) -> Release {
        self.little_loops.unwrap_or(Release::NEWEST)
    }
}

/// A little-loops release, `(major, minor)`: `1.156.0` is `Release(1, 156)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32, pub u32);

impl Release {
    /// The newest release loopbox is measured against.
    pub const NEWEST: Release = Release(1, 167);
    /// A loop that cannot decide where to go (no route for the verdict, an
    /// evaluator that fails) ends `no_route`, an action that fails with
    /// nowhere to go `error` (little-loops 1.167.0, ENH-3471); before it,
    /// both ended `error`.
    pub const NO_ROUTE: Release = Release(1, 167);
    /// `diff_stall` fingerprints the content of the files in scope, tracked
    /// and untracked, instead of comparing `git diff --stat`, and keeps its
    /// count per state (little-loops 1.166.0's evaluators).
    pub const DIFF_STALL_FINGERPRINT: Release = Release(1, 166);
    /// `:shell` combines with `:default=` or `?`, and a `:default=` value
    /// holding `{` stops the state (little-loops 1.159.0's
    /// `parse_interpolation_suffixes`); before it, the reverse.
    pub const SUFFIX_CHAINS: Release = Release(1, 159);

    /// `1.156`, `1.156.0`.
    pub fn parse(text: &str) -> Option<Release> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        match parts.next() {
            None => {}
            Some(patch) => {
                patch.parse::<u32>().ok()?;
            }
        }
        parts.next().is_none().then_some(Release(major, minor))
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
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
