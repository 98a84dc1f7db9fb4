//! The journal of one event's delivery: every host call the policy makes, in
//! order, with its request and result. Delivering an event live appends to it;
//! resuming a crashed run replays it, answering each call the policy repeats
//! from the record (the request must match, else the run stops with a
//! non-determinism error naming the call) and carrying on live after its end.
//!
//! Calls without side effects (denials, workspace reads, clock reads) are kept
//! in memory and written with the next action's intent or with the event's
//! commit: if the process dies before either, replay does them again, which is
//! harmless. An action is written before it starts and again when it ends.

mod clock;
pub mod codec;
pub(crate) mod crashpoint;

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Result;

pub use clock::{JournalClock, event_rng};

use crate::db::{Budget, Db, JournalRow, Spent};
use crate::limits::{Limit, LimitExceeded};
use crate::ui::shorten;

/// The kind of a journal row that marks where the policy stands ([`Journal::mark`]).
pub const MARK: &str = "progress";
/// A mark's text is cut to this many characters.
const MARK_BYTES: usize = 240;

/// Where a call stands against the journal.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Recorded with its result: answer with it.
    Replayed(String),
    /// Recorded as started and never finished: the process died during it.
    InFlight(i64),
    /// Not recorded: do it, under this number.
    Live(i64),
}

/// What an event's commit takes from its journal.
#[derive(Debug)]
pub struct FinishedEvent {
    /// The event's number, when an action's intent already wrote its row.
    pub seq: Option<i64>,
    /// Calls not yet written.
    pub rows: Vec<JournalRow>,
    pub failure: Option<NonDeterminism>,
}

/// Replay met a call other than the one recorded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct NonDeterminism(pub String);

/// Why a call cannot be placed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    Mismatch(NonDeterminism),
    /// The event or the run has recorded all the journal its limits allow.
    #[error("{0}")]
    Full(LimitExceeded),
}

impl StepError {
    /// As the error that stops the guest: a limit is the policy's, a mismatch is
    /// reported from the journal when the event ends.
    pub fn into_wasm(self) -> wasmtime::Error {
        match self {
            StepError::Mismatch(nd) => crate::error::host_err(nd),
            StepError::Full(l) => l.into(),
        }
    }
}

/// Answers an event's host calls in place of the world, as the journal answers
/// a replay: `loopbox test` runs a policy against a scenario this way (see
/// `crate::scenario`), so nothing is run, prompted or read.
pub trait Script: Send + Sync {
    /// The result text (in the journal's codec) for call `kind` with `request`,
    /// or why the scenario does not allow this call here.
    fn answer(&self, kind: &str, request: &str) -> Result<String, String>;
}

/// How much journal an event and its run may record.
#[derive(Debug, Clone, Copy)]
pub struct JournalBudget {
    pub per_event: u64,
    pub per_run: u64,
}

impl JournalBudget {
    pub fn of(limits: &crate::limits::Limits) -> JournalBudget {
        JournalBudget {
            per_event: limits.journal_bytes_per_event,
            per_run: limits.journal_bytes_per_run,
        }
    }
}

#[derive(Clone)]
pub struct Journal {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    db: Db,
    run: String,
    enabled: bool,
    event: String,
    /// The event's number once its row is written.
    event_seq: Option<i64>,
    recorded: Vec<JournalRow>,
    cursor: usize,
    next_seq: i64,
    buffered: Vec<JournalRow>,
    /// A mismatch found where it could not be returned (a clock read).
    failure: Option<NonDeterminism>,
    budget: Option<JournalBudget>,
    /// Bytes this event has recorded (replayed rows included), and the run before it.
    event_bytes: u64,
    run_bytes: u64,
    /// A scenario answering every call (`loopbox test`).
    script: Option<Arc<dyn Script>>,
}

impl Journal {
    /// The journal of a new event (`event` is its JSON). A disabled journal
    /// records nothing and only counts budgets.
    pub fn live(db: Db, run: &str, event: String, enabled: bool) -> Journal {
        Journal::with(db, run, event, enabled, None, Vec::new())
    }

    /// The journal of the pending event `seq`, to replay.
    pub fn replay(db: Db, run: &str, seq: i64, event: String) -> Result<Journal> {
        let recorded = db
            .journal(run, seq)?
            .into_iter()
            .filter(|r| r.seq > 0)
            .collect();
        Ok(Journal::with(db, run, event, true, Some(seq), recorded))
    }

