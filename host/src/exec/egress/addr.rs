//! Which addresses are special: loopback, private, CGNAT, link-local (cloud
//! metadata among them), multicast, documentation and reserved ranges, in
//! IPv4 and IPv6, with IPv6 forms that carry an IPv4 address (mapped,
//! compatible, NAT64, 6to4) judged by the address they carry. The proxy never
//! connects to one unless a rule names that address or its range exactly
//! (see [`super::rules`]).
//!
//! Kept here rather than taken from `std`'s `is_global`, which is unstable,
//! and from `ipnet`'s tables, which leave out the embedded IPv4 forms.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The IPv4 ranges never reached by a name or `*` (RFC 6890's special-purpose
/// registry, with what it calls reachable but no user means by a host name).
const V4: [(&str, &str); 16] = [
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
];

const V6: [(&str, &str); 9] = [
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("100::/64", "discard"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("fc00::/7", "unique local (ULA)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// Why `ip` is special, or None for an ordinary public address.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => special_v4(v4),
            None => V6.iter().find_map(|(net, why)| {
                let net: Ipv6Net = net.parse().expect("a valid range");
                net.contains(&v6).then_some(*why)
            }),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    V4.iter().find_map(|(net, why)| {
        let net: Ipv4Net = net.parse().expect("a valid range");
        net.contains(&ip).then_some(*why)
    })
}

/// The IPv4 address an IPv6 one stands for, where it stands for one: mapped
/// (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`, deprecated but still routed
/// by some stacks), NAT64 (`64:ff9b::/96`) and 6to4 (`2002:aabb:ccdd::/48`).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(tail);
    }
    // NAT64 (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48`) and SIIT
    // (`::ffff:0:a.b.c.d`): the address they translate to.
    if s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1) {
        return Some(tail);
    }
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// `ip` and, for an IPv6 form carrying an IPv4 address (mapped, compatible,
/// NAT64, 6to4), that address: what a deny rule or the server's own
/// addresses are checked against, since a connect to either may reach it.
pub fn forms(ip: IpAddr) -> Vec<IpAddr> {
    let mut v = vec![canonical(ip)];
    if let IpAddr::V6(v6) = ip
        && let Some(v4) = embedded_v4(v6)
        && !v.contains(&IpAddr::V4(v4))
    {
        v.push(IpAddr::V4(v4));
    }
    v
}

/// `ip` as the plain IPv4 address when it is an IPv6 form of one, so a rule
/// and a request written in different forms compare equal.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `net` holds `ip`, either written in any of its forms.
pub fn contains(net: &IpNet, ip: IpAddr) -> bool {
    let ip = canonical(ip);
    match (net, ip) {
        (IpNet::V6(n), IpAddr::V4(v4)) => n.contains(&v4.to_ipv6_mapped()),
        _ => net.contains(&ip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_loopback_link_local_and_their_ipv6_forms_are_special() {
        for (addr, why) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private (RFC 1918)"),
            ("172.31.255.255", "private (RFC 1918)"),
            ("192.168.1.1", "private (RFC 1918)"),
            ("100.100.100.200", "shared address space (CGNAT)"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("0.0.0.0", "this network"),
            ("224.0.0.1", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique local (ULA)"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a00:1::1", "private (RFC 1918)"),
            ("::ffff:0:127.0.0.1", "loopback"),
            ("64:ff9b:1::a9fe:a9fe", "link-local (cloud metadata)"),
        ] {
            assert_eq!(special(ip(addr)), Some(why), "{addr}");
        }
    }

    #[test]
    fn public_addresses_are_not_special() {
        for addr in [
            "1.1.1.1",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
        ] {
            assert_eq!(special(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn a_range_holds_an_address_in_either_form() {
        let net: IpNet = "127.0.0.0/8".parse().unwrap();
        assert!(contains(&net, ip("::ffff:127.0.0.1")));
        assert!(contains(&net, ip("127.0.0.1")));
        assert!(!contains(&net, ip("::1")));
        let net: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert!(contains(&net, ip("10.2.3.4")));
    }
}
