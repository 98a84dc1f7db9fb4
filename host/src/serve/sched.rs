//! The scheduler: which queued run is driven next, and driving it.
//!
//! A run waits its turn in one FIFO queue. The dispatcher takes the oldest
//! run whose tenant is below `tenants.NAME.max_running` while the server is
//! below `server.max_running` (a tenant at its limit keeps its place; the
//! runs behind it of other tenants go first). A taken run is driven on the
//! server's tokio runtime through the launcher, exactly as `loopbox runs
//! resume` drives it: the store says where it stands, and an answer or tick
//! from its inbox is delivered only if the run still stands where it stood
//! when the answer was accepted.
//!
//! The queue in memory follows the store: a run is `queued` there first, so
//! a server killed with anything queued finds it again at start (see
//! [`super::Server::recover`]).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use tokio::sync::Notify;

use super::Server;
use super::store::InboxKind;
use super::tenancy::Served;
use crate::bindings::{Decision, Event};
use crate::db::{Db, LogRecord, RunRecord, RunStatus, now_ms};
use crate::exec::confirm::Asking;
use crate::limits::stop::{Stop, StopReason};
use crate::run::driver::{Next, NoAsker, resume_point};
use crate::run::launch::{Drive, Failed, LaunchError};
use crate::run::lifecycle::{self, Changes, Resumed};
use crate::run::trust::Trust;
use crate::ui::Ui;

/// How a queued run is to be continued (what `POST .../resume` may ask).
/// Recorded with the run (`runs.resume_with`) as well as queued here: on a
/// shared store the worker that claims the run reads it from there.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Continue {
    pub resend_turn: bool,
    pub allow_policy_change: bool,
    pub accept_config_change: bool,
}

impl Continue {
    /// What either asks: the queue's and the store's may both be there.
    fn or(&self, other: &Continue) -> Continue {
        Continue {
            resend_turn: self.resend_turn || other.resend_turn,
            allow_policy_change: self.allow_policy_change || other.allow_policy_change,
            accept_config_change: self.accept_config_change || other.accept_config_change,
        }
    }

    /// Whether it asks anything of the drive beyond going on.
    pub fn asks(&self) -> bool {
        self.resend_turn || self.allow_policy_change || self.accept_config_change
    }
}

#[derive(Debug, Clone)]
pub(super) struct Queued {
    pub(super) run: String,
    pub(super) tenant: String,
    pub(super) how: Continue,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    /// Runs being driven: their tenant and their stop request.
    running: BTreeMap<String, (String, Arc<Stop>)>,
    /// Runs queued again while still being driven (an approval, answer or
    /// tick that came as the driver parked them): queued once it lets go.
    again: BTreeMap<String, Queued>,
    per_tenant: BTreeMap<String, u32>,
    /// No more runs are taken (the server is stopping).
    closed: bool,
}

/// The queue and the runs being driven.
#[derive(Default)]
pub struct Queue {
    /// A shared store's runs wait there (`queued`) for the workers to claim:
    /// nothing is kept here, or a server that only queues would hold every
    /// run it ever started, and count them all as waiting.
    shared: bool,
    state: Mutex<State>,
    changed: Notify,
    /// Signalled each time a driven run ends.
    ended: Notify,
}

impl Queue {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue of a server whose runs `loopbox worker` processes drive.
    pub fn on_shared_store() -> Queue {
        Queue {
            shared: true,
            ..Queue::default()
        }
    }

    /// Put `run` (already `queued` in the store) at the end of the queue
    /// (nothing on a shared store, where its status is its place in the queue).
    /// A run still being driven is queued as its driver lets go of it: it was
    /// parked a moment ago, and the act that queued it must not be lost.
    pub fn push(&self, run: &str, tenant: &str, how: Continue) {
        if self.shared {
            return;
        }
        let mut s = self.state();
        let q = Queued {
            run: run.to_string(),
            tenant: tenant.to_string(),
            how,
        };
        if s.running.contains_key(run) {
            s.again.insert(run.to_string(), q);
            return;
        }
        if s.queue.iter().any(|q| q.run == run) {
            return;
        }
        s.queue.push_back(q);
        drop(s);
        self.changed.notify_one();
    }

    /// Whether `run` is being driven here now.
    pub fn is_running(&self, run: &str) -> bool {
        self.state().running.contains_key(run)
    }

