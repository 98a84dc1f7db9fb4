//! `loopbox test`: a policy tested as a whole against scenario files. The
//! real component runs on the real host (its limits, its state, its decisions
//! checked as a run checks them), with the world replaced by the scenario:
//! every host call of an event is answered by [`world`] through the event's
//! journal, so no process is spawned, no agent called, and no workspace file
//! read but those the scenario gives. Each scenario runs in a throwaway
//! workspace and store. The same scenario tests a Rust, Python or JavaScript
//! build of one policy, and YAML loops (`builtin:fsm`) alike.
//!
//! [`format`] reads the files, [`world`] answers the calls, [`check`] compares
//! and writes the first difference, [`export`] turns a journaled run back into
//! a scenario.

pub mod check;
pub mod export;
pub mod format;
pub mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bindings::{Decision, Event, Turn};
use crate::config::Config;
use crate::db::{Db, EventCommit};
use crate::journal::Journal;
use crate::limits::meter::Meter;
use crate::run::RunContext;
use crate::run::launch::Launch;
use crate::run::lifecycle;
use crate::run::record::{decision_json, event_json, outcome_json, parse_event, validate_decision};
use crate::run::trust::Trust;
use crate::wasm::fault::PolicyFault;
use crate::wasm::policy::{Call, Policy, PolicySource, Returned};
use crate::wasm::runtime::Runtime;

pub use format::{SUFFIX, Scenario};

/// The run id every scenario runs under, so what a policy derives from it repeats.
pub const RUN_ID: &str = "scenario";
/// The workspace a YAML loop is told it runs in (`${context.workspace}`).
pub const WORKSPACE: &str = "/workspace";

/// How one scenario went.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Pass,
    /// The policy did something the scenario does not expect: the scenario's
    /// line, and the first difference.
    Fail {
        line: u32,
        message: String,
    },
    /// The scenario could not be run: the file, its policy or its config.
    Error(String),
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub file: PathBuf,
    pub verdict: Verdict,
    /// Events delivered.
    pub events: usize,
}

