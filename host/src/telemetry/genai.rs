//! Agent turns as the OpenTelemetry GenAI semantic conventions (v1.41.0)
//! describe an agent invocation ("Invoke agent client span"): a client span
//! named `invoke_agent {gen_ai.agent.name}` with the required
//! `gen_ai.operation.name` (`invoke_agent`) and `gen_ai.provider.name`, the
//! conditionally required `gen_ai.agent.name`, `gen_ai.request.model` and
//! `gen_ai.conversation.id` when known, `error.type` and an error status when
//! the turn failed; and once the agent answered `gen_ai.response.model`,
//! `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens` and the cache
//! counts (`gen_ai.usage.cache_read.input_tokens`,
//! `gen_ai.usage.cache_creation.input_tokens`). Each turn also records the
//! conventions' two client metrics (`gen_ai.client.operation.duration`,
//! `gen_ai.client.token.usage`, see [`super::metrics`]).
//! The conventions have no cost attribute: it is `loopbox.cost_usd`.
//! Prompts and replies are never recorded (the conventions make content opt-in).

use std::time::Duration;

use opentelemetry::trace::Status;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::spend::Charge;

/// Who a turn goes to, as the conventions name it.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// `gen_ai.provider.name`: a well-known value where the runner or the
    /// program says which (`anthropic`, `openai`, `gcp.gemini`), else the
    /// program's own name (the conventions allow a custom value).
    pub provider: String,
    /// `gen_ai.agent.name`: the profile's name (`[agents.NAME]`), else the program's.
    pub agent: String,
    /// `gen_ai.request.model`, when the prompt named one.
    pub model: Option<String>,
}

impl Invocation {
    /// `runner`: the `[agent]` runner's name (`claude`, `codex`, `gemini`,
    /// `openai`, `command`); `program`: its `command[0]`; `profile`: the
    /// profile a prompt named.
    pub fn new(
        runner: &str,
        program: Option<&str>,
        profile: Option<&str>,
        model: Option<&str>,
    ) -> Invocation {
        let program = program
            .and_then(|p| std::path::Path::new(p).file_name())
            .map(|n| crate::ui::shorten(&crate::ui::sanitize(&n.to_string_lossy()), 64))
            .filter(|n| !n.is_empty());
        let provider = provider_of(runner)
            .or_else(|| program.as_deref().and_then(provider_of))
            .map(str::to_string)
            .or_else(|| program.clone())
            .unwrap_or_else(|| runner.to_string());
        let agent = profile
            .map(str::to_string)
            .or(program)
            .unwrap_or_else(|| runner.to_string());
        Invocation {
            provider,
            agent,
            model: model.map(|m| crate::ui::shorten(m, 100)),
        }
    }
}

/// The well-known `gen_ai.provider.name` of an agent runner or CLI.
fn provider_of(runner: &str) -> Option<&'static str> {
    match runner {
        "claude" => Some("anthropic"),
        "codex" | "openai" => Some("openai"),
        "gemini" => Some("gcp.gemini"),
        _ => None,
    }
}

/// The span of one agent turn (`kind`: `turn`, the driver's, or `prompt`, an action).
pub fn agent_span(who: &Invocation, kind: &'static str) -> tracing::Span {
    if !super::enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: "loopbox",
        "invoke_agent",
        otel.name = %format!("invoke_agent {}", who.agent),
        otel.kind = "client",
        gen_ai.operation.name = "invoke_agent",
        loopbox.agent_turn.kind = kind,
    );
    span.set_attribute("gen_ai.provider.name", who.provider.clone());
    span.set_attribute("gen_ai.agent.name", who.agent.clone());
    if let Some(m) = &who.model {
        span.set_attribute("gen_ai.request.model", m.clone());
    }
    span
}

/// How a turn ended, for its span and the metrics.
pub struct TurnEnd<'a> {
    pub took: Duration,
    /// What it used and cost, when the agent answered.
    pub charge: Option<&'a Charge>,
    pub conversation: Option<&'a str>,
    /// Why it failed: `error.type` (low cardinality) and the message.
    pub error: Option<(&'static str, String)>,
}

/// Close the books on one turn: its span's attributes and status, and both metrics.
pub fn finish_turn(span: &tracing::Span, who: &Invocation, end: TurnEnd<'_>) {
    if !super::enabled() {
        return;
    }
    let response_model = end
        .charge
        .and_then(|c| c.model.as_deref())
        .map(|m| crate::ui::shorten(m, 100));
    let turn = super::metrics::Turn {
        provider: &who.provider,
        request_model: who.model.as_deref(),
        response_model: response_model.as_deref(),
    };
    super::metrics::operation(end.took, &turn, end.error.as_ref().map(|e| e.0));
    if let Some((kind, message)) = &end.error {
        span.set_attribute("error.type", *kind);
        span.set_status(Status::error(crate::ui::shorten(message, 200)));
    }
    if let Some(c) = end.conversation {
        span.set_attribute("gen_ai.conversation.id", crate::ui::shorten(c, 100));
    }
    let Some(charge) = end.charge else {
        return;
    };
    super::metrics::spend(charge, &turn);
    if charge.unmetered {
        span.set_attribute("loopbox.usage_reported", false);
        return;
    }
    let t = &charge.tokens;
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    if let Some(m) = response_model {
        span.set_attribute("gen_ai.response.model", m);
    }
    span.set_attribute("gen_ai.usage.input_tokens", n(t.input));
    span.set_attribute("gen_ai.usage.output_tokens", n(t.output));
    span.set_attribute("gen_ai.usage.cache_read.input_tokens", n(t.cache_read));
    span.set_attribute("gen_ai.usage.cache_creation.input_tokens", n(t.cache_write));
    if let Some(c) = charge.cost_usd {
        span.set_attribute("loopbox.cost_usd", c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_named_after_its_profile_or_program_and_its_provider_is_always_set() {
        let claude = Invocation::new("claude", Some("/usr/bin/claude"), None, Some("opus"));
        assert_eq!(
            (
                claude.provider.as_str(),
                claude.agent.as_str(),
                claude.model.as_deref()
            ),
            ("anthropic", "claude", Some("opus"))
        );
        // A `command` runner that runs a known CLI is that CLI's provider.
        let cmd = Invocation::new("command", Some("gemini"), Some("reviewer"), None);
        assert_eq!(
            (cmd.provider.as_str(), cmd.agent.as_str()),
            ("gcp.gemini", "reviewer")
        );
        // Another program is its own (custom) provider, never nothing.
        let own = Invocation::new("command", Some("./bin/my-agent"), None, None);
        assert_eq!(
            (own.provider.as_str(), own.agent.as_str()),
            ("my-agent", "my-agent")
        );
        let http = Invocation::new("openai", None, None, None);
        assert_eq!(
            (http.provider.as_str(), http.agent.as_str()),
            ("openai", "openai")
        );
    }
}
