//! The audit log: every act of a person or a token (start, cancel, resume,
//! answer, tick, approve, deny, token and policy changes), with who did it, to
//! what, the digest of the request it was about, and how it came out.
//!
//! The log is append-only: rows are inserted and never changed (triggers in the
//! schema refuse `UPDATE` and `DELETE`, whoever asks). An act and its row are
//! written in one transaction ([`Db::audit_act`]), so the log never claims an
//! act that did not happen nor misses one that did; an act that was refused
//! changes nothing and is logged on its own, with the reason.

use crate::db::engine::params;
use anyhow::Result;
use serde::Serialize;

use super::{Db, now_ms, page_size};

/// One act to record.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AuditEntry {
    /// Who: `local:USER`, `TENANT/TOKEN-NAME`, or `loopbox` for what the host did by itself.
    pub actor: String,
    pub tenant: Option<String>,
    /// What: `approve`, `deny`, `start`, `cancel`, `token.create`, ...
    pub act: String,
    /// To what: a run, an approval, a token's name, a policy.
    pub target: String,
    /// The digest of the request the act was about (an approval's request, a config).
    pub digest: Option<String>,
    /// `ok`, or `refused: WHY`; set by [`Db::audit_act`].
    pub outcome: String,
    /// Anything else worth keeping (a reason given, the run an approval belongs to).
    pub detail: Option<String>,
}

/// A recorded act.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    pub seq: i64,
    pub at_ms: i64,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// Which acts to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only this tenant's acts (a server's tenant sees its own only).
    pub tenant: Option<String>,
    /// Only acts numbered below this (paging back).
    pub before: Option<i64>,
    pub limit: usize,
}

pub(super) fn append(tx: &crate::db::Conn, e: &AuditEntry) -> Result<i64> {
    let outcome = if e.outcome.is_empty() {
        "ok"
    } else {
        &e.outcome
    };
    Ok(tx.row(
        "INSERT INTO audit (at, actor, tenant, act, target, digest, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING seq",
        params![now_ms(), e.actor, e.tenant, e.act, e.target, e.digest, outcome, e.detail],
        |r| r.get(0),
    )?)
}

