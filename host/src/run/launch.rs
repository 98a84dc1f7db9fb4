//! One run launcher: the steps of putting a run together, which the verbs of
//! [`crate::run::lifecycle`] (start, resume) take for `loopbox run`, `loopbox
//! runs resume|answer|tick`, `loopbox hook`, a server and `loopbox test` alike.
//!
//! [`Launch`] says what to run: in which workspace, under which config file,
//! which policy (a name, a path, `builtin:NAME`, a YAML loop, a stored run's,
//! or a scenario's), with which command-line rules. [`Launch::prepare`], which
//! only the verbs call, reads the config and lets the source of trust
//! ([`Trust`]) judge it, resolves an installed name to its section and scopes
//! the config to it, parses the rules and checks a tenant's bounds; the
//! [`Prepared`] run then loads its policy ([`Prepared::load`]) and makes the
//! [`RunContext`] ([`Prepared::context`]), which is where a YAML loop gets its
//! budgets and its bash and a tenant's run its resources: both follow from the
//! policy source and the trust, so no front end can forget them.
//! [`Prepared::drive`] drives a standalone run to its end or until it parks,
//! stopping on a signal ([`Signals`]); a hook event is delivered by
//! `hook::session` on the same context.
//!
//! The library knows no exit codes: a failure comes back as a [`LaunchError`]
//! whose [`Failed`] kind the front end maps to its code, and a run's end as a
//! [`RunEnd`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;

use crate::config::Config;
use crate::db::{Db, RunOptions, RunRecord, RunStatus};
use crate::exec::config::AgentConfig;
use crate::exec::confirm::{Approvals, Asking};
use crate::exec::grants::{ExtraRules, parse_cli_rule};
use crate::exec::sandbox::Sandbox;
use crate::limits::stop::{Stop, StopReason};
use crate::loops;
use crate::run::driver::{self, Asker, DriveOptions, Next, RunEnd};
pub use crate::run::error::{Failed, LaunchError};
use crate::run::installed::Installed;
use crate::run::trust::Trust;
use crate::run::{Access, RunContext, RunExtras};
use crate::ui::{Ui, one_line};
use crate::wasm::policy::{Policy, PolicySource};
use crate::wasm::runtime::Runtime;

/// A run of `builtin:fsm`, the YAML loop interpreter: its scripts run with bash
/// and it gets a loop's budgets (see [`Prepared::context`]).
pub fn is_yaml_loop(source: &PolicySource) -> bool {
    matches!(source, PolicySource::Builtin(n) if format!("builtin:{n}") == loops::FSM)
}

/// The policy a launch runs.
enum Target {
    /// As the user wrote it: the NAME of a `[policies.NAME]`, a path (relative to
    /// `base` when set), or `builtin:NAME`.
    Named { text: String, base: Option<PathBuf> },
    /// `builtin:fsm` for a loop file, under the top-level grants.
    Loop,
    /// A stored run's: its `[policies.NAME]`, else its recorded path or source.
    Stored { policy: String },
    /// A scenario's component or builtin, under the scenario's config.
    Given(PolicySource),
}

/// What to run, and under which config and rules (see the module's doc).
pub struct Launch<'a> {
    workspace: &'a Path,
    target: Target,
    options: RunOptions,
}

