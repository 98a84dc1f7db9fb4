//! `loopbox-server.toml`: the server's own config. `[server]` (where it
//! listens, its data directory, how many runs it drives at once, the bounds of
//! a request), `[engine]` (the one Wasm engine every run shares), and one
//! `[tenants.NAME]` per tenant: its workspace roots, its agent's home, its
//! quotas, and the agent credentials its `agent.pass_env` may name.
//!
//! Unknown keys are errors (serde's `deny_unknown_fields`) and every error
//! names the file and the line: toml's own errors carry it, and the checks
//! serde cannot express find the line of the table they are about.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::wasm::runtime::EngineConfig;

/// The file `loopbox serve` reads from the current directory when `--config` is not given.
pub const SERVER_CONFIG_FILE: &str = "loopbox-server.toml";
/// Where the server listens unless told otherwise: this machine only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7300";

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantConfig>,
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// `HOST:PORT`; `--listen` overrides it.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// The URL people reach the server at (`https://loopbox.example.com` behind
    /// a reverse proxy): the `--server` of the `loopbox runs` commands the
    /// dashboard and the runs' messages print. Absent: `http://` and where it listens.
    #[serde(default)]
    pub url: Option<String>,
    /// The data directory (relative to the config file); `--data` overrides it.
    #[serde(default)]
    pub data: Option<PathBuf>,
    /// Runs driven at once, over all tenants.
    #[serde(default = "default_max_running")]
    pub max_running: u32,
    /// The largest request body the API reads.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// How long a dashboard sign-in lasts.
    #[serde(default = "default_session_hours")]
    pub session_hours: u32,
    /// Log streams (`GET /api/v1/runs/ID/log`) open at once, over all tenants.
    #[serde(default = "default_max_log_streams")]
    pub max_log_streams: u32,
    /// Connections open at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Connections open at once from one address, so that a flood from one
    /// client (signed in or not) cannot take every connection.
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: u32,
}

fn default_max_running() -> u32 {
    8
}
fn default_max_body_bytes() -> u64 {
    1 << 20
}
fn default_session_hours() -> u32 {
    12
}
fn default_max_log_streams() -> u32 {
    64
}
fn default_max_connections() -> u32 {
    512
}
fn default_max_connections_per_ip() -> u32 {
    64
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: None,
            url: None,
            data: None,
            max_running: default_max_running(),
            max_body_bytes: default_max_body_bytes(),
            session_hours: default_session_hours(),
            max_log_streams: default_max_log_streams(),
            max_connections: default_max_connections(),
            max_connections_per_ip: default_max_connections_per_ip(),
        }
    }
}

/// `[tenants.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The directories the tenant's runs may act in (a run's workspace is one of
    /// them or below one). Absolute, or relative to the config file.
    pub roots: Vec<PathBuf>,
    /// The home of the tenant's agent: its `HOME`, where its state (`~/.claude`,
    /// `~/.codex`, ...) lives and where `~/` leads in the tenant's config.
    /// Absent: `DATA/tenants/NAME/home`. Made (mode 0700) when missing.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// Directories outside the tenant's roots and home that its config may
    /// still name in `agent.writable` and run its agent from (a shared cache,
    /// an agent installed in the server user's home): what the operator gives,
    /// which the tenant's own config cannot.
    #[serde(default)]
    pub agent_paths: Vec<PathBuf>,
    /// `[tenants.NAME.network]`: private destinations the operator opens to
    /// the tenant's runs (its own rules must still name them), and ceilings
    /// its own `[network]` cannot raise.
    #[serde(default)]
    pub network: crate::exec::egress::guard::TenantNetwork,
    /// The tenant's runs driven at once.
    #[serde(default = "default_tenant_running")]
    pub max_running: u32,
    /// The tenant's runs waiting for a turn to be driven.
    #[serde(default = "default_tenant_queued")]
    pub max_queued: u32,
    /// Log streams (Server-Sent Events) the tenant's callers hold open at
    /// once, within `server.max_log_streams`: one tenant cannot take them all.
    #[serde(default = "default_tenant_streams")]
    pub max_log_streams: u32,
    /// Shell and prompt actions of all the tenant's runs in any hour (0: no limit).
    #[serde(default = "default_actions_per_hour")]
    pub actions_per_hour: u64,
    /// Agent turns and prompts of all the tenant's runs in any day (0: no limit).
    #[serde(default = "default_agent_turns_per_day")]
    pub agent_turns_per_day: u64,
    /// Dollars the agent turns of all the tenant's runs may cost in any 24
    /// hours, as reported or priced by each run's `[prices]` (absent: no limit).
    #[serde(default)]
    pub max_cost_usd_per_day: Option<f64>,
    /// Tokens (input, cached included, and output) they may use in any 24 hours.
    #[serde(default)]
    pub max_tokens_per_day: Option<u64>,
    /// Agent credentials: the values the tenant's `agent.pass_env` names (the
    /// server's own environment is never passed to a tenant's runs).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A file of `NAME=VALUE` lines with more of them; it must be this user's
    /// and mode 0600 (or stricter).
    #[serde(default)]
    pub env_file: Option<PathBuf>,
}

