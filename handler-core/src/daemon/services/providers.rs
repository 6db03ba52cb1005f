//! Providers (E, D.12): `<providers>/<name>.toml`, from a template (platform data) or as given;
//! a key given through the API goes only to the secret store (`providers/<name>/apiKey`), a
//! hand-written `env`/`file`/`command` key is kept.

use handler_contracts::validate::UnusableDocument;
use std::collections::BTreeMap;

use handler_contracts::api_version::ProviderApiVersion;
use handler_contracts::parse::from_toml;
use handler_contracts::validate::{expand_home, validate_provider};
use handler_contracts::{FileSource, Provider, SecretRef, allow::entry_for_url};

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::secretref;
use crate::daemon::state::AppState;
use crate::daemon::store::catalog::valid_name;
use crate::daemon::store::providers::key_secret_path;
use crate::daemon::store::tomldoc;
use handler_contracts::control::{ProviderInfo, ProviderRequest, ProviderTemplate};

fn info(app: &AppState, name: &str, r: &Result<Provider, UnusableDocument>) -> ProviderInfo {
    match r {
        Ok(p) => ProviderInfo {
            name: name.into(),
            description: p.description.clone(),
            endpoints: p.endpoints.clone(),
            models: p.models.clone(),
            files: p.files.clone(),
            contexts: p.contexts.clone(),
            api_key: p.api_key.clone(),
            key_set: match &p.api_key {
                Some(SecretRef::Secret(s)) => app.secrets.is_set(s),
                _ => true,
            },
            error: None,
        },
        Err(why) => ProviderInfo {
            name: name.into(),
            description: None,
            endpoints: BTreeMap::new(),
            models: Vec::new(),
            files: BTreeMap::new(),
            contexts: None,
            api_key: None,
            key_set: false,
            error: Some(why.to_string()),
        },
    }
}

/// The templates shipped with Handler.
pub fn templates(app: &AppState) -> Vec<ProviderTemplate> {
    let Ok(rd) = std::fs::read_dir(&app.config.templates_dir) else {
        return Vec::new();
    };
    let mut out: Vec<ProviderTemplate> = rd
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let name = p.file_stem()?.to_str()?.to_string();
            if p.extension()? != "toml" {
                return None;
            }
            let text = std::fs::read_to_string(&p).ok()?;
            match from_toml::<Provider>(&format!("templates/providers/{name}.toml"), &text) {
                Ok(provider) => Some(ProviderTemplate { name, provider }),
                Err(e) => {
                    tracing::warn!(template = %name, error = %e, "provider template unusable");
                    None
                }
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The rules behind GET /v1/provider-templates
pub async fn list_templates(app: &AppState) -> Vec<ProviderTemplate> {
    templates(app)
}

/// The rules behind GET /v1/providers
pub async fn list(app: &AppState) -> Vec<ProviderInfo> {
    let snap = app.snapshot();

    snap.providers
        .iter()
        .map(|(n, r)| info(app, n, r))
        .collect()
}

/// The rules behind GET /v1/providers/{name}
pub async fn get(app: &AppState, name: String) -> ApiResult<ProviderInfo> {
    let snap = app.snapshot();
    let r = snap
        .providers
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("provider {name:?}")))?;
    Ok(info(app, &name, r))
}

fn endpoint_hosts(p: &Provider) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = p
        .endpoints
        .values()
        .filter_map(|u| entry_for_url(u))
        .map(|(h, port)| format!("{h}:{port}"))
        .collect();
    set.into_iter().collect()
}

/// Each `{ file }` config file a regular file of at most 1 MiB now, as its start reads it (E1:
/// refused at save and at start): a device such as `/dev/zero`, a FIFO, a folder, a missing or
/// a larger file is a 400 naming `files.<harness>.<slot>`.
fn check_files(app: &AppState, p: &Provider) -> ApiResult<()> {
    let home = app.config.home.to_string_lossy().into_owned();
    for (harness, slots) in &p.files {
        for (slot, f) in slots {
            let FileSource::File(path) = f else {
                continue;
            };
            let field = format!("files.{harness}.{slot}");
            let bad =
                |why: String| ApiError::bad_request("provider invalid", format!("{field}: {why}"));
            let path = expand_home(&format!("{field}.file"), path, &home)
                .map_err(|e| ApiError::bad_request("provider invalid", e.to_string()))?;
            secretref::check_small_file(&path).map_err(|e| bad(e.to_string()))?;
        }
    }
    Ok(())
}

