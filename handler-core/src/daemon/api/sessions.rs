//! The sessions routes (F.3, F.4): parse, call the sessions service, answer; the attach
//! upgrade checked as C.1's (token 401, subprotocol 400) and the session looked up (404)
//! before accepting.

use axum::Json;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing;
use handler_contracts::acp::SUBPROTOCOL_ACP;
use handler_contracts::session::{Session, SessionEvent, SessionQuery, SessionRequest};

use super::auth::{header_token_ok, offered_protocols, protocol_token_ok};
use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiError, ApiJson, ApiResult};
use crate::daemon::services::sessions::{self as service};
use crate::daemon::state::AppState;

/// POST /v1/sessions
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<SessionRequest>,
) -> ApiResult<(StatusCode, Json<Session>)> {
    Ok((StatusCode::CREATED, Json(service::create(&app, req).await?)))
}

/// GET /v1/sessions
pub async fn list(
    State(app): State<AppState>,
    Query(q): Query<SessionQuery>,
) -> Json<Vec<Session>> {
    Json(service::list(&app, &q))
}

/// GET /v1/sessions/{id}
pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Session>> {
    Ok(Json(service::get(&app, &id)?))
}

/// DELETE /v1/sessions/{id}
pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    service::delete(&app, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `?afterSeq=N` of GET /v1/sessions/{id}/events.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventsQuery {
    /// Only the events after this seq.
    #[serde(default)]
    pub after_seq: u64,
}

/// GET /v1/sessions/{id}/events?afterSeq=N: its event log, redacted as written.
pub async fn events(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> ApiResult<Json<Vec<SessionEvent>>> {
    Ok(Json(service::events(&app, &id, q.after_seq)?))
}

/// POST /v1/sessions/{id}/stop
pub async fn stop(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Session>> {
    Ok(Json(service::stop(&app, &id).await?))
}

/// POST /v1/sessions/{id}/share
pub async fn share(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    Ok(Json(crate::daemon::services::remote::share(&app, &id)?))
}

/// DELETE /v1/sessions/{id}/share
pub async fn unshare(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    Ok(Json(crate::daemon::services::remote::unshare(&app, &id)?))
}

/// POST /v1/sessions/{id}/cancel
pub async fn cancel(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    Ok(Json(service::cancel(&app, &id).await?))
}

/// GET /v1/sessions/{id}/acp
pub async fn connect(
    State(app): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = check(&app, &id, &headers) {
        return e.into_response();
    }
    let max = app.config.max_message_bytes;
    super::upgrade::upgrade(ws, SUBPROTOCOL_ACP, max, move |socket| {
        service::attach(app, id, socket)
    })
}

/// The token (401), the subprotocol (400), the session (404), as C.1's route checks them.
fn check(app: &AppState, id: &str, headers: &HeaderMap) -> ApiResult<()> {
    let protocols = offered_protocols(headers);
    let token = app.token();
    let header_ok = header_token_ok(headers, &token);
    if !header_ok && !protocol_token_ok(headers, &token) {
        return Err(ApiError::unauthorized());
    }
    if !(protocols.iter().any(|p| p == SUBPROTOCOL_ACP) || protocols.is_empty() && header_ok) {
        return Err(ApiError::bad_request(
            "subprotocol required",
            format!("offer the subprotocol {SUBPROTOCOL_ACP}"),
        ));
    }
    service::get(app, id).map(|_| ())
}

/// The sessions routes, in the order /openapi.json lists them.
#[expect(clippy::too_many_lines, reason = "one table of the sessions' routes")]
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "POST",
            "/v1/sessions",
            "Start a daemon-held session of an agent (F.3)",
            Some(s::<SessionRequest>),
            (201, Some(s::<Session>)),
            routing::post(create),
        ),
        Route {
            query: &[
                ("agent", "only this agent's sessions"),
                ("project", "only this project's"),
                ("state", "only in this state"),
                ("subject", "only runs on this subject"),
            ],
            ..r(
                "GET",
                "/v1/sessions",
                "Every session, oldest first",
                None,
                (200, Some(s::<Vec<Session>>)),
                routing::get(list),
            )
        },
        r(
            "GET",
            "/v1/sessions/{id}",
            "One session",
            None,
            (200, Some(s::<Session>)),
            routing::get(get),
        ),
        r(
            "DELETE",
            "/v1/sessions/{id}",
            "Stop a session and remove its folder",
            None,
            (204, None),
            routing::delete(delete),
        ),
        Route {
            query: &[("afterSeq", "only the events after this seq")],
            ..r(
                "GET",
                "/v1/sessions/{id}/events",
                "Its event log (F.5), secrets redacted as written",
                None,
                (200, Some(s::<Vec<SessionEvent>>)),
                routing::get(events),
            )
        },
        r(
            "POST",
            "/v1/sessions/{id}/share",
            "Share it with paired devices (D.7; 409 when stopped)",
            None,
            (200, Some(s::<Session>)),
            routing::post(share),
        ),
        r(
            "DELETE",
            "/v1/sessions/{id}/share",
            "Stop sharing it: its devices' attachments closed with 4004",
            None,
            (200, Some(s::<Session>)),
            routing::delete(unshare),
        ),
        r(
            "POST",
            "/v1/sessions/{id}/stop",
            "Stop its sandbox (attaching restarts it)",
            None,
            (200, Some(s::<Session>)),
            routing::post(stop),
        ),
        r(
            "POST",
            "/v1/sessions/{id}/cancel",
            "Cancel the turn in progress",
            None,
            (200, Some(s::<Session>)),
            routing::post(cancel),
        ),
        Route {
            upgrade: true,
            ..r(
                "GET",
                "/v1/sessions/{id}/acp",
                "Attach to a session over ACP (F.4): subprotocols acp.v1 and bearer.<token>",
                None,
                (101, None),
                routing::get(connect),
            )
        },
    ]
}
