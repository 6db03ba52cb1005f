//! The caches routes (Settings → Caches, D.8, decision 0087): parse, call the service, answer.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::control::{CacheClearRequest, CachesOverview};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::caches as service;
use crate::daemon::state::AppState;

/// GET /v1/caches
pub async fn overview(State(app): State<AppState>) -> ApiResult<Json<CachesOverview>> {
    Ok(Json(service::overview(&app).await?))
}

/// POST /v1/caches/clear (204)
pub async fn clear(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<CacheClearRequest>,
) -> ApiResult<StatusCode> {
    service::clear(&app, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caches routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/caches",
            "The toolbox's caches: what is kept, where, and its size (D.8)",
            None,
            (200, Some(s::<CachesOverview>)),
            routing::get(overview),
        ),
        r(
            "POST",
            "/v1/caches/clear",
            "Empty one cache or a whole location (refused while a sandbox mounts it)",
            Some(s::<CacheClearRequest>),
            (204, None),
            routing::post(clear),
        ),
    ]
}
