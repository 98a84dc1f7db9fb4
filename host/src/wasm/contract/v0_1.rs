//! Contract 0.1.0 (`wit/released/0.1.0`): its bindings, and the conversions
//! to and from the newest contract's types. Its imports are the same functions
//! as the newest's, so each capability serves both through the impls that
//! `older_imports!` (contract/mod.rs) writes here,
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

older_imports!();

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

pub(crate) use self::exports::loopbox::policy::policy::PolicyInfo as Info;
/// The types the host hands a 0.1.0 `handle` and gets back from it.
pub(crate) use self::types::{Decision, Event};
