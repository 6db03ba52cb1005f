//! Mini apps (H, decision 0157): a folder an agent wrote, registered by the person, deployed as
//! a copy into `<data>/apps/<name>/versions/<version>/`, served at `<name>.localhost:<port>`
//! (`api::app_origin`). The record is `<data>/apps/<name>/app.json`; `data/` is the app's data,
//! kept across versions; `app.log` its log. Deploy, rollback and delete of one app are
//! serialized by its lock.

pub mod backend;
pub mod folder;
pub mod notify;
pub mod proxy;
pub mod queue;
pub mod testrun;

use std::path::PathBuf;

use handler_contracts::miniapp::{
    AppDeployRequest, AppInfo, AppRegisterRequest, AppSecretInfo, AppSource, AppVersion,
    MiniAppManifest, MiniAppNeeds, added_needs,
};
use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState as Daemon;
use crate::daemon::state::apps::Served;

/// The record of a registered app (`app.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The registered folder.
    pub folder: PathBuf,
    /// The version served.
    #[serde(default)]
    pub deployed: Option<String>,
    /// Every version deployed, oldest first.
    #[serde(default)]
    pub versions: Vec<AppVersion>,
}

/// Where the apps live.
pub fn apps_dir(d: &Daemon) -> PathBuf {
    d.config.data_dir.join("apps")
}

/// An app's folder in the store.
pub fn app_dir(d: &Daemon, name: &str) -> PathBuf {
    apps_dir(d).join(name)
}

/// A deployed version's copy.
pub fn version_dir(d: &Daemon, name: &str, version: &str) -> PathBuf {
    app_dir(d, name).join("versions").join(version)
}

/// Where `name` is served.
pub fn url_of(d: &Daemon, name: &str) -> String {
    format!("http://{name}.localhost:{}/", d.port())
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "no mini app named {name:?} (handler app register FOLDER)"
    ))
}

/// `f` on a blocking thread, within 60 s (the apps room's reads of folders and records).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::task::spawn_blocking(f),
    )
    .await
    .map_err(|_| ApiError::internal("reading the app's folder took over 60 s"))?
    .map_err(ApiError::internal)?
}

/// The record of `name` (`None`: not registered). The name is checked first: it names a path.
pub fn record(d: &Daemon, name: &str) -> ApiResult<Option<Record>> {
    if handler_contracts::validate::validate_miniapp_name(name).is_err() {
        return Ok(None);
    }
    let Some(text) =
        fsutil::read_optional(&app_dir(d, name).join("app.json")).map_err(ApiError::internal)?
    else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(ApiError::internal)
}

fn save(d: &Daemon, name: &str, r: &Record) -> ApiResult<()> {
    let bytes = serde_json::to_vec_pretty(r).map_err(ApiError::internal)?;
    let saved = fsutil::write_atomic(&app_dir(d, name).join("app.json"), &bytes, 0o600)
        .map_err(ApiError::internal);
    // After the write: a read that began before it is not kept (AppsLive::keep_served).
    d.apps.forget_served(name);
    saved
}

/// What `name` serves: kept in memory since its record was last written, else read (its record
/// and its deployed version's manifest) and kept. None for an app not registered.
pub fn served(d: &Daemon, name: &str) -> Option<std::sync::Arc<Served>> {
    let count = match d.apps.served(name) {
        Ok(s) => return Some(s),
        Err(count) => count,
    };
    let r = record(d, name).ok().flatten()?;
    let backend = r
        .versions
        .iter()
        .any(|v| Some(&v.version) == r.deployed.as_ref() && v.backend);
    let queued = r
        .deployed
        .as_ref()
        .and_then(|v| deployed_manifest(d, name, v).ok())
        .map(|m| {
            m.routes
                .iter()
                .filter(|(_, mode)| **mode == handler_contracts::miniapp::RouteMode::Queued)
                .map(|(route, _)| route.clone())
                .collect()
        })
        .unwrap_or_default();
    let s = std::sync::Arc::new(Served {
        deployed: r.deployed,
        backend,
        queued,
    });
    d.apps.keep_served(name, s.clone(), count);
    Some(s)
}