/// The scenario files at `path`: the file itself, or every `*.scenario.yaml`
/// under a directory (hidden directories and `target/` skipped), sorted.
pub fn find(path: &Path) -> Result<Vec<PathBuf>> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("`{}` cannot be read", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut dirs = vec![(path.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("`{}` cannot be listed", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                // Symbolic links are not followed (no cycles); depth is capped.
                if !name.starts_with('.')
                    && name != "target"
                    && name != "node_modules"
                    && depth < 32
                {
                    dirs.push((entry.path(), depth + 1));
                }
            } else if name.ends_with(SUFFIX) && kind.is_file() {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Run the scenario file at `path`. `policy` (as given on the command line)
/// replaces the one the scenario names.
pub async fn run_file(path: &Path, runtime: &Runtime, policy: Option<&str>) -> Outcome {
    let fallback = path
        .file_name()
        .map(|f| f.to_string_lossy().trim_end_matches(SUFFIX).to_string())
        .unwrap_or_default();
    match format::read(path) {
        Err(e) => Outcome {
            name: fallback,
            file: path.to_path_buf(),
            verdict: Verdict::Error(format!("{e:#}")),
            events: 0,
        },
        Ok(s) => run(&s, runtime, policy).await,
    }
}

/// The directory holding `path`: `.` for a bare file name, whose
/// `Path::parent()` is the empty path (`loopbox test fix.scenario.yaml`).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A scenario's limits under the engine's defaults: its `config` may lower a
/// limit, never raise one, so a hostile scenario cannot make `loopbox test`
/// run (or grow) without end.
fn clamp_to_defaults(config: &mut Config) {
    let d = crate::limits::Limits::default();
    let l = &mut config.limits;
    macro_rules! clamp {
        ($($f:ident),*) => { $( l.$f = l.$f.min(d.$f); )* };
    }
    clamp!(
        fuel_per_event,
        cpu_ms_per_event,
        wall_ms_per_event,
        memory_bytes,
        max_tables,
        max_instances,
        max_memories,
        table_elements,
        hostcall_bytes,
        max_string_bytes,
        host_calls_per_event,
        state_value_bytes,
        state_total_bytes,
        log_bytes_per_event,
        output_bytes,
        read_bytes,
        journal_bytes_per_event,
        journal_bytes_per_run,
        snapshot_bytes,
        mcp_message_bytes,
        wakes_per_run,
        actions_per_run
    );
    let turns = crate::config::RunConfig::default().max_turns;
    config.run.max_turns = config.run.max_turns.min(turns);
}

/// What runs a scenario: a component, or a YAML loop on `builtin:fsm`.
enum Target {
    Component(PolicySource),
    Loop(PathBuf),
}

fn target(s: &Scenario, policy: Option<&str>) -> Result<Target> {
    let base = dir_of(&s.file);
    let (text, base) = match (policy, &s.policy) {
        (Some(p), _) => (p.to_string(), Path::new(".")),
        (None, Some((p, _))) => (p.clone(), base),
        (None, None) => return implied(s, base),
    };
    if text.starts_with("builtin:") {
        return Ok(Target::Component(PolicySource::parse(&text)));
    }
    let path = base.join(&text);
    if crate::loops::is_loop_file(&text) {
        return Ok(Target::Loop(path));
    }
    Ok(Target::Component(PolicySource::parse(
        &path.to_string_lossy(),
    )))
}

/// The policy a scenario without `policy:` tests: the YAML loop of the same
/// name beside it (`fix.scenario.yaml` tests `fix.yaml`), else the component
/// `loopbox build` makes of the project it lies in (`NAME.wasm` beside
/// `policy.toml`, in its directory or the one above).
fn implied(s: &Scenario, base: &Path) -> Result<Target> {
    let stem = s
        .file
        .file_name()
        .map(|f| f.to_string_lossy().trim_end_matches(SUFFIX).to_string())
        .unwrap_or_default();
    for ext in ["yaml", "yml"] {
        let lp = base.join(format!("{stem}.{ext}"));
        if lp.is_file() {
            return Ok(Target::Loop(lp));
        }
    }
    // The directory above, also when `base` is relative (`.`, `scenarios`).
    let above = base
        .canonicalize()
        .ok()
        .and_then(|b| b.parent().map(Path::to_path_buf));
    for dir in [Some(base), above.as_deref()].into_iter().flatten() {
        let manifest = dir.join(crate::project::MANIFEST);
        if manifest.is_file() {
            let text = crate::files::read_text(&manifest, 64 * 1024, "manifest")?;
            let table: toml::Table = text
                .parse()
                .with_context(|| format!("`{}` cannot be read", manifest.display()))?;
            let name = table
                .get("name")
                .and_then(toml::Value::as_str)
                .with_context(|| format!("`{}` has no `name`", manifest.display()))?;
            let wasm = dir.join(format!("{name}.wasm"));
            if !wasm.is_file() {
                bail!(
                    "the scenario tests the project in `{}`, whose component `{}` is not built yet: run `loopbox build` there first",
                    dir.display(),
                    wasm.display()
                );
            }
            return Ok(Target::Component(PolicySource::parse(
                &wasm.to_string_lossy(),
            )));
        }
    }
    bail!(
        "the scenario does not say which policy it tests: add `policy: PATH` (a component, builtin:NAME or a YAML loop), put it beside `{stem}.yaml`, or pass --policy"
    )
}

/// Run one parsed scenario.
pub async fn run(s: &Scenario, runtime: &Runtime, policy: Option<&str>) -> Outcome {
    run_loaded(s, runtime, policy, None).await
}

/// Run the scenario file at `path` against `policy`, loaded already (a test
/// harness loads each component once for all its scenarios).
pub async fn run_file_with(path: &Path, runtime: &Runtime, policy: &Policy) -> Outcome {
    match format::read(path) {
        Err(e) => Outcome {
            name: path.display().to_string(),
            file: path.to_path_buf(),
            verdict: Verdict::Error(format!("{e:#}")),
            events: 0,
        },
        Ok(s) => run_loaded(&s, runtime, Some("the given policy"), Some(policy)).await,
    }
}

/// A policy this run loaded, or one the caller did.
enum Loaded<'a> {
    Own(Box<Policy>),
    Given(&'a Policy),
}

async fn run_loaded(
    s: &Scenario,
    runtime: &Runtime,
    policy: Option<&str>,
    preloaded: Option<&Policy>,
) -> Outcome {
    let mut events = 0;
    let verdict = match run_inner(s, runtime, policy, preloaded, &mut events).await {
        Ok(v) => v,
        Err(e) => Verdict::Error(format!("{e:#}")),
    };
    Outcome {
        name: s.name.clone(),
        file: s.file.clone(),
        verdict,
        events,
    }
}

fn fail(line: u32, message: impl Into<String>) -> Result<Verdict> {
    Ok(Verdict::Fail {
        line,
        message: message.into(),
    })
}

async fn run_inner(
    s: &Scenario,
    runtime: &Runtime,
    policy: Option<&str>,
    preloaded: Option<&Policy>,
    events: &mut usize,
) -> Result<Verdict> {
    let mut config = match &s.config {
        Some(text) => Config::parse(text, &s.file)
            .context("the scenario's `config` is not a valid loopbox.toml")?,
        None => Config::parse("", &s.file)?,
    };
    clamp_to_defaults(&mut config);
    let target = target(s, policy)?;
    let workspace = tempfile::Builder::new()
        .prefix("loopbox-test-")
        .tempdir()
        .context("cannot create a temporary workspace for the scenario")?;
    let mut files: BTreeMap<String, String> = s.files.iter().cloned().collect();
    let (policy, input, shown) = match &target {
        Target::Component(_) if preloaded.is_some() => (
            Loaded::Given(preloaded.expect("checked")),
            s.input.clone().unwrap_or_else(|| "{}".into()),
            "the given policy".to_string(),
        ),
        Target::Component(source) => (
            Loaded::Own(Box::new(runtime.load(source)?)),
            s.input.clone().unwrap_or_else(|| "{}".into()),
            source.to_string(),
        ),
        Target::Loop(path) => {
            let dir = dir_of(path);
            let file = crate::loops::read(dir, path)?;
            let mut reader = LoopFiles::new(dir, config.limits.read_bytes)?;
            let lp =
                loopbox_fsm::load(&file.path, &file.text, &mut reader).map_err(|problems| {
                    anyhow::anyhow!(
                        "the loop `{}` has {} problem(s):\n{}",
                        path.display(),
                        problems.len(),
                        loopbox_fsm::render(&problems)
                    )
                })?;
            // What the loop imports is its source, as a component's bytes are:
            // given to it as it reads them, unless the scenario gives its own.
            for (path, text) in reader.read {
                files.entry(path).or_insert(text);
            }
            let text = s.input.clone().unwrap_or_else(|| "{}".into());
            let payload = crate::loops::payload(
                &lp,
                &file,
                &text,
                &crate::loops::run_dir(RUN_ID),
                Path::new(WORKSPACE),
            )?;
            (
                Loaded::Own(Box::new(
                    runtime.load(&PolicySource::parse(crate::loops::FSM))?,
                )),
                payload,
                path.display().to_string(),
            )
        }
    };
    let policy: &Policy = match &policy {
        Loaded::Own(p) => p,
        Loaded::Given(p) => p,
    };
    let db = Db::open_workspace(workspace.path())?;
    db.create_run(RUN_ID, &shown, &policy.digest, &input)?;
    if !s.state.is_empty() {
        db.commit_event(
            RUN_ID,
            &EventCommit {
                event: json!({"type": "custom", "name": "loopbox-test:state", "payload": null})
                    .to_string(),
                decision: Some(json!({"type": "pass"}).to_string()),
                state_writes: s
                    .state
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect(),
                ..Default::default()
            },
        )?;
    }
    let limits = config.limits.clone();
    let max_turns = config.run.max_turns;
    let source = match &target {
        Target::Component(source) => source.clone(),
        Target::Loop(_) => PolicySource::parse(crate::loops::FSM),
    };
    // The scenario's own config, in its throwaway workspace: a fixture's run.
    let prepared = lifecycle::start(
        &Trust::Scenario(Box::new(config)),
        Launch::scenario(workspace.path(), source),
    )
    .map_err(|e| e.error)?;
    let ctx = prepared
        .context(
            RUN_ID,
            db.clone(),
            crate::ui::Ui::quiet(),
            crate::exec::confirm::Asking::Nobody,
        )
        .map_err(|e| e.error)?;
    let shared = world::Shared::new(files, limits.output_bytes as usize);

    let mut last: Option<(Result<Decision, PolicyFault>, bool)> = None;
    let mut turns = 0u32;
    for (i, step) in s.steps.iter().enumerate() {
        if let Some((Ok(d @ (Decision::Done(_) | Decision::Escalate(_))), _)) = &last {
            return fail(
                step.line,
                format!(
                    "the run ended at the step before ({}), so this step is never reached",
                    crate::run::record::describe_decision(d)
                ),
            );
        }
        if let Some((Err(f), _)) = &last {
            return fail(
                step.line,
                format!(
                    "the run ended at the step before (the event failed: {f}), so this step is never reached"
                ),
            );
        }
        let injected = matches!(&last, Some((Ok(Decision::Inject(_)), _)));
        let event = match &step.event {
            format::StepEvent::Implied if i == 0 => Event::Start(input.clone()),
            format::StepEvent::Implied if injected => {
                return fail(
                    step.line,
                    "the policy injected a message to the agent at the step before: give this step the agent's `reply:`",
                );
            }
            format::StepEvent::Implied => {
                return fail(
                    step.line,
                    "this step has no `event` (or `reply`); only the first step is `start` by default",
                );
            }
            format::StepEvent::Reply(text) => {
                if !injected {
                    let before = match &last {
                        Some((Ok(d), _)) => crate::run::record::describe_decision(d),
                        _ => "no decision yet".into(),
                    };
                    return fail(
                        step.line,
                        format!(
                            "this step is the agent's reply, but the policy sent the agent nothing: the step before decided {before}"
                        ),
                    );
                }
                turns += 1;
                if turns > max_turns {
                    return fail(
                        step.line,
                        format!(
                            "the run used all {max_turns} of its turns (run.max_turns) before this step"
                        ),
                    );
                }
                Event::TurnComplete(Turn {
                    session_id: RUN_ID.into(),
                    response: text.clone(),
                    index: turns,
                    continuation: last.as_ref().is_some_and(|(_, after_turn)| *after_turn),
                    origin: None,
                })
            }
            format::StepEvent::Event(v) => parse_event(&v.to_string()).map_err(|e| {
                anyhow::anyhow!("line {}: the step's event cannot be read: {e}", step.line)
            })?,
        };
        let after_turn = matches!(event, Event::TurnComplete(_));
        let w = world::EventWorld::new(shared.clone(), step.calls.clone(), step.line);
        *events += 1;
        let result = match deliver(&ctx, policy, &event, w.clone()).await? {
            Delivered::Script(why) => return fail(w.failed_at().unwrap_or(step.line), why),
            Delivered::Result(r) => r,
        };
        if let (Some(call), Ok(_)) = (w.unmade(), &result) {
            return fail(
                call.line,
                format!(
                    "the policy decided without making the {} call the scenario scripts here: {}",
                    call.kind,
                    crate::ui::shorten(&call.request.value.to_string(), 300)
                ),
            );
        }
        match (&result, &step.fault) {
            (Err(f), Some(p)) => {
                let expected = match &p.value {
                    Value::String(t) => json!({"contains": t}),
                    v => v.clone(),
                };
                if let Some(d) = check::first_mismatch(&expected, &json!(f.to_string())) {
                    return fail(
                        p.line,
                        format!("the event failed otherwise than expected: {d}"),
                    );
                }
            }
            (Err(f), None) => {
                return fail(step.line, format!("the event failed: {f}"));
            }
            (Ok(d), Some(p)) => {
                return fail(
                    p.line,
                    format!(
                        "expected the event to fail, but the policy decided {}",
                        crate::run::record::describe_decision(d)
                    ),
                );
            }
            (Ok(d), None) => {
                if let Some(p) = &step.decision
                    && let Some(diff) = check::first_mismatch(&p.value, &decision_json(d))
                {
                    return fail(
                        p.line,
                        format!(
                            "the decision differs: {diff}\n  decided: {}",
                            crate::ui::shorten(&decision_json(d).to_string(), 800)
                        ),
                    );
                }
            }
        }
        last = Some((result, after_turn));
    }

    let end = ending(last.as_ref());
    if let Some(p) = &s.end
        && let Some(diff) = check::first_mismatch(&p.value, &end)
    {
        return fail(
            p.line,
            format!(
                "the run ends otherwise: {diff}\n  ended: {}",
                crate::ui::shorten(&end.to_string(), 800)
            ),
        );
    }
    if let Some(p) = &s.final_state {
        let state = final_state(&db)?;
        if let Some(diff) = check::first_mismatch(&p.value, &state) {
            return fail(
                p.line,
                format!(
                    "the state at the end differs: {diff}\n  state: {}",
                    crate::ui::shorten(&state.to_string(), 800)
                ),
            );
        }
    }
    Ok(Verdict::Pass)
}

/// A loop's imports, read from the loop's directory as `workspace.read`
/// reads them, and kept for the scenario's world.
struct LoopFiles {
    dir: cap_std::fs::Dir,
    withheld: crate::caps::workspace::Withheld,
    limit: u64,
    read: Vec<(String, String)>,
}

impl LoopFiles {
    fn new(dir: &Path, limit: u64) -> Result<LoopFiles> {
        let root = dir
            .canonicalize()
            .with_context(|| format!("the loop's directory `{}` cannot be used", dir.display()))?;
        Ok(LoopFiles {
            dir: cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority())?,
            withheld: crate::caps::workspace::Withheld::new(&root, &[]),
            limit,
            read: Vec::new(),
        })
    }
}

impl loopbox_fsm::Files for LoopFiles {
    fn read(&mut self, path: &str) -> Result<String, String> {
        let text = crate::caps::workspace::read_text(&self.dir, &self.withheld, path, self.limit)?;
        self.read.push((path.to_string(), text.clone()));
        Ok(text)
    }
}

/// How the run stands after its last step, as `expect.end` is matched.
pub fn ending(last: Option<&(Result<Decision, PolicyFault>, bool)>) -> Value {
    match last {
        None => json!({"type": "open", "message": "no event was delivered"}),
        Some((Err(f), _)) => json!({"type": "fault", "message": f.to_string()}),
        Some((Ok(d), after_turn)) => match d {
            Decision::Done(o) => {
                let mut v = outcome_json(o);
                v["type"] = json!("done");
                v
            }
            Decision::Escalate(r) => json!({"type": "escalated", "reason": r}),
            Decision::Block(r) => json!({"type": "blocked", "reason": r}),
            Decision::Pass if *after_turn => json!({"type": "stopped"}),
            Decision::Pass => {
                json!({"type": "waiting", "reason": "the policy is waiting for events"})
            }
            Decision::Ask(q) => json!({"type": "waiting", "reason": q}),
            Decision::Sleep(t) => {
                json!({"type": "waiting", "reason": t.reason, "until_ms": t.until_ms})
            }
            Decision::Inject(m) => json!({"type": "open", "message": m}),
            Decision::Rewrite(_) => json!({"type": "decided", "decision": decision_json(d)}),
        },
    }
}

fn final_state(db: &Db) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for key in db.state_keys(RUN_ID, "")? {
        if let Some(v) = db.state_get(RUN_ID, &key)? {
            out.insert(key, serde_json::from_str(&v).unwrap_or(Value::String(v)));
        }
    }
    Ok(Value::Object(out))
}

enum Delivered {
    /// The event's calls differed from the scenario's.
    Script(String),
    Result(Result<Decision, PolicyFault>),
}

/// Deliver one event with `world` answering its calls, and commit it to the
/// throwaway store as a run commits it (its state writes on success).
async fn deliver(
    ctx: &RunContext,
    policy: &Policy,
    event: &Event,
    world: Arc<world::EventWorld>,
) -> Result<Delivered> {
    let limits = &ctx.config.limits;
    let json = event_json(event).to_string();
    let journal = Journal::scripted(ctx.db.clone(), RUN_ID, json.clone(), world);
    let seq = ctx.db.next_event_seq(RUN_ID)?;
    let meter = Arc::new(Meter::with_stop(limits, ctx.stop().clone()));
    let data = ctx.instance_state(meter.clone(), &journal, seq)?;
    let (mut result, mut data) = policy.call(data, meter, limits, Call::Handle(event)).await;
    // A trap's message quotes the guest's last words on stderr, as in a run.
    if let Err(f) = &mut result {
        *f = f.clone().with_stderr(&data.stderr.take().0);
    }
    if let Some(nd) = journal.finish_event().failure {
        ctx.log.take();
        return Ok(Delivered::Script(nd.0));
    }
    let result = match result {
        Ok(Returned::Decision(d)) => validate_decision(&d, limits.max_string_bytes)
            .map(|_| d)
            .map_err(PolicyFault::Malformed),
        Ok(Returned::Info(_)) => unreachable!("handle returns a decision"),
        Err(PolicyFault::Host(e)) => return Err(e.into_error()),
        Err(f) => Err(f),
    };
    let mut commit = EventCommit {
        event: json,
        ..Default::default()
    };
    match &result {
        Ok(d) => {
            commit.decision = Some(decision_json(d).to_string());
            commit.state_writes = data.state.take_writes();
        }
        Err(f) => {
            commit.error = Some(json!({"kind": f.kind(), "message": f.to_string()}).to_string());
        }
    }
    commit.log = ctx.log.take();
    ctx.db.commit_event(RUN_ID, &commit)?;
    Ok(Delivered::Result(result))
}

#[cfg(test)]
mod clamp_tests {
    use super::*;

    #[test]
    fn a_scenario_config_lowers_limits_but_never_raises_them() {
        let mut c = Config::parse(
            "[limits]\nfuel_per_event = 18446744073709551615\nwall_ms_per_event = 18446744073709551615\ncpu_ms_per_event = 18446744073709551615\nhost_calls_per_event = 18446744073709551615\noutput_bytes = 10\n[run]\nmax_turns = 4000000000\n",
            Path::new("x.scenario.yaml"),
        )
        .unwrap();
        clamp_to_defaults(&mut c);
        let d = crate::limits::Limits::default();
        assert_eq!(c.limits.fuel_per_event, d.fuel_per_event);
        assert_eq!(c.limits.wall_ms_per_event, d.wall_ms_per_event);
        assert_eq!(c.limits.cpu_ms_per_event, d.cpu_ms_per_event);
        assert_eq!(c.limits.host_calls_per_event, d.host_calls_per_event);
        assert_eq!(c.limits.output_bytes, 10);
        assert_eq!(
            c.run.max_turns,
            crate::config::RunConfig::default().max_turns
        );
    }

    #[test]
    fn a_bare_file_name_lies_in_dot() {
        assert_eq!(dir_of(Path::new("a.yaml")), Path::new("."));
        assert_eq!(dir_of(Path::new("d/a.yaml")), Path::new("d"));
    }
}
