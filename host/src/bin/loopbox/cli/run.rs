//! `loopbox run POLICY`: start a run in the workspace and drive it until it ends.

use std::path::{Path, PathBuf};

use clap::Args;

use super::drive::{Drive, catch_signals, for_run, note_interrupted};
use super::{Failure, json_arg, text_arg};
use loopbox::db::{Db, RunOptions};
use loopbox::dist::installed::Installed;
use loopbox::loops;
use loopbox::run::driver::Next;
use loopbox::run::new_run_id;
use loopbox::wasm::bindings::Event;
use loopbox::wasm::policy::PolicySource;

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
    /// Print the result as one JSON object on stdout (and no progress)
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: RunArgs, workspace: &Path) -> Result<i32, Failure> {
    let loop_file = loops::loop_path(&args.policy, &args.input);
    let absolute = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let config_file = args.config.as_deref().map(absolute);
    // A name the config installs as [policies.NAME] runs that component under that
    // section's grants; anything else is a path or builtin under the top-level ones.
    let found = loopbox::config::Config::discover_hashed(config_file.as_deref(), workspace)
        .map_err(Failure::usage)?;
    // A config loopbox has not seen (a cloned repository's, a planted one) is obeyed only once approved.
    super::trust::obey(&found)?;
    let (all, config_path) = (found.config, found.path);
    let installed = match loop_file {
        None => Installed::resolve(&all, config_path.as_deref(), workspace, &args.policy)
            .map_err(Failure::usage)?,
        Some(_) => None,
    };
    let source = match &installed {
        Some(i) => i.source.clone(),
        None if loop_file.is_some() => PolicySource::parse(loops::FSM),
        None => PolicySource::parse(&args.policy),
    };
    let options = RunOptions {
        policy_path: source.path().map(absolute),
        config: config_file,
        policy_name: installed.as_ref().map(|i| i.name.clone()),
        allow: args.allow,
        ask: args.ask,
        deny: args.deny,
        yes: args.yes,
        max_turns: args.max_turns,
        ticks: args
            .ticks
            .iter()
            .map(|t| json_arg("--tick", t))
            .collect::<Result<_, _>>()?,
        hook: false,
        grants: None,
    };
    let config = for_run(all, &options)?;
    super::drive::cli_rules(&options)?;
    let mut options = options;
    options.grants = Some(loopbox::run::pin::pin(&config, workspace));
    let id = new_run_id();
    let input = match &loop_file {
        // A YAML loop is checked here, before anything runs, and travels as the input.
        Some(path) => {
            let file = loops::read(workspace, path).map_err(Failure::usage)?;
            let lp = loops::load(workspace, &file, &config).map_err(|problems| {
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
            let payload =
                loops::payload(&lp, &file, &text, &run_dir, workspace).map_err(Failure::usage)?;
            loops::create_run_dir(workspace, &run_dir).map_err(Failure::usage)?;
            payload
        }
        None => json_arg("--input", &args.input)?,
    };

    let runtime = super::runtime(&config, workspace)?;
    let policy = match &installed {
        Some(i) => i.load(&runtime, &config),
        None => runtime.load(&source),
    }
    .map_err(Failure::usage)?;
    let db = Db::open_workspace(workspace).map_err(Failure::internal)?;
    note_interrupted(&db);
    let signals = catch_signals()?;
    let shown = installed
        .as_ref()
        .map_or(source.to_string(), Installed::display);
    db.create_driven_run(&id, &shown, &policy.digest, &input, &options)
        .map_err(Failure::internal)?;
    let run = db.existing_run(&id).map_err(Failure::internal)?;
    let drive = Drive {
        signals,
        workspace,
        db,
        run,
        policy,
        config,
        config_path,
        json: args.json,
        banner: true,
        resend_turn: false,
    };
    drive.until_it_stops(Next::Deliver(Event::Start(input)))
}
