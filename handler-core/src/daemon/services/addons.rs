//! Addons and bindings (G.1–G.4, D.15): the addons loaded from two folders (the platform's
//! built-in ones, then the user's `$HANDLER_ADDONS_DIR`, a user addon replacing a built-in one of
//! its name), the bindings (`$HANDLER_BINDINGS_DIR/<name>.toml`, hand-written or written here:
//! secret values only to the secret store under `bindings/<name>/<slot>`), an agent's selection
//! checked when it is saved (G3), and what the selected bindings add at each start (G4).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path as FsPath, PathBuf};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use handler_contracts::SecretRef;
use handler_contracts::addon::{AddonManifest, Binding, SecretDelivery};
use handler_contracts::allow::AllowEntry;
use handler_contracts::api_version::BindingApiVersion;
use handler_contracts::control::{
    AddonInfo, AddonSlotInfo, BindingInfo, BindingRequest, NetworkMode,
};
use handler_contracts::harness::McpServer;
use handler_contracts::parse::from_toml;
use handler_contracts::sandbox::Injection;
use handler_contracts::validate::{validate_addon, validate_binding};
use handler_sandbox::compose::AddonPart;
use toml_edit::{DocumentMut, Item, Table};

use crate::daemon::config::DaemonConfig;
use crate::daemon::prepare;
use crate::daemon::problem::{ApiError, ApiJson, ApiResult};
use crate::daemon::skills;
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;
use crate::daemon::store::catalog::valid_name;
use crate::daemon::store::tomldoc;

/// An addon as loaded from its folder.
#[derive(Debug, Clone)]
pub struct LoadedAddon {
    pub name: String,
    pub dir: PathBuf,
    pub builtin: bool,
    pub overrides_builtin: bool,
    /// The manifest, or why the addon's files are invalid.
    pub manifest: Result<AddonManifest, String>,
    /// Its skills' folder names (`skills/<skill>/`).
    pub skills: Vec<String>,
}

/// A binding as loaded from its file.
#[derive(Debug, Clone)]
pub struct LoadedBinding {
    pub name: String,
    /// What the file says, when it could be read.
    pub binding: Option<Binding>,
    /// Why it cannot be selected (G2), or why the file could not be read.
    pub error: Option<String>,
}

/// Addons and bindings as they are on disk now.
#[derive(Debug, Clone, Default)]
pub struct AddonSet {
    pub addons: BTreeMap<String, LoadedAddon>,
    pub bindings: BTreeMap<String, LoadedBinding>,
}

fn read_addon(dir: &FsPath, name: &str, builtin: bool) -> LoadedAddon {
    let skills = skills::addon_skill_names(dir);
    let manifest = (|| {
        let text = std::fs::read_to_string(dir.join("addon.toml"))
            .map_err(|e| format!("addons/{name}/addon.toml: {e}"))?;
        let a: AddonManifest =
            from_toml(&format!("addons/{name}/addon.toml"), &text).map_err(|e| e.to_string())?;
        validate_addon(&a, Some(name)).map_err(|e| format!("addons/{name}/addon.toml: {e}"))?;
        let has_recipe = dir.join("Containerfile").is_file();
        if a.image.is_some() && !has_recipe {
            return Err(format!(
                "addons/{name}: image is set but it has no Containerfile"
            ));
        }
        if a.image.is_none() && has_recipe {
            return Err(format!("addons/{name}: a Containerfile but no image"));
        }
        for s in &skills {
            skills::check_skill_dir(&dir.join("skills").join(s), s)
                .map_err(|e| format!("addons/{name}: {e}"))?;
        }
        Ok(a)
    })();
    LoadedAddon {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        builtin,
        overrides_builtin: false,
        manifest,
        skills,
    }
}

fn addon_dirs(root: &FsPath) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<(String, PathBuf)> = rd
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .filter(|(n, _)| valid_name(n))
        .collect();
    v.sort();
    v
}

fn binding_path(config: &DaemonConfig, name: &str) -> PathBuf {
    config.bindings_dir.join(format!("{name}.toml"))
}

/// The store path of a binding's secret (E3, D.15).
pub fn secret_path(binding: &str, slot: &str) -> String {
    format!("bindings/{binding}/{slot}")
}

