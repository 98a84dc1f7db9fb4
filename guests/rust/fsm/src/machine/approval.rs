//! `action_type: human_approval` (little-loops 1.167, FEAT-1794), partly:
//! loopbox asks no one yet. little-loops blocks for an operator's answer
//! (approve, reject, edit) through its communication adapter, and when no
//! operator can be reached (stdin is not a terminal and the channel cannot
//! answer from elsewhere) routes the state at once as a `timeout`
//! (`executor.py` `_execute_human_approval_state`, its headless branch).
//! loopbox's builtin:fsm has no call through which a person could answer, so
//! every visit takes that headless branch: the `timeout` route, else the `no`
//! route, with `${captured.STATE.verdict}` `timeout`, `.reason` `headless`
//! and `.edit` empty. `validate` notes it on each such state.
//!
//! Answering through loopbox's approvals (the terminal, `loopbox runs
//! approve|deny` with an edit as the answer's text, the server's API and
//! dashboard) needs a contract call that asks a person and waits; it is
//! not here.

use serde_json::json;

use crate::interp;
use crate::spec::State;

use super::world::{Level, World};
use super::{End, Finish, Machine, failed};

impl Machine<'_> {
    /// Route the state as little-loops routes an approval nobody can answer.
    pub(super) fn human_approval(
        &mut self,
        state: &State,
        text: &str,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        // little-loops renders the question first: a reference that cannot
        // resolve stops the state there.
        interp::render(text, &self.r)
            .map_err(|e| failed(End::Error, format!("state `{}`: action: {e}", state.name)))?;
        world.log(
            Level::Warn,
            &format!(
                "`{}`: human_approval: loopbox cannot ask a person yet; routed as an approval nobody answered (`timeout`), as little-loops routes it without an operator",
                state.name
            ),
        );
        self.r.captured.insert(
            state.name.clone(),
            json!({"output": "", "verdict": "timeout", "edit": null, "reason": "headless"}),
        );
        // The `timeout` route, else the `no` route (a route table's own `_`
        // and `_error` count, as little-loops' `_route` reads them).
        let next = crate::route::route(state, "timeout")
            .or_else(|_| crate::route::route(state, "no"))
            .ok();
        if let Some(n) = &next {
            self.log_step(state, "human_approval: timeout (nobody asked)", n, world);
        }
        Ok(next)
    }
}
