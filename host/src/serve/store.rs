//! The server's part of the store (`DATA/loopbox.db`, the same `db::Db` every
//! run is recorded in): API tokens, dashboard sessions, each tenant's
//! `loopbox.toml` as the last audited act set it, and the inbox of answers
//! and ticks waiting for their run's turn; and the queries the API reads runs
//! with (a tenant's runs page through the `runs_by_tenant` index).
//!
//! Every act goes through [`Db::audit_act`]: the change and its audit row are
//! one transaction, and a refused act changes nothing and is logged with its
//! reason. The server's tables are read through a connection of its own; the
//! acts write through the `Db`'s.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::db::engine::{Conn, OptionalExtension, Row, params};
use anyhow::{Context, Result};
use serde::Serialize;

use super::auth::secret::{self, Minted, SESSION_PREFIX, TOKEN_PREFIX};
use super::auth::{Caller, Role, Via};
use crate::db::audit::{AuditEntry, Refused};
use crate::db::{Db, RunStatus, now_ms};

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS serve_tokens (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    revoked_at INTEGER,
    revoked_by TEXT
);
-- A name is one live token of its tenant; a revoked token keeps its row (and its name's history).
CREATE UNIQUE INDEX IF NOT EXISTS serve_tokens_live_name ON serve_tokens (tenant, name) WHERE revoked_at IS NULL;
CREATE TABLE IF NOT EXISTS serve_sessions (
    id TEXT PRIMARY KEY,
    hash BLOB NOT NULL,
    token_id TEXT NOT NULL REFERENCES serve_tokens(id),
    csrf TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS serve_sessions_by_expiry ON serve_sessions (expires_at);
CREATE TABLE IF NOT EXISTS serve_tenant_configs (
    tenant TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    digest TEXT NOT NULL,
    set_at INTEGER NOT NULL,
    set_by TEXT NOT NULL
);
-- An answer or a tick accepted for a run, delivered when the run gets its turn,
-- only if the run still stands where it stood (its last event `after_seq`).
CREATE TABLE IF NOT EXISTS serve_inbox (
    run_id TEXT PRIMARY KEY REFERENCES runs(id),
    after_seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    at INTEGER NOT NULL
);
";

/// Live sessions one token may have; signing in past it ends the oldest.
pub const SESSIONS_PER_TOKEN: i64 = 20;

/// The store as the server uses it.
#[derive(Clone)]
pub struct Store {
    db: Db,
    reader: Arc<Mutex<Conn>>,
}

/// A token as listed (never its hash).
#[derive(Debug, Clone, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub role: Role,
    pub created_at_ms: i64,
    pub created_by: String,
    pub revoked_at_ms: Option<i64>,
    pub revoked_by: Option<String>,
}

/// A token just made: its text is shown once, and only its hash is kept.
pub struct NewToken {
    pub info: TokenInfo,
    pub text: String,
}

/// A session just started: the cookie's value and the CSRF token its forms carry.
pub struct NewSession {
    pub cookie: String,
    pub csrf: String,
    pub expires_at_ms: i64,
}

/// An answer or tick waiting for its run's turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbox {
    pub after_seq: i64,
    pub kind: InboxKind,
    pub payload: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxKind {
    Answer,
    Tick,
}

impl InboxKind {
    fn as_str(self) -> &'static str {
        match self {
            InboxKind::Answer => "answer",
            InboxKind::Tick => "tick",
        }
    }
}

pub use crate::db::page::{RunFilter, RunRow};

fn role_of(text: &str) -> crate::db::engine::Result<Role> {
    text.parse()
        .map_err(|e: String| crate::db::engine::Error::conversion(3, e))
}

fn token_info(r: &Row) -> crate::db::engine::Result<TokenInfo> {
    Ok(TokenInfo {
        id: r.get(0)?,
        tenant: r.get(1)?,
        name: r.get(2)?,
        role: role_of(&r.get::<_, String>(3)?)?,
        created_at_ms: r.get(4)?,
        created_by: r.get(5)?,
        revoked_at_ms: r.get(6)?,
        revoked_by: r.get(7)?,
    })
}

const TOKEN_COLUMNS: &str =
    "id, tenant, name, role, created_at, created_by, revoked_at, revoked_by";

