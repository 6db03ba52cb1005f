//! The WebSocket routes' one upgrade: a request that is not an upgrade is a 400 problem; an
//! upgrade selects the route's subprotocol, bounds messages and frames to `max` bytes and
//! hands the socket to the service.

use std::future::Future;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};

use crate::daemon::problem::ApiError;

/// Upgrades `ws` with `protocol`, messages and frames of at most `max` bytes, served by `serve`.
pub fn upgrade<F, Fut>(
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    protocol: &'static str,
    max: usize,
    serve: F,
) -> Response
where
    F: FnOnce(WebSocket) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    match ws {
        Err(rej) => {
            ApiError::bad_request("not a WebSocket upgrade", rej.body_text()).into_response()
        }
        Ok(ws) => ws
            .protocols([protocol])
            .max_message_size(max)
            .max_frame_size(max)
            .on_upgrade(serve),
    }
}
