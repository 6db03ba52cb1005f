//! The projects routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::control::{Agent, AgentRequest, Project};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::projects::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
use handler_contracts::control::{ProjectPatch, ProjectRemoved, ProjectRequest};

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
pub async fn delete(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProjectRemoved>> {
    Ok(Json(service::delete(&app, id).await?))
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

/// The projects routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/projects",
            "The projects (D.8)",
            None,
            (200, Some(s::<Vec<Project>>)),
            routing::get(list),
        ),
        r(
            "POST",
            "/v1/projects",
            "Create a project and its first agent (a preset)",
            Some(s::<ProjectRequest>),
            (201, Some(s::<Project>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/projects/{id}",
            "One project",
            None,
            (200, Some(s::<Project>)),
            routing::get(get),
        ),
        r(
            "PATCH",
            "/v1/projects/{id}",
            "Change a project (a new context is checked against its agents)",
            Some(s::<ProjectPatch>),
            (200, Some(s::<Project>)),
            routing::patch(patch),
        ),
        r(
            "DELETE",
            "/v1/projects/{id}",
            "Remove a project and its agents; its own cache folders once its sandboxes stopped",
            None,
            (200, Some(s::<ProjectRemoved>)),
            routing::delete(delete),
        ),
        r(
            "POST",
            "/v1/projects/{id}/agents",
            "Add an agent to a project",
            Some(s::<AgentRequest>),
            (201, Some(s::<Agent>)),
            routing::post(create_agent),
        ),
    ]
}
