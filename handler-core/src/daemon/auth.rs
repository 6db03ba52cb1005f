//! The daemon's token (created 0600 on first start) and the check of `Authorization: Bearer`
//! on every route (401 otherwise).

use std::path::Path;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::fsutil;
use super::problem::ApiError;

/// Reads the token, or makes one (32 random bytes, hex) in a file of mode 0600.
pub fn load_or_create_token(path: &Path) -> std::io::Result<String> {
    if let Some(t) = fsutil::read_optional(path)? {
        let t = t.trim().to_string();
        if t.len() >= 32 {
            return Ok(t);
        }
        tracing::warn!(path = %path.display(), "the token file is too short: making a new token");
    }
    let bytes: [u8; 32] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    fsutil::write_atomic(path, format!("{token}\n").as_bytes(), 0o600)?;
    tracing::info!(path = %path.display(), "made the daemon's token");
    Ok(token)
}

/// Compares in time independent of where they differ.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token an `Authorization: Bearer` header gives, if any.
pub fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Middleware: every route needs the token; the ACP sockets may carry it as a subprotocol
/// instead (C.1), which their handler checks.
pub async fn require_token(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let ok = bearer(&req).is_some_and(|t| token_matches(&app.token, t));
    let ws_route = req.uri().path().ends_with("/acp");
    if ok || ws_route {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}
