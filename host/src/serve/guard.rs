//! The addresses a server's runs must never reach through the egress proxy
//! whatever their tenant's `[network]` says, beside the private ranges every
//! run is kept from: the server's own (every address of the machine when it
//! listens on all of them) and its store's. A tenant's rule naming one does
//! not open it; only the operator's server config could (it does not).
//!
//! The machine's interface addresses are read with `getifaddrs(3)` here: no
//! crate in the tree lists them, and the call is a dozen lines.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// The server's listen address (`listen`, and `server.listen` when set) and
/// the store's host (`store_url`), as addresses.
pub fn addresses(listen: &[SocketAddr], store_url: Option<&str>) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for l in listen {
        if l.ip().is_unspecified() {
            // Kept as well: it tells the guard every loopback address is the
            // server's (`Guard::is_own`), not only the interfaces' 127.0.0.1.
            out.push(l.ip());
            out.extend(interfaces());
        } else {
            out.push(l.ip());
        }
    }
    for host in store_url.map(store_hosts).unwrap_or_default() {
        if let Ok(addrs) = (host.as_str(), 5432).to_socket_addrs() {
            out.extend(addrs.map(|a| a.ip()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every host a PostgreSQL URL may connect to over TCP, as the store reads
/// it (tokio-postgres): each of a multi-host URL's hosts
/// (`postgres://u@h1,h2/db`), a `?host=` parameter's, a `?hostaddr=`'s
/// address (the one actually connected to); the URL's own host besides.
/// Reading only the authority's one host left a store named any other way
/// unguarded.
fn store_hosts(url: &str) -> Vec<String> {
    let mut out: Vec<String> = store_host(url).into_iter().collect();
    if let Ok(config) = crate::db::engine::postgres::config_of(url) {
        for h in config.get_hosts() {
            if let tokio_postgres::config::Host::Tcp(h) = h {
                out.push(h.clone());
            }
        }
        out.extend(config.get_hostaddrs().iter().map(|a| a.to_string()));
    }
    out.sort();
    out.dedup();
    out
}

/// The host of a PostgreSQL URL (`postgres://user:pw@host:port/db?...`), if
/// it names one over TCP (a Unix socket directory is no address).
fn store_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    (!host.is_empty() && !host.starts_with('%')).then(|| host.to_string())
}

/// Every address of this machine's interfaces.
fn interfaces() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
                libc::AF_INET => {
                    // SAFETY: an AF_INET address is a sockaddr_in.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    out.push(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()));
                }
                libc::AF_INET6 => {
                    // SAFETY: an AF_INET6 address is a sockaddr_in6.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    out.push(IpAddr::from(a.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_host_and_the_listen_address_are_guarded() {
        assert_eq!(
            store_host("postgres://u:p@db.example:5433/x?sslmode=require").as_deref(),
            Some("db.example")
        );
        assert_eq!(
            store_host("postgresql://10.0.0.5/loopbox").as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            store_host("postgres://u@[fd00::1]:5432/x").as_deref(),
            Some("fd00::1")
        );
        assert_eq!(store_host("postgres://%2Frun%2Fpostgresql/x"), None);
        let a = addresses(
            &["192.0.2.7:8080".parse().unwrap()],
            Some("postgres://u@10.0.0.5:5432/x"),
        );
        assert_eq!(
            a,
            vec![
                "10.0.0.5".parse::<IpAddr>().unwrap(),
                "192.0.2.7".parse().unwrap()
            ]
        );
        let all = addresses(&["0.0.0.0:8080".parse().unwrap()], None);
        assert!(all.contains(&"127.0.0.1".parse().unwrap()), "{all:?}");
    }

    /// A store named with several hosts, a `?host=` or a `?hostaddr=`
    /// parameter (all of which the store's client reads) is guarded too.
    #[test]
    fn a_store_named_in_any_form_its_client_reads_is_guarded() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let listen = ["192.0.2.7:8080".parse().unwrap()];
        for (url, store) in [
            ("postgres://u@10.0.0.5,10.0.0.6/x", ["10.0.0.5", "10.0.0.6"]),
            (
                "postgres://u@/x?host=10.0.0.5&host=10.0.0.6",
                ["10.0.0.5", "10.0.0.6"],
            ),
            (
                "postgres://u@10.0.0.5/x?hostaddr=10.0.0.6",
                ["10.0.0.5", "10.0.0.6"],
            ),
            (
                "postgres://u@10.0.0.5:5432,10.0.0.6:5433/x?sslmode=disable",
                ["10.0.0.5", "10.0.0.6"],
            ),
        ] {
            let a = addresses(&listen, Some(url));
            for s in store {
                assert!(a.contains(&ip(s)), "{url}: {s} not guarded in {a:?}");
            }
        }
        let all = addresses(&["0.0.0.0:8080".parse().unwrap()], None);
        assert!(all.contains(&"127.0.0.1".parse().unwrap()), "{all:?}");
        assert!(all.contains(&"0.0.0.0".parse().unwrap()), "{all:?}");
    }
}
