//! The skills routes (D.17): parse, call the service, answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::control::{
    CreateSkillRequest, SkillFile, SkillFileRequest, SkillImportQuery, SkillInfo, SkillRequest,
    SkillUrlRequest,
};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::skills::{self as service, files, import};
use crate::daemon::state::AppState;

/// GET /v1/skills
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<SkillInfo>>> {
    Ok(Json(service::list(&app).await?))
}

/// GET /v1/skills/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<SkillInfo>> {
    Ok(Json(service::get(&app, name).await?))
}

/// POST /v1/skills: a new skill (201).
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<CreateSkillRequest>,
) -> ApiResult<(StatusCode, Json<SkillInfo>)> {
    Ok((StatusCode::CREATED, Json(service::create(&app, req).await?)))
}

/// PUT /v1/skills/{name}: its SKILL.md (a new name renames it) and who gets it.
pub async fn replace(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<SkillRequest>,
) -> ApiResult<Json<SkillInfo>> {
    Ok(Json(service::replace(&app, name, req).await?))
}

/// DELETE /v1/skills/{name}
pub async fn delete(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::delete(&app, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// GET /v1/skills/{name}/files/{*path}
pub async fn get_file(
    State(app): State<AppState>,
    Path((name, path)): Path<(String, String)>,
) -> ApiResult<Json<SkillFile>> {
    Ok(Json(files::get(&app, name, path).await?))
}

/// PUT /v1/skills/{name}/files/{*path}
pub async fn put_file(
    State(app): State<AppState>,
    Path((name, path)): Path<(String, String)>,
    ApiJson(req): ApiJson<SkillFileRequest>,
) -> ApiResult<Json<SkillFile>> {
    Ok(Json(files::put(&app, name, path, req).await?))
}

/// DELETE /v1/skills/{name}/files/{*path}
pub async fn delete_file(
    State(app): State<AppState>,
    Path((name, path)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    files::delete(&app, name, path).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn created(new: bool) -> StatusCode {
    if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// POST /v1/skills/import-zip: a zip archive in the body (201 new, 200 replaced).
pub async fn import_zip(
    State(app): State<AppState>,
    Query(q): Query<SkillImportQuery>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<SkillInfo>)> {
    let (new, v) = import::from_zip(&app, body.to_vec(), q).await?;
    Ok((created(new), Json(v)))
}

/// POST /v1/skills/import-session/{sessionId}: a folderless agent's session folder.
pub async fn import_session(
    State(app): State<AppState>,
    Path(session): Path<String>,
    Query(q): Query<SkillImportQuery>,
) -> ApiResult<(StatusCode, Json<SkillInfo>)> {
    let (new, v) = import::from_session(&app, &session, q).await?;
    Ok((created(new), Json(v)))
}

/// POST /v1/skills/import-url: an https:// archive or repository folder.
pub async fn import_url(
    State(app): State<AppState>,
    Query(q): Query<SkillImportQuery>,
    ApiJson(req): ApiJson<SkillUrlRequest>,
) -> ApiResult<(StatusCode, Json<SkillInfo>)> {
    let (new, v) = import::from_url(&app, req, q).await?;
    Ok((created(new), Json(v)))
}

const IMPORT_QUERY: &[(&str, &str)] = &[
    ("project", "give it to this project's agents (its id)"),
    ("replace", "true: replace a skill of that name (else 409)"),
];

/// A session's import also takes the name the person confirms replacing (security F3).
const SESSION_IMPORT_QUERY: &[(&str, &str)] = &[
    ("project", "give it to this project's agents (its id)"),
    ("replace", "true: replace a skill of that name (else 409)"),
    (
        "name",
        "with replace=true: the skill the person means to replace, which the session's SKILL.md must name",
    ),
];

/// The largest body an import or a file takes: a 32 MiB archive, an 8 MiB file in base64.
const BODY_LIMIT: usize = 33 * 1024 * 1024;

/// The skills routes, in the order /openapi.json lists them.
#[expect(
    clippy::too_many_lines,
    reason = "a table: one entry per skills route, no logic"
)]
pub(super) fn routes() -> Vec<Route> {
    let big = || DefaultBodyLimit::max(BODY_LIMIT);
    let mut v = vec![
        r(
            "GET",
            "/v1/skills",
            "The skills library (D.17)",
            None,
            (200, Some(s::<Vec<SkillInfo>>)),
            routing::get(list),
        ),
        r(
            "POST",
            "/v1/skills",
            "A new skill (copyOf: with another's files)",
            Some(s::<CreateSkillRequest>),
            (201, Some(s::<SkillInfo>)),
            routing::post(create),
        ),
        r(
            "POST",
            "/v1/skills/import-zip",
            "Import a skill from a zip archive (the body, application/zip)",
            None,
            (201, Some(s::<SkillInfo>)),
            routing::post(import_zip).layer(big()),
        ),
        r(
            "POST",
            "/v1/skills/import-session/{sessionId}",
            "Bring a folderless agent's session folder into the library (D.18)",
            None,
            (201, Some(s::<SkillInfo>)),
            routing::post(import_session),
        ),
        r(
            "POST",
            "/v1/skills/import-url",
            "Import a skill from an https:// archive or repository folder",
            Some(s::<SkillUrlRequest>),
            (201, Some(s::<SkillInfo>)),
            routing::post(import_url),
        ),
        r(
            "GET",
            "/v1/skills/{name}",
            "A skill: its SKILL.md, files, digest and scan",
            None,
            (200, Some(s::<SkillInfo>)),
            routing::get(get),
        ),
        r(
            "PUT",
            "/v1/skills/{name}",
            "Replace a skill's SKILL.md (a new name renames it) and who gets it",
            Some(s::<SkillRequest>),
            (200, Some(s::<SkillInfo>)),
            routing::put(replace),
        ),
        r(
            "DELETE",
            "/v1/skills/{name}",
            "Delete a skill (its agents lose it)",
            None,
            (204, None),
            routing::delete(delete),
        ),
        r(
            "GET",
            "/v1/skills/{name}/files/{*path}",
            "One file of a skill (its text when UTF-8)",
            None,
            (200, Some(s::<SkillFile>)),
            routing::get(get_file),
        ),
        r(
            "PUT",
            "/v1/skills/{name}/files/{*path}",
            "Write one file of a skill (text or base64, executable)",
            Some(s::<SkillFileRequest>),
            (200, Some(s::<SkillFile>)),
            routing::put(put_file).layer(big()),
        ),
        r(
            "DELETE",
            "/v1/skills/{name}/files/{*path}",
            "Remove one file of a skill",
            None,
            (204, None),
            routing::delete(delete_file),
        ),
    ];
    for route in &mut v {
        if route.path.starts_with("/v1/skills/import-session") {
            route.query = SESSION_IMPORT_QUERY;
        } else if route.path.starts_with("/v1/skills/import-") {
            route.query = IMPORT_QUERY;
        }
    }
    v
}