/// Appends a line to the app's log.
pub fn log(d: &Daemon, name: &str, line: &str) {
    use std::io::Write as _;
    let path = app_dir(d, name).join("app.log");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{} {line}", fsutil::now_rfc3339());
    }
}

/// The manifest of a deployed version (Handler's own copy).
fn deployed_manifest(d: &Daemon, name: &str, version: &str) -> ApiResult<MiniAppManifest> {
    let path = version_dir(d, name, version).join(folder::MANIFEST);
    let text = fsutil::read_optional(&path)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::internal(format!("{}: missing", path.display())))?;
    folder::parse_manifest(&text)
}

/// What the API shows of an app: the record, the deployed version's needs and secrets, the
/// folder as it is now.
fn info(d: &Daemon, name: &str, r: &Record) -> AppInfo {
    let deployed = r
        .deployed
        .as_deref()
        .and_then(|v| deployed_manifest(d, name, v).ok());
    let source = folder::read_manifest(&r.folder);
    let needs_now = deployed
        .as_ref()
        .and_then(|m| m.needs.clone())
        .unwrap_or_default();
    // The served version's, then those the folder's adds: set before its deploy.
    let mut declared: Vec<String> = Vec::new();
    for m in [deployed.as_ref(), source.as_ref().ok()]
        .into_iter()
        .flatten()
    {
        for s in m.needs.iter().flat_map(|n| n.secrets.iter()) {
            if !declared.contains(s) {
                declared.push(s.clone());
            }
        }
    }
    AppInfo {
        name: name.to_string(),
        description: deployed
            .as_ref()
            .or(source.as_ref().ok())
            .and_then(|m| m.description.clone()),
        url: url_of(d, name),
        state: backend::phase(d, name),
        deployed: r.deployed.clone(),
        versions: r.versions.clone(),
        secrets: declared
            .into_iter()
            .map(|s| AppSecretInfo {
                set: d.secrets.is_set(&secret_path(name, &s)),
                name: s,
            })
            .collect(),
        source: AppSource {
            folder: r.folder.display().to_string(),
            version: source.as_ref().ok().map(|m| m.version.clone()),
            error: source
                .as_ref()
                .err()
                .map(|e| e.detail.clone().unwrap_or_else(|| e.title.clone())),
            added_needs: source
                .as_ref()
                .ok()
                .map(|m| {
                    added_needs(
                        deployed.as_ref().map(|_| &needs_now),
                        &m.needs.clone().unwrap_or_default(),
                    )
                })
                .unwrap_or_default(),
        },
        needs: needs_now,
    }
}

/// The secret store's path of an app's secret (H.2).
pub fn secret_path(app: &str, name: &str) -> String {
    format!("apps/{app}/{name}")
}

/// The rules behind `POST /v1/apps`: the folder's manifest read and validated, the app named
/// after it. `true` when it is new (201).
pub async fn register(d: &Daemon, req: AppRegisterRequest) -> ApiResult<(bool, AppInfo)> {
    let folder = PathBuf::from(&req.folder);
    if !folder.is_absolute() {
        return Err(ApiError::bad_request(
            "invalid folder",
            format!("folder: {:?} is not an absolute path", req.folder),
        ));
    }
    let f = folder.clone();
    let m = blocking(move || folder::read_manifest(&f)).await?;
    let lock = d.apps.lock_of(&m.name);
    let _g = lock.lock().await;
    if let Some(r) = record(d, &m.name)? {
        if r.folder == folder {
            let d2 = d.clone();
            let name = m.name.clone();
            return Ok((false, blocking(move || Ok(info(&d2, &name, &r))).await?));
        }
        return Err(ApiError::conflict(
            "name taken",
            format!(
                "name: a mini app named {:?} is registered from {} (rename it in app.toml, or handler app rm {})",
                m.name,
                r.folder.display(),
                m.name
            ),
        ));
    }
    let dir = app_dir(d, &m.name);
    fsutil::create_dir_private(&apps_dir(d)).map_err(ApiError::internal)?;
    fsutil::create_dir_private(&dir).map_err(ApiError::internal)?;
    fsutil::create_dir_private(&dir.join("data")).map_err(ApiError::internal)?;
    let r = Record {
        folder,
        ..Record::default()
    };
    save(d, &m.name, &r)?;
    log(
        d,
        &m.name,
        &format!("registered from {}", r.folder.display()),
    );
    Ok((true, get(d, &m.name).await?))
}

