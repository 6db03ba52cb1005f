//! `POST /v1/token/rotate` (issue 27 F12, decision 0133): a new token written over the token
//! file, the old one refused from the next request on. Clients read the file again (the CLI does
//! at each run); a web UI tab opened with the old token must be opened again (`handler ui`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;

use super::auth;
use super::routes::{Route, r};
use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;

pub(super) fn routes() -> Vec<Route> {
    vec![r(
        "POST",
        "/v1/token/rotate",
        "Replace the daemon's token: the token file gets a new one, the old one is refused from now on",
        None,
        (204, None),
        post(rotate),
    )]
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
