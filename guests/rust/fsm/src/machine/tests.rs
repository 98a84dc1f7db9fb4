//! The executor against a scripted world.

use std::collections::VecDeque;

use super::*;

/// A world that answers actions from a script, in order, and keeps what it was asked.
#[derive(Default)]
struct Scripted {
    replies: VecDeque<Result<Out, String>>,
    asked: Vec<Request>,
    logs: Vec<String>,
    progress: Vec<String>,
    clock: u64,
    tick_ms: u64,
    files: std::collections::BTreeMap<String, String>,
}

impl Scripted {
    fn new(replies: Vec<Result<Out, String>>) -> Scripted {
        Scripted {
            replies: replies.into(),
            ..Default::default()
        }
    }
}

impl World for Scripted {
    fn act(&mut self, req: Request) -> Result<Out, String> {
        self.asked.push(req);
        self.replies
            .pop_front()
            .unwrap_or_else(|| panic!("no scripted reply for request {}", self.asked.len()))
    }
    fn log(&mut self, _: Level, message: &str) {
        self.logs.push(message.to_string());
    }
    fn progress(&mut self, message: &str) {
        self.progress.push(message.to_string());
    }
    fn now_ms(&mut self) -> u64 {
        self.clock += self.tick_ms;
        self.clock
    }
    fn read(&mut self, path: &str) -> Result<String, String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| format!("{path}: no such file"))
    }
}

fn exit(code: i32, stdout: &str) -> Result<Out, String> {
    Ok(Out {
        exit_code: Some(code),
        stdout: stdout.into(),
        ..Default::default()
    })
}

fn lp(yaml: &str) -> Loop {
    struct NoFiles;
    impl crate::Files for NoFiles {
        fn read(&mut self, _: &str) -> Result<String, String> {
            Err("no files".into())
        }
    }
    crate::load("t.yaml", yaml, &mut NoFiles).unwrap_or_else(|p| panic!("{}", crate::render(&p)))
}

const FIX_TESTS: &str = "
name: fix-tests
initial: test
max_steps: 10
states:
  test:
    action: cargo test
    capture: tests
    on_yes: done
    on_no: fix
  fix:
    action: 'The tests fail: ${captured.tests.output} -- fix the code.'
    action_type: prompt
    next: test
  done:
    terminal: true
";

#[test]
fn fix_the_tests_goes_test_fix_test_done() {
    let mut w = Scripted::new(vec![
        exit(1, "1 failed"),
        exit(0, "fixed it"),
        exit(0, "ok"),
    ]);
    let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
    assert_eq!(end.path, ["test", "fix", "test", "done"]);
    assert!(end.success, "{end:?}");
    assert_eq!(
        end.summary,
        "reached `done` after 3 steps (test → fix → test → done)"
    );
    assert_eq!(
        w.asked[1],
        Request::Prompt {
            text: "The tests fail: 1 failed -- fix the code.".into(),
            slash: false,
            model: None,
            timeout_ms: None,
            profile: None,
        }
    );
    assert_eq!(
        w.asked[0],
        Request::Script {
            source: "cargo test".into(),
            timeout_ms: None
        }
    );
    assert_eq!(
        w.progress[..3],
        [
            "fix-tests · test · step 1/10",
            "fix-tests · test · step 1/10 · no (exit 1) -> fix",
            "fix-tests · fix · step 2/10"
        ]
    );
    assert!(
        w.logs
            .contains(&"step 1 `test`: no (exit 1) -> `fix`".to_string()),
        "{:?}",
        w.logs
    );
    assert!(
        w.logs
            .contains(&"captured `tests`: exit 1, 8 bytes of output".to_string()),
        "{:?}",
        w.logs
    );
}

#[test]
fn the_step_cap_ends_a_loop_that_never_converges() {
    let mut w = Scripted::new((0..10).map(|_| exit(1, "still failing")).collect());
    let yaml = FIX_TESTS.replace("max_steps: 10", "max_steps: 3");
    let end = run(&lp(&yaml), &Map::new(), &mut w);
    assert!(!end.success);
    assert_eq!(
        end.summary,
        "max_steps 3 reached in state `fix` before a terminal state"
    );
    assert_eq!(end.path, ["test", "fix", "test"]);
}

#[test]
fn on_max_steps_goes_to_its_terminal_state() {
    let yaml = FIX_TESTS.replace("max_steps: 10", "max_steps: 2\non_max_steps: gave-up")
        + "  gave-up:\n    terminal: true\n    failure: true\n";
    let mut w = Scripted::new(vec![exit(1, "x"), exit(0, "y")]);
    let end = run(&lp(&yaml), &Map::new(), &mut w);
    assert_eq!(
        (end.success, end.state.as_str(), end.path.len()),
        (false, "gave-up", 3),
        "{end:?}"
    );
}

#[test]
fn markers_stop_or_fail_the_loop() {
    let mut w = Scripted::new(vec![exit(1, "progress\nLOOP_STOP: nothing left to fix\n")]);
    let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
    assert_eq!(
        (end.success, end.summary.as_str()),
        (true, "LOOP_STOP in `test`: nothing left to fix")
    );
    let mut w = Scripted::new(vec![exit(0, "FATAL_ERROR: the database is gone")]);
    let end = run(&lp(FIX_TESTS), &Map::new(), &mut w);
    assert_eq!(
        (end.success, end.summary.as_str()),
        (false, "FATAL_ERROR in `test`: the database is gone")
    );
}

