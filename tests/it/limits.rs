//! Every limit, hit by a hostile guest through the real runtime: each ends the
//! event with an error naming the limit's key and value, and the host (and the
//! next event) carries on.

mod runtime_dropped;

use loopbox_tests::*;
use serde_json::json;

#[tokio::test]
async fn a_busy_loop_runs_out_of_fuel() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nfuel_per_event = 50000000\ncpu_ms_per_event = 60000",
    );
    let f = probe(&ctx, json!({"op": "spin"})).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.fuel_per_event"), "{f}");
    assert!(
        f.to_string().contains("limits.fuel_per_event = 50000000"),
        "{f}"
    );
}

#[tokio::test]
async fn a_busy_loop_runs_out_of_compute_time() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nfuel_per_event = 18000000000000000000\ncpu_ms_per_event = 200",
    );
    let started = std::time::Instant::now();
    let f = probe(&ctx, json!({"op": "spin"})).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.cpu_ms_per_event"), "{f}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn time_spent_in_actions_does_not_count_as_compute() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\ncpu_ms_per_event = 150\n[shell]\nallow = [[\"sleep\"]]",
    );
    let data = probe(&ctx, json!({"op": "exec", "argv": ["sleep", "0.6"]}))
        .await
        .unwrap();
    assert_eq!(data["ok"]["exit_code"], 0);
}

#[tokio::test]
async fn memory_growth_stops_at_the_limit() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nmemory_bytes = 33554432");
    let f = probe(&ctx, json!({"op": "grow", "mb": 200}))
        .await
        .unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.memory_bytes"), "{f}");
    // Under the limit, growth works.
    let data = probe(&ctx, json!({"op": "grow", "mb": 8})).await.unwrap();
    assert_eq!(data["grew_mb"], 8);
}

#[tokio::test]
async fn deep_recursion_traps_as_a_stack_overflow() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let f = probe(&ctx, json!({"op": "recurse"})).await.unwrap_err();
    assert!(f.to_string().contains("stack overflow"), "{f}");
    // The host and the next event are fine.
    assert_eq!(
        probe(&ctx, json!({"op": "echo", "x": 1})).await.unwrap()["x"],
        1
    );
}

#[tokio::test]
async fn an_oversize_string_to_the_host_is_refused() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nmax_string_bytes = 4096\n[shell]\nallow = [[\"echo\"]]",
    );
    // A call with no error channel traps, naming the limit.
    let f = probe(&ctx, json!({"op": "log", "bytes": 10000}))
        .await
        .unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.max_string_bytes"), "{f}");
    assert!(f.to_string().contains("attempted 10011"), "{f}");
    // An action gets `invalid`, which the policy can handle.
    let data = probe(&ctx, json!({"op": "exec_big", "bytes": 10000}))
        .await
        .unwrap();
    assert_eq!(data["err"]["kind"], "invalid");
    assert!(
        data["err"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_string_bytes = 4096")
    );
}

#[tokio::test]
async fn copying_more_than_the_hostcall_budget_traps_before_the_host_allocates() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nmax_string_bytes = 65536\nhostcall_bytes = 65536",
    );
    let f = probe(&ctx, json!({"op": "log", "bytes": 1_000_000}))
        .await
        .unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.hostcall_bytes"), "{f}");
}

#[tokio::test]
async fn a_host_call_flood_is_stopped() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nhost_calls_per_event = 500");
    let f = probe(&ctx, json!({"op": "flood", "count": 100000}))
        .await
        .unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.host_calls_per_event"), "{f}");
    let ok = probe(&ctx, json!({"op": "flood", "count": 100}))
        .await
        .unwrap();
    assert_eq!(ok["flooded"], true);
}

#[tokio::test]
async fn the_action_budget_is_per_run() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nactions_per_run = 3\n[shell]\nallow = [[\"true\"]]",
    );
    let data = probe(&ctx, json!({"op": "exec", "argv": ["true"], "times": 2}))
        .await
        .unwrap();
    assert!(
        data.as_array()
            .unwrap()
            .iter()
            .all(|r| r["ok"]["exit_code"] == 0)
    );
    // The budget carries across events of the same run.
    let data = probe(&ctx, json!({"op": "exec", "argv": ["true"], "times": 2}))
        .await
        .unwrap();
    assert_eq!(data[0]["ok"]["exit_code"], 0);
    assert_eq!(data[1]["err"]["kind"], "budget-exhausted");
    assert!(
        data[1]["err"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.actions_per_run = 3")
    );
    // Denied requests cost nothing, and a new run has a new budget.
    let other = ws.run(
        &load("probe"),
        "[limits]\nactions_per_run = 3\n[shell]\nallow = [[\"true\"]]",
    );
    assert_eq!(
        probe(&other, json!({"op": "exec", "argv": ["true"]}))
            .await
            .unwrap()["ok"]["exit_code"],
        0
    );
}

#[tokio::test]
async fn state_value_and_total_sizes_are_limited() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        "[limits]\nstate_value_bytes = 1000\nstate_total_bytes = 2500",
    );
    let data = probe(&ctx, json!({"op": "state_big", "bytes": 2000}))
        .await
        .unwrap();
    assert!(
        data["result"]
            .as_str()
            .unwrap()
            .contains("limits.state_value_bytes = 1000"),
        "{data}"
    );
    let big = "y".repeat(900);
    let data = probe(&ctx, json!({"op": "state", "set": {"a": big, "b": big}}))
        .await
        .unwrap();
    assert!(data.as_object().unwrap().is_empty(), "{data}");
    let data = probe(&ctx, json!({"op": "state", "set": {"c": big}}))
        .await
        .unwrap();
    assert!(
        data["set-error:c"]
            .as_str()
            .unwrap()
            .contains("limits.state_total_bytes = 2500"),
        "{data}"
    );
    // Replacing a value counts its new size, not both.
    let data = probe(
        &ctx,
        json!({"op": "state", "set": {"a": "small"}, "get": ["a"]}),
    )
    .await
    .unwrap();
    assert_eq!(data["a"], "\"small\"");
    let data = probe(&ctx, json!({"op": "state", "set": {"c": big}}))
        .await
        .unwrap();
    assert!(data.as_object().unwrap().is_empty(), "{data}");
    // Writing back a value read in the same event counts the stored size once.
    let data = probe(
        &ctx,
        json!({"op": "state", "read_first": ["c"], "set": {"c": big}}),
    )
    .await
    .unwrap();
    assert_eq!(data, json!({"before:c": true}), "{data}");
    // Full again; a removal in the same event makes room for a new value.
    let data = probe(&ctx, json!({"op": "state", "set": {"d": big}}))
        .await
        .unwrap();
    assert!(
        data["set-error:d"]
            .as_str()
            .unwrap()
            .contains("limits.state_total_bytes"),
        "{data}"
    );
    let data = probe(
        &ctx,
        json!({"op": "state", "remove": ["b"], "set": {"d": big}, "keys": ""}),
    )
    .await
    .unwrap();
    assert_eq!(data["keys"], json!(["a", "c", "d"]), "{data}");
}

