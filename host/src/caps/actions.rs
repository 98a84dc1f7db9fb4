//! `actions`: shell commands and agent prompts, each checked against the
//! user's grants (see [`crate::exec::grants`]) and the run's action budget before
//! anything runs; a prompt also against the run's spend budget
//! (`run.max_cost_usd`, `run.max_tokens`), and its reply's charge is journaled
//! with its result and added to the run's totals in the same transaction. Ask-tier actions need a person's yes through [`Confirm`].
//! Refusals are `action-error`s the policy can handle, and every decision
//! goes to the run log with the rule that made it.
//!
//! Every call goes through the event's [`Journal`]: an action is recorded
//! durably before it starts and when it ends; on replay a recorded call is
//! answered from the record, and one that was running when the process died is
//! `outcome-unknown`, unless `shell.idempotent` says it may run again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::actions::{
    self, ActionError, Output, PromptKind, PromptRequest, ShellRequest,
};
use crate::caps::RunFacts;
use crate::caps::mcp::McpConfig;
use crate::caps::snapshot::RestoreGrant;
use crate::caps::worktree::{GitJail, WorktreeConfig, Worktrees};
use crate::db::approvals::Approval;
use crate::db::{Budget, Db, Spent};
use crate::exec::agent::{AgentRequest, AgentRunner, AgentSandbox};
use crate::exec::child_env::ChildEnv;
use crate::exec::config::{AgentConfig, PromptTier, RunnerKind, ShellConfig};
use crate::exec::confirm::{Answer, AskRequest, Confirm};
use crate::exec::egress::{Egress, NetworkConfig, RunSide};
use crate::exec::grants::{self, ExtraRules, Refusal, ShellGrants, Tier, show_argv};
use crate::exec::process::{self, Finished, Spec};
use crate::exec::sandbox::hide::{Hidden, outermost};
use crate::exec::sandbox::{Confines, LazySandbox, Sandbox, protect};
use crate::journal::{Journal, Step, codec};
use crate::limits::meter::Meter;
use crate::limits::quota::{Quota, Spend};
use crate::limits::stop::{StopReason, Stopped};
use crate::limits::{Limit, LimitExceeded, Limits};
use crate::runlog::RunLog;
use crate::spend::Charge;
use crate::spend::budget::SpendBudget;
use crate::spend::price::Prices;
use crate::ui::shorten;

/// What a run grants for actions; shared by every instance of the run.
pub struct ActionGrants {
    pub shell: ShellConfig,
    pub rules: ShellGrants,
    pub env: ChildEnv,
    pub agent: Option<AgentRunner>,
    /// `[agents.NAME]`: the profiles a prompt may name, each confined as `agent` is.
    pub profiles: std::collections::BTreeMap<String, AgentRunner>,
    /// Who approves ask-tier actions.
    pub confirm: Arc<dyn Confirm>,
    /// The OS sandbox every command runs in, and what it protects.
    pub sandbox: LazySandbox,
    pub confines: Confines,
    /// `script` actions run with `bash -c` rather than `sh -c`. The launcher sets it
    /// for `builtin:fsm` (YAML loops run their shell with bash, as little-loops'
    /// `fsm/runners.py` does); a policy never chooses its interpreter.
    pub bash_scripts: bool,
    /// `[worktree]`: the git worktrees the run may add, and those it holds.
    pub worktrees: Worktrees,
    /// `[mcp]`: the MCP servers and tools a policy may call (`actions/mcp_call.rs`).
    pub mcp: McpConfig,
    /// `workspace.restore`: what `snapshot` and `restore` may take and put back
    /// (`actions/restore.rs`).
    pub restore: RestoreGrant,
    /// `[limits]`, for the calls that read their own (snapshots, MCP messages).
    pub limits: Limits,
    /// A budget shared with other runs (a server tenant's quotas), if any.
    pub quota: Option<Arc<dyn Quota>>,
    /// `run.max_cost_usd` and `run.max_tokens`: checked before each prompt.
    pub budget: SpendBudget,
    /// `[network]`: the run's proxy, the only network its commands and agent have.
    pub egress: Arc<Egress>,
}

pub struct ActionsHost {
    grants: Arc<ActionGrants>,
    db: Db,
    run: String,
    meter: Arc<Meter>,
    log: RunLog,
    journal: Journal,
    actions_limit: u64,
    output_cap: usize,
}

/// Where an action's record goes.
#[derive(Clone, Copy)]
struct Slot<'a> {
    seq: i64,
    kind: &'static str,
    request: &'a str,
    /// The intent row exists already: the action is being run again after a crash.
    rerun: bool,
}

/// A checked request, ready to run.
struct Exec {
    label: String,
    /// `exec` or `script`, and the rule (or key) that allowed it, for its span.
    kind: &'static str,
    rule: String,
    program: PathBuf,
    /// `argv[0]` as the policy wrote it.
    arg0: String,
    args: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    timeout: Option<u64>,
}

/// The sections of the config the actions capability reads.
#[derive(Clone)]
pub struct ActionsConfig<'a> {
    pub shell: &'a ShellConfig,
    pub agent: Option<&'a AgentConfig>,
    pub profiles: &'a std::collections::BTreeMap<String, AgentConfig>,
    pub worktree: &'a WorktreeConfig,
    /// `[prices]`, for agents that report tokens but no cost.
    pub prices: &'a Prices,
    /// The run's spend budget (`[run]`, narrowed by `[policies.NAME.run]`).
    pub budget: SpendBudget,
    pub mcp: &'a McpConfig,
    /// `workspace.restore`: the patterns of the files `snapshot` and `restore` may touch.
    pub restore: &'a [String],
    /// `[network]` (or `[policies.NAME.network]`).
    pub network: &'a NetworkConfig,
}

