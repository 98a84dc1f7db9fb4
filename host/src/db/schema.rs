//! The store's tables, and the upgrades that bring an older store up to date
//! in place. `user_version` holds the schema number.

use anyhow::{Context, Result, bail};
use rusqlite::Connection;

use super::engine::{Conn, Engine};

pub const SCHEMA_VERSION: i64 = 14;

/// The oldest schema whose tables this loopbox can read as they are: a
/// read-only command reads such a store without upgrading it, so it needs no
/// write and no free space. Schema 6 added only an index; schema 7's run
/// columns are read as empty and its tables (approvals, audit) as empty;
/// schema 8's `wake_at` is read only where present (`Db::wake_at`), and its
/// `snapshots` table only by runs, which upgrade the store first; schema 9's
/// spend columns are read as nothing spent; schema 10's lease columns and
/// `workers` table only by claims, which upgrade the store first; schema 11's
/// `quota_spends` only by a server's quotas, which open the store to write;
/// schema 12's `connections` is read as empty where absent; schema 13's
/// `resume_with` only by drivers, which upgrade the store first; schema 14's
/// `webhooks` and `webhook_deliveries` only where [`WEBHOOKS`] is had.
pub const READABLE_FROM: i64 = 5;

/// The schema that added `approvals`, `audit` and the runs' tenant, workspace
/// and started_by.
pub const APPROVALS: i64 = 7;

/// The schema that added the runs' spend totals (`spend_*`).
pub const SPEND: i64 = 9;

/// The schema that added leases that fail over (`lease_epoch`, `lease_expires`, `workers`).
pub const LEASES: i64 = 10;

