//! `actions`: shell commands and agent prompts, each checked against the
//! user's grants (see [`crate::grants`]) and the run's action budget before
//! anything runs. Ask-tier actions need a person's yes through [`Confirm`].
//! Refusals are `action-error`s the policy can handle, and every decision
//! goes to the run log with the rule that made it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::agent::{AgentRequest, AgentRunner};
use crate::bindings::actions::{self, ActionError, Output, PromptKind, PromptRequest, ShellRequest};
use crate::child_env::ChildEnv;
use crate::config::{PromptTier, ShellConfig};
use crate::confirm::Confirm;
use crate::db::Db;
use crate::grants::{self, Refusal, ShellGrants, Tier, show_argv};
use crate::ui::shorten;
use crate::instance::InstanceState;
use crate::limits::{Limit, LimitExceeded, Limits};
use crate::meter::Meter;
use crate::process::{self, Finished, Spec};
use crate::runlog::RunLog;
use crate::sandbox::{Confines, LazySandbox, Sandbox};

/// What a run grants for actions; shared by every instance of the run.
pub struct ActionGrants {
    pub shell: ShellConfig,
    pub rules: ShellGrants,
    pub env: ChildEnv,
    pub agent: Option<AgentRunner>,
    /// Who approves ask-tier actions.
    pub confirm: Arc<dyn Confirm>,
    /// The OS sandbox every command runs in, and what it protects.
    pub sandbox: LazySandbox,
    pub confines: Confines,
}

pub struct ActionsHost {
    grants: Arc<ActionGrants>,
    db: Db,
    run: String,
    meter: Arc<Meter>,
    log: RunLog,
    actions_limit: u64,
    output_cap: usize,
}

/// A checked request, ready to run.
struct Exec {
    label: String,
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    timeout: Option<u64>,
}

impl ActionsHost {
    pub fn new(grants: Arc<ActionGrants>, db: Db, run: String, meter: Arc<Meter>, log: RunLog, limits: &Limits) -> ActionsHost {
        ActionsHost { grants, db, run, meter, log, actions_limit: limits.actions_per_run, output_cap: limits.output_bytes as usize }
    }

    fn deny(&self, what: &str, why: String) -> ActionError {
        self.log.host("warn", format!("denied {what}: {why}"));
        ActionError::Denied(why)
    }

    /// Count the action against the run's budget, or say it is spent.
    fn spend(&self) -> wasmtime::Result<Result<(), ActionError>> {
        if self.db.try_add_action(&self.run, self.actions_limit).map_err(crate::host_err)? {
            Ok(Ok(()))
        } else {
            let e = LimitExceeded::new(Limit::Actions, self.actions_limit).to_string();
            self.log.host("warn", e.clone());
            Ok(Err(ActionError::BudgetExhausted(e)))
        }
    }

    fn timeout(&self, asked: Option<u64>) -> Duration {
        let s = &self.grants.shell;
        Duration::from_millis(asked.unwrap_or(s.default_timeout_ms).min(s.max_timeout_ms))
    }

