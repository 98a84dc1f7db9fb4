//! Signing in and out (dashboard sessions), the audit log, the tenant's
//! policies with what each needs against what it is granted, and what an
//! admin manages: the tenant's tokens and its `loopbox.toml`.

use std::sync::Arc;

use anyhow::Context;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{Acting, Authed, Body, Q};
use super::refusal::{Asked, refuse, require};
use super::runs::Nothing;
use crate::config::Config;
use crate::db::audit::AuditFilter;
use crate::serve::Server;
use crate::serve::auth::session::{clear_cookie, set_cookie};
use crate::serve::auth::{Role, Via};
use crate::ui::rfc3339;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    token: String,
}

/// Sign in with a token: a session cookie, and the CSRF token its forms carry.
pub async fn sign_in(
    State(server): State<Arc<Server>>,
    Body(b): Body<SignIn>,
) -> ApiResult<impl IntoResponse> {
    let caller = server.store.authenticate(b.token.trim())?.ok_or_else(|| {
        ApiError::unauthorized(
            "the token is not valid: it is wrong, or it was revoked; ask an admin of your tenant for a new one",
        )
    })?;
    if server.tenants.get(&caller.tenant).is_none() {
        return Err(ApiError::unauthorized(format!(
            "tenant `{}` is no longer in the server config",
            caller.tenant
        )));
    }
    let ttl_s = u64::from(server.settings.session_hours) * 3600;
    let s = server.store.start_session(&caller, (ttl_s * 1000) as i64)?;
    Ok((
        StatusCode::CREATED,
        [(
            header::SET_COOKIE,
            set_cookie(&s.cookie, ttl_s, server.secure_cookies),
        )],
        Json(json!({
            "tenant": caller.tenant, "role": caller.role, "name": caller.name,
            "csrf_token": s.csrf, "expires": rfc3339(s.expires_at_ms),
        })),
    ))
}

/// Who is signed in (or whose token this is), and the session's CSRF token.
pub async fn whoami(Authed(caller): Authed) -> Json<Value> {
    let csrf = match &caller.via {
        Via::Session { csrf, .. } => Some(csrf.clone()),
        Via::Bearer => None,
    };
    Json(json!({
        "tenant": caller.tenant, "role": caller.role, "name": caller.name,
        "via": if csrf.is_some() { "session" } else { "token" }, "csrf_token": csrf,
    }))
}

