//! `/api/v1/runs`: start a run, list and show runs, follow a run's log, and
//! answer, tick, cancel and resume one. Another tenant's run does not exist
//! for the caller (404). Every act is audited with its outcome; one refused
//! changes nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{Acting, Authed, Q};
use super::refusal::{Asked, recorded, refuse, require};
use crate::bindings::Decision;
use crate::db::audit::{AuditEntry, Refused};
use crate::db::{Db, NewRun, RunPlace, RunRecord, RunStatus};
use crate::run::driver::{Next, resume_point};
use crate::run::launch::{Launch, LaunchError};
use crate::run::lifecycle;
use crate::run::trust::Trust;
use crate::serve::Server;
use crate::serve::auth::{Caller, Role};
use crate::serve::sched::Continue;
use crate::serve::store::{InboxKind, RunFilter, put_inbox};
use crate::serve::tenancy::Served;
use crate::ui::rfc3339;

/// `run`, if it is the caller's tenant's; otherwise the same 404 as a run that does not exist.
pub fn own_run(db: &Db, caller: &Caller, id: &str) -> ApiResult<RunRecord> {
    match db.run(id)? {
        Some(r) if r.place.tenant.as_deref() == Some(caller.tenant.as_str()) => Ok(r),
        _ => Err(ApiError::not_found(format!(
            "there is no run `{}`; list the runs with GET /api/v1/runs",
            crate::ui::one_line(id)
        ))),
    }
}

fn refused(r: Refused) -> ApiError {
    ApiError::conflict(r.0)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    policy: Option<String>,
    before: Option<String>,
    limit: Option<usize>,
}

