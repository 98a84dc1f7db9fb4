//! `builtin:fsm`: the loop runs inside the `start` event, every action a
//! host call checked against the user's grants. The journal records each
//! call, so a resumed run replays finished steps instead of redoing them.
//!
//! A loop's `backoff` parks the run instead of sleeping in it: the machine is
//! saved to the run's state (with the start payload, to load the loop again),
//! the decision is `sleep` until the pause is over, and the `tick` it names
//! picks the machine up where it stood, in a fresh instance. A
//! `human_approval` state parks it the same way on an `ask` decision, and
//! the person's answer (`user-input`) picks it up.

use loopbox_guest::{ActionError, Decision, Event, Info, Output, Policy, log, state, workspace};

use crate::machine::{self, Level, Out, Request, World};
use crate::spec::Release;

/// The state keys a parked run is kept under (in chunks: one state value is
/// capped by `limits.state_value_bytes`, the loop's text may be larger).
const PARKED: &str = "fsm.parked";
/// Bytes of one chunk: stored as a JSON string, whose escapes can take six
/// bytes a character, it stays under the default `limits.state_value_bytes` (64 KiB).
const CHUNK: usize = 10 << 10;
/// The tick a parked run's timer delivers.
const TICK: &str = "{\"fsm\":\"backoff\"}";

struct Fsm;

impl Policy for Fsm {
    fn info() -> Info {
        Info::new(
            "fsm",
            env!("CARGO_PKG_VERSION"),
            "Runs a little-loops FSM loop written in YAML: `loopbox run LOOP.yaml`",
        )
    }

    fn handle(event: Event) -> Result<Decision, String> {
        let input = match event {
            Event::Start(input) => input,
            Event::Tick(_) => return wake(None),
            // A person's answer to a `human_approval` state's question.
            Event::UserInput(text) => return wake(Some(text)),
            // The loop runs within `start` and the ticks of its own timer.
            _ => return Ok(Decision::Pass),
        };
        let start = crate::start::parse(&input)?;
        let mut lp = match crate::load(&start.path, &start.yaml, &mut WorkspaceFiles) {
            Ok(lp) => lp,
            Err(problems) => {
                let text = crate::render(&problems);
                log::error(&format!("the loop has problems:\n{text}"));
                let summary = format!(
                    "the loop has {} problem(s); the first: {}",
                    problems.len(),
                    problems[0]
                );
                return loopbox_guest::done_with(
                    false,
                    summary,
                    &serde_json::json!({"problems": text.lines().collect::<Vec<_>>()}),
                );
            }
        };
        let context = match crate::start::context(&lp, &start) {
            Ok(c) => c,
            Err(e) => {
                log::error(&e);
                return loopbox_guest::done_with(false, e, &serde_json::json!({"loop": lp.name}));
            }
        };
        for note in &lp.notes {
            log::info(&format!("note: {note}"));
        }
        lp.backoff_ms = start.backoff_ms(&lp);
        lp.env = start.env.clone();
        lp.asks = start.ask;
        if let Some(r) = start.little_loops.as_deref().and_then(Release::parse) {
            lp.little_loops = Some(r);
        }
        let mut host = Host { cwd: None };
        let outcome = machine::start(&lp, &context, start.workspace.as_deref(), &mut host);
        settle(&lp, &input, outcome, &mut host)
    }
}

/// The decision for where the machine stands: done, or parked with a timer.
fn settle(
    lp: &crate::spec::Loop,
    start_input: &str,
    outcome: machine::Outcome,
    host: &mut Host,
) -> Result<Decision, String> {
    match outcome {
        machine::Outcome::Ended(end) => {
            forget_parked();
            loopbox_guest::done_with(end.success, end.summary.clone(), &end.data(lp))
        }
        machine::Outcome::Asking { saved, question } => {
            let kept = serde_json::json!({"start": start_input, "machine": saved}).to_string();
            keep_parked(&kept)?;
            Ok(Decision::Ask(question))
        }
        machine::Outcome::Parked { saved, ms } => {
            let kept = serde_json::json!({"start": start_input, "machine": saved}).to_string();
            keep_parked(&kept)?;
            let until = host.now_ms().saturating_add(ms);
            Ok(Decision::Sleep(loopbox_guest::Timer {
                until_ms: until,
                tick: TICK.into(),
                reason: format!(
                    "`{}`: backoff of {}s between states",
                    lp.name,
                    ms as f64 / 1000.0
                ),
            }))
        }
    }
}

