//! One run's context: its id, its grants, its store and log. Delivering an
//! event is a transaction: a fresh instance handles it, and its state writes,
//! log lines, journal and decision are committed together; a failed event
//! commits its log and the failure, and none of its state writes. An event a
//! crash interrupted is delivered again with [`RunContext::redeliver`], its
//! host calls answered from the journal.
//!
//! A run is put together by the two verbs of [`lifecycle`], start and resume,
//! under a required source of [`trust`]; [`launch`] holds the steps they take.
//! Beside them: [`driver`], the standalone loop behind `loopbox run`; [`record`],
//! events and decisions as JSON; [`pin`], the grants a run keeps for its life;
//! [`timer`], a run parked by a `sleep` decision until its tick is due.
//! A run's stop request is [`crate::limits::stop`], below the engine that
//! obeys it; its crash points for tests are [`crate::journal::crashpoint`].

pub mod driver;
pub mod error;
pub mod installed;
pub mod launch;
pub mod lifecycle;
pub mod pin;
pub mod record;
pub mod timer;
pub mod trust;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use wasmtime::component::ResourceTable;

use crate::bindings::{Decision, Event, PolicyInfo};
use crate::caps::RunFacts;
use crate::caps::actions::{ActionGrants, ActionsConfig, ActionsHost, NotNow};
use crate::caps::log::LogHost;
use crate::caps::state::StateHost;
use crate::caps::wasi::{CapturedOutput, LazyWasi};
use crate::caps::workspace::WorkspaceGrants;
use crate::config::Config;
use crate::db::{Db, EventCommit};
use crate::error::HostError;
use crate::exec::agent::AgentRunner;
use crate::exec::child_env::HostEnv;
use crate::exec::confirm::{Confirm, NoOneToAsk};
use crate::exec::grants::ExtraRules;
use crate::exec::sandbox::Sandbox;
use crate::journal::{Journal, JournalBudget};
use crate::limits::meter::Meter;
use crate::limits::quota::Quota;
use crate::limits::stop::{Stop, StopReason};
use crate::run::record::{
    decision_json, describe_decision, event_json, parse_event, validate_decision,
};
use crate::runlog::{RunLog, Source};
use crate::ui::Ui;
use crate::wasm::fault::PolicyFault;
use crate::wasm::instance::{InstanceState, Limiter};
use crate::wasm::policy::{Call, Policy, PolicySource, Returned};

/// What the front end adds to a run's grants.
pub struct Access {
    /// Rules from the command line.
    pub rules: ExtraRules,
    /// Who approves ask-tier actions.
    pub confirm: Arc<dyn Confirm>,
    /// Files the sandbox keeps read-only besides the store and `loopbox.toml`
    /// (the config file in use, the policy file).
    pub protected: Vec<PathBuf>,
    /// What the machine supports; probed when None (tests pass a machine without sandboxes).
    pub support: Option<crate::exec::sandbox::Support>,
    /// Run `script` actions with `bash -c` rather than `sh -c`: set by the
    /// launcher for `builtin:fsm` (see `run::launch`); a policy never chooses.
    pub bash_scripts: bool,
    /// Where `pass_env` finds its values: loopbox's own environment, or (a
    /// server's run) the values its tenant was given.
    pub host_env: HostEnv,
    /// Paths commands and the agent never see besides those the config hides
    /// (a server's: the other tenants' roots, its data directory).
    pub hidden: Vec<PathBuf>,
    /// The run's own home (a server tenant's, see [`crate::caps::RunFacts::home`]).
    pub home: Option<PathBuf>,
    /// On a server: addresses the run's network never reaches (the server's
    /// own, its store's), the private ones its operator opened, its ceilings.
    pub guard: Option<crate::exec::egress::guard::Guard>,
    /// A budget the run shares with others (a server tenant's quotas).
    pub quota: Option<Arc<dyn Quota>>,
}

impl Default for Access {
    fn default() -> Self {
        Access {
            rules: ExtraRules::default(),
            confirm: Arc::new(NoOneToAsk("no one can be asked here")),
            protected: Vec::new(),
            support: None,
            bash_scripts: false,
            host_env: HostEnv::Process,
            hidden: Vec::new(),
            home: None,
            guard: None,
            quota: None,
        }
    }
}

