//! Events with their decisions, the run's key/value state, and the run log.
//! [`Db::commit_event`] writes everything one handled event changed in one
//! transaction. [`Db::journal_intent`] writes an action's intent before the
//! action starts, in one transaction with the budget it spends, the calls
//! before it and (the first time) its event's row, marked pending.

use crate::db::engine::{Conn, OptionalExtension, Params, Row, params};
use anyhow::Result;

use super::journal::{
    Budget, JournalRow, Spent, SpentError, Steps, insert_rows, push_rows, push_spend, rows_bytes,
    spent,
};
use super::{Db, now_ms};

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
    /// The event's number when its row was already written (with an action's intent).
    pub seq: Option<i64>,
    pub event: String,
    pub decision: Option<String>,
    pub error: Option<String>,
    /// `Some(value)` sets, `None` removes.
    pub state_writes: Vec<(String, Option<String>)>,
    pub log: Vec<LogRecord>,
    /// Journal rows not yet written (calls with no side effects: denials, reads, clocks).
    pub journal: Vec<JournalRow>,
    /// A hook session's transcript tally and the totals priced from it, kept
    /// with the event rather than in a write of their own.
    pub spend: Option<(crate::spend::transcript::Tally, crate::spend::Totals)>,
}

/// One delivered event as stored: JSON texts of the event and its decision, or the error.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub seq: i64,
    pub at_ms: i64,
    pub event: String,
    pub decision: Option<String>,
    pub error: Option<String>,
    /// Still being handled, or interrupted while it was.
    pub pending: bool,
}

fn event_record(r: &Row) -> crate::db::engine::Result<EventRecord> {
    Ok(EventRecord {
        seq: r.get(0)?,
        at_ms: r.get(1)?,
        event: r.get(2)?,
        decision: r.get(3)?,
        error: r.get(4)?,
        pending: r.get::<_, i64>(5)? != 0,
    })
}

const EVENT_COLUMNS: &str = "seq, at, event, decision, error, pending";

/// The next event number of `run`.
fn next_event_seq(tx: &crate::db::Conn, run: &str) -> crate::db::engine::Result<i64> {
    tx.row(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?1",
        [run],
        |r| r.get(0),
    )
}

/// Insert `run`'s next event, pending (the event's row before its actions),
/// its number read and written by one statement; returns the number.
fn insert_pending_event(tx: &Conn, run: &str, event: &str) -> crate::db::engine::Result<i64> {
    tx.row(
        "INSERT INTO events (run_id, seq, at, event, pending)
         SELECT ?1, COALESCE(MAX(seq), 0) + 1, CAST(?2 AS BIGINT), ?3, 1 FROM events WHERE run_id = ?1 RETURNING seq",
        params![run, now_ms(), event],
        |r| r.get(0),
    )
}

impl Db {
    /// Durably record that an action is about to start: the event's row (as
    /// pending) if it has none yet, the calls journaled before it, its intent
    /// row, and the budget it spends. Returns the event's number, or the budget
    /// that is spent (and then writes nothing).
    pub fn journal_intent(
        &self,
        run: &str,
        event: (Option<i64>, &str),
        earlier: &[JournalRow],
        intent: &JournalRow,
        budget: &Budget,
    ) -> Result<Result<i64, Spent>> {
        let written = self.write_run(run, "journal the action", |tx| {
            let seq = match event.0 {
                Some(seq) => seq,
                None => insert_pending_event(tx, run, event.1)?,
            };
            // The budget, the rows and their bytes in one round trip, with the
            // commit on PostgreSQL; a spent budget rolls them all back.
            let rows = [earlier, std::slice::from_ref(intent)].concat();
            let mut steps = Steps::new();
            let checks = push_spend(&mut steps, tx.engine(), run, budget, rows_bytes(&rows));
            push_rows(&mut steps, run, seq, &rows);
            if let Some(spent) = spent(&tx.pipeline_committing(&steps)?, &checks) {
                // Nothing is written: the transaction is dropped by the caller's rollback.
                return Err(SpentError(spent).into());
            }
            Ok(seq)
        });
        self.refused(run, budget, written)
    }

    /// Durably record an event that has begun (its row, pending, if it has none
    /// yet) with the calls journaled so far: an ask-tier action waits for an
    /// approval bound to its place in this event. Returns the event's number.
    pub fn journal_event(
        &self,
        run: &str,
        event: (Option<i64>, &str),
        earlier: &[JournalRow],
    ) -> Result<i64> {
        self.write_run(run, "journal the event", |tx| {
            let seq = match event.0 {
                Some(seq) => seq,
                None => insert_pending_event(tx, run, event.1)?,
            };
            insert_rows(tx, run, seq, earlier)?;
            Ok(seq)
        })
    }

