//! `[network]`: where a sandboxed command or the agent may connect, as lists of
//! destinations (`host`, `*.host` for its subdomains, `host:port`, an IP
//! address, a CIDR range, `*` for any public host), checked deny first, then
//! ask, then allow; what no rule matches is denied, naming the key that would
//! allow it. Names are compared in one form (lower case, no trailing dot, IDN
//! as punycode), and an address written in an odd form (`2130706433`,
//! `0177.0.0.1`) is refused rather than guessed at.
//!
//! A name or `*` never reaches a special address ([`super::addr`]): the proxy
//! checks every address a name resolves to, and only a rule naming that
//! address or its range lets it through.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::addr;

/// `[network]` as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Destinations commands and the agent may reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Destinations that need a person's yes first (per run and destination).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    /// Destinations never reached, whatever else matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Let the agent reach the hosts its runner's provider needs (see
    /// `caps::actions`'s `preset`).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub agent_preset: bool,
    /// Bytes one run may move through the proxy, both ways, all connections.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Connections one run may hold open at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// A connection with nothing moving either way this long is closed.
    #[serde(default = "default_idle_ms")]
    pub idle_timeout_ms: u64,
    /// The longest one connection may stay open.
    #[serde(default = "default_connection_ms")]
    pub connection_timeout_ms: u64,
    /// The largest request head (request line and headers) the proxy reads.
    #[serde(default = "default_header_bytes")]
    pub header_bytes: usize,
}

fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn default_max_bytes() -> u64 {
    4 << 30
}
fn default_max_connections() -> u32 {
    64
}
fn default_idle_ms() -> u64 {
    300_000
}
fn default_connection_ms() -> u64 {
    3_600_000
}
fn default_header_bytes() -> usize {
    64 << 10
}

impl Default for NetworkConfig {
    fn default() -> NetworkConfig {
        NetworkConfig {
            allow: Vec::new(),
            ask: Vec::new(),
            deny: Vec::new(),
            agent_preset: true,
            max_bytes: default_max_bytes(),
            max_connections: default_max_connections(),
            idle_timeout_ms: default_idle_ms(),
            connection_timeout_ms: default_connection_ms(),
            header_bytes: default_header_bytes(),
        }
    }
}

impl NetworkConfig {
    pub fn is_default(&self) -> bool {
        *self == NetworkConfig::default()
    }

    /// Every destination parses and every limit is usable; the error names the key.
    pub fn check(&self, section: &str) -> Result<(), String> {
        for (list, rules) in [
            ("allow", &self.allow),
            ("ask", &self.ask),
            ("deny", &self.deny),
        ] {
            for (i, r) in rules.iter().enumerate() {
                Dest::parse(r).map_err(|e| format!("`{section}.{list}[{i}]` = {r:?}: {e}"))?;
            }
        }
        for (key, zero) in [
            ("max_bytes", self.max_bytes == 0),
            ("max_connections", self.max_connections == 0),
            ("idle_timeout_ms", self.idle_timeout_ms == 0),
            ("connection_timeout_ms", self.connection_timeout_ms == 0),
            ("header_bytes", self.header_bytes < 1024),
        ] {
            if zero {
                return Err(format!(
                    "`{section}.{key}` is too small; leave it out for the default"
                ));
            }
        }
        // Each connection holds its head in memory while it is read: a head
        // of any size a config (a tenant's on a server, which no operator's
        // key caps) asked for was memory a client could make loopbox take.
        if self.header_bytes > MAX_HEADER_BYTES {
            return Err(format!(
                "`{section}.header_bytes` = {} is over {MAX_HEADER_BYTES} (1 MiB), the most a request head may take",
                self.header_bytes
            ));
        }
        Ok(())
    }
}

