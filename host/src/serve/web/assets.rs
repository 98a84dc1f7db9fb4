//! The dashboard's one stylesheet, one script and icon, hand-written and
//! compiled into the binary: nothing is built, fetched or loaded from
//! elsewhere (the pages' CSP allows this server's files only).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

pub const CSS_PATH: &str = "/assets/app.css";
pub const JS_PATH: &str = "/assets/app.js";
pub const ICON_PATH: &str = "/assets/icon.svg";

const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");
const ICON: &str = include_str!("assets/icon.svg");

pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.css" => (CSS, "text/css; charset=utf-8"),
        "app.js" => (JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            // Small, and changed with the binary: checked again on each use.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