impl ActionGrants {
    /// The capability's per-run state: its sections and the run's facts, plus
    /// what the front end adds (`extra` rules from the command line, `confirm`,
    /// and `bash_scripts`, which the launcher sets for `builtin:fsm`).
    pub fn new(
        config: ActionsConfig,
        facts: &RunFacts,
        extra: &ExtraRules,
        confirm: Arc<dyn Confirm>,
        bash_scripts: bool,
    ) -> Result<ActionGrants> {
        let ActionsConfig {
            shell,
            agent,
            profiles,
            worktree,
            prices,
            budget,
            mcp,
            restore,
            network,
        } = config;
        let prices = Arc::new(prices.clone());
        let root = facts.root;
        let sandbox = LazySandbox::new(shell.sandbox, facts.support.clone());
        // A PATH entry the policy's commands can write would let them plant a program
        // under an allowed name.
        for dir in shell.path.split(':').filter(|d| !d.is_empty()) {
            let real = Path::new(dir)
                .canonicalize()
                .unwrap_or_else(|_| root.join(dir));
            if real.starts_with(root) {
                bail!(
                    "shell.path contains `{dir}`, which is inside the workspace: a command could plant a program there under an allowed name; remove it from shell.path"
                );
            }
        }
        let env = shell
            .child_env(root)
            .with_host(&shell.pass_env, facts.host_env.clone());
        // A server tenant's agent lives in its own home; its commands never see it.
        let agent_env = env.clone().with_home(facts.home);
        let rules = ShellGrants::new(shell, extra, &env);
        // Everything loopbox will run or read again is protected: the config and
        // policy files, the agent program, and programs the rules name.
        let mut own: Vec<PathBuf> = facts.own_files.to_vec();
        let agents = || agent.into_iter().chain(profiles.values());
        let programs = agents()
            .filter(|a| a.runner != RunnerKind::Openai)
            .map(|a| a.command[0].as_str());
        // MCP servers are programs loopbox runs again too.
        let servers = mcp.servers.values().map(|s| s.command[0].as_str());
        for name in programs.into_iter().chain(servers).chain(
            rules
                .rules()
                .iter()
                .filter(|r| r.tier != Tier::Deny)
                .map(|r| r.argv[0].as_str()),
        ) {
            own.extend(env.resolve_program(name, root));
        }
        let protected = protect::paths(root, &shell.writable, &own);
        let hidden = Hidden::with_home(shell, root, facts.home);
        // Every profile's state is hidden from commands, as `[agent]`'s is, and
        // so is the run's own home (the agent's logins), agent or none.
        let agent_state: Vec<PathBuf> = agents()
            .flat_map(|a| hidden.agent_state(Some(a)))
            .chain(facts.home.map(Path::to_path_buf))
            .collect();
        let egress = egress(shell, network, agents(), facts, confirm.clone())?;
        let confines = Confines {
            workspace: root.to_path_buf(),
            protected: protected.clone(),
            egress: egress.commands(),
            unix_sockets: shell.unix_sockets,
            writable_outside: Vec::new(),
            hidden: outermost(
                with_extra(hidden.for_commands(&agent_state), facts.hidden),
                &[root.to_path_buf()],
            ),
            tmp_bytes: shell.tmp_bytes,
        };
        let restore = RestoreGrant::new(
            restore,
            shell.sibling("workspace"),
            root,
            &confines.protected,
            &confines.hidden,
        );
        let runner = |a: AgentConfig| {
            let writable_outside = hidden.agent_state(Some(&a));
            // The agent's own settings, hooks and local install stay read-only though its state is writable.
            let mut protected = protected.clone();
            protected.extend(protect::agent_settings(&writable_outside));
            let confines = Confines {
                workspace: root.to_path_buf(),
                protected,
                egress: egress.agent(),
                unix_sockets: false,
                hidden: outermost(
                    with_extra(hidden.for_agent(&writable_outside), facts.hidden),
                    &[&[root.to_path_buf()], &writable_outside[..]].concat(),
                ),
                writable_outside,
                tmp_bytes: shell.tmp_bytes,
            };
            let sandbox = AgentSandbox {
                sandbox: LazySandbox::new(shell.sandbox, facts.support.clone()),
                confines,
            };
            AgentRunner::new(
                a,
                agent_env.clone(),
                facts.limits.output_bytes as usize,
                facts.db.clone(),
                Some(sandbox),
            )
            .with_prices(prices.clone())
            .for_run(facts.run)
        };
        let agent = agent.cloned().map(runner);
        let profiles = profiles
            .iter()
            .map(|(name, a)| (name.clone(), runner(a.clone())))
            .collect();
        // The host's git runs confined as a command is, `.git` writable.
        let worktrees = Worktrees::with_jail(
            worktree,
            root,
            &shell.path,
            Some(GitJail::new(
                LazySandbox::new(shell.sandbox, facts.support.clone()),
                confines.clone(),
            )),
        );
        Ok(ActionGrants {
            shell: shell.clone(),
            rules,
            env,
            agent,
            profiles,
            confirm,
            sandbox,
            confines,
            bash_scripts,
            worktrees,
            mcp: mcp.clone(),
            restore,
            limits: facts.limits.clone(),
            quota: facts.quota.cloned(),
            budget,
            egress,
        })
    }
}

