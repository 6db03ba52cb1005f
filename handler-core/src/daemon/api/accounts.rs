//! The accounts routes: parse, call the service, answer.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::accounts::{self as service};
use crate::daemon::state::AppState;
use axum::routing;
use handler_contracts::control::{
    AccountInfo, AccountRequest, LoginFileRequest, LoginWindow, TokenInput,
};

/// GET /v1/accounts
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<AccountInfo>>> {
    let v = service::list(&app).await?;
    Ok(Json(v))
}

/// GET /v1/accounts/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::get(&app, name).await?;
    Ok(Json(v))
}

/// POST /v1/accounts
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AccountRequest>,
) -> ApiResult<(StatusCode, Json<AccountInfo>)> {
    let v = service::create(&app, req).await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// PUT /v1/accounts/{name}
pub async fn replace(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<AccountRequest>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::replace(&app, name, req).await?;
    Ok(Json(v))
}

/// PUT /v1/accounts/{name}/token
pub async fn set_token(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(t): ApiJson<TokenInput>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::set_token(&app, name, t).await?;
    Ok(Json(v))
}

/// PUT /v1/accounts/{name}/login: keeps a file login's credential file (0600).
pub async fn set_login_file(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<LoginFileRequest>,
) -> ApiResult<Json<AccountInfo>> {
    let v = service::set_login_file(&app, name, req).await?;
    Ok(Json(v))
}

/// POST /v1/accounts/{name}/login/window: the web UI's Log in for a file login (D.9).
pub async fn login_window(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<(StatusCode, Json<LoginWindow>)> {
    let v = crate::daemon::services::login_window::open(&app, name).await?;
    Ok((StatusCode::ACCEPTED, Json(v)))
}

/// DELETE /v1/accounts/{name}: its file, its pasted token, its credential file.
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The accounts routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/accounts",
            "The accounts (D.9)",
            None,
            (200, Some(s::<Vec<AccountInfo>>)),
            routing::get(list),
        ),
        r(
            "POST",
            "/v1/accounts",
            "Create an account",
            Some(s::<AccountRequest>),
            (201, Some(s::<AccountInfo>)),
            routing::post(create),
        ),
        r(
            "GET",
            "/v1/accounts/{name}",
            "One account",
            None,
            (200, Some(s::<AccountInfo>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}",
            "Replace an account (its token kept unless given)",
            Some(s::<AccountRequest>),
            (200, Some(s::<AccountInfo>)),
            routing::put(replace),
        ),
        r(
            "DELETE",
            "/v1/accounts/{name}",
            "Remove an account, its token and credential file",
            None,
            (204, None),
            routing::delete(delete),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}/token",
            "Set a token login's token: pasted (to the secret store) or a reference",
            Some(s::<TokenInput>),
            (200, Some(s::<AccountInfo>)),
            routing::put(set_token),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}/login",
            "Keep a file login's credential file (0600)",
            Some(s::<LoginFileRequest>),
            (200, Some(s::<AccountInfo>)),
            routing::put(set_login_file),
        ),
        r(
            "POST",
            "/v1/accounts/{name}/login/window",
            "Open a terminal window on the desktop running a file login (`handler account login NAME --keep-open`)",
            None,
            (202, Some(s::<LoginWindow>)),
            routing::post(login_window),
        ),
    ]
}
