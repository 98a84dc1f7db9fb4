//! Cold start against cached start, per guest language: the whole `loopbox run`
//! process up to the policy's first decision. Cold runs get an empty
//! component cache, so they compile the component; cached runs load the
//! compiled artifact the first run left.
//!
//! `cargo bench -p loopbox --bench cold_start` builds the guests from source
//! (Ralph in Rust, Python and JavaScript) and prints one table; samples of every row are interleaved so machine noise hits each alike.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

/// One run to its first decision. Ralph injects and the workspace has no agent,
/// so the run ends there with exit 7.
fn run(policy: &str, input: &str, expect: i32, workspace: &Path, cache: &Path) -> Duration {
    let t = Instant::now();
    // stderr is kept (not inherited) so a failure can say why, without the
    // progress lines cluttering the table.
    let out = Command::new(BIN)
        .args(["run", policy, "--input", input])
        .current_dir(workspace)
        .env("LOOPBOX_CACHE_DIR", cache)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn loopbox");
    let elapsed = t.elapsed();
    assert_eq!(
        out.status.code(),
        Some(expect),
        "loopbox run {policy} exited with {} after {elapsed:?}; its stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

struct Case {
    name: &'static str,
    policy: String,
    input: &'static str,
    expect: i32,
    cold: Vec<Duration>,
    cached: Vec<Duration>,
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // `cargo test --all-targets` runs this once as a smoke test; the table is for `cargo bench`.
    let (n_cold, n_cached) = if bench { (5, 30) } else { (1, 1) };
    let repo = loopbox_guest_build::Repo::containing(Path::new(env!("CARGO_MANIFEST_DIR")));
    let ralph_py = repo.build_python_guest("ralph", "decider");
    let ralph_js = repo.build_js_guest("ralph", "decider", false);
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    let ralph_input = r#"{"prompt": "Fix the build.", "completion_promise": "DONE"}"#;
    let mut cases = [
        Case {
            name: "Rust (builtin:ralph)",
            policy: "builtin:ralph".into(),
            input: ralph_input,
            expect: 7,
            cold: vec![],
            cached: vec![],
        },
        Case {
            name: "Python (ralph, componentize-py)",
            policy: path(ralph_py),
            input: ralph_input,
            expect: 7,
            cold: vec![],
            cached: vec![],
        },
        Case {
            name: "JavaScript (ralph, componentize-js)",
            policy: path(ralph_js),
            input: ralph_input,
            expect: 7,
            cold: vec![],
            cached: vec![],
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let warm = dir.path().join("warm-cache");
    for c in &cases {
        run(&c.policy, c.input, c.expect, &workspace, &warm);
    }
    for i in 0..n_cold.max(n_cached) {
        for c in cases.iter_mut() {
            if i < n_cold {
                let cold = dir.path().join(format!("cold-{i}-{}", c.name.len()));
                c.cold
                    .push(run(&c.policy, c.input, c.expect, &workspace, &cold));
                std::fs::remove_dir_all(&cold).ok();
            }
            if i < n_cached {
                c.cached
                    .push(run(&c.policy, c.input, c.expect, &workspace, &warm));
            }
        }
    }
    let p50 = |s: &mut Vec<Duration>| {
        s.sort();
        s[(s.len() - 1) / 2].as_secs_f64()
    };
    println!(
        "\ncold start vs cached start: whole `loopbox run` process to the first decision ({n_cold} cold, {n_cached} cached samples per policy)"
    );
    println!(
        "{:<44} {:>9} {:>12} {:>12} {:>8}",
        "policy", "size", "cold p50", "cached p50", "ratio"
    );
    for c in cases.iter_mut() {
        let size = if c.policy.starts_with("builtin:") {
            None
        } else {
            std::fs::metadata(&c.policy).ok().map(|m| m.len())
        };
        let size = size
            .map(|s| format!("{:.1} MB", s as f64 / 1e6))
            .unwrap_or_else(|| "builtin".into());
        let (cold, cached) = (p50(&mut c.cold), p50(&mut c.cached));
        println!(
            "{:<44} {:>9} {:>9.0} ms {:>9.1} ms {:>7.0}x",
            c.name,
            size,
            cold * 1e3,
            cached * 1e3,
            cold / cached
        );
    }
}
