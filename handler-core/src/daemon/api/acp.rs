//! The ACP WebSocket route (C.1) and an agent's egress events: the token and subprotocol
//! checked, the connection accepted by the connections service, the upgrade relayed by it.

use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use handler_contracts::acp::SUBPROTOCOL_ACP;

use super::auth::{header_token_ok, offered_protocols, protocol_token_ok};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::connections::{self as service};
use crate::daemon::state::AppState;
use handler_contracts::control::{EgressRecord, ModelQuery};

/// GET /v1/agents/{id}/acp
pub async fn connect(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<ModelQuery>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // Off the async workers: preparing reads files and may run a `{ command }` secret reference.
    let accepted = {
        let (app, id, headers) = (app.clone(), id.clone(), headers.clone());
        tokio::task::spawn_blocking(move || accept(&app, &id, q, &headers))
            .await
            .unwrap_or_else(|e| Err(ApiError::internal(e)))
    };
    // The git guard (a `sessionTree = "copy"` checkout, decision 0122), before the upgrade.
    let accepted = match accepted {
        Ok(mut a) => service::guard(&app, &mut a).await.map(|()| a),
        Err(e) => Err(e),
    };
    match accepted {
        Err(e) => e.into_response(),
        Ok(prepared) => {
            let max = app.config.max_message_bytes;
            super::upgrade::upgrade(ws, SUBPROTOCOL_ACP, max, move |socket| {
                service::relay(app, id, prepared, socket)
            })
        }
    }
}

/// The checks before the upgrade: token (401; Host 421 and Origin 403 before it, auth.rs),
/// subprotocol (400), then the service's (agent 404, model 400/409).
fn accept(
    app: &AppState,
    id: &str,
    q: ModelQuery,
    headers: &HeaderMap,
) -> ApiResult<service::Accepted> {
    // The Host, Origin and token were checked before this handler (auth.rs); checked again
    // here so that this route never depends on the layers alone.
    let protocols = offered_protocols(headers);
    let token = app.token();
    let header_ok = header_token_ok(headers, &token);
    if !header_ok && !protocol_token_ok(headers, &token) {
        return Err(ApiError::unauthorized());
    }
    // A client that offers subprotocols offers acp.v1 (C.1); one that offers none and sends the
    // token in Authorization (a non-browser client library) gets no subprotocol (docs/decisions/0020-daemon-readings.md).
    if !(protocols.iter().any(|p| p == SUBPROTOCOL_ACP) || protocols.is_empty() && header_ok) {
        return Err(ApiError::bad_request(
            "subprotocol required",
            format!("offer the subprotocol {SUBPROTOCOL_ACP}"),
        ));
    }
    service::accept(app, id, q)
}

/// GET /v1/agents/{id}/egress-events
pub async fn egress_events(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<EgressRecord>>> {
    Ok(Json(service::egress_events(&app, &id)?))
}
