//! The metrics loopbox exports, and the calls that record them. Each call is
//! one load of a `OnceLock` when telemetry is off.
//!
//! | name | kind, unit | attributes |
//! |---|---|---|
//! | `loopbox.decision.duration` | histogram, s | `loopbox.event.type`, `loopbox.decision` |
//! | `loopbox.action.duration` | histogram, s | `loopbox.action.kind` (exec, script, prompt, turn), `loopbox.action.outcome` |
//! | `loopbox.approvals.waiting` | gauge, {approval} | none: the store's pending approvals when a run stops |
//! | `gen_ai.client.token.usage` | histogram, {token} | `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.token.type` (input, output), `gen_ai.request.model`, `gen_ai.response.model` |
//! | `gen_ai.client.operation.duration` | histogram, s | `gen_ai.operation.name`, `gen_ai.provider.name`, `error.type` (a failed turn), `gen_ai.request.model`, `gen_ai.response.model` |
//! | `loopbox.spend.cost` | counter, USD | `gen_ai.provider.name`, `gen_ai.response.model` |
//!
//! The two `gen_ai.client.*` metrics are the GenAI semantic conventions'
//! (v1.41.0), with the bucket boundaries they give.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, MeterProvider};

use crate::spend::Charge;

struct Instruments {
    decision: Histogram<f64>,
    action: Histogram<f64>,
    approvals: Gauge<u64>,
    tokens: Histogram<u64>,
    operation: Histogram<f64>,
    cost: Counter<f64>,
}

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();

/// Durations from 100 us to a minute: decisions take microseconds, actions seconds.
const SECONDS: [f64; 14] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0,
];

pub(super) fn install(provider: &opentelemetry_sdk::metrics::SdkMeterProvider) {
    let meter = provider.meter("loopbox");
    let _ = INSTRUMENTS.set(Instruments {
        decision: meter
            .f64_histogram("loopbox.decision.duration")
            .with_unit("s")
            .with_description("How long a policy took to decide an event, host calls included")
            .with_boundaries(SECONDS.to_vec())
            .build(),
        action: meter
            .f64_histogram("loopbox.action.duration")
            .with_unit("s")
            .with_description("How long an action or agent turn took")
            .with_boundaries(SECONDS.to_vec())
            .build(),
        approvals: meter
            .u64_gauge("loopbox.approvals.waiting")
            .with_unit("{approval}")
            .with_description("Ask-tier actions waiting for a person's approval in the store")
            .build(),
        tokens: meter
            .u64_histogram("gen_ai.client.token.usage")
            .with_unit("{token}")
            .with_description("Tokens one agent turn used")
            .with_boundaries(vec![
                1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
                4194304.0, 16777216.0, 67108864.0,
            ])
            .build(),
        operation: meter
            .f64_histogram("gen_ai.client.operation.duration")
            .with_unit("s")
            .with_description("How long one agent turn took")
            .with_boundaries(vec![
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
                81.92,
            ])
            .build(),
        cost: meter
            .f64_counter("loopbox.spend.cost")
            .with_unit("USD")
            .with_description("What agent turns cost, as reported or priced")
            .build(),
    });
}

/// A decided (or failed) event.
pub fn decision(took: Duration, event: &'static str, decision: &'static str) {
    if let Some(i) = INSTRUMENTS.get() {
        i.decision.record(
            took.as_secs_f64(),
            &[
                KeyValue::new("loopbox.event.type", event),
                KeyValue::new("loopbox.decision", decision),
            ],
        );
    }
}

/// A finished action or agent turn.
pub fn action(took: Duration, kind: &'static str, outcome: &'static str) {
    if let Some(i) = INSTRUMENTS.get() {
        i.action.record(
            took.as_secs_f64(),
            &[
                KeyValue::new("loopbox.action.kind", kind),
                KeyValue::new("loopbox.action.outcome", outcome),
            ],
        );
    }
}

/// The approvals waiting in a store, seen when a run stops.
pub fn approvals_waiting(n: u64) {
    if let Some(i) = INSTRUMENTS.get() {
        i.approvals.record(n, &[]);
    }
}

/// Who a turn went to, as both `gen_ai.client.*` metrics name it.
pub struct Turn<'a> {
    pub provider: &'a str,
    pub request_model: Option<&'a str>,
    pub response_model: Option<&'a str>,
}

/// The attributes the conventions require of both `gen_ai.client.*` metrics.
fn genai_attributes(who: &Turn<'_>) -> Vec<KeyValue> {
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.provider.name", who.provider.to_string()),
    ];
    if let Some(m) = who.request_model {
        attrs.push(KeyValue::new("gen_ai.request.model", m.to_string()));
    }
    if let Some(m) = who.response_model {
        attrs.push(KeyValue::new("gen_ai.response.model", m.to_string()));
    }
    attrs
}

/// One agent turn's duration; `error`: its `error.type` when it failed.
pub fn operation(took: Duration, who: &Turn<'_>, error: Option<&'static str>) {
    if let Some(i) = INSTRUMENTS.get() {
        let mut attrs = genai_attributes(who);
        if let Some(e) = error {
            attrs.push(KeyValue::new("error.type", e));
        }
        i.operation.record(took.as_secs_f64(), &attrs);
    }
}

/// What one agent turn used and cost.
pub fn spend(charge: &Charge, who: &Turn<'_>) {
    let Some(i) = INSTRUMENTS.get() else {
        return;
    };
    if charge.unmetered {
        return;
    }
    let attrs = genai_attributes(who);
    for (kind, n) in [
        ("input", charge.tokens.input),
        ("output", charge.tokens.output),
    ] {
        let mut a = attrs.clone();
        a.push(KeyValue::new("gen_ai.token.type", kind));
        i.tokens.record(n, &a);
    }
    if let Some(c) = charge.cost_usd {
        let mut a = vec![KeyValue::new(
            "gen_ai.provider.name",
            who.provider.to_string(),
        )];
        a.extend(
            who.response_model
                .map(|m| KeyValue::new("gen_ai.response.model", m.to_string())),
        );
        i.cost.add(c, &a);
    }
}
