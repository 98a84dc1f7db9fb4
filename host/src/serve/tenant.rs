//! Tenants: each one's canonical workspace roots, its agent's home, its
//! quotas, its agent credentials, and what its runs must never see (the other
//! tenants' roots and homes, and the data directory).
//!
//! A tenant's agent keeps its state (`~/.claude`, `~/.claude.json`, `~/.codex`,
//! `~/.gemini`) in a home of its own, `DATA/tenants/NAME/home` or the
//! operator's `tenants.NAME.home`: its `HOME`, and where `~/` leads in the
//! tenant's config. Never the server user's, whose agents' hooks and logins
//! would otherwise be every tenant's. A tenant's config names writable paths
//! and agent programs only inside its roots and that home, or in what the
//! operator's `tenants.NAME.agent_paths` adds.
//!
//! A run's workspace is resolved here: the path a caller gives is canonicalized
//! (links followed) and must then lie inside one of the tenant's roots, so a
//! link planted in a root cannot lead a run out of it. Roots of two tenants
//! may not overlap. The server's own files that hold every tenant's
//! credentials (its config file, with each `tenants.T.env`, and every
//! `env_file`) are hidden from every tenant's runs, as the data directory is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use super::config::{ServerConfig, TenantConfig, read_env_file};
use super::data::{resolved, within};

/// One tenant, as the server config made it.
#[derive(Debug)]
pub struct Tenant {
    pub name: String,
    /// Canonical, each an existing directory.
    pub roots: Vec<PathBuf>,
    pub max_running: u32,
    pub max_queued: u32,
    /// Log streams its callers may hold open at once (`tenants.NAME.max_log_streams`).
    pub max_log_streams: u32,
    pub actions_per_hour: u64,
    pub agent_turns_per_day: u64,
    /// `max_cost_usd_per_day` and `max_tokens_per_day`: what all its runs'
    /// agent turns may spend in any 24 hours.
    pub max_cost_usd_per_day: Option<f64>,
    pub max_tokens_per_day: Option<u64>,
    /// Its agent's home: canonical, this user's, mode 0700.
    pub home: PathBuf,
    /// `tenants.NAME.agent_paths`, canonical: what its config may name besides
    /// its roots and home.
    pub agent_paths: Vec<PathBuf>,
    /// `[tenants.NAME.network]`: the private destinations its operator
    /// opened to it, and the ceilings on its own `[network]`.
    pub network: crate::exec::egress::guard::TenantNetwork,
    /// Agent credentials: `env`, then the `env_file`'s (which win).
    pub env: BTreeMap<String, String>,
    /// What the tenant's commands and agent never see: `theirs`, the server's
    /// files holding credentials, and the component cache.
    pub hidden: Vec<PathBuf>,
    /// Where no policy of the tenant may be loaded from: the other tenants'
    /// roots and the data directory.
    pub theirs: Vec<PathBuf>,
}

/// Every tenant of the server, by name.
#[derive(Debug, Default)]
pub struct Tenants {
    map: BTreeMap<String, Arc<Tenant>>,
}

/// The canonical roots of every tenant in `config`, each checked to be an
/// existing directory, no two tenants' overlapping.
pub fn roots(config: &ServerConfig) -> Result<Vec<(String, PathBuf)>> {
    let mut all: Vec<(String, PathBuf)> = Vec::new();
    for (name, t) in &config.tenants {
        for r in &t.roots {
            let canon = r.canonicalize().with_context(|| {
                format!("tenants.{name}.roots: `{}` cannot be used", r.display())
            })?;
            if !canon.is_dir() {
                bail!("tenants.{name}.roots: `{}` is not a directory", r.display());
            }
            if canon == Path::new("/") {
                bail!("tenants.{name}.roots: `/` would give the tenant the whole machine");
            }
            for (other, o) in &all {
                if other != name && (within(&canon, o) || within(o, &canon)) {
                    bail!(
                        "tenants.{name}.roots: `{}` overlaps `{}`, a root of tenant `{other}`: each tenant's runs may see its own roots only, so no two tenants may share a directory",
                        canon.display(),
                        o.display()
                    );
                }
            }
            all.push((name.clone(), canon));
        }
    }
    Ok(all)
}

