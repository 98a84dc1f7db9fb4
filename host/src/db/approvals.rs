//! Approvals: ask-tier actions waiting for a person's decision.
//!
//! When nobody can confirm an ask-tier action where it runs, the host records a
//! pending approval and the run waits (see `exec::confirm`). An approval is
//! bound to its run, to the call's place in the journal (event and call number)
//! and to the digest of the exact request; it carries the rules it was asked
//! under (its deadline, whether the run's starter may approve it). Deciding it
//! is an audited act ([`Db::decide_approval`]); a decision takes effect once, in
//! the run, which marks it consumed. A request that changed since it was asked
//! voids the old approval and asks anew, so no decision ever covers a request
//! the person did not see.

use crate::db::engine::{OptionalExtension, Row, params};
use anyhow::Result;
use serde::Serialize;

use super::audit::{AuditEntry, Refused, append};
use super::{Db, now_ms, page_size};

/// Where an approval stands; stored as its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    Approved,
    Denied,
    /// Nobody decided before its deadline: the action is declined.
    Expired,
    /// The request changed before anyone decided (a new approval was asked).
    Void,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Void => "void",
        }
    }

    fn parse(s: &str) -> Option<ApprovalStatus> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
            ApprovalStatus::Void,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One approval as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Approval {
    pub id: String,
    pub run_id: String,
    /// The call's place in the run's journal: (event number, call number).
    pub position: Option<(i64, i64)>,
    /// blake3 of the canonical request (see `exec::confirm::AskRequest::digest`).
    pub digest: String,
    /// The exact request: what runs (argv or script, or the message), the resolved
    /// program, the rule, the policy's digest and signer, the grants' digest.
    pub request: serde_json::Value,
    /// The action in a few words, as the run log says it.
    pub what: String,
    /// The rule that asks for a yes.
    pub rule: String,
    pub status: ApprovalStatus,
    pub requested_at_ms: i64,
    /// When a pending approval turns into a decline (`approvals.timeout`).
    pub deadline_ms: i64,
    /// Whether the person who started the run may decide it (`approvals.self`).
    pub allow_self: bool,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub reason: Option<String>,
    /// When the decision took effect in the run.
    pub consumed_at_ms: Option<i64>,
}

impl Approval {
    /// Whether a pending approval is past its deadline at `now`.
    pub fn overdue(&self, now_ms: i64) -> bool {
        self.status == ApprovalStatus::Pending && now_ms >= self.deadline_ms
    }
}

/// An approval to ask for.
#[derive(Debug, Clone)]
pub struct NewApproval<'a> {
    pub run: &'a str,
    pub position: Option<(i64, i64)>,
    pub digest: &'a str,
    pub request: &'a serde_json::Value,
    pub what: &'a str,
    pub rule: &'a str,
    pub timeout_ms: u64,
    pub allow_self: bool,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    Deny,
}

impl Verdict {
    pub fn act(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Deny => "deny",
        }
    }
}

/// A decision to record.
#[derive(Debug, Clone)]
pub struct Decide<'a> {
    pub id: &'a str,
    pub verdict: Verdict,
    /// Who decides (`local:USER`, `TENANT/NAME`).
    pub actor: &'a str,
    /// The decider's tenant: an approval of another tenant's run is "not found".
    pub tenant: Option<&'a str>,
    pub reason: Option<&'a str>,
    /// The digest the person saw (all of it, or its first
    /// [`DIGEST_PREFIX_MIN`] digits or more); a different one is refused.
    pub digest: Option<&'a str>,
}

/// The fewest leading digits of a request digest that name it, wherever a
/// person gives one (`loopbox runs approve --digest`, the API's `digest`):
/// 48 bits, which no other request of a run comes near by chance.
pub const DIGEST_PREFIX_MIN: usize = 12;

