//! Which config files the user has approved: loopbox obeys a `loopbox.toml` (or a
//! `--config` file) only once the user has said yes to exactly its bytes, as direnv
//! and mise do.
//!
//! A config grants commands, scripts, the sandbox mode and the agent; whoever can
//! write the file decides what runs. A freshly cloned repository, or a file a
//! sandboxed command planted in a subdirectory, is such a file. So each approval is
//! recorded outside every workspace, in `$XDG_DATA_HOME/loopbox/trusted/`
//! (`~/.local/share/loopbox/trusted/` by default), one file per config named by the
//! blake3 of the config's canonical path and holding the blake3 of its content. A
//! changed file, or the same bytes at another path, is not trusted until approved
//! again (`loopbox trust PATH`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// Where approvals are kept: one JSON file per config path.
#[derive(Debug, Clone)]
pub struct TrustStore {
    dir: PathBuf,
}

/// One approval: the config's canonical path and the blake3 of the bytes approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub path: PathBuf,
    pub blake3: String,
    /// When it was approved, in milliseconds since the epoch.
    pub at_ms: i64,
}

/// Where a config stands with the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// These exact bytes at this path were approved.
    Trusted,
    /// Never approved at this path.
    New,
    /// Approved once, with other content.
    Changed,
}

/// A config that is not obeyed until the user approves it: its message names the command that does.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "`{}` is not trusted yet (new, or changed since you trusted it): review it, then run `loopbox trust {}`",
    path.display(),
    crate::exec::grants::shell_quote(&path.to_string_lossy())
)]
pub struct NotTrusted {
    /// The config's canonical path.
    pub path: PathBuf,
    pub standing: Standing,
}

/// The blake3 of a config's bytes, as approvals record it.
pub fn digest(bytes: &[u8]) -> String {
    crate::config::digest(bytes)
}

impl TrustStore {
    /// The user's store: `$XDG_DATA_HOME/loopbox/trusted`, else `$HOME/.local/share/loopbox/trusted`.
    pub fn for_user() -> Result<TrustStore> {
        TrustStore::from_env(|v| std::env::var_os(v))
    }

