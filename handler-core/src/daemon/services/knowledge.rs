//! Knowledge folders (D.5): the root and its folders three levels deep (parents first, names
//! starting with `.` or `_` left out), a folder's view, a note as text, a new folder (K5), and
//! setting the root (`<config>/knowledge.toml`; refused while `$HANDLER_KNOWLEDGE_DIR` is set).
//! Every path is confined like K2: inside the root with links resolved, no hidden component.

use std::path::{Path, PathBuf};

use handler_contracts::control::{
    KnowledgeFolderRequest, KnowledgeFolderView, KnowledgeListing, KnowledgeNote,
    KnowledgeRootRequest, KnowledgeRootSource,
};
use handler_contracts::validate::expand_home;
use handler_sandbox::validate::check_root_placement;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::documents::TomlFile;
use crate::daemon::store::folders::reserved;
use crate::daemon::store::knowledge::{config_path, root_and_source};
use crate::daemon::store::tomldoc;

/// How deep GET /v1/knowledge lists.
const DEPTH: usize = 3;
/// The largest note sent as text.
pub const MAX_NOTE_BYTES: u64 = 1024 * 1024;
/// A folder's index note, the first of these it has.
const INDEX_NOTES: &[&str] = &["index.md", "README.md"];

fn listed(name: &str) -> bool {
    !name.starts_with('.') && !name.starts_with('_')
}

/// The entries of a folder, sorted: its folders (not links, listed names) and its files.
fn entries(dir: &Path) -> (Vec<String>, Vec<String>) {
    let (mut folders, mut files) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(name) = e.file_name().to_str().map(String::from) else {
            continue;
        };
        match e.file_type() {
            Ok(t) if t.is_dir() && listed(&name) => folders.push(name),
            Ok(t) if t.is_file() && !name.starts_with('.') => files.push(name),
            _ => {}
        }
    }
    folders.sort();
    files.sort();
    (folders, files)
}

fn walk(dir: &Path, prefix: &str, depth: usize, out: &mut Vec<String>) {
    if depth == 0 {
        return;
    }
    for name in entries(dir).0 {
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        out.push(rel.clone());
        walk(&dir.join(&name), &rel, depth - 1, out);
    }
}

/// The rules behind GET /v1/knowledge.
pub async fn list(app: &AppState) -> KnowledgeListing {
    let (root, source) = root_and_source(&app.config);
    let exists = root.is_dir();
    let mut folders = Vec::new();
    if exists {
        walk(&root, "", DEPTH, &mut folders);
    }
    KnowledgeListing {
        root: root.display().to_string(),
        source,
        exists,
        folders,
    }
}

fn bad(detail: String) -> ApiError {
    ApiError::bad_request("path invalid", detail)
}

/// The root, canonical (404 when it does not exist).
fn canonical_root(app: &AppState) -> ApiResult<PathBuf> {
    let (root, _) = root_and_source(&app.config);
    std::fs::canonicalize(&root).map_err(|_| {
        ApiError::not_found(format!(
            "the knowledge root {} does not exist",
            root.display()
        ))
    })
}

/// `path` (relative, `.` the root) inside the root: its canonical form and its normalized
/// relative one. 400 for a hidden or `..` component or a link out of the root, 404 when missing.
fn resolve(app: &AppState, path: &str) -> ApiResult<(PathBuf, String)> {
    let croot = canonical_root(app)?;
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if path.starts_with('/') {
        return Err(bad(format!(
            "path: {path:?}: relative to the knowledge root"
        )));
    }
    if let Some(c) = parts.iter().find(|c| c.starts_with('.')) {
        return Err(bad(format!(
            "path: {path:?}: {c} is hidden or leaves the folder"
        )));
    }
    let rel = parts.join("/");
    let c = std::fs::canonicalize(croot.join(&rel))
        .map_err(|_| ApiError::not_found(format!("path: {path:?} is not in the knowledge root")))?;
    if !c.starts_with(&croot) {
        return Err(bad(format!(
            "path: {path:?} resolves outside the knowledge root"
        )));
    }
    Ok((c, if rel.is_empty() { ".".into() } else { rel }))
}

fn read_text(p: &Path, field: &str) -> ApiResult<String> {
    let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    if len > MAX_NOTE_BYTES {
        return Err(bad(format!("{field}: over 1 MiB, not sent as a note")));
    }
    let b = std::fs::read(p).map_err(ApiError::internal)?;
    String::from_utf8(b).map_err(|_| bad(format!("{field}: not UTF-8 text")))
}

