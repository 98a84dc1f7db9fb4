//! What runs spent on their agents. Each agent turn's [`Charge`] is journaled
//! with its result (under `usage`), and the run's totals (the `spend_*`
//! columns) grow in the same transaction, once per result: the journal is
//! the record, the columns a sum of it that a crash can neither lose a turn
//! from nor count one twice in. A hook session has no journaled turns: its
//! totals are recomputed from its transcript tally and set whole, with the
//! event that read them (`EventCommit::spend`).

use crate::db::engine::{OptionalExtension, Row, params};
use anyhow::Result;

use super::{Db, now_ms};
use crate::spend::transcript::Tally;
use crate::spend::{Charge, Tokens, Totals};

/// One charged agent turn, from the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnCharge {
    pub event_seq: i64,
    /// 0: the driver's turn after the event's `inject`; else the event's `prompt` call.
    pub seq: i64,
    /// `turn` or `prompt`.
    pub kind: String,
    /// When its result was recorded.
    pub at_ms: i64,
    pub charge: Charge,
}

fn int(r: &Row, i: usize) -> crate::db::engine::Result<u64> {
    Ok(r.get::<_, i64>(i)?.max(0) as u64)
}

/// The totals in a run row's spend columns ([`SPEND_COLUMNS`]), starting at column `at`.
pub(crate) fn totals_at(r: &Row, at: usize) -> crate::db::engine::Result<Totals> {
    Ok(Totals {
        turns: int(r, at)?,
        unmetered: int(r, at + 1)?,
        unpriced: int(r, at + 2)?,
        tokens: Tokens {
            input: int(r, at + 3)?,
            output: int(r, at + 4)?,
            cache_read: int(r, at + 5)?,
            cache_write: int(r, at + 6)?,
        },
        cost_usd: r.get::<_, f64>(at + 7)?,
    })
}

/// A run row's spend columns, in the order [`totals_at`] reads them.
pub(crate) const SPEND_COLUMNS: &str = TOTALS;

const TOTALS: &str = "spend_turns, spend_unmetered, spend_unpriced, spend_input_tokens, spend_output_tokens, spend_cache_read_tokens, spend_cache_write_tokens, spend_cost_usd";

/// Add `charge` to the run's totals, inside the caller's transaction.
pub(super) fn add(tx: &crate::db::Conn, run: &str, charge: &Charge) -> Result<()> {
    let mut one = Totals::default();
    one.add(charge);
    let t = &one.tokens;
    let clamp = |n: u64| n.min(i64::MAX as u64) as i64;
    tx.exec(
        "UPDATE runs SET spend_turns = spend_turns + ?2, spend_unmetered = spend_unmetered + ?3, spend_unpriced = spend_unpriced + ?4,
             spend_input_tokens = spend_input_tokens + ?5, spend_output_tokens = spend_output_tokens + ?6,
             spend_cache_read_tokens = spend_cache_read_tokens + ?7, spend_cache_write_tokens = spend_cache_write_tokens + ?8,
             spend_cost_usd = spend_cost_usd + ?9
         WHERE id = ?1",
        params![
            run,
            clamp(one.turns),
            clamp(one.unmetered),
            clamp(one.unpriced),
            clamp(t.input),
            clamp(t.output),
            clamp(t.cache_read),
            clamp(t.cache_write),
            one.cost_usd
        ],
    )?;
    Ok(())
}

impl Db {
    /// What the run has spent so far (nothing for a store older than schema 8).
    pub fn spent(&self, run: &str) -> Result<Totals> {
        if !self.has_schema(super::schema::SPEND) {
            return Ok(Totals::default());
        }
        Ok(self
            .conn()
            .row(
                &format!("SELECT {TOTALS} FROM runs WHERE id = ?1"),
                [run],
                |r| totals_at(r, 0),
            )
            .optional()?
            .unwrap_or_default())
    }

    /// Add a turn's charge to the run's totals when it has no journal row
    /// (`run.journal = false`).
    pub fn add_charge(&self, run: &str, charge: &Charge) -> Result<()> {
        self.write_run(run, "record what the agent turn cost", |tx| {
            add(tx, run, charge)
        })
    }

