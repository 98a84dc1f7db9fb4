//! `action_type: human_approval` through the CLI: with nobody to wait for
//! (`[confirm] unattended = "decline"`) a run takes little-loops' path for an
//! approval no operator can answer (its `timeout` route, else `no`), with the
//! state's capture saying so; by default it waits for the answer, which
//! `runs approve|deny|answer` gives (each verdict's route, as little-loops
//! routes it: `conformance::answered`).

use super::*;

/// little-loops 1.167's `human-approval-example.yaml`, its states as shipped.
const EXAMPLE: &str = r#"name: human-approval-example
initial: prepare
max_steps: 5
timeout: 3600
states:
  prepare:
    action: "echo 'Proposed change: bump the retry ladder from 3 to 5 attempts.'"
    action_type: shell
    capture: proposal
    next: check_human
  check_human:
    action: >
      ${captured.proposal.output}
      Approve to continue, reject to abort, or edit to supply a replacement.
    action_type: human_approval
    timeout: 1800
    on_yes: approved
    on_no: rejected
    on_edit: revise
    on_timeout: rejected
  revise:
    action: "echo 'Using operator-supplied replacement: ${captured.check_human.edit}'"
    action_type: shell
    next: approved
  approved:
    terminal: true
  rejected:
    terminal: true
    failure: true
"#;

#[test]
fn an_approval_nobody_can_answer_takes_the_timeout_route() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\n\n[confirm]\nunattended = \"decline\"\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("h.yaml"), EXAMPLE).unwrap();
    let o = loopbox(dir.path(), &["run", "h.yaml", "--json"]);
    // `rejected` is a failure terminal: exit 2, as `ll-loop run` exits.
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert_eq!(
        path_of(&json_of(&o)),
        ["prepare", "check_human", "rejected"]
    );
    // Without `on_timeout`, the `no` route.
    let reported = EXAMPLE
        .replace("    on_timeout: rejected\n", "")
        .replace("    on_no: rejected\n", "    on_no: report\n")
        .replace(
            "  approved:\n",
            "  report:\n    action: 'printf %s \"${captured.check_human.verdict} ${captured.check_human.reason}\" > answer.txt'\n    next: rejected\n  approved:\n",
        );
    std::fs::write(dir.path().join("h.yaml"), reported).unwrap();
    let o = loopbox(dir.path(), &["run", "h.yaml", "--json"]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert_eq!(
        path_of(&json_of(&o)),
        ["prepare", "check_human", "report", "rejected"]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("answer.txt")).unwrap(),
        "timeout headless"
    );
}

#[test]
fn a_waiting_question_says_how_to_answer_and_takes_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
    std::fs::write(dir.path().join("h.yaml"), EXAMPLE).unwrap();
    let o = loopbox(dir.path(), &["run", "h.yaml"]);
    assert_eq!(code(&o), 4, "waiting: {}", text(&o.stderr));
    let said = text(&o.stdout);
    assert!(
        said.contains("waiting: the policy asks: Human approval requested")
            && said
                .contains("Prompt: Proposed change: bump the retry ladder from 3 to 5 attempts."),
        "{said}"
    );
    let id = said
        .split_whitespace()
        .skip_while(|w| *w != "run")
        .nth(1)
        .unwrap()
        .to_string();
    // Not a verdict: asked again, with the valid answers.
    let o = loopbox(dir.path(), &["runs", "answer", &id, "perhaps", "--json"]);
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    assert!(
        json_of(&o)["summary"]
            .as_str()
            .unwrap()
            .contains("Expected y/yes/approve, n/no/reject, e/edit"),
        "{}",
        text(&o.stdout)
    );
    // An edit in one line: the replacement reaches `revise`.
    let o = loopbox(
        dir.path(),
        &["runs", "answer", &id, "edit bump it to 4", "--json"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        path_of(&json_of(&o)),
        ["prepare", "check_human", "revise", "approved"]
    );
    // `deny` on a run that waits for nothing is refused as before.
    let o = loopbox(dir.path(), &["runs", "deny", &id]);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("is not waiting for an approval"),
        "{}",
        text(&o.stderr)
    );
}
