//! Registry references: `oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`.
//!
//! The grammar is the OCI distribution spec's, checked strictly: each part
//! ends up in a URL path, so nothing a reference holds may add a path segment,
//! a query or another host.

use anyhow::{Result, bail};

pub const SCHEME: &str = "oci://";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// `team/lister`.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:HEX`, when the reference names a manifest by digest.
    pub digest: Option<String>,
}

impl Reference {
    /// Parse `oci://...` or the same without the scheme.
    pub fn parse(text: &str) -> Result<Reference> {
        let bare = text.strip_prefix(SCHEME).unwrap_or(text);
        let hint = "a registry reference is oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST], e.g. oci://ghcr.io/acme/lister:1.0";
        let Some((registry, rest)) = bare.split_once('/') else {
            bail!("`{text}` names no registry: {hint}");
        };
        if !valid_registry(registry) {
            bail!("`{registry}` is not a registry host (host or host:port): {hint}");
        }
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => (r, Some(d.to_string())),
            None => (rest, None),
        };
        if let Some(d) = &digest
            && !is_sha256(d)
        {
            bail!("`{d}` is not a manifest digest (sha256: and 64 hex digits)");
        }
        // A tag follows the last `:` after the last `/`.
        let last = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last..].rfind(':') {
            Some(i) => (&rest[..last + i], Some(rest[last + i + 1..].to_string())),
            None => (rest, None),
        };
        if !valid_repository(repository) {
            bail!(
                "`{repository}` is not a repository name (lower-case letters and digits, separated by `.`, `_`, `-` or `/`): {hint}"
            );
        }
        if let Some(t) = &tag
            && !valid_tag(t)
        {
            bail!("`{t}` is not a tag (letters, digits, `_`, `.`, `-`; at most 128)");
        }
        let tag = if tag.is_none() && digest.is_none() {
            Some("latest".to_string())
        } else {
            tag
        };
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// What the manifest is fetched by: the digest when there is one, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// `http` for a registry on this machine (as docker and oras treat
    /// localhost), `https` everywhere else.
    pub fn scheme(&self) -> &'static str {
        let host = self
            .registry
            .rsplit_once(':')
            .map_or(self.registry.as_str(), |(h, p)| {
                if p.chars().all(|c| c.is_ascii_digit()) {
                    h
                } else {
                    &self.registry
                }
            });
        match host {
            "localhost" | "127.0.0.1" | "[::1]" => "http",
            _ => "https",
        }
    }

    /// The last path segment: a default name for `[policies.NAME]`.
    pub fn short_name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

pub fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn valid_registry(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || r.starts_with('[') => (h, Some(p)),
        _ => (r, None),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && (host == "[::1]"
            || host.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

fn valid_repository(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && r.split('/').all(|component| {
            let b = component.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
                && !component.contains("..")
        })
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let r = Reference::parse("oci://localhost:5000/acme/lister:1.0").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("localhost:5000", "acme/lister", Some("1.0"))
        );
        assert_eq!(r.to_string(), "oci://localhost:5000/acme/lister:1.0");
        assert_eq!(r.scheme(), "http");
        assert_eq!(r.short_name(), "lister");
        let d = format!("sha256:{}", "a".repeat(64));
        let p = Reference::parse(&format!("ghcr.io/acme/lister@{d}")).unwrap();
        assert_eq!(
            (p.tag.as_deref(), p.manifest_ref(), p.scheme()),
            (None, d.as_str(), "https")
        );
        assert_eq!(
            Reference::parse("ghcr.io/x").unwrap().tag.as_deref(),
            Some("latest")
        );
    }

    #[test]
    fn references_that_would_bend_a_url_are_refused() {
        for bad in [
            "lister:1.0",
            "oci://ghcr.io/../../v2/x",
            "ghcr.io/acme/Lister",
            "ghcr.io/acme/lister?x=1",
            "ghcr.io/acme/lister:1.0/../x",
            "ghcr.io/acme/lister:-x",
            "ghcr.io/acme/lister@sha256:abc",
            "evil.com#@ghcr.io/x",
            "ghcr.io:port/x",
            "user@ghcr.io/x",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad} was accepted");
        }
    }
}
