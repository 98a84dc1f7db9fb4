//! `log`: policy messages into the run log, within a per-event byte budget.
//! Past the budget, messages are dropped with one notice naming the limit.
//! A progress line is also marked in the journal (see
//! [`crate::journal::Journal::mark`]): where the run stands, while it runs.

use std::sync::Arc;

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::loopbox::policy::log::{self, Level};
use crate::limits::meter::Meter;
use crate::limits::{Limit, LimitExceeded};
use crate::runlog::{RunLog, Source};

pub struct LogHost {
    log: RunLog,
    journal: Option<crate::journal::Journal>,
    meter: Arc<Meter>,
    budget: u64,
    used: u64,
    dropped: bool,
}

impl LogHost {
    pub fn new(log: RunLog, meter: Arc<Meter>, budget: u64) -> LogHost {
        LogHost {
            log,
            journal: None,
            meter,
            budget,
            used: 0,
            dropped: false,
        }
    }

    /// Mark the policy's progress lines in `journal`.
    pub fn marking(mut self, journal: crate::journal::Journal) -> LogHost {
        self.journal = Some(journal);
        self
    }

    /// Charge `bytes` of output to the event's log budget; false once it is spent.
    pub fn charge(&mut self, bytes: u64) -> bool {
        if self.used.saturating_add(bytes) > self.budget {
            if !self.dropped {
                self.dropped = true;
                self.log.host(
                    "warn",
                    format!(
                        "{}; further log output of this event is dropped",
                        LimitExceeded::new(Limit::LogBytes, self.budget)
                    ),
                );
            }
            return false;
        }
        self.used += bytes;
        true
    }

    pub fn write(&mut self, level: &str, source: Source, message: &str) {
        if self.charge(message.len() as u64) {
            self.log.write(level, source, message);
        }
    }
}

pub fn level_name(l: Level) -> &'static str {
    match l {
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

impl log::Host for LogHost {
    async fn write(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let meter = self.meter.clone();
        let _call = meter.call()?;
        meter.check_str(&message)?;
        LogHost::write(self, level_name(level), Source::Policy, &message);
        Ok(())
    }

    async fn progress(&mut self, message: String) -> wasmtime::Result<()> {
        let meter = self.meter.clone();
        let _call = meter.call()?;
        meter.check_str(&message)?;
        // Marked whatever the log budget: the journal's own budget bounds it.
        if let Some(j) = &self.journal {
            j.mark(&message);
        }
        if self.charge(message.len() as u64) {
            self.log.ui().stage(&crate::ui::shorten(&message, 120));
        }
        Ok(())
    }
}

/// Link `log` into `linker`; `get` finds this capability's host state in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut LogHost,
) -> Result<()> {
    log::add_to_linker::<T, HasSelf<LogHost>>(linker, get).map_err(crate::wasm_err)
}