    /// As [`TrustStore::for_user`], with the environment read through `env` (for tests).
    pub fn from_env(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<TrustStore> {
        let absolute = |v: &str| env(v).map(PathBuf::from).filter(|p| p.is_absolute());
        let data = match absolute("XDG_DATA_HOME") {
            Some(d) => d,
            None => absolute("HOME")
                .map(|h| h.join(".local/share"))
                .ok_or_else(|| anyhow!("neither XDG_DATA_HOME nor HOME is set to an absolute path, so loopbox has nowhere to record which configs you trust; set one of them"))?,
        };
        Ok(TrustStore::at(data.join("loopbox/trusted")))
    }

    /// A store in `dir`.
    pub fn at(dir: PathBuf) -> TrustStore {
        TrustStore { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn record_path(&self, canonical: &Path) -> PathBuf {
        let key = blake3::hash(canonical.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{}.json", &key.to_hex()[..32]))
    }

    /// The approval recorded for the config at `canonical`, if any.
    pub fn approval(&self, canonical: &Path) -> Result<Option<Approval>> {
        let file = self.record_path(canonical);
        let bytes = match crate::files::read_capped(&file, 64 << 10) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                return Err(anyhow!(
                    "the trust record `{}` cannot be read: {e}",
                    file.display()
                ));
            }
        };
        let approval: Approval = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "the trust record `{}` is damaged; remove it and trust the config again",
                file.display()
            )
        })?;
        // A record is named by a hash of its path: one for another path is never taken for this one.
        Ok((approval.path == canonical).then_some(approval))
    }

    /// Where the config at `path` (any spelling) with content `blake3` stands.
    pub fn standing(&self, path: &Path, blake3: &str) -> Result<Standing> {
        let canonical = canonical(path)?;
        Ok(match self.approval(&canonical)? {
            None => Standing::New,
            Some(a) if a.blake3 == blake3 => Standing::Trusted,
            Some(_) => Standing::Changed,
        })
    }

    /// Ok when the config at `path` with content `blake3` is approved; else [`NotTrusted`].
    pub fn require(&self, path: &Path, blake3: &str) -> Result<()> {
        let config = canonical(path)?;
        if let Some(workspace) = config.parent()
            && self.lies_under(workspace)
        {
            return Err(anyhow!(
                "the trust store `{}` lies inside `{}`, beside the config, where the loop's sandboxed \
                 commands can write, so no approval kept there can be believed; set XDG_DATA_HOME to a \
                 directory outside it, then run `loopbox trust {}`",
                self.dir.display(),
                workspace.display(),
                crate::exec::grants::shell_quote(&config.to_string_lossy())
            ));
        }
        match self.standing(path, blake3)? {
            Standing::Trusted => Ok(()),
            standing => Err(NotTrusted {
                path: canonical(path)?,
                standing,
            }
            .into()),
        }
    }

    /// Whether the store is (or would be created) at or under `dir`: its nearest
    /// existing ancestor resolved, the rest appended.
    fn lies_under(&self, dir: &Path) -> bool {
        let mut existing = self.dir.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return false,
            }
        }
        let Ok(mut full) = existing.canonicalize() else {
            return false;
        };
        full.extend(rest.iter().rev());
        full.starts_with(dir)
    }

    /// Ok when `found` has no file (the defaults need no approval) or the user
    /// trusts exactly the bytes parsed at that path; else a [`NotTrusted`] error.
    pub fn require_discovered(&self, found: &crate::config::Discovered) -> Result<()> {
        match (&found.path, &found.blake3) {
            (Some(path), Some(hash)) => self.require(path, hash),
            _ => Ok(()),
        }
    }

    /// Record that the user approves the config at `path` with content `blake3`.
    pub fn approve(&self, path: &Path, blake3: &str) -> Result<Approval> {
        let approval = Approval {
            path: canonical(path)?,
            blake3: blake3.to_string(),
            at_ms: crate::db::now_ms(),
        };
        crate::files::create_private_dir(&self.dir).with_context(|| {
            format!(
                "cannot create `{}` to record the approval",
                self.dir.display()
            )
        })?;
        let text = serde_json::to_vec_pretty(&approval)?;
        crate::files::write_atomically(&self.record_path(&approval.path), &text)?;
        Ok(approval)
    }

    /// Forget the approval of the config at `path`; whether there was one.
    pub fn revoke(&self, path: &Path) -> Result<bool> {
        // A config that is gone is revoked by the path it had.
        let canonical = canonical(path).or_else(|_| absolute(path))?;
        if self.approval(&canonical)?.is_none() {
            return Ok(false);
        }
        let file = self.record_path(&canonical);
        std::fs::remove_file(&file)
            .with_context(|| format!("cannot remove `{}`", file.display()))?;
        Ok(true)
    }

    /// Every approval, by path.
    pub fn list(&self) -> Result<Vec<Approval>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(anyhow!("cannot list `{}`: {e}", self.dir.display())),
        };
        let mut all = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                let bytes = crate::files::read_capped(&path, 64 << 10)
                    .map_err(|e| anyhow!("cannot read `{}`: {e}", path.display()))?;
                if let Ok(a) = serde_json::from_slice::<Approval>(&bytes) {
                    all.push(a);
                }
            }
        }
        all.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(all)
    }
}

/// The path approvals are keyed by: its directory with symbolic links and `..`
/// resolved, and the file's own name.
///
/// The file's own name is kept, not followed: a `loopbox.toml` that is a symbolic
/// link (a cloned repository's link to a config the user trusts elsewhere) is a
/// config of its own, approved or not where it lies.
pub fn canonical(path: &Path) -> Result<PathBuf> {
    let missing = || anyhow!("config `{}` cannot be found", path.display());
    std::fs::symlink_metadata(path).map_err(|_| missing())?;
    let absolute = absolute(path)?;
    let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(missing());
    };
    let parent = parent
        .canonicalize()
        .with_context(|| format!("config `{}` cannot be found", path.display()))?;
    Ok(parent.join(name))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    Ok(std::path::absolute(path)?)
}