/// `GET /v1/apps`.
pub async fn list(d: &Daemon) -> ApiResult<Vec<AppInfo>> {
    let d = d.clone();
    blocking(move || {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(apps_dir(&d)) else {
            return Ok(out);
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort();
        for name in names {
            if let Some(r) = record(&d, &name)? {
                out.push(info(&d, &name, &r));
            }
        }
        Ok(out)
    })
    .await
}

/// `GET /v1/apps/{name}`.
pub async fn get(d: &Daemon, name: &str) -> ApiResult<AppInfo> {
    let r = record(d, name)?.ok_or_else(|| not_found(name))?;
    let (d, name) = (d.clone(), name.to_string());
    blocking(move || Ok(info(&d, &name, &r))).await
}

/// `DELETE /v1/apps/{name}`: its versions, data, log and secrets; never its folder.
pub async fn delete(d: &Daemon, name: &str) -> ApiResult<()> {
    let lock = d.apps.lock_of(name);
    let _g = lock.lock().await;
    record(d, name)?.ok_or_else(|| not_found(name))?;
    backend::stop(d, name, "the app is removed").await;
    d.apps.forget(name);
    d.apps.forget_served(name);
    let dir = app_dir(d, name);
    let _ = std::fs::remove_dir_all(notify::notify_dir(d, name));
    blocking(move || std::fs::remove_dir_all(dir).map_err(ApiError::internal)).await?;
    d.secrets
        .remove_under(&format!("apps/{name}"))
        .map_err(ApiError::internal)?;
    Ok(())
}

/// `GET /v1/apps/{name}/notifications` (H.9): the last ones its backends sent, oldest first.
pub async fn notifications(
    d: &Daemon,
    name: &str,
) -> ApiResult<handler_contracts::miniapp::AppNotifications> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    let (d2, n2) = (d.clone(), name.to_string());
    blocking(move || notify::list(&d2, &n2)).await
}

/// The secrets `needs` declares that have no value: 409 naming the first.
fn check_secrets(
    d: &Daemon,
    name: &str,
    needs: Option<&MiniAppNeeds>,
    what: &str,
) -> ApiResult<()> {
    for s in needs.map(|n| n.secrets.as_slice()).unwrap_or_default() {
        if !d.secrets.is_set(&secret_path(name, s)) {
            return Err(ApiError::conflict(
                "secret not set",
                format!(
                    "needs.secrets: {s} has no value: set it before the {what} (handler app secret set {name} {s})"
                ),
            ));
        }
    }
    Ok(())
}

/// `needs.files` resolved and checked (decision 0160): at every deploy and every start.
pub(super) fn app_files(
    d: &Daemon,
    needs: Option<&MiniAppNeeds>,
) -> ApiResult<Vec<handler_sandbox::app::AppFile>> {
    let files = needs.map(|n| n.files.as_slice()).unwrap_or_default();
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let path = crate::daemon::store::folders::check_app_file(
                &d.config,
                &format!("needs.files[{i}].path"),
                &f.path,
            )?;
            Ok(handler_sandbox::app::AppFile {
                written: f.path.clone(),
                path: path.display().to_string(),
                read_write: f.mode == Some(handler_contracts::miniapp::FileAccess::Rw),
            })
        })
        .collect()
}

