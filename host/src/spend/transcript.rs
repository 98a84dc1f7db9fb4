//! A hook session's spend, from the usage lines of the agent's own session
//! transcript (JSONL), read a little more at each hook event: the [`Tally`]
//! keeps how far it has read and what it counted, so an event reads only the
//! lines written since the last one.
//!
//! - Claude Code writes an assistant message as several lines (one per content
//!   block), each with the same `message.id` and the same `message.usage`
//!   (`input_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens`,
//!   `output_tokens`): a message is counted once, its last line's figures
//!   standing ("Same ID = Same Usage",
//!   https://code.claude.com/docs/en/agent-sdk/cost-tracking).
//! - Codex's rollout file has `event_msg` lines of type `token_count` whose
//!   `info.total_token_usage` is the session's running total (`input_tokens`,
//!   `cached_input_tokens`, `output_tokens`), and `turn_context` lines naming
//!   the model (openai/codex issue 5276 shows both).
//! - Gemini CLI records each message as a line `{id, type: "gemini", model,
//!   tokens: {input, output, cached, thoughts, tool, total}}` and appends a
//!   message again when it changes: the last line of an id stands
//!   (`packages/core/src/services/chatRecordingService.ts`). A rewind does not
//!   give back what was spent, so it changes nothing here.
//!
//! No transcript reports a cost: `[prices]` prices the tally.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Tokens, Usage};

/// Models a tally keeps apart; the rest are counted together under [`OTHER`],
/// so a transcript naming a million models cannot grow the tally (kept in the
/// store at every event) past a few kilobytes.
pub const MAX_MODELS: usize = 32;

/// Where models past [`MAX_MODELS`] are counted, unpriced unless `[prices.default]`.
pub const OTHER: &str = "(other models)";

/// The longest model name or message id kept, in bytes.
const MAX_NAME: usize = 200;

/// `s` cut to at most [`MAX_NAME`] bytes, on a character boundary.
fn bounded(s: &str) -> String {
    let mut end = s.len().min(MAX_NAME);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Whose transcript format a file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    ClaudeCode,
    Codex,
    Gemini,
}

/// What has been counted of one transcript.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// The transcript this is a tally of.
    pub path: String,
    /// Bytes of it read, up to the end of the last whole line.
    pub offset: u64,
    /// Tokens per model so far (`""`: a model the transcript did not name).
    pub models: BTreeMap<String, Tokens>,
    /// Messages (model calls) counted.
    pub messages: u64,
    /// The last message counted, its model and tokens: a later line of the same
    /// message replaces its figures rather than adding to them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<(String, String, Tokens)>,
    /// The model the transcript last said it uses (Codex names it apart from the counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// One usage line: the message it belongs to, its model and its tokens.
