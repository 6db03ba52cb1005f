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

/// A mini app's backend's state (H.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AppState {
    /// Not running (never started, idle-stopped, stopped, or an app without a backend).
    Stopped,
    /// Started by a request, not yet healthy.
    Starting,
    /// Healthy and serving.
    Running,
    /// Did not start, or exited on its own: the next request tries again.
    Failed,
}

/// One deployed version of an app (H.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppVersion {
    /// The manifest's version.
    pub version: String,
    /// When it was deployed (RFC 3339).
    pub deployed_at: String,
    /// The runtime image it was deployed with (its tag); none for an app without a backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Whether it has a backend (its server entry's folder was there at deploy).
    pub backend: bool,
}

/// A secret an app's version declares (H.2): whether a value is set, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppSecretInfo {
    /// The variable's name.
    pub name: String,
    /// Whether the store holds a value for it (`apps/<app>/<name>`).
    pub set: bool,
}

/// The registered folder as it is now (H.2, H.6): what a deploy would install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppSource {
    /// The folder (absolute).
    pub folder: String,
    /// The folder's `app.toml` version, when it reads and is valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why the folder's `app.toml` does not read or is not valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a deploy of it adds to the deployed version's needs (`egress host:port`,
    /// `secret NAME`, `file PATH (mode)`, `notify`): a client asks the person first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_needs: Vec<String>,
}

/// `GET /v1/apps/{name}` (H.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppInfo {
    /// The app's name (its manifest's).
    pub name: String,
    /// What it does (the deployed version's, else the folder's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it is served: `http://<name>.localhost:<port>/`.
    pub url: String,
    /// Its backend's state.
    pub state: AppState,
    /// The version served now, if one is deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed: Option<String>,
    /// Every version deployed, oldest first (a rollback picks one).
    #[serde(default)]
    pub versions: Vec<AppVersion>,
    /// The deployed version's needs.
    #[serde(default)]
    pub needs: MiniAppNeeds,
    /// The secrets the deployed version declares, then those the folder's adds.
    #[serde(default)]
    pub secrets: Vec<AppSecretInfo>,
    /// The registered folder now.
    pub source: AppSource,
}

/// `POST /v1/apps`: register a folder an agent wrote (H.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppRegisterRequest {
    /// The app's folder (absolute; `app.toml` at its root).
    #[schemars(length(min = 1))]
    pub folder: String,
}

/// `POST /v1/apps/{name}/deploy` (H.2, H.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppDeployRequest {
    /// What the deploy adds to the needs as the person saw and accepted it (`source.addedNeeds`,
    /// each line as given there). A deploy that adds anything not listed is refused (409): a
    /// folder changed after the person looked is not deployed with needs nobody saw.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirm_added_needs: Vec<String>,
}

/// `POST /v1/apps/{name}/rollback` (H.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppRollbackRequest {
    /// A version deployed before.
    #[schemars(regex(pattern = crate::patterns::SEMVER))]
    pub version: String,
}

/// `PUT /v1/apps/{name}/secrets/{NAME}` (H.2): the value, which no answer ever shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppSecretRequest {
    /// The value.
    #[schemars(length(min = 1))]
    pub value: String,
}

/// What a backend with `needs.notify` sends on `HANDLER_APP_NOTIFY`, one JSON object a line
/// (H.9, decision 0160). Plain text; hostile data to handlerd, checked by [`AppNotifyMessage::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppNotifyMessage {
    /// 1–80 characters.
    pub title: String,
    /// At most 500 characters.
    #[serde(default)]
    pub body: String,
}

/// The longest notification line read, newline excluded.
pub const NOTIFY_LINE_MAX: usize = 4096;
/// The longest title, in characters.
pub const NOTIFY_TITLE_MAX: usize = 80;
/// The longest body, in characters.
pub const NOTIFY_BODY_MAX: usize = 500;

/// Why a notification line was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyRefusal {
    /// Not the JSON object of [`AppNotifyMessage`].
    #[error("not a notification ({0})")]
    NotJson(String),
    /// A field too long, empty or with control characters.
    #[error("{field}: {why}")]
    Field {
        /// `title` or `body`.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

impl AppNotifyMessage {
    /// Reads one line the backend sent (its newline removed): the JSON object, its title 1–80
    /// and body at most 500 characters, neither with control characters.
    pub fn parse(line: &str) -> Result<Self, NotifyRefusal> {
        let m: Self = serde_json::from_str(line).map_err(|e| {
            // serde's message names the field or position, never echoes the whole line.
            NotifyRefusal::NotJson(e.to_string().chars().take(120).collect())
        })?;
        let check = |field: &'static str, v: &str, min: usize, max: usize| {
            let n = v.chars().count();
            if n < min || n > max {
                return Err(NotifyRefusal::Field {
                    field,
                    why: format!("{n} characters, {min} to {max} allowed"),
                });
            }
            if v.chars().any(char::is_control) {
                return Err(NotifyRefusal::Field {
                    field,
                    why: "control characters are not allowed".into(),
                });
            }
            Ok(())
        };
        check("title", &m.title, 1, NOTIFY_TITLE_MAX)?;
        check("body", &m.body, 0, NOTIFY_BODY_MAX)?;
        Ok(m)
    }
}

