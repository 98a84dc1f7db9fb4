//! The tenant's pages besides runs and approvals: its policies (what each
//! declares it needs against what its section grants, and whether a run
//! would admit it), its audit log (newest first, paged), and for admins its
//! tokens (made here and shown once, revoked here).

use std::sync::Arc;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::act;
use super::page::{Ctx, Viewer, age, error, page, pretty, text_of, untrusted};
use crate::db::audit::AuditFilter;
use crate::serve::Server;
use crate::serve::api::admin as api;
use crate::serve::api::extract::{Acting, Authed};
use crate::serve::auth::Role;

/// Audit rows on a page.
const AUDIT_PAGE: usize = 100;

pub async fn policies(State(server): State<Arc<Server>>, Viewer(caller): Viewer) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let list = match api::policies(State(server.clone()), Authed(caller.clone())).await {
        Ok(axum::Json(v)) => v,
        Err(e) => return error(&ctx, e.status, &e.error),
    };
    let empty = vec![];
    let list = list["policies"].as_array().unwrap_or(&empty);
    let body = html! {
        div.head { h1 { "Policies" } }
        @if list.is_empty() {
            div.empty {
                p { "Tenant " strong { (caller.tenant) } " has no policy installed." }
                p.muted { "An admin adds one as " code { "[policies.NAME]" } " to the tenant's loopbox.toml ("
                    code { "PUT /api/v1/config" } " or " code { "loopbox serve tenant-config" } ")." }
            }
        }
        @for p in list { (policy_card(&ctx, p)) }
    };
    page(&ctx, "Policies", "/policies", None, body).into_response()
}

/// A list of rules (argv prefixes) as lines.
fn rules(v: &Value) -> Markup {
    match v.as_array() {
        Some(list) if !list.is_empty() => html! {
            ul.rules { @for r in list { li { code.wrap { (text_of(r)) } } } }
        },
        _ => html! { span.muted { "none" } },
    }
}

fn policy_card(ctx: &Ctx, p: &Value) -> Markup {
    let name = p["name"].as_str().unwrap_or_default();
    let admission = p["admission"].as_str().unwrap_or("");
    let refused = admission.starts_with("REFUSED");
    let g = &p["grants"];
    let yes_no = |v: &Value| if v == true { "yes" } else { "no" };
    html! {
        article.card.policy {
            header {
                h2 { (untrusted(name)) }
                @if !admission.is_empty() {
                    span class={ "status " @if refused { "s-failed" } @else { "s-done" } } {
                        @if refused { "✗ refused" } @else { "✓ admitted" }
                    }
                }
                @if ctx.may(Role::Operator) && !refused {
                    a.button href={ "/runs/new?policy=" (urlencode(name)) } { "Start a run" }
                }
            }
            dl.facts {
                dt { "Source" } dd.mono.wrap { (text_of(&p["source"])) }
                @if !p["component_digest"].is_null() { dt { "Digest" } dd.mono.wrap { (text_of(&p["component_digest"])) } }
                @if !admission.is_empty() { dt { "Admission" } dd.wrap { (untrusted(admission)) } }
                @if !p["error"].is_null() { dt { "Problem" } dd.err { (text_of(&p["error"])) } }
            }
            @if g.is_object() {
                div.grid2 {
                    div {
                        h3 { "Granted" }
                        dl.facts {
                            dt { "Commands" } dd { (rules(&g["exec"])) }
                            dt { "Ask first" } dd { (rules(&g["ask"])) }
                            dt { "Scripts" } dd { (yes_no(&g["scripts"])) }
                            dt { "Network" } dd { (yes_no(&g["network"])) }
                            dt { "Agent" } dd { (yes_no(&g["agent"])) }
                            dt { "Reads" } dd { (rules(&g["read"])) }
                        }
                    }
                    div {
                        h3 { "Needs beyond its grants" }
                        @match p["beyond_grants"].as_array() {
                            Some(l) if !l.is_empty() => {
                                ul.beyond { @for line in l { li { (text_of(line)) } } }
                                p.muted.small { "A run may ask for these and be refused." }
                            }
                            Some(_) => { p { "✓ Nothing: every need it declares is granted." } }
                            None => { p.muted { "It declares no needs." } }
                        }
                        @if !p["needs"].is_null() {
                            details { summary { "What it declares it needs" } pre { (pretty(&p["needs"])) } }
                        }
                        @if !p["needs_error"].is_null() { p.err { (text_of(&p["needs_error"])) } }
                    }
                }
            }
        }
    }
}

fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("", s)])
        .map(|t| t.trim_start_matches('=').to_string())
        .unwrap_or_default()
}

#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    #[serde(default)]
    before: Option<i64>,
}

pub async fn audit(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<AuditQuery>,
) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let rows = match server.store.db().audit(&AuditFilter {
        tenant: Some(caller.tenant.clone()),
        before: q.before,
        limit: AUDIT_PAGE,
    }) {
        Ok(r) => r,
        Err(e) => {
            return error(&ctx, StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}"));
        }
    };
    let now = crate::db::now_ms();
    let older = (rows.len() == AUDIT_PAGE)
        .then(|| rows.last().map(|r| r.seq))
        .flatten();
    let body = html! {
        div.head { h1 { "Audit log" } }
        p.muted { "Every act of a person or a token in tenant " strong { (caller.tenant) } ", newest first. Nothing deletes a row." }
        @if rows.is_empty() {
            div.empty { p { "No acts yet." } }
        } @else {
            table.audit {
                thead { tr { th.num { "#" } th { "When" } th { "Who" } th { "Act" } th { "On" } th { "Outcome" } } }
                tbody {
                    @for r in &rows {
                        @let ok = r.entry.outcome == "ok";
                        tr {
                            td.num data-label="#" { (r.seq) }
                            td data-label="When" { (age(r.at_ms, now)) }
                            td data-label="Who" { (untrusted(&r.entry.actor)) }
                            td data-label="Act" { code { (untrusted(&r.entry.act)) } }
                            td.wrap data-label="On" {
                                @if r.entry.target.starts_with('r') && !r.entry.target.contains(' ') && matches!(r.entry.act.as_str(), "start" | "cancel" | "resume" | "answer" | "tick") {
                                    a.mono href={ "/runs/" (untrusted(&r.entry.target)) } { (untrusted(&r.entry.target)) }
                                } @else {
                                    span.mono { (untrusted(&r.entry.target)) }
                                }
                                @if let Some(d) = &r.entry.digest { div.mono.muted.small { (untrusted(d)) } }
                            }
                            td.wrap data-label="Outcome" {
                                @if ok {
                                    span.status.s-done { "✓ ok" }
                                } @else {
                                    // The pill stays short (it does not wrap); the why, as long
                                    // as a refusal's message is, wraps beside it.
                                    @let why = r.entry.outcome.strip_prefix("refused: ");
                                    span.status.s-failed { @if why.is_some() { "✗ refused" } @else { "✗" } }
                                    " " span { (untrusted(why.unwrap_or(&r.entry.outcome))) }
                                }
                            }
                        }
                    }
                }
            }
        }
        nav.pager {
            @if q.before.is_some() { a href="/audit" { "← Newest" } }
            @if let Some(o) = older { a href={ "/audit?before=" (o) } { "Older →" } }
        }
    };
    page(&ctx, "Audit", "/audit", None, body).into_response()
}

