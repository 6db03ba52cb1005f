//! The machines routes (issue 29 item 2): parse, call the machines service, answer.

use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing;
use handler_contracts::machine::events::{MachineEvent, SUBPROTOCOL_MACHINES};
use handler_contracts::machine::exec_channel::{ExecEnd, SUBPROTOCOL_EXEC};
use handler_contracts::machine::parts::{PartInfo, PartsBuildRequest, PartsOutcome};
use handler_contracts::machine::profile::ProfileInfo;
use handler_contracts::machine::{MachineInfo, MachineRequest, MachineStats};

use super::auth::{header_token_ok, offered_protocols};
use super::routes::{Route, r, s};
use super::upgrade::upgrade;
use crate::daemon::problem::{ApiError, ApiJson, ApiResult};
use crate::daemon::services::machines as service;
use crate::daemon::services::{machine_events, machine_exec, parts};
use crate::daemon::state::AppState;

/// POST /v1/machines (201)
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<MachineRequest>,
) -> ApiResult<(StatusCode, Json<MachineInfo>)> {
    Ok((StatusCode::CREATED, Json(service::create(&app, req).await?)))
}

/// GET /v1/parts
async fn parts_list(State(app): State<AppState>) -> ApiResult<Json<Vec<PartInfo>>> {
    Ok(Json(parts::list(&app).await?))
}

/// POST /v1/parts/build
async fn parts_build(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<PartsBuildRequest>,
) -> ApiResult<Json<PartsOutcome>> {
    if req.ids.is_empty() {
        return Err(ApiError::bad_request(
            "invalid parts",
            "ids: name at least one part (GET /v1/parts lists them)",
        ));
    }
    Ok(Json(parts::ensure(&app, &req.ids).await?))
}

/// GET /v1/machines
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<MachineInfo>>> {
    Ok(Json(service::list(&app).await?))
}

