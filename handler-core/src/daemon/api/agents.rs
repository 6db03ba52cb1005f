//! The agents routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use handler_contracts::control::{AdHocAgentRequest, Agent};

use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::agents::{self as service};
use crate::daemon::state::AppState;
use handler_contracts::control::{AgentPatch, AgentQuery, DuplicateRequest};

/// GET /v1/agents
pub async fn list(State(app): State<AppState>, Query(q): Query<AgentQuery>) -> Json<Vec<Agent>> {
    let v = service::list(&app, q).await;
    Json(v)
}

/// GET /v1/agents/{id}
pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Agent>> {
    let v = service::get(&app, id).await?;
    Ok(Json(v))
}

/// POST /v1/agents: an ad-hoc agent.
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AdHocAgentRequest>,
) -> ApiResult<(StatusCode, Json<Agent>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/agents/{id}: an ad-hoc agent takes an AdHocAgentRequest, a project's an AgentRequest.
pub async fn replace(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<Json<Agent>> {
    let v = service::replace(&app, id, body).await?;
    Ok(Json(v))
}

/// PATCH /v1/agents/{id}
pub async fn patch(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<AgentPatch>,
) -> ApiResult<Json<Agent>> {
    let v = service::patch(&app, id, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/agents/{id}: refused (409) for a project's last agent.
pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::delete(&app, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/agents/{id}/duplicate
pub async fn duplicate(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DuplicateRequest>,
) -> ApiResult<(StatusCode, Json<Agent>)> {
    let v = service::duplicate(&app, id, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}