#[tokio::test]
async fn log_output_past_the_budget_is_dropped_with_one_notice() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nlog_bytes_per_event = 4096");
    probe(&ctx, json!({"op": "log", "bytes": 1000, "count": 20}))
        .await
        .unwrap();
    let log = log_messages(&ctx);
    let policy_lines = log.iter().filter(|l| l.starts_with("[policy]")).count();
    assert_eq!(policy_lines, 4, "{log:#?}");
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("limits.log_bytes_per_event = 4096"))
            .count(),
        1,
        "{log:#?}"
    );
}

#[tokio::test]
async fn guest_stdout_goes_to_the_run_log_capped() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nlog_bytes_per_event = 1000");
    let data = probe(&ctx, json!({"op": "print", "bytes": 50000}))
        .await
        .unwrap();
    assert_eq!(data["printed"], 50000);
    let log = log_messages(&ctx);
    let out: usize = log
        .iter()
        .filter(|l| l.starts_with("[stdout]"))
        .map(|l| l.len() - "[stdout] ".len())
        .sum();
    assert!(out <= 1000 && out > 0, "{out}");
    assert!(
        log.iter().any(|l| l
            .contains("bytes of the policy's stdout past limits.log_bytes_per_event were dropped")),
        "{log:#?}"
    );
}

#[tokio::test]
async fn a_panicking_guest_is_a_trap_with_its_message_in_the_log() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    let f = probe(&ctx, json!({"op": "trap"})).await.unwrap_err();
    assert!(
        matches!(f, loopbox::wasm::fault::PolicyFault::Trap(_)),
        "{f:?}"
    );
    assert!(
        log_messages(&ctx)
            .iter()
            .any(|l| l.starts_with("[stderr]") && l.contains("probe was told to panic"))
    );
}

#[tokio::test]
async fn instance_and_table_limits_are_named() {
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "[limits]\nmax_instances = 1");
    let f = probe(&ctx, json!({"op": "echo"})).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.max_instances"), "{f}");
    let ctx = ws.run(&load("probe"), "[limits]\nmax_tables = 1");
    let f = probe(&ctx, json!({"op": "echo"})).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.max_tables"), "{f}");
    let ctx = ws.run(&load("probe"), "[limits]\ntable_elements = 2");
    let f = probe(&ctx, json!({"op": "echo"})).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.table_elements"), "{f}");
}

/// Each event runs on a fresh instance: what one event wrote into its memory (a
/// static in the data segment, a heap block) is gone when the next one runs,
/// however the pool resets its slots (madvise, or the pagemap scan that keeps
/// pages resident).
#[tokio::test]
async fn nothing_an_event_writes_in_guest_memory_reaches_the_next() {
    if std::env::var_os("LOOPBOX_NO_PAGEMAP_SCAN").is_some() {
        assert!(
            !loopbox::wasm::pagemap_scan(),
            "the switch turns the scan off"
        );
    }
    let ws = Workspace::new();
    let ctx = ws.run(&load("probe"), "");
    // Within one instance, the probe does see what it left.
    let again = probe(&ctx, json!({"op": "remember", "times": 2}))
        .await
        .unwrap();
    assert_eq!(
        (
            again["static_before"].as_u64(),
            again["zeroed_leftover"].as_u64()
        ),
        (Some(0x5EED), Some(1 << 20)),
        "{again}"
    );
    for round in 0..4 {
        let seen = probe(&ctx, json!({"op": "remember"})).await.unwrap();
        assert_eq!(
            seen,
            json!({"static_before": 0, "zeroed_leftover": 0, "heap_leftover": 0}),
            "event {round} saw what an earlier one left"
        );
    }
}

/// The same with the pagemap scan off (the path of kernels before 6.7): this
/// test binary runs the test above again in a process of its own.
#[test]
fn nothing_reaches_the_next_event_without_the_pagemap_scan_either() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "limits::nothing_an_event_writes_in_guest_memory_reaches_the_next",
            "--test-threads=1",
        ])
        .env("LOOPBOX_NO_PAGEMAP_SCAN", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