/// What a config grants, one line per part, for the user to review before trusting it.
pub fn grants(config: &Config) -> Vec<String> {
    let rules = |r: &[Vec<String>]| {
        if r.is_empty() {
            "none".to_string()
        } else {
            r.iter()
                .map(|r| {
                    r.iter()
                        .map(|a| crate::exec::grants::shell_quote(a))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    let shell = |s: &crate::exec::config::ShellConfig, prefix: &str| {
        let mut lines = vec![format!(
            "{prefix}exec [{}], ask [{}], deny [{}], scripts {}, network {}, sandbox {}",
            rules(&s.allow),
            rules(&s.ask),
            rules(&s.deny),
            if s.scripts { "ALLOWED" } else { "no" },
            if s.network { "ALLOWED" } else { "no" },
            if s.sandbox == crate::exec::sandbox::SandboxChoice::None {
                "NONE (commands run with your rights)"
            } else {
                s.sandbox.name()
            }
        )];
        if !s.writable.is_empty() {
            lines.push(format!("{prefix}writable [{}]", s.writable.join(", ")));
        }
        if !s.pass_env.is_empty() || !s.pass_env_from_policy.is_empty() {
            lines.push(format!(
                "{prefix}environment passed [{}], from the policy [{}]",
                s.pass_env.join(", "),
                s.pass_env_from_policy.join(", ")
            ));
        }
        if !s.reveal.is_empty() {
            lines.push(format!(
                "{prefix}hidden paths revealed [{}]",
                s.reveal.join(", ")
            ));
        }
        lines
    };
    let agent = |a: &Option<crate::exec::config::AgentConfig>| {
        a.as_ref().map_or("agent none".to_string(), |a| {
            if a.program().is_none() {
                return format!("agent {}", a.describe());
            }
            let argv: Vec<String> = a
                .command
                .iter()
                .map(|t| crate::exec::grants::shell_quote(t))
                .collect();
            format!("agent `{}`", argv.join(" "))
        })
    };
    let network = |n: &crate::exec::egress::NetworkConfig, prefix: &str| {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        format!(
            "{prefix}network allow [{}], ask [{}], deny [{}]{}",
            list(&n.allow),
            list(&n.ask),
            list(&n.deny),
            if n.agent_preset {
                ""
            } else {
                ", the agent's preset hosts off"
            }
        )
    };
    let mut lines = shell(&config.shell, "");
    lines.push(network(&config.network, ""));
    lines.push(agent(&config.agent));
    // The agents' provider hosts are network grants too.
    let presets: Vec<String> = config
        .agent
        .iter()
        .chain(config.profiles.values())
        .flat_map(|a| a.preset_hosts())
        .collect();
    if config.network.agent_preset && !presets.is_empty() {
        lines.push(format!("agent network preset [{}]", presets.join(", ")));
    }
    // Each profile a prompt may name, with the argv it runs.
    for (name, profile) in &config.profiles {
        lines.push(format!("[agents.{name}] {}", agent(&Some(profile.clone()))));
    }
    if let Some(dir) = &config.engine.cache_dir {
        lines.push(format!("component cache {}", dir.display()));
    }
    for (name, p) in &config.policies {
        lines.push(format!("[policies.{name}] source {}", p.source));
        lines.extend(shell(&p.shell, &format!("[policies.{name}] ")));
        if let Some(n) = &p.network {
            lines.push(network(n, &format!("[policies.{name}] ")));
        }
        lines.push(format!("[policies.{name}] {}", agent(&p.agent)));
    }
    if !config.trust.keys.is_empty() {
        lines.push(format!(
            "signing keys trusted [{}]",
            config
                .trust
                .keys
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Each part on one line of its own: a newline in a rule or a name must not
    // print as a line of the review (`sandbox: bwrap (enforced)`).
    lines.into_iter().map(|l| crate::ui::one_line(&l)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_holds_for_exactly_the_bytes_and_path_approved() {
        let data = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let store = TrustStore::at(data.path().join("trusted"));
        let config = ws.path().join("loopbox.toml");
        std::fs::write(&config, "[shell]\n").unwrap();
        let d = digest(b"[shell]\n");
        assert_eq!(store.standing(&config, &d).unwrap(), Standing::New);
        let e = store.require(&config, &d).unwrap_err();
        assert!(e.downcast_ref::<NotTrusted>().is_some(), "{e}");
        assert!(e.to_string().contains("run `loopbox trust "), "{e}");
        store.approve(&config, &d).unwrap();
        assert_eq!(store.standing(&config, &d).unwrap(), Standing::Trusted);
        // Another spelling of the same path is the same config.
        let spelled = ws.path().join(".").join("loopbox.toml");
        assert_eq!(store.standing(&spelled, &d).unwrap(), Standing::Trusted);
        assert_eq!(
            store.standing(&config, &digest(b"x")).unwrap(),
            Standing::Changed
        );
        // The same bytes elsewhere are not approved.
        let other = ws.path().join("other.toml");
        std::fs::write(&other, "[shell]\n").unwrap();
        assert_eq!(store.standing(&other, &d).unwrap(), Standing::New);
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.revoke(&config).unwrap());
        assert!(!store.revoke(&config).unwrap());
        assert_eq!(store.standing(&config, &d).unwrap(), Standing::New);
    }

    #[test]
    fn a_store_inside_the_workspace_is_never_believed() {
        // loopbox run in the home directory: the default store is in the workspace,
        // where a sandboxed command could write an approval for a planted config.
        let ws = tempfile::tempdir().unwrap();
        let config = ws.path().join("loopbox.toml");
        std::fs::write(&config, "[shell]\n").unwrap();
        let d = digest(b"[shell]\n");
        for store in [
            TrustStore::at(ws.path().join(".local/share/loopbox/trusted")),
            TrustStore::at(ws.path().join("a/../.local/share/loopbox/trusted")),
        ] {
            store.approve(&config, &d).unwrap();
            let e = store.require(&config, &d).unwrap_err().to_string();
            assert!(
                e.contains("lies inside") && e.contains("XDG_DATA_HOME"),
                "{e}"
            );
        }
        // Beside the workspace, not in it, is fine.
        let data = tempfile::tempdir().unwrap();
        let store = TrustStore::at(data.path().join("trusted"));
        store.approve(&config, &d).unwrap();
        store.require(&config, &d).unwrap();
    }

    #[test]
    fn a_config_linked_to_a_trusted_one_is_a_config_of_its_own() {
        // A cloned repository's `loopbox.toml -> ../proj/loopbox.toml` must not ride
        // on the approval of the file it points at (its relative paths are the clone's).
        let data = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let store = TrustStore::at(data.path().join("trusted"));
        std::fs::create_dir_all(root.path().join("proj")).unwrap();
        std::fs::create_dir_all(root.path().join("clone")).unwrap();
        let trusted = root.path().join("proj/loopbox.toml");
        std::fs::write(&trusted, "[shell]\nsandbox = \"none\"\n").unwrap();
        let d = digest(&std::fs::read(&trusted).unwrap());
        store.approve(&trusted, &d).unwrap();
        let link = root.path().join("clone/loopbox.toml");
        std::os::unix::fs::symlink("../proj/loopbox.toml", &link).unwrap();
        assert_eq!(store.standing(&link, &d).unwrap(), Standing::New);
        assert!(store.require(&link, &d).is_err());
        // A linked directory above the file is the same place, spelled otherwise.
        std::os::unix::fs::symlink(root.path().join("proj"), root.path().join("alias")).unwrap();
        let spelled = root.path().join("alias/loopbox.toml");
        assert_eq!(store.standing(&spelled, &d).unwrap(), Standing::Trusted);
    }

    #[test]
    fn the_review_shows_each_part_on_a_line_of_its_own() {
        let text = "[shell]\nallow = [[\"cat\\nsandbox: bwrap (enforced)\", \"a b\"], [\"git status\"], [\"git\", \"status\"]]\n";
        let config = Config::parse(text, Path::new("loopbox.toml")).unwrap();
        let lines = grants(&config);
        assert!(lines.iter().all(|l| !l.contains('\n')), "{lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("sandbox")), "{lines:?}");
        // Rules are quoted word by word: one word with a space is not two words.
        assert!(lines[0].contains("'git status'; git status"), "{lines:?}");
        assert!(
            lines[0].contains("'cat\\nsandbox: bwrap (enforced)' 'a b'"),
            "{lines:?}"
        );
    }

    /// `allow = ["*"]` was summarised as "network no" (only `shell.network` was shown).
    #[test]
    fn the_review_shows_every_network_grant() {
        let text = "[network]\nallow = [\"*\", \"10.0.0.0/8\"]\ndeny = [\"evil.example\"]\n\n[agent]\nrunner = \"claude\"\n\n[policies.p]\nsource = \"p.wasm\"\n[policies.p.network]\nallow = [\"api.example:443\"]\n";
        let config = Config::parse(text, Path::new("loopbox.toml")).unwrap();
        let lines = grants(&config);
        for want in [
            "network allow [*, 10.0.0.0/8], ask [none], deny [evil.example]",
            "agent network preset [api.anthropic.com:443",
            "[policies.p] network allow [api.example:443]",
        ] {
            assert!(lines.iter().any(|l| l.contains(want)), "{want}: {lines:#?}");
        }
    }

    #[test]
    fn the_store_lives_in_the_users_data_directory() {
        let s = TrustStore::from_env(|v| (v == "HOME").then(|| "/home/u".into())).unwrap();
        assert_eq!(s.dir(), Path::new("/home/u/.local/share/loopbox/trusted"));
        let s = TrustStore::from_env(|v| match v {
            "XDG_DATA_HOME" => Some("/d".into()),
            _ => Some("/home/u".into()),
        })
        .unwrap();
        assert_eq!(s.dir(), Path::new("/d/loopbox/trusted"));
        assert!(TrustStore::from_env(|_| Some("relative".into())).is_err());
    }
}