/// The rules behind `POST /v1/apps/{name}/deploy` (H.2, H.6; decision 0157): the folder
/// checked and copied, a backend's tests run on the copy (decision 0158), then the copy put in
/// place and served; a running backend of the version before is stopped.
pub async fn deploy(d: &Daemon, name: &str, req: AppDeployRequest) -> ApiResult<AppInfo> {
    let lock = d.apps.lock_of(name);
    let _g = lock.lock().await;
    let mut r = record(d, name)?.ok_or_else(|| not_found(name))?;
    let (d2, n2, r2) = (d.clone(), name.to_string(), r.clone());
    let staged = blocking(move || stage(&d2, &n2, &r2, &req.confirm_added_needs)).await?;
    if staged.backend {
        backend::require_runtime(d).await?;
        testrun::run_tests(d, name, staged.dir.path(), &staged.manifest).await?;
    }
    let version = staged.manifest.version.clone();
    let to = app_dir(d, name).join("versions").join(&version);
    std::fs::rename(staged.dir.path(), &to).map_err(ApiError::internal)?;
    r.versions.push(AppVersion {
        version: version.clone(),
        deployed_at: fsutil::now_rfc3339(),
        runtime: staged.backend.then(|| {
            format!(
                "deno {}",
                crate::daemon::services::images::app_runtime::DENO_VERSION
            )
        }),
        backend: staged.backend,
    });
    r.deployed = Some(version.clone());
    save(d, name, &r)?;
    log(d, name, &format!("deployed {version}"));
    backend::stop(d, name, &format!("{version} deployed")).await;
    get(d, name).await
}

/// A version copied from the folder, not yet in place.
struct Staged {
    dir: tempfile::TempDir,
    manifest: MiniAppManifest,
    backend: bool,
}

/// Reads the folder, checks it against the served version and copies it into a staging folder
/// of `versions/`.
fn stage(d: &Daemon, name: &str, r: &Record, confirmed: &[String]) -> ApiResult<Staged> {
    let dir = folder::open(&r.folder)?.ok_or_else(|| {
        ApiError::conflict(
            "folder gone",
            format!("folder: {} no longer exists", r.folder.display()),
        )
    })?;
    let text = folder::manifest_text(&dir, &r.folder)?;
    let m = folder::parse_manifest(&text)?;
    if m.name != name {
        return Err(ApiError::conflict(
            "name changed",
            format!(
                "name: app.toml now names {:?}, registered as {name:?} (register the folder again under its new name)",
                m.name
            ),
        ));
    }
    if r.versions.iter().any(|v| v.version == m.version) {
        return Err(ApiError::conflict(
            "version deployed",
            format!(
                "version: {} is deployed already (raise version in app.toml)",
                m.version
            ),
        ));
    }
    let old = match &r.deployed {
        Some(v) => deployed_manifest(d, name, v)?.needs,
        None => None,
    };
    let added = added_needs(
        r.deployed
            .as_ref()
            .map(|_| old.clone().unwrap_or_default())
            .as_ref(),
        &m.needs.clone().unwrap_or_default(),
    );
    let unseen: Vec<&String> = added.iter().filter(|a| !confirmed.contains(a)).collect();
    if !unseen.is_empty() {
        let unseen: Vec<&str> = unseen.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::conflict(
            "needs added",
            format!(
                "the deploy adds {}: show them to the person, then deploy with confirmAddedNeeds listing what they accepted",
                unseen.join(", ")
            ),
        ));
    }
    check_secrets(d, name, m.needs.as_ref(), "deploy")?;
    app_files(d, m.needs.as_ref())?;
    let versions = app_dir(d, name).join("versions");
    fsutil::create_dir_private(&versions).map_err(ApiError::internal)?;
    let staged = tempfile::Builder::new()
        .prefix(".deploy-")
        .tempdir_in(&versions)
        .map_err(ApiError::internal)?;
    let installed = folder::install(&dir, &r.folder, &m, &text, staged.path())?;
    Ok(Staged {
        dir: staged,
        manifest: installed.manifest,
        backend: installed.backend,
    })
}

