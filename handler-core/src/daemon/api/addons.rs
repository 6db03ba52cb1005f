//! The addons routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::{
    AddonCatalogEntry, AddonInfo, AddonInstallRequest, AddonInstalled, AddonPreview,
    AddonPreviewRequest, BindingInfo, BindingRequest,
};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::addon_install as install;
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

/// GET /v1/addon-catalog
pub async fn catalog(State(app): State<AppState>) -> Json<Vec<AddonCatalogEntry>> {
    Json(install::catalog(&app).await)
}

/// POST /v1/addons/preview
pub async fn preview(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AddonPreviewRequest>,
) -> ApiResult<Json<AddonPreview>> {
    Ok(Json(install::preview(&app, req).await?))
}

/// POST /v1/addons/install (201)
pub async fn install_addon(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AddonInstallRequest>,
) -> ApiResult<(StatusCode, Json<AddonInstalled>)> {
    let v = install::install(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// DELETE /v1/addons/{name} (204)
pub async fn remove_addon(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    install::remove(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
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
#[expect(
    clippy::too_many_lines,
    reason = "a table: one entry per addons route, no logic"
)]
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
            "DELETE",
            "/v1/addons/{name}",
            "Remove an installed addon (G.5): 409 for a built-in or the user's own, or while a binding uses it",
            None,
            (204, None),
            routing::delete(remove_addon),
        ),
        r(
            "POST",
            "/v1/addons/preview",
            "What installing a source would bring (G.5)",
            Some(s::<AddonPreviewRequest>),
            (200, Some(s::<AddonPreview>)),
            routing::post(preview),
        ),
        r(
            "POST",
            "/v1/addons/install",
            "Install a previewed source (G.5): 422 unless it still has the digest",
            Some(s::<AddonInstallRequest>),
            (201, Some(s::<AddonInstalled>)),
            routing::post(install_addon),
        ),
        r(
            "GET",
            "/v1/addon-catalog",
            "The addon catalog Handler ships, installed or not (G.5)",
            None,
            (200, Some(s::<Vec<AddonCatalogEntry>>)),
            routing::get(catalog),
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