    /// Every charged agent turn of the run, in order.
    pub fn charges(&self, run: &str) -> Result<Vec<TurnCharge>> {
        let c = self.conn();
        let mut stmt = c.prepare(
            "SELECT event_seq, seq, kind, COALESCE(done_at, at), json_extract(result, '$.usage') FROM journal
             WHERE run_id = ?1 AND kind IN ('turn', 'prompt') AND result IS NOT NULL AND json_valid(result)
               AND json_extract(result, '$.usage') IS NOT NULL
             ORDER BY event_seq, seq",
        )?;
        let rows = stmt
            .query_map([run], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows
            .into_iter()
            .filter_map(|(event_seq, seq, kind, at_ms, usage)| {
                let charge = serde_json::from_str(&usage).ok()?;
                Some(TurnCharge {
                    event_seq,
                    seq,
                    kind,
                    at_ms,
                    charge,
                })
            })
            .collect())
    }

    /// A hook session's transcript tally, if it has one.
    pub fn spend_tally(&self, run: &str) -> Result<Option<Tally>> {
        if !self.has_schema(super::schema::SPEND) {
            return Ok(None);
        }
        let text: Option<String> = self
            .conn()
            .row("SELECT spend_tally FROM runs WHERE id = ?1", [run], |r| {
                r.get(0)
            })
            .optional()?
            .flatten();
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Keep a hook session's transcript tally and the totals priced from it.
    pub fn set_tally(&self, run: &str, tally: &Tally, totals: &Totals) -> Result<()> {
        self.write_run(run, "record what the agent session spent", |tx| {
            write_tally(tx, run, tally, totals)
        })
    }
}

/// Keep a hook session's tally and totals, inside the caller's transaction.
pub(super) fn write_tally(
    tx: &crate::db::Conn,
    run: &str,
    tally: &Tally,
    totals: &Totals,
) -> Result<()> {
    let text = serde_json::to_string(tally)?;
    let clamp = |n: u64| n.min(i64::MAX as u64) as i64;
    let t = &totals.tokens;
    tx.exec(
        "UPDATE runs SET spend_tally = ?2, spend_turns = ?3, spend_unmetered = ?4, spend_unpriced = ?5,
             spend_input_tokens = ?6, spend_output_tokens = ?7, spend_cache_read_tokens = ?8,
             spend_cache_write_tokens = ?9, spend_cost_usd = ?10, updated_at = ?11
         WHERE id = ?1",
        params![
            run,
            text,
            clamp(totals.turns),
            clamp(totals.unmetered),
            clamp(totals.unpriced),
            clamp(t.input),
            clamp(t.output),
            clamp(t.cache_read),
            clamp(t.cache_write),
            totals.cost_usd,
            now_ms()
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::db::on_both_engines!(a_result_is_charged_once_and_the_totals_match_the_journal,);

    use crate::db::{Budget, JournalRow};
    use crate::spend::CostSource;

    fn charge(cost: f64, input: u64) -> Charge {
        Charge {
            unmetered: false,
            model: Some("m".into()),
            tokens: Tokens {
                input,
                output: 1,
                ..Default::default()
            },
            cost_usd: Some(cost),
            source: CostSource::Agent,
        }
    }

    fn a_result_is_charged_once_and_the_totals_match_the_journal(db: Db) {
        db.create_run("r", "p", "d", "{}").unwrap();
        let row = JournalRow {
            seq: 0,
            kind: "turn".into(),
            request: "{}".into(),
            result: None,
        };
        let seq = db
            .journal_intent("r", (None, "{}"), &[], &row, &Budget::default())
            .unwrap()
            .unwrap();
        let c = charge(0.5, 100);
        let result = format!(
            "{{\"ok\":{{}},\"usage\":{}}}",
            serde_json::to_string(&c).unwrap()
        );
        db.journal_result("r", seq, 0, &result, Some(&c)).unwrap();
        // A second write of the same result (a retried step) adds nothing.
        db.journal_result("r", seq, 0, &result, Some(&c)).unwrap();
        let spent = db.spent("r").unwrap();
        assert_eq!(
            (spent.turns, spent.cost_usd, spent.tokens.input),
            (1, 0.5, 100)
        );
        let turns = db.charges("r").unwrap();
        assert_eq!(turns.len(), 1);
        assert_eq!((turns[0].kind.as_str(), &turns[0].charge), ("turn", &c));
        assert_eq!(db.run("r").unwrap().unwrap().spent, spent);
        db.add_charge("r", &Charge::unmetered()).unwrap();
        assert_eq!(db.spent("r").unwrap().unmetered, 1);
    }
}
