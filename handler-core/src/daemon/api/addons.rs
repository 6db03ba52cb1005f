//! The addons routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::{AddonInfo, BindingInfo, BindingRequest};

use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::addons as service;
use crate::daemon::state::AppState;

/// GET /v1/addons
pub async fn list_addons(State(app): State<AppState>) -> Json<Vec<AddonInfo>> {
    let v = service::list_addons(&app).await;
    Json(v)
}

/// GET /v1/addons/{name}
pub async fn get_addon(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AddonInfo>> {
    let v = service::get_addon(&app, name).await?;
    Ok(Json(v))
}

/// GET /v1/bindings
pub async fn list_bindings(State(app): State<AppState>) -> Json<Vec<BindingInfo>> {
    let v = service::list_bindings(&app).await;
    Json(v)
}

/// GET /v1/bindings/{name}
pub async fn get_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<BindingInfo>> {
    let v = service::get_binding(&app, name).await?;
    Ok(Json(v))
}

/// POST /v1/bindings: a new binding (201); its secret values to the secret store.
pub async fn create_binding(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<BindingRequest>,
) -> ApiResult<(StatusCode, Json<BindingInfo>)> {
    let v = service::create_binding(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/bindings/{name}: replace it (and rename it when the body names another: the agents
/// that picked it follow).
pub async fn replace_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<BindingRequest>,
) -> ApiResult<Json<BindingInfo>> {
    let v = service::replace_binding(&app, name, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/bindings/{name}: refused (409) while an agent picked it; its stored secrets go.
pub async fn delete_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete_binding(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}
