//! What `loopbox run` and `loopbox runs resume|answer|tick` share: turning a
//! run's options into its config and grants, asking on the terminal, driving
//! the run to its end (or until it parks), and reporting how it ended.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::{Failure, exit};
use loopbox::config::Config;
use loopbox::db::{Db, RunOptions, RunRecord};
use loopbox::dist::installed::Installed;
use loopbox::exec::confirm::{ApproveAll, Confirm, NoOneToAsk};
use loopbox::exec::grants::{ExtraRules, parse_cli_rule};
use loopbox::exec::sandbox::Sandbox;
use loopbox::loops;
use loopbox::run::driver::{self, Asker, DriveOptions, Next, NoAsker, RunEnd};
use loopbox::run::record::outcome_json;
use loopbox::run::stop::{Stop, StopReason};
use loopbox::run::{Access, RunContext};
use loopbox::ui::{Ui, Untrusted, one_line};
use loopbox::wasm::policy::{Policy, PolicySource};

/// The config a run's options name, as the run sees it (see [`for_run`]).
pub fn config_for(
    options: &RunOptions,
    workspace: &Path,
) -> Result<(Config, Option<PathBuf>), Failure> {
    let (config, path) =
        Config::discover(options.config.as_deref(), workspace).map_err(Failure::usage)?;
    Ok((for_run(config, options)?, path))
}

/// `config` as a run with these options sees it: scoped to its `[policies.NAME]`
/// when it has one, with `--max-turns` applied.
pub fn for_run(config: Config, options: &RunOptions) -> Result<Config, Failure> {
    let mut config = match &options.policy_name {
        None => config,
        Some(name) => config.scoped(name).map_err(|_| {
            Failure::usage(anyhow::anyhow!(
                "the run was started as policy `{name}`, under the grants of [policies.{name}], which the config no longer has; \
                 restore that section, or cancel the run"
            ))
        })?,
    };
    if let Some(n) = options.max_turns {
        if n == 0 {
            return Err(Failure::usage(anyhow::anyhow!(
                "--max-turns must be at least 1"
            )));
        }
        config.run.max_turns = n;
    }
    Ok(config)
}

pub fn cli_rules(options: &RunOptions) -> Result<ExtraRules, Failure> {
    let parse = |flag: &str, v: &[String]| {
        v.iter()
            .map(|r| {
                parse_cli_rule(r)
                    .map_err(|e| Failure::usage(anyhow::anyhow!("--{flag} {r:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(ExtraRules {
        allow: parse("allow", &options.allow)?,
        ask: parse("ask", &options.ask)?,
        deny: parse("deny", &options.deny)?,
    })
}

/// The grants a run's config gives, named for the banner and `runs show`.
pub fn grant_set(options: &RunOptions) -> String {
    match &options.policy_name {
        Some(name) => format!("[policies.{name}]"),
        None => "the top-level sections".to_string(),
    }
}

/// Load the policy of a run: one started by name is resolved again from its
/// `[policies.NAME]` and admitted (digests, signature) before it compiles;
/// any other loads from `source`.
pub fn load_policy(
    runtime: &loopbox::wasm::runtime::Runtime,
    config: &Config,
    config_path: Option<&Path>,
    workspace: &Path,
    options: &RunOptions,
    source: &PolicySource,
) -> Result<Policy, Failure> {
    let Some(name) = &options.policy_name else {
        return runtime.load(source).map_err(Failure::usage);
    };
    let installed = Installed::resolve(config, config_path, workspace, name)
        .map_err(Failure::usage)?
        .ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "there is no [policies.{name}] in the config"
            ))
        })?;
    installed.load(runtime, config).map_err(Failure::usage)
}

/// The policy a run was started with: its recorded path, else its source text.
pub fn policy_source(run: &RunRecord) -> PolicySource {
    match &run.options.policy_path {
        Some(p) => PolicySource::Path(p.clone()),
        None => PolicySource::parse(&run.policy),
    }
}

/// One process driving one run.
pub struct Drive<'a> {
    /// Listening for SIGINT and SIGTERM since before the run was marked running.
    pub signals: Signals,
    pub workspace: &'a Path,
    pub db: Db,
    pub run: RunRecord,
    pub policy: Policy,
    pub config: Config,
    pub config_path: Option<PathBuf>,
    pub json: bool,
    /// Print the grants banner (a new run) or a one-line "resuming" note.
    pub banner: bool,
    pub resend_turn: bool,
}

