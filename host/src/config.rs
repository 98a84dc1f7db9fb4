//! `loopbox.toml`: the user's grants and limits. Everything a policy may do is
//! decided here; a key that is absent grants nothing.
//!
//! This file is the assembly: [`Config`] puts together the sections each part
//! owns beside its code (`[shell]` and `[agent]` in [`crate::exec::config`],
//! `[workspace]` in [`crate::caps::workspace`], `[confirm]` and `[approvals]` in
//! [`crate::exec::confirm`], `[limits]` in
//! [`crate::limits`], `[engine]` in [`crate::wasm::runtime`], `[trust]` and
//! `[policies.NAME]` in [`crate::dist::admit`], `[prices]` and the run's spend
//! budgets in [`crate::spend`]), and keeps what is the file's
//! own: parsing, `[run]`, the digest the trust store approves, and scoping a
//! policy's section under the top level's safety settings ([`Config::scoped`]).
//!
//! Unknown keys and bad values are errors that name the key (serde with
//! `deny_unknown_fields`, plus `validate` for ranges serde cannot express).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::caps::mcp::McpConfig;
use crate::caps::workspace::WorkspaceConfig;
use crate::caps::worktree::WorktreeConfig;
use crate::dist::admit::{PolicyEntry, TrustConfig};
use crate::exec::config::{AgentConfig, ShellConfig};
use crate::exec::confirm::{ApprovalsConfig, ConfirmConfig};
use crate::exec::egress::NetworkConfig;
use crate::limits::Limits;
use crate::spend::budget::SpendBudget;
use crate::spend::price::Prices;
use crate::wasm::runtime::EngineConfig;

pub use crate::files::CONFIG_FILE;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub shell: ShellConfig,
    #[serde(default)]
    pub agent: Option<AgentConfig>,
    /// `[agents.NAME]` as written: read by [`crate::exec::config::resolve_profiles`]
    /// into [`Config::profiles`].
    #[serde(default, skip_serializing)]
    pub agents: std::collections::BTreeMap<String, toml::Table>,
    /// The named agent profiles a prompt may pick (`prompt-request.profile`),
    /// each resolved to a whole agent section. Pinned under `agents`.
    #[serde(
        skip_deserializing,
        rename = "agents",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub profiles: std::collections::BTreeMap<String, AgentConfig>,
    #[serde(default)]
    pub run: RunConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    /// `[policies.NAME]`: policies the user installed, each with its own grants.
    #[serde(default)]
    pub policies: std::collections::BTreeMap<String, PolicyEntry>,
    /// `[trust]`: whose signatures installed policies may carry.
    #[serde(default)]
    pub trust: TrustConfig,
    /// `[workspace]`: what policies named by path may read (all of it when absent).
    #[serde(default)]
    pub workspace: WorkspaceConfig,
    /// `[worktree]`: git worktrees the host makes for a policy (none when absent).
    /// Left out of a run's pin when absent, so runs pinned before it existed resume.
    #[serde(default, skip_serializing_if = "WorktreeConfig::is_default")]
    pub worktree: WorktreeConfig,
    /// `[mcp]`: MCP servers and the tools a policy may call (none when absent).
    /// Left out of a run's pin when absent, as `[worktree]` is.
    #[serde(default, skip_serializing_if = "McpConfig::is_default")]
    pub mcp: McpConfig,
    /// `[confirm]`: what an ask-tier action does with nobody at a terminal (wait
    /// for an approval, or decline). Left out of a run's pin when default.
    #[serde(default, skip_serializing_if = "ConfirmConfig::is_default")]
    pub confirm: ConfirmConfig,
    /// `[approvals]`: how long a pending approval waits, and whether the run's
    /// starter may decide it. Top level only. Left out of a run's pin when default.
    #[serde(default, skip_serializing_if = "ApprovalsConfig::is_default")]
    pub approvals: ApprovalsConfig,
    /// `[network]`: where commands and the agent may connect, through loopbox's
    /// proxy. Left out of a run's pin when default, so runs pinned before it resume.
    #[serde(default, skip_serializing_if = "NetworkConfig::is_default")]
    pub network: NetworkConfig,
    /// `[prices]`: dollars per million tokens per model, for agents that report
    /// tokens but no cost (see [`crate::spend::price`]). Left out of a run's pin when empty.
    #[serde(default, skip_serializing_if = "Prices::is_empty")]
    pub prices: Prices,
}

