//! Work folders (D.13): the folders agents may work in, `<config>/folders.toml`
//! (`roots = ["~/code"]`), and the scope check every project folder and ad-hoc scope passes.

use std::path::{Path, PathBuf};

use axum::Json;
use axum::extract::State;
use handler_contracts::validate::expand_home;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toml_edit::{Array, Value};

use super::AppState;
use super::problem::{ApiError, ApiJson, ApiResult};
use super::tomlfile;

/// GET/PUT /v1/folders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkFolders {
    /// As written (`~/` kept).
    pub roots: Vec<String>,
    /// Expanded and canonical (symbolic links resolved), those that exist; answered, not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<String>,
}

fn path(app: &AppState) -> PathBuf {
    app.config.config_dir.join("folders.toml")
}

/// The roots as written (`~/code` when unset).
pub fn roots(app: &AppState) -> Vec<String> {
    let doc = tomlfile::load(&path(app)).unwrap_or_default();
    match doc.get("roots").and_then(|i| i.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        None => vec!["~/code".to_string()],
    }
}

/// The roots, expanded and canonical; those that do not exist are left out.
pub fn resolved_roots(app: &AppState) -> Vec<PathBuf> {
    let home = app.config.home.to_string_lossy().into_owned();
    roots(app)
        .iter()
        .filter_map(|r| expand_home("roots", r, &home).ok())
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .collect()
}

/// D.13: `scope` must be a folder inside a work folder (or one Handler keeps itself); returns
/// it canonical. 400 otherwise, naming the field.
pub fn check_scope(app: &AppState, field: &str, scope: &str) -> ApiResult<PathBuf> {
    let home = app.config.home.to_string_lossy().into_owned();
    let expanded = expand_home(field, scope, &home)
        .map_err(|e| ApiError::bad_request("scope invalid", e.to_string()))?;
    let canon = std::fs::canonicalize(&expanded)
        .map_err(|e| ApiError::bad_request("scope invalid", format!("{field}: {expanded}: {e}")))?;
    if !canon.is_dir() {
        return Err(ApiError::bad_request(
            "scope invalid",
            format!("{field}: {expanded} is not a folder"),
        ));
    }
    let mut allowed = resolved_roots(app);
    if let Ok(d) = std::fs::canonicalize(&app.config.data_dir) {
        allowed.push(d);
    }
    if allowed.iter().any(|r| inside(&canon, r)) {
        Ok(canon)
    } else {
        Err(ApiError::bad_request(
            "scope outside work folders",
            format!(
                "{field}: {} is not inside a work folder ({}); add one in Settings → Folders (PUT /v1/folders)",
                canon.display(),
                roots(app).join(", ")
            ),
        ))
    }
}

/// Whether `p` is `root` or inside it (both canonical).
pub fn inside(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

/// GET /v1/folders
pub async fn get(State(app): State<AppState>) -> Json<WorkFolders> {
    Json(WorkFolders {
        roots: roots(&app),
        resolved: resolved_roots(&app)
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    })
}

/// PUT /v1/folders
pub async fn put(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<WorkFolders>,
) -> ApiResult<Json<WorkFolders>> {
    let _w = app.write_lock.lock().await;
    let home = app.config.home.to_string_lossy().into_owned();
    for (i, r) in req.roots.iter().enumerate() {
        expand_home(&format!("roots[{i}]"), r, &home)
            .map_err(|e| ApiError::bad_request("folders invalid", e.to_string()))?;
    }
    let p = path(&app);
    let mut doc = tomlfile::load(&p).map_err(ApiError::internal)?;
    let arr: Array = req.roots.iter().map(|s| s.as_str()).collect();
    tomlfile::set_value(&mut doc, "roots", Value::Array(arr));
    tomlfile::save(&p, &doc).map_err(ApiError::internal)?;
    drop(_w);
    Ok(get(State(app)).await)
}
