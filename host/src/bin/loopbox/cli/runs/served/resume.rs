//! `loopbox runs resume ID --server URL`: queue an interrupted served run
//! again (`POST /api/v1/runs/ID/resume`), with the choices a person makes for
//! it (`--resend-turn`, `--allow-policy-change`, `--accept-config-change`),
//! which the server keeps with the run for whichever process drives it next.

use serde_json::json;

use super::super::super::{Failure, exit};
use super::super::cont::ResumeArgs;
use super::client::Client;
use super::{command, segment};

pub fn execute(c: &Client, a: ResumeArgs, json: bool) -> Result<i32, Failure> {
    let answer = c.post(
        &format!("/api/v1/runs/{}/resume", segment(&a.id)),
        &json!({
            "resend_turn": a.resend_turn,
            "allow_policy_change": a.allow_policy_change,
            "accept_config_change": a.accept_config_change,
        }),
    )?;
    let status = answer["status"].as_str().unwrap_or("queued");
    if json {
        loopbox::outln!("{}", json!({"run_id": a.id, "status": status}));
    } else {
        loopbox::outln!(
            "resumed run {}: it is {status}, and the server drives it (`{}`)",
            a.id,
            command(c, &format!("log {} --follow", a.id))
        );
    }
    Ok(exit::OK)
}
