//! `idle_timeout` / `default_idle_timeout` with real processes: a shell
//! action silent that long is ended (exit 124, an `error` verdict,
//! `${prev.timeout_kind}` `idle`), one that keeps printing lines runs on, as
//! in little-loops 1.167.

use std::time::{Duration, Instant};

use super::*;

const IDLE_LOOP: &str = r#"name: idle
initial: quiet
default_idle_timeout: 2
states:
  quiet:
    action: 'echo started; sleep 40; echo never'
    capture: quiet
    on_yes: wrong
    on_no: wrong
    on_error: report
  report:
    action: 'printf "%s|%s|%s|%s" "${prev.timeout_kind}" "${prev.exit_code}" "${prev.stderr}" "${captured.quiet.output}" > report.txt'
    next: chatty
  chatty:
    action: 'for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done'
    idle_timeout: 1
    on_yes: done
    on_no: wrong
    on_error: wrong
  done:
    terminal: true
  wrong:
    terminal: true
    failure: true
"#;

#[test]
fn a_silent_shell_action_is_ended_and_a_chatty_one_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    std::fs::write(dir.path().join("idle.yaml"), IDLE_LOOP).unwrap();
    let v = loopbox(dir.path(), &["validate", "idle.yaml"]);
    assert_eq!(code(&v), 0, "{}", text(&v.stderr));
    assert!(
        !text(&v.stderr).contains("idle_timeout"),
        "{}",
        text(&v.stderr)
    );

    let started = Instant::now();
    let o = loopbox(dir.path(), &["run", "idle.yaml", "--json"]);
    let took = started.elapsed();
    assert_eq!(code(&o), 0, "{}\n{}", text(&o.stdout), text(&o.stderr));
    // `quiet` was ended after its 2 s of silence, not after its 40 s sleep;
    // `chatty` (3 s of lines 0.5 s apart, under a 1 s watch) ran to its end.
    assert_eq!(path_of(&json_of(&o)), ["quiet", "report", "chatty", "done"]);
    assert!(took < Duration::from_secs(30), "the run took {took:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.txt")).unwrap(),
        "idle|124|Action idle-timed out|started"
    );
}

#[test]
fn validate_says_a_prompt_is_not_watched_for_silence() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        "name: p\ninitial: ask\nstates:\n  ask:\n    action: Summarize the log\n    action_type: prompt\n    idle_timeout: 60\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["validate", "p.yaml"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let notes: Vec<String> = text(&o.stderr)
        .lines()
        .filter(|l| l.contains("idle_timeout"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        notes,
        [
            "note: p.yaml:5: state `ask`: `idle_timeout` ends shell actions only in loopbox: this action runs until its `timeout` (give one, or make the state a shell action)"
        ]
    );
}
