//! The run store: one SQLite database per workspace (`.loopbox/loopbox.db`),
//! in WAL mode with `synchronous=FULL`, holding runs, their state, the events
//! delivered with the decisions they got, the journal of host calls, and the
//! run log.
//!
//! A handled event is committed as one transaction: its state writes, its log
//! lines, its journal and its decision go in together or not at all. An action
//! is journaled durably before it starts and again when it finishes, so a
//! crashed run can be resumed without running a finished action twice.

pub mod approvals;
pub mod audit;
pub mod claim;
pub mod engine;
mod events;
mod journal;
pub mod lease;
pub mod lock;
pub mod network;
pub mod page;
pub mod pool;
pub mod quota;
mod runs;
mod schema;
mod snapshots;
mod spend;
mod wake;
pub mod webhooks;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rusqlite::{Connection, ErrorCode};

pub use engine::{Conn, Engine, Scope};

pub use events::{EventCommit, EventRecord, LogRecord};
pub use journal::{Budget, JournalRow, Spent};
pub use runs::{NewRun, RunOptions, RunPlace, RunRecord, RunStatus, local_actor};
pub use snapshots::SnapshotEntry;
pub use spend::TurnCharge;
pub(crate) use spend::{SPEND_COLUMNS, totals_at};

/// Directory under the workspace that holds the store.
pub const STORE_DIR: &str = ".loopbox";
/// The store's file name in [`STORE_DIR`].
pub const STORE_FILE: &str = "loopbox.db";

#[derive(Clone)]
pub struct Db {
    conn: Arc<pool::Pool>,
    path: PathBuf,
    /// The store file's device and inode when opened (none for an in-memory
    /// store): a store deleted or replaced under a run is noticed at its next write.
    identity: Option<(u64, u64)>,
    /// The store's schema: [`schema::SCHEMA_VERSION`], or an older one a
    /// read-only command reads as it is (see [`Db::open_read_only`]).
    schema: i64,
    /// A PostgreSQL store's URL (none for SQLite), to open more connections with.
    url: Option<Arc<str>>,
    /// The runs this handle (and its clones) holds by claim (`claim.rs`).
    fences: claim::Fences,
}

/// How long a write waits for another process's write to finish.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