#[test]
fn a_refused_action_is_an_error_verdict_routed_to_on_error() {
    let yaml = "name: g\ninitial: a\nstates:\n  a:\n    action: rm -rf /\n    on_yes: done\n    on_error: blocked\n  done:\n    terminal: true\n  blocked:\n    terminal: true\n    failure: true\n";
    let mut w = Scripted::new(vec![Err("denied: scripts are not granted".into())]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!((end.success, end.state.as_str()), (false, "blocked"));
    assert!(
            w.logs
                .iter()
                .any(|l| l
                    .contains("step 1 `a`: error (denied: scripts are not granted) -> `blocked`")),
            "{:?}",
            w.logs
        );
}

#[test]
fn a_next_state_takes_on_error_when_its_action_fails_or_is_refused() {
    let yaml = "name: n\ninitial: a\nstates:\n  a:\n    action: x\n    next: done\n    on_error: blocked\n  done:\n    terminal: true\n  blocked:\n    terminal: true\n    failure: true\n";
    let ends = |yaml: &str, reply: Result<Out, String>| {
        run(&lp(yaml), &Map::new(), &mut Scripted::new(vec![reply])).state
    };
    assert_eq!(ends(yaml, exit(0, "")), "done");
    assert_eq!(ends(yaml, exit(3, "")), "blocked");
    assert_eq!(ends(yaml, exit(1, "")), "blocked");
    assert_eq!(ends(yaml, Err("denied: no".into())), "blocked");
    // Without `on_error`, `next` is taken whatever the exit code.
    let plain = yaml.replace("    on_error: blocked\n", "");
    assert_eq!(ends(&plain, exit(3, "")), "done");
    // A refusal with nowhere to go ends the loop.
    let end = run(
        &lp(&plain),
        &Map::new(),
        &mut Scripted::new(vec![Err("denied: no".into())]),
    );
    assert_eq!((end.success, end.end), (false, End::Error), "{end:?}");
}

#[test]
fn prompts_get_an_llm_verdict_by_default() {
    let yaml = "name: p\ninitial: ask\nllm:\n  model: haiku\n  timeout: 30\nstates:\n  ask:\n    action: Is it done?\n    action_type: prompt\n    on_yes: done\n    on_no: $current\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![
        exit(0, "Not yet."),
        exit(
            0,
            r#"{"verdict": "no", "confidence": 0.9, "reason": "not yet", "evidence": "Not yet."}"#,
        ),
        exit(0, "All done."),
        exit(
            0,
            r#"```json
{"verdict": "yes", "confidence": 0.95, "reason": "done", "evidence": "All done."}
```"#,
        ),
    ]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["ask", "ask", "done"]);
    let Request::Prompt {
        text,
        model,
        timeout_ms,
        ..
    } = &w.asked[1]
    else {
        panic!()
    };
    assert!(text.contains("<action_output>\nNot yet.\n</action_output>"));
    assert_eq!(
        (model.as_deref(), *timeout_ms),
        (Some("haiku"), Some(30_000))
    );
}

/// `cannot_judge` with no route of its own re-runs the state twice, then
/// takes `on_error` (`executor.py` `_route_abstention_hold`); a route
/// for it is taken at once.
#[test]
fn cannot_judge_reruns_the_state_twice_then_takes_on_error() {
    let yaml = "name: j\ninitial: ask\nstates:\n  ask:\n    action: check\n    evaluate:\n      type: llm_structured\n    on_yes: done\n    on_no: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
    let abstain = || exit(0, r#"{"verdict": "cannot_judge", "confidence": 0.9}"#);
    let yes = || {
        exit(
            0,
            r#"{"verdict": "yes", "confidence": 0.9, "evidence": "ok"}"#,
        )
    };
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.extend([exit(0, "ok"), abstain()]);
    }
    let mut w = Scripted::new(replies);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["ask", "ask", "ask", "failed"], "{:?}", w.logs);
    // A verdict after two abstentions routes as usual, and the count restarts.
    let mut w = Scripted::new(vec![
        exit(0, "ok"),
        abstain(),
        exit(0, "ok"),
        abstain(),
        exit(0, "ok"),
        yes(),
    ]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["ask", "ask", "ask", "done"], "{:?}", w.logs);
    // Routed: taken at once.
    let routed = yaml.replace(
        "on_error: failed",
        "on_error: failed\n    on_cannot_judge: done",
    );
    let mut w = Scripted::new(vec![exit(0, "ok"), abstain()]);
    assert_eq!(run(&lp(&routed), &Map::new(), &mut w).path, ["ask", "done"]);
    // No error route: the run ends after the re-runs, "no valid transition".
    let bare = yaml.replace("    on_error: failed\n", "");
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.extend([exit(0, "ok"), abstain()]);
    }
    let mut w = Scripted::new(replies);
    let end = run(&lp(&bare), &Map::new(), &mut w);
    assert_eq!(
        (end.path.len(), end.summary.as_str()),
        (3, "state `ask` has no valid transition")
    );
}

/// `abstain_on_exit_3` (little-loops 1.167): exit 3 is `cannot_judge`,
/// routed by `on_cannot_judge`; without the flag exit 3 is an error.
#[test]
fn abstain_on_exit_3_makes_exit_3_cannot_judge() {
    let yaml = "name: h\ninitial: verify\nstates:\n  verify:\n    action: ll-harness\n    evaluate:\n      type: exit_code\n      abstain_on_exit_3: true\n    on_yes: done\n    on_no: fix\n    on_cannot_judge: abstained\n    on_error: crashed\n  fix:\n    terminal: true\n  done:\n    terminal: true\n  abstained:\n    terminal: true\n  crashed:\n    terminal: true\n";
    let path = |yaml: &str, code| {
        run(
            &lp(yaml),
            &Map::new(),
            &mut Scripted::new(vec![exit(code, "")]),
        )
        .path
    };
    assert_eq!(path(yaml, 3), ["verify", "abstained"]);
    assert_eq!(path(yaml, 0), ["verify", "done"]);
    assert_eq!(path(yaml, 1), ["verify", "fix"]);
    assert_eq!(path(yaml, 2), ["verify", "crashed"]);
    let off = yaml.replace("      abstain_on_exit_3: true\n", "");
    assert_eq!(path(&off, 3), ["verify", "crashed"]);
}

/// `reference` (little-loops 1.167): interpolated, and one that is set but
/// not a number is `error`, not ignored.
#[test]
fn convergence_reference_fails_closed() {
    let yaml = "name: c\ninitial: gate\ncontext:\n  base: '0.95'\nstates:\n  gate:\n    action: score\n    evaluate:\n      type: convergence\n      direction: maximize\n      target: 0.9\n      tolerance: 0.02\n      reference: '${context.base}'\n    route:\n      target: commit\n      progress: commit\n      stall: revert\n      error: broken\n  commit:\n    terminal: true\n  revert:\n    terminal: true\n  broken:\n    terminal: true\n";
    let path = |yaml: &str| {
        run(
            &lp(yaml),
            &Map::new(),
            &mut Scripted::new(vec![exit(0, "0.9")]),
        )
        .path
    };
    assert_eq!(path(yaml), ["gate", "revert"]);
    assert_eq!(path(&yaml.replace("'0.95'", "'0.85'")), ["gate", "commit"]);
    assert_eq!(path(&yaml.replace("'0.95'", "'n/a'")), ["gate", "broken"]);
    // 0 is unset, as `if config.reference:` reads it.
    let zero = yaml
        .replace("'${context.base}'", "0")
        .replace("maximize", "minimize");
    assert_eq!(path(&zero), ["gate", "commit"]);
}

/// `idle_timeout` (the state's over the loop's `default_idle_timeout`)
/// wraps a shell action in the silence watch, and the watch's kill reads
/// back as little-loops reports it: exit 124, an `error`, `timeout_kind` idle.
#[test]
fn idle_timeout_wraps_shell_actions_and_reads_the_kill_back() {
    let yaml = "name: i\ninitial: a\ndefault_idle_timeout: 5\nstates:\n  a:\n    action: make\n    idle_timeout: 2\n    on_yes: done\n    on_error: report\n  report:\n    action: 'echo ${prev.timeout_kind} ${prev.exit_code} ${prev.stderr}'\n    next: done\n  done:\n    terminal: true\n";
    let killed = Ok(Out {
        exit_code: Some(124),
        stderr: format!("{} 2 s\n", crate::idle::MARKER),
        ..Default::default()
    });
    let mut w = Scripted::new(vec![killed, exit(0, "")]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["a", "report", "done"]);
    let sources: Vec<&str> = w
        .asked
        .iter()
        .map(|r| match r {
            Request::Script { source, .. } => source.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sources[0], crate::idle::wrap("make", 2));
    assert_eq!(
        sources[1],
        crate::idle::wrap("echo idle 124 Action idle-timed out", 5)
    );
    // Without it (or with 0, off) the action is sent as written.
    let off = yaml
        .replace("default_idle_timeout: 5\n", "")
        .replace("idle_timeout: 2", "idle_timeout: 0");
    let mut w = Scripted::new(vec![exit(0, "")]);
    run(&lp(&off), &Map::new(), &mut w);
    assert!(matches!(&w.asked[0], Request::Script { source, .. } if source == "make"));
}

/// `action_type: human_approval`: nobody is asked yet, so every visit is
/// little-loops' headless answer: the `timeout` route, else `no`, and the
/// state's capture says so. No host request is made.
#[test]
fn human_approval_routes_as_an_approval_nobody_answered() {
    let yaml = "name: h\ninitial: prepare\nstates:\n  prepare:\n    action: echo plan\n    capture: proposal\n    next: check\n  check:\n    action: '${captured.proposal.output} Approve?'\n    action_type: human_approval\n    on_yes: approved\n    on_no: rejected\n    on_edit: revise\n    on_timeout: waited\n  revise:\n    action: 'echo ${captured.check.edit}'\n    next: approved\n  report:\n    action: 'echo ${captured.check.verdict} ${captured.check.reason}'\n    next: rejected\n  approved:\n    terminal: true\n  rejected:\n    terminal: true\n    failure: true\n  waited:\n    action: 'echo ${captured.check.verdict}/${captured.check.reason}/${captured.check.edit}'\n    next: rejected\n";
    let mut w = Scripted::new(vec![exit(0, "plan"), exit(0, "")]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["prepare", "check", "waited", "rejected"]);
    assert_eq!(w.asked.len(), 2, "the approval made no request");
    assert!(
        matches!(&w.asked[1], Request::Script { source, .. } if source == "echo timeout/headless/"),
        "{:?}",
        w.asked[1]
    );
    // Without `on_timeout`: the `no` route.
    let no_timeout = yaml.replace("    on_timeout: waited\n", "");
    let mut w = Scripted::new(vec![exit(0, "plan")]);
    assert_eq!(
        run(&lp(&no_timeout), &Map::new(), &mut w).path,
        ["prepare", "check", "rejected"]
    );
}

/// A run whose host lets a person answer parks on the question; each
/// answer routes as little-loops routes that verdict, and an answer after
/// the deadline is the `timeout` verdict.
#[test]
fn human_approval_asks_and_routes_each_answer() {
    let yaml = "name: h\ninitial: check\nstates:\n  check:\n    action: 'Approve?'\n    action_type: human_approval\n    timeout: 60\n    on_yes: approved\n    on_no: rejected\n    on_edit: revise\n    on_timeout: waited\n  revise:\n    terminal: true\n  approved:\n    terminal: true\n  rejected:\n    terminal: true\n  waited:\n    terminal: true\n";
    let mut l = lp(yaml);
    l.asks = true;
    // Each answer in turn (the last one the end), with the clock's step.
    let answered = |answers: &[&str], tick_ms: u64| {
        let mut w = Scripted::new(vec![]);
        let mut outcome = super::start(&l, &Map::new(), None, &mut w);
        let mut questions = vec![];
        w.tick_ms = tick_ms;
        for a in answers {
            let super::Outcome::Asking { saved, question } = outcome else {
                panic!("not asking: {outcome:?}");
            };
            questions.push(question);
            // What the guest keeps, and reads back with the answer.
            let back: super::Saved =
                serde_json::from_str(&serde_json::to_string(&saved).unwrap()).unwrap();
            outcome = super::answer(&l, back, a, &mut w);
        }
        let super::Outcome::Ended(end) = outcome else {
            panic!("not ended: {outcome:?}");
        };
        (end.path, end.captured["check"].clone(), questions)
    };
    let (path, c, q) = answered(&["y"], 1);
    assert_eq!(path, ["check", "approved"]);
    assert_eq!(
        c,
        json!({"output": "", "verdict": "approve", "edit": null, "reason": null})
    );
    assert!(
        q[0].starts_with(
            "Human approval requested\n  Loop: h\n  State: check\n  Prompt: Approve?\n"
        ),
        "{}",
        q[0]
    );
    let (path, c, _) = answered(&["no too risky"], 1);
    assert_eq!(path, ["check", "rejected"]);
    assert_eq!(c["reason"], "too risky");
    // `e`, then the replacement; an unreadable answer asks again.
    let (path, c, q) = answered(&["maybe", "e", "retry 4 times"], 1);
    assert_eq!(path, ["check", "revise"]);
    assert_eq!(
        c,
        json!({"output": "retry 4 times", "verdict": "edit", "edit": "retry 4 times", "reason": null})
    );
    assert!(q[1].starts_with("Expected y/yes/approve"), "{}", q[1]);
    assert_eq!(q[2], "Enter replacement text (one line):");
    let (path, c, _) = answered(&["edit retry 3 times"], 1);
    assert_eq!(
        (path, c["edit"].clone()),
        (
            vec!["check".to_string(), "revise".into()],
            json!("retry 3 times")
        )
    );
    // Past the 60 s: `timeout`, whatever the answer; without `on_edit`, `yes`.
    let (path, c, _) = answered(&["y"], 61_000);
    assert_eq!(
        (path, c["verdict"].clone(), c["reason"].clone()),
        (
            vec!["check".to_string(), "waited".into()],
            json!("timeout"),
            json!(null)
        )
    );
    let no_edit = yaml.replace("    on_edit: revise\n", "");
    let mut l2 = lp(&no_edit);
    l2.asks = true;
    let mut w = Scripted::new(vec![]);
    let super::Outcome::Asking { saved, .. } = super::start(&l2, &Map::new(), None, &mut w) else {
        panic!()
    };
    let super::Outcome::Ended(end) = super::answer(&l2, *saved, "e new", &mut w) else {
        panic!()
    };
    assert_eq!(end.path, ["check", "approved"]);
}

#[test]
fn max_retries_counts_consecutive_reentries() {
    let yaml = "name: r\ninitial: poll\nstates:\n  poll:\n    action: check\n    on_yes: done\n    on_no: $current\n    max_retries: 2\n    on_retry_exhausted: gave-up\n  done:\n    terminal: true\n  gave-up:\n    terminal: true\n    failure: true\n";
    let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["poll", "poll", "poll", "gave-up"]);
    assert_eq!(w.asked.len(), 3);
}

#[test]
fn convergence_tracks_its_metric_between_visits() {
    let yaml = "name: c\ninitial: measure\nstates:\n  measure:\n    exec: [count-todos]\n    evaluate:\n      type: convergence\n      target: 0\n    route:\n      target: done\n      progress: work\n      stall: stuck\n  work:\n    action: reduce\n    next: measure\n  done:\n    terminal: true\n  stuck:\n    terminal: true\n    failure: true\n";
    // Without `previous:` there is no earlier reading (little-loops):
    // an unchanged value is still `progress`.
    let replies = vec![
        exit(0, "5"),
        exit(0, ""),
        exit(0, "5"),
        exit(0, ""),
        exit(0, "0"),
    ];
    let end = run(&lp(yaml), &Map::new(), &mut Scripted::new(replies));
    assert_eq!(
        end.path,
        ["measure", "work", "measure", "work", "measure", "done"]
    );
    // With `previous:` (here the `work` state prints the last value) it can stall.
    let with_prev = yaml.replace(
        "      target: 0\n",
        "      target: 0\n      previous: '${prev.output}'\n",
    );
    let replies = vec![exit(0, "5"), exit(0, "5"), exit(0, "5")];
    let end = run(&lp(&with_prev), &Map::new(), &mut Scripted::new(replies));
    assert_eq!(end.path, ["measure", "work", "measure", "stuck"]);
    let replies = vec![exit(0, "2"), exit(0, ""), exit(0, "0")];
    assert_eq!(
        run(&lp(yaml), &Map::new(), &mut Scripted::new(replies)).state,
        "done"
    );
}

#[test]
fn captures_routes_and_context_feed_later_states() {
    let yaml = "name: cap\ninitial: build\ncontext:\n  target: release\nstates:\n  build:\n    exec: [make, '${context.target}']\n    capture: build\n    route:\n      yes: report\n      _: report\n  report:\n    action: 'echo ${captured.build.exit_code} ${captured.build.result.status} ${prev.state} ${state.iteration}'\n    next: done\n  done:\n    terminal: true\n";
    let mut input = Map::new();
    input.insert("target".into(), json!("debug"));
    let mut w = Scripted::new(vec![
        exit(0, "ACTION_RESULT:\n- status: built\n"),
        exit(0, ""),
    ]);
    run(&lp(yaml), &input, &mut w);
    assert_eq!(
        w.asked[0],
        Request::Exec {
            argv: vec!["make".into(), "debug".into()],
            timeout_ms: None,
            stdin: None,
        }
    );
    assert_eq!(
        w.asked[1],
        Request::Script {
            source: "echo 0 built build 2".into(),
            timeout_ms: None
        }
    );
}

#[test]
fn a_missing_capture_at_run_time_ends_the_loop_naming_it() {
    let yaml = "name: m\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: b\n    on_no: c\n  b:\n    action: echo ${captured.out.output}\n    next: done\n  c:\n    action: y\n    capture: out\n    next: b\n  done:\n    terminal: true\n";
    let end = run(
        &lp(yaml),
        &Map::new(),
        &mut Scripted::new(vec![exit(0, "")]),
    );
    assert!(!end.success);
    assert_eq!(
        end.summary,
        "state `b`: action: `${captured.out.output}` refers to nothing: no state has captured `out` yet (add `:default=` or `?` if that can happen)"
    );
}

#[test]
fn the_loop_timeout_is_checked_between_states_and_flushes_the_pending_one() {
    // little-loops (`executor.py`, `run`, BUG-1226): an action keeps its own
    // limit; past the loop's timeout, the state just routed to runs its shell
    // action once, and the loop ends there.
    let yaml = "name: t\ninitial: a\ntimeout: 10\ndefault_timeout: 60\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: y\n    next: a\n  done:\n    terminal: true\n";
    let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
    w.tick_ms = 3000;
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.end, End::Timeout, "{end:?}");
    assert!(
        end.summary
            .starts_with("the loop's timeout of 10s ran out in state `"),
        "{}",
        end.summary
    );
    for req in &w.asked {
        let Request::Script { timeout_ms, .. } = req else {
            panic!("{req:?}")
        };
        assert_eq!(*timeout_ms, Some(60_000));
    }
    // The pending state was entered and its action ran: the loop ends in it.
    assert_eq!(end.path.last(), Some(&end.state), "{end:?}");
    assert_eq!(w.asked.len(), end.path.len());
    assert!(
        w.logs
            .iter()
            .any(|l| l.contains("running the pending state")),
        "{:?}",
        w.logs
    );
    // A prompt is not flushed.
    let yaml = "name: t\ninitial: a\ntimeout: 10\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: y\n    action_type: prompt\n    next: a\n  done:\n    terminal: true\n";
    let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
    w.tick_ms = 3000;
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.end, End::Timeout);
    assert_ne!(end.path.last(), Some(&end.state), "{end:?}");
}

