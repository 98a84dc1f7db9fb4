//! The HTTP API, JSON under `/api/v1` (documented with curl examples in
//! docs/serve.md). Every route but `GET /healthz` needs a token or a session;
//! what a route may do is its role's (see [`crate::serve::auth`]).
//!
//! - [`extract`]: the caller, the CSRF check, bounded bodies.
//! - [`error`]: `{"error", "causes"}` with the status that fits.
//! - [`refusal`]: refused acts written to the audit log.
//! - [`runs`], [`approvals`], [`admin`], [`spend`], [`webhooks`]: the routes.

pub mod admin;
pub mod approvals;
pub mod error;
pub mod extract;
pub mod refusal;
pub mod runs;
pub mod spend;
pub mod webhooks;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::Server;
use error::ApiError;

pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/api/v1/session",
            post(admin::sign_in)
                .get(admin::whoami)
                .delete(admin::sign_out),
        )
        .route("/api/v1/runs", get(runs::list).post(runs::start))
        .route("/api/v1/runs/{id}", get(runs::show))
        .route("/api/v1/runs/{id}/log", get(runs::log))
        .route("/api/v1/runs/{id}/answer", post(runs::answer))
        .route("/api/v1/runs/{id}/tick", post(runs::tick))
        .route("/api/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/api/v1/runs/{id}/resume", post(runs::resume))
        .route("/api/v1/approvals", get(approvals::list))
        .route("/api/v1/approvals/{id}", get(approvals::show))
        .route("/api/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/api/v1/approvals/{id}/deny", post(approvals::deny))
        .route("/api/v1/policies", get(admin::policies))
        .route("/api/v1/audit", get(admin::audit))
        .route("/api/v1/workers", get(admin::workers))
        .route("/api/v1/spend", get(spend::tenant))
        .route(
            "/api/v1/tokens",
            get(admin::tokens).post(admin::create_token),
        )
        .route(
            "/api/v1/tokens/{name}",
            axum::routing::delete(admin::revoke_token),
        )
        .route("/api/v1/webhooks", get(webhooks::list).post(webhooks::add))
        .route("/api/v1/webhooks/deliveries", get(webhooks::log))
        .route(
            "/api/v1/webhooks/{id}",
            axum::routing::delete(webhooks::delete),
        )
        .route(
            "/api/v1/config",
            get(admin::get_config).put(admin::put_config),
        )
        .fallback(|| async {
            ApiError::not_found(
                "there is no such endpoint; the API is under /api/v1 (see docs/serve.md)",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "this endpoint does not take that method (see docs/serve.md)",
            )
        })
        .with_state(server)
}
