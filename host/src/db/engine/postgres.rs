//! The PostgreSQL engine: a tokio-postgres client whose connection is
//! worked by the thread that waits on it (`pg_socket.rs`: the request written
//! to the socket, the answer waited for in `poll(2)` and read, no other
//! thread in between), so it works the same inside a tokio runtime (the
//! server's, the CLI's) and outside one, where the synchronous `postgres`
//! crate would panic. Only the listener that wakes workers
//! ([`listen_runnable`]) has a thread and a runtime of its own.
//!
//! A connection that was lost (the server restarted) is made again at the next
//! call; the transaction it was in did not commit, and the caller sees an
//! error it can retry ([`super::Error::is_connection_lost`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Config, Statement};

use super::pg_socket::Link;
use super::tls::MakeRustls;

use super::{Done, Error, Result, Row, Scope, Value};

/// Round trips to a server and statements sent, by every connection of
/// this process (see [`round_trips`]).
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);
static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// Round trips made to PostgreSQL servers by this process so far, and the
/// statements they carried (a `BEGIN` batch, a pipeline of several, a
/// `prepare`): what the store bench divides by its actions.
pub fn round_trips() -> (u64, u64) {
    (
        ROUND_TRIPS.load(Ordering::Relaxed),
        STATEMENTS.load(Ordering::Relaxed),
    )
}

fn trip(statements: usize) {
    ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
    STATEMENTS.fetch_add(statements as u64, Ordering::Relaxed);
}

/// The key of the store's advisory lock: held exclusively by a write
/// transaction of [`Scope::Store`], shared by the others (see
/// [`PgConn::begin_write`]).
const WRITE_LOCK: i64 = 0x006c_6f6f_7062_6f78; // "loopbox"

/// The first key of a run's advisory lock (the two-key form, a key space of
/// its own apart from [`WRITE_LOCK`]'s); the second is the run id's hash.
const RUN_LOCK_CLASS: i32 = 0x6c62_7275; // "lbru"

/// How long a session may sit inside a transaction doing nothing before the
/// server ends it (and rolls the transaction back).
const IDLE_IN_TRANSACTION: &str = "SET idle_in_transaction_session_timeout = 10000";

/// How long making a connection may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a request may wait for the server's answer, in milliseconds (see
/// [`set_answer_deadline`]). A partition that drops packets, or a proxy that
/// swallows them, leaves a request unanswered for as long as TCP keeps trying
/// (minutes): past this, the connection counts as lost, so nothing that waits on
/// the store (a worker's renewal, its SIGTERM drain) waits longer than this.
static ANSWER_DEADLINE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(30_000);