/// The `loopbox worker` processes of a shared store (docs/scale.md): each
/// one's slots, last heartbeat, how many runs it holds and which are this
/// tenant's. A server on SQLite drives its runs itself and lists none.
pub async fn workers(State(server): State<Arc<Server>>, Viewer(caller): Viewer) -> Response {
    let ctx = Ctx::of(&server, &caller);
    let list = match api::workers(State(server.clone()), Authed(caller.clone())).await {
        Ok(axum::Json(v)) => v,
        Err(e) => return error(&ctx, e.status, &e.error),
    };
    let empty = vec![];
    let list = list["workers"].as_array().unwrap_or(&empty);
    let body = html! {
        div.head { h1 { "Workers" } }
        @if list.is_empty() {
            div.empty { p { "No worker has reported: this server drives its runs itself, or none has started." } }
        } @else {
            table.audit {
                thead { tr { th { "Worker" } th { "Host" } th.num { "Slots" } th.num { "Runs held" } th { "This tenant's" } th { "Last heartbeat" } } }
                tbody {
                    @for w in list {
                        tr {
                            td.mono data-label="Worker" { (text_of(&w["id"])) }
                            td data-label="Host" { (text_of(&w["host"])) }
                            td.num data-label="Slots" { (text_of(&w["slots"])) }
                            td.num data-label="Runs held" { (text_of(&w["held"])) }
                            td.wrap data-label="This tenant's" {
                                @for r in w["runs"].as_array().unwrap_or(&empty) {
                                    a.mono href={ "/runs/" (text_of(r)) } { (text_of(r)) } " "
                                }
                            }
                            td data-label="Last heartbeat" { (text_of(&w["heartbeat"])) }
                        }
                    }
                }
            }
        }
    };
    page(&ctx, "Workers", "/workers", None, body).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct TokensQuery {
    #[serde(default)]
    note: Option<String>,
}

pub async fn tokens(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<TokensQuery>,
) -> Response {
    tokens_page(&server, &Ctx::of(&server, &caller), None, q.note.as_deref())
}

/// The tokens page; `made` is a token just made, shown this once.
fn tokens_page(server: &Server, ctx: &Ctx, made: Option<&Value>, note: Option<&str>) -> Response {
    let Some(caller) = &ctx.caller else {
        return act::see("/login");
    };
    let asked = crate::serve::api::refusal::Asked {
        act: "token.list",
        target: "tokens",
    };
    if let Err(e) = crate::serve::api::refusal::require(
        server,
        caller,
        Role::Admin,
        "list the tenant's tokens",
        asked,
    ) {
        return error(ctx, e.status, &e.error);
    }
    let list = match server.store.tokens(Some(&caller.tenant)) {
        Ok(l) => l,
        Err(e) => return error(ctx, StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
    };
    let now = crate::db::now_ms();
    let body = html! {
        div.head { h1 { "Tokens" } }
        @if let Some(n) = act::notice(note) { p.note role="status" { (n) } }
        @if let Some(m) = made {
            section.card.made role="status" {
                h2 { "Token " (text_of(&m["info"]["name"])) " made" }
                p { "Copy it now: it is shown this once, and only its hash is kept." }
                code.token #new-token { (text_of(&m["token"])) }
            }
        }
        form.card.inline method="post" action="/tokens" {
            (ctx.csrf())
            label for="name" { "New token" }
            input #name type="text" name="name" required pattern="[a-z0-9_-]{1,64}" placeholder="name" spellcheck="false";
            select name="role" aria-label="role" {
                @for r in Role::ALL { option value=(r.as_str()) selected[r == Role::Viewer] { (r.as_str()) } }
            }
            button.primary type="submit" { "Make token" }
        }
        table.tokens {
            thead { tr { th { "Name" } th { "Role" } th { "Made" } th { "State" } th {} } }
            tbody {
                @for t in &list {
                    tr {
                        td data-label="Name" { (untrusted(&t.name)) @if t.id == caller.token_id { " " span.muted { "(yours)" } } }
                        td data-label="Role" { (t.role.as_str()) }
                        td data-label="Made" { (age(t.created_at_ms, now)) " by " (untrusted(&t.created_by)) }
                        td data-label="State" {
                            @if let Some(at) = t.revoked_at_ms {
                                span.status.s-cancelled { "⊘ revoked " } (age(at, now))
                            } @else {
                                span.status.s-done { "✓ live" }
                            }
                        }
                        td {
                            @if t.revoked_at_ms.is_none() {
                                form.inline method="post" action={ "/tokens/" (urlencode(&t.name)) "/revoke" } {
                                    (ctx.csrf())
                                    button.danger type="submit" aria-label={ "Revoke " (t.name) } { "Revoke" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(ctx, "Tokens", "/tokens", None, body).into_response()
}

/// Make a token (admins): the API's act, and the token shown once.
pub async fn create_token(State(server): State<Arc<Server>>, req: Request) -> Response {
    let a = match Acting::<api::NewTokenBody>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    match api::create_token(State(server.clone()), a).await {
        Ok(r) => match act::json_of(r.into_response()).await {
            Some(v) => tokens_page(&server, &Ctx::of(&server, &caller), Some(&v), None),
            None => act::unexpected(&server, &caller, "the token was made"),
        },
        Err(e) => act::refused(&server, Some(&caller), &e),
    }
}

/// Revoke a token (admins), through the API.
pub async fn revoke_token(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    req: Request,
) -> Response {
    let a = match Acting::<crate::serve::api::runs::Nothing>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    let result = api::revoke_token(State(server.clone()), Path(name), a).await;
    act::outcome(&server, &caller, result, "/tokens?note=revoked")
}
