//! `action_type: human_approval` through the CLI: loopbox asks no one yet,
//! so a run takes little-loops' path for an approval no operator can answer
//! (its `timeout` route, else `no`), with the state's capture saying so.

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
    std::fs::write(dir.path().join("loopbox.toml"), "[shell]\nscripts = true\n").unwrap();
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
