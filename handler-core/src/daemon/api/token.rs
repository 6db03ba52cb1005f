//! `POST /v1/token/rotate` (issue 27 F12, decision 0133): a new token written over the token
//! file, the old one refused from the next request on. Clients read the file again (the CLI does
//! at each run); a web UI tab opened with the old token must be opened again (`handler ui`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;

use axum::Json;
use handler_contracts::control::UiCode;

use super::auth;
use super::routes::{Route, r, s};
use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;

pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "POST",
            "/v1/token/rotate",
            "Replace the daemon's token: the token file gets a new one, the old one is refused from now on",
            None,
            (204, None),
            post(rotate),
        ),
        r(
            "POST",
            "/v1/ui/code",
            "A one-time code (60 s) the web UI's page exchanges for the token at POST /ui/exchange, so no URL carries the token",
            None,
            (201, Some(s::<UiCode>)),
            post(ui_code),
        ),
    ]
}

/// How long a web UI code is valid.
pub const UI_CODE_TTL: std::time::Duration = std::time::Duration::from_secs(60);

async fn ui_code(State(app): State<AppState>) -> (StatusCode, Json<UiCode>) {
    let code = format!("{:032x}", rand::random::<u128>());
    let now = std::time::Instant::now();
    let mut codes = app
        .ui_codes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    codes.retain(|_, until| *until > now);
    codes.insert(code.clone(), now + UI_CODE_TTL);
    drop(codes);
    (
        StatusCode::CREATED,
        Json(UiCode {
            code,
            expires_in_seconds: UI_CODE_TTL.as_secs(),
        }),
    )
}

/// `POST /ui/exchange` `{"code": …}` (outside the token check, inside the Host and Origin
/// checks): the token, once per code, while it is valid; else 401. The code is gone after.
pub(super) async fn exchange(
    State(app): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "code refused",
            "code: unknown, used or older than 60 s (run handler ui again)",
        )
    };
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
        .ok_or_else(|| ApiError::bad_request("body invalid", "a JSON object with a code"))?;
    let until = app
        .ui_codes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&code)
        .ok_or_else(refused)?;
    if until <= std::time::Instant::now() {
        return Err(refused());
    }
    tracing::info!("a web UI code was exchanged for the token");
    Ok(Json(serde_json::json!({ "token": app.token() })))
}

async fn rotate(State(app): State<AppState>) -> Result<StatusCode, ApiError> {
    let path = app.config.token_path();
    let _guard = app.write_lock.lock().await;
    let token = auth::rotate_token(&path).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "token not rotated",
            format!("cannot write {}: {e}", path.display()),
        )
    })?;
    *app.token
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = token;
    tracing::info!(path = %path.display(), "the daemon's token rotated: the old one is refused");
    Ok(StatusCode::NO_CONTENT)
}
