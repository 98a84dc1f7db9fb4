//! `loopbox runs export ID --scenario`: a journaled run as a scenario file
//! (see `loopbox::scenario::export`), printed or written with `-o FILE`, so a
//! bug seen in a real run becomes a test `loopbox test` runs.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::read_store;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run's id (see `loopbox runs`)
    id: String,
    /// Export the run as a scenario for `loopbox test` (the only format so far)
    #[arg(long, required = true)]
    scenario: bool,
    /// The policy the scenario names (default: the policy as the run names it)
    #[arg(long, value_name = "POLICY")]
    policy: Option<String>,
    /// Write the scenario to FILE (a new file) rather than to stdout
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn execute(args: ExportArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let db = read_store(workspace)?;
    db.existing_run(&args.id).map_err(Failure::lookup)?;
    // A YAML loop is named relative to where the scenario is written.
    let dir = match args.output.as_deref().and_then(Path::parent) {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let secrets = loopbox::scenario::export::pass_env_values(&db, &args.id, workspace);
    let text = loopbox::scenario::export::scenario_in(
        &db,
        &args.id,
        args.policy.as_deref(),
        dir,
        &secrets,
    )
    .map_err(Failure::lookup)?;
    match &args.output {
        Some(path) => {
            use std::io::Write;
            // Never over another file: an export is new.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| {
                    Failure::usage(anyhow::anyhow!(
                        "cannot write the scenario to `{}`: {e} (an export never replaces a file)",
                        path.display()
                    ))
                })?;
            if json {
                loopbox::outln!(
                    "{}",
                    json!({"run": args.id, "scenario": path.display().to_string()})
                );
            } else {
                loopbox::errln!(
                    "loopbox: wrote run {} as a scenario to {}; run it with `loopbox test {}`",
                    args.id,
                    path.display(),
                    path.display()
                );
            }
        }
        None if json => loopbox::outln!("{}", json!({"run": args.id, "scenario_text": text})),
        None => loopbox::outln!("{}", text.trim_end_matches('\n')),
    }
    Ok(exit::OK)
}
