//! A page of runs, newest first: what `loopbox runs` lists and the API's
//! `GET /api/v1/runs` answers, read by this one query. A page is at most
//! [`MAX_PAGE`] rows, read through the `runs_by_tenant` index (a workspace's
//! own runs are its `tenant IS NULL` part), and the next page starts after
//! the last row's (`created_at`, `id`): a store of 50,000 runs costs what a
//! store of 50 does, in time and in memory.
//!
//! It reads stores as old as [`super::schema::READABLE_FROM`] without
//! upgrading them: what a column added later would hold is read as empty.

use anyhow::Result;
use serde::Serialize;

use super::engine::{Conn, Engine, OptionalExtension, Row, params};
use super::lease::Owner;
use super::schema::{APPROVALS, SPEND};
use super::{Db, RunStatus};

/// The most rows one page holds.
pub const MAX_PAGE: usize = 500;

/// Whose runs a page lists.
#[derive(Debug, Clone, Copy)]
pub enum Whose<'a> {
    /// A server tenant's.
    Tenant(&'a str),
    /// A workspace's own (no tenant): every run of its store.
    Workspace,
    /// Every run of the store (a shared store listed by `loopbox runs --store`).
    Any,
}

/// Which runs to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    /// The policy as the run names it, its `[policies.NAME]`, or its YAML loop's name.
    pub policy: Option<String>,
    /// Runs older than this one (the last of the previous page).
    pub before: Option<String>,
    /// At most this many (1 to [`MAX_PAGE`]).
    pub limit: usize,
}

/// One run of a page.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: String,
    pub policy: String,
    pub policy_name: Option<String>,
    /// A YAML loop's name (`options.loop_name`), for a `builtin:fsm` run of one.
    pub loop_name: Option<String>,
    pub status: RunStatus,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub turns: u32,
    pub actions: u64,
    pub workspace: Option<String>,
    pub started_by: Option<String>,
    pub summary: Option<String>,
    /// What its agent turns spent.
    pub spent: crate::spend::Totals,
    /// The process driving it, if one took it.
    #[serde(skip)]
    pub lease: Option<Owner>,
    /// The type of its last event (`start`, `turn`, ...).
    pub last_event: Option<String>,
    /// When a run parked by a `sleep` decision wakes.
    pub wake_at_ms: Option<i64>,
}

impl RunRow {
    /// The status to show without writing to the store: a `running` run whose
    /// driver is gone is `interrupted` (as [`super::RunRecord::seen_status`]).
    pub fn seen_status(&self) -> RunStatus {
        match (&self.status, &self.lease) {
            (RunStatus::Running, Some(o)) if !o.is_alive() => RunStatus::Interrupted,
            (status, _) => *status,
        }
    }
}

/// The columns a page reads, for a store of `schema`.
fn columns(schema: i64) -> String {
    let placed = if schema >= APPROVALS {
        "workspace, started_by"
    } else {
        "NULL, NULL"
    };
    let spend = if schema >= SPEND {
        super::SPEND_COLUMNS
    } else {
        "0, 0, 0, 0, 0, 0, 0, 0.0"
    };
    let wake = if schema >= 8 { "wake_at" } else { "NULL" };
    format!(
        "id, policy, json_extract(options, '$.policy_name'), status, created_at, updated_at, turns, actions, {placed},
         json_extract(outcome, '$.summary'), lease, {wake},
         (SELECT json_extract(e.event, '$.type') FROM events e WHERE e.run_id = runs.id ORDER BY e.seq DESC LIMIT 1),
         {spend}, json_extract(options, '$.loop_name')"
    )
}

fn row(r: &Row) -> super::engine::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        policy: r.get(1)?,
        policy_name: r.get(2)?,
        status: r.get(3)?,
        created_at_ms: r.get(4)?,
        updated_at_ms: r.get(5)?,
        turns: r.get(6)?,
        actions: r.get::<_, i64>(7)? as u64,
        workspace: r.get(8)?,
        started_by: r.get(9)?,
        summary: r.get(10)?,
        lease: r
            .get::<_, Option<String>>(11)?
            .as_deref()
            .and_then(Owner::parse),
        wake_at_ms: r.get(12)?,
        last_event: r.get(13)?,
        spent: super::totals_at(r, 14)?,
        // After the eight spend columns.
        loop_name: r.get(22)?,
    })
}

