//! `loopbox validate LOOP.yaml`: the static checks of a YAML loop, without
//! running it. Every problem is printed as `FILE:LINE: message`; notes (what
//! loopbox reads and leaves alone, or what the loop needs at run time) as
//! `note: FILE:LINE: message`, on stderr, and do not fail the check.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::loops;
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
}

pub fn execute(args: ValidateArgs, workspace: &Path) -> Result<i32, Failure> {
    let (config, _) = loopbox::config::Config::discover(args.config.as_deref(), workspace)
        .map_err(Failure::usage)?;
    let file = loops::read(workspace, &args.file).map_err(Failure::usage)?;
    let result = loops::load(workspace, &file, &config);
    if args.json {
        let value = match &result {
            Ok(lp) => json!({
                "file": file.path, "valid": true, "problems": [],
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
            for note in &lp.notes {
                loopbox::errln!("note: {}", Untrusted(&note.to_string()));
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