/// What a server adds to a run beside its config: where `pass_env` finds its
/// values (the tenant's credentials), paths its commands and agent never see
/// (other tenants' roots, the server's data), and the quota it shares.
#[derive(Clone, Default)]
pub struct RunExtras {
    pub host_env: crate::exec::child_env::HostEnv,
    pub hidden: Vec<PathBuf>,
    /// The run's own home: a server tenant's.
    pub home: Option<PathBuf>,
    /// On a server: addresses its network never reaches (the server's own,
    /// its store's), the private ones its operator opened, its ceilings.
    pub guard: Option<crate::exec::egress::guard::Guard>,
    pub quota: Option<Arc<dyn crate::limits::quota::Quota>>,
}

pub struct RunContext {
    pub id: String,
    pub config: Arc<Config>,
    pub db: Db,
    pub log: RunLog,
    root: PathBuf,
    /// Each capability's per-run state.
    grants: Arc<ActionGrants>,
    workspace: WorkspaceGrants,
    /// The run's random seed, read from the store at the first event.
    seed: std::sync::OnceLock<String>,
    /// Raised by a cancel request (polled from the store) or a signal.
    stop: Arc<Stop>,
}

/// How often a running event looks in the store for `loopbox runs cancel`.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Files of loopbox's own outside the protected names, for [`Access::protected`]:
/// the config file in use, the `loopbox.lock` beside it, and the policy file.
pub fn own_files(config_path: Option<PathBuf>, policy: &PolicySource) -> Vec<PathBuf> {
    config_path
        .into_iter()
        .flat_map(|c| [c.with_file_name(crate::files::LOCK_FILE), c])
        .chain(policy.path().map(Path::to_path_buf))
        .collect()
}

/// A fresh run id: short, sortable by creation time, unique enough per store.
pub fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let salt = blake3::hash(
        &[
            now.as_nanos().to_le_bytes().as_slice(),
            &std::process::id().to_le_bytes(),
        ]
        .concat(),
    );
    format!("r{:x}{}", now.as_secs(), &salt.to_hex()[..6])
}

impl RunContext {
    /// `root` is the workspace: the store lives under it, actions run in it.
    /// Only the config's rules apply, and ask-tier actions are declined.
    pub fn new(id: String, config: Arc<Config>, db: Db, root: &Path, ui: Ui) -> Result<RunContext> {
        RunContext::with_access(id, config, db, root, ui, Access::default())
    }

    /// As [`RunContext::new`], with rules from the command line, a way to ask a
    /// person, and the files the sandbox must keep read-only.
    pub fn with_access(
        id: String,
        config: Arc<Config>,
        db: Db,
        root: &Path,
        ui: Ui,
        access: Access,
    ) -> Result<RunContext> {
        let root = root
            .canonicalize()
            .with_context(|| format!("workspace `{}` cannot be used", root.display()))?;
        // Placeholders a loopbox killed with SIGKILL left (a hook's workspace comes from its event).
        crate::exec::sandbox::placeholder::clean_stale(&root);
        let log = RunLog::new(ui);
        let facts = RunFacts {
            run: &id,
            root: &root,
            own_files: &access.protected,
            support: access.support.clone(),
            db: &db,
            limits: &config.limits,
            host_env: &access.host_env,
            hidden: &access.hidden,
            home: access.home.as_deref(),
            quota: access.quota.as_ref(),
            log: &log,
            guard: access.guard.as_ref(),
        };
        let sections = ActionsConfig {
            shell: &config.shell,
            agent: config.agent.as_ref(),
            profiles: &config.profiles,
            worktree: &config.worktree,
            prices: &config.prices,
            budget: config.run.budget(),
            mcp: &config.mcp,
            restore: &config.workspace.restore,
            network: &config.network,
        };
        let grants = Arc::new(ActionGrants::new(
            sections,
            &facts,
            &access.rules,
            access.confirm,
            access.bash_scripts,
        )?);
        let workspace = WorkspaceGrants::new(
            &config.workspace,
            config.shell.sibling("workspace"),
            &root,
            &grants.confines.hidden,
        )?;
        Ok(RunContext {
            id,
            config,
            db,
            log,
            root,
            grants,
            workspace,
            seed: Default::default(),
            stop: Arc::new(Stop::new()),
        })
    }

    /// Share `stop` as the run's stop request: whoever holds it can stop the run.
    pub fn sharing_stop(mut self, stop: Arc<Stop>) -> RunContext {
        self.stop = stop;
        self
    }