struct Line {
    id: String,
    model: Option<String>,
    tokens: Tokens,
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl Tally {
    /// A fresh tally of the transcript at `path`.
    pub fn of(path: &str) -> Tally {
        Tally {
            path: path.to_string(),
            ..Default::default()
        }
    }

    /// Go on with the transcript at `path` (the session's file changed, or was
    /// replaced): what was counted stays, reading starts at its beginning.
    pub fn switch_to(&mut self, path: &str) {
        self.path = path.to_string();
        self.restart();
    }

    /// Read the file again from its start, keeping the counts (it was replaced).
    pub fn restart(&mut self) {
        self.offset = 0;
        self.last = None;
    }

    /// Count one line of the transcript (a line that is not a usage line changes nothing).
    pub fn feed(&mut self, format: Format, line: &str) {
        // Most lines are tool output and text: skip them before parsing.
        let marker = match format {
            Format::ClaudeCode => "\"usage\"",
            Format::Codex => "\"total_token_usage\"",
            Format::Gemini => "\"tokens\"",
        };
        if format == Format::Codex && line.contains("\"turn_context\"") {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && let Some(m) = v["payload"]["model"].as_str()
            {
                self.model = Some(bounded(m));
            }
            return;
        }
        if !line.contains(marker) {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let Some(found) = parse(format, &v) else {
            return;
        };
        let mut model = found
            .model
            .or_else(|| self.model.clone())
            .map(|m| bounded(&m))
            .unwrap_or_default();
        if self.models.len() >= MAX_MODELS && !self.models.contains_key(&model) {
            model = OTHER.to_string();
        }
        // A long id is kept by its hash: still distinct, never long.
        let id = if found.id.len() > MAX_NAME {
            blake3::hash(found.id.as_bytes()).to_hex().to_string()
        } else {
            found.id
        };
        if let Some((last_id, last_model, last_tokens)) = &self.last
            && *last_id == id
        {
            if let Some(t) = self.models.get_mut(last_model) {
                *t = t.minus(last_tokens);
            }
        } else {
            self.messages += 1;
        }
        self.models
            .entry(model.clone())
            .or_default()
            .add(&found.tokens);
        self.last = Some((id, model, found.tokens));
    }

    /// The tally as one usage report, for pricing.
    pub fn usage(&self) -> Usage {
        Usage {
            models: self
                .models
                .iter()
                .filter(|(_, t)| !t.is_zero())
                .map(|(m, t)| (m.clone(), *t))
                .collect(),
            cost_usd: None,
        }
    }
}

fn parse(format: Format, v: &Value) -> Option<Line> {
    match format {
        Format::ClaudeCode => {
            let m = &v["message"];
            if v["type"] != "assistant" && m["role"] != "assistant" {
                return None;
            }
            let u = m.get("usage")?;
            let (read, write) = (
                n(&u["cache_read_input_tokens"]),
                n(&u["cache_creation_input_tokens"]),
            );
            let tokens = Tokens {
                input: n(&u["input_tokens"])
                    .saturating_add(read)
                    .saturating_add(write),
                output: n(&u["output_tokens"]),
                cache_read: read,
                cache_write: write,
            };
            // Claude Code's own notices (`<synthetic>`) use nothing.
            if tokens.is_zero() {
                return None;
            }
            let id = m["id"]
                .as_str()
                .or_else(|| v["requestId"].as_str())
                .or_else(|| v["uuid"].as_str())?
                .to_string();
            Some(Line {
                id,
                model: m["model"].as_str().map(String::from),
                tokens,
            })
        }
        Format::Codex => {
            let p = &v["payload"];
            if p["type"] != "token_count" {
                return None;
            }
            let u = p["info"].get("total_token_usage")?;
            Some(Line {
                // The running total: each line replaces the one before.
                id: "total".into(),
                model: None,
                tokens: Tokens {
                    input: n(&u["input_tokens"]),
                    output: n(&u["output_tokens"]),
                    cache_read: n(&u["cached_input_tokens"]),
                    cache_write: 0,
                },
            })
        }
        Format::Gemini => {
            let t = v.get("tokens").filter(|t| t.is_object())?;
            let cached = n(&t["cached"]);
            Some(Line {
                id: v["id"].as_str()?.to_string(),
                model: v["model"].as_str().map(String::from),
                tokens: Tokens {
                    // `input` is promptTokenCount, cached tokens included.
                    input: n(&t["input"]).saturating_add(n(&t["tool"])),
                    output: n(&t["output"]).saturating_add(n(&t["thoughts"])),
                    cache_read: cached,
                    cache_write: 0,
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claude_line(id: &str, output: u64) -> String {
        json!({"type": "assistant", "message": {"id": id, "model": "claude-sonnet-4-5-20250929", "role": "assistant",
            "content": [{"type": "text", "text": "x"}],
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": output}}})
        .to_string()
    }

    #[test]
    fn a_claude_message_over_several_lines_counts_once() {
        let mut t = Tally::of("t.jsonl");
        for line in [
            claude_line("msg_1", 10),
            claude_line("msg_1", 10),
            r#"{"type":"user","message":{"role":"user","content":"go"}}"#.into(),
            claude_line("msg_2", 7),
            claude_line("msg_2", 30),
        ] {
            t.feed(Format::ClaudeCode, &line);
        }
        let m = &t.models["claude-sonnet-4-5-20250929"];
        assert_eq!(t.messages, 2);
        assert_eq!((m.input, m.output, m.cache_read), (2 * 1105, 40, 2000));
        // The tally survives the store as JSON and goes on where it stopped.
        let mut back: Tally = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        back.feed(Format::ClaudeCode, &claude_line("msg_2", 31));
        assert_eq!(back.models["claude-sonnet-4-5-20250929"].output, 41);
    }

    #[test]
    fn codex_keeps_the_running_total_under_the_model_it_named() {
        let mut t = Tally::of("r.jsonl");
        let count = |i: u64, o: u64| {
            json!({"type": "event_msg", "payload": {"type": "token_count", "info": {
                "total_token_usage": {"input_tokens": i, "cached_input_tokens": i / 2, "output_tokens": o, "reasoning_output_tokens": 0, "total_tokens": i + o},
                "last_token_usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1}}}})
            .to_string()
        };
        t.feed(
            Format::Codex,
            r#"{"type":"turn_context","payload":{"model":"gpt-5.1-codex","cwd":"/w"}}"#,
        );
        t.feed(Format::Codex, &count(1000, 100));
        t.feed(
            Format::Codex,
            r#"{"type":"event_msg","payload":{"type":"token_count","info":null}}"#,
        );
        t.feed(Format::Codex, &count(2500, 300));
        assert_eq!(t.models["gpt-5.1-codex"].total(), 2800);
        assert_eq!(t.models["gpt-5.1-codex"].cache_read, 1250);
    }

    #[test]
    fn a_transcript_cannot_grow_the_tally_without_bound() {
        let mut t = Tally::of("t.jsonl");
        for i in 0..1000 {
            let line = json!({"type": "assistant", "message": {"id": "x".repeat(10_000) + &i.to_string(),
                "model": format!("model-{i}-{}", "m".repeat(10_000)), "role": "assistant",
                "usage": {"input_tokens": 1, "output_tokens": 1}}});
            t.feed(Format::ClaudeCode, &line.to_string());
        }
        assert_eq!(t.messages, 1000);
        assert_eq!(t.models.len(), MAX_MODELS + 1);
        assert_eq!(t.models[OTHER].input, 1000 - MAX_MODELS as u64);
        assert!(serde_json::to_string(&t).unwrap().len() < 16_000);
    }

    #[test]
    fn gemini_counts_each_message_id_by_its_last_line() {
        let mut t = Tally::of("s.jsonl");
        let msg = |id: &str, out: u64| {
            json!({"id": id, "timestamp": "2026-11-26T10:00:00Z", "type": "gemini", "content": "x", "model": "gemini-2.5-pro",
                "tokens": {"input": 2000, "output": out, "cached": 500, "thoughts": 10, "tool": 0, "total": 2010 + out}})
            .to_string()
        };
        t.feed(
            Format::Gemini,
            r#"{"sessionId":"s","projectHash":"h","startTime":"x"}"#,
        );
        t.feed(Format::Gemini, &msg("a", 5));
        t.feed(Format::Gemini, &msg("a", 50));
        t.feed(Format::Gemini, &msg("b", 1));
        t.feed(Format::Gemini, r#"{"$rewindTo":"a"}"#);
        let m = &t.models["gemini-2.5-pro"];
        assert_eq!((t.messages, m.input, m.output), (2, 4000, 50 + 10 + 1 + 10));
    }
}
