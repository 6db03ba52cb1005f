//! Where a provider's file and key are kept (D.10).

use std::path::PathBuf;

use crate::daemon::config::DaemonConfig;

/// A provider's document.
pub fn provider_path(config: &DaemonConfig, name: &str) -> PathBuf {
    config.providers_dir.join(format!("{name}.toml"))
}

/// The store path of a provider's key.
pub fn key_secret_path(name: &str) -> String {
    format!("providers/{name}/apiKey")
}
