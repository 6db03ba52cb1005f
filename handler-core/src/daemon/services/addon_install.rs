//! Installing addons (G.5): a source (`catalog:<name>` or an absolute folder) read whole into
//! memory under the archive limits (≤ 32 MiB, ≤ 2000 files, no link out, no device), named by
//! its digest, staged at `<state>/addon-staging/<digest>/<name>/` and validated as G.1; installed
//! into `$HANDLER_ADDONS_DIR/<name>/` only when it still has the digest the preview showed, and
//! recorded in `<config>/addons.lock.toml`. Only what Handler installed is replaced or removed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use handler_contracts::control::{
    AddonCatalogEntry, AddonInfo, AddonInstallRequest, AddonInstalled, AddonPreview,
    AddonPreviewRequest, AddonReplaces, AddonSlotInfo, BuildRequest, BuildState,
};
use handler_contracts::skill_archive::{MAX_BYTES, MAX_FILES};
use sha2::{Digest, Sha256};
use toml_edit::{DocumentMut, Item, Table};

use crate::daemon::config::DaemonConfig;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::addons::{AddonSet, LoadedAddon, read_addon};
use crate::daemon::store::catalog::valid_name;

/// One entry of a source, its path relative to the addon's top (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEntry {
    /// A folder.
    Dir(String),
    /// A regular file: its bytes and executable bit.
    File {
        /// Its path.
        path: String,
        /// Its content.
        bytes: Vec<u8>,
        /// Whether it is executable.
        exec: bool,
    },
    /// A symbolic link and its target (relative, staying inside the source).
    Link {
        /// Its path.
        path: String,
        /// Where it points.
        target: String,
    },
}

impl SourceEntry {
    fn path(&self) -> &str {
        match self {
            SourceEntry::Dir(p)
            | SourceEntry::File { path: p, .. }
            | SourceEntry::Link { path: p, .. } => p,
        }
    }
}

/// The digest of a source's content (G.5): every file's path, executable bit and bytes, every
/// link's target, in path order; folders add nothing of their own. 64 hex digits.
pub fn digest(entries: &[SourceEntry]) -> String {
    let mut sorted: Vec<&SourceEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path().cmp(b.path()));
    let mut h = Sha256::new();
    for e in sorted {
        match e {
            SourceEntry::Dir(_) => {}
            SourceEntry::File { path, bytes, exec } => {
                h.update(b"f\0");
                h.update(path.as_bytes());
                h.update([0, u8::from(*exec)]);
                h.update((bytes.len() as u64).to_be_bytes());
                h.update(bytes);
            }
            SourceEntry::Link { path, target } => {
                h.update(b"l\0");
                h.update(path.as_bytes());
                h.update([0]);
                h.update((target.len() as u64).to_be_bytes());
                h.update(target.as_bytes());
            }
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a link at `path` (relative to the top) pointing at `target` stays inside the top.
pub fn link_stays_inside(path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') {
        return false;
    }
    let mut depth: Vec<&str> = path.split('/').collect();
    depth.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            p => depth.push(p),
        }
    }
    true
}

fn refused(detail: impl Into<String>) -> ApiError {
    ApiError::unprocessable("source refused", detail)
}

struct Walk {
    out: Vec<SourceEntry>,
    bytes: u64,
}

