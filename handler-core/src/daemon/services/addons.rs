//! Addons and bindings (G.1–G.4, D.15): the addons loaded from two folders (the platform's
//! built-in ones, then the user's `$HANDLER_ADDONS_DIR`, a user addon replacing a built-in one of
//! its name), the bindings (`$HANDLER_BINDINGS_DIR/<name>.toml`, hand-written or written here:
//! secret values only to the secret store under `bindings/<name>/<slot>`), an agent's selection
//! checked when it is saved (G3), and what the selected bindings add at each start (G4).

use std::collections::BTreeMap;

use handler_contracts::SecretRef;
use handler_contracts::addon::{AddonManifest, Binding};
use handler_contracts::api_version::BindingApiVersion;
use handler_contracts::control::{AddonInfo, AddonSlotInfo, BindingInfo, BindingRequest};
use handler_contracts::parse::from_toml;
use handler_contracts::validate::validate_binding;
use toml_edit::{Item, Table};

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::addons::{AddonSet, LoadedAddon, LoadedBinding, secret_path};
use crate::daemon::store::catalog::valid_name;
use crate::daemon::store::tomldoc;

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
    let secret_paths = b
        .binding
        .iter()
        .flat_map(|x| &x.secrets)
        .filter_map(|(k, r)| match r {
            SecretRef::Secret(p) => Some((k.clone(), p.clone())),
            _ => None,
        })
        .collect();
    BindingInfo {
        name: b.name.clone(),
        addon,
        description,
        settings,
        secrets,
        hand_written,
        secret_paths,
        error: b.error.clone(),
        used_by: AddonSet::used_by(&app.agents, &b.name),
    }
}

/// The rules behind GET /v1/addons
pub async fn list_addons(app: &AppState) -> Vec<AddonInfo> {
    let mut v: Vec<AddonInfo> = AddonSet::read(&app.config)
        .addons
        .values()
        .map(addon_info)
        .collect();
    super::addon_install::annotate(&app.config, &mut v);
    v
}

/// The rules behind GET /v1/addons/{name}
pub async fn get_addon(app: &AppState, name: String) -> ApiResult<AddonInfo> {
    let mut a = AddonSet::read(&app.config)
        .addons
        .get(&name)
        .map(addon_info)
        .ok_or_else(|| ApiError::not_found(format!("addon {name:?}")))?;
    super::addon_install::annotate(&app.config, std::slice::from_mut(&mut a));
    Ok(a)
}

/// The rules behind GET /v1/bindings
pub async fn list_bindings(app: &AppState) -> Vec<BindingInfo> {
    AddonSet::read(&app.config)
        .bindings
        .values()
        .map(|b| binding_info(app, b))
        .collect()
}

/// The rules behind GET /v1/bindings/{name}
pub async fn get_binding(app: &AppState, name: String) -> ApiResult<BindingInfo> {
    AddonSet::read(&app.config)
        .bindings
        .get(&name)
        .map(|b| binding_info(app, b))
        .ok_or_else(|| ApiError::not_found(format!("binding {name:?}")))
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("binding invalid", detail)
}

/// Whose a store path is, when it is not free for a binding to name (decisions 0109, 0134): an
/// account's token (D.9: a person's own login), a provider's key, another binding's value. The
/// binding's own paths (`bindings/<name>/…`, under its new or its old name) and the paths the
/// person made elsewhere are free.
fn owned_elsewhere(path: &str, own: &[&str]) -> Option<String> {
    let mut seg = path.split('/');
    match (seg.next(), seg.next()) {
        (Some("accounts"), _) => Some(format!(
            "{path:?} is an account's token: it stays the account's (D.9)"
        )),
        (Some("providers"), _) => Some(format!(
            "{path:?} is a provider's key: it stays the provider's (E3)"
        )),
        (Some("bindings"), Some(b)) if own.contains(&b) => None,
        (Some("bindings"), _) => Some(format!(
            "{path:?} is another binding's value: it stays that binding's"
        )),
        _ => None,
    }
}

/// A request's secrets against the addon's slots: each given one declared, not empty, no
/// control characters, and not also removed; each store path a declared slot's, set, not
/// another's (`owned_elsewhere`) and its slot given nothing else (decision 0109). `old_name`:
/// the binding's name before this change, its own paths too.
fn check_request(
    app: &AppState,
    m: &AddonManifest,
    req: &BindingRequest,
    old_name: Option<&str>,
) -> ApiResult<()> {
    let own: Vec<&str> = std::iter::once(req.name.as_str()).chain(old_name).collect();
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
    for (slot, path) in &req.secret_paths {
        let why = if !m.secret_slots.contains_key(slot) {
            format!("addon {} declares no secret slot {slot:?}", m.name)
        } else if req.secrets.contains_key(slot) || req.remove_secrets.contains(slot) {
            format!("{slot:?} is also given a value or removed")
        } else if let Some(why) = owned_elsewhere(path, &own) {
            why
        } else if !app.secrets.is_set(path) {
            format!("the secret store has no value at {path:?} (Settings → Secrets)")
        } else {
            continue;
        };
        return Err(invalid(format!("secretPaths.{slot}: {why}")));
    }
    Ok(())
}

