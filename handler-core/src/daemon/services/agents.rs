//! Agents, ad hoc and in projects (D.1, D.8): saving one checks its models (E1, D.19), its
//! containment (risks confirmed, 409 otherwise), its knowledge (D.5), skills and scope (D.13);
//! reading one resolves its models (harness, problem, requiredHosts E4) and its connections.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use handler_contracts::SecretRef;
use handler_contracts::allow::{AllowEntry, entry_for_url};
use handler_contracts::control::{
    AdHocAgentRequest, Agent, AgentModel, AgentOptions, AgentRequest, ModelAccess, NetworkMode,
    RequiredHost,
};
use handler_contracts::harness::PermissionMode;
use handler_contracts::sandbox::{Confinement, Enforcement};
use handler_contracts::validate::AccessCatalog;
use handler_contracts::validate::{
    check_model_access, normalize_knowledge_folders, validate_skill_name,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::accounts::login_state;
use super::contexts;
use crate::daemon::fsutil::now_rfc3339;
use crate::daemon::problem::{ApiError, ApiJson, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::catalog::Snapshot;
use crate::daemon::store::{StoreError, StoredAgent, StoredProject, new_id};

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// The presets a new project's first agent copies (D.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// none, ask.
    LockedDown,
    /// filtered, enforce, strict, bypass: the defaults of new agents.
    #[default]
    Guarded,
    /// open, bypass.
    Open,
}

/// How an agent is contained, resolved (what risks compare).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Containment {
    pub network: NetworkMode,
    pub egress: Option<Enforcement>,
    pub confinement: Confinement,
    pub permissions: PermissionMode,
}

impl Preset {
    /// Its values.
    pub fn containment(self) -> Containment {
        match self {
            Preset::LockedDown => Containment {
                network: NetworkMode::None,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Ask,
            },
            Preset::Guarded => Containment {
                network: NetworkMode::Filtered,
                egress: Some(Enforcement::Enforce),
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
            },
            Preset::Open => Containment {
                network: NetworkMode::Open,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
            },
        }
    }
}

/// An agent's containment: what it set, else the defaults of new agents (Guarded).
pub fn containment(o: &AgentOptions) -> Containment {
    let d = Preset::Guarded.containment();
    let network = o.network.unwrap_or(d.network);
    Containment {
        network,
        egress: (network == NetworkMode::Filtered)
            .then(|| o.egress.unwrap_or(Enforcement::Enforce)),
        confinement: o.confinement.unwrap_or(d.confinement),
        permissions: o.permissions.unwrap_or(d.permissions),
    }
}

fn network_rank(c: &Containment) -> u8 {
    match (c.network, c.egress) {
        (NetworkMode::None, _) => 0,
        (NetworkMode::Filtered, Some(Enforcement::LogOnly)) => 2,
        (NetworkMode::Filtered, _) => 1,
        (NetworkMode::Open, _) => 3,
    }
}

fn network_word(c: &Containment) -> &'static str {
    match network_rank(c) {
        0 => "no network",
        1 => "a filtered network",
        2 => "a filtered network in log only (every host let through)",
        _ => "an open network",
    }
}

/// D.8: what `new` widens compared with `old`.
pub fn risks(old: &Containment, new: &Containment) -> Vec<String> {
    let mut r = Vec::new();
    if network_rank(new) > network_rank(old) {
        r.push(format!(
            "network: {} instead of {}",
            network_word(new),
            network_word(old)
        ));
    }
    if new.confinement > old.confinement {
        let w = |c: Confinement| match c {
            Confinement::Strict => "strict",
            Confinement::Nested => "nested (runs containers)",
            Confinement::Privileged => "privileged",
        };
        r.push(format!(
            "confinement: {} instead of {}",
            w(new.confinement),
            w(old.confinement)
        ));
    }
    if new.permissions > old.permissions {
        r.push(format!(
            "permissions: {} instead of {}",
            new.permissions.as_str(),
            old.permissions.as_str()
        ));
    }
    r
}

/// The host a container reaches for a host URL (E4: the machine's loopback is the container
/// host's name in a container).
pub fn container_host(host: &str) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h == "localhost" || h == "::1" || h.starts_with("127.") {
        "host.containers.internal".to_string()
    } else {
        host.to_string()
    }
}

