//! Leases that fail over (schema 10), for runs driven by `loopbox worker`
//! processes on several machines sharing one store: a lease has an owner, an
//! expiry (`lease_expires`, kept fresh by heartbeats) and an epoch that grows
//! at each claim. A run is claimable when it is queued, or when its lease
//! expired (its worker died, paused or lost the network).
//!
//! Fencing: a handle that claimed a run remembers the epoch, and every write
//! it makes for that run ([`Db::write_run`]: events, intents, results, state,
//! status, log, spend, snapshots) first checks, in the same transaction, that
//! the run's epoch is still that one, locking the run's row until the commit.
//! A worker that lost its lease therefore commits nothing more; the error it
//! gets ([`LeaseLost`]) tells it to stop the run. Without a claim (a
//! standalone run on SQLite) writes are not fenced, and the same-host lease
//! of `lease.rs` applies as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use super::engine::{Engine, Scope, Value, params};
use super::{Db, RunStatus, now_ms};

/// The default lease: taken over by another worker once this long passes
/// without a heartbeat.
pub const DEFAULT_TTL_MS: i64 = 15_000;

/// The runs a handle holds by claim, with their epochs (shared by its clones).
pub(crate) type Fences = Arc<Mutex<HashMap<String, i64>>>;

/// A run this handle claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub run: String,
    pub epoch: i64,
    /// Whether another worker held it before (its lease expired): the run
    /// resumes from its journal.
    pub takeover: bool,
}

/// A write refused because the run's lease is no longer this handle's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the lease of run `{run}` was taken over (this worker held epoch {epoch}): nothing of this step was recorded, and this worker stops the run"
)]
pub struct LeaseLost {
    pub run: String,
    pub epoch: i64,
}

/// Which runs [`Db::claim`] may take.
#[derive(Debug, Clone, Default)]
pub struct ClaimFilter {
    /// Only these tenants' runs (none: any).
    pub tenants: Vec<String>,
    /// At most this many.
    pub limit: usize,
    /// Each tenant's `max_running`: no more of its runs are claimed while
    /// that many hold a live lease, whichever workers hold them.
    pub max_running: HashMap<String, u32>,
}

/// A fenced write's check on PostgreSQL: locks the run's row (as an update
/// would, without writing a new version of it) while its epoch is still the
/// claim's, and divides by zero when it is not.
const FENCE_ON_POSTGRES: &str = "SELECT 1 / (SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id = ?1 AND lease_epoch = ?2 FOR NO KEY UPDATE) held)";

/// Whether `e` is [`FENCE_ON_POSTGRES`] failing (no other statement divides).
fn is_fence_failure(e: &anyhow::Error) -> bool {
    super::engine::Error::failed_with(e, &tokio_postgres::error::SqlState::DIVISION_BY_ZERO)
}

/// Held by a claim that counts tenants' running runs, until it commits
/// (the key spells "claims").
const CLAIMS_COUNT_LOCK: &str = "SELECT pg_advisory_xact_lock(109317141917043)";

