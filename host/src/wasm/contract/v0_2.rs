//! Contract 0.2.0 (`wit/released/0.2.0`): its bindings, and the conversions
//! to and from the newest contract's types. 0.3.0 only added to `actions`
//! (`prompt-request.profile` and `.cwd`, `worktree-add`, `worktree-remove`), and
//! 0.4.0 to `actions` and to `decision` (`sleep`), so a 0.2.0 policy's events
//! and info have the newest's shapes: the host hands it the newest's values
//! (component types are checked by structure, not by name; see `wasm::policy`),
//! its decisions are 0.3.0's ([`super::v0_3::Decision`]), and its imports are
//! linked under their 0.2.0 names, each converting and calling the
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

older_imports!();
