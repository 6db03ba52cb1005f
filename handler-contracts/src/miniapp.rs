//! Contract H: the mini app manifest, `app.toml` (H.1). Hand-written: unknown keys are errors.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::allow::AllowEntry;
use crate::api_version::MiniAppApiVersion;
use crate::sandbox::Resources;

/// The backend's entry (H.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppServer {
    #[schemars(regex(pattern = crate::patterns::RELATIVE_PATH_IN_DIR))]
    pub entry: String,
}

/// The built UI (H.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppUi {
    #[schemars(regex(pattern = crate::patterns::RELATIVE_PATH))]
    pub dir: String,
}

/// Access to a host file or folder (H.9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FileAccess {
    #[default]
    Ro,
    Rw,
}

/// A host file or folder a mini app needs (H.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppFileNeed {
    #[schemars(length(min = 1))]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FileAccess>,
}

/// What an app may reach beyond its data (H.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppNeeds {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::schema::rules::miniapp_secret_names)]
    pub secrets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub files: Vec<MiniAppFileNeed>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notify: bool,
}

/// How a route is served (H.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RouteMode {
    Sync,
    Queued,
}

/// `app.toml` (H.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppManifest {
    pub api_version: MiniAppApiVersion,
    #[schemars(regex(pattern = crate::patterns::MINIAPP_NAME))]
    pub name: String,
    #[schemars(regex(pattern = crate::patterns::SEMVER))]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<MiniAppServer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui: Option<MiniAppUi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<MiniAppNeeds>,
    /// "POST /api/checkin" → sync | queued.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = {"pattern": crate::patterns::MINIAPP_ROUTE}))]
    pub routes: BTreeMap<String, RouteMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

impl MiniAppManifest {
    /// The server entry, default `server/main.ts`.
    pub fn server_entry(&self) -> &str {
        self.server
            .as_ref()
            .map_or("server/main.ts", |s| s.entry.as_str())
    }
    /// The UI folder, default `ui/dist`.
    pub fn ui_dir(&self) -> &str {
        self.ui.as_ref().map_or("ui/dist", |u| u.dir.as_str())
    }
}