pub async fn sign_out(
    State(server): State<Arc<Server>>,
    a: Acting<Nothing>,
) -> ApiResult<impl IntoResponse> {
    server.store.end_session(&a.caller)?;
    Ok((
        [(header::SET_COOKIE, clear_cookie(server.secure_cookies))],
        Json(json!({"signed_out": true})),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    before: Option<i64>,
    limit: Option<usize>,
    act: Option<String>,
    target: Option<String>,
}

/// The tenant's audit log, newest first; `next` pages back.
pub async fn audit(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
    Q(q): Q<AuditQuery>,
) -> ApiResult<Json<Value>> {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let filter = AuditFilter {
        tenant: Some(caller.tenant.clone()),
        before: q.before,
        limit,
    };
    let rows = server.store.db().audit(&filter)?;
    let next = (rows.len() == limit)
        .then(|| rows.last().map(|r| r.seq))
        .flatten();
    let rows: Vec<Value> = rows
        .into_iter()
        .filter(|r| q.act.as_deref().is_none_or(|a| r.entry.act == a))
        .filter(|r| q.target.as_deref().is_none_or(|t| r.entry.target == t))
        .map(|r| {
            json!({
                "seq": r.seq, "at": rfc3339(r.at_ms), "actor": r.entry.actor, "act": r.entry.act,
                "target": r.entry.target, "digest": r.entry.digest, "outcome": r.entry.outcome,
                "detail": r.entry.detail.as_deref().map(|d| serde_json::from_str::<Value>(d).unwrap_or(Value::String(d.into()))),
            })
        })
        .collect();
    Ok(Json(json!({"audit": rows, "next": next})))
}

/// Each `[policies.NAME]` of the tenant's config: its source, what the
/// component declares it needs, what the section grants, what it asks beyond
/// them, and whether a run would admit it (digests, signature).
pub async fn policies(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let out = tokio::task::spawn_blocking(move || -> ApiResult<Value> {
        let tenant = server.tenants.named(&caller.tenant)?.clone();
        let path = server.config_file(&tenant.name)?;
        let config = Config::load(&path).map_err(ApiError::usage)?;
        let mut list = vec![];
        for (name, entry) in &config.policies {
            let mut item = json!({"name": name, "source": entry.source, "digest_pin": entry.digest, "unsigned": entry.unsigned});
            let scoped = match config.scoped(name) {
                Ok(s) => s,
                Err(e) => {
                    item["error"] = json!(format!("{e:#}"));
                    list.push(item);
                    continue;
                }
            };
            item["grants"] = json!({
                "exec": scoped.shell.allow, "ask": scoped.shell.ask, "scripts": scoped.shell.scripts,
                "network": scoped.shell.network, "agent": scoped.agent.is_some(), "read": scoped.workspace.read,
            });
            let found = crate::run::installed::Installed::resolve(&config, Some(&path), &tenant.roots[0], name)
                .and_then(|i| i.ok_or_else(|| anyhow::anyhow!("there is no [policies.{name}]")))
                .and_then(|i| Ok((i.source.read()?.into_owned(), i)));
            match found {
                Ok((bytes, installed)) => {
                    let needs = crate::dist::needs::Needs::read(&bytes);
                    item["component_digest"] = json!(crate::dist::admit::digest(&bytes));
                    match needs {
                        Ok(n) => {
                            item["beyond_grants"] = json!(n.as_ref().map(|n| n
                                .beyond(&scoped.shell, scoped.agent.is_some(), &scoped.workspace.read)
                                .lines()).unwrap_or_default());
                            item["needs"] = json!(n);
                        }
                        Err(e) => item["needs_error"] = json!(format!("{e:#}")),
                    }
                    item["admission"] = json!(match installed.admit(&config, &bytes) {
                        Ok(a) => format!("runs: {}", a.describe()),
                        Err(e) => format!("REFUSED: {e:#}"),
                    });
                }
                Err(e) => item["error"] = json!(format!("{e:#}")),
            }
            list.push(item);
        }
        Ok(json!({"policies": list}))
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("listing the policies failed: {e}")))??;
    Ok(Json(out))
}

/// The `loopbox worker` processes of a shared store, as they last reported:
/// any caller sees each one's slots and heartbeat and how many runs it holds,
/// and which of them are its own tenant's (never another tenant's run ids).
pub async fn workers(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let db = server.store.db();
    let mut out = Vec::new();
    for w in db.workers()? {
        let mut mine = Vec::new();
        for run in &w.held {
            if db.run(run)?.and_then(|r| r.place.tenant).as_deref() == Some(&caller.tenant) {
                mine.push(run.clone());
            }
        }
        out.push(json!({
            "id": w.id,
            "host": w.host,
            "slots": w.slots,
            "held": w.held.len(),
            "runs": mine,
            "started": rfc3339(w.started_at_ms),
            "heartbeat": rfc3339(w.heartbeat_at_ms),
        }));
    }
    Ok(Json(json!({"workers": out})))
}

/// A token as the API shows it: its times RFC 3339 UTC (`created`, `revoked`).
pub fn token_view(t: &crate::serve::store::TokenInfo) -> Value {
    json!({
        "id": t.id, "tenant": t.tenant, "name": t.name, "role": t.role,
        "created": rfc3339(t.created_at_ms), "created_by": t.created_by,
        "revoked": t.revoked_at_ms.map(rfc3339), "revoked_by": t.revoked_by,
    })
}

pub async fn tokens(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "token.list",
        target: "tokens",
    };
    require(
        &server,
        &caller,
        Role::Admin,
        "list the tenant's tokens",
        asked,
    )?;
    let list: Vec<Value> = server
        .store
        .tokens(Some(&caller.tenant))?
        .iter()
        .map(token_view)
        .collect();
    Ok(Json(json!({"tokens": list})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTokenBody {
    name: String,
    role: String,
}

pub async fn create_token(
    State(server): State<Arc<Server>>,
    a: Acting<NewTokenBody>,
) -> ApiResult<impl IntoResponse> {
    let asked = Asked {
        act: "token.create",
        target: &a.body.name,
    };
    // The role asked for is kept with a refusal: an operator minting an admin token says so.
    let wanted = || Some(json!({"token_role": crate::ui::one_line(&a.body.role)}));
    a.caller.may(Role::Admin, "make tokens").map_err(|why| {
        let detail = json!({"token_role": crate::ui::one_line(&a.body.role), "needs": Role::Admin});
        refuse(
            &server,
            &a.caller,
            asked,
            Some(detail),
            ApiError::forbidden(why),
        )
    })?;
    let role: Role = a.body.role.parse().map_err(|why: String| {
        refuse(
            &server,
            &a.caller,
            asked,
            wanted(),
            ApiError::bad_request(why),
        )
    })?;
    if !crate::serve::config::valid_name(&a.body.name) {
        let e = ApiError::bad_request(
            "a token's name is 1 to 64 lower-case letters, digits, `-` and `_`",
        );
        return Err(refuse(&server, &a.caller, asked, wanted(), e));
    }
    let made = server
        .store
        .create_token(&a.caller.tenant, &a.body.name, role, &a.caller.actor())?
        .map_err(|r| ApiError::conflict(r.0))?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"token": made.text, "info": token_view(&made.info), "note": "shown once: only its hash is kept"}),
        ),
    ))
}

