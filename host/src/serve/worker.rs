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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::sched::{Continue, Queued, drive_with};
use super::{Options, Server, Setup};
use crate::db::Db;
use crate::db::claim::{ClaimFilter, LeaseLost};
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
    if !setup.data.is_shared() {
        bail!(
            "loopbox worker drives the runs of a shared store: give --store postgres://USER:PASSWORD@HOST:PORT/DB (or set LOOPBOX_STORE)"
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
    let held: Arc<Mutex<BTreeMap<String, Arc<Stop>>>> = Arc::default();
    let filter = ClaimFilter { tenants, limit: 0 };
    let renew_every = Duration::from_millis((w.ttl_ms / 3).max(1) as u64);
    // Woken at once when a run becomes runnable; the poll below is the fallback.
    let runnable = db
        .listen_runnable()?
        .unwrap_or_else(|| Arc::new(tokio::sync::Notify::new()));
    let mut last_renewal = std::time::Instant::now();
    // Set while the store is out of reach: how long to wait before claiming again.
    let mut backoff: Option<Duration> = None;
    // Tenants found at their max_running, not claimed from until then.
    let mut full: BTreeMap<String, std::time::Instant> = BTreeMap::new();
    let poll = Duration::from_millis(w.poll_ms);
    ready(&id);
    loop {
        let free = (w.slots as usize).saturating_sub(lock(&held).len());
        full.retain(|_, until| *until > std::time::Instant::now());
        if free > 0 && backoff.is_none() {
            // Tenants at their max_running are not claimed from (the check after
            // each claim is what guarantees it; this spares most hand-backs).
            match tokio::task::block_in_place(|| server.store.running_by_tenant()) {
                Ok(running) => {
                    for (t, n) in running {
                        if server
                            .tenants
                            .get(&t)
                            .is_some_and(|t| n >= u64::from(t.max_running))
                        {
                            full.insert(t, std::time::Instant::now() + poll);
                        }
                    }
                }
                Err(e) => crate::errln!("loopbox worker: counting the running runs failed: {e:#}"),
            }
        }
        let open: Vec<String> = filter
            .tenants
            .iter()
            .filter(|t| !full.contains_key(*t))
            .cloned()
            .collect();
        // Every tenant at its max_running: nothing to claim (an empty list would mean any).
        if free > 0 && !open.is_empty() {
            let filter = ClaimFilter {
                limit: free,
                tenants: open,
            };
            let claims = match tokio::task::block_in_place(|| db.claim(&id, w.ttl_ms, &filter)) {
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
                if over_max_running(&server, &db, &c, &mut full, poll) {
                    continue;
                }
                let stop = Arc::new(Stop::new());
                lock(&held).insert(c.run.clone(), stop.clone());
                let (server, db, held) = (server.clone(), db.clone(), held.clone());
                tokio::spawn(async move {
                    drive_claimed(&server, &db, &c.run, stop).await;
                    lock(&held).remove(&c.run);
                });
            }
        }
        if last_renewal.elapsed() >= renew_every {
            last_renewal = std::time::Instant::now();
            renew(&server, &db, &id, &held, w.slots, w.ttl_ms);
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
        for stop in held.values() {
            stop.request(StopReason::Interrupted);
        }
        held.len()
    };
    crate::errln!("loopbox worker: stopping: {n} run(s) stop where they stand and are handed back");
    while !lock(&held).is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if last_renewal.elapsed() >= renew_every {
            last_renewal = std::time::Instant::now();
            renew(&server, &db, &id, &held, w.slots, w.ttl_ms);
        }
    }
    tokio::task::block_in_place(|| {
        db.report_worker(&id, &crate::db::lease::Owner::me().host, 0, &[])
    })?;
    Ok(())
}

/// A worker whose last heartbeat is older than this many of the TTL (this
/// worker's) is taken for dead and its row removed from `workers`: 150 s with
/// the default 15 s lease. Its runs were taken over long before (2 x TTL).
const DEAD_AFTER_TTLS: i64 = 10;

/// The first wait after a failed claim (the store out of reach), doubled at
/// each failure up to [`RECONNECT_MAX`]: a restarted PostgreSQL is found again
/// within about that long once it accepts connections, without a worker
/// fleet hammering it meanwhile.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Whether claim `c` would take its tenant past `max_running`; if so it is
/// handed back. The count is read after the claim committed, so of two
/// workers that claim the tenant's last slot at once the later one sees both
/// and backs off (both may, and claim again at their next look): never more
/// than `max_running` driven at once.
fn over_max_running(
    server: &Server,
    db: &Db,
    c: &crate::db::claim::Claim,
    full: &mut BTreeMap<String, std::time::Instant>,
    poll: Duration,
) -> bool {
    let check = || -> Result<Option<String>> {
        let tenant = db.existing_run(&c.run)?.place.tenant.unwrap_or_default();
        let Some(max) = server
            .tenants
            .get(&tenant)
            .map(|t| u64::from(t.max_running))
        else {
            return Ok(None);
        };
        Ok((server.store.running_runs(&tenant)? > max).then_some(tenant))
    };
    let check = || match check() {
        Ok(Some(tenant)) => {
            // Not claimed from again for a poll's time: a hand-back wakes every
            // worker, and the tenant's runs would go round them all meanwhile.
            full.insert(tenant, std::time::Instant::now() + poll);
            true
        }
        Ok(None) => false,
        Err(e) => {
            crate::errln!("loopbox worker: run {}: {e:#}", c.run);
            true
        }
    };
    // Unknown (an error): given back rather than driven past a limit; claimed again later.
    let over = tokio::task::block_in_place(check);
    if over {
        let _ = tokio::task::block_in_place(|| db.hand_back(&c.run, c.epoch));
    }
    over
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Renew every held run's lease; stop each one whose lease was taken over.
/// Report the worker with what it holds.
fn renew(
    server: &Server,
    db: &Db,
    id: &str,
    held: &Mutex<BTreeMap<String, Arc<Stop>>>,
    slots: u32,
    ttl_ms: i64,
) {
    let runs: Vec<(String, Arc<Stop>)> = lock(held)
        .iter()
        .map(|(r, s)| (r.clone(), s.clone()))
        .collect();
    tokio::task::block_in_place(|| {
        for (run, stop) in &runs {
            match db.heartbeat(run, ttl_ms) {
                Ok(true) => {}
                Ok(false) => {
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
    });
}

/// Drive one claimed run until it ends, parks or is stopped; a run stopped by
/// a drain is handed back (queued) for another worker.
async fn drive_claimed(server: &Arc<Server>, db: &Db, run: &str, stop: Arc<Stop>) {
    let tenant = match db.existing_run(run) {
        Ok(r) => r.place.tenant.unwrap_or_default(),
        Err(e) => {
            crate::errln!("loopbox worker: run {run}: {e:#}");
            return;
        }
    };
    let epoch = db.fence_of(run);
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
        Err(e) => server.note_failure(run, e),
        Ok(()) => {}
    }
    db.forget_fence(run);
    if let Some(epoch) = epoch
        && stop.requested() == Some(StopReason::Interrupted)
    {
        // Stopped by a drain: queued again, unless another worker's claim came
        // since (a lost lease), which the epoch tells.
        let _ = tokio::task::block_in_place(|| db.hand_back(run, epoch));
    }
}