/// The schema that added a server's webhooks and their delivery queue (`db/webhooks.rs`).
pub const WEBHOOKS: i64 = 14;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    policy_digest TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    actions INTEGER NOT NULL DEFAULT 0,
    outcome TEXT
);
CREATE TABLE IF NOT EXISTS state (
    run_id TEXT NOT NULL REFERENCES runs(id),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    decision TEXT,
    error TEXT,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS run_log (
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    level TEXT NOT NULL,
    source TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS agent_conversations (
    session TEXT PRIMARY KEY,
    messages TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
-- Every host call of an event, in order: its request, and its result once known.
-- An action's row is written (durably) before it starts: a row without a result
-- is an action whose outcome is unknown. `event_seq` 0..n; `seq` 0 is the
-- driver's follow-up to the event's decision (the agent turn after an `inject`).
CREATE TABLE IF NOT EXISTS journal (
    run_id TEXT NOT NULL REFERENCES runs(id),
    event_seq INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT,
    at INTEGER NOT NULL,
    done_at INTEGER,
    PRIMARY KEY (run_id, event_seq, seq)
) WITHOUT ROWID;
-- Schema 6: the runs that may need a look when loopbox starts (`running` ones
-- whose driver may be gone) are found through this, not by reading every run.
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
-- Schema 7: ask-tier actions waiting for a person (`db/approvals.rs`). An approval
-- is bound to its run, the call's place in the journal and the digest of the
-- exact request; `consumed_at` is set when its decision took effect in the run.
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id),
    event_seq INTEGER,
    call_seq INTEGER,
    digest TEXT NOT NULL,
    request TEXT NOT NULL,
    what TEXT NOT NULL,
    rule TEXT NOT NULL,
    status TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    allow_self INTEGER NOT NULL,
    decided_by TEXT,
    decided_at INTEGER,
    reason TEXT,
    consumed_at INTEGER
);
CREATE INDEX IF NOT EXISTS approvals_by_run ON approvals (run_id, status);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals (status, deadline);
-- Schema 7: every act of a person or a token, append-only (`db/audit.rs`); the
-- triggers refuse any change to a written row, whoever asks.
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    tenant TEXT,
    act TEXT NOT NULL,
    target TEXT NOT NULL,
    digest TEXT,
    outcome TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS audit_by_tenant ON audit (tenant, seq);
-- Schema 8: copies of workspace files a policy asked the host to keep
-- (`actions.snapshot`), to put back with `actions.restore`; `content` NULL is a
-- path that was absent. Deleted with the snapshot, or when the run ends.
-- Schema 10: `loopbox worker` processes as they last reported (`db/claim.rs`).
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    slots INTEGER NOT NULL,
    held TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
-- Schema 11: a tenant's actions and agent turns in their quota's window, on a
-- shared store (`db/quota.rs`): at most the quota's value of rows per tenant
-- and kind, written under the store's write lock, the ones past the window
-- deleted in the same transaction.
CREATE TABLE IF NOT EXISTS quota_spends (
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_spends_by_tenant ON quota_spends (tenant, kind, at);
-- Schema 12: the run's connections through the egress proxy (`db/network.rs`).
CREATE TABLE IF NOT EXISTS connections (
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    side TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    address TEXT,
    allowed INTEGER NOT NULL,
    rule TEXT NOT NULL,
    bytes_out INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);
-- Schema 14: a served tenant's webhooks (`db/webhooks.rs`): where its events go,
-- which (`events`, space-separated and space-framed), the body's form, and
-- the secret that signs them (kept to sign, never shown again after creation).
CREATE TABLE IF NOT EXISTS webhooks (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    format TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    deleted_at INTEGER
);
CREATE INDEX IF NOT EXISTS webhooks_by_tenant ON webhooks (tenant);
-- Schema 14: one row per event and webhook, written in the transaction of the
-- change it tells of; the queue a server delivers from (at least once: the
-- event id is the receiver's key to drop a repeat) and the delivery log.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id TEXT PRIMARY KEY,
    event_id TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_at INTEGER NOT NULL,
    claimed_until INTEGER,
    last_status INTEGER,
    last_error TEXT,
    done_at INTEGER,
    UNIQUE (event_id, webhook_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (status, next_at);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_tenant ON webhook_deliveries (tenant, created_at);
CREATE TABLE IF NOT EXISTS snapshots (
    run_id TEXT NOT NULL REFERENCES runs(id),
    id INTEGER NOT NULL,
    path TEXT NOT NULL,
    content BLOB,
    PRIMARY KEY (run_id, id, path)
);
";

/// The audit log's guard on SQLite (see `POSTGRES_EXTRAS` for PostgreSQL's).
const SQLITE_TRIGGERS: &str = "
CREATE TRIGGER IF NOT EXISTS audit_is_append_only_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: its rows are never changed'); END;
CREATE TRIGGER IF NOT EXISTS audit_is_append_only_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: its rows are never deleted'); END;
";

/// What PostgreSQL needs beyond the shared tables: the SQLite functions the
/// shared SQL calls, the audit log's guard, and the `rowid` SQLite gives
/// every table that listings order by.
const POSTGRES_EXTRAS: &str = "
CREATE OR REPLACE FUNCTION json_extract(doc text, path text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT (doc::jsonb) #>> string_to_array(substr(path, 3), '.') $$;
CREATE OR REPLACE FUNCTION json_valid(doc text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$ BEGIN PERFORM doc::jsonb; RETURN true; EXCEPTION WHEN others THEN RETURN false; END $$;
CREATE OR REPLACE FUNCTION loopbox_audit_append_only() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'the audit log is append-only: its rows are never %',
        CASE TG_OP WHEN 'UPDATE' THEN 'changed' ELSE 'deleted' END; END $$;
CREATE OR REPLACE TRIGGER audit_is_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION loopbox_audit_append_only();
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS rowid BIGSERIAL;
";

/// Indexes on columns added after schema 1, made once the columns exist.
const ADDED_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at);
-- Schema 8: runs parked by a `sleep` decision, by the time they wake, so a
-- scheduler finds the due ones without reading every run (`Db::due_runs`).
CREATE INDEX IF NOT EXISTS runs_by_wake ON runs (wake_at) WHERE wake_at IS NOT NULL;
";

/// Columns added after schema 1, each with the version that added it.
const ADDED_COLUMNS: [(&str, &str, &str); 24] = [
    ("runs", "prompts", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "seed", "TEXT NOT NULL DEFAULT ''"),
    ("runs", "options", "TEXT NOT NULL DEFAULT '{}'"),
    // `host pid start-time` of the process driving the run.
    ("runs", "lease", "TEXT"),
    ("runs", "cancel", "INTEGER NOT NULL DEFAULT 0"),
    // 1 while the event is being handled: written with its first action's intent.
    ("events", "pending", "INTEGER NOT NULL DEFAULT 0"),
    // Schema 4: bytes of journal the run has recorded (limits.journal_bytes_per_run).
    ("runs", "journal_bytes", "INTEGER NOT NULL DEFAULT 0"),
    // Schema 5: bytes of keys and values in the run's state (limits.state_total_bytes),
    // kept by each commit so a write is checked without summing the state.
    ("runs", "state_bytes", "INTEGER NOT NULL DEFAULT 0"),
    // Schema 7: a shared server's runs (`loopbox serve`): whose, where, started by whom.
    // NULL for a workspace's own runs, whose store lives in the workspace.
    ("runs", "tenant", "TEXT"),
    ("runs", "workspace", "TEXT"),
    // Who started the run (`local:USER`, or `TENANT/TOKEN-NAME` on a server).
    ("runs", "started_by", "TEXT"),
    // Schema 8: when a run parked by a `sleep` decision wakes (ms since the epoch).
    ("runs", "wake_at", "INTEGER"),
    // Schema 9: what the run's agent turns spent (`crate::spend::Totals`), a sum of
    // the charges in its journal, each added in the transaction that journals it.
    ("runs", "spend_turns", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "spend_unmetered", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "spend_unpriced", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "spend_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "spend_output_tokens", "INTEGER NOT NULL DEFAULT 0"),
    (
        "runs",
        "spend_cache_read_tokens",
        "INTEGER NOT NULL DEFAULT 0",
    ),
    (
        "runs",
        "spend_cache_write_tokens",
        "INTEGER NOT NULL DEFAULT 0",
    ),
    ("runs", "spend_cost_usd", "REAL NOT NULL DEFAULT 0"),
    // A hook session's transcript tally (`crate::spend::transcript::Tally`, JSON).
    ("runs", "spend_tally", "TEXT"),
    // Schema 10: leases that fail over (`db/claim.rs`): the epoch grows at each
    // claim, and an unrenewed lease expires (ms since the epoch).
    ("runs", "lease_epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "lease_expires", "INTEGER"),
    // Schema 13: how a resume asked the run to go on (`serve::sched::Continue`,
    // JSON), kept with the run until the next drive takes it: on a shared store
    // whichever worker claims it next must see what the person accepted.
    ("runs", "resume_with", "TEXT"),
];

/// Counts a new column starts from, for a store that already has rows.
const BACKFILLS: [(&str, &str); 1] = [(
    "state_bytes",
    "UPDATE runs SET state_bytes = (SELECT COALESCE(SUM(octet_length(key) + octet_length(value)), 0) FROM state WHERE state.run_id = runs.id)",
)];

/// Bring the store to [`SCHEMA_VERSION`]. The upgrade runs under an exclusive
/// lock and looks at the version again inside it, so processes opening an old
/// store at once upgrade it once (not "duplicate column" each).
pub fn migrate(conn: &Connection) -> Result<()> {
    if version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    conn.execute_batch("BEGIN EXCLUSIVE")
        .context("failed to lock the store to upgrade it")?;
    let upgraded = upgrade(conn);
    let end = if upgraded.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    let ended = conn
        .execute_batch(end)
        .with_context(|| format!("failed to {} the store's upgrade", end.to_lowercase()));
    upgraded.and(ended)
}

/// The store's schema number; an error for a newer loopbox's store.
pub fn version(conn: &Connection) -> Result<i64> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        bail!(
            "it was written by a newer loopbox (schema {version}, this one knows {SCHEMA_VERSION}); upgrade loopbox"
        );
    }
    Ok(version)
}

fn upgrade(conn: &Connection) -> Result<()> {
    if version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    conn.execute_batch(TABLES)
        .context("failed to create the tables")?;
    conn.execute_batch(SQLITE_TRIGGERS)
        .context("failed to create the tables")?;
    for (table, column, decl) in ADDED_COLUMNS {
        let present: bool = conn.query_row(
            &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = ?1"),
            [column],
            |r| r.get(0),
        )?;
        if !present {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))
                .with_context(|| format!("failed to add {table}.{column}"))?;
            for (_, sql) in BACKFILLS.iter().filter(|(c, _)| *c == column) {
                conn.execute_batch(sql)
                    .with_context(|| format!("failed to fill {table}.{column}"))?;
            }
        }
    }
    conn.execute_batch(ADDED_INDEXES)
        .context("failed to create the indexes")?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    Ok(())
}

/// `ddl` (written for SQLite) as `engine` spells it: PostgreSQL has no
/// `INTEGER` of SQLite's 64 bits, no `REAL`, no `BLOB`, no `WITHOUT ROWID`.
pub fn ddl_for(engine: Engine, ddl: &str) -> String {
    match engine {
        Engine::Sqlite => ddl.to_string(),
        Engine::Postgres => ddl
            .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
            .replace("INTEGER", "BIGINT")
            .replace(" REAL", " DOUBLE PRECISION")
            .replace(" BLOB", " BYTEA")
            .replace(") WITHOUT ROWID;", ");"),
    }
}

/// The key of the advisory lock an upgrade of a PostgreSQL store holds.
const UPGRADE_LOCK: i64 = 0x006c_6f6f_7062_6f79;

/// Bring a PostgreSQL store to [`SCHEMA_VERSION`]: the same tables and
/// columns as SQLite's, made in one transaction under a lock, so servers and
/// workers starting at once make them once. The version is kept in
/// `loopbox_schema` (PostgreSQL has no `user_version`).
pub fn migrate_postgres(conn: &Conn) -> Result<()> {
    conn.execute_batch(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({UPGRADE_LOCK}); CREATE TABLE IF NOT EXISTS loopbox_schema (version BIGINT NOT NULL)"
    ))
    .context("failed to lock the store to upgrade it")?;
    let upgraded = (|| -> Result<()> {
        let version: i64 = conn.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM loopbox_schema",
            [],
            |r| r.get(0),
        )?;
        if version > SCHEMA_VERSION {
            bail!(
                "it was written by a newer loopbox (schema {version}, this one knows {SCHEMA_VERSION}); upgrade loopbox"
            );
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        let pg = |sql: &str| ddl_for(Engine::Postgres, sql);
        conn.execute_batch(&pg(TABLES))
            .context("failed to create the tables")?;
        for (table, column, decl) in ADDED_COLUMNS {
            conn.execute_batch(&pg(&format!(
                "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {decl}"
            )))
            .with_context(|| format!("failed to add {table}.{column}"))?;
        }
        conn.execute_batch(ADDED_INDEXES)
            .context("failed to create the indexes")?;
        conn.execute_batch(POSTGRES_EXTRAS)
            .context("failed to create the functions and triggers")?;
        conn.execute("DELETE FROM loopbox_schema", [])?;
        conn.execute(
            "INSERT INTO loopbox_schema (version) VALUES (?1)",
            [SCHEMA_VERSION],
        )?;
        Ok(())
    })();
    match upgraded {
        Ok(()) => conn
            .commit()
            .context("failed to commit the store's upgrade"),
        Err(e) => {
            conn.rollback();
            Err(e)
        }
    }
}
