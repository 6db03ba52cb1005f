//! The knowledge folders (D.5): the root (`knowledge.toml`, else `~/knowledge`) and the
//! check of an agent's folders against it.

use handler_contracts::control::KnowledgeRootSource;
use handler_contracts::validate::normalize_knowledge_folders;

use crate::daemon::config::DaemonConfig;
use crate::daemon::problem::{ApiError, ApiResult};

/// The knowledge root (D.5 K4).
pub fn knowledge_root(config: &DaemonConfig) -> std::path::PathBuf {
    root_and_source(config).0
}

/// The knowledge root and where it comes from (K4): `$HANDLER_KNOWLEDGE_DIR`, else the root of
/// `<config>/knowledge.toml`, else `~/knowledge`. Read on every use.
pub fn root_and_source(config: &DaemonConfig) -> (std::path::PathBuf, KnowledgeRootSource) {
    if let Some(d) = &config.knowledge_dir {
        return (d.clone(), KnowledgeRootSource::Env);
    }
    let doc = crate::daemon::store::tomldoc::load(&config_path(config)).unwrap_or_default();
    if let Some(r) = doc.get("root").and_then(|v| v.as_str()) {
        let home = config.home.to_string_lossy().into_owned();
        if let Ok(p) = handler_contracts::validate::expand_home("root", r, &home) {
            return (p.into(), KnowledgeRootSource::Config);
        }
    }
    (config.home.join("knowledge"), KnowledgeRootSource::Default)
}

/// `<config>/knowledge.toml`.
pub fn config_path(config: &DaemonConfig) -> std::path::PathBuf {
    config.config_dir.join("knowledge.toml")
}

/// K1–K3: the folders, normalized, each a real folder inside the root (symbolic links
/// resolved).
pub fn check_knowledge(config: &DaemonConfig, folders: &[String]) -> ApiResult<Vec<String>> {
    if folders.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |d: String| ApiError::bad_request("knowledge unusable", d);
    let root = knowledge_root(config);
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
