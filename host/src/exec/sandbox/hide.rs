//! Hidden paths: secrets outside the workspace that no sandboxed child may
//! read. `/` is readable in every sandbox (programs, libraries and toolchains
//! live all over it), so without this a granted `cat` or `grep -r` would hand
//! a policy the user's SSH keys or cloud logins, which it could then put in a
//! prompt.
//!
//! - Credential stores in the home directory ([`SECRETS`]): keys, cloud and
//!   cluster logins, database clients' passwords and keys, registry and forge
//!   tokens, password stores, browsers; and the files loopbox's environment
//!   names in their place ([`FILE_VARIABLES`]: `PGPASSFILE`, `KUBECONFIG`, ...).
//! - For a policy's commands, also the agents' state ([`AGENT_STATE`] and the
//!   configured agent's `agent.writable`): their logins and past sessions. The
//!   agent itself keeps its own.
//! - `shell.hide` adds paths; `shell.reveal` lets one of the above through.
//!
//! bwrap mounts an empty read-only directory (or `/dev/null`) over each;
//! Landlock grants read access to everything else instead of to `/`. With
//! `sandbox = "none"` nothing is hidden.

use std::path::{Path, PathBuf};

/// Credential stores under the home directory, hidden from every child: what
/// the common tools document as where they keep a login, a token or a key,
/// plus shell and database histories (passwords typed on a command line) and
/// browser profiles (cookies). The test
/// `the_credential_stores_in_home_are_hidden_by_default` (host/tests/trust.rs)
/// keeps its own copy of this list, so an entry cannot go unnoticed.
pub const SECRETS: &[&str] = &[
    // keys and password stores
    ".ssh",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".config/sops",
    ".config/op",
    ".config/1Password",
    ".1password",
    // cloud and cluster logins
    ".aws",
    ".azure",
    ".config/gcloud",
    ".oci",
    ".kube",
    ".config/helm",
    ".config/doctl",
    ".s3cfg",
    ".boto",
    ".databrickscfg",
    ".config/rclone",
    ".pulumi/credentials.json",
    ".terraformrc",
    ".terraform.d",
    ".vault-token",
    ".wrangler",
    ".config/.wrangler",
    ".fly",
    ".config/netlify",
    ".vercel",
    ".local/share/com.vercel.cli",
    ".config/stripe",
    ".ngrok2",
    ".config/ngrok",
    ".config/configstore",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".bluemix",
    ".aliyun",
    ".config/openstack",
    ".config/hcloud",
    ".config/linode-cli",
    ".config/scw",
    ".supabase",
    ".config/neonctl",
    ".sentryclirc",
    ".kaggle",
    // container registries
    ".docker",
    ".dockercfg",
    ".config/containers/auth.json",
    // forges and git
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".config/github-copilot",
    // package registries
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".pip",
    ".config/pip",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".ivy2/.credentials",
    ".sbt/.credentials",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet",
    ".config/composer/auth.json",
    ".composer/auth.json",
    // databases: libpq's password and service files and its client keys and
    // certificates, MySQL's option and login files, and the clients of
    // warehouses and other servers that keep a password or a token
    ".pgpass",
    ".pg_service.conf",
    ".postgresql",
    ".my.cnf",
    ".mylogin.cnf",
    ".myclirc",
    ".config/pgcli",
    ".dbt",
    ".snowsql",
    ".snowflake",
    ".clickhouse-client",
    ".cassandra",
    ".mongodb",
    ".influxdbv2",
    ".sqlcmd",
    // histories
    ".bash_history",
    ".sh_history",
    ".zsh_history",
    ".local/share/fish/fish_history",
    ".local/share/atuin",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".mycli-history",
    ".dbshell",
    ".sqlite_history",
    ".rediscli_history",
    ".lesshst",
    // browsers
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
];

/// Variables that name a credential file (or a directory of them) in place of
/// one of [`SECRETS`]: what they name in loopbox's own environment is hidden
/// as the default place is. libpq's password, service and client key files,
/// MySQL's login file, the AWS, Google Cloud, Azure, boto and OCI clients'
/// files, kubectl's (a `:`-separated list) and Docker's.
pub const FILE_VARIABLES: &[&str] = &[
    "PGPASSFILE",
    "PGSERVICEFILE",
    "PGSSLKEY",
    "MYSQL_TEST_LOGIN_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
    "AZURE_CONFIG_DIR",
    "BOTO_CONFIG",
    "OCI_CLI_CONFIG_FILE",
    "KUBECONFIG",
    "DOCKER_CONFIG",
];

/// The files [`FILE_VARIABLES`] name in loopbox's environment, relative ones
/// taken from its working directory, as the clients do.
pub fn named_by_variables() -> Vec<PathBuf> {
    FILE_VARIABLES
        .iter()
        .filter_map(std::env::var_os)
        .flat_map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .filter(|p| !p.as_os_str().is_empty())
        .filter_map(|p| std::path::absolute(p).ok())
        .collect()
}

