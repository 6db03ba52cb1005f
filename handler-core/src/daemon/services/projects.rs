//! Projects (D.8): a work folder and its agents, the first set up with a preset; a project's
//! context (D.19) checked against its agents' models.

use handler_contracts::control::{Agent, AgentRequest};

use crate::daemon::fsutil::now_rfc3339;
use handler_contracts::context;
use std::time::Duration;

use handler_contracts::control::{Preset, ProjectPatch, ProjectRemoved, ProjectRequest};

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::catalog::Snapshot;
use crate::daemon::store::{StoredAgent, StoredProject, new_id};

use super::agents::{project_stored, view};
use crate::daemon::launch::agent::STOP_GRACE;
use handler_contracts::control::Project;

fn project_view(app: &AppState, snap: &Snapshot, p: &StoredProject) -> Project {
    let mut agents: Vec<Agent> = app
        .agents
        .agents()
        .iter()
        .filter(|a| a.project_id.as_ref() == Some(&p.id))
        .map(|a| view(app, snap, a))
        .collect();
    agents.sort_by_key(|a| {
        (
            Some(&a.id) != p.default_agent.as_ref(),
            a.name.clone().unwrap_or_default().to_lowercase(),
        )
    });
    Project {
        id: p.id.clone(),
        name: p.name.clone(),
        description: p.description.clone(),
        folder: p.folder.clone(),
        default_agent: p.default_agent.clone(),
        caches: p.caches,
        context: p.context.clone(),
        agents,
        created_at: p.created_at.clone(),
        last_used_at: p.last_used_at.clone(),
        extra: Default::default(),
    }
}

fn check_context(app: &AppState, c: &Option<String>) -> ApiResult<()> {
    if let Some(c) = c
        && !crate::daemon::store::contexts::read(&app.config).contains_key(c)
    {
        return Err(ApiError::bad_request(
            "context unknown",
            format!("context: no context {c:?} (POST /v1/contexts)"),
        ));
    }
    Ok(())
}

/// The rules behind GET /v1/projects
pub async fn list(app: &AppState) -> Vec<Project> {
    let snap = app.snapshot();

    app.agents
        .projects()
        .iter()
        .map(|p| project_view(app, &snap, p))
        .collect()
}

/// The rules behind GET /v1/projects/{id}
pub async fn get(app: &AppState, id: String) -> ApiResult<Project> {
    let p = app
        .agents
        .project(&id)
        .ok_or_else(|| ApiError::not_found(format!("project {id:?}")))?;
    Ok(project_view(app, &app.snapshot(), &p))
}

/// The rules behind POST /v1/projects
pub async fn create(app: &AppState, req: ProjectRequest) -> ApiResult<Project> {
    let _w = app.write_lock.lock().await;
    let folder = crate::daemon::store::folders::check_scope(&app.config, "folder", &req.folder)?
        .display()
        .to_string();
    if app.agents.projects().iter().any(|p| p.folder == folder) {
        return Err(ApiError::conflict(
            "project exists",
            format!("folder: {folder} is already a project's (one project per folder)"),
        ));
    }
    check_context(app, &req.context)?;
    let name = req
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| {
            std::path::Path::new(&folder)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| folder.clone())
        });
    let p = StoredProject {
        id: new_id("p_"),
        name,
        description: req.description.clone(),
        folder,
        default_agent: None,
        caches: req.caches.unwrap_or_default(),
        context: req.context.clone(),
        skills: Vec::new(),
        created_at: now_rfc3339(),
        last_used_at: None,
        extra: Default::default(),
    };
    let snap = app.snapshot();
    let mut first = req.agent.clone();
    first.options = req.preset.apply(first.options);
    let a = project_stored(app, &snap, &p, &[], &first, None, req.preset.containment())?;
    let mut p2 = p.clone();
    p2.default_agent = Some(a.id.clone());
    app.agents.update::<_, ApiError>(|agents, projects| {
        projects.push(p2.clone());
        agents.push(a.clone());
        Ok(())
    })?;
    tracing::info!(project = %p2.id, agent = %a.id, "project created");
    Ok(project_view(app, &snap, &p2))
}

