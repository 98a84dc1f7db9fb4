//! YAML loops on the host's side. `loopbox run LOOP.yaml` and `loopbox
//! validate` read the loop and check it, with what it imports, before anything
//! runs; the imports are read from the same workspace, by the same rules, as
//! the sandboxed `builtin:fsm` reads them through its workspace capability.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use loopbox_fsm::spec::Loop;
use loopbox_fsm::{Files, Problem};

use crate::caps::workspace::Withheld;

pub mod view;

/// The policy that runs YAML loops.
pub const FSM: &str = "builtin:fsm";

/// True for a `.yaml` / `.yml` path given where a policy goes.
pub fn is_loop_file(arg: &str) -> bool {
    !arg.starts_with("builtin:") && (arg.ends_with(".yaml") || arg.ends_with(".yml"))
}

/// A loop file as read from disk.
#[derive(Debug, Clone)]
pub struct LoopFile {
    /// Its path relative to the workspace root (absolute when it lies outside,
    /// in which case it cannot import anything).
    pub path: String,
    pub text: String,
}

/// Read `file` (relative to the current directory, like any policy path).
pub fn read(workspace: &Path, file: &Path) -> Result<LoopFile> {
    let text = crate::files::read_text(file, loopbox_fsm::yaml::MAX_TEXT_BYTES as u64, "loop")?;
    let abs = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let path = match abs.strip_prefix(&root) {
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => abs.to_string_lossy().into_owned(),
    };
    Ok(LoopFile { path, text })
}

/// Workspace files, read as `workspace.read` reads them.
struct WorkspaceFiles<'a> {
    dir: Option<Dir>,
    withheld: &'a Withheld,
    limit: u64,
}

impl Files for WorkspaceFiles<'_> {
    fn read(&mut self, path: &str) -> Result<String, String> {
        match &self.dir {
            Some(dir) => crate::caps::workspace::read_text(dir, self.withheld, path, self.limit),
            None => Err("the workspace cannot be opened".into()),
        }
    }
}

/// What the run's policy may read of `workspace` under `config`: what it
/// cannot read, a loop cannot import or be started from either.
fn withheld(workspace: &Path, config: &crate::config::Config) -> (Option<Dir>, Withheld) {
    let dir = Dir::open_ambient_dir(workspace, ambient_authority()).ok();
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let hidden = crate::exec::sandbox::hide::Hidden::new(&config.shell, &root).for_commands(&[]);
    (dir, Withheld::new(&root, &hidden))
}

/// The loop file `file` of a server tenant's `workspace`, named relative to
/// it: read as the run's `builtin:fsm` reads the files it imports (through a
/// capability on the workspace, so neither `..` nor a link out of it is
/// followed, and nothing loopbox.toml hides). A name with a `..` in it is
/// refused outright.
pub fn read_in(workspace: &Path, file: &str, config: &crate::config::Config) -> Result<LoopFile> {
    let shown = crate::ui::one_line(file);
    if Path::new(file)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        anyhow::bail!(
            "loop `{shown}`: a loop is named relative to the workspace, without `..`; give its path inside the workspace"
        );
    }
    if !is_loop_file(file) {
        anyhow::bail!("loop `{shown}`: a loop file ends in .yaml or .yml");
    }
    let (dir, withheld) = withheld(workspace, config);
    let mut files = WorkspaceFiles {
        dir,
        withheld: &withheld,
        limit: config
            .limits
            .read_bytes
            .min(loopbox_fsm::yaml::MAX_TEXT_BYTES as u64),
    };
    let text = files
        .read(file)
        .map_err(|e| anyhow::anyhow!("loop `{shown}` cannot be read: {e}"))?;
    let path = crate::caps::workspace::check_path(file)
        .map_err(anyhow::Error::msg)?
        .to_string_lossy()
        .into_owned();
    Ok(LoopFile { path, text })
}

/// Most loop files [`list`] names.
pub const LISTED: usize = 200;

/// The loop files of `workspace`, relative to it, sorted: `.yaml` / `.yml`
/// files with a `states:` line, at most three directories down, neither a
/// link followed nor a hidden directory entered but `.loops` (whose `runs/`
/// is the runs' own files). At most [`LISTED`]; what it walks and reads is
/// bounded too (5,000 entries, a YAML file counting as ten).
pub fn list(workspace: &Path, config: &crate::config::Config) -> Vec<String> {
    let (Some(dir), withheld) = withheld(workspace, config) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut budget = 5_000usize;
    walk(&dir, "", 0, &withheld, &mut found, &mut budget);
    found.sort();
    found.truncate(LISTED);
    found
}

