//! The store's engines: SQLite (the embedded default, one file per workspace
//! or server) and PostgreSQL (`--store postgres://…`, shared by several
//! machines). Everything above this module writes its SQL once, in SQLite's
//! spelling with numbered `?N` placeholders, and reads rows as [`Value`]s;
//! [`Conn`] runs it on either engine. The PostgreSQL side translates the
//! placeholders when it prepares a statement (and caches it), and its schema
//! defines the few SQLite functions the shared SQL uses (`json_extract`,
//! `json_valid`), so no query is written twice.
//!
//! The API is synchronous, like rusqlite's, because the store is called from
//! inside tokio runtimes and from plain threads alike (see `postgres.rs` for
//! how that works with an asynchronous client).

pub mod pg_server;
mod pg_socket;
pub mod postgres;
mod sqlite;
pub mod tls;

use std::fmt;

/// One value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// What a write transaction reads, then writes, and so what it must keep
/// other writers out of until it commits (on PostgreSQL; SQLite has one
/// writer at a time whatever the scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Anything in the store (a new run, the audit log's numbers, approvals,
    /// tokens, the schema): every other writer waits.
    Store,
    /// Only the rows of this run (its events' and log lines' numbers, its
    /// journal, state, counters and lease): writers of other runs go on in
    /// parallel, writers of the same run wait, and a [`Scope::Store`] writer
    /// waits for all of them (and they for it).
    Run(&'a str),
    /// Only rows the transaction locks itself, each with `FOR UPDATE`
    /// (claims, which skip locked rows): in parallel with every writer but a
    /// [`Scope::Store`] one.
    Rows,
}

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A store error: the engine's own (kept as the source, so it is found by
/// type through any chain of context), no row where one was required, or a
/// value that is not what the reader expected.
#[derive(Debug)]
pub enum Error {
    NoRows,
    Sqlite(rusqlite::Error),
    Postgres(tokio_postgres::Error),
    /// A column's value could not be read as the type asked for.
    Conversion {
        column: usize,
        message: String,
    },
    /// The connection could not be made or was lost.
    Connection(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoRows => f.write_str("the query returned no rows"),
            Error::Sqlite(e) => fmt::Display::fmt(e, f),
            Error::Postgres(e) => match e.as_db_error() {
                // The server's message, not just "db error".
                Some(db) => write!(f, "{}: {}", db.severity(), db.message()),
                None => fmt::Display::fmt(e, f),
            },
            Error::Conversion { column, message } => {
                write!(f, "column {column} could not be read: {message}")
            }
            Error::Connection(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sqlite(e) => Some(e),
            Error::Postgres(e) => Some(e),
            _ => None,
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        match e {
            rusqlite::Error::QueryReturnedNoRows => Error::NoRows,
            e => Error::Sqlite(e),
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        Error::Postgres(e)
    }
}

impl Error {
    /// A value that is not what the reader expected (a strange status, a bad role).
    pub fn conversion(column: usize, message: impl fmt::Display) -> Error {
        Error::Conversion {
            column,
            message: message.to_string(),
        }
    }

    /// Whether `e` carries a PostgreSQL error of SQLSTATE `state` (a check
    /// written to fail a statement, so its transaction keeps nothing).
    pub fn failed_with(e: &anyhow::Error, state: &tokio_postgres::error::SqlState) -> bool {
        crate::error::find::<Error>(e)
            .is_some_and(|e| matches!(e, Error::Postgres(e) if e.code() == Some(state)))
    }

    /// Whether the connection itself failed (the server restarted, the network
    /// dropped): the transaction did not commit, and a new connection may succeed.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::Connection(_) => true,
            Error::Postgres(e) => {
                e.is_closed()
                    || e.as_db_error().is_none()
                        && std::error::Error::source(e)
                            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
                    || e.code().is_some_and(|c| {
                        // admin_shutdown, crash_shutdown, cannot_connect_now
                        ["57P01", "57P02", "57P03"].contains(&c.code())
                    })
            }
            _ => false,
        }
    }
}

/// `.optional()` on a single-row read, as with rusqlite: no row is `None`.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A Rust value bound as a statement parameter.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(*self as i64)
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                // Counters and times fit in i64; a u64 beyond it is stored saturated.
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_to_value!(i8, i16, i32, i64, u8, u16, u32, u64, usize);

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}

