//! A YAML loop whose prompt state names an agent profile (`agent: x`,
//! `[agents.x]`), killed after the prompt's reply is journaled: the resumed
//! run answers the prompt from the journal (the profile is part of the
//! recorded request) and never runs the agent again.

use std::os::unix::process::ExitStatusExt;

use super::{command, loopbox, run_id, text};

const LOOP: &str = "name: p\ninitial: ask\nstates:\n  ask:\n    action: hello\n    action_type: prompt\n    agent: x\n    evaluate:\n      type: output_contains\n      pattern: AGENT x\n    on_yes: done\n    on_no: wrong\n    on_error: wrong\n  done:\n    terminal: true\n  wrong:\n    terminal: true\n    failure: true\n";

#[test]
fn a_profiled_prompt_is_answered_from_the_journal_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("agent")).unwrap();
    // Counts its calls; answers with the profile's `--agent` value.
    std::fs::write(
        ws.join("agent/rec"),
        "#!/bin/sh\necho call >> calls.log\necho \"AGENT $2\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        ws.join("agent/rec"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        ws.join("loopbox.toml"),
        "[shell]\nsandbox = \"none\"\n\n[agent]\ncommand = [\"./agent/rec\", \"{prompt}\"]\noutput = \"text\"\n\n\
         [agents.x]\nargs = [\"--agent\", \"x\"]\n",
    )
    .unwrap();
    std::fs::write(ws.join("loop.yaml"), LOOP).unwrap();
    let o = command(ws, &["run", "loop.yaml"])
        .env("LOOPBOX_CRASH_AT", "action-recorded:1")
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(9), "{}", text(&o.stderr));
    let id = run_id(ws);
    let o = loopbox(ws, &["runs", "resume", &id]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let calls = std::fs::read_to_string(ws.join("calls.log")).unwrap();
    assert_eq!(calls.lines().count(), 1, "the agent ran again: {calls}");
    let log = text(&loopbox(ws, &["runs", "log", &id]).stdout);
    assert!(log.contains("replayed prompt `hello`"), "{log}");
    let show = text(&loopbox(ws, &["runs", "show", &id]).stdout);
    assert!(
        show.contains("\nprofiles: prompts to [agents.NAME]: x 1\n"),
        "{show}"
    );
}
