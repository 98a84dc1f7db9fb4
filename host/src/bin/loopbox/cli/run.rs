//! `loopbox run POLICY`: start a run in the workspace and drive it until it ends.

use std::path::{Path, PathBuf};

use clap::Args;

use super::drive::{Drive, catch_signals};
use super::{Failure, json_arg, text_arg};
use loopbox::bindings::Event;
use loopbox::db::Db;
use loopbox::loops;
use loopbox::run::driver::Next;
use loopbox::run::launch::{Launch, note_interrupted};
use loopbox::run::lifecycle;
use loopbox::run::new_run_id;
use loopbox::run::trust::Trust;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The policy: the NAME of a [policies.NAME] section (run under its grants), a path to a
    /// .wasm component, builtin:NAME (ralph, todo-enforcer, fix-forward, fsm), or a YAML loop (LOOP.yaml)
    policy: String,
    /// Config file (default: loopbox.toml in the workspace, if present)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The run's input, delivered with `start`: JSON, or @FILE to read it from a file.
    /// For a YAML loop: a JSON object of `context` values, or any text, which becomes
    /// `context.input` (the loop's `input_key`)
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
    /// For a YAML loop: pause this many seconds after each route, in place of
    /// its `backoff` (as `ll-loop run --delay`)
    #[arg(long, value_name = "SECONDS")]
    delay: Option<f64>,
    /// For a YAML loop: follow this little-loops release where releases
    /// differ (`1.156`, `1.167.0`), over the loop's own `little_loops:`
    #[arg(long, value_name = "RELEASE")]
    little_loops: Option<String>,
    /// Print the result as one JSON object on stdout (and no progress)
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: RunArgs, workspace: &Path) -> Result<i32, Failure> {
    let loop_file = loops::loop_path(&args.policy, &args.input);
    let absolute = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let launch = match loop_file {
        Some(_) => Launch::yaml_loop(workspace),
        None => Launch::new(workspace, &args.policy),
    };
    let launch = launch
        .config_file(args.config.as_deref().map(absolute))
        .rules(args.allow, args.ask, args.deny)
        .yes(args.yes)
        .max_turns(args.max_turns);
    // A config loopbox has not seen (a cloned repository's, a planted one) is
    // obeyed only once approved, here or by the person at the terminal.
    let trust = Trust::UserStoreOrAsk(super::trust::user_store()?, &super::trust::AtTerminal);
    let mut prepared = lifecycle::start(&trust, launch)?;
    prepared.options.ticks = args
        .ticks
        .iter()
        .map(|t| json_arg("--tick", t))
        .collect::<Result<_, _>>()?;
    let id = new_run_id();
    let input = match &loop_file {
        // A YAML loop is checked here, before anything runs, and travels as the input.
        Some(path) => {
            let file = loops::read(workspace, path).map_err(Failure::usage)?;
            let lp = loops::load(workspace, &file, &prepared.config).map_err(|problems| {
                Failure::usage(anyhow::anyhow!(
                    "the loop has {} problem(s):\n{}\n(`loopbox validate {}` checks a loop without running it)",
                    problems.len(),
                    loopbox_fsm::render(&problems),
                    path.display()
                ))
            })?;
            // With `builtin:fsm --input @LOOP.yaml` the input is the loop itself; with
            // `run LOOP.yaml`, --input (inline or @FILE) is the loop's input.
            let text = if loops::is_loop_file(&args.policy) {
                text_arg("--input", &args.input)?
            } else {
                "{}".to_string()
            };
            let run_dir = loops::run_dir(&id);
            let payload = loops::payload_delayed(
                &lp,
                &file,
                &text,
                &run_dir,
                workspace,
                args.delay,
                args.little_loops.as_deref(),
                loops::command_env(&prepared.config.shell),
                loops::asks(&prepared.config, !args.json && super::drive::can_ask()),
            )
            .map_err(Failure::usage)?;
            loops::create_run_dir(workspace, &run_dir).map_err(Failure::usage)?;
            prepared.options.loop_name = Some(lp.name.clone());
            payload
        }
        None if args.delay.is_some() => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--delay is for a YAML loop (its `backoff`); `{}` is not one",
                args.policy
            )));
        }
        None if args.little_loops.is_some() => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--little-loops is for a YAML loop; `{}` is not one",
                args.policy
            )));
        }
        None => json_arg("--input", &args.input)?,
    };

    let policy = prepared.load()?;
    let db = Db::open_workspace(workspace).map_err(Failure::internal)?;
    note_interrupted(&db);
    let signals = catch_signals()?;
    db.create_driven_run(
        &id,
        &prepared.shown(),
        &policy.digest,
        &input,
        &prepared.options,
    )
    .map_err(Failure::internal)?;
    let run = db.existing_run(&id).map_err(Failure::internal)?;
    let drive = Drive {
        signals,
        db,
        run,
        policy,
        json: args.json,
        banner: true,
        resend_turn: false,
    };
    drive.until_it_stops(&prepared, Next::Deliver(Event::Start(input)))
}
