//! The providers routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::providers::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
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

/// The providers routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/provider-templates",
            "Provider templates (D.12)",
            None,
            (200, Some(s::<Vec<ProviderTemplate>>)),
            routing::get(list_templates),
        ),
        r(
            "GET",
            "/v1/providers",
            "The providers (D.12)",
            None,
            (200, Some(s::<Vec<ProviderInfo>>)),
            routing::get(list),
        ),
        r(
            "POST",
            "/v1/providers",
            "Create a provider (its key to the secret store)",
            Some(s::<ProviderRequest>),
            (201, Some(s::<ProviderInfo>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/providers/{name}",
            "One provider",
            None,
            (200, Some(s::<ProviderInfo>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/providers/{name}",
            "Replace a provider (a hand-written key reference kept unless a key is given)",
            Some(s::<ProviderRequest>),
            (200, Some(s::<ProviderInfo>)),
            routing::put(replace),
        ),
        r(
            "DELETE",
            "/v1/providers/{name}",
            "Remove a provider and its stored key",
            None,
            (204, None),
            routing::delete(delete),
        ),
    ]
}
