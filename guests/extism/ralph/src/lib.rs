//! The Ralph loop as an Extism plugin, for the comparison benchmarks: the same
//! `ralph::decide` the loopbox component runs. Extism passes bytes, so the
//! progress travels with each call: `{"progress": {...}, "response": "..."}` in,
//! `{"progress": {...}, "next": {...}}` out.

use extism_pdk::{FnResult, plugin_fn};
use serde_json::{Value, json};

#[plugin_fn]
pub fn handle(input: String) -> FnResult<String> {
    let call: Value = serde_json::from_str(&input)?;
    let progress = serde_json::from_value(call["progress"].clone())?;
    let response = call["response"].as_str().unwrap_or_default();
    let (progress, next) = ralph::decide(progress, ralph::Input::Turn { response }).map_err(|e| extism_pdk::Error::msg(e))?;
    let next = match next {
        ralph::Next::Pass => json!({"pass": null}),
        ralph::Next::Inject(text) => json!({"inject": text}),
        ralph::Next::Done { success, summary } => json!({"done": {"success": success, "summary": summary}}),
    };
    Ok(json!({"progress": progress, "next": next}).to_string())
}
