//! A tenant as its runs see it: the [`Tenancy`] behind
//! [`Trust::TenantConfig`](crate::run::trust::Trust::TenantConfig), the source
//! of trust of every run a server or a worker starts or resumes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Server;
use super::tenant::Tenant;
use crate::config::Config;
use crate::exec::child_env::HostEnv;
use crate::run::RunExtras;
use crate::run::trust::Tenancy;

/// `tenant` of `server`.
pub struct Served<'a> {
    pub server: &'a Server,
    pub tenant: &'a Tenant,
}

impl Tenancy for Served<'_> {
    /// Written from the store, where only an admin's `PUT /api/v1/config` puts it.
    fn config_file(&self) -> anyhow::Result<PathBuf> {
        self.server.config_file(&self.tenant.name)
    }

    fn not_installed(&self, name: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "tenant `{}` has no policy `{name}` installed: an admin of the tenant adds it as [policies.{name}] to the tenant's loopbox.toml (PUT /api/v1/config)",
            self.tenant.name
        )
    }

    fn check(&self, config: &Config, policy: Option<&Path>) -> anyhow::Result<()> {
        self.tenant.check_config(config)?;
        policy.map_or(Ok(()), |p| self.tenant.check_source(p))
    }

    fn extras(&self) -> RunExtras {
        let (server, tenant) = (self.server, self.tenant);
        RunExtras {
            host_env: HostEnv::Given(Arc::new(tenant.env.clone())),
            hidden: tenant.hidden.clone(),
            home: Some(tenant.home.clone()),
            guard: Some(crate::exec::egress::guard::Guard::for_tenant(
                server.guarded.clone(),
                &tenant.network,
            )),
            quota: server
                .quotas
                .get(&tenant.name)
                .map(|q| q.clone() as Arc<dyn crate::limits::quota::Quota>),
        }
    }
}
