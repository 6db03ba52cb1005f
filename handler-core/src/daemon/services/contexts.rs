//! Project contexts (D.19): `<config>/contexts.toml`, one table per context (`[Work] color =
//! "blue"`), and the rule that a project with a context runs only accounts and providers made
//! for it or for any.

use handler_contracts::control::{ContextColor, ContextInfo};
use handler_contracts::validate::validate_context_name;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::contexts::read;
use handler_contracts::control::ContextRequest;

fn infos(app: &AppState) -> Vec<ContextInfo> {
    let snap = app.snapshot();
    let projects = app.agents.projects();
    read(&app.config)
        .into_iter()
        .map(|(name, color)| {
            let made_for = |c: &Option<Vec<String>>| c.as_ref().is_some_and(|l| l.contains(&name));
            ContextInfo {
                projects: Some(
                    projects
                        .iter()
                        .filter(|p| p.context.as_deref() == Some(&name))
                        .map(|p| p.name.clone())
                        .collect(),
                ),
                accounts: Some(
                    snap.accounts
                        .iter()
                        .filter(|(_, a)| a.as_ref().is_ok_and(|a| made_for(&a.contexts)))
                        .map(|(n, _)| n.clone())
                        .collect(),
                ),
                providers: Some(
                    snap.providers
                        .iter()
                        .filter(|(_, p)| p.as_ref().is_ok_and(|p| made_for(&p.contexts)))
                        .map(|(n, _)| n.clone())
                        .collect(),
                ),
                name,
                color,
            }
        })
        .collect()
}

/// The rules behind GET /v1/contexts
pub async fn list(app: &AppState) -> Vec<ContextInfo> {
    infos(app)
}

/// The rules behind GET /v1/contexts/{name}
pub async fn get(app: &AppState, name: String) -> ApiResult<ContextInfo> {
    infos(app)
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| ApiError::not_found(format!("context {name:?}")))
}

fn write(app: &AppState, name: &str, color: Option<ContextColor>) -> ApiResult<()> {
    app.contexts.update(|doc| {
        match color {
            Some(c) => {
                let word = serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                if doc.get(name).and_then(|t| t.as_table()).is_none() {
                    doc[name] = toml_edit::table();
                }
                doc[name]["color"] = toml_edit::value(word);
            }
            None => {
                doc.remove(name);
            }
        }
        Ok(())
    })
}

/// The rules behind POST /v1/contexts
pub async fn create(app: &AppState, req: ContextRequest) -> ApiResult<ContextInfo> {
    let _w = app.write_lock.lock().await;
    let name = req
        .name
        .clone()
        .ok_or_else(|| ApiError::unprocessable("invalid body", "name: required"))?;
    validate_context_name(&name)
        .map_err(|e| ApiError::bad_request("context invalid", e.to_string()))?;
    if read(&app.config)
        .keys()
        .any(|k| k.eq_ignore_ascii_case(&name))
    {
        return Err(ApiError::conflict(
            "context exists",
            format!("context {name:?} exists"),
        ));
    }
    write(app, &name, Some(req.color))?;
    let c = infos(app)
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| ApiError::internal("context vanished"))?;
    Ok(c)
}

/// The rules behind PUT /v1/contexts/{name}: its colour.
pub async fn replace(app: &AppState, name: String, req: ContextRequest) -> ApiResult<ContextInfo> {
    let _w = app.write_lock.lock().await;
    if !read(&app.config).contains_key(&name) {
        return Err(ApiError::not_found(format!("context {name:?}")));
    }
    if req.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_request(
            "context invalid",
            "name: renaming is not supported",
        ));
    }
    write(app, &name, Some(req.color))?;
    infos(app)
        .into_iter()
        .find(|c| c.name == name)
        .ok_or_else(|| ApiError::internal("context vanished"))
}

/// The rules behind DELETE /v1/contexts/{name}: refused (409) while a project is in it.
pub async fn delete(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    if !read(&app.config).contains_key(&name) {
        return Err(ApiError::not_found(format!("context {name:?}")));
    }
    let users: Vec<String> = app
        .agents
        .projects()
        .into_iter()
        .filter(|p| p.context.as_deref() == Some(&name))
        .map(|p| p.name)
        .collect();
    if !users.is_empty() {
        return Err(ApiError::conflict(
            "context in use",
            format!("projects in it: {}", users.join(", ")),
        ));
    }
    write(app, &name, None)?;
    Ok(())
}
