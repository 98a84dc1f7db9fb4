//! The guest's clocks and random numbers, made replayable. Each clock read is
//! a journaled call, so a replayed guest sees the times it saw before the
//! crash; random numbers come from a generator seeded by the run's seed and
//! the event's number, so they repeat without being journaled.
//!
//! A clock read is a host call like any other: it counts against
//! `limits.host_calls_per_event` and the journal's budgets. A read cannot fail,
//! so past a limit it is answered live and unrecorded, and the meter stops the
//! guest at its next check (within one epoch tick).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use super::{Journal, NonDeterminism, Step, StepError};
use crate::limits::meter::Meter;

/// A WASI clock whose readings go through the event's journal.
pub struct JournalClock {
    journal: Journal,
    meter: Arc<Meter>,
    /// Added to live monotonic readings so they continue past replayed ones.
    offset: std::sync::Mutex<(u64, u64)>,
}

impl JournalClock {
    pub fn new(journal: Journal, meter: Arc<Meter>) -> JournalClock {
        JournalClock {
            journal,
            meter,
            offset: std::sync::Mutex::new((0, 0)),
        }
    }

    /// A reading: from the journal on replay, else `live()` (and journaled).
    fn read(&self, kind: &str, live: impl FnOnce() -> u128) -> u128 {
        if !self.meter.count_infallible() {
            return live();
        }
        match self.journal.step(kind, "") {
            Ok(Step::Replayed(v)) => match v.parse() {
                Ok(v) => return v,
                Err(_) => self.journal.record_failure(NonDeterminism(format!(
                    "the journal's {kind} reading `{v}` is not a number"
                ))),
            },
            Ok(Step::Live(seq)) => {
                let v = live();
                self.journal.note(seq, kind, "", &v.to_string());
                return v;
            }
            Ok(Step::InFlight(seq)) => self.journal.record_failure(NonDeterminism(format!(
                "call {seq} of this event is a {kind} reading with no value in the journal"
            ))),
            Err(StepError::Full(limit)) => self.meter.defer(limit),
            // The mismatch is kept in the journal and reported when the event ends.
            Err(StepError::Mismatch(_)) => {}
        }
        live()
    }
}

fn process_start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

impl HostWallClock for JournalClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        let nanos = self.read("wall-clock", || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        });
        Duration::from_nanos(nanos.min(u64::MAX as u128) as u64)
    }
}

impl HostMonotonicClock for JournalClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        let mut state = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        let (last, offset) = &mut *state;
        let v = self.read("monotonic-clock", || {
            let real = process_start().elapsed().as_nanos() as u64;
            // After replayed readings from an earlier process, keep counting up from them.
            if real + *offset <= *last {
                *offset = *last + 1 - real;
            }
            (real + *offset) as u128
        }) as u64;
        *last = (*last).max(v);
        v
    }
}

/// The random generator for one event: the same run seed and event number give the same numbers.
pub fn event_rng(run_seed: &str, event: i64, stream: &str) -> StdRng {
    let mut h = blake3::Hasher::new();
    h.update(run_seed.as_bytes())
        .update(&event.to_le_bytes())
        .update(stream.as_bytes());
    StdRng::from_seed(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;
    use rand::Rng;

    #[test]
    fn replayed_clock_readings_repeat_and_live_ones_continue_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        db.create_run("r", "p", "d", "{}").unwrap();
        let j = Journal::live(db.clone(), "r", "{}".into(), true);
        let meter = Arc::new(Meter::new(&crate::limits::Limits::default()));
        let clock = JournalClock::new(j.clone(), meter.clone());
        let wall = HostWallClock::now(&clock);
        let mono = HostMonotonicClock::now(&clock);
        // An action after the readings writes them with its intent.
        j.intent(3, "shell", "x", &Default::default())
            .unwrap()
            .unwrap();

        std::thread::sleep(Duration::from_millis(5));
        let r = Journal::replay(db, "r", 1, "{}".into()).unwrap();
        let again = JournalClock::new(r.clone(), meter);
        assert_eq!(HostWallClock::now(&again), wall);
        assert_eq!(HostMonotonicClock::now(&again), mono);
        assert_eq!(r.step("shell", "x").unwrap(), Step::InFlight(3));
        let later = HostMonotonicClock::now(&again);
        assert!(later > mono, "{later} > {mono}");
    }

    #[test]
    fn clock_reads_past_the_host_call_limit_are_not_journaled_and_stop_the_guest() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        db.create_run("r", "p", "d", "{}").unwrap();
        let j = Journal::live(db, "r", "{}".into(), true);
        let limits = crate::limits::Limits {
            host_calls_per_event: 3,
            ..Default::default()
        };
        let meter = Arc::new(Meter::new(&limits));
        let clock = JournalClock::new(j.clone(), meter.clone());
        for _ in 0..1000 {
            HostWallClock::now(&clock);
        }
        assert_eq!(j.finish_event().rows.len(), 3);
        let e = meter.check().unwrap_err();
        assert!(
            e.to_string().contains("limits.host_calls_per_event = 3"),
            "{e}"
        );
    }

    #[test]
    fn event_random_numbers_repeat_per_run_and_event() {
        let a = event_rng("seed", 1, "secure").next_u64();
        assert_eq!(a, event_rng("seed", 1, "secure").next_u64());
        assert_ne!(a, event_rng("seed", 2, "secure").next_u64());
        assert_ne!(a, event_rng("other", 1, "secure").next_u64());
    }
}
