//! The page shell and the pieces pages share: who is signed in (a page
//! without a session or token sends the browser to the sign-in form), the
//! navigation (only what the caller's role may use), the CSRF token each form
//! carries, a run's status (a word and a sign, so it reads without colour), an
//! age, and the error page every refusal becomes.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::{StatusCode, request::Parts};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use crate::serve::Server;
use crate::serve::auth::session::CSRF_FIELD;
use crate::serve::auth::{Caller, Role, Via};

/// The caller of a page; without a session or a token the answer is the sign-in form.
pub struct Viewer(pub Caller);

impl FromRequestParts<Arc<Server>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        server: &Arc<Server>,
    ) -> Result<Viewer, Response> {
        match crate::serve::api::extract::authenticate(&parts.headers, server) {
            Ok(c) => Ok(Viewer(c)),
            Err(e) if e.status == StatusCode::UNAUTHORIZED => {
                Err(Redirect::to("/login").into_response())
            }
            Err(e) => Err(error(&Ctx::anonymous(), e.status, &e.error)),
        }
    }
}

/// What every page of a caller knows: who, and the token its forms carry.
pub struct Ctx {
    pub caller: Option<Caller>,
    /// Pending approvals of the tenant (at most [`PENDING_SHOWN`] counted).
    pub pending: usize,
    /// The store is shared (PostgreSQL): `loopbox worker` processes drive the
    /// runs, and the navigation shows them.
    pub workers: bool,
}

/// Pending approvals counted for the navigation; more read "99+".
pub const PENDING_SHOWN: usize = 100;

impl Ctx {
    pub fn anonymous() -> Ctx {
        Ctx {
            caller: None,
            pending: 0,
            workers: false,
        }
    }

    /// The caller's page context: the tenant's pending approvals counted once.
    pub fn of(server: &Server, caller: &Caller) -> Ctx {
        let pending = server
            .store
            .db()
            .approvals(&crate::db::approvals::ApprovalFilter {
                tenant: Some(caller.tenant.clone()),
                run: None,
                status: Some(crate::db::approvals::ApprovalStatus::Pending),
                limit: PENDING_SHOWN,
            })
            .map(|a| a.len())
            .unwrap_or(0);
        Ctx {
            caller: Some(caller.clone()),
            pending,
            workers: server.data.is_shared(),
        }
    }

    /// Whether the caller may do what `role` may.
    pub fn may(&self, role: Role) -> bool {
        self.caller.as_ref().is_some_and(|c| c.role >= role)
    }

    /// The hidden CSRF field of a form (empty for a bearer token, which needs none).
    pub fn csrf(&self) -> Markup {
        let token = match self.caller.as_ref().map(|c| &c.via) {
            Some(Via::Session { csrf, .. }) => csrf.as_str(),
            _ => "",
        };
        html! { input type="hidden" name=(CSRF_FIELD) value=(token); }
    }
}

/// Untrusted text as a page shows it: the characters that reorder or hide
/// text (bidi overrides, zero-width, controls) as visible escapes, so a
/// command cannot read as another; maud escapes the HTML.
pub fn untrusted(s: &str) -> String {
    crate::ui::sanitize(s)
}

/// A JSON value as short text: a string as it is, anything else as compact JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => untrusted(s),
        Value::Null => String::new(),
        v => untrusted(&v.to_string()),
    }
}

/// A JSON value spelled out for a `<pre>` (pretty JSON; a string as it is).
pub fn pretty(v: &Value) -> String {
    match v {
        Value::String(s) => untrusted(s),
        v => untrusted(&serde_json::to_string_pretty(v).unwrap_or_default()),
    }
}

/// The sections of the navigation, and who sees each.
const NAV: [(&str, &str, Role); 7] = [
    ("/runs", "Runs", Role::Viewer),
    // On a shared store only: the workers that drive the runs.
    ("/workers", "Workers", Role::Viewer),
    ("/approvals", "Approvals", Role::Viewer),
    ("/policies", "Policies", Role::Viewer),
    ("/audit", "Audit", Role::Viewer),
    ("/tokens", "Tokens", Role::Admin),
    ("/webhooks", "Webhooks", Role::Admin),
];