fn walk(
    dir: &Dir,
    prefix: &str,
    depth: usize,
    withheld: &Withheld,
    found: &mut Vec<String>,
    budget: &mut usize,
) {
    let Ok(entries) = dir.entries() else { return };
    for entry in entries.flatten() {
        if *budget == 0 || found.len() >= LISTED {
            return;
        }
        *budget -= 1;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = format!("{prefix}{name}");
        // What the tenant's config hides is neither read nor named.
        if withheld.withholds(Path::new(&path)) {
            continue;
        }
        // The entry's own type: a symbolic link is neither file nor directory here.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            let skip = (name.starts_with('.') && name != ".loops")
                || path == ".loops/runs"
                || matches!(name.as_str(), "node_modules" | "target");
            if depth < 3
                && !skip
                && let Ok(sub) = entry.open_dir()
            {
                walk(
                    &sub,
                    &format!("{path}/"),
                    depth + 1,
                    withheld,
                    found,
                    budget,
                );
            }
        } else if kind.is_file() && is_loop_file(&name) {
            // Reading costs more than a name: a tenth of the walk's budget reads.
            *budget = budget.saturating_sub(9);
            if looks_like_loop(dir, &name) {
                found.push(path);
            }
        }
    }
}

/// Bytes of a file [`list`] reads to tell a loop: its top (a listing reads
/// at most [`LISTED`] times more than a loop's worth of files, whatever the
/// workspace holds).
const LOOKED_AT: u64 = 64 << 10;

/// Whether the file has a top-level `states:` line in its first [`LOOKED_AT`]
/// bytes (a workflow or a config is no loop). Opened without blocking, so a
/// FIFO put in the entry's place since is no trap.
fn looks_like_loop(dir: &Dir, name: &str) -> bool {
    use std::io::Read as _;
    let Ok(f) = crate::files::open_nonblocking_in(dir, Path::new(name)) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut top = Vec::new();
    f.take(LOOKED_AT).read_to_end(&mut top).is_ok()
        && String::from_utf8_lossy(&top)
            .lines()
            .any(|l| l.starts_with("states:"))
}

/// Parse, import and check the loop under `config` (its read limit, and what
/// it hides). Problems come back all together.
pub fn load(
    workspace: &Path,
    file: &LoopFile,
    config: &crate::config::Config,
) -> Result<Loop, Vec<Problem>> {
    let (dir, withheld) = withheld(workspace, config);
    let lp = loopbox_fsm::load(
        &file.path,
        &file.text,
        &mut WorkspaceFiles {
            dir,
            withheld: &withheld,
            limit: config.limits.read_bytes,
        },
    )?;
    let unpassed: Vec<Problem> = loopbox_fsm::check::env_refs(&lp)
        .into_iter()
        .filter(|(_, _, name)| !passed_to_commands(&config.shell, name))
        .map(|(line, state, name)| {
            Problem::at(
                &lp.files,
                line,
                format!(
                    "state `{state}`: `${{env.{name}}}`: a command sees only the variables loopbox.toml passes it, and `{name}` is not one; add \"{name}\" to `[shell] pass_env` in loopbox.toml, or give the value in `context` (`--input` can set it)"
                ),
            )
        })
        .collect();
    if unpassed.is_empty() {
        Ok(lp)
    } else {
        Err(unpassed)
    }
}

/// Whether loopbox.toml passes variable `name` to commands: `PATH` (its
/// `[shell] path`) and what `[shell] pass_env` names.
fn passed_to_commands(shell: &crate::exec::config::ShellConfig, name: &str) -> bool {
    name == "PATH" || shell.pass_env.iter().any(|n| n == name)
}

/// What `${env.NAME}` may read in a run: the variables loopbox.toml passes
/// to commands, with the values a command gets (`PATH` is `[shell] path`; a
/// `pass_env` name unset on the host is left out, and reads as not set, as
/// in little-loops). [`payload_delayed`] keeps those the loop names.
pub fn command_env(shell: &crate::exec::config::ShellConfig) -> BTreeMap<String, String> {
    command_env_from(shell, &crate::exec::child_env::HostEnv::Process)
}