/// What a replaced binding carries over from `old` (its hand-written references, its stored
/// secrets, moved with a rename) for the slots the request leaves as they are; and the store
/// paths that no longer hold one of its secrets.
fn carried(
    app: &AppState,
    m: &AddonManifest,
    req: &BindingRequest,
    (old_name, ob): (&str, &Binding),
) -> ApiResult<(BTreeMap<String, SecretRef>, Vec<String>)> {
    let name = req.name.as_str();
    let mut secrets: BTreeMap<String, SecretRef> = BTreeMap::new();
    let mut dropped: Vec<String> = Vec::new();
    for (slot, r) in &ob.secrets {
        let own = secret_path(old_name, slot);
        let stored = matches!(r, SecretRef::Secret(p) if *p == own);
        // Naming its own stored path again is leaving it as it is.
        let repointed = req
            .secret_paths
            .get(slot)
            .is_some_and(|p| *p != own || !stored);
        let keep = ob.addon == req.addon
            && m.secret_slots.contains_key(slot)
            && !req.remove_secrets.contains(slot)
            && !req.secrets.contains_key(slot)
            && !repointed;
        if keep && stored && old_name != name {
            // Follow the rename: the value moves to the new name's path.
            let v = app.secrets.value(&own).map_err(ApiError::internal)?;
            app.secrets
                .set(
                    &secret_path(name, slot),
                    &v,
                    Some(format!("secret {slot} of binding {name}")),
                    m.egress.iter().map(ToString::to_string).collect(),
                )
                .map_err(ApiError::internal)?;
            dropped.push(own);
            secrets.insert(slot.clone(), SecretRef::Secret(secret_path(name, slot)));
        } else if keep {
            secrets.insert(slot.clone(), r.clone());
        } else if stored && !(old_name == name && req.secrets.contains_key(slot)) {
            // Its value goes, unless a new one replaces it at the same path.
            dropped.push(own);
        }
    }
    Ok((secrets, dropped))
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
    check_request(app, m, req, old.map(|(n, _)| n))?;
    let (mut secrets, dropped) = match old {
        Some(old) => carried(app, m, req, old)?,
        None => (BTreeMap::new(), Vec::new()),
    };
    for (slot, path) in &req.secret_paths {
        if dropped.contains(path) {
            return Err(invalid(format!(
                "secretPaths.{slot}: {path:?} goes with this change"
            )));
        }
        secrets
            .entry(slot.clone())
            .or_insert_with(|| SecretRef::Secret(path.clone()));
    }
    for slot in req.secrets.keys() {
        secrets.insert(slot.clone(), SecretRef::Secret(secret_path(name, slot)));
    }
    let b = Binding {
        api_version: BindingApiVersion,
        addon: req.addon.clone(),
        description: req.description.clone().filter(|d| !d.is_empty()),
        settings: req.settings.clone(),
        secrets,
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
    app.bindings.update::<_, ApiError>(name, |doc| {
        tomldoc::set_str(doc, "apiVersion", Some(BindingApiVersion::STR));
        tomldoc::set_str(doc, "addon", Some(&b.addon));
        tomldoc::set_str(doc, "description", b.description.as_deref());
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
        Ok(())
    })?;
    let text = std::fs::read_to_string(app.bindings.path(name)).map_err(ApiError::internal)?;
    from_toml::<Binding>(name, &text).map_err(ApiError::internal)?;
    Ok(())
}

/// The rules behind POST /v1/bindings: a new binding (201); its secret values to the secret store.
pub async fn create_binding(app: &AppState, req: BindingRequest) -> ApiResult<BindingInfo> {
    let _w = app.write_lock.lock().await;
    if !valid_name(&req.name) {
        return Err(invalid(format!(
            "name: {:?} is not a name (letters, digits, '-', '_', '.')",
            req.name
        )));
    }
    if app.bindings.exists(&req.name) {
        return Err(ApiError::conflict(
            "binding exists",
            format!("binding {:?} exists", req.name),
        ));
    }
    let set = AddonSet::read(&app.config);
    let (b, _) = build(app, &set, &req, None)?;
    write_binding(app, &req.name, &b)?;
    tracing::info!(binding = %req.name, addon = %b.addon, "binding created");
    let set = AddonSet::read(&app.config);
    Ok(binding_info(app, &set.bindings[&req.name]))
}

/// The rules behind PUT /v1/bindings/{name}: replace it (and rename it when the body names another: the agents
/// that picked it follow).
pub async fn replace_binding(
    app: &AppState,
    name: String,
    req: BindingRequest,
) -> ApiResult<BindingInfo> {
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
        if app.bindings.exists(&req.name) {
            return Err(ApiError::conflict(
                "binding exists",
                format!("binding {:?} exists", req.name),
            ));
        }
    }
    let (b, dropped) = build(
        app,
        &set,
        &req,
        old.binding.as_ref().map(|b| (name.as_str(), b)),
    )?;
    write_binding(app, &req.name, &b)?;
    for p in dropped {
        let _ = app.secrets.remove(&p);
    }
    if rename {
        app.bindings.delete(&name)?;
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
            super::running::apply_allow(app, &a).await?;
        }
    }
    let set = AddonSet::read(&app.config);
    Ok(binding_info(app, &set.bindings[&req.name]))
}

/// The rules behind DELETE /v1/bindings/{name}: refused (409) while an agent picked it; its stored secrets go.
pub async fn delete_binding(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    if !valid_name(&name) || !app.bindings.exists(&name) {
        return Err(ApiError::not_found(format!("binding {name:?}")));
    }
    let used = AddonSet::used_by(&app.agents, &name);
    if !used.is_empty() {
        return Err(ApiError::conflict(
            "binding in use",
            format!("binding {name:?} is picked by {}", used.join(", ")),
        ));
    }
    app.bindings.delete(&name)?;
    app.secrets
        .remove_under(&format!("bindings/{name}"))
        .map_err(ApiError::internal)?;
    Ok(())
}
