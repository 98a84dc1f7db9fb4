//! `loopbox new NAME --lang rust|python|js`: scaffold a policy project.

use std::path::Path;

use clap::Args;

use super::{Failure, exit};
use loopbox::project::{Language, scaffold};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The policy's name and directory: lower-case letters, digits and `-`
    name: String,
    /// The language to write it in
    #[arg(long, value_enum)]
    lang: Language,
}

pub fn execute(args: NewArgs, workspace: &Path) -> Result<i32, Failure> {
    let dir = scaffold::create(workspace, &args.name, args.lang).map_err(Failure::usage)?;
    // loopbox wrote this config itself: it is trusted as written.
    let config = dir.join(loopbox::files::CONFIG_FILE);
    if config.is_file()
        && let Err(f) = super::trust::approve_written(&config, &dir)
    {
        loopbox::errln!(
            "loopbox: note: {:#}; run `loopbox trust` in {} before `loopbox run`",
            f.error,
            dir.display()
        );
    }
    let shown = if workspace == Path::new(".") {
        args.name.clone()
    } else {
        dir.display().to_string()
    };
    loopbox::outln!("created {shown}/, a {} policy. Next:", args.lang.title());
    loopbox::outln!("  cd {shown}");
    loopbox::outln!("  loopbox build");
    loopbox::outln!(
        "  loopbox run {}.wasm --input '{{\"check\": [\"make\", \"test\"]}}'",
        args.name
    );
    Ok(exit::OK)
}
