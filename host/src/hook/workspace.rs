//! Which directory a hook answers for.
//!
//! A hook installed with `loopbox hook install` names its workspace (`--root`):
//! that is the workspace, whatever the event says, and an event whose `cwd` (or
//! whose agent's project directory) lies outside it is refused. A `cwd` is the
//! agent's word, and a sandboxed command can make a subdirectory that looks like
//! a workspace of its own (`sub/loopbox.toml`), so nothing below the pinned root
//! is adopted. Without `--root` (a hook command written by hand, or user-wide):
//! the agent's project root when it names one (`$CLAUDE_PROJECT_DIR`,
//! `$GEMINI_PROJECT_DIR`), then `-C`, then the nearest ancestor of the hook's
//! `cwd` that holds `.loopbox/` or `loopbox.toml` (else `.git`), else the
//! `cwd` itself. Following `cwd` alone would start a second loop in every
//! subdirectory the agent `cd`s into. The workspace must already exist: a
//! hook never creates one (a `cwd` in the input is the agent's word, not ours).

use std::path::{Path, PathBuf};

use super::agents::Agent;

/// Names whose presence marks a loopbox workspace.
const MARKERS: &[&str] = &[crate::db::STORE_DIR, "loopbox.toml"];

/// The workspace for a hook of `agent`: `env` reads the environment (a parameter for tests).
pub fn resolve(
    agent: Agent,
    root: Option<&Path>,
    dash_c: Option<&Path>,
    cwd: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<PathBuf, String> {
    if let Some(root) = root {
        return pinned(agent, root, cwd, env);
    }
    let from_agent = agent.project_dir_var().and_then(|var| {
        env(var)
            .filter(|d| !d.is_empty())
            .map(|d| (PathBuf::from(d), format!("${var}")))
    });
    let chosen = match (from_agent, dash_c) {
        (Some(found), _) => found,
        (None, Some(dir)) => (dir.to_path_buf(), "-C".to_string()),
        (None, None) => {
            let start = match cwd {
                Some(c) => PathBuf::from(c),
                None => std::env::current_dir()
                    .map_err(|e| format!("cannot tell the current directory: {e}"))?,
            };
            // A cwd that does not exist is an error below, not a reason to look elsewhere.
            let found = if start.is_dir() {
                nearest_marked(&start)
            } else {
                None
            };
            (found.unwrap_or(start), "the hook input's cwd".to_string())
        }
    };
    let (dir, from) = chosen;
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(format!(
            "the workspace `{}` (from {from}) is not a directory",
            dir.display()
        )),
        Err(e) => Err(format!(
            "the workspace `{}` (from {from}) cannot be used: {e}; a hook does not create it",
            dir.display()
        )),
    }
}

/// The workspace `hook install` pinned, once the event is seen to come from inside it.
fn pinned(
    agent: Agent,
    root: &Path,
    cwd: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<PathBuf, String> {
    let real = |p: &Path, what: &str| {
        p.canonicalize()
            .map_err(|e| format!("{what} `{}` cannot be used: {e}", p.display()))
    };
    let root = real(root, "the workspace this hook was installed for (--root)")?;
    let elsewhere = |what: String| {
        format!(
            "{what} is outside `{}`, the workspace this hook was installed for (--root), so it is not answered there; \
             to use loopbox in that directory, run `loopbox hook install` from it",
            root.display()
        )
    };
    if let Some(var) = agent.project_dir_var()
        && let Some(dir) = env(var).filter(|d| !d.is_empty())
    {
        let dir = real(
            Path::new(&dir),
            &format!("the agent's project directory (${var})"),
        )?;
        if dir != root {
            return Err(elsewhere(format!(
                "the agent's project `{}` (${var})",
                dir.display()
            )));
        }
    }
    if let Some(cwd) = cwd {
        let dir = real(Path::new(cwd), "the hook input's cwd")?;
        if !dir.starts_with(&root) {
            return Err(elsewhere(format!("the event's cwd `{}`", dir.display())));
        }
    }
    Ok(root)
}

fn nearest_marked(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        // A marker above the repository (a stray `~/.loopbox`) is not this project's.
        if MARKERS.iter().any(|n| dir.join(n).exists()) || dir.join(".git").exists() {
            return Some(dir.to_path_buf());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_unpinned(
        agent: Agent,
        dash_c: Option<&Path>,
        cwd: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PathBuf, String> {
        resolve(agent, None, dash_c, cwd, env)
    }

    #[test]
    fn a_pinned_root_is_the_workspace_and_events_from_elsewhere_are_refused() {
        let top = tempfile::tempdir().unwrap();
        let t = top.path().canonicalize().unwrap();
        let root = t.join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(t.join("other")).unwrap();
        // A planted workspace below the root is not adopted.
        std::fs::write(root.join("sub/loopbox.toml"), "").unwrap();
        let none = |_: &str| None;
        let sub = root.join("sub");
        assert_eq!(
            resolve(Agent::Codex, Some(&root), None, sub.to_str(), none).unwrap(),
            root
        );
        let other = t.join("other");
        let e = resolve(Agent::Codex, Some(&root), None, other.to_str(), none).unwrap_err();
        assert!(
            e.contains("is outside") && e.contains("hook install"),
            "{e}"
        );
        let project =
            |v: &str| (v == "CLAUDE_PROJECT_DIR").then(|| other.to_string_lossy().into_owned());
        let e = resolve(Agent::ClaudeCode, Some(&root), None, sub.to_str(), project).unwrap_err();
        assert!(e.contains("CLAUDE_PROJECT_DIR"), "{e}");
        // A link out of the root is judged by where it leads.
        std::os::unix::fs::symlink(&other, root.join("out")).unwrap();
        let out = root.join("out");
        assert!(resolve(Agent::Codex, Some(&root), None, out.to_str(), none).is_err());
    }

    #[test]
    fn the_project_root_beats_the_cwd_and_nothing_is_created() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("a/b/c")).unwrap();
        std::fs::write(r.join("loopbox.toml"), "").unwrap();
        std::fs::create_dir(r.join("a/.git")).unwrap();
        let none = |_: &str| None;
        let sub = r.join("a/b/c");
        // No higher than the repository: the `loopbox.toml` above it is not this project's.
        assert_eq!(
            resolve_unpinned(Agent::Codex, None, sub.to_str(), none).unwrap(),
            r.join("a")
        );
        std::fs::write(r.join("a/b/loopbox.toml"), "").unwrap();
        assert_eq!(
            resolve_unpinned(Agent::Codex, None, sub.to_str(), none).unwrap(),
            r.join("a/b")
        );
        std::fs::remove_file(r.join("a/b/loopbox.toml")).unwrap();
        let project =
            |v: &str| (v == "CLAUDE_PROJECT_DIR").then(|| r.to_string_lossy().into_owned());
        assert_eq!(
            resolve_unpinned(Agent::ClaudeCode, Some(&sub), sub.to_str(), project).unwrap(),
            r
        );
        assert_eq!(
            resolve_unpinned(Agent::Codex, Some(&sub), None, project).unwrap(),
            sub,
            "Codex names no project root"
        );
        let missing = r.join("gone");
        let e = resolve_unpinned(Agent::Codex, Some(&missing), None, none).unwrap_err();
        assert!(e.contains("does not create it"), "{e}");
        assert!(!missing.exists());
        let e = resolve_unpinned(Agent::Gemini, None, Some(missing.to_str().unwrap()), none)
            .unwrap_err();
        assert!(e.contains("cwd"), "{e}");
        assert!(!missing.exists());
    }
}