pub async fn list(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Q(q): Q<ListQuery>,
) -> ApiResult<Json<Value>> {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<RunStatus>().map_err(ApiError::bad_request)?),
        None => None,
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let rows = server
        .store
        .runs(
            &caller.tenant,
            &RunFilter {
                status,
                policy: q.policy.filter(|p| !p.is_empty()),
                before: q.before.filter(|b| !b.is_empty()),
                limit,
            },
        )
        .map_err(|e| {
            if crate::db::is_store_error(&e) {
                ApiError::internal(e)
            } else {
                ApiError::bad_request(format!("{e:#}"))
            }
        })?;
    let next = (rows.len() == limit)
        .then(|| rows.last().map(|r| r.id.clone()))
        .flatten();
    let runs: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                // A YAML loop's run goes by its loop's name.
                "id": r.id, "policy": r.policy, "policy_name": r.loop_name.as_ref().or(r.policy_name.as_ref()),
                "loop": r.loop_name, "status": r.status,
                "started": rfc3339(r.created_at_ms), "updated": rfc3339(r.updated_at_ms),
                "turns": r.turns, "actions": r.actions, "workspace": r.workspace,
                "started_by": r.started_by, "summary": r.summary, "spend": r.spent.json(),
                "last_event": r.last_event, "wakes": r.wake_at_ms.map(rfc3339),
            })
        })
        .collect();
    Ok(Json(json!({"runs": runs, "next": next})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// An installed policy of the tenant: `[policies.NAME]` of its loopbox.toml.
    policy: Option<String>,
    /// A YAML loop file in the workspace.
    #[serde(rename = "loop")]
    loop_file: Option<String>,
    /// Absolute, or relative to the tenant's first root.
    workspace: String,
    /// The start input: JSON, or (a string) its text.
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    max_turns: Option<u32>,
}

fn launch_error(e: LaunchError) -> ApiError {
    match e.kind {
        crate::run::launch::Failed::Usage | crate::run::launch::Failed::Changed => {
            ApiError::usage(e.error)
        }
        crate::run::launch::Failed::Internal => ApiError::internal(e.error),
    }
}

/// The start input as text: a string as it is, anything else as JSON.
fn input_text(input: Option<Value>) -> String {
    match input {
        None => "{}".to_string(),
        Some(Value::String(s)) => s,
        Some(v) => v.to_string(),
    }
}

pub async fn start(
    State(server): State<Arc<Server>>,
    a: Acting<StartBody>,
) -> ApiResult<impl IntoResponse> {
    let target = a
        .body
        .policy
        .clone()
        .or_else(|| a.body.loop_file.clone())
        .unwrap_or_default();
    let asked = Asked {
        act: "start",
        target: &target,
    };
    require(&server, &a.caller, Role::Operator, "start a run", asked)?;
    if server.is_stopping() {
        return Err(ApiError::unavailable(
            "the server is stopping and takes no new runs; start it again later",
        ));
    }
    // Loading a policy can take a core and tens of MB: a few starts at a time, the rest wait.
    let _slot = server
        .start_slots
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the server is stopping"))?;
    let caller = a.caller.clone();
    let started = {
        let server = server.clone();
        tokio::task::spawn_blocking(move || start_blocking(&server, &a.caller, a.body))
            .await
            .map_err(|e| ApiError::internal(anyhow::anyhow!("starting the run failed: {e}")))?
    };
    // A refused start is recorded (a quota's 429 is, with the run's name, where it is refused).
    let started = recorded(&server, &caller, asked, &[429], started)?;
    Ok((StatusCode::CREATED, Json(started)))
}

/// Put the run together as `loopbox run` would (config, policy, grants,
/// input), load its policy (a refusal is the caller's 400 now, not a failed
/// run later), and record it queued, audited.
fn start_blocking(server: &Arc<Server>, caller: &Caller, body: StartBody) -> ApiResult<Value> {
    let tenant = server.tenants.named(&caller.tenant)?.clone();
    let workspace = tenant.workspace(&body.workspace).map_err(ApiError::usage)?;
    let launch = match (&body.policy, &body.loop_file) {
        (Some(name), None) => {
            if !crate::serve::config::valid_name(name) {
                return Err(ApiError::bad_request(format!(
                    "`{}` is not the name of an installed policy; a run starts a policy its tenant installed as [policies.NAME], or a YAML loop (`loop`)",
                    crate::ui::one_line(name)
                )));
            }
            Launch::new(&workspace, name)
        }
        (None, Some(_)) => Launch::yaml_loop(&workspace),
        _ => {
            return Err(ApiError::bad_request(
                "give either `policy` (the NAME of a [policies.NAME] of the tenant) or `loop` (a YAML loop file in the workspace)",
            ));
        }
    };
    // The tenant's config, its policies only, within its bounds.
    let served = Served {
        server,
        tenant: &tenant,
    };
    let trust = Trust::TenantConfig(&served);
    let mut prepared =
        lifecycle::start(&trust, launch.max_turns(body.max_turns)).map_err(launch_error)?;
    let id = crate::run::new_run_id();
    let input = match &body.loop_file {
        Some(file) => {
            // Inside the workspace, as the loop's own imports are read: no `..`,
            // no link out of it, nothing the tenant's config hides.
            let lf = crate::loops::read_in(&workspace, file, &prepared.config)
                .map_err(|e| ApiError::bad_request(format!("{e:#}")))?;
            let lp = crate::loops::load(&workspace, &lf, &prepared.config).map_err(|problems| {
                ApiError::bad_request(format!(
                    "the loop has {} problem(s):\n{}",
                    problems.len(),
                    loopbox_fsm::render(&problems)
                ))
            })?;
            let run_dir = crate::loops::run_dir(&id);
            // `${env.NAME}`: what the tenant's config passes its commands, with
            // the values the tenant was given (never the server's environment).
            let env = crate::loops::served_env(
                &lp,
                &prepared.config.shell,
                &crate::exec::child_env::HostEnv::Given(std::sync::Arc::new(tenant.env.clone())),
            )
            .map_err(ApiError::usage)?;
            let payload = crate::loops::payload_delayed(
                &lp,
                &lf,
                &input_text(body.input),
                &run_dir,
                &workspace,
                None,
                None,
                env,
                // A served run waits for its answer over the API (the server
                // has no terminal), unless the tenant's config declines.
                crate::loops::asks(&prepared.config, false),
            )
            .map_err(ApiError::usage)?;
            crate::loops::create_run_dir(&workspace, &run_dir).map_err(ApiError::usage)?;
            prepared.options.loop_name = Some(lp.name.clone());
            payload
        }
        None => {
            let text = input_text(body.input);
            serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .map_err(|e| ApiError::bad_request(format!("the input is not valid JSON: {e}")))?;
            // An installed `builtin:fsm` runs the loop its input carries: without
            // one it could only fail once queued, so it is refused here.
            if crate::run::launch::is_yaml_loop(&prepared.source)
                && let Err(why) = loopbox_fsm::start::parse(&text)
            {
                return Err(ApiError::bad_request(format!(
                    "policy `{}` is builtin:fsm, the YAML loop interpreter, which runs the loop its input carries: {why}. \
                     Start a loop file of the workspace with {{\"loop\": \"FILE.yaml\", \"workspace\": \"{}\"}} instead, \
                     or give `input` as {{\"yaml\": \"THE LOOP'S TEXT\", \"context\": {{...}}}}",
                    crate::ui::one_line(body.policy.as_deref().unwrap_or_default()),
                    crate::ui::one_line(&body.workspace)
                )));
            }
            text
        }
    };
    let policy = prepared.load_with(&server.runtime).map_err(launch_error)?;
    let shown = prepared.shown();
    let _one_at_a_time = server.start_lock.blocking_lock();
    // The queue in memory: a run the scheduler took is no longer waiting, though
    // the store says `queued` until its driver holds it.
    let queued = if server.data.is_shared() {
        server.store.queued_runs(&tenant.name)?
    } else {
        server.queue.queued(&tenant.name)
    };
    if queued >= u64::from(tenant.max_queued) {
        let why = format!(
            "tenant `{}` has {queued} runs queued (tenants.{}.max_queued = {}); wait for some to start, or cancel some",
            tenant.name, tenant.name, tenant.max_queued
        );
        server.store.db().audit_note(&AuditEntry {
            actor: caller.actor(),
            tenant: Some(tenant.name.clone()),
            act: "start".into(),
            target: shown.clone(),
            outcome: format!("refused: {why}"),
            ..Default::default()
        })?;
        return Err(ApiError::quota(why));
    }
    let place = RunPlace {
        tenant: Some(tenant.name.clone()),
        workspace: Some(workspace.clone()),
        started_by: Some(caller.actor()),
    };
    server.store.db().create_queued_run(
        NewRun {
            id: &id,
            policy: &shown,
            digest: &policy.digest,
            input: &input,
            options: &prepared.options,
            place: &place,
            status: RunStatus::Queued,
        },
        &AuditEntry {
            actor: caller.actor(),
            tenant: Some(tenant.name.clone()),
            act: "start".into(),
            target: id.clone(),
            digest: Some(policy.digest.clone()),
            detail: Some(json!({"policy": shown, "workspace": workspace}).to_string()),
            ..Default::default()
        },
    )?;
    server.queue.push(&id, &tenant.name, Continue::default());
    Ok(json!({
        "id": id, "status": RunStatus::Queued, "policy": shown, "policy_digest": policy.digest,
        "workspace": workspace, "grants": crate::run::launch::grant_set(&prepared.options),
    }))
}

/// Text from the store as JSON when it is whole JSON, else as the text itself,
/// marked when it was cut (`len` is its whole length).
fn shown(text: &str, len: i64) -> Value {
    if (text.len() as i64) < len {
        return Value::String(format!("{text}… ({len} bytes in all)"));
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
}

fn parsed(t: &str) -> Value {
    shown(t, t.len() as i64)
}

/// The values a served loop's `${env.NAME}` reads are kept in its start input
/// (it is journaled, to replay the run) and are the tenant's credentials: the
/// run's view shows each as hidden, to every role, wherever it appears (the
/// input, the start event, the state), also in text cut short.
struct EnvValues(Vec<String>);

impl EnvValues {
    fn of(input: &str) -> EnvValues {
        let v: Value = serde_json::from_str(input).unwrap_or(Value::Null);
        let mut values: Vec<String> = v["env"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        // Longest first, so a value inside another is not left half shown.
        values.sort_by_key(|s| std::cmp::Reverse(s.len()));
        EnvValues(values)
    }

    fn hide(&self, v: Value) -> Value {
        if self.0.is_empty() {
            return v;
        }
        match v {
            Value::String(s) => {
                let mut s = s;
                for secret in &self.0 {
                    s = s.replace(secret.as_str(), HIDDEN);
                }
                Value::String(s)
            }
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.hide(x)).collect()),
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, x)| (k, self.hide(x))).collect())
            }
            other => other,
        }
    }
}

