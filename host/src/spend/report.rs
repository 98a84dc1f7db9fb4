//! Each agent's report of one turn, read into a [`Usage`]. The fields and
//! where each agent documents them (the fixtures in
//! `host/tests/fixtures/usage/` are recorded outputs in these formats, each
//! citing its source):
//!
//! - Claude Code, `claude -p --output-format json` (and the last line of
//!   `stream-json`): one result object with `total_cost_usd`, `usage`
//!   (`input_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens`,
//!   `output_tokens`) and `modelUsage` (per model `inputTokens`,
//!   `outputTokens`, `cacheReadInputTokens`, `cacheCreationInputTokens`,
//!   `costUSD`): https://code.claude.com/docs/en/agent-sdk/cost-tracking.
//!   Its `input_tokens` leave the cached ones out; here they are added in.
//! - Codex, `codex exec --json`: JSONL events; `thread.started` carries the
//!   `thread_id`, `item.completed` with an `agent_message` item the reply, and
//!   `turn.completed` the turn's `usage` (`input_tokens`, `cached_input_tokens`
//!   within them, `output_tokens`): `codex-rs/exec/src/exec_events.rs`. No model
//!   and no cost: `[prices]` prices it, by the model the request named or `default`.
//! - Gemini CLI, `gemini --output-format json`: `{session_id, response, stats}`
//!   with `stats.models.NAME.tokens` (`prompt`, cached included; `cached`;
//!   `candidates`; `thoughts`; `tool`): `docs/cli/headless.md` and
//!   `packages/core/src/output/json-formatter.test.ts`. Thoughts are billed as
//!   output and tool-use prompt tokens as input.
//! - A chat-completions server: `usage` (`prompt_tokens`, `completion_tokens`,
//!   `prompt_tokens_details.cached_tokens`) and `model`: the OpenAI API
//!   reference for the chat completion object.

use serde_json::Value;

use super::{Tokens, Usage};

fn n(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .unwrap_or(0)
}

fn cost(v: &Value) -> Option<f64> {
    v.as_f64().filter(|c| c.is_finite() && *c >= 0.0)
}

/// Claude Code's result object, if `v` is one that reports usage.
pub fn claude(v: &Value) -> Option<Usage> {
    if v.get("total_cost_usd").is_none() && v.get("modelUsage").is_none() {
        return None;
    }
    let models: Vec<(String, Tokens)> = match v.get("modelUsage").and_then(Value::as_object) {
        Some(per_model) if !per_model.is_empty() => per_model
            .iter()
            .map(|(name, m)| {
                let (read, write) = (
                    n(&m["cacheReadInputTokens"]),
                    n(&m["cacheCreationInputTokens"]),
                );
                (
                    name.clone(),
                    Tokens {
                        input: n(&m["inputTokens"])
                            .saturating_add(read)
                            .saturating_add(write),
                        output: n(&m["outputTokens"]),
                        cache_read: read,
                        cache_write: write,
                    },
                )
            })
            .collect(),
        _ => {
            let u = &v["usage"];
            let (read, write) = (
                n(&u["cache_read_input_tokens"]),
                n(&u["cache_creation_input_tokens"]),
            );
            vec![(
                String::new(),
                Tokens {
                    input: n(&u["input_tokens"])
                        .saturating_add(read)
                        .saturating_add(write),
                    output: n(&u["output_tokens"]),
                    cache_read: read,
                    cache_write: write,
                },
            )]
        }
    };
    Some(Usage {
        models,
        cost_usd: cost(&v["total_cost_usd"]),
    })
}

/// Gemini CLI's JSON output, if `v` is one with stats.
pub fn gemini(v: &Value) -> Option<Usage> {
    let per_model = v.get("stats")?.get("models")?.as_object()?;
    let models = per_model
        .iter()
        .map(|(name, m)| {
            let t = &m["tokens"];
            let cached = n(&t["cached"]);
            // `prompt` includes the cached tokens; `input` (newer) leaves them out.
            let prompt = if t.get("prompt").is_some() {
                n(&t["prompt"])
            } else {
                n(&t["input"]).saturating_add(cached)
            };
            (
                name.clone(),
                Tokens {
                    input: prompt.saturating_add(n(&t["tool"])),
                    output: n(&t["candidates"]).saturating_add(n(&t["thoughts"])),
                    cache_read: cached,
                    cache_write: 0,
                },
            )
        })
        .collect();
    Some(Usage {
        models,
        cost_usd: None,
    })
}

/// A chat-completions response's `usage`, if it has one.
pub fn openai(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    u.get("prompt_tokens")?;
    let model = v["model"].as_str().unwrap_or_default().to_string();
    Some(Usage {
        models: vec![(
            model,
            Tokens {
                input: n(&u["prompt_tokens"]),
                output: n(&u["completion_tokens"]),
                cache_read: n(&u["prompt_tokens_details"]["cached_tokens"]),
                cache_write: 0,
            },
        )],
        cost_usd: None,
    })
}

/// The usage in one JSON reply object, whichever of these agents wrote it.
pub fn json_object(v: &Value) -> Option<Usage> {
    claude(v).or_else(|| gemini(v)).or_else(|| openai(v))
}

