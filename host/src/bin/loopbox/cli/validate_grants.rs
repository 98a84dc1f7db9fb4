//! What a YAML loop needs from loopbox.toml, for `loopbox validate --grants`
//! (and the note `validate` prints when something is missing): the scripts
//! grant for shell text, an argv rule for each `exec:`, for `diff_stall`'s
//! git commands (`git diff --stat` before little-loops 1.166, `git ls-files`
//! and `git hash-object` from it) and for the commands `tamper_guard` and `prepatch_check`
//! run, an `[agent]` for prompts and the judge (`[agents.NAME]` for the
//! prompts of a state with `agent: NAME`), `[worktree]` for a sub-loop's
//! `worktree:` and for `prepatch_check`'s pre-patch worktree (with the scripts
//! grant its pytest runs need), `[mcp.servers.NAME]` with the tool in `tools`
//! for an `mcp_tool` state, `workspace.restore` for `tamper_guard: revert`, and
//! `shell.network` for states whose commands reach the network (without it
//! they fail in the sandbox, and the verdict changes with them). Each need is
//! checked against the grants in use; nothing here runs anything.

use std::path::Path;

use loopbox::config::Config;
use loopbox::exec::grants::{ExtraRules, ShellGrants, Tier, show_argv};
use loopbox_fsm::spec::{Action, EvalKind, Loop, State};
use serde_json::{Value, json};

/// One grant the loop needs, and whether the config in use gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Need {
    /// The loopbox.toml key, as the user writes it.
    pub key: String,
    /// What in the loop needs it.
    pub why: String,
    /// The states that need it, in the loop's order.
    pub states: Vec<String>,
    pub status: Status,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    Granted,
    /// An `ask` rule: a person says yes or no at each run.
    Asks,
    Missing,
    /// Decided at run time (an argv with `${...}` in it, a sub-loop).
    AtRunTime,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Granted => "granted",
            Status::Asks => "asks",
            Status::Missing => "missing",
            Status::AtRunTime => "at run",
        }
    }
}

/// Programs whose job is the network, and the subcommands that reach it for
/// those that also work offline (`git`, `npm`, ...).
const NETWORK: &[(&str, &[&str])] = &[
    ("curl", &[]),
    ("wget", &[]),
    ("gh", &[]),
    ("ssh", &[]),
    ("scp", &[]),
    ("nc", &[]),
    ("npx", &[]),
    ("uvx", &[]),
    (
        "git",
        &["fetch", "pull", "push", "clone", "ls-remote", "remote"],
    ),
    ("pip", &["install", "download"]),
    ("pip3", &["install", "download"]),
    ("npm", &["install", "i", "ci", "publish", "view", "update"]),
    ("pnpm", &["install", "i", "add", "update"]),
    ("yarn", &["install", "add"]),
    (
        "cargo",
        &["install", "fetch", "publish", "update", "search"],
    ),
    ("docker", &["pull", "push", "login"]),
    ("apt-get", &["install", "update"]),
    ("apt", &["install", "update"]),
];

/// Words that come before a command without being it.
const PREFIXES: &[&str] = &[
    "sudo", "env", "command", "exec", "then", "do", "else", "if", "while", "until", "!", "time",
    "nohup", "xargs",
];

/// The network command `argv` (a command's words) runs, if any.
fn network_command(words: &[&str]) -> Option<String> {
    let mut words = words
        .iter()
        .copied()
        .skip_while(|w| PREFIXES.contains(w) || (w.contains('=') && !w.starts_with('=')));
    let program = words.next()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    let (_, subcommands) = NETWORK.iter().find(|(n, _)| *n == name)?;
    if subcommands.is_empty() {
        return Some(name.to_string());
    }
    let sub = words.find(|w| !w.starts_with('-'))?;
    subcommands.contains(&sub).then(|| format!("{name} {sub}"))
}

/// The network commands in shell text: each simple command's first words,
/// and any `http://` or `https://` address.
pub fn network_in_shell(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let split = |c: char| matches!(c, ';' | '|' | '&' | '(' | ')' | '`' | '\n' | '{' | '}');
    for segment in text.split(split) {
        let words: Vec<&str> = segment
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .collect();
        if let Some(cmd) = network_command(&words)
            && !found.contains(&cmd)
        {
            found.push(cmd);
        }
    }
    if (text.contains("http://") || text.contains("https://"))
        && !found.iter().any(|f| f == "curl" || f == "wget")
    {
        found.push("an http(s) address".to_string());
    }
    found
}

