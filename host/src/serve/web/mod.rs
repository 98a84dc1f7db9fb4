//! The web dashboard: server-rendered pages over the same handlers as the
//! JSON API, so a page can do nothing its caller's token could not do with
//! curl, and the API's role checks, CSRF check and audit rows hold for it.
//!
//! - [`page`]: the page shell (navigation, the signed-in person, the CSRF
//!   token its forms carry) and the pieces every page shows (a status, an age).
//! - [`session`]: signing in with a token (a session cookie) and out.
//! - [`act`]: a form's post handed to an API handler, its answer turned into a
//!   redirect or an error page.
//! - [`runs`], [`approvals`], [`admin`], [`webhooks`]: the pages.
//!
//! Every word a policy, a command, an agent or a loop file wrote is escaped
//! (maud escapes what it is given; [`page::untrusted`] also shows the
//! characters that reorder or hide text as escapes). The pages carry a
//! Content-Security-Policy that allows scripts, styles, images and
//! connections from this server only and no inline script: the one small
//! script and stylesheet are compiled into the binary ([`assets`]).

pub mod act;
pub mod admin;
pub mod approvals;
pub mod assets;
pub mod page;
pub mod runs;
pub mod session;
pub mod webhooks;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};

use super::Server;

/// What a page may load and where its forms may go: this server only, no
/// inline script or style, no frames.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes, with the headers every answer of theirs carries.
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/", get(runs::home))
        .route("/login", get(session::form).post(session::sign_in))
        .route("/logout", post(session::sign_out))
        .route("/runs", get(runs::list).post(runs::start))
        .route("/runs/new", get(runs::new))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/{act}", post(runs::act))
        .route("/approvals", get(approvals::inbox))
        .route("/approvals/{id}/{verdict}", post(approvals::decide))
        .route("/questions/{run}", post(approvals::answer_question))
        .route("/policies", get(admin::policies))
        .route("/audit", get(admin::audit))
        .route("/workers", get(admin::workers))
        .route("/tokens", get(admin::tokens).post(admin::create_token))
        .route("/tokens/{name}/revoke", post(admin::revoke_token))
        .route("/webhooks", get(webhooks::list).post(webhooks::create))
        .route("/webhooks/{id}/delete", post(webhooks::delete))
        .route("/assets/{file}", get(assets::serve))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(server)
}

/// The CSP and its companions on every answer of the dashboard.
async fn secure_headers(mut r: axum::response::Response) -> axum::response::Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with a form's
    // post, which the API's same-site check must refuse. This server's own
    // addresses (a run's id) never leave it.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    // Pages hold a person's runs and a CSRF token: never kept by a shared cache.
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}
