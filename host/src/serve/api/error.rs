//! The API's errors: one JSON object, `{"error": "...", "causes": [...]}`,
//! with the same words the command line prints, and the HTTP status that
//! says whose move it is (400 a bad request, 401 no valid token, 403 a role
//! too low or a missing CSRF token, 404 nothing of the caller's tenant by that
//! name, 409 not now, 413 too large, 429 a quota, 503 the server is stopping).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: String,
    pub causes: Vec<String>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>) -> ApiError {
        let error = error.into();
        ApiError {
            status,
            causes: vec![error.clone()],
            error,
        }
    }

    /// From an error chain: the whole chain as the message, each link a cause.
    pub fn chain(status: StatusCode, e: &anyhow::Error) -> ApiError {
        ApiError {
            status,
            error: format!("{e:#}"),
            causes: e.chain().map(|c| c.to_string()).collect(),
        }
    }

    pub fn bad_request(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, e)
    }
    pub fn unauthorized(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, e)
    }
    pub fn forbidden(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, e)
    }
    pub fn not_found(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, e)
    }
    pub fn conflict(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, e)
    }
    pub fn too_large(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e)
    }
    pub fn quota(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, e)
    }
    pub fn unavailable(e: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e)
    }
    /// The server itself failed (the store, the disk): its chain says what to do.
    pub fn internal(e: anyhow::Error) -> ApiError {
        ApiError::chain(StatusCode::INTERNAL_SERVER_ERROR, &crate::db::advise(e))
    }
    /// Something the caller can fix (a config, a policy, an input).
    pub fn usage(e: anyhow::Error) -> ApiError {
        ApiError::chain(StatusCode::BAD_REQUEST, &e)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError::internal(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "causes": self.causes});
        (self.status, axum::Json(body)).into_response()
    }
}
