//! The addons routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::{AddonInfo, BindingInfo, BindingRequest};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::addons as service;
use crate::daemon::state::AppState;
use axum::routing;

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

/// The addons routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/addons",
            "The addons, built-in and the user's (G.1)",
            None,
            (200, Some(s::<Vec<AddonInfo>>)),
            routing::get(list_addons),
        ),
        r(
            "GET",
            "/v1/addons/{name}",
            "One addon",
            None,
            (200, Some(s::<AddonInfo>)),
            routing::get(get_addon),
        ),
        r(
            "GET",
            "/v1/bindings",
            "The bindings (G.2): secret slot names only, never references or values",
            None,
            (200, Some(s::<Vec<BindingInfo>>)),
            routing::get(list_bindings),
        ),
        r(
            "POST",
            "/v1/bindings",
            "Create a binding (D.15): its secret values to the secret store",
            Some(s::<BindingRequest>),
            (201, Some(s::<BindingInfo>)),
            routing::post(create_binding),
        ),
        r(
            "GET",
            "/v1/bindings/{name}",
            "One binding",
            None,
            (200, Some(s::<BindingInfo>)),
            routing::get(get_binding),
        ),
        r(
            "PUT",
            "/v1/bindings/{name}",
            "Replace (and rename) a binding; a secret slot left out keeps its own",
            Some(s::<BindingRequest>),
            (200, Some(s::<BindingInfo>)),
            routing::put(replace_binding),
        ),
        r(
            "DELETE",
            "/v1/bindings/{name}",
            "Remove a binding no agent picked, and its stored secrets",
            None,
            (204, None),
            routing::delete(delete_binding),
        ),
    ]
}
