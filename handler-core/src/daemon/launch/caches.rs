//! The toolbox's caches at launch (B.6, D.8): the declarations of the user's toolbox.toml (the
//! platform's default toolbox when the user's folder has none), placed where the agent's
//! project chooses: `project` → `<data>/caches/<project id>/<name>`, `global` →
//! `$HANDLER_CACHE_DIR/<name>` (ad-hoc agents too), `off` → none. Missing folders are made.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::control::CacheChoice;
use handler_contracts::harness::ToolboxManifest;
use handler_contracts::parse::from_toml;

use crate::daemon::config::DaemonConfig;
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
fn toolbox_manifest(config: &DaemonConfig) -> Result<ToolboxManifest, CacheError> {
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
        Some((CacheChoice::Project, id)) => {
            Some(config.data_dir.join("caches").join(id).join(name))
        }
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
