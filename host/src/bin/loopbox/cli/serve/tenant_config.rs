//! `loopbox serve tenant-config --tenant T [--set FILE]`: a tenant's
//! loopbox.toml, which the server obeys for every run of the tenant. Setting
//! it is an audited act (the digest of the new text, and the old one's); the
//! file is checked as a run would read it first.

use std::path::PathBuf;

use clap::Args;

use super::super::{Failure, exit};
use loopbox::serve::Setup;

#[derive(Debug, Args)]
pub struct TenantConfigArgs {
    #[arg(long)]
    tenant: String,
    /// Set it to this file's contents (without: print it)
    #[arg(long, value_name = "FILE")]
    set: Option<PathBuf>,
}

pub fn execute(args: TenantConfigArgs, setup: &Setup) -> Result<i32, Failure> {
    let tenant = setup.tenants.named(&args.tenant).map_err(Failure::usage)?;
    let store = setup.store().map_err(Failure::internal)?;
    match args.set {
        Some(file) => {
            let text = loopbox::files::read_text(&file, loopbox::files::MAX_CONFIG_BYTES, "config")
                .map_err(Failure::usage)?;
            loopbox::serve::api::admin::check_tenant_config(tenant, &text)
                .map_err(Failure::usage)?;
            let digest = store
                .set_tenant_config(&args.tenant, &text, &loopbox::db::local_actor())
                .map_err(Failure::internal)?;
            loopbox::outln!(
                "tenant `{}` now runs under {} (blake3 {digest}); runs already started keep the grants they started with",
                args.tenant,
                file.display()
            );
        }
        None => match store
            .tenant_config(&args.tenant)
            .map_err(Failure::internal)?
        {
            Some((text, _)) => loopbox::outln!("{}", text.trim_end_matches('\n')),
            None => loopbox::errln!(
                "tenant `{}` has no config yet: it is granted nothing; set one with --set FILE",
                args.tenant
            ),
        },
    }
    Ok(exit::OK)
}
