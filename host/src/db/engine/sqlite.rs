//! The SQLite engine: rusqlite's connection and its statement cache, with
//! [`Value`]s in and out.

use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};

use super::{Done, Result, Row, Value};

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Value::Real(f) => ToSqlOutput::Borrowed(ValueRef::Real(*f)),
            Value::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
            Value::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => Value::Text(s.to_string()),
            // Not UTF-8: kept as the bytes it is, and refused where text is asked for.
            Err(_) => Value::Blob(t.to_vec()),
        },
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let n = r.as_ref().column_count();
    let values = (0..n)
        .map(|i| r.get_ref(i).map(value))
        .collect::<rusqlite::Result<_>>()?;
    Ok(Row { values })
}

pub(super) fn execute(c: &Connection, sql: &str, params: &[Value]) -> Result<usize> {
    Ok(c.prepare_cached(sql)?
        .execute(rusqlite::params_from_iter(params))?)
}

pub(super) fn query(c: &Connection, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub(super) fn query_one(c: &Connection, sql: &str, params: &[Value]) -> Result<Option<Row>> {
    let mut stmt = c.prepare_cached(sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
    Ok(match rows.next()? {
        Some(r) => Some(row(r)?),
        None => None,
    })
}

/// One statement of a pipeline: what it changed, or the rows it returned.
pub(super) fn run(c: &Connection, sql: &str, params: &[Value]) -> Result<Done> {
    let mut stmt = c.prepare_cached(sql)?;
    if stmt.column_count() == 0 {
        let changed = stmt.execute(rusqlite::params_from_iter(params))?;
        return Ok(Done {
            changed,
            rows: Vec::new(),
        });
    }
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Done { changed: 0, rows })
}
