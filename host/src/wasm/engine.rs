//! The process's one Wasm [`Engine`]: async, fuel and epoch interruption on, the
//! pooling allocator, and a background thread that advances the epoch.
//!
//! Engine settings are fixed here (not per policy) so compiled artifacts are
//! interchangeable across runs; per-policy limits are applied per Store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::limits::MAX_MEMORY_BYTES;

/// How often the epoch advances; compute-time limits are enforced at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Instances alive at once across the process (each event in flight makes one).
/// The pool is reserved up front, so a one-shot process (a hook) pays for its
/// size at start-up; hosts driving many runs at once raise it in `[engine]`.
pub const DEFAULT_POOL_INSTANCES: u32 = 64;

/// Builds the engine configuration for a pool of `pool_instances` instances.
pub fn config(pool_instances: u32) -> Config {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // Guest stack must stay well under the fiber stack the async host runs it on.
    config.max_wasm_stack(512 << 10);
    config.async_stack_size(2 << 20);
    config.memory_init_cow(true);

    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(pool_instances)
        .total_core_instances(pool_instances * 8)
        .total_memories(pool_instances * 2)
        .total_tables(pool_instances * 4)
        .total_stacks(pool_instances)
        .max_memory_size(MAX_MEMORY_BYTES as usize)
        .table_elements(100_000)
        .max_core_instances_per_component(64)
        .max_memories_per_component(16)
        .max_tables_per_component(32)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        // Keep a few slots warm so back-to-back events reuse initialized memory.
        .max_unused_warm_slots(16)
        .linear_memory_keep_resident(memory_keep_resident())
        .table_keep_resident(1 << 16);
    if pagemap_scan() {
        pool.pagemap_scan(wasmtime::Enabled::Yes);
    }
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Bytes of each memory slot kept resident between instances when the kernel
/// can tell which pages an instance wrote (`PAGEMAP_SCAN`, Linux 6.7): only
/// those are reset, by copying the image or zeroing, so the next instance takes
/// no page faults and the slot needs no `madvise`. Covers a Rust policy's
/// stack, data and heap (BENCHMARKS.md, section 1).
const KEEP_RESIDENT_SCANNED: usize = 2 << 20;

/// Without the scan, what stays resident is zeroed whole on every reset: 1 MiB
/// made that memset the largest cost of a small policy's event.
const KEEP_RESIDENT_UNSCANNED: usize = 64 << 10;

/// Whether slots are reset by scanning for written pages.
pub fn pagemap_scan() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::env::var_os("LOOPBOX_NO_PAGEMAP_SCAN").is_none()
            && PoolingAllocationConfig::is_pagemap_scan_available()
    })
}

fn memory_keep_resident() -> usize {
    if pagemap_scan() {
        KEEP_RESIDENT_SCANNED
    } else {
        KEEP_RESIDENT_UNSCANNED
    }
}

/// A thread advancing the engine's epoch every [`EPOCH_TICK`]; stops when dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: &Engine) -> Result<EpochTicker> {
        let weak = engine.weak();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("loopbox-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    // park_timeout, not sleep: dropping the ticker unparks it, so exit never waits a tick.
                    std::thread::park_timeout(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(EpochTicker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Epoch ticks covering `d` (at least one).
pub fn ticks(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1)
}
