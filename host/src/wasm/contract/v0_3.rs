//! Contract 0.3.0 (`wit/released/0.3.0`): its bindings, and the conversions
//! to and from the newest contract's types. 0.4.0 added the `sleep` decision
//! and calls to `actions` (`worktree-at`, `mcp-call`, `snapshot`, `restore`,
//! `forget-snapshot`), so a 0.3.0 policy's events and info have the newest's
//! shapes (component types are checked by structure, not by name; see
//! `wasm::policy`), its decisions are this module's and map case for case, and
//! its imports are linked under their 0.3.0 names, each converting and calling
//! the capability's own. A 0.2.0 policy's decisions have the same shape as
//! 0.3.0's, so it uses [`Decision`] too.

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings as latest;
use crate::caps::{actions::ActionsHost, log::LogHost, state::StateHost, workspace::WorkspaceHost};

wasmtime::component::bindgen!({
    path: "../wit/released/0.3.0",
    world: "loop-policy",
    imports: { default: async | trappable },
    exports: { default: async },
});

use self::loopbox::policy::{actions, log, state, types, workspace};

pub(crate) use super::v0_1::Capabilities;

older_imports!(worktrees);

/// The decisions of contracts 0.2.0 and 0.3.0.
pub(crate) use self::types::Decision;

impl From<Decision> for latest::Decision {
    fn from(d: Decision) -> latest::Decision {
        match d {
            Decision::Pass => latest::Decision::Pass,
            Decision::Inject(s) => latest::Decision::Inject(s),
            Decision::Block(s) => latest::Decision::Block(s),
            Decision::Rewrite(j) => latest::Decision::Rewrite(j),
            Decision::Ask(s) => latest::Decision::Ask(s),
            Decision::Done(o) => latest::Decision::Done(latest::Outcome {
                success: o.success,
                summary: o.summary,
                data: o.data,
            }),
            Decision::Escalate(s) => latest::Decision::Escalate(s),
        }
    }
}