pub async fn revoke_token(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    a: Acting<Nothing>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "token.revoke",
        target: &name,
    };
    require(&server, &a.caller, Role::Admin, "revoke tokens", asked)?;
    server
        .store
        .revoke_token(&a.caller.tenant, &name, &a.caller.actor())?
        .map_err(|r| ApiError::not_found(r.0))?;
    Ok(Json(json!({"revoked": name})))
}

pub async fn get_config(
    State(server): State<Arc<Server>>,
    Authed(caller): Authed,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "config.read",
        target: "loopbox.toml",
    };
    require(
        &server,
        &caller,
        Role::Admin,
        "read the tenant's config",
        asked,
    )?;
    let (text, digest) = server.store.tenant_config(&caller.tenant)?.unzip();
    Ok(Json(
        json!({"text": text.unwrap_or_default(), "digest": digest}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigBody {
    text: String,
}

/// Check a tenant's `loopbox.toml` as a run would read it, and refuse what a
/// shared server cannot allow in it (see [`crate::serve::tenant::Tenant::check_config`]).
pub fn check_tenant_config(
    tenant: &crate::serve::tenant::Tenant,
    text: &str,
) -> anyhow::Result<()> {
    let origin = std::path::PathBuf::from(format!("tenants/{}/loopbox.toml", tenant.name));
    if text.len() as u64 > crate::files::MAX_CONFIG_BYTES {
        anyhow::bail!(
            "the config is {} bytes; at most {} are read",
            text.len(),
            crate::files::MAX_CONFIG_BYTES
        );
    }
    let config = Config::parse(text, &origin)?;
    tenant
        .check_config(&config)
        .with_context(|| format!("invalid config `{}`", origin.display()))
}

pub async fn put_config(
    State(server): State<Arc<Server>>,
    a: Acting<ConfigBody>,
) -> ApiResult<Json<Value>> {
    let asked = Asked {
        act: "config.set",
        target: "loopbox.toml",
    };
    require(
        &server,
        &a.caller,
        Role::Admin,
        "change the tenant's config",
        asked,
    )?;
    let tenant = server.tenants.named(&a.caller.tenant)?.clone();
    if let Err(e) = check_tenant_config(&tenant, &a.body.text) {
        server
            .store
            .db()
            .audit_note(&crate::db::audit::AuditEntry {
                actor: a.caller.actor(),
                tenant: Some(tenant.name.clone()),
                act: "config.set".into(),
                target: "loopbox.toml".into(),
                digest: Some(crate::config::digest(a.body.text.as_bytes())),
                outcome: format!("refused: {e:#}"),
                detail: None,
            })?;
        return Err(ApiError::usage(e));
    }
    let digest =
        server
            .store
            .set_tenant_config(&a.caller.tenant, &a.body.text, &a.caller.actor())?;
    Ok(Json(json!({"digest": digest})))
}
