//! The toolbox's caches at launch (B.6, D.8): the declarations of the user's toolbox.toml (the
//! platform's default toolbox when the user's folder has none), placed where the agent's
//! project chooses: `project` → `<data>/caches/<project id>/<name>`, `global` →
//! `$HANDLER_CACHE_DIR/<name>` (ad-hoc agents too), `off` → none. Missing folders are made.
//! Settings → Caches (decision 0087) measures and empties them through the runtime's `cache`
//! verbs (A.9) only: the folders hold files of the sandboxes' inner ids.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::control::{CacheChoice, CacheFolder};
use handler_contracts::harness::ToolboxManifest;
use handler_contracts::parse::from_toml;

use crate::daemon::config::DaemonConfig;
use crate::daemon::launch::launcher::{Launcher, LauncherError};
use crate::daemon::store::StoredProject;

/// The caches of a launch that cannot be placed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CacheError {
    /// The user's toolbox.toml is not a manifest.
    #[error(transparent)]
    Manifest(#[from] handler_contracts::DocumentError),
    /// The platform's default toolbox.toml is not (a bug of the build).
    #[error("the default toolbox.toml: {0}")]
    Default(toml::de::Error),
    /// The user's toolbox.toml cannot be read.
    #[error("{path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A cache's folder cannot be made or resolved.
    #[error("cache {name}: {path}: {error}")]
    Folder {
        /// The cache's name.
        name: String,
        /// Its folder.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// The toolbox's manifest: `<toolbox>/toolbox.toml`, else the platform's default.
pub(crate) fn toolbox_manifest(config: &DaemonConfig) -> Result<ToolboxManifest, CacheError> {
    let path = config.toolbox_dir.join("toolbox.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(from_toml::<ToolboxManifest>("toolbox/toolbox.toml", &text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            handler_harness::descriptors::toolbox_manifest().map_err(CacheError::Default)
        }
        Err(error) => Err(CacheError::Read {
            path: path.display().to_string(),
            error,
        }),
    }
}

/// Where a cache lives for an agent of `project` (none: an ad-hoc agent, global).
fn cache_folder(
    config: &DaemonConfig,
    project: Option<&StoredProject>,
    name: &str,
) -> Option<PathBuf> {
    match project.map(|p| (p.caches, p.id.as_str())) {
        Some((CacheChoice::Off, _)) => None,
        Some((CacheChoice::Project, id)) => Some(project_root(config, id).join(name)),
        Some((CacheChoice::Global, _)) | None => Some(config.cache_dir.join(name)),
    }
}

/// The caches a launch mounts: home path ("~/…") → host folder, each folder made when missing.
pub(crate) fn resolve(
    config: &DaemonConfig,
    project: Option<&StoredProject>,
) -> Result<BTreeMap<String, String>, CacheError> {
    let manifest = toolbox_manifest(config)?;
    let mut out = BTreeMap::new();
    for (name, decl) in &manifest.caches {
        let Some(dir) = cache_folder(config, project, name) else {
            continue;
        };
        let folder = |error| CacheError::Folder {
            name: name.clone(),
            path: dir.display().to_string(),
            error,
        };
        std::fs::create_dir_all(&dir).map_err(folder)?;
        let dir = std::fs::canonicalize(&dir).map_err(folder)?;
        out.insert(decl.target.clone(), dir.display().to_string());
    }
    Ok(out)
}

/// A project's own caches folder: `<data>/caches/<project id>`.
pub(crate) fn project_root(config: &DaemonConfig, id: &str) -> PathBuf {
    config.data_dir.join("caches").join(id)
}

/// The folder as the runtime's verbs take it (canonical, as launches mount it); none when no
/// launch has made it yet.
pub(crate) fn existing(path: &str) -> Option<String> {
    std::fs::canonicalize(path)
        .ok()
        .filter(|p| p.is_dir())
        .map(|p| p.display().to_string())
}

/// Fills in each folder's size with one `cache size` of those that exist; a failure becomes
/// each one's `error` (never a size guessed from the host's own view).
pub(crate) async fn measure(launcher: &dyn Launcher, folders: &mut [&mut CacheFolder]) {
    let real: Vec<Option<String>> = folders.iter().map(|f| existing(&f.path)).collect();
    let paths: Vec<String> = real.iter().flatten().cloned().collect();
    if paths.is_empty() {
        return;
    }
    let sizes = match launcher.cache_size(&paths).await {
        Ok(out) => parse_sizes(&out),
        Err(e) => {
            let e = e.to_string();
            for (f, r) in folders.iter_mut().zip(&real) {
                if r.is_some() {
                    f.error = Some(e.clone());
                }
            }
            return;
        }
    };
    for (f, r) in folders.iter_mut().zip(&real) {
        if let Some(r) = r {
            match sizes.get(r) {
                Some(b) => f.bytes = Some(*b),
                None => f.error = Some(format!("cache size did not measure {r}")),
            }
        }
    }
}

/// `cache size`'s lines: path → bytes (other lines ignored).
fn parse_sizes(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["path"].as_str()?.to_string(), v["bytes"].as_u64()?)))
        .collect()
}

/// Empties the folders of `paths` that exist (`cache clear`: refused while a sandbox mounts one).
pub(crate) async fn empty(launcher: &dyn Launcher, paths: &[String]) -> Result<(), LauncherError> {
    let real: Vec<String> = paths.iter().filter_map(|p| existing(p)).collect();
    if real.is_empty() {
        return Ok(());
    }
    launcher.cache_clear(&real).await
}

#[cfg(test)]
mod tests {
    use super::parse_sizes;

    #[test]
    fn sizes_are_read_from_the_verbs_lines() {
        let out = "{\"path\":\"/a\",\"bytes\":12}\nnoise\n{\"path\":\"/b\",\"bytes\":0}\n";
        let m = parse_sizes(out);
        assert_eq!(m.get("/a"), Some(&12));
        assert_eq!(m.get("/b"), Some(&0));
        assert_eq!(m.len(), 2);
    }
}