impl Drive<'_> {
    /// Drive the run from `next`, record how it ended, print it; the exit code.
    pub fn until_it_stops(self, next: Next) -> Result<i32, Failure> {
        let Drive {
            signals,
            workspace,
            db,
            run,
            policy,
            config,
            config_path,
            json,
            banner,
            resend_turn,
        } = self;
        let ui = if json { Ui::quiet() } else { Ui::detect(false) };
        let extra = cli_rules(&run.options)?;
        let yes = run.options.yes;
        let confirm: Arc<dyn Confirm> = if yes {
            Arc::new(ApproveAll)
        } else if json {
            Arc::new(NoOneToAsk(
                "--json runs ask no one; pass --yes to approve ask-tier actions",
            ))
        } else {
            Arc::new(TerminalConfirm { ui: ui.clone() })
        };
        let source = policy.source.clone();
        // A YAML loop: its own max_steps and timeout govern it (loopbox's budgets
        // stay a safety net well above), and its shell runs with bash.
        let yaml_loop = is_yaml_loop(&source);
        let mut config = config;
        if yaml_loop {
            let text = config_path.as_deref().and_then(|p| {
                loopbox::files::read_text(p, loopbox::files::MAX_CONFIG_BYTES, "config").ok()
            });
            loops::budgets(
                &mut config,
                text.as_deref(),
                run.options.policy_name.as_deref(),
            );
        }
        let protected = loopbox::run::own_files(config_path, &source);
        let access = Access {
            rules: extra.clone(),
            confirm,
            protected,
            support: None,
        };
        let config = Arc::new(config);
        let ctx = RunContext::with_access(
            run.id.clone(),
            config.clone(),
            db.clone(),
            workspace,
            ui.clone(),
            access,
        )
        .map_err(Failure::usage)?;
        if yaml_loop {
            ctx.scripts_with_bash();
        }
        if banner {
            ui.line(grants_banner(
                &run.id,
                &run.policy,
                run.options.policy_name.as_deref(),
                policy.world.name(),
                &config,
                &extra,
                yes,
                ctx.sandbox(),
                yaml_loop,
            ));
        } else {
            ui.line(format!(
                "loopbox: resuming run {} of {} (world {}); sandbox {}",
                run.id,
                run.policy,
                policy.world.name(),
                ctx.sandbox().name()
            ));
        }

        let delivered = db.ticks_delivered(&run.id).map_err(Failure::internal)?;
        let ticks: VecDeque<String> = run.options.ticks.iter().skip(delivered).cloned().collect();
        let asker: Box<dyn Asker> = if json {
            Box::new(NoAsker)
        } else {
            Box::new(TerminalAsker { ui: ui.clone() })
        };
        let opts = DriveOptions {
            max_turns: config.run.max_turns,
            asker: asker.as_ref(),
            ticks,
            resend_turn,
        };
        let Signals { runtime, int, term } = signals;
        let end = runtime.block_on(async {
            let signals =
                tokio::spawn(watch_signals(int, term, ctx.stop().clone(), run.id.clone()));
            let end = driver::drive(&ctx, &policy, next, opts).await;
            signals.abort();
            end
        });
        ui.finish();
        let end = end.map_err(|e| {
            Failure::internal(e.context(format!("run {} stopped; once the cause is fixed, continue it with `loopbox runs resume {}`", run.id, run.id)))
        })?;
        report(&db, &run.id, &source, policy.world.name(), &end, json)
    }
}

/// The runtime a run is driven on, with SIGINT and SIGTERM already caught. Made
/// before the run is marked running, so a signal that comes as soon as it is
/// (`runs` shows it) stops the run instead of killing loopbox.
pub struct Signals {
    runtime: tokio::runtime::Runtime,
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

pub fn catch_signals() -> Result<Signals, Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = super::tokio()?;
    let caught = {
        let _in_runtime = runtime.enter();
        signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)))
    };
    let (int, term) = caught.map_err(|e| {
        Failure::internal(anyhow::Error::from(e).context("failed to catch SIGINT and SIGTERM"))
    })?;
    Ok(Signals { runtime, int, term })
}

/// The first SIGINT or SIGTERM stops the run where it stands (it can be resumed);
/// a second one ends loopbox at once, as a crash would.
async fn watch_signals(
    mut int: tokio::signal::unix::Signal,
    mut term: tokio::signal::unix::Signal,
    stop: Arc<Stop>,
    id: String,
) {
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    loopbox::errln!(
        "\nloopbox: stopping run {id} where it stands (signal again to quit at once); resume it with `loopbox runs resume {id}`"
    );
    stop.request(StopReason::Interrupted);
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    std::process::exit(exit::INTERRUPTED);
}