    /// Stop `run` where it stands, if it is being driven here.
    pub fn stop(&self, run: &str, reason: StopReason) -> bool {
        match self.state().running.get(run) {
            Some((_, stop)) => {
                stop.request(reason);
                true
            }
            None => false,
        }
    }

    /// Take `run` out of the queue (it was cancelled before its turn).
    pub fn remove(&self, run: &str) {
        let mut s = self.state();
        s.queue.retain(|q| q.run != run);
        s.again.remove(run);
    }

    /// The tenant's runs waiting for their turn (taken ones are not).
    pub fn queued(&self, tenant: &str) -> u64 {
        self.state()
            .queue
            .iter()
            .filter(|q| q.tenant == tenant)
            .count() as u64
    }

    /// Runs driven now: all, and the tenant's.
    pub fn running(&self, tenant: &str) -> (usize, u32) {
        let s = self.state();
        (
            s.running.len(),
            s.per_tenant.get(tenant).copied().unwrap_or(0),
        )
    }

    /// Take the runs that may start now, in queue order, within the limits.
    fn take(&self, server: &Server) -> Vec<(Queued, Arc<Stop>)> {
        let mut s = self.state();
        if s.closed {
            return vec![];
        }
        let mut out = vec![];
        let mut i = 0;
        while i < s.queue.len() {
            if s.running.len() >= server.settings.max_running as usize {
                break;
            }
            let tenant = s.queue[i].tenant.clone();
            let limit = server.tenants.get(&tenant).map_or(0, |t| t.max_running);
            if s.per_tenant.get(&tenant).copied().unwrap_or(0) >= limit {
                i += 1;
                continue;
            }
            let q = s.queue.remove(i).expect("index in range");
            let stop = Arc::new(Stop::new());
            s.running
                .insert(q.run.clone(), (tenant.clone(), stop.clone()));
            *s.per_tenant.entry(tenant).or_default() += 1;
            out.push((q, stop));
        }
        out
    }

    fn finished(&self, run: &str) {
        let mut s = self.state();
        if let Some((tenant, _)) = s.running.remove(run)
            && let Some(n) = s.per_tenant.get_mut(&tenant)
        {
            *n = n.saturating_sub(1);
        }
        // Queued while it was driven: its turn now. (Its driver checks the
        // store first, so one queued for nothing is let go at once.)
        if let Some(q) = s.again.remove(run)
            && !s.queue.iter().any(|x| x.run == run)
        {
            s.queue.push_back(q);
        }
        drop(s);
        self.changed.notify_one();
        self.ended.notify_waiters();
    }

    /// Take no more runs, and stop those being driven where they stand.
    pub fn close(&self) -> usize {
        let mut s = self.state();
        s.closed = true;
        for (_, stop) in s.running.values() {
            stop.request(StopReason::Interrupted);
        }
        s.running.len()
    }

    /// Wait until no run is being driven.
    pub async fn drained(&self) {
        loop {
            let ended = self.ended.notified();
            if self.state().running.is_empty() {
                return;
            }
            ended.await;
        }
    }
}

/// Drive queued runs as their turns come, forever.
pub async fn dispatch(server: Arc<Server>) {
    loop {
        let changed = server.queue.changed.notified();
        for (q, stop) in server.queue.take(&server) {
            let server = server.clone();
            tokio::spawn(async move {
                let id = q.run.clone();
                let driving = {
                    let server = server.clone();
                    unwound(async move { drive(&server, &q, stop).await })
                };
                match driving.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => server.note_failure(&id, &e),
                    Err(panicked) => match server.data.open_db() {
                        Ok(db) => fail_panicked(&db, &id, &panicked, false),
                        Err(e) => crate::errln!("loopbox serve: run {id}: {panicked}; {e:#}"),
                    },
                }
                // Always: a slot kept by a dead driver would hold up the tenant's runs for good.
                server.queue.finished(&id);
            });
        }
        changed.await;
    }
}

/// Run `drive` as a task of its own; a panic in it comes back as the panic's
/// message (the task is gone, the run is not: it must not stay `running`).
pub(super) async fn unwound<F>(drive: F) -> Result<F::Output, String>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match tokio::spawn(drive).await {
        Ok(out) => Ok(out),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            Err(p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()))
        }
        Err(e) => Err(format!("its task was cancelled ({e})")),
    }
}