/// `[run]`: the standalone driver.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Agent turns one run may take before it is stopped.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Journal every host call so a crashed run resumes without redoing finished
    /// actions. Off trades that away for one fewer disk sync per action.
    #[serde(default = "default_true")]
    pub journal: bool,
    /// Dollars the run's agent turns may cost (`run.max_cost_usd`); no turn
    /// starts once they have. Left out of a run's pin when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tokens the run's agent turns may use (`run.max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Where each budget was set, when a policy's `[policies.NAME.run]`
    /// narrowed it (for the messages); not read from the file.
    #[serde(skip)]
    pub budget_sections: (Option<String>, Option<String>),
}

impl RunConfig {
    /// `run.max_cost_usd` and `run.max_tokens`, named by the section each came from.
    pub fn budget(&self) -> SpendBudget {
        SpendBudget {
            max_cost_usd: self.max_cost_usd,
            max_tokens: self.max_tokens,
            cost_section: self.budget_sections.0.clone(),
            tokens_section: self.budget_sections.1.clone(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_max_turns() -> u32 {
    50
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            max_turns: default_max_turns(),
            journal: true,
            max_cost_usd: None,
            max_tokens: None,
            budget_sections: (None, None),
        }
    }
}

/// The blake3 of a config's bytes, as the trust store records approvals.
pub fn digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What [`Config::discover_hashed`] found: the config, its file (None: no file,
/// the defaults) and the blake3 of the bytes parsed.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub config: Config,
    pub path: Option<PathBuf>,
    pub blake3: Option<String>,
}

/// How strong a sandbox choice is: `none` < `landlock` < `auto` (bubblewrap
/// where it works, else Landlock) < `bwrap`.
fn sandbox_strength(c: crate::exec::sandbox::SandboxChoice) -> u8 {
    use crate::exec::sandbox::SandboxChoice as S;
    match c {
        S::None => 0,
        S::Landlock => 1,
        S::Auto => 2,
        S::Bwrap => 3,
    }
}

/// The smaller of two limits where 0 means none.
fn min_limit(top: u64, policy: u64) -> u64 {
    match (top, policy) {
        (0, p) => p,
        (t, 0) => t,
        (t, p) => t.min(p),
    }
}

/// `[policies.NAME].shell` under the top level's safety settings (`top`); see
/// [`Config::scoped`].
fn bound_by(top: &ShellConfig, entry: &PolicyEntry, name: &str) -> Result<ShellConfig> {
    let own = &entry.shell;
    let set = |key: &str| entry.shell_keys.contains(key);
    let key = |k: &str| format!("policies.{name}.shell.{k}");
    let widen = "a policy's section can narrow the top level's safety settings, never widen them";
    let mut shell = ShellConfig {
        section: Some(format!("policies.{name}.shell")),
        ..own.clone()
    };
    shell.sandbox = if !set("sandbox") {
        top.sandbox
    } else if sandbox_strength(own.sandbox) < sandbox_strength(top.sandbox) {
        bail!(
            "{} = \"{}\" is weaker than the top-level shell.sandbox = \"{}\": {widen}; remove it, or choose one at least as strong",
            key("sandbox"),
            own.sandbox.name(),
            top.sandbox.name()
        );
    } else {
        own.sandbox
    };
    if own.unix_sockets && !top.unix_sockets {
        bail!(
            "{} = true, but the top-level [shell] has unix_sockets off: {widen}; remove it, or turn unix_sockets on at the top level",
            key("unix_sockets")
        );
    }
    if let Some(p) = own.reveal.iter().find(|p| !top.reveal.contains(p)) {
        bail!(
            "{}: `{}` is not in the top-level shell.reveal: {widen}; remove it, or reveal it at the top level",
            key("reveal"),
            p.escape_debug()
        );
    }
    for rule in &top.deny {
        if !shell.deny.contains(rule) {
            shell.deny.push(rule.clone());
        }
    }
    for path in &top.hide {
        if !shell.hide.contains(path) {
            shell.hide.push(path.clone());
        }
    }
    let bound = |k: &str, top: u64, own: u64| if set(k) { min_limit(top, own) } else { top };
    shell.tmp_bytes = bound("tmp_bytes", top.tmp_bytes, own.tmp_bytes);
    shell.max_timeout_ms = if set("max_timeout_ms") {
        top.max_timeout_ms.min(own.max_timeout_ms)
    } else {
        top.max_timeout_ms
    };
    shell.default_timeout_ms = shell.default_timeout_ms.min(shell.max_timeout_ms);
    let (t, o, r) = (&top.rlimits, &own.rlimits, &mut shell.rlimits);
    r.cpu_seconds = bound("rlimits.cpu_seconds", t.cpu_seconds, o.cpu_seconds);
    r.address_space_bytes = bound(
        "rlimits.address_space_bytes",
        t.address_space_bytes,
        o.address_space_bytes,
    );
    r.processes = bound("rlimits.processes", t.processes, o.processes);
    r.file_size_bytes = bound(
        "rlimits.file_size_bytes",
        t.file_size_bytes,
        o.file_size_bytes,
    );
    r.open_files = bound("rlimits.open_files", t.open_files, o.open_files);
    Ok(shell)
}

impl Config {
    /// Parse `text` (the contents of `origin`), then check what serde cannot.
    pub fn parse(text: &str, origin: &Path) -> Result<Config> {
        let mut config: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .with_context(|| format!("invalid config `{}`", origin.display()))?;
        // Which keys each policy's shell section sets: what it leaves out comes from the top level.
        if let Ok(raw) = text.parse::<toml::Table>()
            && let Some(policies) = raw.get("policies").and_then(toml::Value::as_table)
        {
            for (name, entry) in config.policies.iter_mut() {
                let shell = policies
                    .get(name)
                    .and_then(|p| p.get("shell"))
                    .and_then(toml::Value::as_table);
                for (key, value) in shell.into_iter().flatten() {
                    entry.shell_keys.insert(key.clone());
                    for sub in value.as_table().into_iter().flat_map(|t| t.keys()) {
                        entry.shell_keys.insert(format!("{key}.{sub}"));
                    }
                }
            }
        }
        let agents = config.agent.iter_mut().chain(
            config
                .policies
                .values_mut()
                .filter_map(|p| p.agent.as_mut()),
        );
        for agent in agents {
            agent
                .apply_preset()
                .with_context(|| format!("invalid config `{}`", origin.display()))?;
        }
        if !config.agents.is_empty() {
            let raw_agent = text
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("agent").and_then(toml::Value::as_table).cloned());
            config.profiles = crate::exec::config::resolve_profiles(
                raw_agent.as_ref(),
                &config.agents,
                &config.shell.unsafe_env,
            )
            .with_context(|| format!("invalid config `{}`", origin.display()))?;
        }
        config
            .validate()
            .with_context(|| format!("invalid config `{}`", origin.display()))?;
        Ok(config)
    }

    /// Read `path`; a missing file is an error (the user named it).
    pub fn load(path: &Path) -> Result<Config> {
        let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "config")?;
        Config::parse(&text, path)
    }