/// `seen` (trimmed), if it has the shape of a request digest a person may
/// give: hex digits, all of the digest or its first [`DIGEST_PREFIX_MIN`] or
/// more. The error says what to give instead; it is not a mismatch.
pub fn digest_given(seen: &str) -> Result<&str, String> {
    let seen = seen.trim();
    if seen.len() < DIGEST_PREFIX_MIN || !seen.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            // Quoted and escaped by `{:?}`, shortened: the caller's text, shown back.
            "{:?} does not name a request digest: give the digest of the request you reviewed, all of it or its first {DIGEST_PREFIX_MIN} hex digits or more",
            seen.chars().take(80).collect::<String>()
        ));
    }
    Ok(seen)
}

/// Whether `seen`, as a person gave it, names `digest` (one rule for the
/// command line and the API: see [`digest_given`]).
pub fn digest_names(digest: &str, seen: &str) -> bool {
    // Digests are written in lower case; one copied from elsewhere may not be.
    digest_given(seen).is_ok_and(|seen| digest.starts_with(&seen.to_ascii_lowercase()))
}

/// Which approvals to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    pub tenant: Option<String>,
    pub run: Option<String>,
    pub status: Option<ApprovalStatus>,
    pub limit: usize,
}

/// How the host settles an approval by itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Settle {
    /// Its decision took effect in the run.
    Consumed,
    /// Its deadline passed with nobody deciding.
    Expired,
    /// The request changed before anyone decided.
    Void(String),
}

const COLUMNS: &str = "id, run_id, event_seq, call_seq, digest, request, what, rule, status, requested_at, deadline, allow_self, decided_by, decided_at, reason, consumed_at";

fn approval(r: &Row) -> crate::db::engine::Result<Approval> {
    let event: Option<i64> = r.get(2)?;
    let call: Option<i64> = r.get(3)?;
    let request: String = r.get(5)?;
    let status: String = r.get(8)?;
    Ok(Approval {
        id: r.get(0)?,
        run_id: r.get(1)?,
        position: event.zip(call),
        digest: r.get(4)?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        what: r.get(6)?,
        rule: r.get(7)?,
        status: ApprovalStatus::parse(&status).ok_or_else(|| {
            crate::db::engine::Error::conversion(8, format!("`{status}` is not an approval status"))
        })?,
        requested_at_ms: r.get(9)?,
        deadline_ms: r.get(10)?,
        allow_self: r.get::<_, i64>(11)? != 0,
        decided_by: r.get(12)?,
        decided_at_ms: r.get(13)?,
        reason: r.get(14)?,
        consumed_at_ms: r.get(15)?,
    })
}

/// A fresh approval id: short, and unguessable enough that an id alone is no capability.
fn new_id() -> Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
    Ok(format!("a{:016x}", u64::from_le_bytes(bytes)))
}

