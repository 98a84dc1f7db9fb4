//! What loading and calling refuse: files that are not policies, and policies
//! that answer badly. Each is a clear error, and the runtime keeps working.

use loopbox::bindings::Event;
use loopbox::wasm::fault::PolicyFault;
use loopbox::wasm::policy::PolicySource;
use loopbox_tests::*;
use serde_json::json;

fn load_err(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.wasm");
    std::fs::write(&path, bytes).unwrap();
    format!(
        "{:#}",
        runtime()
            .load(&PolicySource::Path(path))
            .err()
            .expect("refused")
    )
}

#[test]
fn a_core_module_is_refused() {
    let e = load_err(&wasmtime_wat("(module)"));
    assert!(
        e.contains("core WebAssembly module, not a component"),
        "{e}"
    );
}

#[test]
fn a_component_of_another_world_is_refused() {
    let e = load_err(&wasmtime_wat("(component)"));
    assert!(
        e.contains("component of another world")
            && e.contains("loopbox:policy/policy@0.4.0")
            && e.contains("supports contracts 0.1.0, 0.2.0, 0.3.0 and 0.4.0"),
        "{e}"
    );
}

#[test]
fn a_component_of_a_newer_or_unreleased_contract_is_refused_with_what_it_needs() {
    let claiming = |v: &str| {
        wasmtime_wat(&format!(
            r#"(component (instance $p) (export "loopbox:policy/policy@{v}" (instance $p)))"#
        ))
    };
    let e = load_err(&claiming("9.0.0"));
    assert!(
        e.contains("it was built for contract `loopbox:policy@9.0.0`, newer than this loopbox, which supports 0.1.0, 0.2.0, 0.3.0 and 0.4.0: upgrade loopbox"),
        "{e}"
    );
    let e = load_err(&claiming("0.0.1"));
    assert!(
        e.contains("`loopbox:policy@0.0.1`, which was never released"),
        "{e}"
    );
}

#[test]
fn garbage_and_truncated_files_are_refused() {
    assert!(load_err(b"hello").contains("not a WebAssembly component"));
    let probe = std::fs::read(guest("probe")).unwrap();
    let e = load_err(&probe[..probe.len() / 2]);
    assert!(e.contains("not a valid component"), "{e}");
}

#[test]
fn missing_files_and_unknown_builtins_say_what_exists() {
    let e = format!(
        "{:#}",
        runtime()
            .load(&PolicySource::parse("/no/such.wasm"))
            .err()
            .unwrap()
    );
    assert!(
        e.contains("failed to load policy `/no/such.wasm`") && e.contains("builtin:NAME"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        runtime()
            .load(&PolicySource::parse("builtin:nope"))
            .err()
            .unwrap()
    );
    assert!(
        e.contains("builtin:ralph, builtin:todo-enforcer, builtin:fix-forward"),
        "{e}"
    );
}

#[test]
fn builtins_load_and_a_second_load_hits_the_cache() {
    let first = runtime()
        .load(&PolicySource::parse("builtin:todo-enforcer"))
        .unwrap();
    let second = runtime()
        .load(&PolicySource::parse("builtin:todo-enforcer"))
        .unwrap();
    assert_eq!(second.cache, loopbox::wasm::cache::CacheOutcome::Hit);
    assert_eq!(first.digest, second.digest);
}

#[tokio::test]
async fn errors_and_malformed_decisions_are_faults() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let f = probe(&ctx, json!({"op": "err", "message": "no way"}))
        .await
        .unwrap_err();
    assert_eq!(f, PolicyFault::Error("no way".into()));
    let f = deliver(
        &ctx,
        &load("probe"),
        Event::Start(json!({"op": "echo", "then": "malformed"}).to_string()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&f, PolicyFault::Malformed(m) if m.contains("done.data is not JSON")),
        "{f:?}"
    );
    // Faults are recorded with the event.
    let events = ctx.db.events(&ctx.id).unwrap();
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e.decision.is_none() && e.error.is_some())
    );
}

