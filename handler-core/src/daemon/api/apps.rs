//! The mini apps' routes (H.6, decision 0157): parse, call the apps service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing;
use handler_contracts::miniapp::{
    AppDeployRequest, AppInfo, AppLogin, AppNotifications, AppRegisterRequest, AppRollbackRequest,
    AppSecretRequest,
};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::apps as service;
use crate::daemon::state::AppState;

/// POST /v1/apps (201 new, 200 the same folder again)
pub async fn register(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AppRegisterRequest>,
) -> ApiResult<(StatusCode, Json<AppInfo>)> {
    let (new, info) = service::register(&app, req).await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)))
}

/// GET /v1/apps
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<AppInfo>>> {
    Ok(Json(service::list(&app).await?))
}

/// GET /v1/apps/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AppInfo>> {
    Ok(Json(service::get(&app, &name).await?))
}

/// DELETE /v1/apps/{name} (204)
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/apps/{name}/deploy
pub async fn deploy(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<AppDeployRequest>,
) -> ApiResult<Json<AppInfo>> {
    Ok(Json(service::deploy(&app, &name, req).await?))
}

/// POST /v1/apps/{name}/rollback
pub async fn rollback(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<AppRollbackRequest>,
) -> ApiResult<Json<AppInfo>> {
    Ok(Json(service::rollback(&app, &name, &req.version).await?))
}

/// PUT /v1/apps/{name}/secrets/{secret} (204)
pub async fn put_secret(
    State(app): State<AppState>,
    Path((name, secret)): Path<(String, String)>,
    ApiJson(req): ApiJson<AppSecretRequest>,
) -> ApiResult<StatusCode> {
    service::set_secret(&app, &name, &secret, &req.value).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// DELETE /v1/apps/{name}/secrets/{secret} (204)
pub async fn delete_secret(
    State(app): State<AppState>,
    Path((name, secret)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    service::remove_secret(&app, &name, &secret).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/apps/{name}/login
pub async fn login(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AppLogin>> {
    Ok(Json(AppLogin {
        url: service::login(&app, &name)?,
    }))
}

/// POST /v1/apps/{name}/start: its backend started now, as a first request would (200 with
/// the app once it is healthy).
pub async fn start(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AppInfo>> {
    service::start(&app, &name).await?;
    Ok(Json(service::get(&app, &name).await?))
}

/// POST /v1/apps/{name}/stop (204)
pub async fn stop(State(app): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    service::stop(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// GET /v1/apps/{name}/logs (text)
pub async fn logs(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let text = service::logs(&app, &name)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

/// GET /v1/apps/{name}/notifications
pub async fn notifications(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AppNotifications>> {
    Ok(Json(service::notifications(&app, &name).await?))
}

/// The routes.
#[expect(
    clippy::too_many_lines,
    reason = "a table: one entry per mini app route, no logic"
)]
pub fn routes() -> Vec<Route> {
    vec![
        r(
            "POST",
            "/v1/apps",
            "register a mini app's folder (H.6)",
            Some(s::<AppRegisterRequest>),
            (201, Some(s::<AppInfo>)),
            routing::post(register),
        ),
        r(
            "GET",
            "/v1/apps",
            "list the mini apps",
            None,
            (200, Some(s::<Vec<AppInfo>>)),
            routing::get(list),
        ),
        r(
            "GET",
            "/v1/apps/{name}",
            "one mini app, with its folder as it is now",
            None,
            (200, Some(s::<AppInfo>)),
            routing::get(get),
        ),
        r(
            "DELETE",
            "/v1/apps/{name}",
            "remove a mini app: its versions, data, log and secrets (never its folder)",
            None,
            (204, None),
            routing::delete(delete),
        ),
        r(
            "POST",
            "/v1/apps/{name}/deploy",
            "deploy the version in the app's folder (H.2: added needs confirmed)",
            Some(s::<AppDeployRequest>),
            (200, Some(s::<AppInfo>)),
            routing::post(deploy),
        ),
        r(
            "POST",
            "/v1/apps/{name}/rollback",
            "serve a version deployed before",
            Some(s::<AppRollbackRequest>),
            (200, Some(s::<AppInfo>)),
            routing::post(rollback),
        ),
        r(
            "PUT",
            "/v1/apps/{name}/secrets/{secret}",
            "set a mini app's secret (H.2; the value is never answered)",
            Some(s::<AppSecretRequest>),
            (204, None),
            routing::put(put_secret),
        ),
        r(
            "DELETE",
            "/v1/apps/{name}/secrets/{secret}",
            "remove a mini app's secret",
            None,
            (204, None),
            routing::delete(delete_secret),
        ),
        r(
            "POST",
            "/v1/apps/{name}/login",
            "a one-time address that logs a browser in to the app's origin (H.4)",
            None,
            (200, Some(s::<AppLogin>)),
            routing::post(login),
        ),
        r(
            "POST",
            "/v1/apps/{name}/start",
            "start the app's backend now (as its first request would)",
            None,
            (200, Some(s::<AppInfo>)),
            routing::post(start),
        ),
        r(
            "POST",
            "/v1/apps/{name}/stop",
            "stop the app's backend (the next request starts it again)",
            None,
            (204, None),
            routing::post(stop),
        ),
        r(
            "GET",
            "/v1/apps/{name}/logs",
            "the app's log (text)",
            None,
            (200, None),
            routing::get(logs),
        ),
        r(
            "GET",
            "/v1/apps/{name}/notifications",
            "the last 50 notifications the app's backend sent (H.9, needs.notify), oldest first",
            None,
            (200, Some(s::<AppNotifications>)),
            routing::get(notifications),
        ),
    ]
}