fn build(
    app: &AppState,
    name: &str,
    req: &ProviderRequest,
    old_key: Option<SecretRef>,
) -> ApiResult<Provider> {
    let base = match &req.template {
        Some(t) => Some(
            templates(app)
                .into_iter()
                .find(|x| x.name == *t)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "provider invalid",
                        format!("template: no template {t:?}"),
                    )
                })?
                .provider,
        ),
        None => None,
    };
    let mut p = Provider {
        api_version: ProviderApiVersion,
        description: req
            .description
            .clone()
            .or_else(|| base.as_ref().and_then(|b| b.description.clone())),
        endpoints: req
            .endpoints
            .clone()
            .or_else(|| base.as_ref().map(|b| b.endpoints.clone()))
            .unwrap_or_default(),
        api_key: None,
        models: req
            .models
            .clone()
            .or_else(|| base.as_ref().map(|b| b.models.clone()))
            .unwrap_or_default(),
        files: req
            .files
            .clone()
            .or_else(|| base.as_ref().map(|b| b.files.clone()))
            .unwrap_or_default(),
        contexts: req
            .contexts
            .clone()
            .or_else(|| base.as_ref().and_then(|b| b.contexts.clone())),
    };
    validate_provider(&p).map_err(|e| ApiError::bad_request("provider invalid", e.to_string()))?;
    check_files(app, &p)?;
    p.api_key = if let Some(v) = &req.api_key {
        let v = v.trim();
        if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ApiError::unprocessable(
                "key invalid",
                "apiKey: empty, or holds spaces or control characters",
            ));
        }
        let path = key_secret_path(name);
        app.secrets
            .set(
                &path,
                v,
                Some(format!("API key of provider {name}")),
                endpoint_hosts(&p),
            )
            .map_err(ApiError::internal)?;
        Some(SecretRef::Secret(path))
    } else if req.remove_api_key {
        let _ = app.secrets.remove(&key_secret_path(name));
        None
    } else {
        old_key
    };
    Ok(p)
}

fn write_provider(app: &AppState, name: &str, p: &Provider) -> ApiResult<()> {
    app.providers.update::<_, ApiError>(name, |doc| {
        tomldoc::set_str(doc, "apiVersion", Some(ProviderApiVersion::STR));
        tomldoc::set_str(doc, "description", p.description.as_deref());
        match &p.api_key {
            Some(k) => tomldoc::set_value(doc, "apiKey", tomldoc::secret_ref_value(k)),
            None => {
                doc.remove("apiKey");
            }
        }
        tomldoc::set_str_list(doc, "contexts", p.contexts.as_deref());
        doc["endpoints"] = tomldoc::to_item(&p.endpoints);
        doc["models"] = tomldoc::to_item(&p.models);
        if p.files.is_empty() {
            doc.remove("files");
        } else {
            doc["files"] = tomldoc::to_item(&p.files);
        }
        Ok(())
    })?;
    let path = app.providers.path(name);
    // What was written must read back as the same provider.
    let text = std::fs::read_to_string(&path).map_err(ApiError::internal)?;
    from_toml::<Provider>(name, &text).map_err(ApiError::internal)?;
    Ok(())
}

/// The rules behind POST /v1/providers
pub async fn create(app: &AppState, req: ProviderRequest) -> ApiResult<ProviderInfo> {
    let _w = app.write_lock.lock().await;
    let name = req
        .name
        .clone()
        .ok_or_else(|| ApiError::unprocessable("invalid body", "name: required"))?;
    if !valid_name(&name) {
        return Err(ApiError::bad_request(
            "provider invalid",
            format!("name: {name:?} is not a name (letters, digits, '-', '_', '.')"),
        ));
    }
    if app.providers.exists(&name) {
        return Err(ApiError::conflict(
            "provider exists",
            format!("provider {name:?} exists"),
        ));
    }
    let p = build(app, &name, &req, None)?;
    write_provider(app, &name, &p)?;
    tracing::info!(provider = %name, "provider created");
    Ok(info(app, &name, &Ok(p)))
}

/// The rules behind PUT /v1/providers/{name}
pub async fn replace(
    app: &AppState,
    name: String,
    req: ProviderRequest,
) -> ApiResult<ProviderInfo> {
    let _w = app.write_lock.lock().await;
    if req.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_request(
            "provider invalid",
            "name: differs from the provider's (renaming is not supported)",
        ));
    }
    let snap = app.snapshot();
    let old = snap
        .providers
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("provider {name:?}")))?;
    let p = build(
        app,
        &name,
        &req,
        old.as_ref().ok().and_then(|p| p.api_key.clone()),
    )?;
    write_provider(app, &name, &p)?;
    Ok(info(app, &name, &Ok(p)))
}

/// The rules behind DELETE /v1/providers/{name}
pub async fn delete(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    if !valid_name(&name) || !app.providers.exists(&name) {
        return Err(ApiError::not_found(format!("provider {name:?}")));
    }
    app.providers.delete(&name)?;
    app.secrets
        .remove_under(&format!("providers/{name}"))
        .map_err(ApiError::internal)?;
    Ok(())
}
