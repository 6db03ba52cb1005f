//! Agents, ad hoc and in projects (D.1, D.8): saving one checks its models (E1, D.19), its
//! containment (risks confirmed, 409 otherwise), its knowledge (D.5), skills and scope (D.13);
//! reading one resolves its models (harness, problem, requiredHosts E4) and its connections.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use handler_contracts::SecretRef;
use handler_contracts::containment::{Containment, confirm, containment};
use handler_contracts::context;
use handler_contracts::control::GitGuard;
use handler_contracts::control::{
    AdHocAgentRequest, Agent, AgentModel, AgentOptions, AgentRequest, ModelAccess, NetworkMode,
    RequiredHost,
};
use handler_contracts::hosts::required_hosts;
use handler_contracts::settings::{self, SettingsError, resolved_harness};
use handler_contracts::validate::AccessCatalog;
use handler_contracts::validate::{check_model_access, validate_skill_name};

use crate::daemon::fsutil::now_rfc3339;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::accounts::login_state;
use crate::daemon::store::catalog::Snapshot;
use crate::daemon::store::knowledge::check_knowledge;
use crate::daemon::store::{StoreError, StoredAgent, StoredProject, new_id};
use handler_contracts::control::{AgentPatch, AgentQuery, DuplicateRequest, Preset};

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// Why a session cannot start with this model now (E1, D.9, D.14, D.19), if it cannot.
pub fn model_problem(
    app: &AppState,
    snap: &Snapshot,
    context: Option<&str>,
    m: &ModelAccess,
) -> Option<String> {
    if let Err(e) = check_model_access(m, snap) {
        return Some(e.to_string());
    }
    if let Some(a) = &m.account
        && let Some(Ok(acc)) = snap.account(a)
    {
        let (logged_in, _) = login_state(
            &app.config,
            &app.secrets,
            a,
            acc,
            snap.descriptor(&acc.harness),
        );
        if !logged_in {
            return Some(format!("account {a:?} is not logged in"));
        }
    }
    if let Some(p) = &m.provider
        && let Some(Ok(prov)) = snap.provider(p)
        && let Some(SecretRef::Secret(path)) = &prov.api_key
        && !app.secrets.is_set(path.as_str())
    {
        return Some(format!("provider {p:?}: secret {path} is not set"));
    }
    context::check(snap, context, m)
        .err()
        .map(|e| e.to_string())
}

/// An agent with an interface runs unattended (D.18): what its accounts' vendors' terms say of
/// that (decision 0151), refused ones first said here, before a run is refused.
fn unattended_warnings(snap: &Snapshot, a: &StoredAgent) -> Vec<String> {
    use handler_contracts::run::UnattendedUse;
    if a.options.interface.is_none() {
        return Vec::new();
    }
    a.models
        .iter()
        .filter_map(|m| m.account.as_deref())
        .filter_map(
            |acc| match crate::daemon::services::sessions::unattended_use(snap, acc)? {
                UnattendedUse::Allowed => None,
                UnattendedUse::Warn(w) => Some(w),
                UnattendedUse::Refused(r) => Some(format!("its runs are refused: {r}")),
            },
        )
        .collect()
}

