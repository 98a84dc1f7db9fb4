//! `loopbox serve`: run the shared server; `serve token` and `serve audit`
//! manage its tokens and read its audit log, and `serve tenant-config` sets a
//! tenant's loopbox.toml, all on the same data directory (the server may be
//! running: they write through the store, and the server reads it there).

mod audit;
mod tenant_config;
mod token;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{Failure, exit};
use loopbox::serve::{Options, Setup};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct ServeArgs {
    /// The server config (default: loopbox-server.toml in the current directory, if present)
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Where to listen, HOST:PORT (default: server.listen, else 127.0.0.1:7300)
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The data directory (default: server.data)
    #[arg(long, value_name = "DIR", global = true)]
    data: Option<PathBuf>,
    /// The store, postgres://USER@HOST:PORT/DB, no password here (default: LOOPBOX_STORE, which may hold one; else DATA/loopbox.db)
    #[arg(long, value_name = "URL", global = true)]
    store: Option<String>,
    #[command(subcommand)]
    command: Option<ServeCommand>,
}

#[derive(Debug, Subcommand)]
enum ServeCommand {
    /// Make, list or revoke API tokens
    Token(token::TokenArgs),
    /// Show the audit log: every act of a person or a token
    Audit(audit::AuditArgs),
    /// Show or set a tenant's loopbox.toml (its grants, policies, trust keys, agent)
    TenantConfig(tenant_config::TenantConfigArgs),
}

impl ServeArgs {
    pub fn json(&self) -> bool {
        match &self.command {
            Some(ServeCommand::Token(t)) => t.json,
            Some(ServeCommand::Audit(a)) => a.json,
            Some(ServeCommand::TenantConfig(_)) | None => false,
        }
    }
}

fn setup(opts: &Options) -> Result<Setup, Failure> {
    Setup::open(opts).map_err(Failure::usage)
}

pub fn execute(args: ServeArgs) -> Result<i32, Failure> {
    let opts = Options {
        config: args.config,
        listen: args.listen,
        data: args.data,
        store: args.store,
    };
    match args.command {
        Some(ServeCommand::Token(t)) => token::execute(t, &setup(&opts)?),
        Some(ServeCommand::Audit(a)) => audit::execute(a, &setup(&opts)?),
        Some(ServeCommand::TenantConfig(c)) => tenant_config::execute(c, &setup(&opts)?),
        None => {
            super::long_running_allocator();
            let runtime = super::tokio()?;
            runtime
                .block_on(loopbox::serve::serve(&opts, |addr, server| {
                    let names: Vec<&str> = server.tenants.names().collect();
                    loopbox::outln!(
                        "loopbox serve: listening on http://{addr} (data {}; tenants: {})",
                        server.data.path().display(),
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    );
                }))
                .map_err(|e| {
                    if loopbox::db::is_store_error(&e) {
                        Failure::internal(e)
                    } else {
                        Failure::usage(e)
                    }
                })?;
            loopbox::outln!("loopbox serve: stopped");
            Ok(exit::OK)
        }
    }
}