/// A statement's parameters: `params![a, b]`, an array of one type, or `[]`.
pub trait Params {
    fn values(self) -> Vec<Value>;
}

impl Params for &[&dyn ToValue] {
    fn values(self) -> Vec<Value> {
        self.iter().map(|v| v.to_value()).collect()
    }
}

impl Params for [&dyn ToValue; 0] {
    fn values(self) -> Vec<Value> {
        Vec::new()
    }
}

impl Params for Vec<Value> {
    fn values(self) -> Vec<Value> {
        self
    }
}

macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(self) -> Vec<Value> {
                self.iter().map(|v| v.to_value()).collect()
            }
        }
    )*};
}
array_params!(1, 2, 3, 4, 5, 6, 7, 8);

/// Parameters of several types: `params![id, 3, None::<String>]`.
#[macro_export]
macro_rules! sql_params {
    () => { &[] as &[&dyn $crate::db::engine::ToValue] };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::db::engine::ToValue),+] as &[&dyn $crate::db::engine::ToValue]
    };
}
pub use crate::sql_params as params;

/// A Rust value read from a column.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> std::result::Result<Self, String>;
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    }
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> std::result::Result<i64, String> {
        match v {
            Value::Int(i) => Ok(*i),
            // A JSON value read out of a document (`json_extract`) is text on PostgreSQL.
            Value::Text(t) => match t.as_str() {
                "true" => Ok(1),
                "false" => Ok(0),
                t => t.parse().map_err(|_| format!("`{t}` is not an integer")),
            },
            Value::Real(f) if f.fract() == 0.0 => Ok(*f as i64),
            v => Err(format!("expected an integer, found {}", kind(v))),
        }
    }
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> std::result::Result<$t, String> {
                let i = i64::from_value(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range for {}", stringify!($t)))
            }
        }
    )*};
}
int_from_value!(i8, i16, i32, u8, u16, u32, u64, usize);

impl FromValue for bool {
    fn from_value(v: &Value) -> std::result::Result<bool, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> std::result::Result<f64, String> {
        match v {
            Value::Real(f) => Ok(*f),
            Value::Int(i) => Ok(*i as f64),
            Value::Text(t) => t.parse().map_err(|_| format!("`{t}` is not a number")),
            v => Err(format!("expected a real, found {}", kind(v))),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> std::result::Result<String, String> {
        match v {
            Value::Text(t) => Ok(t.clone()),
            // SQLite hands back numbers in text columns as they were stored.
            Value::Int(i) => Ok(i.to_string()),
            Value::Real(f) => Ok(f.to_string()),
            Value::Blob(b) => String::from_utf8(b.clone()).map_err(|e| e.to_string()),
            Value::Null => Err("expected text, found NULL".into()),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> std::result::Result<Vec<u8>, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(t) => Ok(t.clone().into_bytes()),
            v => Err(format!("expected a blob, found {}", kind(v))),
        }
    }
}

impl FromValue for Value {
    fn from_value(v: &Value) -> std::result::Result<Value, String> {
        Ok(v.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> std::result::Result<Option<T>, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A column index (as rusqlite's `RowIndex`, so `r.get::<_, i64>(0)` reads the same).
pub trait RowIndex {
    fn index(&self) -> usize;
}

impl RowIndex for usize {
    fn index(&self) -> usize {
        *self
    }
}

/// One row read, its values in column order.
#[derive(Debug, Clone)]
pub struct Row {
    values: Vec<Value>,
}

impl Row {
    pub fn get<I: RowIndex, T: FromValue>(&self, i: I) -> Result<T> {
        let i = i.index();
        let v = self
            .values
            .get(i)
            .ok_or_else(|| Error::conversion(i, "there is no such column"))?;
        T::from_value(v).map_err(|m| Error::conversion(i, m))
    }
}

/// What one statement of [`Conn::pipeline`] did.
#[derive(Debug, Default)]
pub struct Done {
    /// The rows an `INSERT`, `UPDATE` or `DELETE` without `RETURNING` changed.
    pub changed: usize,
    /// The rows a statement that returns rows returned.
    pub rows: Vec<Row>,
}

/// A connection to the store, on either engine. Statements go through each
/// engine's cache of prepared statements.
pub struct Conn {
    inner: Inner,
}

enum Inner {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::PgConn>),
}

impl Conn {
    pub fn sqlite(conn: rusqlite::Connection) -> Conn {
        Conn {
            inner: Inner::Sqlite(conn),
        }
    }

    pub fn postgres(conn: postgres::PgConn) -> Conn {
        Conn {
            inner: Inner::Postgres(Box::new(conn)),
        }
    }

    pub fn engine(&self) -> Engine {
        match self.inner {
            Inner::Sqlite(_) => Engine::Sqlite,
            Inner::Postgres(_) => Engine::Postgres,
        }
    }

    /// The SQLite connection underneath (tests and SQLite-only upkeep).
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            Inner::Sqlite(c) => Some(c),
            Inner::Postgres(_) => None,
        }
    }

    /// Run `sql` with `params`; the rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        let values = params.values();
        match &self.inner {
            Inner::Sqlite(c) => sqlite::execute(c, sql, &values),
            Inner::Postgres(c) => c.execute(sql, &values),
        }
    }

    /// The same as [`Conn::execute`] (the name the store's modules use).
    pub fn exec<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.execute(sql, params)
    }

    /// Every row of `sql`, each read by `f`.
    pub fn query<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let values = params.values();
        let rows = match &self.inner {
            Inner::Sqlite(c) => sqlite::query(c, sql, &values)?,
            Inner::Postgres(c) => c.query(sql, &values)?,
        };
        rows.iter().map(&mut f).collect()
    }