#[test]
fn a_spent_loopbox_budget_ends_the_run_even_inside_a_sub_loop() {
    let budget = || {
        Err(format!(
            "{BUDGET_EXHAUSTED}the run has used all 200 of its actions (limits.actions_per_run)"
        ))
    };
    // In the loop itself: not routed to on_error.
    let yaml = "name: p\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: done\n    on_error: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![budget()]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!((end.end, end.success), (End::Budget, false), "{end:?}");
    assert!(
        end.summary.contains("limits.actions_per_run"),
        "{}",
        end.summary
    );
    // In a sub-loop whose parent routes its errors to `done`.
    let parent = "name: parent\ninitial: sub\nstates:\n  sub:\n    loop: child\n    on_yes: done\n    on_no: done\n    on_error: done\n  done:\n    terminal: true\n";
    let child = "name: child\ninitial: a\nstates:\n  a:\n    action: x\n    on_yes: ok\n    on_error: ok\n  ok:\n    terminal: true\n";
    let l = lp_with("parent.yaml", parent, &[("child.yaml", child)]);
    let mut w = Scripted::new(vec![budget()]);
    w.files.insert("child.yaml".into(), child.into());
    let end = run(&l, &Map::new(), &mut w);
    assert_eq!((end.end, end.success), (End::Budget, false), "{end:?}");
    assert_eq!(end.data(&l)["terminated_by"], "budget_exhausted");
    // Another refusal still routes.
    let mut w = Scripted::new(vec![Err("denied: no".into())]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!((end.end, end.state.as_str()), (End::Terminal, "done"));
}

#[test]
fn prev_timeout_kind_is_wall_after_a_timeout() {
    let yaml = "name: t\ninitial: a\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: 'kind=${prev.timeout_kind}'\n    next: done\n  done:\n    terminal: true\n";
    let timed_out = Ok(Out {
        timed_out: true,
        ..Default::default()
    });
    let mut w = Scripted::new(vec![timed_out, exit(0, "")]);
    run(&lp(yaml), &Map::new(), &mut w);
    assert!(
        matches!(&w.asked[1], Request::Script { source, .. } if source == "kind=wall"),
        "{:?}",
        w.asked
    );
    let mut w = Scripted::new(vec![exit(0, ""), exit(0, "")]);
    run(&lp(yaml), &Map::new(), &mut w);
    assert!(matches!(&w.asked[1], Request::Script { source, .. } if source == "kind="));
}

/// little-loops 1.167.0 (`prev-no-action.yaml`): a `next:` state without an
/// action keeps `${prev.*}`; one that evaluates or routes empties it.
#[test]
fn prev_survives_a_next_state_without_an_action() {
    let yaml = "name: p\ninitial: a\nstates:\n  a:\n    action: x\n    next: gap\n  gap:\n    next: b\n  b:\n    action: 'echo ${prev.state} ${prev.output}'\n    next: quiet\n  quiet:\n    on_yes: c\n  c:\n    action: 'echo ${prev.state} [${prev.output}]'\n    next: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(0, "out"), exit(0, ""), exit(0, "")]);
    run(&lp(yaml), &Map::new(), &mut w);
    let sources: Vec<&str> = w
        .asked
        .iter()
        .filter_map(|r| match r {
            Request::Script { source, .. } => Some(source.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(sources, ["x", "echo a out", "echo quiet []"]);
}

/// little-loops' shared log: `append_to_messages` adds its text (after the
/// capture) each time the action runs; `${messages}`, `.output`, `.last(N)`
/// and `.summary` (never filled in) read it.
#[test]
fn append_to_messages_keeps_a_log_messages_reads() {
    let yaml = "name: m\ninitial: a\nstates:\n  a:\n    action: x\n    capture: c\n    append_to_messages: 'a said ${captured.c.output}'\n    next: b\n  b:\n    action: y\n    append_to_messages: 'second ${state.name}'\n    next: c\n  c:\n    action: 'echo [${messages}] [${messages.last(1)}] [${messages.summary}]'\n    next: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(0, "hi\n"), exit(0, ""), exit(0, "")]);
    run(&lp(yaml), &Map::new(), &mut w);
    assert!(
        matches!(&w.asked[2], Request::Script { source, .. } if source == "echo [a said hi\nsecond b] [second b] []"),
        "{:?}",
        w.asked[2]
    );
}

#[test]
fn slash_commands_follow_the_leading_slash_heuristic() {
    let yaml = "name: s\ninitial: a\nstates:\n  a:\n    action: /review\n    next: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(0, "")]);
    run(&lp(yaml), &Map::new(), &mut w);
    assert!(matches!(&w.asked[0], Request::Prompt { slash: true, text, .. } if text == "/review"));
}

fn lp_with(path: &str, yaml: &str, files: &[(&str, &str)]) -> Loop {
    struct Files(std::collections::BTreeMap<String, String>);
    impl crate::Files for Files {
        fn read(&mut self, p: &str) -> Result<String, String> {
            self.0
                .get(p)
                .cloned()
                .ok_or_else(|| format!("`{p}` does not exist in the workspace"))
        }
    }
    let files = Files(
        files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let mut files = files;
    crate::load(path, yaml, &mut files).unwrap_or_else(|p| panic!("{}", crate::render(&p)))
}

#[test]
fn a_sub_loop_runs_in_the_same_world_and_its_ending_picks_the_route() {
    let child = "name: child\ninitial: check\nparameters:\n  word:\n    required: true\nstates:\n  check:\n    action: test ${context.word} = hi\n    capture: seen\n    on_yes: done\n    on_no: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
    let main = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    with:\n      word: '${context.w}'\n    on_yes: good\n    on_no: bad\n  good:\n    action: echo ${captured.call.seen.exit_code}\n    next: done\n  bad:\n    terminal: true\n    failure: true\n  done:\n    terminal: true\n";
    let lp = lp_with("loops/parent.yaml", main, &[("loops/child.yaml", child)]);
    let mut ctx = Map::new();
    ctx.insert("w".into(), json!("hi"));
    let mut w = Scripted::new(vec![exit(0, ""), exit(0, "")]);
    w.files.insert("loops/child.yaml".into(), child.into());
    let end = run(&lp, &ctx, &mut w);
    assert_eq!(end.path, ["call", "good", "done"], "{end:?}");
    assert_eq!(
        w.asked,
        [
            Request::Script {
                source: "test hi = hi".into(),
                timeout_ms: None
            },
            Request::Script {
                source: "echo 0".into(),
                timeout_ms: None
            },
        ]
    );
    // The child's failure terminal routes `on_no`.
    ctx.insert("w".into(), json!("no"));
    let mut w = Scripted::new(vec![exit(1, "")]);
    w.files.insert("loops/child.yaml".into(), child.into());
    assert_eq!(run(&lp, &ctx, &mut w).path, ["call", "bad"]);
}

/// A child's `LOOP_STOP:`/`FATAL_ERROR:` are plain output, as in
/// little-loops (child executors get no signal detector), unless the
/// sub-loop state says `sub_loop_markers: true`.
#[test]
fn markers_inside_a_sub_loop_are_ignored_unless_asked_for() {
    let child = "name: child\ninitial: a\nstates:\n  a:\n    action: work\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n";
    let main = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    on_yes: good\n    on_no: bad\n    on_error: broke\n  good:\n    terminal: true\n  bad:\n    terminal: true\n  broke:\n    terminal: true\n";
    let with_key = main.replace("loop: child\n", "loop: child\n    sub_loop_markers: true\n");
    for (parent, output, want) in [
        (main.to_string(), "LOOP_STOP: enough\n", "good"),
        (main.to_string(), "FATAL_ERROR: disk full\n", "good"),
        (with_key.clone(), "LOOP_STOP: enough\n", "bad"),
        (with_key, "FATAL_ERROR: disk full\n", "broke"),
    ] {
        let lp = lp_with("loops/parent.yaml", &parent, &[("loops/child.yaml", child)]);
        let mut w = Scripted::new(vec![exit(0, output)]);
        w.files.insert("loops/child.yaml".into(), child.into());
        let end = run(&lp, &Map::new(), &mut w);
        assert_eq!(
            end.path,
            ["call", want],
            "{parent} / {output}: {:?}",
            w.logs
        );
    }
    // The key belongs on a `loop:` state.
    struct NoFiles;
    impl crate::Files for NoFiles {
        fn read(&mut self, _: &str) -> Result<String, String> {
            Err("no files".into())
        }
    }
    let bad = "name: b\ninitial: a\nstates:\n  a:\n    action: x\n    sub_loop_markers: true\n    next: done\n  done:\n    terminal: true\n";
    let problems = crate::render(&crate::load("b.yaml", bad, &mut NoFiles).unwrap_err());
    assert!(
        problems.contains(
            "b.yaml:6: state `a`: `sub_loop_markers` is for a state that runs a sub-loop"
        ),
        "{problems}"
    );
}

#[test]
fn a_sub_loop_that_calls_itself_stops_at_the_depth_limit() {
    let me = "name: me\ninitial: again\nstates:\n  again:\n    loop: me\n    on_yes: done\n    on_no: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n";
    let lp = lp_with("me.yaml", me, &[("me.yaml", me)]);
    let mut w = Scripted::new(vec![]);
    w.files.insert("me.yaml".into(), me.into());
    let end = run(&lp, &Map::new(), &mut w);
    // Each level but the deepest ends `failed` by its error route; the top routes `on_no`.
    assert_eq!(end.path, ["again", "done"], "{end:?}");
    assert!(
        w.logs
            .iter()
            .any(|l| l.contains("sub-loops nest deeper than 8")),
        "{:?}",
        w.logs
    );
}

#[test]
fn terminal_actions_never_run_and_the_cap_comes_before_a_terminal() {
    let yaml = "name: t\ninitial: a\nmax_steps: 1\nstates:\n  a:\n    action: one\n    next: b\n  b:\n    action: never\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(0, "")]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(
        (end.end, end.path.clone()),
        (End::MaxSteps, vec!["a".to_string()])
    );
    let mut w = Scripted::new(vec![exit(0, "")]);
    let end = run(
        &lp(&yaml.replace("max_steps: 1", "max_steps: 2")),
        &Map::new(),
        &mut w,
    );
    assert_eq!(
        (end.end, end.success, end.path.len()),
        (End::Terminal, true, 2)
    );
    assert_eq!(w.asked.len(), 1, "the terminal state's action did not run");
}

#[test]
fn on_max_steps_runs_its_state_then_ends_out_of_steps() {
    let yaml = "name: t\ninitial: spin\nmax_steps: 2\non_max_steps: report\nstates:\n  spin:\n    action: 'false'\n    on_yes: done\n    on_no: spin\n  report:\n    action: report\n    next: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(1, ""), exit(1, ""), exit(0, "")]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!((end.end, end.success), (End::MaxSteps, false));
    assert_eq!(end.path, ["spin", "spin", "report"]);
}

#[test]
fn throttle_circuit_and_retryable_exit_codes_redirect() {
    let yaml = "name: t\ninitial: spin\nmax_steps: 40\nstates:\n  spin:\n    action: x\n    on_yes: done\n    on_no: spin\n    throttle:\n      hard_max: 3\n    on_throttle_hard: stopped\n  stopped:\n    terminal: true\n  done:\n    terminal: true\n";
    let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
    assert_eq!(
        run(&lp(yaml), &Map::new(), &mut w).path,
        ["spin", "spin", "spin", "stopped"]
    );
    // `type: learning` (no `learning:` block) is exempt, as in little-loops.
    let exempt = yaml.replace("    throttle:\n", "    type: learning\n    throttle:\n");
    let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
    let end = run(
        &lp(&exempt.replace("max_steps: 40", "max_steps: 5")),
        &Map::new(),
        &mut w,
    );
    assert_eq!((end.end, end.path.len()), (End::MaxSteps, 5), "{end:?}");
    // Past hard_max with nowhere to go, the loop stops.
    let yaml2 = yaml.replace("    on_throttle_hard: stopped\n", "");
    let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
    let end = run(&lp(&yaml2), &Map::new(), &mut w);
    assert_eq!((end.end, end.path.len()), (End::Error, 4), "{end:?}");

    let circuit = "name: c\ninitial: try\nmax_steps: 40\ncircuit:\n  repeated_failure:\n    window: 2\nstates:\n  try:\n    action: x\n    on_yes: done\n    on_no: try\n  done:\n    terminal: true\n";
    let mut w = Scripted::new((0..5).map(|_| exit(1, "")).collect());
    let end = run(&lp(circuit), &Map::new(), &mut w);
    assert_eq!(
        (end.end, end.path.len()),
        (End::StallDetected, 2),
        "{end:?}"
    );
    assert!(end.summary.contains("stall detected"), "{}", end.summary);

    let cycle = "name: y\ninitial: a\nmax_steps: 40\nmax_edge_revisits: 2\nstates:\n  a:\n    action: x\n    next: b\n  b:\n    action: x\n    on_yes: a\n    on_no: done\n  done:\n    terminal: true\n";
    let mut w = Scripted::new((0..10).map(|_| exit(0, "")).collect());
    let end = run(&lp(cycle), &Map::new(), &mut w);
    assert_eq!(
        (end.end, end.path.len()),
        (End::CycleDetected, 5),
        "{end:?}"
    );

    let retry = "name: r\ninitial: a\nmax_steps: 40\nstates:\n  a:\n    action: x\n    on_yes: done\n    on_error: a\n    max_retries: 5\n    on_retry_exhausted: gave_up\n    retryable_exit_codes: [75]\n  gave_up:\n    terminal: true\n  done:\n    terminal: true\n";
    let mut w = Scripted::new(vec![exit(75, ""), exit(2, "")]);
    assert_eq!(
        run(&lp(retry), &Map::new(), &mut w).path,
        ["a", "a", "gave_up"]
    );
}

/// `diff_stall` as little-loops 1.166+ reads the work tree (the default):
/// the files in scope listed with git, the present ones hashed, the
/// fingerprint compared between visits.
#[test]
fn diff_stall_fingerprints_the_files_in_scope_from_1_166() {
    let yaml = "name: d\ninitial: work\nstates:\n  work:\n    action: x\n    next: check\n  check:\n    evaluate:\n      type: diff_stall\n      scope: [src]\n    on_yes: work\n    on_no: stuck\n  stuck:\n    terminal: true\n";
    let listing = || {
        exit(
            0,
            "? src/new.rs\0H src/a.rs\0H src/gone.rs\0R src/gone.rs\0",
        )
    };
    let mut w = Scripted::new(vec![
        exit(0, ""),
        listing(),
        exit(0, "h1\nh2\n"),
        exit(0, ""),
        listing(),
        exit(0, "h1\nh3\n"),
        exit(0, ""),
        listing(),
        exit(0, "h1\nh3\n"),
    ]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(
        end.path,
        ["work", "check", "work", "check", "work", "check", "stuck"]
    );
    assert_eq!(
        w.asked[1],
        Request::Exec {
            argv: "git ls-files -c -o -d -t --exclude-standard -z -- src :(exclude).loops/ :(exclude).loopbox/"
                .split(' ')
                .map(String::from)
                .collect(),
            timeout_ms: Some(30_000),
            stdin: None,
        }
    );
    // The present files, sorted; the removed one is not hashed.
    assert_eq!(
        w.asked[2],
        Request::Exec {
            argv: vec!["git".into(), "hash-object".into(), "--stdin-paths".into()],
            timeout_ms: Some(30_000),
            stdin: Some("src/a.rs\nsrc/new.rs\n".into()),
        }
    );
    // Nothing in scope: nothing to hash, and the same nothing is a stall.
    let mut w = Scripted::new(vec![exit(0, ""), exit(0, ""), exit(0, ""), exit(0, "")]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.path, ["work", "check", "work", "check", "stuck"]);
    // A failing git is an `error`, routed as any.
    let errs = yaml.replace("on_no: stuck", "on_no: stuck\n    on_error: stuck");
    let mut w = Scripted::new(vec![exit(0, ""), exit(128, "")]);
    assert_eq!(
        run(&lp(&errs), &Map::new(), &mut w).path,
        ["work", "check", "stuck"]
    );
}

#[test]
fn stall_evaluators_keep_their_state_in_the_run() {
    // As little-loops 1.156 reads the work tree: `git diff --stat`.
    let yaml = "name: d\nlittle_loops: '1.156'\ninitial: work\nmax_steps: 20\nstates:\n  work:\n    action: x\n    next: check\n  check:\n    evaluate:\n      type: diff_stall\n      max_stall: 2\n    on_yes: work\n    on_no: stuck\n  stuck:\n    terminal: true\n";
    let diff = |s: &str| exit(0, s);
    let mut w = Scripted::new(vec![
        exit(0, ""),
        diff("a | 1"),
        exit(0, ""),
        diff("a | 2"),
        exit(0, ""),
        diff("a | 2"),
        exit(0, ""),
        diff("a | 2"),
    ]);
    let end = run(&lp(yaml), &Map::new(), &mut w);
    assert_eq!(end.state, "stuck", "{end:?}");
    assert_eq!(
        w.asked[1],
        Request::Exec {
            argv: vec!["git".into(), "diff".into(), "--stat".into()],
            timeout_ms: Some(30_000),
            stdin: None,
        }
    );

    let score = "name: s\ninitial: check\nstates:\n  check:\n    evaluate:\n      type: score_stall\n      history_file: scores.txt\n      max_stall: 2\n    on_yes: more\n    on_no: plateau\n  more:\n    terminal: true\n  plateau:\n    terminal: true\n";
    let mut w = Scripted::new(vec![]);
    w.files
        .insert("scores.txt".into(), "5\n7\n7.2\n7.4\n".into());
    assert_eq!(run(&lp(score), &Map::new(), &mut w).state, "plateau");
    w.files.insert("scores.txt".into(), "5\n7\n9\n".into());
    assert_eq!(run(&lp(score), &Map::new(), &mut w).state, "more");
}

mod agent;
mod learning;
mod maintain;
mod worktree;

#[test]
fn a_step_that_cannot_decide_ends_no_route_since_1_167_and_error_before() {
    use crate::spec::Release;
    // `on_yes` only: a `no` has nowhere to go (little-loops' "No valid transition").
    let yaml = "name: nr\ninitial: check\nstates:\n  check:\n    action: x\n    on_yes: done\n  done:\n    terminal: true\n";
    let ends = |release: Option<Release>, out| {
        let mut l = lp(yaml);
        l.little_loops = release;
        run(&l, &Map::new(), &mut Scripted::new(vec![out])).end
    };
    assert_eq!(ends(None, exit(1, "")), End::NoRoute);
    assert_eq!(ends(Some(Release(1, 167)), exit(1, "")), End::NoRoute);
    assert_eq!(ends(Some(Release(1, 166)), exit(1, "")), End::Error);
    assert_eq!(ends(Some(Release(1, 156)), exit(1, "")), End::Error);
    assert_eq!(End::NoRoute.name(), "no_route");
    // An action refused with nowhere to go is the action's failure: `error` in both.
    assert_eq!(ends(None, Err("denied: no".into())), End::Error);
}

/// A child gets the parent's `run_dir` along a `with:` or a passthrough,
/// never under a bare `loop:` (little-loops' `_execute_sub_loop`): there
/// `${context.run_dir}` stops the child, whose error routes the parent.
#[test]
fn a_bare_sub_loop_has_no_run_dir_and_a_bound_one_has_the_parents() {
    let child = "name: child\ninitial: write\nstates:\n  write:\n    action: echo ${context.run_dir}\n    next: done\n  done:\n    terminal: true\n";
    let bare = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    on_yes: good\n    on_no: bad\n    on_error: broke\n  good:\n    terminal: true\n  bad:\n    terminal: true\n  broke:\n    terminal: true\n";
    let mut ctx = Map::new();
    ctx.insert("run_dir".into(), json!("/w/.loops/runs/r1/"));
    let go = |parent: &str| {
        let lp = lp_with("loops/parent.yaml", parent, &[("loops/child.yaml", child)]);
        let mut w = Scripted::new(vec![exit(0, "")]);
        w.files.insert("loops/child.yaml".into(), child.into());
        let end = run(&lp, &ctx, &mut w);
        (end.path, w.asked)
    };
    let (path, asked) = go(bare);
    assert_eq!(path, ["call", "broke"]);
    assert!(asked.is_empty(), "{asked:?}");
    for bound in [
        bare.replace("loop: child\n", "loop: child\n    with:\n      x: 1\n"),
        bare.replace(
            "loop: child\n",
            "loop: child\n    context_passthrough: true\n",
        ),
    ] {
        let (path, asked) = go(&bound);
        assert_eq!(path, ["call", "good"], "{bound}");
        assert_eq!(
            asked,
            [Request::Script {
                source: "echo /w/.loops/runs/r1/".into(),
                timeout_ms: None
            }]
        );
    }
}

/// A child's `input_hash` is derived from the input it was given
/// (little-loops' `derive_input_hash` on every child), unless bound.
#[test]
fn a_sub_loop_child_gets_the_input_hash_of_its_own_input() {
    let child = "name: child\ninitial: show\nstates:\n  show:\n    action: echo ${context.input_hash}\n    next: done\n  done:\n    terminal: true\n";
    let parent = "name: parent\ninitial: call\nstates:\n  call:\n    loop: child\n    with:\n      input: demo\n    on_yes: good\n    on_error: broke\n  good:\n    terminal: true\n  broke:\n    terminal: true\n";
    let go = |parent: &str| {
        let lp = lp_with("loops/parent.yaml", parent, &[("loops/child.yaml", child)]);
        let mut w = Scripted::new(vec![exit(0, "")]);
        w.files.insert("loops/child.yaml".into(), child.into());
        let end = run(&lp, &Map::new(), &mut w);
        (end.path, w.asked)
    };
    // sha256("demo")[..12]
    let (path, asked) = go(parent);
    assert_eq!(path, ["call", "good"]);
    assert_eq!(
        asked,
        [Request::Script {
            source: "echo 2a97516c354b".into(),
            timeout_ms: None
        }]
    );
    let (_, asked) = go(&parent.replace(
        "      input: demo\n",
        "      input: demo\n      input_hash: mine\n",
    ));
    assert_eq!(
        asked,
        [Request::Script {
            source: "echo mine".into(),
            timeout_ms: None
        }]
    );
}

/// A `next:` state's action killed by a signal stops the run as
/// little-loops stops it (`system_signal`), unless `on_error` routes it.
#[test]
fn an_action_killed_by_a_signal_in_a_next_state_ends_system_signal() {
    let yaml = "name: s\ninitial: kill\nstates:\n  kill:\n    action: kill -9 $$\n    next: done\n  done:\n    terminal: true\n  broke:\n    terminal: true\n";
    let killed = || {
        Ok(Out {
            exit_code: None,
            ..Default::default()
        })
    };
    let end = run(&lp(yaml), &Map::new(), &mut Scripted::new(vec![killed()]));
    assert_eq!(
        (end.end, end.success),
        (End::SystemSignal, false),
        "{end:?}"
    );
    assert_eq!(end.end.name(), "system_signal");
    let routed = yaml.replace("    next: done\n", "    next: done\n    on_error: broke\n");
    let end = run(
        &lp(&routed),
        &Map::new(),
        &mut Scripted::new(vec![killed()]),
    );
    assert_eq!(end.path, ["kill", "broke"]);
}
