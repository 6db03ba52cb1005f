//! The builds routes (D.4): parse, call the images service, answer.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::control::{Build, BuildLog, BuildRequest};
use serde::Deserialize;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::images as service;
use crate::daemon::state::AppState;

/// POST /v1/builds → 202 and the build, started (or waiting its turn).
pub async fn start(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<BuildRequest>,
) -> ApiResult<(StatusCode, Json<Build>)> {
    let v = service::start(&app, req).await?;
    Ok((StatusCode::ACCEPTED, Json(v)))
}

/// GET /v1/builds
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<Build>>> {
    Ok(Json(service::list(&app).await?))
}

/// GET /v1/builds/{id}
pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Build>> {
    Ok(Json(service::get(&app, &id).await?))
}

/// `?offset=` of a log read.
#[derive(Debug, Deserialize)]
pub struct LogQuery {
    /// Where to read from (a `nextOffset`).
    #[serde(default)]
    pub offset: u64,
}

/// GET /v1/builds/{id}/log?offset=
pub async fn log(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> ApiResult<Json<BuildLog>> {
    Ok(Json(service::log(&app, &id, q.offset).await?))
}

/// POST /v1/builds/{id}/cancel
pub async fn cancel(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Build>> {
    Ok(Json(service::cancel(&app, &id).await?))
}

/// The builds routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "POST",
            "/v1/builds",
            "Rebuild a target: a harness, toolbox, network-filter, addon:<name> (D.4)",
            Some(s::<BuildRequest>),
            (202, Some(s::<Build>)),
            routing::post(start),
        ),
        r(
            "GET",
            "/v1/builds",
            "The builds, newest first",
            None,
            (200, Some(s::<Vec<Build>>)),
            routing::get(list),
        ),
        r(
            "GET",
            "/v1/builds/{id}",
            "One build",
            None,
            (200, Some(s::<Build>)),
            routing::get(get),
        ),
        Route {
            query: &[("offset", "read from this byte offset (a nextOffset)")],
            ..r(
                "GET",
                "/v1/builds/{id}/log",
                "A build's log (ANSI removed, at most 8 MiB)",
                None,
                (200, Some(s::<BuildLog>)),
                routing::get(log),
            )
        },
        r(
            "POST",
            "/v1/builds/{id}/cancel",
            "Cancel a build: what it built is removed",
            None,
            (200, Some(s::<Build>)),
            routing::post(cancel),
        ),
    ]
}
