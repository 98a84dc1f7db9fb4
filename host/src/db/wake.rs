//! Timers of runs parked by a `sleep` decision: the wake time in the run's row
//! (`runs.wake_at`, indexed), so a scheduler finds the due runs without reading
//! every run, and `loopbox runs tick` can wake a sleeping driver early. The
//! decision itself (the last event's) stays the source of the time; the column
//! is its index, cleared by any status but `waiting`.

use crate::db::engine::{OptionalExtension, params};
use anyhow::Result;

use super::{Db, RunStatus, now_ms};

/// The due runs (`?1`: now), through the `runs_by_wake` index (`status || ''`
/// keeps SQLite from taking `runs_by_status` instead, which would read every
/// waiting run, those waiting for an answer included; SQLite's unary `+`
/// would too, but PostgreSQL has no `+` for text).
pub(super) const DUE_SQL: &str = "SELECT id, wake_at FROM runs WHERE wake_at IS NOT NULL AND wake_at <= ?1 AND status || '' = 'waiting' ORDER BY wake_at LIMIT ?2";

impl Db {
    /// Park the run until `until_ms`: status `waiting`, its wake time recorded.
    pub fn park_until(&self, id: &str, until_ms: u64) -> Result<()> {
        let until = i64::try_from(until_ms).unwrap_or(i64::MAX);
        self.write_run(id, "record the run's wake time", |tx| {
            tx.exec(
                "UPDATE runs SET status = ?2, wake_at = ?3, updated_at = ?4 WHERE id = ?1",
                params![id, RunStatus::Waiting, until, now_ms()],
            )?;
            Ok(())
        })
    }

    /// Bring a parked run's wake time to now (`runs tick` on a run a live
    /// process sleeps in): whether it was parked.
    pub fn wake_now(&self, id: &str) -> Result<bool> {
        self.write("wake the run", |tx| {
            Ok(tx.exec(
                "UPDATE runs SET wake_at = CASE WHEN wake_at < ?2 THEN wake_at ELSE ?2 END WHERE id = ?1 AND wake_at IS NOT NULL",
                params![id, now_ms()],
            )? > 0)
        })
    }

    /// When the run wakes, if it is parked by a `sleep`. A store older than
    /// schema 7, read without upgrading, has no timers.
    pub fn wake_at(&self, id: &str) -> Result<Option<i64>> {
        match self
            .conn()
            .row("SELECT wake_at FROM runs WHERE id = ?1", [id], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .optional()
        {
            Ok(v) => Ok(v.flatten()),
            Err(crate::db::engine::Error::Sqlite(rusqlite::Error::SqliteFailure(_, Some(m))))
                if m.contains("no such column") =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Parked runs whose wake time has come, soonest first, at most `limit`.
    pub fn due_runs(&self, limit: u32) -> Result<Vec<(String, i64)>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(DUE_SQL)?;
        let rows = stmt
            .query_map(params![now_ms(), limit], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_run_is_due_at_its_time_through_the_index_and_any_other_status_clears_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("s.db")).unwrap();
        for i in 0..500 {
            db.create_run(&format!("done{i}"), "p", "d", "{}").unwrap();
            db.set_status(&format!("done{i}"), RunStatus::Done, None)
                .unwrap();
        }
        db.create_run("soon", "p", "d", "{}").unwrap();
        db.create_run("later", "p", "d", "{}").unwrap();
        let now = now_ms() as u64;
        db.park_until("soon", now - 10).unwrap();
        db.park_until("later", now + 3_600_000).unwrap();
        assert_eq!(
            db.due_runs(10)
                .unwrap()
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["soon"]
        );
        assert_eq!(db.run("later").unwrap().unwrap().status, RunStatus::Waiting);
        // `runs tick` brings the later one's time to now.
        assert!(db.wake_now("later").unwrap());
        assert!(!db.wake_now("done1").unwrap());
        assert_eq!(db.due_runs(10).unwrap().len(), 2);
        // Driving it again clears the timer; so does any end.
        db.set_status("later", RunStatus::Running, None).unwrap();
        db.finish_driving("soon", RunStatus::Cancelled, None)
            .unwrap();
        assert_eq!(
            (db.wake_at("later").unwrap(), db.wake_at("soon").unwrap()),
            (None, None)
        );
        assert!(db.due_runs(10).unwrap().is_empty());

        let c = db.conn();
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN {DUE_SQL}"))
            .unwrap()
            .query_map(params![now_ms(), 10], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.contains("USING INDEX runs_by_wake"))
                && !plan.iter().any(|p| p.starts_with("SCAN runs")),
            "{plan:?}"
        );
    }
}
