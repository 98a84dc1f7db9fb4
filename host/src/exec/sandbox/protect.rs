//! Protected paths: what a sandboxed child (a policy's command, or the agent)
//! may never write or create in the workspace, because something outside the
//! sandbox later runs or trusts it.
//!
//! - Programs that run by themselves: git's config and hooks (`.git`, a
//!   `core.hooksPath` inside the workspace, husky, lefthook, pre-commit), the
//!   agents' and editors' settings (`.claude`, `.codex`, `.gemini`, `.mcp.json`,
//!   `.vscode`, `.idea`, `.cursor`, `.zed`, `.dir-locals.el`, `.exrc`,
//!   `.nvim.lua`), what runs on `cd` (direnv's `.envrc`, mise's config).
//! - loopbox's own: the store (`.loopbox`), `loopbox.toml`, `loopbox.lock`, the `--config`
//!   file, the policy file, the agent program, and programs the rules name.
//!
//! `shell.writable` opens a name of the first group on purpose; loopbox's own
//! never open.

use std::path::{Path, PathBuf};

/// What a missing protected name is when a placeholder has to stand in for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// Names at the workspace root that are protected unless `shell.writable` opens them.
pub const NAMES: &[(&str, Kind)] = &[
    (".git", Kind::Dir),
    (".claude", Kind::Dir),
    (".codex", Kind::Dir),
    (".gemini", Kind::Dir),
    (".mcp.json", Kind::File),
    (".vscode", Kind::Dir),
    (".idea", Kind::Dir),
    (".cursor", Kind::Dir),
    (".envrc", Kind::File),
    (".zed", Kind::Dir),
    (".dir-locals.el", Kind::File),
    (".exrc", Kind::File),
    (".nvimrc", Kind::File),
    (".nvim.lua", Kind::File),
    ("mise.toml", Kind::File),
    (".mise.toml", Kind::File),
    ("mise.local.toml", Kind::File),
    (".mise.local.toml", Kind::File),
    (".mise", Kind::Dir),
    (".husky", Kind::Dir),
    (".pre-commit-config.yaml", Kind::File),
    ("lefthook.yml", Kind::File),
    (".lefthook.yml", Kind::File),
    ("lefthook-local.yml", Kind::File),
    (crate::db::STORE_DIR, Kind::Dir),
    (crate::files::CONFIG_FILE, Kind::File),
    (crate::files::LOCK_FILE, Kind::File),
];

/// What an agent keeps in its own state directory that runs code or steers it
/// later (hooks, MCP servers, commands, instructions): read-only to the agent
/// when present, though the directory around it is writable.
pub const AGENT_SETTINGS: &[&str] = &[
    "settings.json",
    "settings.local.json",
    "config.toml",
    "hooks.json",
    "hooks",
    "commands",
    "agents",
    "plugins",
    "skills",
    "extensions",
    "policies",
    "CLAUDE.md",
    "AGENTS.md",
    "GEMINI.md",
    // Claude Code's local install (`~/.claude/local`): the `claude` the user
    // runs next executes its `node_modules`.
    "local",
];

/// The agent settings present (as themselves, not links) in the agent's writable directories.
pub fn agent_settings(writable: &[PathBuf]) -> Vec<Protected> {
    let mut out = Vec::new();
    for dir in writable.iter().filter(|d| d.is_dir()) {
        for name in AGENT_SETTINGS {
            let path = dir.join(name);
            if let Ok(m) = std::fs::symlink_metadata(&path)
                && !m.file_type().is_symlink()
            {
                out.push(Protected {
                    path,
                    kind: if m.is_dir() { Kind::Dir } else { Kind::File },
                });
            }
        }
    }
    out
}

/// Names `shell.writable` can never open: loopbox's own integrity.
pub const NEVER_WRITABLE: &[&str] = &[
    crate::db::STORE_DIR,
    crate::files::CONFIG_FILE,
    crate::files::LOCK_FILE,
];

/// Why `name` may not appear in `shell.writable`, if it may not.
pub fn check_writable(name: &str) -> Result<(), String> {
    if NEVER_WRITABLE.contains(&name) {
        return Err(format!(
            "`{name}` is loopbox's own and is never writable by sandboxed commands"
        ));
    }
    if !NAMES.iter().any(|(n, _)| *n == name) {
        let names: Vec<&str> = NAMES
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !NEVER_WRITABLE.contains(n))
            .collect();
        return Err(format!(
            "`{name}` is not a protected name; shell.writable opens one of: {}",
            names.join(", ")
        ));
    }
    Ok(())
}

/// A protected path and, for a name that may be missing, what it would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: PathBuf,
    pub kind: Kind,
}

