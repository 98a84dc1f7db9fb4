//! Run rows: creation, status, counters and budgets, the driver's lease, and
//! cancellation requests.

use crate::db::engine::{OptionalExtension, Row, params};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::audit::AuditEntry;
use super::lease::Owner;
use super::{Db, now_ms};

/// A run's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub policy: String,
    pub policy_digest: String,
    pub input: String,
    pub status: RunStatus,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub turns: u32,
    pub actions: u64,
    pub prompts: u64,
    pub outcome: Option<String>,
    /// Seeds the guest's WASI random numbers, so a replayed event sees the same ones.
    pub seed: String,
    pub options: RunOptions,
    /// The process driving the run, if one took it.
    pub lease: Option<Owner>,
    pub cancel_requested: bool,
    /// Where the run belongs: none for a workspace's own run, a tenant on a server.
    pub place: RunPlace,
    /// What its agent turns spent (nothing, read from a store older than schema 8).
    pub spent: crate::spend::Totals,
}

/// Whose a run is and where it runs: kept in columns, so a server lists a
/// tenant's runs through an index. Empty for a run in a workspace's own store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunPlace {
    /// The server tenant the run belongs to.
    pub tenant: Option<String>,
    /// The workspace the run acts in, when its store is not the workspace's own.
    pub workspace: Option<std::path::PathBuf>,
    /// Who started it: `local:USER`, or `TENANT/NAME` for a server token.
    pub started_by: Option<String>,
}

impl RunRecord {
    /// The status to show without writing to the store: a `running` run whose
    /// driver is gone is `interrupted`, as [`Db::find_interrupted`] would record.
    pub fn seen_status(&self) -> RunStatus {
        match (&self.status, &self.lease) {
            (RunStatus::Running, Some(o)) if !o.is_alive() => RunStatus::Interrupted,
            (status, _) => *status,
        }
    }
}

/// How a standalone run was started, kept so `runs resume` continues it the same way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunOptions {
    /// The policy file's absolute path (none for builtins), so a resume finds it from anywhere.
    pub policy_path: Option<std::path::PathBuf>,
    /// The `--config` file's absolute path, when one was given.
    pub config: Option<std::path::PathBuf>,
    pub allow: Vec<String>,
    pub ask: Vec<String>,
    pub deny: Vec<String>,
    pub yes: bool,
    pub max_turns: Option<u32>,
    /// Ticks given with `--tick`, in order; those already delivered are skipped on resume.
    pub ticks: Vec<String>,
    /// An agent hook session: the agent's hook events drive it, not a loopbox process.
    pub hook: bool,
    /// The grants the run started with (see [`crate::run::pin`]); a later process
    /// continuing the run refuses a config that differs from them.
    pub grants: Option<serde_json::Value>,
    /// The `[policies.NAME]` the run was started as: its grants are that section's,
    /// on resume too. `None`: a policy named by path, under the top-level grants.
    pub policy_name: Option<String>,
    /// Who signed the policy's component, as its admission found it (a registry
    /// policy's `loopbox.lock` signer): part of what an approval is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// A YAML loop's `name:`, so its `builtin:fsm` run is shown by the loop's
    /// name (derived at the start; nothing reads it to decide anything).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
}

const RUN_COLUMNS: &str = "id, policy, policy_digest, input, status, created_at, updated_at, turns, actions, prompts, outcome, seed, options, lease, cancel, tenant, workspace, started_by, \
     spend_turns, spend_unmetered, spend_unpriced, spend_input_tokens, spend_output_tokens, spend_cache_read_tokens, spend_cache_write_tokens, spend_cost_usd";
/// The same from a schema-7 store, read as it is: nothing spent.
const RUN_COLUMNS_7: &str = "id, policy, policy_digest, input, status, created_at, updated_at, turns, actions, prompts, outcome, seed, options, lease, cancel, tenant, workspace, started_by, \
     0, 0, 0, 0, 0, 0, 0, 0.0";