/// The Agent as the API shows it.
pub fn view(app: &AppState, snap: &Snapshot, a: &StoredAgent) -> Agent {
    let project = a.project_id.as_ref().and_then(|p| app.agents.project(p));
    let context = project.as_ref().and_then(|p| p.context.clone());
    let c = containment(&a.options);
    let addon_hosts = if c.network == NetworkMode::Filtered {
        crate::daemon::store::addons::required_hosts(&app.config, &a.options.bindings)
    } else {
        Vec::new()
    };
    let models = a
        .models
        .iter()
        .map(|m| {
            let problem = model_problem(app, snap, context.as_deref(), m);
            AgentModel {
                harness: resolved_harness(snap, m),
                account: m.account.clone(),
                provider: m.provider.clone(),
                model: m.model.clone(),
                problem,
                required_hosts: if c.network == NetworkMode::Filtered {
                    let mut r = required_hosts(snap, m);
                    r.extend(addon_hosts.iter().map(|(host, by)| RequiredHost {
                        host: host.clone(),
                        by: by.clone(),
                    }));
                    r
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    Agent {
        id: a.id.clone(),
        models,
        scope: project
            .as_ref()
            .map(|p| p.folder.clone())
            .or_else(|| a.scope.clone()),
        network: c.network,
        confinement: c.confinement,
        permissions: c.permissions,
        egress: c.egress,
        allow: a.options.allow.clone(),
        bindings: a.options.bindings.clone(),
        knowledge: a.options.knowledge.clone(),
        display: a.options.display,
        seed_state: a.options.seed_state,
        interface: a.options.interface.clone(),
        ask_denied_hosts: a.options.ask_denied_hosts,
        git_guard: a.options.git_guard,
        session_tree: a.options.session_tree.clone(),
        machine: a.options.machine.clone(),
        disposable_delay_ms: a.options.disposable_delay_ms,
        warnings: (a.options.git_guard == Some(GitGuard::Open))
            .then(|| handler_contracts::control::GIT_GUARD_OPEN_WARNING.to_string())
            .into_iter()
            .chain(unattended_warnings(snap, a))
            .collect(),
        name: a.name.clone(),
        project_id: a.project_id.clone(),
        description: a.description.clone(),
        instructions: a.instructions.clone(),
        origin: a.origin.clone(),
        skills: a.skills.clone(),
        project_skills: project
            .as_ref()
            .map(|p| p.skills.clone())
            .unwrap_or_default(),
        context,
        acp_url: format!("ws://127.0.0.1:{}/v1/agents/{}/acp", app.port(), a.id),
        connections: app.connections_of(&a.id),
        created_at: a.created_at.clone(),
        last_used_at: a.last_used_at.clone(),
        next_sandbox: Vec::new(),
        extra: Default::default(),
    }
}

fn sorted_unique<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    v.iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Decision 0147: `machine` names one of this daemon's machines (a 400 naming it). Whether it
/// was made for this agent is asked at each session's start: an agent may be saved before its
/// machine is made for it.
/// Decision 0148: `disposable` is a machine per session; a disposable machine is its session's
/// alone; `disposableDelayMs` only with `disposable`, at least a second.
fn check_machine(app: &AppState, o: &AgentOptions) -> ApiResult<()> {
    use handler_contracts::machine::profile::DISPOSABLE_PREFIX;
    use handler_contracts::machine::{DISPOSABLE, is_disposable_id};
    let bad = |detail: String| Err(ApiError::bad_request("invalid machine", detail));
    match &o.machine {
        Some(m) if m == DISPOSABLE => {}
        Some(m) if m.starts_with(DISPOSABLE_PREFIX) => {
            // Decision 0156: a disposable profile's machine per session.
            super::machines::disposable_profile(app, &m[DISPOSABLE_PREFIX.len()..])?;
        }
        Some(m) if is_disposable_id(m) => {
            return bad(format!(
                "machine: {m:?} is a session's disposable machine, only that session runs in it; use \"disposable\" for one of each session's own"
            ));
        }
        Some(m) if super::machines::known(app, m).is_err() => {
            return Err(ApiError::bad_request(
                "no such machine",
                format!(
                    "machine: {m:?} is not one of this daemon's machines (handler machine ls), nor \"disposable\" or \"disposable:<profile>\""
                ),
            ));
        }
        _ => {}
    }
    let disposable = o
        .machine
        .as_deref()
        .is_some_and(|m| m == DISPOSABLE || m.starts_with(DISPOSABLE_PREFIX));
    match o.disposable_delay_ms {
        Some(_) if !disposable => bad(
            "disposableDelayMs: only with machine \"disposable\" or \"disposable:<profile>\""
                .into(),
        ),
        Some(d) if d < 1000 => bad(format!(
            "disposableDelayMs: {d} is less than 1000 (a second)"
        )),
        _ => Ok(()),
    }
}

/// Decision 0103: `sessionTree` is one of its names, and `copy` needs the git guard's own git
/// directory (not `gitGuard` open) and, where the scope is known at save, the scope to be in a
/// repository at a commit (`copytree::check`; decision 0121: below its root too). A 400 naming
/// `sessionTree`.
fn check_session_tree(app: &AppState, o: &AgentOptions, scope: Option<&str>) -> ApiResult<()> {
    use handler_sandbox::copytree::{self, SessionTree};
    let bad = |d: String| ApiError::bad_request("sessionTree unusable", d);
    let tree = SessionTree::parse(o.session_tree.as_deref()).map_err(|e| bad(e.to_string()))?;
    if tree != SessionTree::Copy {
        return Ok(());
    }
    if o.git_guard == Some(GitGuard::Open) {
        return Err(bad(
            "sessionTree: \"copy\" brings the work back through the git guard, and gitGuard is \"open\""
                .into(),
        ));
    }
    let Some(scope) = scope else { return Ok(()) };
    let seen = crate::daemon::launch::gitguard::seen_dir(&app.config.data_dir);
    let facts =
        crate::daemon::launch::gitguard::gather_enclosing(&seen, std::path::Path::new(scope))
            .map_err(|e| bad(format!("sessionTree: {e}")))?;
    copytree::check(scope, facts.as_ref())
        .map(|_| ())
        .map_err(|e| bad(e.to_string()))
}

/// Everything a save checks but risks and names. Returns the options normalized.
fn check_settings(
    app: &AppState,
    snap: &Snapshot,
    context: Option<&str>,
    models: &[ModelAccess],
    options: &AgentOptions,
    skills: &[String],
) -> ApiResult<AgentOptions> {
    let problem = |e: SettingsError| {
        if e.is_conflict() {
            ApiError::conflict(e.title(), e.to_string())
        } else {
            ApiError::bad_request(e.title(), e.to_string())
        }
    };
    settings::check_models(snap, context, models, options).map_err(problem)?;
    let mut o = options.clone();
    // G3: each binding known and valid, one per addon, no command declared twice.
    o.bindings = sorted_unique(&o.bindings);
    crate::daemon::store::addons::AddonSet::read(&app.config)
        .check_selection(&o.bindings)
        .map_err(|e| ApiError::bad_request("binding unusable", e.to_string()))?;
    settings::check_interface(&o).map_err(problem)?;
    for s in skills {
        validate_skill_name(s)
            .map_err(|e| ApiError::bad_request("skill unusable", format!("skills: {e}")))?;
        if !app.config.skills_dir.join(s).join("SKILL.md").is_file() {
            return Err(ApiError::bad_request(
                "skill unusable",
                format!("skills: no skill {s:?} in the library"),
            ));
        }
    }
    o.knowledge = check_knowledge(&app.config, &o.knowledge)?;
    o.allow = sorted_unique(&o.allow);
    o.bindings = sorted_unique(&o.bindings);
    Ok(o)
}

/// The rules behind GET /v1/agents
pub async fn list(app: &AppState, q: AgentQuery) -> Vec<Agent> {
    let snap = app.snapshot();

    app.agents
        .agents()
        .iter()
        .filter(|a| {
            q.project
                .as_ref()
                .is_none_or(|p| a.project_id.as_ref() == Some(p))
        })
        .map(|a| view(app, &snap, a))
        .collect()
}

/// The rules behind GET /v1/agents/{id}
pub async fn get(app: &AppState, id: String) -> ApiResult<Agent> {
    let a = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    Ok(view(app, &app.snapshot(), &a))
}

fn adhoc_stored(
    app: &AppState,
    snap: &Snapshot,
    req: &AdHocAgentRequest,
    old: Option<&StoredAgent>,
) -> ApiResult<StoredAgent> {
    // A new agent's origin was checked by `builtin_agents::set_up` (D.18).
    if let Some(o) = &req.origin {
        if old.is_some_and(|a| a.origin.as_ref() != Some(o)) {
            return Err(ApiError::conflict(
                "origin cannot change",
                "origin: an agent keeps the built-in agent it was set up from",
            ));
        }
    } else if old.is_some_and(|a| a.origin.is_some()) {
        return Err(ApiError::conflict(
            "origin cannot change",
            "origin: an agent keeps the built-in agent it was set up from",
        ));
    }
    let options = check_settings(app, snap, None, &req.models, &req.options, &req.skills)?;
    let scope = match &req.scope {
        Some(s) => Some(
            crate::daemon::store::folders::check_scope(&app.config, "scope", s)?
                .display()
                .to_string(),
        ),
        None => None,
    };
    check_session_tree(app, &options, scope.as_deref())?;
    check_machine(app, &options)?;
    let baseline = old
        .map(|a| containment(&a.options))
        .unwrap_or(Preset::Guarded.containment());
    confirm(&baseline, &containment(&options), req.confirm_risks)
        .map_err(|e| ApiError::conflict("risks not confirmed", e.to_string()))?;
    Ok(StoredAgent {
        id: old.map(|a| a.id.clone()).unwrap_or_else(|| new_id("a_")),
        project_id: None,
        models: req.models.clone(),
        options,
        scope,
        name: req.name.clone().filter(|n| !n.trim().is_empty()),
        description: req.description.clone(),
        instructions: req.instructions.clone(),
        origin: req.origin.clone(),
        skills: sorted_unique(&req.skills),
        remote_start: req.remote_start,
        created_at: old
            .map(|a| a.created_at.clone())
            .unwrap_or_else(now_rfc3339),
        last_used_at: old.and_then(|a| a.last_used_at.clone()),
        extra: old.map(|a| a.extra.clone()).unwrap_or_default(),
    })
}

/// The rules behind POST /v1/agents: an ad-hoc agent (set up from a built-in one with `origin`).
pub async fn create(app: &AppState, req: AdHocAgentRequest) -> ApiResult<Agent> {
    use crate::daemon::services::builtin_agents;
    let fetched = builtin_agents::fetch_upstream(app, &req).await?;
    let _w = app.write_lock.lock().await;
    let snap = app.snapshot();
    let req = builtin_agents::set_up(app, &req, fetched)?;
    let a = adhoc_stored(app, &snap, &req, None)?;
    app.agents.update::<_, ApiError>(|agents, _| {
        agents.push(a.clone());
        Ok(())
    })?;
    tracing::info!(agent = %a.id, "ad-hoc agent created");
    Ok(view(app, &snap, &a))
}

pub(crate) fn project_stored(
    app: &AppState,
    snap: &Snapshot,
    p: &StoredProject,
    siblings: &[StoredAgent],
    req: &AgentRequest,
    old: Option<&StoredAgent>,
    baseline: Containment,
) -> ApiResult<StoredAgent> {
    let name = req.name.trim();
    if name.is_empty() {
        return Err(ApiError::unprocessable(
            "invalid body",
            "name: required, not blank",
        ));
    }
    if siblings.iter().any(|s| {
        old.is_none_or(|o| o.id != s.id)
            && s.name
                .as_deref()
                .is_some_and(|n| n.to_lowercase() == name.to_lowercase())
    }) {
        return Err(ApiError::conflict(
            "name taken",
            format!("name: the project has an agent named {name:?}"),
        ));
    }
    let given: Vec<&String> = req.skills.iter().filter(|s| p.skills.contains(s)).collect();
    if let Some(s) = given.first() {
        return Err(ApiError::bad_request(
            "given by its project",
            format!("skills: {s:?} is given by its project"),
        ));
    }
    let options = check_settings(
        app,
        snap,
        p.context.as_deref(),
        &req.models,
        &req.options,
        &req.skills,
    )?;
    check_session_tree(app, &options, Some(&p.folder))?;
    check_machine(app, &options)?;
    let base = old.map(|a| containment(&a.options)).unwrap_or(baseline);
    confirm(&base, &containment(&options), req.confirm_risks)
        .map_err(|e| ApiError::conflict("risks not confirmed", e.to_string()))?;
    Ok(StoredAgent {
        id: old.map(|a| a.id.clone()).unwrap_or_else(|| new_id("a_")),
        project_id: Some(p.id.clone()),
        models: req.models.clone(),
        options,
        scope: None,
        name: Some(name.to_string()),
        description: req.description.clone(),
        instructions: req.instructions.clone(),
        origin: None,
        skills: sorted_unique(&req.skills),
        remote_start: req.remote_start,
        created_at: old
            .map(|a| a.created_at.clone())
            .unwrap_or_else(now_rfc3339),
        last_used_at: old.and_then(|a| a.last_used_at.clone()),
        extra: old.map(|a| a.extra.clone()).unwrap_or_default(),
    })
}

/// The rules behind PUT /v1/agents/{id}: an ad-hoc agent takes an AdHocAgentRequest, a project's an AgentRequest.
pub async fn replace(app: &AppState, id: String, body: serde_json::Value) -> ApiResult<Agent> {
    let _w = app.write_lock.lock().await;
    let old = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let snap = app.snapshot();
    let old_view = serde_json::to_value(view(app, &snap, &old)).unwrap_or_default();
    let parse_err = |e: serde_json::Error| ApiError::unprocessable("invalid body", e.to_string());
    let (a, make_default) = match &old.project_id {
        None => (
            adhoc_stored(
                app,
                &snap,
                &serde_json::from_value::<AdHocAgentRequest>(body).map_err(parse_err)?,
                Some(&old),
            )?,
            false,
        ),
        Some(pid) => {
            let req: AgentRequest = serde_json::from_value(body).map_err(parse_err)?;
            let p = app
                .agents
                .project(pid)
                .ok_or_else(|| ApiError::internal("project vanished"))?;
            let siblings: Vec<StoredAgent> = app
                .agents
                .agents()
                .into_iter()
                .filter(|s| s.project_id.as_ref() == Some(pid))
                .collect();
            (
                project_stored(
                    app,
                    &snap,
                    &p,
                    &siblings,
                    &req,
                    Some(&old),
                    Preset::Guarded.containment(),
                )?,
                req.default,
            )
        }
    };
    app.agents.update::<_, ApiError>(|agents, projects| {
        if let Some(slot) = agents.iter_mut().find(|x| x.id == id) {
            *slot = a.clone();
        }
        if make_default
            && let Some(p) = projects
                .iter_mut()
                .find(|p| Some(&p.id) == a.project_id.as_ref())
        {
            p.default_agent = Some(a.id.clone());
        }
        Ok(())
    })?;
    // A.4: its running sandboxes get the new allow-list; the rest applies to the next one.
    super::running::apply_allow(app, &a).await?;
    let mut answer = view(app, &snap, &a);
    next_sandbox(&mut answer, &old_view);
    Ok(answer)
}

/// Names in the answer what changed that a running sandbox does not get (A.4, `nextSandbox`).
fn next_sandbox(answer: &mut Agent, old_view: &serde_json::Value) {
    let mut v = serde_json::to_value(&*answer).unwrap_or_default();
    super::running::mark_next_sandbox(&mut v, old_view, !answer.connections.is_empty());
    if let Some(n) = v.get(super::running::NEXT_SANDBOX_FIELD) {
        answer.next_sandbox = serde_json::from_value(n.clone()).unwrap_or_default();
    }
}

/// The rules behind PATCH /v1/agents/{id}
pub async fn patch(app: &AppState, id: String, req: AgentPatch) -> ApiResult<Agent> {
    let _w = app.write_lock.lock().await;
    let old = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let old_view = serde_json::to_value(view(app, &app.snapshot(), &old)).unwrap_or_default();
    let mut a = old.clone();
    if let Some(e) = req.egress {
        if containment(&a.options).network != NetworkMode::Filtered {
            return Err(ApiError::bad_request(
                "agent invalid",
                "egress: only for a filtered network",
            ));
        }
        a.options.egress = Some(e);
    }
    if let Some(n) = &req.name {
        let n = n.trim();
        if let Some(pid) = &a.project_id {
            if n.is_empty() {
                return Err(ApiError::unprocessable(
                    "invalid body",
                    "name: required, not blank",
                ));
            }
            if app.agents.agents().iter().any(|s| {
                s.project_id.as_ref() == Some(pid)
                    && s.id != id
                    && s.name
                        .as_deref()
                        .is_some_and(|x| x.to_lowercase() == n.to_lowercase())
            }) {
                return Err(ApiError::conflict(
                    "name taken",
                    format!("name: the project has an agent named {n:?}"),
                ));
            }
        }
        a.name = (!n.is_empty()).then(|| n.to_string());
    }
    if let Some(d) = &req.description {
        a.description = (!d.is_empty()).then(|| d.clone());
    }
    if let Some(i) = &req.instructions {
        a.instructions = (!i.is_empty()).then(|| i.clone());
    }
    app.agents.update::<_, ApiError>(|agents, _| {
        if let Some(slot) = agents.iter_mut().find(|x| x.id == id) {
            *slot = a.clone();
        }
        Ok(())
    })?;
    if let Some(e) = req.egress {
        for c in app.connections_of(&id) {
            if let Err(err) = app.launcher.set_egress(&c.sandbox, e).await {
                tracing::warn!(agent = %id, sandbox = %c.sandbox, error = %err, "set-egress failed");
                return Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "set-egress failed",
                    format!("sandbox {}: {err}", c.sandbox),
                ));
            }
            tracing::info!(agent = %id, sandbox = %c.sandbox, egress = e.as_str(), "egress switched");
        }
    }
    let mut answer = view(app, &app.snapshot(), &a);
    next_sandbox(&mut answer, &old_view);
    Ok(answer)
}

/// The rules behind DELETE /v1/agents/{id}: refused (409) for a project's last agent.
pub async fn delete(app: &AppState, id: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let a = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    app.agents.update::<_, ApiError>(|agents, projects| {
        if let Some(pid) = &a.project_id {
            let n = agents
                .iter()
                .filter(|x| x.project_id.as_ref() == Some(pid))
                .count();
            if n <= 1 {
                return Err(ApiError::conflict(
                    "last agent",
                    "a project has at least one agent: delete the project instead",
                ));
            }
            if let Some(p) = projects.iter_mut().find(|p| &p.id == pid)
                && p.default_agent.as_ref() == Some(&id)
            {
                p.default_agent = agents
                    .iter()
                    .find(|x| x.project_id.as_ref() == Some(pid) && x.id != id)
                    .map(|x| x.id.clone());
            }
        }
        agents.retain(|x| x.id != id);
        Ok(())
    })?;
    app.stop_connections(&id).await;
    Ok(())
}

/// The rules behind POST /v1/agents/{id}/duplicate
pub async fn duplicate(app: &AppState, id: String, req: DuplicateRequest) -> ApiResult<Agent> {
    let _w = app.write_lock.lock().await;
    let src = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let snap = app.snapshot();
    let name = req
        .name
        .clone()
        .or_else(|| src.name.as_ref().map(|n| format!("{n} (copy)")));
    let a = match &src.project_id {
        None => {
            let r = AdHocAgentRequest {
                models: src.models.clone(),
                options: src.options.clone(),
                scope: src.scope.clone(),
                name,
                description: src.description.clone(),
                instructions: src.instructions.clone(),
                origin: None,
                skills: src.skills.clone(),
                remote_start: src.remote_start,
                confirm_risks: req.confirm_risks,
            };
            adhoc_stored(app, &snap, &r, None)?
        }
        Some(pid) => {
            let p = app
                .agents
                .project(pid)
                .ok_or_else(|| ApiError::internal("project vanished"))?;
            let siblings: Vec<StoredAgent> = app
                .agents
                .agents()
                .into_iter()
                .filter(|s| s.project_id.as_ref() == Some(pid))
                .collect();
            let r = AgentRequest {
                models: src.models.clone(),
                options: src.options.clone(),
                name: name.unwrap_or_else(|| "Agent".into()),
                description: src.description.clone(),
                instructions: src.instructions.clone(),
                default: false,
                remote_start: src.remote_start,
                skills: src.skills.clone(),
                confirm_risks: req.confirm_risks,
            };
            project_stored(
                app,
                &snap,
                &p,
                &siblings,
                &r,
                None,
                Preset::Guarded.containment(),
            )?
        }
    };
    app.agents.update::<_, ApiError>(|agents, _| {
        agents.push(a.clone());
        Ok(())
    })?;
    Ok(view(app, &snap, &a))
}
