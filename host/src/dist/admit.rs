//! Admission: whether the component of an installed policy (`[policies.NAME]`)
//! may load. Checked on the bytes before they are compiled, on every run and
//! resume: the pinned digests (the entry's `digest`, and for a registry policy
//! its `loopbox.lock` entry) and the signature against `[trust.keys]`.

use anyhow::{Context, Result, bail};

use super::lock::Locked;
use super::sign::{self, Signature};
use crate::config::{PolicyEntry, TrustConfig};

/// Why a component was let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// Part of loopbox itself.
    Builtin,
    /// Signed by the `[trust.keys]` entry of this name.
    Trusted { name: String, key: String },
    /// Unsigned, or signed by a key not in `[trust.keys]`, and the entry has `unsigned = true`.
    Unsigned { signer: Option<String> },
}

impl Admitted {
    pub fn describe(&self) -> String {
        match self {
            Admitted::Builtin => "builtin (part of loopbox)".into(),
            Admitted::Trusted { name, key } => format!("signed by `{name}` ({key})"),
            Admitted::Unsigned { signer: None } => "unsigned (accepted: unsigned = true)".into(),
            Admitted::Unsigned { signer: Some(k) } => {
                format!(
                    "signed by {k}, a key [trust.keys] does not list (accepted: unsigned = true)"
                )
            }
        }
    }
}

/// `blake3:HEX` of a component, as `loopbox inspect` prints it.
pub fn digest(bytes: &[u8]) -> String {
    format!("blake3:{}", blake3::hash(bytes).to_hex())
}

pub fn admit(
    name: &str,
    entry: &PolicyEntry,
    locked: Option<&Locked>,
    trust: &TrustConfig,
    bytes: &[u8],
) -> Result<Admitted> {
    let have = digest(bytes);
    if let Some(want) = &entry.digest
        && *want != have
    {
        bail!(
            "policy `{name}` is not the component [policies.{name}] pins: its digest is {have}, the config says {want}; \
             the file changed since you pinned it. Inspect it (`loopbox inspect {name}`), then update `digest` if you trust it"
        );
    }
    if let Some(l) = locked
        && l.digest != have
    {
        bail!(
            "policy `{name}` is not the component loopbox.lock pins: its digest is {have}, the lock says {}; \
             the stored copy was changed. `loopbox pull` fetches the pinned one again",
            l.digest
        );
    }
    if entry.source.starts_with("builtin:") {
        return Ok(Admitted::Builtin);
    }
    let signature = sign::verify(bytes).with_context(|| format!("policy `{name}` is refused"))?;
    judge(signature, trust, entry.unsigned).map_err(|refused| match refused {
        Refused::Untrusted(key) => anyhow::anyhow!(
            "policy `{name}` is signed by {key}, a key [trust.keys] does not list: if you trust its author, \
             add `AUTHOR = \"{key}\"` under [trust.keys] in loopbox.toml"
        ),
        Refused::Unsigned => anyhow::anyhow!(
            "policy `{name}` is unsigned, and [policies.{name}] does not accept unsigned components: \
             ask its author for a signed build, or add `unsigned = true` to [policies.{name}] if you trust it as it is"
        ),
    })
}

/// Why a sound signature (or none) does not let a component in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Signed by this key, which `[trust.keys]` does not list.
    Untrusted(String),
    Unsigned,
}

/// The trust rule, in one place for runs, `add` and `inspect`: a component signed
/// by a key `[trust.keys]` lists is trusted; anything else only when unsigned
/// components are accepted (`accept_unsigned`).
pub fn judge(
    signature: Signature,
    trust: &TrustConfig,
    accept_unsigned: bool,
) -> std::result::Result<Admitted, Refused> {
    match signature {
        Signature::SignedBy(key) => match trust.name_of(&key) {
            Some(n) => Ok(Admitted::Trusted {
                name: n.to_string(),
                key,
            }),
            None if accept_unsigned => Ok(Admitted::Unsigned { signer: Some(key) }),
            None => Err(Refused::Untrusted(key)),
        },
        Signature::Unsigned if accept_unsigned => Ok(Admitted::Unsigned { signer: None }),
        Signature::Unsigned => Err(Refused::Unsigned),
    }
}