/// Rows one listing returns: `limit`, or 100 when it is 0, at most 10,000.
pub(crate) fn page_size(limit: usize) -> i64 {
    match limit {
        0 => 100,
        n => n.min(10_000) as i64,
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Db {
    /// Open (creating) the store of the workspace at `root`, which must exist.
    pub fn open_workspace(root: &Path) -> Result<Db> {
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => anyhow::bail!(
                "workspace `{}` is not a directory; give a project directory with -C",
                root.display()
            ),
            Err(e) => anyhow::bail!(
                "workspace `{}` cannot be used: {e}; give an existing directory with -C",
                root.display()
            ),
        }
        let dir = root.join(STORE_DIR);
        crate::files::ensure_dir(&dir)
            .with_context(|| format!("failed to create the store directory `{}`", dir.display()))?;
        // The store is this machine's: it never belongs in the project's git history.
        let ignore = dir.join(".gitignore");
        if !ignore.exists() {
            let _ = std::fs::write(&ignore, "# loopbox's run store: local to this machine\n*\n");
        }
        Db::open(&dir.join(STORE_FILE))
    }

    /// Open the store at `path`, creating it when there is no file there. A
    /// new store appears whole (see `create`), so an empty file is damage, not
    /// a store to start afresh in.
    pub fn open(path: &Path) -> Result<Db> {
        let context = || format!("failed to open the store `{}`", path.display());
        if path == Path::new(":memory:") {
            // A throwaway store (`inspect`): nothing on disk to create or to watch.
            let conn = Connection::open_in_memory()
                .map_err(anyhow::Error::from)
                .with_context(context)?;
            configure(&conn)
                .map_err(anyhow::Error::from)
                .with_context(context)?;
            schema::migrate(&conn).with_context(context)?;
            return Ok(Db {
                conn: Arc::new(pool::Pool::single(Conn::sqlite(conn))),
                path: path.to_path_buf(),
                identity: None,
                schema: schema::SCHEMA_VERSION,
                url: None,
                fences: Default::default(),
            });
        }
        match std::fs::metadata(path) {
            Ok(m) if m.len() == 0 => {
                return Err(anyhow::anyhow!(
                    "the store is empty (0 bytes): it was truncated or created by something other than loopbox, so loopbox will not take it for a new one; \
                     move it aside (`mv {0} {0}.empty`) to start a fresh store",
                    path.display()
                ))
                .with_context(context);
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path)
                .map_err(|e| explain(path, e))
                .with_context(context)?,
            Err(e) => return Err(anyhow::Error::from(e)).with_context(context),
        }
        let setup = || -> Result<Connection> {
            // No CREATE: a store deleted since the check above is an error, not a new empty file.
            let conn = Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            configure(&conn)?;
            // Stores loopbox creates are WAL already; one made by other tools may not be.
            let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                conn.pragma_update(None, "journal_mode", "WAL")?;
            }
            schema::migrate(&conn)?;
            Ok(conn)
        };
        let conn = setup()
            .map_err(|e| explain(path, e))
            .with_context(context)?;
        let identity = Some(file_identity(path).with_context(context)?);
        Ok(Db {
            conn: Arc::new(pool::Pool::single(Conn::sqlite(conn))),
            path: path.to_path_buf(),
            identity,
            schema: schema::SCHEMA_VERSION,
            url: None,
            fences: Default::default(),
        })
    }

    /// Open the existing store at `path` for reading only, as the commands that
    /// only look (`runs`, `runs show`, `runs log`) do: no migration, no WAL
    /// checkpoint, no journal, nothing written, so it works on a full disk.
    ///
    /// SQLite's reader sets up the WAL's shared index (`-shm`) first, which
    /// takes a little space; when that fails and the WAL holds nothing (the last
    /// writer checkpointed it), the file alone is the whole store, and it is read
    /// as it is (`immutable`). A store older than [`schema::READABLE_FROM`] needs
    /// its upgrade first, so it is opened as [`Db::open`] does.
    pub fn open_read_only(path: &Path) -> Result<Db> {
        let context = || format!("failed to read the store `{}`", path.display());
        let meta = std::fs::metadata(path).with_context(context)?;
        if meta.len() == 0 {
            return Db::open(path);
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let read = |conn: Connection| -> Result<(Connection, i64)> {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.set_prepared_statement_cache_capacity(64);
            // Reading the schema is the first read: it sets up the WAL index.
            conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
                r.get::<_, i64>(0)
            })?;
            let version = schema::version(&conn)?;
            Ok((conn, version))
        };
        let opened = Connection::open_with_flags(path, flags)
            .map_err(anyhow::Error::from)
            .and_then(read);
        let (conn, version) = match opened {
            Ok(found) => found,
            Err(e) if cannot_set_up_reading(&e) && wal_is_empty(path) => {
                let uri = format!("file:{}?mode=ro&immutable=1", uri_path(path)?);
                Connection::open_with_flags(uri, flags | rusqlite::OpenFlags::SQLITE_OPEN_URI)
                    .map_err(anyhow::Error::from)
                    .and_then(read)
                    .map_err(|e| explain(path, e))
                    .with_context(context)?
            }
            Err(e) => return Err(explain(path, e)).with_context(context),
        };
        if version < schema::READABLE_FROM {
            drop(conn);
            return Db::open(path);
        }
        let identity = Some(file_identity(path).with_context(context)?);
        Ok(Db {
            conn: Arc::new(pool::Pool::single(Conn::sqlite(conn))),
            path: path.to_path_buf(),
            identity,
            schema: version,
            url: None,
            fences: Default::default(),
        })
    }

    /// Open the store `store` names: a PostgreSQL URL (`postgres://…`), or an
    /// SQLite file's path.
    pub fn open_store(store: &str) -> Result<Db> {
        if engine::postgres::is_url(store) {
            Db::open_postgres(store)
        } else {
            Db::open(Path::new(store))
        }
    }

    /// Connect to the PostgreSQL store at `url`, making its tables when it has none.
    pub fn open_postgres(url: &str) -> Result<Db> {
        let conn = engine::postgres::PgConn::connect(url)?;
        let label = conn.label().to_string();
        let conn = Conn::postgres(conn);
        schema::migrate_postgres(&conn)
            .with_context(|| format!("failed to open the store `{label}`"))?;
        Ok(Db {
            conn: Arc::new(pool::Pool::postgres(conn, url)),
            path: PathBuf::from(label),
            identity: None,
            schema: schema::SCHEMA_VERSION,
            url: Some(url.into()),
            fences: Default::default(),
        })
    }

    /// Another handle to the same store, with a connection and claims of its own.
    pub fn reopen(&self) -> Result<Db> {
        match &self.url {
            Some(url) => Db::open_postgres(url),
            None => Db::open(&self.path),
        }
    }

    /// Which engine the store is on.
    pub fn engine(&self) -> Engine {
        self.conn.engine()
    }

    /// Another connection to the same store (a server reads through one of its own).
    pub fn second_connection(&self) -> Result<Conn> {
        if let Some(url) = &self.url {
            return Ok(Conn::postgres(engine::postgres::PgConn::connect(url)?));
        }
        let conn = Connection::open_with_flags(
            &self.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&conn)?;
        Ok(Conn::sqlite(conn))
    }

    /// Make the tables `ddl` declares (written for SQLite, `CREATE … IF NOT
    /// EXISTS`), as this store's engine spells them.
    pub fn create_tables(&self, ddl: &str) -> Result<()> {
        let c = self.conn();
        Ok(c.execute_batch(&schema::ddl_for(c.engine(), ddl))?)
    }

    /// Whether the store has the tables and columns of schema `version` (an
    /// older store read as it is has not).
    pub(crate) fn has_schema(&self, version: i64) -> bool {
        self.schema >= version
    }

    /// Fail if the file at the store's path is no longer the one opened.
    fn check_identity(&self) -> Result<()> {
        let Some(identity) = self.identity else {
            return Ok(());
        };
        match file_identity(&self.path) {
            Ok(id) if id == identity => Ok(()),
            _ => anyhow::bail!(
                "the store `{}` was deleted or replaced while loopbox was using it, so this step (and the rest of the run) cannot be recorded; \
                 nothing more is written: check the workspace, then start the run again",
                self.path.display()
            ),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> pool::Taken<'_> {
        self.conn.take()
    }

    /// Run `f` in one transaction that may read, then write, anything in the
    /// store (every other writer waits; see [`Scope`]).
    fn write<T>(&self, what: &str, f: impl FnMut(&Conn) -> Result<T>) -> Result<T> {
        self.write_in(Scope::Store, what, f)
    }

    /// Run `f` in one transaction of `scope`; the error names the store and
    /// what to do when it is damaged or the disk is full. A transaction cut
    /// short by a lost PostgreSQL connection committed nothing: it is run
    /// again, once, on a new connection.
    fn write_in<T>(
        &self,
        scope: Scope<'_>,
        what: &str,
        mut f: impl FnMut(&Conn) -> Result<T>,
    ) -> Result<T> {
        let c = self.conn();
        let mut attempt = || -> Result<T> {
            c.reconnect_if_lost()?;
            // Writers wait for one another (SQLite's IMMEDIATE, PostgreSQL's write lock): a
            // deferred transaction that reads, then writes, fails at once with "database is
            // locked" when another process wrote in between.
            c.begin_write(scope)?;
            let done = (|| {
                let value = f(&c)?;
                self.check_identity()?;
                c.commit()?;
                Ok(value)
            })();
            if done.is_err() {
                c.rollback();
            }
            done
        };
        let mut result = attempt();
        if let Err(e) = &result
            && crate::error::find::<engine::Error>(e).is_some_and(engine::Error::is_connection_lost)
        {
            result = attempt();
        }
        result
            .map_err(|e| explain(&self.path, e))
            .with_context(|| format!("failed to {what}"))
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Every statement on the event path is cached (see `Cached`): parsing SQL
    // costs more than running these small queries.
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Create a store at `path`: built whole under a temporary name beside it, then
/// linked into place, so no process ever sees a half-made store. When another
/// process links its store first, that one is used.
fn create(path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".loopbox.db.new-")
        .tempfile_in(dir)
        .context("failed to create a new store")?;
    {
        let conn = Connection::open(tmp.path())?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        configure(&conn)?;
        schema::migrate(&conn)?;
        // Closing the last connection checkpoints the WAL into the file and removes it.
    }
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(anyhow::Error::from(e).context(format!(
            "failed to put the new store at `{}`",
            path.display()
        ))),
    }
}