    fn with(
        db: Db,
        run: &str,
        event: String,
        enabled: bool,
        event_seq: Option<i64>,
        recorded: Vec<JournalRow>,
    ) -> Journal {
        let next_seq = recorded
            .iter()
            .map(|r: &JournalRow| r.seq)
            .max()
            .unwrap_or(0)
            + 1;
        let event_bytes = recorded.iter().map(JournalRow::bytes).sum();
        let inner = Inner {
            db,
            run: run.to_string(),
            enabled,
            event,
            event_seq,
            recorded,
            cursor: 0,
            next_seq,
            buffered: Vec::new(),
            failure: None,
            budget: None,
            event_bytes,
            run_bytes: 0,
            script: None,
        };
        Journal {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    /// The journal of an event whose every call `script` answers; a call it
    /// refuses stops the event like a replay mismatch.
    pub fn scripted(db: Db, run: &str, event: String, script: Arc<dyn Script>) -> Journal {
        let j = Journal::with(db, run, event, true, None, Vec::new());
        j.lock().script = Some(script);
        j
    }

    /// Refuse live calls once the event or the run has recorded `budget`'s bytes.
    pub fn limited(self, budget: JournalBudget) -> Result<Journal> {
        {
            let mut j = self.lock();
            if j.enabled {
                let run_total = j.db.journal_bytes(&j.run)?;
                // On replay the event's recorded rows are already in the run's total.
                j.run_bytes = run_total.saturating_sub(j.event_bytes);
                j.budget = Some(budget);
            }
        }
        Ok(self)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn enabled(&self) -> bool {
        self.lock().enabled
    }

    /// Place the next call: answered from the record, or live (if the budget has room).
    pub fn step(&self, kind: &str, request: &str) -> Result<Step, StepError> {
        let mut j = self.lock();
        if !j.enabled {
            return Ok(Step::Live(0));
        }
        if let Some(f) = &j.failure {
            return Err(StepError::Mismatch(f.clone()));
        }
        if let Some(script) = j.script.clone() {
            return script
                .answer(kind, request)
                .map(Step::Replayed)
                .map_err(|why| {
                    let f = NonDeterminism(why);
                    j.failure = Some(f.clone());
                    StepError::Mismatch(f)
                });
        }
        // A mark is no call: replay passes over it (see [`Journal::mark`]).
        while j.recorded.get(j.cursor).is_some_and(|r| r.kind == MARK) {
            j.cursor += 1;
        }
        let Some(row) = j.recorded.get(j.cursor).cloned() else {
            // A call is refused once the budget is used, so an event overshoots by at
            // most the one call that crossed it.
            if let Some(b) = j.budget {
                if j.event_bytes >= b.per_event {
                    return Err(StepError::Full(
                        LimitExceeded::new(Limit::JournalBytes, b.per_event)
                            .attempted(j.event_bytes),
                    ));
                }
                if j.run_bytes + j.event_bytes >= b.per_run {
                    return Err(StepError::Full(
                        LimitExceeded::new(Limit::JournalRunBytes, b.per_run)
                            .attempted(j.run_bytes + j.event_bytes),
                    ));
                }
            }
            let seq = j.next_seq;
            j.next_seq += 1;
            return Ok(Step::Live(seq));
        };
        if row.kind != kind || row.request != request {
            let f = NonDeterminism(format!(
                "the policy did not repeat what it did before the crash: call {} of this event was {} in the journal, but the policy now asked for {}; \
                 the policy must decide from its event, its state and the results of its calls alone",
                row.seq,
                describe_call(&row.kind, &row.request),
                describe_call(kind, request)
            ));
            j.failure = Some(f.clone());
            return Err(StepError::Mismatch(f));
        }
        j.cursor += 1;
        Ok(match row.result {
            Some(r) => Step::Replayed(r),
            None => Step::InFlight(row.seq),
        })
    }

    /// Record a call that changed nothing (written later, with the next intent or the commit).
    pub fn note(&self, seq: i64, kind: &str, request: &str, result: &str) {
        let mut j = self.lock();
        if j.enabled {
            let row = JournalRow {
                seq,
                kind: kind.into(),
                request: request.into(),
                result: Some(result.into()),
            };
            j.event_bytes += row.bytes();
            j.buffered.push(row);
        }
    }

    /// Record where the policy says it stands (its `progress` line), as a row
    /// of kind [`MARK`] written with the next action's intent or the commit:
    /// the store then knows, while the event runs, which step an action is
    /// part of (a YAML loop's state). A mark is no call: replay passes over
    /// recorded marks and writes none, so a journal written before marks
    /// existed replays as before; a full journal budget just goes unmarked.
    pub fn mark(&self, text: &str) {
        let mut j = self.lock();
        if !j.enabled || j.script.is_some() || j.failure.is_some() {
            return;
        }
        if j.cursor < j.recorded.len() {
            // Replaying: this mark was written before, or the journal predates marks.
            if j.recorded[j.cursor].kind == MARK {
                j.cursor += 1;
            }
            return;
        }
        let text = crate::ui::shorten(text, MARK_BYTES);
        let row = JournalRow {
            seq: j.next_seq,
            kind: MARK.into(),
            request: text,
            result: Some(String::new()),
        };
        if let Some(b) = j.budget
            && (j.event_bytes + row.bytes() > b.per_event
                || j.run_bytes + j.event_bytes + row.bytes() > b.per_run)
        {
            return;
        }
        j.next_seq += 1;
        j.event_bytes += row.bytes();
        j.buffered.push(row);
    }

    /// Durably record that action `seq` is about to start, spending `budget`.
    pub fn intent(
        &self,
        seq: i64,
        kind: &str,
        request: &str,
        budget: &Budget,
    ) -> Result<Result<(), Spent>> {
        let mut j = self.lock();
        if !j.enabled {
            return j.db.spend(&j.run, budget);
        }
        let row = JournalRow {
            seq,
            kind: kind.into(),
            request: request.into(),
            result: None,
        };
        match j
            .db
            .journal_intent(&j.run, (j.event_seq, &j.event), &j.buffered, &row, budget)?
        {
            Ok(event_seq) => {
                j.event_bytes += row.bytes();
                j.event_seq = Some(event_seq);
                j.buffered.clear();
                Ok(Ok(()))
            }
            Err(spent) => Ok(Err(spent)),
        }
    }

    /// Where call `seq` stands in the run's journal: (event number, call number).
    /// The event's row (pending) and the calls before it are written first when
    /// they are not yet, so the place survives a crash: an approval is bound to
    /// it. None when the journal is off or a scenario answers the calls.
    pub fn position(&self, seq: i64) -> Result<Option<(i64, i64)>> {
        let mut j = self.lock();
        if !j.enabled || j.script.is_some() {
            return Ok(None);
        }
        if j.event_seq.is_none() || !j.buffered.is_empty() {
            let event_seq =
                j.db.journal_event(&j.run, (j.event_seq, &j.event), &j.buffered)?;
            j.event_seq = Some(event_seq);
            j.buffered.clear();
        }
        Ok(j.event_seq.map(|e| (e, seq)))
    }

    /// Durably record how action `seq` ended.
    pub fn finish(&self, seq: i64, result: &str) -> Result<()> {
        self.finish_charged(seq, result, None)
    }

    /// As [`Journal::finish`], with what an agent turn cost: the result and the
    /// run's new totals are one write, so a crash neither loses nor doubles it.
    /// With the journal off, only the totals are written.
    pub fn finish_charged(
        &self,
        seq: i64,
        result: &str,
        charge: Option<&crate::spend::Charge>,
    ) -> Result<()> {
        let mut j = self.lock();
        match (j.enabled, j.event_seq) {
            (true, Some(event_seq)) => {
                j.event_bytes += result.len() as u64;
                j.db.journal_result(&j.run, event_seq, seq, result, charge)
            }
            _ => match charge {
                Some(c) if j.script.is_none() => j.db.add_charge(&j.run, c),
                _ => Ok(()),
            },
        }
    }

    /// What the event's commit must add: its number if its row exists, the
    /// calls not yet written, and the mismatch replay found, if any (also when
    /// the policy decided without repeating every recorded call).
    pub fn finish_event(&self) -> FinishedEvent {
        let mut j = self.lock();
        while j.recorded.get(j.cursor).is_some_and(|r| r.kind == MARK) {
            j.cursor += 1;
        }
        if j.failure.is_none() && j.cursor < j.recorded.len() {
            let row = &j.recorded[j.cursor];
            j.failure = Some(NonDeterminism(format!(
                "the policy did not repeat what it did before the crash: it decided after {} of the {} recorded calls of this event, \
                 and never made call {} ({})",
                j.cursor,
                j.recorded.len(),
                row.seq,
                describe_call(&row.kind, &row.request)
            )));
        }
        FinishedEvent {
            seq: j.event_seq,
            rows: std::mem::take(&mut j.buffered),
            failure: j.failure.clone(),
        }
    }

    fn record_failure(&self, f: NonDeterminism) {
        let mut j = self.lock();
        if j.failure.is_none() {
            j.failure = Some(f);
        }
    }
}

/// A call for an error message: its kind, and its request when it has one.
fn describe_call(kind: &str, request: &str) -> String {
    if request.is_empty() {
        kind.to_string()
    } else {
        format!("{kind} {}", shorten(request, 160))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        db.create_run("r", "p", "d", "{}").unwrap();
        (dir, db)
    }

    const BUDGET: Budget = Budget {
        actions: Some(10),
        prompts: None,
        turn: false,
        uncancelled: true,
    };

    #[test]
    fn replay_answers_recorded_calls_reports_the_unfinished_one_and_then_goes_live() {
        let (_d, db) = setup();
        let j = Journal::live(db.clone(), "r", "{}".into(), true);
        assert_eq!(j.step("read", "a").unwrap(), Step::Live(1));
        j.note(1, "read", "a", "A");
        assert_eq!(j.step("shell", "x").unwrap(), Step::Live(2));
        j.intent(2, "shell", "x", &BUDGET).unwrap().unwrap();
        j.finish(2, "X").unwrap();
        assert_eq!(j.step("shell", "y").unwrap(), Step::Live(3));
        j.intent(3, "shell", "y", &BUDGET).unwrap().unwrap();
        // The process dies here: y has no result, the event is pending.
        let pending = db.last_event("r").unwrap().unwrap();
        assert!(pending.pending);

        let r = Journal::replay(db.clone(), "r", pending.seq, pending.event).unwrap();
        assert_eq!(r.step("read", "a").unwrap(), Step::Replayed("A".into()));
        assert_eq!(r.step("shell", "x").unwrap(), Step::Replayed("X".into()));
        assert_eq!(r.step("shell", "y").unwrap(), Step::InFlight(3));
        r.finish(3, "unknown").unwrap();
        assert_eq!(r.step("shell", "z").unwrap(), Step::Live(4));
        let done = r.finish_event();
        assert_eq!((done.seq, done.failure), (Some(pending.seq), None));
        assert_eq!(db.run("r").unwrap().unwrap().actions, 2);
    }

    #[test]
    fn marks_are_written_with_the_next_action_and_replay_passes_over_them() {
        let (_d, db) = setup();
        let j = Journal::live(db.clone(), "r", "{}".into(), true);
        j.mark("l · check · step 1/2");
        assert_eq!(j.step("shell", "x").unwrap(), Step::Live(2));
        j.intent(2, "shell", "x", &BUDGET).unwrap().unwrap();
        // Written with the action's intent: the store knows the state while x runs.
        let (marks, total) = db.marks("r").unwrap();
        assert_eq!(
            (marks, total),
            (vec![(1, 1, "l · check · step 1/2".to_string())], 1)
        );
        j.finish(2, "X").unwrap();
        j.mark("l · fix · step 2/2");
        assert_eq!(j.step("shell", "y").unwrap(), Step::Live(4));
        j.intent(4, "shell", "y", &BUDGET).unwrap().unwrap();
        // The process dies during y. Replay passes over the marks whether the
        // policy makes them again or not, and writes none of its own.
        let pending = db.last_event("r").unwrap().unwrap();
        for again in [true, false] {
            let r = Journal::replay(db.clone(), "r", pending.seq, pending.event.clone()).unwrap();
            if again {
                r.mark("l · check · step 1/2");
            }
            assert_eq!(r.step("shell", "x").unwrap(), Step::Replayed("X".into()));
            if again {
                r.mark("l · fix · step 2/2");
            }
            if again {
                assert_eq!(r.step("shell", "y").unwrap(), Step::InFlight(4));
                r.finish(4, "unknown").unwrap();
            } else {
                assert_eq!(
                    r.step("shell", "y").unwrap(),
                    Step::Replayed("unknown".into())
                );
            }
            let done = r.finish_event();
            assert_eq!((done.failure, done.rows.len()), (None, 0), "again: {again}");
        }
        assert_eq!(db.marks("r").unwrap().1, 2);
        // A journal without marks (written before them) replays with them made.
        let (_d2, db2) = setup();
        let j = Journal::live(db2.clone(), "r", "{}".into(), true);
        j.intent(1, "shell", "x", &BUDGET).unwrap().unwrap();
        let r = Journal::replay(db2.clone(), "r", 1, "{}".into()).unwrap();
        r.mark("l · check · step 1/2");
        assert_eq!(r.step("shell", "x").unwrap(), Step::InFlight(1));
        r.finish(1, "unknown").unwrap();
        // Past the record it is live again: the next mark is kept.
        r.mark("l · fix · step 2/2");
        let done = r.finish_event();
        assert_eq!(done.failure, None);
        assert_eq!(done.rows.len(), 1);
        assert_eq!(done.rows[0].kind, MARK);
    }

    #[test]
    fn a_different_request_on_replay_is_non_determinism_naming_the_call() {
        let (_d, db) = setup();
        let j = Journal::live(db.clone(), "r", "{}".into(), true);
        let Step::Live(seq) = j.step("shell", "{\"argv\":[\"make\",\"test\"]}").unwrap() else {
            panic!()
        };
        j.intent(seq, "shell", "{\"argv\":[\"make\",\"test\"]}", &BUDGET)
            .unwrap()
            .unwrap();
        let r = Journal::replay(db.clone(), "r", 1, "{}".into()).unwrap();
        let e = r
            .step("shell", "{\"argv\":[\"make\",\"check\"]}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("call 1 of this event was shell {\"argv\":[\"make\",\"test\"]}")
                && e.contains("make\",\"check"),
            "{e}"
        );
        // The mismatch sticks: later calls and the commit fail too.
        assert!(r.step("read", "a").is_err());
        assert!(r.finish_event().failure.is_some());
    }

    #[test]
    fn deciding_before_repeating_every_recorded_call_is_non_determinism() {
        let (_d, db) = setup();
        let j = Journal::live(db.clone(), "r", "{}".into(), true);
        j.intent(1, "shell", "x", &BUDGET).unwrap().unwrap();
        let r = Journal::replay(db, "r", 1, "{}".into()).unwrap();
        let e = r.finish_event().failure.unwrap().to_string();
        assert!(
            e.contains("after 0 of the 1 recorded calls")
                && e.contains("never made call 1 (shell x)"),
            "{e}"
        );
    }

    #[test]
    fn the_event_and_run_budgets_refuse_calls_once_used_and_count_replayed_rows() {
        let (_d, db) = setup();
        let budget = JournalBudget {
            per_event: 100,
            per_run: 150,
        };
        let j = Journal::live(db.clone(), "r", "{}".into(), true)
            .limited(budget)
            .unwrap();
        let Step::Live(seq) = j.step("read", "a").unwrap() else {
            panic!()
        };
        j.note(seq, "read", "a", &"x".repeat(95));
        let e = j.step("read", "b").unwrap_err().to_string();
        assert!(
            e.contains("limits.journal_bytes_per_event = 100, attempted 100"),
            "{e}"
        );
        let done = j.finish_event();
        db.commit_event(
            "r",
            &crate::db::EventCommit {
                seq: done.seq,
                event: "{}".into(),
                journal: done.rows,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(db.journal_bytes("r").unwrap(), 100);
        // The next event starts with the run's 100 bytes: 50 more fill the run.
        let k = Journal::live(db.clone(), "r", "{}".into(), true)
            .limited(budget)
            .unwrap();
        let Step::Live(seq) = k.step("read", "a").unwrap() else {
            panic!()
        };
        k.note(seq, "read", "a", &"y".repeat(50));
        let e = k.step("read", "c").unwrap_err().to_string();
        assert!(e.contains("limits.journal_bytes_per_run = 150"), "{e}");
    }

    #[test]
    fn a_scripted_journal_answers_every_call_from_its_script_and_a_refusal_sticks() {
        struct Echo;
        impl Script for Echo {
            fn answer(&self, kind: &str, request: &str) -> Result<String, String> {
                match kind {
                    "shell" => Ok(format!("ran {request}")),
                    _ => Err(format!("no {kind} here")),
                }
            }
        }
        let (_d, db) = setup();
        let j = Journal::scripted(db.clone(), "r", "{}".into(), Arc::new(Echo));
        assert_eq!(
            j.step("shell", "x").unwrap(),
            Step::Replayed("ran x".into())
        );
        assert_eq!(
            j.step("prompt", "y").unwrap_err().to_string(),
            "no prompt here"
        );
        assert!(j.step("shell", "z").is_err());
        assert_eq!(j.finish_event().failure.unwrap().0, "no prompt here");
        // Nothing reached the store.
        assert!(db.last_event("r").unwrap().is_none());
    }

    #[test]
    fn a_disabled_journal_records_nothing_but_still_counts() {
        let (_d, db) = setup();
        let j = Journal::live(db.clone(), "r", "{}".into(), false);
        assert_eq!(j.step("shell", "x").unwrap(), Step::Live(0));
        j.intent(
            0,
            "shell",
            "x",
            &Budget {
                actions: Some(1),
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            j.intent(
                0,
                "shell",
                "x",
                &Budget {
                    actions: Some(1),
                    ..Default::default()
                }
            )
            .unwrap(),
            Err(Spent::Actions(1))
        );
        assert!(db.last_event("r").unwrap().is_none());
    }
}
