//! The [`World`]: everything a loop does outside itself, as requests and
//! their results. The host inside the sandbox, or a scripted double in tests.

/// What an action produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Out {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// The host cut stdout or stderr at `limits.output_bytes`.
    pub truncated: bool,
    /// Ended by `idle_timeout` (see [`crate::idle`]): exit 124, and
    /// `${prev.timeout_kind}` is `idle`.
    pub idle: bool,
}

impl Out {
    /// The exit code as little-loops sees it: 124 for a timeout, -1 for a
    /// process killed by a signal.
    pub fn code(&self) -> i32 {
        if self.timed_out {
            124
        } else {
            self.exit_code.unwrap_or(-1)
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Shell text; the host runs it with `bash -c` for `builtin:fsm`.
    Script {
        source: String,
        timeout_ms: Option<u64>,
    },
    Exec {
        argv: Vec<String>,
        timeout_ms: Option<u64>,
        /// Text on the program's stdin (none: stdin is closed).
        stdin: Option<String>,
    },
    Prompt {
        text: String,
        slash: bool,
        model: Option<String>,
        timeout_ms: Option<u64>,
        /// The state's `agent:`: a profile of the user's loopbox.toml
        /// (`[agents.NAME]`); `[agent]` when absent.
        profile: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// Everything the loop does outside itself.
pub trait World {
    /// Run an action; `Err` is the host's refusal or failure, described.
    fn act(&mut self, req: Request) -> Result<Out, String>;
    fn log(&mut self, level: Level, message: &str);
    /// The one-line status the user sees while the loop runs.
    fn progress(&mut self, message: &str);
    /// Milliseconds on a clock that only moves forward.
    fn now_ms(&mut self) -> u64;
    /// A workspace file: the loop a sub-loop state names.
    fn read(&mut self, path: &str) -> Result<String, String>;
    /// Check out `branch` in a scratch git worktree the host makes; its path,
    /// relative to the workspace.
    fn worktree_add(&mut self, branch: &str) -> Result<String, String> {
        Err(format!("no git worktree for `{branch}` here"))
    }
    /// Remove a worktree [`World::worktree_add`] made.
    fn worktree_remove(&mut self, path: &str) -> Result<(), String> {
        let _ = path;
        Ok(())
    }
    /// The directory, relative to the workspace, every later shell and prompt
    /// action runs in (`None`: the workspace root); returns the one before.
    fn set_cwd(&mut self, cwd: Option<String>) -> Option<String> {
        let _ = cwd;
        None
    }
    /// Check out `revision` in a detached git worktree the host makes, with
    /// the workspace files `copy` names copied in; its path, relative to the
    /// workspace. [`World::worktree_remove`] removes it.
    fn worktree_at(&mut self, revision: &str, copy: &[String]) -> Result<String, String> {
        let _ = copy;
        Err(format!("no git worktree at `{revision}` here"))
    }
    /// Call `tool` of the MCP server `server` with `arguments` (a JSON object).
    fn mcp_call(
        &mut self,
        server: &str,
        tool: &str,
        arguments: &str,
        timeout_ms: Option<u64>,
    ) -> crate::mcp::Reply {
        let _ = (tool, arguments, timeout_ms);
        crate::mcp::Reply::Unreachable(format!("no MCP server `{server}` here"))
    }
    /// Have the host keep copies of `paths` (test files, for `tamper_guard:
    /// revert`); the snapshot's id.
    fn snapshot(&mut self, paths: &[String]) -> Result<String, String> {
        let _ = paths;
        Err("no snapshots here".into())
    }
    /// Put `paths` back from snapshot `id`; the paths written.
    fn restore(&mut self, id: &str, paths: &[String]) -> Result<Vec<String>, String> {
        let _ = (id, paths);
        Err("no snapshots here".into())
    }
    /// Let the host forget snapshot `id`.
    fn forget_snapshot(&mut self, id: &str) {
        let _ = id;
    }
    /// The loop's `backoff`: a pause of `ms` after a route. `true` parks the
    /// run (the host keeps the timer and the loop goes on at the next event);
    /// `false` goes on at once (a world that cannot park, a test).
    fn backoff(&mut self, ms: u64) -> bool {
        let _ = ms;
        false
    }
}
