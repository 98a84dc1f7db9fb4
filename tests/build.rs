//! Builds every guest from source and tells the tests where each component
//! is, as `LOOPBOX_GUEST_<NAME>` (upper case, `-` as `_`; Python guests end in `_PY`, JavaScript ones in `_JS`).

fn main() {
    let repo = loopbox_guest_build::Repo::from_build_script();
    for (name, path) in repo.build_rust_guests(&["ralph", "todo-enforcer", "fix-forward", "probe"]) {
        println!("cargo:rustc-env=LOOPBOX_GUEST_{}={}", name.to_uppercase().replace('-', "_"), path.display());
    }
    let ralph_py = repo.build_python_guest("ralph", "decider");
    println!("cargo:rustc-env=LOOPBOX_GUEST_RALPH_PY={}", ralph_py.display());
    for name in ["todo-enforcer", "tool-gate"] {
        let path = repo.build_js_guest(name, "decider");
        println!("cargo:rustc-env=LOOPBOX_GUEST_{}_JS={}", name.to_uppercase().replace('-', "_"), path.display());
    }
}