/// Secrets outside any home directory, hidden from every child where this
/// process can read them (as root; otherwise the kernel already refuses them,
/// and hiding would only cost Landlock a walk of `/etc`): password hashes
/// (and their `-` backups), old password hashes, TLS, SSH host, Kerberos host
/// and WireGuard private keys, saved Wi-Fi and VPN secrets, the secrets a
/// container runtime mounts and a cluster's admin logins. `/etc/sudoers`
/// holds rules, not credentials, and stays readable.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/letsencrypt",
    // Secrets a container is handed: Docker and Compose secrets, a Kubernetes
    // service account's token, systemd's credentials; a cluster's admin logins.
    "/run/secrets",
    "/var/run/secrets",
    "/run/credentials",
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/pki",
    "/etc/rancher/k3s/k3s.yaml",
];

/// SSH host private keys (`/etc/ssh/ssh_host_*_key`) that this process can read.
fn ssh_host_keys() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc/ssh") else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
        })
        .collect()
}

/// [`SYSTEM_SECRETS`] and the SSH host keys that this process may read.
pub fn system_secrets() -> Vec<PathBuf> {
    SYSTEM_SECRETS
        .iter()
        .map(PathBuf::from)
        .chain(ssh_host_keys())
        .filter(|p| readable(p))
        .collect()
}

fn readable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access(2) reads a NUL-terminated path that lives through the call.
    unsafe { libc::access(c.as_ptr(), libc::R_OK) == 0 }
}

/// The home directory the user database gives this process's user (root's is
/// `/root`), whatever `$HOME` says.
fn account_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid value for getpwuid_r to fill in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r fills `pw` with pointers into `buf`, which outlives
    // their use below; `found` is set to `&pw` or null.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir points to a NUL-terminated string inside `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr(pw.pw_dir) };
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
    (dir.is_absolute() && dir != Path::new("/")).then_some(dir)
}

/// Where `p` really is: canonical, or, when it is missing, its directory's
/// canonical path and its name (a state directory the agent makes later).
fn real_path(p: &Path) -> Option<PathBuf> {
    p.canonicalize().ok().or_else(|| {
        let dir = p.parent()?.canonicalize().ok()?;
        Some(dir.join(p.file_name()?))
    })
}