    /// `--config PATH` when given, else `loopbox.toml` in the workspace if present, else defaults.
    pub fn discover(
        explicit: Option<&Path>,
        workspace: &Path,
    ) -> Result<(Config, Option<PathBuf>)> {
        let found = Config::discover_hashed(explicit, workspace)?;
        Ok((found.config, found.path))
    }

    /// As [`Config::discover`], with the blake3 of the exact bytes parsed, which
    /// the trust store checks before a run or a hook obeys the file.
    pub fn discover_hashed(explicit: Option<&Path>, workspace: &Path) -> Result<Discovered> {
        let read = |path: &Path| -> Result<Discovered> {
            let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "config")?;
            Ok(Discovered {
                config: Config::parse(&text, path)?,
                path: Some(path.to_path_buf()),
                blake3: Some(digest(text.as_bytes())),
            })
        };
        if let Some(path) = explicit {
            return read(path);
        }
        let path = workspace.join(CONFIG_FILE);
        // Absent means defaults; anything else that is not a readable regular file
        // (a directory, a FIFO, a device, a dangling symlink) is an error, never
        // silently the defaults.
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Discovered {
                config: Config::default(),
                path: None,
                blake3: None,
            }),
            Err(e) => Err(anyhow::anyhow!(
                "config `{}` cannot be read: {e}",
                path.display()
            )),
            Ok(m) if m.file_type().is_symlink() && std::fs::metadata(&path).is_err() => {
                Err(anyhow::anyhow!(
                    "config `{}` is a symbolic link to `{}`, which does not exist; fix or remove the link",
                    path.display(),
                    std::fs::read_link(&path)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default()
                ))
            }
            Ok(_) => read(&path),
        }
    }

    /// The config a policy installed as `[policies.NAME]` runs under: its own
    /// `shell` and `agent`, the shared `limits`, `run` and `engine`, and its entry
    /// (for its digest) as the only one in `policies`.
    ///
    /// The top level's safety settings bind it: its `hide` and `deny` are added to
    /// the section's; the section's `sandbox` may be stronger, never weaker (left
    /// out, it is the top level's); `rlimits`, `tmp_bytes` and `max_timeout_ms` are
    /// the smaller of the two (left out, the top level's); `reveal` may name only
    /// what the top level reveals, and `unix_sockets` only where the top level has
    /// them on. A section that tries to widen one of these is refused, naming the key.
    pub fn scoped(&self, name: &str) -> Result<Config> {
        let Some(entry) = self.policies.get(name) else {
            bail!("there is no [policies.{name}] in the config");
        };
        let shell = bound_by(&self.shell, entry, name)?;
        let mut run = self.run.clone();
        if let Some(own) = &entry.run {
            let b = own.within(&self.run.budget(), &format!("policies.{name}.run"));
            run.max_cost_usd = b.max_cost_usd;
            run.max_tokens = b.max_tokens;
            run.budget_sections = (b.cost_section, b.tokens_section);
        }
        Ok(Config {
            limits: self.limits.clone(),
            shell,
            agent: entry.agent.clone(),
            // A policy's section has no profiles of its own: none granted.
            agents: Default::default(),
            profiles: Default::default(),
            run,
            engine: self.engine.clone(),
            policies: [(name.to_string(), entry.clone())].into(),
            trust: self.trust.clone(),
            workspace: entry.workspace.clone(),
            // An installed policy's section has no `[worktree]` or `[mcp]`: none granted.
            worktree: WorktreeConfig::default(),
            mcp: McpConfig::default(),
            // Its own `[policies.NAME.confirm]`, else the top level's.
            confirm: entry.confirm.unwrap_or(self.confirm),
            approvals: self.approvals.clone(),
            prices: self.prices.clone(),
            // Its own `[policies.NAME.network]` (nothing when absent); the top
            // level's denials bind it too.
            network: {
                let mut n = entry.network.clone().unwrap_or_default();
                n.deny.extend(self.network.deny.iter().cloned());
                n
            },
        })
    }

    fn validate(&self) -> Result<()> {
        // The shared sections, once; then the grants of the top level and of each policy.
        self.limits.validate()?;
        self.engine.validate()?;
        if self.run.max_turns == 0 {
            bail!("run.max_turns must be at least 1");
        }
        self.run
            .budget()
            .validate("run")
            .map_err(anyhow::Error::msg)?;
        crate::spend::price::validate(&self.prices).map_err(anyhow::Error::msg)?;
        self.validate_grants()?;
        self.trust.validate()?;
        for (name, entry) in &self.policies {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !ok {
                bail!(
                    "[policies.{name}]: a policy's name is 1 to 64 lower-case letters, digits, `-` and `_`"
                );
            }
            entry.validate(name)?;
            if let Some(b) = &entry.run {
                b.validate(&format!("policies.{name}.run"))
                    .map_err(anyhow::Error::msg)?;
            }
            self.scoped(name)?
                .validate_grants()
                .with_context(|| format!("in [policies.{name}]"))?;
        }
        Ok(())
    }

    /// The checks of `shell` and `agent`, for the top level or one policy.
    fn validate_grants(&self) -> Result<()> {
        self.workspace.validate()?;
        self.worktree.validate()?;
        self.mcp.validate()?;
        self.shell.validate()?;
        self.network
            .check(&self.shell.sibling("network"))
            .map_err(anyhow::Error::msg)?;
        if let Some(agent) = &self.agent {
            agent.validate(&self.shell.unsafe_env)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::config::AgentOutput;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("loopbox.toml"))
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn hide_reveal_and_tmp_bytes_stay_out_of_an_older_pin() {
        let c = parse(
            "[shell]\nhide = [\"~/secrets\", \"/opt/keys\", \".env\"]\nreveal = [\"~/.ssh\"]\n",
        )
        .unwrap();
        assert_eq!(c.shell.hide, ["~/secrets", "/opt/keys", ".env"]);
        assert_eq!(c.shell.reveal, ["~/.ssh"]);
        for bad in [
            "hide = [\"../x\"]",
            "reveal = [\"\"]",
            "hide = [\"/a/../b\"]",
        ] {
            let e = err(&format!("[shell]\n{bad}\n"));
            assert!(e.contains("is not a path loopbox can hide"), "{e}");
        }
        // A run pinned before these keys existed compares equal when they are unset.
        let shell = serde_json::to_value(&parse("").unwrap().shell).unwrap();
        for key in ["hide", "reveal", "tmp_bytes"] {
            assert!(shell.get(key).is_none(), "{key}: {shell}");
        }
        let shell =
            serde_json::to_value(&parse("[shell]\ntmp_bytes = 5\n").unwrap().shell).unwrap();
        assert_eq!(shell["tmp_bytes"], 5);
    }

    #[test]
    fn a_policy_section_is_bound_by_the_top_levels_safety_settings() {
        let c = parse(
            "[shell]\nsandbox = \"bwrap\"\ntmp_bytes = 1000\nhide = [\".env\"]\ndeny = [[\"rm\"]]\nmax_timeout_ms = 5000\n\
             [shell.rlimits]\ncpu_seconds = 10\nfile_size_bytes = 0\n\
             [policies.p]\nsource = \"p.wasm\"\n\
             [policies.p.shell]\ntmp_bytes = 5000\nhide = [\"~/k\"]\nmax_timeout_ms = 9000\n\
             [policies.p.shell.rlimits]\nfile_size_bytes = 77\n",
        )
        .unwrap();
        let s = c.scoped("p").unwrap().shell;
        // Left out of the section: the top level's, not the default.
        assert_eq!(s.sandbox, crate::exec::sandbox::SandboxChoice::Bwrap);
        assert_eq!(s.rlimits.cpu_seconds, 10);
        // Set in both: the smaller (0 is no limit).
        assert_eq!(s.tmp_bytes, 1000);
        assert_eq!(s.max_timeout_ms, 5000);
        assert_eq!(s.rlimits.file_size_bytes, 77);
        // Added to the section's.
        assert_eq!(s.hide, ["~/k", ".env"]);
        assert_eq!(s.deny, [["rm"]]);
        assert_eq!(s.section(), "policies.p.shell");
        // A stronger sandbox in the section stands.
        let c =
            parse("[policies.p]\nsource = \"p.wasm\"\n[policies.p.shell]\nsandbox = \"bwrap\"\n")
                .unwrap();
        assert_eq!(
            c.scoped("p").unwrap().shell.sandbox,
            crate::exec::sandbox::SandboxChoice::Bwrap
        );
    }

    #[test]
    fn empty_config_grants_nothing() {
        let c = parse("").unwrap();
        assert!(c.shell.allow.is_empty());
        assert!(!c.shell.scripts);
        assert!(c.agent.is_none());
        assert_eq!(c.run.max_turns, 50);
    }

    #[test]
    fn unknown_keys_are_named() {
        assert!(
            err("[shell]\nallowed = []").contains("unknown field `allowed`"),
            "{}",
            err("[shell]\nallowed = []")
        );
        assert!(err("[nope]").contains("unknown field `nope`"));
        assert!(err("[limits]\nfuel = 1").contains("unknown field `fuel`"));
    }

    #[test]
    fn bad_values_are_named() {
        assert!(err("[shell]\nscripts = \"yes\"").contains("scripts"));
        assert!(err("[shell]\nallow = [[]]").contains("shell.allow[0]"));
        assert!(err("[agent]\ncommand = [\"claude\"]").contains("{prompt}"));
        assert!(err("[run]\nmax_turns = 0").contains("run.max_turns"));
        assert!(err("[limits]\nmemory_bytes = 1").contains("limits.memory_bytes"));
        assert!(err("not toml").contains("loopbox.toml"));
    }

    #[test]
    fn a_full_config_parses() {
        let c = parse(
            r#"
            [limits]
            fuel_per_event = 1000000
            [shell]
            allow = [["cargo", "test"]]
            scripts = true
            [agent]
            command = ["claude", "-p", "{prompt}", "--output-format", "json"]
            resume = ["--resume", "{session}"]
            output = "json"
            [run]
            max_turns = 5
            "#,
        )
        .unwrap();
        assert_eq!(c.limits.fuel_per_event, 1_000_000);
        assert_eq!(c.agent.unwrap().output, AgentOutput::Json);
    }
}
