//! The `loopbox` command: the library's runtime behind a clap command line.
//! Everything here is the front end (arguments, output, exit codes); the work
//! is in the `loopbox` library.

mod cli;
mod secrets;

fn main() {
    secrets::protect();
    std::process::exit(cli::main());
}
