//! Builds the shipped Rust policies to components and puts them in OUT_DIR,
//! where `src/builtin.rs` embeds them as `builtin:NAME`.

fn main() {
    let repo = loopbox_guest_build::Repo::from_build_script();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for (name, path) in repo.build_rust_guests(&["ralph", "todo-enforcer", "fix-forward", "fsm"]) {
        std::fs::copy(&path, out.join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copy {}: {e}", path.display()));
    }
}