    /// The first row of `sql` read by `f`; [`Error::NoRows`] when there is none.
    pub fn query_row<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        let values = params.values();
        let row = match &self.inner {
            Inner::Sqlite(c) => sqlite::query_one(c, sql, &values)?,
            Inner::Postgres(c) => c.query_one(sql, &values)?,
        };
        f(&row.ok_or(Error::NoRows)?)
    }

    /// The same as [`Conn::query_row`] (the name the store's modules use).
    pub fn row<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        self.query_row(sql, params, f)
    }

    /// Run `steps` (each SQL and its parameters) in order, as one request on
    /// PostgreSQL (one round trip: each statement still runs after the one
    /// before it and sees what it wrote) and one after another on SQLite.
    /// For statements whose parameters do not depend on what an earlier one
    /// returned. The first error is returned; inside a write transaction the
    /// caller rolls back, so the statements after a failed one change nothing.
    pub fn pipeline(&self, steps: &[(&str, Vec<Value>)]) -> Result<Vec<Done>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        match &self.inner {
            Inner::Sqlite(c) => steps
                .iter()
                .map(|(sql, params)| sqlite::run(c, sql, params))
                .collect(),
            Inner::Postgres(c) => {
                let steps: Vec<(&str, &[Value])> =
                    steps.iter().map(|(s, p)| (*s, p.as_slice())).collect();
                c.pipeline(&steps)
            }
        }
    }

    /// [`Conn::pipeline`] as a write transaction's last request, committing
    /// it in the same round trip on PostgreSQL (see `postgres.rs`); SQLite
    /// commits when the transaction ends, as always. Only where nothing is
    /// decided on the answers: the transaction is over once they are read.
    pub fn pipeline_committing(&self, steps: &[(&str, Vec<Value>)]) -> Result<Vec<Done>> {
        match &self.inner {
            Inner::Sqlite(_) => self.pipeline(steps),
            Inner::Postgres(c) => {
                let steps: Vec<(&str, &[Value])> =
                    steps.iter().map(|(s, p)| (*s, p.as_slice())).collect();
                c.pipeline_committing(&steps)
            }
        }
    }

    /// Run `sql` with the transaction's next statement: at once on SQLite
    /// (its rows changed returned), in the next request's round trip on
    /// PostgreSQL (`None`: its error, if any, is that request's).
    pub fn defer<P: Params>(&self, sql: &str, params: P) -> Result<Option<usize>> {
        match &self.inner {
            Inner::Sqlite(_) => Ok(Some(self.exec(sql, params)?)),
            Inner::Postgres(c) => {
                c.defer(sql, params.values());
                Ok(None)
            }
        }
    }

    /// A statement to run later, as rusqlite's `prepare_cached` (both engines cache).
    pub fn prepare_cached<'c>(&'c self, sql: &str) -> Result<Stmt<'c>> {
        Ok(Stmt {
            conn: self,
            sql: sql.to_string(),
        })
    }

    pub fn prepare<'c>(&'c self, sql: &str) -> Result<Stmt<'c>> {
        self.prepare_cached(sql)
    }

    /// Statements without parameters, separated by `;` (DDL).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Postgres(c) => c.batch(sql),
        }
    }

    /// Begin a write transaction of `scope`. SQLite has one writer at a time
    /// whatever the scope (`BEGIN IMMEDIATE`: it waits for, then excludes,
    /// every other writer); PostgreSQL lets writers of different runs commit
    /// in parallel (see [`Scope`] and `postgres.rs`).
    pub(crate) fn begin_write(&self, scope: Scope<'_>) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch("BEGIN IMMEDIATE")?),
            Inner::Postgres(c) => c.begin_write(scope),
        }
    }

    pub(crate) fn commit(&self) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch("COMMIT")?),
            Inner::Postgres(c) => c.commit(),
        }
    }

    /// End a failed transaction; a connection that is gone has nothing to roll back.
    pub(crate) fn rollback(&self) {
        match &self.inner {
            Inner::Sqlite(c) => {
                let _ = c.execute_batch("ROLLBACK");
            }
            Inner::Postgres(c) => c.rollback(),
        }
    }

    /// Make sure a PostgreSQL connection lost earlier is made again.
    pub(crate) fn reconnect_if_lost(&self) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(_) => Ok(()),
            Inner::Postgres(c) => c.reconnect_if_lost(),
        }
    }
}

