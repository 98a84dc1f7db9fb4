//! The shipped policies through the runtime, one fresh instance per event.

use loopbox::bindings::{Decision, Event, Turn};
use loopbox_tests::*;
use serde_json::json;

fn turn(response: &str, index: u32, continuation: bool) -> Event {
    Event::TurnComplete(Turn {
        session_id: "s".into(),
        response: response.into(),
        index,
        continuation,
        origin: None,
    })
}

#[tokio::test]
async fn ralph_stops_exactly_at_the_promise() {
    let ws = Workspace::new();
    let ralph = load("ralph");
    let ctx = ws.run(&ralph, "");
    let start =
        json!({"prompt": "fix it", "completion_promise": "DONE", "max_iterations": 10}).to_string();
    assert_eq!(
        deliver(&ctx, &ralph, Event::Start(start)).await.unwrap(),
        Decision::Inject("fix it\n\n[ralph iteration 1 of 10]".into())
    );
    let replies = [
        "nothing yet",
        "<promise>NOT DONE</promise>",
        "almost <promise>DONE",
    ];
    for (i, r) in replies.iter().enumerate() {
        let d = deliver(&ctx, &ralph, turn(r, i as u32 + 1, i > 0))
            .await
            .unwrap();
        assert_eq!(
            d,
            Decision::Inject(format!("fix it\n\n[ralph iteration {} of 10]", i + 2)),
            "after {r:?}"
        );
    }
    match deliver(&ctx, &ralph, turn("done. <promise>DONE</promise>", 4, true))
        .await
        .unwrap()
    {
        Decision::Done(o) => assert_eq!(
            (o.success, o.summary.as_str()),
            (true, "completion promise found after 4 iteration(s)")
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn ralph_fails_when_iterations_run_out_and_rejects_bad_input() {
    let ws = Workspace::new();
    let ralph = load("ralph");
    let ctx = ws.run(&ralph, "");
    deliver(
        &ctx,
        &ralph,
        Event::Start(
            json!({"prompt": "p", "completion_promise": "X", "max_iterations": 2}).to_string(),
        ),
    )
    .await
    .unwrap();
    assert!(matches!(
        deliver(&ctx, &ralph, turn("no", 1, false)).await.unwrap(),
        Decision::Inject(_)
    ));
    match deliver(&ctx, &ralph, turn("no", 2, true)).await.unwrap() {
        Decision::Done(o) => assert!(!o.success && o.summary.contains("max_iterations (2)")),
        other => panic!("{other:?}"),
    }
    let fresh = ws.run(&ralph, "");
    let f = deliver(&fresh, &ralph, Event::Start("{\"promt\": 1}".into()))
        .await
        .unwrap_err();
    assert!(f.to_string().contains("ralph: bad input"), "{f}");
}

#[tokio::test]
async fn todo_enforcer_continues_while_items_are_open_up_to_its_limit() {
    let ws = Workspace::new();
    let todo = load("todo-enforcer");
    let ctx = ws.run(&todo, "");
    assert_eq!(
        deliver(
            &ctx,
            &todo,
            Event::Start(json!({"max_continuations": 2, "message": "{count} left"}).to_string())
        )
        .await
        .unwrap(),
        Decision::Pass
    );
    let open = "plan:\n- [x] a\n- [ ] b\n  * [ ] c";
    assert_eq!(
        deliver(&ctx, &todo, turn(open, 1, false)).await.unwrap(),
        Decision::Inject("2 left".into())
    );
    assert_eq!(
        deliver(&ctx, &todo, turn(open, 2, true)).await.unwrap(),
        Decision::Inject("2 left".into())
    );
    assert_eq!(
        deliver(&ctx, &todo, turn(open, 3, true)).await.unwrap(),
        Decision::Pass,
        "limit of forced continuations"
    );
    assert_eq!(
        deliver(&ctx, &todo, turn("all - [x] done", 4, false))
            .await
            .unwrap(),
        Decision::Pass
    );
    assert_eq!(
        deliver(&ctx, &todo, turn(open, 5, false)).await.unwrap(),
        Decision::Inject("2 left".into()),
        "a new turn resets the count"
    );
}

/// The AFK table, written again from the seed's prose as an independent oracle.
fn oracle(
    pushed: bool,
    ci: Option<&str>,
    thread: Option<&str>,
    attempts: u32,
    elapsed: u64,
    max_attempts: u32,
    max_seconds: u64,
) -> &'static str {
    if pushed && ci == Some("green") {
        "close-success"
    } else if pushed && ci == Some("red") {
        if attempts < max_attempts && elapsed < max_seconds {
            "fix-forward"
        } else {
            "freeze-escalate"
        }
    } else if !pushed && matches!(thread, Some("error" | "idle")) {
        "escalate-prepush"
    } else {
        "wait"
    }
}

fn action_of(d: &Decision) -> String {
    match d {
        Decision::Done(o) => serde_json::from_str::<serde_json::Value>(o.data.as_deref().unwrap())
            .unwrap()["action"]
            .as_str()
            .unwrap()
            .to_string(),
        Decision::Inject(_) => "fix-forward".into(),
        Decision::Escalate(r) => r.split(':').next().unwrap().to_string(),
        Decision::Pass => "wait".into(),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn fix_forward_matches_the_table_over_every_combination() {
    let ws = Workspace::new();
    let ff = load("fix-forward");
    let ctx = ws.run(&ff, "");
    let (max_attempts, max_seconds) = (2u32, 600u64);
    let start =
        json!({"fix_forward_max_attempts": max_attempts, "fix_forward_max_seconds": max_seconds})
            .to_string();
    assert_eq!(
        deliver(&ctx, &ff, Event::Start(start)).await.unwrap(),
        Decision::Pass
    );
    let mut checked = 0;
    for pushed in [false, true] {
        for ci in [None, Some("green"), Some("red"), Some("pending")] {
            for thread in [None, Some("running"), Some("idle"), Some("error")] {
                for attempts in [0, 1, 2, 3] {
                    for elapsed in [0, 599, 600, 601] {
                        let tick = json!({"pushed": pushed, "ci_status": ci, "thread_status": thread, "attempts": attempts, "elapsed_seconds": elapsed});
                        let d = deliver(&ctx, &ff, Event::Tick(tick.to_string()))
                            .await
                            .unwrap();
                        assert_eq!(
                            action_of(&d),
                            oracle(
                                pushed,
                                ci,
                                thread,
                                attempts,
                                elapsed,
                                max_attempts,
                                max_seconds
                            ),
                            "tick {tick}"
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 4 * 4 * 4);
    let f = deliver(&ctx, &ff, Event::Tick("{\"pushed\": \"yes\"}".into()))
        .await
        .unwrap_err();
    assert!(f.to_string().contains("fix-forward: bad tick"), "{f}");
}

/// Every decision (or failure) of `policy` over one start and a list of replies.
async fn decisions(policy: &str, input: &str, replies: &[&str]) -> Vec<Result<Decision, String>> {
    let ws = Workspace::new();
    let p = load(policy);
    let ctx = ws.run(&p, "");
    let mut out = vec![
        deliver(&ctx, &p, Event::Start(input.into()))
            .await
            .map_err(|f| f.kind().to_string()),
    ];
    for (i, r) in replies.iter().enumerate() {
        out.push(
            deliver(&ctx, &p, turn(r, i as u32 + 1, i > 0))
                .await
                .map_err(|f| f.kind().to_string()),
        );
    }
    out
}

#[tokio::test]
async fn ralph_in_python_and_javascript_decides_exactly_as_ralph_in_rust() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"{"prompt": "fix it", "completion_promise": "DONE", "max_iterations": 5}"#,
            &[
                "nope",
                "<promise>NOT</promise>",
                "x <promise> DONE </promise> <promise>no</promise>",
            ],
        ),
        (
            r#"{"prompt": "fix it", "completion_promise": "DONE", "max_iterations": 2}"#,
            &["no", "still no", "never"],
        ),
        (
            r#"{"prompt": "修正して 🚀", "max_iterations": 0}"#,
            &["<promise>DONE</promise>", "a", "b", "c"],
        ),
        (
            r#"{"prompt": "go", "completion_promise": "a b"}"#,
            &["<promise>a  b</promise>", "<promise>\n a b\t</promise>"],
        ),
        (r#"{"prompt": "  "}"#, &["x"]),
        (r#"{"prompt": "go", "typo": 1}"#, &[]),
        ("not json", &[]),
    ];
    for (input, replies) in cases {
        let rust = decisions("ralph", input, replies).await;
        let python = decisions("ralph-py", input, replies).await;
        assert_eq!(python, rust, "input {input}");
        let js = decisions("ralph-js", input, replies).await;
        assert_eq!(js, rust, "input {input}");
    }
    // The comparison covers every kind of decision Ralph makes.
    let all = decisions("ralph", cases[0].0, cases[0].1).await;
    assert!(
        all.iter().any(|d| matches!(d, Ok(Decision::Done(_))))
            && all.iter().any(|d| matches!(d, Ok(Decision::Inject(_))))
    );
}

#[tokio::test]
async fn todo_enforcer_in_javascript_decides_exactly_as_in_rust() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"{"max_continuations": 2, "message": "{count} left"}"#,
            &[
                "- [ ] a\n  * [ ] b",
                "- [ ] a",
                "- [ ] a",
                "done - [x] a",
                "+ [ ] c",
            ],
        ),
        (
            r#"{"prompt": "work the list"}"#,
            &["- [ ] x", "- [ ] x", "- [ ] x", "- [ ] x", "- [ ] x"],
        ),
        ("{}", &["nothing to do", "-[ ] not an item", "- [ ] one"]),
        (r#"{"bogus": 1}"#, &[]),
    ];
    for (input, replies) in cases {
        let rust = decisions("todo-enforcer", input, replies).await;
        let js = decisions("todo-enforcer-js", input, replies).await;
        assert_eq!(js, rust, "input {input}");
    }
}

/// A TypeScript policy written with the JavaScript SDK (`guests/js/green-tests-ts`,
/// bundled by esbuild): its check runs for real in the sandbox; a failure goes to
/// the agent, a pass finishes with the SDK's outcome data, and a refusal comes
/// back as an `ActionError` the policy turns into an escalation.
#[tokio::test]
async fn a_typescript_policy_written_with_the_sdk_runs_its_check_and_handles_a_refusal() {
    let p = load("green-tests-ts");
    let input = json!({"check": ["ls", "fixed"], "max_tries": 2}).to_string();
    let ws = Workspace::new();
    let ctx = ws.run(&p, "[shell]\nallow = [[\"ls\", \"fixed\"]]\n");
    match deliver(&ctx, &p, Event::Start(input.clone()))
        .await
        .unwrap()
    {
        Decision::Inject(m) => assert!(
            m.starts_with("`ls fixed` fails:\n")
                && m.contains("fixed")
                && m.ends_with("Fix the code so that it passes."),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l == "[policy] `ls fixed` fails; asking the agent for fix 1 of 2"),
        "{:?}",
        log_messages(&ctx)
    );
    ws.write("fixed", "");
    match deliver(&ctx, &p, turn("done", 1, true)).await.unwrap() {
        Decision::Done(o) => {
            assert!(
                o.success && o.summary == "`ls fixed` passes after 1 fix(es)",
                "{o:?}"
            );
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(o.data.as_deref().unwrap()).unwrap(),
                json!({"fixes": 1, "timed": true})
            );
        }
        other => panic!("{other:?}"),
    }
    // Not granted: the SDK's `Denied` carries the host's reason, naming the key.
    let ws = Workspace::new();
    let ctx = ws.run(&p, "");
    match deliver(&ctx, &p, Event::Start(input)).await.unwrap() {
        Decision::Escalate(m) => assert!(
            m.starts_with("cannot run `ls fixed`: denied: ") && m.contains("shell.allow"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    // A PolicyError fails the event with its message.
    let f = deliver(&ctx, &p, Event::Start(r#"{"check": "ls"}"#.into()))
        .await
        .unwrap_err();
    assert_eq!(
        f.to_string(),
        "policy returned an error: green-tests-ts: bad input: `check` must be a list of strings"
    );
    let f = deliver(&ws.run(&p, ""), &p, turn("x", 1, false))
        .await
        .unwrap_err();
    assert!(
        f.to_string()
            .ends_with("green-tests-ts: a turn arrived before the run started"),
        "{f}"
    );
}

#[tokio::test]
async fn the_javascript_tool_gate_blocks_recursive_forced_deletes_only() {
    let ws = Workspace::new();
    let gate = load("tool-gate-js");
    let ctx = ws.run(&gate, "");
    let call = |name: &str, input: serde_json::Value| {
        Event::ToolCall(loopbox::bindings::ToolCall {
            name: name.into(),
            input: input.to_string(),
            origin: None,
        })
    };
    for command in [
        "rm -rf /",
        "rm -fr build",
        "rm -r -f x",
        "sudo rm -Rf ~",
        "cd /tmp && rm --recursive --force *",
        "ls; /bin/rm -rf .git",
        "X=1 rm -rf y",
    ] {
        match deliver(&ctx, &gate, call("Bash", json!({"command": command})))
            .await
            .unwrap()
        {
            Decision::Block(reason) => assert!(
                reason.contains("recursive forced delete"),
                "{command}: {reason}"
            ),
            other => panic!("{command}: {other:?}"),
        }
    }
    for command in [
        "ls -la",
        "rm notes.txt",
        "rm -r emptydir",
        "rm -f one.txt",
        "git status",
        "echo rm -rf",
    ] {
        assert_eq!(
            deliver(&ctx, &gate, call("Bash", json!({"command": command})))
                .await
                .unwrap(),
            Decision::Pass,
            "{command}"
        );
    }
    assert_eq!(
        deliver(&ctx, &gate, call("Edit", json!({"file_path": "rm -rf /"})))
            .await
            .unwrap(),
        Decision::Pass
    );
    let f = deliver(
        &ctx,
        &gate,
        Event::ToolCall(loopbox::bindings::ToolCall {
            name: "Bash".into(),
            input: "{not json".into(),
            origin: None,
        }),
    )
    .await
    .unwrap_err();
    assert!(
        f.to_string()
            .contains("tool-gate: the Bash tool input is not JSON"),
        "{f}"
    );
}

/// An agent reply ending in a CCW ACTION_RESULT block.
fn ccw_reply(action: &str, status: &str, message: &str, updates: &str) -> String {
    format!(
        "Worked on it.\n\nACTION_RESULT:\n- action: {action}\n- status: {status}\n- message: {message}\n- state_updates: {updates}\n\nNEXT_ACTION_NEEDED: VALIDATE\n"
    )
}

/// The CCW actions a run took, from its log (`DEVELOP success`, ...).
fn ccw_path(ctx: &loopbox::run::RunContext) -> Vec<String> {
    log_messages(ctx)
        .iter()
        .filter_map(|m| m.split_once("] ").map(|(_, rest)| rest))
        .filter_map(|m| {
            let word = m.split([' ', ':']).next()?;
            ["INIT", "DEVELOP", "DEBUG", "VALIDATE", "COMPLETE"]
                .contains(&word)
                .then(|| m.split(':').next().unwrap().to_string())
        })
        .collect()
}

fn outcome(d: &Decision) -> (bool, String, serde_json::Value) {
    match d {
        Decision::Done(o) => (
            o.success,
            o.summary.clone(),
            serde_json::from_str(o.data.as_deref().unwrap_or("null")).unwrap(),
        ),
        other => panic!("expected done, got {other:?}"),
    }
}

#[tokio::test]
async fn ccw_in_python_walks_develop_validate_complete_with_one_agent_conversation() {
    let ws = Workspace::new();
    let replies = [
        ccw_reply("DEVELOP", "success", "parser written", "{}"),
        ccw_reply(
            "DEVELOP",
            "success",
            "flag wired",
            r#"{"add_tasks": ["document the flag"]}"#,
        ),
        ccw_reply("DEVELOP", "success", "documented", "{}"),
        ccw_reply("VALIDATE", "success", "all 12 tests pass", "{}"),
    ];
    let config = ws.scripted_agent(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    let ccw = load("ccw-py");
    let ctx = ws.run(&ccw, config);
    let d = deliver(
        &ctx,
        &ccw,
        Event::Start(
            json!({"task": "add --json", "tasks": ["write the parser", "wire the flag"]})
                .to_string(),
        ),
    )
    .await
    .unwrap();
    let (success, summary, data) = outcome(&d);
    assert!(success, "{summary}");
    assert_eq!(
        summary,
        "ccw: 3 of 3 task(s) done, validation passed, after 4 action(s)"
    );
    assert_eq!(
        data,
        json!({"actions": 4, "tasks_done": 3, "tasks": 3, "validated": true})
    );
    assert_eq!(
        ccw_path(&ctx),
        [
            "INIT",
            "DEVELOP success",
            "DEVELOP success",
            "DEVELOP success",
            "VALIDATE success",
            "COMPLETE"
        ]
    );
    let prompts = ws.agent_prompts();
    assert!(
        prompts[0].starts_with(
            "[ccw DEVELOP] Overall task: add --json\nDo this development task now: write the parser"
        ),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[2].contains("Do this development task now: document the flag"),
        "{}",
        prompts[2]
    );
    // Every action continued the one conversation the first prompt started.
    let sessions: Vec<_> = std::fs::read_dir(ws.root().join(".scripted-agent"))
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .into_string()
                .ok()?
                .strip_prefix("turns-")
                .map(String::from)
        })
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
}

#[tokio::test]
async fn ccw_debugs_a_failed_validation_until_a_hypothesis_is_confirmed() {
    let ws = Workspace::new();
    let replies = [
        ccw_reply("DEVELOP", "success", "done", "{}"),
        ccw_reply("VALIDATE", "failed", "2 tests fail", "{}"),
        "I looked around but have no idea yet.".to_string(), // no ACTION_RESULT: a failed DEBUG
        ccw_reply(
            "DEBUG",
            "success",
            "found it",
            r#"{"confirmed_hypothesis": "off by one in the loop bound"}"#,
        ),
        ccw_reply("VALIDATE", "success", "green", "{}"),
    ];
    let config = ws.scripted_agent(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    let ccw = load("ccw-py");
    let ctx = ws.run(&ccw, config);
    let d = deliver(
        &ctx,
        &ccw,
        Event::Start(json!({"task": "fix the bug"}).to_string()),
    )
    .await
    .unwrap();
    assert!(outcome(&d).0);
    assert_eq!(
        ccw_path(&ctx),
        [
            "INIT",
            "DEVELOP success",
            "VALIDATE failed",
            "DEBUG failed",
            "DEBUG success",
            "VALIDATE success",
            "COMPLETE"
        ]
    );
    assert!(ws.agent_prompts()[2].contains("The last validation said: 2 tests fail"));
    // The iteration budget ends a loop that never validates, as a failure.
    let ws = Workspace::new();
    let config = ws.scripted_agent(&[
        &ccw_reply("DEVELOP", "success", "done", "{}"),
        &ccw_reply("VALIDATE", "failed", "red", "{}"),
    ]);
    let ctx = ws.run(&ccw, config);
    let d = deliver(
        &ctx,
        &ccw,
        Event::Start(json!({"task": "t", "max_iterations": 2}).to_string()),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome(&d).1,
        "ccw: 1 of 1 task(s) done, validation failed, after 2 action(s)"
    );
}

#[tokio::test]
async fn ccw_interactive_mode_asks_at_the_menu_and_needs_input_becomes_a_question() {
    let ws = Workspace::new();
    let replies = [
        ccw_reply(
            "DEVELOP",
            "needs_input",
            "which database, sqlite or postgres?",
            "{}",
        ),
        ccw_reply("DEVELOP", "success", "used sqlite", "{}"),
        ccw_reply("VALIDATE", "success", "green", "{}"),
    ];
    let config = ws.scripted_agent(&replies.iter().map(String::as_str).collect::<Vec<_>>());
    let ccw = load("ccw-py");
    let ctx = ws.run(&ccw, config);
    let ask = |d: Decision| match d {
        Decision::Ask(q) => q,
        other => panic!("expected ask, got {other:?}"),
    };
    let q = ask(deliver(
        &ctx,
        &ccw,
        Event::Start(json!({"task": "store", "mode": "interactive"}).to_string()),
    )
    .await
    .unwrap());
    assert!(
        q.contains("tasks 0/1 done, validation not run")
            && q.contains("1 develop, 2 debug, 3 validate, 4 complete, 5 exit"),
        "{q}"
    );
    let q = ask(deliver(&ctx, &ccw, Event::UserInput("frobnicate".into()))
        .await
        .unwrap());
    assert!(q.starts_with("Unknown choice \"frobnicate\"."), "{q}");
    let q = ask(deliver(&ctx, &ccw, Event::UserInput("develop".into()))
        .await
        .unwrap());
    assert_eq!(
        q,
        "ccw: DEVELOP needs your input: which database, sqlite or postgres?"
    );
    let q = ask(deliver(&ctx, &ccw, Event::UserInput("sqlite".into()))
        .await
        .unwrap());
    assert!(
        q.contains("Last: DEVELOP success: used sqlite") && q.contains("tasks 1/1 done"),
        "{q}"
    );
    assert!(ws.agent_prompts()[1].contains("The user answered your question: sqlite"));
    let q = ask(deliver(&ctx, &ccw, Event::UserInput("3".into()))
        .await
        .unwrap());
    assert!(q.contains("validation passed"), "{q}");
    let (success, summary, _) = outcome(
        &deliver(&ctx, &ccw, Event::UserInput("complete".into()))
            .await
            .unwrap(),
    );
    assert!(success, "{summary}");
    assert_eq!(
        ccw_path(&ctx),
        [
            "INIT",
            "DEVELOP needs_input",
            "DEVELOP success",
            "VALIDATE success",
            "COMPLETE"
        ]
    );
}

#[tokio::test]
async fn ccw_handles_a_denied_prompt_and_validates_with_a_granted_command() {
    // No agent configured: the prompt is denied, and the policy escalates saying so.
    let ws = Workspace::new();
    let ccw = load("ccw-py");
    let ctx = ws.run(&ccw, "");
    match deliver(&ctx, &ccw, Event::Start(json!({"task": "t"}).to_string()))
        .await
        .unwrap()
    {
        Decision::Escalate(r) => assert!(
            r.starts_with("ccw: DEVELOP could not be sent to the agent (denied: ")
                && r.contains("[agent]"),
            "{r}"
        ),
        other => panic!("{other:?}"),
    }
    // VALIDATE runs the configured command when it is granted...
    let ws = Workspace::new();
    let config = ws.scripted_agent(&[&ccw_reply("DEVELOP", "success", "done", "{}")]);
    ws.write("check.txt", "ok");
    let ccw_config =
        json!({"task": "t", "validate_command": ["grep", "-q", "ok", "check.txt"]}).to_string();
    let ctx = ws.run(&ccw, &format!("{config}[shell]\nallow = [[\"grep\"]]\n"));
    assert!(
        outcome(
            &deliver(&ctx, &ccw, Event::Start(ccw_config.clone()))
                .await
                .unwrap()
        )
        .0
    );
    assert_eq!(
        ccw_path(&ctx),
        ["INIT", "DEVELOP success", "VALIDATE success", "COMPLETE"]
    );
    assert_eq!(
        ws.agent_prompts().len(),
        1,
        "the agent was not asked to validate"
    );
    // ...and asks the agent instead, with a warning, when it is not.
    let ws = Workspace::new();
    let config = ws.scripted_agent(&[
        &ccw_reply("DEVELOP", "success", "done", "{}"),
        &ccw_reply("VALIDATE", "success", "fine", "{}"),
    ]);
    let ctx = ws.run(&ccw, config);
    assert!(outcome(&deliver(&ctx, &ccw, Event::Start(ccw_config)).await.unwrap()).0);
    let log = log_messages(&ctx).join("\n");
    assert!(
        log.contains("VALIDATE: cannot run [\"grep\", \"-q\", \"ok\", \"check.txt\"] (denied: "),
        "{log}"
    );
    assert_eq!(ws.agent_prompts().len(), 2);
    // Bad input names the field.
    let f = deliver(
        &ctx,
        &ccw,
        Event::Start(json!({"task": "t", "mode": "lazy"}).to_string()),
    )
    .await
    .unwrap_err();
    assert!(
        f.to_string()
            .contains("ccw: bad input: `mode` must be \"auto\" or \"interactive\""),
        "{f}"
    );
}