impl Db {
    /// Claim up to `filter.limit` runnable runs for `owner`, each with a lease
    /// of `ttl_ms`: queued runs, and runs whose lease expired, oldest first.
    /// On PostgreSQL the candidates are read `FOR UPDATE SKIP LOCKED`, so
    /// workers claiming at once never wait on, or take, the same run.
    pub fn claim(&self, owner: &str, ttl_ms: i64, filter: &ClaimFilter) -> Result<Vec<Claim>> {
        let skip_locked = match self.engine() {
            Engine::Postgres => " FOR UPDATE SKIP LOCKED",
            Engine::Sqlite => "",
        };
        let limit = filter.limit.max(1) as i64;
        // Every run this reads, it locks (or skips): claims go on in parallel
        // with one another and with the runs' own writers.
        let claims = self.write_in(Scope::Rows, "claim runs", |tx| {
            let now = now_ms();
            // Each tenant's room under its `max_running`, counted over every
            // worker's live leases (the write lock keeps the count true until
            // the commit): workers on several machines keep a tenant's limit
            // as one server does, so one tenant cannot take every slot.
            let mut room: HashMap<&str, i64> = HashMap::new();
            if !filter.max_running.is_empty() {
                // Claims run in parallel with the runs' writers, not with each
                // other's counts: two claimers counting at once would each see
                // the tenant's last slot free. SQLite's writers are one at a time.
                if self.engine() == Engine::Postgres {
                    tx.execute_batch(CLAIMS_COUNT_LOCK)?;
                }
                let running: HashMap<String, i64> = tx
                    .query(
                        "SELECT tenant, COUNT(*) FROM runs WHERE status = 'running' AND lease_expires IS NOT NULL AND lease_expires >= ?1 AND tenant IS NOT NULL GROUP BY tenant",
                        [now],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?
                    .into_iter()
                    .collect();
                for (t, max) in &filter.max_running {
                    room.insert(t, *max as i64 - running.get(t).copied().unwrap_or(0));
                }
            }
            let open: Vec<&String> = filter
                .tenants
                .iter()
                .filter(|t| room.get(t.as_str()).is_none_or(|r| *r > 0))
                .collect();
            if !filter.tenants.is_empty() && open.is_empty() {
                return Ok(Vec::new());
            }
            // The tenants are part of the query, never filtered after it: a LIMIT
            // taken first would let other tenants' older runs (or those of a tenant
            // at its limit) fill every candidate, so a worker serving `alpha` would
            // never see alpha's run behind four of beta's, and would lock their
            // rows from the workers that serve them. Only placeholders are written
            // into the SQL, never names.
            let tenant_in = if open.is_empty() {
                String::new()
            } else {
                let marks: Vec<String> = (0..open.len()).map(|i| format!("?{}", i + 3)).collect();
                format!(" AND tenant IN ({})", marks.join(", "))
            };
            let sql = format!(
                "SELECT id, lease_epoch, status, tenant FROM runs
                 WHERE (status = 'queued' OR (status = 'running' AND lease_expires IS NOT NULL AND lease_expires < ?1)){tenant_in}
                 ORDER BY updated_at, id LIMIT ?2{skip_locked}"
            );
            let mut values = vec![Value::Int(now), Value::Int(limit)];
            values.extend(open.iter().map(|t| Value::Text(t.to_string())));
            let candidates: Vec<(String, i64, String, Option<String>)> =
                tx.query(&sql, values, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            let mut claims = Vec::new();
            for (id, epoch, status, tenant) in candidates {
                if let Some(left) = tenant.as_deref().and_then(|t| room.get_mut(t)) {
                    // Full now: the rest of its runs wait for one of its runs to end.
                    if *left <= 0 {
                        continue;
                    }
                    *left -= 1;
                }
                let epoch = epoch + 1;
                tx.exec(
                    "UPDATE runs SET status = ?2, lease = ?3, lease_epoch = ?4, lease_expires = ?5, updated_at = ?6 WHERE id = ?1",
                    params![id, RunStatus::Running, owner, epoch, now + ttl_ms, now],
                )?;
                claims.push(Claim {
                    run: id,
                    epoch,
                    takeover: status == RunStatus::Running.as_str(),
                });
            }
            Ok(claims)
        })?;
        let mut fences = self.fences.lock().unwrap_or_else(|p| p.into_inner());
        for c in &claims {
            fences.insert(c.run.clone(), c.epoch);
        }
        Ok(claims)
    }

    /// Claim `run` itself for `owner` (`loopbox runs resume` on a shared
    /// store), as a worker would: unless it ended or a live lease holds it,
    /// its epoch grows and this handle's writes for it are fenced from now on.
    /// `None`: it ended, or is held (by the lease now on it, when there is one).
    pub fn claim_run(
        &self,
        owner: &str,
        ttl_ms: i64,
        run: &str,
    ) -> Result<Result<Claim, Option<String>>> {
        let claim = self.write("claim the run", |tx| {
            let now = now_ms();
            let (epoch, status, expires, lease): (i64, RunStatus, Option<i64>, Option<String>) = tx.query_row(
                "SELECT lease_epoch, status, lease_expires, lease FROM runs WHERE id = ?1",
                [run],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
            let held = status == RunStatus::Running && expires.is_some_and(|e| e >= now);
            if status.is_final() || held {
                return Ok(Err(lease.filter(|_| held)));
            }
            let changed = tx.exec(
                "UPDATE runs SET status = ?2, lease = ?3, lease_epoch = ?4, lease_expires = ?5, updated_at = ?6 WHERE id = ?1 AND lease_epoch = ?7",
                params![run, RunStatus::Running, owner, epoch + 1, now + ttl_ms, now, epoch],
            )?;
            if changed != 1 {
                return Ok(Err(None));
            }
            Ok(Ok(Claim {
                run: run.to_string(),
                epoch: epoch + 1,
                takeover: status == RunStatus::Running,
            }))
        })?;
        if let Ok(c) = &claim {
            self.fences
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(c.run.clone(), c.epoch);
        }
        Ok(claim)
    }

    /// A wake-up each time a run becomes runnable (PostgreSQL's `LISTEN`); none on SQLite.
    pub fn listen_runnable(&self) -> Result<Option<Arc<tokio::sync::Notify>>> {
        match &self.url {
            Some(url) => Ok(Some(super::engine::postgres::listen_runnable(url)?)),
            None => Ok(None),
        }
    }

    /// Extend the lease on `run` by `ttl_ms` from now, if this handle still
    /// holds a claim on it.
    pub fn heartbeat(&self, run: &str, ttl_ms: i64) -> Result<Renewal> {
        let Some(epoch) = self.fence_of(run) else {
            return Ok(Renewal::Released);
        };
        let changed = self.write_in(Scope::Run(run), "renew the run's lease", |tx| {
            Ok(tx.exec(
                "UPDATE runs SET lease_expires = ?3 WHERE id = ?1 AND lease_epoch = ?2",
                params![run, epoch, now_ms() + ttl_ms],
            )?)
        })?;
        // A lost lease stays remembered: every later write for the run is refused too.
        Ok(if changed == 1 {
            Renewal::Renewed
        } else {
            Renewal::TakenOver
        })
    }

    /// Give the run back, queued again for another worker (a draining worker
    /// hands back what it did not finish), if it is still as the claim at
    /// `epoch` left it: running, or stopped (interrupted) by this worker.
    pub fn hand_back(&self, run: &str, epoch: i64) -> Result<bool> {
        let changed = self.write_in(Scope::Run(run), "hand the run back", |tx| {
            let n = tx.exec(
                "UPDATE runs SET status = ?3, lease = NULL, lease_expires = NULL, updated_at = ?4 WHERE id = ?1 AND lease_epoch = ?2 AND status IN ('running', 'interrupted')",
                params![run, epoch, RunStatus::Queued, now_ms()],
            )?;
            notify_runnable(tx)?;
            Ok(n)
        })?;
        self.forget_fence(run, epoch);
        Ok(changed == 1)
    }

    /// The epoch this handle holds `run` at, if it claimed it.
    pub fn fence_of(&self, run: &str) -> Option<i64> {
        self.fences
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run)
            .copied()
    }

    /// The claim at `epoch` is over. Only that claim's fence goes: by the
    /// time a drive ends, this handle may have claimed the run again (parked,
    /// then queued by an approval a moment later), and the new drive's fence
    /// must stay, or its lease renewals fail and it is stopped as if taken over.
    pub(crate) fn forget_fence(&self, run: &str, epoch: i64) {
        let mut fences = self.fences.lock().unwrap_or_else(|p| p.into_inner());
        if fences.get(run) == Some(&epoch) {
            fences.remove(run);
        }
    }

    /// [`Db::write`] for a write a run's driver makes, which reads, then
    /// writes, only that run's rows ([`Scope::Run`]: writers of other runs
    /// commit in parallel on PostgreSQL). When this handle holds
    /// the run by claim, the run's epoch is checked first, in the same
    /// transaction, and the run's row stays locked until the commit, so a
    /// claim by another worker waits for it or comes after it.
    pub(crate) fn write_run<T>(
        &self,
        run: &str,
        what: &str,
        mut f: impl FnMut(&super::Conn) -> Result<T>,
    ) -> Result<T> {
        let Some(epoch) = self.fence_of(run) else {
            return self.write_in(Scope::Run(run), what, f);
        };
        let lost = || -> anyhow::Error {
            LeaseLost {
                run: run.to_string(),
                epoch,
            }
            .into()
        };
        self.write_in(Scope::Run(run), what, |tx| {
            // The run's row is locked until the commit (a claim skips it), and
            // its epoch checked. On PostgreSQL the check travels with the
            // transaction's first statement and, failed, fails that statement
            // (a division by zero), so no write of it can commit.
            let sql = match tx.engine() {
                Engine::Sqlite => {
                    "UPDATE runs SET lease_epoch = lease_epoch WHERE id = ?1 AND lease_epoch = ?2"
                }
                Engine::Postgres => FENCE_ON_POSTGRES,
            };
            if tx.defer(sql, params![run, epoch])? == Some(0) {
                return Err(lost());
            }
            f(tx).map_err(|e| if is_fence_failure(&e) { lost() } else { e })
        })
    }

    /// The worker `id`'s report: its slots, the runs it holds, and now as its
    /// heartbeat. Each worker process is a row of its own (`host pid
    /// start-time`): one that stops removes it ([`Db::forget_worker`]), and
    /// workers remove, audited, those silent for 10 x TTL
    /// (`serve::store::Store::forget_dead_workers`), so restarts and crash
    /// loops do not grow the table.
    pub fn report_worker(&self, id: &str, host: &str, slots: u32, held: &[String]) -> Result<()> {
        let held = serde_json::to_string(held).context("failed to list the held runs")?;
        self.write("report the worker", |tx| {
            let now = now_ms();
            tx.exec(
                "INSERT INTO workers (id, host, slots, held, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (id) DO UPDATE SET slots = excluded.slots, held = excluded.held, heartbeat_at = excluded.heartbeat_at",
                params![id, host, slots, held, now],
            )?;
            Ok(())
        })
    }

    /// Forget the worker `id` (it stopped, holding nothing).
    pub fn forget_worker(&self, id: &str) -> Result<()> {
        self.write("forget the worker", |tx| {
            tx.exec("DELETE FROM workers WHERE id = ?1", [id])?;
            Ok(())
        })
    }

    /// Every worker that reported, the most recent heartbeat first.
    pub fn workers(&self) -> Result<Vec<WorkerRecord>> {
        if !self.has_schema(super::schema::LEASES) {
            return Ok(Vec::new());
        }
        Ok(self.conn().query(
            "SELECT id, host, slots, held, started_at, heartbeat_at FROM workers ORDER BY heartbeat_at DESC, id",
            [],
            |r| {
                Ok(WorkerRecord {
                    id: r.get(0)?,
                    host: r.get(1)?,
                    slots: r.get(2)?,
                    held: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                    started_at_ms: r.get(4)?,
                    heartbeat_at_ms: r.get(5)?,
                })
            },
        )?)
    }
}

/// Tell the workers listening that a run became runnable (on PostgreSQL, when
/// the transaction commits; nothing on SQLite, whose runs one process drives).
pub(crate) fn notify_runnable(tx: &super::Conn) -> Result<()> {
    if tx.engine() == Engine::Postgres {
        tx.exec(
            &format!(
                "SELECT pg_notify('{}', '')",
                super::engine::postgres::RUNNABLE
            ),
            [],
        )?;
    }
    Ok(())
}

/// What renewing a run's lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// Another claim came since: the run must be stopped.
    TakenOver,
    /// This handle's drive of the run ended (parked, finished, handed back)
    /// since the renewal was planned: nothing to renew, nothing to stop.
    Released,
}

/// A worker as it last reported.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WorkerRecord {
    pub id: String,
    pub host: String,
    pub slots: u32,
    pub held: Vec<String>,
    pub started_at_ms: i64,
    pub heartbeat_at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{EventCommit, NewRun, RunOptions, RunPlace};

