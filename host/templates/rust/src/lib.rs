//! {{name}}: a loopbox policy. It runs a check command; while the check fails, it
//! hands the failure to the agent and checks again, up to `max_tries` times.
//!
//! Input (`loopbox run {{name}}.wasm --input '{...}'`):
//!   {"check": ["make", "test"], "max_tries": 3}

use loopbox_guest::{Decision, Event, Info, Output, Policy, done, exec, log, state};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_check")]
    check: Vec<String>,
    #[serde(default = "default_max_tries")]
    max_tries: u32,
}

fn default_check() -> Vec<String> {
    vec!["make".into(), "test".into()]
}

fn default_max_tries() -> u32 {
    3
}

/// What the policy remembers between events (a fresh instance handles each one).
#[derive(Deserialize, Serialize)]
struct Progress {
    config: Config,
    fixes: u32,
}

struct {{type}};

impl Policy for {{type}} {
    fn info() -> Info {
        Info::new("{{name}}", "0.1.0", "Run a check; while it fails, hand the failure to the agent")
    }

    fn handle(event: Event) -> Result<Decision, String> {
        let progress = match event {
            Event::Start(input) => {
                let config: Config = serde_json::from_str(&input)
                    .map_err(|e| format!("{{name}}: bad input: {e}; expected {{\"check\": [\"make\", \"test\"], \"max_tries\": 3}}"))?;
                Progress { config, fixes: 0 }
            }
            Event::TurnComplete(_) => state::get("progress")?.ok_or("{{name}}: a turn arrived before the run started")?,
            _ => return Ok(Decision::Pass),
        };
        check(progress)
    }
}

fn check(mut p: Progress) -> Result<Decision, String> {
    let command = p.config.check.join(" ");
    let out = match exec(p.config.check.clone()).run() {
        Ok(out) => out,
        // A refusal is an answer, not a crash: say what is missing and hand over.
        Err(e) => return Ok(Decision::Escalate(format!("cannot run `{command}`: {}", e.describe()))),
    };
    if out.exit_code == Some(0) {
        return Ok(done(true, format!("`{command}` passes after {} fix(es)", p.fixes)));
    }
    if p.fixes >= p.config.max_tries {
        return Ok(done(false, format!("`{command}` still fails after {} fix(es)", p.fixes)));
    }
    p.fixes += 1;
    log::info(&format!("`{command}` fails; asking the agent for fix {} of {}", p.fixes, p.config.max_tries));
    state::set("progress", &p)?;
    Ok(Decision::Inject(format!("`{command}` fails:\n{}\nFix the code so that it passes.", tail(&out))))
}

/// The last lines the check printed.
fn tail(out: &Output) -> String {
    let text = format!("{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

loopbox_guest::policy!({{type}});
