//! The terminal route (D.16): parse, call the terminals service, answer 201.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::control::{TerminalStart, TerminalStarted};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::terminals as service;
use crate::daemon::state::AppState;

/// POST /v1/agents/{id}/terminal
pub async fn start(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<TerminalStart>,
) -> ApiResult<(StatusCode, Json<TerminalStarted>)> {
    Ok((
        StatusCode::CREATED,
        Json(service::start(&app, &id, req).await?),
    ))
}

/// The terminal route.
pub(super) fn routes() -> Vec<Route> {
    vec![r(
        "POST",
        "/v1/agents/{id}/terminal",
        "Start the harness's own terminal program in a sandbox of the agent (D.16); attach with the answer's argv",
        Some(s::<TerminalStart>),
        (201, Some(s::<TerminalStarted>)),
        routing::post(start),
    )]
}