fn walk(root: &Path, rel: &str, w: &mut Walk) -> ApiResult<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let rd = std::fs::read_dir(&dir).map_err(|e| refused(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for n in names {
        let name = n
            .to_str()
            .ok_or_else(|| refused(format!("{rel}: a name that is not UTF-8")))?;
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        if w.out.len() >= MAX_FILES {
            return Err(refused(format!("more than {MAX_FILES} files")));
        }
        let abs = root.join(&path);
        let m = std::fs::symlink_metadata(&abs).map_err(|e| refused(format!("{path}: {e}")))?;
        let t = m.file_type();
        if t.is_symlink() {
            let target = std::fs::read_link(&abs).map_err(|e| refused(format!("{path}: {e}")))?;
            let target = target.to_str().unwrap_or_default().to_string();
            if !link_stays_inside(&path, &target) {
                return Err(refused(format!(
                    "{path}: a link out of the addon ({target})"
                )));
            }
            w.out.push(SourceEntry::Link { path, target });
        } else if t.is_dir() {
            w.out.push(SourceEntry::Dir(path.clone()));
            walk(root, &path, w)?;
        } else if t.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let mut bytes = Vec::new();
            std::fs::File::open(&abs)
                .and_then(|f| f.take(MAX_BYTES + 1 - w.bytes).read_to_end(&mut bytes))
                .map_err(|e| refused(format!("{path}: {e}")))?;
            w.bytes += bytes.len() as u64;
            if w.bytes > MAX_BYTES {
                return Err(refused("more than 32 MiB"));
            }
            let exec = m.permissions().mode() & 0o111 != 0;
            w.out.push(SourceEntry::File { path, bytes, exec });
        } else {
            return Err(refused(format!("{path}: a device, socket or FIFO")));
        }
    }
    Ok(())
}

/// The entries below the addon's top: the source's own top when it has `addon.toml`, else its
/// only folder's (a forge's archive of a repository).
pub fn addon_top(entries: Vec<SourceEntry>) -> Result<Vec<SourceEntry>, String> {
    let has = |e: &SourceEntry, p: &str| matches!(e, SourceEntry::File { path, .. } if path == p);
    if entries.iter().any(|e| has(e, "addon.toml")) {
        return Ok(entries);
    }
    let tops: Vec<&SourceEntry> = entries.iter().filter(|e| !e.path().contains('/')).collect();
    let [SourceEntry::Dir(only)] = tops.as_slice() else {
        return Err("no addon.toml at its top or in its only folder".into());
    };
    let prefix = format!("{only}/");
    if !entries
        .iter()
        .any(|e| has(e, &format!("{prefix}addon.toml")))
    {
        return Err(format!("no addon.toml at its top or in {only}/"));
    }
    let strip = |p: &str| p.strip_prefix(&prefix).map(str::to_string);
    Ok(entries
        .into_iter()
        .filter_map(|e| match e {
            SourceEntry::Dir(p) => strip(&p).map(SourceEntry::Dir),
            SourceEntry::File { path, bytes, exec } => {
                strip(&path).map(|path| SourceEntry::File { path, bytes, exec })
            }
            SourceEntry::Link { path, target } => {
                strip(&path).map(|path| SourceEntry::Link { path, target })
            }
        })
        .collect())
}

/// Where a source's files are: a catalog entry's folder, or the absolute folder given.
fn source_dir(config: &DaemonConfig, source: &str) -> ApiResult<PathBuf> {
    let bad = |d: &str| ApiError::bad_request("source invalid", format!("source: {d}"));
    if let Some(name) = source.strip_prefix("catalog:") {
        if !valid_name(name) || !config.catalog_dir.join(name).join("addon.toml").is_file() {
            return Err(ApiError::not_found(format!("catalog addon {name:?}")));
        }
        return Ok(config.catalog_dir.join(name));
    }
    if source.starts_with("https://") {
        return Err(bad(
            "an https:// archive is not supported by this Handler yet",
        ));
    }
    let p = PathBuf::from(source);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(bad("catalog:<name> or an absolute folder"));
    }
    if !p.is_dir() {
        return Err(bad(&format!("{source} is not a folder")));
    }
    Ok(p)
}

/// A source read whole: its entries below the addon's top, their digest, the addon's name.
struct Read {
    entries: Vec<SourceEntry>,
    digest: String,
    name: String,
}