impl Tenants {
    /// The tenants of `config` (see [`roots`]), their env files read;
    /// `data`, the config's own `file` and every tenant's `env_file` are
    /// hidden from all of them (each holds credentials of every tenant, or of one).
    pub fn load(config: &ServerConfig, data: &Path, file: Option<&Path>) -> Result<Tenants> {
        let all = roots(config)?;
        let server_files = server_files(config, file);
        let homes = homes(config, data, &all, &server_files)?;
        let mut map = BTreeMap::new();
        for (name, t) in &config.tenants {
            map.insert(
                name.clone(),
                Arc::new(tenant(name, t, &all, &homes, data, &server_files)?),
            );
        }
        Ok(Tenants { map })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.map.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// A tenant the config names, or an error listing those it does.
    pub fn named(&self, name: &str) -> Result<&Arc<Tenant>> {
        self.get(name).with_context(|| {
            let known: Vec<&str> = self.names().collect();
            format!(
                "there is no tenant `{name}` in the server config (it has: {}); add a [tenants.{name}] section",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )
        })
    }
}

/// The server's files no tenant's run may read: its config file (each
/// `tenants.T.env` is written there), every `env_file`, and the component
/// cache (every tenant's policies, compiled, and the registry store), as given
/// and where a link leads, so neither name reaches them from a sandbox.
fn server_files(config: &ServerConfig, file: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let cache = crate::wasm::cache::ComponentCache::default_dir(config.engine.cache_dir.as_deref());
    let given = file
        .into_iter()
        .chain(
            config
                .tenants
                .values()
                .filter_map(|t| t.env_file.as_deref()),
        )
        .chain([cache.as_path()]);
    for f in given {
        let absolute = std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf());
        for p in [Some(absolute), f.canonicalize().ok()]
            .into_iter()
            .flatten()
        {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Each tenant's agent home: `tenants.NAME.home`, else
/// `DATA/tenants/NAME/home`; made (0700) when missing. Refused: an operator's
/// home inside the data directory, one that is or holds the server user's home,
/// the data directory or the server's config, and one that overlaps another
/// tenant's root or home (whose commands or agent would write its state).
fn homes(
    config: &ServerConfig,
    data: &Path,
    roots: &[(String, PathBuf)],
    server_files: &[PathBuf],
) -> Result<Vec<(String, PathBuf)>> {
    let users = crate::exec::sandbox::hide::user_homes();
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for (name, t) in &config.tenants {
        let key = format!("tenants.{name}.home");
        let path = match &t.home {
            Some(h) if within(&resolved(h), data) => bail!(
                "{key}: `{}` is inside the data directory `{}`; leave {key} out for `DATA/tenants/{name}/home`, or name a directory outside it",
                h.display(),
                data.display()
            ),
            Some(h) => h.clone(),
            None => data.join("tenants").join(name).join("home"),
        };
        let real = resolved(&path);
        if let Some(u) = users.iter().find(|u| within(u, &real)) {
            bail!(
                "{key}: `{}` is or holds `{}`, the server user's home, whose agents' state the tenant's agent would write; name a directory of the tenant's own",
                real.display(),
                u.display()
            );
        }
        if let Some(f) = [data.to_path_buf()]
            .iter()
            .chain(server_files)
            .find(|f| within(&resolved(f), &real))
        {
            bail!(
                "{key}: `{}` holds `{}`, the server's own (its data or its config), which the tenant's agent would write; name a directory of the tenant's own",
                real.display(),
                f.display()
            );
        }
        let overlaps = |p: &Path| within(&real, p) || within(p, &real);
        if let Some((other, r)) = roots.iter().find(|(o, r)| o != name && overlaps(r)) {
            bail!(
                "{key}: `{}` overlaps `{}`, a root of tenant `{other}`, whose commands would write this tenant's agent's state; name a directory apart",
                real.display(),
                r.display()
            );
        }
        if let Some((other, h)) = out.iter().find(|(_, h)| overlaps(h)) {
            bail!(
                "{key}: `{}` overlaps `{}`, the home of tenant `{other}`; give each tenant a home of its own",
                real.display(),
                h.display()
            );
        }
        let home = super::data::private_dir(&path, &format!("tenant `{name}`'s home"))
            .with_context(|| key.clone())?;
        out.push((name.clone(), home));
    }
    Ok(out)
}

fn tenant(
    name: &str,
    t: &TenantConfig,
    all: &[(String, PathBuf)],
    homes: &[(String, PathBuf)],
    data: &Path,
    server_files: &[PathBuf],
) -> Result<Tenant> {
    let mut env = t.env.clone();
    if let Some(f) = &t.env_file {
        env.extend(read_env_file(f).with_context(|| format!("tenants.{name}.env_file"))?);
    }
    let home = homes
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, h)| h.clone())
        .context("a tenant without a home")?;
    let mut agent_paths = Vec::new();
    for p in &t.agent_paths {
        let key = format!("tenants.{name}.agent_paths");
        let real = p
            .canonicalize()
            .with_context(|| format!("{key}: `{}` cannot be used", p.display()))?;
        if within(data, &real) || within(&real, data) {
            bail!(
                "{key}: `{}` is or holds the data directory `{}` (every tenant's runs, the tokens): remove it",
                p.display(),
                data.display()
            );
        }
        if let Some((other, r)) = all
            .iter()
            .find(|(o, r)| o != name && (within(&real, r) || within(r, &real)))
        {
            bail!(
                "{key}: `{}` overlaps `{}`, a root of tenant `{other}`: remove it",
                p.display(),
                r.display()
            );
        }
        agent_paths.push(real);
    }
    // Other tenants' homes the operator put outside the data directory.
    let their_homes = homes
        .iter()
        .filter(|(other, h)| other != name && !within(h, data))
        .map(|(_, h)| h.clone());
    let theirs: Vec<PathBuf> = all
        .iter()
        .filter(|(other, _)| other != name)
        .map(|(_, r)| r.clone())
        .chain(their_homes)
        .chain([data.to_path_buf()])
        .collect();
    let hidden = theirs.iter().chain(server_files).cloned().collect();
    Ok(Tenant {
        name: name.to_string(),
        roots: all
            .iter()
            .filter(|(o, _)| o == name)
            .map(|(_, r)| r.clone())
            .collect(),
        max_running: t.max_running,
        max_queued: t.max_queued,
        max_log_streams: t.max_log_streams,
        actions_per_hour: t.actions_per_hour,
        agent_turns_per_day: t.agent_turns_per_day,
        max_cost_usd_per_day: t.max_cost_usd_per_day,
        max_tokens_per_day: t.max_tokens_per_day,
        home,
        agent_paths,
        network: t.network.clone(),
        env,
        hidden,
        theirs,
    })
}

impl Tenant {
    /// The workspace a caller asked for: absolute, or relative to the
    /// tenant's first root; canonicalized, and inside one of its roots.
    pub fn workspace(&self, asked: &str) -> Result<PathBuf> {
        if asked.is_empty() || asked.contains('\0') {
            bail!(
                "the workspace must be a path inside one of tenant `{}`'s roots",
                self.name
            );
        }
        let path = Path::new(asked);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.roots[0].join(path)
        };
        let canon = path.canonicalize().map_err(|e| {
            anyhow::anyhow!(
                "workspace `{}` cannot be used: {e}; give an existing directory inside one of tenant `{}`'s roots",
                crate::ui::one_line(asked),
                self.name
            )
        })?;
        self.inside(&canon).map_err(|_| {
            anyhow::anyhow!(
                "workspace `{}` is not inside any of tenant `{}`'s roots ({}); a link out of a root is followed before this check",
                crate::ui::one_line(asked),
                self.name,
                self.roots_list()
            )
        })?;
        if !canon.is_dir() {
            bail!(
                "workspace `{}` is not a directory",
                crate::ui::one_line(asked)
            );
        }
        Ok(canon)
    }

