//! Issue 32, "runs the same": a YAML loop's shell runs with bash, its own
//! budget governs it while loopbox's limits stay a safety net that ends the
//! whole run, a `${context.KEY}` with no value stops it before it starts,
//! and a failure terminal exits 2, as `ll-loop run` does.

use std::path::Path;

use super::*;

fn workspace(config: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    dir
}

const BASH_LOOP: &str = "name: b\ninitial: a\nstates:\n  a:\n    action: |\n      set -o pipefail\n      false | true\n    on_yes: wrong\n    on_no: good\n    on_error: wrong\n  good:\n    action: 'v=abc; [[ \"$${v^}\" == Abc ]]'\n    on_yes: done\n    on_no: wrong\n    on_error: wrong\n  done:\n    terminal: true\n  wrong:\n    terminal: true\n    failure: true\n";

#[test]
fn yaml_loops_run_their_shell_with_bash_and_without_it_validate_names_the_lines() {
    let dir = workspace("[shell]\nscripts = true\n", &[("b.yaml", BASH_LOOP)]);
    let o = loopbox(dir.path(), &["run", "b.yaml"]);
    assert_eq!(code(&o), 0, "{}\n{}", text(&o.stdout), text(&o.stderr));
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains("a YAML loop: shell actions run with bash (as in little-loops)"),
        "the banner says so: {stderr}"
    );
    // With bash found, validate has nothing to say about the shell.
    let v = loopbox(dir.path(), &["validate", "b.yaml"]);
    assert_eq!(code(&v), 0);
    assert!(
        !text(&v.stderr).contains("needs bash"),
        "{}",
        text(&v.stderr)
    );

    // A shell.path without bash: validate names each bash-only line, and the
    // run refuses the action, saying why.
    // (outside the workspace: loopbox refuses a shell.path inside it)
    let outside = tempfile::tempdir().unwrap();
    let bin = outside.path().join("only-sh");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!("[shell]\nscripts = true\npath = \"{}\"\n", bin.display()),
    )
    .unwrap();
    let v = loopbox(dir.path(), &["validate", "b.yaml"]);
    assert_eq!(code(&v), 0, "warnings do not fail validate");
    let stderr = text(&v.stderr);
    for line in [
        "warning: b.yaml:6: state `a`: `set -o pipefail` needs bash, which is not on shell.path",
        "warning: b.yaml:12: state `good`: `[[ ... ]]` needs bash",
        "warning: b.yaml:12: state `good`: case modification `${NAME^}` / `${NAME,,}` needs bash",
    ] {
        assert!(stderr.contains(line), "missing `{line}` in:\n{stderr}");
    }
    let o = loopbox(dir.path(), &["run", "b.yaml", "--json"]);
    let result = json_of(&o);
    assert_eq!(path_of(&result), ["a", "wrong"]);
    let log = log_of(dir.path(), &result);
    assert!(
        log.contains("unavailable: no `bash` on shell.path"),
        "{log}"
    );
}

#[test]
fn a_spent_loopbox_budget_ends_the_whole_run_naming_the_key() {
    let parent = "name: parent\ninitial: sub\nstates:\n  sub:\n    loop: spin\n    on_yes: done\n    on_no: done\n    on_error: done\n  done:\n    terminal: true\n";
    let spin = "name: spin\ninitial: a\nmax_steps: 40\nstates:\n  a:\n    action: 'true'\n    next: a\n    on_error: ok\n  ok:\n    terminal: true\n";
    let dir = workspace(
        "[shell]\nscripts = true\n[limits]\nactions_per_run = 3\n",
        &[("parent.yaml", parent), ("spin.yaml", spin)],
    );
    let o = loopbox(dir.path(), &["run", "parent.yaml", "--json"]);
    let result = json_of(&o);
    assert_eq!(code(&o), 1, "{result}");
    assert_eq!(result["outcome"]["success"], false, "{result}");
    assert_eq!(
        result["outcome"]["data"]["terminated_by"], "budget_exhausted",
        "{result}"
    );
    let summary = result["summary"].as_str().unwrap();
    assert!(
        summary.contains("limits.actions_per_run") && summary.contains("the run ends"),
        "{summary}"
    );
    assert_eq!(path_of(&result), ["sub"], "never routed to `done`");
    assert_eq!(result["actions"], 3);
}

#[test]
fn yaml_budgets_are_raised_unless_set_and_validate_warns_past_them() {
    let long = "name: long\ninitial: a\nmax_steps: 300\nstates:\n  a:\n    action: 'true'\n    next: done\n  done:\n    terminal: true\n";
    // loopbox's defaults (200 actions) would cut this loop; for a YAML loop they are raised.
    let dir = workspace("[shell]\nscripts = true\n", &[("long.yaml", long)]);
    let v = loopbox(dir.path(), &["validate", "long.yaml"]);
    assert_eq!(code(&v), 0);
    assert!(!text(&v.stderr).contains("warning"), "{}", text(&v.stderr));
    let o = loopbox(dir.path(), &["run", "long.yaml"]);
    assert!(
        text(&o.stderr).contains("budgets limits.actions_per_run 10000"),
        "{}",
        text(&o.stderr)
    );
    // A limit the user set is kept, and validate says the loop outruns it.
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\n[limits]\nactions_per_run = 100\n",
    )
    .unwrap();
    let v = loopbox(dir.path(), &["validate", "long.yaml"]);
    assert!(
        text(&v.stderr)
            .contains("warning: the loop's max_steps 300 exceeds limits.actions_per_run = 100"),
        "{}",
        text(&v.stderr)
    );
}

#[test]
fn a_context_reference_without_a_value_stops_the_run_before_its_first_state() {
    let l = "name: c\ninitial: a\nstates:\n  a:\n    action: 'touch started'\n    next: b\n  b:\n    action: 'echo ${context.needed} ${context.opt?}'\n    next: done\n  done:\n    terminal: true\n";
    let dir = workspace("[shell]\nscripts = true\n", &[("c.yaml", l)]);
    let o = loopbox(dir.path(), &["run", "c.yaml"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("missing required context variable `needed`"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        !Path::new(&dir.path().join("started")).exists(),
        "nothing ran"
    );
    // Given as a JSON object, it runs.
    let o = loopbox(
        dir.path(),
        &["run", "c.yaml", "--input", r#"{"needed": "x"}"#],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
}

#[test]
fn a_failure_terminal_exits_2_as_ll_loop_does_and_other_failures_exit_1() {
    let l = "name: f\ninitial: a\nmax_steps: 3\nstates:\n  a:\n    action: 'exit 1'\n    on_yes: done\n    on_no: broken\n  done:\n    terminal: true\n  broken:\n    terminal: true\n    failure: true\n";
    let spin = "name: s\ninitial: a\nmax_steps: 2\nstates:\n  a:\n    action: 'true'\n    on_yes: a\n    on_no: done\n  done:\n    terminal: true\n";
    let dir = workspace(
        "[shell]\nscripts = true\n",
        &[("f.yaml", l), ("s.yaml", spin)],
    );
    let o = loopbox(dir.path(), &["run", "f.yaml", "--json"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stdout));
    assert_eq!(json_of(&o)["exit_code"], 2);
    let o = loopbox(dir.path(), &["run", "s.yaml", "--json"]);
    assert_eq!(code(&o), 1, "max_steps: {}", text(&o.stdout));
}
