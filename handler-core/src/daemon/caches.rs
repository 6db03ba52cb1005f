//! The toolbox's caches at launch (B.6, D.8): the declarations of the user's toolbox.toml (the
//! platform's default toolbox when the user's folder has none), placed where the agent's
//! project chooses: `project` → `<data>/caches/<project id>/<name>`, `global` →
//! `$HANDLER_CACHE_DIR/<name>` (ad-hoc agents too), `off` → none. Missing folders are made.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::control::CacheChoice;
use handler_contracts::harness::ToolboxManifest;
use handler_contracts::parse::from_toml;

use super::config::DaemonConfig;
use super::store::StoredProject;

/// The toolbox's manifest: `<toolbox>/toolbox.toml`, else the platform's default.
pub fn toolbox_manifest(config: &DaemonConfig) -> Result<ToolboxManifest, String> {
    let path = config.toolbox_dir.join("toolbox.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            from_toml::<ToolboxManifest>("toolbox/toolbox.toml", &text).map_err(|e| e.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            handler_harness::descriptors::toolbox_manifest()
                .map_err(|e| format!("the default toolbox.toml: {e}"))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Where a cache lives for an agent of `project` (none: an ad-hoc agent, global).
pub fn cache_folder(
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
pub fn resolve(
    config: &DaemonConfig,
    project: Option<&StoredProject>,
) -> Result<BTreeMap<String, String>, String> {
    let manifest = toolbox_manifest(config)?;
    let mut out = BTreeMap::new();
    for (name, decl) in &manifest.caches {
        let Some(dir) = cache_folder(config, project, name) else {
            continue;
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cache {name}: {}: {e}", dir.display()))?;
        let dir = std::fs::canonicalize(&dir)
            .map_err(|e| format!("cache {name}: {}: {e}", dir.display()))?;
        out.insert(decl.target.clone(), dir.display().to_string());
    }
    Ok(out)
}
