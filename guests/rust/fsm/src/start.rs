//! The `start` payload of a `builtin:fsm` run: the loop's text, where it
//! lives in the workspace (for imports and messages), and context values.
//!
//! `{"path": "loops/fix.yaml", "yaml": "name: ...", "context": {...}}`; a bare
//! JSON string is taken as the YAML text of a loop at the workspace root.

use serde_json::{Map, Value, json};

#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub path: String,
    pub yaml: String,
    pub context: Map<String, Value>,
}

pub fn payload(path: &str, yaml: &str, context: &Map<String, Value>) -> Value {
    json!({"path": path, "yaml": yaml, "context": context})
}

pub fn parse(input: &str) -> Result<Start, String> {
    let value: Value =
        serde_json::from_str(input).map_err(|e| format!("the input is not JSON: {e}"))?;
    match value {
        Value::String(yaml) => Ok(Start {
            path: "loop.yaml".into(),
            yaml,
            context: Map::new(),
        }),
        Value::Object(mut m) => {
            let Some(Value::String(yaml)) = m.remove("yaml") else {
                return Err(
                    "the input needs `yaml`: the loop's text (`loopbox run LOOP.yaml` fills it in)"
                        .into(),
                );
            };
            let path = match m.remove("path") {
                None => "loop.yaml".to_string(),
                Some(Value::String(p)) => p,
                Some(_) => return Err("`path` in the input must be text".into()),
            };
            let context = match m.remove("context") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(c)) => c,
                Some(_) => return Err("`context` in the input must be an object".into()),
            };
            if let Some(k) = m.keys().next() {
                return Err(format!(
                    "unknown input field `{k}` (fields: path, yaml, context)"
                ));
            }
            Ok(Start {
                path,
                yaml,
                context,
            })
        }
        _ => Err(
            "the input must be the loop's YAML text, or {\"path\", \"yaml\", \"context\"}".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_bad_ones_say_why() {
        let mut ctx = Map::new();
        ctx.insert("n".into(), json!(2));
        let p = payload("loops/a.yaml", "name: a", &ctx).to_string();
        assert_eq!(
            parse(&p),
            Ok(Start {
                path: "loops/a.yaml".into(),
                yaml: "name: a".into(),
                context: ctx
            })
        );
        assert_eq!(parse("\"name: b\"").unwrap().path, "loop.yaml");
        assert!(parse("{}").unwrap_err().contains("needs `yaml`"));
        assert!(
            parse("{\"yaml\": \"x\", \"extra\": 1}")
                .unwrap_err()
                .contains("unknown input field `extra`")
        );
        assert!(
            parse("3")
                .unwrap_err()
                .contains("must be the loop's YAML text")
        );
    }
}
