//! What a child process may see: the granted `PATH`, the host variables the
//! user chose to pass, a working directory that stays inside the workspace.
//! Shared by shell actions and the agent runner.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct ChildEnv {
    root: PathBuf,
    path: String,
    passed: Vec<(String, String)>,
    host: HostEnv,
    /// `HOME`, whatever `pass_env` says: a server tenant's agent's own home.
    home: Option<PathBuf>,
}

/// Where `pass_env` finds "the host's variables": loopbox's own environment,
/// or (a server's run) the values its tenant was given, and nothing else.
#[derive(Debug, Clone, Default)]
pub enum HostEnv {
    #[default]
    Process,
    Given(Arc<BTreeMap<String, String>>),
}

impl HostEnv {
    /// The value of host variable `name`.
    pub fn var(&self, name: &str) -> Option<String> {
        match self {
            HostEnv::Process => std::env::var(name).ok(),
            HostEnv::Given(vars) => vars.get(name).cloned(),
        }
    }
}

impl ChildEnv {
    /// `PATH` is `path`; of the host's variables, those named in `pass_env`
    /// (never `PATH`). `root` must be canonical (the workspace root).
    pub fn new(path: &str, pass_env: &[String], root: &Path) -> ChildEnv {
        ChildEnv::from_host(path, pass_env, root, HostEnv::Process)
    }

    fn from_host(path: &str, pass_env: &[String], root: &Path, host: HostEnv) -> ChildEnv {
        let passed = pass_env
            .iter()
            .filter(|k| *k != "PATH")
            .filter_map(|k| host.var(k).map(|v| (k.clone(), v)))
            .collect();
        ChildEnv {
            root: root.to_path_buf(),
            path: path.to_string(),
            passed,
            host,
            home: None,
        }
    }

    /// The same root and `PATH`, with the host variables named in `pass_env`
    /// instead (the agent's own, `agent.pass_env`).
    pub fn with_pass_env(&self, pass_env: &[String]) -> ChildEnv {
        ChildEnv {
            home: self.home.clone(),
            ..ChildEnv::from_host(&self.path, pass_env, &self.root, self.host.clone())
        }
    }

    /// The same, with `HOME` set to `home` whatever `pass_env` passes.
    pub fn with_home(self, home: Option<&Path>) -> ChildEnv {
        ChildEnv {
            home: home.map(Path::to_path_buf),
            ..self
        }
    }

    /// The same, with `pass_env`'s values read from `host` instead of loopbox's
    /// own environment.
    pub fn with_host(&self, pass_env: &[String], host: HostEnv) -> ChildEnv {
        ChildEnv {
            home: self.home.clone(),
            ..ChildEnv::from_host(&self.path, pass_env, &self.root, host)
        }
    }

    /// Where this environment's host variables come from.
    pub fn host(&self) -> &HostEnv {
        &self.host
    }

    /// The names of the host variables passed (those set in loopbox's environment).
    pub fn passed_names(&self) -> impl Iterator<Item = &str> {
        self.passed.iter().map(|(k, _)| k.as_str())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path_var(&self) -> &str {
        &self.path
    }

    /// The full environment of a child: PATH, passed variables, `HOME` when
    /// set ([`ChildEnv::with_home`]), then `extra`.
    pub fn vars(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let mut vars = vec![("PATH".to_string(), self.path.clone())];
        vars.extend(self.passed.iter().cloned());
        let home = self
            .home
            .iter()
            .map(|h| ("HOME".to_string(), h.display().to_string()));
        for (k, v) in home.chain(extra.iter().cloned()) {
            vars.retain(|(existing, _)| *existing != k);
            vars.push((k, v));
        }
        vars
    }

    /// The environment of a policy's command: [`ChildEnv::vars`], with git's
    /// editors set to `:` (git then opens none) unless the user passes them. An
    /// editor git opens reads its keys from the command's stdin, which the policy
    /// writes: `git commit` with stdin `:!CMD` ran CMD in vi under a `["git"]` rule.
    pub fn command_vars(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        let mut vars = self.vars(extra);
        for name in GIT_EDITORS {
            if !vars.iter().any(|(k, _)| k == name) {
                vars.push((name.to_string(), ":".to_string()));
            }
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
            return Err(format!(
                "cwd `{rel}` is absolute; give a path relative to the workspace"
            ));
        }
        let joined = self.root.join(p);
        let real = joined
            .canonicalize()
            .map_err(|e| format!("cwd `{rel}` cannot be used: {e}"))?;
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
        self.path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(name))
            .find(|p| is_executable(p))
    }
}