/// The protected set of a run in the canonical workspace `root`: the default
/// names not opened by `writable`, git's hooks path when it is inside the
/// workspace, and `extra` files (config, policy, agent program, rule programs)
/// that lie inside the workspace.
pub fn paths(root: &Path, writable: &[String], extra: &[PathBuf]) -> Vec<Protected> {
    let mut out: Vec<Protected> = NAMES
        .iter()
        .filter(|(n, _)| !writable.iter().any(|w| w == n))
        .map(|(n, kind)| Protected {
            path: root.join(n),
            kind: *kind,
        })
        .collect();
    if let Some(hooks) = git_hooks_path(root).filter(|p| p.starts_with(root)) {
        out.push(Protected {
            path: hooks,
            kind: Kind::Dir,
        });
    }
    for p in extra {
        // A file loopbox will run or read again: protected as the link a name may be,
        // and as the file it resolves to.
        let absolute = if p.is_absolute() {
            p.clone()
        } else {
            root.join(p)
        };
        for candidate in [Some(absolute.clone()), absolute.canonicalize().ok()]
            .into_iter()
            .flatten()
        {
            if candidate.starts_with(root)
                && candidate != root
                && !out.iter().any(|o| o.path == candidate)
            {
                out.push(Protected {
                    path: candidate,
                    kind: Kind::File,
                });
            }
        }
    }
    out
}

/// `core.hooksPath` from `.git/config`, resolved against the workspace, if set.
/// A plain reading of the one key: enough to protect where hooks would run from.
fn git_hooks_path(root: &Path) -> Option<PathBuf> {
    let text = crate::files::read_text(
        &root.join(".git/config"),
        crate::files::MAX_CONFIG_BYTES,
        "git config",
    )
    .ok()?;
    let mut in_core = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_core = line
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
        } else if in_core
            && let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("hookspath")
        {
            found = Some(value.trim().trim_matches('"').to_string());
        }
    }
    let value = found.filter(|v| !v.is_empty())?;
    let path = Path::new(&value);
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    };
    Some(
        crate::exec::child_env::normalize_relative(joined.strip_prefix(root).ok()?)
            .map(|rel| root.join(rel))
            .unwrap_or(joined),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What steers or runs the agent later is read-only in its writable state
    /// directories: settings, hooks, MCP and plugin folders, the local install.
    #[test]
    fn agent_settings_cover_the_agent_s_code_and_hooks() {
        let home = tempfile::tempdir().unwrap();
        let claude = home.path().join(".claude");
        std::fs::create_dir_all(claude.join("local/node_modules")).unwrap();
        std::fs::create_dir_all(claude.join("hooks")).unwrap();
        std::fs::write(claude.join("settings.json"), "{}").unwrap();
        std::fs::write(claude.join("history.jsonl"), "").unwrap();
        std::os::unix::fs::symlink("/nowhere", claude.join("commands")).unwrap();
        let mut got: Vec<_> = agent_settings(std::slice::from_ref(&claude))
            .into_iter()
            .map(|p| p.path.strip_prefix(&claude).unwrap().display().to_string())
            .collect();
        got.sort();
        // A link is left as it is; what the agent writes as it works (history) stays writable.
        assert_eq!(got, ["hooks", "local", "settings.json"]);
    }

    #[test]
    fn defaults_extras_and_hooks_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\tbare = false\n\thooksPath = tools/hooks\n",
        )
        .unwrap();
        std::fs::create_dir(root.join("agent")).unwrap();
        std::fs::write(root.join("agent/real"), "").unwrap();
        std::os::unix::fs::symlink("real", root.join("agent/link")).unwrap();
        let set = paths(
            &root,
            &[".vscode".into()],
            &[root.join("agent/link"), PathBuf::from("/usr/bin/env")],
        );
        let has = |rel: &str| set.iter().any(|p| p.path == root.join(rel));
        assert!(
            has(".git")
                && has(".claude")
                && has(".loopbox")
                && has("loopbox.toml")
                && has(".envrc")
        );
        assert!(!has(".vscode"), "opened by shell.writable");
        assert!(has("tools/hooks"), "core.hooksPath");
        assert!(
            has("agent/link") && has("agent/real"),
            "the name and what it resolves to"
        );
        assert!(
            !set.iter().any(|p| p.path == Path::new("/usr/bin/env")),
            "outside the workspace: read-only anyway"
        );
    }

    #[test]
    fn writable_names_are_checked() {
        assert!(check_writable(".git").is_ok());
        assert!(
            check_writable(".loopbox")
                .unwrap_err()
                .contains("never writable")
        );
        assert!(
            check_writable("src")
                .unwrap_err()
                .contains("not a protected name")
        );
    }
}