/// The same from a store older than schema 7: no place either.
const RUN_COLUMNS_6: &str = "id, policy, policy_digest, input, status, created_at, updated_at, turns, actions, prompts, outcome, seed, options, lease, cancel, NULL, NULL, NULL, \
     0, 0, 0, 0, 0, 0, 0, 0.0";

/// The runs with one status (`?1`), found through the `runs_by_status` index (see `schema.rs`).
pub(super) fn runs_with_status_sql(columns: &str) -> String {
    format!("SELECT {columns} FROM runs WHERE status = ?1 ORDER BY created_at, id")
}

fn run_record(r: &Row) -> crate::db::engine::Result<RunRecord> {
    let options: String = r.get(12)?;
    let lease: Option<String> = r.get(13)?;
    Ok(RunRecord {
        id: r.get(0)?,
        policy: r.get(1)?,
        policy_digest: r.get(2)?,
        input: r.get(3)?,
        status: r.get(4)?,
        created_at_ms: r.get(5)?,
        updated_at_ms: r.get(6)?,
        turns: r.get(7)?,
        actions: r.get::<_, i64>(8)? as u64,
        prompts: r.get::<_, i64>(9)? as u64,
        outcome: r.get(10)?,
        seed: r.get(11)?,
        options: serde_json::from_str(&options).unwrap_or_default(),
        lease: lease.as_deref().and_then(Owner::parse),
        cancel_requested: r.get::<_, i64>(14)? != 0,
        place: RunPlace {
            tenant: r.get(15)?,
            workspace: r.get::<_, Option<String>>(16)?.map(Into::into),
            started_by: r.get(17)?,
        },
        spent: super::spend::totals_at(r, 18)?,
    })
}

/// A run that ended keeps no snapshots (`actions.snapshot`): no later event can restore them.
fn forget_snapshots_of_ended(
    tx: &crate::db::Conn,
    id: &str,
    status: RunStatus,
) -> crate::db::engine::Result<()> {
    if status.is_final() {
        tx.exec("DELETE FROM snapshots WHERE run_id = ?1", [id])?;
    }
    Ok(())
}

/// Where a run stands; stored as its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting for its turn on a server (the tenant's or the server's runs at once).
    Queued,
    /// A driver (or a hook session) is handling it.
    Running,
    /// Parked until an answer or events arrive (`runs answer`, `runs tick`).
    Waiting,
    /// Stopped mid-run (a crash, a signal, an agent turn in flight): `runs resume` goes on.
    Interrupted,
    /// The policy finished with success, or let the agent stop.
    Done,
    /// The policy finished with a failure, blocked, or the run failed (a fault, a budget, the agent).
    Failed,
    /// The policy handed the run to a person.
    Escalated,
    /// `loopbox runs cancel`.
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Interrupted,
        RunStatus::Done,
        RunStatus::Failed,
        RunStatus::Escalated,
        RunStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::Escalated => "escalated",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// A final run takes no more events: it is never resumed, answered or cancelled.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Done | RunStatus::Failed | RunStatus::Escalated | RunStatus::Cancelled
        )
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<RunStatus, String> {
        RunStatus::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a run status"))
    }
}

impl crate::db::engine::ToValue for RunStatus {
    fn to_value(&self) -> crate::db::engine::Value {
        crate::db::engine::Value::Text(self.as_str().into())
    }
}

impl crate::db::engine::FromValue for RunStatus {
    fn from_value(v: &crate::db::engine::Value) -> std::result::Result<Self, String> {
        String::from_value(v)?.parse()
    }
}

/// A run about to be recorded.
#[derive(Clone, Copy)]
pub struct NewRun<'a> {
    pub id: &'a str,
    pub policy: &'a str,
    pub digest: &'a str,
    pub input: &'a str,
    pub options: &'a RunOptions,
    pub place: &'a RunPlace,
    pub status: RunStatus,
}