    /// The run's stop request: raise it to end the event in progress (see [`crate::limits::stop`]).
    pub fn stop(&self) -> &Arc<Stop> {
        &self.stop
    }

    /// Raise the stop request when `loopbox runs cancel` (another process) leaves one
    /// in the store. Never resolves. The store is read on a blocking thread: a
    /// read that hangs (a PostgreSQL cut off by the network) must not hold up
    /// the `select!` it runs in, which is what stops the work when asked.
    async fn poll_cancel(&self) {
        loop {
            tokio::time::sleep(CANCEL_POLL).await;
            let (db, id) = (self.db.clone(), self.id.clone());
            let asked = tokio::task::spawn_blocking(move || db.cancel_requested(&id))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(false);
            if asked {
                self.stop.request(StopReason::Cancelled);
            }
        }
    }

    /// Run `work` (an agent turn, say) until it ends or the run is asked to stop;
    /// on a stop `work` is dropped (a child process with it).
    pub async fn until_stopped<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, StopReason> {
        tokio::select! {
            r = work => Ok(r),
            reason = self.stop.wait() => Err(reason),
            _ = self.poll_cancel() => unreachable!("the cancel poll never ends"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The OS sandbox this run's commands run in (decided on first use).
    pub fn sandbox(&self) -> &Sandbox {
        self.grants.sandbox.get()
    }

    pub fn agent(&self) -> Option<&AgentRunner> {
        self.grants.agent.as_ref()
    }

    /// Whether another agent turn may start under `run.max_cost_usd` and
    /// `run.max_tokens`, after what the run has spent; `Err` names the budget.
    pub fn spend_allows_turn(
        &self,
    ) -> Result<Result<crate::spend::Totals, crate::spend::budget::Exhausted>> {
        let spent = self.db.spent(&self.id)?;
        Ok(self.grants.budget.check(&spent).map(|()| spent))
    }

    /// The run's spend budget.
    pub fn spend_budget(&self) -> &crate::spend::budget::SpendBudget {
        &self.grants.budget
    }

    /// Tell the run's shared quota, if it has one, what an agent turn cost.
    pub fn charge_quota(&self, charge: &crate::spend::Charge) {
        if let Some(q) = &self.grants.quota {
            q.charged(charge);
        }
    }

    /// Count an agent turn against the run's shared quota, if it has one;
    /// `Ok(Err)` names it, `Err` is a quota whose store failed to answer.
    pub fn spend_quota(
        &self,
        spend: crate::limits::quota::Spend,
    ) -> anyhow::Result<Result<(), String>> {
        match &self.grants.quota {
            Some(q) => q.try_spend(spend),
            None => Ok(Ok(())),
        }
    }

    /// Whether the agent tier lets a message from the policy through (see
    /// [`ActionGrants::message_allowed`]); `Err` says why not, or that it waits
    /// for an approval.
    pub async fn allow_message(
        &self,
        tier: crate::exec::config::PromptTier,
        ask: crate::exec::confirm::AskRequest,
    ) -> Result<(), NotNow> {
        self.grants.message_allowed(&self.log, tier, ask).await
    }

    /// The data for one instance's Store; `event` is the number of the event it handles.
    pub fn instance_state(
        &self,
        meter: Arc<Meter>,
        journal: &Journal,
        event: i64,
    ) -> Result<InstanceState> {
        let limits = &self.config.limits;
        let out = CapturedOutput::new(limits.log_bytes_per_event as usize);
        let err = CapturedOutput::new(limits.log_bytes_per_event as usize);
        let seed = match self.seed.get() {
            Some(s) => s,
            None => {
                let run = self.db.existing_run(&self.id)?;
                self.seed.get_or_init(|| run.seed)
            }
        };
        Ok(InstanceState {
            wasi: LazyWasi::new(&out, &err, journal, &meter, seed, event),
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            actions: ActionsHost::new(
                self.grants.clone(),
                self.db.clone(),
                self.id.clone(),
                meter.clone(),
                self.log.clone(),
                journal.clone(),
                limits,
            ),
            state: StateHost::new(self.db.clone(), self.id.clone(), meter.clone(), limits),
            workspace: self
                .workspace
                .host(meter.clone(), limits.read_bytes, journal.clone()),
            log: LogHost::new(self.log.clone(), meter.clone(), limits.log_bytes_per_event)
                .marking(journal.clone()),
            spend: crate::caps::spend::SpendHost::new(
                self.db.clone(),
                self.id.clone(),
                meter,
                journal.clone(),
                self.grants.budget.clone(),
            ),
            stdout: out,
            stderr: err,
        })
    }

    async fn call(
        &self,
        policy: &Policy,
        call: Call<'_>,
        journal: &Journal,
        event: i64,
    ) -> Result<(Result<Returned, PolicyFault>, InstanceState)> {
        let meter = Arc::new(Meter::with_stop(&self.config.limits, self.stop.clone()));
        let data = self.instance_state(meter.clone(), journal, event)?;
        // The call ends itself on a stop request (its meter and watchdog see it);
        // this only raises the request when `runs cancel` leaves one in the store.
        let (mut result, mut data) = tokio::select! {
            r = policy.call(data, meter, &self.config.limits, call) => r,
            _ = self.poll_cancel() => unreachable!("the cancel poll never ends"),
        };
        // What the guest printed goes to the run log, within the event's log budget.
        for (source, captured) in [
            (Source::Stdout, &data.stdout),
            (Source::Stderr, &data.stderr),
        ] {
            let (text, dropped) = captured.take();
            // A trap's one-line error quotes the guest's last words on stderr.
            if let (Source::Stderr, Err(f)) = (source, &mut result) {
                *f = f.clone().with_stderr(&text);
            }
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                data.log.write("info", source, line);
            }
            if dropped > 0 {
                self.log.host("warn", format!("{dropped} bytes of the policy's {} past limits.log_bytes_per_event were dropped", source.as_str()));
            }
        }
        Ok((result, data))
    }

    /// Ask the policy to describe itself (nothing is committed or journaled).
    pub async fn info(&self, policy: &Policy) -> Result<PolicyInfo, PolicyFault> {
        let journal = Journal::live(self.db.clone(), &self.id, String::new(), false);
        match self.call(policy, Call::Info, &journal, 0).await {
            Ok((Ok(Returned::Info(i)), _)) => Ok(i),
            Ok((Ok(Returned::Decision(_)), _)) => unreachable!("info returns info"),
            Ok((Err(f), _)) => Err(f),
            Err(e) => Err(PolicyFault::Host(HostError::new(e))),
        }
    }

    /// Deliver a new event and commit its outcome. `Err` when loopbox itself
    /// failed (the store, the disk): then nothing of the event is committed.
    pub async fn deliver(
        &self,
        policy: &Policy,
        event: &Event,
    ) -> Result<Result<Decision, PolicyFault>> {
        Ok(self.deliver_numbered(policy, event).await?.1)
    }

    /// As [`RunContext::deliver`], keeping a hook session's transcript tally
    /// and totals (`spend`) in the event's own commit, not a write of their own.
    pub async fn deliver_keeping(
        &self,
        policy: &Policy,
        event: &Event,
        spend: Option<(crate::spend::transcript::Tally, crate::spend::Totals)>,
    ) -> Result<Result<Decision, PolicyFault>> {
        Ok(self.deliver_new(policy, event, spend).await?.1)
    }

    /// As [`RunContext::deliver`], with the number the event was stored under.
    pub async fn deliver_numbered(
        &self,
        policy: &Policy,
        event: &Event,
    ) -> Result<(i64, Result<Decision, PolicyFault>)> {
        self.deliver_new(policy, event, None).await
    }

    async fn deliver_new(
        &self,
        policy: &Policy,
        event: &Event,
        spend: Option<(crate::spend::transcript::Tally, crate::spend::Totals)>,
    ) -> Result<(i64, Result<Decision, PolicyFault>)> {
        let json = event_json(event).to_string();
        let journal = Journal::live(
            self.db.clone(),
            &self.id,
            json.clone(),
            self.config.run.journal,
        )
        .limited(JournalBudget::of(&self.config.limits))?;
        let nominal = self.db.next_event_seq(&self.id)?;
        self.handle(policy, event, json, journal, nominal, spend)
            .await
    }

    /// Deliver again the event numbered `seq` that a crash interrupted,
    /// answering the calls it made from the journal.
    pub async fn redeliver(
        &self,
        policy: &Policy,
        seq: i64,
        json: String,
    ) -> Result<Result<Decision, PolicyFault>> {
        let event = parse_event(&json)
            .with_context(|| format!("the stored event {seq} cannot be read back"))?;
        let journal = Journal::replay(self.db.clone(), &self.id, seq, json.clone())?
            .limited(JournalBudget::of(&self.config.limits))?;
        self.log.host(
            "info",
            format!(
                "resuming event {seq} ({}) from the journal",
                event_type(&event)
            ),
        );
        Ok(self
            .handle(policy, &event, json, journal, seq, None)
            .await?
            .1)
    }

    async fn handle(
        &self,
        policy: &Policy,
        event: &Event,
        json: String,
        journal: Journal,
        nominal: i64,
        spend: Option<(crate::spend::transcript::Tally, crate::spend::Totals)>,
    ) -> Result<(i64, Result<Decision, PolicyFault>)> {
        use tracing::Instrument;
        let kind = event_type(event);
        // One span per event, with the host calls' spans under it (see crate::telemetry).
        let span = tracing::info_span!(
            target: "loopbox",
            "event",
            otel.name = %format!("event {kind}"),
            loopbox.event.seq = nominal,
            loopbox.event.type = kind,
        );
        let started = crate::telemetry::enabled().then(std::time::Instant::now);
        let (result, mut data) = self
            .call(policy, Call::Handle(event), &journal, nominal)
            .instrument(span.clone())
            .await?;
        let mut result = match result {
            Ok(Returned::Decision(d)) => validate_decision(&d, self.config.limits.max_string_bytes)
                .map(|_| d)
                .map_err(PolicyFault::Malformed),
            Ok(Returned::Info(_)) => unreachable!("handle returns a decision"),
            Err(f) => Err(f),
        };
        let finished = journal.finish_event();
        // A mismatch with the journal outranks whatever the guest did after it.
        if let Some(nd) = finished.failure {
            result = Err(PolicyFault::NonDeterminism(nd.0));
        }
        let result = match result {
            Err(PolicyFault::Host(why)) => {
                self.log.host(
                    "error",
                    format!("loopbox failed while the policy handled the event: {why}"),
                );
                let _ = self.db.append_log(&self.id, &self.log.take());
                return Err(why.into_error());
            }
            other => other,
        };
        // A stopped event is left as a crash would leave it: what its actions journaled
        // stays, and a resume delivers it again.
        if let Err(PolicyFault::Stopped(reason)) = &result {
            self.log
                .host("warn", format!("the event was stopped: {reason}"));
            self.db
                .append_log(&self.id, &self.log.take())
                .context("failed to record the run log in the store")?;
            return Ok((finished.seq.unwrap_or(nominal), result));
        }
        let mut commit = EventCommit {
            seq: finished.seq,
            event: json,
            journal: finished.rows,
            spend,
            ..Default::default()
        };
        match &result {
            Ok(d) => {
                self.log
                    .host("info", format!("decision: {}", describe_decision(d)));
                commit.decision = Some(decision_json(d).to_string());
                commit.state_writes = data.state.take_writes();
            }
            Err(f) => {
                self.log.host("error", f.to_string());
                commit.error = Some(
                    serde_json::json!({"kind": f.kind(), "message": f.to_string()}).to_string(),
                );
            }
        }
        commit.log = self.log.take();
        let seq = self
            .db
            .commit_event(&self.id, &commit)
            .context("failed to record the event in the store")?;
        crate::journal::crashpoint::hit("event-committed");
        if let Some(started) = started {
            let decided = match &result {
                Ok(d) => decision_kind(d),
                Err(_) => "fault",
            };
            crate::telemetry::note_event(&span, seq, decided);
            crate::telemetry::metrics::decision(started.elapsed(), kind, decided);
        }
        Ok((seq, result))
    }
}

fn decision_kind(d: &Decision) -> &'static str {
    match d {
        Decision::Pass => "pass",
        Decision::Inject(_) => "inject",
        Decision::Block(_) => "block",
        Decision::Rewrite(_) => "rewrite",
        Decision::Ask(_) => "ask",
        Decision::Done(_) => "done",
        Decision::Escalate(_) => "escalate",
        Decision::Sleep(_) => "sleep",
    }
}

fn event_type(e: &Event) -> &'static str {
    match e {
        Event::Start(_) => "start",
        Event::TurnComplete(_) => "turn-complete",
        Event::ToolCall(_) => "tool-call",
        Event::Tick(_) => "tick",
        Event::UserInput(_) => "user-input",
        Event::Custom(_) => "custom",
    }
}