/// The variables naming the editors git opens (`commit`, `tag -a`, `rebase -i`,
/// `add -e`), before `core.editor`, `VISUAL` and `EDITOR`.
const GIT_EDITORS: [&str; 2] = ["GIT_EDITOR", "GIT_SEQUENCE_EDITOR"];

/// Why a variable can make a child load or run code it was not asked to (or
/// read config from a place the policy chose), if it can. Names compare
/// case-insensitively: npm reads `npm_config_*`.
pub fn dangerous_variable(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_uppercase();
    const EXACT: &[(&str, &str)] = &[
        ("PATH", "chooses which program a name runs"),
        (
            "BASH_ENV",
            "bash runs the file it names (and expands it) before any script",
        ),
        (
            "ENV",
            "sh runs the file it names (and expands it) when it starts",
        ),
        ("SHELLOPTS", "can turn on xtrace, which expands PS4"),
        ("BASHOPTS", "changes how bash runs every script"),
        (
            "PS4",
            "is expanded (command substitution included) by `set -x`",
        ),
        ("PROMPT_COMMAND", "is run by bash"),
        ("IFS", "changes how shells split words"),
        (
            "GCONV_PATH",
            "makes glibc load shared objects from the directory it names",
        ),
        ("GLIBC_TUNABLES", "changes glibc's behaviour at start-up"),
        (
            "LOCPATH",
            "makes glibc read locale files from the directory it names",
        ),
        (
            "NLSPATH",
            "makes programs read message catalogs from where it says",
        ),
        ("HOSTALIASES", "makes the resolver read the file it names"),
        ("EDITOR", "is run by git and other programs"),
        ("VISUAL", "is run by git and other programs"),
        ("PAGER", "is run by git, man and other programs"),
        ("MANPAGER", "is run by man"),
        ("BROWSER", "is run by programs that open links"),
        ("SHELL", "is the shell other programs run commands with"),
        (
            "HOME",
            "moves every program's config (~/.gitconfig, ~/.npmrc) to where the policy says",
        ),
        ("ZDOTDIR", "moves zsh's startup files"),
        ("INPUTRC", "makes readline read the file it names"),
        ("TMPDIR", "is set by the sandbox"),
        (
            "OPENSSL_CONF",
            "makes OpenSSL load engines named in the file",
        ),
        (
            "OPENSSL_ENGINES",
            "makes OpenSSL load shared objects from the directory",
        ),
        ("SSH_ASKPASS", "is run by ssh"),
        ("SUDO_ASKPASS", "is run by sudo"),
        ("CC", "is run by build tools as the compiler"),
        ("CXX", "is run by build tools as the compiler"),
        ("RUSTC", "is run by cargo as the compiler"),
        ("RUSTC_WRAPPER", "is run by cargo around the compiler"),
        (
            "RUSTC_WORKSPACE_WRAPPER",
            "is run by cargo around the compiler",
        ),
        ("RUSTFLAGS", "can name a linker for cargo to run"),
        (
            "CFLAGS",
            "passes options (-B DIR, -wrapper CMD) to the C compiler make runs",
        ),
        (
            "CXXFLAGS",
            "passes options (-B DIR, -wrapper CMD) to the C++ compiler make runs",
        ),
        (
            "CPPFLAGS",
            "passes options (-B DIR, -wrapper CMD) to the compiler make runs",
        ),
        (
            "LDFLAGS",
            "passes options (-B DIR, -fuse-ld=PATH) to the linker",
        ),
        (
            "GOFLAGS",
            "passes options (-toolexec=CMD) to every go command",
        ),
        (
            "GOENV",
            "makes go read its settings (GOFLAGS) from the file it names",
        ),
        ("RUSTDOCFLAGS", "can name programs for rustdoc to run"),
        ("MAKEFLAGS", "passes options (SHELL=...) to every make"),
        (
            "GNUMAKEFLAGS",
            "passes options (SHELL=...) to every GNU make",
        ),
        (
            "MAKEFILES",
            "makes every make read the makefiles it names first",
        ),
        ("ZIPOPT", "passes options (-TT CMD) to every zip"),
        ("ZIP", "passes options (-TT CMD) to every zip"),
        ("RSYNC_RSH", "is run by rsync as its remote shell"),
        ("RSYNC_CONNECT_PROG", "is run by rsync to reach a daemon"),
        (
            "WGETRC",
            "makes wget read a startup file (use_askpass = CMD)",
        ),
        ("CLASSPATH", "makes java load classes from where it says"),
        ("LUA_INIT", "is run by lua when it starts"),
        ("PHPRC", "makes php read the ini file it names"),
        (
            "PHP_INI_SCAN_DIR",
            "makes php read ini files from the directory",
        ),
        ("ELECTRON_RUN_AS_NODE", "turns Electron apps into node"),
        (
            "XDG_CONFIG_HOME",
            "moves every program's config (git's included) to where it says",
        ),
        (
            "XDG_DATA_HOME",
            "moves programs' data (and plugins) to where it says",
        ),
        (
            "GIT_CONFIG_GLOBAL",
            "makes git read a config (with its hooks and pagers)",
        ),
    ];
    const PREFIXES: &[(&str, &str)] = &[
        ("LD_", "makes the dynamic loader load shared objects"),
        ("DYLD_", "makes the dynamic loader load shared objects"),
        (
            "PYTHON",
            "changes what python loads and runs (PYTHONSTARTUP, PYTHONPATH)",
        ),
        (
            "PERL5",
            "makes perl load modules or run options (PERL5OPT, PERL5LIB)",
        ),
        ("PERLLIB", "makes perl load modules from where it says"),
        ("RUBY", "makes ruby load code (RUBYOPT, RUBYLIB)"),
        ("GEM_", "makes ruby load gems from where it says"),
        ("NODE_", "makes node load code (NODE_OPTIONS=--require)"),
        ("NPM_CONFIG_", "configures npm (script-shell, node-options)"),
        (
            "GIT_",
            "configures git (GIT_CONFIG_*, GIT_SSH_COMMAND, GIT_EXEC_PATH)",
        ),
        ("CARGO_", "configures cargo (runners, wrappers, linkers)"),
        ("CGO_", "passes options (-B DIR) to the C compiler go runs"),
        (
            "RUSTUP_",
            "chooses the toolchain cargo runs (RUSTUP_TOOLCHAIN=/a/path runs its bin/cargo)",
        ),
        (
            "PIP_",
            "passes options to pip (PIP_PYTHON names the python it runs)",
        ),
        ("JAVA_", "passes options (-javaagent) to java"),
        ("_JAVA_", "passes options (-javaagent) to java"),
        ("LUA_", "makes lua load modules from where it says"),
        ("TCL", "makes tcl load packages from where it says"),
        ("LESS", "makes less run preprocessors (LESSOPEN)"),
        ("BASH_FUNC_", "defines bash functions"),
    ];
    if let Some((_, why)) = EXACT.iter().find(|(k, _)| *k == n) {
        return Some(why);
    }
    if let Some((_, why)) = PREFIXES.iter().find(|(p, _)| n.starts_with(p)) {
        return Some(why);
    }
    if n.ends_with("_OPTIONS") || n.ends_with("OPTS") {
        return Some(
            "passes options to a program (NODE_OPTIONS, JAVA_TOOL_OPTIONS, TAR_OPTIONS), which can load code",
        );
    }
    None
}