const HIDDEN: &str = "(hidden: a value the tenant's config passes)";

/// One run, read in a handful of indexed queries and bounded whatever the run
/// holds: its latest 500 events and actions, text cut at 4 KiB.
pub async fn show(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let db = server.store.db();
    let run = own_run(db, &caller, &id)?;
    let (events, events_total) = server.store.event_views(&run.id)?;
    let (actions, actions_total) = server.store.action_views(&run.id)?;
    let state = server.store.state(&run.id)?;
    let env = EnvValues::of(&run.input);
    let approvals = db.approvals(&crate::db::approvals::ApprovalFilter {
        tenant: Some(caller.tenant.clone()),
        run: Some(run.id.clone()),
        status: None,
        limit: 100,
    })?;
    let driven = server.queue.is_running(&run.id) || held_by_worker(&server, &run);
    let charges = db.charges(&run.id)?;
    let network = db.connections(&run.id)?;
    let (marks, marks_total) = db.marks(&run.id)?;
    let entered = crate::loops::view::entered(&marks);
    let the_loop = crate::loops::view::loop_json(
        &run.policy,
        &run.options,
        &run.input,
        run.outcome.as_deref(),
        &entered.0,
        marks_total > marks.len() as i64,
    );
    let journal: Vec<Value> = actions
        .iter()
        .map(|a| {
            let placed = crate::loops::view::around(
                &entered,
                crate::loops::view::ended_in(the_loop.as_ref()),
                a.event,
                a.seq,
            );
            let request = shown(&a.request, a.request_bytes);
            let outcome = match (a.done, a.error_kind.as_deref()) {
                (false, _) if driven => "running",
                (false, _) | (true, Some("outcome-unknown")) => "unknown",
                (true, Some(_)) => "error",
                (true, None) => "ok",
            };
            json!({
                "event": a.event, "seq": a.seq, "kind": a.kind,
                "command": crate::loops::view::command(&request), "request": request, "outcome": outcome,
                "state": placed.state, "verdict": placed.verdict, "then": placed.then,
                "exit_code": a.exit_code, "duration_ms": a.duration_ms, "timed_out": a.timed_out,
                "stdout": a.stdout, "stderr": a.stderr,
                "error": a.error_kind.as_ref().map(|k| json!({"kind": k, "message": a.error})),
                "started": rfc3339(a.at_ms), "ended": a.done_at_ms.map(rfc3339),
            })
        })
        .collect();
    let text = |t: &Option<(String, i64)>| t.as_ref().map(|(t, n)| shown(t, *n));
    Ok(Json(json!({
        "id": run.id, "tenant": run.place.tenant, "workspace": run.place.workspace,
        "started_by": run.place.started_by,
        "policy": run.policy, "policy_name": crate::loops::view::shown_name(&run.options),
        "loop": the_loop, "policy_digest": run.policy_digest,
        "status": run.status, "driven": driven,
        "grants": crate::run::launch::grant_set(&run.options),
        "pinned_grants": run.options.grants,
        "started": rfc3339(run.created_at_ms), "updated": rfc3339(run.updated_at_ms),
        "turns": run.turns, "actions": run.actions, "prompts": run.prompts,
        "spend": run.spent.json(),
        "agent_turns": charges.iter().map(|c| json!({
            "event": c.event_seq, "seq": c.seq, "kind": c.kind, "at": rfc3339(c.at_ms),
            "model": c.charge.model, "tokens": c.charge.tokens, "cost_usd": c.charge.cost_usd,
            "cost_source": c.charge.source, "unmetered": c.charge.unmetered,
        })).collect::<Vec<_>>(),
        "outcome": run.outcome.as_deref().map(|o| env.hide(parsed(o))), "input": env.hide(parsed(&run.input)),
        "cancel_requested": run.cancel_requested,
        "wakes": db.wake_at(&run.id)?.map(rfc3339),
        "events_total": events_total,
        "events": events.iter().map(|e| json!({
            "seq": e.seq, "at": rfc3339(e.at_ms), "event": env.hide(shown(&e.event.0, e.event.1)),
            "decision": text(&e.decision), "error": text(&e.error), "pending": e.pending,
        })).collect::<Vec<_>>(),
        "journal_total": actions_total,
        "journal": env.hide(Value::Array(journal)),
        "network": network.iter().rev().take(1000).rev().map(|c| json!({
            "at": rfc3339(c.at_ms), "side": c.side, "host": c.host, "port": c.port,
            "address": c.address, "allowed": c.allowed, "rule": c.rule,
            "bytes_out": c.bytes_out, "bytes_in": c.bytes_in, "ms": c.ms,
        })).collect::<Vec<_>>(),
        "state": state.into_iter().map(|(k, v, n)| (k, env.hide(shown(&v, n)))).collect::<serde_json::Map<_, _>>(),
        "approvals": approvals.iter().map(super::approvals::view).collect::<Vec<_>>(),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    after: Option<i64>,
    /// `false`: the lines written so far, then the stream ends (`loopbox runs log`
    /// without `--follow`); else it goes on until the run ends.
    follow: Option<bool>,
}

/// How often a log stream looks for new lines.
const LOG_POLL: Duration = Duration::from_millis(200);
/// How often a quiet log stream checks that its caller may still read it.
const STREAM_RECHECK: Duration = Duration::from_secs(1);

/// The run's log as Server-Sent Events (`event: log`, `id:` the line's number,
/// `data:` the line as JSON), from after `?after=N` or the `Last-Event-ID` a
/// reconnecting client sends; `event: end` once the run has ended and every line was sent.
pub async fn log(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Path(id): Path<String>,
    Q(q): Q<LogQuery>,
    headers: HeaderMap,
) -> ApiResult<impl IntoResponse> {
    let run = own_run(server.store.db(), &caller, &id)?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or(q.after)
        .unwrap_or(0);
    let follow = q.follow.unwrap_or(true);
    let tenant = server
        .tenants
        .get(&caller.tenant)
        .map_or(0, |t| t.max_log_streams);
    let own_slot = server
        .tenant_streams
        .get(&caller.tenant)
        .and_then(|s| s.clone().try_acquire_owned().ok())
        .ok_or_else(|| {
            ApiError::quota(format!(
                "tenant `{0}` holds {1} log streams open, its limit (tenants.{0}.max_log_streams = {1}); close one, or try again later",
                caller.tenant, tenant
            ))
        })?;
    let slot = server.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::quota(format!(
            "{} log streams are open, the server's limit (server.max_log_streams = {}); close one, or try again later",
            server.settings.max_log_streams, server.settings.max_log_streams
        ))
    })?;
    // A connection of its own: streams never wait on the acts' writes.
    let db = server.data.open_db_read_only()?;
    struct Follow {
        db: Db,
        run: String,
        seen: i64,
        ended: bool,
        pending: std::collections::VecDeque<SseEvent>,
        _slot: tokio::sync::OwnedSemaphorePermit,
        _own_slot: tokio::sync::OwnedSemaphorePermit,
        /// The request's credentials, checked again as the stream goes on: a
        /// revoked token (or an ended session) gets no line after its end.
        server: Arc<Server>,
        headers: HeaderMap,
        checked: std::time::Instant,
        follow: bool,
    }
    let state = Follow {
        db,
        run: run.id,
        seen: after,
        ended: false,
        pending: Default::default(),
        _slot: slot,
        _own_slot: own_slot,
        server: server.clone(),
        headers,
        checked: std::time::Instant::now(),
        follow,
    };
    let stream = futures_util::stream::unfold(state, |mut f| async move {
        loop {
            if let Some(e) = f.pending.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(e), f));
            }
            if f.ended {
                return None;
            }
            // Read the status first: lines written before it ended are all in the read after.
            let status = f.db.run(&f.run).ok().flatten().map(|r| r.status);
            let read = f.db.log_after(&f.run, f.seen);
            // Before lines go out, and once a second while none do: is the caller still signed in?
            let has_lines = read.as_ref().is_ok_and(|l| !l.is_empty());
            if has_lines || f.checked.elapsed() >= STREAM_RECHECK {
                if let Err(e) = super::extract::authenticate(&f.headers, &f.server) {
                    f.pending.push_back(
                        SseEvent::default()
                            .event("error")
                            .data(json!({"error": e.error}).to_string()),
                    );
                    f.ended = true;
                    continue;
                }
                f.checked = std::time::Instant::now();
            }
            match read {
                Ok(lines) => {
                    for (seq, l) in lines {
                        f.seen = seq;
                        let data = json!({"seq": seq, "at": rfc3339(l.at_ms), "level": l.level, "source": l.source, "message": l.message});
                        f.pending.push_back(
                            SseEvent::default()
                                .event("log")
                                .id(seq.to_string())
                                .data(data.to_string()),
                        );
                    }
                }
                Err(_) => f.ended = true,
            }
            match status {
                Some(s) if s.is_final() => {
                    f.pending.push_back(
                        SseEvent::default()
                            .event("end")
                            .data(json!({"status": s}).to_string()),
                    );
                    f.ended = true;
                }
                None => f.ended = true,
                // Not following: the lines so far were all there is to send.
                _ if !f.follow => f.ended = true,
                _ => {}
            }
            if f.pending.is_empty() && !f.ended {
                tokio::time::sleep(LOG_POLL).await;
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TickBody {
    /// Any JSON value; a string is taken as JSON text.
    payload: Value,
}

/// Why a run cannot take `what` now, in the CLI's words with the API's ways.
fn not_waiting(id: &str, what: &str, next: &Next) -> String {
    let why = match next {
        Next::Act {
            decision: Decision::Ask(_),
            ..
        } => format!("it waits for an answer: POST /api/v1/runs/{id}/answer"),
        Next::Act {
            decision: Decision::Pass,
            after_turn: false,
            ..
        } => format!("it waits for a tick: POST /api/v1/runs/{id}/tick"),
        Next::Redeliver { .. } => {
            format!("it is handling an event (or waits for an approval): see GET /api/v1/runs/{id}")
        }
        _ => format!("see GET /api/v1/runs/{id}"),
    };
    format!("run {id} is not waiting for {what}; {why}")
}

/// Accept an answer or a tick for a waiting run: kept in its inbox and the
/// run queued, in one audited transaction, if the run still stands where it
/// was seen.
fn deliver(
    server: &Arc<Server>,
    caller: &Caller,
    id: &str,
    kind: InboxKind,
    payload: String,
) -> ApiResult<Value> {
    let db = server.store.db();
    let run = own_run(db, caller, id)?;
    let (what, act) = match kind {
        InboxKind::Answer => ("an answer", "answer"),
        InboxKind::Tick => ("a tick", "tick"),
    };
    if run.status != RunStatus::Waiting {
        let why = if run.status.is_final() {
            format!(
                "run {id} already ended ({}); there is nothing to continue",
                run.status
            )
        } else {
            format!("run {id} is not waiting for {what}: it is {}", run.status)
        };
        return Err(ApiError::conflict(why));
    }
    let next = resume_point(db, &run)?;
    let fits = crate::serve::sched::takes(&next, kind);
    if !fits {
        return Err(ApiError::conflict(not_waiting(id, what, &next)));
    }
    let seq = match next {
        Next::Act { seq, .. } => seq,
        _ => unreachable!("checked above"),
    };
    let done = server.store.run_act(
        &caller.actor(),
        &caller.tenant,
        act,
        id,
        Some(json!({"bytes": payload.len()})),
        |tx| {
            let moved = tx.execute(
                "UPDATE runs SET status = 'queued', updated_at = ?2 WHERE id = ?1 AND status = 'waiting'
                 AND (SELECT MAX(seq) FROM events WHERE run_id = ?1) = ?3",
                crate::db::engine::params![id, crate::db::now_ms(), seq],
            )?;
            if moved == 0 {
                return Ok(Err(Refused(format!(
                    "run {id} moved on while {what} was sent; see GET /api/v1/runs/{id}"
                ))));
            }
            put_inbox(tx, id, seq, kind, &payload)?;
            Ok(Ok(()))
        },
    )?;
    done.map_err(refused)?;
    server.queue.push(id, &caller.tenant, Continue::default());
    Ok(json!({"id": id, "status": RunStatus::Queued}))
}

pub async fn answer(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<AnswerBody>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "answer",
        target: &id,
    };
    require(&server, &a.caller, Role::Operator, "answer a run", asked)?;
    // A YAML loop asks only its `human_approval` states' questions, whose
    // answer is a verdict on what the loop does next: an approver's to give,
    // as an approval's decision is.
    let run = own_run(server.store.db(), &a.caller, &id)?;
    if run.policy == crate::loops::FSM {
        require(
            &server,
            &a.caller,
            Role::Approver,
            "answer a YAML loop's human_approval question (approve, reject or edit what it does next)",
            asked,
        )?;
        // And, as for an approval, not the run's starter under `approvals.self = false`.
        let config = server
            .config_file(&a.caller.tenant)
            .and_then(|p| crate::config::Config::load(&p))
            .map_err(ApiError::usage)?;
        if !config.approvals.allow_self
            && run.place.started_by.as_deref() == Some(&a.caller.actor())
        {
            let e = ApiError::conflict(format!(
                "approvals.self = false: {} started run {id}, so someone else must answer its human_approval question",
                a.caller.actor()
            ));
            return Err(refuse(&server, &a.caller, asked, None, e));
        }
    }
    Ok(Json(deliver(
        &server,
        &a.caller,
        &id,
        InboxKind::Answer,
        a.body.text,
    )?))
}

pub async fn tick(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<TickBody>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "tick",
        target: &id,
    };
    require(&server, &a.caller, Role::Operator, "tick a run", asked)?;
    let payload = match a.body.payload {
        Value::String(s) => {
            serde_json::from_str::<serde::de::IgnoredAny>(&s).map_err(|e| {
                let e = ApiError::bad_request(format!("the tick is not valid JSON: {e}"));
                refuse(&server, &a.caller, asked, None, e)
            })?;
            s
        }
        v => v.to_string(),
    };
    Ok(Json(deliver(
        &server,
        &a.caller,
        &id,
        InboxKind::Tick,
        payload,
    )?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

pub async fn cancel(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<Nothing>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "cancel",
        target: &id,
    };
    require(&server, &a.caller, Role::Operator, "cancel a run", asked)?;
    let db = server.store.db();
    let run = own_run(db, &a.caller, &id)?;
    let in_process = server.queue.is_running(&id);
    let mut by_worker = false;
    let done = server.store.run_act(&a.caller.actor(), &a.caller.tenant, "cancel", &id, None, |tx| {
        let (status, expires): (RunStatus, Option<i64>) = tx.query_row(
            "SELECT status, lease_expires FROM runs WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        // A worker whose lease is live drives it (a shared store): it sees the
        // request at its next look, kills the command and ends the run itself,
        // journaling the action's outcome before the run's end. Ended here
        // instead, the run read `cancelled` while its command still ran.
        by_worker = status == RunStatus::Running && expires.is_some_and(|e| e > crate::db::now_ms());
        let driven = in_process || by_worker;
        if status.is_final() {
            return Ok(Err(Refused(format!(
                "run {id} already ended ({status}); there is nothing to cancel"
            ))));
        }
        tx.execute(
            "UPDATE runs SET cancel = 1, updated_at = ?2 WHERE id = ?1",
            crate::db::engine::params![id, crate::db::now_ms()],
        )?;
        // Nobody drives it: it ends here. A driven run ends at its next step.
        if !driven {
            tx.execute(
                "UPDATE runs SET status = 'cancelled', lease = NULL WHERE id = ?1 AND status IN ('queued', 'waiting', 'interrupted', 'running')",
                [&id],
            )?;
            tx.execute("DELETE FROM serve_inbox WHERE run_id = ?1", [&id])?;
        }
        Ok(Ok(()))
    })?;
    done.map_err(refused)?;
    server.queue.remove(&id);
    let mut status = db.existing_run(&run.id)?.status;
    if by_worker {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !status.is_final() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            status = db.existing_run(&run.id)?.status;
        }
    } else if server
        .queue
        .stop(&id, crate::limits::stop::StopReason::Cancelled)
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while server.queue.is_running(&id) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        status = db.existing_run(&run.id)?.status;
    }
    Ok(Json(json!({"id": id, "status": status})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResumeBody {
    resend_turn: bool,
    allow_policy_change: bool,
    accept_config_change: bool,
}

pub async fn resume(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<ResumeBody>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "resume",
        target: &id,
    };
    require(&server, &a.caller, Role::Operator, "resume a run", asked)?;
    if server.is_stopping() {
        return Err(ApiError::unavailable(
            "the server is stopping and takes no runs; it resumes its runs when it starts again",
        ));
    }
    own_run(server.store.db(), &a.caller, &id)?;
    let b = a.body;
    let detail = json!({"resend_turn": b.resend_turn, "allow_policy_change": b.allow_policy_change, "accept_config_change": b.accept_config_change});
    let how = Continue {
        resend_turn: b.resend_turn,
        allow_policy_change: b.allow_policy_change,
        accept_config_change: b.accept_config_change,
    };
    // Recorded with the run, in the act that queues it: on a shared store the
    // worker that claims it reads it there (and a restarted server finds it).
    let recorded = if how.asks() {
        Some(serde_json::to_string(&how).map_err(anyhow::Error::from)?)
    } else {
        None
    };
    let done = server.store.run_act(&a.caller.actor(), &a.caller.tenant, "resume", &id, Some(detail), |tx| {
        let status: RunStatus = tx.query_row("SELECT status FROM runs WHERE id = ?1", [&id], |r| r.get(0))?;
        let why = match status {
            RunStatus::Interrupted => None,
            s if s.is_final() => Some(format!("run {id} already ended ({s}); there is nothing to continue")),
            RunStatus::Waiting => Some(format!(
                "run {id} is waiting (for an answer, a tick or an approval), not interrupted; see GET /api/v1/runs/{id}"
            )),
            s => Some(format!("run {id} is {s}, not interrupted: the server is on it already")),
        };
        if let Some(why) = why {
            return Ok(Err(Refused(why)));
        }
        tx.execute(
            "UPDATE runs SET status = 'queued', updated_at = ?2, resume_with = ?3 WHERE id = ?1 AND status = 'interrupted'",
            crate::db::engine::params![id, crate::db::now_ms(), recorded.clone()],
        )?;
        Ok(Ok(()))
    })?;
    done.map_err(refused)?;
    server.queue.push(&id, &a.caller.tenant, how);
    Ok(Json(json!({"id": id, "status": RunStatus::Queued})))
}

/// Whether a `loopbox worker` drives `run` (a shared store): it is running
/// under a lease, which a live worker renews every TTL/3.
fn held_by_worker(server: &Server, run: &RunRecord) -> bool {
    server.data.is_shared() && run.status == RunStatus::Running && run.lease.is_some()
}
