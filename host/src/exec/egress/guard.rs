//! What a shared server sets for a tenant's egress and the tenant's own
//! config cannot change: the addresses no run reaches (the server's own and
//! the store's), the private destinations its operator opens to that tenant
//! (`[tenants.NAME.network] private`, a local model server say), and the
//! ceilings on what the tenant's `[network]` may set for itself.
//!
//! Without a guard (the CLI, a hook) the user's own rules are the last word:
//! a rule naming a private address reaches it. With one, a private address is
//! reached only when the operator opened it *and* the tenant's rules name it.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::addr;
use super::rules::{Dest, Fence, NetworkConfig};

/// `[tenants.NAME.network]` in the server config: the operator's word.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantNetwork {
    /// Private addresses (with a port, or a range) the tenant's rules may
    /// name and so reach: an address or CIDR range, never a name or `*`.
    #[serde(default)]
    pub private: Vec<String>,
    /// The most connections each of the tenant's runs may hold open at once,
    /// whatever its own `network.max_connections` says.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// The most bytes each of its runs may move through the proxy.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

impl TenantNetwork {
    /// Refuse what would not mean what it says; `key` names the table.
    pub fn check(&self, key: &str) -> Result<(), String> {
        for (i, p) in self.private.iter().enumerate() {
            let d = Dest::parse(p).map_err(|e| format!("{key}.private[{i}] `{p}`: {e}"))?;
            if !d.is_address() {
                return Err(format!(
                    "{key}.private[{i}] `{p}` is not an address: name the private address or range (with its port) the tenant may reach, as `10.0.0.5:8000` or `10.1.0.0/16`"
                ));
            }
        }
        if self.max_connections == Some(0) {
            return Err(format!(
                "{key}.max_connections = 0 would refuse every connection: give at least 1, or remove the tenant's network grants"
            ));
        }
        Ok(())
    }
}

/// A run's guard on a server.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// The server's listen addresses and the store's: never reached.
    pub own: Vec<IpAddr>,
    /// The private destinations the operator opened to this tenant.
    private: Vec<Dest>,
    max_connections: Option<u32>,
    max_bytes: Option<u64>,
}

impl Guard {
    /// Only `own` guarded: no private address opened, no ceiling.
    pub fn own(own: Vec<IpAddr>) -> Guard {
        Guard {
            own,
            ..Guard::default()
        }
    }

    /// The guard of `tenant`'s runs (checked already by [`TenantNetwork::check`]).
    pub fn for_tenant(own: Vec<IpAddr>, tenant: &TenantNetwork) -> Guard {
        Guard {
            own,
            private: tenant
                .private
                .iter()
                .filter_map(|p| Dest::parse(p).ok())
                .collect(),
            max_connections: tenant.max_connections,
            max_bytes: tenant.max_bytes,
        }
    }

    /// The tenant's `[network]` under the operator's ceilings.
    /// Where the operator set no ceiling the default is one: a tenant's
    /// `max_connections = 100000` held 700 of the server's file descriptors
    /// from one run (the default lets a run hold 128 at most), every tenant's
    /// and the server's own API sharing that process's limit.
    pub fn cap(&self, config: &NetworkConfig) -> NetworkConfig {
        let mut c = config.clone();
        let d = NetworkConfig::default();
        c.max_connections = c
            .max_connections
            .min(self.max_connections.unwrap_or(d.max_connections));
        c.max_bytes = c.max_bytes.min(self.max_bytes.unwrap_or(d.max_bytes));
        c
    }
}

impl Fence for Guard {
    /// Whether `ip` is one of the server's own or the store's.
    /// `0.0.0.0` and `::` connect to the machine itself (Linux), and a
    /// server listening on all addresses (an unspecified address in `own`)
    /// answers on every loopback address, not only the 127.0.0.1 its
    /// interfaces list: those are its own too, and so is an IPv6 form
    /// carrying one of its IPv4 addresses (NAT64, 6to4, compatible).
    fn is_own(&self, ip: IpAddr) -> bool {
        if self.own.is_empty() {
            return false;
        }
        let all = self.own.iter().any(|a| a.is_unspecified());
        addr::forms(ip).into_iter().any(|ip| {
            ip.is_unspecified()
                || (all && ip.is_loopback())
                || self.own.iter().any(|a| addr::canonical(*a) == ip)
        })
    }

