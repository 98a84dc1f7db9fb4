//! Resource limits on a policy: each has a default, can be set under `[limits]`
//! in `loopbox.toml`, and when hit produces a [`LimitExceeded`] that names the
//! key and its value, so the user knows exactly which knob to turn.
//!
//! Beside them, what bounds one event while it runs: [`meter`], the host calls
//! and host time every capability counts, and [`stop`], a run's stop request.
//! They rank below the capabilities and the engine, which both obey them.

pub mod meter;
pub mod quota;
pub mod stop;

use std::fmt;

use anyhow::{Result, bail};
use serde::Deserialize;

/// The largest linear memory the engine's pooling allocator reserves per memory.
pub const MAX_MEMORY_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wasm fuel (roughly, instructions) one event may burn.
    pub fuel_per_event: u64,
    /// Guest compute time one event may take, in milliseconds; time the host
    /// spends in actions does not count.
    pub cpu_ms_per_event: u64,
    /// Wall time one event's guest may take, running or waiting (a WASI sleep,
    /// a pollable that never fires), in milliseconds; actions do not count.
    /// Unlike compute time it is enforced while the guest waits in the host.
    pub wall_ms_per_event: u64,
    /// Linear memory an instance may grow to, in bytes.
    pub memory_bytes: u64,
    /// Tables, core instances and memories one instance may create (each).
    pub max_tables: u32,
    pub max_instances: u32,
    pub max_memories: u32,
    /// Elements one table may hold.
    pub table_elements: u64,
    /// Bytes the guest may copy to the host in one call (wasmtime's hostcall fuel).
    pub hostcall_bytes: u64,
    /// The longest string the guest may hand the host in one argument.
    pub max_string_bytes: u64,
    /// Host calls one event may make (a guest flooding the host is stopped).
    pub host_calls_per_event: u64,
    /// Actions (shell and prompt) one run may take.
    pub actions_per_run: u64,
    /// Size of one state value, and of all a run's state together, in bytes.
    pub state_value_bytes: u64,
    pub state_total_bytes: u64,
    /// Log bytes (log messages plus guest stdout/stderr) one event may write.
    pub log_bytes_per_event: u64,
    /// Bytes of stdout and of stderr kept from one action.
    pub output_bytes: u64,
    /// The largest file `workspace.read` returns.
    pub read_bytes: u64,
    /// Bytes of journal (host-call requests and results) one event may record,
    /// and one run may record over all its events.
    pub journal_bytes_per_event: u64,
    pub journal_bytes_per_run: u64,
    /// Bytes of workspace files one run's snapshots (`actions.snapshot`) may
    /// hold in the store together.
    pub snapshot_bytes: u64,
    /// The largest message an MCP server (`actions.mcp-call`) may send; a
    /// larger one ends the call (`no-answer`) and the server.
    pub mcp_message_bytes: u64,
    /// `sleep` decisions one run may make: each wakes the run by itself, so a
    /// policy that sleeps until a time already past would otherwise loop (and
    /// grow the store) without end.
    pub wakes_per_run: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_event: 2_000_000_000,
            cpu_ms_per_event: 2_000,
            wall_ms_per_event: 10_000,
            memory_bytes: 256 << 20,
            max_tables: 20,
            max_instances: 50,
            max_memories: 10,
            table_elements: 100_000,
            hostcall_bytes: 8 << 20,
            max_string_bytes: 1 << 20,
            host_calls_per_event: 10_000,
            actions_per_run: 200,
            state_value_bytes: 64 << 10,
            state_total_bytes: 4 << 20,
            log_bytes_per_event: 64 << 10,
            output_bytes: 1 << 20,
            read_bytes: 4 << 20,
            journal_bytes_per_event: 32 << 20,
            journal_bytes_per_run: 256 << 20,
            snapshot_bytes: 64 << 20,
            mcp_message_bytes: 4 << 20,
            wakes_per_run: 10_000,
        }
    }
}

impl Limits {
    pub fn validate(&self) -> Result<()> {
        let positive: [(&str, u64); 21] = [
            ("fuel_per_event", self.fuel_per_event),
            ("cpu_ms_per_event", self.cpu_ms_per_event),
            ("wall_ms_per_event", self.wall_ms_per_event),
            ("memory_bytes", self.memory_bytes),
            ("max_tables", self.max_tables.into()),
            ("max_instances", self.max_instances.into()),
            ("max_memories", self.max_memories.into()),
            ("table_elements", self.table_elements),
            ("hostcall_bytes", self.hostcall_bytes),
            ("max_string_bytes", self.max_string_bytes),
            ("host_calls_per_event", self.host_calls_per_event),
            ("state_value_bytes", self.state_value_bytes),
            ("state_total_bytes", self.state_total_bytes),
            ("log_bytes_per_event", self.log_bytes_per_event),
            ("output_bytes", self.output_bytes),
            ("read_bytes", self.read_bytes),
            ("journal_bytes_per_event", self.journal_bytes_per_event),
            ("journal_bytes_per_run", self.journal_bytes_per_run),
            ("snapshot_bytes", self.snapshot_bytes),
            ("mcp_message_bytes", self.mcp_message_bytes),
            ("wakes_per_run", self.wakes_per_run),
        ];
        for (key, value) in positive {
            if value == 0 {
                bail!("limits.{key} must be greater than 0");
            }
        }
        if self.memory_bytes < 1 << 20 || self.memory_bytes > MAX_MEMORY_BYTES {
            bail!(
                "limits.memory_bytes = {} is out of range: give 1 MiB ({}) to 1 GiB ({MAX_MEMORY_BYTES})",
                self.memory_bytes,
                1 << 20
            );
        }
        if self.hostcall_bytes < self.max_string_bytes {
            bail!(
                "limits.hostcall_bytes ({}) must be at least limits.max_string_bytes ({})",
                self.hostcall_bytes,
                self.max_string_bytes
            );
        }
        if self.journal_bytes_per_event > self.journal_bytes_per_run {
            bail!(
                "limits.journal_bytes_per_event ({}) must not exceed limits.journal_bytes_per_run ({})",
                self.journal_bytes_per_event,
                self.journal_bytes_per_run
            );
        }
        if self.state_value_bytes > self.state_total_bytes {
            bail!(
                "limits.state_value_bytes ({}) must not exceed limits.state_total_bytes ({})",
                self.state_value_bytes,
                self.state_total_bytes
            );
        }
        Ok(())
    }
}