#[tokio::test]
async fn many_failing_events_in_a_row_leave_the_host_healthy() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nfuel_per_event = 20000000");
    for op in ["trap", "recurse", "spin", "trap", "spin"]
        .iter()
        .cycle()
        .take(25)
    {
        assert!(probe(&ctx, json!({"op": op})).await.is_err());
    }
    assert_eq!(
        probe(&ctx, json!({"op": "echo", "ok": true}))
            .await
            .unwrap()["ok"],
        true
    );
}

fn wasmtime_wat(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap()
}

/// Deliver `start` with `{"op": op}` to a misbehaving guest; the fault and the run log.
async fn misbehave(guest: &str, op: &str) -> (PolicyFault, String) {
    let ws = Workspace::new();
    let p = load(guest);
    let ctx = ws.run(&p, "");
    let f = deliver(&ctx, &p, Event::Start(json!({"op": op}).to_string()))
        .await
        .unwrap_err();
    (f, log_messages(&ctx).join("\n"))
}

#[tokio::test]
async fn python_and_javascript_failures_are_clear_errors_carrying_the_guests_message() {
    let aborted = "policy trapped: the policy aborted (wasm `unreachable`: a panic, an uncaught exception or an abort); it said: ";
    let cases: &[(&str, &str, &str, &str)] = &[
        // An exception the policy did not mean to raise: its traceback is in the log.
        (
            "misbehave-py",
            "raise",
            "trap",
            "RuntimeError: python policy exploded on purpose",
        ),
        // `raise Err(...)` is the policy's own error.
        (
            "misbehave-py",
            "err",
            "error",
            "policy returned an error: python policy refuses on purpose",
        ),
        (
            "misbehave-py",
            "malformed",
            "trap",
            "called `Result::unwrap()` on an `Err` value: PyErr { type: <class 'KeyError'>",
        ),
        (
            "misbehave-py",
            "bad-data",
            "malformed",
            "policy returned a malformed decision: done.data is not JSON",
        ),
        // A thrown Error becomes the policy's error with its message; its stack goes to the log.
        (
            "misbehave-js",
            "throw",
            "error",
            "policy returned an error: Error: js policy exploded on purpose",
        ),
        (
            "misbehave-js",
            "throw-string",
            "error",
            "policy returned an error: js policy refuses on purpose",
        ),
        (
            "misbehave-js",
            "malformed",
            "trap",
            "invalid variant tag value `\"bogus\"`",
        ),
        (
            "misbehave-js",
            "wrong-type",
            "trap",
            "expected a string, received [number]",
        ),
    ];
    for (guest, op, kind, needle) in cases {
        let (f, log) = misbehave(guest, op).await;
        assert_eq!(f.kind(), *kind, "{guest} {op}: {f}");
        let message = f.to_string();
        if *kind == "trap" {
            assert!(
                message.starts_with(aborted) && message.contains(needle),
                "{guest} {op}: {message}"
            );
        } else {
            assert!(message.starts_with(needle), "{guest} {op}: {message}");
        }
        assert!(
            log.contains(&format!("[host] {message}")),
            "{guest} {op}: {log}"
        );
    }
    let (_, log) = misbehave("misbehave-py", "raise").await;
    assert!(
        log.contains("[stderr] Traceback (most recent call last):")
            && log.contains("line 22, in handle"),
        "{log}"
    );
    let (_, log) = misbehave("misbehave-js", "throw").await;
    assert!(
        log.contains("[stderr] handle@misbehave/policy.js:14:15"),
        "{log}"
    );
    // The host is unharmed: the same guests still answer.
    for guest in ["misbehave-py", "misbehave-js"] {
        let ws = Workspace::new();
        let p = load(guest);
        let d = deliver(
            &ws.run(&p, ""),
            &p,
            Event::Start(json!({"op": "ok"}).to_string()),
        )
        .await
        .unwrap();
        assert!(matches!(d, loopbox::bindings::Decision::Done(o) if o.success));
    }
}

#[test]
fn a_component_importing_wasi_http_is_refused_at_load() {
    let e = format!(
        "{:#}",
        runtime()
            .load(&PolicySource::Path(guest("misbehave-http-js")))
            .err()
            .expect("refused")
    );
    assert!(
        e.contains("it imports `wasi:http/types@0.2")
            && e.contains("which loopbox does not provide")
            && e.contains("disableFeatures"),
        "{e}"
    );
}
