//! A served tenant's webhooks and their delivery queue (schema 14).
//!
//! An event (an approval asked for or decided, a run finished, a daily budget
//! used) is written by [`emit`] in the transaction of the change it tells of,
//! as one `webhook_deliveries` row per webhook of the run's tenant that asked
//! for that kind: a change that commits has its deliveries queued, one that
//! rolls back has none, and a process dying in between loses nothing. Rows
//! are claimed for a while ([`Db::claim_deliveries`], under the store's write
//! lock), so servers sharing a PostgreSQL store send each attempt once; a
//! claim whose server died expires and the row is taken again. Delivery is
//! at least once: the event id is the receiver's key to drop a repeat.
//!
//! What a delivery says is kept as the data of the event; the server that
//! sends it adds the dashboard's link and signs it (`serve::webhooks`).

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use super::Db;
use crate::db::audit::{AuditEntry, Refused};
use crate::db::engine::{Conn, Engine, OptionalExtension, Row, Scope, params};
use crate::db::now_ms;

/// The events a webhook may ask for.
pub const KINDS: [&str; 4] = [
    "approval.pending",
    "approval.decided",
    "run.finished",
    "budget.reached",
];

/// Attempts before a delivery is given up (`failed`).
pub const MAX_ATTEMPTS: i64 = 10;

/// How long a claimed delivery is held by its server before another may take it.
pub const CLAIM_MS: i64 = 60_000;

/// The webhooks one tenant may have.
pub const MAX_PER_TENANT: i64 = 20;

/// A webhook as listed (never its secret).
#[derive(Debug, Clone, Serialize)]
pub struct Webhook {
    pub id: String,
    pub tenant: String,
    pub url: String,
    pub events: Vec<String>,
    /// `json`, or `slack` (a Slack-compatible `{"text": ...}` body).
    pub format: String,
    pub created_at_ms: i64,
    pub created_by: String,
}

/// A delivery as the log shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    pub id: String,
    pub event_id: String,
    pub webhook_id: String,
    pub kind: String,
    pub created_at_ms: i64,
    /// `queued`, `delivered` or `failed` (given up).
    pub status: String,
    pub attempts: i64,
    pub next_at_ms: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub done_at_ms: Option<i64>,
}

/// A claimed delivery, with what sending it needs.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub event_id: String,
    pub tenant: String,
    pub kind: String,
    pub data: Value,
    pub created_at_ms: i64,
    pub attempts: i64,
    pub url: String,
    pub format: String,
    pub secret: String,
}

/// How an attempt went.
#[derive(Debug, Clone)]
pub enum Attempt {
    /// A 2xx answer.
    Delivered(u16),
    /// Another answer (its status), or none (`None`), and why: one line,
    /// escaped by the sender (it is shown on the dashboard and by the API).
    Failed(Option<u16>, String),
}

fn webhook(r: &Row) -> crate::db::engine::Result<Webhook> {
    let events: String = r.get(3)?;
    Ok(Webhook {
        id: r.get(0)?,
        tenant: r.get(1)?,
        url: r.get(2)?,
        events: events.split_whitespace().map(String::from).collect(),
        format: r.get(4)?,
        created_at_ms: r.get(5)?,
        created_by: r.get(6)?,
    })
}

const WEBHOOK_COLUMNS: &str = "id, tenant, url, events, format, created_at, created_by";
const DELIVERY_COLUMNS: &str = "id, event_id, webhook_id, kind, created_at, status, attempts, next_at, last_status, last_error, done_at";

fn delivery(r: &Row) -> crate::db::engine::Result<Delivery> {
    Ok(Delivery {
        id: r.get(0)?,
        event_id: r.get(1)?,
        webhook_id: r.get(2)?,
        kind: r.get(3)?,
        created_at_ms: r.get(4)?,
        status: r.get(5)?,
        attempts: r.get(6)?,
        next_at_ms: r.get(7)?,
        last_status: r.get(8)?,
        last_error: r.get(9)?,
        done_at_ms: r.get(10)?,
    })
}

/// A random id: `prefix` and 16 hex digits.
fn random_id(prefix: &str) -> Result<String> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
    Ok(format!("{prefix}{:016x}", u64::from_le_bytes(b)))
}