/// Whether opening for reading failed where SQLite needed to write or create
/// something (the WAL index, on a full disk or a read-only directory).
fn cannot_set_up_reading(e: &anyhow::Error) -> bool {
    matches!(
        crate::error::find::<rusqlite::Error>(e),
        Some(rusqlite::Error::SqliteFailure(f, _)) if matches!(
            f.code,
            ErrorCode::SystemIoFailure | ErrorCode::DiskFull | ErrorCode::CannotOpen | ErrorCode::ReadOnly
        )
    )
}

/// Whether the store's write-ahead log is missing or empty: then every
/// committed transaction is in the store's file itself.
fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::metadata(PathBuf::from(wal)) {
        Ok(m) => m.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// `path` (made absolute) for an SQLite `file:` URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(path)
        .with_context(|| format!("failed to find the absolute path of `{}`", path.display()))?;
    let mut out = String::new();
    for &b in absolute.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

/// Bytes an unprivileged process may still write on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points at writable space for one statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // The field types differ between platforms (u64 here, u32 elsewhere).
    #[allow(clippy::unnecessary_cast)]
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

fn file_identity(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// What a user can do about a store failure: attached to the error (as its
/// context) by [`explain`], found again by type wherever the error travels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreAdvice {
    pub problem: StoreProblem,
    pub path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreProblem {
    /// Not a database, or a corrupt one.
    Damaged,
    DiskFull,
    /// An I/O error on write (a failing disk, a file size limit).
    WriteFailed,
    /// Read-only, or the file or its directory cannot be opened.
    NotWritable,
}

impl std::fmt::Display for StoreAdvice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        match self.problem {
            StoreProblem::Damaged => write!(
                f,
                "the store is damaged and loopbox will not guess at its contents: move it aside (`mv {path} {path}.damaged`) to start a fresh one, \
                 or try to salvage it with `sqlite3 {path} .recover`"
            ),
            StoreProblem::DiskFull => write!(
                f,
                "the disk holding `{path}` is full (or a file size limit was reached), so this step was not recorded; free some space, then resume the run"
            ),
            StoreProblem::WriteFailed => write!(
                f,
                "`{path}` could not be written (the disk may be full or failing, or a file size limit was reached), so this step was not recorded; \
                 free some space, then resume the run"
            ),
            StoreProblem::NotWritable => write!(
                f,
                "`{path}` cannot be written: check the permissions of the file and of its directory"
            ),
        }
    }
}

impl std::error::Error for StoreAdvice {}

/// As [`explain`], for a store error that reached the command line without it
/// (a read, or a failure inside a guest's call).
pub fn advise(e: anyhow::Error) -> anyhow::Error {
    if crate::error::find::<StoreAdvice>(&e).is_some() {
        e
    } else {
        explain(Path::new(".loopbox/loopbox.db"), e)
    }
}

/// Whether `e` came from the store (rather than, say, a missing run).
pub fn is_store_error(e: &anyhow::Error) -> bool {
    crate::error::find::<rusqlite::Error>(e).is_some()
        || crate::error::find::<engine::Error>(e).is_some()
}

/// Add what to do to the errors a user can act on: a damaged store, a full disk.
fn explain(path: &Path, e: anyhow::Error) -> anyhow::Error {
    let code = crate::error::find::<rusqlite::Error>(&e).and_then(|e| match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        _ => None,
    });
    let problem = match code {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreProblem::Damaged,
        Some(ErrorCode::DiskFull) => StoreProblem::DiskFull,
        Some(ErrorCode::SystemIoFailure) => StoreProblem::WriteFailed,
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
            StoreProblem::NotWritable
        }
        _ => return e,
    };
    e.context(StoreAdvice {
        problem,
        path: path.to_path_buf(),
    })
}

/// The stores a test of the store runs on: a new SQLite file, and a schema of
/// its own on the process's PostgreSQL server (see `engine::pg_server`).
#[cfg(test)]
pub(crate) mod testing {
    use super::Db;

    pub(crate) fn sqlite() -> (Option<tempfile::TempDir>, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("loopbox.db")).unwrap();
        (Some(dir), db)
    }

    pub(crate) fn postgres() -> (Option<tempfile::TempDir>, Db) {
        let server =
            super::engine::pg_server::PgServer::shared(false).unwrap_or_else(|e| panic!("{e:#}"));
        let url = server.fresh_store().unwrap_or_else(|e| panic!("{e:#}"));
        (
            None,
            Db::open_postgres(&url).unwrap_or_else(|e| panic!("{e:#}")),
        )
    }
}

