//! A session's files (F.8) by session id: the folder and the session's own folder looked up,
//! then `services::session_files` does the work. A browsable mount (a knowledge folder) is
//! read instead when `mount` names its target, from the mounts recorded at the session's last
//! start (`mounts.json`), with the same one-name-at-a-time reading and no baseline (changes are
//! only the session's folder's); any other `mount` is 404.

use std::path::{Path, PathBuf};

use handler_contracts::files::{
    Changes, FileView, FolderListing, MAX_BASELINE_FILES, MOUNTS_FILE, RevealRequest, SessionMount,
    browsable_mount, session_mounts,
};
use handler_contracts::sandbox::Mount;

use super::folder_of;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::session_files::{self as files, GitReader};
use crate::daemon::state::AppState;

/// The folder a request reads and the session's own folder: the session's folder (its scope;
/// under `sessionTree = "copy"` its checkout, where the agent's edits are: decision 0121), or
/// the source of the browsable mount `mount` names (then the third part is true: no baseline
/// applies to it).
fn folders(app: &AppState, id: &str, mount: Option<&str>) -> ApiResult<(PathBuf, PathBuf, bool)> {
    let (session_dir, scope) = folder_of(app, id)?;
    let Some(m) = mount.filter(|m| !m.is_empty()) else {
        let folder = copy_folder(&session_dir).unwrap_or(scope);
        return Ok((folder, session_dir, false));
    };
    let recorded = read_mounts(&session_dir)?;
    match browsable_mount(&recorded, m) {
        Some(b) => Ok((PathBuf::from(&b.source), session_dir, true)),
        None => Err(ApiError::not_found(format!(
            "mount {m:?} is not a browsable mount of session {id:?}"
        ))),
    }
}

/// Under copy, the checkout's folder the session's scope is (`gitguard::copy_folder`); `None`
/// for any other session.
fn copy_folder(session_dir: &Path) -> Option<PathBuf> {
    crate::daemon::launch::gitguard::copy_folder(&session_dir.join("guard"))
}

/// The repository the baseline's git part and a file's earlier version are read from: the
/// session's scope (under copy the host's repository, never the checkout's `.git`).
fn git_folder(app: &AppState, id: &str) -> ApiResult<PathBuf> {
    Ok(folder_of(app, id)?.1)
}

/// The mounts recorded at the session's last start (none before its first).
fn read_mounts(session_dir: &std::path::Path) -> ApiResult<Vec<SessionMount>> {
    let path = session_dir.join(MOUNTS_FILE);
    let Some(text) = crate::daemon::fsutil::read_optional(&path).map_err(ApiError::internal)?
    else {
        return Ok(Vec::new());
    };
    serde_json::from_str(&text).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))
}

/// Records the sandbox's mounts in the session's folder at each start (F.8: the mounts
/// recorded and which are browsable). A failure is logged: the Access tab is then empty and
/// `mount` 404.
pub(super) fn record_mounts(app: &AppState, id: &str, mounts: &[Mount]) {
    let path = app.sessions.folder(id).join(MOUNTS_FILE);
    let written = serde_json::to_vec_pretty(&session_mounts(mounts))
        .map_err(std::io::Error::other)
        .and_then(|b| crate::daemon::fsutil::write_atomic(&path, &b, 0o600));
    if let Err(e) = written {
        tracing::warn!(session = id, error = %e, "session files: mounts not recorded");
    }
}

/// GET /v1/sessions/{id}/mounts: what the session's sandbox sees of the computer, browsable
/// mounts first (F.8's Access); empty before its first start.
pub fn mounts(app: &AppState, id: &str) -> ApiResult<Vec<SessionMount>> {
    let (session_dir, _) = folder_of(app, id)?;
    read_mounts(&session_dir)
}

/// Records the baseline before the session's first sandbox (kept across restarts). A failure is
/// logged, not fatal: the changes then answer 409 with the reason.
pub(super) async fn record_baseline(app: &AppState, id: &str) {
    let Ok((folder, session_dir, _)) = folders(app, id, None) else {
        return;
    };
    let Ok(git_folder) = git_folder(app, id) else {
        return;
    };
    let now = crate::daemon::fsutil::now_rfc3339();
    if let Err(e) = files::record_baseline_in(
        &folder,
        &git_folder,
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
    let (folder, session_dir, _) = folders(app, id, None)?;
    Ok(files::changes(&folder, &session_dir, MAX_BASELINE_FILES).await?)
}

/// GET /v1/sessions/{id}/files
pub async fn list(app: &AppState, id: &str, mount: Option<&str>) -> ApiResult<FolderListing> {
    let (folder, session_dir, is_mount) = folders(app, id, mount)?;
    let baseline = (!is_mount).then_some(session_dir.as_path());
    Ok(files::list_all(&folder, baseline, MAX_BASELINE_FILES).await?)
}

/// GET /v1/sessions/{id}/file?path=
pub async fn read(
    app: &AppState,
    id: &str,
    path: &str,
    mount: Option<&str>,
) -> ApiResult<FileView> {
    let (folder, session_dir, is_mount) = folders(app, id, mount)?;
    let git = GitReader::locate();
    let session = (!is_mount).then_some((session_dir.as_path(), &git));
    let git_folder = if is_mount {
        folder.clone()
    } else {
        git_folder(app, id)?
    };
    Ok(files::read_file_in(&folder, &git_folder, path, session).await?)
}

/// POST /v1/sessions/{id}/reveal
pub async fn reveal(app: &AppState, id: &str, req: &RevealRequest) -> ApiResult<()> {
    let (folder, _, _) = folders(app, id, req.mount.as_deref())?;
    Ok(files::reveal(&folder, req.path.as_deref().unwrap_or("")).await?)
}
