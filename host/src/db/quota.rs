//! A tenant's quota windows kept in the store (`quota_spends`, schema 11),
//! for servers and workers sharing one PostgreSQL store: each process asks the
//! store, so N workers give a tenant its quota once, not N times. A spend is
//! counted and recorded in one transaction under the store's write lock
//! (which every writer of every process takes), so two processes never both
//! take the last unit; the rows that left the window are deleted in the same
//! transaction, and a row is written only under the limit, so a tenant's rows
//! of a kind never outnumber its quota.

use anyhow::Result;

use super::Db;
use super::engine::params;

/// What asking for one more unit of a quota found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Counted: there was room.
    Yes,
    /// Nothing counted: `used` units are in the window, the oldest at `oldest`.
    Full { used: u64, oldest: i64 },
}

impl Db {
    /// Count one `kind` (`action`, `turn`) of `tenant` at `now` when fewer than
    /// `limit` are in the `span_ms` before it; `limit` 0 is no limit and keeps
    /// nothing.
    pub fn quota_take(
        &self,
        tenant: &str,
        kind: &str,
        limit: u64,
        span_ms: i64,
        now: i64,
    ) -> Result<Taken> {
        if limit == 0 {
            return Ok(Taken::Yes);
        }
        self.write("count a tenant's quota", |c| {
            c.prepare_cached(
                "DELETE FROM quota_spends WHERE tenant = ?1 AND kind = ?2 AND at <= ?3",
            )?
            .execute(params![tenant, kind, now - span_ms])?;
            let (used, oldest): (i64, Option<i64>) = c
                .prepare_cached(
                    "SELECT COUNT(*), MIN(at) FROM quota_spends WHERE tenant = ?1 AND kind = ?2",
                )?
                .query_row(params![tenant, kind], |r| Ok((r.get(0)?, r.get(1)?)))?;
            let used = used.max(0) as u64;
            if used >= limit {
                return Ok(Taken::Full {
                    used,
                    oldest: oldest.unwrap_or(now),
                });
            }
            c.prepare_cached("INSERT INTO quota_spends (tenant, kind, at) VALUES (?1, ?2, ?3)")?
                .execute(params![tenant, kind, now])?;
            Ok(Taken::Yes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::on_both_engines;

    const HOUR: i64 = 3_600_000;

    fn counts_up_to_the_limit_and_frees_with_time(db: Db) {
        let now = 10 * 24 * HOUR;
        for i in 0..3 {
            assert_eq!(
                db.quota_take("a", "action", 3, HOUR, now + i).unwrap(),
                Taken::Yes
            );
        }
        assert_eq!(
            db.quota_take("a", "action", 3, HOUR, now + 5).unwrap(),
            Taken::Full {
                used: 3,
                oldest: now
            }
        );
        // Another tenant, another kind: their own windows.
        assert_eq!(
            db.quota_take("b", "action", 1, HOUR, now).unwrap(),
            Taken::Yes
        );
        assert_eq!(
            db.quota_take("a", "turn", 1, HOUR, now).unwrap(),
            Taken::Yes
        );
        // An hour after the first, one is free again, and the expired row is gone.
        assert_eq!(
            db.quota_take("a", "action", 3, HOUR, now + HOUR).unwrap(),
            Taken::Yes
        );
        let c = db.conn();
        let rows: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM quota_spends WHERE tenant = 'a' AND kind = 'action'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 3);
        drop(c);
        // 0 is no limit and writes nothing.
        for _ in 0..50 {
            assert_eq!(
                db.quota_take("z", "action", 0, HOUR, now).unwrap(),
                Taken::Yes
            );
        }
    }

    on_both_engines!(counts_up_to_the_limit_and_frees_with_time);

    /// Two connections (two handles, as two workers have) racing on the real
    /// PostgreSQL for the last units of many tenants' quotas, in step: exactly
    /// each quota is taken, however the two interleave.
    #[test]
    fn two_connections_racing_on_postgres_take_exactly_the_quota() {
        let (_dir, db) = crate::db::testing::postgres();
        let other = db.reopen().unwrap();
        let now = crate::db::now_ms();
        const TENANTS: u64 = 150;
        const LIMIT: u64 = 2;
        let start = std::sync::Arc::new(std::sync::Barrier::new(2));
        let race = |db: Db| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut took = 0;
                for t in 0..TENANTS {
                    for _ in 0..LIMIT {
                        if db
                            .quota_take(&format!("t{t}"), "action", LIMIT, HOUR, now)
                            .unwrap()
                            == Taken::Yes
                        {
                            took += 1;
                        }
                    }
                }
                took
            })
        };
        let (a, b) = (race(db.clone()), race(other));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(
            a + b,
            TENANTS * LIMIT,
            "{TENANTS} tenants with a quota of {LIMIT}: worker a took {a}, worker b took {b}"
        );
    }
}