/// Queue the `approval.decided` webhooks of `a`'s run's tenant: `status` by `by`.
fn decided_event(
    tx: &crate::db::Conn,
    a: &Approval,
    status: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<()> {
    super::webhooks::emit_for_run(
        tx,
        &a.run_id,
        "approval.decided",
        Some(&format!("approval.decided/{}", a.id)),
        serde_json::json!({"approval": a.id, "run": a.run_id, "what": a.what, "status": status, "decided_by": by, "reason": reason}),
    )
}

impl Db {
    /// Record a pending approval.
    pub fn request_approval(&self, a: &NewApproval<'_>) -> Result<Approval> {
        let id = new_id()?;
        let now = now_ms();
        let deadline = now.saturating_add(a.timeout_ms.min(i64::MAX as u64) as i64);
        self.write_run(a.run, "record the approval request", |tx| {
            tx.exec(
                &format!("INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?10, ?11, NULL, NULL, NULL, NULL)"),
                params![
                    id,
                    a.run,
                    a.position.map(|p| p.0),
                    a.position.map(|p| p.1),
                    a.digest,
                    a.request.to_string(),
                    a.what,
                    a.rule,
                    now,
                    deadline,
                    a.allow_self as i64
                ],
            )?;
            if self.has_webhooks() {
                super::webhooks::emit_for_run(
                    tx,
                    a.run,
                    "approval.pending",
                    Some(&format!("approval.pending/{id}")),
                    serde_json::json!({"approval": id, "run": a.run, "what": a.what, "rule": a.rule, "digest": a.digest, "deadline_ms": deadline}),
                )?;
            }
            Ok(())
        })?;
        self.approval(&id)?
            .ok_or_else(|| anyhow::anyhow!("the approval `{id}` just recorded cannot be read back"))
    }

    pub fn approval(&self, id: &str) -> Result<Option<Approval>> {
        Ok(self
            .conn()
            .row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                [id],
                approval,
            )
            .optional()?)
    }

    /// The newest approval (void ones aside) asked at this place of the run's journal.
    pub fn approval_at(&self, run: &str, event: i64, call: i64) -> Result<Option<Approval>> {
        Ok(self
            .conn()
            .row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE run_id = ?1 AND event_seq = ?2 AND call_seq = ?3 AND status <> 'void' ORDER BY requested_at DESC, rowid DESC LIMIT 1"),
                params![run, event, call],
                approval,
            )
            .optional()?)
    }

    /// The newest approval (void ones aside) of the run for this exact request:
    /// a hook session, whose events cannot wait, finds its decision this way.
    pub fn approval_for_digest(&self, run: &str, digest: &str) -> Result<Option<Approval>> {
        Ok(self
            .conn()
            .row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE run_id = ?1 AND digest = ?2 AND status <> 'void' AND consumed_at IS NULL ORDER BY requested_at DESC, rowid DESC LIMIT 1"),
                params![run, digest],
                approval,
            )
            .optional()?)
    }

    /// Whether a request of this digest was approved in the run (its approval
    /// used or not).
    pub fn was_approved(&self, run: &str, digest: &str) -> Result<bool> {
        if !self.has_schema(super::schema::APPROVALS) {
            return Ok(false);
        }
        Ok(self
            .conn()
            .row(
                "SELECT 1 FROM approvals WHERE run_id = ?1 AND digest = ?2 AND status = 'approved' LIMIT 1",
                params![run, digest],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Approvals, newest first (none in a store older than schema 7, read as it is).
    pub fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        if !self.has_schema(super::schema::APPROVALS) {
            return Ok(Vec::new());
        }
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT a.id, a.run_id, a.event_seq, a.call_seq, a.digest, a.request, a.what, a.rule, a.status, a.requested_at, a.deadline, a.allow_self, a.decided_by, a.decided_at, a.reason, a.consumed_at
             FROM approvals a JOIN runs r ON r.id = a.run_id
             WHERE (?1 IS NULL OR r.tenant = ?1) AND (?2 IS NULL OR a.run_id = ?2) AND (?3 IS NULL OR a.status = ?3)
             ORDER BY a.requested_at DESC, a.rowid DESC LIMIT ?4",
        )?;
        let rows = stmt
            .query_map(
                params![
                    filter.tenant,
                    filter.run,
                    filter.status.map(ApprovalStatus::as_str),
                    page_size(filter.limit)
                ],
                approval,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Record a person's decision, audited in the same transaction. Refused
    /// (and logged as refused, changing nothing): an approval that is not there
    /// or is another tenant's, one already decided, expired or void, a digest
    /// other than the request's, and the run's own starter when the approval
    /// was asked under `approvals.self = false`.
    pub fn decide_approval(&self, d: &Decide<'_>) -> Result<Result<Approval, Refused>> {
        let before = self.approval(d.id)?;
        let entry = AuditEntry {
            actor: d.actor.to_string(),
            tenant: d.tenant.map(String::from),
            act: d.verdict.act().to_string(),
            target: d.id.to_string(),
            digest: before.as_ref().map(|a| a.digest.clone()),
            detail: Some(
                serde_json::json!({
                    "run": before.as_ref().map(|a| a.run_id.clone()),
                    "reason": d.reason,
                })
                .to_string(),
            ),
            ..Default::default()
        };
        let now = now_ms();
        let decided = self.audit_act(entry, |tx| {
            let found = tx
                .row(
                    &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                    [d.id],
                    approval,
                )
                .optional()?;
            let run: Option<(Option<String>, Option<String>)> = match &found {
                Some(a) => tx
                    .row(
                        "SELECT tenant, started_by FROM runs WHERE id = ?1",
                        [&a.run_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?,
                None => None,
            };
            let (Some(a), Some((tenant, started_by))) = (found, run) else {
                return Ok(Err(Refused(format!("there is no approval `{}`", d.id))));
            };
            // Another tenant's approval does not exist for this decider.
            if d.tenant.is_some() && tenant.as_deref() != d.tenant {
                return Ok(Err(Refused(format!("there is no approval `{}`", d.id))));
            }
            if a.status != ApprovalStatus::Pending {
                let by = a
                    .decided_by
                    .as_deref()
                    .map(|who| format!(" by {who}"))
                    .unwrap_or_default();
                let why = match a.status {
                    ApprovalStatus::Void => format!(
                        "approval `{}` is void: the request changed before anyone decided, and a new approval was asked for the new request; review that one",
                        a.id
                    ),
                    ApprovalStatus::Expired => format!(
                        "approval `{}` expired: nobody decided before its deadline (approvals.timeout), so the action was declined",
                        a.id
                    ),
                    s => format!("approval `{}` was already {s}{by}", a.id),
                };
                return Ok(Err(Refused(why)));
            }
            if a.overdue(now) {
                return Ok(Err(Refused(format!(
                    "approval `{}` expired: nobody decided before its deadline (approvals.timeout), so the action is declined",
                    a.id
                ))));
            }
            if let Some(seen) = d.digest
                && !digest_names(&a.digest, seen)
            {
                return Ok(Err(Refused(format!(
                    "approval `{}` is for request digest {}, not {seen}: the request is not the one you reviewed; look at it again",
                    a.id, a.digest
                ))));
            }
            if !a.allow_self && started_by.as_deref() == Some(d.actor) {
                return Ok(Err(Refused(format!(
                    "approvals.self = false: {} started run {}, so someone else must decide its approvals",
                    d.actor, a.run_id
                ))));
            }
            let status = match d.verdict {
                Verdict::Approve => ApprovalStatus::Approved,
                Verdict::Deny => ApprovalStatus::Denied,
            };
            tx.exec(
                "UPDATE approvals SET status = ?2, decided_by = ?3, decided_at = ?4, reason = ?5 WHERE id = ?1 AND status = 'pending'",
                params![d.id, status.as_str(), d.actor, now, d.reason],
            )?;
            if self.has_webhooks() {
                decided_event(tx, &a, status.as_str(), d.actor, d.reason)?;
            }
            Ok(Ok(a.id))
        })?;
        match decided {
            Ok(id) => Ok(Ok(self.approval(&id)?.ok_or_else(|| {
                anyhow::anyhow!("the approval `{id}` cannot be read back")
            })?)),
            Err(r) => Ok(Err(r)),
        }
    }

    /// Settle an approval by the host itself: its decision took effect, its
    /// deadline passed (audited as an act of `loopbox`), or its request changed.
    pub fn settle_approval(&self, id: &str, how: &Settle) -> Result<()> {
        let now = now_ms();
        self.write("settle the approval", |tx| {
            match how {
                Settle::Consumed => {
                    tx.exec(
                        "UPDATE approvals SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL",
                        params![id, now],
                    )?;
                }
                Settle::Expired => {
                    let changed = tx.exec(
                        "UPDATE approvals SET status = 'expired', decided_by = 'loopbox', decided_at = ?2, reason = 'nobody decided before the deadline (approvals.timeout)' WHERE id = ?1 AND status = 'pending'",
                        params![id, now],
                    )?;
                    if changed > 0 && self.has_webhooks() {
                        let a = tx.row(
                            &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                            [id],
                            approval,
                        )?;
                        decided_event(tx, &a, "expired", "loopbox", a.reason.as_deref())?;
                    }
                    if changed > 0 {
                        let (digest, run, tenant): (String, String, Option<String>) = tx.row(
                            "SELECT a.digest, a.run_id, r.tenant FROM approvals a JOIN runs r ON r.id = a.run_id WHERE a.id = ?1",
                            [id],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                        )?;
                        append(
                            tx,
                            &AuditEntry {
                                actor: "loopbox".into(),
                                tenant,
                                act: "expire".into(),
                                target: id.into(),
                                digest: Some(digest),
                                detail: Some(serde_json::json!({"run": run}).to_string()),
                                ..Default::default()
                            },
                        )?;
                    }
                }
                // A pending approval, or a decided one whose decision never took
                // effect: the person decided about another request.
                Settle::Void(why) => {
                    tx.exec(
                        "UPDATE approvals SET status = 'void', decided_by = 'loopbox', decided_at = ?2, reason = ?3 WHERE id = ?1 AND status = 'pending'",
                        params![id, now, why],
                    )?;
                    tx.exec(
                        "UPDATE approvals SET status = 'void', reason = ?2 || ' (it was ' || status || COALESCE(' by ' || decided_by, '') || ')' WHERE id = ?1 AND status IN ('approved', 'denied') AND consumed_at IS NULL",
                        params![id, why],
                    )?;
                }
            }
            Ok(())
        })
    }

    /// Pending approvals whose deadline has passed at `now`, oldest first.
    pub fn overdue_approvals(&self, now: i64) -> Result<Vec<Approval>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND deadline <= ?1 ORDER BY deadline"
        ))?;
        let rows = stmt
            .query_map([now], approval)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Waiting runs with a decided approval whose decision has not yet taken
    /// effect: resuming each lets its action run (or be declined).
    pub fn runs_with_decided_approvals(&self) -> Result<Vec<String>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT DISTINCT a.run_id FROM approvals a JOIN runs r ON r.id = a.run_id
             WHERE r.status = 'waiting' AND a.status IN ('approved', 'denied', 'expired') AND a.consumed_at IS NULL",
        )?;
        let rows = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request digest as a person gives one (hex, 12 digits or more).
    const D1: &str = "d1d1d1d1d1d1d1d1d1d1d1d1";

    crate::db::on_both_engines!(
        a_decision_is_recorded_once_with_its_audit_row,
        a_wrong_digest_a_void_or_overdue_approval_and_self_approval_are_refused,
        another_tenants_approval_is_not_found,
    );

    use crate::db::RunPlace;

    fn store(db: Db) -> Db {
        db.create_driven_run("r1", "p", "d", "{}", &Default::default())
            .unwrap();
        db
    }

    fn ask(db: &Db, allow_self: bool, timeout_ms: u64) -> Approval {
        let request = serde_json::json!({"argv": ["rm", "-rf", "build"]});
        db.request_approval(&NewApproval {
            run: "r1",
            position: Some((2, 3)),
            digest: D1,
            request: &request,
            what: "exec `rm -rf build`",
            rule: "shell.ask rm",
            timeout_ms,
            allow_self,
        })
        .unwrap()
    }

    fn decide<'a>(id: &'a str, actor: &'a str, digest: Option<&'a str>) -> Decide<'a> {
        Decide {
            id,
            verdict: Verdict::Approve,
            actor,
            tenant: None,
            reason: Some("looks fine"),
            digest,
        }
    }

    fn a_decision_is_recorded_once_with_its_audit_row(db: Db) {
        let db = store(db);
        let a = ask(&db, true, 60_000);
        assert_eq!(db.approval_at("r1", 2, 3).unwrap().unwrap().id, a.id);
        let done = db
            .decide_approval(&decide(&a.id, "local:bob", Some(D1)))
            .unwrap()
            .unwrap();
        assert_eq!(done.status, ApprovalStatus::Approved);
        assert_eq!(done.decided_by.as_deref(), Some("local:bob"));
        // A second decision (a replayed click) is refused and changes nothing.
        let again = db
            .decide_approval(&Decide {
                verdict: Verdict::Deny,
                ..decide(&a.id, "local:eve", Some(D1))
            })
            .unwrap()
            .unwrap_err();
        assert!(
            again.0.contains("was already approved by local:bob"),
            "{again}"
        );
        assert_eq!(
            db.approval(&a.id).unwrap().unwrap().status,
            ApprovalStatus::Approved
        );
        let log = db
            .audit(&crate::db::audit::AuditFilter {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        let acts: Vec<(&str, &str, &str)> = log
            .iter()
            .map(|r| {
                (
                    r.entry.act.as_str(),
                    r.entry.actor.as_str(),
                    r.entry.outcome.as_str(),
                )
            })
            .collect();
        assert_eq!(acts[1], ("approve", "local:bob", "ok"));
        assert_eq!(acts[0].0, "deny");
        assert!(acts[0].2.starts_with("refused: approval"), "{:?}", acts[0]);
        assert_eq!(log[1].entry.digest.as_deref(), Some(D1));
    }

    fn a_wrong_digest_a_void_or_overdue_approval_and_self_approval_are_refused(db: Db) {
        let db = store(db);
        let a = ask(&db, false, 60_000);
        let e = db
            .decide_approval(&decide(&a.id, "local:bob", Some("other")))
            .unwrap()
            .unwrap_err();
        assert!(e.0.contains("not the one you reviewed"), "{e}");
        // Its first 12 digits name it, as on the command line; 11 do not, nor another's 12.
        assert!(digest_names(D1, &D1[..12]) && digest_names(D1, &D1.to_uppercase()));
        assert!(!digest_names(D1, &D1[..11]) && !digest_names(D1, "d1d1d1d1d1d2"));
        assert!(
            digest_given(&D1[..11])
                .unwrap_err()
                .contains("first 12 hex digits")
        );
        let me = crate::db::local_actor();
        let e = db
            .decide_approval(&decide(&a.id, &me, Some(D1)))
            .unwrap()
            .unwrap_err();
        assert!(e.0.contains("approvals.self = false"), "{e}");
        db.settle_approval(&a.id, &Settle::Void("the request changed".into()))
            .unwrap();
        let e = db
            .decide_approval(&decide(&a.id, "local:bob", Some(D1)))
            .unwrap()
            .unwrap_err();
        assert!(e.0.contains("is void"), "{e}");
        assert!(db.approval_at("r1", 2, 3).unwrap().is_none());

        let late = ask(&db, true, 0);
        assert_eq!(db.overdue_approvals(now_ms()).unwrap()[0].id, late.id);
        let e = db
            .decide_approval(&decide(&late.id, "local:bob", None))
            .unwrap()
            .unwrap_err();
        assert!(e.0.contains("expired"), "{e}");
        db.settle_approval(&late.id, &Settle::Expired).unwrap();
        assert_eq!(
            db.approval(&late.id).unwrap().unwrap().status,
            ApprovalStatus::Expired
        );
    }

    fn another_tenants_approval_is_not_found(db: Db) {
        let place = RunPlace {
            tenant: Some("beta".into()),
            ..Default::default()
        };
        db.create_queued_run(
            crate::db::NewRun {
                id: "r1",
                policy: "p",
                digest: "d",
                input: "{}",
                options: &Default::default(),
                place: &place,
                status: crate::db::RunStatus::Queued,
            },
            &AuditEntry {
                actor: "beta/carol".into(),
                tenant: Some("beta".into()),
                act: "start".into(),
                target: "r1".into(),
                ..Default::default()
            },
        )
        .unwrap();
        let a = ask(&db, true, 60_000);
        let e = db
            .decide_approval(&Decide {
                tenant: Some("alpha"),
                ..decide(&a.id, "alpha/mallory", Some(D1))
            })
            .unwrap()
            .unwrap_err();
        assert_eq!(e.0, format!("there is no approval `{}`", a.id));
        assert_eq!(
            db.approvals(&ApprovalFilter {
                tenant: Some("alpha".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .len(),
            0
        );
        assert_eq!(
            db.approvals(&ApprovalFilter {
                tenant: Some("beta".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .len(),
            1
        );
    }
}