/// This user's home directories, canonical: `$HOME` and the account's home in
/// the user database (never `/`). A server tenant's agent runs from neither.
pub fn user_homes() -> Vec<PathBuf> {
    let env = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let mut out: Vec<PathBuf> = Vec::new();
    for h in env.into_iter().chain(account_home()) {
        let h = h.canonicalize().unwrap_or(h);
        if h != Path::new("/") && !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

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
/// `names` under each of `homes`, then `extra`; minus those `reveal` names and
/// those at or under a path in `keep` (what the child must be able to use).
pub fn paths(
    homes: &[PathBuf],
    names: &[&str],
    extra: &[PathBuf],
    reveal: &[PathBuf],
    keep: &[PathBuf],
) -> Vec<PathBuf> {
    // Most names are missing: one stat says so, where realpath(3) would
    // read each component as a link first (300 calls a hook event, before).
    let resolve = |p: &Path| {
        std::fs::metadata(p)
            .is_ok()
            .then(|| p.canonicalize().ok())
            .flatten()
    };
    let reveal: Vec<PathBuf> = reveal.iter().filter_map(|p| resolve(p)).collect();
    let keep: Vec<PathBuf> = keep.iter().filter_map(|p| resolve(p)).collect();
    let named = homes
        .iter()
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

/// `hidden` without the paths inside another of them, unless one of `bound`
/// (what the sandbox binds back: the workspace, the agent's state) lies
/// between: the outer cover hides them already, and bwrap cannot cover a path
/// inside a cover (a server tenant's home, inside the hidden data directory).
pub fn outermost(hidden: Vec<PathBuf>, bound: &[PathBuf]) -> Vec<PathBuf> {
    let covered = |y: &PathBuf| {
        hidden.iter().any(|x| {
            x != y
                && y.starts_with(x)
                && !bound.iter().any(|b| b.starts_with(x) && y.starts_with(b))
        })
    };
    hidden.iter().filter(|y| !covered(y)).cloned().collect()
}

/// What the sandbox hides from one run's children, from `[shell]`, `$HOME`,
/// the user's home in the user database (root's `/root` when `$HOME` points
/// elsewhere) and the readable [`system_secrets`].
pub struct Hidden {
    /// Where `~/` leads: the run's own home, else `$HOME`.
    home: Option<PathBuf>,
    /// `$HOME`, then the account's home when it is another directory, then
    /// the run's own home.
    homes: Vec<PathBuf>,
    /// Whether the run has a home of its own (a server tenant's): then the
    /// user's agents' state is not its agent's, and is hidden from it too.
    own_home: bool,
    extra: Vec<PathBuf>,
    reveal: Vec<PathBuf>,
    root: PathBuf,
}

impl Hidden {
    /// `root` is the canonical workspace.
    pub fn new(shell: &crate::exec::config::ShellConfig, root: &Path) -> Hidden {
        Hidden::with_home(shell, root, None)
    }

    /// As [`Hidden::new`] for a run whose `~/` is `own_home` (a server
    /// tenant's), not loopbox's `$HOME`, whose credential stores and agent
    /// state stay hidden all the same.
    pub fn with_home(
        shell: &crate::exec::config::ShellConfig,
        root: &Path,
        own_home: Option<&Path>,
    ) -> Hidden {
        let user_home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let home = own_home.map(Path::to_path_buf).or(user_home.clone());
        // `~/x` in the home directory, `/x` as it is, anything else in the workspace.
        let path = |p: &String| match p.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                home.as_ref().map(|h| h.join(rest.trim_start_matches('/')))
            }
            _ => Some(root.join(p)),
        };
        let mut homes: Vec<PathBuf> = user_home.into_iter().collect();
        for other in account_home()
            .into_iter()
            .chain(own_home.map(Path::to_path_buf))
        {
            let same =
                |h: &PathBuf| h == &other || h.canonicalize().ok() == other.canonicalize().ok();
            if !homes.iter().any(same) {
                homes.push(other);
            }
        }
        let mut extra: Vec<PathBuf> = system_secrets();
        extra.extend(named_by_variables());
        extra.extend(shell.hide.iter().filter_map(path));
        Hidden {
            extra,
            reveal: shell.reveal.iter().filter_map(path).collect(),
            home,
            homes,
            own_home: own_home.is_some(),
            root: root.to_path_buf(),
        }
    }

    /// The agent's own state outside the workspace: its `agent.writable`, `~/`
    /// expanded (the config checked each is absolute or starts with `~/`), links
    /// resolved: what a sandbox binds is where a link led when the run began,
    /// and the agent runner refuses a turn once that changed (a link planted
    /// since). A run with a home of its own gets all of that home too.
    pub fn agent_state(&self, agent: Option<&crate::exec::config::AgentConfig>) -> Vec<PathBuf> {
        let writable = agent.into_iter().flat_map(|a| a.writable.iter().flatten());
        let own_home = self.home.iter().filter(|_| self.own_home).cloned();
        let mut out: Vec<PathBuf> = writable
            .filter_map(|p| match p.strip_prefix("~/") {
                Some(rest) => self.home.as_ref().map(|h| h.join(rest)),
                None => Some(PathBuf::from(p)),
            })
            .chain(own_home)
            .map(|p| real_path(&p).unwrap_or(p))
            .collect();
        out.dedup();
        out
    }

    /// For a policy's commands: the credential stores, every agent's state
    /// (`agent_state`: the configured agent's `agent.writable`) and `shell.hide`.
    pub fn for_commands(&self, agent_state: &[PathBuf]) -> Vec<PathBuf> {
        let names: Vec<&str> = SECRETS.iter().chain(AGENT_STATE).copied().collect();
        let extra: Vec<PathBuf> = self.extra.iter().chain(agent_state).cloned().collect();
        self.paths(&names, &extra, &[])
    }

    /// For the agent: the credential stores and `shell.hide`, not its own
    /// state. The agent of a run with a home of its own keeps its state there,
    /// and the user's agents' state (their logins, their hooks) is hidden from it.
    pub fn for_agent(&self, own_state: &[PathBuf]) -> Vec<PathBuf> {
        if self.own_home {
            let names: Vec<&str> = SECRETS.iter().chain(AGENT_STATE).copied().collect();
            return self.paths(&names, &self.extra, own_state);
        }
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
        let mut out = paths(&self.homes, names, extra, &self.reveal, keep);
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

        let homes = [home.clone()];
        let got = paths(
            &homes,
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
            &homes,
            &names,
            &[],
            &[home.join(".aws")],
            &[home.join(".claude")],
        );
        assert_eq!(got, vec![home.join(".netrc"), home.join(".ssh")]);
        assert!(paths(&[], SECRETS, &[], &[], &[]).is_empty());
        assert!(paths(&[], &[], &[PathBuf::from("/")], &[], &[]).is_empty());
    }

    #[test]
    fn a_path_inside_a_cover_is_dropped_unless_something_between_is_bound_back() {
        let p = |s: &str| PathBuf::from(s);
        let hidden = vec![
            p("/data"),
            p("/data/t/home"),
            p("/h/.ssh"),
            p("/data/t/home/.ssh"),
        ];
        assert_eq!(outermost(hidden.clone(), &[]), [p("/data"), p("/h/.ssh")]);
        assert_eq!(
            outermost(hidden, &[p("/data/t/home")]),
            [
                p("/data"),
                p("/data/t/home"),
                p("/h/.ssh"),
                p("/data/t/home/.ssh")
            ]
        );
    }
}
