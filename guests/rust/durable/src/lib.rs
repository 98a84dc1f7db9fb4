//! A test policy for crash recovery, not shipped. Each event (start, then each
//! agent turn) runs `per_event` actions, each appending one line to a file with
//! `tee -a`, so the tests can count how often every action really ran. Each
//! line carries the guest's clock and a random number, so a replay that did
//! not give the guest the recorded clocks and randoms would ask for different
//! requests and be stopped as non-deterministic. It injects until `turns`
//! turns are done, then finishes with which actions completed and which came
//! back `outcome-unknown`. With `command` in its input it runs that argv (no
//! stdin) instead of `tee`, for the action-overhead benchmark.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub per_event: u32,
    pub turns: u32,
    pub file: String,
    /// Run this instead of `tee -a FILE` (the benchmark runs `true`).
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Progress {
    pub events: u32,
    pub done: Vec<String>,
    pub unknown: Vec<String>,
}

/// The id of action `i` of event `e`.
pub fn action_id(e: u32, i: u32) -> String {
    format!("e{e}-a{i}")
}

#[cfg(target_arch = "wasm32")]
mod component {
    use std::hash::{BuildHasher, RandomState};
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    use loopbox_guest::{ActionError, Decision, Event, Info, Policy, done_with, exec, state};

    use super::{Config, Progress, action_id};

    struct Durable;

    impl Policy for Durable {
        fn info() -> Info {
            Info::new(
                "durable",
                "0.1.0",
                "Counts its side effects, for crash-recovery tests",
            )
        }

        fn handle(event: Event) -> Result<Decision, String> {
            let config: Config = match &event {
                Event::Start(input) => {
                    let c: Config =
                        serde_json::from_str(input).map_err(|e| format!("bad input: {e}"))?;
                    state::set("config", &c)?;
                    c
                }
                _ => state::get("config")?.ok_or("no config: the run did not start")?,
            };
            let mut p: Progress = state::get("progress")?.unwrap_or_default();
            p.events += 1;
            let started = Instant::now();
            for i in 0..config.per_event {
                let id = action_id(p.events, i);
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let random = RandomState::new().hash_one(&id);
                let line = format!(
                    "{id} t={nanos} r={random:x} waited={}\n",
                    started.elapsed().as_nanos() > 0
                );
                let run = match &config.command {
                    Some(argv) => exec(argv.iter().map(String::as_str)).run(),
                    None => exec(["tee", "-a", config.file.as_str()]).stdin(&line).run(),
                };
                match run {
                    Ok(o) if o.exit_code == Some(0) => p.done.push(id),
                    Ok(o) => return Err(format!("{id}: the action failed: {}", o.stderr)),
                    Err(ActionError::OutcomeUnknown) => {
                        loopbox_guest::log::warn(&format!("{id}: outcome unknown"));
                        p.unknown.push(id);
                    }
                    Err(e) => return Err(format!("{id}: {}", e.describe())),
                }
            }
            state::set("progress", &p)?;
            if p.events <= config.turns {
                Ok(Decision::Inject(format!("turn {}", p.events)))
            } else {
                done_with(
                    true,
                    format!("{} actions done, {} unknown", p.done.len(), p.unknown.len()),
                    &p,
                )
            }
        }
    }

    loopbox_guest::policy!(Durable);
}
