//! Answering one hook event: read the agent's JSON from stdin, find the
//! workspace, put the run together with the library's launcher and deliver the
//! event; any failure (a panic included) becomes the `--on-error` answer.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};

use super::super::json_arg;
use super::deadline::{deadline, watchdog};
use super::{AnswerArgs, in_workspace};
use loopbox::db::STORE_DIR;
use loopbox::hook::agents::{Agent, Block};
use loopbox::hook::input::{HookInput, MAX_INPUT_BYTES, event_named_in};
use loopbox::hook::render::{HookOutput, OnError, fail, refuse};
use loopbox::hook::session;
use loopbox::run::launch::Launch;
use loopbox::run::lifecycle;
use loopbox::run::trust::Trust;
use loopbox::trust::{NotTrusted, TrustStore};

pub(super) fn answer(agent: Agent, args: AnswerArgs, dash_c: Option<&Path>) -> i32 {
    let mut text = String::new();
    let read = std::io::stdin()
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_string(&mut text);
    let input = match read {
        Ok(_) if text.len() > MAX_INPUT_BYTES => {
            Err(format!("hook input is over {MAX_INPUT_BYTES} bytes"))
        }
        Ok(_) => HookInput::parse(agent, &text),
        Err(e) => Err(format!("cannot read the hook input from stdin: {e}")),
    };
    // The event decides how a failure is said: the one the installed command names
    // (an input loopbox cannot read must not turn a gate into a pass), else the input's.
    let spec = match (&input, &args.event) {
        (Ok(i), _) => i.spec(),
        (Err(_), Some(event)) => agent.event(event),
        (Err(_), None) => agent.event(&event_named_in(&text)),
    };
    let on_error = args.on_error.unwrap_or_else(|| OnError::default_for(&spec));
    let cwd = input.as_ref().ok().and_then(|i| i.cwd.clone());
    let workspace = loopbox::hook::workspace::resolve(
        agent,
        args.root.as_deref(),
        dash_c,
        cwd.as_deref(),
        |v| std::env::var(v).ok(),
    );
    let log_dir = workspace.as_ref().ok().cloned();
    let policy = args.policy.clone();
    let failed = move |e: anyhow::Error| {
        let log = log_dir
            .as_ref()
            .and_then(|ws| record_failure(ws, &policy, &e));
        let why = format!("{e:#}").replace('\n', " ");
        // A config the user has not approved is never obeyed: a gate refuses whatever
        // --on-error says, and saying the command that approves it; any other event goes on.
        if let Some(untrusted) = e.downcast_ref::<NotTrusted>() {
            return if spec.block == Block::No {
                HookOutput::nothing()
            } else {
                refuse(agent, &spec, &format!("loopbox: {untrusted}"))
            };
        }
        fail(
            agent,
            &spec,
            on_error,
            &format!(
                "{why}{}",
                log.map_or(String::new(), |p| format!(" (details in {})", p.display()))
            ),
        )
    };
    let (input, ws) = match (input, workspace) {
        (Err(e), _) => return emit(&failed(anyhow!(e))),
        (Ok(_), Err(e)) => return emit(&failed(anyhow!("{e}"))),
        (Ok(input), Ok(ws)) => (input, ws),
    };

    // Whoever answers first, the work or the watchdog, is the one that prints.
    let answered = Arc::new(std::sync::Mutex::new(false));
    let limit = deadline(args.timeout.unwrap_or_else(|| agent.default_timeout_s()));
    let _watchdog = watchdog(limit, Arc::clone(&answered), {
        let failed = failed.clone();
        move || {
            failed(anyhow!(
                "no answer within {:.1} s, the time left before the agent's hook timeout; raise it with --timeout on the hook command",
                limit.as_secs_f64()
            ))
        }
    });
    // A panic (a bug) is a failure like any other: the gate must still refuse.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        answer_input(&args, &ws, &input)
    }))
    .unwrap_or_else(|_| Err(anyhow!("loopbox failed unexpectedly while answering (a bug: please report it with .loopbox/hook.log)")));
    let output = result.unwrap_or_else(failed);
    let mut done = answered.lock().unwrap_or_else(|p| p.into_inner());
    *done = true;
    emit(&output)
}

/// Print the answer as the agent reads it; the exit code.
pub(super) fn emit(output: &HookOutput) -> i32 {
    if let Some(json) = &output.stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{json}");
        let _ = out.flush();
    }
    if let Some(line) = &output.stderr {
        // It may quote the policy: escaped, its own lines indented (see `ui::Untrusted`).
        loopbox::errln!("{}", loopbox::ui::Untrusted(line));
    }
    output.exit
}

fn answer_input(args: &AnswerArgs, workspace: &Path, input: &HookInput) -> Result<HookOutput> {
    let config_file = args.config.as_deref().map(|c| in_workspace(workspace, c));
    // A name the config installs runs under its own section, admitted like `loopbox run NAME`.
    let launch = Launch::new(workspace, &args.policy)
        .relative_to(workspace)
        .config_file(config_file);
    // A config that a cloned repository or a sandboxed command could have written
    // is obeyed only once approved; no one is asked here (stdin is the agent's).
    let trust = Trust::UserStore(TrustStore::for_user()?);
    let prepared = lifecycle::start(&trust, launch).map_err(|e| e.error)?;
    let start = json_arg("--input", &args.input).map_err(|f| f.error)?;
    let policy = prepared.load().map_err(|e| e.error)?;
    if let Some(pinned) = &args.digest
        && *pinned != policy.digest
    {
        bail!(
            "the policy `{}` is not the component `hook install` pinned (blake3 {}…, this one {}…): it changed, or another file is in its place; \
             if you rebuilt it yourself, run `loopbox hook install` again",
            prepared.source,
            pinned.get(..16).unwrap_or(pinned),
            &policy.digest[..16]
        );
    }
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio.block_on(session::answer(
        &prepared,
        &policy,
        &start,
        input,
        args.accept_config_change,
    ))
}

/// Append the failure, with its whole cause chain, to `.loopbox/hook.log`.
fn record_failure(workspace: &Path, policy: &str, e: &anyhow::Error) -> Option<PathBuf> {
    let dir = workspace.join(STORE_DIR);
    // The workspace exists (it was resolved); its store directory may be made.
    loopbox::files::ensure_dir(&dir).ok()?;
    let path = dir.join("hook.log");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ok()?;
    writeln!(
        f,
        "{} {policy}: {e:#}",
        loopbox::ui::utc(loopbox::db::now_ms())
    )
    .ok()?;
    Some(path)
}
