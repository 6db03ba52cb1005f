//! The harnesses routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, Query, State};
use handler_contracts::control::HarnessInfo;

use super::images::{FRESH, FreshQuery};
use super::routes::{Route, r, s};
use crate::daemon::problem::ApiResult;
use crate::daemon::services::harnesses as service;
use crate::daemon::state::AppState;
use axum::routing;

/// GET /v1/harnesses[?fresh=true]
pub async fn list(
    State(app): State<AppState>,
    Query(q): Query<FreshQuery>,
) -> Json<Vec<HarnessInfo>> {
    let v = service::list(&app, q.fresh).await;
    Json(v)
}

/// GET /v1/harnesses/{name}[?fresh=true]
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<FreshQuery>,
) -> ApiResult<Json<HarnessInfo>> {
    let v = service::get(&app, name, q.fresh).await?;
    Ok(Json(v))
}

/// The harnesses routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            query: &[FRESH],
            ..r(
                "GET",
                "/v1/harnesses",
                "The harnesses (D.1 HarnessInfo)",
                None,
                (200, Some(s::<Vec<HarnessInfo>>)),
                routing::get(list),
            )
        },
        Route {
            query: &[FRESH],
            ..r(
                "GET",
                "/v1/harnesses/{name}",
                "One harness",
                None,
                (200, Some(s::<HarnessInfo>)),
                routing::get(get),
            )
        },
    ]
}
