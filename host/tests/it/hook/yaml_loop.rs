//! A YAML loop answers hooks as it runs standalone: `builtin:fsm` runs its
//! shell with bash under `loopbox hook` too, since the launcher derives that
//! from the policy, not from the command.

use super::*;

/// A loop whose only action needs bash: `${v^}` is a "Bad substitution" to dash.
const LOOP: &str = "name: caps\ninitial: a\nstates:\n  a:\n    action: 'set -o pipefail; v=abc; echo \"$${v^}\" > caps.txt'\n    on_yes: done\n    on_no: done\n    on_error: done\n  done:\n    terminal: true\n";

#[test]
fn a_yaml_loop_under_a_hook_runs_its_shell_with_bash() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    // The start input of `builtin:fsm` may be the loop's text itself.
    let start = serde_json::to_string(LOOP).unwrap();
    let o = run(
        dir.path(),
        &[
            "hook",
            "claude-code",
            "--policy",
            "builtin:fsm",
            "--input",
            &start,
        ],
        &stop(dir.path(), "yaml-bash", Some("done"), false).to_string(),
    );
    let (code, out, err) = answer_of(&o);
    assert_eq!((code, out), (0, Value::Null), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("caps.txt")).unwrap_or_default(),
        "Abc\n",
        "the loop's action ran with bash; stderr: {err}"
    );
}
