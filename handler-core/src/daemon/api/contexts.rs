//! The contexts routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::ContextInfo;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::contexts::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
use handler_contracts::control::ContextRequest;

/// GET /v1/contexts
pub async fn list(State(app): State<AppState>) -> Json<Vec<ContextInfo>> {
    let v = service::list(&app).await;
    Json(v)
}

/// GET /v1/contexts/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<ContextInfo>> {
    let v = service::get(&app, name).await?;
    Ok(Json(v))
}

/// POST /v1/contexts
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ContextRequest>,
) -> ApiResult<(StatusCode, Json<ContextInfo>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/contexts/{name}: its colour.
pub async fn replace(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<ContextRequest>,
) -> ApiResult<Json<ContextInfo>> {
    let v = service::replace(&app, name, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/contexts/{name}: refused (409) while a project is in it.
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The contexts routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/contexts",
            "The project contexts (D.19)",
            None,
            (200, Some(s::<Vec<ContextInfo>>)),
            routing::get(list),
        ),
        r(
            "POST",
            "/v1/contexts",
            "Create a context",
            Some(s::<ContextRequest>),
            (201, Some(s::<ContextInfo>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/contexts/{name}",
            "One context",
            None,
            (200, Some(s::<ContextInfo>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/contexts/{name}",
            "Change a context's colour",
            Some(s::<ContextRequest>),
            (200, Some(s::<ContextInfo>)),
            routing::put(replace),
        ),
        r(
            "DELETE",
            "/v1/contexts/{name}",
            "Remove a context no project is in",
            None,
            (204, None),
            routing::delete(delete),
        ),
    ]
}