/// E4: the hosts a model's account or provider requires, each with what requires it.
pub fn required_hosts(snap: &Snapshot, m: &ModelAccess) -> Vec<RequiredHost> {
    let mut out = Vec::new();
    if let Some(a) = &m.account
        && let Some(Ok(acc)) = snap.account(a)
        && let Some(login) = snap.descriptor(&acc.harness).and_then(|d| d.login.as_ref())
    {
        for h in &login.hosts {
            out.push(RequiredHost {
                host: h.clone(),
                by: format!("account {a}"),
            });
        }
    }
    if let Some(p) = &m.provider
        && let Ok(r) = check_model_access(m, snap)
        && let (Some(proto), Some(Ok(prov))) = (r.protocol, snap.provider(p))
        && let Some(url) = prov.endpoints.get(&proto)
        && let Some((host, port)) = entry_for_url(url)
        && let Ok(e) = AllowEntry::parse(&format!("{}:{port}", container_host(&host)))
    {
        out.push(RequiredHost {
            host: e,
            by: format!("provider {p}"),
        });
    }
    out
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
        let (logged_in, _) = login_state(app, a, acc, snap.descriptor(&acc.harness));
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
    contexts::check(snap, context, m)
}

fn resolved_harness(snap: &Snapshot, m: &ModelAccess) -> String {
    if let Some(h) = &m.harness {
        return h.clone();
    }
    m.account
        .as_ref()
        .and_then(|a| snap.account(a))
        .and_then(|r| r.ok().map(|a| a.harness.clone()))
        .unwrap_or_default()
}

