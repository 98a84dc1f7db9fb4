//! A dashboard form's post is the API's act: the form's fields are the API
//! body (read by the API's own extractor, which authenticates the caller,
//! checks the session's CSRF token and the `Origin`, and bounds the body), the
//! API handler checks the role and writes the audit row, and its answer
//! becomes a redirect to the page to show next (post, redirect, get) or, for
//! a refusal, an error page with the API's words and status.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::page::{Ctx, error};
use crate::serve::Server;
use crate::serve::api::error::ApiError;
use crate::serve::auth::Caller;

/// What a form's post got when the API extractor refused it (no session, a
/// missing or forged CSRF token, a body that does not fit): the error page.
pub fn refused(server: &Server, caller: Option<&Caller>, e: &ApiError) -> Response {
    let ctx = match caller {
        Some(c) => Ctx::of(server, c),
        None => Ctx::anonymous(),
    };
    error(&ctx, e.status, &e.error)
}

/// See the page `to` next (303: the browser gets it).
pub fn see(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// A short answer of an API handler as JSON (`None` when it is not).
pub async fn json_of(r: Response) -> Option<Value> {
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return None;
    }
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// An API handler's answer: on success, on to `to`; a refusal as a page.
pub fn outcome<T>(
    server: &Server,
    caller: &Caller,
    result: Result<T, ApiError>,
    to: &str,
) -> Response {
    match result {
        Ok(_) => see(to),
        Err(e) => refused(server, Some(caller), &e),
    }
}

/// A notice a page shows after an act, named by the redirect's `note`:
/// fixed words only, so a link cannot put text of its own on the page.
pub fn notice(note: Option<&str>) -> Option<&'static str> {
    Some(match note? {
        "started" => "Run started.",
        "cancelled" => "Cancel requested.",
        "resumed" => "Run resumed: it is queued.",
        "answered" => "Answer sent: the run is queued.",
        "ticked" => "Tick sent: the run is queued.",
        "approved" => "Approved: the run goes on and the action runs once.",
        "denied" => "Denied: the policy hears `declined` with your reason.",
        "revoked" => "Token revoked; its sessions ended.",
        "webhook-deleted" => "Webhook deleted; its queued deliveries were given up.",
        _ => return None,
    })
}

/// For a status the API should not answer an act with (a bug): a 500 page.
pub fn unexpected(server: &Server, caller: &Caller, what: &str) -> Response {
    let ctx = Ctx::of(server, caller);
    error(
        &ctx,
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("{what}: the server's answer could not be read"),
    )
}
