//! The web UI (D intro, issue 17): the single-page app built into `handler-core/web/dist/`,
//! embedded at compile time and served at `/` without the token — its files hold no data; every
//! call they make carries the token (`Authorization: Bearer`, the `bearer.<token>` subprotocol).
//! Every answer carries the Content-Security-Policy (scripts and connections to the daemon
//! itself only, no inline script, no framing), `X-Content-Type-Options: nosniff` and
//! `Referrer-Policy: no-referrer`. The Host check (421) applies as on every route.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use include_dir::{Dir, include_dir};

use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;

/// The built app (`npm run build` in `handler-core/web`, committed: decision 0106).
static DIST: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/web/dist");

/// The Content-Security-Policy of every UI answer, for a daemon on `port`: its own origin for
/// everything, its WebSocket URLs for connections (`'self'` does not cover `ws:` everywhere), no inline script or style element, no
/// plugin, no framing, no `<base>`.
pub fn content_security_policy(port: u16) -> String {
    // Chromium refuses an IPv6 literal as a CSP source: the UI is opened on 127.0.0.1 or
    // localhost (`handler ui`), whose WebSocket URLs these are.
    let ws: Vec<String> = ["127.0.0.1", "localhost"]
        .iter()
        .map(|h| format!("ws://{h}:{port}"))
        .collect();
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         font-src 'self'; connect-src 'self' {}; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'",
        ws.join(" ")
    )
}

/// The media type of a file the build emits, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "map") => "application/json",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn file(app: &AppState, path: &str, immutable: bool) -> Response {
    let Some(f) = DIST.get_file(path) else {
        return ApiError::not_found(format!("no file {path:?} in the web UI")).into_response();
    };
    let mut res = (StatusCode::OK, f.contents()).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(path)),
    );
    if let Ok(v) = HeaderValue::from_str(&content_security_policy(app.port())) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    res
}

async fn index(State(app): State<AppState>) -> Response {
    file(&app, "index.html", false)
}

async fn asset(State(app): State<AppState>, Path(rest): Path<String>) -> Response {
    // The build names assets by their content's hash: they never change.
    file(&app, &format!("assets/{rest}"), true)
}

async fn favicon(State(app): State<AppState>) -> Response {
    file(&app, "favicon.svg", false)
}

/// The UI's routes: `/`, `/index.html`, `/favicon.svg` and `/assets/…`, and `POST
/// /ui/exchange` (a one-time code for the token: decision 0133), unauthenticated (the router puts
/// them outside the token check, inside the Host and Origin checks).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/favicon.svg", get(favicon))
        .route("/assets/{*path}", get(asset))
        .route("/ui/exchange", axum::routing::post(super::token::exchange))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_the_daemon_only() {
        let p = content_security_policy(7430);
        assert!(p.contains("script-src 'self';"), "{p}");
        assert!(
            p.contains("connect-src 'self' ws://127.0.0.1:7430 ws://localhost:7430;"),
            "{p}"
        );
        assert!(p.contains("frame-ancestors 'none'"), "{p}");
        assert!(!p.contains("unsafe"), "{p}");
    }

    #[test]
    fn the_built_app_is_embedded() {
        let html = DIST
            .get_file("index.html")
            .and_then(|f| f.contents_utf8())
            .expect("web/dist/index.html");
        assert!(html.contains("/assets/"), "{html}");
        assert!(!html.contains("<script>"), "no inline script: {html}");
        assert_eq!(
            content_type("assets/x.js"),
            "text/javascript; charset=utf-8"
        );
    }
}
