//! The tenant's webhooks page (admins): its webhooks (made here, the secret
//! shown this once; deleted here) and the log of their deliveries, the
//! tenant's own only, newest first.

use std::sync::Arc;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::act;
use super::page::{Ctx, Viewer, age, error, page, untrusted};
use crate::db::webhooks::KINDS;
use crate::serve::Server;
use crate::serve::api::extract::Acting;
use crate::serve::api::webhooks as api;

/// Deliveries the page shows.
const LOG_ROWS: i64 = 100;

#[derive(Debug, Deserialize)]
pub struct PageQuery {
    note: Option<String>,
}

pub async fn list(
    State(server): State<Arc<Server>>,
    Viewer(caller): Viewer,
    Query(q): Query<PageQuery>,
) -> Response {
    webhooks_page(&server, &Ctx::of(&server, &caller), None, q.note.as_deref())
}

/// The page; `made` is a webhook's id and secret, just made, shown this once.
fn webhooks_page(
    server: &Server,
    ctx: &Ctx,
    made: Option<(&str, &str)>,
    note: Option<&str>,
) -> Response {
    let Some(caller) = &ctx.caller else {
        return act::see("/login");
    };
    let log = match api::log_of(server, caller, LOG_ROWS) {
        Ok(l) => l,
        Err(e) => return error(ctx, e.status, &e.error),
    };
    let hooks = match server.store.db().webhooks(&caller.tenant) {
        Ok(l) => l,
        Err(e) => return error(ctx, StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
    };
    let now = crate::db::now_ms();
    let body = html! {
        div.head { h1 { "Webhooks" } }
        @if let Some(n) = act::notice(note) { p.note role="status" { (n) } }
        @if let Some((id, secret)) = made {
            section.card.made role="status" {
                h2 { "Webhook " (untrusted(id)) " made" }
                p { "Copy its secret now: it is shown this once. A receiver checks "
                    code { "loopbox-signature: t=UNIX,v1=HEX" } " as the HMAC-SHA256 of "
                    code { "UNIX.BODY" } " under it." }
                code.token #new-secret { (secret) }
            }
        }
        form.card method="post" action="/webhooks" {
            (ctx.csrf())
            label for="url" { "New webhook" }
            input #url type="url" name="url" required placeholder="https://hooks.example.com/loopbox" spellcheck="false";
            fieldset {
                legend { "Events" }
                @for k in KINDS {
                    label { input type="checkbox" name="events" value=(k) checked; " " code { (k) } }
                }
            }
            select name="format" aria-label="format" {
                option value="json" selected { "JSON" }
                option value="slack" { "Slack-compatible" }
            }
            button.primary type="submit" { "Add webhook" }
        }
        table.tokens {
            thead { tr { th { "URL" } th { "Events" } th { "Format" } th { "Made" } th {} } }
            tbody {
                @for w in &hooks {
                    tr {
                        td.mono.wrap data-label="URL" { (untrusted(&w.url)) }
                        td data-label="Events" { (w.events.join(", ")) }
                        td data-label="Format" { (untrusted(&w.format)) }
                        td data-label="Made" { (age(w.created_at_ms, now)) " by " (untrusted(&w.created_by)) }
                        td {
                            form.inline method="post" action={ "/webhooks/" (untrusted(&w.id)) "/delete" } {
                                (ctx.csrf())
                                button.danger type="submit" aria-label={ "Delete " (w.url) } { "Delete" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Deliveries" }
        @if log.is_empty() {
            p.muted { "No event was queued for a webhook yet." }
        } @else {
            table.deliveries {
                thead { tr { th { "Event" } th { "Id" } th { "When" } th { "State" } th { "Attempts" } th { "Last answer" } } }
                tbody {
                    @for d in &log {
                        tr {
                            td data-label="Event" { code { (untrusted(&d.kind)) } }
                            td.mono data-label="Id" { (untrusted(&d.event_id)) }
                            td data-label="When" { (age(d.created_at_ms, now)) }
                            td data-label="State" {
                                @match d.status.as_str() {
                                    "delivered" => span.status.s-done { "✓ delivered" },
                                    "failed" => span.status.s-failed { "✗ given up" },
                                    _ => span.status.s-waiting { "… queued" },
                                }
                            }
                            td data-label="Attempts" { (d.attempts) }
                            td.wrap data-label="Last answer" {
                                @if let Some(s) = d.last_status { (s) " " }
                                @if let Some(e) = &d.last_error { span.muted { (untrusted(e)) } }
                            }
                        }
                    }
                }
            }
        }
    };
    page(ctx, "Webhooks", "/webhooks", None, body).into_response()
}

/// The form's fields: `events` repeats, one per box ticked.
fn form_of(bytes: &[u8]) -> Result<api::NewWebhook, String> {
    let fields: Vec<(String, String)> =
        serde_urlencoded::from_bytes(bytes).map_err(|e| format!("the form cannot be read: {e}"))?;
    let one = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    Ok(api::NewWebhook {
        url: one("url").unwrap_or_default(),
        events: fields
            .iter()
            .filter(|(n, _)| n == "events")
            .map(|(_, v)| v.clone())
            .collect(),
        format: one("format"),
    })
}

/// Add a webhook (admins), through the API's checks; its secret shown once.
pub async fn create(State(server): State<Arc<Server>>, req: Request) -> Response {
    // The CSRF check is the extractor's; the repeated `events` field is read here.
    let a = match Acting::<Vec<(String, String)>>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    let body = serde_urlencoded::to_string(&a.body).unwrap_or_default();
    let w = match form_of(body.as_bytes()) {
        Ok(w) => w,
        Err(why) => {
            return act::refused(
                &server,
                Some(&caller),
                &crate::serve::api::error::ApiError::bad_request(why),
            );
        }
    };
    match api::create(&server, &caller, &w).await {
        Ok((made, secret)) => webhooks_page(
            &server,
            &Ctx::of(&server, &caller),
            Some((&made.id, &secret)),
            None,
        ),
        Err(e) => act::refused(&server, Some(&caller), &e),
    }
}

/// Delete a webhook (admins), through the API.
pub async fn delete(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let a = match Acting::<crate::serve::api::runs::Nothing>::from_request(req, &server).await {
        Ok(a) => a,
        Err(e) => return act::refused(&server, None, &e),
    };
    let caller = a.caller.clone();
    let result = api::delete(State(server.clone()), Path(id), a).await;
    act::outcome(&server, &caller, result, "/webhooks?note=webhook-deleted")
}