fn default_tenant_running() -> u32 {
    2
}
fn default_tenant_queued() -> u32 {
    50
}
fn default_tenant_streams() -> u32 {
    16
}
fn default_actions_per_hour() -> u64 {
    2000
}
fn default_agent_turns_per_day() -> u64 {
    500
}

/// A tenant's, a token's or a policy's name: 1 to 64 lower-case letters,
/// digits, `-` and `_` (it appears in paths, URLs and audit rows).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The line (1-based) of `[header]` in `text`, for an error about that table.
fn line_of(text: &str, header: &str) -> Option<usize> {
    let want = format!("[{header}]");
    text.lines()
        .position(|l| l.split('#').next().unwrap_or("").trim() == want)
        .map(|i| i + 1)
}

impl ServerConfig {
    /// Parse `text` (the contents of `origin`) and check what serde cannot;
    /// relative paths are made relative to `origin`'s directory.
    pub fn parse(text: &str, origin: &Path) -> Result<ServerConfig> {
        let mut config: ServerConfig = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .with_context(|| format!("invalid server config `{}`", origin.display()))?;
        let base = origin
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let absolute = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(d) = config.server.data.as_mut() {
            absolute(d);
        }
        for t in config.tenants.values_mut() {
            t.roots.iter_mut().for_each(absolute);
            t.agent_paths.iter_mut().for_each(absolute);
            if let Some(h) = t.home.as_mut() {
                absolute(h);
            }
            if let Some(f) = t.env_file.as_mut() {
                absolute(f);
            }
        }
        config
            .validate(text)
            .with_context(|| format!("invalid server config `{}`", origin.display()))?;
        Ok(config)
    }

    /// Read the config at `path` (at most 1 MiB, a regular file).
    pub fn load(path: &Path) -> Result<ServerConfig> {
        let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "server config")?;
        ServerConfig::parse(&text, path)
    }

    fn validate(&self, text: &str) -> Result<()> {
        let s = &self.server;
        let at = |header: &str| {
            line_of(text, header)
                .map(|l| format!("line {l}: "))
                .unwrap_or_default()
        };
        let range = |key: &str, v: u64, lo: u64, hi: u64| -> Result<()> {
            if !(lo..=hi).contains(&v) {
                bail!(
                    "{}server.{key} = {v} is out of range: give {lo} to {hi}",
                    at("server")
                );
            }
            Ok(())
        };
        if let Some(url) = &s.url {
            super::url::check(url)
                .map_err(|e| anyhow::anyhow!("{}server.url: {e}", at("server")))?;
        }
        range("max_running", s.max_running.into(), 1, 10_000)?;
        range("max_body_bytes", s.max_body_bytes, 1024, 256 << 20)?;
        range("session_hours", s.session_hours.into(), 1, 24 * 90)?;
        range("max_log_streams", s.max_log_streams.into(), 1, 100_000)?;
        range("max_connections", s.max_connections.into(), 4, 1_000_000)?;
        range(
            "max_connections_per_ip",
            s.max_connections_per_ip.into(),
            1,
            1_000_000,
        )?;
        self.engine
            .validate()
            .map_err(|e| anyhow::anyhow!("{}{e}", at("engine")))?;
        for (name, t) in &self.tenants {
            let header = format!("tenants.{name}");
            let at = at(&header);
            if !valid_name(name) {
                bail!(
                    "{at}[tenants.{name}]: a tenant's name is 1 to 64 lower-case letters, digits, `-` and `_`"
                );
            }
            if t.roots.is_empty() {
                bail!(
                    "{at}tenants.{name}.roots is empty: give the directories the tenant's runs may act in"
                );
            }
            if t.max_running == 0 {
                bail!(
                    "{at}tenants.{name}.max_running = 0 would never run anything: give at least 1"
                );
            }
            if t.max_log_streams == 0 {
                bail!(
                    "{at}tenants.{name}.max_log_streams = 0 would refuse every log stream: give at least 1"
                );
            }
            t.network
                .check(&format!("tenants.{name}.network"))
                .map_err(|e| anyhow::anyhow!("{at}{e}"))?;
            crate::spend::budget::SpendBudget {
                max_cost_usd: t.max_cost_usd_per_day,
                max_tokens: t.max_tokens_per_day,
                ..Default::default()
            }
            .validate(&format!("tenants.{name}"))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{at}{}",
                    e.replace(".max_cost_usd =", ".max_cost_usd_per_day =")
                        .replace(".max_tokens =", ".max_tokens_per_day =")
                )
            })?;
            for key in t.env.keys() {
                if !valid_env_name(key) {
                    bail!(
                        "{at}tenants.{name}.env: `{}` is not a variable name (letters, digits and `_`, not starting with a digit)",
                        key.escape_debug()
                    );
                }
            }
        }
        Ok(())
    }
}