/// Variables the user may pass from their own environment though they are
/// listed as dangerous: the value is the user's own, not the policy's.
pub const SAFE_FROM_HOST: &[&str] = &[
    "HOME",
    "SHELL",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
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
        let path = crate::exec::config::ShellConfig::default().path;
        ChildEnv::new(&path, &[], root)
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
        assert!(
            e.resolve_cwd(Some(".."))
                .unwrap_err()
                .contains("leaves the workspace")
        );
        assert!(
            e.resolve_cwd(Some("out"))
                .unwrap_err()
                .contains("leaves the workspace")
        );
        assert!(
            e.resolve_cwd(Some("/tmp"))
                .unwrap_err()
                .contains("absolute")
        );
    }

    #[test]
    fn programs_resolve_through_the_granted_path_only() {
        let e = env(Path::new("/"));
        let sh = e.resolve_program("sh", Path::new("/")).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            e.resolve_program("definitely-not-a-program", Path::new("/")),
            None
        );
    }

    #[test]
    fn policy_variables_override_but_path_comes_first() {
        let e = env(Path::new("/"));
        let vars = e.vars(&[("A".into(), "1".into())]);
        assert_eq!(vars[0].0, "PATH");
        assert!(vars.contains(&("A".into(), "1".into())));
    }

    #[test]
    fn git_opens_no_editor_for_a_command_unless_the_user_passes_one() {
        let root = Path::new("/w");
        let e = ChildEnv::new("/bin", &[], root);
        let vars = e.command_vars(&[]);
        for name in GIT_EDITORS {
            assert!(
                vars.contains(&(name.to_string(), ":".to_string())),
                "{vars:?}"
            );
        }
        assert!(
            !e.vars(&[]).iter().any(|(k, _)| k == "GIT_EDITOR"),
            "the agent's own environment is left alone"
        );
        let given = [("GIT_EDITOR".to_string(), "nano".to_string())];
        let vars = e.command_vars(&given);
        assert_eq!(
            vars.iter()
                .filter(|(k, _)| k == "GIT_EDITOR")
                .collect::<Vec<_>>(),
            [&given[0]]
        );
    }

    #[test]
    fn code_loading_variables_are_named() {
        for v in [
            "BASH_ENV",
            "ENV",
            "GCONV_PATH",
            "NODE_OPTIONS",
            "LD_PRELOAD",
            "DYLD_INSERT_LIBRARIES",
            "PYTHONSTARTUP",
            "PERL5OPT",
            "RUBYOPT",
            "GIT_SSH_COMMAND",
            "npm_config_script_shell",
            "JAVA_TOOL_OPTIONS",
            "TAR_OPTIONS",
            "MAKEFILES",
            "RUSTUP_TOOLCHAIN",
            "PIP_PYTHON",
            "CFLAGS",
            "LDFLAGS",
            "GOFLAGS",
            "CGO_CFLAGS",
            "HOME",
            "PATH",
        ] {
            assert!(dangerous_variable(v).is_some(), "{v}");
        }
        for v in ["CI", "RUST_LOG", "LANG", "TERM", "MY_FLAG"] {
            assert_eq!(dangerous_variable(v), None, "{v}");
        }
    }

    #[test]
    fn normalize_refuses_climbing_out() {
        assert_eq!(
            normalize_relative(Path::new("a/./b/../c")),
            Some(PathBuf::from("a/c"))
        );
        assert_eq!(normalize_relative(Path::new("a/../../x")), None);
        assert_eq!(normalize_relative(Path::new("/etc")), None);
    }
}
