//! The secrets routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::secrets as service;
use crate::daemon::state::AppState;
use axum::routing;
use handler_contracts::control::{SecretInfo, SecretRequest};

/// GET /v1/secrets
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<SecretInfo>>> {
    let v = service::list(&app).await?;
    Ok(Json(v))
}

/// GET /v1/secrets/{path}
pub async fn get(
    State(app): State<AppState>,
    Path(path): Path<String>,
) -> ApiResult<Json<SecretInfo>> {
    let v = service::get(&app, path).await?;
    Ok(Json(v))
}

/// PUT /v1/secrets/{path}: sets a value; `accounts/` is refused (D.9: set through the account).
pub async fn put(
    State(app): State<AppState>,
    Path(path): Path<String>,
    ApiJson(req): ApiJson<SecretRequest>,
) -> ApiResult<Json<SecretInfo>> {
    let v = service::put(&app, path, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/secrets/{path}
pub async fn delete(
    State(app): State<AppState>,
    Path(path): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, path).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The secrets routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/secrets",
            "The secret store's paths and descriptions (D.14), never values",
            None,
            (200, Some(s::<Vec<SecretInfo>>)),
            routing::get(list),
        ),
        r(
            "GET",
            "/v1/secrets/{*path}",
            "One secret's description, never its value",
            None,
            (200, Some(s::<SecretInfo>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/secrets/{*path}",
            "Set a secret (not under accounts/)",
            Some(s::<SecretRequest>),
            (200, Some(s::<SecretInfo>)),
            routing::put(put),
        ),
        r(
            "DELETE",
            "/v1/secrets/{*path}",
            "Remove a secret",
            None,
            (204, None),
            routing::delete(delete),
        ),
    ]
}