/// The event id of `key` (an event that may be told of by more than one
/// process, as a budget used: the same key gives the same id, queued once),
/// else a fresh one.
fn event_id(key: Option<&str>) -> Result<String> {
    match key {
        Some(k) => Ok(format!(
            "evt_{}",
            &blake3::hash(k.as_bytes()).to_hex().as_str()[..16]
        )),
        None => random_id("evt_"),
    }
}

/// Queue event `kind` of `tenant` (with `data`) for each of its webhooks that
/// asked for it, in the transaction `tx`. `key` names an event several
/// processes may tell of, so it is queued once. Nothing when the tenant has
/// no such webhook.
pub(crate) fn emit(
    tx: &Conn,
    tenant: &str,
    kind: &str,
    key: Option<&str>,
    data: &Value,
) -> Result<()> {
    let id = event_id(key)?;
    // A tenant whose receivers fail keeps at most MAX_QUEUED deliveries
    // waiting: past that an event is logged as not sent, saying why.
    let full = format!(
        "not sent: tenant `{tenant}` has {MAX_QUEUED} deliveries waiting already, the most a tenant may have; they are sent or given up as their receivers answer"
    );
    tx.exec(
        "INSERT INTO webhook_deliveries (id, event_id, webhook_id, tenant, kind, data, created_at, status, attempts, next_at, last_error, done_at)
         SELECT ?1 || '.' || w.id, ?1, w.id, w.tenant, ?2, ?3, CAST(?4 AS BIGINT),
                CASE WHEN q.n >= ?7 THEN 'failed' ELSE 'queued' END, 0, CAST(?4 AS BIGINT),
                CASE WHEN q.n >= ?7 THEN ?8 ELSE NULL END,
                CASE WHEN q.n >= ?7 THEN CAST(?4 AS BIGINT) ELSE NULL END
         FROM webhooks w,
              (SELECT COUNT(*) AS n FROM webhook_deliveries WHERE tenant = ?5 AND status = 'queued') q
         WHERE w.tenant = ?5 AND w.deleted_at IS NULL AND w.events LIKE ?6
         ON CONFLICT DO NOTHING",
        params![id, kind, data.to_string(), now_ms(), tenant, format!("% {kind} %"), MAX_QUEUED, full],
    )?;
    Ok(())
}

/// Deliveries of one tenant waiting (queued) at most; see [`emit`].
pub const MAX_QUEUED: i64 = 1000;

