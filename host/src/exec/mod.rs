//! Running programs for a policy: the grant check on a command, the person
//! asked about an ask-tier one, the environment a child may see, the OS
//! sandbox around it, the proxy that is its only network ([`egress`]), the spawn itself, and the agent CLIs behind a template;
//! and [`config`], the `[shell]` and `[agent]` sections all of them read.

pub(crate) mod agent;
pub mod child_env;
pub mod config;
pub mod confirm;
pub mod egress;
pub(crate) mod fd;
pub mod grants;
pub mod process;
pub mod sandbox;
pub(crate) mod spawn;
