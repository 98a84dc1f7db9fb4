//! `loopbox worker`: drives the runs of a shared PostgreSQL store, beside
//! other workers on this machine or others. A worker reads the same server
//! config as `loopbox serve` (its tenants, and the workspace roots each may
//! use: a worker serves only the tenants it declares, so a root must exist on
//! its machine, through a shared filesystem or a per-machine copy), claims
//! runnable runs with fenced leases (`db/claim.rs`), and drives each exactly
//! as the server would (`sched::drive_with`).
//!
//! Every held run's lease is renewed every TTL/3; a renewal that fails (the
//! lease was taken over while this worker was paused or cut off) stops the
//! run's guest and kills its commands, and the fence refuses whatever the run
//! still tries to write. SIGTERM drains: no more claims, the held runs stop
//! where they stand, and each is handed back (queued) for another worker.
//!
//! A worker cut off from the store (a network partition, a PostgreSQL that
//! stopped answering) cannot learn that its lease was taken over, and its
//! renewal may hang rather than fail. So a watchdog thread of its own stops
//! each held run whose lease was last renewed a TTL ago, when another worker
//! may claim it, whatever the renewal is doing: the run's commands are killed
//! instead of writing into the workspace beside its new holder's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::sched::{Continue, Queued, drive_with};
use super::{Options, Server, Setup};
use crate::db::claim::{ClaimFilter, LeaseLost, Renewal};
use crate::db::{Db, RunStatus};
use crate::limits::stop::{Stop, StopReason};

/// How a worker works (`loopbox worker` flags).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Runs driven at once.
    pub slots: u32,
    /// Only these tenants' runs (none: every tenant of the config).
    pub tenants: Vec<String>,
    /// The lease: taken over by another worker this long after the last renewal.
    pub ttl_ms: i64,
    /// How often to look for runnable runs when nothing wakes the worker.
    pub poll_ms: u64,
}

impl Default for WorkerOptions {
    fn default() -> WorkerOptions {
        WorkerOptions {
            slots: 4,
            tenants: Vec::new(),
            ttl_ms: crate::db::claim::DEFAULT_TTL_MS,
            poll_ms: 500,
        }
    }
}

