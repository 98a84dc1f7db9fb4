//! `loopbox runs answer|tick ID --server URL`: give a waiting served run the
//! answer its `ask` waits for, or a tick (`POST /api/v1/runs/ID/answer`,
//! `/tick`). The server keeps it in the run's inbox and queues the run; the
//! run goes on in the server, not here.

use serde_json::{Value, json};

use super::super::super::{Failure, exit, json_arg};
use super::super::cont::{AnswerArgs, TickArgs};
use super::client::Client;
use super::{command, refuse_flag, segment};

/// The flags that choose how this process continues a run: the server's to choose.
fn refuse_local(c: &Client, id: &str, given: bool) -> Result<(), Failure> {
    refuse_flag(
        given,
        "--allow-policy-change and --accept-config-change",
        &format!(
            "the server continues the run; a run it parks for a changed policy or config is resumed with `{}`",
            command(c, &format!("resume {id} --accept-config-change"))
        ),
    )
}

pub(super) fn done(
    c: &Client,
    what: &str,
    id: &str,
    answer: &Value,
    json: bool,
) -> Result<i32, Failure> {
    let status = answer["status"].as_str().unwrap_or("queued");
    if json {
        loopbox::outln!("{}", json!({"run_id": id, "status": status}));
    } else {
        loopbox::outln!(
            "{what} run {id}: it is {status}, and the server moves it on (`{}`)",
            command(c, &format!("log {id} --follow"))
        );
    }
    Ok(exit::OK)
}

pub fn answer(c: &Client, a: AnswerArgs, json: bool) -> Result<i32, Failure> {
    refuse_local(c, &a.id, a.allow_policy_change || a.accept_config_change)?;
    let answer = c.post(
        &format!("/api/v1/runs/{}/answer", segment(&a.id)),
        &json!({"text": a.text}),
    )?;
    done(c, "answered", &a.id, &answer, json)
}

pub fn tick(c: &Client, a: TickArgs, json: bool) -> Result<i32, Failure> {
    refuse_local(c, &a.id, a.allow_policy_change || a.accept_config_change)?;
    let Some(payload) = a.payload.as_deref() else {
        return Err(Failure::usage(anyhow::anyhow!(
            "a served run's tick needs its payload: `{}` (a run sleeping on its own timer wakes by itself when it is due)",
            command(c, &format!("tick {} JSON", a.id))
        )));
    };
    let payload: Value = serde_json::from_str(&json_arg("the tick", payload)?)
        .map_err(|e| Failure::usage(anyhow::anyhow!("the tick is not valid JSON: {e}")))?;
    let answer = c.post(
        &format!("/api/v1/runs/{}/tick", segment(&a.id)),
        &json!({"payload": payload}),
    )?;
    done(c, "ticked", &a.id, &answer, json)
}