/// How long an action's end waits for the proxy to close the books on its
/// connections (the program has exited: they are ending).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The run's egress: `[network]` for both sides, `shell.network = true` as
/// `*` for commands, and the provider hosts of every agent the run may
/// prompt (`network.agent_preset`) for the agent.
fn egress<'a>(
    shell: &ShellConfig,
    network: &NetworkConfig,
    agents: impl Iterator<Item = &'a AgentConfig>,
    facts: &RunFacts,
    confirm: Arc<dyn Confirm>,
) -> Result<Arc<Egress>> {
    let section = shell.sibling("network");
    let mut commands = Vec::new();
    let mut warnings = Vec::new();
    if shell.network {
        let key = format!("{}.network = true", shell.section());
        warnings.push(format!(
            "{key} lets commands reach any public host; name the hosts they need in `{section}.allow` instead"
        ));
        commands.push(("*".to_string(), key));
    }
    let mut agent = Vec::new();
    if network.agent_preset {
        for a in agents {
            for host in a.preset_hosts() {
                let name = format!("the {:?} agent's preset ({host})", a.runner).to_lowercase();
                if !agent.iter().any(|(h, _)| *h == host) {
                    agent.push((host, name));
                }
            }
        }
    }
    Egress::new(
        network,
        &section,
        &commands,
        &agent,
        RunSide {
            log: facts.log.clone(),
            store: Some((facts.db.clone(), facts.run.to_string())),
            guard: facts.guard.cloned(),
            confirm: Some(confirm),
        },
        warnings,
    )
    .map_err(anyhow::Error::msg)
}

/// `hidden` and the run's extra hidden paths, each once.
fn with_extra(mut hidden: Vec<PathBuf>, extra: &[PathBuf]) -> Vec<PathBuf> {
    for p in extra {
        if !hidden.contains(p) {
            hidden.push(p.clone());
        }
    }
    hidden
}

impl ActionGrants {
    /// Ask a person about an ask-tier action, and log the answer; `Err` says
    /// why it may not go ahead now.
    pub async fn confirm(&self, log: &RunLog, ask: AskRequest) -> Result<(), NotNow> {
        let confirm = self.confirm.clone();
        let (what, rule) = (ask.what.clone(), ask.rule.clone());
        // Reading a terminal, or the store, blocks: keep it off the async workers.
        let answer = tokio::task::spawn_blocking(move || confirm.confirm(&ask))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("the confirmation failed: {e}")));
        match answer {
            Ok(Answer::Approved) => {
                log.host("info", format!("{what} needs a yes ({rule}): approved"));
                Ok(())
            }
            Ok(Answer::Declined(why)) => {
                log.host(
                    "warn",
                    format!("{what} needs a yes ({rule}): declined, {why}"),
                );
                Err(NotNow::Declined(format!(
                    "{what} was declined ({rule}): {why}"
                )))
            }
            Ok(Answer::NoOneToAsk(why)) => {
                log.host(
                    "warn",
                    format!("{what} needs a yes ({rule}): declined, {why}"),
                );
                Err(NotNow::Declined(format!(
                    "{what} needs a person's yes ({rule}), and {why}"
                )))
            }
            Ok(Answer::Wait(a)) => {
                log.host(
                    "warn",
                    format!(
                        "{what} needs a yes ({rule}): waiting for approval {} (`{}` or `deny`)",
                        a.id,
                        crate::ui::runs_command(&format!("approve {}", a.run_id))
                    ),
                );
                Err(NotNow::Waiting(a))
            }
            Err(e) => Err(NotNow::Failed(e)),
        }
    }

    /// Whether `tier` (`agent.tier`) lets a message from the policy reach the
    /// agent: a `prompt` action and an `inject` decision alike.
    pub async fn message_allowed(
        &self,
        log: &RunLog,
        tier: PromptTier,
        ask: AskRequest,
    ) -> Result<(), NotNow> {
        match tier {
            PromptTier::Allow => Ok(()),
            PromptTier::Deny => {
                let why = format!(
                    "messages to the agent are denied by {}.tier = \"deny\" in loopbox.toml",
                    self.shell.agent_section()
                );
                log.host("warn", format!("denied {}: {why}", ask.what));
                Err(NotNow::Denied(why))
            }
            PromptTier::Ask => {
                let ask = AskRequest {
                    rule: format!("{}.tier = \"ask\"", self.shell.agent_section()),
                    ..ask
                };
                self.confirm(log, ask).await
            }
        }
    }
}

/// Why an ask-tier action (or a message to the agent) may not go ahead now.
#[derive(Debug)]
pub enum NotNow {
    /// A rule denies it: the reason is the policy's to read.
    Denied(String),
    /// Nobody said yes: the reason is the policy's to read.
    Declined(String),
    /// A person's approval is pending: the event stops where it is and the run waits.
    Waiting(Box<Approval>),
    /// loopbox failed while asking (the store): not the policy's fault.
    Failed(anyhow::Error),
}

impl NotNow {
    /// As a host call answers the guest: a refusal it can handle, or the error
    /// that stops the event (waiting, or loopbox's own failure).
    fn into_call(self) -> wasmtime::Result<ActionError> {
        match self {
            NotNow::Denied(why) => Ok(ActionError::Denied(why)),
            NotNow::Declined(why) => Ok(ActionError::Declined(why)),
            NotNow::Waiting(_) => Err(wasmtime::Error::new(Stopped(StopReason::Waiting))),
            NotNow::Failed(e) => Err(crate::error::host_err(e)),
        }
    }
}

impl ActionsHost {
    pub fn new(
        grants: Arc<ActionGrants>,
        db: Db,
        run: String,
        meter: Arc<Meter>,
        log: RunLog,
        journal: Journal,
        limits: &Limits,
    ) -> ActionsHost {
        ActionsHost {
            grants,
            db,
            run,
            meter,
            log,
            journal,
            actions_limit: limits.actions_per_run,
            output_cap: limits.output_bytes as usize,
        }
    }

    fn deny(&self, what: &str, why: String) -> ActionError {
        self.log.host("warn", format!("denied {what}: {why}"));
        ActionError::Denied(why)
    }

