//! The projects routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::{Agent, AgentRequest, Project};

use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::projects::{self as service};
use crate::daemon::state::AppState;
use handler_contracts::control::{ProjectPatch, ProjectRequest};

/// GET /v1/projects
pub async fn list(State(app): State<AppState>) -> Json<Vec<Project>> {
    let v = service::list(&app).await;
    Json(v)
}

/// GET /v1/projects/{id}
pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Project>> {
    let v = service::get(&app, id).await?;
    Ok(Json(v))
}

/// POST /v1/projects
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ProjectRequest>,
) -> ApiResult<(StatusCode, Json<Project>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PATCH /v1/projects/{id}: a context change checks its agents (409, they keep theirs).
pub async fn patch(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<ProjectPatch>,
) -> ApiResult<Json<Project>> {
    let v = service::patch(&app, id, req).await?;
    Ok(Json(v))
}

/// DELETE /v1/projects/{id}: with its agents.
pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::delete(&app, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/projects/{id}/agents: another agent (defaults of new agents).
pub async fn create_agent(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<AgentRequest>,
) -> ApiResult<(StatusCode, Json<Agent>)> {
    let v = service::create_agent(&app, id, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}