/// [`command_env`] for a server's run: the values come from `host`, what the
/// tenant was given (`tenants.T.env`, its `env_file`), as its commands get
/// them, never from the server's own environment. A loop may not read the
/// server's kind of secrets at all: a `${env.NAME}` naming `LOOPBOX_*` or
/// `PG*` is refused, whatever the tenant's config passes, so a value an
/// operator copied there by mistake is never put in a run's journal.
pub fn served_env(
    lp: &Loop,
    shell: &crate::exec::config::ShellConfig,
    host: &crate::exec::child_env::HostEnv,
) -> Result<BTreeMap<String, String>> {
    let refused: Vec<String> = loopbox_fsm::check::env_refs(lp)
        .into_iter()
        .map(|(_, _, name)| name)
        .filter(|name| server_secret(name))
        .collect();
    if let Some(name) = refused.first() {
        anyhow::bail!(
            "`${{env.{name}}}`: a served loop may not read `LOOPBOX_*` or `PG*` variables, which name the server's own settings and secrets; give the value in the run's `input` (its context) instead"
        );
    }
    Ok(command_env_from(shell, host))
}

/// Names of the server's settings and store credentials (`LOOPBOX_TOKEN`,
/// `LOOPBOX_STORE`, `PGPASSWORD`, ...).
fn server_secret(name: &str) -> bool {
    name.starts_with("LOOPBOX_") || name.starts_with("PG")
}

fn command_env_from(
    shell: &crate::exec::config::ShellConfig,
    host: &crate::exec::child_env::HostEnv,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = shell
        .pass_env
        .iter()
        .filter(|n| *n != "PATH")
        .filter_map(|n| host.var(n).map(|v| (n.clone(), v)))
        .collect();
    env.insert("PATH".into(), shell.path.clone());
    env
}

/// Where a run of a YAML loop keeps its files (`${context.run_dir}`), as
/// little-loops does: `.loops/runs/RUN_ID/`. Not under `.loopbox/`, which
/// sandboxed commands may never write.
pub fn run_dir(run_id: &str) -> String {
    format!(".loops/runs/{run_id}/")
}

/// Create the run's directory inside the workspace. Through a capability on
/// the workspace, so a `.loops` that a sandboxed command replaced with a link
/// to elsewhere is refused rather than followed out of the workspace.
pub fn create_run_dir(workspace: &Path, run_dir: &str) -> Result<()> {
    let dir = Dir::open_ambient_dir(workspace, ambient_authority())
        .with_context(|| format!("cannot open the workspace {}", workspace.display()))?;
    dir.create_dir_all(run_dir.trim_end_matches('/')).with_context(|| {
        format!(
            "cannot create the run's directory {run_dir} in the workspace (is `.loops` a link out of it?)"
        )
    })
}

/// The `start` payload for `builtin:fsm`: the loop, the `--input` text (a
/// JSON object of context values, or any text, which becomes the loop's
/// `input_key` value) and the run's directory. The loop's own rules are
/// checked here too (a required input that is missing), so a run that
/// cannot start is refused before it is created.
pub fn payload(
    lp: &Loop,
    file: &LoopFile,
    input: &str,
    run_dir: &str,
    workspace: &Path,
) -> Result<String> {
    payload_delayed(
        lp,
        file,
        input,
        run_dir,
        workspace,
        None,
        None,
        Default::default(),
        false,
    )
}

/// Whether a run's `human_approval` states ask a person: one is at the
/// terminal, or the run may wait for an answer from elsewhere (`runs
/// answer|approve|deny`, a server's API and dashboard), as an ask-tier action
/// waits for its approval (`[confirm] unattended = "wait"`, the default).
/// Otherwise they take little-loops' headless route at once.
pub fn asks(config: &crate::config::Config, terminal: bool) -> bool {
    terminal || config.confirm.unattended != crate::exec::confirm::Unattended::Decline
}

