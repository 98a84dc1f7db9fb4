//! `loopbox validate LOOP.yaml`: the static checks of a YAML loop, without
//! running it. Every problem is printed as `FILE:LINE: message`; notes (what
//! loopbox reads and leaves alone, or what the loop needs at run time) as
//! `note: FILE:LINE: message`, on stderr, and do not fail the check; nor do
//! warnings (`warning: ...`): the loop's budget above loopbox's limits,
//! bash-only shell lines when bash is not on `shell.path`, and rules that
//! cannot be safe (`["sed"]` allows `sed` alone: its language runs commands). `--grants` lists
//! what the loop needs from loopbox.toml (`validate_grants.rs`); without it,
//! the missing grants are one note.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::loops;

#[path = "validate_grants.rs"]
mod grants;
use loopbox::ui::{Untrusted, one_line};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The loop file (little-loops FSM YAML)
    file: PathBuf,
    /// Config file, for limits.read_bytes on imports (default: loopbox.toml in the workspace, if present)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the result as one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
    /// List what the loop needs from loopbox.toml (scripts, argv rules, agent,
    /// network), each marked granted or missing
    #[arg(long)]
    grants: bool,
}

pub fn execute(args: ValidateArgs, workspace: &Path) -> Result<i32, Failure> {
    let (mut config, config_path) =
        loopbox::config::Config::discover(args.config.as_deref(), workspace)
            .map_err(Failure::usage)?;
    let file = loops::read(workspace, &args.file).map_err(Failure::usage)?;
    let result = loops::load(workspace, &file, &config);
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let needs = match &result {
        Ok(lp) => grants::needs(lp, &config, &root),
        Err(_) => Vec::new(),
    };
    // The config's text, read once: for the keys it sets itself, and its trust.
    let config_text = config_path.as_deref().and_then(|p| {
        loopbox::files::read_text(p, loopbox::files::MAX_CONFIG_BYTES, "config").ok()
    });
    // What a run of this loop will hit first: loopbox's budgets (as a run of
    // `builtin:fsm` raises them), and bash missing for its bash-only lines.
    let warnings: Vec<String> = match &result {
        Ok(lp) => {
            loops::budgets(&mut config, config_text.as_deref(), None);
            let mut w = loops::budget_warnings(lp, &config);
            // A rule like `["sed"]` allows `sed` alone: the loop's commands need theirs named whole.
            w.extend(loopbox::exec::grants::rule_warnings([&config.shell], &root));
            if config
                .shell
                .child_env(&root)
                .resolve_program("bash", &root)
                .is_none()
            {
                w.extend(loops::bash_only_lines(lp).into_iter().map(
                    |(file, line, state, what)| {
                        format!(
                            "{file}:{line}: state `{state}`: {what} needs bash, which is not on shell.path = `{}` (YAML loops run shell actions with bash, as little-loops does): install bash or add its directory to shell.path",
                            config.shell.path
                        )
                    },
                ));
            }
            w
        }
        Err(_) => Vec::new(),
    };
    if args.json {
        let value = match &result {
            Ok(lp) => json!({
                "file": file.path, "valid": true, "problems": [], "warnings": warnings,
                "needs": grants::to_json(&needs),
                "notes": lp.notes.iter().map(|p| json!({"file": p.file, "line": p.line, "message": p.message})).collect::<Vec<_>>(),
                "loop": {
                    "name": lp.name, "initial": lp.initial.state, "max_steps": lp.max_steps,
                    "states": lp.states.iter().map(|s| &s.name).collect::<Vec<_>>(),
                },
            }),
            Err(problems) => json!({
                "file": file.path, "valid": false,
                "problems": problems.iter().map(|p| json!({"file": p.file, "line": p.line, "message": p.message})).collect::<Vec<_>>(),
            }),
        };
        loopbox::outln!("{value}");
        return Ok(if result.is_ok() {
            exit::OK
        } else {
            exit::USAGE
        });
    }
    match result {
        Ok(lp) => {
            // Names and messages quote the loop file: escaped, and kept to their lines.
            let terminals: Vec<String> = lp
                .states
                .iter()
                .filter(|s| s.terminal)
                .map(|s| one_line(&s.name))
                .collect();
            loopbox::outln!(
                "ok: {} is loop `{}`: {} states, starts at `{}`, ends at {}, at most {} steps",
                one_line(&file.path),
                one_line(&lp.name),
                lp.states.len(),
                one_line(&lp.initial.state),
                terminals
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                lp.max_steps
            );
            if args.grants {
                // A config nobody approved grants nothing yet: say so, or its
                // `granted` lines would read as a reason to trust it.
                let from = match config_path.as_deref() {
                    None => "loopbox.toml (none found: nothing granted)".to_string(),
                    Some(p) if config_trusted(p, config_text.as_deref()) => p.display().to_string(),
                    Some(p) => format!(
                        "{} (not trusted yet: nothing is granted until `loopbox trust {}`; marked as it would grant once trusted)",
                        p.display(),
                        loopbox::exec::grants::shell_quote(&p.to_string_lossy())
                    ),
                };
                loopbox::outln!("needs from {}:", Untrusted(&from));
                for line in grants::lines(&needs) {
                    // One line each: a name holding a newline must not forge a second.
                    loopbox::outln!("{}", one_line(&line));
                }
            }
            for note in &lp.notes {
                loopbox::errln!("note: {}", Untrusted(&note.to_string()));
            }
            let missing = grants::missing(&needs);
            if !args.grants && !missing.is_empty() {
                loopbox::errln!(
                    "note: a run needs what loopbox.toml does not grant: {}; `loopbox validate --grants {}` lists each state's needs",
                    Untrusted(&missing.join(", ")),
                    args.file.display()
                );
            }
            for w in &warnings {
                loopbox::errln!("warning: {}", Untrusted(w));
            }
            Ok(exit::OK)
        }
        Err(problems) => {
            // As `loopbox_fsm::render` orders them, one problem a line: a newline in
            // what a problem quotes is indented under it.
            let mut sorted = problems.clone();
            sorted.sort_by(|a, b| (a.file.as_str(), a.line).cmp(&(b.file.as_str(), b.line)));
            sorted.dedup();
            for p in &sorted {
                loopbox::errln!("{}", Untrusted(&p.to_string()));
            }
            loopbox::errln!(
                "error: {} has {} problem(s); fix them and run `loopbox validate {}` again",
                one_line(&file.path),
                problems.len(),
                args.file.display()
            );
            Ok(exit::USAGE)
        }
    }
}

/// Whether the user approved the config at `path`, whose text is `text`.
fn config_trusted(path: &std::path::Path, text: Option<&str>) -> bool {
    let Some(text) = text else {
        return false;
    };
    loopbox::trust::TrustStore::for_user()
        .and_then(|store| store.require(path, &loopbox::trust::digest(text.as_bytes())))
        .is_ok()
}
