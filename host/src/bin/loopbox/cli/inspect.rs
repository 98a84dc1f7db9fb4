//! `loopbox inspect POLICY`: what a component is and what it could ask for.

use std::path::Path;
use std::sync::Arc;

use clap::Args;

use super::Failure;
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::inspect::{Info, Inspection, capabilities, producers};
use loopbox::wasm::policy::PolicySource;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The policy: a path to a .wasm component, or builtin:NAME
    policy: String,
    /// Print one JSON object
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: InspectArgs, workspace: &Path) -> Result<i32, Failure> {
    let (config, _) = Config::discover(None, workspace).map_err(Failure::usage)?;
    let runtime = super::runtime(&config, workspace)?;
    let source = PolicySource::parse(&args.policy);
    let policy = runtime.load(&source).map_err(Failure::usage)?;

    // info() runs in a throwaway run with an in-memory store: inspecting grants nothing.
    let db = Db::open(Path::new(":memory:")).map_err(Failure::internal)?;
    db.create_run("inspect", &source.to_string(), &policy.digest, "{}")
        .map_err(Failure::internal)?;
    let sandbox = Config {
        limits: config.limits.clone(),
        ..Config::default()
    };
    let ctx = RunContext::new(
        "inspect".into(),
        Arc::new(sandbox),
        db,
        workspace,
        Ui::quiet(),
    )
    .map_err(Failure::usage)?;
    let info = super::tokio()?.block_on(ctx.info(&policy));

    let (languages, processed_by) = producers(&policy.wasm);
    let report = Inspection {
        policy: source.to_string(),
        world: policy.world.name(),
        size_bytes: policy.size,
        digest: policy.digest.clone(),
        capabilities: capabilities(&policy),
        imports: policy.interface.imports.clone(),
        exports: policy.interface.exports.clone(),
        info_error: info.as_ref().err().map(|e| e.to_string()),
        info: info.ok().map(|i| Info {
            name: i.name,
            version: i.version,
            description: i.description,
        }),
        languages,
        processed_by,
        cached: policy.cache == loopbox::wasm::cache::CacheOutcome::Hit,
    };
    if args.json {
        loopbox::outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serializable")
        );
    } else {
        loopbox::outln!("{}", report.human().trim_end_matches('\n'));
    }
    Ok(super::exit::OK)
}