/// A whole page: `here` is the navigation entry it belongs to; `refresh_ms`,
/// when set, has the script reload its live parts that often.
pub fn page(ctx: &Ctx, title: &str, here: &str, refresh_ms: Option<u32>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · loopbox" }
                link rel="stylesheet" href=(super::assets::CSS_PATH);
                link rel="icon" href=(super::assets::ICON_PATH);
                script src=(super::assets::JS_PATH) defer {}
            }
            body data-refresh=[refresh_ms] {
                header.top {
                    a.brand href="/runs" { "loopbox" }
                    @if let Some(c) = &ctx.caller {
                        nav {
                            @for (href, name, role) in NAV {
                                @if c.role >= role && (href != "/workers" || ctx.workers) {
                                    a href=(href) aria-current=[(href == here).then_some("page")] {
                                        (name)
                                        // Always there (hidden at 0), so the script can show the first one that comes.
                                        @if href == "/approvals" {
                                            " " span.count #pending-count title="pending approvals" hidden[ctx.pending == 0] {
                                                @if ctx.pending >= PENDING_SHOWN { "99+" } @else { (ctx.pending) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        form.who method="post" action="/logout" {
                            (ctx.csrf())
                            span { (c.tenant) " / " (c.name) " " span.role { (c.role.as_str()) } }
                            @if matches!(c.via, Via::Session { .. }) {
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A run's status as a word and a sign (for those who cannot tell the colours apart).
pub fn status(s: &str) -> Markup {
    let sign = match s {
        // Signs every common font has (Debian's chromium showed ⏸ as a box).
        "queued" => "○",
        "running" => "▶",
        "waiting" => "◐",
        "interrupted" => "⚠",
        "done" => "✓",
        "failed" => "✗",
        "escalated" => "⇡",
        "cancelled" => "⊘",
        "pending" => "?",
        "approved" => "✓",
        "denied" => "✗",
        "expired" => "◌",
        "void" => "⊘",
        _ => "·",
    };
    let class = match s {
        "queued" | "running" | "waiting" | "interrupted" | "done" | "failed" | "escalated"
        | "cancelled" | "pending" | "approved" | "denied" | "expired" | "void" => s,
        _ => "other",
    };
    html! { span class={ "status s-" (class) } { span.sign aria-hidden="true" { (sign) } " " (untrusted(s)) } }
}

/// How long ago `ms` was, in words, with the exact time on hover.
pub fn age(ms: i64, now_ms: i64) -> Markup {
    let exact = crate::ui::rfc3339(ms);
    html! { time datetime=(exact) title=(exact) { (ago(now_ms - ms)) } }
}

/// `RFC 3339` text from the API as an age; the text itself when it does not parse.
pub fn age_of(rfc: &str, now_ms: i64) -> Markup {
    match parse_rfc3339(rfc) {
        Some(ms) => age(ms, now_ms),
        None => html! { (untrusted(rfc)) },
    }
}

pub fn ago(d_ms: i64) -> String {
    if d_ms < 5000 {
        return "just now".into();
    }
    format!("{} ago", span(d_ms))
}

/// A time to come, `d_ms` from now, in words.
pub fn until(d_ms: i64) -> String {
    if d_ms <= 0 {
        return "now".into();
    }
    format!("in {}", span(d_ms))
}

fn span(d_ms: i64) -> String {
    let s = d_ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// `2026-11-27T00:15:53.565Z` as ms since the epoch (the API's own format only).
pub fn parse_rfc3339(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[10] != b'T' || b[23] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, min, s, ms) = (n(11..13)?, n(14..16)?, n(17..19)?, n(20..23)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + h) * 60 + min) * 60 + s) * 1000 + ms)
}

/// A refusal or a failure as a page, with the status that fits and a way on.
pub fn error(ctx: &Ctx, status: StatusCode, message: &str) -> Response {
    let (title, next) = match status {
        StatusCode::UNAUTHORIZED => ("Sign in first", ("/login", "Sign in")),
        StatusCode::FORBIDDEN => ("Not allowed", ("/runs", "Back to the runs")),
        StatusCode::NOT_FOUND => ("Not found", ("/runs", "Back to the runs")),
        StatusCode::CONFLICT => ("Not now", ("/runs", "Back to the runs")),
        s if s.is_client_error() => ("That did not work", ("/runs", "Back to the runs")),
        _ => ("The server failed", ("/runs", "Back to the runs")),
    };
    let body = html! {
        section.card.error role="alert" {
            h1 { (title) }
            p.message { (untrusted(message)) }
            p { a href=(next.0) { (next.1) } }
        }
    };
    (status, page(ctx, title, "", None, body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_times_read_back_and_ages_read_in_words() {
        let ms = 1_795_654_553_565;
        assert_eq!(parse_rfc3339(&crate::ui::rfc3339(ms)), Some(ms));
        assert_eq!(parse_rfc3339("2026-11-27"), None);
        assert_eq!(ago(1000), "just now");
        assert_eq!(ago(90_000), "1 min ago");
        assert_eq!(ago(7_200_000), "2 h ago");
    }

    #[test]
    fn a_status_reads_without_colour_and_a_strange_one_is_escaped() {
        let s = status("waiting").into_string();
        assert!(
            s.contains("◐") && s.contains("waiting") && s.contains("s-waiting"),
            "{s}"
        );
        let s = status("<b>x</b>").into_string();
        assert!(s.contains("&lt;b&gt;") && s.contains("s-other"), "{s}");
    }
}
