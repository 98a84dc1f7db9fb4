//! The `loopbox` command. All the work is in the library; this maps its
//! outcome to an exit code.

fn main() {
    std::process::exit(loopbox::cli::main());
}
