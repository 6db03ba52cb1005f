//! Settings → Caches (D.8, decision 0087): what the toolbox keeps and where — one pure function
//! of the manifest, the projects and the folders' places — measured and emptied through the
//! runtime's `cache` verbs (A.9), never the host's own `du` or `rm`.

use std::path::Path;

use handler_contracts::control::{
    CacheChoice, CacheClearRequest, CacheDeclarationInfo, CacheFolder, CachesOverview,
    GlobalCaches, ProjectCaches,
};
use handler_contracts::harness::ToolboxManifest;

use crate::daemon::launch::caches as folders;
use crate::daemon::launch::launcher::LauncherError;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::StoredProject;

/// The caches of one location: each declared cache's folder under `root`, not measured yet.
fn location(manifest: &ToolboxManifest, root: &Path) -> Vec<CacheFolder> {
    manifest
        .caches
        .keys()
        .map(|name| CacheFolder {
            name: name.clone(),
            path: root.join(name).display().to_string(),
            bytes: None,
            error: None,
        })
        .collect()
}

/// What is kept where (pure): the declarations (toolchains, then general folders, each by
/// name), the global folder with the projects choosing it, and each project's own folder (by
/// name); no sizes.
pub fn layout(
    manifest: &ToolboxManifest,
    projects: &[StoredProject],
    global_root: &Path,
    data_dir: &Path,
) -> CachesOverview {
    let mut declarations: Vec<CacheDeclarationInfo> = manifest
        .caches
        .iter()
        .map(|(name, d)| CacheDeclarationInfo {
            name: name.clone(),
            target: d.target.clone(),
            about: d.about.clone(),
            general: d.general,
        })
        .collect();
    declarations.sort_by(|a, b| (a.general, &a.name).cmp(&(b.general, &b.name)));
    let mut projects: Vec<&StoredProject> = projects.iter().collect();
    projects.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
    let global = GlobalCaches {
        path: global_root.display().to_string(),
        users: projects
            .iter()
            .filter(|p| p.caches == CacheChoice::Global)
            .map(|p| p.id.clone())
            .collect(),
        caches: location(manifest, global_root),
    };
    let projects = projects
        .into_iter()
        .map(|p| {
            let root = data_dir.join("caches").join(&p.id);
            ProjectCaches {
                project_id: p.id.clone(),
                name: p.name.clone(),
                choice: p.caches,
                path: root.display().to_string(),
                caches: location(manifest, &root),
            }
        })
        .collect();
    CachesOverview {
        declarations,
        global,
        projects,
    }
}

fn manifest(app: &AppState) -> ApiResult<ToolboxManifest> {
    folders::toolbox_manifest(&app.config)
        .map_err(|e| ApiError::unprocessable("toolbox.toml invalid", e.to_string()))
}

/// `GET /v1/caches`: the layout with each folder's size (none: not made yet).
pub async fn overview(app: &AppState) -> ApiResult<CachesOverview> {
    let manifest = manifest(app)?;
    let projects = app.agents.projects();
    let mut o = layout(
        &manifest,
        &projects,
        &app.config.cache_dir,
        &app.config.data_dir,
    );
    let mut all: Vec<&mut CacheFolder> = o.global.caches.iter_mut().collect();
    for p in &mut o.projects {
        all.extend(p.caches.iter_mut());
    }
    folders::measure(app.launcher.as_ref(), &mut all).await;
    Ok(o)
}

/// `POST /v1/caches/clear`: empties one cache or a whole location; 400 neither or both of
/// `project` and `global`, 404 an unknown project or cache, 409 `cache in use`.
pub async fn clear(app: &AppState, req: CacheClearRequest) -> ApiResult<()> {
    let root = match (&req.project, req.global) {
        (Some(_), true) | (None, false) => {
            return Err(ApiError::bad_request(
                "invalid request",
                "project, global: give exactly one of them",
            ));
        }
        (None, true) => app.config.cache_dir.clone(),
        (Some(id), false) => {
            app.agents
                .project(id)
                .ok_or_else(|| ApiError::not_found(format!("project: no project {id}")))?;
            folders::project_root(&app.config, id)
        }
    };
    let manifest = manifest(app)?;
    let names: Vec<&String> = match &req.name {
        Some(n) if manifest.caches.contains_key(n) => vec![n],
        Some(n) => {
            return Err(ApiError::not_found(format!(
                "name: toolbox.toml declares no cache {n}"
            )));
        }
        None => manifest.caches.keys().collect(),
    };
    let paths: Vec<String> = names
        .iter()
        .map(|n| root.join(n).display().to_string())
        .collect();
    folders::empty(app.launcher.as_ref(), &paths)
        .await
        .map_err(refusal)
}

/// A deleted project's own cache folders (D.8): each emptied by the runtime's `cache clear`
/// (the only way to files written with inner ids), then the empty folders removed — never a
/// host-side recursive removal. Answers the folders removed, or why they were kept (a sandbox
/// still mounting one).
pub async fn remove_project_folder(app: &AppState, id: &str) -> (Vec<String>, Option<String>) {
    let root = folders::project_root(&app.config, id);
    if folders::existing(&root.display().to_string()).is_none() {
        return (Vec::new(), None);
    }
    let names: Vec<String> = match manifest(app) {
        Ok(m) => m.caches.keys().cloned().collect(),
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let paths: Vec<String> = names
        .iter()
        .filter_map(|n| folders::existing(&root.join(n).display().to_string()))
        .collect();
    if let Err(e) = folders::empty(app.launcher.as_ref(), &paths).await {
        let why = refusal(e).to_string();
        tracing::warn!(project = %id, why = %why, "a deleted project's caches kept");
        return (Vec::new(), Some(why));
    }
    let removed: Vec<String> = paths
        .into_iter()
        .filter(|p| std::fs::remove_dir(p).is_ok())
        .collect();
    if let Err(e) = std::fs::remove_dir(&root) {
        tracing::warn!(project = %id, folder = %root.display(), error = %e, "a deleted project's cache folder not removed");
    }
    tracing::info!(project = %id, caches = ?removed, "a deleted project's caches removed");
    (removed, None)
}

/// A refusal of `cache clear`: 409 when a sandbox mounts the folder (its names in the detail).
fn refusal(e: LauncherError) -> ApiError {
    match &e {
        LauncherError::Verb { stderr, .. } if stderr.contains("is mounted by") => {
            ApiError::conflict("cache in use", stderr.trim_start_matches("cache clear: "))
        }
        _ => ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "cache clear failed",
            e.to_string(),
        ),
    }
}