    crate::db::on_both_engines!(
        a_worker_that_lost_its_lease_commits_nothing_and_the_next_claim_has_a_higher_epoch,
        a_drive_that_ends_after_its_run_was_claimed_again_leaves_the_new_claim_fenced,
        workers_claiming_at_once_take_each_run_once,
        writers_of_one_run_racing_number_its_events_and_log_lines_once,
        a_worker_sees_its_tenants_runs_behind_any_number_of_others,
        a_stopped_worker_leaves_the_workers_table,
        a_worker_that_lost_its_lease_keeps_no_agent_conversation_of_the_run,
        a_tenants_agent_conversation_is_found_by_its_runs_only,
        a_tenant_at_its_max_running_takes_no_more_slots_from_any_worker,
        an_intent_of_a_worker_that_lost_its_lease_is_lease_lost_never_a_budget,
    );

    /// Two handles on one store, and run `r1` (tenant `t`) claimed through
    /// the first (worker `a`) with a lease of 100 ms; the filter that took it.
    fn claimed_by_a(db: Db) -> (Db, Db, ClaimFilter) {
        let a = db;
        let b = a.reopen().unwrap();
        queue(&a, "r1", "t");
        let all = ClaimFilter {
            limit: 1,
            ..Default::default()
        };
        assert_eq!(a.claim("a", 100, &all).unwrap().len(), 1);
        (a, b, all)
    }