/// A notification an app sent the person (H.9): `GET /v1/apps/{name}/notifications`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppNotification {
    /// When handlerd took it (RFC 3339).
    pub at: String,
    /// The version whose backend sent it.
    pub version: String,
    /// Its title.
    pub title: String,
    /// Its text (may be empty).
    #[serde(default)]
    pub body: String,
}

/// `GET /v1/apps/{name}/notifications`: the last 50, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppNotifications {
    /// Oldest first.
    pub notifications: Vec<AppNotification>,
}

/// `POST /v1/apps/{name}/login`: a one-time address that logs the browser in to the app's
/// origin (H.4; decision 0157).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppLogin {
    /// Open it once, within a minute.
    pub url: String,
}

/// A need as a deploy shows it (`egress host:port`, `secret NAME`, `file PATH (ro|rw)`,
/// `notify`).
fn need_lines(n: &MiniAppNeeds) -> Vec<String> {
    let mut out: Vec<String> = n.egress.iter().map(|e| format!("egress {e}")).collect();
    out.extend(n.secrets.iter().map(|s| format!("secret {s}")));
    out.extend(n.files.iter().map(|f| {
        let mode = match f.mode.unwrap_or_default() {
            FileAccess::Ro => "ro",
            FileAccess::Rw => "rw",
        };
        format!("file {} ({mode})", f.path)
    }));
    if n.notify {
        out.push("notify".into());
    }
    out
}

/// What `new` needs that `old` did not (H.2's `addedNeeds`), in the manifest's order; a file
/// once read-only now read-write counts as added, the other way not.
pub fn added_needs(old: Option<&MiniAppNeeds>, new: &MiniAppNeeds) -> Vec<String> {
    let empty = MiniAppNeeds::default();
    let old = old.unwrap_or(&empty);
    let before = need_lines(old);
    let had_file = |path: &str, rw: bool| {
        old.files
            .iter()
            .any(|f| f.path == path && (!rw || f.mode == Some(FileAccess::Rw)))
    };
    let mut out: Vec<String> = need_lines(&MiniAppNeeds {
        files: Vec::new(),
        ..new.clone()
    })
    .into_iter()
    .filter(|l| !before.contains(l))
    .collect();
    let notify = out.iter().position(|l| l == "notify");
    let notify = notify.map(|i| out.remove(i));
    for f in &new.files {
        let rw = f.mode == Some(FileAccess::Rw);
        if !had_file(&f.path, rw) {
            out.extend(need_lines(&MiniAppNeeds {
                files: vec![f.clone()],
                ..MiniAppNeeds::default()
            }));
        }
    }
    out.extend(notify);
    out
}

#[cfg(test)]
mod tests {
    use super::AppNotifyMessage;

    #[test]
    fn a_notification_line_is_checked_as_hostile_data() {
        let ok = AppNotifyMessage::parse(r#"{"title": "Build red", "body": "main failed"}"#);
        assert_eq!(ok.unwrap().body, "main failed");
        assert!(AppNotifyMessage::parse(r#"{"title": "No body"}"#).is_ok());
        let refused = |l: &str| AppNotifyMessage::parse(l).unwrap_err().to_string();
        assert!(refused("not json").starts_with("not a notification"));
        assert!(refused(r#"{"title": "x", "url": "http://a"}"#).contains("unknown field"));
        assert_eq!(
            refused(r#"{"title": ""}"#),
            "title: 0 characters, 1 to 80 allowed"
        );
        let long = "é".repeat(81);
        assert_eq!(
            refused(&format!(r#"{{"title": "{long}"}}"#)),
            "title: 81 characters, 1 to 80 allowed"
        );
        assert_eq!(
            refused(r#"{"title": "a", "body": "bell\u0007"}"#),
            "body: control characters are not allowed"
        );
        let body = "b".repeat(501);
        assert!(
            refused(&format!(r#"{{"title": "t", "body": "{body}"}}"#)).starts_with("body: 501")
        );
    }

    use super::*;

    fn needs(toml: &str) -> MiniAppNeeds {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn added_needs_are_what_the_new_version_asks_beyond_the_old() {
        let old = needs(
            "egress = [\"api.example.com:443\"]\nsecrets = [\"KEY\"]\nfiles = [{path = \"~/runs.csv\"}]",
        );
        let new = needs(
            "egress = [\"api.example.com:443\", \"other.example:443\"]\nsecrets = [\"KEY\", \"MORE\"]\nfiles = [{path = \"~/runs.csv\", mode = \"rw\"}]\nnotify = true",
        );
        assert_eq!(
            added_needs(Some(&old), &new),
            [
                "egress other.example:443",
                "secret MORE",
                "file ~/runs.csv (rw)",
                "notify"
            ]
        );
        assert!(
            added_needs(Some(&new), &old).is_empty(),
            "fewer needs add none"
        );
        assert_eq!(added_needs(None, &old).len(), 3, "a first deploy adds all");
    }
}
