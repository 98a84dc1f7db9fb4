//! A test policy that does whatever its event asks, to exercise the host's
//! capabilities, grants and limits from the integration tests. Not shipped.
//!
//! `start` and `tick` carry a JSON op, e.g. `{"op": "exec", "argv": ["echo", "hi"]}`.
//! The policy answers `done` with `data` holding what the op observed, so tests
//! can assert on exactly what the guest saw.

#[cfg(target_arch = "wasm32")]
mod component {
    // The probe needs the raw host calls (non-JSON state, hand-built requests), so it
    // uses the SDK's bindings directly and only its export macro.
    use loopbox_guest::bindings::loopbox;
    use loopbox_guest::bindings::loopbox::policy::actions::{
        self, ActionError, Command, Output, PromptKind, PromptRequest, Script, ShellRequest,
    };
    use loopbox_guest::bindings::loopbox::policy::log::{self, Level};
    use loopbox_guest::bindings::loopbox::policy::state;
    use loopbox_guest::{Decision, Event, Info as PolicyInfo, Outcome, Policy};
    use serde_json::{Value, json};

    struct Probe;

    fn output_json(r: Result<Output, ActionError>) -> Value {
        match r {
            Ok(o) => json!({"ok": {
                "exit_code": o.exit_code, "stdout": o.stdout, "stderr": o.stderr,
                "timed_out": o.timed_out, "truncated": o.truncated, "session": o.session,
            }}),
            Err(e) => {
                let (kind, msg) = match e {
                    ActionError::Denied(m) => ("denied", m),
                    ActionError::Declined(m) => ("declined", m),
                    ActionError::BudgetExhausted(m) => ("budget-exhausted", m),
                    ActionError::Invalid(m) => ("invalid", m),
                    ActionError::Unavailable(m) => ("unavailable", m),
                    ActionError::OutcomeUnknown => ("outcome-unknown", String::new()),
                };
                json!({"err": {"kind": kind, "message": msg}})
            }
        }
    }

    fn strs(v: &Value, key: &str) -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn big(v: &Value) -> String {
        "x".repeat(v["bytes"].as_u64().unwrap_or(0) as usize)
    }

    #[inline(never)]
    #[allow(unconditional_recursion)]
    fn recurse(depth: u64, sink: &mut [u64; 64]) -> u64 {
        sink[(depth % 64) as usize] = depth;
        recurse(depth + 1, sink) + sink[(depth * 7 % 64) as usize]
    }