    fn an_intent_of_a_worker_that_lost_its_lease_is_lease_lost_never_a_budget(db: Db) {
        use crate::db::journal::{Budget, JournalRow};
        let (a, b, all) = claimed_by_a(db);
        let intent = |seq| JournalRow {
            seq,
            kind: "shell".into(),
            request: "{}".into(),
            result: None,
        };
        let room = Budget {
            actions: Some(10),
            uncancelled: true,
            ..Default::default()
        };
        let seq = a
            .journal_intent("r1", (None, "{}"), &[], &intent(1), &room)
            .unwrap()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(b.claim("b", 60_000, &all).unwrap()[0].epoch, 2);
        // The new holder's view: one action spent; then the run is cancelled.
        b.request_cancel("r1").unwrap();
        let spent = Budget {
            actions: Some(1),
            ..room
        };
        // With room, with every budget spent, cancelled: the old holder is told
        // it lost the run (and stops it), whatever else would have refused.
        for budget in [&room, &spent] {
            for event in [(Some(seq), "{}"), (None, "{}")] {
                let e = a
                    .journal_intent("r1", event, &[], &intent(2), budget)
                    .unwrap_err();
                assert!(
                    crate::error::find::<LeaseLost>(&e).is_some(),
                    "{budget:?} {event:?}: {e:#}"
                );
            }
            let e = a.spend("r1", budget).unwrap_err();
            assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        }
        let e = a.journal_result("r1", seq, 1, "late", None).unwrap_err();
        assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        assert_eq!(b.journal("r1", seq).unwrap().len(), 1);
        assert_eq!(b.journal("r1", seq).unwrap()[0].result, None);
        assert_eq!(b.run("r1").unwrap().unwrap().actions, 1);
    }

