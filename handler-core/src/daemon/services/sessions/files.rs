//! A session's files (F.8) by session id: the folder and the session's own folder looked up,
//! then `services::session_files` does the work. Browsable mounts are not served yet: a `mount`
//! is 404 (the spec's answer for what is not a browsable mount).

use std::path::PathBuf;

use handler_contracts::files::{
    Changes, FileView, FolderListing, MAX_BASELINE_FILES, RevealRequest,
};

use super::folder_of;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::session_files::{self as files, GitReader};
use crate::daemon::state::AppState;

/// The folder a request reads: the session's own (its scope), unless a mount is named.
fn folders(app: &AppState, id: &str, mount: Option<&str>) -> ApiResult<(PathBuf, PathBuf)> {
    let (session_dir, scope) = folder_of(app, id)?;
    match mount {
        Some(m) if !m.is_empty() => Err(ApiError::not_found(format!(
            "{m:?} is not a browsable mount of session {id:?}"
        ))),
        _ => Ok((scope, session_dir)),
    }
}

/// Records the baseline before the session's first sandbox (kept across restarts). A failure is
/// logged, not fatal: the changes then answer 409 with the reason.
pub(super) async fn record_baseline(app: &AppState, id: &str) {
    let Ok((folder, session_dir)) = folders(app, id, None) else {
        return;
    };
    let now = crate::daemon::fsutil::now_rfc3339();
    if let Err(e) = files::record_baseline(
        &folder,
        &session_dir,
        &GitReader::locate(),
        now,
        MAX_BASELINE_FILES,
    )
    .await
    {
        tracing::warn!(session = id, error = %e, "session files: no baseline");
    }
}

/// GET /v1/sessions/{id}/changes
pub async fn changes(app: &AppState, id: &str) -> ApiResult<Changes> {
    let (folder, session_dir) = folders(app, id, None)?;
    Ok(files::changes(&folder, &session_dir, MAX_BASELINE_FILES).await?)
}

/// GET /v1/sessions/{id}/files
pub async fn list(app: &AppState, id: &str, mount: Option<&str>) -> ApiResult<FolderListing> {
    let (folder, session_dir) = folders(app, id, mount)?;
    Ok(files::list_all(&folder, Some(&session_dir), MAX_BASELINE_FILES).await?)
}

/// GET /v1/sessions/{id}/file?path=
pub async fn read(
    app: &AppState,
    id: &str,
    path: &str,
    mount: Option<&str>,
) -> ApiResult<FileView> {
    let (folder, session_dir) = folders(app, id, mount)?;
    let git = GitReader::locate();
    Ok(files::read_file(&folder, path, Some((&session_dir, &git))).await?)
}

/// POST /v1/sessions/{id}/reveal
pub async fn reveal(app: &AppState, id: &str, req: &RevealRequest) -> ApiResult<()> {
    let (folder, _) = folders(app, id, req.mount.as_deref())?;
    Ok(files::reveal(&folder, req.path.as_deref().unwrap_or("")).await?)
}