/// The largest `header_bytes` a config may set.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// A host as a request names it, in its one canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Host {
    /// A host as written in a request (`[::1]` with its brackets or without):
    /// lower case, trailing dot gone, IDN as punycode; an address only in its
    /// standard form.
    pub fn parse(s: &str) -> Result<Host, String> {
        let bare = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(s);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Host::Ip(addr::canonical(ip)));
        }
        if bare.contains(':') || bare != s {
            return Err(format!("`{s}` is not an IP address"));
        }
        let name = bare.strip_suffix('.').unwrap_or(bare);
        let ascii = idna::domain_to_ascii_strict(name)
            .or_else(|_| idna::domain_to_ascii(name))
            .map_err(|_| format!("`{s}` is not a valid host name"))?;
        if ascii.is_empty() || ascii.len() > 253 {
            return Err(format!("`{s}` is not a valid host name"));
        }
        for label in ascii.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(format!("`{s}` is not a valid host name"));
            }
        }
        // A resolver reads `2130706433`, `0177.0.0.1` or `0x7f.1` as an
        // address (inet_aton): no real name ends in a numeric label.
        let last = ascii.rsplit('.').next().unwrap_or_default();
        if last.bytes().all(|b| b.is_ascii_digit())
            || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(format!(
                "`{s}` is an address in a form other than the standard one; write it as a.b.c.d"
            ));
        }
        Ok(Host::Name(ascii))
    }
}

/// What one rule names.
#[derive(Debug, Clone, PartialEq)]
enum Pattern {
    /// `*`: any public host.
    Any,
    Name(String),
    /// `*.example.com`: the subdomains of `example.com`, not itself.
    Subdomains(String),
    Net(IpNet),
}

/// One destination rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Dest {
    pattern: Pattern,
    port: Option<u16>,
}

impl Dest {
    pub fn parse(s: &str) -> Result<Dest, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an empty destination".into());
        }
        // `[v6]:port`, `host:port`, `a.b.c.d:port`; a bare IPv6 address has
        // several colons and no brackets.
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, tail) = rest
                .split_once(']')
                .ok_or("an opening `[` with no closing `]`")?;
            match tail.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if tail.is_empty() => (h, None),
                None => return Err(format!("unexpected `{tail}` after `]`")),
            }
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => (h, Some(p)),
                _ => (s, None),
            }
        };
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("`{p}` is not a port (1 to 65535)"))
            })
            .transpose()?;
        let pattern = if host == "*" {
            Pattern::Any
        } else if host.contains('/') {
            let net: IpNet = host
                .parse()
                .map_err(|_| format!("`{host}` is not a CIDR range (10.0.0.0/8, fd00::/8)"))?;
            Pattern::Net(net.trunc())
        } else if let Some(domain) = host.strip_prefix("*.") {
            match Host::parse(domain)? {
                Host::Name(n) => Pattern::Subdomains(n),
                Host::Ip(_) => return Err("`*.` goes before a name, not an address".into()),
            }
        } else if host.contains('*') {
            return Err("`*` stands alone or as `*.` before a name".into());
        } else {
            match Host::parse(host)? {
                Host::Name(n) => Pattern::Name(n),
                Host::Ip(ip) => Pattern::Net(IpNet::from(ip)),
            }
        };
        Ok(Dest { pattern, port })
    }

    fn port_ok(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether this rule names the request's host (a name by name, an address by address).
    fn matches(&self, host: &Host, port: u16) -> bool {
        if !self.port_ok(port) {
            return false;
        }
        match (&self.pattern, host) {
            (Pattern::Any, _) => true,
            (Pattern::Name(n), Host::Name(h)) => n == h,
            (Pattern::Subdomains(d), Host::Name(h)) => h
                .strip_suffix(d.as_str())
                .is_some_and(|head| head.ends_with('.')),
            (Pattern::Net(net), Host::Ip(ip)) => addr::contains(net, *ip),
            _ => false,
        }
    }

    /// Whether this rule names `ip` itself (an address or range rule).
    /// Whether it is an address or range (not a name, not `*`).
    pub fn is_address(&self) -> bool {
        matches!(self.pattern, Pattern::Net(_))
    }

    pub fn names_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port_ok(port) && matches!(&self.pattern, Pattern::Net(net) if addr::contains(net, ip))
    }
}

/// What a shared server forbids or opens beyond a tenant's rules
/// (`super::guard::Guard`; a trait so the rules need not know the server).
pub trait Fence {
    /// Whether `ip` is the server's own (or its store's): never reached.
    fn is_own(&self, ip: IpAddr) -> bool;
    /// Whether the operator opened the private `ip:port` to the tenant.
    fn opens(&self, ip: IpAddr, port: u16) -> bool;
}

