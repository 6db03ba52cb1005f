//! The folder pickers (D.13, `/v1/directories`): the work folders, the folders inside one, and a
//! new folder inside one. Every folder listed or made passes the scope check (inside a work
//! folder, links resolved, never one of Handler's own folders); hidden folders are left out.

use std::path::Path;

use handler_contracts::control::{DirectoryListing, DirectoryRequest};
use handler_contracts::validate::expand_home;
use handler_sandbox::validate::check_scope_placement;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::folders::{check_scope, reserved, resolved_roots};

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// The sub-folders of `dir` a picker may offer: real folders (not links), not hidden, each a
/// valid scope.
fn children(app: &AppState, dir: &Path) -> Vec<String> {
    let roots: Vec<String> = resolved_roots(&app.config)
        .iter()
        .map(|p| display(p))
        .collect();
    let reserved = reserved(&app.config);
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(|n| !n.starts_with('.')))
        .map(|e| display(&e.path()))
        .filter(|p| check_scope_placement(p, &roots, &reserved).is_ok())
        .collect();
    v.sort();
    v
}

/// The rules behind GET /v1/directories[?path=…]: the work folders, or a folder's folders.
pub async fn list(app: &AppState, path: Option<String>) -> ApiResult<DirectoryListing> {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Ok(DirectoryListing {
            path: None,
            folders: resolved_roots(&app.config)
                .iter()
                .map(|p| display(p))
                .collect(),
        });
    };
    let dir = check_scope(&app.config, "path", &path)?;
    Ok(DirectoryListing {
        folders: children(app, &dir),
        path: Some(display(&dir)),
    })
}

/// The rules behind POST /v1/directories: a new folder whose parent is a valid scope, its name
/// not hidden (400), 409 when it exists. Answers its (empty) listing.
pub async fn create(app: &AppState, req: DirectoryRequest) -> ApiResult<DirectoryListing> {
    let home = app.config.home.to_string_lossy().into_owned();
    let bad = |d: String| ApiError::bad_request("path invalid", format!("path: {d}"));
    let expanded =
        expand_home("path", req.path.trim_end_matches('/'), &home).map_err(|e| bad(e.message))?;
    let (parent, name) = expanded
        .rsplit_once('/')
        .filter(|(p, _)| expanded.starts_with('/') && !p.is_empty())
        .ok_or_else(|| {
            bad(format!(
                "{:?}: an absolute path inside a work folder",
                req.path
            ))
        })?;
    if name.is_empty() || name.starts_with('.') {
        return Err(bad(format!(
            "{:?}: a folder's name does not start with .",
            req.path
        )));
    }
    let _w = app.write_lock.lock().await;
    let dir = check_scope(&app.config, "path", parent)?;
    let target = dir.join(name);
    if std::fs::symlink_metadata(&target).is_ok() {
        return Err(ApiError::conflict(
            "folder exists",
            format!("path: {} exists", display(&target)),
        ));
    }
    std::fs::create_dir(&target).map_err(ApiError::internal)?;
    drop(_w);
    Ok(DirectoryListing {
        path: Some(display(&target)),
        folders: Vec::new(),
    })
}
