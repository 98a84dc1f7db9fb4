//! Contract 0.1.0 (`wit/released/0.1.0`): its bindings, and the conversions
//! to and from the newest contract's types. Its imports are the same functions
//! as the newest's, so each capability serves both through the impls below,
//! which convert and call the capability's own; its events lose what 0.1.0 did
//! not have (`origin`), and its decisions map case for case.

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings as latest;
use crate::caps::{actions::ActionsHost, log::LogHost, state::StateHost, workspace::WorkspaceHost};

wasmtime::component::bindgen!({
    path: "../wit/released/0.1.0",
    world: "loop-policy",
    imports: { default: async | trappable },
    exports: { default: async },
});

use self::loopbox::policy::{actions, log, state, types, workspace};

/// Where each capability lives in a store's data: the same host state serves
/// every contract version.
pub(crate) struct Capabilities<T> {
    pub actions: fn(&mut T) -> &mut ActionsHost,
    pub state: fn(&mut T) -> &mut StateHost,
    pub workspace: fn(&mut T) -> &mut WorkspaceHost,
    pub log: fn(&mut T) -> &mut LogHost,
}

/// Link contract 0.1.0's interfaces to the same capabilities as the newest's.
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

// Events down: a 0.1.0 policy does not see `origin`.

impl From<&latest::Event> for types::Event {
    fn from(e: &latest::Event) -> types::Event {
        match e {
            latest::Event::Start(j) => types::Event::Start(j.clone()),
            latest::Event::TurnComplete(t) => types::Event::TurnComplete(types::Turn {
                session_id: t.session_id.clone(),
                response: t.response.clone(),
                index: t.index,
                continuation: t.continuation,
            }),
            latest::Event::ToolCall(c) => types::Event::ToolCall(types::ToolCall {
                name: c.name.clone(),
                input: c.input.clone(),
            }),
            latest::Event::Tick(j) => types::Event::Tick(j.clone()),
            latest::Event::UserInput(s) => types::Event::UserInput(s.clone()),
            latest::Event::Custom((n, j)) => types::Event::Custom((n.clone(), j.clone())),
        }
    }
}

// Decisions and info up.

impl From<types::Decision> for latest::Decision {
    fn from(d: types::Decision) -> latest::Decision {
        match d {
            types::Decision::Pass => latest::Decision::Pass,
            types::Decision::Inject(s) => latest::Decision::Inject(s),
            types::Decision::Block(s) => latest::Decision::Block(s),
            types::Decision::Rewrite(j) => latest::Decision::Rewrite(j),
            types::Decision::Ask(s) => latest::Decision::Ask(s),
            types::Decision::Done(o) => latest::Decision::Done(latest::Outcome {
                success: o.success,
                summary: o.summary,
                data: o.data,
            }),
            types::Decision::Escalate(s) => latest::Decision::Escalate(s),
        }
    }
}

impl From<Info> for latest::PolicyInfo {
    fn from(i: Info) -> latest::PolicyInfo {
        latest::PolicyInfo {
            name: i.name,
            version: i.version,
            description: i.description,
        }
    }
}

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

pub(crate) use self::exports::loopbox::policy::policy::PolicyInfo as Info;
/// The types the host hands a 0.1.0 `handle` and gets back from it.
pub(crate) use self::types::{Decision, Event};
