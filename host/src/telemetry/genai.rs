//! Agent turns as the OpenTelemetry GenAI semantic conventions describe an
//! agent invocation: a span named `invoke_agent {provider}` with
//! `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
//! and once the agent answered `gen_ai.response.model`,
//! `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, the cache
//! counts (`gen_ai.usage.cache_read.input_tokens`,
//! `gen_ai.usage.cache_creation.input_tokens`) and `gen_ai.conversation.id`.
//! The conventions have no cost attribute: it is `loopbox.cost_usd`.
//! Prompts and replies are never recorded (the conventions make content opt-in).

use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::spend::Charge;

/// The `gen_ai.provider.name` of an agent runner (`claude`, `codex`, `gemini`,
/// `openai`); none for a command of the user's own.
pub fn provider_of(runner: &str) -> Option<&'static str> {
    match runner {
        "claude" => Some("anthropic"),
        "codex" | "openai" => Some("openai"),
        "gemini" => Some("gcp.gemini"),
        _ => None,
    }
}

/// The span of one agent turn (`kind`: `turn`, the driver's, or `prompt`, an action).
pub fn agent_span(
    provider: Option<&'static str>,
    model: Option<&str>,
    kind: &'static str,
) -> tracing::Span {
    if !super::enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: "loopbox",
        "invoke_agent",
        otel.name = %format!("invoke_agent {}", provider.unwrap_or("agent")),
        otel.kind = "client",
        gen_ai.operation.name = "invoke_agent",
        loopbox.agent_turn.kind = kind,
    );
    if let Some(p) = provider {
        span.set_attribute("gen_ai.provider.name", p);
    }
    if let Some(m) = model {
        span.set_attribute("gen_ai.request.model", crate::ui::shorten(m, 100));
    }
    span
}

/// What the turn used and cost, on its span and in the metrics.
pub fn record_charge(
    span: &tracing::Span,
    charge: &Charge,
    provider: Option<&'static str>,
    conversation: Option<&str>,
) {
    if !super::enabled() {
        return;
    }
    super::metrics::spend(charge, provider);
    if let Some(c) = conversation {
        span.set_attribute("gen_ai.conversation.id", crate::ui::shorten(c, 100));
    }
    if charge.unmetered {
        span.set_attribute("loopbox.usage_reported", false);
        return;
    }
    let t = &charge.tokens;
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    if let Some(m) = &charge.model {
        span.set_attribute("gen_ai.response.model", crate::ui::shorten(m, 100));
    }
    span.set_attribute("gen_ai.usage.input_tokens", n(t.input));
    span.set_attribute("gen_ai.usage.output_tokens", n(t.output));
    span.set_attribute("gen_ai.usage.cache_read.input_tokens", n(t.cache_read));
    span.set_attribute("gen_ai.usage.cache_creation.input_tokens", n(t.cache_write));
    if let Some(c) = charge.cost_usd {
        span.set_attribute("loopbox.cost_usd", c);
    }
}
