//! The run log: what the policy logged, what it printed, and what the host did
//! on its behalf. Lines are shown as they happen (through the [`Ui`]) and kept
//! pending until the event they belong to is committed to the store.

use std::sync::{Arc, Mutex};

use crate::db::{LogRecord, now_ms};
use crate::ui::Ui;

/// Who wrote a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The policy, through the `log` interface.
    Policy,
    /// The policy's WASI stdout / stderr.
    Stdout,
    Stderr,
    /// loopbox itself (actions, decisions, faults).
    Host,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Policy => "policy",
            Source::Stdout => "stdout",
            Source::Stderr => "stderr",
            Source::Host => "host",
        }
    }
}

#[derive(Clone)]
pub struct RunLog {
    pending: Arc<Mutex<Vec<LogRecord>>>,
    ui: Ui,
}

impl RunLog {
    pub fn new(ui: Ui) -> RunLog {
        RunLog {
            pending: Arc::default(),
            ui,
        }
    }

    pub fn write(&self, level: &str, source: Source, message: impl Into<String>) {
        let record = LogRecord {
            at_ms: now_ms(),
            level: level.into(),
            source: source.as_str().into(),
            message: message.into(),
        };
        self.ui.log(&record);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }

    pub fn host(&self, level: &str, message: impl Into<String>) {
        self.write(level, Source::Host, message)
    }

    /// The lines written since the last take, for committing.
    pub fn take(&self) -> Vec<LogRecord> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn ui(&self) -> &Ui {
        &self.ui
    }
}
