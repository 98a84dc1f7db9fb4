//! Builds what the comparisons run, from source: the Ralph policy in Python and
//! JavaScript (components), the Extism plugin of the same logic, and the
//! `durable` test guest (which runs N actions in one event). Their
//! paths reach the benches as environment variables.

fn main() {
    let repo = loopbox_guest_build::Repo::from_build_script();
    let py = repo.build_python_guest("ralph", "decider");
    let js = repo.build_js_guest("ralph", "decider", false);
    let extism = repo.build_extism_plugins(&["ralph-extism"]);
    let durable = repo.build_rust_guests(&["durable"]);
    println!("cargo:rustc-env=DURABLE={}", durable[0].1.display());
    println!("cargo:rustc-env=RALPH_PY={}", py.display());
    println!("cargo:rustc-env=RALPH_JS={}", js.display());
    println!("cargo:rustc-env=RALPH_EXTISM={}", extism[0].1.display());
}