impl Store {
    /// Open (creating) the store at `path` with the server's tables.
    pub fn open(path: &Path) -> Result<Store> {
        Store::with(Db::open(path)?)
    }

    /// The server's part of the store `db` (SQLite or PostgreSQL), its tables made.
    pub fn with(db: Db) -> Result<Store> {
        let context = || format!("failed to open the store `{}`", db.path().display());
        let conn = db.second_connection().with_context(context)?;
        db.create_tables(TABLES)
            .context("failed to create the server's tables")
            .with_context(context)?;
        Ok(Store {
            db,
            reader: Arc::new(Mutex::new(conn)),
        })
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make a token for `tenant`; refused when the tenant has a live token of that name.
    pub fn create_token(
        &self,
        tenant: &str,
        name: &str,
        role: Role,
        actor: &str,
    ) -> Result<Result<NewToken, Refused>> {
        let Minted { text, id, hash } = secret::mint(TOKEN_PREFIX)?;
        let now = now_ms();
        let entry = AuditEntry {
            actor: actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: "token.create".into(),
            target: name.to_string(),
            detail: Some(serde_json::json!({"role": role, "id": id}).to_string()),
            ..Default::default()
        };
        let made = self.db.audit_act(entry, |tx| {
            let taken: Option<String> = tx
                .query_row(
                    "SELECT id FROM serve_tokens WHERE tenant = ?1 AND name = ?2 AND revoked_at IS NULL",
                    params![tenant, name],
                    |r| r.get(0),
                )
                .optional()?;
            if taken.is_some() {
                return Ok(Err(Refused(format!(
                    "tenant `{tenant}` has a token named `{name}` already: choose another name, or revoke that one first (`loopbox serve token revoke --tenant {tenant} --name {name}`)"
                ))));
            }
            tx.execute(
                "INSERT INTO serve_tokens (id, tenant, name, role, hash, created_at, created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, tenant, name, role.as_str(), &hash[..], now, actor],
            )?;
            Ok(Ok(()))
        })?;
        Ok(made.map(|()| NewToken {
            info: TokenInfo {
                id: id.clone(),
                tenant: tenant.to_string(),
                name: name.to_string(),
                role,
                created_at_ms: now,
                created_by: actor.to_string(),
                revoked_at_ms: None,
                revoked_by: None,
            },
            text,
        }))
    }

    /// Revoke `tenant`'s live token `name`, and end its sessions.
    pub fn revoke_token(
        &self,
        tenant: &str,
        name: &str,
        actor: &str,
    ) -> Result<Result<(), Refused>> {
        let entry = AuditEntry {
            actor: actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: "token.revoke".into(),
            target: name.to_string(),
            ..Default::default()
        };
        self.db.audit_act(entry, |tx| {
            let id: Option<String> = tx
                .query_row(
                    "SELECT id FROM serve_tokens WHERE tenant = ?1 AND name = ?2 AND revoked_at IS NULL",
                    params![tenant, name],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(id) = id else {
                return Ok(Err(Refused(format!(
                    "tenant `{tenant}` has no live token named `{name}`; list them with `loopbox serve token list --tenant {tenant}`"
                ))));
            };
            tx.execute(
                "UPDATE serve_tokens SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1",
                params![id, now_ms(), actor],
            )?;
            tx.execute("DELETE FROM serve_sessions WHERE token_id = ?1", [&id])?;
            Ok(Ok(()))
        })
    }

    /// The tokens of `tenant` (all tenants when None), newest first, revoked ones included.
    pub fn tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenInfo>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(&format!(
            "SELECT {TOKEN_COLUMNS} FROM serve_tokens WHERE ?1 IS NULL OR tenant = ?1 ORDER BY created_at DESC, id"
        ))?;
        let rows = stmt
            .query_map([tenant], token_info)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The caller a presented token belongs to; None for a malformed, unknown
    /// or revoked token, or one of a tenant the server no longer has.
    pub fn authenticate(&self, text: &str) -> Result<Option<Caller>> {
        let Some((id, secret_part)) = secret::parse(TOKEN_PREFIX, text) else {
            return Ok(None);
        };
        let c = self.conn();
        let found: Option<(TokenInfo, Vec<u8>)> = c
            .prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS}, hash FROM serve_tokens WHERE id = ?1"
            ))?
            .query_row([id], |r| Ok((token_info(r)?, r.get(8)?)))
            .optional()?;
        Ok(found.and_then(|(t, hash)| {
            (secret::matches(&hash, secret_part) && t.revoked_at_ms.is_none()).then_some(Caller {
                tenant: t.tenant,
                role: t.role,
                name: t.name,
                token_id: t.id,
                via: Via::Bearer,
            })
        }))
    }

    /// Sign in: a session for `caller`'s token, lasting `ttl_ms`.
    pub fn start_session(&self, caller: &Caller, ttl_ms: i64) -> Result<NewSession> {
        let Minted { text, id, hash } = secret::mint(SESSION_PREFIX)?;
        let csrf = secret::random_text()?;
        let now = now_ms();
        let expires = now + ttl_ms;
        let entry = AuditEntry {
            actor: caller.actor(),
            tenant: Some(caller.tenant.clone()),
            act: "session.start".into(),
            target: caller.name.clone(),
            ..Default::default()
        };
        self.db
            .audit_act(entry, |tx| {
                // Sessions past their expiry are dropped as new ones start.
                tx.execute("DELETE FROM serve_sessions WHERE expires_at <= ?1", [now])?;
                // A token keeps its newest sessions only: signing in again and again cannot grow the store.
                tx.execute(
                    "DELETE FROM serve_sessions WHERE token_id = ?1 AND id NOT IN
                     (SELECT id FROM serve_sessions WHERE token_id = ?1 ORDER BY created_at DESC, id LIMIT ?2)",
                    params![caller.token_id, SESSIONS_PER_TOKEN - 1],
                )?;
                tx.execute(
                    "INSERT INTO serve_sessions (id, hash, token_id, csrf, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![id, &hash[..], caller.token_id, csrf, now, expires],
                )?;
                Ok(Ok(()))
            })?
            .map_err(|r| anyhow::anyhow!("{r}"))?;
        Ok(NewSession {
            cookie: text,
            csrf,
            expires_at_ms: expires,
        })
    }

    /// The caller a session cookie belongs to: None when it is malformed,
    /// unknown, expired, or its token was revoked.
    pub fn session(&self, cookie: &str) -> Result<Option<Caller>> {
        let Some((id, secret_part)) = secret::parse(SESSION_PREFIX, cookie) else {
            return Ok(None);
        };
        let c = self.conn();
        let found = c
            .prepare_cached(&format!(
                "SELECT s.hash, s.csrf, s.expires_at, {} FROM serve_sessions s JOIN serve_tokens t ON t.id = s.token_id WHERE s.id = ?1",
                TOKEN_COLUMNS
                    .split(", ")
                    .map(|c| format!("t.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))?
            .query_row([id], |r| {
                let hash: Vec<u8> = r.get(0)?;
                let csrf: String = r.get(1)?;
                let expires: i64 = r.get(2)?;
                let t = TokenInfo {
                    id: r.get(3)?,
                    tenant: r.get(4)?,
                    name: r.get(5)?,
                    role: role_of(&r.get::<_, String>(6)?)?,
                    created_at_ms: r.get(7)?,
                    created_by: r.get(8)?,
                    revoked_at_ms: r.get(9)?,
                    revoked_by: r.get(10)?,
                };
                Ok((hash, csrf, expires, t))
            })
            .optional()?;
        Ok(found.and_then(|(hash, csrf, expires, t)| {
            let live = secret::matches(&hash, secret_part)
                && expires > now_ms()
                && t.revoked_at_ms.is_none();
            live.then(|| Caller {
                tenant: t.tenant,
                role: t.role,
                name: t.name,
                token_id: t.id,
                via: Via::Session {
                    id: id.to_string(),
                    csrf,
                },
            })
        }))
    }

    /// Sign out: the session is gone.
    pub fn end_session(&self, caller: &Caller) -> Result<()> {
        let Via::Session { id, .. } = &caller.via else {
            return Ok(());
        };
        let entry = AuditEntry {
            actor: caller.actor(),
            tenant: Some(caller.tenant.clone()),
            act: "session.end".into(),
            target: caller.name.clone(),
            ..Default::default()
        };
        self.db
            .audit_act(entry, |tx| {
                tx.execute("DELETE FROM serve_sessions WHERE id = ?1", [id])?;
                Ok(Ok(()))
            })?
            .map_err(|r| anyhow::anyhow!("{r}"))
    }

    /// `tenant`'s `loopbox.toml` as last set, and its blake3.
    pub fn tenant_config(&self, tenant: &str) -> Result<Option<(String, String)>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT text, digest FROM serve_tenant_configs WHERE tenant = ?1")?
            .query_row([tenant], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// Set `tenant`'s `loopbox.toml` (already checked to parse): the text and
    /// its audit row in one transaction. The blake3 of the text.
    pub fn set_tenant_config(&self, tenant: &str, text: &str, actor: &str) -> Result<String> {
        let digest = crate::config::digest(text.as_bytes());
        let before = self.tenant_config(tenant)?.map(|(_, d)| d);
        let entry = AuditEntry {
            actor: actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: "config.set".into(),
            target: "loopbox.toml".into(),
            digest: Some(digest.clone()),
            detail: Some(serde_json::json!({"before": before}).to_string()),
            ..Default::default()
        };
        self.db
            .audit_act(entry, |tx| {
                tx.execute(
                    "INSERT INTO serve_tenant_configs (tenant, text, digest, set_at, set_by) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (tenant) DO UPDATE SET text = excluded.text, digest = excluded.digest, set_at = excluded.set_at, set_by = excluded.set_by",
                    params![tenant, text, digest, now_ms(), actor],
                )?;
                Ok(Ok(()))
            })?
            .map_err(|r| anyhow::anyhow!("{r}"))?;
        Ok(digest)
    }

    /// The answer or tick waiting for `run`, if any.
    pub fn inbox(&self, run: &str) -> Result<Option<Inbox>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT after_seq, kind, payload FROM serve_inbox WHERE run_id = ?1")?
            .query_row([run], |r| {
                let kind: String = r.get(1)?;
                Ok(Inbox {
                    after_seq: r.get(0)?,
                    kind: if kind == "tick" {
                        InboxKind::Tick
                    } else {
                        InboxKind::Answer
                    },
                    payload: r.get(2)?,
                })
            })
            .optional()?)
    }

    /// Drop `run`'s inbox (delivered, or stale) if it is still the one read,
    /// accepted after event `after_seq`. A newer one (the run asked again, and
    /// was answered) is kept: the driver that read the old one may be a worker
    /// that lost the run meanwhile, finishing late, and must not throw away an
    /// answer meant for the run's new holder.
    pub fn clear_inbox(&self, run: &str, after_seq: i64) -> Result<()> {
        let c = self.conn();
        c.prepare_cached("DELETE FROM serve_inbox WHERE run_id = ?1 AND after_seq = ?2")?
            .execute(params![run, after_seq])?;
        Ok(())
    }

    /// An act on a run (`act`, by `caller`): `change` decides, inside the
    /// transaction, whether it may go on (`Ok(Err(why))` refuses it) and what
    /// it writes.
    pub fn run_act<T>(
        &self,
        caller_actor: &str,
        tenant: &str,
        act: &str,
        run: &str,
        detail: Option<serde_json::Value>,
        change: impl FnMut(&crate::db::Conn) -> Result<Result<T, Refused>>,
    ) -> Result<Result<T, Refused>> {
        let entry = AuditEntry {
            actor: caller_actor.to_string(),
            tenant: Some(tenant.to_string()),
            act: act.to_string(),
            target: run.to_string(),
            detail: detail.map(|d| d.to_string()),
            ..Default::default()
        };
        self.db.audit_act(entry, change)
    }

    /// `tenant`'s runs, newest first (see [`RunFilter`]).
    pub fn runs(&self, tenant: &str, f: &RunFilter) -> Result<Vec<RunRow>> {
        crate::db::page::tenant_page(&self.conn(), tenant, f)
    }

    /// The server's runs with `status`, oldest change first (through `runs_by_status`).
    pub fn runs_with_status(&self, status: RunStatus) -> Result<Vec<(String, String)>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT id, tenant FROM runs WHERE status = ?1 AND tenant IS NOT NULL ORDER BY updated_at, id",
        )?;
        let rows = stmt
            .query_map([status], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Forget the workers whose last heartbeat is older than `stale_ms` (they
    /// died, or were stopped that long: one that comes back reports itself
    /// again); their ids. Audited as `workers.forget` by `actor`, when any.
    pub fn forget_dead_workers(&self, actor: &str, stale_ms: i64) -> Result<Vec<String>> {
        let cutoff = now_ms() - stale_ms;
        let dead: Vec<String> = self
            .conn()
            .prepare_cached("SELECT id FROM workers WHERE heartbeat_at < ?1 ORDER BY id")?
            .query_map([cutoff], |r| r.get(0))?
            .collect::<Result<Vec<_>, _>>()?;
        if dead.is_empty() {
            return Ok(dead);
        }
        let entry = AuditEntry {
            actor: actor.to_string(),
            act: "workers.forget".into(),
            target: dead.join(", "),
            outcome: format!("no heartbeat for {} ms", stale_ms),
            ..Default::default()
        };
        self.db
            .audit_act(entry, |tx| {
                tx.execute("DELETE FROM workers WHERE heartbeat_at < ?1", [cutoff])?;
                Ok(Ok(()))
            })?
            .map_err(|r| anyhow::anyhow!("{}", r.0))?;
        Ok(dead)
    }

    /// How many of `tenant`'s runs wait in the store for a driver (`queued`):
    /// on a shared store, the queue the workers claim from.
    pub fn queued_runs(&self, tenant: &str) -> Result<u64> {
        let c = self.conn();
        let n: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM runs WHERE tenant = ?1 AND status = 'queued'")?
            .query_row([tenant], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }

    /// Actions and agent turns of `tenant`'s runs journaled since `since_ms`:
    /// (actions, agent turns), to start the quotas' windows where the last
    /// incarnation left them.
    pub fn spent_since(&self, tenant: &str, since_ms: i64) -> Result<(Vec<i64>, Vec<i64>)> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT j.at, j.kind FROM journal j JOIN runs r ON r.id = j.run_id
             WHERE r.tenant = ?1 AND j.at >= ?2 AND j.kind IN ('shell', 'prompt', 'turn') ORDER BY j.at",
        )?;
        let mut actions = vec![];
        let mut turns = vec![];
        for row in stmt.query_map(params![tenant, since_ms], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })? {
            let (at, kind) = row?;
            if kind != "turn" {
                actions.push(at);
            }
            if kind != "shell" {
                turns.push(at);
            }
        }
        Ok((actions, turns))
    }
}

impl Store {
    /// The charged agent turns of `tenant`'s runs recorded since `since_ms`,
    /// with their times: to start its daily spend budgets where the last
    /// incarnation left them, and to show what it spent.
    pub fn charges_since(
        &self,
        tenant: &str,
        since_ms: i64,
    ) -> Result<Vec<(i64, crate::spend::Charge)>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT COALESCE(j.done_at, j.at), json_extract(j.result, '$.usage') FROM journal j JOIN runs r ON r.id = j.run_id
             WHERE r.tenant = ?1 AND COALESCE(j.done_at, j.at) >= ?2 AND j.kind IN ('prompt', 'turn')
               AND j.result IS NOT NULL AND json_valid(j.result) AND json_extract(j.result, '$.usage') IS NOT NULL
             ORDER BY 1",
        )?;
        let rows = stmt
            .query_map(params![tenant, since_ms], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows
            .into_iter()
            .filter_map(|(at, usage)| Some((at, serde_json::from_str(&usage).ok()?)))
            .collect())
    }

    /// What all of `tenant`'s runs spent, ever: the sum of their totals.
    pub fn tenant_spent(&self, tenant: &str) -> Result<crate::spend::Totals> {
        let c = self.conn();
        let t = c
            .prepare_cached(&format!(
                "SELECT COALESCE(SUM(spend_turns), 0), COALESCE(SUM(spend_unmetered), 0), COALESCE(SUM(spend_unpriced), 0),
                        COALESCE(SUM(spend_input_tokens), 0), COALESCE(SUM(spend_output_tokens), 0),
                        COALESCE(SUM(spend_cache_read_tokens), 0), COALESCE(SUM(spend_cache_write_tokens), 0),
                        COALESCE(SUM(spend_cost_usd), 0.0)
                 FROM {} WHERE tenant = ?1",
                runs_by_tenant(&c)
            ))?
            .query_row([tenant], |r| {
                let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok(crate::spend::Totals {
                    turns: n(0)?,
                    unmetered: n(1)?,
                    unpriced: n(2)?,
                    tokens: crate::spend::Tokens {
                        input: n(3)?,
                        output: n(4)?,
                        cache_read: n(5)?,
                        cache_write: n(6)?,
                    },
                    cost_usd: r.get(7)?,
                })
            })?;
        Ok(t)
    }
}

