//! `actions.mcp-call`: a tool of an MCP server the user configured
//! ([`crate::caps::mcp`]), the server started in the commands' sandbox for
//! the call and stopped after it. Journaled as an action: counted, its intent
//! recorded before and its result after; one that was running when the process
//! died is `outcome-unknown`, never called twice.

use std::time::Instant;

use serde_json::{Value, json};

use super::{ActionsHost, Replay, Slot};
use crate::bindings::actions::{ActionError, McpRequest, McpResult, McpStatus, Output};
use crate::caps::mcp::{self, Status};
use crate::exec::process::{Session, Spec};
use crate::ui::{sanitize, shorten};

fn status(s: Status) -> McpStatus {
    match s {
        Status::Ok => McpStatus::Ok,
        Status::ToolError => McpStatus::ToolError,
        Status::NotFound => McpStatus::NotFound,
        Status::NoAnswer => McpStatus::NoAnswer,
    }
}

/// The journal keeps an MCP reply as an `output`: little-loops' `mcp-call`
/// exit code for its status, and the result in stdout.
fn from_output(o: Output) -> Result<McpResult, ActionError> {
    let s = o
        .exit_code
        .and_then(Status::from_code)
        .ok_or_else(|| ActionError::Unavailable("the journal's MCP result is damaged".into()))?;
    Ok(McpResult {
        status: status(s),
        answer: o.stdout,
        duration_ms: o.duration_ms,
    })
}

impl ActionsHost {
    pub(super) async fn mcp_call_call(
        &mut self,
        req: McpRequest,
    ) -> wasmtime::Result<Result<McpResult, ActionError>> {
        let _call = self.meter.call()?;
        if let Err(e) = self.check_strings([
            req.server.as_str(),
            req.tool.as_str(),
            req.arguments.as_str(),
        ]) {
            return Ok(Err(e));
        }
        // Canonical: arguments that parse are kept as JSON, so equal ones compare equal.
        let args: Option<Value> = serde_json::from_str(&req.arguments).ok();
        let request = json!({
            "server": req.server, "tool": req.tool,
            "arguments": args.clone().unwrap_or_else(|| json!(req.arguments)),
            "timeout_ms": req.timeout_ms,
        })
        .to_string();
        let what = || {
            format!(
                "mcp-call `{}/{}`",
                shorten(&sanitize(&req.server), 60),
                shorten(&sanitize(&req.tool), 60)
            )
        };
        let slot = match self.replay("mcp", &request, &what)? {
            Replay::Answered(r) => return Ok(r.and_then(from_output)),
            // The tool may have acted: never called twice.
            Replay::InFlight(seq) => {
                return Ok(self
                    .unknown(seq, "mcp", &request, &what())?
                    .and_then(from_output));
            }
            Replay::Live(seq) => Slot {
                seq,
                kind: "mcp",
                request: &request,
                rerun: false,
            },
        };
        let (result, started) = self.mcp_live(&req, args, slot, &what()).await?;
        self.record(slot, started, &result)?;
        Ok(result.and_then(from_output))
    }

    /// Check the call, start the server sandboxed, talk MCP, stop it. The bool
    /// says whether the call was journaled as started.
    async fn mcp_live(
        &self,
        req: &McpRequest,
        args: Option<Value>,
        slot: Slot<'_>,
        what: &str,
    ) -> wasmtime::Result<(Result<Output, ActionError>, bool)> {
        let refused = |e| Ok((Err(e), false));
        let Some(args @ Value::Object(_)) = args else {
            return refused(ActionError::Invalid(format!(
                "{what}: the arguments must be a JSON object"
            )));
        };
        let server = match self.grants.mcp.permits(&req.server, &req.tool) {
            Ok(s) => s,
            Err(why) => return refused(self.deny(what, why)),
        };
        let root = self.grants.confines.workspace.clone();
        let Some(program) = self.grants.env.resolve_program(&server.command[0], &root) else {
            return refused(ActionError::Unavailable(format!(
                "{what}: no `{}` on shell.path = `{}` (the server's `command` in loopbox.toml)",
                sanitize(&server.command[0]),
                self.grants.env.path_var()
            )));
        };
        // An open worktree's `.git` file is protected from the server too.
        let mut confines = self.grants.confines.clone();
        confines.protected.extend(self.grants.worktrees.protected());
        let prepared = match confines.prepare(
            self.grants.sandbox.get(),
            program,
            Some(server.command[0].clone()),
            server.command[1..].to_vec(),
            &root,
        ) {
            Ok(p) => p,
            Err(why) => {
                self.log.host("error", format!("refused {what}: {why}"));
                return refused(ActionError::Unavailable(why));
            }
        };
        if let Err(e) = self.start(slot, None)? {
            return refused(e);
        }
        self.log.host(
            "info",
            format!("{what} allowed by [mcp.servers.{}]", sanitize(&req.server)),
        );
        self.log.ui().status(format!("calling {what}"));
        let limit = mcp::timeout(req.timeout_ms, server, self.grants.shell.max_timeout_ms);
        let spec = Spec {
            program: prepared.program,
            arg0: prepared.arg0,
            args: prepared.args,
            cwd: root,
            env: self.grants.env.vars(&prepared.env),
            stdin: None,
            timeout: limit,
            output_cap: self.output_cap,
            rlimits: Some(self.grants.shell.rlimits),
            confinement: prepared.confinement,
            pass_fd: prepared.pass_fd,
            net: prepared.net,
        };
        // The private temp dir and the placeholders live until the server is stopped.
        let _keep = (prepared._tmp, prepared._hold);
        let began = Instant::now();
        crate::journal::crashpoint::hit("action-started");
        let mut session = match Session::start(spec) {
            Ok(s) => s,
            Err(e) => {
                let e = ActionError::Unavailable(format!("{what}: the server did not start: {e}"));
                return Ok((Err(e), true));
            }
        };
        let reply = mcp::call(
            &mut session,
            &req.tool,
            args,
            began + limit,
            self.grants.limits.mcp_message_bytes as usize,
        )
        .await;
        let stderr = session.stop().await;
        crate::journal::crashpoint::hit("action-finished");
        let duration = began.elapsed();
        self.log.host(
            if reply.status == Status::Ok {
                "info"
            } else {
                "warn"
            },
            format!(
                "{what}: {:?} in {:.1}s{}",
                reply.status,
                duration.as_secs_f64(),
                match &reply.result["error"] {
                    Value::String(e) => format!(": {}", shorten(&sanitize(e), 200)),
                    _ => String::new(),
                }
            ),
        );
        Ok((
            Ok(Output {
                exit_code: Some(reply.status.code()),
                stdout: reply.result.to_string(),
                stderr,
                duration_ms: duration.as_millis() as u64,
                timed_out: reply.status == Status::NoAnswer && Instant::now() >= began + limit,
                truncated: false,
                session: None,
            }),
            true,
        ))
    }
}