    /// Record that the action is about to start and count it against the run's
    /// budgets, or say why it may not start.
    fn start(
        &self,
        slot: Slot<'_>,
        prompts: Option<u64>,
    ) -> wasmtime::Result<Result<(), ActionError>> {
        if slot.rerun {
            return Ok(Ok(()));
        }
        let cancelled = || {
            Ok(Err(ActionError::Declined(
                "the run is being cancelled (`loopbox runs cancel`)".into(),
            )))
        };
        if let Some(quota) = &self.grants.quota {
            // A run being cancelled spends none of its tenant's quota. (Without
            // a quota, the intent's write checks the cancel itself.)
            if self
                .db
                .cancel_requested(&self.run)
                .map_err(crate::error::host_err)?
            {
                return cancelled();
            }
            let spends = [Spend::Action]
                .into_iter()
                .chain(prompts.map(|_| Spend::AgentTurn));
            for spend in spends {
                if let Err(why) = quota.try_spend(spend).map_err(crate::error::host_err)? {
                    self.log.host("warn", why.clone());
                    return Ok(Err(ActionError::BudgetExhausted(why)));
                }
            }
        }
        let budget = Budget {
            actions: Some(self.actions_limit),
            prompts,
            turn: false,
            uncancelled: true,
        };
        crate::journal::crashpoint::hit("before-intent");
        match self
            .journal
            .intent(slot.seq, slot.kind, slot.request, &budget)
            .map_err(crate::error::host_err)?
        {
            Ok(()) => Ok(Ok(())),
            Err(spent) => {
                let e = match spent {
                    Spent::Actions(n) => LimitExceeded::new(Limit::Actions, n).to_string(),
                    Spent::Prompts(n) => {
                        format!("the run has used all {n} of its prompts (agent.max_prompts)")
                    }
                    Spent::Cancelled => return cancelled(),
                };
                self.log.host("warn", e.clone());
                Ok(Err(ActionError::BudgetExhausted(e)))
            }
        }
    }

    /// Journal the result of a call: durably if an intent row exists for it, else with the next write.
    fn record(
        &self,
        slot: Slot<'_>,
        started: bool,
        result: &Result<Output, ActionError>,
    ) -> wasmtime::Result<()> {
        self.record_charged(slot, started, result, None)
    }

    /// As [`Self::record`], with what an agent turn cost: journaled with its
    /// result and added to the run's totals in one transaction.
    fn record_charged(
        &self,
        slot: Slot<'_>,
        started: bool,
        result: &Result<Output, ActionError>,
        charge: Option<&Charge>,
    ) -> wasmtime::Result<()> {
        let text = codec::action_result_charged(result, charge);
        if started || slot.rerun {
            self.journal
                .finish_charged(slot.seq, &text, charge)
                .map_err(crate::error::host_err)
        } else {
            self.journal.note(slot.seq, slot.kind, slot.request, &text);
            Ok(())
        }
    }

    /// Answer a call from the journal, or place it for a live run.
    fn replay(
        &self,
        kind: &'static str,
        request: &str,
        what: &dyn Fn() -> String,
    ) -> wasmtime::Result<Replay> {
        match self.journal.step(kind, request) {
            Ok(Step::Replayed(text)) => {
                let r = codec::parse_action_result(&text).ok_or_else(|| {
                    crate::error::host_err(anyhow::anyhow!(
                        "the journal's result for {} is damaged: {text}",
                        what()
                    ))
                })?;
                self.log
                    .host("info", format!("replayed {} from the journal", what()));
                Ok(Replay::Answered(r))
            }
            Ok(Step::InFlight(seq)) => Ok(Replay::InFlight(seq)),
            Ok(Step::Live(seq)) => Ok(Replay::Live(seq)),
            Err(e) => Err(e.into_wasm()),
        }
    }

    /// An action that was running when the process died: its outcome cannot be known.
    fn unknown(
        &self,
        seq: i64,
        kind: &'static str,
        request: &str,
        what: &str,
    ) -> wasmtime::Result<Result<Output, ActionError>> {
        self.log
            .host("warn", format!("{what} was running when the run stopped; its outcome is unknown (mark it in `shell.idempotent` to run it again instead)"));
        let r = Err(ActionError::OutcomeUnknown);
        self.record(
            Slot {
                seq,
                kind,
                request,
                rerun: true,
            },
            true,
            &r,
        )?;
        Ok(r)
    }

    fn timeout(&self, asked: Option<u64>) -> Duration {
        let s = &self.grants.shell;
        Duration::from_millis(asked.unwrap_or(s.default_timeout_ms).min(s.max_timeout_ms))
    }