    fn queue(db: &Db, id: &str, tenant: &str) {
        db.create_queued_run(
            NewRun {
                id,
                policy: "p",
                digest: "d",
                input: "{}",
                options: &RunOptions::default(),
                place: &RunPlace {
                    tenant: Some(tenant.into()),
                    ..Default::default()
                },
                status: RunStatus::Queued,
            },
            &Default::default(),
        )
        .unwrap();
    }

    fn event(n: i64) -> EventCommit {
        EventCommit {
            event: format!("{{\"n\":{n}}}"),
            decision: Some("\"pass\"".into()),
            ..Default::default()
        }
    }

    /// Issue 45's lost wake-up, on workers: a run parks, an approval queues
    /// it a moment later, and the same worker claims it again before the
    /// first drive has let go of its claim. The first drive's end must not
    /// take the second's fence (which made its renewals fail: the second
    /// drive was stopped as if taken over and the run left `interrupted`).
    fn a_drive_that_ends_after_its_run_was_claimed_again_leaves_the_new_claim_fenced(db: Db) {
        let (a, b, all) = claimed_by_a(db);
        a.finish_driving("r1", RunStatus::Waiting, None).unwrap();
        assert_eq!(a.fence_of("r1"), None);
        // The approval queues it; the same worker claims it again (epoch 2).
        b.set_status("r1", RunStatus::Queued, None).unwrap();
        assert_eq!(a.claim("a", 10_000, &all).unwrap()[0].epoch, 2);
        // The first drive lets go of epoch 1 only now.
        a.forget_fence("r1", 1);
        assert_eq!(a.fence_of("r1"), Some(2));
        assert_eq!(a.heartbeat("r1", 10_000).unwrap(), Renewal::Renewed);
        assert_eq!(a.commit_event("r1", &event(1)).unwrap(), 1);
        // And a drive's end forgets its own claim: a renewal planned before
        // it finds nothing to renew, and says so rather than "taken over".
        a.forget_fence("r1", 2);
        assert_eq!(a.fence_of("r1"), None);
        assert_eq!(a.heartbeat("r1", 10_000).unwrap(), Renewal::Released);
    }

