//! The connections a run's commands and agent made through loopbox's proxy
//! (`exec::egress`), allowed or refused: destination, address, decision and
//! its rule, bytes each way, duration. Never a path, a query, a header or a
//! body. Written as each connection ends, read by `runs show` and the API.

use anyhow::Result;
use serde::Serialize;

use crate::db::engine::params;

use super::Db;

/// One connection through the proxy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Connection {
    /// When it was asked for (ms since the epoch).
    pub at_ms: i64,
    /// `commands` or `agent`.
    pub side: String,
    pub host: String,
    pub port: u16,
    /// The address connected to, when one was.
    pub address: Option<String>,
    pub allowed: bool,
    /// The rule that decided, or why it was refused.
    pub rule: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub ms: u64,
}

/// The most connections one run keeps in the store; past it they are counted
/// in the run log only.
pub const MAX_PER_RUN: i64 = 100_000;

impl Db {
    /// Record `c` for `run` (nothing past [`MAX_PER_RUN`]).
    pub fn record_connection(&self, run: &str, c: &Connection) -> Result<()> {
        self.write_run(run, "record a network connection", |tx| {
            tx.exec(
                "INSERT INTO connections (run_id, seq, at, side, host, port, address, allowed, rule, bytes_out, bytes_in, ms)
                 SELECT ?1, COALESCE(MAX(seq), 0) + 1, CAST(?2 AS BIGINT), ?3, ?4, CAST(?5 AS BIGINT), ?6, CAST(?7 AS BIGINT), ?8, CAST(?9 AS BIGINT), CAST(?10 AS BIGINT), CAST(?11 AS BIGINT)
                 FROM connections WHERE run_id = ?1 HAVING COUNT(*) < ?12",
                params![
                    run,
                    c.at_ms,
                    c.side,
                    c.host,
                    c.port as i64,
                    c.address,
                    c.allowed as i64,
                    c.rule,
                    c.bytes_out as i64,
                    c.bytes_in as i64,
                    c.ms as i64,
                    MAX_PER_RUN
                ],
            )?;
            Ok(())
        })
    }

    /// The run's connections, oldest first (none in a store older than the table).
    pub fn connections(&self, run: &str) -> Result<Vec<Connection>> {
        let c = self.conn();
        let mut stmt = match c.prepare_cached(
            "SELECT at, side, host, port, address, allowed, rule, bytes_out, bytes_in, ms FROM connections WHERE run_id = ?1 ORDER BY seq",
        ) {
            Ok(s) => s,
            // A store older than schema 12, read without upgrading it.
            Err(crate::db::engine::Error::Sqlite(rusqlite::Error::SqliteFailure(_, Some(m))))
                if m.contains("no such table") =>
            {
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
        };
        let rows = stmt
            .query_map(params![run], |r| {
                Ok(Connection {
                    at_ms: r.get(0)?,
                    side: r.get(1)?,
                    host: r.get(2)?,
                    port: r.get::<_, i64>(3)? as u16,
                    address: r.get(4)?,
                    allowed: r.get::<_, i64>(5)? != 0,
                    rule: r.get(6)?,
                    bytes_out: r.get::<_, i64>(7)? as u64,
                    bytes_in: r.get::<_, i64>(8)? as u64,
                    ms: r.get::<_, i64>(9)? as u64,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}
