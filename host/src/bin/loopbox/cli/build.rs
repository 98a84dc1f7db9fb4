//! `loopbox build [DIR]`: build a policy project into `NAME.wasm`, then load it
//! (which checks it is a policy and compiles it into the cache).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::config::Config;
use loopbox::project::{Manifest, build};
use loopbox::wasm::policy::PolicySource;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes:\n  0  built\n  1  the build failed: a tool is missing (the message says how to install it) or the toolchain reported errors\n  2  DIR is not a policy project, or what it built is not a policy of its world"
)]
pub struct BuildArgs {
    /// The project directory (default: the current directory)
    dir: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: BuildArgs, workspace: &Path) -> Result<i32, Failure> {
    let dir = args
        .dir
        .clone()
        .map(|d| workspace.join(d))
        .unwrap_or_else(|| workspace.to_path_buf());
    let manifest = Manifest::read(&dir).map_err(Failure::usage)?;
    let started = Instant::now();
    loopbox::errln!(
        "building {} ({}, world {})",
        manifest.name,
        manifest.language.title(),
        manifest.world
    );
    let out = build::build(&dir, &manifest).map_err(|e| Failure {
        code: exit::FAILURE,
        error: e.context(format!("failed to build `{}`", dir.display())),
    })?;
    let built_in = started.elapsed();

    let (config, _) = Config::discover(None, workspace).map_err(Failure::usage)?;
    let compiled = Instant::now();
    let policy = super::runtime(&config, workspace)?
        .load(&PolicySource::Path(out.clone()))
        .map_err(Failure::usage)?;
    if policy.world.name() != manifest.world {
        return Err(Failure::usage(anyhow::anyhow!(
            "`{}` was built for world `{}` but is a `{}` component: check `world` in policy.toml",
            out.display(),
            manifest.world,
            policy.world.name()
        )));
    }
    let compiled_in = compiled.elapsed();
    if args.json {
        let report = json!({
            "path": out, "name": manifest.name, "language": manifest.language.key(), "world": policy.world.name(),
            "size_bytes": policy.size, "build_seconds": built_in.as_secs_f64(), "compile_seconds": compiled_in.as_secs_f64(),
        });
        loopbox::outln!("{report}");
    } else {
        loopbox::outln!(
            "built {} ({}, world {}, {:.1} MB) in {:.1}s; compiled into the cache in {:.1}s",
            out.display(),
            manifest.language.title(),
            policy.world.name(),
            policy.size as f64 / 1e6,
            built_in.as_secs_f64(),
            compiled_in.as_secs_f64()
        );
    }
    Ok(exit::OK)
}
