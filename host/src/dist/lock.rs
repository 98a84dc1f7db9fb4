//! `loopbox.lock`: what each policy installed from a registry is, pinned, and
//! who signed each policy installed from a local file (`[local.NAME]`).
//! `loopbox add` writes an entry after the user approved it, and asks again
//! when a new version is signed by another key than the entry records;
//! `loopbox pull` fetches exactly what it pins (a tag moved since changes
//! nothing); every run checks a registry component against it before compiling
//! it (a local one is pinned by its `digest` in the config).
//!
//! It sits beside the config that installs the policies, and sandboxed
//! commands can never write it (see `exec::sandbox::protect`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

pub use crate::files::LOCK_FILE;
const HEADER: &str = "# loopbox.lock: written by `loopbox add`, read by every run. Do not edit:\n# `loopbox add` again to upgrade, and review what it shows.\n\n";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    #[serde(default)]
    pub policies: BTreeMap<String, Locked>,
    /// Policies installed from a local file: who signed the approved version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub local: BTreeMap<String, LocalSigner>,
}

/// One policy installed from a local file: its signer, so that `loopbox add`
/// asks when the next version is signed by another key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSigner {
    /// The path it was added from, as given.
    pub source: String,
    /// `blake3:HEX` of the approved component.
    pub digest: String,
    /// The key that signed it (trusted, or accepted with `unsigned = true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

/// One installed registry policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    /// The reference it was added from (`oci://...:TAG`).
    pub source: String,
    /// The manifest's digest: what `loopbox pull` fetches.
    pub manifest: String,
    /// The component's sha256 (its layer digest, and its name in the store).
    pub component: String,
    /// `blake3:HEX`, as `loopbox inspect` prints it: what every run checks.
    pub digest: String,
    /// The key that signed it (trusted, or accepted with `unsigned = true`):
    /// `loopbox add` asks again when an upgrade is signed by another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

/// Where the lock of a config is: beside the config file, else in the workspace.
pub fn path_for(config_path: Option<&Path>, workspace: &Path) -> PathBuf {
    match config_path.and_then(Path::parent) {
        Some(dir) => dir.join(LOCK_FILE),
        None => workspace.join(LOCK_FILE),
    }
}

impl Lock {
    /// The lock at `path`; an empty one when there is none.
    pub fn read(path: &Path) -> Result<Lock> {
        let bytes = match crate::files::read_capped(path, crate::files::MAX_CONFIG_BYTES) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => {
                return Ok(Lock {
                    version: 1,
                    ..Lock::default()
                });
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", path.display())),
        };
        let text = String::from_utf8(bytes)
            .with_context(|| format!("`{}` is not UTF-8", path.display()))?;
        let lock: Lock = toml::from_str(&text)
            .with_context(|| format!("`{}` is not a loopbox lock file", path.display()))?;
        if lock.version != 1 {
            bail!(
                "`{}` is lock version {}; this loopbox reads version 1",
                path.display(),
                lock.version
            );
        }
        Ok(lock)
    }

    /// Write the whole lock (to a temporary file, then renamed over the old one).
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!("{HEADER}{}", toml::to_string(self).expect("serializable"));
        crate::files::write_atomically(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_round_trips_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        assert!(Lock::read(&path).unwrap().policies.is_empty());
        let mut lock = Lock {
            version: 1,
            ..Lock::default()
        };
        lock.policies.insert(
            "lister".into(),
            Locked {
                source: "oci://localhost:5000/a/lister:1".into(),
                manifest: "sha256:00".into(),
                component: "sha256:11".into(),
                digest: "blake3:22".into(),
                signed_by: None,
            },
        );
        lock.local.insert(
            "mine".into(),
            LocalSigner {
                source: "mine.wasm".into(),
                digest: "blake3:33".into(),
                signed_by: Some("ed25519:AA".into()),
            },
        );
        lock.write(&path).unwrap();
        let read = Lock::read(&path).unwrap();
        assert_eq!((read.policies, read.local), (lock.policies, lock.local));
        std::fs::write(&path, "version = 1\n[policies.x]\nsource = 3\n").unwrap();
        let e = Lock::read(&path).unwrap_err();
        assert!(format!("{e:#}").contains("loopbox.lock"), "{e:#}");
    }
}