/// The timer's tick, or a person's answer: the parked machine goes on
/// (nothing parked: `pass`).
fn wake(answer: Option<String>) -> Result<Decision, String> {
    let Some(kept) = read_parked()? else {
        return Ok(Decision::Pass);
    };
    let v: serde_json::Value =
        serde_json::from_str(&kept).map_err(|e| format!("the parked run cannot be read: {e}"))?;
    let input = v["start"]
        .as_str()
        .ok_or("the parked run has no start payload")?
        .to_string();
    let saved: machine::Saved = serde_json::from_value(v["machine"].clone())
        .map_err(|e| format!("the parked machine cannot be read: {e}"))?;
    let start = crate::start::parse(&input)?;
    let mut lp =
        crate::load(&start.path, &start.yaml, &mut WorkspaceFiles).map_err(|problems| {
            format!(
                "the loop no longer loads: {}",
                problems.first().map(|p| p.to_string()).unwrap_or_default()
            )
        })?;
    lp.backoff_ms = start.backoff_ms(&lp);
    lp.env = start.env.clone();
    lp.asks = start.ask;
    if let Some(r) = start.little_loops.as_deref().and_then(Release::parse) {
        lp.little_loops = Some(r);
    }
    let mut host = Host { cwd: None };
    let outcome = match answer {
        Some(text) => machine::answer(&lp, saved, &text, &mut host),
        None => machine::resume(&lp, saved, &mut host),
    };
    settle(&lp, &input, outcome, &mut host)
}

/// Keep `text` under [`PARKED`] in chunks, replacing what was there.
fn keep_parked(text: &str) -> Result<(), String> {
    forget_parked();
    let mut chunks = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(CHUNK);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        chunks.push(&rest[..end]);
        rest = &rest[end..];
    }
    for (i, c) in chunks.iter().enumerate() {
        state::set(&format!("{PARKED}.{i:06}"), c)
            .map_err(|e| format!("the run cannot be parked: {e}"))?;
    }
    Ok(())
}

fn read_parked() -> Result<Option<String>, String> {
    let keys = state::keys(&format!("{PARKED}."));
    if keys.is_empty() {
        return Ok(None);
    }
    let mut text = String::new();
    for k in keys {
        text.push_str(&state::get::<String>(&k)?.unwrap_or_default());
    }
    Ok(Some(text))
}

fn forget_parked() {
    for k in state::keys(&format!("{PARKED}.")) {
        state::remove(&k);
    }
}

struct WorkspaceFiles;

impl crate::Files for WorkspaceFiles {
    fn read(&mut self, path: &str) -> Result<String, String> {
        workspace::read(path)
    }
}

struct Host {
    /// Where shell and prompt actions run: a `worktree:` sub-loop's worktree.
    cwd: Option<String>,
}

fn out(o: Output) -> Out {
    Out {
        exit_code: o.exit_code,
        stdout: o.stdout,
        stderr: o.stderr,
        duration_ms: o.duration_ms,
        timed_out: o.timed_out,
        truncated: o.truncated,
        idle: false,
    }
}

