//! What a child process may see: the granted `PATH`, the host variables the
//! user chose to pass, a working directory that stays inside the workspace.
//! Shared by shell actions and the agent runner.

use std::path::{Component, Path, PathBuf};

use crate::config::ShellConfig;

#[derive(Debug, Clone)]
pub struct ChildEnv {
    root: PathBuf,
    path: String,
    passed: Vec<(String, String)>,
}

impl ChildEnv {
    /// `root` must be canonical (the workspace root).
    pub fn new(shell: &ShellConfig, root: &Path) -> ChildEnv {
        let passed = shell.pass_env.iter().filter(|k| *k != "PATH").filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v))).collect();
        ChildEnv { root: root.to_path_buf(), path: shell.path.clone(), passed }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path_var(&self) -> &str {
        &self.path
    }

    /// The full environment of a child: PATH, passed variables, then `extra`.
    pub fn vars(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let mut vars = vec![("PATH".to_string(), self.path.clone())];
        vars.extend(self.passed.iter().cloned());
        for (k, v) in extra {
            vars.retain(|(existing, _)| existing != k);
            vars.push((k.clone(), v.clone()));
        }
        vars
    }

    /// A working directory relative to the root that stays inside it, symlinks resolved.
    pub fn resolve_cwd(&self, cwd: Option<&str>) -> Result<PathBuf, String> {
        let Some(rel) = cwd.filter(|c| !c.is_empty() && *c != ".") else {
            return Ok(self.root.clone());
        };
        let p = Path::new(rel);
        if p.is_absolute() {
            return Err(format!("cwd `{rel}` is absolute; give a path relative to the workspace"));
        }
        let joined = self.root.join(p);
        let real = joined.canonicalize().map_err(|e| format!("cwd `{rel}` cannot be used: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!("cwd `{rel}` leaves the workspace"));
        }
        if !real.is_dir() {
            return Err(format!("cwd `{rel}` is not a directory"));
        }
        Ok(real)
    }

    /// The program a name refers to: through the granted PATH for a bare name,
    /// relative to `cwd` for one with a slash. None when nothing executable is there.
    pub fn resolve_program(&self, name: &str, cwd: &Path) -> Option<PathBuf> {
        if name.contains('/') {
            let p = cwd.join(name);
            return is_executable(&p).then_some(p);
        }
        self.path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(name)).find(|p| is_executable(p))
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// `path` normalized lexically; None when `..` climbs above its start.
pub fn normalize_relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(root: &Path) -> ChildEnv {
        ChildEnv::new(&ShellConfig { pass_env: vec![], ..ShellConfig::default() }, root)
    }

    #[test]
    fn cwd_stays_inside_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("/tmp", root.join("out")).unwrap();
        let e = env(&root);
        assert_eq!(e.resolve_cwd(None).unwrap(), root);
        assert_eq!(e.resolve_cwd(Some("sub")).unwrap(), root.join("sub"));
        assert!(e.resolve_cwd(Some("..")).unwrap_err().contains("leaves the workspace"));
        assert!(e.resolve_cwd(Some("out")).unwrap_err().contains("leaves the workspace"));
        assert!(e.resolve_cwd(Some("/tmp")).unwrap_err().contains("absolute"));
    }

    #[test]
    fn programs_resolve_through_the_granted_path_only() {
        let e = env(Path::new("/"));
        let sh = e.resolve_program("sh", Path::new("/")).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(e.resolve_program("definitely-not-a-program", Path::new("/")), None);
    }

    #[test]
    fn policy_variables_override_but_path_comes_first() {
        let e = env(Path::new("/"));
        let vars = e.vars(&[("A".into(), "1".into())]);
        assert_eq!(vars[0].0, "PATH");
        assert!(vars.contains(&("A".into(), "1".into())));
    }

    #[test]
    fn normalize_refuses_climbing_out() {
        assert_eq!(normalize_relative(Path::new("a/./b/../c")), Some(PathBuf::from("a/c")));
        assert_eq!(normalize_relative(Path::new("a/../../x")), None);
        assert_eq!(normalize_relative(Path::new("/etc")), None);
    }
}