/// The rules behind `POST /v1/apps/{name}/rollback`: an earlier version served again, its
/// secrets set.
pub async fn rollback(d: &Daemon, name: &str, version: &str) -> ApiResult<AppInfo> {
    let lock = d.apps.lock_of(name);
    let _g = lock.lock().await;
    let mut r = record(d, name)?.ok_or_else(|| not_found(name))?;
    if !r.versions.iter().any(|v| v.version == version) {
        return Err(ApiError::not_found(format!(
            "version: {name} {version} was never deployed (GET /v1/apps/{name} lists its versions)"
        )));
    }
    let m = deployed_manifest(d, name, version)?;
    check_secrets(d, name, m.needs.as_ref(), "rollback")?;
    r.deployed = Some(version.to_string());
    save(d, name, &r)?;
    log(d, name, &format!("rolled back to {version}"));
    backend::stop(d, name, &format!("rolled back to {version}")).await;
    get(d, name).await
}

/// `PUT /v1/apps/{name}/secrets/{NAME}`: a running backend stops (H.2), the next request
/// starts it with the new value.
pub async fn set_secret(d: &Daemon, name: &str, secret: &str, value: &str) -> ApiResult<()> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    handler_contracts::validate::validate_miniapp_secret_name("name", secret)
        .map_err(|e| ApiError::bad_request("invalid secret name", e.to_string()))?;
    d.secrets
        .set(
            &secret_path(name, secret),
            value,
            Some(format!("mini app {name}'s {secret}")),
            Vec::new(),
        )
        .map_err(|e| ApiError::bad_request("secret refused", e.to_string()))?;
    backend::stop(d, name, &format!("{secret} changed")).await;
    Ok(())
}

/// `DELETE /v1/apps/{name}/secrets/{NAME}` (404 when it had no value).
pub async fn remove_secret(d: &Daemon, name: &str, secret: &str) -> ApiResult<()> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    let had = d
        .secrets
        .remove(&secret_path(name, secret))
        .map_err(ApiError::internal)?;
    if had {
        backend::stop(d, name, &format!("{secret} removed")).await;
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "{name} has no secret {secret}"
        )))
    }
}

/// `POST /v1/apps/{name}/login`: a one-time address on the app's origin.
pub fn login(d: &Daemon, name: &str) -> ApiResult<String> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    let code = d.apps.new_code(name, std::time::Instant::now());
    Ok(format!("{}_handler/login?code={code}", url_of(d, name)))
}

/// `POST /v1/apps/{name}/start`: 404 an unknown app or one whose served version has no backend.
pub async fn start(d: &Daemon, name: &str) -> ApiResult<()> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    if !serves_backend(d, name) {
        return Err(ApiError::not_found(format!(
            "{name} serves no backend (nothing deployed, or a UI-only version)"
        )));
    }
    backend::ensure(d, name).await.map(|_| ())
}

/// `POST /v1/apps/{name}/stop`.
pub async fn stop(d: &Daemon, name: &str) -> ApiResult<()> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    backend::stop(d, name, "stopped through the API").await;
    Ok(())
}

/// `GET /v1/apps/{name}/logs`: the app's log (Handler's own file).
pub fn logs(d: &Daemon, name: &str) -> ApiResult<String> {
    record(d, name)?.ok_or_else(|| not_found(name))?;
    Ok(fsutil::read_optional(&app_dir(d, name).join("app.log"))
        .map_err(ApiError::internal)?
        .unwrap_or_default())
}

/// The UI folder of the version `name` serves now (`None`: nothing deployed).
pub fn served_ui(d: &Daemon, name: &str) -> ApiResult<Option<PathBuf>> {
    let Some(r) = record(d, name)? else {
        return Ok(None);
    };
    let Some(v) = r.deployed else {
        return Ok(None);
    };
    let m = deployed_manifest(d, name, &v)?;
    Ok(Some(version_dir(d, name, &v).join(m.ui_dir())))
}

/// Whether the version `name` serves has a backend.
pub fn serves_backend(d: &Daemon, name: &str) -> bool {
    served(d, name).is_some_and(|s| s.backend)
}

/// Whether `name` is a registered app.
pub fn exists(d: &Daemon, name: &str) -> bool {
    served(d, name).is_some()
}
