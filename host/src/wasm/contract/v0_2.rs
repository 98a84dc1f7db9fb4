//! Contract 0.2.0 (`wit/released/0.2.0`): its bindings, and the conversions
//! to and from the newest contract's types. 0.3.0 only added to `actions`
//! (`prompt-request.profile` and `.cwd`, `worktree-add`, `worktree-remove`), so
//! a 0.2.0 policy's events, decisions and info have the newest's shapes: the
//! host hands it the newest's values (component types are checked by
//! structure, not by name; see `wasm::policy`), and only its imports need
//! linking under their 0.2.0 names, each converting and calling the
//! capability's own.

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings as latest;
use crate::caps::{actions::ActionsHost, log::LogHost, state::StateHost, workspace::WorkspaceHost};

wasmtime::component::bindgen!({
    path: "../wit/released/0.2.0",
    world: "loop-policy",
    imports: { default: async | trappable },
    exports: { default: async },
});

use self::loopbox::policy::{actions, log, state, types, workspace};

pub(crate) use super::v0_1::Capabilities;

/// Link contract 0.2.0's interfaces to the same capabilities as the newest's.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    caps: Capabilities<T>,
) -> Result<()> {
    // `types` has no functions; any capability can stand for it.
    types::add_to_linker::<T, HasSelf<ActionsHost>>(linker, caps.actions)
        .map_err(crate::wasm_err)?;
    actions::add_to_linker::<T, HasSelf<ActionsHost>>(linker, caps.actions)
        .map_err(crate::wasm_err)?;
    state::add_to_linker::<T, HasSelf<StateHost>>(linker, caps.state).map_err(crate::wasm_err)?;
    workspace::add_to_linker::<T, HasSelf<WorkspaceHost>>(linker, caps.workspace)
        .map_err(crate::wasm_err)?;
    log::add_to_linker::<T, HasSelf<LogHost>>(linker, caps.log).map_err(crate::wasm_err)?;
    Ok(())
}

impl types::Host for ActionsHost {}

// Action requests up, their results down.

impl From<actions::ShellRequest> for latest::actions::ShellRequest {
    fn from(r: actions::ShellRequest) -> Self {
        match r {
            actions::ShellRequest::Exec(c) => Self::Exec(latest::actions::Command {
                argv: c.argv,
                cwd: c.cwd,
                env: c.env,
                stdin: c.stdin,
                timeout_ms: c.timeout_ms,
            }),
            actions::ShellRequest::Script(s) => Self::Script(latest::actions::Script {
                source: s.source,
                cwd: s.cwd,
                timeout_ms: s.timeout_ms,
            }),
        }
    }
}

/// A 0.2.0 prompt goes to the `[agent]` section, in the workspace root.
impl From<actions::PromptRequest> for latest::actions::PromptRequest {
    fn from(r: actions::PromptRequest) -> Self {
        Self {
            text: r.text,
            kind: match r.kind {
                actions::PromptKind::Prompt => latest::actions::PromptKind::Prompt,
                actions::PromptKind::SlashCommand => latest::actions::PromptKind::SlashCommand,
            },
            model: r.model,
            session: r.session,
            timeout_ms: r.timeout_ms,
            profile: None,
            cwd: None,
        }
    }
}

impl From<latest::actions::Output> for actions::Output {
    fn from(o: latest::actions::Output) -> Self {
        Self {
            exit_code: o.exit_code,
            stdout: o.stdout,
            stderr: o.stderr,
            duration_ms: o.duration_ms,
            timed_out: o.timed_out,
            truncated: o.truncated,
            session: o.session,
        }
    }
}

impl From<latest::actions::ActionError> for actions::ActionError {
    fn from(e: latest::actions::ActionError) -> Self {
        use latest::actions::ActionError as E;
        match e {
            E::Denied(s) => Self::Denied(s),
            E::Declined(s) => Self::Declined(s),
            E::BudgetExhausted(s) => Self::BudgetExhausted(s),
            E::Invalid(s) => Self::Invalid(s),
            E::Unavailable(s) => Self::Unavailable(s),
            E::OutcomeUnknown => Self::OutcomeUnknown,
        }
    }
}

type ActionResult = wasmtime::Result<Result<actions::Output, actions::ActionError>>;

impl actions::Host for ActionsHost {
    async fn shell(&mut self, req: actions::ShellRequest) -> ActionResult {
        let r = latest::actions::Host::shell(self, req.into()).await?;
        Ok(r.map(Into::into).map_err(Into::into))
    }

    async fn prompt(&mut self, req: actions::PromptRequest) -> ActionResult {
        let r = latest::actions::Host::prompt(self, req.into()).await?;
        Ok(r.map(Into::into).map_err(Into::into))
    }
}

impl state::Host for StateHost {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        latest::loopbox::policy::state::Host::get(self, key).await
    }

    async fn set(&mut self, key: String, value: String) -> wasmtime::Result<Result<(), String>> {
        latest::loopbox::policy::state::Host::set(self, key, value).await
    }

    async fn remove(&mut self, key: String) -> wasmtime::Result<()> {
        latest::loopbox::policy::state::Host::remove(self, key).await
    }

    async fn keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
        latest::loopbox::policy::state::Host::keys(self, prefix).await
    }
}

impl workspace::Host for WorkspaceHost {
    async fn read(&mut self, path: String) -> wasmtime::Result<Result<String, String>> {
        latest::loopbox::policy::workspace::Host::read(self, path).await
    }

    async fn list_dir(&mut self, dir: String) -> wasmtime::Result<Result<Vec<String>, String>> {
        latest::loopbox::policy::workspace::Host::list_dir(self, dir).await
    }
}

impl log::Host for LogHost {
    async fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        use latest::loopbox::policy::log::Level as L;
        let level = match level {
            log::Level::Debug => L::Debug,
            log::Level::Info => L::Info,
            log::Level::Warn => L::Warn,
            log::Level::Error => L::Error,
        };
        latest::loopbox::policy::log::Host::write(self, level, message).await
    }

    async fn progress(&mut self, message: String) -> wasmtime::Result<()> {
        latest::loopbox::policy::log::Host::progress(self, message).await
    }
}
