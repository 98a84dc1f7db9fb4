//! Signing in and out of the dashboard. The sign-in form carries a CSRF token
//! too, before there is a session: a random value the form page sets as a
//! short-lived cookie (HttpOnly, SameSite=Strict) and as a hidden field; a
//! post whose field is not its cookie is refused, so another site cannot sign
//! a browser in with the attacker's token. A valid token then goes to the
//! API's own sign-in (`POST /api/v1/session`): the same session cookie, the
//! same audit row.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::page::{Ctx, error, page};
use crate::serve::Server;
use crate::serve::api::extract::{Acting, BODY_TIMEOUT, Body, authenticate, same_origin};
use crate::serve::api::runs::Nothing;
use crate::serve::auth::secret;
use crate::serve::auth::session::CSRF_FIELD;

/// The sign-in form's cookie, which its hidden field must repeat.
pub const LOGIN_COOKIE: &str = "loopbox_login";
/// How long a sign-in form stays usable.
const LOGIN_TTL_S: u64 = 3600;
/// The longest sign-in post read (a token is 64 bytes; the form a few more).
const LOGIN_BODY_BYTES: usize = 4096;

#[derive(Debug, Deserialize)]
pub struct FormQuery {
    #[serde(default)]
    note: Option<String>,
}

/// The sign-in form (or, when signed in already, the runs).
pub async fn form(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Query(q): Query<FormQuery>,
) -> Response {
    if authenticate(&headers, &server).is_ok() {
        return Redirect::to("/runs").into_response();
    }
    let Ok(csrf) = secret::random_text() else {
        return error(
            &Ctx::anonymous(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "the system's random number generator failed",
        );
    };
    let cookie = format!(
        "{LOGIN_COOKIE}={csrf}; Path=/login; Max-Age={LOGIN_TTL_S}; HttpOnly; SameSite=Strict{}",
        if server.secure_cookies {
            "; Secure"
        } else {
            ""
        }
    );
    let note = match q.note.as_deref() {
        Some("signed-out") => Some("You signed out."),
        _ => None,
    };
    let body = html! {
        section.card.signin {
            h1 { "Sign in" }
            @if let Some(n) = note { p.note role="status" { (n) } }
            p.muted {
                "Paste a token of your tenant. An admin makes one with "
                code { "loopbox serve token create" } " or on the Tokens page."
            }
            form method="post" action="/login" {
                input type="hidden" name=(CSRF_FIELD) value=(csrf);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required
                    placeholder="lbx_…" spellcheck="false";
                button.primary type="submit" { "Sign in" }
            }
        }
    };
    (
        [(header::SET_COOKIE, cookie)],
        page(&Ctx::anonymous(), "Sign in", "", None, body),
    )
        .into_response()
}

/// The sign-in form's cookie among a request's cookies.
fn login_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == LOGIN_COOKIE)
        .map(|(_, v)| v.trim().to_string())
}

/// Sign in with a token from the form: the session cookie, and on to the runs.
pub async fn sign_in(State(server): State<Arc<Server>>, req: axum::extract::Request) -> Response {
    let anon = Ctx::anonymous();
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    if let Err(e) = same_origin(&headers) {
        return error(&anon, e.status, &e.error);
    }
    // Read no more than a token needs, and not for longer than any body.
    let read = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, LOGIN_BODY_BYTES));
    let body = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return error(
                &anon,
                StatusCode::PAYLOAD_TOO_LARGE,
                "the sign-in form is larger than a token needs",
            );
        }
        Err(_) => {
            return error(
                &anon,
                StatusCode::REQUEST_TIMEOUT,
                "the sign-in form did not arrive in time; send it again",
            );
        }
    };
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let expected = login_cookie(&headers);
    let fresh = match (&expected, field(CSRF_FIELD)) {
        (Some(e), Some(p)) => !e.is_empty() && secret::same(e.as_bytes(), p.as_bytes()),
        _ => false,
    };
    if !fresh {
        return error(
            &anon,
            StatusCode::FORBIDDEN,
            "the sign-in form's CSRF token is missing or wrong (the form is older than an hour, or was not this server's): open the sign-in page again",
        );
    }
    let token = field("token").unwrap_or_default().trim().to_string();
    let sign_in: crate::serve::api::admin::SignIn =
        match serde_json::from_value(serde_json::json!({ "token": token })) {
            Ok(s) => s,
            Err(e) => return error(&anon, StatusCode::BAD_REQUEST, &e.to_string()),
        };
    let answer = match crate::serve::api::admin::sign_in(State(server.clone()), Body(sign_in)).await
    {
        Ok(a) => a.into_response(),
        Err(e) => return error(&anon, e.status, &e.error),
    };
    let mut to = Redirect::to("/runs").into_response();
    if let Some(c) = answer.headers().get(header::SET_COOKIE) {
        to.headers_mut().append(header::SET_COOKIE, c.clone());
    }
    // The form's cookie has done its job.
    if let Ok(v) =
        format!("{LOGIN_COOKIE}=; Path=/login; Max-Age=0; HttpOnly; SameSite=Strict").parse()
    {
        to.headers_mut().append(header::SET_COOKIE, v);
    }
    to
}

/// Sign out (the API's `DELETE /api/v1/session`, with the form's CSRF token).
pub async fn sign_out(
    State(server): State<Arc<Server>>,
    a: Result<Acting<Nothing>, crate::serve::api::error::ApiError>,
) -> Response {
    let a = match a {
        Ok(a) => a,
        Err(e) => return error(&Ctx::anonymous(), e.status, &e.error),
    };
    match crate::serve::api::admin::sign_out(State(server), a).await {
        Ok(r) => {
            let r = r.into_response();
            let mut to = Redirect::to("/login?note=signed-out").into_response();
            if let Some(c) = r.headers().get(header::SET_COOKIE) {
                to.headers_mut().append(header::SET_COOKIE, c.clone());
            }
            to
        }
        Err(e) => error(&Ctx::anonymous(), e.status, &e.error),
    }
}