/// Why an act was refused, told to whoever asked; the store is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Db {
    /// Do an act and record it, in one transaction. `act` returns `Ok(Err(why))`
    /// to refuse (nothing it wrote is kept, and the refusal is logged with the
    /// reason), or `Err` when the store failed (nothing is logged: nothing happened).
    pub fn audit_act<T>(
        &self,
        entry: AuditEntry,
        mut act: impl FnMut(&crate::db::Conn) -> Result<Result<T, Refused>>,
    ) -> Result<Result<T, Refused>> {
        let done = self.write(&format!("record `{}`", entry.act), |tx| {
            match act(tx)? {
                Ok(value) => {
                    append(tx, &entry)?;
                    Ok(Ok(value))
                }
                // Rolled back below, so the act's own writes are dropped.
                Err(refused) => Err(RefusedAct(refused).into()),
            }
        });
        match done {
            Ok(v) => Ok(v),
            Err(e) => match e.downcast_ref::<RefusedAct>() {
                Some(RefusedAct(why)) => {
                    let why = why.clone();
                    self.write("record the refused act", |tx| {
                        append(
                            tx,
                            &AuditEntry {
                                outcome: format!("refused: {why}"),
                                ..entry.clone()
                            },
                        )
                    })?;
                    Ok(Err(why))
                }
                None => Err(e),
            },
        }
    }

    /// Record an act that changed nothing in the store (`ok`, or refused before
    /// anything was tried).
    pub fn audit_note(&self, entry: &AuditEntry) -> Result<i64> {
        self.write("record the act", |tx| append(tx, entry))
    }

    /// Recorded acts, newest first.
    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>> {
        if !self.has_schema(super::schema::APPROVALS) {
            return Ok(Vec::new());
        }
        let c = self.conn();
        let limit = page_size(filter.limit);
        let before = filter.before.unwrap_or(i64::MAX);
        let mut stmt = c.prepare_cached(
            "SELECT seq, at, actor, tenant, act, target, digest, outcome, detail FROM audit
             WHERE (?1 IS NULL OR tenant = ?1) AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![filter.tenant, before, limit], |r| {
                Ok(AuditRecord {
                    seq: r.get(0)?,
                    at_ms: r.get(1)?,
                    entry: AuditEntry {
                        actor: r.get(2)?,
                        tenant: r.get(3)?,
                        act: r.get(4)?,
                        target: r.get(5)?,
                        digest: r.get(6)?,
                        outcome: r.get(7)?,
                        detail: r.get(8)?,
                    },
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

/// Carries a refusal out of the transaction so it rolls back.
#[derive(Debug)]
struct RefusedAct(Refused);

impl std::fmt::Display for RefusedAct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", self.0)
    }
}

impl std::error::Error for RefusedAct {}

/// The name of the user this process runs as (the real uid's), else its number.
pub fn user_name() -> String {
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `pw` has room for one passwd, `buf`
    // for its strings (its length is passed), `found` for the result pointer.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc == 0 && !found.is_null() {
        // SAFETY: getpwuid_r returned 0 and a non-null result, so `pw` is filled and
        // its `pw_name` points at a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.assume_init().pw_name) };
        if let Ok(name) = name.to_str()
            && !name.is_empty()
        {
            return name.to_string();
        }
    }
    uid.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::db::on_both_engines!(
        an_act_and_its_row_commit_together_and_a_refusal_keeps_nothing_but_its_row,
        a_written_row_can_be_neither_changed_nor_deleted,
    );

    fn entry(act: &str) -> AuditEntry {
        AuditEntry {
            actor: "alpha/alice".into(),
            tenant: Some("alpha".into()),
            act: act.into(),
            target: "r1".into(),
            ..Default::default()
        }
    }

    fn an_act_and_its_row_commit_together_and_a_refusal_keeps_nothing_but_its_row(db: Db) {
        db.create_run("r1", "p", "d", "{}").unwrap();
        let done = db
            .audit_act(entry("cancel"), |tx| {
                tx.execute("UPDATE runs SET cancel = 1 WHERE id = 'r1'", [])?;
                Ok(Ok(()))
            })
            .unwrap();
        assert_eq!(done, Ok(()));
        assert!(db.cancel_requested("r1").unwrap());
        let refused = db
            .audit_act(entry("resume"), |tx| {
                tx.execute("UPDATE runs SET status = 'done' WHERE id = 'r1'", [])?;
                Ok(Err::<(), _>(Refused("the run is being cancelled".into())))
            })
            .unwrap();
        assert_eq!(refused, Err(Refused("the run is being cancelled".into())));
        // The refused act's write was rolled back.
        assert_eq!(db.existing_run("r1").unwrap().status.as_str(), "running");
        let log = db
            .audit(&AuditFilter {
                tenant: Some("alpha".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        let seen: Vec<(&str, &str)> = log
            .iter()
            .map(|r| (r.entry.act.as_str(), r.entry.outcome.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("resume", "refused: the run is being cancelled"),
                ("cancel", "ok")
            ]
        );
        // Another tenant sees none of it.
        let other = db
            .audit(&AuditFilter {
                tenant: Some("beta".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert!(other.is_empty());
    }

    fn a_written_row_can_be_neither_changed_nor_deleted(db: Db) {
        db.audit_note(&entry("approve")).unwrap();
        let c = db.conn();
        for sql in ["UPDATE audit SET outcome = 'forged'", "DELETE FROM audit"] {
            let e = c.execute(sql, []).unwrap_err().to_string();
            assert!(e.contains("the audit log is append-only"), "{sql}: {e}");
        }
        drop(c);
        assert_eq!(
            db.audit(&AuditFilter {
                limit: 5,
                ..Default::default()
            })
            .unwrap()[0]
                .entry
                .outcome,
            "ok"
        );
    }
}
