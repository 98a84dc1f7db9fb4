//! Admission: whether the component of an installed policy (`[policies.NAME]`)
//! may load. Checked on the bytes before they are compiled, on every run and
//! resume: the pinned digests (the entry's `digest`, and for a registry policy
//! its `loopbox.lock` entry) and the signature against `[trust.keys]`.
//!
//! The two sections it judges by live here: `[policies.NAME]` ([`PolicyEntry`])
//! and `[trust]` ([`TrustConfig`]), each with its own checks.

use anyhow::{Context, Result, bail};

use super::lock::Locked;
use super::sign::{self, Signature};
use crate::caps::workspace::WorkspaceConfig;
use crate::exec::config::{AgentConfig, ShellConfig};

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

/// `[trust]`: the keys whose signature lets an installed policy run.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrustConfig {
    /// `NAME = "ed25519:..."`: a signer you trust, by a name of your choosing.
    #[serde(default)]
    pub keys: std::collections::BTreeMap<String, String>,
}

impl TrustConfig {
    /// The name `[trust.keys]` gives this public key, if it lists it.
    pub fn name_of(&self, key: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(_, k)| k.as_str() == key)
            .map(|(n, _)| n.as_str())
    }

    /// Every key parses as a public key.
    pub fn validate(&self) -> Result<()> {
        for (name, key) in &self.keys {
            sign::parse_public(key).with_context(|| format!("trust.keys.{name}"))?;
        }
        Ok(())
    }
}

/// `[policies.NAME]`: one policy and the grants it alone runs under. `loopbox run
/// NAME` runs it with these `shell` and `agent` sections instead of the top-level
/// ones (which stay the grants of policies named by path); everything absent
/// grants nothing. `limits`, `run` and `engine` are shared, and the top level's
/// safety settings bind it too (see [`crate::config::Config::scoped`]).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// Where the component is: a path (relative to the workspace), `builtin:NAME`,
    /// or a registry reference `oci://REGISTRY/REPOSITORY:TAG` (pinned in `loopbox.lock`).
    pub source: String,
    /// `blake3:HEX` (as `loopbox inspect` prints it): the component must be exactly this.
    #[serde(default)]
    pub digest: Option<String>,
    /// Run it though it is unsigned, or signed by a key `[trust.keys]` does not list.
    /// A signature that does not verify is refused all the same.
    #[serde(default)]
    pub unsigned: bool,
    #[serde(default)]
    pub shell: ShellConfig,
    #[serde(default)]
    pub agent: Option<AgentConfig>,
    /// What it may read of the workspace: nothing unless this section says.
    #[serde(default = "WorkspaceConfig::nothing")]
    pub workspace: WorkspaceConfig,
    /// `[policies.NAME.confirm]`: its own answer to ask-tier actions with nobody
    /// at a terminal; the top level's `[confirm]` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm: Option<crate::exec::confirm::ConfirmConfig>,
    /// `[policies.NAME.run]`: `max_cost_usd` and `max_tokens` for this policy's
    /// runs, within the top level's `[run]` ones (the smaller of each stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::spend::budget::SpendBudget>,
    /// `[policies.NAME.network]`: where its commands and agent may connect
    /// (nowhere when absent); the top level's `network.deny` applies too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::exec::egress::NetworkConfig>,
    /// The keys its `shell` section sets (`sandbox`, `rlimits.cpu_seconds`, ...),
    /// so a key it leaves out takes the top level's value, not the default.
    /// Filled in by [`crate::config::Config::parse`]; not read from the file.
    #[serde(skip)]
    pub shell_keys: std::collections::BTreeSet<String>,
}

impl PolicyEntry {
    /// What serde cannot check of `[policies.NAME]` itself (its grants are
    /// checked by [`crate::config::Config`] once scoped).
    pub fn validate(&self, name: &str) -> Result<()> {
        let entry = self;
        if let Some(d) = &entry.digest {
            let hex = d.strip_prefix("blake3:").unwrap_or("");
            if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                bail!(
                    "policies.{name}.digest: `{d}` is not a digest; copy it from `loopbox inspect {}` (blake3: and 64 hex digits)",
                    entry.source
                );
            }
        }
        if entry.source.trim().is_empty() {
            bail!(
                "policies.{name}.source: give a path to a .wasm component, builtin:NAME or oci://REGISTRY/REPOSITORY:TAG"
            );
        }
        if entry.source.starts_with(super::reference::SCHEME) {
            super::reference::Reference::parse(&entry.source)
                .with_context(|| format!("policies.{name}.source"))?;
        }
        Ok(())
    }
}
