//! A tenant's webhooks (`/api/v1/webhooks`) and their delivery log: an
//! admin's alone, as its config is. A new webhook's secret is in the answer
//! that makes it, once; the store keeps it to sign with and never shows it
//! again. Every change and refusal is in the audit log.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{Acting, Authed, Q};
use super::refusal::{Asked, refuse, require};
use super::runs::Nothing;
use crate::db::webhooks::{Delivery, KINDS, Webhook};
use crate::serve::Server;
use crate::serve::auth::{Caller, Role};
use crate::serve::webhooks::{check_url, new_secret};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
    /// `json` (the default) or `slack`.
    #[serde(default)]
    pub format: Option<String>,
}

/// Make `w` a webhook of `caller`'s tenant (an admin), its URL checked as a
/// delivery would be; the webhook and its secret. Refusals are audited.
pub async fn create(
    server: &Server,
    caller: &Caller,
    w: &NewWebhook,
) -> ApiResult<(Webhook, String)> {
    let asked = Asked {
        act: "webhook.create",
        target: &w.url,
    };
    require(server, caller, Role::Admin, "configure webhooks", asked)?;
    let bad = |why: String| refuse(server, caller, asked, None, ApiError::bad_request(why));
    let format = w.format.as_deref().unwrap_or("json");
    if !matches!(format, "json" | "slack") {
        return Err(bad(format!(
            "`{}` is not a webhook format: give `json` or `slack`",
            crate::ui::one_line(format)
        )));
    }
    let mut events: Vec<String> = Vec::new();
    for e in &w.events {
        if !KINDS.contains(&e.as_str()) {
            return Err(bad(format!(
                "`{}` is not an event: give some of {}",
                crate::ui::one_line(e),
                KINDS.join(", ")
            )));
        }
        if !events.contains(e) {
            events.push(e.clone());
        }
    }
    if events.is_empty() {
        return Err(bad(format!(
            "a webhook needs at least one event: {}",
            KINDS.join(", ")
        )));
    }
    let tenant = server.tenants.named(&caller.tenant)?;
    let guard =
        crate::exec::egress::guard::Guard::for_tenant(server.guarded.clone(), &tenant.network);
    check_url(&guard, &w.url)
        .await
        .map_err(|why| bad(format!("the webhook's URL cannot be used: {why}")))?;
    let secret = new_secret()?;
    let made = server
        .store
        .db()
        .create_webhook(
            &caller.tenant,
            &w.url,
            &events,
            format,
            &secret,
            &caller.actor(),
        )?
        .map_err(|r| ApiError::conflict(r.0))?;
    Ok((made, secret))
}

pub async fn list(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "webhook.list",
        target: "webhooks",
    };
    require(
        &server,
        &caller,
        Role::Admin,
        "see the tenant's webhooks",
        asked,
    )?;
    let list = server.store.db().webhooks(&caller.tenant)?;
    Ok(Json(json!({"webhooks": list})))
}

pub async fn add(
    State(server): State<Arc<Server>>,
    a: Acting<NewWebhook>,
) -> ApiResult<impl IntoResponse> {
    let (made, secret) = create(&server, &a.caller, &a.body).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "webhook": made,
            "secret": secret,
            "note": "shown once: keep it where the receiver checks loopbox-signature with it",
        })),
    ))
}

pub async fn delete(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    a: Acting<Nothing>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "webhook.delete",
        target: &id,
    };
    require(&server, &a.caller, Role::Admin, "configure webhooks", asked)?;
    server
        .store
        .db()
        .delete_webhook(&a.caller.tenant, &id, &a.caller.actor())?
        .map_err(|r| ApiError::not_found(r.0))?;
    Ok(Json(json!({"deleted": id})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    #[serde(default)]
    limit: Option<i64>,
}

/// The tenant's last deliveries (100, or `?limit=` up to 1000), newest first.
pub fn log_of(server: &Server, caller: &Caller, limit: i64) -> ApiResult<Vec<Delivery>> {
    let asked = Asked {
        act: "webhook.log",
        target: "webhooks",
    };
    require(
        server,
        caller,
        Role::Admin,
        "see the tenant's webhook deliveries",
        asked,
    )?;
    Ok(server
        .store
        .db()
        .deliveries(&caller.tenant, limit.clamp(1, 1000))?)
}

pub async fn log(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Q(q): Q<LogQuery>,
) -> ApiResult<Json<Value>> {
    let list = log_of(&server, &caller, q.limit.unwrap_or(100))?;
    Ok(Json(json!({"deliveries": list})))
}
