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
            out.extend(interfaces());
        } else {
            out.push(l.ip());
        }
    }
    if let Some(host) = store_url.and_then(store_host)
        && let Ok(addrs) = (host.as_str(), 5432).to_socket_addrs()
    {
        out.extend(addrs.map(|a| a.ip()));
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
}
