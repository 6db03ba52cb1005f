//! The folders routes: parse, call the service, answer.

use axum::Json;
use axum::extract::State;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::folders::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
use handler_contracts::control::WorkFolders;

/// GET /v1/folders
pub async fn get(State(app): State<AppState>) -> Json<WorkFolders> {
    let v = service::get(&app).await;
    Json(v)
}

/// PUT /v1/folders
pub async fn put(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<WorkFolders>,
) -> ApiResult<Json<WorkFolders>> {
    let v = service::put(&app, req).await?;
    Ok(Json(v))
}

/// The folders routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/folders",
            "The work folders (D.13)",
            None,
            (200, Some(s::<WorkFolders>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/folders",
            "Replace the work folders",
            Some(s::<WorkFolders>),
            (200, Some(s::<WorkFolders>)),
            routing::put(put),
        ),
    ]
}