/// `#[test]`s that run each named `fn(Db)` on both engines: `on_sqlite::NAME`
/// and `on_postgres::NAME`.
#[cfg(test)]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(#[test]
            fn $name() {
                let (_dir, db) = $crate::db::testing::sqlite();
                super::$name(db)
            })*
        }
        mod on_postgres {
            $(#[test]
            fn $name() {
                let (_dir, db) = $crate::db::testing::postgres();
                super::$name(db)
            })*
        }
    };
}
#[cfg(test)]
pub(crate) use on_both_engines;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_itself_out_of_git() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .current_dir(dir.path())
                .args(args)
                .output()
                .unwrap()
        };
        git(&["init", "-q"]);
        Db::open_workspace(dir.path()).unwrap();
        let status = git(&["status", "--porcelain", "--untracked-files=all"]);
        assert!(status.status.success());
        assert_eq!(
            String::from_utf8_lossy(&status.stdout),
            "",
            "nothing of .loopbox/ shows in git"
        );
    }

    on_both_engines!(
        an_event_commits_state_and_log_together,
        the_state_total_follows_every_commit,
        state_is_per_run_and_prefix_is_literal,
        every_run_status_round_trips_through_the_store_and_a_strange_one_is_refused,
        an_intent_writes_the_pending_event_and_the_calls_before_it,
        a_spent_budget_writes_nothing,
        a_cancelled_run_starts_no_action_and_its_journal_counts_every_byte,
        a_cancel_committed_between_two_actions_declines_the_second_and_keeps_nothing_of_it,
        an_intent_of_a_run_whose_row_is_gone_is_refused_and_writes_nothing,
        a_refusal_says_which_budget_and_keeps_nothing_of_the_intent,
        results_state_and_log_lines_of_several_megabytes_round_trip_whole,
        a_pipeline_runs_in_order_and_a_failed_one_keeps_nothing,
        a_lease_held_by_a_live_process_is_refused_and_a_dead_one_is_taken_over,
    );

    fn with_run(db: Db) -> Db {
        db.create_run("r1", "builtin:ralph", "d", "{}").unwrap();
        db
    }

    fn an_event_commits_state_and_log_together(db: Db) {
        let db = with_run(db);
        let commit = EventCommit {
            event: "{}".into(),
            decision: Some("\"pass\"".into()),
            state_writes: vec![
                ("a".into(), Some("1".into())),
                ("b".into(), Some("2".into())),
                ("a".into(), None),
            ],
            log: vec![LogRecord {
                at_ms: 1,
                level: "info".into(),
                source: "policy".into(),
                message: "hi".into(),
            }],
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

    /// What the run's state holds, summed from its rows.
    fn summed(db: &Db, run: &str) -> u64 {
        db.conn()
            .query_row(
                "SELECT COALESCE(SUM(octet_length(key) + octet_length(value)), 0) FROM state WHERE run_id = ?1",
                [run],
                |r| r.get::<_, i64>(0),
            )
            .unwrap() as u64
    }

    fn the_state_total_follows_every_commit(db: Db) {
        let db = with_run(db);
        db.create_run("r2", "p", "d", "{}").unwrap();
        let commit = |run: &str, writes: &[(&str, Option<&str>)]| {
            let c = EventCommit {
                state_writes: writes
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.map(String::from)))
                    .collect(),
                ..Default::default()
            };
            db.commit_event(run, &c).unwrap();
        };
        let steps: [&[(&str, Option<&str>)]; 6] = [
            &[("a", Some("1")), ("é", Some("\"ü\""))],
            &[("a", Some("12345"))],
            &[("a", Some("1")), ("b", Some("[]"))],
            &[("missing", None)],
            &[("é", None), ("a", None), ("a", Some("7"))],
            &[],
        ];
        for writes in steps {
            commit("r1", writes);
            assert_eq!(
                db.state_total("r1").unwrap(),
                summed(&db, "r1"),
                "{writes:?}"
            );
        }
        assert_eq!(db.state_total("r1").unwrap(), 2 + 3);
        commit("r2", &[("x", Some("1"))]);
        assert_eq!(db.state_total("r1").unwrap(), 5);
        assert_eq!(db.state_total("r2").unwrap(), 2);
        assert_eq!(
            db.state_get_and_total("r1", "a").unwrap(),
            (Some("7".into()), 5)
        );
        assert_eq!(db.state_get_and_total("r1", "zz").unwrap(), (None, 5));
    }

    #[test]
    fn a_schema_4_store_gets_its_state_totals_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        {
            let db = Db::open(&path).unwrap();
            db.create_run("r", "p", "d", "{}").unwrap();
            db.create_run("empty", "p", "d", "{}").unwrap();
            let c = EventCommit {
                state_writes: vec![
                    ("k".into(), Some("\"ünï\"".into())),
                    ("n".into(), Some("10".into())),
                ],
                ..Default::default()
            };
            db.commit_event("r", &c).unwrap();
            // Back to schema 4: no state_bytes column.
            db.conn()
                .execute_batch("ALTER TABLE runs DROP COLUMN state_bytes; PRAGMA user_version = 4;")
                .unwrap();
        }
        let db = Db::open(&path).unwrap();
        assert_eq!(db.state_total("r").unwrap(), summed(&db, "r"));
        assert_eq!(db.state_total("r").unwrap(), 1 + 7 + 1 + 2);
        assert_eq!(db.state_total("empty").unwrap(), 0);
    }

    fn state_is_per_run_and_prefix_is_literal(db: Db) {
        let db = with_run(db);
        db.create_run("r2", "p", "d", "{}").unwrap();
        let w = |k: &str| EventCommit {
            state_writes: vec![(k.into(), Some("0".into()))],
            ..Default::default()
        };
        db.commit_event("r1", &w("a%b")).unwrap();
        db.commit_event("r1", &w("axb")).unwrap();
        db.commit_event("r2", &w("a%c")).unwrap();
        assert_eq!(db.state_keys("r1", "a%").unwrap(), ["a%b"]);
        assert_eq!(db.state_keys("r2", "").unwrap(), ["a%c"]);
    }

    fn every_run_status_round_trips_through_the_store_and_a_strange_one_is_refused(db: Db) {
        db.create_run("r", "p", "d", "{}").unwrap();
        assert_eq!(db.run("r").unwrap().unwrap().status, RunStatus::Running);
        for status in RunStatus::ALL {
            db.set_status("r", status, None).unwrap();
            let stored = db.run("r").unwrap().unwrap().status;
            assert_eq!(
                (stored, stored.to_string()),
                (status, status.as_str().to_string())
            );
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        let finals: Vec<_> = RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(
            finals.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            ["done", "failed", "escalated", "cancelled"]
        );
        db.conn()
            .execute("UPDATE runs SET status = 'blocked'", [])
            .unwrap();
        let e = db.run("r").unwrap_err();
        assert!(
            format!("{e:#}").contains("`blocked` is not a run status"),
            "{e:#}"
        );
    }

    #[test]
    fn store_advice_is_found_by_type_through_a_guest_call_and_given_once() {
        use crate::error::{find, host_err};
        use crate::wasm::fault::PolicyFault;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        std::fs::write(&path, vec![b'x'; 8192]).unwrap();
        let damaged = || Db::open(&path).unwrap_err();
        let e = damaged();
        assert_eq!(
            find::<StoreAdvice>(&e).map(|a| a.problem),
            Some(StoreProblem::Damaged)
        );
        let text = format!("{:#}", advise(e));
        assert_eq!(text.matches("the store is damaged").count(), 1, "{text}");

        // A store failure inside a guest's host call travels as a wasmtime error,
        // then a fault, then the run's error: the advice is still found by type.
        let w = host_err(damaged());
        let fault = PolicyFault::from_wasm(&w, &crate::limits::Limits::default());
        drop(w);
        let PolicyFault::Host(h) = fault else {
            panic!("not a host fault: {fault:?}")
        };
        let back = h.into_error();
        assert!(is_store_error(&back) && find::<StoreAdvice>(&back).is_some());
        let text = format!("{:#}", advise(back));
        assert_eq!(text.matches("the store is damaged").count(), 1, "{text}");

        // A store error nobody explained (a read) is explained at the command line, once.
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        let shared = PolicyFault::Host(crate::error::HostError::new(full.into()));
        let kept = shared.clone();
        let PolicyFault::Host(h) = shared else {
            unreachable!()
        };
        // Still shared with `kept`, so it comes back wrapped; the advice is found inside.
        let back = h.into_error();
        assert!(is_store_error(&back), "{back:#}");
        let text = format!("{:#}", advise(back));
        assert_eq!(text.matches("free some space").count(), 1, "{text}");
        assert_eq!(
            format!("{:#}", advise(anyhow::anyhow!("no run r9"))),
            "no run r9"
        );
        drop(kept);

        // A SQLite error that is the source of another error is found in the chain.
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapped(#[source] rusqlite::Error);
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        let wrapped = anyhow::Error::new(Wrapped(full));
        assert!(is_store_error(&wrapped));
        let text = format!("{:#}", advise(wrapped));
        assert_eq!(text.matches("free some space").count(), 1, "{text}");
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
        assert_eq!(db.run("old").unwrap().unwrap().status, RunStatus::Done);
        let prompts = Budget {
            prompts: Some(1),
            ..Default::default()
        };
        assert_eq!(db.spend("old", &prompts).unwrap(), Ok(()));
        assert_eq!(db.spend("old", &prompts).unwrap(), Err(Spent::Prompts(1)));
    }

    fn row(seq: i64, kind: &str, result: Option<&str>) -> JournalRow {
        JournalRow {
            seq,
            kind: kind.into(),
            request: format!("req{seq}"),
            result: result.map(String::from),
        }
    }

    fn an_intent_writes_the_pending_event_and_the_calls_before_it(db: Db) {
        let db = with_run(db);
        let budget = Budget {
            actions: Some(5),
            ..Default::default()
        };
        let seq = db
            .journal_intent(
                "r1",
                (None, "{\"type\":\"start\"}"),
                &[row(1, "read", Some("r"))],
                &row(2, "shell", None),
                &budget,
            )
            .unwrap()
            .unwrap();
        assert_eq!(seq, 1);
        let pending = db.last_event("r1").unwrap().unwrap();
        assert!(pending.pending && pending.decision.is_none());
        assert_eq!(
            db.journal("r1", 1).unwrap(),
            [row(1, "read", Some("r")), row(2, "shell", None)]
        );
        db.journal_result("r1", 1, 2, "out", None).unwrap();
        assert_eq!(db.run("r1").unwrap().unwrap().actions, 1);
        // The event commits into the same row, with the calls after the action.
        let commit = EventCommit {
            seq: Some(1),
            decision: Some("{}".into()),
            journal: vec![row(3, "wall-clock", Some("1"))],
            ..Default::default()
        };
        assert_eq!(db.commit_event("r1", &commit).unwrap(), 1);
        let e = db.last_event("r1").unwrap().unwrap();
        assert!(!e.pending && e.decision.is_some());
        assert_eq!(
            db.journal("r1", 1).unwrap(),
            [
                row(1, "read", Some("r")),
                row(2, "shell", Some("out")),
                row(3, "wall-clock", Some("1"))
            ]
        );
    }

    fn a_spent_budget_writes_nothing(db: Db) {
        let db = with_run(db);
        let budget = Budget {
            actions: Some(0),
            ..Default::default()
        };
        let r = db
            .journal_intent(
                "r1",
                (None, "{}"),
                &[row(1, "read", Some("r"))],
                &row(2, "shell", None),
                &budget,
            )
            .unwrap();
        assert_eq!(r, Err(Spent::Actions(0)));
        assert!(db.last_event("r1").unwrap().is_none());
        assert!(db.journal("r1", 1).unwrap().is_empty());
    }

    /// What a refused intent must not have changed: the run's counters, its
    /// journal bytes, its events and the journal of its event `seq`.
    fn untouched(db: &Db, seq: i64) -> (u64, u64, u64, usize, usize) {
        let r = db.run("r1").unwrap().unwrap();
        (
            r.actions,
            r.prompts,
            db.journal_bytes("r1").unwrap(),
            db.events("r1").unwrap().len(),
            db.journal("r1", seq).unwrap().len(),
        )
    }

    fn a_cancel_committed_between_two_actions_declines_the_second_and_keeps_nothing_of_it(db: Db) {
        let db = with_run(db);
        let budget = Budget {
            actions: Some(100),
            uncancelled: true,
            ..Default::default()
        };
        let seq = db
            .journal_intent("r1", (None, "{}"), &[], &row(1, "shell", None), &budget)
            .unwrap()
            .unwrap();
        db.journal_result("r1", seq, 1, "one", None).unwrap();
        // `loopbox runs cancel` from another process, between the two actions.
        db.reopen().unwrap().request_cancel("r1").unwrap();
        let before = untouched(&db, seq);
        let earlier = [row(2, "read", Some(&"y".repeat(5000)))];
        let r = db
            .journal_intent(
                "r1",
                (Some(seq), "{}"),
                &earlier,
                &row(3, "shell", None),
                &budget,
            )
            .unwrap();
        assert_eq!(r, Err(Spent::Cancelled));
        assert_eq!(
            untouched(&db, seq),
            before,
            "the declined intent kept something"
        );
        // A new event's intent is declined too, and leaves no pending event behind.
        let r = db
            .journal_intent("r1", (None, "{}"), &[], &row(1, "shell", None), &budget)
            .unwrap();
        assert_eq!(r, Err(Spent::Cancelled));
        assert_eq!(untouched(&db, seq), before);
        // The driver's own writes (no `uncancelled`) still go through.
        let teardown = Budget::default();
        assert!(db.spend("r1", &teardown).unwrap().is_ok());
    }

    fn an_intent_of_a_run_whose_row_is_gone_is_refused_and_writes_nothing(db: Db) {
        let db = with_run(db);
        db.conn()
            .execute("DELETE FROM runs WHERE id = ?1", ["r1"])
            .unwrap();
        for uncancelled in [true, false] {
            let budget = Budget {
                actions: Some(100),
                uncancelled,
                ..Default::default()
            };
            let r = db.journal_intent(
                "r1",
                (Some(1), "{}"),
                &[row(1, "read", Some("r"))],
                &row(2, "shell", None),
                &budget,
            );
            // Never an action started for a run the store no longer has, nor a
            // budget blamed: the same error on both engines.
            let e = r.expect_err(&format!("uncancelled={uncancelled}: not refused"));
            assert!(
                e.to_string()
                    .starts_with("run `r1` is no longer in the store"),
                "uncancelled={uncancelled}: {e:#}"
            );
            assert!(db.journal("r1", 1).unwrap().is_empty());
            let e = db
                .spend("r1", &budget)
                .expect_err("spent on a run that is gone");
            assert!(e.to_string().contains("no longer in the store"), "{e:#}");
        }
    }

    fn a_refusal_says_which_budget_and_keeps_nothing_of_the_intent(db: Db) {
        let db = with_run(db);
        let budget = Budget {
            actions: Some(2),
            prompts: Some(1),
            uncancelled: true,
            ..Default::default()
        };
        let seq = db
            .journal_intent("r1", (None, "{}"), &[], &row(1, "agent", None), &budget)
            .unwrap()
            .unwrap();
        let before = untouched(&db, seq);
        // The prompt budget is spent (the action budget still has room).
        let r = db
            .journal_intent(
                "r1",
                (Some(seq), "{}"),
                &[],
                &row(2, "agent", None),
                &budget,
            )
            .unwrap();
        assert_eq!(r, Err(Spent::Prompts(1)));
        assert_eq!(untouched(&db, seq), before);
        // An action with no prompt spends the last action.
        let shell = Budget {
            prompts: None,
            ..budget
        };
        db.journal_intent("r1", (Some(seq), "{}"), &[], &row(2, "shell", None), &shell)
            .unwrap()
            .unwrap();
        let before = untouched(&db, seq);
        let r = db
            .journal_intent("r1", (Some(seq), "{}"), &[], &row(3, "shell", None), &shell)
            .unwrap();
        assert_eq!(r, Err(Spent::Actions(2)));
        assert_eq!(untouched(&db, seq), before);
        // Both spent and cancelled: the cancel is what the policy is told.
        db.request_cancel("r1").unwrap();
        let r = db
            .journal_intent("r1", (Some(seq), "{}"), &[], &row(3, "shell", None), &shell)
            .unwrap();
        assert_eq!(r, Err(Spent::Cancelled));
        assert_eq!(untouched(&db, seq), before);
    }

    fn results_state_and_log_lines_of_several_megabytes_round_trip_whole(db: Db) {
        let db = with_run(db);
        // Distinct text, so a chunk lost or repeated on the way shows.
        let big = |tag: &str| -> String {
            (0..(5 << 20) / 8)
                .map(|i| format!("{tag}{:07}", i % 10_000_000))
                .collect()
        };
        let (result, value, line) = (big("r"), format!("\"{}\"", big("s")), big("l"));
        let budget = Budget {
            actions: Some(10),
            uncancelled: true,
            ..Default::default()
        };
        let seq = db
            .journal_intent("r1", (None, "{}"), &[], &row(1, "shell", None), &budget)
            .unwrap()
            .unwrap();
        db.journal_result("r1", seq, 1, &result, None).unwrap();
        let commit = EventCommit {
            seq: Some(seq),
            decision: Some("{}".into()),
            state_writes: vec![("k".into(), Some(value.clone()))],
            log: vec![LogRecord {
                at_ms: 1,
                level: "info".into(),
                source: "policy".into(),
                message: line.clone(),
            }],
            ..Default::default()
        };
        db.commit_event("r1", &commit).unwrap();
        let journal = db.journal("r1", seq).unwrap();
        assert!(
            journal[0].result.as_deref() == Some(result.as_str()),
            "the result differs"
        );
        assert!(
            db.state_get("r1", "k").unwrap().as_deref() == Some(value.as_str()),
            "the state differs"
        );
        let log = db.log("r1").unwrap();
        assert!(
            log.iter().any(|l| l.message == line),
            "the log line differs"
        );
    }

    fn a_cancelled_run_starts_no_action_and_its_journal_counts_every_byte(db: Db) {
        let db = with_run(db);
        let budget = Budget {
            actions: Some(100),
            uncancelled: true,
            ..Default::default()
        };
        // Six calls before the intent (more than one multi-row INSERT holds).
        let earlier: Vec<JournalRow> = (1..=6)
            .map(|i| row(i, "read", Some(&"x".repeat(i as usize))))
            .collect();
        let intent = row(7, "shell", None);
        let seq = db
            .journal_intent("r1", (None, "{}"), &earlier, &intent, &budget)
            .unwrap()
            .unwrap();
        let mut bytes: u64 = earlier.iter().chain([&intent]).map(JournalRow::bytes).sum();
        assert_eq!(db.journal_bytes("r1").unwrap(), bytes);
        db.journal_result("r1", seq, 7, "done!", None).unwrap();
        bytes += 5;
        assert_eq!(db.journal_bytes("r1").unwrap(), bytes);
        // A result written again (a replay's outcome-unknown) counts its bytes again, as before.
        let commit = EventCommit {
            seq: Some(seq),
            decision: Some("{}".into()),
            journal: vec![row(8, "wall-clock", Some("12"))],
            ..Default::default()
        };
        db.commit_event("r1", &commit).unwrap();
        bytes += commit.journal[0].bytes();
        assert_eq!(db.journal_bytes("r1").unwrap(), bytes);
        assert_eq!(db.journal("r1", seq).unwrap().len(), 8);

        // Cancelled: the next intent is refused, and writes nothing.
        db.request_cancel("r1").unwrap();
        let r = db
            .journal_intent("r1", (None, "{}"), &[], &row(1, "shell", None), &budget)
            .unwrap();
        assert_eq!(r, Err(Spent::Cancelled));
        assert_eq!(db.spend("r1", &budget).unwrap(), Err(Spent::Cancelled));
        let run = db.run("r1").unwrap().unwrap();
        assert_eq!(run.actions, 1);
        assert_eq!(db.journal_bytes("r1").unwrap(), bytes);
        assert_eq!(db.last_event("r1").unwrap().unwrap().seq, seq);
        // What does not ask about the cancel still counts.
        let anyway = Budget {
            uncancelled: false,
            ..budget
        };
        assert_eq!(db.spend("r1", &anyway).unwrap(), Ok(()));
        assert_eq!(db.run("r1").unwrap().unwrap().actions, 2);
    }

    fn a_pipeline_runs_in_order_and_a_failed_one_keeps_nothing(db: Db) {
        let db = with_run(db);
        let actions = |db: &Db| db.run("r1").unwrap().unwrap().actions;
        let done = db
            .write_run("r1", "test", |tx| {
                Ok(tx.pipeline(&[
                    (
                        "UPDATE runs SET actions = 5 WHERE id = ?1",
                        vec![engine::Value::Text("r1".into())],
                    ),
                    (
                        "SELECT actions FROM runs WHERE id = ?1",
                        vec![engine::Value::Text("r1".into())],
                    ),
                    (
                        "UPDATE runs SET actions = actions + 1 WHERE id = ?1",
                        vec![engine::Value::Text("r1".into())],
                    ),
                    (
                        "SELECT actions FROM runs WHERE id = ?1",
                        vec![engine::Value::Text("r1".into())],
                    ),
                ])?)
            })
            .unwrap();
        // Each statement saw what the ones before it wrote, and said what it changed.
        assert_eq!(done[0].changed, 1);
        assert_eq!(done[1].rows[0].get::<_, i64>(0).unwrap(), 5);
        assert_eq!(done[2].changed, 1);
        assert_eq!(done[3].rows[0].get::<_, i64>(0).unwrap(), 6);
        assert_eq!(actions(&db), 6);
        // A failing statement fails the transaction: the writes before it are not kept.
        let e = db
            .write_run("r1", "test", |tx| {
                Ok(tx.pipeline(&[
                    (
                        "UPDATE runs SET actions = 9 WHERE id = ?1",
                        vec![engine::Value::Text("r1".into())],
                    ),
                    ("INSERT INTO no_such_table VALUES (1)", vec![]),
                ])?)
            })
            .unwrap_err();
        assert!(format!("{e:#}").contains("no_such_table"), "{e:#}");
        assert_eq!(actions(&db), 6);
        // A spent budget of several keeps none of them (they are sent together).
        let spent = db
            .spend(
                "r1",
                &Budget {
                    prompts: Some(0),
                    actions: Some(100),
                    turn: true,
                    uncancelled: true,
                },
            )
            .unwrap();
        assert_eq!(spent, Err(Spent::Prompts(0)));
        let r = db.run("r1").unwrap().unwrap();
        assert_eq!((r.actions, r.turns), (6, 0));
    }

    fn a_lease_held_by_a_live_process_is_refused_and_a_dead_one_is_taken_over(db: Db) {
        let db = with_run(db);
        assert_eq!(db.acquire("r1").unwrap(), Ok(()));
        // Another live process holds it.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let other = lease::Owner::of(child.id()).unwrap();
        db.conn()
            .execute(
                "UPDATE runs SET lease = ?1 WHERE id = 'r1'",
                [other.to_string()],
            )
            .unwrap();
        assert_eq!(db.acquire("r1").unwrap(), Err(other.clone()));
        assert!(db.find_interrupted().unwrap().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        // A driver that is gone: the run shows as interrupted, and can be taken.
        db.conn()
            .execute(
                "UPDATE runs SET lease = ?1 WHERE id = 'r1'",
                [format!("{} 999999999 1", lease::Owner::me().host)],
            )
            .unwrap();
        let found = db.find_interrupted().unwrap();
        assert_eq!(
            found.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["r1"]
        );
        assert_eq!(
            db.run("r1").unwrap().unwrap().status,
            RunStatus::Interrupted
        );
        assert_eq!(db.acquire("r1").unwrap(), Ok(()));
        assert_eq!(db.run("r1").unwrap().unwrap().status, RunStatus::Running);
        assert!(db.find_interrupted().unwrap().is_empty());
    }

    #[test]
    fn a_restarted_postgresql_loses_nothing_and_a_cut_transaction_runs_again_once() {
        let server = engine::pg_server::PgServer::start_own(false).unwrap();
        let db = Db::open_postgres(&server.fresh_store().unwrap()).unwrap();
        let db = with_run(db);
        let event = |n: i64| EventCommit {
            event: format!("{{\"n\":{n}}}"),
            decision: Some("\"pass\"".into()),
            ..Default::default()
        };
        assert_eq!(db.commit_event("r1", &event(1)).unwrap(), 1);
        // Between two steps: the next read and the next write find a new connection.
        server.restart().unwrap();
        assert_eq!(db.run("r1").unwrap().unwrap().status, RunStatus::Running);
        assert_eq!(db.commit_event("r1", &event(2)).unwrap(), 2);
        // In the middle of one: the cut transaction committed nothing and runs again.
        let mut tries = 0;
        db.write("test", |tx| {
            tries += 1;
            tx.exec(
                "INSERT INTO run_log (run_id, seq, at, level, source, message) VALUES ('r1', 1, 0, 'info', 't', 'once')",
                [],
            )?;
            if tries == 1 {
                server.restart()?;
            }
            tx.exec("UPDATE runs SET turns = turns + 1 WHERE id = 'r1'", [])?;
            Ok(())
        })
        .unwrap();
        assert_eq!(tries, 2);
        assert_eq!(db.log("r1").unwrap().len(), 1);
        assert_eq!(db.run("r1").unwrap().unwrap().turns, 1);
        assert_eq!(db.events("r1").unwrap().len(), 2);
    }

    #[test]
    fn a_damaged_store_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        std::fs::write(
            &path,
            b"this is not a database, just text that is long enough to have a header......",
        )
        .unwrap();
        let e = format!("{:#}", Db::open(&path).err().unwrap());
        assert!(
            e.contains("the store is damaged") && e.contains(".recover"),
            "{e}"
        );
    }

    /// `n` finished runs written straight into the store, as a long history leaves them.
    fn finished_runs(db: &Db, n: usize) {
        db.conn()
            .execute(
                "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
                 INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options)
                 SELECT 'old' || i, 'p', 'd', '{}', 'done', i, i, 's', '{}' FROM k",
                [n as i64],
            )
            .unwrap();
    }

    #[test]
    fn finding_interrupted_runs_reads_only_the_running_ones_through_an_index() {
        let (_d, db) = testing::sqlite();
        let db = with_run(db);
        finished_runs(&db, 2000);
        // A row only a scan of every run would read, and fail on.
        db.conn()
            .execute(
                "INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at) VALUES ('odd', 'p', 'd', '{}', 'not-a-status', 0, 0)",
                [],
            )
            .unwrap();
        db.conn()
            .execute(
                "UPDATE runs SET lease = ?1 WHERE id = 'r1'",
                [format!("{} 999999999 1", lease::Owner::me().host)],
            )
            .unwrap();
        let found = db.find_interrupted().unwrap();
        assert_eq!(
            found.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["r1"]
        );
        let c = db.conn();
        let sql = runs::runs_with_status_sql(db.run_columns());
        let plan: Vec<String> = c
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(["running"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|p| p.contains("USING INDEX runs_by_status (status=?)"))
                && !plan.iter().any(|p| p.starts_with("SCAN runs")),
            "{plan:?}"
        );
        // The rows the query steps through do not grow with the finished runs.
        let mut stmt = c.as_sqlite().unwrap().prepare(&sql).unwrap();
        let rows = stmt.query_map(["running"], |_| Ok(())).unwrap().count();
        let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
        assert!(rows == 0 && steps < 100, "{rows} rows in {steps} steps");
    }

    #[test]
    fn a_schema_5_store_gets_the_status_index_and_is_read_without_upgrading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v5.db");
        {
            let db = Db::open(&path).unwrap();
            db.create_run("r", "p", "d", "{}").unwrap();
            db.conn()
                .execute_batch("DROP INDEX runs_by_status; PRAGMA user_version = 5;")
                .unwrap();
        }
        let index = |db: &Db| -> i64 {
            db.conn()
                .query_row(
                    "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name = 'runs_by_status'",
                    [],
                    |r| r.get(0),
                )
                .unwrap()
        };
        let version = |db: &Db| -> i64 {
            db.conn()
                .as_sqlite()
                .unwrap()
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .unwrap()
        };
        // Read only: readable as it is, nothing changed, and nothing can be.
        let reader = Db::open_read_only(&path).unwrap();
        assert_eq!(reader.run("r").unwrap().unwrap().status, RunStatus::Running);
        assert_eq!((version(&reader), index(&reader)), (5, 0));
        let e = reader.set_status("r", RunStatus::Done, None).unwrap_err();
        assert!(format!("{e:#}").contains("readonly"), "{e:#}");
        drop(reader);
        // Opened to write, it is upgraded.
        let db = Db::open(&path).unwrap();
        assert_eq!((version(&db), index(&db)), (schema::SCHEMA_VERSION, 1));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(format!("{:#}", Db::open(&path).err().unwrap()).contains("newer loopbox"));
    }
}