/// Write an answer or tick into `run`'s inbox inside an act's transaction.
pub fn put_inbox(
    tx: &crate::db::Conn,
    run: &str,
    after_seq: i64,
    kind: InboxKind,
    payload: &str,
) -> crate::db::engine::Result<()> {
    tx.execute(
        "INSERT INTO serve_inbox (run_id, after_seq, kind, payload, at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (run_id) DO UPDATE SET after_seq = excluded.after_seq, kind = excluded.kind, payload = excluded.payload, at = excluded.at",
        params![run, after_seq, kind.as_str(), payload, now_ms()],
    )?;
    Ok(())
}

impl Store {
    /// Move `run` to `queued` if its status is one of `from`; whether it moved.
    /// The server's own step (a kill or a decided approval picked up), not a
    /// person's act: those are audited where they happen.
    pub fn requeue(&self, run: &str, from: &[RunStatus]) -> Result<bool> {
        let list: Vec<String> = from.iter().map(|s| format!("'{}'", s.as_str())).collect();
        let c = self.conn();
        let n = c.execute(
            &format!(
                "UPDATE runs SET status = 'queued', updated_at = ?2 WHERE id = ?1 AND status IN ({})",
                list.join(", ")
            ),
            params![run, now_ms()],
        )?;
        if n > 0 {
            crate::db::claim::notify_runnable(&c)?;
        }
        Ok(n > 0)
    }
}