    /// Whether the operator opened the private `ip:port` to the tenant.
    fn opens(&self, ip: IpAddr, port: u16) -> bool {
        self.private.iter().any(|d| d.names_address(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_opens_exact_private_destinations_and_caps_the_tenant() {
        let t = TenantNetwork {
            private: vec!["127.0.0.1:11434".into(), "10.1.0.0/16".into()],
            max_connections: Some(8),
            max_bytes: Some(1 << 20),
        };
        t.check("tenants.t.network").unwrap();
        let g = Guard::for_tenant(vec!["127.0.0.1".parse().unwrap()], &t);
        assert!(g.opens("127.0.0.1".parse().unwrap(), 11434));
        assert!(!g.opens("127.0.0.1".parse().unwrap(), 5432));
        assert!(g.opens("10.1.2.3".parse().unwrap(), 80));
        assert!(!g.opens("10.2.0.1".parse().unwrap(), 80));
        assert!(g.is_own("::ffff:127.0.0.1".parse().unwrap()));
        let mine = NetworkConfig {
            max_connections: 1000,
            max_bytes: 1,
            ..NetworkConfig::default()
        };
        let capped = g.cap(&mine);
        assert_eq!((capped.max_connections, capped.max_bytes), (8, 1));
        // No ceiling from the operator: the defaults are the ceiling.
        let g = Guard::own(vec![]);
        let mine = NetworkConfig {
            max_connections: 100_000,
            max_bytes: u64::MAX,
            ..NetworkConfig::default()
        };
        let capped = g.cap(&mine);
        let d = NetworkConfig::default();
        assert_eq!(
            (capped.max_connections, capped.max_bytes),
            (d.max_connections, d.max_bytes)
        );
    }

    /// `0.0.0.0` and `::` reach every local listener (Linux connects them
    /// to the machine itself), and a server listening on all addresses
    /// answers on every loopback address, not only the 127.0.0.1 its
    /// interfaces list: with a range opened by the operator (`127.0.0.0/8`,
    /// `0.0.0.0/0`), a tenant reached the server through them.
    #[test]
    fn the_unspecified_and_other_loopback_addresses_are_the_servers_own() {
        let t = TenantNetwork {
            private: vec!["0.0.0.0/0".into(), "::/0".into()],
            ..TenantNetwork::default()
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Listening on 127.0.0.1: the unspecified addresses reach it.
        let g = Guard::for_tenant(vec![ip("127.0.0.1")], &t);
        for own in ["0.0.0.0", "::", "::ffff:0.0.0.0", "127.0.0.1"] {
            assert!(g.is_own(ip(own)), "{own}");
        }
        // Another loopback address is not the server's then (an operator may open it).
        assert!(!g.is_own(ip("127.0.0.2")));
        // Listening on all addresses: every loopback address reaches it.
        let g = Guard::for_tenant(vec![ip("0.0.0.0"), ip("127.0.0.1"), ip("10.0.0.5")], &t);
        for own in ["127.0.0.2", "127.1.2.3", "::1", "0.0.0.0", "10.0.0.5"] {
            assert!(g.is_own(ip(own)), "{own}");
        }
        assert!(!g.is_own(ip("10.0.0.6")));
    }

    #[test]
    fn a_name_or_a_star_is_no_private_grant() {
        for bad in ["db.internal:5432", "*", "*.corp"] {
            let t = TenantNetwork {
                private: vec![bad.into()],
                ..TenantNetwork::default()
            };
            let e = t.check("tenants.t.network").unwrap_err();
            assert!(e.contains("is not an address"), "{e}");
        }
        let t = TenantNetwork {
            max_connections: Some(0),
            ..TenantNetwork::default()
        };
        assert!(t.check("k").unwrap_err().contains("max_connections = 0"));
    }
}
