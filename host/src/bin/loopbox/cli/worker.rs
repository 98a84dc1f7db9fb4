//! `loopbox worker`: drive the runs of a shared PostgreSQL store, beside the
//! server (which only queues them then) and other workers (see
//! `loopbox::serve::worker` and docs/scale.md).

use std::path::PathBuf;

use clap::Args;

use super::{Failure, exit};
use loopbox::serve::Options;
use loopbox::serve::worker::WorkerOptions;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The shared store, postgres://USER@HOST:PORT/DB, no password here (default: LOOPBOX_STORE, which may hold one)
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The server config naming the tenants and their roots this worker serves
    /// (default: loopbox-server.toml in the current directory)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// This worker's data directory (default: server.data)
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Only this tenant's runs (repeat for more; default: every tenant of the config)
    #[arg(long = "tenant", value_name = "NAME")]
    tenants: Vec<String>,
    /// Runs driven at once
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    slots: u32,
    /// The lease, in milliseconds: another worker takes a run over this long after its last renewal
    #[arg(long, value_name = "MS", default_value_t = 15_000, value_parser = clap::value_parser!(i64).range(100..=3_600_000))]
    lease_ms: i64,
}

pub fn execute(args: WorkerArgs) -> Result<i32, Failure> {
    let opts = Options {
        config: args.config,
        listen: None,
        data: args.data,
        store: args.store,
    };
    let w = WorkerOptions {
        slots: args.slots,
        tenants: args.tenants,
        ttl_ms: args.lease_ms,
        ..Default::default()
    };
    super::long_running_allocator();
    let runtime = super::tokio()?;
    let worked = runtime.block_on(loopbox::serve::worker::work(&opts, w, |id| {
        loopbox::outln!("loopbox worker: {id} working");
    }));
    // A run left to its lease after the drain may still sit in a store call
    // (each bounded by the store's answer deadline): the process does not wait.
    runtime.shutdown_background();
    worked.map_err(|e| {
        if loopbox::db::is_store_error(&e) {
            Failure::internal(e)
        } else {
            Failure::usage(e)
        }
    })?;
    loopbox::outln!("loopbox worker: stopped");
    Ok(exit::OK)
}