/// How a destination is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Allow,
    Ask,
    Deny,
}

/// A decision and the rule that made it (`network.deny[0] (*.internal)`), or
/// None when no rule matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub tier: Tier,
    pub rule: Option<String>,
}

#[derive(Clone)]
struct Rule {
    dest: Dest,
    /// `network.allow[2] (example.com)`.
    name: String,
}

/// The compiled rules for one side of a run (its commands, or its agent).
#[derive(Clone)]
pub struct Rules {
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
    /// The section the rules came from, for messages (`network`, `policies.x.network`).
    section: String,
}

impl Rules {
    /// `config`'s lists, plus `extra` allowed destinations each with its own
    /// name (`shell.network`, the agent's preset); `section` names the keys.
    pub fn new(
        config: &NetworkConfig,
        section: &str,
        extra: &[(String, String)],
    ) -> Result<Rules, String> {
        config.check(section)?;
        let list = |key: &str, rules: &[String]| -> Vec<Rule> {
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| Rule {
                    dest: Dest::parse(r).expect("checked above"),
                    name: format!("{section}.{key}[{i}] ({r})"),
                })
                .collect()
        };
        let mut allow = list("allow", &config.allow);
        for (dest, name) in extra {
            allow.push(Rule {
                dest: Dest::parse(dest).map_err(|e| format!("{name}: {e}"))?,
                name: name.clone(),
            });
        }
        Ok(Rules {
            deny: list("deny", &config.deny),
            ask: list("ask", &config.ask),
            allow,
            section: section.to_string(),
        })
    }

    /// Whether any destination at all is allowed or asked for.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty()
    }

    /// The tier of `host:port`: deny first, then ask, then allow.
    pub fn decide(&self, host: &Host, port: u16) -> Verdict {
        for (tier, rules) in [
            (Tier::Deny, &self.deny),
            (Tier::Ask, &self.ask),
            (Tier::Allow, &self.allow),
        ] {
            if let Some(r) = rules.iter().find(|r| r.dest.matches(host, port)) {
                return Verdict {
                    tier,
                    rule: Some(r.name.clone()),
                };
            }
        }
        Verdict {
            tier: Tier::Deny,
            rule: None,
        }
    }

    /// What a person would add to allow `host:port`.
    pub fn hint(&self, host: &Host, port: u16) -> String {
        format!(
            "no rule in `{s}.allow` matches {host}:{port}; to allow it add \"{host}:{port}\" to `{s}.allow` in loopbox.toml",
            s = self.section
        )
    }

    /// Whether the proxy may connect to `ip`, one of the addresses `host`
    /// resolved to: never one a deny rule names, and a special one only when
    /// an allow (or approved ask) rule names it (or its range). `guard` is given on a server:
    /// its own addresses (and its store's) are never reached, and a special
    /// one only where the operator opened it too, since the rules are a tenant's.
    pub fn check_address(
        &self,
        host: &Host,
        ip: IpAddr,
        port: u16,
        guard: Option<&dyn Fence>,
    ) -> Result<(), String> {
        // An IPv6 form carrying an IPv4 address is denied with that address.
        let forms = addr::forms(ip);
        if let Some(r) = self
            .deny
            .iter()
            .find(|r| forms.iter().any(|f| r.dest.names_address(*f, port)))
        {
            return Err(r.name.clone());
        }
        let ip = addr::canonical(ip);
        let via = match host {
            Host::Name(n) => format!("{n} resolves to {ip}, "),
            Host::Ip(_) => format!("{ip} is "),
        };
        if guard.is_some_and(|g| g.is_own(ip)) {
            return Err(format!(
                "{via}an address of loopbox's own server or store, which no run reaches"
            ));
        }
        let Some(why) = addr::special(ip) else {
            return Ok(());
        };
        if guard.is_some_and(|g| !g.opens(ip, port)) {
            return Err(format!(
                "{via}a {why} address, which a run on a shared server reaches only where its operator opened it (`tenants.NAME.network.private` in the server config; a tenant's rules alone cannot)"
            ));
        }
        // An `ask` rule naming it counts too: the person said yes to it.
        if self
            .allow
            .iter()
            .chain(&self.ask)
            .any(|r| r.dest.names_address(ip, port))
        {
            return Ok(());
        }
        Err(format!(
            "{via}a {why} address, which a name or `*` never reaches; to allow it name the address in `{}.allow`",
            self.section
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::guard::Guard;
    use super::*;

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> Rules {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        let c = NetworkConfig {
            allow: v(allow),
            ask: v(ask),
            deny: v(deny),
            ..Default::default()
        };
        Rules::new(&c, "network", &[]).unwrap()
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn names_are_compared_in_one_form() {
        assert_eq!(host("Example.COM."), Host::Name("example.com".into()));
        assert_eq!(host("bücher.de"), Host::Name("xn--bcher-kva.de".into()));
        assert_eq!(
            host("[::ffff:127.0.0.1]"),
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        for odd in ["2130706433", "0177.0.0.1", "127.1", "0x7f.0.0.1", "a.0x7f"] {
            assert!(Host::parse(odd).unwrap_err().contains("standard"), "{odd}");
        }
        for bad in ["", "a..b", "exa mple.com", "a/b", "x:y", "[x]"] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn deny_then_ask_then_allow_and_nothing_matched_is_denied() {
        let r = rules(
            &["*.example.com", "example.com:443", "*"],
            &["ask.example.com"],
            &["*.internal", "bad.example.com"],
        );
        let d = |h: &str, p| r.decide(&host(h), p);
        assert_eq!(d("api.example.com", 443).tier, Tier::Allow);
        assert_eq!(
            d("api.example.com", 443).rule.as_deref(),
            Some("network.allow[0] (*.example.com)")
        );
        assert_eq!(d("example.com", 443).tier, Tier::Allow);
        assert_eq!(
            d("example.com", 80).rule.as_deref(),
            Some("network.allow[2] (*)")
        );
        assert_eq!(d("ask.example.com", 443).tier, Tier::Ask);
        assert_eq!(
            d("bad.example.com", 443).rule.as_deref(),
            Some("network.deny[1] (bad.example.com)")
        );
        assert_eq!(d("db.internal", 5432).tier, Tier::Deny);
        let none = rules(&["*.example.com"], &[], &[]);
        let v = none.decide(&host("example.com"), 443);
        assert_eq!(
            (v.tier, v.rule),
            (Tier::Deny, None),
            "`*.` is subdomains only"
        );
        assert_eq!(none.decide(&host("evil-example.com"), 443).tier, Tier::Deny);
        assert!(
            none.hint(&host("x.org"), 80)
                .contains("add \"x.org:80\" to `network.allow`")
        );
    }

    #[test]
    fn a_name_rule_never_matches_an_address_and_an_address_rule_no_name() {
        let r = rules(&["example.com", "93.184.216.34"], &[], &[]);
        assert_eq!(r.decide(&host("93.184.216.34"), 443).tier, Tier::Allow);
        assert_eq!(r.decide(&host("1.2.3.4"), 443).tier, Tier::Deny);
        let names = rules(&["example.com"], &[], &[]);
        assert_eq!(names.decide(&host("93.184.216.34"), 443).tier, Tier::Deny);
    }

    #[test]
    fn special_addresses_need_a_rule_naming_them() {
        let star = rules(&["*", "localhost"], &[], &[]);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let meta: IpAddr = "169.254.169.254".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        for ip in [lo, meta, mapped] {
            let e = star
                .check_address(&host("localhost"), ip, 80, None)
                .unwrap_err();
            assert!(e.contains("never reaches"), "{e}");
        }
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        star.check_address(&host("example.com"), public, 443, None)
            .unwrap();
        let own = |ips: &[IpAddr]| Guard::own(ips.to_vec());
        assert!(
            star.check_address(&host("example.com"), public, 443, Some(&own(&[public])))
                .is_err()
        );
        let named = rules(&["127.0.0.1:8080", "10.0.0.0/8"], &[], &["10.9.0.0/16"]);
        named.check_address(&Host::Ip(lo), lo, 8080, None).unwrap();
        named
            .check_address(&Host::Ip(lo), mapped, 8080, None)
            .unwrap();
        assert!(named.check_address(&Host::Ip(lo), lo, 8081, None).is_err());
        named
            .check_address(&host("db.corp"), "10.1.1.1".parse().unwrap(), 5432, None)
            .unwrap();
        // On a server a tenant's rule alone opens no private address, and the
        // server's own public address is never reached.
        let e = named
            .check_address(&Host::Ip(lo), lo, 8080, Some(&own(&[])))
            .unwrap_err();
        assert!(e.contains("on a shared server"), "{e}");
        // The operator opened 127.0.0.1:8080 to the tenant: its rule reaches
        // it; a `*` still does not, nor does the operator's grant without a
        // rule, nor a store on the same address.
        let opened = super::super::guard::TenantNetwork {
            private: vec!["127.0.0.1:8080".into()],
            ..Default::default()
        };
        let g = Guard::for_tenant(vec![], &opened);
        named
            .check_address(&Host::Ip(lo), lo, 8080, Some(&g))
            .unwrap();
        assert!(
            star.check_address(&host("localhost"), lo, 8080, Some(&g))
                .is_err()
        );
        assert!(
            rules(&["example.com"], &[], &[])
                .check_address(&Host::Ip(lo), lo, 8080, Some(&g))
                .is_err()
        );
        let g = Guard::for_tenant(vec![lo], &opened);
        assert!(
            named
                .check_address(&Host::Ip(lo), lo, 8080, Some(&g))
                .is_err()
        );
        let e = star
            .check_address(&host("me.example"), public, 443, Some(&own(&[public])))
            .unwrap_err();
        assert!(e.contains("loopbox's own server or store"), "{e}");
        assert_eq!(
            named
                .check_address(&host("db.corp"), "10.9.1.1".parse().unwrap(), 5432, None)
                .unwrap_err(),
            "network.deny[0] (10.9.0.0/16)"
        );
    }

    /// An IPv6 form carrying an IPv4 address (NAT64, 6to4, compatible) is
    /// judged by that address for a deny rule and the server's own addresses
    /// too, as it is for the special ranges: on a network with a NAT64
    /// gateway `[64:ff9b::5db8:d822]` reaches 93.184.216.34.
    #[test]
    fn a_deny_or_the_servers_own_address_holds_its_ipv6_forms() {
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let star = rules(&["*"], &[], &["93.184.216.0/24"]);
        let g = Guard::own(vec![public]);
        let open = rules(&["*"], &[], &[]);
        for form in [
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "64:ff9b:1::5db8:d822",
        ] {
            let ip: IpAddr = form.parse().unwrap();
            let e = star
                .check_address(&Host::Ip(ip), ip, 443, None)
                .expect_err(form);
            assert!(e.contains("network.deny[0]"), "{form}: {e}");
            let e = open
                .check_address(&Host::Ip(ip), ip, 443, Some(&g))
                .expect_err(form);
            assert!(e.contains("loopbox's own server or store"), "{form}: {e}");
        }
    }

    /// `header_bytes` has a ceiling: a tenant's config on a server set it to
    /// 4 GiB, and each of its connections could then hold that much.
    #[test]
    fn header_bytes_has_a_ceiling() {
        let c = NetworkConfig {
            header_bytes: 4 << 30,
            ..Default::default()
        };
        let e = c.check("network").unwrap_err();
        assert!(e.contains("`network.header_bytes`"), "{e}");
        let c = NetworkConfig {
            header_bytes: MAX_HEADER_BYTES,
            ..Default::default()
        };
        c.check("network").unwrap();
    }

    #[test]
    fn bad_destinations_name_their_key() {
        let c = NetworkConfig {
            allow: vec!["example.com".into(), "*.*.x".into()],
            ..Default::default()
        };
        let e = c.check("network").unwrap_err();
        assert!(e.starts_with("`network.allow[1]`"), "{e}");
        for bad in [
            "host:0",
            "host:99999",
            "[::1",
            "10.0.0.0/33",
            "ex*ample.com",
            "*.1.2.3.4",
        ] {
            assert!(Dest::parse(bad).is_err(), "{bad}");
        }
        for good in [
            "[::1]:8080",
            "fd00::/8",
            "::1",
            "*:443",
            "a.b:1",
            "10.0.0.0/8",
        ] {
            Dest::parse(good).unwrap();
        }
    }
}
