//! Journal rows: every host call of an event with its request and result, and
//! the run's budgets they spend. An action's result is written before the
//! policy sees it. This is the lower layer: [`super::events`] writes rows
//! together with their event, never the other way round.

use crate::db::engine::{Done, Engine, OptionalExtension, Params, ToValue, Value, params};
use anyhow::Result;

use super::{Db, now_ms};

/// One journaled host call.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRow {
    /// Order within the event, from 1 (0 is the driver's agent turn after the event).
    pub seq: i64,
    /// `shell`, `prompt`, `read`, `list-dir`, `wall-clock`, `monotonic-clock`, `turn`.
    pub kind: String,
    pub request: String,
    /// `None` while the action runs, and forever when the process died during it.
    pub result: Option<String>,
}

impl JournalRow {
    /// The bytes the row takes in the journal (what the budgets count).
    pub fn bytes(&self) -> u64 {
        (self.kind.len() + self.request.len() + self.result.as_ref().map_or(0, String::len)) as u64
    }
}

/// What starting an action spends; `None` limits are not checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budget {
    pub actions: Option<u64>,
    pub prompts: Option<u64>,
    /// An agent turn of the driver (counted in `turns`).
    pub turn: bool,
    /// Refused once the run is being cancelled (`loopbox runs cancel`): checked
    /// in the same write, so no action starts after the cancel committed.
    pub uncancelled: bool,
}

/// Why a start was refused: the budget that was spent, with its limit, or
/// the run's cancellation ([`Budget::uncancelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    Actions(u64),
    Prompts(u64),
    Cancelled,
}