/// Which limit a policy ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Fuel,
    CpuTime,
    WallTime,
    Memory,
    Tables,
    TableElements,
    Instances,
    Memories,
    HostcallBytes,
    StringBytes,
    HostCalls,
    Actions,
    StateValue,
    StateTotal,
    LogBytes,
    ReadBytes,
    JournalBytes,
    JournalRunBytes,
    SnapshotBytes,
    McpMessageBytes,
    Wakes,
}

impl Limit {
    /// The config key that sets this limit.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Fuel => "limits.fuel_per_event",
            Limit::CpuTime => "limits.cpu_ms_per_event",
            Limit::WallTime => "limits.wall_ms_per_event",
            Limit::Memory => "limits.memory_bytes",
            Limit::Tables => "limits.max_tables",
            Limit::TableElements => "limits.table_elements",
            Limit::Instances => "limits.max_instances",
            Limit::Memories => "limits.max_memories",
            Limit::HostcallBytes => "limits.hostcall_bytes",
            Limit::StringBytes => "limits.max_string_bytes",
            Limit::HostCalls => "limits.host_calls_per_event",
            Limit::Actions => "limits.actions_per_run",
            Limit::StateValue => "limits.state_value_bytes",
            Limit::StateTotal => "limits.state_total_bytes",
            Limit::LogBytes => "limits.log_bytes_per_event",
            Limit::ReadBytes => "limits.read_bytes",
            Limit::JournalBytes => "limits.journal_bytes_per_event",
            Limit::JournalRunBytes => "limits.journal_bytes_per_run",
            Limit::SnapshotBytes => "limits.snapshot_bytes",
            Limit::McpMessageBytes => "limits.mcp_message_bytes",
            Limit::Wakes => "limits.wakes_per_run",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Limit::Fuel => "ran out of fuel",
            Limit::CpuTime => "used up its compute time",
            Limit::WallTime => "ran or waited past its wall-clock time for one event",
            Limit::Memory => "tried to grow its memory past the limit",
            Limit::Tables => "created too many tables",
            Limit::TableElements => "tried to grow a table past the limit",
            Limit::Instances => "created too many instances",
            Limit::Memories => "created too many memories",
            Limit::HostcallBytes => "copied too much data to the host in one call",
            Limit::StringBytes => "handed the host a string over the size limit",
            Limit::HostCalls => "made too many host calls in one event",
            Limit::Actions => "used up the run's action budget",
            Limit::StateValue => "tried to store a state value over the size limit",
            Limit::StateTotal => "tried to grow the run's state past the limit",
            Limit::LogBytes => "wrote more log than one event may",
            Limit::ReadBytes => "tried to read a file over the size limit",
            Limit::JournalBytes => "recorded more host-call journal than one event may",
            Limit::JournalRunBytes => "recorded more host-call journal than one run may",
            Limit::SnapshotBytes => "asked the host to keep more snapshot bytes than one run may",
            Limit::McpMessageBytes => "got an MCP server message over the size limit",
            Limit::Wakes => "slept (a timer that wakes the run) more times than one run may",
        }
    }
}

/// A limit was hit: which one, its configured value, and what was attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitExceeded {
    pub limit: Limit,
    pub value: u64,
    /// What the guest asked for, when known (bytes, count).
    pub attempted: Option<u64>,
}

impl LimitExceeded {
    pub fn new(limit: Limit, value: u64) -> Self {
        LimitExceeded {
            limit,
            value,
            attempted: None,
        }
    }

    pub fn attempted(mut self, n: u64) -> Self {
        self.attempted = Some(n);
        self
    }
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {} ({} = {}",
            self.limit.what(),
            self.limit.key(),
            self.value
        )?;
        if let Some(n) = self.attempted {
            write!(f, ", attempted {n}")?;
        }
        write!(f, "); raise it in loopbox.toml if the policy needs more")
    }
}

impl std::error::Error for LimitExceeded {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().unwrap();
    }

    #[test]
    fn zero_and_out_of_range_are_rejected_by_key() {
        let l = Limits {
            fuel_per_event: 0,
            ..Limits::default()
        };
        assert!(
            l.validate()
                .unwrap_err()
                .to_string()
                .contains("limits.fuel_per_event")
        );
        let l = Limits {
            memory_bytes: 2 << 30,
            ..Limits::default()
        };
        assert!(
            l.validate()
                .unwrap_err()
                .to_string()
                .contains("limits.memory_bytes")
        );
        let l = Limits {
            hostcall_bytes: 10,
            max_string_bytes: 20,
            ..Limits::default()
        };
        assert!(
            l.validate()
                .unwrap_err()
                .to_string()
                .contains("limits.hostcall_bytes")
        );
    }

    #[test]
    fn message_names_key_and_value() {
        let e = LimitExceeded::new(Limit::StringBytes, 1024).attempted(4096);
        assert_eq!(
            e.to_string(),
            "policy handed the host a string over the size limit (limits.max_string_bytes = 1024, attempted 4096); raise it in loopbox.toml if the policy needs more"
        );
    }
}
