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
    /// The backend's entry file, relative to the app's folder and inside a folder of its own
    /// (default `server/main.ts`).
    #[schemars(regex(pattern = crate::patterns::RELATIVE_PATH_IN_DIR))]
    pub entry: String,
}

/// The built UI (H.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppUi {
    /// The built UI's folder, relative to the app's folder (default `ui/dist`).
    #[schemars(regex(pattern = crate::patterns::RELATIVE_PATH))]
    pub dir: String,
}

/// Access to a host file or folder (H.9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FileAccess {
    /// Read only.
    #[default]
    Ro,
    /// Read and write.
    Rw,
}

/// A host file or folder a mini app needs (H.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppFileNeed {
    /// The host path (`~/` allowed).
    #[schemars(length(min = 1))]
    pub path: String,
    /// Read only (the default) or read-write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FileAccess>,
}

/// What an app may reach beyond its data (H.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppNeeds {
    /// The hosts the backend may reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AllowEntry>,
    /// The secrets it is given, by the variable names it reads them from (H.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = crate::schema::rules::miniapp_secret_names)]
    pub secrets: Vec<String>,
    /// Host files or folders it is given (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub files: Vec<MiniAppFileNeed>,
    /// Whether it may send the person notifications.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notify: bool,
}

/// How a route is served (H.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RouteMode {
    /// The request waits for the backend's answer.
    Sync,
    /// The request is queued and answered at once; the backend handles it later.
    Queued,
}

/// `app.toml` (H.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MiniAppManifest {
    /// `handler.miniapp/v1`.
    pub api_version: MiniAppApiVersion,
    /// The app's name: a lowercase DNS label of 1–30 characters (H.1).
    #[schemars(regex(pattern = crate::patterns::MINIAPP_NAME))]
    pub name: String,
    /// Its version, a semantic version.
    #[schemars(regex(pattern = crate::patterns::SEMVER))]
    pub version: String,
    /// What it does, shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its backend's entry; default `server/main.ts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<MiniAppServer>,
    /// Its built UI's folder; default `ui/dist`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui: Option<MiniAppUi>,
    /// What it may reach beyond its own data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<MiniAppNeeds>,
    /// "POST /api/checkin" → sync | queued.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = {"pattern": crate::patterns::MINIAPP_ROUTE}))]
    pub routes: BTreeMap<String, RouteMode>,
    /// The memory and CPU its backend may use.
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