/// The rules behind PATCH /v1/projects/{id}: a context change checks its agents (409, they keep theirs).
pub async fn patch(app: &AppState, id: String, req: ProjectPatch) -> ApiResult<Project> {
    let _w = app.write_lock.lock().await;
    let mut p = app
        .agents
        .project(&id)
        .ok_or_else(|| ApiError::not_found(format!("project {id:?}")))?;
    let snap = app.snapshot();
    let agents: Vec<StoredAgent> = app
        .agents
        .agents()
        .into_iter()
        .filter(|a| a.project_id.as_ref() == Some(&id))
        .collect();
    if let Some(n) = &req.name {
        if n.trim().is_empty() {
            return Err(ApiError::unprocessable("invalid body", "name: not blank"));
        }
        p.name = n.trim().to_string();
    }
    if let Some(d) = &req.description {
        p.description = (!d.is_empty()).then(|| d.clone());
    }
    if let Some(c) = req.caches {
        p.caches = c;
    }
    if let Some(c) = &req.context {
        let c = (!c.is_empty()).then(|| c.clone());
        check_context(app, &c)?;
        for a in &agents {
            for (i, m) in a.models.iter().enumerate() {
                if let Err(why) = context::check(&snap, c.as_deref(), m) {
                    return Err(ApiError::conflict(
                        "not for this project's context",
                        format!(
                            "agent {:?} models[{i}]: {why}",
                            a.name.clone().unwrap_or_default()
                        ),
                    ));
                }
            }
        }
        p.context = c;
    }
    if let Some(d) = &req.default_agent {
        if !agents.iter().any(|a| &a.id == d) {
            return Err(ApiError::bad_request(
                "project invalid",
                format!("defaultAgent: {d:?} is not one of its agents"),
            ));
        }
        p.default_agent = Some(d.clone());
    }
    app.agents.update::<_, ApiError>(|_, projects| {
        if let Some(slot) = projects.iter_mut().find(|x| x.id == id) {
            *slot = p.clone();
        }
        Ok(())
    })?;
    Ok(project_view(app, &snap, &p))
}

/// The rules behind DELETE /v1/projects/{id}: with its agents.
pub async fn delete(app: &AppState, id: String) -> ApiResult<ProjectRemoved> {
    let w = app.write_lock.lock().await;
    if app.agents.project(&id).is_none() {
        return Err(ApiError::not_found(format!("project {id:?}")));
    }
    let ids: Vec<String> = app
        .agents
        .agents()
        .into_iter()
        .filter(|a| a.project_id.as_ref() == Some(&id))
        .map(|a| a.id)
        .collect();
    app.agents.update::<_, ApiError>(|agents, projects| {
        agents.retain(|a| a.project_id.as_ref() != Some(&id));
        projects.retain(|p| p.id != id);
        Ok(())
    })?;
    for a in &ids {
        app.stop_connections(a).await;
    }
    drop(w);
    // Its own caches go once its sandboxes stopped (they get SIGTERM, then SIGKILL after
    // STOP_GRACE): a folder still mounted is kept and said so.
    let deadline = tokio::time::Instant::now() + STOP_GRACE + Duration::from_secs(10);
    loop {
        let changed = app.connections_changed.notified();
        let live = ids.iter().any(|a| !app.connections_of(a).is_empty());
        if !live || tokio::time::Instant::now() >= deadline {
            break;
        }
        let _ = tokio::time::timeout_at(deadline, changed).await;
    }
    let (caches, kept) = super::caches::remove_project_folder(app, &id).await;
    Ok(ProjectRemoved { id, caches, kept })
}

/// The rules behind POST /v1/projects/{id}/agents: another agent (defaults of new agents).
pub async fn create_agent(app: &AppState, id: String, req: AgentRequest) -> ApiResult<Agent> {
    let _w = app.write_lock.lock().await;
    let p = app
        .agents
        .project(&id)
        .ok_or_else(|| ApiError::not_found(format!("project {id:?}")))?;
    let snap = app.snapshot();
    let siblings: Vec<StoredAgent> = app
        .agents
        .agents()
        .into_iter()
        .filter(|s| s.project_id.as_ref() == Some(&id))
        .collect();
    let a = project_stored(
        app,
        &snap,
        &p,
        &siblings,
        &req,
        None,
        Preset::Guarded.containment(),
    )?;
    app.agents.update::<_, ApiError>(|agents, projects| {
        agents.push(a.clone());
        if req.default
            && let Some(pp) = projects.iter_mut().find(|x| x.id == id)
        {
            pp.default_agent = Some(a.id.clone());
        }
        Ok(())
    })?;
    Ok(view(app, &snap, &a))
}