impl Store {
    /// A run's state, key by key (one indexed read): each value cut at
    /// [`SHOWN_BYTES`], with its whole length.
    pub fn state(&self, run: &str) -> Result<Vec<(String, String, i64)>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(
            "SELECT key, substr(value, 1, ?2), length(value) FROM state WHERE run_id = ?1 ORDER BY key",
        )?;
        let rows = stmt
            .query_map(params![run, SHOWN_BYTES], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::db::on_both_engines!(
        a_token_keeps_its_newest_sessions_and_a_revoked_one_loses_them_all,
        a_late_driver_clears_the_answer_it_read_never_a_newer_one,
    );

    fn a_late_driver_clears_the_answer_it_read_never_a_newer_one(db: Db) {
        let store = Store::with(db).unwrap();
        store
            .db()
            .create_queued_run(
                crate::db::NewRun {
                    id: "r1",
                    policy: "p",
                    digest: "d",
                    input: "{}",
                    options: &Default::default(),
                    place: &Default::default(),
                    status: RunStatus::Queued,
                },
                &Default::default(),
            )
            .unwrap();
        // A driver read the answer given after event 3, and delivered it; the run
        // went on elsewhere, asked again after event 5, and was answered.
        put_inbox(&store.conn(), "r1", 3, InboxKind::Answer, "\"yes\"").unwrap();
        let read = store.inbox("r1").unwrap().unwrap();
        put_inbox(&store.conn(), "r1", 5, InboxKind::Answer, "\"no\"").unwrap();
        // The first driver, finishing late, clears what it read: the new answer stays.
        store.clear_inbox("r1", read.after_seq).unwrap();
        let kept = store
            .inbox("r1")
            .unwrap()
            .expect("the newer answer was deleted");
        assert_eq!((kept.after_seq, kept.payload.as_str()), (5, "\"no\""));
        store.clear_inbox("r1", 5).unwrap();
        assert!(store.inbox("r1").unwrap().is_none());
    }

    fn a_token_keeps_its_newest_sessions_and_a_revoked_one_loses_them_all(db: Db) {
        let store = Store::with(db).unwrap();
        let made = store
            .create_token("a", "alice", Role::Operator, "local:test")
            .unwrap()
            .unwrap();
        let caller = store.authenticate(&made.text).unwrap().unwrap();
        let cookies: Vec<String> = (0..SESSIONS_PER_TOKEN + 5)
            .map(|_| store.start_session(&caller, 60_000).unwrap().cookie)
            .collect();
        let live = |c: &str| store.session(c).unwrap().is_some();
        let n: i64 = store
            .conn()
            .query_row("SELECT COUNT(*) FROM serve_sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, SESSIONS_PER_TOKEN);
        assert!(!live(&cookies[0]) && live(cookies.last().unwrap()));
        // An expired session is refused; a forged one too.
        let short = store.start_session(&caller, -1).unwrap().cookie;
        assert!(!live(&short));
        assert!(!live(&format!(
            "{}x",
            &cookies.last().unwrap()[..cookies[0].len() - 1]
        )));
        store
            .revoke_token("a", "alice", "local:test")
            .unwrap()
            .unwrap();
        assert!(!live(cookies.last().unwrap()));
        assert!(store.authenticate(&made.text).unwrap().is_none());
    }

    #[test]
    fn a_tenants_runs_page_through_the_tenant_index_whatever_the_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("loopbox.db")).unwrap();
        // 10,000 runs of three tenants, written straight in.
        store
            .conn()
            .execute(
                "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < 10000)
                 INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options, tenant)
                 SELECT printf('r%05d', i), 'p', 'd', '{}', CASE i % 4 WHEN 0 THEN 'waiting' ELSE 'done' END, i, i, 's', '{}',
                        CASE i % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'c' END FROM k",
                [],
            )
            .unwrap();
        let page = |f: &RunFilter| store.runs("a", f).unwrap();
        let first = page(&RunFilter {
            limit: 50,
            ..Default::default()
        });
        assert_eq!(first.len(), 50);
        assert_eq!(first[0].id, "r09999");
        let next = page(&RunFilter {
            limit: 50,
            before: Some(first[49].id.clone()),
            ..Default::default()
        });
        assert!(next[0].created_at_ms < first[49].created_at_ms);
        let waiting = page(&RunFilter {
            limit: 10,
            status: Some(RunStatus::Waiting),
            ..Default::default()
        });
        assert!(waiting.iter().all(|r| r.status == RunStatus::Waiting) && waiting.len() == 10);
        // Another tenant's run is no place to page from.
        let e = store
            .runs(
                "a",
                &RunFilter {
                    limit: 5,
                    before: Some("r00001".into()),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("there is no run `r00001` to page from"),
            "{e:#}"
        );
        // The page reads through the index, and its steps do not grow with the store.
        let c = store.conn();
        let mut stmt = c
            .as_sqlite()
            .unwrap()
            .prepare(
                "SELECT id FROM runs INDEXED BY runs_by_tenant WHERE tenant = ?1 AND (?2 IS NULL OR status = ?2)
                 ORDER BY created_at DESC, id DESC LIMIT 50",
            )
            .unwrap();
        let n = stmt
            .query_map(rusqlite::params!["a", None::<String>], |_| Ok(()))
            .unwrap()
            .count();
        let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
        assert!(n == 50 && steps < 2000, "{n} rows in {steps} steps");
        let plan: Vec<String> = c
            .prepare("EXPLAIN QUERY PLAN SELECT id FROM runs INDEXED BY runs_by_tenant WHERE tenant = 'a' ORDER BY created_at DESC, id DESC LIMIT 50")
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|p| p.contains("runs_by_tenant")),
            "{plan:?}"
        );
    }
}

