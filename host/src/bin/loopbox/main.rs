//! The `loopbox` command: the library's runtime behind a clap command line.
//! Everything here is the front end (arguments, output, exit codes); the work
//! is in the `loopbox` library.

mod cli;
mod secrets;

fn main() {
    // Inside a sandbox with the network: carry its connections to the proxy.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == loopbox::exec::sandbox::bridge::ARG)
    {
        loopbox::exec::sandbox::bridge::main(&args[2..]);
    }
    if let Ok(exe) = std::env::current_exe() {
        loopbox::exec::sandbox::bridge::set_program(&exe);
    }
    secrets::protect();
    std::process::exit(cli::main());
}