/// An environment variable's name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Read an env file of `NAME=VALUE` lines (blank lines and `#` comments
/// skipped; a value may be wrapped in one pair of `"` or `'`). It holds
/// secrets, so it must be this user's, a regular file, and readable by no one
/// else (mode 0600 or stricter).
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("env file `{}` cannot be read", path.display()))?;
    // SAFETY: getuid(2) cannot fail.
    let me = unsafe { libc::getuid() };
    if !meta.file_type().is_file() {
        bail!(
            "env file `{}` is {}, not a regular file",
            path.display(),
            crate::files::describe(meta.file_type())
        );
    }
    if meta.uid() != me || meta.mode() & 0o077 != 0 {
        bail!(
            "env file `{}` holds credentials but is mode {:04o} (owner uid {}): it must be yours and readable by you alone; `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o7777,
            meta.uid(),
            path.display()
        );
    }
    let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "env file")?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            bail!(
                "env file `{}` line {}: expected NAME=VALUE",
                path.display(),
                i + 1
            );
        };
        let name = name.trim();
        if !valid_env_name(name) {
            bail!(
                "env file `{}` line {}: `{}` is not a variable name",
                path.display(),
                i + 1,
                name.escape_debug()
            );
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        out.insert(name.to_string(), unquoted.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        format!(
            "{:#}",
            ServerConfig::parse(text, Path::new("/etc/loopbox/loopbox-server.toml")).unwrap_err()
        )
    }

    #[test]
    fn a_full_config_parses_with_paths_made_absolute() {
        let c = ServerConfig::parse(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata = \"data\"\nmax_running = 3\n\
             [tenants.alpha]\nroots = [\"/srv/alpha\", \"rel\"]\nmax_queued = 7\nenv = { ANTHROPIC_API_KEY = \"k\" }\nenv_file = \"alpha.env\"\n",
            Path::new("/etc/loopbox/loopbox-server.toml"),
        )
        .unwrap();
        assert_eq!(
            c.server.data.as_deref(),
            Some(Path::new("/etc/loopbox/data"))
        );
        assert_eq!(c.server.max_running, 3);
        let a = &c.tenants["alpha"];
        assert_eq!(
            a.roots,
            [PathBuf::from("/srv/alpha"), "/etc/loopbox/rel".into()]
        );
        assert_eq!((a.max_running, a.max_queued), (2, 7));
        assert_eq!(a.env["ANTHROPIC_API_KEY"], "k");
        assert_eq!(
            a.env_file.as_deref(),
            Some(Path::new("/etc/loopbox/alpha.env"))
        );
    }

    #[test]
    fn each_bad_key_is_named_with_the_file_and_its_line() {
        let e = err("[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n");
        assert!(
            e.contains("/etc/loopbox/loopbox-server.toml")
                && e.contains("line 3")
                && e.contains("unknown field `lisen`"),
            "{e}"
        );
        let e = err("[tenants.a]\nroots = [\"/x\"]\nmax_runing = 2\n");
        assert!(
            e.contains("line 3") && e.contains("unknown field `max_runing`"),
            "{e}"
        );
        let e = err("\n[server]\nmax_running = 0\n");
        assert!(
            e.contains("line 2: server.max_running = 0 is out of range"),
            "{e}"
        );
        let e = err("[tenants.Alpha]\nroots = [\"/x\"]\n");
        assert!(
            e.contains("line 1: [tenants.Alpha]: a tenant's name"),
            "{e}"
        );
        let e = err("\n\n[tenants.a]\nroots = []\n");
        assert!(e.contains("line 3: tenants.a.roots is empty"), "{e}");
        let e = err("[tenants.a]\nroots = [\"/x\"]\nenv = { \"A-B\" = \"1\" }\n");
        assert!(e.contains("`A-B` is not a variable name"), "{e}");
        let e = err("[server]\nlisten = \"nowhere\"\n");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn an_env_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.env");
        std::fs::write(&f, "# keys\nA=1\nexport_B = \"two\"\n\nC='x=y'\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = format!("{:#}", read_env_file(&f).unwrap_err());
        assert!(e.contains("mode 0640") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let env = read_env_file(&f).unwrap();
        assert_eq!(env["A"], "1");
        assert_eq!(env["export_B"], "two");
        assert_eq!(env["C"], "x=y");
        std::fs::write(&f, "A=1\nnot a line\n").unwrap();
        let e = format!("{:#}", read_env_file(&f).unwrap_err());
        assert!(e.contains("line 2: expected NAME=VALUE"), "{e}");
    }
}