/// Record how the run ended (and give up its lease), then print it.
pub fn report(
    db: &Db,
    id: &str,
    source: &PolicySource,
    world: &str,
    end: &RunEnd,
    json: bool,
) -> Result<i32, Failure> {
    let outcome = match end {
        RunEnd::Done(o) => Some(outcome_json(o)),
        _ => None,
    };
    db.finish_driving(
        id,
        end.status(),
        outcome.as_ref().map(|o| o.to_string()).as_deref(),
    )
    .map_err(Failure::internal)?;
    let record = db.existing_run(id).map_err(Failure::internal)?;
    let code = exit_code(end, is_yaml_loop(source));
    if json {
        let out = json!({
            "run_id": id, "policy": source.to_string(), "world": world, "status": end.status(),
            "exit_code": code, "summary": end.summary(), "outcome": outcome, "turns": record.turns, "actions": record.actions,
        });
        loopbox::outln!("{out}");
    } else {
        loopbox::outln!("{}: {}", end.status(), Untrusted(&end.summary()));
        match end {
            RunEnd::Waiting(_) => loopbox::outln!("run {id} is parked in {}", db.path().display()),
            RunEnd::TurnUnknown(_) => loopbox::outln!(
                "resume it with `loopbox runs resume {id} --resend-turn`, or stop it with `loopbox runs cancel {id}`"
            ),
            RunEnd::Interrupted => loopbox::outln!(
                "resume it with `loopbox runs resume {id}`, or stop it with `loopbox runs cancel {id}`"
            ),
            _ => {}
        }
    }
    Ok(code)
}

/// Take the run for this process, or say who has it.
pub fn acquire(db: &Db, id: &str) -> Result<(), Failure> {
    match db.acquire(id).map_err(Failure::internal)? {
        Ok(()) => Ok(()),
        Err(holder) => Err(Failure {
            code: exit::BUSY,
            error: anyhow::anyhow!(
                "run {id} is being driven by another loopbox process (pid {} on {}); wait for it to finish, or stop it with `loopbox runs cancel {id}`",
                holder.pid,
                holder.host
            ),
        }),
    }
}

/// Say which runs were interrupted (their driver died) and how to pick them up.
pub fn note_interrupted(db: &Db) {
    if let Ok(runs) = db.find_interrupted() {
        for r in runs {
            loopbox::errln!(
                "note: run {} of {} was interrupted (its loopbox process stopped); resume it with `loopbox runs resume {}`, or stop it with `loopbox runs cancel {}`",
                r.id,
                one_line(&r.policy),
                r.id,
                r.id
            );
        }
    }
}

/// Asks on the terminal whether an ask-tier action may run.
struct TerminalConfirm {
    ui: Ui,
}

impl Confirm for TerminalConfirm {
    fn confirm(&self, action: &str, rule: &str) -> Result<bool, String> {
        let message = format!(
            "The policy wants to run {} (needs a yes: {})",
            Untrusted(action),
            Untrusted(rule)
        );
        let answer = read_answer(&self.ui, &message, "Allow it? [y/N] ")
            .ok_or("there is no terminal to ask on (stdin is not a terminal, or CI is set); run on a terminal, or pass --yes to approve ask-tier actions")?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
    }
}

/// Asks on the terminal; declines (returns None) without one or under CI.
struct TerminalAsker {
    ui: Ui,
}

impl Asker for TerminalAsker {
    fn ask(&self, question: &str) -> Option<String> {
        read_answer(
            &self.ui,
            &format!("The policy asks: {}", Untrusted(question)),
            "answer> ",
        )
    }
}

/// Show `message` and read one line from the person at the terminal; None without one
/// (stdin not a terminal, or `CI` set), or when reading fails.
pub fn read_answer(ui: &Ui, message: &str, prompt: &str) -> Option<String> {
    if !std::io::stdin().is_terminal() || std::env::var_os("CI").is_some() {
        return None;
    }
    let mut answer = String::new();
    ui.suspend(|| {
        loopbox::errln!("\n{message}");
        loopbox::errprint!("{prompt}");
        let _ = std::io::stderr().flush();
        std::io::stdin().lock().read_line(&mut answer).ok()
    })?;
    Some(answer.trim_end_matches(['\n', '\r']).to_string())
}

