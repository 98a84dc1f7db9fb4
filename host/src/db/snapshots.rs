//! Copies of workspace files a run's policy asked the host to keep
//! (`actions.snapshot`), to put back later (`actions.restore`). They live in
//! the store, never in the workspace, so nothing a sandboxed command writes
//! can change them; a run's copies are capped in bytes together
//! (`limits.snapshot_bytes`), and deleted when the run ends.

use crate::db::engine::{OptionalExtension, params};
use anyhow::Result;

use super::Db;

/// One path of a snapshot: its bytes, or `None` when it was absent.
pub type SnapshotEntry = (String, Option<Vec<u8>>);

impl Db {
    /// Keep `entries` as a new snapshot of run `run`: its id, or `Err((held,
    /// adding))` when the run's snapshots would pass `cap` bytes.
    pub fn snapshot_take(
        &self,
        run: &str,
        entries: &[SnapshotEntry],
        cap: u64,
    ) -> Result<Result<i64, (u64, u64)>> {
        let adding: u64 = entries
            .iter()
            .map(|(p, c)| (p.len() + c.as_ref().map_or(0, Vec::len)) as u64)
            .sum();
        self.write_run(run, "keep the snapshot", |tx| {
            let held: i64 = tx.row(
                "SELECT COALESCE(SUM(length(path) + COALESCE(length(content), 0)), 0) FROM snapshots WHERE run_id = ?1",
                [run],
                |r| r.get(0),
            )?;
            let held = held.max(0) as u64;
            if held.saturating_add(adding) > cap {
                return Ok(Err((held, adding)));
            }
            let id: i64 = tx.row(
                "SELECT COALESCE(MAX(id), 0) + 1 FROM snapshots WHERE run_id = ?1",
                [run],
                |r| r.get(0),
            )?;
            for (path, content) in entries {
                tx.exec(
                    "INSERT INTO snapshots (run_id, id, path, content) VALUES (?1, ?2, ?3, ?4)",
                    params![run, id, path, content],
                )?;
            }
            // A snapshot of nothing still has an id to restore from.
            if entries.is_empty() {
                tx.exec(
                    "INSERT INTO snapshots (run_id, id, path, content) VALUES (?1, ?2, '', NULL)",
                    params![run, id],
                )?;
            }
            Ok(Ok(id))
        })
    }

    /// What snapshot `id` holds for `path`: `None` when it does not hold the
    /// path (or there is no such snapshot), `Some(None)` when it was absent.
    pub fn snapshot_entry(
        &self,
        run: &str,
        id: i64,
        path: &str,
    ) -> Result<Option<Option<Vec<u8>>>> {
        Ok(self
            .conn()
            .row(
                "SELECT content FROM snapshots WHERE run_id = ?1 AND id = ?2 AND path = ?3",
                params![run, id, path],
                |r| r.get::<_, Option<Vec<u8>>>(0),
            )
            .optional()?)
    }

    /// Whether run `run` holds snapshot `id`.
    pub fn snapshot_exists(&self, run: &str, id: i64) -> Result<bool> {
        Ok(self
            .conn()
            .row(
                "SELECT 1 FROM snapshots WHERE run_id = ?1 AND id = ?2 LIMIT 1",
                params![run, id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Forget snapshot `id` of run `run`.
    pub fn snapshot_forget(&self, run: &str, id: i64) -> Result<()> {
        self.write_run(run, "forget the snapshot", |tx| {
            tx.exec(
                "DELETE FROM snapshots WHERE run_id = ?1 AND id = ?2",
                params![run, id],
            )?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::db::on_both_engines!(snapshots_are_capped_per_run_and_go_when_the_run_ends,);

    use crate::db::RunStatus;

    fn snapshots_are_capped_per_run_and_go_when_the_run_ends(db: Db) {
        db.create_run("r", "p", "d", "{}").unwrap();
        let one = vec![
            ("tests/test_a.py".to_string(), Some(b"assert 1\n".to_vec())),
            ("tests/gone.py".to_string(), None),
        ];
        let id = db.snapshot_take("r", &one, 100).unwrap().unwrap();
        assert_eq!(
            db.snapshot_entry("r", id, "tests/test_a.py").unwrap(),
            Some(Some(b"assert 1\n".to_vec()))
        );
        assert_eq!(
            db.snapshot_entry("r", id, "tests/gone.py").unwrap(),
            Some(None)
        );
        assert_eq!(db.snapshot_entry("r", id, "src/a.py").unwrap(), None);
        // 15 + 9 + 13 = 37 bytes held; another 37 fits in 100, a third does not.
        let two = db.snapshot_take("r", &one, 100).unwrap().unwrap();
        assert_eq!(db.snapshot_take("r", &one, 100).unwrap(), Err((74, 37)));
        db.snapshot_forget("r", id).unwrap();
        assert!(!db.snapshot_exists("r", id).unwrap());
        assert!(db.snapshot_take("r", &one, 100).unwrap().is_ok());
        let empty = db.snapshot_take("r", &[], 1000).unwrap().unwrap();
        assert!(db.snapshot_exists("r", empty).unwrap());
        db.finish_driving("r", RunStatus::Done, None).unwrap();
        assert!(!db.snapshot_exists("r", two).unwrap());
    }
}