    fn run(op: &Value) -> Result<Value, String> {
        let name = op["op"].as_str().unwrap_or("");
        Ok(match name {
            "echo" => op.clone(),
            "spin" => loop {
                std::hint::black_box(0u64);
            },
            "grow" => {
                let mb = op["mb"].as_u64().unwrap_or(1024) as usize;
                let mut chunks: Vec<Vec<u8>> = Vec::new();
                for _ in 0..mb {
                    chunks.push(vec![1u8; 1 << 20]);
                }
                json!({"grew_mb": chunks.len()})
            }
            // What was left in this module's memory before: a static in the data
            // segment, a 1 MiB zeroed static and a 1 MiB heap block (leaked, so a
            // fresh instance, taking the same steps, gets the same block). `times`
            // > 1 repeats it in one instance, showing that the statics see leftovers.
            "remember" => {
                use std::sync::atomic::{AtomicU64, Ordering};
                const PATTERN: u8 = 0xA5;
                const SIZE: usize = 1 << 20;
                static MARK: AtomicU64 = AtomicU64::new(0);
                static mut ZEROED: [u8; SIZE] = [0; SIZE];
                // SAFETY: `block` points at SIZE bytes, read and written through raw pointers only.
                unsafe fn leftover(block: *mut u8) -> usize {
                    let found = (0..SIZE)
                        .filter(|&i| unsafe { std::ptr::read_volatile(block.add(i)) } == PATTERN)
                        .count();
                    unsafe { std::ptr::write_bytes(block, PATTERN, SIZE) };
                    found
                }
                let mut seen = json!(null);
                for _ in 0..op["times"].as_u64().unwrap_or(1) {
                    let layout = std::alloc::Layout::from_size_align(SIZE, 4096).unwrap();
                    // SAFETY: one thread; the heap block is never freed.
                    let (zeroed, heap) = unsafe {
                        (
                            leftover((&raw mut ZEROED).cast()),
                            leftover(std::alloc::alloc(layout)),
                        )
                    };
                    seen = json!({
                        "static_before": MARK.swap(0x5EED, Ordering::Relaxed),
                        "zeroed_leftover": zeroed,
                        "heap_leftover": heap,
                    });
                }
                seen
            }
            "recurse" => {
                let mut sink = [0u64; 64];
                json!({"depth": recurse(0, &mut sink)})
            }
            "trap" => panic!("probe was told to panic"),
            // Waits in the host (WASI subscribe-duration + poll), where no fuel or epoch check runs.
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(
                    op["ms"].as_u64().unwrap_or(1 << 40),
                ));
                json!({"slept": true})
            }
            "clocks" => {
                for _ in 0..op["count"].as_u64().unwrap_or(u64::MAX) {
                    std::hint::black_box(std::time::SystemTime::now());
                    std::hint::black_box(std::time::Instant::now());
                }
                json!({"clocks": true})
            }
            "read_many" => {
                let path = op["path"].as_str().unwrap_or("");
                let mut ok = 0;
                for _ in 0..op["count"].as_u64().unwrap_or(1) {
                    match loopbox::policy::workspace::read(path) {
                        Ok(s) => ok += usize::from(!s.is_empty()),
                        Err(e) => return Ok(json!({"read": ok, "err": e})),
                    }
                }
                json!({"read": ok})
            }
            "err" => return Err(op["message"].as_str().unwrap_or("probe error").to_string()),
            "print" => {
                let s = big(op);
                print!("{s}");
                eprintln!("to stderr");
                json!({"printed": s.len()})
            }
            "log" => {
                // `text` logs those words as they are (the dashboard's escaping tests).
                let line = match op["text"].as_str() {
                    Some(t) => t.to_string(),
                    None => format!("probe says {}", big(op)),
                };
                for _ in 0..op["count"].as_u64().unwrap_or(1) {
                    log::write(Level::Info, &line);
                }
                json!({"logged": true})
            }
            "state" => {
                let mut got = serde_json::Map::new();
                for k in strs(op, "read_first") {
                    got.insert(format!("before:{k}"), json!(state::get(&k).is_some()));
                }
                for k in strs(op, "remove") {
                    state::remove(&k);
                }
                if let Some(sets) = op["set"].as_object() {
                    for (k, v) in sets {
                        if let Err(e) = state::set(k, &v.to_string()) {
                            got.insert(format!("set-error:{k}"), json!(e));
                        }
                    }
                }
                if let Some(raw) = op["set_raw"].as_object() {
                    for (k, v) in raw {
                        if let Err(e) = state::set(k, v.as_str().unwrap_or("")) {
                            got.insert(format!("set-error:{k}"), json!(e));
                        }
                    }
                }
                for k in strs(op, "get") {
                    got.insert(k.clone(), json!(state::get(&k)));
                }
                if let Some(prefix) = op["keys"].as_str() {
                    got.insert("keys".into(), json!(state::keys(prefix)));
                }
                if op["fail_after"].as_bool() == Some(true) {
                    return Err("failing after state writes".into());
                }
                Value::Object(got)
            }
            "state_big" => {
                json!({"result": format!("{:?}", state::set("big", &format!("\"{}\"", big(op))))})
            }
            "flood" => {
                for _ in 0..op["count"].as_u64().unwrap_or(1_000_000) {
                    std::hint::black_box(state::get("k"));
                }
                json!({"flooded": true})
            }
            "exec" => {
                let env = op["env"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                let req = ShellRequest::Exec(Command {
                    argv: strs(op, "argv"),
                    cwd: op["cwd"].as_str().map(String::from),
                    env,
                    stdin: op["stdin"].as_str().map(String::from),
                    timeout_ms: op["timeout_ms"].as_u64(),
                });
                let times = op["times"].as_u64().unwrap_or(1);
                let mut results: Vec<Value> = (0..times)
                    .map(|_| output_json(actions::shell(&req)))
                    .collect();
                if times == 1 {
                    results.pop().unwrap()
                } else {
                    json!(results)
                }
            }
            "exec_big" => output_json(actions::shell(&ShellRequest::Exec(Command {
                argv: vec!["echo".into(), big(op)],
                cwd: None,
                env: vec![],
                stdin: None,
                timeout_ms: None,
            }))),
            "script" => output_json(actions::shell(&ShellRequest::Script(Script {
                source: op["source"].as_str().unwrap_or("").into(),
                cwd: op["cwd"].as_str().map(String::from),
                timeout_ms: op["timeout_ms"].as_u64(),
            }))),
            "prompt" => output_json(actions::prompt(&PromptRequest {
                text: op["text"].as_str().unwrap_or("").into(),
                kind: PromptKind::Prompt,
                model: op["model"].as_str().map(String::from),
                session: op["session"].as_str().map(String::from),
                timeout_ms: None,
                profile: op["profile"].as_str().map(String::from),
                cwd: op["cwd"].as_str().map(String::from),
            })),
            "worktree_add" => match actions::worktree_add(op["branch"].as_str().unwrap_or("")) {
                Ok(path) => json!({"ok": path}),
                Err(e) => output_json(Err(e)),
            },
            "worktree_remove" => {
                match actions::worktree_remove(op["path"].as_str().unwrap_or("")) {
                    Ok(()) => json!({"ok": null}),
                    Err(e) => output_json(Err(e)),
                }
            }
            "worktree_at" => {
                match actions::worktree_at(op["revision"].as_str().unwrap_or(""), &strs(op, "copy"))
                {
                    Ok(path) => json!({"ok": path}),
                    Err(e) => output_json(Err(e)),
                }
            }
            "snapshot" => match actions::snapshot(&strs(op, "paths")) {
                Ok(id) => json!({"ok": id}),
                Err(e) => output_json(Err(e)),
            },
            "restore" => {
                match actions::restore(op["snapshot"].as_str().unwrap_or(""), &strs(op, "paths")) {
                    Ok(written) => json!({"ok": written}),
                    Err(e) => output_json(Err(e)),
                }
            }
            "snapshot_restore" => {
                // Take, let `then_script` change the files, put back: one event.
                let id = match actions::snapshot(&strs(op, "paths")) {
                    Ok(id) => id,
                    Err(e) => return Ok(json!({"snapshot": output_json(Err(e))})),
                };
                let changed = op["then_script"].as_str().map(|src| {
                    output_json(actions::shell(&ShellRequest::Script(Script {
                        source: src.into(),
                        cwd: None,
                        timeout_ms: None,
                    })))
                });
                let restored = match actions::restore(&id, &strs(op, "restore")) {
                    Ok(w) => json!({"ok": w}),
                    Err(e) => output_json(Err(e)),
                };
                actions::forget_snapshot(&id);
                json!({"snapshot": id, "changed": changed, "restored": restored})
            }
            "mcp" => match actions::mcp_call(&actions::McpRequest {
                server: op["server"].as_str().unwrap_or("").into(),
                tool: op["tool"].as_str().unwrap_or("").into(),
                arguments: op.get("arguments").map_or("{}".into(), |a| {
                    a.as_str().map_or_else(|| a.to_string(), String::from)
                }),
                timeout_ms: op["timeout_ms"].as_u64(),
            }) {
                Ok(r) => json!({"ok": {
                    "status": format!("{:?}", r.status), "answer": r.answer, "duration_ms": r.duration_ms,
                }}),
                Err(e) => output_json(Err(e)),
            },
            "spend" => {
                let t = loopbox::policy::spend::spent();
                let b = loopbox::policy::spend::budget();
                json!({
                    "spent": {"turns": t.turns, "input_tokens": t.input_tokens, "cache_read_tokens": t.cache_read_tokens,
                              "cache_write_tokens": t.cache_write_tokens, "output_tokens": t.output_tokens,
                              "cost_usd": t.cost_usd, "cost_known": t.cost_known},
                    "budget": {"max_cost_usd": b.max_cost_usd, "max_tokens": b.max_tokens},
                })
            }
            "read" => match loopbox::policy::workspace::read(op["path"].as_str().unwrap_or("")) {
                Ok(s) => json!({"ok": s}),
                Err(e) => json!({"err": e}),
            },
            "list" => {
                match loopbox::policy::workspace::list_dir(op["dir"].as_str().unwrap_or("")) {
                    Ok(s) => json!({"ok": s}),
                    Err(e) => json!({"err": e}),
                }
            }
            other => return Err(format!("probe: unknown op `{other}`")),
        })
    }

    fn decide(json: &str) -> Result<Decision, String> {
        let op: Value = serde_json::from_str(json).map_err(|e| format!("probe: bad op: {e}"))?;
        // `then` lets one event end with a decision other than `done`.
        let data = run(&op)?;
        Ok(match op["then"].as_str() {
            Some("pass") => Decision::Pass,
            Some("ask") => Decision::Ask("probe asks".into()),
            Some("escalate") => Decision::Escalate("probe escalates".into()),
            Some("inject") => Decision::Inject(op["message"].as_str().unwrap_or("go on").into()),
            Some("rewrite") => Decision::Rewrite(data.to_string()),
            Some("block") => Decision::Block("probe blocks".into()),
            // A timer: until `until_ms`, or `sleep_ms` from now; the tick is `tick`.
            Some("sleep") => Decision::Sleep(loopbox_guest::Timer {
                until_ms: op["until_ms"].as_u64().unwrap_or_else(|| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0);
                    now + op["sleep_ms"].as_u64().unwrap_or(0)
                }),
                tick: op["tick"].to_string(),
                reason: "probe sleeps".into(),
            }),
            Some("malformed") => Decision::Done(Outcome {
                success: true,
                summary: "bad data".into(),
                data: Some("{not json".into()),
            }),
            _ => Decision::Done(Outcome {
                success: true,
                summary: name_of(&op),
                data: Some(data.to_string()),
            }),
        })
    }

    fn origin_json(o: &loopbox_guest::Origin) -> Value {
        json!({"agent": o.agent, "event": o.event, "agent_id": o.agent_id, "permission_mode": o.permission_mode, "tool": o.tool})
    }

    fn name_of(op: &Value) -> String {
        format!("probe {}", op["op"].as_str().unwrap_or("?"))
    }

    impl Policy for Probe {
        fn info() -> PolicyInfo {
            PolicyInfo {
                name: "probe".into(),
                version: "0.0.0".into(),
                description: "test policy that does what its event says".into(),
            }
        }

        fn handle(event: Event) -> Result<Decision, String> {
            // A standing answer, set at start with `{"op": "state", "set": {"answer": OP}}`,
            // decides every later event whatever its kind (the hook adapters' golden tests).
            if !matches!(event, Event::Start(_))
                && let Some(answer) = state::get("answer")
            {
                return decide(&answer);
            }
            match event {
                Event::Start(json) | Event::Tick(json) => decide(&json),
                Event::UserInput(text) => Ok(Decision::Done(Outcome { success: true, summary: format!("answer: {text}"), data: None })),
                Event::TurnComplete(t) => Ok(Decision::Done(Outcome {
                    success: true,
                    summary: format!("turn {}", t.index),
                    data: Some(
                        json!({"response": t.response, "session": t.session_id, "continuation": t.continuation, "origin": t.origin.as_ref().map(origin_json)})
                            .to_string(),
                    ),
                })),
                // Hook tests steer the probe through the tool input or the prompt;
                // `{"op": "origin"}` as a tool input answers with the call's origin.
                Event::ToolCall(call) if serde_json::from_str::<Value>(&call.input).is_ok_and(|v| v["op"] == "origin") => Ok(Decision::Done(Outcome {
                    success: true,
                    summary: format!("tool {}", call.name),
                    data: Some(json!({"origin": call.origin.as_ref().map(origin_json)}).to_string()),
                })),
                Event::ToolCall(call) => decide(&call.input),
                Event::Custom((_, payload)) => {
                    let payload: Value = serde_json::from_str(&payload).map_err(|e| e.to_string())?;
                    match (&payload["prompt"], &payload["tool_input"]) {
                        (Value::String(op), _) => decide(op),
                        (_, op @ Value::Object(_)) => decide(&op.to_string()),
                        _ => Ok(Decision::Pass),
                    }
                }
            }
        }
    }

    loopbox_guest::policy!(Probe);
}
