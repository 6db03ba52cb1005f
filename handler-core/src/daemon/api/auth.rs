//! The daemon's token (created 0600 on first start) and the checks every request passes, in
//! this order: its `Host` (421 unless the daemon's own loopback name and port: DNS rebinding),
//! its `Origin` when it carries one (403 unless allowed: cross-site requests), then the token
//! (401). The token comes in `Authorization: Bearer` on every route; only the routes the table
//! marks as WebSocket upgrades (`routes::Route::upgrade`) may carry it as the `bearer.<token>`
//! subprotocol instead, checked here before the upgrade is accepted.

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use handler_contracts::acp::SUBPROTOCOL_BEARER_PREFIX;

use crate::daemon::fsutil;
use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;

/// Reads the token, or makes one (32 random bytes, hex) in a file of mode 0600.
///
/// An existing token file must be a regular file of this user: otherwise it is refused. One that
/// others could read (group or other bits) is replaced by a new token, since the old one may have
/// been read; one of another mode of the owner's only (0400, 0700) is set to 0600. Both loudly.
pub fn load_or_create_token(path: &Path) -> std::io::Result<String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_file() {
                return Err(std::io::Error::other(
                    "not a regular file (a link, folder or device is refused)",
                ));
            }
            if meta.uid() != nix::unistd::geteuid().as_raw() {
                return Err(std::io::Error::other(format!(
                    "owned by uid {}, not by this user",
                    meta.uid()
                )));
            }
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), mode = format!("{mode:o}"),
                    "the token file could be read by others: making a new token (clients must read it again)");
                return make_token(path);
            }
            if mode != 0o600 {
                tracing::warn!(path = %path.display(), mode = format!("{mode:o}"),
                    "the token file's mode was not 0600: set to 0600");
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(t) = fsutil::read_optional(path)? {
        let t = t.trim().to_string();
        if t.len() >= 32 {
            return Ok(t);
        }
        tracing::warn!(path = %path.display(), "the token file is too short: making a new token");
    }
    make_token(path)
}

/// A new token in place of the old one (`POST /v1/token/rotate`, decision 0133): written
/// atomically (0600), the daemon then refuses the old one.
pub fn rotate_token(path: &Path) -> std::io::Result<String> {
    make_token(path)
}

fn make_token(path: &Path) -> std::io::Result<String> {
    let bytes: [u8; 32] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    fsutil::write_atomic(path, format!("{token}\n").as_bytes(), 0o600)?;
    tracing::info!(path = %path.display(), "made the daemon's token");
    Ok(token)
}

/// Compares in time independent of where they differ.
pub fn token_matches(expected: &str, given: &str) -> bool {
    handler_contracts::remote::same_secret(expected, given)
}

/// The token an `Authorization: Bearer` header gives, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The subprotocols a WebSocket client offers, in order.
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether the `Authorization: Bearer` header carries the token.
pub fn header_token_ok(headers: &HeaderMap, token: &str) -> bool {
    bearer(headers).is_some_and(|t| token_matches(token, t))
}

/// Whether one of the offered subprotocols is `bearer.<token>` (WebSocket routes only).
pub fn protocol_token_ok(headers: &HeaderMap, token: &str) -> bool {
    offered_protocols(headers).iter().any(|p| {
        p.strip_prefix(SUBPROTOCOL_BEARER_PREFIX)
            .is_some_and(|t| token_matches(token, t))
    })
}

/// Whether a `Host` is the daemon's own: `127.0.0.1`, `localhost` or `[::1]` with exactly its
/// port (names compared without regard to case). Anything else is a name some page made point
/// at loopback (DNS rebinding), or a request meant for someone else.
pub fn host_allowed(host: &str, port: u16) -> bool {
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    if p != port.to_string() {
        return false;
    }
    name == "127.0.0.1" || name == "[::1]" || name.eq_ignore_ascii_case("localhost")
}

/// The origins always allowed: the daemon's own (`http://127.0.0.1:<port>`,
/// `http://localhost:<port>`, `http://[::1]:<port>`).
pub fn own_origins(port: u16) -> [String; 3] {
    [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ]
}