/// Work until SIGTERM or SIGINT; `ready` is told the worker's id once it claims.
pub async fn work(opts: &Options, w: WorkerOptions, ready: impl FnOnce(&str)) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let setup = Setup::open(opts)?;
    // The runs' messages name the server (`loopbox runs approve ID --server URL`).
    let env = std::env::var("LOOPBOX_SERVER").ok();
    let s = &setup.config.server;
    let listen = s.listen.unwrap_or_else(|| {
        super::config::DEFAULT_LISTEN
            .parse()
            .expect("a valid address")
    });
    if let Some(url) = super::url::of_worker(s.url.as_deref(), env.as_deref(), listen) {
        crate::ui::set_server_url(url);
    }
    if !setup.data.is_shared() {
        bail!(
            "loopbox worker drives the runs of a shared store: set LOOPBOX_STORE=postgres://USER:PASSWORD@HOST:PORT/DB (or give --store postgres://USER@HOST:PORT/DB, with no password)"
        );
    }
    let mut tenants = w.tenants.clone();
    for t in &tenants {
        if setup.tenants.get(t).is_none() {
            bail!(
                "tenant `{t}` is not in this worker's config: declare it (with its roots) under [tenants.{t}], or leave --tenant out"
            );
        }
    }
    if tenants.is_empty() {
        tenants = setup.tenants.names().map(String::from).collect();
    }
    let mut term = signal(SignalKind::terminate()).context("failed to catch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("failed to catch SIGINT")?;
    let server = Arc::new(Server::new(setup, "127.0.0.1:0".parse()?)?);
    // The handle that claims, and that every held run writes through: its claims are its fences.
    let db = server.data.open_db()?;
    // As a standalone run's lease reads (`host pid start-time`), so listings show who holds a run.
    let id = crate::db::lease::Owner::me().to_string();
    let held: Arc<Mutex<BTreeMap<String, Held>>> = Arc::default();
    let ttl = Duration::from_millis(w.ttl_ms as u64);
    // A store that does not answer within two leases has let them go: give up
    // on it then (never below the server's idle-in-transaction limit, which
    // ends a stalled writer that a wait for its lock may be queued behind).
    crate::db::engine::postgres::set_answer_deadline((2 * ttl).max(ANSWER_DEADLINE_MIN));
    watch_leases(Arc::downgrade(&held), ttl);
    // Each tenant's max_running holds across every worker (the claim counts
    // the store's live leases), as it does on one server.
    let max_running: std::collections::HashMap<String, u32> = tenants
        .iter()
        .filter_map(|t| Some((t.clone(), server.tenants.get(t)?.max_running)))
        .collect();
    let filter = ClaimFilter {
        tenants,
        limit: 0,
        max_running,
    };
    let renew_every = Duration::from_millis((w.ttl_ms / 3).max(1) as u64);
    // Woken at once when a run becomes runnable; the poll below is the fallback.
    let runnable = db
        .listen_runnable()?
        .unwrap_or_else(|| Arc::new(tokio::sync::Notify::new()));
    let mut last_renewal = std::time::Instant::now();
    // Set while the store is out of reach: how long to wait before claiming again.
    let mut backoff: Option<Duration> = None;
    ready(&id);
    loop {
        let free = (w.slots as usize).saturating_sub(lock(&held).len());
        if free > 0 {
            let filter = ClaimFilter {
                limit: free,
                ..filter.clone()
            };
            // The claim is a renewal: the time taken before it was written.
            let claimed_at = Instant::now();
            // Off this task, raced with the signals: a store out of reach holds
            // a call for up to its answer deadline, and SIGTERM must not wait.
            let claiming = {
                let (db, id, ttl_ms) = (db.clone(), id.clone(), w.ttl_ms);
                tokio::task::spawn_blocking(move || db.claim(&id, ttl_ms, &filter))
            };
            let claimed = tokio::select! {
                done = claiming => done.unwrap_or_else(|e| Err(anyhow::anyhow!("the claim failed: {e}"))),
                _ = term.recv() => break,
                _ = int.recv() => break,
            };
            let claims = match claimed {
                Ok(claims) => {
                    backoff = None;
                    claims
                }
                // The store is out of reach (PostgreSQL restarting, the network cut):
                // the next call connects again; until one gets through, wait longer each time.
                Err(e) => {
                    let next = backoff.map_or(RECONNECT_FIRST, |b| (b * 2).min(RECONNECT_MAX));
                    crate::errln!(
                        "loopbox worker: claiming runs failed, trying again in {} ms: {e:#}",
                        next.as_millis()
                    );
                    backoff = Some(next);
                    Vec::new()
                }
            };
            for c in claims {
                let stop = Arc::new(Stop::new());
                lock(&held).insert(
                    c.run.clone(),
                    Held {
                        stop: stop.clone(),
                        // The claim is a renewal: taken before the claim was written.
                        renewed: claimed_at,
                    },
                );
                let (server, db, held) = (server.clone(), db.clone(), held.clone());
                tokio::spawn(async move {
                    let driving = {
                        let (server, db, run, epoch, stop) = (
                            server.clone(),
                            db.clone(),
                            c.run.clone(),
                            c.epoch,
                            stop.clone(),
                        );
                        super::sched::unwound(async move {
                            drive_claimed(&server, &db, &run, epoch, stop).await
                        })
                    };
                    // A panic fails the run, and frees its slot and its lease's renewals.
                    if let Err(panicked) = driving.await {
                        super::sched::fail_panicked(&db, &c.run, &panicked, true);
                        db.forget_fence(&c.run, c.epoch);
                    }
                    // Only its own entry: this worker may have claimed the run
                    // again after its lease ran out, and that drive is held now.
                    let mut held = lock(&held);
                    if held
                        .get(&c.run)
                        .is_some_and(|h| Arc::ptr_eq(&h.stop, &stop))
                    {
                        held.remove(&c.run);
                    }
                });
            }
        }
        if last_renewal.elapsed() >= renew_every {
            last_renewal = std::time::Instant::now();
            let renewing = {
                let (server, db, id, held) = (server.clone(), db.clone(), id.clone(), held.clone());
                let (slots, ttl_ms) = (w.slots, w.ttl_ms);
                tokio::task::spawn_blocking(move || renew(&server, &db, &id, &held, slots, ttl_ms))
            };
            tokio::select! {
                _ = renewing => {}
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        let wait = backoff.unwrap_or(Duration::from_millis(w.poll_ms).min(renew_every));
        tokio::select! {
            _ = runnable.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    // Drain: stop the held runs where they stand; each is handed back as it ends.
    let n = {
        let held = lock(&held);
        for h in held.values() {
            h.stop.request(StopReason::Interrupted);
        }
        held.len()
    };
    crate::errln!("loopbox worker: stopping: {n} run(s) stop where they stand and are handed back");
    let draining = Instant::now();
    while !lock(&held).is_empty() {
        if draining.elapsed() >= ttl {
            // Stuck in a store that does not answer: their leases run out and
            // other workers take them over; their commands were stopped above.
            crate::errln!(
                "loopbox worker: {} run(s) could not be handed back within the lease ({} ms); they are taken over once it runs out",
                lock(&held).len(),
                ttl.as_millis()
            );
            break;
        }
        // Not renewed meanwhile: a run handed back within its lease keeps its
        // epoch, and one that is not is taken over once the lease runs out.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Stopped, holding nothing: gone from the workers' listing (a worker
    // killed instead, or whose store is out of reach, is forgotten later).
    let leaving = tokio::task::spawn_blocking(move || db.forget_worker(&id));
    match tokio::time::timeout(LEAVE_WAIT, leaving).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => {
            crate::errln!("loopbox worker: leaving the workers' listing failed: {e:#}")
        }
        _ => crate::errln!(
            "loopbox worker: the store did not answer in {} s; the workers' listing forgets this worker later",
            LEAVE_WAIT.as_secs()
        ),
    }
    Ok(())
}

/// A worker whose last heartbeat is older than this many of the TTL (this
/// worker's) is taken for dead and its row removed from `workers`: 150 s with
/// the default 15 s lease. Its runs were taken over long before (2 x TTL).
const DEAD_AFTER_TTLS: i64 = 10;

/// How long a stopping worker waits to remove its row from the workers' listing.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// The least a worker waits for the store's answer (see `work`): above
/// PostgreSQL's `idle_in_transaction_session_timeout` the store sets (10 s).
const ANSWER_DEADLINE_MIN: Duration = Duration::from_secs(12);

/// The first wait after a failed claim (the store out of reach), doubled at
/// each failure up to [`RECONNECT_MAX`]: a restarted PostgreSQL is found again
/// within about that long once it accepts connections, without a worker
/// fleet hammering it meanwhile.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A run this worker drives: how to stop it, and when its lease was last
/// renewed (the time before the renewal was sent, so never later than the
/// expiry the store holds).
struct Held {
    stop: Arc<Stop>,
    renewed: Instant,
}

/// Stop every held run whose lease was last renewed `ttl` ago or more: from
/// then on another worker may hold it. A thread of its own, so a renewal
/// that hangs on a dead connection (a partition drops packets; TCP may wait
/// minutes to say so) cannot keep this one from acting. Ends with the worker.
fn watch_leases(held: std::sync::Weak<Mutex<BTreeMap<String, Held>>>, ttl: Duration) {
    let every = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(200));
    let spawned = std::thread::Builder::new()
        .name("loopbox-lease-watch".into())
        .spawn(move || {
            while let Some(held) = held.upgrade() {
                for (run, h) in lock(&held).iter() {
                    if h.renewed.elapsed() >= ttl && h.stop.requested().is_none() {
                        crate::errln!(
                            "loopbox worker: run {run}: its lease could not be renewed for {} ms (the store is out of reach) and may be another worker's now; stopping it and killing its commands",
                            ttl.as_millis()
                        );
                        h.stop.request(StopReason::Interrupted);
                    }
                }
                drop(held);
                std::thread::sleep(every);
            }
        });
    if let Err(e) = spawned {
        crate::errln!("loopbox worker: failed to start the lease watchdog: {e}");
    }
}

/// Renew every held run's lease; stop each one whose lease was taken over.
/// Report the worker with what it holds.
fn renew(
    server: &Server,
    db: &Db,
    id: &str,
    held: &Mutex<BTreeMap<String, Held>>,
    slots: u32,
    ttl_ms: i64,
) {
    let runs: Vec<(String, Arc<Stop>)> = lock(held)
        .iter()
        .map(|(r, h)| (r.clone(), h.stop.clone()))
        .collect();
    for (run, stop) in &runs {
        let sent = Instant::now();
        match db.heartbeat(run, ttl_ms) {
            Ok(Renewal::Renewed) => {
                if let Some(h) = lock(held).get_mut(run) {
                    h.renewed = sent;
                }
            }
            // Its drive ended since the list was taken.
            Ok(Renewal::Released) => {}
            Ok(Renewal::TakenOver) => {
                crate::errln!(
                    "loopbox worker: run {run}: its lease was taken over; stopping it (nothing more of it is recorded here)"
                );
                stop.request(StopReason::Interrupted);
            }
            // The store is out of reach: the lease runs out unless a later renewal gets through.
            Err(e) => {
                crate::errln!("loopbox worker: run {run}: renewing its lease failed: {e:#}")
            }
        }
    }
    let names: Vec<String> = runs.into_iter().map(|(r, _)| r).collect();
    let host = crate::db::lease::Owner::me().host;
    if let Err(e) = db.report_worker(id, &host, slots, &names) {
        crate::errln!("loopbox worker: reporting to the store failed: {e:#}");
    }
    match server
        .store
        .forget_dead_workers(&format!("worker:{id}"), DEAD_AFTER_TTLS * ttl_ms)
    {
        Ok(gone) if !gone.is_empty() => crate::errln!(
            "loopbox worker: forgot {} worker(s) without a heartbeat for {DEAD_AFTER_TTLS} x TTL: {}",
            gone.len(),
            gone.join(", ")
        ),
        Ok(_) => {}
        Err(e) => crate::errln!("loopbox worker: forgetting dead workers failed: {e:#}"),
    }
}

/// How many drives of one run may fail (an error that is not a lost lease)
/// before workers stop claiming it: it is left `interrupted` for a person.
pub const DRIVE_ATTEMPTS: u64 = 5;

/// Leave the run `interrupted` once [`DRIVE_ATTEMPTS`] of its drives have
/// failed, rather than claim it again at every lease's end forever. Its log
/// says so; `loopbox runs resume` gives it one more try.
fn give_up_if_failing(db: &Db, run: &str) {
    let failed = match db.log_lines_starting(run, "error", super::DRIVE_FAILED) {
        Ok(n) => n,
        Err(e) => {
            crate::errln!("loopbox worker: run {run}: {e:#}");
            return;
        }
    };
    if failed < DRIVE_ATTEMPTS {
        return;
    }
    super::sched::log_line(
        db,
        run,
        "error",
        format!(
            "workers stopped trying: {failed} drives of this run failed (the errors above); it stays interrupted until `loopbox runs resume {run}` once the cause is fixed"
        ),
    );
    if let Err(e) = db.finish_driving(run, RunStatus::Interrupted, None) {
        crate::errln!("loopbox worker: run {run}: {e:#}");
    }
}

/// Drive one claimed run until it ends, parks or is stopped; a run stopped by
/// a drain is handed back (queued) for another worker.
async fn drive_claimed(server: &Arc<Server>, db: &Db, run: &str, epoch: i64, stop: Arc<Stop>) {
    let tenant = match db.existing_run(run) {
        Ok(r) => r.place.tenant.unwrap_or_default(),
        Err(e) => {
            crate::errln!("loopbox worker: run {run}: {e:#}");
            return;
        }
    };
    let q = Queued {
        run: run.to_string(),
        tenant,
        how: Continue::default(),
    };
    let driven = drive_with(server, db, &q, stop.clone(), true).await;
    match &driven {
        Err(e) if crate::error::find::<LeaseLost>(e).is_some() => {
            // Another worker has it: nothing more is written for it from here.
            crate::errln!("loopbox worker: run {run}: {e:#}");
        }
        Err(e) => {
            server.note_failure_on(db, run, e);
            give_up_if_failing(db, run);
        }
        Ok(()) => {}
    }
    db.forget_fence(run, epoch);
    if stop.requested() == Some(StopReason::Interrupted) {
        // Stopped by a drain: queued again, unless another worker's claim came
        // since (a lost lease), which the epoch tells.
        let _ = tokio::task::block_in_place(|| db.hand_back(run, epoch));
    }
}