/// [`payload`] with `ll-loop run --delay`'s seconds: the run parks that long
/// (a `sleep` decision) before its first state; and `--little-loops`, the
/// release the run follows where little-loops' releases differ; `env`, what
/// `${env.NAME}` reads ([`command_env`]); `ask`, whether a `human_approval`
/// state asks a person ([`asks`]).
#[allow(clippy::too_many_arguments)]
pub fn payload_delayed(
    lp: &Loop,
    file: &LoopFile,
    input: &str,
    run_dir: &str,
    workspace: &Path,
    delay: Option<f64>,
    little_loops: Option<&str>,
    env: BTreeMap<String, String>,
    ask: bool,
) -> Result<String> {
    if let Some(d) = delay.filter(|d| !d.is_finite() || *d < 0.0) {
        anyhow::bail!("--delay must be a number of seconds, 0 or more, not {d}");
    }
    if let Some(r) = little_loops
        && loopbox_fsm::spec::Release::parse(r).is_none()
    {
        anyhow::bail!(
            "--little-loops must name a little-loops release like 1.156 or 1.167.0, not `{r}`"
        );
    }
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let start = loopbox_fsm::start::Start {
        path: file.path.clone(),
        yaml: file.text.clone(),
        context: Default::default(),
        input: Some(input.to_string()),
        // Absolute, as `ll-loop run` makes it (`cli/loop/run.py`: `loops_dir.resolve()`).
        run_dir: Some(workspace.join(run_dir).to_string_lossy().into_owned()),
        workspace: Some(workspace.to_string_lossy().into_owned()),
        delay,
        little_loops: little_loops.map(str::to_string),
        // Only what the loop reads: the payload is journaled, and a passed
        // variable the loop never names stays out of it.
        env: {
            let named: std::collections::BTreeSet<String> = loopbox_fsm::check::env_refs(lp)
                .into_iter()
                .map(|(_, _, name)| name)
                .collect();
            env.into_iter().filter(|(k, _)| named.contains(k)).collect()
        },
        ask,
    };
    loopbox_fsm::start::context(lp, &start).map_err(anyhow::Error::msg)?;
    Ok(start.to_json().to_string())
}

/// `limits.actions_per_run` for a YAML loop run when loopbox.toml does not set
/// it: the loop's own `max_steps` and `timeout` govern it, and this stays a
/// safety net well above them (the corpus' largest `max_steps` is 500).
pub const ACTIONS_PER_RUN: u64 = 10_000;
/// `agent.max_prompts` for a YAML loop run when loopbox.toml does not set it.
pub const MAX_PROMPTS: u64 = 5_000;

/// The budgets of a `builtin:fsm` run: `limits.actions_per_run` and
/// `agent.max_prompts` that `config_text` (the loopbox.toml in use) leaves
/// unset are raised to [`ACTIONS_PER_RUN`] and [`MAX_PROMPTS`]; a value the
/// user wrote is kept. `policy` is the `[policies.NAME]` the run is under.
pub fn budgets(
    config: &mut crate::config::Config,
    config_text: Option<&str>,
    policy: Option<&str>,
) {
    let table: toml::Table = config_text.and_then(|t| t.parse().ok()).unwrap_or_default();
    let set = |path: &[&str]| {
        let mut at = Some(&table);
        for (i, key) in path.iter().enumerate() {
            let v = at.and_then(|t| t.get(*key));
            if i + 1 == path.len() {
                return v.is_some();
            }
            at = v.and_then(toml::Value::as_table);
        }
        false
    };
    if !set(&["limits", "actions_per_run"]) {
        config.limits.actions_per_run = config.limits.actions_per_run.max(ACTIONS_PER_RUN);
    }
    let prompts_set = match policy {
        Some(name) => set(&["policies", name, "agent", "max_prompts"]),
        None => set(&["agent", "max_prompts"]),
    };
    if let (false, Some(agent)) = (prompts_set, config.agent.as_mut()) {
        agent.max_prompts = agent.max_prompts.max(MAX_PROMPTS);
    }
}

/// Warnings for a loop whose own budget (`max_steps`, each step one action
/// and, with a judge, one more prompt) exceeds loopbox's limits: the run
/// would end on loopbox's limit first.
pub fn budget_warnings(lp: &Loop, config: &crate::config::Config) -> Vec<String> {
    let mut out = Vec::new();
    let steps = u64::from(lp.max_steps);
    let actions = config.limits.actions_per_run;
    if steps > actions {
        out.push(format!(
            "the loop's max_steps {steps} exceeds limits.actions_per_run = {actions}: loopbox ends the run at its limit first; raise it in loopbox.toml"
        ));
    }
    if let Some(agent) = &config.agent
        && lp.states.iter().any(|s| {
            matches!(
                s.action,
                Some(
                    loopbox_fsm::spec::Action::Prompt(_)
                        | loopbox_fsm::spec::Action::SlashCommand(_)
                )
            )
        })
        && steps > agent.max_prompts
    {
        out.push(format!(
            "the loop's max_steps {steps} exceeds agent.max_prompts = {}: loopbox ends the run at its limit first; raise it in loopbox.toml",
            agent.max_prompts
        ));
    }
    out
}