/// Text longer than this in a run's view is cut (the store keeps it whole).
pub const SHOWN_BYTES: i64 = 4096;

/// `runs` read through its tenant index: SQLite's planner is told to
/// (`INDEXED BY`, which it otherwise skips for a tenant with most of the
/// runs); PostgreSQL has no such clause (a syntax error there, which failed
/// every run listing and spend total on a PostgreSQL store) and plans by its
/// statistics.
fn runs_by_tenant(c: &Conn) -> &'static str {
    match c.engine() {
        crate::db::engine::Engine::Sqlite => "runs INDEXED BY runs_by_tenant",
        crate::db::engine::Engine::Postgres => "runs",
    }
}
/// Events, and actions, a run's view shows: the latest ones.
pub const SHOWN_ROWS: i64 = 500;

/// One event as a run's view shows it.
#[derive(Debug, Clone)]
pub struct EventView {
    pub seq: i64,
    pub at_ms: i64,
    /// The event, decision and error as JSON text, each cut at [`SHOWN_BYTES`]
    /// (a cut one is no longer JSON), with its whole length.
    pub event: (String, i64),
    pub decision: Option<(String, i64)>,
    pub error: Option<(String, i64)>,
    pub pending: bool,
}

/// One action (a command, a prompt, an agent turn) as a run's view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ActionView {
    pub event: i64,
    pub seq: i64,
    pub kind: String,
    pub request: String,
    pub request_bytes: i64,
    pub done: bool,
    pub exit_code: Option<i64>,
    pub duration_ms: Option<i64>,
    pub timed_out: Option<bool>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    pub at_ms: i64,
    pub done_at_ms: Option<i64>,
}