/// A page of `whose` runs as `f` says, through `c` (a store of `schema`).
/// `f.before` must name a run of theirs.
pub fn run_page(c: &Conn, schema: i64, whose: Whose, f: &RunFilter) -> Result<Vec<RunRow>> {
    let sqlite = c.engine() == Engine::Sqlite;
    // Who: a condition on the tenant (none before schema 7, which had no tenants).
    let (table, who) = match whose {
        _ if schema < APPROVALS => ("runs", "CAST(?1 AS TEXT) IS NULL"),
        Whose::Tenant(_) if sqlite => ("runs INDEXED BY runs_by_tenant", "tenant = ?1"),
        Whose::Tenant(_) => ("runs", "tenant = ?1"),
        Whose::Workspace if sqlite => (
            "runs INDEXED BY runs_by_tenant",
            "tenant IS NULL AND CAST(?1 AS TEXT) IS NULL",
        ),
        Whose::Workspace => ("runs", "tenant IS NULL AND CAST(?1 AS TEXT) IS NULL"),
        Whose::Any => ("runs", "CAST(?1 AS TEXT) IS NULL"),
    };
    let tenant = match whose {
        Whose::Tenant(t) => Some(t),
        _ => None,
    };
    let cursor: Option<(i64, String)> = match &f.before {
        Some(id) => c
            .prepare_cached(&format!(
                "SELECT created_at, id FROM runs WHERE id = ?2 AND {who}"
            ))?
            .query_row(params![tenant, id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        None => None,
    };
    if f.before.is_some() && cursor.is_none() {
        anyhow::bail!(
            "there is no run `{}` to page from",
            f.before.as_deref().unwrap_or_default().escape_debug()
        );
    }
    // Every `?N IS NULL` is `CAST(?N AS …) IS NULL`: on PostgreSQL a parameter
    // nothing types makes the engine type them all by the first values bound,
    // text for the NULL cursor of a first page, and every listing failed
    // (bigint < text).
    let filters = "AND (CAST(?2 AS TEXT) IS NULL OR status = ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR policy = ?3 OR json_extract(options, '$.policy_name') = ?3
                OR json_extract(options, '$.loop_name') = ?3)";
    let limit = f.limit.clamp(1, MAX_PAGE) as i64;
    let select = |after: &str| {
        format!(
            "SELECT {} FROM {table} WHERE {who} {filters} {after} ORDER BY created_at DESC, id DESC LIMIT ?4",
            columns(schema)
        )
    };
    let rows = match cursor {
        None => c
            .prepare_cached(&select(""))?
            .query_map(params![tenant, f.status, f.policy, limit], row)?
            .collect::<Result<Vec<_>, _>>()?,
        // `created_at <= ?5` bounds the index range: the page starts at the
        // cursor instead of walking down to it from the newest run.
        Some((at, after_id)) => c
            .prepare_cached(&select(
                "AND created_at <= ?5 AND (created_at < ?5 OR id < ?6)",
            ))?
            .query_map(
                params![tenant, f.status, f.policy, limit, at, after_id],
                row,
            )?
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(rows)
}

/// A page of `tenant`'s runs through `c`, a server's connection to a store it upgraded.
pub fn tenant_page(c: &Conn, tenant: &str, f: &RunFilter) -> Result<Vec<RunRow>> {
    run_page(c, super::schema::SCHEMA_VERSION, Whose::Tenant(tenant), f)
}

impl Db {
    /// A page of this store's runs (see [`run_page`]).
    pub fn run_page(&self, whose: Whose, f: &RunFilter) -> Result<Vec<RunRow>> {
        run_page(&self.conn(), self.schema, whose, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace store holding `n` runs, written straight in.
    fn store(n: u32) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("loopbox.db")).unwrap();
        db.conn()
            .execute(
                "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
                 INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options)
                 SELECT printf('r%05d', i), CASE i % 2 WHEN 0 THEN 'even.wasm' ELSE 'odd.wasm' END, 'd', '{}',
                        CASE i % 4 WHEN 0 THEN 'waiting' ELSE 'done' END, i, i, 's', '{}' FROM k",
                [n],
            )
            .unwrap();
        (dir, db)
    }

    #[test]
    fn a_workspaces_runs_page_through_the_index_with_their_filters() {
        let (_dir, db) = store(5000);
        let page = |f: &RunFilter| db.run_page(Whose::Workspace, f).unwrap();
        let first = page(&RunFilter {
            limit: 50,
            ..Default::default()
        });
        assert_eq!(first.len(), 50);
        assert_eq!(first[0].id, "r05000");
        let next = page(&RunFilter {
            limit: 50,
            before: Some(first[49].id.clone()),
            ..Default::default()
        });
        assert_eq!(next[0].id, "r04950");
        let waiting_odd = page(&RunFilter {
            limit: 10,
            status: Some(RunStatus::Waiting),
            policy: Some("even.wasm".into()),
            ..Default::default()
        });
        assert_eq!(waiting_odd.len(), 10);
        assert!(
            waiting_odd
                .iter()
                .all(|r| r.status == RunStatus::Waiting && r.policy == "even.wasm")
        );
        // The same runs, listed as a shared store's.
        assert_eq!(
            db.run_page(
                Whose::Any,
                &RunFilter {
                    limit: 1,
                    ..Default::default()
                }
            )
            .unwrap()[0]
                .id,
            "r05000"
        );
        let e = db
            .run_page(
                Whose::Workspace,
                &RunFilter {
                    limit: 5,
                    before: Some("nope".into()),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(format!("{e:#}").contains("there is no run `nope` to page from"));
        // The tenant index, not a scan of every run.
        let plan: Vec<String> = db
            .conn()
            .as_sqlite()
            .unwrap()
            .prepare(
                "EXPLAIN QUERY PLAN SELECT id FROM runs INDEXED BY runs_by_tenant WHERE tenant IS NULL ORDER BY created_at DESC, id DESC LIMIT 50",
            )
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.contains("runs_by_tenant")),
            "{plan:?}"
        );
    }
}