/// The Agent as the API shows it.
pub fn view(app: &AppState, snap: &Snapshot, a: &StoredAgent) -> Agent {
    let project = a.project_id.as_ref().and_then(|p| app.agents.project(p));
    let context = project.as_ref().and_then(|p| p.context.clone());
    let c = containment(&a.options);
    let addon_hosts = if c.network == NetworkMode::Filtered {
        super::addons::required_hosts(&app.config, &a.options.bindings)
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
        interface: a.options.interface.clone(),
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

/// The knowledge root (D.5 K4).
pub fn knowledge_root(app: &AppState) -> std::path::PathBuf {
    if let Some(d) = &app.config.knowledge_dir {
        return d.clone();
    }
    let doc = crate::daemon::store::tomldoc::load(&app.config.config_dir.join("knowledge.toml"))
        .unwrap_or_default();
    if let Some(r) = doc.get("root").and_then(|v| v.as_str()) {
        let home = app.config.home.to_string_lossy().into_owned();
        if let Ok(p) = handler_contracts::validate::expand_home("root", r, &home) {
            return p.into();
        }
    }
    app.config.home.join("knowledge")
}

/// K1–K3: the folders, normalized, each a real folder inside the root (symbolic links
/// resolved).
pub fn check_knowledge(app: &AppState, folders: &[String]) -> ApiResult<Vec<String>> {
    if folders.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |d: String| ApiError::bad_request("knowledge unusable", d);
    let root = knowledge_root(app);
    let croot = std::fs::canonicalize(&root)
        .map_err(|e| bad(format!("knowledge root {}: {e}", root.display())))?;
    let list = normalize_knowledge_folders(&root.to_string_lossy(), folders)
        .map_err(|e| bad(e.to_string()))?;
    for f in &list {
        let p = croot.join(f);
        let c = std::fs::canonicalize(&p).map_err(|e| bad(format!("{f}: {e}")))?;
        if !c.starts_with(&croot) {
            return Err(bad(format!("{f}: resolves outside the knowledge root")));
        }
        if !c.is_dir() {
            return Err(bad(format!("{f}: not a folder")));
        }
    }
    Ok(list)
}

fn sorted_unique<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    v.iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
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
    if models.is_empty() {
        return Err(ApiError::bad_request(
            "model access unusable",
            "models: at least one model",
        ));
    }
    for (i, m) in models.iter().enumerate() {
        if models[..i].contains(m) {
            return Err(ApiError::bad_request(
                "model access unusable",
                format!("models[{i}]: listed twice"),
            ));
        }
        check_model_access(m, snap).map_err(|e| {
            ApiError::bad_request("model access unusable", format!("models[{i}]: {e}"))
        })?;
        if let Some(why) = contexts::check(snap, context, m) {
            return Err(ApiError::conflict(
                "not for this project's context",
                format!("models[{i}]: {why}"),
            ));
        }
    }
    let mut o = options.clone();
    let c = containment(&o);
    if o.egress.is_some() && c.network != NetworkMode::Filtered {
        return Err(ApiError::bad_request(
            "agent invalid",
            "egress: only for a filtered network",
        ));
    }
    if !o.allow.is_empty() && c.network != NetworkMode::Filtered {
        return Err(ApiError::bad_request(
            "agent invalid",
            "allow: only for a filtered network",
        ));
    }
    for (i, m) in models.iter().enumerate() {
        let h = resolved_harness(snap, m);
        if let Some(d) = snap.descriptor(&h)
            && !d.permissions.contains_key(&c.permissions)
        {
            return Err(ApiError::bad_request(
                "permissions unusable",
                format!(
                    "permissions: {} does not offer {} (models[{i}])",
                    h,
                    c.permissions.as_str()
                ),
            ));
        }
    }
    // G3: each binding known and valid, one per addon, no command declared twice.
    o.bindings = sorted_unique(&o.bindings);
    super::addons::AddonSet::read(&app.config)
        .check_selection(&o.bindings)
        .map_err(|e| ApiError::bad_request("binding unusable", e))?;
    if let Some(iface) = &o.interface {
        if c.permissions != PermissionMode::Bypass {
            return Err(ApiError::bad_request(
                "interface invalid",
                "permissions: an agent with an interface runs unattended, in bypass",
            ));
        }
        if iface.timeout_sec == 0 || iface.timeout_sec > 86_400 {
            return Err(ApiError::bad_request(
                "interface invalid",
                "timeoutSec: 1 to 86400",
            ));
        }
        for (field, s) in [
            ("fields", iface.fields.as_ref()),
            ("result", Some(&iface.result)),
        ] {
            if let Some(s) = s
                && serde_json::to_vec(s).map(|v| v.len()).unwrap_or(0) > 64 * 1024
            {
                return Err(ApiError::bad_request(
                    "interface invalid",
                    format!("{field}: larger than 64 KiB"),
                ));
            }
        }
    }
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
    o.knowledge = check_knowledge(app, &o.knowledge)?;
    o.allow = sorted_unique(&o.allow);
    o.bindings = sorted_unique(&o.bindings);
    Ok(o)
}

fn confirm(old: &Containment, new: &Containment, confirmed: bool) -> ApiResult<()> {
    let r = risks(old, new);
    if r.is_empty() || confirmed {
        Ok(())
    } else {
        Err(ApiError::conflict(
            "risks not confirmed",
            format!("{}; send confirmRisks: true to save it", r.join("; ")),
        ))
    }
}

/// GET /v1/agents?project=…
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentQuery {
    #[serde(default)]
    pub project: Option<String>,
}

/// GET /v1/agents
pub async fn list(State(app): State<AppState>, Query(q): Query<AgentQuery>) -> Json<Vec<Agent>> {
    let snap = app.snapshot();
    Json(
        app.agents
            .agents()
            .iter()
            .filter(|a| {
                q.project
                    .as_ref()
                    .is_none_or(|p| a.project_id.as_ref() == Some(p))
            })
            .map(|a| view(&app, &snap, a))
            .collect(),
    )
}

/// GET /v1/agents/{id}
pub async fn get(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Agent>> {
    let a = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    Ok(Json(view(&app, &app.snapshot(), &a)))
}

fn adhoc_stored(
    app: &AppState,
    snap: &Snapshot,
    req: &AdHocAgentRequest,
    old: Option<&StoredAgent>,
) -> ApiResult<StoredAgent> {
    if let Some(o) = &req.origin {
        if old.is_none_or(|a| a.origin.as_ref() != Some(o)) {
            if old.is_some() {
                return Err(ApiError::conflict(
                    "origin cannot change",
                    "origin: an agent keeps the built-in agent it was set up from",
                ));
            }
            return Err(ApiError::bad_request(
                "unknown built-in agent",
                format!("origin: no built-in agent {o:?}"),
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
            super::folders::check_scope(app, "scope", s)?
                .display()
                .to_string(),
        ),
        None => None,
    };
    let baseline = old
        .map(|a| containment(&a.options))
        .unwrap_or(Preset::Guarded.containment());
    confirm(&baseline, &containment(&options), req.confirm_risks)?;
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
        remote_start: false,
        created_at: old
            .map(|a| a.created_at.clone())
            .unwrap_or_else(now_rfc3339),
        last_used_at: old.and_then(|a| a.last_used_at.clone()),
        extra: old.map(|a| a.extra.clone()).unwrap_or_default(),
    })
}

/// POST /v1/agents: an ad-hoc agent.
pub async fn create(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<AdHocAgentRequest>,
) -> ApiResult<(StatusCode, Json<Agent>)> {
    let _w = app.write_lock.lock().await;
    let snap = app.snapshot();
    let a = adhoc_stored(&app, &snap, &req, None)?;
    app.agents.update::<_, ApiError>(|agents, _| {
        agents.push(a.clone());
        Ok(())
    })?;
    tracing::info!(agent = %a.id, "ad-hoc agent created");
    Ok((StatusCode::CREATED, Json(view(&app, &snap, &a))))
}

fn project_stored(
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
    let base = old.map(|a| containment(&a.options)).unwrap_or(baseline);
    confirm(&base, &containment(&options), req.confirm_risks)?;
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

/// PUT /v1/agents/{id}: an ad-hoc agent takes an AdHocAgentRequest, a project's an AgentRequest.
pub async fn replace(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<Json<Agent>> {
    let _w = app.write_lock.lock().await;
    let old = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let snap = app.snapshot();
    let old_view = serde_json::to_value(view(&app, &snap, &old)).unwrap_or_default();
    let parse_err = |e: serde_json::Error| ApiError::unprocessable("invalid body", e.to_string());
    let (a, make_default) = match &old.project_id {
        None => (
            adhoc_stored(
                &app,
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
                    &app,
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
    super::live::apply_allow(&app, &a).await?;
    let mut answer = view(&app, &snap, &a);
    next_sandbox(&mut answer, &old_view);
    Ok(Json(answer))
}

/// Names in the answer what changed that a running sandbox does not get (A.4, `nextSandbox`).
fn next_sandbox(answer: &mut Agent, old_view: &serde_json::Value) {
    let mut v = serde_json::to_value(&*answer).unwrap_or_default();
    super::live::mark_next_sandbox(&mut v, old_view, !answer.connections.is_empty());
    if let Some(n) = v.get(super::live::NEXT_SANDBOX_FIELD) {
        answer.next_sandbox = serde_json::from_value(n.clone()).unwrap_or_default();
    }
}

/// PATCH /v1/agents/{id}: the live switch of enforcement (A.4), not confirmed (D.8), applied to
/// its running sandboxes; and its words.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPatch {
    #[serde(default)]
    pub egress: Option<Enforcement>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub instructions: Option<String>,
}

/// PATCH /v1/agents/{id}
pub async fn patch(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<AgentPatch>,
) -> ApiResult<Json<Agent>> {
    let _w = app.write_lock.lock().await;
    let old = app
        .agents
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let old_view = serde_json::to_value(view(&app, &app.snapshot(), &old)).unwrap_or_default();
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
    let mut answer = view(&app, &app.snapshot(), &a);
    next_sandbox(&mut answer, &old_view);
    Ok(Json(answer))
}

/// DELETE /v1/agents/{id}: refused (409) for a project's last agent.
pub async fn delete(State(app): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
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
    Ok(StatusCode::NO_CONTENT)
}

/// POST /v1/agents/{id}/duplicate: a new agent with its settings, nothing linked (D.8).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DuplicateRequest {
    /// Default: "<its name> (copy)".
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub confirm_risks: bool,
}

/// POST /v1/agents/{id}/duplicate
pub async fn duplicate(
    State(app): State<AppState>,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DuplicateRequest>,
) -> ApiResult<(StatusCode, Json<Agent>)> {
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
                confirm_risks: req.confirm_risks,
            };
            adhoc_stored(&app, &snap, &r, None)?
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
                &app,
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
    Ok((StatusCode::CREATED, Json(view(&app, &snap, &a))))
}

/// Project routes (D.8).
pub mod projects {
    use super::*;
    use handler_contracts::control::{CacheChoice, Project};

    /// POST /v1/projects: a folder, and its first agent set up with a preset.
    #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ProjectRequest {
        pub folder: String,
        /// Default: the folder's name.
        #[serde(default)]
        pub name: Option<String>,
        #[serde(default)]
        pub description: Option<String>,
        #[serde(default)]
        pub caches: Option<CacheChoice>,
        #[serde(default)]
        pub context: Option<String>,
        /// The values its first agent starts with where it leaves them out.
        #[serde(default)]
        pub preset: Preset,
        /// Its first agent.
        pub agent: AgentRequest,
    }

    /// PATCH /v1/projects/{id}.
    #[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ProjectPatch {
        #[serde(default)]
        pub name: Option<String>,
        #[serde(default)]
        pub description: Option<String>,
        #[serde(default)]
        pub caches: Option<CacheChoice>,
        /// "" removes it.
        #[serde(default)]
        pub context: Option<String>,
        #[serde(default)]
        pub default_agent: Option<String>,
    }

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
            && !super::contexts::read(app).contains_key(c)
        {
            return Err(ApiError::bad_request(
                "context unknown",
                format!("context: no context {c:?} (POST /v1/contexts)"),
            ));
        }
        Ok(())
    }

    /// With the apply-preset rule: what the first agent leaves out comes from the preset.
    fn with_preset(mut o: AgentOptions, preset: Preset) -> AgentOptions {
        let c = preset.containment();
        if o.network.is_none() {
            o.network = Some(c.network);
            if o.egress.is_none() {
                o.egress = c.egress;
            }
        }
        o.confinement.get_or_insert(c.confinement);
        o.permissions.get_or_insert(c.permissions);
        o
    }

    /// GET /v1/projects
    pub async fn list(State(app): State<AppState>) -> Json<Vec<Project>> {
        let snap = app.snapshot();
        Json(
            app.agents
                .projects()
                .iter()
                .map(|p| project_view(&app, &snap, p))
                .collect(),
        )
    }

    /// GET /v1/projects/{id}
    pub async fn get(
        State(app): State<AppState>,
        Path(id): Path<String>,
    ) -> ApiResult<Json<Project>> {
        let p = app
            .agents
            .project(&id)
            .ok_or_else(|| ApiError::not_found(format!("project {id:?}")))?;
        Ok(Json(project_view(&app, &app.snapshot(), &p)))
    }

    /// POST /v1/projects
    pub async fn create(
        State(app): State<AppState>,
        ApiJson(req): ApiJson<ProjectRequest>,
    ) -> ApiResult<(StatusCode, Json<Project>)> {
        let _w = app.write_lock.lock().await;
        let folder = super::super::folders::check_scope(&app, "folder", &req.folder)?
            .display()
            .to_string();
        if app.agents.projects().iter().any(|p| p.folder == folder) {
            return Err(ApiError::conflict(
                "project exists",
                format!("folder: {folder} is already a project's (one project per folder)"),
            ));
        }
        check_context(&app, &req.context)?;
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
        first.options = with_preset(first.options, req.preset);
        let a = project_stored(&app, &snap, &p, &[], &first, None, req.preset.containment())?;
        let mut p2 = p.clone();
        p2.default_agent = Some(a.id.clone());
        app.agents.update::<_, ApiError>(|agents, projects| {
            projects.push(p2.clone());
            agents.push(a.clone());
            Ok(())
        })?;
        tracing::info!(project = %p2.id, agent = %a.id, "project created");
        Ok((StatusCode::CREATED, Json(project_view(&app, &snap, &p2))))
    }

    /// PATCH /v1/projects/{id}: a context change checks its agents (409, they keep theirs).
    pub async fn patch(
        State(app): State<AppState>,
        Path(id): Path<String>,
        ApiJson(req): ApiJson<ProjectPatch>,
    ) -> ApiResult<Json<Project>> {
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
            check_context(&app, &c)?;
            for a in &agents {
                for (i, m) in a.models.iter().enumerate() {
                    if let Some(why) = contexts::check(&snap, c.as_deref(), m) {
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
        Ok(Json(project_view(&app, &snap, &p)))
    }

    /// DELETE /v1/projects/{id}: with its agents.
    pub async fn delete(
        State(app): State<AppState>,
        Path(id): Path<String>,
    ) -> ApiResult<StatusCode> {
        let _w = app.write_lock.lock().await;
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
        for a in ids {
            app.stop_connections(&a).await;
        }
        Ok(StatusCode::NO_CONTENT)
    }

    /// POST /v1/projects/{id}/agents: another agent (defaults of new agents).
    pub async fn create_agent(
        State(app): State<AppState>,
        Path(id): Path<String>,
        ApiJson(req): ApiJson<AgentRequest>,
    ) -> ApiResult<(StatusCode, Json<Agent>)> {
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
            &app,
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
        Ok((StatusCode::CREATED, Json(view(&app, &snap, &a))))
    }
}
