//! The agents routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use handler_contracts::control::{AdHocAgentRequest, Agent, EgressRecord, SeedInfo};

use super::routes::{MODEL_QUERY, Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::agents::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
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

/// The agents routes, in the order /openapi.json lists them.
#[expect(
    clippy::too_many_lines,
    reason = "a table: one entry per agent route (the ACP upgrade and egress events included), no logic"
)]
pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            query: &[("project", "only this project's agents")],
            ..r(
                "GET",
                "/v1/agents",
                "Every agent, ad hoc and of projects (D.1)",
                None,
                (200, Some(s::<Vec<Agent>>)),
                routing::get(list),
            )
        },
        r(
            "POST",
            "/v1/agents",
            "Create an ad-hoc agent (409 risks not confirmed unless confirmRisks)",
            Some(s::<AdHocAgentRequest>),
            (201, Some(s::<Agent>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/agents/{id}",
            "One agent",
            None,
            (200, Some(s::<Agent>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/agents/{id}",
            "Replace an agent: an AdHocAgentRequest, or an AgentRequest for a project's",
            Some(s::<AdHocAgentRequest>),
            (200, Some(s::<Agent>)),
            routing::put(replace),
        ),
        r(
            "PATCH",
            "/v1/agents/{id}",
            "Switch its egress live (A.4), rename it",
            Some(s::<AgentPatch>),
            (200, Some(s::<Agent>)),
            routing::patch(patch),
        ),
        r(
            "DELETE",
            "/v1/agents/{id}",
            "Remove an agent (its sandboxes stop)",
            None,
            (204, None),
            routing::delete(delete),
        ),
        r(
            "POST",
            "/v1/agents/{id}/duplicate",
            "A new agent with its settings (D.8)",
            Some(s::<DuplicateRequest>),
            (201, Some(s::<Agent>)),
            routing::post(duplicate),
        ),
        r(
            "GET",
            "/v1/agents/{id}/egress-events",
            "Its sandboxes' egress events (A.3), oldest first",
            None,
            (200, Some(s::<Vec<EgressRecord>>)),
            routing::get(super::acp::egress_events),
        ),
        r(
            "GET",
            "/v1/agents/{id}/seed",
            "Its state's seeds from your own settings: seeded, changed on the host since, absent, new (decision 0154)",
            None,
            (200, Some(s::<Vec<SeedInfo>>)),
            routing::get(seeds),
        ),
        r(
            "POST",
            "/v1/agents/{id}/seed",
            "Copy every seed not copied yet or changed since (an agent with seedState; 409 otherwise)",
            None,
            (200, Some(s::<Vec<SeedInfo>>)),
            routing::post(seed_now),
        ),
        Route {
            query: MODEL_QUERY,
            upgrade: true,
            ..r(
                "GET",
                "/v1/agents/{id}/acp",
                "ACP over WebSocket (C.1): subprotocols acp.v1 and bearer.<token>",
                None,
                (101, None),
                routing::get(super::acp::connect),
            )
        },
    ]
}

/// GET /v1/agents/{id}/seed
async fn seeds(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<SeedInfo>>> {
    Ok(Json(
        crate::daemon::services::seeds::seeds(&app, &id, false).await?,
    ))
}

/// POST /v1/agents/{id}/seed
async fn seed_now(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<SeedInfo>>> {
    Ok(Json(
        crate::daemon::services::seeds::seeds(&app, &id, true).await?,
    ))
}
