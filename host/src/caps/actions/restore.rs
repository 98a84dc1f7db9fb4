//! `actions.snapshot`, `restore` and `forget-snapshot` ([`crate::caps::snapshot`]).
//! A snapshot has no effect outside loopbox's store: it is journaled like a
//! read (with the next write), and taken again if a crash lost its record. A
//! restore writes the workspace: counted as an action, its intent recorded
//! before and its result after; run again after a crash (it writes the same
//! bytes).

use serde_json::json;

use super::{ActionsHost, Replay, Slot, host_output as output};
use crate::bindings::actions::{ActionError, Output};
use crate::caps::snapshot;

impl ActionsHost {
    pub(super) async fn snapshot_call(
        &mut self,
        paths: Vec<String>,
    ) -> wasmtime::Result<Result<String, ActionError>> {
        let _call = self.meter.call()?;
        if let Err(e) = self.check_strings(paths.iter().map(String::as_str)) {
            return Ok(Err(e));
        }
        let request = json!({"paths": paths}).to_string();
        let what = || format!("snapshot of {} path(s)", paths.len());
        let slot = match self.replay("snapshot", &request, &what)? {
            Replay::Answered(r) => return Ok(r.map(|o| o.stdout)),
            Replay::InFlight(seq) | Replay::Live(seq) => Slot {
                seq,
                kind: "snapshot",
                request: &request,
                rerun: false,
            },
        };
        let grants = self.grants.clone();
        let (db, run) = (self.db.clone(), self.run.clone());
        let open = grants.worktrees.protected();
        let p = paths.clone();
        let result = tokio::task::spawn_blocking(move || {
            snapshot::take(
                &grants.restore,
                &open,
                &db,
                &run,
                &p,
                grants.limits.snapshot_bytes,
            )
        })
        .await
        .unwrap_or_else(|e| Err(ActionError::Unavailable(format!("snapshot failed: {e}"))));
        match &result {
            Ok(id) => self
                .log
                .host("info", format!("{}: kept as snapshot {id}", what())),
            Err(e) => self.log.host("warn", format!("{}: {e:?}", what())),
        }
        let result = result.map(output);
        self.record(slot, false, &result)?;
        Ok(result.map(|o| o.stdout))
    }

    pub(super) async fn restore_call(
        &mut self,
        id: String,
        paths: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<String>, ActionError>> {
        let _call = self.meter.call()?;
        if let Err(e) =
            self.check_strings(std::iter::once(id.as_str()).chain(paths.iter().map(String::as_str)))
        {
            return Ok(Err(e));
        }
        let request = json!({"snapshot": id, "paths": paths}).to_string();
        let what = || {
            format!(
                "restore of {} path(s) from snapshot {}",
                paths.len(),
                crate::ui::shorten(&crate::ui::sanitize(&id), 20)
            )
        };
        let parse = |o: &Output| serde_json::from_str::<Vec<String>>(&o.stdout).unwrap_or_default();
        let slot = match self.replay("restore", &request, &what)? {
            Replay::Answered(r) => return Ok(r.map(|o| parse(&o))),
            // It writes the same bytes again: run it again.
            Replay::InFlight(seq) => Slot {
                seq,
                kind: "restore",
                request: &request,
                rerun: true,
            },
            Replay::Live(seq) => Slot {
                seq,
                kind: "restore",
                request: &request,
                rerun: false,
            },
        };
        let n = match snapshot::parse_id(&id) {
            Ok(n) => n,
            Err(e) => {
                self.record(slot, false, &Err(e.clone()))?;
                return Ok(Err(e));
            }
        };
        // A restore of nothing granted is a refusal, not an action.
        let open = self.grants.worktrees.protected();
        let refused: Vec<ActionError> = paths
            .iter()
            .filter_map(|p| self.grants.restore.check(p, &open).err())
            .collect();
        if !paths.is_empty() && refused.len() == paths.len() {
            let e = match &refused[0] {
                ActionError::Denied(why) => self.deny(&what(), why.clone()),
                other => other.clone(),
            };
            self.record(slot, false, &Err(e.clone()))?;
            return Ok(Err(e));
        }
        if let Err(e) = self.start(slot, None)? {
            return Ok(Err(e));
        }
        let grants = self.grants.clone();
        let (db, run) = (self.db.clone(), self.run.clone());
        let p = paths.clone();
        let result = tokio::task::spawn_blocking(move || {
            snapshot::restore(&grants.restore, &open, &db, &run, n, &p)
        })
        .await
        .unwrap_or_else(|e| Err(ActionError::Unavailable(format!("restore failed: {e}"))));
        let result = match result {
            Ok((written, not)) => {
                self.log
                    .host("info", format!("{}: {} written", what(), written.len()));
                for why in not.iter().take(20) {
                    self.log
                        .host("warn", format!("{}: not written: {why}", what()));
                }
                Ok(output(json!(written).to_string()))
            }
            Err(e) => {
                self.log.host("warn", format!("{}: {e:?}", what()));
                Err(e)
            }
        };
        self.record(slot, true, &result)?;
        Ok(result.map(|o| parse(&o)))
    }

    pub(super) async fn forget_snapshot_call(&mut self, id: String) -> wasmtime::Result<()> {
        let _call = self.meter.call()?;
        // No journal entry: forgetting twice is forgetting once.
        if let Ok(n) = snapshot::parse_id(&id) {
            let (db, run) = (self.db.clone(), self.run.clone());
            tokio::task::spawn_blocking(move || db.snapshot_forget(&run, n))
                .await
                .map_err(|e| crate::error::host_err(anyhow::anyhow!("{e}")))?
                .map_err(crate::error::host_err)?;
        }
        Ok(())
    }
}
