//! The fields little-loops knows, by what loopbox does with each: reads it,
//! notes it (the loop runs, the user is told what differs), ignores it, or
//! refuses it with why.

// Fields little-loops knows that loopbox refuses, with why. Anything else
// unknown is reported as unknown, with the fields that are supported.
const REFUSED_LOOP_FIELDS: &[(&str, &str)] = &[
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
    // little-loops 1.167 (FEAT-3309, FEAT-3318): on an authorized terminal it
    // copies `run_dir/<from>` to a durable path. loopbox leaves it in the run
    // directory: the path of the loop does not change.
    (
        "artifact_output",
        "the deliverable is not promoted out of `run_dir`: copy it from there yourself (or in a last shell state) when the run ends",
    ),
    (
        "artifact_mode",
        "it describes `artifact_output`'s promotion, which loopbox does not do; the loop's own states read `context.artifact_mode` as usual",
    ),
];
pub(super) const IGNORED_LOOP_FIELDS: &[&str] =
    &["category", "labels", "visibility", "commands", "version"];
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
    "default_idle_timeout",
    "llm",
    "import",
    "input_key",
    "required_inputs",
    "parameters",
    "circuit",
    "max_edge_revisits",
    "tamper_guard",
    "prepatch_check",
    "maintain",
    "backoff",
    "little_loops",
];

pub(super) const REFUSED_STATE_FIELDS: &[(&str, &str)] = &[
    (
        "tools",
        "the agent's tools are the user's choice: define an `[agents.NAME]` profile in loopbox.toml whose `args` carry `--tools ...` and name it with `agent:`",
    ),
    // little-loops 1.167 (ENH-3235): the credential scopes a shell state's
    // `bash -c` may inherit the variables of.
    (
        "scopes",
        "a loopbox command inherits no host variable but those the user lists in loopbox.toml's `[shell] pass_env`; list them there and drop `scopes`",
    ),
    // little-loops 1.167 (ENH-3527): a capability hint resolved against the
    // backend's `orchestration.model_hints`.
    (
        "model_hint",
        "loopbox has no model-hint table: name the model with `model:`, or an agent profile of loopbox.toml with `agent:`",
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
    "append_to_messages",
    "timeout",
    "idle_timeout",
    "model",
    "agent",
    "max_retries",
    "on_retry_exhausted",
    "loop",
    "with",
    "context_passthrough",
    "sub_loop_markers",
    "worktree",
    "fragment",
    "description",
    "throttle",
    "retryable_exit_codes",
    "type",
    "learning",
    "tamper_guard",
    "prepatch_check",
    "params",
    "on_maintain",
    "on_<verdict>",
];
pub const ACTION_TYPES: &[&str] = &["shell", "prompt", "slash_command", "mcp_tool"];

/// What a loop or a state may hold besides the fields loopbox reads.
pub(super) struct FieldSets {
    /// Read by nobody, said nothing about (labels and the like).
    pub(super) ignored: &'static [&'static str],
    /// little-loops acts on them, loopbox does not: a note each.
    pub(super) noted: &'static [(&'static str, &'static str)],
    /// Needs what the sandbox does not give: a problem each, with why.
    pub(super) refused: &'static [(&'static str, &'static str)],
    /// The fields loopbox reads, for messages.
    pub(super) known: &'static [&'static str],
}

pub(super) const LOOP_FIELD_SETS: FieldSets = FieldSets {
    ignored: IGNORED_LOOP_FIELDS,
    noted: NOTED_LOOP_FIELDS,
    refused: REFUSED_LOOP_FIELDS,
    known: LOOP_FIELDS,
};

pub(super) const STATE_FIELD_SETS: FieldSets = FieldSets {
    ignored: IGNORED_STATE_FIELDS,
    noted: NOTED_STATE_FIELDS,
    refused: REFUSED_STATE_FIELDS,
    known: STATE_FIELDS,
};
