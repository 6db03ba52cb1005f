//! Work folders (D.13): the folders agents may work in, `<config>/folders.toml`
//! (`roots = ["~/code"]`), and the scope check every project folder and ad-hoc scope passes, at
//! every save and again at every start: inside a work folder, and never one of Handler's own
//! folders (config, data, state, cache…), inside one or holding one (issue 11, item 3).

use handler_contracts::validate::expand_home;
use handler_sandbox::validate::check_root_placement;
use toml_edit::{Array, Value};

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::folders::{reserved, resolved_roots, roots};
use crate::daemon::store::tomldoc;
use handler_contracts::control::WorkFolders;

/// The rules behind GET /v1/folders
pub async fn get(app: &AppState) -> WorkFolders {
    WorkFolders {
        roots: roots(&app.config),
        resolved: resolved_roots(&app.config)
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    }
}

/// The rules behind PUT /v1/folders
pub async fn put(app: &AppState, req: WorkFolders) -> ApiResult<WorkFolders> {
    let _w = app.write_lock.lock().await;
    let home = app.config.home.to_string_lossy().into_owned();
    let reserved = reserved(&app.config);
    for (i, r) in req.roots.iter().enumerate() {
        let expanded = expand_home(&format!("roots[{i}]"), r, &home)
            .map_err(|e| ApiError::bad_request("folders invalid", e.to_string()))?;
        let canon = std::fs::canonicalize(&expanded)
            .map(|p| p.display().to_string())
            .unwrap_or(expanded.clone());
        for form in [&expanded, &canon] {
            check_root_placement(form, &reserved).map_err(|e| {
                ApiError::bad_request("folders invalid", format!("roots[{i}]: {e}"))
            })?;
        }
    }
    let arr: Array = req.roots.iter().map(std::string::String::as_str).collect();
    app.folders.update::<_, ApiError>(|doc| {
        tomldoc::set_value(doc, "roots", Value::Array(arr));
        Ok(())
    })?;
    drop(_w);
    Ok(get(app).await)
}
