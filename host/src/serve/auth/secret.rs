//! Secrets the server hands out (API tokens, session cookies, CSRF tokens):
//! random, recognizable by their prefix, stored only as hashes, and compared
//! in constant time.
//!
//! A secret reads `PREFIX`, then 16 hex digits (its id, how the store finds
//! it), `_` and 43 base64url characters (256 random bits). Only the sha256 of
//! the random part is stored; presenting a secret looks its id up and compares
//! the hashes without stopping at the first differing byte.

use anyhow::{Context, Result};
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};

/// An API token: `lbx_…`.
pub const TOKEN_PREFIX: &str = "lbx_";
/// A dashboard session cookie's value: `lbs_…`.
pub const SESSION_PREFIX: &str = "lbs_";

/// A secret just made: what to hand out once, and what to store.
pub struct Minted {
    /// The whole secret, shown once.
    pub text: String,
    /// Its id, stored in the clear.
    pub id: String,
    /// The sha256 of its random part.
    pub hash: [u8; 32],
}

/// `n` random bytes from the operating system.
pub fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))
        .context("failed to make a secret")?;
    Ok(b)
}

/// 256 random bits as base64url text (a CSRF token).
pub fn random_text() -> Result<String> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random::<32>()?))
}

pub fn mint(prefix: &str) -> Result<Minted> {
    let id: String = random::<8>()?.iter().map(|b| format!("{b:02x}")).collect();
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random::<32>()?);
    Ok(Minted {
        text: format!("{prefix}{id}_{secret}"),
        hash: hash(secret.as_bytes()),
        id,
    })
}

pub fn hash(secret: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, secret);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The id and random part of a presented secret with `prefix`, if it has the shape.
pub fn parse<'a>(prefix: &str, text: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = text.strip_prefix(prefix)?;
    let (id, secret) = rest.split_once('_')?;
    let ok = id.len() == 16
        && id.bytes().all(|b| b.is_ascii_hexdigit())
        && secret.len() == 43
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then_some((id, secret))
}

/// Whether `a` and `b` are equal, looking at every byte whatever the first
/// difference (their lengths are not secret: hashes, or tokens of one shape).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether the random part `secret` hashes to `stored`.
pub fn matches(stored: &[u8], secret: &str) -> bool {
    same(stored, &hash(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_secret_parses_back_and_matches_only_its_hash() {
        let m = mint(TOKEN_PREFIX).unwrap();
        assert!(m.text.starts_with("lbx_") && m.text.len() == 4 + 16 + 1 + 43);
        let (id, secret) = parse(TOKEN_PREFIX, &m.text).unwrap();
        assert_eq!(id, m.id);
        assert!(matches(&m.hash, secret));
        let other = mint(TOKEN_PREFIX).unwrap();
        assert_ne!(other.id, m.id);
        let (_, s2) = parse(TOKEN_PREFIX, &other.text).unwrap();
        assert!(!matches(&m.hash, s2));
        // The shape is checked before anything is looked up.
        for bad in [
            "",
            "lbx_",
            &m.text[..m.text.len() - 1],
            &m.text.replace("lbx_", "lbs_"),
            &format!("{}=", m.text),
        ] {
            assert!(parse(TOKEN_PREFIX, bad).is_none(), "{bad}");
        }
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
