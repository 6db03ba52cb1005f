//! The accounts routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::accounts::{self as service};
use crate::daemon::state::AppState;
use handler_contracts::control::{AccountInfo, AccountRequest, LoginFileRequest, TokenInput};

/// GET /v1/accounts
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<AccountInfo>>> {
    let v = service::list(&app).await?;
    Ok(Json(v))
}

/// GET /v1/accounts/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::get(&app, name).await?;
    Ok(Json(v))
}

/// POST /v1/accounts
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AccountRequest>,
) -> ApiResult<(StatusCode, Json<AccountInfo>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/accounts/{name}
pub async fn replace(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<AccountRequest>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::replace(&app, name, req).await?;
    Ok(Json(v))
}

/// PUT /v1/accounts/{name}/token
pub async fn set_token(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(t): ApiJson<TokenInput>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::set_token(&app, name, t).await?;
    Ok(Json(v))
}

/// PUT /v1/accounts/{name}/login: keeps a file login's credential file (0600).
pub async fn set_login_file(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<LoginFileRequest>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::set_login_file(&app, name, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/accounts/{name}: its file, its pasted token, its credential file.
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}