    /// Ok when the canonical `path` is one of the tenant's roots or below one.
    pub fn inside(&self, path: &Path) -> Result<()> {
        if self.roots.iter().any(|r| within(path, r)) {
            Ok(())
        } else {
            bail!(
                "`{}` is outside tenant `{}`'s roots ({})",
                path.display(),
                self.name,
                self.roots_list()
            )
        }
    }

    /// What a tenant's `loopbox.toml` may not say on a shared server, where the
    /// machine is not the tenant's: no unconfined commands (`shell.sandbox =
    /// "none"`), no credential stores of the server's user revealed
    /// (`shell.reveal`), no UNIX sockets (another process's daemon, with the
    /// server's rights), and no policy read from another tenant's root or the
    /// data directory. A policy's section cannot widen the top level's, so the
    /// top level is what is checked, with each source.
    pub fn check_config(&self, config: &crate::config::Config) -> Result<()> {
        let why = "on a shared server the tenant's config cannot weaken the sandbox its runs share the machine in";
        if config.shell.sandbox == crate::exec::sandbox::SandboxChoice::None {
            bail!(
                "shell.sandbox = \"none\" would run tenant `{}`'s commands unconfined: {why}; remove it",
                self.name
            );
        }
        // Landlock confines files, not what /proc shows: a command could read
        // every process's command line (another tenant's agent prompt, a
        // worker's arguments). bwrap gives each command a PID namespace of its own.
        if config.shell.sandbox == crate::exec::sandbox::SandboxChoice::Landlock {
            bail!(
                "shell.sandbox = \"landlock\" would let tenant `{}`'s commands read the command line of every process on the machine (/proc): {why}; remove it (the server's sandbox gives each command its own process namespace)",
                self.name
            );
        }
        if !config.shell.reveal.is_empty() {
            bail!(
                "shell.reveal would show tenant `{}`'s commands the server user's credential stores ({}): {why}; remove it, and give the tenant its credentials in the server config (tenants.{}.env)",
                self.name,
                config.shell.reveal.join(", "),
                self.name
            );
        }
        if config.shell.unix_sockets {
            bail!(
                "shell.unix_sockets = true would let tenant `{}`'s commands reach daemons of the server's machine: {why}; remove it",
                self.name
            );
        }
        for (name, entry) in &config.policies {
            let p = Path::new(&entry.source);
            if p.is_absolute() {
                self.check_source(p)
                    .with_context(|| format!("[policies.{name}].source"))?;
            }
        }
        // The agent's writable state is bound into its sandbox over everything
        // hidden, and its program too (read-only, as protected): only inside
        // the tenant's roots, its home, and what the operator adds.
        // Each with the `shell.path` its runs look for the program through.
        let top = || config.shell.path.clone();
        let agents = config
            .agent
            .iter()
            .map(|a| ("agent".to_string(), a, top()))
            .chain(
                config
                    .profiles
                    .iter()
                    .map(|(n, a)| (format!("agents.{n}"), a, top())),
            )
            .chain(config.policies.iter().filter_map(|(n, e)| {
                let path = config
                    .scoped(n)
                    .map_or_else(|_| e.shell.path.clone(), |c| c.shell.path);
                e.agent
                    .as_ref()
                    .map(|a| (format!("policies.{n}.agent"), a, path))
            }));
        for (section, a, path) in agents {
            for p in a.writable.iter().flatten() {
                self.check_agent_writable(p)
                    .with_context(|| format!("{section}.writable: `{}`", crate::ui::one_line(p)))?;
            }
            if a.runner != crate::exec::config::RunnerKind::Openai
                && let Some(program) = a.command.first()
            {
                self.check_agent_program(program, &path)
                    .with_context(|| format!("{section}.command"))?;
            }
        }
        Ok(())
    }