/// GET /v1/machines/{id}
pub async fn get(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<MachineInfo>> {
    Ok(Json(service::get(&app, &id).await?))
}

/// GET /v1/machines/{id}/status
pub async fn status(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    Ok(Json(service::status(&app, &id).await?))
}

/// GET /v1/machines/{id}/stats
pub async fn stats(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<MachineStats>> {
    Ok(Json(service::stats(&app, &id).await?))
}

/// POST /v1/machines/{id}/start (204)
pub async fn start(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::set_state(&app, &id, "start").await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/machines/{id}/stop (204)
pub async fn stop(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::set_state(&app, &id, "stop").await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/machines/{id}/restart (204)
pub async fn restart(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::set_state(&app, &id, "restart").await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v1/machines/{id}`'s query.
#[derive(Debug, serde::Deserialize)]
pub struct DeleteQuery {
    /// Stop the sessions running in it first.
    #[serde(default)]
    force: bool,
}

/// DELETE /v1/machines/{id} (204; 409 while sessions run in it, unless `force`)
pub async fn delete(
    State(app): State<AppState>,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    service::delete(&app, &id, q.force).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Whether the request offers `protocol` (or none, with the token in the header): else 400.
fn offers(app: &AppState, headers: &HeaderMap, protocol: &str) -> ApiResult<()> {
    let protocols = offered_protocols(headers);
    let plain = protocols.is_empty() && header_token_ok(headers, &app.token());
    if plain || protocols.iter().any(|p| p == protocol) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "subprotocol required",
            format!("offer the subprotocol {protocol}"),
        ))
    }
}

/// GET /v1/machines/{id}/exec: a process in the machine (a WebSocket offering
/// `handler.exec.v1`; 404 for a machine this daemon does not have, before any upgrade).
pub async fn exec(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) =
        offers(&app, &headers, SUBPROTOCOL_EXEC).and_then(|()| service::known(&app, &id))
    {
        return e.into_response();
    }
    let max = app.config.max_message_bytes;
    upgrade(ws, SUBPROTOCOL_EXEC, max, move |socket| {
        machine_exec::serve(app, id, socket)
    })
}

/// GET /v1/machines/events: the change channel (a WebSocket offering `handler.machines.v1`;
/// the token checked by the middleware, here the subprotocol, 400).
pub async fn events(
    State(app): State<AppState>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = offers(&app, &headers, SUBPROTOCOL_MACHINES) {
        return e.into_response();
    }
    // The channel only sends: what a client may send is small.
    upgrade(ws, SUBPROTOCOL_MACHINES, 64 * 1024, move |socket| {
        machine_events::watch(app, socket)
    })
}

/// The exec route.
fn exec_route() -> Route {
    Route {
        upgrade: true,
        ..r(
            "GET",
            "/v1/machines/{id}/exec",
            "Run a process in a machine (WebSocket, subprotocols handler.exec.v1 and bearer.<token>): the ExecSpec first, then stdio frames, its end last",
            None,
            (101, Some(s::<ExecEnd>)),
            routing::get(exec),
        )
    }
}

/// The change channel's route.
fn channel() -> Route {
    Route {
        upgrade: true,
        ..r(
            "GET",
            "/v1/machines/events",
            "The change channel (WebSocket, subprotocols handler.machines.v1 and bearer.<token>): a snapshot, then added/changed/removed",
            None,
            (101, Some(s::<MachineEvent>)),
            routing::get(events),
        )
    }
}

/// GET /v1/profiles
async fn profiles(State(app): State<AppState>) -> ApiResult<Json<Vec<ProfileInfo>>> {
    Ok(Json(
        service::profiles(&app)?
            .profiles
            .into_iter()
            .map(|(name, profile)| ProfileInfo { name, profile })
            .collect(),
    ))
}

/// GET /v1/profiles/{name}
async fn one_profile(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<ProfileInfo>> {
    let mut all = service::profiles(&app)?;
    let profile = all
        .profiles
        .remove(&name)
        .ok_or_else(|| ApiError::not_found(format!("profile {name:?}")))?;
    Ok(Json(ProfileInfo { name, profile }))
}

/// The machines routes, in the order /openapi.json lists them.
#[expect(
    clippy::too_many_lines,
    reason = "a table: one entry per machine route (the change channel and exec included), no logic"
)]
pub(super) fn routes() -> Vec<Route> {
    let mut v = vec![
        r(
            "GET",
            "/v1/parts",
            "The parts Handler can build (agent CLIs and Node for machines, decision 0164), each with the image built from its source's current image",
            None,
            (200, Some(s::<Vec<PartInfo>>)),
            routing::get(parts_list),
        ),
        r(
            "POST",
            "/v1/parts/build",
            "Make parts ready: each built once per version (with what it requires), one that fails left out by name",
            Some(s::<PartsBuildRequest>),
            (200, Some(s::<PartsOutcome>)),
            routing::post(parts_build),
        ),
        r(
            "GET",
            "/v1/profiles",
            "The daemon's machine profiles (profiles.toml, decision 0156)",
            None,
            (200, Some(s::<Vec<ProfileInfo>>)),
            routing::get(profiles),
        ),
        r(
            "GET",
            "/v1/profiles/{name}",
            "One profile",
            None,
            (200, Some(s::<ProfileInfo>)),
            routing::get(one_profile),
        ),
        r(
            "POST",
            "/v1/machines",
            "Make a machine: a sandbox that outlives every session, from an allowed image (issue 29)",
            Some(s::<MachineRequest>),
            (201, Some(s::<MachineInfo>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/machines",
            "The machines this daemon made, each with its state now",
            None,
            (200, Some(s::<Vec<MachineInfo>>)),
            routing::get(list),
        ),
        r(
            "GET",
            "/v1/machines/{id}",
            "One machine (state missing: its container was removed outside Handler)",
            None,
            (200, Some(s::<MachineInfo>)),
            routing::get(get),
        ),
        Route {
            query: &[(
                "force",
                "true: stop the sessions running in it first (else 409 while any runs)",
            )],
            ..r(
                "DELETE",
                "/v1/machines/{id}",
                "Destroy a machine and everything in it",
                None,
                (204, None),
                routing::delete(delete),
            )
        },
        r(
            "GET",
            "/v1/machines/{id}/status",
            "The runtime's record of a machine's container",
            None,
            (200, None),
            routing::get(status),
        ),
        r(
            "GET",
            "/v1/machines/{id}/stats",
            "CPU, memory, processes, network and disk right now",
            None,
            (200, Some(s::<MachineStats>)),
            routing::get(stats),
        ),
        r(
            "POST",
            "/v1/machines/{id}/start",
            "Start a stopped machine",
            None,
            (204, None),
            routing::post(start),
        ),
        r(
            "POST",
            "/v1/machines/{id}/stop",
            "Stop a machine",
            None,
            (204, None),
            routing::post(stop),
        ),
        r(
            "POST",
            "/v1/machines/{id}/restart",
            "Restart a machine (starts a stopped one)",
            None,
            (204, None),
            routing::post(restart),
        ),
    ];
    v.insert(2, channel());
    v.push(exec_route());
    v
}
