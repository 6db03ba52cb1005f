//! A skill's other files, one at a time (D.17): read (its text when UTF-8), written (text or
//! base64, its executable bit) and removed. A path is relative to the skill's folder, with no
//! hidden component, no `..`, no link on the way, and never its SKILL.md (PUT the skill).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use handler_contracts::control::{SkillFile, SkillFileRequest};

use super::{SKILL_MD, existing, write_file};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// The largest file written one at a time (the whole skill is held to the archive's 32 MiB).
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;

fn bad(detail: String) -> ApiError {
    ApiError::bad_request("path invalid", detail)
}

/// `path` inside the skill's folder `dir`: checked, and no component on the way a link.
fn resolve(dir: &Path, path: &str) -> ApiResult<PathBuf> {
    let parts: Vec<&str> = path.split('/').collect();
    for c in &parts {
        if c.is_empty() || *c == "." || *c == ".." {
            return Err(bad(format!(
                "path: {path:?}: a relative path without empty, . or .. parts"
            )));
        }
        if c.starts_with('.') {
            return Err(bad(format!(
                "path: {path:?}: no hidden files in a skill (a part starts with .)"
            )));
        }
    }
    if path == SKILL_MD {
        return Err(bad(
            "path: SKILL.md is the skill itself: PUT /v1/skills/{name} replaces it".into(),
        ));
    }
    let mut at = dir.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(bad(format!("path: {path:?}: {c} is a link")));
            }
            Ok(m) if i + 1 < parts.len() && !m.is_dir() => {
                return Err(bad(format!("path: {path:?}: {c} is not a folder")));
            }
            _ => {}
        }
    }
    Ok(at)
}

fn describe(p: &Path, path: &str, with_text: bool) -> ApiResult<SkillFile> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::symlink_metadata(p)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .ok_or_else(|| ApiError::not_found(format!("no file {path:?} in the skill")))?;
    let text = if with_text {
        std::fs::read(p)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    } else {
        None
    };
    Ok(SkillFile {
        path: path.to_string(),
        size: m.len(),
        executable: m.permissions().mode() & 0o111 != 0,
        text,
    })
}

/// The rules behind GET /v1/skills/{name}/files/{path}.
pub async fn get(app: &AppState, name: String, path: String) -> ApiResult<SkillFile> {
    let dir = existing(app, &name)?;
    let p = resolve(&dir, &path)?;
    describe(&p, &path, true)
}

/// The rules behind PUT /v1/skills/{name}/files/{path}: exactly one of `text` and `base64`
/// (400 `file invalid`); `executable` left out keeps the file's own (a new one: not).
pub async fn put(
    app: &AppState,
    name: String,
    path: String,
    req: SkillFileRequest,
) -> ApiResult<SkillFile> {
    let _w = app.write_lock.lock().await;
    let dir = existing(app, &name)?;
    let p = resolve(&dir, &path)?;
    let invalid = |d: &str| ApiError::bad_request("file invalid", d.to_string());
    let bytes = match (req.text, req.base64) {
        (Some(t), None) => t.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .map_err(|e| invalid(&format!("base64: not base64 ({e})")))?,
        _ => return Err(invalid("text, base64: exactly one of them")),
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Err(invalid("text, base64: at most 8 MiB"));
    }
    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
        return Err(bad(format!("path: {path:?} is a folder")));
    }
    let was = describe(&p, &path, false).ok().map(|f| f.executable);
    let executable = req.executable.or(was).unwrap_or(false);
    write_file(&p, &bytes, executable)?;
    drop(_w);
    describe(&p, &path, false)
}

/// The rules behind DELETE /v1/skills/{name}/files/{path}; a folder left empty goes too.
pub async fn delete(app: &AppState, name: String, path: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let dir = existing(app, &name)?;
    let p = resolve(&dir, &path)?;
    describe(&p, &path, false)?;
    std::fs::remove_file(&p).map_err(ApiError::internal)?;
    let mut parent = p.parent().map(Path::to_path_buf);
    while let Some(d) = parent.filter(|d| d != &dir) {
        if std::fs::remove_dir(&d).is_err() {
            break;
        }
        parent = d.parent().map(Path::to_path_buf);
    }
    Ok(())
}
