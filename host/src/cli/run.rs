//! `loopbox run POLICY`: run a policy in the workspace until it ends.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::{Failure, json_arg};
use crate::config::Config;
use crate::confirm::{ApproveAll, Confirm, NoOneToAsk};
use crate::db::Db;
use crate::driver::{self, Asker, DriveOptions, NoAsker, RunEnd};
use crate::grants::{ExtraRules, parse_cli_rule};
use crate::policy::PolicySource;
use crate::record::outcome_json;
use crate::run::{Access, RunContext, new_run_id};
use crate::sandbox::Sandbox;
use crate::ui::{Ui, sanitize};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The policy: a path to a .wasm component, or builtin:NAME (ralph, todo-enforcer, fix-forward)
    policy: String,
    /// Config file (default: loopbox.toml in the workspace, if present)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The run's input, delivered with `start`: JSON, or @FILE to read it from a file
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    input: String,
    /// A tick to deliver when the policy waits for events (repeatable, in order): JSON or @FILE
    #[arg(long = "tick", value_name = "JSON|@FILE")]
    ticks: Vec<String>,
    /// Agent turns this run may take (overrides run.max_turns)
    #[arg(long, value_name = "N")]
    max_turns: Option<u32>,
    /// Allow commands starting with this argv prefix, e.g. --allow 'cargo test' (repeatable)
    #[arg(long, value_name = "RULE")]
    allow: Vec<String>,
    /// Ask before running commands starting with this prefix (repeatable)
    #[arg(long, value_name = "RULE")]
    ask: Vec<String>,
    /// Never run commands with these tokens, in any order (repeatable)
    #[arg(long, value_name = "RULE")]
    deny: Vec<String>,
    /// Approve every ask-tier action without asking
    #[arg(long)]
    yes: bool,
    /// Print the result as one JSON object on stdout (and no progress)
    #[arg(long)]
    json: bool,
}

/// Asks on the terminal whether an ask-tier action may run.
struct TerminalConfirm {
    ui: Ui,
}

impl Confirm for TerminalConfirm {
    fn confirm(&self, action: &str, rule: &str) -> Result<bool, String> {
        let message = format!("The policy wants to run {} (needs a yes: {})", sanitize(action), sanitize(rule));
        let answer = read_answer(&self.ui, &message, "Allow it? [y/N] ")
            .ok_or("there is no terminal to ask on (stdin is not a terminal, or CI is set); run on a terminal, or pass --yes to approve ask-tier actions")?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
    }
}

/// Show `message` and read one line from the person at the terminal; None without one
/// (stdin not a terminal, or `CI` set), or when reading fails.
fn read_answer(ui: &Ui, message: &str, prompt: &str) -> Option<String> {
    if !std::io::stdin().is_terminal() || std::env::var_os("CI").is_some() {
        return None;
    }
    let mut answer = String::new();
    ui.suspend(|| {
        eprintln!("\n{message}");
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        std::io::stdin().lock().read_line(&mut answer).ok()
    })?;
    Some(answer.trim_end_matches(['\n', '\r']).to_string())
}

fn cli_rules(args: &RunArgs) -> Result<ExtraRules, Failure> {
    let parse = |flag: &str, v: &[String]| {
        v.iter().map(|r| parse_cli_rule(r).map_err(|e| Failure::usage(anyhow::anyhow!("--{flag} {r:?}: {e}")))).collect::<Result<Vec<_>, _>>()
    };
    Ok(ExtraRules { allow: parse("allow", &args.allow)?, ask: parse("ask", &args.ask)?, deny: parse("deny", &args.deny)? })
}

/// Asks on the terminal; declines (returns None) without one or under CI.
struct TerminalAsker {
    ui: Ui,
}

impl Asker for TerminalAsker {
    fn ask(&self, question: &str) -> Option<String> {
        read_answer(&self.ui, &format!("The policy asks: {}", sanitize(question)), "answer> ")
    }
}

