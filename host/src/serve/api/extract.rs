//! Reading a request: who calls ([`Authed`]), and for a request that changes
//! something, the caller, the CSRF check a session cookie needs, and the body
//! ([`Acting`]), read to `server.max_body_bytes` at most and parsed as JSON,
//! or as a form for the dashboard's `application/x-www-form-urlencoded` posts.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, header, request::Parts};
use serde::de::DeserializeOwned;

use super::error::{ApiError, ApiResult};
use super::refusal::{Asked, refuse};
use crate::serve::Server;
use crate::serve::auth::session::{self, CSRF_FIELD, CSRF_HEADER};
use crate::serve::auth::{Caller, Via};

/// The caller of a request that only reads.
pub struct Authed(pub Caller);

/// A request that acts: its caller (CSRF-checked when it came by cookie) and its body.
pub struct Acting<T> {
    pub caller: Caller,
    pub body: T,
}

/// A request's body with no caller (signing in).
pub struct Body<T>(pub T);

/// A request's query string, parsed; a bad one is a JSON 400 like every error.
pub struct Q<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> ApiResult<Q<T>> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or(""))
            .map(Q)
            .map_err(|e| {
                ApiError::bad_request(format!("the query string does not fit this request: {e}"))
            })
    }
}

/// Who sent the request: a bearer token, else a session cookie.
pub fn authenticate(headers: &HeaderMap, server: &Server) -> ApiResult<Caller> {
    let caller = if let Some(h) = headers.get(header::AUTHORIZATION) {
        let text = h
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                ApiError::unauthorized(
                    "the Authorization header must read `Bearer lbx_…`, with a token from `loopbox serve token create`",
                )
            })?;
        server.store.authenticate(text.trim())?.ok_or_else(|| {
            ApiError::unauthorized(
                "the token is not valid: it is wrong, or it was revoked; ask an admin of your tenant for a new one",
            )
        })?
    } else if let Some(cookie) = session::from_headers(
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    ) {
        server.store.session(cookie)?.ok_or_else(|| {
            ApiError::unauthorized(
                "your session has ended (it expired, you signed out, or its token was revoked); sign in again",
            )
        })?
    } else {
        return Err(ApiError::unauthorized(
            "this needs a token: send `Authorization: Bearer lbx_…` (from `loopbox serve token create`), or sign in with POST /api/v1/session",
        ));
    };
    if server.tenants.get(&caller.tenant).is_none() {
        return Err(ApiError::unauthorized(format!(
            "tenant `{}` is no longer in the server config, so its tokens are not accepted",
            caller.tenant
        )));
    }
    Ok(caller)
}

/// A request carried by a browser from another site is refused: its `Origin`
/// (when sent) must be this server's own `Host`.
pub fn same_origin(headers: &HeaderMap) -> ApiResult<()> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'));
    match (origin_host, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(ApiError::forbidden(
            "the request comes from another site (its Origin is not this server): refused",
        )),
    }
}

impl FromRequestParts<Arc<Server>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> ApiResult<Authed> {
        authenticate(&parts.headers, server).map(Authed)
    }
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// How long a client may take to send a request's body.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The body, read to the server's limit; the error names the limit.
async fn read(req: Request, server: &Server) -> ApiResult<(Parts, axum::body::Bytes)> {
    let limit = server.settings.max_body_bytes;
    let too_large = || {
        ApiError::too_large(format!(
            "the request body is over the server's limit (server.max_body_bytes = {limit}); send less"
        ))
    };
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let read = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, limit as usize))
        .await
        .map_err(|_| {
            ApiError::new(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s; send it at once",
                    BODY_TIMEOUT.as_secs()
                ),
            )
        })?;
    let bytes = read.map_err(|e| {
        if format!("{e:?}").contains("LengthLimit") {
            too_large()
        } else {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        }
    })?;
    Ok((parts, bytes))
}

/// `bytes` as a `T`: a form, or JSON (an empty body is `{}`).
fn parse<T: DeserializeOwned>(headers: &HeaderMap, bytes: &[u8]) -> ApiResult<T> {
    // `curl -d '{...}'` labels JSON as a form: a body that opens an object is JSON.
    let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if is_form(headers) && !object {
        // The CSRF field was checked already; it is no part of the request itself.
        let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(bytes)
            .map_err(|e| ApiError::bad_request(format!("the form cannot be read: {e}")))?;
        let rest: Vec<&(String, String)> = fields.iter().filter(|(k, _)| k != CSRF_FIELD).collect();
        let text = serde_urlencoded::to_string(rest)
            .map_err(|e| ApiError::bad_request(format!("the form cannot be read: {e}")))?;
        return serde_urlencoded::from_str(&text).map_err(|e| {
            ApiError::bad_request(format!("the form does not fit this request: {e}"))
        });
    }
    let text = if bytes.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| {
        let what = if e.is_data() {
            "the request body does not fit this request"
        } else {
            "the request body is not valid JSON"
        };
        ApiError::bad_request(format!("{what}: {e}"))
    })
}

impl<T: DeserializeOwned> FromRequest<Arc<Server>> for Acting<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, server: &Arc<Server>) -> ApiResult<Acting<T>> {
        let caller = authenticate(req.headers(), server)?;
        let (parts, bytes) = read(req, server).await?;
        if let Via::Session { csrf, .. } = &caller.via {
            // Refused for how it came (not what it asked): recorded as the request it was.
            let request = format!("{} {}", parts.method, parts.uri.path());
            let asked = Asked {
                act: "request",
                target: &request,
            };
            same_origin(&parts.headers).map_err(|e| refuse(server, &caller, asked, None, e))?;
            let from_header = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let from_form = is_form(&parts.headers)
                .then(|| {
                    serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
                        .ok()
                        .and_then(|fields| {
                            fields
                                .into_iter()
                                .find(|(k, _)| k == CSRF_FIELD)
                                .map(|(_, v)| v)
                        })
                })
                .flatten();
            if !session::csrf_ok(csrf, from_header.or(from_form).as_deref()) {
                let e = ApiError::forbidden(format!(
                    "the CSRF token is missing or wrong: a request made with a session cookie that changes anything must carry the session's token (header `X-CSRF-Token` or form field `{CSRF_FIELD}`); reload the page and try again"
                ));
                return Err(refuse(server, &caller, asked, None, e));
            }
        }
        let body = parse(&parts.headers, &bytes)?;
        Ok(Acting { caller, body })
    }
}

impl<T: DeserializeOwned> FromRequest<Arc<Server>> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, server: &Arc<Server>) -> ApiResult<Body<T>> {
        same_origin(req.headers())?;
        let (parts, bytes) = read(req, server).await?;
        parse(&parts.headers, &bytes).map(Body)
    }
}