    /// Commit one handled event atomically; returns its sequence number.
    pub fn commit_event(&self, run: &str, commit: &EventCommit) -> Result<i64> {
        self.write_run(run, "commit the event", |tx| {
            let now = now_ms();
            let seq = match commit.seq {
                Some(seq) => {
                    tx.exec(
                        "UPDATE events SET decision = ?3, error = ?4, pending = 0 WHERE run_id = ?1 AND seq = ?2",
                        params![run, seq, commit.decision, commit.error],
                    )?;
                    seq
                }
                None => {
                    let seq = next_event_seq(tx, run)?;
                    tx.exec(
                        "INSERT INTO events (run_id, seq, at, event, decision, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![run, seq, now, commit.event, commit.decision, commit.error],
                    )?;
                    seq
                }
            };
            // The rest in one round trip: each state entry's size is read just
            // before it is written, so its growth is known once they are back.
            let mut steps = Steps::new();
            push_rows(&mut steps, run, seq, &commit.journal);
            let mut sizes = Vec::new();
            let mut grown: i64 = 0;
            for (key, value) in &commit.state_writes {
                sizes.push(steps.len());
                steps.push((ENTRY_SIZE, params![run, key].values()));
                match value {
                    Some(v) => {
                        steps.push((
                            "INSERT INTO state (run_id, key, value) VALUES (?1, ?2, ?3) ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value",
                            params![run, key, v].values(),
                        ));
                        grown += (key.len() + v.len()) as i64;
                    }
                    None => steps.push((
                        "DELETE FROM state WHERE run_id = ?1 AND key = ?2",
                        params![run, key].values(),
                    )),
                }
            }
            push_log(&mut steps, run, &commit.log);
            steps.push((
                "UPDATE runs SET updated_at = ?2, journal_bytes = journal_bytes + ?3 WHERE id = ?1",
                params![run, now, rows_bytes(&commit.journal) as i64].values(),
            ));
            let done = tx.pipeline(&steps)?;
            for i in sizes {
                if let Some(r) = done[i].rows.first() {
                    grown -= r.get::<_, Option<i64>>(0)?.unwrap_or(0);
                }
            }
            if grown != 0 {
                tx.exec(
                    "UPDATE runs SET state_bytes = state_bytes + ?2 WHERE id = ?1",
                    params![run, grown],
                )?;
            }
            if let Some((tally, totals)) = &commit.spend {
                super::spend::write_tally(tx, run, tally, totals)?;
            }
            Ok(seq)
        })
    }

    /// The number the run's next event will get.
    pub fn next_event_seq(&self, run: &str) -> Result<i64> {
        Ok(next_event_seq(&self.conn(), run)?)
    }

    /// Whether the run's `start` event was handled successfully.
    pub fn started(&self, run: &str) -> Result<bool> {
        Ok(self.conn().row(
            "SELECT EXISTS (SELECT 1 FROM events WHERE run_id = ?1 AND decision IS NOT NULL AND json_extract(event, '$.type') = 'start')",
            [run],
            |r| r.get(0),
        )?)
    }