/// Whether an `Origin` is allowed: the daemon's own or one of the configured list, compared
/// exactly (`null`, another port or scheme: refused).
pub fn origin_allowed(origin: &str, configured: &[String], port: u16) -> bool {
    own_origins(port).iter().any(|o| o == origin) || configured.iter().any(|o| o == origin)
}

/// The mark of a request that came over handlerd's unix socket (decision 0135), set by the
/// server on that listener only: its peer is this user (checked at accept), and no browser can
/// reach a unix socket, so its `Host` is not checked (the token still is).
#[derive(Debug, Clone, Copy)]
pub struct ViaSocket;

/// Middleware, outside the token check: 421 for a `Host` that is not the daemon's own (not
/// checked over the unix socket: [`ViaSocket`]), 403 for an `Origin` outside the allow-list, on
/// every route and on unknown ones.
pub async fn check_host_and_origin(
    State(app): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let port = app.port();
    let via_socket = req.extensions().get::<ViaSocket>().is_some();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_string()));
    if !via_socket && !host.as_deref().is_some_and(|h| host_allowed(h, port)) {
        tracing::warn!(host = ?host, "request refused: Host is not the daemon's own");
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected request",
            format!("Host must be 127.0.0.1:{port}, localhost:{port} or [::1]:{port}"),
        )
        .into_response();
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let o = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        if !origin_allowed(&o, &app.config.allowed_origins, port) {
            tracing::warn!(origin = %o, path = %req.uri().path(), "request refused: origin not allowed");
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "origin not allowed",
                format!("Origin {o:?} is not in the allow-list (HANDLER_ALLOWED_ORIGINS)"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The routes (method, router path) that are WebSocket upgrades, from the route table.
pub type Upgrades = Arc<HashSet<(&'static str, &'static str)>>;

/// Middleware: every route needs `Authorization: Bearer <token>`; a route the table marks as a
/// WebSocket upgrade, matched by method and router path (never by how the path looks), may
/// carry the token as the `bearer.<token>` subprotocol instead (C.1).
pub async fn require_token(
    State((app, upgrades)): State<(AppState, Upgrades)>,
    req: Request,
    next: Next,
) -> Response {
    let upgrade = req
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|m| upgrades.contains(&(req.method().as_str(), m.as_str())))
        .then_some(());
    let token = app.token();
    let ok = header_token_ok(req.headers(), &token)
        || upgrade.is_some() && protocol_token_ok(req.headers(), &token);
    if ok {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_daemons_own_hosts_with_its_port() {
        for h in [
            "127.0.0.1:7430",
            "localhost:7430",
            "LocalHost:7430",
            "[::1]:7430",
        ] {
            assert!(host_allowed(h, 7430), "{h}");
        }
        for h in [
            "evil.example:7430",
            "127.0.0.1",
            "localhost",
            "127.0.0.1:7431",
            "127.0.0.1:07430",
            "127.0.0.1:+7430",
            "localhost.:7430",
            "app.localhost:7430",
            "127.0.0.2:7430",
            "0.0.0.0:7430",
            "[::1]",
            "::1:7430",
            "user@127.0.0.1:7430",
            "",
            ":7430",
        ] {
            assert!(!host_allowed(h, 7430), "{h}");
        }
    }

    #[test]
    fn origins_own_or_configured_exactly() {
        let conf = vec!["http://ui.local".to_string()];
        assert!(origin_allowed("http://127.0.0.1:7430", &conf, 7430));
        assert!(origin_allowed("http://localhost:7430", &conf, 7430));
        assert!(origin_allowed("http://[::1]:7430", &conf, 7430));
        assert!(origin_allowed("http://ui.local", &conf, 7430));
        for o in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:7431",
            "https://127.0.0.1:7430",
            "http://ui.local:80",
            "http://ui.local/",
            "",
        ] {
            assert!(!origin_allowed(o, &conf, 7430), "{o}");
        }
    }
}