impl Store {
    /// The latest [`SHOWN_ROWS`] events of `run`, oldest first, their text
    /// cut in the query: a run's view reads a bounded amount whatever the run holds.
    pub fn event_views(&self, run: &str) -> Result<(Vec<EventView>, i64)> {
        let c = self.conn();
        let total: i64 = c
            .prepare_cached("SELECT COUNT(*) FROM events WHERE run_id = ?1")?
            .query_row([run], |r| r.get(0))?;
        let mut stmt = c.prepare_cached(
            "SELECT seq, at, substr(event, 1, ?2), length(event), substr(decision, 1, ?2), length(decision),
                    substr(error, 1, ?2), length(error), pending
             FROM events WHERE run_id = ?1 ORDER BY seq DESC LIMIT ?3",
        )?;
        let mut rows = stmt
            .query_map(params![run, SHOWN_BYTES, SHOWN_ROWS], |r| {
                let opt = |i: usize| -> crate::db::engine::Result<Option<(String, i64)>> {
                    Ok(match r.get::<_, Option<String>>(i)? {
                        Some(t) => Some((t, r.get(i + 1)?)),
                        None => None,
                    })
                };
                Ok(EventView {
                    seq: r.get(0)?,
                    at_ms: r.get(1)?,
                    event: (r.get(2)?, r.get(3)?),
                    decision: opt(4)?,
                    error: opt(6)?,
                    pending: r.get::<_, i64>(8)? != 0,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.reverse();
        Ok((rows, total))
    }

    /// The latest [`SHOWN_ROWS`] actions of `run` (commands, prompts, agent
    /// turns), oldest first, with their outcome, exit code and duration, and
    /// the start of their output.
    pub fn action_views(&self, run: &str) -> Result<(Vec<ActionView>, i64)> {
        let c = self.conn();
        let total: i64 = c
            .prepare_cached(
                "SELECT COUNT(*) FROM journal WHERE run_id = ?1 AND kind IN ('shell', 'prompt', 'turn')",
            )?
            .query_row([run], |r| r.get(0))?;
        let mut stmt = c.prepare_cached(
            "SELECT event_seq, seq, kind, substr(request, 1, ?2), length(request), result IS NOT NULL,
                    json_extract(result, '$.ok.exit_code'), json_extract(result, '$.ok.duration_ms'),
                    json_extract(result, '$.ok.timed_out'),
                    substr(json_extract(result, '$.ok.stdout'), 1, ?2), substr(json_extract(result, '$.ok.stderr'), 1, ?2),
                    json_extract(result, '$.err.kind'), substr(json_extract(result, '$.err.message'), 1, ?2),
                    at, done_at
             FROM journal WHERE run_id = ?1 AND kind IN ('shell', 'prompt', 'turn')
             ORDER BY event_seq DESC, seq DESC LIMIT ?3",
        )?;
        let mut rows = stmt
            .query_map(params![run, SHOWN_BYTES, SHOWN_ROWS], |r| {
                Ok(ActionView {
                    event: r.get(0)?,
                    seq: r.get(1)?,
                    kind: r.get(2)?,
                    request: r.get(3)?,
                    request_bytes: r.get(4)?,
                    done: r.get(5)?,
                    exit_code: r.get(6)?,
                    duration_ms: r.get(7)?,
                    timed_out: r.get::<_, Option<i64>>(8)?.map(|b| b != 0),
                    stdout: r.get(9)?,
                    stderr: r.get(10)?,
                    error_kind: r.get(11)?,
                    error: r.get(12)?,
                    at_ms: r.get(13)?,
                    done_at_ms: r.get(14)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.reverse();
        Ok((rows, total))
    }
}
