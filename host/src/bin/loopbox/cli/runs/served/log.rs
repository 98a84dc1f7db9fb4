//! `loopbox runs log ID --server URL [--follow]`: a served run's log from the
//! API's stream (`GET /api/v1/runs/ID/log`, Server-Sent Events): the lines so
//! far, or with `--follow` each line as it comes until the run ends. Printed
//! as the local `runs log` prints, text or JSON lines.

use serde_json::Value;

use super::super::super::{Failure, exit};
use super::super::log::{LogArgs, print};
use super::client::Client;
use super::{ms, segment};
use loopbox::db::LogRecord;

pub fn execute(c: &Client, a: LogArgs, json: bool) -> Result<i32, Failure> {
    let path = format!("/api/v1/runs/{}/log?follow={}", segment(&a.id), a.follow);
    for event in c.events(&path)? {
        let event = event?;
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        match event.kind.as_str() {
            "log" => {
                let text = |k: &str| data[k].as_str().unwrap_or_default().to_string();
                let line = LogRecord {
                    at_ms: ms(&data["at"]).unwrap_or(0),
                    level: text("level"),
                    source: text("source"),
                    message: text("message"),
                };
                print(&line, json);
            }
            "end" => break,
            // The server ended the stream: the token was revoked meanwhile, say.
            "error" => {
                return Err(Failure::usage(anyhow::anyhow!(
                    "the server at {} ended the log: {}",
                    c.url,
                    loopbox::ui::one_line(data["error"].as_str().unwrap_or("(no reason given)"))
                )));
            }
            _ => {}
        }
    }
    Ok(exit::OK)
}
