//! The contexts' file (`contexts.toml`, D.19): every context and its colour.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::control::ContextColor;

use crate::daemon::config::DaemonConfig;
use crate::daemon::store::tomldoc;

/// The contexts' file.
pub fn path(config: &DaemonConfig) -> PathBuf {
    config.config_dir.join("contexts.toml")
}

/// Every context and its colour.
pub fn read(config: &DaemonConfig) -> BTreeMap<String, ContextColor> {
    let doc = tomldoc::load(&path(config)).unwrap_or_default();
    doc.iter()
        .filter_map(|(k, v)| {
            let c = v.get("color")?.as_str()?;
            let color: ContextColor =
                serde_json::from_value(serde_json::Value::String(c.into())).ok()?;
            Some((k.to_string(), color))
        })
        .collect()
}