    fn check_strings<'a>(
        &self,
        strings: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ActionError> {
        for s in strings {
            self.meter
                .check_str(s)
                .map_err(|e| ActionError::Invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// An ask-tier action's request as a person sees it, at its place in the journal.
    fn ask(
        &self,
        what: String,
        rule: String,
        request: serde_json::Value,
        slot: Slot<'_>,
    ) -> wasmtime::Result<AskRequest> {
        let position = self
            .journal
            .position(slot.seq)
            .map_err(crate::error::host_err)?;
        Ok(AskRequest {
            what,
            rule,
            request,
            position,
        })
    }

    /// Ask a person about an ask-tier action: `Ok(Err)` is the refusal to hand
    /// the policy; `Err` stops the event (it waits for an approval, or loopbox failed).
    async fn confirm(&self, ask: AskRequest) -> wasmtime::Result<Result<(), ActionError>> {
        match self.grants.confirm(&self.log, ask).await {
            Ok(()) => Ok(Ok(())),
            Err(no) => no.into_call().map(Err),
        }
    }

    /// Run a checked request. The bool says whether it was journaled as started.
    async fn exec(
        &self,
        req: Exec,
        slot: Slot<'_>,
    ) -> wasmtime::Result<(Result<Output, ActionError>, bool)> {
        // The `.git` file of each open worktree is protected like `.git` itself.
        let open = self.grants.worktrees.protected();
        let with_open;
        let confines = if open.is_empty() {
            &self.grants.confines
        } else {
            let mut c = self.grants.confines.clone();
            c.protected.extend(open);
            with_open = c;
            &with_open
        };
        // The program's own name (not the sandbox's launcher), for its span.
        let program = crate::telemetry::enabled().then(|| program_name(&req.program));
        let prepared = match confines.prepare(
            self.grants.sandbox.get(),
            req.program,
            Some(req.arg0),
            req.args,
            &req.cwd,
        ) {
            Ok(p) => p,
            Err(why) => {
                self.log
                    .host("error", format!("refused {}: {why}", req.label));
                return Ok((Err(ActionError::Unavailable(why)), false));
            }
        };
        if let Err(e) = self.start(slot, None)? {
            return Ok((Err(e), false));
        }
        self.log.ui().status(format!("running {}", req.label));
        let mut env = req.env;
        env.extend(prepared.env);
        let spec = Spec {
            program: prepared.program,
            arg0: prepared.arg0,
            args: prepared.args,
            cwd: req.cwd,
            env: self.grants.env.command_vars(&env),
            stdin: req.stdin,
            timeout: self.timeout(req.timeout),
            output_cap: self.output_cap,
            rlimits: Some(self.grants.shell.rlimits),
            confinement: prepared.confinement,
            pass_fd: prepared.pass_fd,
            net: prepared.net,
        };
        // The private temp dir and the placeholders live until the command is done.
        let _keep = (prepared._tmp, prepared._hold);
        crate::journal::crashpoint::hit("action-started");
        let span = tracing::info_span!(
            target: "loopbox",
            "action",
            otel.name = %format!("{} {}", req.kind, program.as_deref().unwrap_or("")),
            loopbox.action.kind = req.kind,
            loopbox.rule = %shorten(&req.rule, 200),
            process.executable.name = program.as_deref().unwrap_or(""),
        );
        let result = tracing::Instrument::instrument(process::run(spec), span.clone()).await;
        self.grants.egress.settle(SETTLE).await;
        crate::journal::crashpoint::hit("action-finished");
        if crate::telemetry::enabled() {
            let ran = result.as_ref().ok().map(|f| crate::telemetry::Ran {
                exit_code: f.exit_code,
                timed_out: f.timed_out,
                took: f.duration,
            });
            crate::telemetry::note_process(&span, req.kind, ran);
        }
        let result = match result {
            Ok(f) => {
                self.log
                    .host("info", format!("ran {}: {}", req.label, describe(&f)));
                Ok(to_output(f, None))
            }
            Err(e) => Err(ActionError::Unavailable(format!(
                "failed to start {}: {e}",
                req.label
            ))),
        };
        Ok((result, true))
    }

    /// A shell request not answered from the journal: check it, then run it.
    async fn shell_live(
        &self,
        req: ShellRequest,
        slot: Slot<'_>,
    ) -> wasmtime::Result<(Result<Output, ActionError>, bool)> {
        let refused = |e| Ok((Err(e), false));
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
                    return refused(e);
                }
                if cmd.argv.is_empty() || cmd.argv[0].is_empty() {
                    return refused(ActionError::Invalid(
                        "exec needs a program: argv is empty".into(),
                    ));
                }
                if cmd
                    .argv
                    .iter()
                    .chain(cmd.env.iter().flat_map(|(k, v)| [k, v]))
                    .any(|a| a.contains('\0'))
                {
                    return refused(ActionError::Invalid(
                        "an argument or variable contains a NUL byte".into(),
                    ));
                }
                let label = format!("`{}`", show_argv(&cmd.argv));
                let cwd = match self.grants.env.resolve_cwd(cmd.cwd.as_deref()) {
                    Ok(c) => c,
                    Err(e) => return refused(ActionError::Invalid(e)),
                };
                let grant =
                    match self
                        .grants
                        .rules
                        .check(&cmd.argv, &cwd, &self.grants.env, &cmd.env)
                    {
                        Ok(g) => g,
                        Err(Refusal::Denied(why)) => {
                            return refused(self.deny(&format!("exec {label}"), why));
                        }
                        Err(Refusal::NotFound(why)) => {
                            return refused(ActionError::Unavailable(why));
                        }
                    };
                if grant.tier == Tier::Ask && !slot.rerun {
                    let request = serde_json::json!({
                        "kind": "exec",
                        "argv": cmd.argv,
                        "program": grant.exec,
                        "cwd": cwd,
                        "env": cmd.env,
                        "stdin": cmd.stdin,
                    });
                    let ask =
                        self.ask(format!("exec {label}"), grant.rule.clone(), request, slot)?;
                    if let Err(e) = self.confirm(ask).await? {
                        return refused(e);
                    }
                } else {
                    self.log
                        .host("info", format!("exec {label} allowed by {}", grant.rule));
                }
                let args = cmd.argv[1..].to_vec();
                let exec = Exec {
                    label,
                    kind: "exec",
                    rule: grant.rule.clone(),
                    program: grant.exec,
                    arg0: grant.arg0,
                    args,
                    cwd,
                    env: cmd.env,
                    stdin: cmd.stdin,
                    timeout: cmd.timeout_ms,
                };
                self.exec(exec, slot).await
            }
            ShellRequest::Script(script) => {
                if let Err(e) = self.check_strings(
                    [script.source.as_str()]
                        .into_iter()
                        .chain(script.cwd.as_deref()),
                ) {
                    return refused(e);
                }
                if let Err(why) = grants::check_script(&self.grants.shell, &script.source) {
                    return refused(self.deny("script", why));
                }
                if let Sandbox::None { why } | Sandbox::Unavailable(why) = self.grants.sandbox.get()
                {
                    return refused(self.deny(
                        "script",
                        format!(
                            "scripts run only inside the OS sandbox, and this run has none: {why}"
                        ),
                    ));
                }
                let label = format!(
                    "script `{}`",
                    shorten(&crate::ui::sanitize(&script.source), 80)
                );
                let cwd = match self.grants.env.resolve_cwd(script.cwd.as_deref()) {
                    Ok(c) => c,
                    Err(e) => return refused(ActionError::Invalid(e)),
                };
                let shell = if self.grants.bash_scripts {
                    "bash"
                } else {
                    "sh"
                };
                let Some(sh) = self.grants.env.resolve_program(shell, &cwd) else {
                    let why = if shell == "bash" {
                        " (YAML loops run shell actions with bash, as little-loops does: install bash, or add its directory to shell.path; `loopbox validate` names the lines that need it)"
                    } else {
                        ""
                    };
                    return refused(ActionError::Unavailable(format!(
                        "no `{shell}` on shell.path = `{}`{why}",
                        self.grants.env.path_var()
                    )));
                };
                self.log.host(
                    "info",
                    format!(
                        "{label} allowed by {}.scripts = true",
                        self.grants.shell.section()
                    ),
                );
                let exec = Exec {
                    label,
                    kind: "script",
                    rule: format!("{}.scripts", self.grants.shell.section()),
                    program: sh,
                    arg0: shell.into(),
                    args: vec!["-c".into(), script.source],
                    cwd,
                    env: Vec::new(),
                    stdin: None,
                    timeout: script.timeout_ms,
                };
                self.exec(exec, slot).await
            }
        }
    }