/// A statement and the connection it runs on, as rusqlite's.
pub struct Stmt<'c> {
    conn: &'c Conn,
    sql: String,
}

impl Stmt<'_> {
    /// Every row, read by `f`, as an iterator of results (read at once).
    pub fn query_map<T, P: Params>(
        &mut self,
        params: P,
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let values = params.values();
        let rows = match &self.conn.inner {
            Inner::Sqlite(c) => sqlite::query(c, &self.sql, &values)?,
            Inner::Postgres(c) => c.query(&self.sql, &values)?,
        };
        Ok(rows.iter().map(&mut f).collect::<Vec<_>>().into_iter())
    }

    pub fn query_row<T, P: Params>(
        &mut self,
        params: P,
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        self.conn.query_row(&self.sql, params, f)
    }

    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        self.conn.execute(&self.sql, params)
    }
}

/// `sql` with SQLite's `?N` placeholders as PostgreSQL's `$N` (a bare `?`
/// takes the next number), leaving string literals, quoted names and comments
/// as they are.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut next = 1u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    // A doubled quote closes and reopens: the same result.
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = if digits.is_empty() {
                    next
                } else {
                    digits.parse().unwrap_or(next)
                };
                next = next.max(n + 1);
                out.push('$');
                out.push_str(&n.to_string());
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_literals_only() {
        assert_eq!(
            numbered_placeholders(
                "SELECT '?1', \"a?\" FROM t WHERE a = ?1 AND b = ?12 -- ?3\n AND c = ? AND d = 'it''s ?2'"
            ),
            "SELECT '?1', \"a?\" FROM t WHERE a = $1 AND b = $12 -- ?3\n AND c = $13 AND d = 'it''s ?2'"
        );
        assert_eq!(numbered_placeholders("? ? ?"), "$1 $2 $3");
    }

    #[test]
    fn values_read_back_as_the_types_asked_for_or_say_why_not() {
        let row = Row {
            values: vec![
                Value::Int(7),
                Value::Text("true".into()),
                Value::Null,
                Value::Text("x".into()),
                Value::Int(-1),
            ],
        };
        assert_eq!(row.get::<_, i64>(0).unwrap(), 7);
        assert!(row.get::<_, bool>(1).unwrap());
        assert_eq!(row.get::<_, Option<String>>(2).unwrap(), None);
        let e = row.get::<_, i64>(3).unwrap_err().to_string();
        assert_eq!(e, "column 3 could not be read: `x` is not an integer");
        let e = row.get::<_, u32>(4).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        assert!(matches!(
            row.get::<_, i64>(9),
            Err(Error::Conversion { .. })
        ));
    }
}