/// The rules behind GET /v1/knowledge/folder?path=…
pub async fn folder(app: &AppState, path: Option<String>) -> ApiResult<KnowledgeFolderView> {
    let path = path.unwrap_or_else(|| ".".into());
    let (dir, rel) = resolve(app, &path)?;
    if !dir.is_dir() {
        return Err(bad(format!("path: {path:?} is not a folder")));
    }
    let (folders, notes) = entries(&dir);
    let index = INDEX_NOTES
        .iter()
        .find(|n| notes.iter().any(|x| x == *n))
        .and_then(|n| read_text(&dir.join(n), n).ok());
    Ok(KnowledgeFolderView {
        path: rel,
        folders,
        notes,
        index,
    })
}

/// The rules behind GET /v1/knowledge/note?path=…: its text (untrusted markdown, K5).
pub async fn note(app: &AppState, path: Option<String>) -> ApiResult<KnowledgeNote> {
    let path = path.ok_or_else(|| bad("path: required".into()))?;
    let (p, rel) = resolve(app, &path)?;
    if !p.is_file() {
        return Err(bad(format!("path: {path:?} is not a note (a file)")));
    }
    Ok(KnowledgeNote {
        path: rel,
        text: read_text(&p, "path")?,
    })
}

/// The rules behind POST /v1/knowledge/folders (K5): in an existing folder of the root (the root
/// itself is made when missing), named neither `.…` nor `_…`. 409 when it exists.
pub async fn create_folder(
    app: &AppState,
    req: KnowledgeFolderRequest,
) -> ApiResult<KnowledgeFolderView> {
    let _w = app.write_lock.lock().await;
    let trimmed = req.path.trim_end_matches('/');
    let (parent, name) = trimmed.rsplit_once('/').unwrap_or((".", trimmed));
    if name.is_empty() || name == "." || name == ".." || !listed(name) {
        return Err(bad(format!(
            "path: {:?}: a folder's name starts with neither . nor _",
            req.path
        )));
    }
    let (root, _) = root_and_source(&app.config);
    if !root.exists() {
        std::fs::create_dir_all(&root).map_err(ApiError::internal)?;
    }
    let (dir, rel) = resolve(app, parent)?;
    let target = dir.join(name);
    if std::fs::symlink_metadata(&target).is_ok() {
        return Err(ApiError::conflict(
            "folder exists",
            format!("path: {:?} exists", req.path),
        ));
    }
    std::fs::create_dir(&target).map_err(ApiError::internal)?;
    drop(_w);
    let new = if rel == "." {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    };
    folder(app, Some(new)).await
}

/// The rules behind PUT /v1/knowledge: the root in `<config>/knowledge.toml` (409 while
/// `$HANDLER_KNOWLEDGE_DIR` sets it); absolute or `~/…`, never one of Handler's own folders.
pub async fn set_root(app: &AppState, req: KnowledgeRootRequest) -> ApiResult<KnowledgeListing> {
    if root_and_source(&app.config).1 == KnowledgeRootSource::Env {
        return Err(ApiError::conflict(
            "knowledge root set by the environment",
            "root: HANDLER_KNOWLEDGE_DIR is set; unset it to choose the root here",
        ));
    }
    let invalid = |d: String| ApiError::bad_request("knowledge root invalid", format!("root: {d}"));
    let home = app.config.home.to_string_lossy().into_owned();
    let expanded = expand_home("root", req.root.trim(), &home).map_err(|e| invalid(e.message))?;
    if !expanded.starts_with('/') {
        return Err(invalid(format!("{:?}: an absolute path or ~/…", req.root)));
    }
    let canon = std::fs::canonicalize(&expanded)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| expanded.clone());
    let reserved = reserved(&app.config);
    for form in [&expanded, &canon] {
        check_root_placement(form, &reserved).map_err(|e| invalid(e.to_string()))?;
    }
    let _w = app.write_lock.lock().await;
    TomlFile::new(config_path(&app.config)).update::<_, ApiError>(|doc| {
        tomldoc::set_str(doc, "root", Some(req.root.trim()));
        Ok(())
    })?;
    drop(_w);
    Ok(list(app).await)
}