/// Fail run `id` whose driver panicked with `message`, if it still stands
/// where a driver had it (`queued` or `running`, and not another live
/// process's); a run that parked or ended before the panic keeps its status.
/// `claimed`: `db` holds it by a worker's fenced claim, which checks the write.
pub(super) fn fail_panicked(db: &Db, id: &str, message: &str, claimed: bool) {
    let why = format!(
        "loopbox panicked while driving the run: {message}. The run failed where it stood; this is a bug in loopbox: please report it with this log"
    );
    crate::errln!("loopbox: run {id}: {why}");
    log_line(db, id, "error", why.clone());
    let Ok(run) = db.existing_run(id) else {
        return;
    };
    let others = run
        .lease
        .as_ref()
        .is_some_and(|o| !claimed && o.is_alive() && *o != crate::db::lease::Owner::me());
    if matches!(run.status, RunStatus::Queued | RunStatus::Running) && !others {
        let outcome = serde_json::json!({"success": false, "summary": why, "data": null});
        if let Err(e) = db.finish_driving(id, RunStatus::Failed, Some(&outcome.to_string())) {
            crate::errln!("loopbox: run {id}: recording the failure failed: {e:#}");
        }
    }
}

/// A line in the run's log from the server itself.
pub fn log_line(db: &Db, run: &str, level: &str, message: String) {
    let _ = db.append_log(
        run,
        &[LogRecord {
            at_ms: now_ms(),
            level: level.into(),
            source: "host".into(),
            message,
        }],
    );
}

/// What a launch failure does to the run: one that never started fails
/// (nothing can start it as it is); one that did (an event of it is
/// recorded, if only its start waiting for an approval) stays `interrupted`
/// for a person to resume once the cause is fixed. The error comes back for
/// [`super::Server::note_failure`] to put in the run's log.
fn launch_failed(db: &Db, run: &RunRecord, e: &LaunchError) -> anyhow::Error {
    let started = db.last_event(&run.id).map_or(true, |e| e.is_some());
    if started {
        return parked(db, run, e);
    }
    let why = format!("{:#}", e.error);
    let outcome = serde_json::json!({"success": false, "summary": why, "data": null}).to_string();
    let _ = db.finish_driving(&run.id, RunStatus::Failed, Some(&outcome));
    anyhow!("{why}")
}

/// A refusal the run's resume can answer (its grants or its policy changed,
/// and the error says how to accept that): the run is left `interrupted`,
/// started or not, so that the resume the error names can succeed.
fn parked(db: &Db, run: &RunRecord, e: &LaunchError) -> anyhow::Error {
    let _ = db.finish_driving(&run.id, RunStatus::Interrupted, None);
    anyhow!("{:#}", e.error)
}

/// Whether a run standing at `next` takes an answer (it asked) or a tick (it
/// waits for events outside a turn).
pub fn takes(next: &Next, kind: InboxKind) -> bool {
    matches!(
        (next, kind),
        (
            Next::Act {
                decision: Decision::Ask(_),
                ..
            },
            InboxKind::Answer
        ) | (
            Next::Act {
                decision: Decision::Pass,
                after_turn: false,
                ..
            },
            InboxKind::Tick
        )
    )
}

/// Drive one run from where the store says it stands until it ends, parks, or is stopped.
async fn drive(server: &Arc<Server>, q: &Queued, stop: Arc<Stop>) -> Result<()> {
    let db = server.data.open_db()?;
    drive_with(server, &db, q, stop, false).await
}

