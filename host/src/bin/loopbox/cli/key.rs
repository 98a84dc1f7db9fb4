//! `loopbox key new|show FILE`: signing keys for publishing policies.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{Failure, exit};
use loopbox::dist::sign::SecretKey;

#[derive(Debug, Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    command: KeyCommand,
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Make a signing key in FILE (readable by you alone) and print its public key
    New { file: PathBuf },
    /// Print the public key of the signing key in FILE
    Show { file: PathBuf },
}

pub fn execute(args: KeyArgs) -> Result<i32, Failure> {
    let (key, made) = match &args.command {
        KeyCommand::New { file } => (
            SecretKey::generate(file).map_err(Failure::usage)?,
            Some(file),
        ),
        KeyCommand::Show { file } => (SecretKey::read(file).map_err(Failure::usage)?, None),
    };
    loopbox::outln!("{}", key.public());
    if let Some(file) = made {
        loopbox::errln!(
            "made a signing key in {} (keep it secret); sign with `loopbox publish DIR REF --key {}`.\n\
             Those who trust you add the line above under [trust.keys] in their loopbox.toml, e.g. `you = \"{}\"`",
            file.display(),
            file.display(),
            key.public()
        );
    }
    Ok(exit::OK)
}
