//! The harnesses routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use handler_contracts::control::HarnessInfo;

use crate::daemon::problem::ApiResult;
use crate::daemon::services::harnesses as service;
use crate::daemon::state::AppState;

/// GET /v1/harnesses
pub async fn list(State(app): State<AppState>) -> Json<Vec<HarnessInfo>> {
    let v = service::list(&app).await;
    Json(v)
}

/// GET /v1/harnesses/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<HarnessInfo>> {
    let v = service::get(&app, name).await?;
    Ok(Json(v))
}
