//! `[agents.NAME]` in loopbox.toml at the command line: a bad profile stops
//! every command that reads the config, naming the profile and its key.

use crate::common::*;

#[test]
fn a_bad_agent_profile_is_a_config_error_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let base = "[agent]\ncommand = [\"echo\", \"{prompt}\"]\n\n";
    for (profile, want) in [
        (
            "[agents.x]\nargz = [\"--agent\"]\n",
            "agents.x.argz: unknown field `argz`",
        ),
        ("[agents.x]\ntier = \"maybe\"\n", "agents.x.tier: "),
        (
            "[agents.\"../x\"]\nargs = []\n",
            "agents.../x: a profile's name is 1 to 64",
        ),
        (
            "[agents.x]\nmax_prompts = 3\n",
            "agents.x.max_prompts: a run has one prompt budget",
        ),
    ] {
        std::fs::write(ws.join("loopbox.toml"), format!("{base}{profile}")).unwrap();
        let o = loopbox(ws, &["run", "builtin:ralph"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 2, "{profile}: {err}");
        assert!(
            err.starts_with("error: invalid config `") && err.contains(want),
            "{profile}: {err}"
        );
    }
    // A good one parses: the run goes on to what it lacks (an --input), not a config error.
    std::fs::write(
        ws.join("loopbox.toml"),
        format!("{base}[agents.x]\nargs = [\"--agent\", \"x\"]\n"),
    )
    .unwrap();
    let o = loopbox(ws, &["validate", "--grants", "builtin:ralph"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("invalid config"), "{err}");
    // `loopbox trust` shows what the profile runs before the user approves it.
    let o = std::process::Command::new(BIN)
        .arg("trust")
        .arg(ws.join("loopbox.toml"))
        .env("XDG_DATA_HOME", data_home())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\n  [agents.x] agent `echo --agent x '{prompt}'`\n"),
        "{out}"
    );
}

/// `validate --grants`: a state's `agent: NAME` needs `[agents.NAME]`, and its
/// judge still needs `[agent]`.
#[test]
fn validate_grants_lists_the_profile_a_state_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("loop.yaml"),
        "name: p\ninitial: ask\nstates:\n  ask:\n    action: Is it done?\n    action_type: prompt\n    agent: specialist\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let agent = "[agent]\ncommand = [\"echo\", \"{prompt}\"]\n";
    std::fs::write(ws.join("loopbox.toml"), agent).unwrap();
    let o = loopbox(ws, &["validate", "--grants", "loop.yaml"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("  missing  [agents.specialist]: prompts, which ask for agent profile `specialist` (state `ask`)\n")
            && out.contains("  granted  [agent]: the judge (`llm_structured`) (state `ask`)\n"),
        "{out}"
    );
    let o = loopbox(ws, &["validate", "loop.yaml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a run needs what loopbox.toml does not grant: [agents.specialist]"),
        "{err}"
    );
    std::fs::write(
        ws.join("loopbox.toml"),
        format!("{agent}[agents.specialist]\nargs = [\"--agent\", \"specialist\"]\n"),
    )
    .unwrap();
    let o = loopbox(ws, &["validate", "--grants", "loop.yaml"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("  granted  [agents.specialist]: prompts, which ask for agent profile `specialist` (state `ask`)\n"),
        "{out}"
    );
}
