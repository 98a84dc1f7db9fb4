//! Builds every guest from source and tells the tests where each component
//! is, as `LOOPBOX_GUEST_<NAME>` (upper case, `-` as `_`; Python guests end in `_PY`, JavaScript ones in `_JS`, TypeScript ones in `_TS`).

fn main() {
    let repo = loopbox_guest_build::Repo::from_build_script();
    let env = |name: &str, path: &std::path::Path| {
        println!(
            "cargo:rustc-env=LOOPBOX_GUEST_{}={}",
            name.to_uppercase().replace('-', "_"),
            path.display()
        )
    };
    for (name, path) in repo.build_rust_guests(&["ralph", "todo-enforcer", "fix-forward", "probe"])
    {
        env(&name, &path);
    }
    env("ralph_py", &repo.build_python_guest("ralph", "decider"));
    env("ccw_py", &repo.build_python_guest("ccw", "loop-policy"));
    env(
        "misbehave_py",
        &repo.build_python_guest("misbehave", "decider"),
    );
    for name in ["todo-enforcer", "tool-gate", "misbehave", "ralph"] {
        env(
            &format!("{name}_js"),
            &repo.build_js_guest(name, "decider", false),
        );
    }
    // TypeScript, written with the JavaScript SDK (bundled by esbuild first).
    env(
        "green_tests_ts",
        &repo.build_js_guest("green-tests-ts", "loop-policy", false),
    );
    // The same policy with componentize-js's HTTP support left in: it imports wasi:http.
    env(
        "misbehave_http_js",
        &repo.build_js_guest("misbehave", "decider", true),
    );
}