/// Give up on a request the server has not answered in `d` (at least 1 s):
/// `loopbox worker` sets its lease's TTL, since a store that does not answer in
/// a TTL has let the lease go anyway. A lock wait (writers of one run, or the
/// store's lock) counts too: keep it above the longest transaction.
pub fn set_answer_deadline(d: std::time::Duration) {
    let ms = d.as_millis().clamp(1_000, u128::from(u32::MAX)) as u64;
    ANSWER_DEADLINE_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// A connection to a PostgreSQL store, made again when it was lost.
pub struct PgConn {
    config: Config,
    tls: MakeRustls,
    /// The store as shown to a user: the URL without its password.
    label: String,
    client: RefCell<Option<Client>>,
    /// The client's socket, worked by the thread that waits on it (`pg_socket.rs`).
    link: RefCell<Option<Link>>,
    statements: RefCell<HashMap<String, Statement>>,
    /// Inside `begin_write` … `commit`/`rollback`: a lost connection then
    /// fails the statement (the caller retries the whole transaction).
    in_transaction: std::cell::Cell<bool>,
    /// The `BEGIN` batch of a write transaction not sent yet: it goes in the
    /// same round trip as the transaction's first statement (see
    /// [`PgConn::begin_write`]).
    pending_begin: RefCell<Option<Begin>>,
    /// Statements that go first in the transaction's next request (see
    /// [`PgConn::defer`]): a claimed run's fence.
    pending_steps: RefCell<Vec<(String, Vec<Value>)>>,
    /// The transaction was committed by its last request
    /// ([`PgConn::pipeline_committing`]): `commit` has nothing left to send.
    committed: std::cell::Cell<bool>,
}

/// Whether `store` names a PostgreSQL store rather than an SQLite file.
pub fn is_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// Whether `store` carries a password (in its user information, or as a
/// `password=` parameter), as far as it can be read at all.
pub fn has_password(store: &str) -> bool {
    match store.parse::<Config>() {
        Ok(c) => c.get_password().is_some(),
        // Not a URL tokio-postgres reads: whatever looks like a password counts.
        Err(_) => redact(store) != store,
    }
}

/// `url` without its password, to show in messages.
pub fn label(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

impl PgConn {
    /// Connect to the store at `url` (`postgres://user:password@host:port/db?…`).
    pub fn connect(url: &str) -> Result<PgConn> {
        let (config, tls) = parse(url)?;
        let conn = PgConn {
            label: label(&config),
            config,
            tls,
            client: RefCell::new(None),
            link: RefCell::new(None),
            statements: RefCell::new(HashMap::new()),
            in_transaction: std::cell::Cell::new(false),
            pending_begin: RefCell::new(None),
            pending_steps: RefCell::new(Vec::new()),
            committed: std::cell::Cell::new(false),
        };
        conn.reconnect_if_lost()?;
        Ok(conn)
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Connect again when the connection was lost (or never made).
    pub fn reconnect_if_lost(&self) -> Result<()> {
        let lost = self.client.borrow().as_ref().is_none_or(Client::is_closed);
        if lost && self.in_transaction.get() {
            // Never carry on a transaction on a new connection: what it wrote so far is gone.
            return Err(Error::Connection(format!(
                "the connection to {} was lost in the middle of a transaction, which did not commit",
                self.label
            )));
        }
        if lost {
            self.statements.borrow_mut().clear();
            self.drop_connection();
            let (client, link) = connect(&self.config, &self.tls, &self.label)?;
            *self.link.borrow_mut() = Some(link);
            // A process stopped (SIGSTOP, a debugger) inside a transaction would hold the
            // store's write lock for every other process: the server ends such a session.
            if let Err(e) = self.answer(client.batch_execute(IDLE_IN_TRANSACTION)) {
                self.drop_connection();
                return Err(e);
            }
            *self.client.borrow_mut() = Some(client);
        }
        Ok(())
    }

    /// Forget the connection, to be made again at the next call.
    fn drop_connection(&self) {
        *self.client.borrow_mut() = None;
        if let Some(mut link) = self.link.borrow_mut().take() {
            // Lost: nothing more is sent on it.
            link.abandon();
        }
    }

    /// `request`'s answer, or a lost connection past the answer deadline.
    fn answer<T>(
        &self,
        request: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        Ok(self.within_deadline(request)??)
    }

    /// What `f` gives, or a lost connection past the answer deadline.
    fn within_deadline<F: Future>(&self, f: F) -> Result<F::Output> {
        let ms = ANSWER_DEADLINE_MS.load(std::sync::atomic::Ordering::Relaxed);
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let done = match self.link.borrow_mut().as_mut() {
            Some(link) => link.drive(f, deadline),
            None => None,
        };
        done.ok_or_else(|| {
            Error::Connection(format!(
                "the store {} did not answer in {}s (answer deadline); the connection is dropped and made again at the next call",
                self.label,
                ms / 1000
            ))
        })
    }

    /// Run `f` with the client; a lost connection is forgotten, to be made
    /// again. A statement on its own (not in a transaction) is run again once
    /// on the new connection: it either committed whole before, or not at all,
    /// and the statements run on their own are reads.
    fn with<T>(&self, mut f: impl FnMut(&Client) -> Result<T>) -> Result<T> {
        match self.with_once(&mut f) {
            Err(e) if e.is_connection_lost() && !self.in_transaction.get() => self.with_once(f),
            done => done,
        }
    }

    fn with_once<T>(&self, f: impl FnOnce(&Client) -> Result<T>) -> Result<T> {
        self.reconnect_if_lost()?;
        let guard = self.client.borrow();
        let client = guard
            .as_ref()
            .ok_or_else(|| Error::Connection(format!("no connection to {}", self.label)))?;
        let out = f(client);
        drop(guard);
        if let Err(e) = &out
            && e.is_connection_lost()
        {
            self.drop_connection();
        }
        out
    }

    /// `sql` prepared (once), its parameters' types as the server infers them
    /// from their use. A parameter it cannot infer (`?1 IS NULL OR tenant =
    /// ?1`, where the first use decides) takes the type of the value bound
    /// this time, or `text` for a NULL.
    fn statement(&self, client: &Client, sql: &str, params: &[Value]) -> Result<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let translated = super::numbered_placeholders(sql);
        trip(1);
        let s = match self.answer(client.prepare(&translated)) {
            // 42P18 when nothing says; 42P08 when uses disagree.
            Err(Error::Postgres(e))
                if e.code().is_some_and(|c| {
                    *c == SqlState::INDETERMINATE_DATATYPE || *c == SqlState::AMBIGUOUS_PARAMETER
                }) =>
            {
                let types: Vec<Type> = params
                    .iter()
                    .map(|v| match v {
                        Value::Int(_) => Type::INT8,
                        Value::Real(_) => Type::FLOAT8,
                        Value::Blob(_) => Type::BYTEA,
                        Value::Text(_) | Value::Null => Type::TEXT,
                    })
                    .collect();
                trip(1);
                self.answer(client.prepare_typed(&translated, &types))?
            }
            s => s?,
        };
        self.statements
            .borrow_mut()
            .insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<usize> {
        let mut done = self.pipeline(&[(sql, params)])?;
        Ok(done.pop().map_or(0, |d| d.changed))
    }

    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut done = self.pipeline(&[(sql, params)])?;
        Ok(done.pop().map(|d| d.rows).unwrap_or_default())
    }

    pub fn query_one(&self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Run `steps` in order in one round trip: every request is sent before
    /// the first answer is read (tokio-postgres pipelines requests issued
    /// together), and the server runs them one after another, each seeing
    /// what the ones before it wrote. A write transaction's `BEGIN` batch not
    /// sent yet goes first. When one fails, the transaction is aborted and
    /// the ones after it fail too: the first error is returned.
    pub fn pipeline(&self, steps: &[(&str, &[Value])]) -> Result<Vec<Done>> {
        self.send(steps, false)
    }

    /// [`PgConn::pipeline`], then `COMMIT` in the same round trip: for a write
    /// transaction's last request, when nothing is decided on its answers. A
    /// step that fails aborts the transaction, and the server then takes the
    /// `COMMIT` for a `ROLLBACK`: nothing of it is kept.
    pub fn pipeline_committing(&self, steps: &[(&str, &[Value])]) -> Result<Vec<Done>> {
        self.send(steps, true)
    }

    /// Run `sql` first in the transaction's next request (its round trip); an
    /// error of it is that request's error, and fails the transaction.
    pub fn defer(&self, sql: &str, params: Vec<Value>) {
        self.pending_steps
            .borrow_mut()
            .push((sql.to_string(), params));
    }

    fn send(&self, steps: &[(&str, &[Value])], commit: bool) -> Result<Vec<Done>> {
        let deferred = std::mem::take(&mut *self.pending_steps.borrow_mut());
        let sent = self.with(|c| {
            let first: Vec<(&str, &[Value])> = deferred
                .iter()
                .map(|(sql, params)| (sql.as_str(), params.as_slice()))
                .collect();
            let statements = first
                .iter()
                .chain(steps)
                .map(|(sql, params)| self.statement(c, sql, params))
                .collect::<Result<Vec<_>>>()?;
            let begin = self.pending_begin.borrow_mut().take();
            // Prepared like the rest: the server neither parses nor plans them again.
            let opening = match &begin {
                Some(b) => vec![
                    (self.statement(c, "BEGIN", &[])?, &[][..]),
                    (self.statement(c, b.locks, &b.keys)?, &b.keys[..]),
                ],
                None => Vec::new(),
            };
            let closing = if commit {
                Some(self.statement(c, "COMMIT", &[])?)
            } else {
                None
            };
            let mut requests: Vec<Pin<Box<dyn Future<Output = Result<Done>> + '_>>> = Vec::new();
            for (s, params) in &opening {
                requests.push(Box::pin(run(c, s, params)));
            }
            for (s, (_, params)) in statements.iter().zip(first.iter().chain(steps)) {
                requests.push(Box::pin(run(c, s, params)));
            }
            if let Some(s) = &closing {
                requests.push(Box::pin(run(c, s, &[])));
            }
            trip(requests.len());
            // Answers in order: the first error is the first failed request's.
            let skip = opening.len() + first.len();
            let mut out = Vec::with_capacity(steps.len());
            for (i, done) in self
                .within_deadline(futures_util::future::join_all(requests))?
                .into_iter()
                .enumerate()
            {
                let done = done?;
                if i >= skip && out.len() < steps.len() {
                    out.push(done);
                }
            }
            Ok(out)
        });
        if commit && sent.is_ok() {
            self.committed.set(true);
        }
        sent
    }

    pub fn batch(&self, sql: &str) -> Result<()> {
        if !self.pending_steps.borrow().is_empty() {
            self.send(&[], false)?;
        }
        let sql = match self.pending_begin.borrow_mut().take() {
            Some(begin) => format!("{}; {sql}", begin.as_batch()),
            None => sql.to_string(),
        };
        self.with(|c| {
            trip(1);
            self.answer(c.batch_execute(&sql))
        })
    }

    /// Begin a write transaction that holds, until it ends, the locks its
    /// `scope` needs, each taken in the same round trip as the `BEGIN`:
    ///
    /// - [`Scope::Store`]: the store's lock, exclusively: writers run one
    ///   after another, as on SQLite, so a transaction that reads, then writes
    ///   what it read anywhere in the store (the audit log's next number, a
    ///   token name's being free) sees every write committed before it.
    /// - [`Scope::Run`]: the store's lock shared, then the run's own lock: a
    ///   run's writers follow one another (its next event's number is read,
    ///   then written), while writers of other runs commit in parallel and
    ///   PostgreSQL groups their `fsync`s.
    /// - [`Scope::Rows`]: the store's lock shared; the transaction locks the
    ///   rows it reads itself (`FOR UPDATE SKIP LOCKED`).
    ///
    /// The store's lock is always taken first and a run's second, and no
    /// transaction takes two runs', so writers cannot deadlock. Readers are
    /// not held up.
    ///
    /// The batch is sent with the transaction's first statement, in its round
    /// trip (the server takes the locks before it runs the statement); a
    /// transaction that runs no statement sends nothing.
    pub fn begin_write(&self, scope: Scope<'_>) -> Result<()> {
        self.in_transaction.set(true);
        self.pending_steps.borrow_mut().clear();
        self.committed.set(false);
        *self.pending_begin.borrow_mut() = Some(Begin::of(scope));
        Ok(())
    }

    pub fn commit(&self) -> Result<()> {
        // A deferred check with nothing after it guards no write.
        self.pending_steps.borrow_mut().clear();
        if self.committed.replace(false) {
            self.pending_begin.borrow_mut().take();
            self.in_transaction.set(false);
            return Ok(());
        }
        // Nothing was run: there is no transaction on the server to commit.
        let begun = self.pending_begin.borrow_mut().take().is_none();
        let done = if begun { self.batch("COMMIT") } else { Ok(()) };
        self.in_transaction.set(false);
        done
    }

    pub fn rollback(&self) {
        self.pending_steps.borrow_mut().clear();
        self.committed.set(false);
        let begun = self.pending_begin.borrow_mut().take().is_none();
        if begun {
            let _ = self.batch("ROLLBACK");
        }
        self.in_transaction.set(false);
    }
}

/// A write transaction's start, not sent yet: `BEGIN`, then the locks of
/// its scope (see [`PgConn::begin_write`]), in one statement whose calls
/// run in order: the store's lock first.
struct Begin {
    locks: &'static str,
    keys: Vec<Value>,
}

impl Begin {
    fn of(scope: Scope<'_>) -> Begin {
        let (locks, keys) = match scope {
            Scope::Store => ("SELECT pg_advisory_xact_lock(?1)", vec![WRITE_LOCK]),
            Scope::Rows => ("SELECT pg_advisory_xact_lock_shared(?1)", vec![WRITE_LOCK]),
            Scope::Run(run) => (
                "SELECT pg_advisory_xact_lock_shared(?1), pg_advisory_xact_lock(?2, ?3)",
                vec![
                    WRITE_LOCK,
                    i64::from(RUN_LOCK_CLASS),
                    i64::from(run_key(run)),
                ],
            ),
        };
        Begin {
            locks,
            keys: keys.into_iter().map(Value::Int).collect(),
        }
    }

    /// As a simple query's statements, the keys written in.
    fn as_batch(&self) -> String {
        let mut sql = self.locks.to_string();
        // From the last, so `?1` is not taken for the start of `?10`.
        for (i, key) in self.keys.iter().enumerate().rev() {
            if let Value::Int(k) = key {
                sql = sql.replace(&format!("?{}", i + 1), &k.to_string());
            }
        }
        format!("BEGIN; {sql}")
    }
}

/// One statement of a pipeline: its rows, and the rows it changed.
async fn run(client: &Client, s: &Statement, params: &[Value]) -> Result<Done> {
    let stream = client
        .query_raw(s, params.iter().map(|v| v as &(dyn ToSql + Sync)))
        .await?;
    let mut stream = std::pin::pin!(stream);
    let mut rows = Vec::new();
    while let Some(r) = futures_util::TryStreamExt::try_next(&mut stream).await? {
        rows.push(row(&r)?);
    }
    let changed = stream.rows_affected().unwrap_or(0) as usize;
    Ok(Done { changed, rows })
}

/// The second key of `run`'s advisory lock: a hash of its id (FNV-1a, the
/// same in every process and on every machine). Two runs whose ids hash
/// alike only share a lock: their writers then follow one another.
fn run_key(run: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in run.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as i32
}

/// The connection settings `url` names, as the store reads them (its TLS
/// parameters left out).
pub fn config_of(url: &str) -> Result<Config> {
    parse(url).map(|(c, _)| c)
}

/// The URL's connection settings, and its TLS (`sslmode`, `sslrootcert`; see `tls.rs`).
fn parse(url: &str) -> Result<(Config, MakeRustls)> {
    let split = super::tls::split(url, &redact(url))?;
    let config: Config = split.url.parse().map_err(|e| {
        Error::Connection(format!(
            "`{}` is not a PostgreSQL URL ({e}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE",
            redact(url)
        ))
    })?;
    Ok((config, split.tls))
}

/// `url` with its password replaced by `***`, wherever it is written: in the
/// user information (`postgres://u:PASSWORD@h/db`) or as a parameter
/// (`?password=…`, or `password=…` in a `key=value` string given by mistake).
/// Used for every message that shows a store the user gave, which may end up
/// in a CI log or a terminal others read.
pub fn redact(url: &str) -> String {
    let mut out = match url.find("://") {
        Some(s) => {
            // The user information ends at the last `@` before the path or query.
            let rest = &url[s + 3..];
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => {
                    let userinfo = &rest[..at];
                    match userinfo.find(':') {
                        Some(c) => {
                            format!("{}{}:***{}", &url[..s + 3], &userinfo[..c], &rest[at..])
                        }
                        None => url.to_string(),
                    }
                }
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    let mut from = 0;
    while let Some(k) = out[from..].to_ascii_lowercase().find("password=") {
        let start = from + k + "password=".len();
        let end = out[start..]
            .find(|c: char| c == '&' || c.is_whitespace())
            .map_or(out.len(), |e| start + e);
        out.replace_range(start..end, "***");
        from = start + 3;
    }
    out
}

/// The channel a transaction that made a run runnable notifies (on commit).
pub const RUNNABLE: &str = "loopbox_runnable";

/// A wake-up each time a run becomes runnable in the store at `url` (a
/// `NOTIFY` on [`RUNNABLE`]), through a listening connection of its own that
/// is made again when lost. Notifications are only a hint: a worker also
/// looks on its own now and then (one made while the listener reconnects is
/// not seen).
pub fn listen_runnable(url: &str) -> Result<Arc<tokio::sync::Notify>> {
    let (config, tls) = parse(url)?;
    let notify = Arc::new(tokio::sync::Notify::new());
    let wake = notify.clone();
    runtime().spawn(async move {
        loop {
            if let Ok((client, mut connection)) = config.connect(tls.clone()).await {
                let heard = wake.clone();
                let driver = tokio::spawn(async move {
                    while let Some(Ok(m)) =
                        std::future::poll_fn(|cx| connection.poll_message(cx)).await
                    {
                        if matches!(m, tokio_postgres::AsyncMessage::Notification(_)) {
                            heard.notify_one();
                        }
                    }
                });
                if client
                    .batch_execute(&format!("LISTEN {RUNNABLE}"))
                    .await
                    .is_ok()
                {
                    // What became runnable while nobody listened is looked for now.
                    wake.notify_one();
                }
                let _ = driver.await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    Ok(notify)
}

/// The thread that drives the listeners' connections ([`listen_runnable`]).
fn runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("failed to start the PostgreSQL connection thread's runtime");
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("loopbox-postgres".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("failed to start the PostgreSQL connection thread");
        handle
    })
}

fn connect(config: &Config, tls: &MakeRustls, label: &str) -> Result<(Client, Link)> {
    super::pg_socket::open(config, tls, CONNECT_TIMEOUT).map_err(|e| {
        if e.contains("TLS") || e.contains("certificate") {
            Error::Connection(format!(
                "failed to connect to the store {label}: {e}; check the URL's sslmode, and that its sslrootcert names the CA that signed the server's certificate (and, with verify-full, that the certificate names the host in the URL)"
            ))
        } else {
            Error::Connection(format!(
                "failed to connect to the store {label}: {e}; check that PostgreSQL is running there and that the URL's user, password and database are right"
            ))
        }
    })
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// A value bound as the type the server inferred for its parameter.
impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        let wrong = |what: &str| -> BoxError {
            format!("{what} cannot be bound to a parameter of type {ty}").into()
        };
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::FLOAT4 => (*i as f32).to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    i.to_string().as_str().to_sql(&Type::TEXT, out)
                }
                _ => Err(wrong("an integer")),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => f.to_string().as_str().to_sql(&Type::TEXT, out),
                _ => Err(wrong("a real")),
            },
            Value::Text(t) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    t.as_str().to_sql(&Type::TEXT, out)
                }
                Type::BYTEA => t.as_bytes().to_sql(ty, out),
                Type::INT8 => t.parse::<i64>()?.to_sql(ty, out),
                _ => Err(wrong("text")),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => b.as_slice().to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => std::str::from_utf8(b)?.to_sql(&Type::TEXT, out),
                _ => Err(wrong("a blob")),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        // Every type is tried; `to_sql` refuses the ones a value cannot be.
        true
    }

    to_sql_checked!();
}

/// A column's value, whatever its type.
struct Column(Value);

impl<'a> FromSql<'a> for Column {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Column, BoxError> {
        Ok(Column(match *ty {
            // What a function run for its effect returns (`pg_notify`, an advisory lock).
            Type::VOID => Value::Null,
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)? as i64),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)? as i64),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)? as i64),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::OID => Value::Int(u32::from_sql(ty, raw)? as i64),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)? as f64),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::NUMERIC => numeric(raw)?,
            Type::BYTEA => Value::Blob(raw.to_vec()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
                Value::Text(std::str::from_utf8(raw)?.to_string())
            }
            _ => return Err(format!("a column of type {ty} cannot be read").into()),
        }))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Column, BoxError> {
        Ok(Column(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn row(r: &tokio_postgres::Row) -> Result<Row> {
    let values = (0..r.len())
        .map(|i| r.try_get::<_, Column>(i).map(|c| c.0))
        .collect::<std::result::Result<_, _>>()?;
    Ok(Row { values })
}

/// A `numeric` (what `SUM` of integers gives): an integer when it has no
/// fraction and fits, else a real.
fn numeric(raw: &[u8]) -> std::result::Result<Value, BoxError> {
    let word = |i: usize| -> std::result::Result<u16, BoxError> {
        raw.get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "a numeric value was cut short".into())
    };
    let (ndigits, weight, sign, scale) = (word(0)?, word(1)? as i16, word(2)?, word(3)?);
    if sign == 0xC000 {
        return Ok(Value::Real(f64::NAN));
    }
    let mut whole: i128 = 0;
    let mut value = 0f64;
    let mut fits = scale == 0;
    for i in 0..ndigits as usize {
        let d = word(4 + i)? as i128;
        let power = weight as i32 - i as i32;
        value += d as f64 * 10000f64.powi(power);
        if power >= 0 {
            whole = 10000i128
                .checked_pow(power as u32)
                .and_then(|p| d.checked_mul(p))
                .and_then(|x| whole.checked_add(x))
                .unwrap_or_else(|| {
                    fits = false;
                    0
                });
        } else if d != 0 {
            fits = false;
        }
    }
    let negative = sign == 0x4000;
    Ok(match i64::try_from(whole) {
        Ok(w) if fits => Value::Int(if negative { -w } else { w }),
        _ => Value::Real(if negative { -value } else { value }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_reached_through_a_unix_socket_whatever_sslmode_says() {
        let pg =
            super::super::pg_server::PgServer::shared(false).unwrap_or_else(|e| panic!("{e:#}"));
        for mode in ["prefer", "require"] {
            let url = format!(
                "postgresql://loopbox@/postgres?host={}&port={}&sslmode={mode}",
                pg.dir().display(),
                pg.port
            );
            let c = PgConn::connect(&url).unwrap();
            let rows = c.query("SELECT 40 + 2", &[]).unwrap();
            assert_eq!(rows[0].get::<_, i64>(0).unwrap(), 42, "{mode}");
        }
    }

    /// This process's descriptors of TCP sockets connected to `port`.
    fn sockets_to(port: u16) -> usize {
        let mut inodes = std::collections::HashSet::new();
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let text = std::fs::read_to_string(table).unwrap_or_default();
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                let remote_port = f[2].rsplit(':').next().unwrap();
                if u16::from_str_radix(remote_port, 16) == Ok(port) {
                    inodes.insert(format!("socket:[{}]", f[9]));
                }
            }
        }
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| inodes.contains(&l.to_string_lossy().to_string()))
            .count()
    }

    #[test]
    fn connections_made_and_dropped_leave_no_descriptor_and_end_their_session_cleanly() {
        let pg =
            super::super::pg_server::PgServer::start_own(false).unwrap_or_else(|e| panic!("{e:#}"));
        // An EOF where a Terminate should be is logged at DEBUG1 only.
        let admin = PgConn::connect(&pg.url()).unwrap();
        admin
            .batch("ALTER SYSTEM SET log_min_messages = debug1")
            .unwrap();
        admin.batch("SELECT pg_reload_conf()").unwrap();
        drop(admin);
        let unix = format!(
            "postgresql://loopbox@/postgres?host={}&port={}",
            pg.dir().display(),
            pg.port
        );
        for i in 0..60 {
            let url = if i % 2 == 0 { pg.url() } else { unix.clone() };
            let c = PgConn::connect(&url).unwrap();
            c.query("SELECT 1", &[]).unwrap();
            if i % 3 == 0 {
                // Dropped inside a transaction, its statements sent.
                c.begin_write(Scope::Rows).unwrap();
                c.pipeline(&[("SELECT 2", &[])]).unwrap();
            }
        }
        assert_eq!(sockets_to(pg.port), 0, "TCP connections left open");
        // A connection lost (the server restarted) is made again; the lost one is closed.
        let kept = PgConn::connect(&pg.url()).unwrap();
        kept.query("SELECT 1", &[]).unwrap();
        pg.restart().unwrap();
        kept.query("SELECT 1", &[]).unwrap();
        assert_eq!(sockets_to(pg.port), 1, "the lost connection is still open");
        drop(kept);
        assert_eq!(sockets_to(pg.port), 0);
        // The server saw every session end with a Terminate (none with an EOF).
        let log = std::fs::read_to_string(pg.dir().join("log")).unwrap();
        let ends = log.matches("unexpected EOF on client connection").count();
        assert_eq!(ends, 0, "sessions ended by an EOF; the log:\n{log}");
        assert!(log.contains("DEBUG"), "the log is not at DEBUG1: {log}");
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact("postgres://u@h/db?sslmode=require&Password=secret&x=1"),
            "postgres://u@h/db?sslmode=require&Password=***&x=1"
        );
        // A password as a parameter, or with an `@` in it, is hidden too.
        assert_eq!(
            redact("postgres://u@h/db?sslmode=disable&password=secret&x=1"),
            "postgres://u@h/db?sslmode=disable&password=***&x=1"
        );
        assert_eq!(
            redact("postgres://u:se@cret@h/db?application_name=a@b"),
            "postgres://u:***@h/db?application_name=a@b"
        );
        assert_eq!(
            redact("host=h user=u PASSWORD=secret dbname=d"),
            "host=h user=u PASSWORD=*** dbname=d"
        );
        let e = PgConn::connect("postgres://u@127.0.0.1:1/db?password=secret&bogus=1")
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("secret") && e.contains("password=***"), "{e}");
        let e = PgConn::connect("postgres://u:secret@127.0.0.1:1/db?bogus=1")
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("secret") && e.contains("u:***"), "{e}");
    }

    #[test]
    fn numerics_read_as_integers_or_reals() {
        let n = |words: &[u16]| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
            numeric(&bytes).unwrap()
        };
        // 1234_5678: two base-10000 digits, weight 1.
        assert_eq!(n(&[2, 1, 0, 0, 1234, 5678]), Value::Int(12_345_678));
        assert_eq!(n(&[1, 2, 0x4000, 0, 7]), Value::Int(-7_0000_0000));
        assert_eq!(n(&[0, 0, 0, 0]), Value::Int(0));
        assert_eq!(n(&[2, 0, 0, 1, 3, 5000]), Value::Real(3.5));
    }
}