/// [`drive`] through `db`. `claimed`: `db` holds the run by a fenced claim
/// (`loopbox worker`, `db/claim.rs`), so it is not taken again here, and every
/// write is checked against the claim's epoch.
pub(super) async fn drive_with(
    server: &Arc<Server>,
    db: &Db,
    q: &Queued,
    stop: Arc<Stop>,
    claimed: bool,
) -> Result<()> {
    let db = db.clone();
    let run = db.existing_run(&q.run)?;
    // Cancelled, or taken up some other way, since it was queued (or claimed).
    let ours = if claimed {
        db.fence_of(&run.id).is_some() && run.status == RunStatus::Running
    } else {
        run.status == RunStatus::Queued
    };
    if !ours {
        return Ok(());
    }
    // What the resume that queued it asked, as recorded with the run (a worker
    // that claimed it has nothing else to go by). Taken by this drive alone:
    // one that stops before acting on it parks the run again, asking anew,
    // rather than leave an acceptance for a later change nobody accepted.
    let recorded = match db.resume_with(&run.id)? {
        Some(json) => {
            db.clear_resume_with(&run.id)?;
            serde_json::from_str::<Continue>(&json).with_context(|| {
                format!(
                    "failed to read what the last resume of run {} asked: resume it again",
                    run.id
                )
            })?
        }
        None => Continue::default(),
    };
    let how = q.how.or(&recorded);
    crate::journal::crashpoint::panic_at("drive");
    let tenant = server
        .tenants
        .named(&q.tenant)
        .context("the run's tenant is gone from the server config")?
        .clone();
    let workspace: PathBuf = run
        .place
        .workspace
        .clone()
        .context("the run has no workspace recorded")?;
    // Checked again now: a root's contents may have changed since the run was accepted.
    let checked = workspace
        .canonicalize()
        .map_err(anyhow::Error::from)
        .and_then(|w| tenant.inside(&w).map(|_| w))
        .with_context(|| format!("workspace `{}` cannot be used", workspace.display()));
    let workspace = match checked {
        Ok(w) => w,
        Err(e) => return Err(launch_failed(&db, &run, &LaunchError::usage(e))),
    };
    // The tenant's config as the server keeps it, within the tenant's bounds
    // (checked again: the config or the policy file may have changed since),
    // the grants held to the run's and the policy compared, as `runs resume` does.
    let how_to_accept_config = format!(
        "resume it accepting the change (`POST /api/v1/runs/{}/resume` with {{\"accept_config_change\": true}})",
        run.id
    );
    let changes = Changes {
        accept_config: how.accept_config_change,
        how_to_accept_config: &how_to_accept_config,
        allow_policy: how.allow_policy_change,
        how_to_allow_policy: "resume with {\"allow_policy_change\": true}",
    };
    let served = Served {
        server,
        tenant: &tenant,
    };
    let trust = Trust::TenantConfig(&served);
    // Loading compiles on a cache miss (seconds for a Python policy): off the async workers.
    let resumed = tokio::task::block_in_place(|| {
        lifecycle::resume(
            &trust,
            &workspace,
            &db,
            &run,
            &changes,
            Some(&server.runtime),
        )
    });
    let Resumed {
        prepared, policy, ..
    } = match resumed {
        Ok(r) => r,
        // Refused until the change is accepted: left for the resume the error names.
        Err(e) if e.kind == Failed::Changed => return Err(parked(&db, &run, &e)),
        Err(e) if e.kind == Failed::Internal => return Err(e.error),
        Err(e) => return Err(launch_failed(&db, &run, &e)),
    };
    if !claimed && let Err(holder) = db.acquire(&run.id)? {
        anyhow::bail!(
            "run {} is being driven by another loopbox process (pid {} on {})",
            run.id,
            holder.pid,
            holder.host
        );
    }
    let run = db.existing_run(&run.id)?;
    let mut next = resume_point(&db, &run)?;
    // An answer or tick accepted while the run waited: delivered only where it still fits.
    let inbox = server.store.inbox(&run.id)?;
    if let Some(i) = &inbox {
        let last = db.last_event(&run.id)?.map(|e| e.seq).unwrap_or(0);
        let fits = last == i.after_seq && takes(&next, i.kind);
        if fits {
            next = Next::Deliver(match i.kind {
                InboxKind::Answer => Event::UserInput(i.payload.clone()),
                InboxKind::Tick => Event::Tick(i.payload.clone()),
            });
        } else {
            server.store.clear_inbox(&run.id, i.after_seq)?;
        }
    }
    let fresh = db.last_event(&run.id)?.is_none();
    let drive = Drive {
        db: db.clone(),
        run,
        policy,
        ui: Ui::quiet(),
        asking: Asking::Nobody,
        asker: &NoAsker,
        banner: fresh,
        resend_turn: how.resend_turn,
        // A sleeping run gives its slot back; the sweep wakes it when due.
        park_sleeps: true,
    };
    let ended = prepared.drive_async(drive, next, stop).await;
    // Delivered once the run moved past where the answer was accepted; kept otherwise.
    if let Some(i) = inbox {
        let last = db.last_event(&q.run)?.map(|e| e.seq).unwrap_or(0);
        if last != i.after_seq {
            server.store.clear_inbox(&q.run, i.after_seq)?;
        }
    }
    ended.map(|_| ()).map_err(|e| e.error)
}