impl<'a> Launch<'a> {
    /// A new run of `policy` (an installed NAME, a path, `builtin:NAME`) in `workspace`.
    pub fn new(workspace: &'a Path, policy: &str) -> Launch<'a> {
        Launch {
            workspace,
            target: Target::Named {
                text: policy.to_string(),
                base: None,
            },
            options: RunOptions::default(),
        }
    }

    /// A new run of a YAML loop: `builtin:fsm` under the top-level grants (the
    /// caller reads and checks the loop, and passes it as the start input).
    pub fn yaml_loop(workspace: &'a Path) -> Launch<'a> {
        Launch {
            workspace,
            target: Target::Loop,
            options: RunOptions::default(),
        }
    }

    /// Continue `run`: its options name the config, the policy and the rules.
    pub fn resume(workspace: &'a Path, run: &RunRecord) -> Launch<'a> {
        Launch {
            workspace,
            target: Target::Stored {
                policy: run.policy.clone(),
            },
            options: run.options.clone(),
        }
    }

    /// Read a relative policy path from `base` rather than the current directory
    /// (a hook's command names it relative to the workspace).
    pub fn relative_to(mut self, base: &Path) -> Self {
        if let Target::Named { base: b, .. } = &mut self.target {
            *b = Some(base.to_path_buf());
        }
        self
    }

    /// The config file (None: `loopbox.toml` in the workspace, if present), as
    /// it is recorded for a resume.
    pub fn config_file(mut self, file: Option<PathBuf>) -> Self {
        self.options.config = file;
        self
    }

    /// Rules from the command line: `--allow`, `--ask`, `--deny`.
    pub fn rules(mut self, allow: Vec<String>, ask: Vec<String>, deny: Vec<String>) -> Self {
        (self.options.allow, self.options.ask, self.options.deny) = (allow, ask, deny);
        self
    }

    /// Approve every ask-tier action (`--yes`).
    pub fn yes(mut self, yes: bool) -> Self {
        self.options.yes = yes;
        self
    }

    /// The run's turn budget, over `run.max_turns`.
    pub fn max_turns(mut self, n: Option<u32>) -> Self {
        self.options.max_turns = n;
        self
    }

    /// Ticks to deliver, in order, whenever the policy waits for events.
    pub fn ticks(mut self, ticks: Vec<String>) -> Self {
        self.options.ticks = ticks;
        self
    }

    /// A scenario's run of `source` (`loopbox test`): its config is the one
    /// [`Trust::Scenario`] gives, and no file is read.
    pub fn scenario(workspace: &'a Path, source: PolicySource) -> Launch<'a> {
        Launch {
            workspace,
            target: Target::Given(source),
            options: RunOptions::default(),
        }
    }

    /// Read the config (a tenant's file under [`Trust::TenantConfig`], the
    /// scenario's own under [`Trust::Scenario`]), let `trust` judge it, resolve
    /// the policy, scope the config to it, parse the rules, check the tenant's
    /// bounds. Only the verbs of [`crate::run::lifecycle`] call it.
    pub(super) fn prepare(self, trust: &Trust<'_>) -> Result<Prepared<'a>, LaunchError> {
        let Launch {
            workspace,
            target,
            mut options,
        } = self;
        if let Some(file) = trust.config_file()? {
            options.config = Some(file);
        }
        let (all, config_path) = match trust.given() {
            Some(config) => (config.clone(), None),
            None => {
                let found = Config::discover_hashed(options.config.as_deref(), workspace)
                    .map_err(LaunchError::usage)?;
                trust.admit(&found)?;
                (found.config, found.path)
            }
        };
        // A name the config installs as [policies.NAME] runs that component under that
        // section's grants; anything else is a path or builtin under the top-level ones.
        let stored = matches!(target, Target::Stored { .. });
        let (installed, source) = match target {
            Target::Named { text, base } => {
                match Installed::resolve(&all, config_path.as_deref(), workspace, &text)
                    .map_err(LaunchError::usage)?
                {
                    Some(i) => {
                        let source = i.source.clone();
                        (Some(i), source)
                    }
                    None => {
                        trust.require_installed(&text)?;
                        (
                            None,
                            match (PolicySource::parse(&text), base) {
                                (PolicySource::Path(p), Some(base)) if p.is_relative() => {
                                    PolicySource::Path(base.join(p))
                                }
                                (source, _) => source,
                            },
                        )
                    }
                }
            }
            Target::Loop => (None, PolicySource::parse(loops::FSM)),
            Target::Given(source) => (None, source),
            // A stored run by name is resolved again when it loads ([`Prepared::load`]).
            Target::Stored { policy } => (
                None,
                match &options.policy_path {
                    Some(p) => PolicySource::Path(p.clone()),
                    None => PolicySource::parse(&policy),
                },
            ),
        };
        // Recorded absolute, so a resume finds the file from anywhere.
        if !stored {
            options.policy_path = source
                .path()
                .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()));
        }
        if let Some(i) = &installed {
            options.policy_name = Some(i.name.clone());
            options.signer = i.locked.as_ref().and_then(|l| l.signed_by.clone());
        }
        let config = for_run(all, &options)?;
        let rules = cli_rules(&options)?;
        // The config and policy file are checked again each time: either may have changed since.
        let extras = trust.bound(&config, source.path())?;
        Ok(Prepared {
            workspace,
            config,
            config_path,
            source,
            installed,
            options,
            rules,
            extras,
            scenario: trust.given().is_some(),
        })
    }
}

/// `config` as a run with these options sees it: scoped to its `[policies.NAME]`
/// when it has one, with `--max-turns` applied.
fn for_run(config: Config, options: &RunOptions) -> Result<Config, LaunchError> {
    let mut config = match &options.policy_name {
        None => config,
        Some(name) => config.scoped(name).map_err(|_| {
            LaunchError::usage(anyhow!(
                "the run was started as policy `{name}`, under the grants of [policies.{name}], which the config no longer has; \
                 restore that section, or cancel the run"
            ))
        })?,
    };
    if let Some(n) = options.max_turns {
        if n == 0 {
            return Err(LaunchError::usage(anyhow!(
                "--max-turns must be at least 1"
            )));
        }
        config.run.max_turns = n;
    }
    Ok(config)
}

/// The rules of a run's command line, parsed.
fn cli_rules(options: &RunOptions) -> Result<ExtraRules, LaunchError> {
    let parse = |flag: &str, v: &[String]| {
        v.iter()
            .map(|r| {
                parse_cli_rule(r).map_err(|e| LaunchError::usage(anyhow!("--{flag} {r:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(ExtraRules {
        allow: parse("allow", &options.allow)?,
        ask: parse("ask", &options.ask)?,
        deny: parse("deny", &options.deny)?,
    })
}

/// The grants a run's config gives, named for the banner and `runs show`.
pub fn grant_set(options: &RunOptions) -> String {
    match &options.policy_name {
        Some(name) => format!("[policies.{name}]"),
        None => "the top-level sections".to_string(),
    }
}

/// The runtime for a workspace's config (its cache directory, which must lie outside `workspace`).
pub fn runtime(config: &Config, workspace: &Path) -> Result<Runtime, LaunchError> {
    let dir = crate::wasm::cache::ComponentCache::default_dir(config.engine.cache_dir.as_deref());
    crate::wasm::cache::check_dir(&dir, workspace).map_err(LaunchError::usage)?;
    Runtime::with_pool(dir, config.engine.pool_instances).map_err(LaunchError::internal)
}

/// A run whose config, policy and rules are settled; nothing is loaded or written yet.
pub struct Prepared<'a> {
    pub workspace: &'a Path,
    /// The user's grants for this policy: scoped to its `[policies.NAME]`, with
    /// `--max-turns` applied; a YAML loop's budgets are added by [`Prepared::context`].
    pub config: Config,
    /// The config file in use, if any.
    pub config_path: Option<PathBuf>,
    pub source: PolicySource,
    /// The `[policies.NAME]` a new run resolved to.
    pub installed: Option<Installed>,
    /// What a new run records (its grants once [`Prepared::pin`]ned by the caller).
    pub options: RunOptions,
    /// Rules from the command line.
    pub rules: ExtraRules,
    /// What a server adds to the run's confines (none for `loopbox run`):
    /// set from [`Trust::TenantConfig`] alone.
    pub(super) extras: RunExtras,
    /// Under [`Trust::Scenario`]: its context is a fixture's.
    scenario: bool,
}

impl Prepared<'_> {
    /// How the run is named in the store and its reports: an installed policy's
    /// registry reference, else its source.
    pub fn shown(&self) -> String {
        self.installed
            .as_ref()
            .map_or(self.source.to_string(), Installed::display)
    }

    pub fn is_yaml_loop(&self) -> bool {
        is_yaml_loop(&self.source)
    }

    /// The run's grants as pinned for its life (see [`crate::run::pin`]).
    pub(super) fn pin(&self) -> serde_json::Value {
        crate::run::pin::pin(
            &self.config,
            self.workspace,
            self.options.policy_name.is_some(),
        )
    }

    /// Compile (or take from the cache) the run's policy. An installed one is
    /// admitted (digests, signature) before it compiles; a stored run started by
    /// name is resolved again from its `[policies.NAME]`.
    pub fn load(&self) -> Result<Policy, LaunchError> {
        self.load_with(&runtime(&self.config, self.workspace)?)
    }

    /// [`Prepared::load`] on a runtime the caller keeps (a server's one engine
    /// and cache for every run; its cache directory is the caller's choice).
    pub fn load_with(&self, runtime: &Runtime) -> Result<Policy, LaunchError> {
        let loaded = match (&self.installed, &self.options.policy_name) {
            (Some(i), _) => i.load(runtime, &self.config),
            (None, Some(name)) => {
                let installed = Installed::resolve(
                    &self.config,
                    self.config_path.as_deref(),
                    self.workspace,
                    name,
                )
                .map_err(LaunchError::usage)?
                .ok_or_else(|| {
                    LaunchError::usage(anyhow!("there is no [policies.{name}] in the config"))
                })?;
                installed.load(runtime, &self.config)
            }
            (None, None) => runtime.load(&self.source),
        };
        loaded.map_err(LaunchError::usage)
    }

    /// The run's context, with who is `asking` about ask-tier actions (a decision
    /// already recorded for a call always comes first; see
    /// [`crate::exec::confirm::Approvals`]). For a YAML
    /// loop, its own `max_steps` and `timeout` govern it (loopbox's budgets stay a
    /// safety net well above) and its shell runs with bash, as in little-loops;
    /// the policy chooses neither.
    pub fn context(
        &self,
        id: &str,
        db: Db,
        ui: Ui,
        asking: Asking,
    ) -> Result<RunContext, LaunchError> {
        if self.scenario {
            // A fixture: only the scenario's config, and no one to ask.
            let config = Arc::new(self.config.clone());
            return RunContext::new(id.to_string(), config, db, self.workspace, ui)
                .map_err(LaunchError::usage);
        }
        let yaml_loop = self.is_yaml_loop();
        let mut config = self.config.clone();
        if yaml_loop {
            let text = self.config_path.as_deref().and_then(|p| {
                crate::files::read_text(p, crate::files::MAX_CONFIG_BYTES, "config").ok()
            });
            loops::budgets(
                &mut config,
                text.as_deref(),
                self.options.policy_name.as_deref(),
            );
        }
        let confirm = Arc::new(Approvals::new(
            db.clone(),
            id,
            config.confirm,
            config.approvals.clone(),
            asking,
        ));
        let access = Access {
            rules: self.rules.clone(),
            confirm,
            protected: crate::run::own_files(self.config_path.clone(), &self.source),
            support: None,
            bash_scripts: yaml_loop,
            host_env: self.extras.host_env.clone(),
            hidden: self.extras.hidden.clone(),
            home: self.extras.home.clone(),
            guard: self.extras.guard.clone(),
            quota: self.extras.quota.clone(),
        };
        RunContext::with_access(
            id.to_string(),
            Arc::new(config),
            db,
            self.workspace,
            ui,
            access,
        )
        .map_err(LaunchError::usage)
    }

    /// Drive `run` from `next` until it ends or parks, and record how it ended
    /// (giving up its lease). `signals` were caught before the run was marked
    /// running. A failure of loopbox itself says how to continue the run.
    pub fn drive(&self, d: Drive<'_>, signals: Signals, next: Next) -> Result<Ended, LaunchError> {
        let Signals {
            runtime,
            int,
            term,
            second,
        } = signals;
        let stop = Arc::new(Stop::new());
        let id = d.run.id.clone();
        runtime.block_on(async {
            let signals = tokio::spawn(watch_signals(int, term, stop.clone(), id, second));
            let ended = self.drive_async(d, next, stop).await;
            signals.abort();
            ended
        })
    }

    /// [`Prepared::drive`] on the caller's runtime, with no signals caught:
    /// raising `stop` stops the run where it stands (a server stopping, or
    /// cancelling one of its runs). The ending is recorded, as there.
    pub async fn drive_async(
        &self,
        d: Drive<'_>,
        next: Next,
        stop: Arc<Stop>,
    ) -> Result<Ended, LaunchError> {
        let Drive {
            db,
            run,
            policy,
            ui,
            asking,
            asker,
            banner,
            resend_turn,
            park_sleeps,
        } = d;
        let ctx = self
            .context(&run.id, db.clone(), ui.clone(), asking)?
            .sharing_stop(stop);
        if banner {
            ui.line(grants_banner(
                &run,
                policy.world.name(),
                &ctx.config,
                &self.rules,
                ctx.sandbox(),
                self.is_yaml_loop(),
            ));
        } else {
            ui.line(format!(
                "loopbox: resuming run {} of {} (world {}); sandbox {}",
                run.id,
                run.policy,
                policy.world.name(),
                ctx.sandbox().name()
            ));
        }
        let delivered = db.ticks_delivered(&run.id).map_err(LaunchError::internal)?;
        let ticks: VecDeque<String> = run.options.ticks.iter().skip(delivered).cloned().collect();
        let opts = DriveOptions {
            max_turns: ctx.config.run.max_turns,
            asker,
            ticks,
            resend_turn,
            park_sleeps,
        };
        // The run's trace: this process's span, under the run's root (see crate::telemetry).
        let span = crate::telemetry::process_span(
            &run.id,
            &run.policy,
            banner,
            if banner {
                "loopbox run"
            } else {
                "loopbox runs resume"
            },
        );
        let end =
            tracing::Instrument::instrument(driver::drive(&ctx, &policy, next, opts), span.clone())
                .await;
        if let Ok(end) = &end {
            let status = end.status();
            let failed = (status == RunStatus::Failed).then(|| end.summary());
            crate::telemetry::note_run_end(&span, &run.id, status.as_str(), failed.as_deref());
        }
        ui.finish();
        if crate::telemetry::enabled() {
            note_approvals(&db);
        }
        let end = end.map_err(|e| {
            LaunchError::internal(e.context(format!("run {} stopped; once the cause is fixed, continue it with `loopbox runs resume {}`", run.id, run.id)))
        })?;
        let outcome = match &end {
            RunEnd::Done(o) => Some(crate::run::record::outcome_json(o)),
            // A spent budget is an outcome a dashboard or `runs show` reads as such.
            RunEnd::Budget { key, message } => Some(serde_json::json!({
                "success": false, "summary": message, "budget": key,
            })),
            RunEnd::Quota(message) => Some(serde_json::json!({
                "success": false, "summary": message, "quota": true,
            })),
            _ => None,
        };
        // A served run asking a person tells its tenant's webhooks, as an
        // approval waiting does, in the same write.
        let asked = match &end {
            RunEnd::Asked(q) => Some(q.as_str()),
            _ => None,
        };
        db.finish_driving_asking(
            &run.id,
            end.status(),
            outcome.as_ref().map(|o| o.to_string()).as_deref(),
            asked,
        )
        .map_err(LaunchError::internal)?;
        let record = db.existing_run(&run.id).map_err(LaunchError::internal)?;
        Ok(Ended {
            end,
            outcome,
            record,
            world: policy.world.name(),
        })
    }
}

/// The approvals waiting in the store, for the `loopbox.approvals.waiting` metric.
fn note_approvals(db: &Db) {
    let waiting = db.approvals(&crate::db::approvals::ApprovalFilter {
        status: Some(crate::db::approvals::ApprovalStatus::Pending),
        limit: 10_000,
        ..Default::default()
    });
    if let Ok(w) = waiting {
        crate::telemetry::metrics::approvals_waiting(w.len() as u64);
    }
}

/// A standalone run for [`Prepared::drive`]: its row (created or acquired by this
/// process), its loaded policy, and the front end's ways to show and to ask.
pub struct Drive<'a> {
    pub db: Db,
    pub run: RunRecord,
    pub policy: Policy,
    pub ui: Ui,
    /// Who is asked about ask-tier actions.
    pub asking: Asking,
    /// Who answers an `ask` decision.
    pub asker: &'a (dyn Asker + Sync),
    /// Print the grants banner (a new run) or a one-line "resuming" note.
    pub banner: bool,
    /// Send again an agent turn whose outcome a crash left unknown.
    pub resend_turn: bool,
    /// End the drive when the policy sleeps, leaving the run parked until its
    /// wake time (a server, whose sweep wakes it); else sleep here.
    pub park_sleeps: bool,
}

/// How a driven run ended, as recorded.
pub struct Ended {
    pub end: RunEnd,
    /// The `done` outcome as JSON.
    pub outcome: Option<serde_json::Value>,
    /// The run's row after the end was recorded (its counters).
    pub record: RunRecord,
    /// The world of the policy (`loop-policy`, `decider`).
    pub world: &'static str,
}

/// The runtime a run is driven on, with SIGINT and SIGTERM already caught. Made
/// before the run is marked running, so a signal that comes as soon as it is
/// (`runs` shows it) stops the run instead of killing loopbox.
pub struct Signals {
    runtime: tokio::runtime::Runtime,
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    /// The process's exit code when a second signal comes.
    second: i32,
}

impl Signals {
    /// Catch SIGINT and SIGTERM on a new runtime. The first stops the run where
    /// it stands; a second ends the process at once with `second_exit`, as a
    /// crash would.
    pub fn catch(second_exit: i32) -> Result<Signals, LaunchError> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(LaunchError::internal)?;
        let caught = {
            let _in_runtime = runtime.enter();
            signal(SignalKind::interrupt())
                .and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
        };
        let (int, term) = caught.map_err(|e| {
            LaunchError::internal(
                anyhow::Error::from(e).context("failed to catch SIGINT and SIGTERM"),
            )
        })?;
        Ok(Signals {
            runtime,
            int,
            term,
            second: second_exit,
        })
    }
}

async fn watch_signals(
    mut int: tokio::signal::unix::Signal,
    mut term: tokio::signal::unix::Signal,
    stop: Arc<Stop>,
    id: String,
    second: i32,
) {
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    crate::errln!(
        "\nloopbox: stopping run {id} where it stands (signal again to quit at once); resume it with `loopbox runs resume {id}`"
    );
    stop.request(StopReason::Interrupted);
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    std::process::exit(second);
}

/// Say which runs were interrupted (their driver died) and how to pick them up.
pub fn note_interrupted(db: &Db) {
    if let Ok(runs) = db.find_interrupted() {
        for r in runs {
            crate::errln!(
                "note: run {} of {} was interrupted (its loopbox process stopped); resume it with `loopbox runs resume {}`, or stop it with `loopbox runs cancel {}`",
                r.id,
                one_line(&r.policy),
                r.id,
                r.id
            );
        }
    }
}

/// The first line of a run: what runs, and everything it is granted.
fn grants_banner(
    run: &RunRecord,
    world: &str,
    config: &Config,
    extra: &ExtraRules,
    sandbox: &Sandbox,
    yaml_loop: bool,
) -> String {
    let list = |a: &[Vec<String>], b: &[Vec<String>]| {
        let all: Vec<String> = a.iter().chain(b).map(|r| r.join(" ")).collect();
        if all.is_empty() {
            "none".to_string()
        } else {
            all.join("; ")
        }
    };
    let agent = config
        .agent
        .as_ref()
        .map_or("none".to_string(), AgentConfig::describe);
    let mut line = format!(
        "loopbox: run {} of {} (world {world}); grants{}: exec [{}], scripts {}, agent {agent}",
        run.id,
        run.policy,
        run.options
            .policy_name
            .as_ref()
            .map(|n| format!(" of [policies.{n}]"))
            .unwrap_or_default(),
        list(&config.shell.allow, &extra.allow),
        if config.shell.scripts {
            "ALLOWED"
        } else {
            "no"
        }
    );
    if yaml_loop {
        line.push_str(&format!(
            "; a YAML loop: shell actions run with bash (as in little-loops), budgets limits.actions_per_run {}{}",
            config.limits.actions_per_run,
            config
                .agent
                .as_ref()
                .map(|a| format!(", agent.max_prompts {}", a.max_prompts))
                .unwrap_or_default()
        ));
    }
    if !config.shell.ask.is_empty() || !extra.ask.is_empty() {
        line.push_str(&format!(
            "; ask [{}]{}",
            list(&config.shell.ask, &extra.ask),
            if run.options.yes {
                " (all approved by --yes)"
            } else {
                ""
            }
        ));
    }
    if config.workspace.read != [".".to_string()] {
        line.push_str(&format!("; read [{}]", config.workspace.read.join(", ")));
    }
    if !config.shell.deny.is_empty() || !extra.deny.is_empty() {
        line.push_str(&format!(
            "; deny [{}]",
            list(&config.shell.deny, &extra.deny)
        ));
    }
    line.push_str(&format!(
        "; sandbox {}{}",
        sandbox.name(),
        if config.shell.network {
            " with network"
        } else {
            ""
        }
    ));
    match sandbox {
        Sandbox::None { why } => line.push_str(&format!(
            " ({why}: commands run unconfined, scripts are refused)"
        )),
        Sandbox::Unavailable(why) => {
            line.push_str(&format!(" ({why}: every command will be refused)"))
        }
        _ => {}
    }
    line
}
