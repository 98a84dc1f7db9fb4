//! `actions.worktree-at`: a detached git worktree at a revision, with
//! workspace files copied in ([`crate::caps::worktree::Worktrees::add_at`]),
//! journaled like `worktree-add`: counted as an action, its intent recorded
//! before and its result after; a replayed call takes over the worktree (made
//! again when the process that made it is gone).

use serde_json::json;

use super::{ActionsHost, Replay, Slot};
use crate::bindings::actions::ActionError;
use crate::ui::shorten;

impl ActionsHost {
    pub(super) async fn worktree_at_call(
        &mut self,
        revision: String,
        copy: Vec<String>,
    ) -> wasmtime::Result<Result<String, ActionError>> {
        let _call = self.meter.call()?;
        if let Err(e) = self.check_strings(
            std::iter::once(revision.as_str()).chain(copy.iter().map(String::as_str)),
        ) {
            return Ok(Err(e));
        }
        let request = json!({"revision": revision, "copy": copy}).to_string();
        let what = || {
            format!(
                "worktree-at `{}`",
                shorten(&crate::ui::sanitize(&revision), 60)
            )
        };
        let grants = self.grants.clone();
        let slot = match self.replay("worktree-at", &request, &what)? {
            Replay::Answered(Ok(out)) => {
                if let Err(e) = grants.worktrees.adopt_at(
                    &out.stdout,
                    &revision,
                    &copy,
                    grants.limits.snapshot_bytes,
                ) {
                    self.log.host("warn", format!("{}: {e:?}", what()));
                }
                return Ok(Ok(out.stdout));
            }
            Replay::Answered(Err(e)) => return Ok(Err(e)),
            Replay::InFlight(seq) => Slot {
                seq,
                kind: "worktree-at",
                request: &request,
                rerun: true,
            },
            Replay::Live(seq) => Slot {
                seq,
                kind: "worktree-at",
                request: &request,
                rerun: false,
            },
        };
        if let Err(why) = grants.worktrees.config_permits(&revision) {
            let e = self.deny(&what(), why);
            self.record(slot, false, &Err(e.clone()))?;
            return Ok(Err(e));
        }
        if let Err(e) = self.start(slot, None)? {
            return Ok(Err(e));
        }
        let (r, c) = (revision.clone(), copy.clone());
        let cap = grants.limits.snapshot_bytes;
        let g = grants.clone();
        let result = tokio::task::spawn_blocking(move || g.worktrees.add_at(&r, &c, cap))
            .await
            .unwrap_or_else(|e| Err(ActionError::Unavailable(format!("worktree-at failed: {e}"))));
        match &result {
            Ok(rel) => self.log.host(
                "info",
                format!(
                    "{}: checked out in {rel}, {} file(s) copied in",
                    what(),
                    copy.len()
                ),
            ),
            Err(e) => self.log.host("warn", format!("{}: {e:?}", what())),
        }
        let result = result.map(super::host_output);
        self.record(slot, true, &result)?;
        Ok(result.map(|o| o.stdout))
    }
}