    /// Where the tenant's config may name agent state and programs: its roots,
    /// its home and `agent_paths`, canonical.
    fn own_places(&self) -> impl Iterator<Item = &PathBuf> {
        self.roots
            .iter()
            .chain([&self.home])
            .chain(&self.agent_paths)
    }

    fn places_list(&self) -> String {
        format!(
            "tenant `{}`'s roots ({}) and its home ({})",
            self.name,
            self.roots_list(),
            self.home.display()
        )
    }

    /// One `agent.writable` entry on a shared server: `~/NAME` (in the
    /// tenant's home), or a path inside its roots or `agent_paths`, where it
    /// really is (links followed, so a link the agent planted in its home
    /// leads nowhere else). Any other (`/etc`, the server user's `~/.claude`,
    /// another tenant's root, the data directory) would be bound writable into
    /// the tenant's agent's sandbox, over what it hides.
    fn check_agent_writable(&self, entry: &str) -> Result<()> {
        if Path::new(entry)
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            bail!("a `..` part could lead anywhere; name the directory itself");
        }
        let path = match entry.strip_prefix("~/") {
            Some(rest) => self.home.join(rest),
            None => PathBuf::from(entry),
        };
        let real = resolved(&path);
        if self.own_places().any(|r| within(&real, r)) {
            return Ok(());
        }
        let really = if real == path {
            String::new()
        } else {
            format!(" (really `{}`)", real.display())
        };
        bail!(
            "it is{really} outside {}: on a shared server a tenant's agent writes only there. Write `~/NAME` for state in its home, or a directory inside its roots; the server config's tenants.{}.agent_paths can add a directory",
            self.places_list(),
            self.name
        )
    }

    /// An agent's program on a shared server, as the run would find it
    /// (`shell.path` for a bare name), links followed: it is bound read-only
    /// over what the sandbox hides. Inside the tenant's roots, its home or
    /// `agent_paths`, or outside every place the tenant never sees: the server
    /// user's home, another tenant's root or home, the server's data and files.
    /// A program not found is left to the run, which fails naming it.
    fn check_agent_program(&self, program: &str, path: &str) -> Result<()> {
        let found = if program.starts_with('/') {
            Some(PathBuf::from(program))
        } else if program.contains('/') {
            // Relative to the workspace, inside a root.
            None
        } else {
            crate::exec::child_env::ChildEnv::new(path, &[], &self.roots[0])
                .resolve_program(program, &self.roots[0])
        };
        let Some(found) = found else { return Ok(()) };
        let real = resolved(&found);
        if self.own_places().any(|r| within(&real, r)) {
            return Ok(());
        }
        let users = crate::exec::sandbox::hide::user_homes();
        let Some(place) = users.iter().chain(&self.hidden).find(|h| within(&real, h)) else {
            return Ok(());
        };
        let shown = if found == real {
            format!("`{}`", found.display())
        } else {
            format!("`{}` (really `{}`)", found.display(), real.display())
        };
        bail!(
            "the program {shown} lies in `{}` (the server user's home, another tenant's, or the server's own), outside {}: install the agent outside every home (`/usr/local/bin`), or inside the tenant's roots or home; the server config's tenants.{}.agent_paths can add its directory",
            place.display(),
            self.places_list(),
            self.name
        )
    }

    /// Refuse a policy file in another tenant's root or the data directory
    /// (where it really is, links followed).
    pub fn check_source(&self, path: &Path) -> Result<()> {
        let real = super::data::resolved(path);
        if let Some(h) = self.theirs.iter().find(|h| within(&real, h)) {
            bail!(
                "`{}` lies in `{}`, which tenant `{}`'s runs never see (another tenant's root, or the server's data)",
                path.display(),
                h.display(),
                self.name
            );
        }
        Ok(())
    }

    fn roots_list(&self) -> String {
        self.roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str, dir: &Path) -> ServerConfig {
        ServerConfig::parse(text, &dir.join("loopbox-server.toml")).unwrap()
    }

    #[test]
    fn a_workspace_must_resolve_inside_a_root_links_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        for d in ["a/proj", "b/secret", "data"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(t.join("b"), t.join("a/escape")).unwrap();
        let c = config(
            "[tenants.a]\nroots = [\"a\"]\n[tenants.b]\nroots = [\"b\"]\n",
            t,
        );
        let tenants = Tenants::load(&c, &t.join("data"), None).unwrap();
        let a = tenants.named("a").unwrap();
        let real = t.canonicalize().unwrap();
        assert_eq!(a.workspace("proj").unwrap(), real.join("a/proj"));
        assert_eq!(
            a.workspace(real.join("a/proj").to_str().unwrap()).unwrap(),
            real.join("a/proj")
        );
        for bad in ["escape/secret", "../b", "/", "proj/../../b/secret"] {
            let e = format!("{:#}", a.workspace(bad).unwrap_err());
            assert!(
                e.contains("is not inside any of tenant `a`'s roots"),
                "{bad}: {e}"
            );
        }
        let e = format!("{:#}", a.workspace("missing").unwrap_err());
        assert!(e.contains("cannot be used"), "{e}");
        // What a's runs never see: b's root and the data directory.
        assert_eq!(a.theirs, [real.join("b"), t.join("data")]);
        assert!(a.hidden.starts_with(&a.theirs), "{:?}", a.hidden);
        let e = format!("{:#}", tenants.named("c").unwrap_err());
        assert!(e.contains("it has: a, b"), "{e}");
    }

    #[test]
    fn overlapping_roots_of_two_tenants_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir_all(t.join("a/inner")).unwrap();
        let c = config(
            "[tenants.a]\nroots = [\"a\"]\n[tenants.b]\nroots = [\"a/inner\"]\n",
            t,
        );
        let e = format!("{:#}", roots(&c).unwrap_err());
        assert!(e.contains("overlaps") && e.contains("tenant `a`"), "{e}");
    }
}