    /// Each event of the run, in order.
    pub fn events(&self, run: &str) -> Result<Vec<EventRecord>> {
        let c = self.conn();
        let mut stmt = c.prepare(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 ORDER BY seq"
        ))?;
        let rows = stmt
            .query_map([run], event_record)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The run's last event, handled or not.
    pub fn last_event(&self, run: &str) -> Result<Option<EventRecord>> {
        Ok(self
            .conn()
            .row(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1"
                ),
                [run],
                event_record,
            )
            .optional()?)
    }

    /// Count of `turn-complete` events the run handled (committed with a decision or
    /// an error): a hook numbers its next turn from these, so an event that was killed
    /// before it committed leaves no phantom turn.
    pub fn turns_handled(&self, run: &str) -> Result<u32> {
        Ok(self.conn().row("SELECT COUNT(*) FROM events WHERE run_id = ?1 AND pending = 0 AND (decision IS NOT NULL OR error IS NOT NULL) AND json_extract(event, '$.type') = 'turn-complete'", [run], |r| r.get::<_, i64>(0))? as u32)
    }

    /// Count of the run's events its policy answered with `sleep` (each a
    /// timer that wakes the run by itself: `limits.wakes_per_run`).
    pub fn sleeps(&self, run: &str) -> Result<u64> {
        Ok(self.conn().row("SELECT COUNT(*) FROM events WHERE run_id = ?1 AND decision IS NOT NULL AND json_extract(decision, '$.type') = 'sleep'", [run], |r| r.get::<_, i64>(0))?.max(0) as u64)
    }

    /// Count of `tick` events the run was delivered (handled or pending).
    pub fn ticks_delivered(&self, run: &str) -> Result<usize> {
        Ok(self.conn().row("SELECT COUNT(*) FROM events WHERE run_id = ?1 AND json_extract(event, '$.type') = 'tick'", [run], |r| r.get::<_, i64>(0))? as usize)
    }

    pub fn state_get(&self, run: &str, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .row(
                "SELECT value FROM state WHERE run_id = ?1 AND key = ?2",
                [run, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// [`Db::state_get`], with the bytes the run's state holds, in one lookup.
    pub fn state_get_and_total(&self, run: &str, key: &str) -> Result<(Option<String>, u64)> {
        Ok(self.conn().row(
            "SELECT (SELECT value FROM state WHERE run_id = ?1 AND key = ?2), state_bytes FROM runs WHERE id = ?1",
            [run, key],
            |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)),
        )?)
    }

    /// Keys of the run starting with `prefix`, sorted.
    pub fn state_keys(&self, run: &str, prefix: &str) -> Result<Vec<String>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached("SELECT key FROM state WHERE run_id = ?1 AND substr(key, 1, length(?2)) = ?2 ORDER BY key")?;
        let keys = stmt
            .query_map([run, prefix], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(keys)
    }

    /// Bytes of keys and values the run holds (kept by each commit).
    pub fn state_total(&self, run: &str) -> Result<u64> {
        Ok(self
            .conn()
            .row("SELECT state_bytes FROM runs WHERE id = ?1", [run], |r| {
                r.get::<_, i64>(0)
            })? as u64)
    }

    /// The size of one stored entry, 0 when absent.
    pub fn state_entry_size(&self, run: &str, key: &str) -> Result<u64> {
        Ok(entry_size(&self.conn(), run, key)? as u64)
    }

    /// Log lines that belong to no event (the driver's own).
    pub fn append_log(&self, run: &str, lines: &[LogRecord]) -> Result<()> {
        self.write_run(run, "write the run log", |tx| {
            let mut steps = Steps::new();
            push_log(&mut steps, run, lines);
            tx.pipeline(&steps)?;
            Ok(())
        })
    }

    /// How many of the run's log lines of `level` begin with `start`.
    pub fn log_lines_starting(&self, run: &str, level: &str, start: &str) -> Result<u64> {
        Ok(self.conn().row(
            "SELECT COUNT(*) FROM run_log WHERE run_id = ?1 AND level = ?2 AND substr(message, 1, ?3) = ?4",
            params![run, level, start.chars().count() as i64, start],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    pub fn log(&self, run: &str) -> Result<Vec<LogRecord>> {
        Ok(self
            .log_after(run, 0)?
            .into_iter()
            .map(|(_, l)| l)
            .collect())
    }

    /// Log lines numbered after `seq`, with their numbers (for `runs log --follow`).
    pub fn log_after(&self, run: &str, seq: i64) -> Result<Vec<(i64, LogRecord)>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached("SELECT seq, at, level, source, message FROM run_log WHERE run_id = ?1 AND seq > ?2 ORDER BY seq")?;
        let rows = stmt
            .query_map(params![run, seq], |r| {
                Ok((
                    r.get(0)?,
                    LogRecord {
                        at_ms: r.get(1)?,
                        level: r.get(2)?,
                        source: r.get(3)?,
                        message: r.get(4)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

/// Bytes a state entry (`?1` the run, `?2` the key) and its value take: no
/// row when absent.
const ENTRY_SIZE: &str =
    "SELECT octet_length(key) + octet_length(value) FROM state WHERE run_id = ?1 AND key = ?2";

/// Bytes `key` and its value take in the run's state, 0 when absent.
fn entry_size(c: &Conn, run: &str, key: &str) -> crate::db::engine::Result<i64> {
    Ok(c.row(ENTRY_SIZE, [run, key], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The statements that append `lines` to the run's log, each numbered after
/// the last line there when it runs (the run's lock keeps other writers of
/// the run out until the commit).
fn push_log(steps: &mut Steps, run: &str, lines: &[LogRecord]) {
    for l in lines {
        steps.push((
            "INSERT INTO run_log (run_id, seq, at, level, source, message)
             SELECT ?1, COALESCE(MAX(seq), 0) + 1, CAST(?2 AS BIGINT), ?3, ?4, ?5 FROM run_log WHERE run_id = ?1",
            params![run, l.at_ms, l.level, l.source, l.message].values(),
        ));
    }
}