/// An argv as loopbox.toml writes it: `["make", "test"]`.
fn toml_list(argv: &[String]) -> String {
    let words: Vec<String> = argv.iter().map(|a| json!(a).to_string()).collect();
    format!("[{}]", words.join(", "))
}

/// Whether the state is judged by the agent (`llm_structured`, the default
/// for a prompt that is not `next:`).
fn judged(s: &State) -> bool {
    match &s.evaluate {
        Some(e) => matches!(e.kind, EvalKind::LlmStructured { .. }),
        None => s.action.as_ref().is_some_and(Action::is_prompt) && s.routes.next.is_none(),
    }
}

/// What `lp` needs, checked against `config` for the workspace `root`.
pub fn needs(lp: &Loop, config: &Config, root: &Path) -> Vec<Need> {
    let env = config.shell.child_env(root);
    let grants = ShellGrants::new(&config.shell, &ExtraRules::default(), &env);
    let argv_status = |argv: &[String]| -> Status {
        if argv.is_empty() {
            return Status::Missing;
        }
        if argv.iter().any(|a| a.contains("${")) {
            return Status::AtRunTime;
        }
        match grants.check(argv, root, &env, &[]) {
            Ok(g) if g.tier == Tier::Allow => Status::Granted,
            Ok(_) => Status::Asks,
            Err(_) => Status::Missing,
        }
    };
    let mut out: Vec<Need> = Vec::new();
    let mut add = |key: String, why: String, state: &str, status: Status| match out
        .iter_mut()
        .find(|n| n.key == key && n.why == why)
    {
        Some(n) => {
            if !n.states.iter().any(|s| s == state) {
                n.states.push(state.to_string());
            }
        }
        None => out.push(Need {
            key,
            why,
            states: vec![state.to_string()],
            status,
        }),
    };
    let scripts = format!("{}.scripts = true", config.shell.section());
    let network = format!("{}.network = true", config.shell.section());
    let net_status = if config.shell.network {
        Status::Granted
    } else {
        Status::Missing
    };
    let agent = if config.agent.is_some() {
        Status::Granted
    } else {
        Status::Missing
    };
    for s in lp.states.iter().filter(|s| !s.terminal) {
        // A state's `agent: NAME` sends its prompts (and a learning remedy) to
        // `[agents.NAME]`, never to `[agent]`; its judge stays with `[agent]`.
        let (prompts_key, prompts_why, prompts_status) = match &s.agent {
            Some(name) => (
                format!("[agents.{name}]"),
                format!("prompts, which ask for agent profile `{name}`"),
                if config.profiles.contains_key(name) {
                    Status::Granted
                } else {
                    Status::Missing
                },
            ),
            None => ("[agent]".into(), "prompts".into(), agent),
        };
        match &s.action {
            Some(Action::Shell(text)) => {
                let status = if config.shell.scripts {
                    Status::Granted
                } else {
                    Status::Missing
                };
                add(
                    scripts.clone(),
                    "shell text (`action`)".into(),
                    &s.name,
                    status,
                );
                for cmd in network_in_shell(text) {
                    add(
                        network.clone(),
                        format!(
                            "runs {cmd}: without the network it fails in the sandbox, and its verdict changes"
                        ),
                        &s.name,
                        net_status,
                    );
                }
            }
            Some(Action::Exec(argv)) => {
                // The rule an argv needs names its literal words.
                let fixed: Vec<String> = argv
                    .iter()
                    .take_while(|a| !a.contains("${"))
                    .cloned()
                    .collect();
                let shown: Vec<String> = if fixed.is_empty() {
                    argv.clone()
                } else {
                    fixed.clone()
                };
                add(
                    format!("{}.allow {}", config.shell.section(), toml_list(&shown)),
                    format!("`exec: {}`", show_argv(argv)),
                    &s.name,
                    argv_status(argv),
                );
                let words: Vec<&str> = argv.iter().map(String::as_str).collect();
                if let Some(cmd) = network_command(&words) {
                    add(
                        network.clone(),
                        format!(
                            "runs {cmd}: without the network it fails in the sandbox, and its verdict changes"
                        ),
                        &s.name,
                        net_status,
                    );
                }
            }
            // Nobody is asked yet: it needs nothing (`validate` notes it).
            Some(Action::HumanApproval(_)) => {}
            Some(Action::Prompt(_) | Action::SlashCommand(_)) => {
                add(
                    prompts_key.clone(),
                    prompts_why.clone(),
                    &s.name,
                    prompts_status,
                );
            }
            Some(Action::Mcp { tool, .. }) => {
                let (key, status) = match loopbox_fsm::mcp::split(tool) {
                    _ if tool.contains("${") => {
                        ("[mcp.servers.NAME]".to_string(), Status::AtRunTime)
                    }
                    Some((server, name)) => (
                        format!("[mcp.servers.{server}] tools = [{}]", json!(name)),
                        if config.mcp.permits(server, name).is_ok() {
                            Status::Granted
                        } else {
                            Status::Missing
                        },
                    ),
                    None => ("[mcp.servers.NAME]".to_string(), Status::Missing),
                };
                add(
                    key,
                    format!(
                        "`action_type: mcp_tool` calls `{tool}` (without it the state sees `not_found`)"
                    ),
                    &s.name,
                    status,
                );
            }
            None => {}
        }
        if s.learning.is_some() {
            add(
                prompts_key.clone(),
                "`/ll:explore-api TARGET` for a missing or stale learning record".into(),
                &s.name,
                prompts_status,
            );
        }
        if judged(s) {
            add(
                "[agent]".into(),
                "the judge (`llm_structured`)".into(),
                &s.name,
                agent,
            );
        }
        if let Some(e) = &s.evaluate
            && let EvalKind::DiffStall { scope, .. } = &e.kind
        {
            // The commands of the release the loop follows (`little_loops:`).
            for argv in loopbox_fsm::machine::diff_stall::commands(lp.release(), scope) {
                add(
                    format!(
                        "{}.allow [\"{}\", \"{}\"]",
                        config.shell.section(),
                        argv[0],
                        argv[1]
                    ),
                    format!("`diff_stall` runs `{}`", show_argv(&argv)),
                    &s.name,
                    argv_status(&argv),
                );
            }
        }
        for (argv, why, at_run) in guard_commands(lp, s) {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            add(
                format!(
                    "{}.allow {}",
                    config.shell.section(),
                    toml_list(&argv[..if argv[0] == "git" { 2 } else { 1 }])
                ),
                format!("{why}: `{}`", show_argv(&argv)),
                &s.name,
                if at_run {
                    Status::AtRunTime
                } else {
                    argv_status(&argv)
                },
            );
        }
        let tamper = loopbox_fsm::tamper::effective(
            s.guards.tamper_guard.as_deref(),
            lp.guards.tamper_guard.as_deref(),
        );
        if tamper == Some(loopbox_fsm::tamper::Policy::Revert) && s.action.is_some() {
            add(
                format!(
                    "{}.restore = [\"**/test_*.py\", \"**/*_test.py\", \"**/tests/**\", \"conftest.py\", \"**/conftest.py\"]",
                    config.shell.sibling("workspace")
                ),
                "`tamper_guard: revert` has the host keep copies of the test files and put changed ones back".into(),
                &s.name,
                if config.workspace.restore.is_empty() {
                    Status::Missing
                } else {
                    Status::Granted
                },
            );
        }
        let prepatch = loopbox_fsm::prepatch::effective(
            s.guards.prepatch_check.as_deref(),
            lp.guards.prepatch_check.as_deref(),
        );
        if prepatch.is_some() {
            let why = "`prepatch_check`, when `.ll/ll-config.json` enables it, runs the new tests with pytest in a pre-patch worktree";
            add(
                "[worktree] allow = true".into(),
                why.into(),
                &s.name,
                Status::AtRunTime,
            );
            add(scripts.clone(), why.into(), &s.name, Status::AtRunTime);
        }
        if let Some(tmpl) = s.sub.as_ref().and_then(|sub| sub.worktree.as_deref()) {
            let status = match config.worktree.grants(tmpl) {
                Some(true) => Status::Granted,
                Some(false) => Status::Missing,
                None => Status::AtRunTime,
            };
            add(
                "[worktree] allow = true".into(),
                format!(
                    "`worktree: {tmpl}`: the sub-loop runs in a git worktree the host checks out"
                ),
                &s.name,
                status,
            );
        }
        if let Some(sub) = &s.sub {
            add(
                "sub-loop".into(),
                format!(
                    "runs `{}`, which needs its own: `loopbox validate --grants` on it",
                    sub.name
                ),
                &s.name,
                Status::AtRunTime,
            );
        }
    }
    out
}

