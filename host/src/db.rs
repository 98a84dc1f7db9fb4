//! The run store: one SQLite database per workspace (`.loopbox/loopbox.db`),
//! in WAL mode with `synchronous=FULL`, holding runs, their state, the events
//! delivered with the decisions they got, and the run log.
//!
//! A handled event is committed as one transaction: its state writes, its log
//! lines and its record go in together or not at all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, params};

/// Directory under the workspace that holds the store.
pub const STORE_DIR: &str = ".loopbox";
const SCHEMA_VERSION: i64 = 2;

#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

/// One log line as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    pub at_ms: i64,
    pub level: String,
    pub source: String,
    pub message: String,
}

/// Everything one handled event changes, committed together.
#[derive(Debug, Default)]
pub struct EventCommit {
    pub event: String,
    pub decision: Option<String>,
    pub error: Option<String>,
    /// `Some(value)` sets, `None` removes.
    pub state_writes: Vec<(String, Option<String>)>,
    pub log: Vec<LogRecord>,
}

/// One delivered event as stored: JSON texts of the event and its decision, or the error.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub event: String,
    pub decision: Option<String>,
    pub error: Option<String>,
}

/// A run's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub policy: String,
    pub status: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub turns: u32,
    pub actions: u64,
    pub outcome: Option<String>,
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Db {
    /// Open (creating) the store of the workspace at `root`.
    pub fn open_workspace(root: &Path) -> Result<Db> {
        let dir = root.join(STORE_DIR);
        std::fs::create_dir_all(&dir).with_context(|| format!("failed to create the store directory `{}`", dir.display()))?;
        Db::open(&dir.join("loopbox.db"))
    }

    pub fn open(path: &Path) -> Result<Db> {
        let conn = Connection::open(path).with_context(|| format!("failed to open the store `{}`", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            anyhow::bail!("the store `{}` was written by a newer loopbox (schema {version}, this one knows {SCHEMA_VERSION}); upgrade loopbox", path.display());
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS runs (
                id TEXT PRIMARY KEY,
                policy TEXT NOT NULL,
                policy_digest TEXT NOT NULL,
                input TEXT NOT NULL,
                status TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                turns INTEGER NOT NULL DEFAULT 0,
                actions INTEGER NOT NULL DEFAULT 0,
                outcome TEXT
             );
             CREATE TABLE IF NOT EXISTS state (
                run_id TEXT NOT NULL REFERENCES runs(id),
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                PRIMARY KEY (run_id, key)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS events (
                run_id TEXT NOT NULL REFERENCES runs(id),
                seq INTEGER NOT NULL,
                at INTEGER NOT NULL,
                event TEXT NOT NULL,
                decision TEXT,
                error TEXT,
                PRIMARY KEY (run_id, seq)
             );
             CREATE TABLE IF NOT EXISTS run_log (
                run_id TEXT NOT NULL REFERENCES runs(id),
                seq INTEGER NOT NULL,
                at INTEGER NOT NULL,
                level TEXT NOT NULL,
                source TEXT NOT NULL,
                message TEXT NOT NULL,
                PRIMARY KEY (run_id, seq)
             );
             CREATE TABLE IF NOT EXISTS agent_conversations (
                session TEXT PRIMARY KEY,
                messages TEXT NOT NULL,
                updated_at INTEGER NOT NULL
             );",
        )
        .with_context(|| format!("failed to set up the store `{}`", path.display()))?;
        // Schema 2 counts prompt actions per run.
        let has_prompts: bool = conn.query_row("SELECT COUNT(*) > 0 FROM pragma_table_info('runs') WHERE name = 'prompts'", [], |r| r.get(0))?;
        if !has_prompts {
            conn.execute_batch("ALTER TABLE runs ADD COLUMN prompts INTEGER NOT NULL DEFAULT 0")?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        Ok(Db { conn: Arc::new(Mutex::new(conn)), path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (it has its own
        // transactions), so a poisoned lock is still safe to use.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn create_run(&self, id: &str, policy: &str, digest: &str, input: &str) -> Result<()> {
        let now = now_ms();
        self.conn()
            .execute(
                "INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
                params![id, policy, digest, input, now],
            )
            .context("failed to record the new run")?;
        Ok(())
    }

    pub fn set_status(&self, id: &str, status: &str, outcome: Option<&str>) -> Result<()> {
        self.conn()
            .execute("UPDATE runs SET status = ?2, outcome = COALESCE(?3, outcome), updated_at = ?4 WHERE id = ?1", params![id, status, outcome, now_ms()])
            .context("failed to update the run's status")?;
        Ok(())
    }

    pub fn add_turn(&self, id: &str) -> Result<u32> {
        let c = self.conn();
        c.execute("UPDATE runs SET turns = turns + 1, updated_at = ?2 WHERE id = ?1", params![id, now_ms()])?;
        Ok(c.query_row("SELECT turns FROM runs WHERE id = ?1", [id], |r| r.get(0))?)
    }

    /// Count one action against the run unless it already took `limit`; false when spent.
    pub fn try_add_action(&self, id: &str, limit: u64) -> Result<bool> {
        let changed = self.conn().execute("UPDATE runs SET actions = actions + 1 WHERE id = ?1 AND actions < ?2", params![id, limit as i64])?;
        Ok(changed == 1)
    }

    /// Count one prompt action against the run unless it already took `limit`; false when spent.
    pub fn try_add_prompt(&self, id: &str, limit: u64) -> Result<bool> {
        let changed = self.conn().execute("UPDATE runs SET prompts = prompts + 1 WHERE id = ?1 AND prompts < ?2", params![id, limit as i64])?;
        Ok(changed == 1)
    }

    /// The messages of an agent conversation (JSON), if it exists.
    pub fn conversation(&self, session: &str) -> Result<Option<String>> {
        Ok(self.conn().query_row("SELECT messages FROM agent_conversations WHERE session = ?1", [session], |r| r.get(0)).optional()?)
    }

    pub fn save_conversation(&self, session: &str, messages: &str) -> Result<()> {
        self.conn().execute(
            "INSERT INTO agent_conversations (session, messages, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (session) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at",
            params![session, messages, now_ms()],
        )?;
        Ok(())
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRecord>> {
        Ok(self.conn().query_row(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"), [id], run_record).optional()?)
    }

    /// Whether the run's `start` event was handled successfully.
    pub fn started(&self, run: &str) -> Result<bool> {
        Ok(self.conn().query_row(
            "SELECT EXISTS (SELECT 1 FROM events WHERE run_id = ?1 AND decision IS NOT NULL AND json_extract(event, '$.type') = 'start')",
            [run],
            |r| r.get(0),
        )?)
    }

    /// Every run, newest first, with the type of its last event.
    pub fn list_runs(&self) -> Result<Vec<(RunRecord, Option<String>)>> {
        let c = self.conn();
        let mut stmt = c.prepare(&format!(
            "SELECT {RUN_COLUMNS}, (SELECT json_extract(e.event, '$.type') FROM events e WHERE e.run_id = runs.id ORDER BY e.seq DESC LIMIT 1)
                 FROM runs ORDER BY created_at DESC, id"
        ))?;
        let rows = stmt.query_map([], |r| Ok((run_record(r)?, r.get(8)?)))?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn state_get(&self, run: &str, key: &str) -> Result<Option<String>> {
        Ok(self.conn().query_row("SELECT value FROM state WHERE run_id = ?1 AND key = ?2", [run, key], |r| r.get(0)).optional()?)
    }

    /// Keys of the run starting with `prefix`, sorted.
    pub fn state_keys(&self, run: &str, prefix: &str) -> Result<Vec<String>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached("SELECT key FROM state WHERE run_id = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key")?;
        let keys = stmt.query_map([run, prefix], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
        Ok(keys)
    }

    /// Bytes of keys and values the run holds.
    pub fn state_total(&self, run: &str) -> Result<u64> {
        Ok(self.conn().query_row(
            "SELECT COALESCE(SUM(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB))), 0) FROM state WHERE run_id = ?1",
            [run],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// The size of one stored entry, 0 when absent.
    pub fn state_entry_size(&self, run: &str, key: &str) -> Result<u64> {
        Ok(self
            .conn()
            .query_row("SELECT length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)) FROM state WHERE run_id = ?1 AND key = ?2", [run, key], |r| {
                r.get::<_, i64>(0)
            })
            .optional()?
            .unwrap_or(0) as u64)
    }

    /// Commit one handled event atomically; returns its sequence number.
    pub fn commit_event(&self, run: &str, commit: &EventCommit) -> Result<i64> {
        let mut c = self.conn();
        let tx = c.transaction()?;
        let seq: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?1", [run], |r| r.get(0))?;
        let now = now_ms();
        tx.execute(
            "INSERT INTO events (run_id, seq, at, event, decision, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![run, seq, now, commit.event, commit.decision, commit.error],
        )?;
        for (key, value) in &commit.state_writes {
            match value {
                Some(v) => tx.execute(
                    "INSERT INTO state (run_id, key, value) VALUES (?1, ?2, ?3) ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value",
                    params![run, key, v],
                )?,
                None => tx.execute("DELETE FROM state WHERE run_id = ?1 AND key = ?2", params![run, key])?,
            };
        }
        append_log(&tx, run, &commit.log)?;
        tx.execute("UPDATE runs SET updated_at = ?2 WHERE id = ?1", params![run, now])?;
        tx.commit().context("failed to commit the event")?;
        Ok(seq)
    }

    /// Log lines that belong to no event (the driver's own).
    pub fn append_log(&self, run: &str, lines: &[LogRecord]) -> Result<()> {
        let mut c = self.conn();
        let tx = c.transaction()?;
        append_log(&tx, run, lines)?;
        tx.commit()?;
        Ok(())
    }

    pub fn log(&self, run: &str) -> Result<Vec<LogRecord>> {
        let c = self.conn();
        let mut stmt = c.prepare("SELECT at, level, source, message FROM run_log WHERE run_id = ?1 ORDER BY seq")?;
        let rows = stmt
            .query_map([run], |r| Ok(LogRecord { at_ms: r.get(0)?, level: r.get(1)?, source: r.get(2)?, message: r.get(3)? }))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Each event of the run, in order.
    pub fn events(&self, run: &str) -> Result<Vec<EventRecord>> {
        let c = self.conn();
        let mut stmt = c.prepare("SELECT event, decision, error FROM events WHERE run_id = ?1 ORDER BY seq")?;
        let rows = stmt.query_map([run], |r| Ok(EventRecord { event: r.get(0)?, decision: r.get(1)?, error: r.get(2)? }))?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

const RUN_COLUMNS: &str = "id, policy, status, created_at, updated_at, turns, actions, outcome";

/// A `runs` row selected with `RUN_COLUMNS`.
fn run_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        policy: r.get(1)?,
        status: r.get(2)?,
        created_at_ms: r.get(3)?,
        updated_at_ms: r.get(4)?,
        turns: r.get(5)?,
        actions: r.get::<_, i64>(6)? as u64,
        outcome: r.get(7)?,
    })
}

fn append_log(tx: &rusqlite::Transaction<'_>, run: &str, lines: &[LogRecord]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut seq: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM run_log WHERE run_id = ?1", [run], |r| r.get(0))?;
    let mut stmt = tx.prepare_cached("INSERT INTO run_log (run_id, seq, at, level, source, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
    for l in lines {
        seq += 1;
        stmt.execute(params![run, seq, l.at_ms, l.level, l.source, l.message])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        db.create_run("r1", "builtin:ralph", "d", "{}").unwrap();
        (dir, db)
    }

    #[test]
    fn an_event_commits_state_and_log_together() {
        let (_d, db) = db();
        let commit = EventCommit {
            event: "{}".into(),
            decision: Some("\"pass\"".into()),
            state_writes: vec![("a".into(), Some("1".into())), ("b".into(), Some("2".into())), ("a".into(), None)],
            log: vec![LogRecord { at_ms: 1, level: "info".into(), source: "policy".into(), message: "hi".into() }],
            ..Default::default()
        };
        assert_eq!(db.commit_event("r1", &commit).unwrap(), 1);
        assert_eq!(db.state_get("r1", "a").unwrap(), None);
        assert_eq!(db.state_get("r1", "b").unwrap().as_deref(), Some("2"));
        assert_eq!(db.state_keys("r1", "").unwrap(), ["b"]);
        assert_eq!(db.state_total("r1").unwrap(), 2);
        assert_eq!(db.log("r1").unwrap().len(), 1);
        assert_eq!(db.commit_event("r1", &EventCommit::default()).unwrap(), 2);
    }

    #[test]
    fn state_is_per_run_and_prefix_is_literal() {
        let (_d, db) = db();
        db.create_run("r2", "p", "d", "{}").unwrap();
        let w = |k: &str| EventCommit { state_writes: vec![(k.into(), Some("0".into()))], ..Default::default() };
        db.commit_event("r1", &w("a%b")).unwrap();
        db.commit_event("r1", &w("axb")).unwrap();
        db.commit_event("r2", &w("a%c")).unwrap();
        assert_eq!(db.state_keys("r1", "a%").unwrap(), ["a%b"]);
        assert_eq!(db.state_keys("r2", "").unwrap(), ["a%c"]);
    }

    #[test]
    fn a_schema_1_store_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, policy TEXT NOT NULL, policy_digest TEXT NOT NULL, input TEXT NOT NULL, status TEXT NOT NULL,
             created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, turns INTEGER NOT NULL DEFAULT 0, actions INTEGER NOT NULL DEFAULT 0, outcome TEXT);
             INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at) VALUES ('old', 'p', 'd', '{}', 'done', 1, 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        drop(c);
        let db = Db::open(&path).unwrap();
        assert_eq!(db.run("old").unwrap().unwrap().status, "done");
        assert!(db.try_add_prompt("old", 1).unwrap());
        assert!(!db.try_add_prompt("old", 1).unwrap());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
        assert!(Db::open(&path).err().unwrap().to_string().contains("newer loopbox"));
    }
}
