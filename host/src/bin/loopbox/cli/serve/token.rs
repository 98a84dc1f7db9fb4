//! `loopbox serve token create|list|revoke`: API tokens of a tenant. A new
//! token is printed once; the store keeps only its hash. Each act is audited
//! as the local user's.

use clap::{Args, Subcommand};
use serde_json::json;

use super::super::{Failure, exit};
use loopbox::serve::Setup;
use loopbox::serve::auth::Role;
use loopbox::ui::{one_line, utc};

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
    /// Print JSON
    #[arg(long, global = true)]
    pub(super) json: bool,
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Make a token and print it (once)
    Create {
        #[arg(long)]
        tenant: String,
        /// viewer, operator, approver or admin
        #[arg(long)]
        role: Role,
        /// A name for it, unique among the tenant's live tokens (who it is for)
        #[arg(long)]
        name: String,
    },
    /// List tokens (never their secrets)
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a token: it and its sessions stop working at once
    Revoke {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        name: String,
    },
}

pub fn execute(args: TokenArgs, setup: &Setup) -> Result<i32, Failure> {
    let store = setup.store().map_err(Failure::internal)?;
    let actor = loopbox::db::local_actor();
    match args.command {
        TokenCommand::Create { tenant, role, name } => {
            setup.tenants.named(&tenant).map_err(Failure::usage)?;
            if !loopbox::serve::config::valid_name(&name) {
                return Err(Failure::usage(anyhow::anyhow!(
                    "--name: a token's name is 1 to 64 lower-case letters, digits, `-` and `_`"
                )));
            }
            let made = store
                .create_token(&tenant, &name, role, &actor)
                .map_err(Failure::internal)?
                .map_err(|r| Failure::usage(anyhow::anyhow!("{r}")))?;
            if args.json {
                // The API's shape (times RFC 3339), as `serve audit --json` writes them.
                let info = loopbox::serve::api::admin::token_view(&made.info);
                loopbox::outln!("{}", json!({"token": made.text, "info": info}));
            } else {
                loopbox::outln!("{}", made.text);
                loopbox::errln!(
                    "token `{name}` of tenant `{tenant}` ({role}): shown once, only its hash is kept; send it as `Authorization: Bearer TOKEN`, or sign in to the dashboard with it"
                );
            }
        }
        TokenCommand::List { tenant } => {
            if let Some(t) = &tenant {
                setup.tenants.named(t).map_err(Failure::usage)?;
            }
            let list = store.tokens(tenant.as_deref()).map_err(Failure::internal)?;
            if args.json {
                let list: Vec<_> = list
                    .iter()
                    .map(loopbox::serve::api::admin::token_view)
                    .collect();
                loopbox::outln!("{}", json!({"tokens": list}));
            } else if list.is_empty() {
                loopbox::outln!(
                    "no tokens; make one with `loopbox serve token create --tenant T --role R --name N`"
                );
            } else {
                for t in list {
                    loopbox::outln!(
                        "{:<12} {:<20} {:<9} made {} UTC by {}{}",
                        one_line(&t.tenant),
                        one_line(&t.name),
                        t.role,
                        utc(t.created_at_ms),
                        one_line(&t.created_by),
                        t.revoked_at_ms
                            .map(|at| format!("; REVOKED {} UTC", utc(at)))
                            .unwrap_or_default()
                    );
                }
            }
        }
        TokenCommand::Revoke { tenant, name } => {
            setup.tenants.named(&tenant).map_err(Failure::usage)?;
            store
                .revoke_token(&tenant, &name, &actor)
                .map_err(Failure::internal)?
                .map_err(|r| Failure::usage(anyhow::anyhow!("{r}")))?;
            if args.json {
                loopbox::outln!("{}", json!({"revoked": name, "tenant": tenant}));
            } else {
                loopbox::outln!("revoked token `{name}` of tenant `{tenant}`");
            }
        }
    }
    Ok(exit::OK)
}