/// A new run's row, ready to insert.
struct RunRow {
    id: String,
    policy: String,
    digest: String,
    input: String,
    status: RunStatus,
    seed: String,
    options: String,
    lease: Option<String>,
    place: RunPlace,
}

impl RunRow {
    fn insert(&self, tx: &crate::db::Conn) -> Result<()> {
        tx.exec(
            "INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options, lease, tenant, workspace, started_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                self.id,
                self.policy,
                self.digest,
                self.input,
                self.status,
                now_ms(),
                self.seed,
                self.options,
                self.lease,
                self.place.tenant,
                self.place.workspace.as_ref().map(|w| w.to_string_lossy().into_owned()),
                self.place.started_by
            ],
        )?;
        Ok(())
    }
}

/// Who this process runs as, for the runs it starts and the acts it records:
/// `local:USER` (the user name of the real uid, else its number).
pub fn local_actor() -> String {
    format!("local:{}", crate::db::audit::user_name())
}

impl Db {
    /// The columns a run row is read with, for this store's schema.
    pub(super) fn run_columns(&self) -> &'static str {
        if self.has_schema(super::schema::SPEND) {
            RUN_COLUMNS
        } else if self.has_schema(super::schema::APPROVALS) {
            RUN_COLUMNS_7
        } else {
            RUN_COLUMNS_6
        }
    }

    /// A run driven by no process (tests).
    pub fn create_run(&self, id: &str, policy: &str, digest: &str, input: &str) -> Result<()> {
        self.insert_run(
            NewRun {
                id,
                policy,
                digest,
                input,
                options: &RunOptions::default(),
                place: &RunPlace::default(),
                status: RunStatus::Running,
            },
            None,
        )
    }

    /// An agent hook session's run, with the grants it starts under.
    pub fn create_hook_run(
        &self,
        id: &str,
        policy: &str,
        digest: &str,
        input: &str,
        grants: serde_json::Value,
    ) -> Result<()> {
        self.insert_run(
            NewRun {
                id,
                policy,
                digest,
                input,
                options: &RunOptions {
                    hook: true,
                    grants: Some(grants),
                    ..Default::default()
                },
                place: &RunPlace {
                    started_by: Some(local_actor()),
                    ..Default::default()
                },
                status: RunStatus::Running,
            },
            None,
        )
    }

    /// A standalone run, leased to this process from the start.
    pub fn create_driven_run(
        &self,
        id: &str,
        policy: &str,
        digest: &str,
        input: &str,
        options: &RunOptions,
    ) -> Result<()> {
        self.insert_run(
            NewRun {
                id,
                policy,
                digest,
                input,
                options,
                place: &RunPlace {
                    started_by: Some(local_actor()),
                    ..Default::default()
                },
                status: RunStatus::Running,
            },
            Some(&Owner::me()),
        )
    }

    /// A run on a server, `queued` until the server's scheduler takes it; the
    /// audit row of the act that started it goes in the same transaction.
    pub fn create_queued_run(&self, run: NewRun<'_>, audit: &AuditEntry) -> Result<()> {
        let run = NewRun {
            status: RunStatus::Queued,
            ..run
        };
        let row = self.new_run_row(&run, None)?;
        self.write("record the new run", |tx| {
            row.insert(tx)?;
            super::audit::append(tx, audit)?;
            super::claim::notify_runnable(tx)?;
            Ok(())
        })
    }

    fn insert_run(&self, run: NewRun<'_>, owner: Option<&Owner>) -> Result<()> {
        let row = self.new_run_row(&run, owner)?;
        self.write("record the new run", |tx| row.insert(tx))
    }

    fn new_run_row(&self, run: &NewRun<'_>, owner: Option<&Owner>) -> Result<RunRow> {
        let NewRun {
            id,
            policy,
            digest,
            input,
            options,
            place,
            status,
        } = *run;
        let seed = blake3::hash(
            &[
                id.as_bytes(),
                &now_ms().to_le_bytes(),
                &std::process::id().to_le_bytes(),
            ]
            .concat(),
        )
        .to_hex()
        .to_string();
        Ok(RunRow {
            id: id.to_string(),
            policy: policy.to_string(),
            digest: digest.to_string(),
            input: input.to_string(),
            status,
            seed,
            options: serde_json::to_string(options)?,
            lease: owner.map(Owner::to_string),
            place: place.clone(),
        })
    }

    pub fn set_status(&self, id: &str, status: RunStatus, outcome: Option<&str>) -> Result<()> {
        self.write_run(id, "update the run's status", |tx| {
            // A timer (`wake_at`) lasts only while the run is parked by it.
            tx.exec("UPDATE runs SET status = ?2, outcome = COALESCE(?3, outcome), updated_at = ?4, wake_at = CASE WHEN ?2 = 'waiting' THEN wake_at END WHERE id = ?1", params![id, status, outcome, now_ms()])?;
            forget_snapshots_of_ended(tx, id, status)?;
            self.emit_finished(tx, id, status)?;
            Ok(())
        })
    }

    /// Set the status the driver ends with, and give up the lease.
    pub fn finish_driving(&self, id: &str, status: RunStatus, outcome: Option<&str>) -> Result<()> {
        self.finish_driving_asking(id, status, outcome, None)
    }

    /// [`Db::finish_driving`] for a run that may have parked on a question
    /// to a person (`asked`): a served run's tenant's `approval.pending`
    /// webhooks are queued in the same write.
    pub fn finish_driving_asking(
        &self,
        id: &str,
        status: RunStatus,
        outcome: Option<&str>,
        asked: Option<&str>,
    ) -> Result<()> {
        let epoch = self.fence_of(id);
        self.write_run(id, "record how the run ended", |tx| {
            tx.exec(
                "UPDATE runs SET status = ?2, outcome = COALESCE(?3, outcome), updated_at = ?4, lease = NULL, lease_expires = NULL, wake_at = CASE WHEN ?2 = 'waiting' THEN wake_at END WHERE id = ?1",
                params![id, status, outcome, now_ms()],
            )?;
            forget_snapshots_of_ended(tx, id, status)?;
            self.emit_finished(tx, id, status)?;
            if let Some(q) = asked
                && self.has_webhooks()
            {
                super::webhooks::emit_for_run(
                    tx,
                    id,
                    "approval.pending",
                    None,
                    serde_json::json!({"run": id, "question": q, "what": format!("a question: {q}")}),
                )?;
            }
            Ok(())
        })?;
        // Ended by its holder: the claim is over.
        if let Some(epoch) = epoch {
            self.forget_fence(id, epoch);
        }
        Ok(())
    }

    /// A served run that ended `done`, `failed` or `interrupted` queues its
    /// tenant's `run.finished` webhooks in the transaction `tx` that says so.
    fn emit_finished(&self, tx: &super::Conn, id: &str, status: RunStatus) -> Result<()> {
        if !matches!(
            status,
            RunStatus::Done | RunStatus::Failed | RunStatus::Interrupted
        ) || !self.has_webhooks()
        {
            return Ok(());
        }
        let (policy, outcome): (String, Option<String>) = tx.row(
            "SELECT policy, outcome FROM runs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let summary = outcome
            .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
            .and_then(|o| o["summary"].as_str().map(String::from));
        super::webhooks::emit_for_run(
            tx,
            id,
            "run.finished",
            None,
            serde_json::json!({"run": id, "status": status.as_str(), "policy": policy, "summary": summary}),
        )
    }

    pub fn add_turn(&self, id: &str) -> Result<u32> {
        self.write_run(id, "count the turn", |tx| {
            tx.exec(
                "UPDATE runs SET turns = turns + 1, updated_at = ?2 WHERE id = ?1",
                params![id, now_ms()],
            )?;
            Ok(tx.row("SELECT turns FROM runs WHERE id = ?1", [id], |r| r.get(0))?)
        })
    }

    /// Record that the run has taken at least `turns` turns.
    pub fn note_turns(&self, id: &str, turns: u32) -> Result<()> {
        self.write_run(id, "count the turn", |tx| {
            tx.exec(
                "UPDATE runs SET turns = CASE WHEN turns > ?2 THEN turns ELSE ?2 END, updated_at = ?3 WHERE id = ?1",
                params![id, turns, now_ms()],
            )?;
            Ok(())
        })
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRecord>> {
        Ok(self
            .conn()
            .row(
                &format!("SELECT {} FROM runs WHERE id = ?1", self.run_columns()),
                [id],
                run_record,
            )
            .optional()?)
    }

    /// The run `id`, or an error saying how to list the runs.
    pub fn existing_run(&self, id: &str) -> Result<RunRecord> {
        self.run(id)?.with_context(|| {
            format!(
                "there is no run `{id}` in `{}`; list the runs with `loopbox runs`",
                self.path.display()
            )
        })
    }

    /// Take the run for this process. `Err` names the live process that holds it.
    pub fn acquire(&self, id: &str) -> Result<Result<(), Owner>> {
        let me = Owner::me();
        self.write("take the run", |tx| {
            let lease: Option<String> =
                tx.row("SELECT lease FROM runs WHERE id = ?1", [id], |r| r.get(0))?;
            if let Some(holder) = lease.as_deref().and_then(Owner::parse)
                && holder != me
                && holder.is_alive()
            {
                return Ok(Err(holder));
            }
            tx.exec(
                "UPDATE runs SET lease = ?2, status = ?3, updated_at = ?4 WHERE id = ?1",
                params![id, me.to_string(), RunStatus::Running, now_ms()],
            )?;
            Ok(Ok(()))
        })
    }

    /// Runs left `running` by a driver that is gone, now marked `interrupted`.
    /// Only `running` runs are read (through the `runs_by_status` index), so
    /// this costs the same with 50,000 finished runs in the store as with none.
    pub fn find_interrupted(&self) -> Result<Vec<RunRecord>> {
        let dead: Vec<RunRecord> = self
            .running_runs()?
            .into_iter()
            .filter(|r| r.lease.as_ref().is_some_and(|o| !o.is_alive()))
            .collect();
        for r in &dead {
            self.write("mark the run interrupted", |tx| {
                tx.exec(
                    "UPDATE runs SET status = ?3 WHERE id = ?1 AND status = ?4 AND lease = ?2",
                    params![
                        r.id,
                        r.lease.as_ref().map(Owner::to_string),
                        RunStatus::Interrupted,
                        RunStatus::Running
                    ],
                )?;
                Ok(())
            })?;
        }
        Ok(dead
            .into_iter()
            .map(|r| RunRecord {
                status: RunStatus::Interrupted,
                ..r
            })
            .collect())
    }

    /// The runs whose status is `running`, oldest first.
    fn running_runs(&self) -> Result<Vec<RunRecord>> {
        let c = self.conn();
        let mut stmt = c.prepare_cached(&runs_with_status_sql(self.run_columns()))?;
        let rows = stmt
            .query_map([RunStatus::Running], run_record)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Record that the run continues with a changed policy (`--allow-policy-change`).
    /// Pin `grants` as the run's grants from now on.
    pub fn set_pinned_grants(&self, id: &str, grants: &serde_json::Value) -> Result<()> {
        let mut options = self.existing_run(id)?.options;
        options.grants = Some(grants.clone());
        let options = serde_json::to_string(&options)?;
        self.write("pin the run's grants", |tx| {
            tx.exec(
                "UPDATE runs SET options = ?2 WHERE id = ?1",
                params![id, options],
            )?;
            Ok(())
        })
    }

    pub fn set_policy_digest(&self, id: &str, digest: &str) -> Result<()> {
        self.write("record the new policy digest", |tx| {
            tx.exec(
                "UPDATE runs SET policy_digest = ?2 WHERE id = ?1",
                params![id, digest],
            )?;
            Ok(())
        })
    }

    /// Ask the run's driver to stop at its next step.
    pub fn request_cancel(&self, id: &str) -> Result<()> {
        self.write("ask the run to stop", |tx| {
            tx.exec(
                "UPDATE runs SET cancel = 1, updated_at = ?2 WHERE id = ?1",
                params![id, now_ms()],
            )?;
            Ok(())
        })
    }

    /// What the last resume of run `id` asked of its next drive (JSON, see
    /// `serve::sched::Continue`), until [`Db::clear_resume_with`].
    pub fn resume_with(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .row("SELECT resume_with FROM runs WHERE id = ?1", [id], |r| {
                r.get::<_, Option<String>>(0)
            })?)
    }

    /// Forget what the last resume asked: the drive that took the run has it,
    /// and a later change must be accepted anew.
    pub fn clear_resume_with(&self, id: &str) -> Result<()> {
        // Fenced: a worker whose claim was taken over cannot drop the choices
        // of a resume its successor is to act on.
        self.write_run(id, "forget the resume's choices", |tx| {
            tx.exec(
                "UPDATE runs SET resume_with = NULL WHERE id = ?1 AND resume_with IS NOT NULL",
                params![id],
            )?;
            Ok(())
        })
    }

    pub fn cancel_requested(&self, id: &str) -> Result<bool> {
        Ok(self
            .conn()
            .row("SELECT cancel FROM runs WHERE id = ?1", [id], |r| {
                r.get::<_, i64>(0)
            })?
            != 0)
    }

    /// The messages of an agent conversation (JSON), if it exists.
    /// The messages of agent conversation `session`, as run `run` may see it:
    /// conversations belong to the tenant whose run began them (a run without a
    /// tenant, one user's own, sees those without one), so a policy that learns
    /// another tenant's session id still finds nothing there.
    pub fn conversation(&self, run: Option<&str>, session: &str) -> Result<Option<String>> {
        let c = self.conn();
        let key = self.conversation_key(&c, run, session)?;
        Ok(c.row(
            "SELECT messages FROM agent_conversations WHERE session = ?1",
            [&key],
            |r| r.get(0),
        )
        .optional()?)
    }

    /// Where `session` of `run`'s tenant is kept: the id itself, after the
    /// tenant's name when the run has one (tenant names have no `/`).
    fn conversation_key(
        &self,
        c: &super::Conn,
        run: Option<&str>,
        session: &str,
    ) -> Result<String> {
        let tenant: Option<String> = match run {
            Some(run) => c
                .row("SELECT tenant FROM runs WHERE id = ?1", [run], |r| r.get(0))
                .optional()?
                .flatten(),
            None => None,
        };
        Ok(match tenant {
            Some(t) => format!("{t}/{session}"),
            None => session.to_string(),
        })
    }

    /// Keep the conversation `session` as `messages`. Saved for `run` (the run
    /// whose agent turn it was), the write is fenced as the run's others are:
    /// a worker that lost the run's lease keeps nothing of a turn it finished late.
    pub fn save_conversation(
        &self,
        run: Option<&str>,
        session: &str,
        messages: &str,
    ) -> Result<()> {
        let save = |tx: &super::Conn| {
            let key = self.conversation_key(tx, run, session)?;
            tx.exec(
                "INSERT INTO agent_conversations (session, messages, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at",
                params![key, messages, now_ms()],
            )?;
            Ok(())
        };
        match run {
            Some(run) => self.write_run(run, "save the agent conversation", save),
            None => self.write("save the agent conversation", save),
        }
    }
}