    fn a_worker_that_lost_its_lease_commits_nothing_and_the_next_claim_has_a_higher_epoch(db: Db) {
        let a = db;
        let b = a.reopen().unwrap();
        queue(&a, "r1", "t");
        queue(&a, "other", "u");
        let only_t = ClaimFilter {
            tenants: vec!["t".into()],
            limit: 10,
            ..Default::default()
        };
        let claimed = a.claim("a", 200, &only_t).unwrap();
        assert_eq!(
            claimed,
            [Claim {
                run: "r1".into(),
                epoch: 1,
                takeover: false
            }]
        );
        assert_eq!(a.commit_event("r1", &event(1)).unwrap(), 1);
        // Held and fresh: nobody else takes it.
        assert!(b.claim("b", 200, &only_t).unwrap().is_empty());
        assert_eq!(a.heartbeat("r1", 200).unwrap(), Renewal::Renewed);
        std::thread::sleep(std::time::Duration::from_millis(300));
        // Expired: taken over, with the next epoch.
        let taken = b.claim("b", 10_000, &only_t).unwrap();
        assert_eq!(
            taken,
            [Claim {
                run: "r1".into(),
                epoch: 2,
                takeover: true
            }]
        );
        // The old holder commits nothing, whatever it tries, and learns it lost the run.
        let e = a.commit_event("r1", &event(2)).unwrap_err();
        assert_eq!(
            crate::error::find::<LeaseLost>(&e),
            Some(&LeaseLost {
                run: "r1".into(),
                epoch: 1
            }),
            "{e:#}"
        );
        assert_eq!(a.heartbeat("r1", 200).unwrap(), Renewal::TakenOver);
        let e = a.set_status("r1", RunStatus::Done, None).unwrap_err();
        assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        let e = a.finish_driving("r1", RunStatus::Failed, None).unwrap_err();
        assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        assert_eq!(a.events("r1").unwrap().len(), 1);
        // The new holder carries on from the journal.
        assert_eq!(b.commit_event("r1", &event(2)).unwrap(), 2);
        assert!(
            !a.hand_back("r1", 1).unwrap(),
            "not the old holder's to give"
        );
        assert!(b.hand_back("r1", 2).unwrap());
        assert_eq!(b.run("r1").unwrap().unwrap().status, RunStatus::Queued);
        assert_eq!(b.claim("b", 1000, &only_t).unwrap()[0].epoch, 3);
        // The other tenant's run was never claimed.
        assert_eq!(b.run("other").unwrap().unwrap().status, RunStatus::Queued);
    }