    fn check_strings<'a>(&self, strings: impl IntoIterator<Item = &'a str>) -> Result<(), ActionError> {
        for s in strings {
            self.meter.check_str(s).map_err(|e| ActionError::Invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// Ask a person about an ask-tier action; `Err` is the refusal to hand the policy.
    async fn confirm(&self, what: &str, rule: &str) -> Result<(), ActionError> {
        let confirm = self.grants.confirm.clone();
        let (w, r) = (what.to_string(), rule.to_string());
        // Reading a terminal blocks: keep it off the async workers.
        let answer = tokio::task::spawn_blocking(move || confirm.confirm(&w, &r)).await.unwrap_or_else(|e| Err(format!("the confirmation failed: {e}")));
        match answer {
            Ok(true) => {
                self.log.host("info", format!("{what} needs a yes ({rule}): approved"));
                Ok(())
            }
            Ok(false) => {
                self.log.host("warn", format!("{what} needs a yes ({rule}): the user said no"));
                Err(ActionError::Declined(format!("the user declined {what} ({rule})")))
            }
            Err(why) => {
                self.log.host("warn", format!("{what} needs a yes ({rule}): declined, {why}"));
                Err(ActionError::Declined(format!("{what} needs a person's yes ({rule}), and {why}")))
            }
        }
    }

    async fn exec(&self, req: Exec) -> wasmtime::Result<Result<Output, ActionError>> {
        let prepared = match self.grants.confines.prepare(self.grants.sandbox.get(), req.program, req.args, &req.cwd) {
            Ok(p) => p,
            Err(why) => {
                self.log.host("error", format!("refused {}: {why}", req.label));
                return Ok(Err(ActionError::Unavailable(why)));
            }
        };
        if let Err(e) = self.spend()? {
            return Ok(Err(e));
        }
        self.log.ui().status(format!("running {}", req.label));
        let mut env = req.env;
        env.extend(prepared.env);
        let spec = Spec {
            program: prepared.program,
            args: prepared.args,
            cwd: req.cwd,
            env: self.grants.env.vars(&env),
            stdin: req.stdin,
            timeout: self.timeout(req.timeout),
            output_cap: self.output_cap,
            rlimits: Some(self.grants.shell.rlimits),
            confinement: prepared.confinement,
        };
        // The private temp dir lives until the command is done.
        let _tmp = prepared._tmp;
        match process::run(spec).await {
            Ok(f) => {
                self.log.host("info", format!("ran {}: {}", req.label, describe(&f)));
                Ok(Ok(to_output(f, None)))
            }
            Err(e) => Ok(Err(ActionError::Unavailable(format!("failed to start {}: {e}", req.label)))),
        }
    }
}

pub fn describe(f: &Finished) -> String {
    let status = match (f.timed_out, f.exit_code) {
        (true, _) => "timed out".to_string(),
        (false, Some(c)) => format!("exit {c}"),
        (false, None) => "killed by a signal".to_string(),
    };
    format!("{status} in {:.1}s{}", f.duration.as_secs_f64(), if f.truncated { " (output truncated)" } else { "" })
}

fn to_output(f: Finished, session: Option<String>) -> Output {
    Output {
        exit_code: f.exit_code,
        stdout: f.stdout,
        stderr: f.stderr,
        duration_ms: f.duration.as_millis() as u64,
        timed_out: f.timed_out,
        truncated: f.truncated,
        session,
    }
}

impl actions::Host for ActionsHost {
    async fn shell(&mut self, req: ShellRequest) -> wasmtime::Result<Result<Output, ActionError>> {
        let _call = self.meter.call()?;
        match req {
            ShellRequest::Exec(cmd) => {
                let strings = cmd
                    .argv
                    .iter()
                    .map(String::as_str)
                    .chain(cmd.cwd.as_deref())
                    .chain(cmd.stdin.as_deref())
                    .chain(cmd.env.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]));
                if let Err(e) = self.check_strings(strings) {
                    return Ok(Err(e));
                }
                if cmd.argv.is_empty() || cmd.argv[0].is_empty() {
                    return Ok(Err(ActionError::Invalid("exec needs a program: argv is empty".into())));
                }
                if cmd.argv.iter().chain(cmd.env.iter().flat_map(|(k, v)| [k, v])).any(|a| a.contains('\0')) {
                    return Ok(Err(ActionError::Invalid("an argument or variable contains a NUL byte".into())));
                }
                let label = format!("`{}`", show_argv(&cmd.argv));
                let cwd = match self.grants.env.resolve_cwd(cmd.cwd.as_deref()) {
                    Ok(c) => c,
                    Err(e) => return Ok(Err(ActionError::Invalid(e))),
                };
                let grant = match self.grants.rules.check(&cmd.argv, &cwd, &self.grants.env, &cmd.env) {
                    Ok(g) => g,
                    Err(Refusal::Denied(why)) => return Ok(Err(self.deny(&format!("exec {label}"), why))),
                    Err(Refusal::NotFound(why)) => return Ok(Err(ActionError::Unavailable(why))),
                };
                if grant.tier == Tier::Ask {
                    if let Err(e) = self.confirm(&format!("exec {label}"), &grant.rule).await {
                        return Ok(Err(e));
                    }
                } else {
                    self.log.host("info", format!("exec {label} allowed by {}", grant.rule));
                }
                let args = cmd.argv[1..].to_vec();
                self.exec(Exec { label, program: grant.program, args, cwd, env: cmd.env, stdin: cmd.stdin, timeout: cmd.timeout_ms }).await
            }
            ShellRequest::Script(script) => {
                if let Err(e) = self.check_strings([script.source.as_str()].into_iter().chain(script.cwd.as_deref())) {
                    return Ok(Err(e));
                }
                if let Err(why) = grants::check_script(&self.grants.shell, &script.source) {
                    return Ok(Err(self.deny("script", why)));
                }
                if let Sandbox::None { why } | Sandbox::Unavailable(why) = self.grants.sandbox.get() {
                    return Ok(Err(self.deny("script", format!("scripts run only inside the OS sandbox, and this run has none: {why}"))));
                }
                let label = format!("script `{}`", shorten(&crate::ui::sanitize(&script.source), 80));
                let cwd = match self.grants.env.resolve_cwd(script.cwd.as_deref()) {
                    Ok(c) => c,
                    Err(e) => return Ok(Err(ActionError::Invalid(e))),
                };
                let Some(sh) = self.grants.env.resolve_program("sh", &cwd) else {
                    return Ok(Err(ActionError::Unavailable(format!("no `sh` on shell.path = `{}`", self.grants.env.path_var()))));
                };
                self.log.host("info", format!("{label} allowed by shell.scripts = true"));
                self.exec(Exec { label, program: sh, args: vec!["-c".into(), script.source], cwd, env: Vec::new(), stdin: None, timeout: script.timeout_ms })
                    .await
            }
        }
    }

    async fn prompt(&mut self, req: PromptRequest) -> wasmtime::Result<Result<Output, ActionError>> {
        let _call = self.meter.call()?;
        if let Err(e) = self.check_strings([req.text.as_str()].into_iter().chain(req.model.as_deref()).chain(req.session.as_deref())) {
            return Ok(Err(e));
        }
        if req.kind == PromptKind::SlashCommand && !req.text.starts_with('/') {
            return Ok(Err(ActionError::Invalid(format!("a slash command must start with `/`: `{}`", shorten(&req.text, 40)))));
        }
        let grants = self.grants.clone();
        let Some(agent) = &grants.agent else {
            return Ok(Err(self.deny(
                "prompt",
                "no agent is configured: add an `[agent]` section with `command = [\"claude\", \"-p\", \"{prompt}\"]` (or your agent's CLI) to loopbox.toml"
                    .into(),
            )));
        };
        let what = format!("prompt `{}`", shorten(&crate::ui::sanitize(&req.text), 60));
        match agent.config().tier {
            PromptTier::Deny => return Ok(Err(self.deny(&what, "prompts are denied by agent.tier = \"deny\" in loopbox.toml".into()))),
            PromptTier::Ask => {
                if let Err(e) = self.confirm(&what, "agent.tier = \"ask\"").await {
                    return Ok(Err(e));
                }
            }
            PromptTier::Allow => {}
        }
        let max_prompts = agent.config().max_prompts;
        if !self.db.try_add_prompt(&self.run, max_prompts).map_err(crate::host_err)? {
            let e = format!("the run has used all {max_prompts} of its prompts (agent.max_prompts)");
            self.log.host("warn", e.clone());
            return Ok(Err(ActionError::BudgetExhausted(e)));
        }
        if let Err(e) = self.spend()? {
            return Ok(Err(e));
        }
        self.log.ui().status(format!("prompting the agent: {}", shorten(&crate::ui::sanitize(&req.text), 60)));
        let r = agent
            .send(AgentRequest {
                text: &req.text,
                model: req.model.as_deref(),
                session: req.session.as_deref(),
                timeout: req.timeout_ms.map(Duration::from_millis),
            })
            .await;
        match r {
            Ok(reply) => {
                self.log.host("info", format!("prompted the agent: {}", describe(&reply.process)));
                if reply.process.timed_out {
                    return Ok(Err(ActionError::Unavailable(format!("the agent did not answer within its timeout ({})", describe(&reply.process)))));
                }
                // The reply text (not the raw JSON) is what the policy reads.
                let mut out = to_output(reply.process, reply.session);
                out.stdout = reply.text;
                Ok(Ok(out))
            }
            Err(e) => Ok(Err(ActionError::Unavailable(e.to_string()))),
        }
    }
}

pub fn add_to_linker(linker: &mut Linker<InstanceState>) -> Result<()> {
    actions::add_to_linker::<InstanceState, HasSelf<ActionsHost>>(linker, |s| &mut s.actions).map_err(crate::wasm_err)
}