/// [`emit`] for a change of run `run`: its tenant's, when it is a served run.
pub(crate) fn emit_for_run(
    tx: &Conn,
    run: &str,
    kind: &str,
    key: Option<&str>,
    data: Value,
) -> Result<()> {
    let tenant: Option<String> = tx
        .row("SELECT tenant FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .optional()?
        .flatten();
    match tenant {
        Some(t) => emit(tx, &t, kind, key, &data),
        None => Ok(()),
    }
}

/// The delay before attempt `attempts + 1`: 1 s, doubling, at most an hour.
pub fn backoff_ms(attempts: i64) -> i64 {
    1000i64
        .saturating_mul(1i64 << attempts.clamp(0, 12))
        .min(3_600_000)
}

impl Db {
    /// Whether this store has the webhook tables (a store read without upgrading may not).
    pub fn has_webhooks(&self) -> bool {
        self.has_schema(super::schema::WEBHOOKS)
    }

    /// [`emit`] in a transaction of its own (an event no other write tells of).
    pub fn emit_event(
        &self,
        tenant: &str,
        kind: &str,
        key: Option<&str>,
        data: &Value,
    ) -> Result<()> {
        if !self.has_webhooks() {
            return Ok(());
        }
        self.write("queue a webhook event", |tx| {
            emit(tx, tenant, kind, key, data)
        })
    }

    /// Add a webhook to `tenant` (the caller checked `url`, `events` and
    /// `format`), audited as `webhook.create`; its secret is the caller's to show once.
    pub fn create_webhook(
        &self,
        tenant: &str,
        url: &str,
        events: &[String],
        format: &str,
        secret: &str,
        actor: &str,
    ) -> Result<Result<Webhook, Refused>> {
        let id = random_id("wh_")?;
        let now = now_ms();
        let entry = AuditEntry {
            actor: actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: "webhook.create".into(),
            target: id.clone(),
            detail: Some(
                serde_json::json!({"url": url, "events": events, "format": format}).to_string(),
            ),
            ..Default::default()
        };
        let made = self.audit_act(entry, |tx| {
            let n: i64 = tx.row(
                "SELECT COUNT(*) FROM webhooks WHERE tenant = ?1 AND deleted_at IS NULL",
                [tenant],
                |r| r.get(0),
            )?;
            if n >= MAX_PER_TENANT {
                return Ok(Err(Refused(format!(
                    "tenant `{tenant}` has {n} webhooks, the most it may have; delete one first"
                ))));
            }
            tx.exec(
                "INSERT INTO webhooks (id, tenant, url, events, format, secret, created_at, created_by, deleted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL)",
                params![id, tenant, url, format!(" {} ", events.join(" ")), format, secret, now, actor],
            )?;
            Ok(Ok(()))
        })?;
        if let Err(r) = made {
            return Ok(Err(r));
        }
        let c = self.conn();
        Ok(Ok(c.row(
            &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?1"),
            [&id],
            webhook,
        )?))
    }

    /// Delete `tenant`'s webhook `id` (its queued deliveries are given up),
    /// audited as `webhook.delete`; another tenant's is not found.
    pub fn delete_webhook(
        &self,
        tenant: &str,
        id: &str,
        actor: &str,
    ) -> Result<Result<(), Refused>> {
        let entry = AuditEntry {
            actor: actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: "webhook.delete".into(),
            target: id.to_string(),
            ..Default::default()
        };
        let now = now_ms();
        self.audit_act(entry, |tx| {
            let n = tx.exec(
                "UPDATE webhooks SET deleted_at = ?3 WHERE id = ?1 AND tenant = ?2 AND deleted_at IS NULL",
                params![id, tenant, now],
            )?;
            if n == 0 {
                return Ok(Err(Refused(format!("tenant `{tenant}` has no webhook `{id}`"))));
            }
            tx.exec(
                "UPDATE webhook_deliveries SET status = 'failed', last_error = 'the webhook was deleted', done_at = ?2 WHERE webhook_id = ?1 AND status = 'queued'",
                params![id, now],
            )?;
            Ok(Ok(()))
        })
    }

    /// `tenant`'s webhooks, oldest first.
    pub fn webhooks(&self, tenant: &str) -> Result<Vec<Webhook>> {
        if !self.has_webhooks() {
            return Ok(Vec::new());
        }
        Ok(self.conn().query(
            &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant = ?1 AND deleted_at IS NULL ORDER BY created_at, id"),
            [tenant],
            webhook,
        )?)
    }

    /// `tenant`'s last `limit` deliveries, newest first.
    pub fn deliveries(&self, tenant: &str, limit: i64) -> Result<Vec<Delivery>> {
        if !self.has_webhooks() {
            return Ok(Vec::new());
        }
        Ok(self.conn().query(
            &format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE tenant = ?1 ORDER BY created_at DESC, id DESC LIMIT ?2"),
            params![tenant, limit],
            delivery,
        )?)
    }

    /// Claim up to `max` deliveries due at `now` for [`CLAIM_MS`], under the
    /// store's write lock: no two servers get the same row while its claim lasts.
    pub fn claim_deliveries(&self, now: i64, max: i64, per_tenant: i64) -> Result<Vec<Due>> {
        if !self.has_webhooks() {
            return Ok(Vec::new());
        }
        // Most ticks find nothing: a read, and no transaction, says so.
        let due_now: Option<i64> = self
            .conn()
            .row(
                "SELECT 1 FROM webhook_deliveries WHERE status = 'queued' AND next_at <= ?1 AND (claimed_until IS NULL OR claimed_until < ?1) LIMIT 1",
                [now],
                |r| r.get(0),
            )
            .optional()?;
        if due_now.is_none() {
            return Ok(Vec::new());
        }
        // The rows read are locked or skipped (PostgreSQL): servers claim in
        // parallel with each other and with the runs' writers, never the same row.
        let skip_locked = match self.engine() {
            Engine::Postgres => " FOR UPDATE OF d SKIP LOCKED",
            Engine::Sqlite => "",
        };
        self.write_in(Scope::Rows, "claim webhook deliveries", |tx| {
            let due = tx.query(
                // Each tenant's due rows ranked, counting what the tenant has in
                // flight already (`load`); a tenant's share cut at `per_tenant`,
                // and the least loaded taken first: a tenant's first due delivery
                // goes before another's third, however old theirs are, so busy
                // tenants' backlogs cannot keep a quiet one waiting.
                &format!("SELECT d.id, d.event_id, d.tenant, d.kind, d.data, d.created_at, d.attempts, w.url, w.format, w.secret
                 FROM webhook_deliveries d
                 JOIN webhooks w ON w.id = d.webhook_id
                 JOIN (
                   SELECT r.id, r.rn + (SELECT COUNT(*) FROM webhook_deliveries f
                                        WHERE f.tenant = r.tenant AND f.status = 'queued' AND f.claimed_until >= ?1) AS load
                   FROM (
                     SELECT q.id, q.tenant, ROW_NUMBER() OVER (PARTITION BY q.tenant ORDER BY q.next_at, q.id) AS rn
                     FROM webhook_deliveries q
                     WHERE q.status = 'queued' AND q.next_at <= ?1 AND (q.claimed_until IS NULL OR q.claimed_until < ?1)
                   ) r
                 ) x ON x.id = d.id
                 WHERE x.load <= ?3
                 ORDER BY x.load, d.next_at, d.id LIMIT ?2{skip_locked}"),
                params![now, max, per_tenant],
                |r| {
                    let data: String = r.get(4)?;
                    Ok(Due {
                        id: r.get(0)?,
                        event_id: r.get(1)?,
                        tenant: r.get(2)?,
                        kind: r.get(3)?,
                        data: serde_json::from_str(&data).unwrap_or(Value::Null),
                        created_at_ms: r.get(5)?,
                        attempts: r.get(6)?,
                        url: r.get(7)?,
                        format: r.get(8)?,
                        secret: r.get(9)?,
                    })
                },
            )?;
            for d in &due {
                tx.exec(
                    "UPDATE webhook_deliveries SET claimed_until = ?2 WHERE id = ?1",
                    params![d.id, now + CLAIM_MS],
                )?;
            }
            Ok(due)
        })
    }

    /// Remove the log's rows that ended (delivered, given up, not sent)
    /// before `before`, and the deleted webhooks none of whose rows is left.
    pub fn sweep_deliveries(&self, before: i64) -> Result<()> {
        if !self.has_webhooks() {
            return Ok(());
        }
        self.write_in(Scope::Rows, "remove old webhook deliveries", |tx| {
            tx.exec(
                "DELETE FROM webhook_deliveries WHERE status <> 'queued' AND done_at < ?1",
                [before],
            )?;
            tx.exec(
                "DELETE FROM webhooks WHERE deleted_at IS NOT NULL AND deleted_at < ?1
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.webhook_id = webhooks.id)",
                [before],
            )?;
            Ok(())
        })
    }

    /// Free every claim: a server alone on its store, starting, holds none
    /// (what its last incarnation claimed and never recorded is sent again).
    pub fn release_deliveries(&self) -> Result<()> {
        if !self.has_webhooks() {
            return Ok(());
        }
        self.write_in(Scope::Rows, "release webhook deliveries", |tx| {
            tx.exec(
                "UPDATE webhook_deliveries SET claimed_until = NULL WHERE status = 'queued' AND claimed_until IS NOT NULL",
                [],
            )?;
            Ok(())
        })
    }

    /// Record how an attempt at `due` went: delivered, queued again after
    /// [`backoff_ms`], or given up after [`MAX_ATTEMPTS`].
    pub fn record_attempt(&self, due: &Due, how: &Attempt) -> Result<()> {
        let now = now_ms();
        let attempts = due.attempts + 1;
        self.write_in(Scope::Rows, "record a webhook delivery", |tx| {
            match how {
                Attempt::Delivered(status) => tx.exec(
                    "UPDATE webhook_deliveries SET status = 'delivered', attempts = ?2, last_status = ?3, last_error = NULL, done_at = ?4, claimed_until = NULL WHERE id = ?1 AND status = 'queued'",
                    params![due.id, attempts, *status as i64, now],
                )?,
                Attempt::Failed(status, why) => {
                    let (state, done) = if attempts >= MAX_ATTEMPTS {
                        ("failed", Some(now))
                    } else {
                        ("queued", None)
                    };
                    tx.exec(
                        "UPDATE webhook_deliveries SET status = ?2, attempts = ?3, last_status = ?4, last_error = ?5, next_at = ?6, done_at = ?7, claimed_until = NULL WHERE id = ?1 AND status = 'queued'",
                        params![
                            due.id,
                            state,
                            attempts,
                            status.map(i64::from),
                            why,
                            now + backoff_ms(attempts - 1),
                            done
                        ],
                    )?
                }
            };
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_a_second_to_at_most_an_hour() {
        assert_eq!(backoff_ms(0), 1000);
        assert_eq!(backoff_ms(1), 2000);
        assert_eq!(backoff_ms(5), 32_000);
        assert_eq!(backoff_ms(40), 3_600_000);
        assert_eq!(event_id(Some("k")).unwrap(), event_id(Some("k")).unwrap());
        assert_ne!(event_id(None).unwrap(), event_id(None).unwrap());
    }

    /// Two tenants' due deliveries: each gets at most `per_tenant` in flight,
    /// those already claimed counted; past MAX_QUEUED waiting, an event is
    /// logged as not sent, naming the limit; the sweep removes ended rows.
    #[test]
    fn claims_are_shared_between_tenants_the_queue_is_bounded_and_swept() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::db::Db::open(&dir.path().join("s.db")).unwrap();
        let all = ["run.finished".to_string()];
        for t in ["a", "b"] {
            db.create_webhook(t, "http://x.example/", &all, "json", "s", "t")
                .unwrap()
                .unwrap();
        }
        for _ in 0..10 {
            db.emit_event("a", "run.finished", None, &Value::Null)
                .unwrap();
        }
        db.emit_event("b", "run.finished", None, &Value::Null)
            .unwrap();
        let now = now_ms() + 1;
        let of = |v: &[Due], t: &str| v.iter().filter(|d| d.tenant == t).count();
        // Two slots: the least loaded first, so `b`'s one goes beside `a`'s
        // oldest, not behind `a`'s ten.
        let mut first = db.claim_deliveries(now, 2, 2).unwrap();
        assert_eq!((of(&first, "a"), of(&first, "b")), (1, 1));
        first.extend(db.claim_deliveries(now, 16, 2).unwrap());
        assert_eq!((of(&first, "a"), of(&first, "b")), (2, 1));
        // `a`'s two are still in flight: none more of it.
        let again = db.claim_deliveries(now, 16, 2).unwrap();
        assert_eq!(of(&again, "a"), 0);
        for d in &first {
            db.record_attempt(d, &Attempt::Delivered(204)).unwrap();
        }
        assert_eq!(of(&db.claim_deliveries(now, 16, 2).unwrap(), "a"), 2);

        // Fill `a`'s queue to the limit: the next event is not sent, and says why.
        for _ in 0..MAX_QUEUED {
            db.emit_event("a", "run.finished", None, &Value::Null)
                .unwrap();
        }
        let log = db.deliveries("a", 5).unwrap();
        assert_eq!(log[0].status, "failed", "{:?}", log[0]);
        let why = log[0].last_error.as_deref().unwrap();
        assert!(why.contains("has 1000 deliveries waiting already"), "{why}");

        // Ended rows older than the cut go; queued ones stay.
        db.sweep_deliveries(now_ms() + 1).unwrap();
        let left = db.deliveries("a", 5000).unwrap();
        assert!(left.iter().all(|d| d.status == "queued"), "{}", left.len());
        assert_eq!(left.len() as i64, MAX_QUEUED);
    }
}
