//! Hidden paths: secrets outside the workspace that no sandboxed child may
//! read. `/` is readable in every sandbox (programs, libraries and toolchains
//! live all over it), so without this a granted `cat` or `grep -r` would hand
//! a policy the user's SSH keys or cloud logins, which it could then put in a
//! prompt.
//!
//! - Credential stores in the home directory ([`SECRETS`]): keys, cloud and
//!   cluster logins, registry and forge tokens, password stores, browsers.
//! - For a policy's commands, also the agents' state ([`AGENT_STATE`] and the
//!   configured agent's `agent.writable`): their logins and past sessions. The
//!   agent itself keeps its own.
//! - `shell.hide` adds paths; `shell.reveal` lets one of the above through.
//!
//! bwrap mounts an empty read-only directory (or `/dev/null`) over each;
//! Landlock grants read access to everything else instead of to `/`. With
//! `sandbox = "none"` nothing is hidden.

use std::path::{Path, PathBuf};

/// Credential stores under the home directory, hidden from every child.
pub const SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d",
    ".vault-token",
    ".pgpass",
    ".my.cnf",
    ".password-store",
    ".local/share/keyrings",
    ".config/op",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
];

/// Agents' state under the home directory: logins and session transcripts.
/// Hidden from a policy's commands; the agent keeps its own (`agent.writable`).
pub const AGENT_STATE: &[&str] = &[
    ".claude",
    ".claude.json",
    ".codex",
    ".gemini",
    ".config/claude",
];

/// The paths to hide from one child, as they exist now, symbolic links resolved
/// (a mount or a Landlock rule applies to what a link points at):
/// `names` under `home`, then `extra`; minus those `reveal` names and those at
/// or under a path in `keep` (what the child must be able to use).
pub fn paths(
    home: Option<&Path>,
    names: &[&str],
    extra: &[PathBuf],
    reveal: &[PathBuf],
    keep: &[PathBuf],
) -> Vec<PathBuf> {
    let resolve = |p: &Path| p.canonicalize().ok();
    let reveal: Vec<PathBuf> = reveal.iter().filter_map(|p| resolve(p)).collect();
    let keep: Vec<PathBuf> = keep.iter().filter_map(|p| resolve(p)).collect();
    let named = home
        .into_iter()
        .flat_map(|h| names.iter().map(move |n| h.join(n)));
    let mut out: Vec<PathBuf> = named
        .chain(extra.iter().cloned())
        .filter_map(|p| resolve(&p))
        .filter(|p| p != Path::new("/"))
        .filter(|p| !reveal.contains(p) && !keep.iter().any(|k| p.starts_with(k)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What the sandbox hides from one run's children, from `[shell]` and `$HOME`.
pub struct Hidden {
    home: Option<PathBuf>,
    extra: Vec<PathBuf>,
    reveal: Vec<PathBuf>,
    root: PathBuf,
}

impl Hidden {
    /// `root` is the canonical workspace.
    pub fn new(shell: &crate::config::ShellConfig, root: &Path) -> Hidden {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        // `~/x` in the home directory, `/x` as it is, anything else in the workspace.
        let path = |p: &String| match p.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                home.as_ref().map(|h| h.join(rest.trim_start_matches('/')))
            }
            _ => Some(root.join(p)),
        };
        Hidden {
            extra: shell.hide.iter().filter_map(path).collect(),
            reveal: shell.reveal.iter().filter_map(path).collect(),
            home,
            root: root.to_path_buf(),
        }
    }

    /// The agent's own state outside the workspace: its `agent.writable`, `~/`
    /// expanded (the config checked each is absolute or starts with `~/`).
    pub fn agent_state(&self, agent: Option<&crate::config::AgentConfig>) -> Vec<PathBuf> {
        let writable = agent.into_iter().flat_map(|a| a.writable.iter().flatten());
        writable
            .filter_map(|p| match p.strip_prefix("~/") {
                Some(rest) => self.home.as_ref().map(|h| h.join(rest)),
                None => Some(PathBuf::from(p)),
            })
            .collect()
    }

    /// For a policy's commands: the credential stores, every agent's state
    /// (`agent_state`: the configured agent's `agent.writable`) and `shell.hide`.
    pub fn for_commands(&self, agent_state: &[PathBuf]) -> Vec<PathBuf> {
        let names: Vec<&str> = SECRETS.iter().chain(AGENT_STATE).copied().collect();
        let extra: Vec<PathBuf> = self.extra.iter().chain(agent_state).cloned().collect();
        self.paths(&names, &extra, &[])
    }

    /// For the agent: the credential stores and `shell.hide`, not its own state.
    pub fn for_agent(&self, own_state: &[PathBuf]) -> Vec<PathBuf> {
        self.paths(SECRETS, &self.extra, own_state)
    }

    /// `path` with the home directory written `~`, for display.
    pub fn show(&self, path: &Path) -> String {
        match self.home.as_ref().and_then(|h| path.strip_prefix(h).ok()) {
            Some(rest) => format!("~/{}", rest.display()),
            None => path.display().to_string(),
        }
    }

    fn paths(&self, names: &[&str], extra: &[PathBuf], keep: &[PathBuf]) -> Vec<PathBuf> {
        let mut out = paths(self.home.as_deref(), names, extra, &self.reveal, keep);
        // Hiding the workspace itself would leave nothing to work on.
        out.retain(|h| *h != self.root);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_exists_is_hidden_links_resolved_and_kept_paths_left() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join("vault/aws")).unwrap();
        std::os::unix::fs::symlink(home.join("vault/aws"), home.join(".aws")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::write(home.join("keys.txt"), "k").unwrap();

        let got = paths(
            Some(&home),
            SECRETS,
            &[home.join("keys.txt"), home.join("missing")],
            &[],
            &[],
        );
        assert_eq!(
            got,
            vec![
                home.join(".netrc"),
                home.join(".ssh"),
                home.join("keys.txt"),
                home.join("vault/aws"),
            ]
        );

        let names: Vec<&str> = SECRETS.iter().chain(AGENT_STATE).copied().collect();
        let got = paths(
            Some(&home),
            &names,
            &[],
            &[home.join(".aws")],
            &[home.join(".claude")],
        );
        assert_eq!(got, vec![home.join(".netrc"), home.join(".ssh")]);
        assert!(paths(None, SECRETS, &[], &[], &[]).is_empty());
        assert!(paths(None, &[], &[PathBuf::from("/")], &[], &[]).is_empty());
    }
}