/// The commands a state's `tamper_guard` and `prepatch_check` run in the
/// sandbox (`fsm::tamper`, `fsm::prepatch`), each with why, and whether it
/// runs only when the project's `.ll/ll-config.json` asks for it.
fn guard_commands(lp: &Loop, s: &State) -> Vec<(Vec<&'static str>, &'static str, bool)> {
    let mut out = Vec::new();
    let tamper = loopbox_fsm::tamper::effective(
        s.guards.tamper_guard.as_deref(),
        lp.guards.tamper_guard.as_deref(),
    );
    if tamper.is_some() && s.action.is_some() {
        let why = "`tamper_guard` lists and hashes the test files";
        out.push((
            vec![
                "git",
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            why,
            false,
        ));
        out.push((
            vec![
                "git",
                "ls-files",
                "-z",
                "--others",
                "--ignored",
                "--exclude-standard",
                "--directory",
            ],
            why,
            false,
        ));
        out.push((vec!["git", "diff", "-z", "--name-only", "HEAD"], why, false));
        if tamper == Some(loopbox_fsm::tamper::Policy::Revert) {
            out.push((
                vec!["git", "ls-files", "-z", "--cached"],
                "`tamper_guard: revert` asks git which changed files it tracks",
                false,
            ));
        }
        out.push((vec!["sha256sum", "-z", "--", "tests/test_x.py"], why, false));
    }
    let prepatch = loopbox_fsm::prepatch::effective(
        s.guards.prepatch_check.as_deref(),
        lp.guards.prepatch_check.as_deref(),
    );
    if prepatch.is_some() {
        let why = "`prepatch_check`, when `.ll/ll-config.json` enables it, reads the diff";
        out.push((vec!["git", "merge-base", "HEAD", "main"], why, true));
        out.push((vec!["git", "diff", "main", "--"], why, true));
        out.push((
            vec!["git", "ls-files", "-z", "--others", "--exclude-standard"],
            why,
            true,
        ));
        out.push((vec!["git", "show", "main:tests/test_x.py"], why, true));
    }
    out
}

/// The needs as `validate --json` reports them.
pub fn to_json(needs: &[Need]) -> Value {
    Value::Array(
        needs
            .iter()
            .map(|n| {
                json!({"key": n.key, "why": n.why, "states": n.states, "status": n.status.word()})
            })
            .collect(),
    )
}

/// One line a need, for `--grants`.
pub fn lines(needs: &[Need]) -> Vec<String> {
    needs
        .iter()
        .map(|n| {
            let states: Vec<String> = n.states.iter().map(|s| format!("`{s}`")).collect();
            format!(
                "  {:8} {}: {} (state {})",
                n.status.word(),
                n.key,
                n.why,
                states.join(", ")
            )
        })
        .collect()
}

/// The keys a run will be refused for: missing, and not decided at run time.
pub fn missing(needs: &[Need]) -> Vec<&str> {
    let mut keys: Vec<&str> = Vec::new();
    for n in needs.iter().filter(|n| n.status == Status::Missing) {
        if !keys.contains(&n.key.as_str()) {
            keys.push(&n.key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_commands_are_found_at_command_position_only() {
        assert_eq!(
            network_in_shell("set -e; gh pr checks 12 | grep pass && echo gh"),
            ["gh"]
        );
        assert_eq!(
            network_in_shell("FOO=1 git fetch origin && git diff"),
            ["git fetch"]
        );
        assert_eq!(
            network_in_shell("git status; echo curl"),
            Vec::<String>::new()
        );
        assert_eq!(
            network_in_shell("python3 check.py https://example.com/x"),
            ["an http(s) address"]
        );
        assert_eq!(network_in_shell("curl -s https://x"), ["curl"]);
        assert_eq!(network_in_shell("npm test && npm ci"), ["npm ci"]);
    }
}