    /// Each event's and log line's number is read (the run's highest, plus
    /// one), then written: writers of one run on several connections must
    /// take turns, or two read the same number and one fails on the key.
    fn writers_of_one_run_racing_number_its_events_and_log_lines_once(db: Db) {
        db.create_run("r", "p", "d", "{}").unwrap();
        db.create_run("s", "p", "d", "{}").unwrap();
        let handles: Vec<Db> = (0..4).map(|_| db.reopen().unwrap()).collect();
        std::thread::scope(|s| {
            for (w, h) in handles.iter().enumerate() {
                s.spawn(move || {
                    for i in 0..25 {
                        let mut e = event(i);
                        e.log.push(crate::db::LogRecord {
                            at_ms: 0,
                            level: "info".into(),
                            source: "policy".into(),
                            message: format!("w{w} {i}"),
                        });
                        // Half of them on another run, which must not get in the way.
                        let run = if i % 2 == 0 { "r" } else { "s" };
                        h.commit_event(run, &e)
                            .unwrap_or_else(|e| panic!("writer {w}, event {i}: {e:#}"));
                    }
                });
            }
        });
        for (run, n) in [("r", 52), ("s", 48)] {
            let seqs: Vec<i64> = db.events(run).unwrap().iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "run {run}");
            assert_eq!(db.log(run).unwrap().len(), n as usize, "run {run}");
        }
    }

    /// On PostgreSQL a run's writer holds that run only: another run's writer,
    /// even through the same store handle, commits meanwhile, while the same run's next writer, and a writer of
    /// the whole store (a new run), wait until it commits.
    #[test]
    fn on_postgres_writers_of_different_runs_commit_in_parallel_and_of_one_run_in_turn() {
        use std::sync::mpsc;
        use std::time::Duration;
        let (_dir, db) = crate::db::testing::postgres();
        db.create_run("a", "p", "d", "{}").unwrap();
        db.create_run("b", "p", "d", "{}").unwrap();
        let (holder, same, store) = (
            db.reopen().unwrap(),
            db.reopen().unwrap(),
            db.reopen().unwrap(),
        );
        // The same handle as the holder's, as a worker's slots share one: it writes
        // on another of the handle's connections (`db/pool.rs`).
        let other = holder.clone();
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                holder
                    .write_run("a", "hold the run", |tx| {
                        tx.exec(
                            "INSERT INTO events (run_id, seq, at, event) VALUES ('a', 1, 0, '{}')",
                            [],
                        )?;
                        held_tx.send(()).unwrap();
                        // Not forever: a failed assertion below never releases it.
                        // (The server ends a session idle in a transaction after 10 s.)
                        let _ = release_rx.recv_timeout(Duration::from_secs(5));
                        Ok(())
                    })
                    .unwrap();
            });
            held.recv_timeout(Duration::from_secs(30)).unwrap();
            // Another run commits while `a` is held. (Before the store's writer
            // below starts waiting: PostgreSQL queues a shared lock behind an
            // exclusive one waiting for it, so that one is not starved.)
            assert_eq!(other.commit_event("b", &event(1)).unwrap(), 1);
            let (done_tx, done) = mpsc::channel();
            let done_same = done_tx.clone();
            s.spawn(move || {
                let seq = same
                    .commit_event("a", &event(2))
                    .unwrap_or_else(|e| panic!("{e:#}"));
                done_same.send(("same run", seq)).unwrap();
            });
            s.spawn(move || {
                store.create_run("c", "p", "d", "{}").unwrap();
                done_tx.send(("store", 0)).unwrap();
            });
            if let Ok(first) = done.recv_timeout(Duration::from_millis(500)) {
                panic!("a writer went ahead of the one holding run `a`: {first:?}");
            }
            release.send(()).unwrap();
            let mut finished: Vec<_> = (0..2)
                .map(|_| done.recv_timeout(Duration::from_secs(30)).unwrap())
                .collect();
            finished.sort();
            assert_eq!(finished, [("same run", 2), ("store", 0)]);
        });
    }

    fn workers_claiming_at_once_take_each_run_once(db: Db) {
        for i in 0..40 {
            queue(&db, &format!("r{i:02}"), "t");
        }
        let handles: Vec<Db> = (0..4).map(|_| db.reopen().unwrap()).collect();
        let claimed: Vec<Vec<String>> = std::thread::scope(|s| {
            let joins: Vec<_> = handles
                .iter()
                .enumerate()
                .map(|(w, h)| {
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        loop {
                            let got = h
                                .claim(
                                    &format!("w{w}"),
                                    60_000,
                                    &ClaimFilter {
                                        limit: 3,
                                        ..Default::default()
                                    },
                                )
                                .unwrap();
                            if got.is_empty() {
                                break mine;
                            }
                            mine.extend(got.into_iter().map(|c| c.run));
                        }
                    })
                })
                .collect();
            joins.into_iter().map(|j| j.join().unwrap()).collect()
        });
        let mut all: Vec<String> = claimed.concat();
        all.sort();
        let expected: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
        assert_eq!(all, expected, "each run claimed once: {claimed:?}");
        db.report_worker("w0", "h", 4, &claimed[0]).unwrap();
        let w = db.workers().unwrap();
        assert_eq!((w.len(), w[0].held.len()), (1, claimed[0].len()));
    }

    fn a_worker_sees_its_tenants_runs_behind_any_number_of_others(db: Db) {
        // Tenant u floods the queue first (and no worker of u is running).
        for i in 0..20 {
            queue(&db, &format!("u{i:02}"), "u");
        }
        queue(&db, "t1", "t");
        let only_t = ClaimFilter {
            tenants: vec!["t".into(), "v".into()],
            limit: 1,
            ..Default::default()
        };
        let got = db.claim("w", 60_000, &only_t).unwrap();
        assert_eq!(
            got.iter().map(|c| c.run.as_str()).collect::<Vec<_>>(),
            ["t1"],
            "a worker of tenant t must claim t's run whatever u queued before it"
        );
        // u's runs were neither claimed nor held from u's workers.
        let other = db.reopen().unwrap();
        let u = other
            .claim(
                "wu",
                60_000,
                &ClaimFilter {
                    tenants: vec!["u".into()],
                    limit: 20,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(u.len(), 20);
    }

    fn a_stopped_worker_leaves_the_workers_table(db: Db) {
        db.report_worker("h 9000 1", "h", 4, &["r".into()]).unwrap();
        db.report_worker("h 9001 1", "h", 4, &[]).unwrap();
        db.forget_worker("h 9001 1").unwrap();
        let ids: Vec<String> = db.workers().unwrap().into_iter().map(|w| w.id).collect();
        assert_eq!(ids, ["h 9000 1"]);
    }

    fn a_tenants_agent_conversation_is_found_by_its_runs_only(db: Db) {
        queue(&db, "a1", "alpha");
        queue(&db, "a2", "alpha");
        queue(&db, "b1", "beta");
        db.save_conversation(Some("a1"), "oa-5e55", "[\"alpha's secret\"]")
            .unwrap();
        // Another run of the tenant continues it; the other tenant's run, or a
        // run of no tenant, knowing the id, finds nothing.
        assert_eq!(
            db.conversation(Some("a2"), "oa-5e55").unwrap().as_deref(),
            Some("[\"alpha's secret\"]")
        );
        assert_eq!(db.conversation(Some("b1"), "oa-5e55").unwrap(), None);
        assert_eq!(db.conversation(None, "oa-5e55").unwrap(), None);
        // Nor does beta overwrite it by saving under the same id.
        db.save_conversation(Some("b1"), "oa-5e55", "[\"beta\"]")
            .unwrap();
        assert_eq!(
            db.conversation(Some("a1"), "oa-5e55").unwrap().as_deref(),
            Some("[\"alpha's secret\"]")
        );
    }

    fn a_worker_that_lost_its_lease_keeps_no_agent_conversation_of_the_run(db: Db) {
        let (a, b, all) = claimed_by_a(db);
        a.save_conversation(Some("r1"), "oa-1", "[1]").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(b.claim("b", 60_000, &all).unwrap()[0].epoch, 2);
        // The old holder's agent turn ends late: what it says is not kept.
        let e = a
            .save_conversation(Some("r1"), "oa-1", "[1, \"stale turn\"]")
            .unwrap_err();
        assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        let e = a
            .save_conversation(Some("r1"), "oa-2", "[\"stale\"]")
            .unwrap_err();
        assert!(crate::error::find::<LeaseLost>(&e).is_some(), "{e:#}");
        assert_eq!(
            b.conversation(Some("r1"), "oa-1").unwrap().as_deref(),
            Some("[1]")
        );
        assert_eq!(b.conversation(Some("r1"), "oa-2").unwrap(), None);
        b.save_conversation(Some("r1"), "oa-1", "[1, 2]").unwrap();
        assert_eq!(
            b.conversation(Some("r1"), "oa-1").unwrap().as_deref(),
            Some("[1, 2]")
        );
    }

    fn a_tenant_at_its_max_running_takes_no_more_slots_from_any_worker(db: Db) {
        // Tenant a (max_running 2) queued first and a lot; b (max_running 5) once.
        for i in 0..10 {
            queue(&db, &format!("a{i}"), "a");
        }
        queue(&db, "b1", "b");
        let filter = ClaimFilter {
            tenants: vec!["a".into(), "b".into()],
            limit: 1,
            max_running: [("a".to_string(), 2), ("b".to_string(), 5)].into(),
        };
        // Four workers with a free slot each.
        let workers: Vec<Db> = (0..4).map(|_| db.reopen().unwrap()).collect();
        let mut got: Vec<String> = Vec::new();
        for (i, w) in workers.iter().enumerate() {
            got.extend(
                w.claim(&format!("w{i}"), 60_000, &filter)
                    .unwrap()
                    .into_iter()
                    .map(|c| c.run),
            );
        }
        got.sort();
        assert_eq!(
            got,
            ["a0", "a1", "b1"],
            "a tenant's max_running holds across workers"
        );
        // One claim with room for many takes no more than the tenant's room either.
        let more = workers[3]
            .claim(
                "w3",
                60_000,
                &ClaimFilter {
                    limit: 8,
                    ..filter.clone()
                },
            )
            .unwrap();
        assert!(more.is_empty(), "{more:?}");
        // One of a's runs ends: one more of a's may start.
        workers[0].hand_back("a0", 1).unwrap();
        db.set_status("a0", RunStatus::Done, None).unwrap();
        let next = workers[1]
            .claim("w1", 60_000, &ClaimFilter { limit: 8, ..filter })
            .unwrap();
        assert_eq!(
            next.iter().map(|c| c.run.as_str()).collect::<Vec<_>>(),
            ["a2"]
        );
    }
}