/// The first line of a run: what runs, and everything it is granted.
#[allow(clippy::too_many_arguments)]
fn grants_banner(
    id: &str,
    source: &str,
    name: Option<&str>,
    world: &str,
    config: &Config,
    extra: &ExtraRules,
    yes: bool,
    sandbox: &Sandbox,
    yaml_loop: bool,
) -> String {
    let list = |a: &[Vec<String>], b: &[Vec<String>]| {
        let all: Vec<String> = a.iter().chain(b).map(|r| r.join(" ")).collect();
        if all.is_empty() {
            "none".to_string()
        } else {
            all.join("; ")
        }
    };
    let agent = config
        .agent
        .as_ref()
        .map_or("none".to_string(), |a| a.command[0].clone());
    let mut line = format!(
        "loopbox: run {id} of {source} (world {world}); grants{}: exec [{}], scripts {}, agent {agent}",
        name.map(|n| format!(" of [policies.{n}]"))
            .unwrap_or_default(),
        list(&config.shell.allow, &extra.allow),
        if config.shell.scripts {
            "ALLOWED"
        } else {
            "no"
        }
    );
    if yaml_loop {
        line.push_str(&format!(
            "; a YAML loop: shell actions run with bash (as in little-loops), budgets limits.actions_per_run {}{}",
            config.limits.actions_per_run,
            config
                .agent
                .as_ref()
                .map(|a| format!(", agent.max_prompts {}", a.max_prompts))
                .unwrap_or_default()
        ));
    }
    if !config.shell.ask.is_empty() || !extra.ask.is_empty() {
        line.push_str(&format!(
            "; ask [{}]{}",
            list(&config.shell.ask, &extra.ask),
            if yes { " (all approved by --yes)" } else { "" }
        ));
    }
    if config.workspace.read != [".".to_string()] {
        line.push_str(&format!("; read [{}]", config.workspace.read.join(", ")));
    }
    if !config.shell.deny.is_empty() || !extra.deny.is_empty() {
        line.push_str(&format!(
            "; deny [{}]",
            list(&config.shell.deny, &extra.deny)
        ));
    }
    line.push_str(&format!(
        "; sandbox {}{}",
        sandbox.name(),
        if config.shell.network {
            " with network"
        } else {
            ""
        }
    ));
    match sandbox {
        Sandbox::None { why } => line.push_str(&format!(
            " ({why}: commands run unconfined, scripts are refused)"
        )),
        Sandbox::Unavailable(why) => {
            line.push_str(&format!(" ({why}: every command will be refused)"))
        }
        _ => {}
    }
    line
}

/// The exit code of a YAML loop that ends in a failure terminal state:
/// little-loops' `FAILURE_TERMINAL_EXIT_CODE` (the same number as a usage error).
const LOOP_FAILURE_TERMINAL: i32 = 2;

/// `builtin:fsm`'s outcome data says the loop ended in a terminal state (a
/// failure one, since the outcome is not a success).
fn failure_terminal(data: Option<&str>) -> bool {
    data.and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .is_some_and(|d| d["terminated_by"] == "terminal")
}

/// A run of `builtin:fsm`, the YAML loop interpreter.
fn is_yaml_loop(source: &PolicySource) -> bool {
    matches!(source, PolicySource::Builtin(n) if format!("builtin:{n}") == loops::FSM)
}

/// The process exit code of a run's end (see the README's table). A YAML
/// loop that reaches a failure terminal exits 2, as `ll-loop run` does
/// (`FAILURE_TERMINAL_EXIT_CODE`, `cli/loop/_helpers.py::run_foreground`),
/// for queues that test for it; its other failures exit 1.
fn exit_code(end: &RunEnd, yaml_loop: bool) -> i32 {
    match end {
        RunEnd::Done(o) if o.success => exit::OK,
        RunEnd::Done(o) if yaml_loop && failure_terminal(o.data.as_deref()) => {
            LOOP_FAILURE_TERMINAL
        }
        RunEnd::Stopped { .. } => exit::OK,
        RunEnd::Done(_) | RunEnd::Blocked(_) => exit::FAILURE,
        RunEnd::Escalated(_) => exit::ESCALATED,
        RunEnd::Waiting(_) => exit::WAITING,
        RunEnd::Fault(_) => exit::FAULT,
        RunEnd::TurnBudget(_) => exit::TURN_BUDGET,
        RunEnd::Agent(_) => exit::AGENT,
        RunEnd::Cancelled => exit::CANCELLED,
        RunEnd::TurnUnknown(_) => exit::UNKNOWN_TURN,
        RunEnd::Interrupted => exit::INTERRUPTED,
    }
}