fn read_source(config: &DaemonConfig, source: &str) -> ApiResult<Read> {
    let root = source_dir(config, source)?;
    let mut w = Walk {
        out: Vec::new(),
        bytes: 0,
    };
    walk(&root, "", &mut w)?;
    let entries = addon_top(w.out).map_err(refused)?;
    let digest = digest(&entries);
    let text = entries
        .iter()
        .find_map(|e| match e {
            SourceEntry::File { path, bytes, .. } if path == "addon.toml" => Some(bytes),
            _ => None,
        })
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let name = text
        .parse::<DocumentMut>()
        .ok()
        .and_then(|d| d.get("name").and_then(Item::as_str).map(str::to_string))
        .ok_or_else(|| refused("addon.toml: no name"))?;
    if !valid_name(&name) {
        return Err(refused(format!("addon.toml: name {name:?} is not a name")));
    }
    Ok(Read {
        entries,
        digest,
        name,
    })
}

fn write_tree(dir: &Path, entries: &[SourceEntry]) -> ApiResult<()> {
    use super::skills::{make_dir, write_file};
    make_dir(dir)?;
    for e in entries {
        match e {
            SourceEntry::Dir(p) => make_dir(&dir.join(p))?,
            SourceEntry::File { path, bytes, exec } => write_file(&dir.join(path), bytes, *exec)?,
            SourceEntry::Link { path, target } => {
                let p = dir.join(path);
                if let Some(parent) = p.parent() {
                    make_dir(parent)?;
                }
                std::os::unix::fs::symlink(target, &p).map_err(ApiError::internal)?;
            }
        }
    }
    Ok(())
}

/// Stages a read source at `<state>/addon-staging/<digest>/<name>/` and validates it (G.1).
fn stage(config: &DaemonConfig, r: &Read) -> ApiResult<LoadedAddon> {
    let top = config.state_dir.join("addon-staging").join(&r.digest);
    if top.exists() {
        std::fs::remove_dir_all(&top).map_err(ApiError::internal)?;
    }
    let dir = top.join(&r.name);
    write_tree(&dir, &r.entries)?;
    let a = read_addon(&dir, &r.name, false);
    if let Err(e) = &a.manifest {
        return Err(ApiError::unprocessable("addon invalid", e.clone()));
    }
    Ok(a)
}

/// An installed addon's lock entry (`[addons.<name>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    /// The source it was installed from.
    pub source: String,
    /// The digest of what was installed.
    pub digest: String,
    /// When (RFC 3339).
    pub installed_at: String,
}

fn lock_path(config: &DaemonConfig) -> PathBuf {
    config.config_dir.join("addons.lock.toml")
}