/// What `codex exec --json` printed: the reply (the last agent message), the
/// thread id, and the usage of its turns (`None` without a `turn.completed`).
pub fn codex_events(stdout: &str) -> (String, Option<String>, Option<Usage>) {
    let (mut text, mut thread, mut tokens, mut turns) = (String::new(), None, Tokens::default(), 0);
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        match v["type"].as_str() {
            Some("thread.started") => thread = v["thread_id"].as_str().map(String::from),
            Some("item.completed") if v["item"]["type"] == "agent_message" => {
                text = v["item"]["text"].as_str().unwrap_or_default().to_string();
            }
            Some("turn.completed") => {
                let u = &v["usage"];
                turns += 1;
                tokens.add(&Tokens {
                    input: n(&u["input_tokens"]),
                    output: n(&u["output_tokens"]),
                    cache_read: n(&u["cached_input_tokens"]),
                    cache_write: 0,
                });
            }
            _ => {}
        }
    }
    let usage = (turns > 0).then(|| Usage {
        models: vec![(String::new(), tokens)],
        cost_usd: None,
    });
    (text, thread, usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_counts_cached_input_in_and_keeps_its_own_cost() {
        let u = claude(&json!({
            "total_cost_usd": 0.0421,
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 3000, "output_tokens": 40},
        }))
        .unwrap();
        assert_eq!(u.cost_usd, Some(0.0421));
        assert_eq!(
            u.tokens(),
            Tokens {
                input: 3210,
                output: 40,
                cache_read: 3000,
                cache_write: 200
            }
        );
        // Per model when the report has modelUsage.
        let u = claude(&json!({
            "total_cost_usd": 0.5,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "modelUsage": {
                "claude-sonnet-4-5-20250929": {"inputTokens": 100, "outputTokens": 50, "cacheReadInputTokens": 900, "cacheCreationInputTokens": 0, "costUSD": 0.4},
                "claude-haiku-4-5-20251001": {"inputTokens": 10, "outputTokens": 5, "costUSD": 0.1}
            }
        }))
        .unwrap();
        assert_eq!(u.main_model(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(u.tokens().total(), 1000 + 50 + 15);
        assert!(claude(&json!({"result": "hi"})).is_none());
    }

    #[test]
    fn counts_past_u64_saturate_instead_of_overflowing() {
        // An agent's report (or a line a tool appended to its transcript) is not
        // the host's to trust: the largest counts neither panic nor wrap to little.
        let max = u64::MAX;
        let u = claude(&json!({"total_cost_usd": 0.0, "usage": {"input_tokens": max, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 7, "output_tokens": 1}})).unwrap();
        assert_eq!(u.tokens().input, max);
        let u =
            claude(&json!({"modelUsage": {"m": {"inputTokens": max, "cacheReadInputTokens": 1}}}))
                .unwrap();
        assert_eq!(u.tokens().input, max);
        let u = gemini(&json!({"stats": {"models": {"g": {"tokens": {"prompt": max, "tool": 3, "candidates": max, "thoughts": 3}}}}})).unwrap();
        assert_eq!((u.tokens().input, u.tokens().output), (max, max));
        let u =
            gemini(&json!({"stats": {"models": {"g": {"tokens": {"input": max, "cached": 9}}}}}))
                .unwrap();
        assert_eq!(u.tokens().input, max);
    }

    #[test]
    fn gemini_adds_thoughts_to_output_and_tool_prompts_to_input() {
        let u = gemini(&json!({"response": "ok", "stats": {"models": {"gemini-2.5-pro": {
            "tokens": {"input": 13745, "prompt": 24401, "candidates": 215, "total": 24719, "cached": 10656, "thoughts": 103, "tool": 0}
        }}}}))
        .unwrap();
        let t = u.tokens();
        assert_eq!((t.input, t.output, t.cache_read), (24401, 318, 10656));
        // What Gemini calls `total` is what run.max_tokens counts.
        assert_eq!(t.total(), 24719);
    }

    #[test]
    fn codex_events_give_the_last_message_the_thread_and_summed_turns() {
        let out = [
            r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"thinking"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"done <promise>X</promise>"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":26549,"cached_input_tokens":22272,"output_tokens":1590}}"#,
        ]
        .join("\n");
        let (text, thread, usage) = codex_events(&out);
        assert_eq!(text, "done <promise>X</promise>");
        assert_eq!(
            thread.as_deref(),
            Some("0199a213-81c0-7800-8aa1-bbab2a035a53")
        );
        let t = usage.unwrap().tokens();
        assert_eq!((t.input, t.cache_read, t.output), (26549, 22272, 1590));
        assert!(codex_events("plain text\n").2.is_none());
    }

    #[test]
    fn openai_usage_needs_prompt_tokens() {
        let u = openai(&json!({"model": "gpt-4o-mini", "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "prompt_tokens_details": {"cached_tokens": 4}}})).unwrap();
        assert_eq!(u.main_model(), Some("gpt-4o-mini"));
        assert_eq!(u.tokens().cache_read, 4);
        assert!(openai(&json!({"usage": {}})).is_none());
    }
}