impl World for Host {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        let result: Result<Output, ActionError> = match req {
            Request::Script { source, timeout_ms } => {
                use loopbox_guest::bindings::loopbox::policy::actions::{
                    Script, ShellRequest, shell,
                };
                shell(&ShellRequest::Script(Script {
                    source,
                    cwd: self.cwd.clone(),
                    timeout_ms,
                }))
            }
            Request::Exec {
                argv,
                timeout_ms,
                stdin,
            } => {
                let mut cmd = loopbox_guest::exec(argv);
                if let Some(text) = &stdin {
                    cmd = cmd.stdin(text);
                }
                if let Some(dir) = &self.cwd {
                    cmd = cmd.cwd(dir);
                }
                if let Some(ms) = timeout_ms {
                    cmd = cmd.timeout_ms(ms);
                }
                cmd.run()
            }
            Request::Prompt {
                text,
                slash,
                model,
                timeout_ms,
                profile,
            } => {
                let mut p = if slash {
                    loopbox_guest::slash_command(&text)
                } else {
                    loopbox_guest::prompt(&text)
                };
                if let Some(m) = model {
                    p = p.model(&m);
                }
                if let Some(name) = profile {
                    p = p.profile(&name);
                }
                if let Some(dir) = &self.cwd {
                    p = p.cwd(dir);
                }
                if let Some(ms) = timeout_ms {
                    p = p.timeout_ms(ms);
                }
                p.send()
            }
        };
        result.map(out).map_err(|e| e.describe())
    }

    fn log(&mut self, level: Level, message: &str) {
        match level {
            Level::Info => log::info(message),
            Level::Warn => log::warn(message),
        }
    }

    fn progress(&mut self, message: &str) {
        log::progress(message)
    }

    fn read(&mut self, path: &str) -> Result<String, String> {
        workspace::read(path)
    }

    fn worktree_add(&mut self, branch: &str) -> Result<String, String> {
        loopbox_guest::worktree_add(branch).map_err(|e| e.describe())
    }

    fn worktree_remove(&mut self, path: &str) -> Result<(), String> {
        loopbox_guest::worktree_remove(path).map_err(|e| e.describe())
    }

    fn set_cwd(&mut self, cwd: Option<String>) -> Option<String> {
        std::mem::replace(&mut self.cwd, cwd)
    }

    fn worktree_at(&mut self, revision: &str, copy: &[String]) -> Result<String, String> {
        loopbox_guest::worktree_at(revision, copy).map_err(|e| e.describe())
    }

    fn mcp_call(
        &mut self,
        server: &str,
        tool: &str,
        arguments: &str,
        timeout_ms: Option<u64>,
    ) -> crate::mcp::Reply {
        use crate::mcp::{Reply, Status};
        let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
        match loopbox_guest::mcp_call(server, tool, &args, timeout_ms) {
            Ok(r) => Reply::Answered {
                status: match r.status {
                    loopbox_guest::McpStatus::Ok => Status::Ok,
                    loopbox_guest::McpStatus::ToolError => Status::ToolError,
                    loopbox_guest::McpStatus::NotFound => Status::NotFound,
                    loopbox_guest::McpStatus::NoAnswer => Status::NoAnswer,
                },
                answer: r.answer,
                duration_ms: r.duration_ms,
            },
            // The tool cannot be reached: not granted, or its server does not start.
            Err(e @ (ActionError::Denied(_) | ActionError::Unavailable(_))) => {
                Reply::Unreachable(e.describe())
            }
            Err(e) => Reply::Refused(e.describe()),
        }
    }

    fn snapshot(&mut self, paths: &[String]) -> Result<String, String> {
        loopbox_guest::Snapshot::take(paths)
            .map(|s| s.0)
            .map_err(|e| e.describe())
    }

    fn restore(&mut self, id: &str, paths: &[String]) -> Result<Vec<String>, String> {
        loopbox_guest::Snapshot(id.to_string())
            .restore(paths)
            .map_err(|e| e.describe())
    }

    fn forget_snapshot(&mut self, id: &str) {
        loopbox_guest::Snapshot(id.to_string()).forget()
    }

    fn backoff(&mut self, _ms: u64) -> bool {
        // The host keeps the timer: the run parks, and its tick goes on.
        true
    }

    fn now_ms(&mut self) -> u64 {
        // The host journals clock readings, so a replay sees the same times.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

loopbox_guest::policy!(Fsm);