/// Shell that bash runs and dash (Debian's `sh`) does not, found per line:
/// what each finds, and how `validate` names it.
const BASH_ONLY: &[(&str, &str)] = &[
    ("pipefail", "`set -o pipefail`"),
    ("[[", "`[[ ... ]]`"),
    ("<<<", "a here-string `<<<`"),
    ("<(", "process substitution `<(...)`"),
    (">(", "process substitution `>(...)`"),
    ("&>", "`&>` redirection"),
    ("$'", "`$'...'` quoting"),
    ("=(", "an array `NAME=(...)`"),
    ("[@]", "an array expansion `${NAME[@]}`"),
    ("[*]", "an array expansion `${NAME[*]}`"),
];

/// Bash-only commands, found where a command starts (not in a message's words).
const BASH_COMMANDS: &[(&str, &str)] = &[
    ("shopt", "`shopt`"),
    ("declare", "`declare`"),
    ("mapfile", "`mapfile`"),
    ("readarray", "`readarray`"),
    ("function", "`function NAME`"),
    ("source", "`source` (`.` in sh)"),
];

/// The bash-only constructs in one line of shell: each named once.
pub fn bash_only(line: &str) -> Vec<&'static str> {
    let code = line.trim_start();
    if code.starts_with('#') {
        return Vec::new();
    }
    let mut found: Vec<&'static str> = BASH_ONLY
        .iter()
        .filter(|(needle, _)| code.contains(needle))
        .map(|(_, what)| *what)
        .collect();
    let commands: Vec<&str> = code
        .split([';', '|', '&', '(', '{'])
        .map(|c| {
            let c = c.trim_start();
            ["then ", "do ", "else ", "!"]
                .iter()
                .fold(c, |c, k| c.strip_prefix(k).unwrap_or(c).trim_start())
        })
        .collect();
    for (name, what) in BASH_COMMANDS {
        if commands
            .iter()
            .any(|c| c.split_whitespace().next() == Some(name))
        {
            found.push(what);
        }
    }
    // `${v^}`, `${v^^}`, `${v,}`, `${v,,}`: case modification.
    let case = code.match_indices("${").any(|(i, _)| {
        let body = &code[i + 2..];
        let end = body.find('}').unwrap_or(body.len());
        let body = &body[..end];
        body.chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
            && (body.contains('^') || body.ends_with(','))
    });
    if case {
        found.push("case modification `${NAME^}` / `${NAME,,}`");
    }
    // `{1..5}`: brace ranges.
    let range = code.match_indices('{').any(|(i, _)| {
        let body = &code[i + 1..];
        let Some(end) = body.find('}') else {
            return false;
        };
        let parts: Vec<&str> = body[..end].split("..").collect();
        !code[..i].ends_with('$')
            && parts.len() == 2
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    });
    if range {
        found.push("a brace range `{A..B}`");
    }
    found
}

/// Where the loop's shell actions need bash (for `validate` when bash is
/// not on `shell.path`): `(file, line, state, what)`, one a construct and line.
pub fn bash_only_lines(lp: &Loop) -> Vec<(String, u32, String, String)> {
    let mut out = Vec::new();
    for state in &lp.states {
        let Some(loopbox_fsm::spec::Action::Shell(text)) = &state.action else {
            continue;
        };
        // `action_line` is where the text starts (a block scalar's first line).
        let first = state.action_line;
        for (i, line) in text.lines().enumerate() {
            for what in bash_only(line) {
                out.push((
                    state.file.clone(),
                    first + i as u32,
                    state.name.clone(),
                    what.to_string(),
                ));
            }
        }
    }
    out
}