    /// Whether `shell.idempotent` lets this request run again after a crash.
    fn idempotent(&self, req: &ShellRequest) -> bool {
        match req {
            ShellRequest::Exec(cmd) => self
                .grants
                .shell
                .idempotent
                .iter()
                .any(|rule| cmd.argv.starts_with(rule)),
            ShellRequest::Script(_) => false,
        }
    }

    /// A prompt not answered from the journal: check it, then send it. Its
    /// result, whether it started, and what the reply cost.
    async fn prompt_live(
        &self,
        req: PromptRequest,
        slot: Slot<'_>,
    ) -> wasmtime::Result<(Result<Output, ActionError>, bool, Option<Charge>)> {
        let refused = |e| Ok((Err(e), false, None));
        if let Err(e) = self.check_strings(
            [req.text.as_str()]
                .into_iter()
                .chain(req.model.as_deref())
                .chain(req.session.as_deref())
                .chain(req.profile.as_deref())
                .chain(req.cwd.as_deref()),
        ) {
            return refused(e);
        }
        if req.kind == PromptKind::SlashCommand && !req.text.starts_with('/') {
            return refused(ActionError::Invalid(format!(
                "a slash command must start with `/`: `{}`",
                shorten(&req.text, 40)
            )));
        }
        let cwd = match req.cwd.as_deref() {
            None => None,
            Some(dir) => match self.grants.env.resolve_cwd(Some(dir)) {
                Ok(c) => Some(c),
                Err(e) => return refused(ActionError::Invalid(e)),
            },
        };
        let grants = self.grants.clone();
        // The policy picks a profile by name only: checked against the name
        // pattern, then looked up among the user's `[agents.NAME]`. Never a
        // fallback to `[agent]`, which may be more trusted.
        let agent = match req.profile.as_deref() {
            None => grants.agent.as_ref(),
            Some(name) if !crate::exec::config::profile_name_ok(name) => {
                return refused(ActionError::Invalid(format!(
                    "`{}` is not an agent profile name: 1 to 64 letters, digits, `_` or `-`, not starting with `-`",
                    shorten(&crate::ui::sanitize(name), 64)
                )));
            }
            Some(name) => {
                let Some(found) = grants.profiles.get(name) else {
                    return refused(self.deny(
                        "prompt",
                        format!(
                            "no agent profile `{}`: add an `[agents.{0}]` section to loopbox.toml (see `loopbox validate --grants LOOP`)",
                            shorten(&crate::ui::sanitize(name), 64)
                        ),
                    ));
                };
                Some(found)
            }
        };
        let Some(agent) = agent else {
            return refused(self.deny(
                "prompt",
                format!(
                    "no agent is configured: add an `[{}]` section with `command = [\"claude\", \"-p\", \"{{prompt}}\"]` (or your agent's CLI) to loopbox.toml",
                    self.grants.shell.agent_section()
                ),
            ));
        };
        // No prompt starts once the run has spent its budget.
        let spent = self.db.spent(&self.run).map_err(crate::error::host_err)?;
        if let Err(e) = self.grants.budget.check(&spent) {
            self.log.host("warn", e.message.clone());
            return refused(ActionError::BudgetExhausted(e.message));
        }
        let tier = agent.config().tier;
        // Only an ask-tier prompt needs its request spelled out (and its place journaled).
        let ask = if tier == PromptTier::Ask {
            let request = serde_json::json!({
                "kind": "prompt",
                "text": req.text,
                "prompt_kind": format!("{:?}", req.kind),
                "profile": req.profile,
                "model": req.model,
                // The conversation it goes on: another session is another request.
                "session": req.session,
                "agent": agent.config().command,
                "cwd": cwd,
            });
            let what = format!("prompt `{}`", shorten(&crate::ui::sanitize(&req.text), 60));
            self.ask(what, String::new(), request, slot)?
        } else {
            AskRequest {
                what: format!("prompt `{}`", shorten(&crate::ui::sanitize(&req.text), 60)),
                rule: String::new(),
                request: serde_json::Value::Null,
                position: None,
            }
        };
        if let Err(no) = grants.message_allowed(&self.log, tier, ask).await {
            return refused(no.into_call()?);
        }
        if let Err(e) = self.start(slot, Some(agent.config().max_prompts))? {
            return refused(e);
        }
        self.log.ui().status(format!(
            "prompting the agent: {}",
            shorten(&crate::ui::sanitize(&req.text), 60)
        ));
        crate::journal::crashpoint::hit("action-started");
        let who = agent.invocation(req.profile.as_deref(), req.model.as_deref());
        let span = crate::telemetry::agent_span(&who, "prompt");
        let started = crate::telemetry::enabled().then(std::time::Instant::now);
        let protected = self.grants.worktrees.protected();
        let send = agent.send(AgentRequest {
            text: &req.text,
            model: req.model.as_deref(),
            session: req.session.as_deref(),
            timeout: req.timeout_ms.map(Duration::from_millis),
            cwd: cwd.as_deref(),
            protected: &protected,
            budget_usd: self.grants.budget.remaining_usd(&spent),
        });
        let r = tracing::Instrument::instrument(send, span.clone()).await;
        crate::journal::crashpoint::hit("action-finished");
        let charge = r.as_ref().ok().map(|reply| reply.charge.clone());
        if let Some(started) = started {
            let error = match &r {
                Err(e) => Some((e.kind(), e.to_string())),
                Ok(reply) if reply.process.timed_out => Some(("timeout", describe(&reply.process))),
                Ok(reply) if reply.process.exit_code != Some(0) => {
                    Some(("exit", describe(&reply.process)))
                }
                Ok(_) => None,
            };
            crate::telemetry::metrics::action(
                started.elapsed(),
                "prompt",
                if error.is_none() { "ok" } else { "failed" },
            );
            crate::telemetry::finish_turn(
                &span,
                &who,
                crate::telemetry::TurnEnd {
                    took: started.elapsed(),
                    charge: r.as_ref().ok().map(|reply| &reply.charge),
                    conversation: r.as_ref().ok().and_then(|reply| reply.session.as_deref()),
                    error,
                },
            );
        }
        let result = match r {
            Ok(reply) => {
                self.log.host(
                    "info",
                    format!("prompted the agent: {}", describe(&reply.process)),
                );
                if reply.process.timed_out {
                    Err(ActionError::Unavailable(format!(
                        "the agent did not answer within its timeout ({})",
                        describe(&reply.process)
                    )))
                } else {
                    // The reply text (not the raw JSON) is what the policy reads.
                    let mut out = to_output(reply.process, reply.session);
                    out.stdout = reply.text;
                    Ok(out)
                }
            }
            Err(e) => Err(ActionError::Unavailable(e.to_string())),
        };
        Ok((result, true, charge))
    }
}

