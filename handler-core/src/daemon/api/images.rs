//! The image routes besides builds (D.4, B.6, A.8): the network filter's image, the toolbox and
//! its Containerfile, the runtime's host check.

use axum::Json;
use axum::extract::State;
use axum::routing;
use handler_contracts::control::{
    ImageUpdates, ImageUpdatesRequest, NetworkFilterInfo, ToolboxContainerfile,
    ToolboxContainerfileUpdate, ToolboxInfo,
};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::images as service;
use crate::daemon::services::images::{toolbox, updates};
use crate::daemon::state::AppState;

/// GET /v1/network-filter[?fresh=true]
pub async fn network_filter(
    State(app): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<FreshQuery>,
) -> Json<NetworkFilterInfo> {
    Json(service::network_filter(&app, q.fresh).await)
}

/// GET /v1/image-updates
pub async fn get_updates(State(app): State<AppState>) -> ApiResult<Json<ImageUpdates>> {
    Ok(Json(updates::get(&app).await?))
}

/// PUT /v1/image-updates
pub async fn put_updates(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ImageUpdatesRequest>,
) -> ApiResult<Json<ImageUpdates>> {
    Ok(Json(updates::put(&app, req).await?))
}

/// POST /v1/image-updates/run → 202
pub async fn run_updates(
    State(app): State<AppState>,
) -> ApiResult<(axum::http::StatusCode, Json<ImageUpdates>)> {
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(updates::run_now(&app).await?),
    ))
}

/// The query of the routes answering the engine's facts from memory (decision 0149).
#[derive(Debug, serde::Deserialize)]
pub struct FreshQuery {
    /// Ask the runtime now rather than answer from memory.
    #[serde(default)]
    pub fresh: bool,
}

/// `FreshQuery` in the route table.
pub(super) const FRESH: (&str, &str) = (
    "fresh",
    "true: ask the runtime now (else the last answer, read again behind it when older than HANDLER_IMAGE_FACTS_TTL)",
);

/// GET /v1/runtime[?fresh=true]
pub async fn runtime(
    State(app): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<FreshQuery>,
) -> ApiResult<Json<handler_contracts::sandbox::RuntimeCheck>> {
    Ok(Json(service::runtime(&app, q.fresh).await?))
}

/// GET /v1/toolbox
pub async fn toolbox_info(State(app): State<AppState>) -> Json<ToolboxInfo> {
    Json(toolbox::info(&app).await)
}

/// GET /v1/toolbox/containerfile
pub async fn get_containerfile(
    State(app): State<AppState>,
) -> ApiResult<Json<ToolboxContainerfile>> {
    Ok(Json(toolbox::containerfile(&app).await?))
}

/// PUT /v1/toolbox/containerfile
pub async fn put_containerfile(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ToolboxContainerfileUpdate>,
) -> ApiResult<Json<ToolboxContainerfile>> {
    Ok(Json(toolbox::put_containerfile(&app, req).await?))
}

/// The image routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            query: &[FRESH],
            ..r(
                "GET",
                "/v1/network-filter",
                "The network filter's image (D.4 NetworkFilterInfo)",
                None,
                (200, Some(s::<NetworkFilterInfo>)),
                routing::get(network_filter),
            )
        },
        r(
            "GET",
            "/v1/image-updates",
            "Automatic image updates (D.4 ImageUpdates)",
            None,
            (200, Some(s::<ImageUpdates>)),
            routing::get(get_updates),
        ),
        r(
            "PUT",
            "/v1/image-updates",
            "Set their schedule: off, daily or weekly",
            Some(s::<ImageUpdatesRequest>),
            (200, Some(s::<ImageUpdates>)),
            routing::put(put_updates),
        ),
        r(
            "POST",
            "/v1/image-updates/run",
            "Run them now: the network filter, then every harness and addon image already built",
            None,
            (202, Some(s::<ImageUpdates>)),
            routing::post(run_updates),
        ),
        Route {
            query: &[FRESH],
            ..r(
                "GET",
                "/v1/runtime",
                "Whether this host can run sandboxes (A.8 RuntimeCheck)",
                None,
                (200, Some(s::<handler_contracts::sandbox::RuntimeCheck>)),
                routing::get(runtime),
            )
        },
        r(
            "GET",
            "/v1/toolbox",
            "The toolbox image and folder (B.6 ToolboxInfo)",
            None,
            (200, Some(s::<ToolboxInfo>)),
            routing::get(toolbox_info),
        ),
        r(
            "GET",
            "/v1/toolbox/containerfile",
            "The toolbox's Containerfile and the platform's default",
            None,
            (200, Some(s::<ToolboxContainerfile>)),
            routing::get(get_containerfile),
        ),
        r(
            "PUT",
            "/v1/toolbox/containerfile",
            "Replace the toolbox's Containerfile (at most 256 KiB)",
            Some(s::<ToolboxContainerfileUpdate>),
            (200, Some(s::<ToolboxContainerfile>)),
            routing::put(put_containerfile),
        ),
    ]
}
