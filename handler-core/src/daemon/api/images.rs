//! The image routes besides builds (D.4): the network filter's image.

use axum::Json;
use axum::extract::State;
use axum::routing;
use handler_contracts::control::NetworkFilterInfo;

use super::routes::{Route, r, s};
use crate::daemon::services::images as service;
use crate::daemon::state::AppState;

/// GET /v1/network-filter
pub async fn network_filter(State(app): State<AppState>) -> Json<NetworkFilterInfo> {
    Json(service::network_filter(&app).await)
}

/// The image routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![r(
        "GET",
        "/v1/network-filter",
        "The network filter's image (D.4 NetworkFilterInfo)",
        None,
        (200, Some(s::<NetworkFilterInfo>)),
        routing::get(network_filter),
    )]
}