pub fn execute(args: RunArgs, workspace: &Path) -> Result<i32, Failure> {
    let (mut config, config_path) = Config::discover(args.config.as_deref(), workspace).map_err(Failure::usage)?;
    if let Some(n) = args.max_turns {
        if n == 0 {
            return Err(Failure::usage(anyhow::anyhow!("--max-turns must be at least 1")));
        }
        config.run.max_turns = n;
    }
    let input = json_arg("--input", &args.input)?;
    let ticks = args.ticks.iter().map(|t| json_arg("--tick", t)).collect::<Result<VecDeque<_>, _>>()?;
    let source = PolicySource::parse(&args.policy);

    let runtime = super::runtime(&config)?;
    let policy = runtime.load(&source).map_err(Failure::usage)?;
    let db = Db::open_workspace(workspace).map_err(Failure::internal)?;
    let ui = if args.json { Ui::quiet() } else { Ui::detect(false) };
    let id = new_run_id();
    db.create_run(&id, &source.to_string(), &policy.digest, &input).map_err(Failure::internal)?;
    let config = Arc::new(config);
    let extra = cli_rules(&args)?;
    let confirm: Arc<dyn Confirm> = if args.yes {
        Arc::new(ApproveAll)
    } else if args.json {
        Arc::new(NoOneToAsk("--json runs ask no one; pass --yes to approve ask-tier actions"))
    } else {
        Arc::new(TerminalConfirm { ui: ui.clone() })
    };
    let protected = config_path.into_iter().chain(source.path().map(Path::to_path_buf)).collect();
    let access = Access { rules: extra.clone(), confirm, protected, support: None };
    let ctx = RunContext::with_access(id.clone(), config.clone(), db.clone(), workspace, ui.clone(), access).map_err(Failure::usage)?;
    ui.line(banner(&id, &source, policy.world.name(), &config, &extra, args.yes, ctx.sandbox()));

    let asker: Box<dyn Asker> = if args.json { Box::new(NoAsker) } else { Box::new(TerminalAsker { ui: ui.clone() }) };
    let opts = DriveOptions { max_turns: config.run.max_turns, asker: asker.as_ref(), ticks };
    let end = super::tokio()?.block_on(driver::drive(&ctx, &policy, &input, opts)).map_err(Failure::internal)?;
    ui.finish();

    let outcome = match &end {
        RunEnd::Done(o) => Some(outcome_json(o)),
        _ => None,
    };
    db.set_status(&id, end.status(), outcome.as_ref().map(|o| o.to_string()).as_deref()).map_err(Failure::internal)?;
    let record = db.run(&id).map_err(Failure::internal)?.expect("the run was just created");
    let code = end.exit_code();
    if args.json {
        let out = json!({
            "run_id": id, "policy": source.to_string(), "world": policy.world.name(), "status": end.status(),
            "exit_code": code, "summary": end.summary(), "outcome": outcome, "turns": record.turns, "actions": record.actions,
        });
        println!("{out}");
    } else {
        println!("{}: {}", end.status(), sanitize(&end.summary()));
        if let RunEnd::Waiting(_) = end {
            println!("run {id} is parked in {}", db.path().display());
        }
    }
    Ok(code)
}

/// The first line of a run: what runs, and everything it is granted.
fn banner(id: &str, source: &PolicySource, world: &str, config: &Config, extra: &ExtraRules, yes: bool, sandbox: &Sandbox) -> String {
    let list = |a: &[Vec<String>], b: &[Vec<String>]| {
        let all: Vec<String> = a.iter().chain(b).map(|r| r.join(" ")).collect();
        if all.is_empty() { "none".to_string() } else { all.join("; ") }
    };
    let agent = config.agent.as_ref().map_or("none".to_string(), |a| a.command[0].clone());
    let mut line = format!(
        "loopbox: run {id} of {source} (world {world}); grants: exec [{}], scripts {}, agent {agent}",
        list(&config.shell.allow, &extra.allow),
        if config.shell.scripts { "ALLOWED" } else { "no" }
    );
    if !config.shell.ask.is_empty() || !extra.ask.is_empty() {
        line.push_str(&format!("; ask [{}]{}", list(&config.shell.ask, &extra.ask), if yes { " (all approved by --yes)" } else { "" }));
    }
    if !config.shell.deny.is_empty() || !extra.deny.is_empty() {
        line.push_str(&format!("; deny [{}]", list(&config.shell.deny, &extra.deny)));
    }
    line.push_str(&format!("; sandbox {}{}", sandbox.name(), if config.shell.network { " with network" } else { "" }));
    match sandbox {
        Sandbox::None { why } => line.push_str(&format!(" ({why}: commands run unconfined, scripts are refused)")),
        Sandbox::Unavailable(why) => line.push_str(&format!(" ({why}: every command will be refused)")),
        _ => {}
    }
    line
}