/// `LOOP.yaml` as typed, or the file behind `builtin:fsm --input @LOOP.yaml`.
pub fn loop_path(policy: &str, input: &str) -> Option<PathBuf> {
    if is_loop_file(policy) {
        return Some(PathBuf::from(policy));
    }
    let file = input.strip_prefix('@')?;
    (policy == FSM && is_loop_file(file)).then(|| PathBuf::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_files_are_told_from_policies() {
        assert!(is_loop_file("loops/fix.yaml") && is_loop_file("a.yml"));
        assert!(!is_loop_file("policy.wasm") && !is_loop_file("builtin:ralph"));
        assert_eq!(
            loop_path("builtin:fsm", "@l.yaml"),
            Some(PathBuf::from("l.yaml"))
        );
        assert_eq!(loop_path("builtin:fsm", "{}"), None);
        assert_eq!(loop_path("builtin:ralph", "@l.yaml"), None);
        assert_eq!(loop_path("x.yaml", "{}"), Some(PathBuf::from("x.yaml")));
    }

    #[test]
    fn bash_only_shell_is_named_and_posix_shell_is_not() {
        for (line, what) in [
            ("set -euo pipefail", "`set -o pipefail`"),
            ("if [[ -f x ]]; then :; fi", "`[[ ... ]]`"),
            ("echo \"$${name^}\"", "case modification"),
            ("echo ${v,,}", "case modification"),
            ("arr=(a b)", "an array"),
            ("echo ${arr[@]}", "an array expansion"),
            ("for i in {1..5}; do :; done", "a brace range"),
            ("diff <(ls a) <(ls b)", "process substitution"),
            ("cmd &> log", "`&>`"),
            ("read x <<< \"$y\"", "here-string"),
            ("source env.sh", "`source`"),
            ("set -e; declare -A m", "`declare`"),
            ("if true; then shopt -s globstar; fi", "`shopt`"),
        ] {
            let found = bash_only(line);
            assert!(found.iter().any(|f| f.contains(what)), "{line}: {found:?}");
        }
        for line in [
            "set -eu",
            "[ \"$a\" = b ] && echo ${x:-y} ${#x} ${x%.txt}",
            "# set -o pipefail",
            "echo {a,b} $((1 + 2)) > out 2>&1",
            "f() { echo hi; }",
            ". ./env.sh",
            "echo 'the function failed; see the source code'",
        ] {
            assert_eq!(bash_only(line), Vec::<&str>::new(), "{line}");
        }
    }

    #[test]
    fn the_loops_of_a_workspace_are_listed_without_following_links() {
        let ws = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let p = ws.path();
        let lp = "name: l\ninitial: a\nstates:\n  a:\n    terminal: true\n";
        for (file, text) in [
            ("a.yaml", lp),
            (".loops/b.yml", lp),
            (".loops/runs/r1/c.yaml", lp),
            (".git/d.yaml", lp),
            ("one/two/three/deep.yaml", lp),
            ("one/two/three/four/too-deep.yaml", lp),
            ("ci.yaml", "on: push\n"),
            ("notes.txt", lp),
            ("secret/hidden-loop.yaml", lp),
        ] {
            std::fs::create_dir_all(p.join(file).parent().unwrap()).unwrap();
            std::fs::write(p.join(file), text).unwrap();
        }
        std::fs::write(out.path().join("theirs.yaml"), lp).unwrap();
        std::os::unix::fs::symlink(out.path().join("theirs.yaml"), p.join("link.yaml")).unwrap();
        std::os::unix::fs::symlink(out.path(), p.join("linked-dir")).unwrap();
        // `shell.hide` names `secret/`: its loops are neither read nor named.
        let config: crate::config::Config =
            crate::config::Config::parse("[shell]\nhide = [\"secret\"]\n", &p.join("loopbox.toml"))
                .unwrap();
        assert_eq!(
            list(p, &config),
            [".loops/b.yml", "a.yaml", "one/two/three/deep.yaml"]
        );
    }

    #[test]
    fn the_input_becomes_context() {
        let text =
            "name: l\ninitial: a\nrequired_inputs: [issue]\nstates:\n  a:\n    terminal: true\n";
        let file = LoopFile {
            path: "l.yaml".into(),
            text: text.into(),
        };
        let lp = loopbox_fsm::load(
            "l.yaml",
            text,
            &mut WorkspaceFiles {
                dir: None,
                withheld: &Withheld::new(Path::new("/"), &[]),
                limit: 0,
            },
        )
        .unwrap();
        let p: serde_json::Value = serde_json::from_str(
            &payload(
                &lp,
                &file,
                r#"{"issue": "BUG-1"}"#,
                ".loops/runs/r1/",
                Path::new("/"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            p,
            serde_json::json!({"path": "l.yaml", "yaml": text, "input": "{\"issue\": \"BUG-1\"}", "run_dir": "/.loops/runs/r1/", "workspace": "/"})
        );
        let refused = payload(&lp, &file, "{}", ".loops/runs/r1/", Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("requires input `issue` but none was given"),
            "{refused}"
        );
        let input = r#"{"issue": "BUG-1"}"#;
        let delayed: serde_json::Value = serde_json::from_str(
            &payload_delayed(
                &lp,
                &file,
                input,
                "r/",
                Path::new("/"),
                Some(0.5),
                None,
                Default::default(),
                false,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(delayed["delay"], 0.5);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = payload_delayed(
                &lp,
                &file,
                input,
                "r/",
                Path::new("/"),
                Some(bad),
                None,
                Default::default(),
                false,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("--delay must be a number of seconds"), "{e}");
        }
    }
}
