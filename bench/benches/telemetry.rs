//! What OpenTelemetry adds to the paths it instruments, per call, off and on:
//! the calls an event (`RunContext::handle`), a command (`caps::actions`) and
//! an agent turn (the driver, a `prompt` action) make into `tracing` and
//! `loopbox::telemetry`, with the same spans and fields, on an empty future
//! where the real path has a policy, a process or an agent. Off is measured
//! first (no subscriber exists then, as in a process whose `OTEL_*` variables
//! are unset); then telemetry is set up against a receiver on loopback and the
//! same calls are measured on, their spans exported (counted at the end).
//!
//! `cargo bench -p loopbox-bench --bench telemetry`.

use std::time::Duration;

use loopbox::spend::{Charge, CostSource, Tokens};
use loopbox::telemetry;
use loopbox_bench::{Variant, full_run, interleave, table};
use tracing::Instrument;

/// What `RunContext::handle` adds around one event.
fn event(rt: &tokio::runtime::Runtime) {
    let kind = "turn-complete";
    let span = tracing::info_span!(
        target: "loopbox",
        "event",
        otel.name = %format!("event {kind}"),
        loopbox.event.seq = 7,
        loopbox.event.type = kind,
    );
    let started = telemetry::enabled().then(std::time::Instant::now);
    rt.block_on(async {}.instrument(span.clone()));
    if let Some(started) = started {
        telemetry::note_event(&span, 7, "inject");
        telemetry::metrics::decision(started.elapsed(), kind, "inject");
    }
}

/// What `caps::actions` adds around one command.
fn command(rt: &tokio::runtime::Runtime) {
    let program = telemetry::enabled().then(|| "true".to_string());
    let span = tracing::info_span!(
        target: "loopbox",
        "action",
        otel.name = %format!("exec {}", program.as_deref().unwrap_or("")),
        loopbox.action.kind = "exec",
        loopbox.rule = %"shell.allow[0] (true)",
        process.executable.name = program.as_deref().unwrap_or(""),
    );
    rt.block_on(async {}.instrument(span.clone()));
    if telemetry::enabled() {
        telemetry::note_process(
            &span,
            "exec",
            Some(telemetry::Ran {
                exit_code: Some(0),
                timed_out: false,
                took: Duration::from_millis(1),
            }),
        );
    }
}

/// What the driver adds around one agent turn.
fn agent_turn(rt: &tokio::runtime::Runtime, charge: &Charge) {
    let who = telemetry::Invocation::new("claude", Some("claude"), None, None);
    let span = telemetry::agent_span(&who, "turn");
    let started = telemetry::enabled().then(std::time::Instant::now);
    rt.block_on(async {}.instrument(span.clone()));
    if let Some(started) = started {
        telemetry::metrics::action(started.elapsed(), "turn", "ok");
        telemetry::finish_turn(
            &span,
            &who,
            telemetry::TurnEnd {
                took: started.elapsed(),
                charge: Some(charge),
                conversation: Some("session-1"),
                error: None,
            },
        );
    }
}

fn main() {
    let rounds = if full_run() { 20_000 } else { 10 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let charge = Charge {
        unmetered: false,
        model: Some("claude-sonnet-4-5-20250929".into()),
        tokens: Tokens {
            input: 1100,
            output: 50,
            cache_read: 1000,
            cache_write: 0,
        },
        cost_usd: Some(0.1),
        source: CostSource::Agent,
    };
    let measure = |label: &str| {
        let mut variants = vec![
            Variant::new(format!("an empty future, block_on ({label})"), 1, || {
                rt.block_on(async {})
            }),
            Variant::new(format!("an event's span and metric ({label})"), 1, || {
                event(&rt)
            }),
            Variant::new(format!("a command's span and metric ({label})"), 1, || {
                command(&rt)
            }),
            Variant::new(
                format!("an agent turn's span and metrics ({label})"),
                1,
                || agent_turn(&rt, &charge),
            ),
        ];
        interleave(&mut variants, 100, rounds);
        table(
            &format!("telemetry per call, {label} ({rounds} interleaved samples of each)"),
            &variants,
        );
    };
    measure("off");
    let sink = loopbox_bench::otlp_sink();
    #[allow(clippy::disallowed_methods)] // telemetry's own configuration is read from here
    // SAFETY: no other thread of this process reads the environment (the sink's does not).
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &sink.endpoint)
    };
    let guard = loopbox::telemetry::init_from_env()
        .unwrap()
        .expect("telemetry is on");
    measure("on");
    drop(guard);
    let (requests, bytes) = sink.requests_and_bytes();
    println!("OTLP receiver: {requests} request(s), {bytes} bytes of spans and metrics");
}
