//! `loopbox runs cancel ID --server URL`: stop a served run
//! (`POST /api/v1/runs/ID/cancel`): at once when nothing drives it, else at
//! its next step; the server waits for its driver up to 10 s.

use serde_json::json;

use super::super::super::{Failure, exit};
use super::super::cancel::CancelArgs;
use super::client::Client;
use super::{command, segment};

pub fn execute(c: &Client, a: CancelArgs, json: bool) -> Result<i32, Failure> {
    let answer = c.post(
        &format!("/api/v1/runs/{}/cancel", segment(&a.id)),
        &json!({}),
    )?;
    let status = answer["status"].as_str().unwrap_or("?");
    if json {
        loopbox::outln!("{}", json!({"run_id": a.id, "status": status}));
    } else if status == "cancelled" {
        loopbox::outln!("cancelled: run {}", a.id);
    } else {
        loopbox::outln!(
            "run {} is still {status}: its driver has not stopped yet (it may be stuck outside loopbox's control); check again with `{}`",
            a.id,
            command(c, &format!("show {}", a.id))
        );
    }
    Ok(exit::OK)
}