/// The statements of a write, each SQL with its parameters, sent together
/// ([`crate::db::Conn::pipeline`]).
pub(super) type Steps = Vec<(&'static str, Vec<Value>)>;

const INSERT_ROW: &str = "INSERT INTO journal (run_id, event_seq, seq, kind, request, result, at, done_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (run_id, event_seq, seq) DO UPDATE SET result = excluded.result, done_at = excluded.done_at";

const ADD_BYTES: &str = "UPDATE runs SET journal_bytes = journal_bytes + ?2 WHERE id = ?1";

pub(super) fn insert_rows(
    tx: &crate::db::Conn,
    run: &str,
    event_seq: i64,
    rows: &[JournalRow],
) -> Result<()> {
    let mut steps = Steps::new();
    push_rows(&mut steps, run, event_seq, rows);
    push_bytes(&mut steps, run, rows_bytes(rows));
    tx.pipeline(&steps)?;
    Ok(())
}

/// The bytes `rows` add to the run's journal.
pub(super) fn rows_bytes(rows: &[JournalRow]) -> u64 {
    rows.iter().map(JournalRow::bytes).sum()
}

/// [`INSERT_ROW`] for 2, 3 and 4 rows: one statement (the server parses,
/// plans and runs one) for an intent and the journaled reads before it.
const INSERT_ROWS: [&str; 3] = [
    "INSERT INTO journal (run_id, event_seq, seq, kind, request, result, at, done_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8), (?1, ?2, ?9, ?10, ?11, ?12, ?7, ?13)
         ON CONFLICT (run_id, event_seq, seq) DO UPDATE SET result = excluded.result, done_at = excluded.done_at",
    "INSERT INTO journal (run_id, event_seq, seq, kind, request, result, at, done_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8), (?1, ?2, ?9, ?10, ?11, ?12, ?7, ?13), (?1, ?2, ?14, ?15, ?16, ?17, ?7, ?18)
         ON CONFLICT (run_id, event_seq, seq) DO UPDATE SET result = excluded.result, done_at = excluded.done_at",
    "INSERT INTO journal (run_id, event_seq, seq, kind, request, result, at, done_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8), (?1, ?2, ?9, ?10, ?11, ?12, ?7, ?13), (?1, ?2, ?14, ?15, ?16, ?17, ?7, ?18), (?1, ?2, ?19, ?20, ?21, ?22, ?7, ?23)
         ON CONFLICT (run_id, event_seq, seq) DO UPDATE SET result = excluded.result, done_at = excluded.done_at",
];

/// The statements that write `rows` (their bytes are added to the run's
/// total apart: [`push_bytes`], or with the spend on PostgreSQL).
pub(super) fn push_rows(steps: &mut Steps, run: &str, event_seq: i64, rows: &[JournalRow]) {
    let now = now_ms();
    for chunk in rows.chunks(4) {
        let first = &chunk[0];
        let mut values = params![
            run,
            event_seq,
            first.seq,
            first.kind,
            first.request,
            first.result,
            now,
            first.result.as_ref().map(|_| now)
        ]
        .values();
        for r in &chunk[1..] {
            values.extend(
                params![
                    r.seq,
                    r.kind,
                    r.request,
                    r.result,
                    r.result.as_ref().map(|_| now)
                ]
                .values(),
            );
        }
        let sql = match chunk.len() {
            1 => INSERT_ROW,
            n => INSERT_ROWS[n - 2],
        };
        steps.push((sql, values));
    }
}

pub(super) fn push_bytes(steps: &mut Steps, run: &str, bytes: u64) {
    if bytes > 0 {
        steps.push((ADD_BYTES, params![run, bytes as i64].values()));
    }
}

/// How a write that spends a budget tells it had no room.
pub(super) enum Checks {
    /// SQLite: each listed step (its index) had to change the run's row.
    Rows(Vec<(usize, Spent)>),
    /// PostgreSQL: one statement, which fails ([`is_refusal`]) when any check
    /// fails, so the transaction and a `COMMIT` sent with it keep nothing;
    /// why is read after the rollback ([`Db::why_refused`]).
    Raised,
}

/// One statement that spends `budget` and adds `bytes` to the run's journal
/// total, or fails: the run's row is updated only where every limit has room
/// (and, [`Budget::uncancelled`], no cancel was asked), and `ln(0)` of no row
/// updated raises SQLSTATE 2201E (the fence divides by zero: 22012). The
/// argument is not a constant, so the planner cannot raise it early.
const SPEND_ON_POSTGRES: &str = "WITH spent AS (UPDATE runs SET actions = actions + ?2, prompts = prompts + ?3, turns = turns + ?4, journal_bytes = journal_bytes + ?5 \
     WHERE id = ?1 AND actions < ?6 AND prompts < ?7 AND cancel <= ?8 RETURNING 1) \
     SELECT ln(COUNT(*)) FROM spent";

/// The statements that spend `budget` (adding `bytes` to the journal's total,
/// on PostgreSQL in the same statement), and how to tell one had no room.
pub(super) fn push_spend(
    steps: &mut Steps,
    engine: Engine,
    run: &str,
    budget: &Budget,
    bytes: u64,
) -> Checks {
    if engine == Engine::Postgres {
        let limit = |l: Option<u64>| l.map_or(i64::MAX, |l| l.min(i64::MAX as u64) as i64);
        steps.push((
            SPEND_ON_POSTGRES,
            params![
                run,
                i64::from(budget.actions.is_some()),
                i64::from(budget.prompts.is_some()),
                i64::from(budget.turn),
                bytes as i64,
                limit(budget.actions),
                limit(budget.prompts),
                if budget.uncancelled { 0 } else { i64::MAX }
            ]
            .values(),
        ));
        return Checks::Raised;
    }
    let mut checks = Vec::new();
    if budget.uncancelled {
        checks.push((steps.len(), Spent::Cancelled));
        steps.push((
            "UPDATE runs SET cancel = 0 WHERE id = ?1 AND cancel = 0",
            vec![run.to_value()],
        ));
    }
    if let Some(limit) = budget.prompts {
        checks.push((steps.len(), Spent::Prompts(limit)));
        steps.push((
            "UPDATE runs SET prompts = prompts + 1 WHERE id = ?1 AND prompts < ?2",
            params![run, limit as i64].values(),
        ));
    }
    if let Some(limit) = budget.actions {
        checks.push((steps.len(), Spent::Actions(limit)));
        steps.push((
            "UPDATE runs SET actions = actions + 1 WHERE id = ?1 AND actions < ?2",
            params![run, limit as i64].values(),
        ));
    }
    if budget.turn {
        steps.push((
            "UPDATE runs SET turns = turns + 1 WHERE id = ?1",
            vec![run.to_value()],
        ));
    }
    push_bytes(steps, run, bytes);
    Checks::Rows(checks)
}

/// The first check of `checks` that had no room (its update changed no
/// row). The caller then rolls the whole transaction back: what the other
/// statements sent with it wrote is not kept. Always `None` for
/// [`Checks::Raised`], whose failure is the request's error.
pub(super) fn spent(done: &[Done], checks: &Checks) -> Option<Spent> {
    match checks {
        Checks::Rows(checks) => checks
            .iter()
            .find(|(i, _)| done.get(*i).is_none_or(|d| d.changed == 0))
            .map(|(_, spent)| *spent),
        Checks::Raised => None,
    }
}

/// Whether `e` is [`SPEND_ON_POSTGRES`] refusing (no other statement takes a logarithm).
pub(super) fn is_refusal(e: &anyhow::Error) -> bool {
    super::engine::Error::failed_with(
        e,
        &tokio_postgres::error::SqlState::INVALID_ARGUMENT_FOR_LOG,
    )
}

/// A mark of the journal: (event, call number, text).
pub type Mark = (i64, i64, String);

/// The most marks [`Db::marks`] reads.
pub const MARKS_SHOWN: i64 = 1000;

impl Db {
    /// Bytes of journal the run has recorded.
    pub fn journal_bytes(&self, run: &str) -> Result<u64> {
        let c = self.conn();
        let n: Option<i64> = c
            .row("SELECT journal_bytes FROM runs WHERE id = ?1", [run], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// The journal of one event, in call order.
    pub fn journal(&self, run: &str, event_seq: i64) -> Result<Vec<JournalRow>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached("SELECT seq, kind, request, result FROM journal WHERE run_id = ?1 AND event_seq = ?2 ORDER BY seq")?;
        let rows = stmt
            .query_map(params![run, event_seq], |r| {
                Ok(JournalRow {
                    seq: r.get(0)?,
                    kind: r.get(1)?,
                    request: r.get(2)?,
                    result: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The run's latest [`MARKS_SHOWN`] marks (see [`crate::journal::Journal::mark`]),
    /// in order: (event, call number, text); and how many it has in all.
    pub fn marks(&self, run: &str) -> Result<(Vec<Mark>, i64)> {
        let c = self.conn();
        let total: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM journal WHERE run_id = ?1 AND kind = 'progress'")?
            .query_row([run], |r| r.get(0))?;
        let mut stmt = c.prepare_cached(
            "SELECT event_seq, seq, request FROM journal WHERE run_id = ?1 AND kind = 'progress'
             ORDER BY event_seq DESC, seq DESC LIMIT ?2",
        )?;
        let mut rows = stmt
            .query_map(params![run, MARKS_SHOWN], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.reverse();
        Ok((rows, total))
    }

    /// Every journaled call of the run, with its event's number, in order.
    pub fn journal_of_run(&self, run: &str) -> Result<Vec<(i64, JournalRow)>> {
        let c = self.conn();
        let mut stmt = c.prepare("SELECT event_seq, seq, kind, request, result FROM journal WHERE run_id = ?1 ORDER BY event_seq, seq")?;
        let rows = stmt
            .query_map([run], |r| {
                Ok((
                    r.get(0)?,
                    JournalRow {
                        seq: r.get(1)?,
                        kind: r.get(2)?,
                        request: r.get(3)?,
                        result: r.get(4)?,
                    },
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Spend `budget` without journaling (the journal is off).
    pub fn spend(&self, run: &str, budget: &Budget) -> Result<Result<(), Spent>> {
        let spent = self.write_run(run, "count the action", |tx| {
            let mut steps = Steps::new();
            let checks = push_spend(&mut steps, tx.engine(), run, budget, 0);
            match spent(&tx.pipeline_committing(&steps)?, &checks) {
                // Rolled back: a budget with room is not spent either.
                Some(spent) => Err(SpentError(spent).into()),
                None => Ok(()),
            }
        });
        self.refused(run, budget, spent)
    }

    /// A spending write's outcome: its refusal as `Err(Spent)`, read from
    /// the store when the engine only said that a check failed.
    pub(super) fn refused<T>(
        &self,
        run: &str,
        budget: &Budget,
        done: Result<T>,
    ) -> Result<Result<T, Spent>> {
        let e = match done {
            Ok(v) => return Ok(Ok(v)),
            Err(e) => e,
        };
        // A run removed while it ran fails every check (and, on SQLite, the
        // journal rows' foreign key): say so, the same on both engines, rather
        // than blame a budget or show the engine's words.
        if self.run_is_gone(run) {
            return Err(e.context(format!(
                "run `{run}` is no longer in the store (removed while it ran): its action was not started and nothing of it was recorded"
            )));
        }
        match e.downcast_ref::<SpentError>() {
            Some(SpentError(spent)) => Ok(Err(*spent)),
            None if is_refusal(&e) => Ok(Err(self.why_refused(run, budget)?)),
            None => Err(e),
        }
    }

    /// Whether the store surely has no row for `run` (a failed read is no answer).
    fn run_is_gone(&self, run: &str) -> bool {
        self.conn()
            .row("SELECT 1 FROM runs WHERE id = ?1", [run], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .is_ok_and(|found| found.is_none())
    }

    /// Which of `budget`'s checks has no room now, as SQLite's would have
    /// said (the cancel first, then prompts, then actions).
    fn why_refused(&self, run: &str, budget: &Budget) -> Result<Spent> {
        let (cancel, actions, prompts) = self.conn().row(
            "SELECT cancel, actions, prompts FROM runs WHERE id = ?1",
            [run],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            },
        )?;
        let full = |used: i64, limit: Option<u64>| limit.is_some_and(|l| used as u64 >= l);
        Ok(if budget.uncancelled && cancel != 0 {
            Spent::Cancelled
        } else if full(prompts, budget.prompts) {
            Spent::Prompts(budget.prompts.unwrap_or_default())
        } else if full(actions, budget.actions) {
            Spent::Actions(budget.actions.unwrap_or_default())
        } else {
            anyhow::bail!(
                "the store refused to count the action, yet the run has room in its budgets: try again"
            )
        })
    }

    /// Durably record an action's result, and what the agent turn behind it
    /// cost: the charge is added to the run's totals in the same transaction,
    /// and only when the call had no result yet, so it counts once.
    pub fn journal_result(
        &self,
        run: &str,
        event_seq: i64,
        seq: i64,
        result: &str,
        charge: Option<&crate::spend::Charge>,
    ) -> Result<()> {
        self.write_run(run, "journal the action's result", |tx| {
            let (now, bytes) = (now_ms(), result.len() as i64);
            let steps: Steps = match tx.engine() {
                // One statement: every part of a WITH sees the rows as they were
                // before it, so `open` is read before the update.
                Engine::Postgres => vec![(
                    RESULT_ON_POSTGRES,
                    params![run, event_seq, seq, result, now, bytes].values(),
                )],
                // One round trip: whether the call was open is read before the
                // update after it in the pipeline runs.
                Engine::Sqlite => vec![
                    (
                        "SELECT result IS NULL FROM journal WHERE run_id = ?1 AND event_seq = ?2 AND seq = ?3",
                        params![run, event_seq, seq].values(),
                    ),
                    (
                        "UPDATE journal SET result = ?4, done_at = ?5 WHERE run_id = ?1 AND event_seq = ?2 AND seq = ?3",
                        params![run, event_seq, seq, result, now].values(),
                    ),
                    (ADD_BYTES, params![run, bytes].values()),
                ],
            };
            // Without a charge to add, nothing follows: commit in the same round trip.
            let done = if charge.is_none() {
                tx.pipeline_committing(&steps)?
            } else {
                tx.pipeline(&steps)?
            };
            let open = match done[0].rows.first() {
                Some(r) => r.get::<_, bool>(0)?,
                None => false,
            };
            if let Some(c) = charge
                && open
            {
                super::spend::add(tx, run, c)?;
            }
            Ok(())
        })
    }
}

/// An action's result, its bytes added to the run's total, and whether the
/// call was still open, in one statement (see [`Db::journal_result`]).
const RESULT_ON_POSTGRES: &str = "WITH open AS (SELECT result IS NULL AS open FROM journal WHERE run_id = ?1 AND event_seq = ?2 AND seq = ?3), \
     done AS (UPDATE journal SET result = ?4, done_at = ?5 WHERE run_id = ?1 AND event_seq = ?2 AND seq = ?3 RETURNING 1), \
     bytes AS (UPDATE runs SET journal_bytes = journal_bytes + ?6 WHERE id = ?1 RETURNING 1) \
     SELECT open FROM open";

/// Carries a spent budget out of the transaction so it rolls back.
#[derive(Debug)]
pub(super) struct SpentError(pub(super) Spent);

impl std::fmt::Display for SpentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "budget spent: {:?}", self.0)
    }
}

impl std::error::Error for SpentError {}
