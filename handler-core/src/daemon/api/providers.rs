//! The providers routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::providers::{self as service};
use crate::daemon::state::AppState;
use handler_contracts::control::{ProviderInfo, ProviderRequest, ProviderTemplate};

/// GET /v1/provider-templates
pub async fn list_templates(State(app): State<AppState>) -> Json<Vec<ProviderTemplate>> {
    let v = service::list_templates(&app).await;
    Json(v)
}

/// GET /v1/providers
pub async fn list(State(app): State<AppState>) -> Json<Vec<ProviderInfo>> {
    let v = service::list(&app).await;
    Json(v)
}

/// GET /v1/providers/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<ProviderInfo>> {
    let v = service::get(&app, name).await?;
    Ok(Json(v))
}

/// POST /v1/providers
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ProviderRequest>,
) -> ApiResult<(StatusCode, Json<ProviderInfo>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/providers/{name}
pub async fn replace(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<ProviderRequest>,
) -> ApiResult<Json<ProviderInfo>> {
    let v = service::replace(&app, name, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/providers/{name}
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}
