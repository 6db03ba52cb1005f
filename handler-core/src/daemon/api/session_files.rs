//! The session's files routes (F.8): parse, call `services::sessions::files`, answer.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::files::{Changes, FileView, FolderListing, RevealRequest, SessionMount};
use serde::Deserialize;

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::sessions::files as service;
use crate::daemon::state::AppState;

/// `?mount=` (All files) and `?path=&mount=` (a file).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    /// Relative to the folder, `/`-separated.
    #[serde(default)]
    path: Option<String>,
    /// The target of a browsable mount.
    #[serde(default)]
    mount: Option<String>,
}

/// GET /v1/sessions/{id}/changes
pub async fn changes(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Changes>> {
    Ok(Json(service::changes(&app, &id).await?))
}

/// GET /v1/sessions/{id}/files
pub async fn list(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<FileQuery>,
) -> ApiResult<Json<FolderListing>> {
    Ok(Json(service::list(&app, &id, q.mount.as_deref()).await?))
}

/// GET /v1/sessions/{id}/file
pub async fn read(
    State(app): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<FileQuery>,
) -> ApiResult<Json<FileView>> {
    let path = q.path.unwrap_or_default();
    Ok(Json(
        service::read(&app, &id, &path, q.mount.as_deref()).await?,
    ))
}

/// GET /v1/sessions/{id}/mounts
pub async fn mounts(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<SessionMount>>> {
    Ok(Json(service::mounts(&app, &id)?))
}

/// POST /v1/sessions/{id}/reveal
pub async fn reveal(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<RevealRequest>,
) -> ApiResult<StatusCode> {
    service::reveal(&app, &id, &req).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The session files routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/v1/sessions/{id}/changes",
            "What changed in the session's folder since it started (F.8)",
            None,
            (200, Some(s::<Changes>)),
            routing::get(changes),
        ),
        Route {
            query: &[("mount", "a browsable mount's target instead of the folder")],
            ..r(
                "GET",
                "/v1/sessions/{id}/files",
                "All files of the session's folder (F.8)",
                None,
                (200, Some(s::<FolderListing>)),
                routing::get(list),
            )
        },
        Route {
            query: &[
                ("path", "the file, relative to the folder, /-separated"),
                ("mount", "a browsable mount's target instead of the folder"),
            ],
            ..r(
                "GET",
                "/v1/sessions/{id}/file",
                "A file now, how it changed and its version when the session started (F.8)",
                None,
                (200, Some(s::<FileView>)),
                routing::get(read),
            )
        },
        r(
            "GET",
            "/v1/sessions/{id}/mounts",
            "What the session's sandbox sees of the computer: its mounts, browsable first (F.8)",
            None,
            (200, Some(s::<Vec<SessionMount>>)),
            routing::get(mounts),
        ),
        r(
            "POST",
            "/v1/sessions/{id}/reveal",
            "Show a file or folder in the desktop's file manager (F.8); 409 without a desktop",
            Some(s::<RevealRequest>),
            (204, None),
            routing::post(reveal),
        ),
    ]
}