fn read_lock_doc(config: &DaemonConfig) -> ApiResult<DocumentMut> {
    match std::fs::read_to_string(lock_path(config)) {
        Ok(t) => t
            .parse::<DocumentMut>()
            .map_err(|e| ApiError::internal(format!("{}: {e}", lock_path(config).display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DocumentMut::new()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// The installed addons, by name, as the lock file records them.
pub fn read_lock(config: &DaemonConfig) -> BTreeMap<String, LockEntry> {
    let Ok(doc) = read_lock_doc(config) else {
        return BTreeMap::new();
    };
    let Some(t) = doc.get("addons").and_then(Item::as_table) else {
        return BTreeMap::new();
    };
    t.iter()
        .filter_map(|(k, v)| {
            let s = |f: &str| v.get(f).and_then(Item::as_str).map(str::to_string);
            Some((
                k.to_string(),
                LockEntry {
                    source: s("source")?,
                    digest: s("digest")?,
                    installed_at: s("installedAt").unwrap_or_default(),
                },
            ))
        })
        .collect()
}

fn write_lock(config: &DaemonConfig, name: &str, entry: Option<&LockEntry>) -> ApiResult<()> {
    let mut doc = read_lock_doc(config)?;
    if doc.get("addons").and_then(Item::as_table).is_none() {
        let mut t = Table::new();
        t.set_implicit(true);
        doc["addons"] = Item::Table(t);
    }
    let addons = doc["addons"]
        .as_table_mut()
        .ok_or_else(|| ApiError::internal("addons"))?;
    match entry {
        Some(e) => {
            let mut t = Table::new();
            t.insert("source", toml_edit::value(e.source.as_str()));
            t.insert("digest", toml_edit::value(e.digest.as_str()));
            t.insert("installedAt", toml_edit::value(e.installed_at.as_str()));
            addons.insert(name, Item::Table(t));
        }
        None => {
            addons.remove(name);
        }
    }
    std::fs::create_dir_all(&config.config_dir).map_err(ApiError::internal)?;
    let tmp = lock_path(config).with_extension("toml.tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(ApiError::internal)?;
    std::fs::rename(&tmp, lock_path(config)).map_err(ApiError::internal)
}

fn slots<'a>(
    it: impl Iterator<Item = (&'a String, bool, &'a Option<String>)>,
) -> Vec<AddonSlotInfo> {
    it.map(|(name, required, description)| AddonSlotInfo {
        name: name.clone(),
        required,
        description: description.clone(),
    })
    .collect()
}

/// What has the name now: a built-in addon, an installed one, the user's own.
fn replaces(config: &DaemonConfig, name: &str) -> Option<AddonReplaces> {
    let set = AddonSet::read(config);
    let a = set.addons.get(name)?;
    Some(if a.builtin {
        AddonReplaces::Builtin
    } else if read_lock(config).contains_key(name) {
        AddonReplaces::Installed
    } else {
        AddonReplaces::Own
    })
}

fn preview_of(
    config: &DaemonConfig,
    source: &str,
    r: &Read,
    a: &LoadedAddon,
) -> ApiResult<AddonPreview> {
    let m = a
        .manifest
        .as_ref()
        .map_err(|e| ApiError::unprocessable("addon invalid", e.clone()))?;
    let mut env: Vec<String> = m.env.keys().cloned().collect();
    env.extend(m.settings.values().map(|s| s.env.clone()));
    env.extend(m.secret_slots.values().map(|s| s.env.clone()));
    env.sort();
    Ok(AddonPreview {
        source: source.to_string(),
        digest: r.digest.clone(),
        name: r.name.clone(),
        description: m.description.clone(),
        image: m.image.clone(),
        commands: m.commands.clone(),
        env,
        settings: slots(
            m.settings
                .iter()
                .map(|(n, s)| (n, s.required, &s.description)),
        ),
        secret_slots: slots(
            m.secret_slots
                .iter()
                .map(|(n, s)| (n, s.required, &s.description)),
        ),
        egress: m.egress.iter().map(ToString::to_string).collect(),
        mcp: m.mcp.as_ref().map(|x| x.command.clone()),
        skills: a.skills.clone(),
        replaces: replaces(config, &r.name),
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
}

/// The rules behind POST /v1/addons/preview: the source read, staged and validated; what
/// installing it would bring.
pub async fn preview(app: &AppState, req: AddonPreviewRequest) -> ApiResult<AddonPreview> {
    let config = app.config.clone();
    blocking(move || {
        let r = read_source(&config, &req.source)?;
        let a = stage(&config, &r)?;
        preview_of(&config, &req.source, &r, &a)
    })
    .await
}

/// The digest Handler's catalog has now for `name`, when it ships it.
fn catalog_digest(config: &DaemonConfig, name: &str) -> Option<String> {
    read_source(config, &format!("catalog:{name}"))
        .ok()
        .map(|r| r.digest)
}

/// Fills `source` and `updateAvailable` of the user's addons from the lock file (G.5).
pub fn annotate(config: &DaemonConfig, infos: &mut [AddonInfo]) {
    let lock = read_lock(config);
    for i in infos.iter_mut().filter(|i| !i.builtin) {
        if let Some(e) = lock.get(&i.name) {
            i.source = Some(e.source.clone());
            i.update_available = e
                .source
                .strip_prefix("catalog:")
                .and_then(|n| catalog_digest(config, n))
                .is_some_and(|d| d != e.digest);
        }
    }
}

/// The rules behind GET /v1/addon-catalog: the catalog Handler ships, installed or not.
pub async fn catalog(app: &AppState) -> Vec<AddonCatalogEntry> {
    let lock = read_lock(&app.config);
    let Ok(rd) = std::fs::read_dir(&app.config.catalog_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| valid_name(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let a = read_addon(&app.config.catalog_dir.join(&name), &name, true);
            AddonCatalogEntry {
                description: a.manifest.ok().and_then(|m| m.description),
                installed: lock.contains_key(&name),
                name,
            }
        })
        .collect()
}

/// Copies the staged addon into `$HANDLER_ADDONS_DIR/<name>/` through a hidden folder renamed
/// into place (an installed one before it goes: an update).
fn put_in_place(config: &DaemonConfig, r: &Read) -> ApiResult<PathBuf> {
    super::skills::make_dir(&config.addons_dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(&config.addons_dir)
        .map_err(ApiError::internal)?;
    write_tree(&tmp.path().join(&r.name), &r.entries)?;
    let dir = config.addons_dir.join(&r.name);
    let old = tmp.path().join(".old");
    let had = std::fs::symlink_metadata(&dir).is_ok();
    if had {
        std::fs::rename(&dir, &old).map_err(ApiError::internal)?;
    }
    if let Err(e) = std::fs::rename(tmp.path().join(&r.name), &dir) {
        if had {
            let _ = std::fs::rename(&old, &dir);
        }
        return Err(ApiError::internal(e));
    }
    Ok(dir)
}

fn install_blocking(config: &DaemonConfig, req: &AddonInstallRequest) -> ApiResult<String> {
    let r = read_source(config, &req.source)?;
    if r.digest != req.digest {
        return Err(ApiError::unprocessable(
            "digest differs",
            format!(
                "digest: {} now has other content than the preview's ({})",
                req.source, r.digest
            ),
        ));
    }
    if replaces(config, &r.name) == Some(AddonReplaces::Own) {
        return Err(ApiError::unprocessable(
            "addon is the user's own",
            format!(
                "name: {:?} is the user's own addon ({}); Handler does not replace it",
                r.name,
                config.addons_dir.join(&r.name).display()
            ),
        ));
    }
    stage(config, &r)?;
    put_in_place(config, &r)?;
    let entry = LockEntry {
        source: req.source.clone(),
        digest: r.digest.clone(),
        installed_at: crate::daemon::fsutil::now_rfc3339(),
    };
    write_lock(config, &r.name, Some(&entry))?;
    let _ = std::fs::remove_dir_all(config.state_dir.join("addon-staging").join(&r.digest));
    Ok(r.name)
}

/// The image's first build (G.4), unless another build runs; a refusal is logged, never an
/// install failure.
async fn first_build(app: &AppState, name: &str) -> Option<handler_contracts::control::Build> {
    let running = app
        .builds
        .list()
        .map(|v| v.iter().any(|b| b.state == BuildState::Running))
        .unwrap_or(true);
    if running {
        tracing::info!(addon = %name, "another build runs: the addon's first build not started");
        return None;
    }
    let req = BuildRequest {
        target: format!("addon:{name}"),
    };
    match super::images::start(app, req).await {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(addon = %name, error = ?e, "the addon's first build was not started");
            None
        }
    }
}

/// The rules behind POST /v1/addons/install: 422 unless the source still has the digest, or
/// when the user's own addon has the name; installed, recorded, its first build started.
pub async fn install(app: &AppState, req: AddonInstallRequest) -> ApiResult<AddonInstalled> {
    let _w = app.write_lock.lock().await;
    let config = app.config.clone();
    let name = blocking(move || install_blocking(&config, &req)).await?;
    tracing::info!(addon = %name, "addon installed");
    let has_image = AddonSet::read(&app.config)
        .addons
        .get(&name)
        .and_then(|a| a.manifest.as_ref().ok())
        .is_some_and(|m| m.image.is_some());
    let build = if has_image {
        first_build(app, &name).await
    } else {
        None
    };
    let addon = super::addons::get_addon(app, name).await?;
    Ok(AddonInstalled { addon, build })
}

/// The rules behind DELETE /v1/addons/{name}: an installed addon only (409 for a built-in or
/// the user's own, or while a binding uses it); its folder and lock entry go.
pub async fn remove(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let set = AddonSet::read(&app.config);
    let a = set
        .addons
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("addon {name:?}")))?;
    if a.builtin {
        return Err(ApiError::conflict(
            "addon is built-in",
            format!("addon {name:?} ships with Handler"),
        ));
    }
    if !read_lock(&app.config).contains_key(&name) {
        return Err(ApiError::conflict(
            "addon is the user's own",
            format!(
                "addon {name:?} was not installed by Handler ({})",
                a.dir.display()
            ),
        ));
    }
    let users: Vec<&str> = set
        .bindings
        .values()
        .filter(|b| b.binding.as_ref().is_some_and(|x| x.addon == name))
        .map(|b| b.name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(ApiError::conflict(
            "addon in use",
            format!("addon {name:?} is used by binding(s) {}", users.join(", ")),
        ));
    }
    std::fs::remove_dir_all(&a.dir).map_err(ApiError::internal)?;
    write_lock(&app.config, &name, None)?;
    if let Some(image) = a.manifest.as_ref().ok().and_then(|m| m.image.clone()) {
        // The runtime's image remove (A.7) is not wired here yet: the image stays.
        tracing::info!(addon = %name, %image, "addon removed; its image is kept");
    } else {
        tracing::info!(addon = %name, "addon removed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, bytes: &[u8], exec: bool) -> SourceEntry {
        SourceEntry::File {
            path: path.into(),
            bytes: bytes.to_vec(),
            exec,
        }
    }

    #[test]
    fn the_digest_names_paths_bits_bytes_and_link_targets() {
        let base = vec![f("addon.toml", b"a", false), f("bin/x", b"b", true)];
        let d = digest(&base);
        assert_eq!(d.len(), 64);
        let mut reordered = base.clone();
        reordered.reverse();
        reordered.push(SourceEntry::Dir("bin".into()));
        assert_eq!(digest(&reordered), d, "order and folders do not change it");
        for other in [
            vec![f("addon.toml", b"a", false), f("bin/x", b"b", false)],
            vec![f("addon.toml", b"a", false), f("bin/y", b"b", true)],
            vec![f("addon.toml", b"a", false), f("bin/x", b"c", true)],
        ] {
            assert_ne!(digest(&other), d, "{other:?}");
        }
        let link = |t: &str| {
            let mut v = base.clone();
            v.push(SourceEntry::Link {
                path: "l".into(),
                target: t.into(),
            });
            digest(&v)
        };
        assert_ne!(link("bin/x"), link("addon.toml"));
    }

    #[test]
    fn links_must_stay_inside() {
        assert!(link_stays_inside("bin/x", "../lib/x"));
        assert!(link_stays_inside("x", "./y"));
        assert!(!link_stays_inside("bin/x", "../../etc/passwd"));
        assert!(!link_stays_inside("x", "/etc/passwd"));
        assert!(!link_stays_inside("x", ".."));
    }

    #[test]
    fn the_top_is_the_only_folder_when_addon_toml_is_not_at_the_top() {
        let v = vec![
            SourceEntry::Dir("repo-main".into()),
            f("repo-main/addon.toml", b"a", false),
        ];
        assert_eq!(addon_top(v).unwrap(), vec![f("addon.toml", b"a", false)]);
        let two = vec![SourceEntry::Dir("a".into()), SourceEntry::Dir("b".into())];
        assert!(addon_top(two).is_err());
    }
}
