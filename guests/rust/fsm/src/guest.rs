//! `builtin:fsm`: the loop runs inside one `start` event, every action a
//! host call checked against the user's grants. The journal records each
//! call, so a resumed run replays finished steps instead of redoing them.

use loopbox_guest::{ActionError, Decision, Event, Info, Output, Policy, log, workspace};

use crate::machine::{self, Level, Out, Request, World};

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
        let Event::Start(input) = event else {
            // The whole loop runs within `start`; nothing else is expected.
            return Ok(Decision::Pass);
        };
        let start = crate::start::parse(&input)?;
        let lp = match crate::load(&start.path, &start.yaml, &mut WorkspaceFiles) {
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
        let end = machine::run_in(
            &lp,
            &context,
            start.workspace.as_deref(),
            &mut Host { cwd: None },
        );
        loopbox_guest::done_with(end.success, end.summary.clone(), &end.data(&lp))
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
            Request::Exec { argv, timeout_ms } => {
                let mut cmd = loopbox_guest::exec(argv);
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

    fn now_ms(&mut self) -> u64 {
        // The host journals clock readings, so a replay sees the same times.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

loopbox_guest::policy!(Fsm);