/// A call placed against the journal.
enum Replay {
    Answered(Result<Output, ActionError>),
    InFlight(i64),
    Live(i64),
}

/// A program's file name, for a span (never its arguments).
fn program_name(p: &Path) -> String {
    p.file_name()
        .map(|n| shorten(&n.to_string_lossy(), 80))
        .unwrap_or_default()
}

pub fn describe(f: &Finished) -> String {
    let status = match (f.timed_out, f.exit_code) {
        (true, _) => "timed out".to_string(),
        (false, Some(c)) => format!("exit {c}"),
        (false, None) => "killed by a signal".to_string(),
    };
    format!(
        "{status} in {:.1}s{}",
        f.duration.as_secs_f64(),
        if f.truncated {
            " (output truncated)"
        } else {
            ""
        }
    )
}

/// The result of an action the host does itself (a worktree, a restore): it
/// succeeded, and `stdout` is what it says.
fn host_output(stdout: String) -> Output {
    Output {
        exit_code: Some(0),
        stdout,
        stderr: String::new(),
        duration_ms: 0,
        timed_out: false,
        truncated: false,
        session: None,
    }
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
        let request = codec::shell_request(&req);
        let what = || match &req {
            ShellRequest::Exec(c) => format!(
                "exec `{}`",
                shorten(&crate::ui::sanitize(&show_argv(&c.argv)), 80)
            ),
            ShellRequest::Script(s) => {
                format!("script `{}`", shorten(&crate::ui::sanitize(&s.source), 80))
            }
        };
        let slot = match self.replay("shell", &request, &what)? {
            Replay::Answered(r) => return Ok(r),
            Replay::InFlight(seq) if !self.idempotent(&req) => {
                return self.unknown(seq, "shell", &request, &what());
            }
            Replay::InFlight(seq) => {
                self.log.host(
                    "info",
                    format!(
                        "{} was running when the run stopped; running it again (shell.idempotent)",
                        what()
                    ),
                );
                Slot {
                    seq,
                    kind: "shell",
                    request: &request,
                    rerun: true,
                }
            }
            Replay::Live(seq) => Slot {
                seq,
                kind: "shell",
                request: &request,
                rerun: false,
            },
        };
        let (result, started) = self.shell_live(req.clone(), slot).await?;
        self.record(slot, started, &result)?;
        crate::journal::crashpoint::hit("action-recorded");
        Ok(result)
    }

    async fn prompt(
        &mut self,
        req: PromptRequest,
    ) -> wasmtime::Result<Result<Output, ActionError>> {
        let _call = self.meter.call()?;
        let request = codec::prompt_request(&req);
        let what = || format!("prompt `{}`", shorten(&crate::ui::sanitize(&req.text), 60));
        let slot = match self.replay("prompt", &request, &what)? {
            Replay::Answered(r) => return Ok(r),
            // An agent may have acted on the prompt: never sent twice.
            Replay::InFlight(seq) => return self.unknown(seq, "prompt", &request, &what()),
            Replay::Live(seq) => Slot {
                seq,
                kind: "prompt",
                request: &request,
                rerun: false,
            },
        };
        let (result, started, charge) = self.prompt_live(req.clone(), slot).await?;
        self.grants.egress.settle(SETTLE).await;
        self.record_charged(slot, started, &result, charge.as_ref())?;
        if let (Some(quota), Some(c)) = (&self.grants.quota, &charge) {
            quota.charged(c);
        }
        crate::journal::crashpoint::hit("action-recorded");
        Ok(result)
    }

    async fn worktree_add(
        &mut self,
        branch: String,
    ) -> wasmtime::Result<Result<String, ActionError>> {
        let _call = self.meter.call()?;
        let request = serde_json::to_string(&branch).unwrap_or_default();
        let what = || {
            format!(
                "worktree-add `{}`",
                shorten(&crate::ui::sanitize(&branch), 60)
            )
        };
        let worktrees = &self.grants.worktrees;
        let slot = match self.replay("worktree-add", &request, &what)? {
            // The worktree may be gone (the process that made it ended): made again.
            Replay::Answered(Ok(out)) => {
                if let Err(e) = worktrees.adopt(&out.stdout, &branch) {
                    self.log.host("warn", format!("{}: {e:?}", what()));
                }
                return Ok(Ok(out.stdout));
            }
            Replay::Answered(Err(e)) => return Ok(Err(e)),
            // Never made, or removed with the process that made it: made now.
            Replay::InFlight(seq) => Slot {
                seq,
                kind: "worktree-add",
                request: &request,
                rerun: true,
            },
            Replay::Live(seq) => Slot {
                seq,
                kind: "worktree-add",
                request: &request,
                rerun: false,
            },
        };
        if let Err(why) = worktrees.config_permits(&branch) {
            let e = self.deny(&what(), why);
            self.record(slot, false, &Err(e.clone()))?;
            return Ok(Err(e));
        }
        if let Err(e) = self.start(slot, None)? {
            return Ok(Err(e));
        }
        let grants = self.grants.clone();
        let b = branch.clone();
        let r = tokio::task::spawn_blocking(move || grants.worktrees.add(&b))
            .await
            .unwrap_or_else(|e| {
                Err(ActionError::Unavailable(format!(
                    "worktree-add failed: {e}"
                )))
            });
        match &r {
            Ok(rel) => self
                .log
                .host("info", format!("{}: checked out in {rel}", what())),
            Err(e) => self.log.host("warn", format!("{}: {e:?}", what())),
        }
        let result = r.map(host_output);
        self.record(slot, true, &result)?;
        Ok(result.map(|o| o.stdout))
    }

    async fn worktree_remove(&mut self, path: String) -> wasmtime::Result<Result<(), ActionError>> {
        let _call = self.meter.call()?;
        let request = serde_json::to_string(&path).unwrap_or_default();
        let what = || {
            format!(
                "worktree-remove `{}`",
                shorten(&crate::ui::sanitize(&path), 80)
            )
        };
        let slot = match self.replay("worktree-remove", &request, &what)? {
            Replay::Answered(r) => {
                if r.is_ok() {
                    self.grants.worktrees.forget(&path);
                }
                return Ok(r.map(|_| ()));
            }
            Replay::InFlight(seq) => Slot {
                seq,
                kind: "worktree-remove",
                request: &request,
                rerun: true,
            },
            Replay::Live(seq) => Slot {
                seq,
                kind: "worktree-remove",
                request: &request,
                rerun: false,
            },
        };
        let grants = self.grants.clone();
        let p = path.clone();
        let r = tokio::task::spawn_blocking(move || grants.worktrees.remove(&p))
            .await
            .unwrap_or_else(|e| {
                Err(ActionError::Unavailable(format!(
                    "worktree-remove failed: {e}"
                )))
            });
        match &r {
            Ok(()) => self.log.host("info", format!("{}: removed", what())),
            Err(e) => self.log.host("warn", format!("{}: {e:?}", what())),
        }
        let result = r.map(|()| host_output(String::new()));
        self.record(slot, false, &result)?;
        Ok(result.map(|_| ()))
    }

    async fn worktree_at(
        &mut self,
        revision: String,
        copy: Vec<String>,
    ) -> wasmtime::Result<Result<String, ActionError>> {
        self.worktree_at_call(revision, copy).await
    }

    async fn mcp_call(
        &mut self,
        req: actions::McpRequest,
    ) -> wasmtime::Result<Result<actions::McpResult, ActionError>> {
        self.mcp_call_call(req).await
    }

    async fn snapshot(
        &mut self,
        paths: Vec<String>,
    ) -> wasmtime::Result<Result<String, ActionError>> {
        self.snapshot_call(paths).await
    }

    async fn restore(
        &mut self,
        snapshot: String,
        paths: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<String>, ActionError>> {
        self.restore_call(snapshot, paths).await
    }

    async fn forget_snapshot(&mut self, snapshot: String) -> wasmtime::Result<()> {
        self.forget_snapshot_call(snapshot).await
    }
}

// The calls contract 0.4.0 added, each in its own file.
mod mcp_call;
mod restore;
mod worktree_at;

/// Link `actions` into `linker`; `get` finds this capability's host state in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut ActionsHost,
) -> Result<()> {
    actions::add_to_linker::<T, HasSelf<ActionsHost>>(linker, get).map_err(crate::wasm_err)
}