impl AddonSet {
    /// Reads every addon and binding now.
    pub fn read(config: &DaemonConfig) -> AddonSet {
        let mut addons = BTreeMap::new();
        for (name, dir) in addon_dirs(&config.builtin_addons_dir) {
            addons.insert(name.clone(), read_addon(&dir, &name, true));
        }
        for (name, dir) in addon_dirs(&config.addons_dir) {
            let overrides = addons.contains_key(&name);
            let mut a = read_addon(&dir, &name, false);
            a.overrides_builtin = overrides;
            addons.insert(name, a);
        }
        let mut bindings = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(&config.bindings_dir) {
            for e in rd.flatten() {
                let p = e.path();
                let (Some(stem), Some(ext)) = (
                    p.file_stem().and_then(|s| s.to_str()),
                    p.extension().and_then(|s| s.to_str()),
                ) else {
                    continue;
                };
                if ext != "toml" || !valid_name(stem) {
                    continue;
                }
                let name = stem.to_string();
                let what = format!("bindings/{name}.toml");
                let loaded = match std::fs::read_to_string(&p)
                    .map_err(|e| format!("{what}: {e}"))
                    .and_then(|t| from_toml::<Binding>(&what, &t).map_err(|e| e.to_string()))
                {
                    Err(error) => LoadedBinding {
                        name: name.clone(),
                        binding: None,
                        error: Some(error),
                    },
                    Ok(b) => {
                        let addon = addons
                            .get(&b.addon)
                            .map(|a: &LoadedAddon| a.manifest.as_ref().map_err(String::as_str));
                        let error = validate_binding(&b, addon)
                            .err()
                            .map(|e| format!("{what}: {e}"));
                        LoadedBinding {
                            name: name.clone(),
                            binding: Some(b),
                            error,
                        }
                    }
                };
                bindings.insert(name, loaded);
            }
        }
        AddonSet { addons, bindings }
    }

    /// A valid binding and its valid addon.
    pub fn usable(&self, name: &str) -> Result<(&Binding, &LoadedAddon, &AddonManifest), String> {
        let b = self
            .bindings
            .get(name)
            .ok_or_else(|| format!("no binding {name:?}"))?;
        if let Some(e) = &b.error {
            return Err(format!("binding {name:?} is invalid: {e}"));
        }
        let binding = b
            .binding
            .as_ref()
            .ok_or_else(|| format!("binding {name:?} is invalid"))?;
        let a = self
            .addons
            .get(&binding.addon)
            .ok_or_else(|| format!("binding {name:?}: unknown addon {:?}", binding.addon))?;
        let m = a
            .manifest
            .as_ref()
            .map_err(|e| format!("binding {name:?}: addon {:?} is invalid: {e}", a.name))?;
        Ok((binding, a, m))
    }

