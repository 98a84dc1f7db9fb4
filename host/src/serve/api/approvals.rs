//! `/api/v1/approvals`: the tenant's approvals (pending ones first to decide),
//! one approval with the exact request it is bound to, and deciding one. A
//! decision names the digest of the request the approver reviewed: a request
//! that changed since is refused, as is a decided one, and one's own run's
//! when `approvals.self = false`. An approved action's run is queued at once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{Acting, Authed, Q};
use super::refusal::{Asked, refuse, require};
use crate::db::RunStatus;
use crate::db::approvals::{Approval, ApprovalFilter, ApprovalStatus, Decide, Verdict};
use crate::serve::Server;
use crate::serve::auth::{Caller, Role};
use crate::serve::sched::Continue;
use crate::ui::rfc3339;

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "there is no approval `{}`; list them with GET /api/v1/approvals",
        crate::ui::one_line(id)
    ))
}

/// `id`, if it belongs to a run of the caller's tenant; otherwise 404.
fn own(server: &Server, caller: &Caller, id: &str) -> ApiResult<Approval> {
    let db = server.store.db();
    let a = db.approval(id)?.ok_or_else(|| not_found(id))?;
    match db.run(&a.run_id)? {
        Some(r) if r.place.tenant.as_deref() == Some(caller.tenant.as_str()) => Ok(a),
        _ => Err(not_found(id)),
    }
}

/// An approval as the API shows it: its times RFC 3339 UTC, as every time
/// of the API (`requested`, `deadline`, `decided`, `consumed`), not the
/// store's milliseconds.
pub fn view(a: &Approval) -> Value {
    let mut v = serde_json::to_value(a).unwrap_or_default();
    if let Value::Object(o) = &mut v {
        for (ms, name) in [
            ("requested_at_ms", "requested"),
            ("deadline_ms", "deadline"),
            ("decided_at_ms", "decided"),
            ("consumed_at_ms", "consumed"),
        ] {
            let at = o.remove(ms).and_then(|t| t.as_i64());
            o.insert(name.into(), json!(at.map(rfc3339)));
        }
    }
    v
}

fn status_of(text: &str) -> ApiResult<ApprovalStatus> {
    [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::Void,
    ]
    .into_iter()
    .find(|s| s.as_str() == text)
    .ok_or_else(|| {
        ApiError::bad_request(format!(
            "`{}` is not an approval status: give pending, approved, denied, expired or void",
            crate::ui::one_line(text)
        ))
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    run: Option<String>,
    limit: Option<usize>,
}

pub async fn list(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Q(q): Q<ListQuery>,
) -> ApiResult<Json<Value>> {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(status_of(s)?),
        None => None,
    };
    let approvals = server.store.db().approvals(&ApprovalFilter {
        tenant: Some(caller.tenant.clone()),
        run: q.run.filter(|r| !r.is_empty()),
        status,
        limit: q.limit.unwrap_or(100).clamp(1, 1000),
    })?;
    let approvals: Vec<Value> = approvals.iter().map(view).collect();
    Ok(Json(json!({"approvals": approvals})))
}

pub async fn show(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(view(&own(&server, &caller, &id)?)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// The digest of the request the person reviewed (as GET shows it).
    digest: Option<String>,
    reason: Option<String>,
}

async fn decide(
    server: Arc<Server>,
    id: String,
    a: Acting<DecideBody>,
    verdict: Verdict,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: verdict.act(),
        target: &id,
    };
    let what = format!("{} an action", verdict.act());
    require(&server, &a.caller, Role::Approver, &what, asked)?;
    own(&server, &a.caller, &id).map_err(|e| refuse(&server, &a.caller, asked, None, e))?;
    let digest = a.body.digest.filter(|d| !d.is_empty());
    if verdict == Verdict::Approve && digest.is_none() {
        let e = ApiError::bad_request(format!(
            "give `digest`, the digest of the request you reviewed (GET /api/v1/approvals/{id} shows it): an approval is bound to the exact request"
        ));
        return Err(refuse(&server, &a.caller, asked, None, e));
    }
    // A digest too short to name a request is the caller's mistake to fix, not
    // another request (the command line's rule: `digest_given`).
    if let Some(seen) = &digest
        && let Err(why) = crate::db::approvals::digest_given(seen)
    {
        return Err(refuse(
            &server,
            &a.caller,
            asked,
            None,
            ApiError::bad_request(why),
        ));
    }
    let reason = a.body.reason.filter(|r| !r.trim().is_empty());
    let actor = a.caller.actor();
    let decided = server.store.db().decide_approval(&Decide {
        id: &id,
        verdict,
        actor: &actor,
        tenant: Some(&a.caller.tenant),
        reason: reason.as_deref(),
        digest: digest.as_deref(),
    })?;
    let approval = decided.map_err(|r| {
        if r.0.starts_with("approvals.self") {
            ApiError::forbidden(r.0)
        } else if r.0.starts_with("there is no approval") {
            not_found(&id)
        } else {
            ApiError::conflict(r.0)
        }
    })?;
    // The run goes on now: the approved action runs once, or the policy hears `declined`.
    server.requeue(
        &approval.run_id,
        &a.caller.tenant,
        &[RunStatus::Waiting],
        Continue::default(),
    )?;
    Ok(Json(view(&approval)))
}

pub async fn approve(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<DecideBody>,
) -> ApiResult<Json<Value>> {
    decide(server, id, a, Verdict::Approve).await
}

pub async fn deny(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<DecideBody>,
) -> ApiResult<Json<Value>> {
    decide(server, id, a, Verdict::Deny).await
}
