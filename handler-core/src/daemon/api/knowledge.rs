//! The knowledge routes (D.5) and the folder pickers' (D.13): parse, call the service, answer.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing;
use handler_contracts::control::{
    DirectoryListing, DirectoryQuery, DirectoryRequest, KnowledgeFolderRequest,
    KnowledgeFolderView, KnowledgeListing, KnowledgeNote, KnowledgePathQuery, KnowledgeRootRequest,
};

use super::routes::{Route, r, s};
use crate::daemon::problem::{ApiJson, ApiResult};
use crate::daemon::services::{directories, knowledge};
use crate::daemon::state::AppState;

/// GET /v1/knowledge
pub async fn list(State(app): State<AppState>) -> Json<KnowledgeListing> {
    Json(knowledge::list(&app).await)
}

/// PUT /v1/knowledge: set the root.
pub async fn set_root(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<KnowledgeRootRequest>,
) -> ApiResult<Json<KnowledgeListing>> {
    Ok(Json(knowledge::set_root(&app, req).await?))
}

/// GET /v1/knowledge/folder?path=…
pub async fn folder(
    State(app): State<AppState>,
    Query(q): Query<KnowledgePathQuery>,
) -> ApiResult<Json<KnowledgeFolderView>> {
    Ok(Json(knowledge::folder(&app, q.path).await?))
}

/// GET /v1/knowledge/note?path=…
pub async fn note(
    State(app): State<AppState>,
    Query(q): Query<KnowledgePathQuery>,
) -> ApiResult<Json<KnowledgeNote>> {
    Ok(Json(knowledge::note(&app, q.path).await?))
}

/// POST /v1/knowledge/folders (201).
pub async fn create_folder(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<KnowledgeFolderRequest>,
) -> ApiResult<(StatusCode, Json<KnowledgeFolderView>)> {
    Ok((
        StatusCode::CREATED,
        Json(knowledge::create_folder(&app, req).await?),
    ))
}

/// GET /v1/directories[?path=…]
pub async fn directories(
    State(app): State<AppState>,
    Query(q): Query<DirectoryQuery>,
) -> ApiResult<Json<DirectoryListing>> {
    Ok(Json(directories::list(&app, q.path).await?))
}

/// POST /v1/directories (201).
pub async fn create_directory(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<DirectoryRequest>,
) -> ApiResult<(StatusCode, Json<DirectoryListing>)> {
    Ok((
        StatusCode::CREATED,
        Json(directories::create(&app, req).await?),
    ))
}

const PATH_QUERY: &[(&str, &str)] = &[("path", "relative to the knowledge root; . the root")];

/// The knowledge and directories routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    let mut folder_route = r(
        "GET",
        "/v1/knowledge/folder",
        "A knowledge folder: its folders, notes and index",
        None,
        (200, Some(s::<KnowledgeFolderView>)),
        routing::get(folder),
    );
    folder_route.query = PATH_QUERY;
    let mut note_route = r(
        "GET",
        "/v1/knowledge/note",
        "A knowledge note as text (untrusted markdown)",
        None,
        (200, Some(s::<KnowledgeNote>)),
        routing::get(note),
    );
    note_route.query = PATH_QUERY;
    let mut dirs = r(
        "GET",
        "/v1/directories",
        "The work folders, or the folders inside one (D.13)",
        None,
        (200, Some(s::<DirectoryListing>)),
        routing::get(directories),
    );
    dirs.query = &[(
        "path",
        "a folder inside a work folder; none: the work folders",
    )];
    vec![
        r(
            "GET",
            "/v1/knowledge",
            "The knowledge root and its folders, three levels deep (D.5)",
            None,
            (200, Some(s::<KnowledgeListing>)),
            routing::get(list),
        ),
        r(
            "PUT",
            "/v1/knowledge",
            "Set the knowledge root (refused while HANDLER_KNOWLEDGE_DIR is set)",
            Some(s::<KnowledgeRootRequest>),
            (200, Some(s::<KnowledgeListing>)),
            routing::put(set_root),
        ),
        folder_route,
        note_route,
        r(
            "POST",
            "/v1/knowledge/folders",
            "A new knowledge folder (K5)",
            Some(s::<KnowledgeFolderRequest>),
            (201, Some(s::<KnowledgeFolderView>)),
            routing::post(create_folder),
        ),
        dirs,
        r(
            "POST",
            "/v1/directories",
            "A new folder inside a work folder (D.13)",
            Some(s::<DirectoryRequest>),
            (201, Some(s::<DirectoryListing>)),
            routing::post(create_directory),
        ),
    ]
}