    /// G3: a selection of bindings an agent may be saved with.
    pub fn check_selection(&self, selected: &[String]) -> Result<(), String> {
        let mut by_addon: BTreeMap<&str, &str> = BTreeMap::new();
        let mut commands: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, name) in selected.iter().enumerate() {
            let (_, a, m) = self
                .usable(name)
                .map_err(|e| format!("bindings[{i}]: {e}"))?;
            if let Some(other) = by_addon.insert(&a.name, name) {
                return Err(format!(
                    "bindings[{i}]: {name:?} and {other:?} both use addon {}",
                    a.name
                ));
            }
            for c in &m.commands {
                if let Some(other) = commands.insert(c, &a.name) {
                    return Err(format!(
                        "bindings[{i}]: addons {other} and {} both declare the command {c:?}",
                        a.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The agents that picked a binding: `agents/<project>/<name>`, `ad-hoc/<agent id>`.
    pub fn used_by(app: &AppState, binding: &str) -> Vec<String> {
        let projects = app.agents.projects();
        let mut v: Vec<String> = app
            .agents
            .agents()
            .iter()
            .filter(|a| a.options.bindings.iter().any(|b| b == binding))
            .map(|a| match &a.project_id {
                Some(pid) => format!(
                    "agents/{}/{}",
                    projects
                        .iter()
                        .find(|p| &p.id == pid)
                        .map(|p| p.name.clone())
                        .unwrap_or_else(|| pid.clone()),
                    a.name.clone().unwrap_or_default()
                ),
                None => format!("ad-hoc/{}", a.id),
            })
            .collect();
        v.sort();
        v
    }
}

fn slot_infos<'a>(
    slots: impl Iterator<Item = (&'a String, bool, &'a Option<String>)>,
) -> Vec<AddonSlotInfo> {
    slots
        .map(|(name, required, description)| AddonSlotInfo {
            name: name.clone(),
            required,
            description: description.clone(),
        })
        .collect()
}

fn addon_info(a: &LoadedAddon) -> AddonInfo {
    let m = a.manifest.as_ref().ok();
    AddonInfo {
        name: a.name.clone(),
        description: m.and_then(|m| m.description.clone()),
        image: m.and_then(|m| m.image.clone()),
        // Image facts come from the runtime (A.7); this daemon does not query it yet.
        image_present: false,
        version: None,
        built_at: None,
        commands: m.map(|m| m.commands.clone()).unwrap_or_default(),
        skills: a.skills.clone(),
        settings: m
            .map(|m| {
                slot_infos(
                    m.settings
                        .iter()
                        .map(|(n, s)| (n, s.required, &s.description)),
                )
            })
            .unwrap_or_default(),
        secret_slots: m
            .map(|m| {
                slot_infos(
                    m.secret_slots
                        .iter()
                        .map(|(n, s)| (n, s.required, &s.description)),
                )
            })
            .unwrap_or_default(),
        egress: m
            .map(|m| m.egress.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        error: a.manifest.as_ref().err().cloned(),
        directory: a.dir.display().to_string(),
        builtin: a.builtin,
        overrides_builtin: a.overrides_builtin,
        source: None,
        update_available: false,
    }
}

fn binding_info(app: &AppState, b: &LoadedBinding) -> BindingInfo {
    let (addon, description, settings, secrets, hand_written) = match &b.binding {
        Some(x) => (
            Some(x.addon.clone()),
            x.description.clone(),
            x.settings.clone(),
            x.secrets.keys().cloned().collect(),
            x.secrets
                .iter()
                .filter(|(_, r)| !matches!(r, SecretRef::Secret(_)))
                .map(|(k, _)| k.clone())
                .collect(),
        ),
        None => (None, None, BTreeMap::new(), Vec::new(), Vec::new()),
    };
    BindingInfo {
        name: b.name.clone(),
        addon,
        description,
        settings,
        secrets,
        hand_written,
        error: b.error.clone(),
        used_by: AddonSet::used_by(app, &b.name),
    }
}

/// GET /v1/addons
pub async fn list_addons(State(app): State<AppState>) -> Json<Vec<AddonInfo>> {
    Json(
        AddonSet::read(&app.config)
            .addons
            .values()
            .map(addon_info)
            .collect(),
    )
}

/// GET /v1/addons/{name}
pub async fn get_addon(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<AddonInfo>> {
    AddonSet::read(&app.config)
        .addons
        .get(&name)
        .map(|a| Json(addon_info(a)))
        .ok_or_else(|| ApiError::not_found(format!("addon {name:?}")))
}

/// GET /v1/bindings
pub async fn list_bindings(State(app): State<AppState>) -> Json<Vec<BindingInfo>> {
    Json(
        AddonSet::read(&app.config)
            .bindings
            .values()
            .map(|b| binding_info(&app, b))
            .collect(),
    )
}

/// GET /v1/bindings/{name}
pub async fn get_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<BindingInfo>> {
    AddonSet::read(&app.config)
        .bindings
        .get(&name)
        .map(|b| Json(binding_info(&app, b)))
        .ok_or_else(|| ApiError::not_found(format!("binding {name:?}")))
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("binding invalid", detail)
}

/// Builds the binding a request describes, over what `old` had (its hand-written references,
/// its stored secrets), and stores its new secret values. Returns the binding and the store
/// paths that no longer hold one of its secrets.
fn build(
    app: &AppState,
    set: &AddonSet,
    req: &BindingRequest,
    old: Option<(&str, &Binding)>,
) -> ApiResult<(Binding, Vec<String>)> {
    let name = req.name.as_str();
    let addon = set
        .addons
        .get(&req.addon)
        .ok_or_else(|| invalid(format!("addon: unknown addon {:?}", req.addon)))?;
    let m = addon
        .manifest
        .as_ref()
        .map_err(|e| invalid(format!("addon: {:?} is invalid: {e}", req.addon)))?;
    for (slot, v) in &req.secrets {
        if !m.secret_slots.contains_key(slot) {
            return Err(invalid(format!(
                "secrets.{slot}: addon {} declares no secret slot {slot:?}",
                m.name
            )));
        }
        if v.trim().is_empty() || v.chars().any(char::is_control) {
            return Err(ApiError::unprocessable(
                "secret invalid",
                format!("secrets.{slot}: empty, or holds control characters"),
            ));
        }
    }
    for slot in &req.remove_secrets {
        if req.secrets.contains_key(slot) {
            return Err(invalid(format!(
                "removeSecrets: {slot:?} is also given a value"
            )));
        }
    }
    // What it keeps: the old binding's references (same addon), moved with a rename.
    let mut secrets: BTreeMap<String, SecretRef> = BTreeMap::new();
    let mut dropped: Vec<String> = Vec::new();
    if let Some((old_name, ob)) = old {
        for (slot, r) in &ob.secrets {
            let stored = matches!(r, SecretRef::Secret(p) if *p == secret_path(old_name, slot));
            let keep = ob.addon == req.addon
                && m.secret_slots.contains_key(slot)
                && !req.remove_secrets.contains(slot)
                && !req.secrets.contains_key(slot);
            if keep && stored && old_name != name {
                // Follow the rename: the value moves to the new name's path.
                let v = app
                    .secrets
                    .value(&secret_path(old_name, slot))
                    .map_err(ApiError::internal)?;
                app.secrets
                    .set(
                        &secret_path(name, slot),
                        &v,
                        Some(format!("secret {slot} of binding {name}")),
                        m.egress.iter().map(ToString::to_string).collect(),
                    )
                    .map_err(ApiError::internal)?;
                dropped.push(secret_path(old_name, slot));
                secrets.insert(slot.clone(), SecretRef::Secret(secret_path(name, slot)));
            } else if keep {
                secrets.insert(slot.clone(), r.clone());
            } else if stored && !(old_name == name && req.secrets.contains_key(slot)) {
                // Its value goes, unless a new one replaces it at the same path.
                dropped.push(secret_path(old_name, slot));
            }
        }
    }
    let b = Binding {
        api_version: BindingApiVersion,
        addon: req.addon.clone(),
        description: req.description.clone().filter(|d| !d.is_empty()),
        settings: req.settings.clone(),
        secrets: {
            let mut s = secrets.clone();
            for slot in req.secrets.keys() {
                s.insert(slot.clone(), SecretRef::Secret(secret_path(name, slot)));
            }
            s
        },
    };
    validate_binding(&b, Some(Ok(m))).map_err(|e| invalid(e.to_string()))?;
    for (slot, v) in &req.secrets {
        let hosts = m.secret_slots[slot]
            .hosts
            .clone()
            .unwrap_or_else(|| m.egress.clone());
        app.secrets
            .set(
                &secret_path(name, slot),
                v.trim(),
                Some(format!("secret {slot} of binding {name}")),
                hosts.iter().map(ToString::to_string).collect(),
            )
            .map_err(ApiError::internal)?;
    }
    Ok((b, dropped))
}

fn write_binding(app: &AppState, name: &str, b: &Binding) -> ApiResult<()> {
    let path = binding_path(&app.config, name);
    let mut doc: DocumentMut = tomldoc::load(&path).map_err(ApiError::internal)?;
    tomldoc::set_str(&mut doc, "apiVersion", Some(BindingApiVersion::STR));
    tomldoc::set_str(&mut doc, "addon", Some(&b.addon));
    tomldoc::set_str(&mut doc, "description", b.description.as_deref());
    if b.settings.is_empty() {
        doc.remove("settings");
    } else {
        let mut t = Table::new();
        for (k, v) in &b.settings {
            t.insert(k, toml_edit::value(v.as_str()));
        }
        doc["settings"] = Item::Table(t);
    }
    if b.secrets.is_empty() {
        doc.remove("secrets");
    } else {
        let mut t = Table::new();
        for (k, r) in &b.secrets {
            t.insert(k, Item::Value(tomldoc::secret_ref_value(r)));
        }
        doc["secrets"] = Item::Table(t);
    }
    tomldoc::save(&path, &doc).map_err(ApiError::internal)?;
    let text = std::fs::read_to_string(&path).map_err(ApiError::internal)?;
    from_toml::<Binding>(name, &text).map_err(ApiError::internal)?;
    Ok(())
}

/// POST /v1/bindings: a new binding (201); its secret values to the secret store.
pub async fn create_binding(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<BindingRequest>,
) -> ApiResult<(StatusCode, Json<BindingInfo>)> {
    let _w = app.write_lock.lock().await;
    if !valid_name(&req.name) {
        return Err(invalid(format!(
            "name: {:?} is not a name (letters, digits, '-', '_', '.')",
            req.name
        )));
    }
    if binding_path(&app.config, &req.name).exists() {
        return Err(ApiError::conflict(
            "binding exists",
            format!("binding {:?} exists", req.name),
        ));
    }
    let set = AddonSet::read(&app.config);
    let (b, _) = build(&app, &set, &req, None)?;
    write_binding(&app, &req.name, &b)?;
    tracing::info!(binding = %req.name, addon = %b.addon, "binding created");
    let set = AddonSet::read(&app.config);
    Ok((
        StatusCode::CREATED,
        Json(binding_info(&app, &set.bindings[&req.name])),
    ))
}

/// PUT /v1/bindings/{name}: replace it (and rename it when the body names another: the agents
/// that picked it follow).
pub async fn replace_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
    ApiJson(req): ApiJson<BindingRequest>,
) -> ApiResult<Json<BindingInfo>> {
    let _w = app.write_lock.lock().await;
    let set = AddonSet::read(&app.config);
    let old = set
        .bindings
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("binding {name:?}")))?;
    let rename = req.name != name;
    if rename {
        if !valid_name(&req.name) {
            return Err(invalid(format!("name: {:?} is not a name", req.name)));
        }
        if binding_path(&app.config, &req.name).exists() {
            return Err(ApiError::conflict(
                "binding exists",
                format!("binding {:?} exists", req.name),
            ));
        }
    }
    let (b, dropped) = build(
        &app,
        &set,
        &req,
        old.binding.as_ref().map(|b| (name.as_str(), b)),
    )?;
    write_binding(&app, &req.name, &b)?;
    for p in dropped {
        let _ = app.secrets.remove(&p);
    }
    if rename {
        std::fs::remove_file(binding_path(&app.config, &name)).map_err(ApiError::internal)?;
        app.agents.update::<_, ApiError>(|agents, _| {
            for a in agents.iter_mut() {
                if a.options.bindings.contains(&name) {
                    a.options.bindings.retain(|x| x != &name);
                    a.options.bindings.push(req.name.clone());
                    a.options.bindings.sort();
                }
            }
            Ok(())
        })?;
        tracing::info!(binding = %name, to = %req.name, "binding renamed");
    }
    // A.4: the running sandboxes of the agents that picked it get their new allow-list.
    for a in app.agents.agents() {
        if a.options.bindings.contains(&req.name) {
            super::live::apply_allow(&app, &a).await?;
        }
    }
    let set = AddonSet::read(&app.config);
    Ok(Json(binding_info(&app, &set.bindings[&req.name])))
}

/// DELETE /v1/bindings/{name}: refused (409) while an agent picked it; its stored secrets go.
pub async fn delete_binding(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let _w = app.write_lock.lock().await;
    let path = binding_path(&app.config, &name);
    if !valid_name(&name) || !path.exists() {
        return Err(ApiError::not_found(format!("binding {name:?}")));
    }
    let used = AddonSet::used_by(&app, &name);
    if !used.is_empty() {
        return Err(ApiError::conflict(
            "binding in use",
            format!("binding {name:?} is picked by {}", used.join(", ")),
        ));
    }
    std::fs::remove_file(&path).map_err(ApiError::internal)?;
    app.secrets
        .remove_under(&format!("bindings/{name}"))
        .map_err(ApiError::internal)?;
    Ok(StatusCode::NO_CONTENT)
}

/// What an agent's bindings add to one start (G4).
#[derive(Debug, Default)]
pub struct AddonLaunch {
    pub parts: Vec<AddonPart>,
    /// Their egress (E4), each with what requires it.
    pub egress: Vec<(AllowEntry, String)>,
    /// Their skills: name → folder.
    pub skills: Vec<(String, PathBuf)>,
    pub mcp_servers: Vec<McpServer>,
    pub injections: Vec<Injection>,
    /// Their secret values, named by store path (P5 redaction).
    pub secrets: Vec<(String, String)>,
}

/// The egress its bindings' addons give an agent (G4), read without resolving any secret; a
/// binding that is not usable gives none.
pub fn egress_of(app: &AppState, agent: &StoredAgent) -> Vec<AllowEntry> {
    if agent.options.bindings.is_empty() {
        return Vec::new();
    }
    let set = AddonSet::read(&app.config);
    agent
        .options
        .bindings
        .iter()
        .filter_map(|name| set.usable(name).ok())
        .flat_map(|(_, _, m)| m.egress.iter().cloned())
        .collect()
}

/// G4: each selected binding, checked again (G2, G3), resolved for a start.
pub fn resolve_for_launch(
    app: &AppState,
    agent: &StoredAgent,
    network: NetworkMode,
) -> ApiResult<AddonLaunch> {
    let mut out = AddonLaunch::default();
    if agent.options.bindings.is_empty() {
        return Ok(out);
    }
    let unusable = |d: String| ApiError::bad_request("binding unusable", d);
    let set = AddonSet::read(&app.config);
    set.check_selection(&agent.options.bindings)
        .map_err(unusable)?;
    for name in &agent.options.bindings {
        let (b, a, m) = set.usable(name).map_err(unusable)?;
        let mut env: BTreeMap<String, String> = m.env.clone();
        for (slot, value) in &b.settings {
            env.insert(m.settings[slot].env.clone(), value.clone());
        }
        for (slot, r) in &b.secrets {
            let s = &m.secret_slots[slot];
            let store_name = secret_path(name, slot);
            let value = prepare::resolve_secret(app, r)
                .map_err(|e| unusable(format!("binding {name:?}: secrets.{slot}: {e}")))?;
            let given = match s.delivery.unwrap_or_default() {
                SecretDelivery::Env => value.clone(),
                SecretDelivery::Proxy => {
                    let hosts = s.hosts.clone().unwrap_or_else(|| m.egress.clone());
                    let d = prepare::deliver(&store_name, value.clone(), hosts, network);
                    out.injections.extend(d.injection);
                    d.given
                }
            };
            env.insert(s.env.clone(), given);
            out.secrets.push((store_name, value));
        }
        for e in &m.egress {
            out.egress
                .push((e.clone(), format!("addon {}: {name}", a.name)));
        }
        for s in &a.skills {
            let dir = skills::check_skill_dir(&a.dir.join("skills").join(s), s)
                .map_err(|e| unusable(format!("addon {}: {e}", a.name)))?;
            out.skills.push((s.clone(), dir));
        }
        if let Some(mcp) = &m.mcp {
            out.mcp_servers.push(McpServer::Stdio {
                name: a.name.clone(),
                command: mcp.command[0].clone(),
                args: mcp.command[1..].to_vec(),
                env: Vec::new(),
            });
        }
        out.parts.push(AddonPart {
            addon: a.name.clone(),
            binding: name.clone(),
            image: m.image.clone(),
            env,
        });
    }
    Ok(out)
}

/// The required hosts an agent's bindings add (E4), for its view: `addon <addon>: <binding>`.
pub fn required_hosts(config: &DaemonConfig, bindings: &[String]) -> Vec<(AllowEntry, String)> {
    if bindings.is_empty() {
        return Vec::new();
    }
    let set = AddonSet::read(config);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for name in bindings {
        if let Ok((_, a, m)) = set.usable(name) {
            for e in &m.egress {
                if seen.insert((e.clone(), name.clone())) {
                    out.push((e.clone(), format!("addon {}: {name}", a.name)));
                }
            }
        }
    }
    out
}
