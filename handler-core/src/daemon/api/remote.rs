//! The remote control routes (D.7, docs/remote.md): parse, call the remote service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::remote::api::{DeviceInfo, PairingStarted, RemoteSetup, RemoteStatus};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::remote as service;
use crate::daemon::state::AppState;

/// GET /v1/remote
pub async fn status(State(app): State<AppState>) -> Json<RemoteStatus> {
    Json(service::status(&app))
}

/// PUT /v1/remote
pub async fn setup(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<RemoteSetup>,
) -> ApiResult<Json<RemoteStatus>> {
    Ok(Json(service::setup(&app, req).await?))
}

/// DELETE /v1/remote (204)
pub async fn forget(State(app): State<AppState>) -> ApiResult<StatusCode> {
    service::forget(&app).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/remote/pairings (201)
pub async fn pair(State(app): State<AppState>) -> ApiResult<(StatusCode, Json<PairingStarted>)> {
    Ok((StatusCode::CREATED, Json(service::pair(&app).await?)))
}

/// GET /v1/remote/devices
pub async fn devices(State(app): State<AppState>) -> Json<Vec<DeviceInfo>> {
    Json(service::devices(&app))
}

/// DELETE /v1/remote/devices/{id} (204)
pub async fn revoke(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::revoke(&app, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The remote control routes.
pub fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/remote",
            "Remote control's light: off, idle, ok, unauthorized, unreachable (D.7)",
            None,
            (200, Some(s::<RemoteStatus>)),
            routing::get(status),
        ),
        r(
            "PUT",
            "/v1/remote",
            "Register with a gateway and poll it (502 when it does not answer)",
            Some(s::<RemoteSetup>),
            (200, Some(s::<RemoteStatus>)),
            routing::put(setup),
        ),
        r(
            "DELETE",
            "/v1/remote",
            "Forget the gateway and its devices",
            None,
            (204, None),
            routing::delete(forget),
        ),
        r(
            "POST",
            "/v1/remote/pairings",
            "A one-time code and QR code to pair a device with (409 without a gateway)",
            None,
            (201, Some(s::<PairingStarted>)),
            routing::post(pair),
        ),
        r(
            "GET",
            "/v1/remote/devices",
            "The paired devices",
            None,
            (200, Some(s::<Vec<DeviceInfo>>)),
            routing::get(devices),
        ),
        r(
            "DELETE",
            "/v1/remote/devices/{id}",
            "Revoke a device: the gateway refuses it (401) from then on",
            None,
            (204, None),
            routing::delete(revoke),
        ),
    ]
}
