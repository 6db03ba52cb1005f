//! The Control API's request and answer bodies that are the daemon's own (D.8, D.9, D.12–D.14,
//! D.19, A.3): what handlerd's routes read and answer besides the resources of `control`. Each
//! derives `JsonSchema`, so `/openapi.json` describes it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{FileSource, Protocol, Provider, ProviderModel, SecretRef};
use crate::sandbox::EgressEvent;
use crate::sandbox::Enforcement;

use super::{AgentRequest, CacheChoice, ContextColor};

/// A token as given through the API: pasted (to the secret store) or where the person keeps it.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum TokenInput {
    /// The token itself: kept in the secret store, never written to the account's file.
    Value(String),
    /// An environment variable of handlerd.
    Env(String),
    /// A host file (first line).
    File(String),
    /// A command printing it.
    Command(Vec<String>),
}

impl std::fmt::Debug for TokenInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenInput::Value(_) => f.write_str("Value([redacted])"),
            TokenInput::Env(v) => write!(f, "Env({v:?})"),
            TokenInput::File(v) => write!(f, "File({v:?})"),
            TokenInput::Command(v) => write!(f, "Command({v:?})"),
        }
    }
}

/// POST /v1/accounts, PUT /v1/accounts/{name}.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccountRequest {
    /// Required on create; on replace, the name in the path.
    #[serde(default)]
    pub name: Option<String>,
    /// The harness the subscription logs in to (a harness's name).
    pub harness: String,
    /// What the person calls it, shown in lists.
    #[serde(default)]
    pub description: Option<String>,
    /// The subscription's plan, one of the harness login's `plans`.
    #[serde(default)]
    pub plan: Option<String>,
    /// Whether agents running on it use the account's own connectors (MCP servers).
    #[serde(default)]
    pub connectors: bool,
    /// The contexts (D.19) it may be used in; `any` or none: every context.
    #[serde(default)]
    pub contexts: Option<Vec<String>>,
    /// A token login's token; left out on replace: the one it has is kept.
    #[serde(default)]
    pub token: Option<TokenInput>,
}

/// PUT /v1/accounts/{name}/login: the credential file a file login left (D.9).
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoginFileRequest {
    /// The file's text.
    pub content: String,
}

impl std::fmt::Debug for LoginFileRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginFileRequest([redacted])")
    }
}

/// An account as the API shows it: where its token is, never the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountInfo {
    /// The account's name (its file's name).
    pub name: String,
    /// The harness it logs in to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    /// What the person calls it, shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The subscription's plan, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Whether agents running on it use the account's own connectors.
    #[serde(default)]
    pub connectors: bool,
    /// The contexts (D.19) it may be used in; none: every context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contexts: Option<Vec<String>>,
    /// "token" or "file" (B.1 login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// Whether it is logged in: its token or credential file is there (D.9).
    pub logged_in: bool,
    /// When it last logged in (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logged_in_at: Option<String>,
    /// Where the token is: `{secret: "accounts/<name>/token"}` or the person's reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretRef>,
    /// When its token expires (RFC 3339): when it was given plus its login's
    /// `tokenLifetimeDays` (B.1), when both are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// How that token stands now: `soon` is the time to renew it (decision 0150).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<crate::account::TokenExpiry>,
    /// Why the file is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// GET /v1/agents?project=…
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentQuery {
    /// Only the agents of this project (its id).
    #[serde(default)]
    pub project: Option<String>,
}

/// PATCH /v1/agents/{id}: the live switch of enforcement (A.4), not confirmed (D.8), applied to
/// its running sandboxes; and its words.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPatch {
    /// Filtered only: refuse or only report what no entry allows; applied at once.
    #[serde(default)]
    pub egress: Option<Enforcement>,
    /// Its new name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its new description: what it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Its new instructions, sent before a session's first request (F.3).
    #[serde(default)]
    pub instructions: Option<String>,
}

/// POST /v1/agents/{id}/duplicate: a new agent with its settings, nothing linked (D.8).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DuplicateRequest {
    /// Default: `"<its name> (copy)"`.
    #[serde(default)]
    pub name: Option<String>,
    /// Save although it widens what the agent may do (network, confinement, mode).
    #[serde(default)]
    pub confirm_risks: bool,
}

/// The model a connection runs with (C.1): the agent's first, or the one the query names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelQuery {
    /// The account to run on instead of the agent's first model.
    #[serde(default)]
    pub account: Option<String>,
    /// The provider to run on instead of the agent's first model.
    #[serde(default)]
    pub provider: Option<String>,
    /// The harness, with the account or provider the query names.
    #[serde(default)]
    pub harness: Option<String>,
    /// The model to run; default: the chosen access's own.
    #[serde(default)]
    pub model: Option<String>,
}

/// POST /v1/contexts, PUT /v1/contexts/{name}.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextRequest {
    /// Required on create.
    #[serde(default)]
    pub name: Option<String>,
    /// Its colour, the badge the UI shows.
    pub color: ContextColor,
}

/// GET/PUT /v1/folders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkFolders {
    /// As written (`~/` kept).
    pub roots: Vec<String>,
    /// Expanded and canonical (symbolic links resolved), those that exist; answered, not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<String>,
}

/// POST /v1/projects: a folder, and its first agent set up with a preset.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectRequest {
    /// Its folder (one project per folder).
    pub folder: String,
    /// Default: the folder's name.
    #[serde(default)]
    pub name: Option<String>,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Where its agents keep the toolbox's caches; default: its own.
    #[serde(default)]
    pub caches: Option<CacheChoice>,
    /// Its context (D.19): only the accounts and providers made for it run its agents.
    #[serde(default)]
    pub context: Option<String>,
    /// The values its first agent starts with where it leaves them out.
    #[serde(default)]
    pub preset: Preset,
    /// Its first agent.
    pub agent: AgentRequest,
}

/// PATCH /v1/projects/{id}.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectPatch {
    /// Its new name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its new description: what it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Where its agents keep the toolbox's caches from now on.
    #[serde(default)]
    pub caches: Option<CacheChoice>,
    /// "" removes it.
    #[serde(default)]
    pub context: Option<String>,
    /// The id of the agent that becomes its default.
    #[serde(default)]
    pub default_agent: Option<String>,
}

/// POST /v1/providers, PUT /v1/providers/{name}.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderRequest {
    /// Required on create.
    #[serde(default)]
    pub name: Option<String>,
    /// A template (GET /v1/provider-templates) whose fields fill what is left out.
    #[serde(default)]
    pub template: Option<String>,
    /// What the person calls it, shown in lists.
    #[serde(default)]
    pub description: Option<String>,
    /// An http(s) URL per protocol.
    #[serde(default)]
    pub endpoints: Option<BTreeMap<Protocol, String>>,
    /// The models it serves, the first the default.
    #[serde(default)]
    pub models: Option<Vec<ProviderModel>>,
    /// Harness → its config file slot → content source.
    #[serde(default)]
    pub files: Option<BTreeMap<String, BTreeMap<String, FileSource>>>,
    /// The contexts (D.19) it may be used in; `any` or none: every context.
    #[serde(default)]
    pub contexts: Option<Vec<String>>,
    /// The key itself: to the secret store only.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Removes its key (a local server needs none).
    #[serde(default)]
    pub remove_api_key: bool,
}

impl std::fmt::Debug for ProviderRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRequest")
            .field("name", &self.name)
            .field("template", &self.template)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

/// A provider as the API shows it: where its key is, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    /// The provider's name (its file's name).
    pub name: String,
    /// What the person calls it, shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An http(s) URL per protocol.
    #[serde(default)]
    pub endpoints: BTreeMap<Protocol, String>,
    /// The models it serves, the first the default.
    #[serde(default)]
    pub models: Vec<ProviderModel>,
    /// Harness → its config file slot → content source.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, BTreeMap<String, FileSource>>,
    /// The contexts (D.19) it may be used in; none: every context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contexts: Option<Vec<String>>,
    /// Where its key is (E2), when it has one: never the key itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<SecretRef>,
    /// A `{secret}` key that has no value makes the provider incomplete (D.14).
    pub key_set: bool,
    /// Why the file is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A provider template (D.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderTemplate {
    /// The template's name, what `template` takes.
    pub name: String,
    /// The provider it sets up: the fields a request leaves out.
    pub provider: Provider,
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    /// Its path in the store, after what owns it (e.g. `providers/<name>/apiKey`).
    pub path: String,
    /// What it is, as its owner describes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its owner sends it (E3), for people reading the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// When its value was last set (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// PUT /v1/secrets/{path}: a value and its description.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRequest {
    /// The secret's value: kept in the store, never answered.
    pub value: String,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
}

impl std::fmt::Debug for SecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretRequest")
            .field("value", &"[redacted]")
            .field("description", &self.description)
            .finish()
    }
}

/// An egress event as recorded for an agent (A.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressRecord {
    /// When it happened (RFC 3339).
    pub at: String,
    /// The name of the sandbox it happened in.
    pub sandbox: String,
    /// What happened.
    #[serde(flatten)]
    pub event: EgressEvent,
}

/// The presets a new project's first agent copies (D.8); with its rules in `containment`.
pub use crate::containment::Preset;

/// POST /v1/builds (D.4): what to rebuild — a harness name, `toolbox`, `network-filter` or
/// `addon:<name>`; nothing else (no path, recipe, tag or build argument).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BuildRequest {
    /// The target.
    pub target: String,
}

/// POST /v1/skills/import-zip and /v1/skills/import-url (D.17): what to do with the skill imported.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillImportQuery {
    /// Give it to this project's agents (a project's id).
    #[serde(default)]
    pub project: Option<String>,
    /// Replace a skill of that name (else 409 `skill exists`).
    #[serde(default)]
    pub replace: bool,
    /// With `replace` on a session's import: the skill the person means to replace, which the
    /// session's SKILL.md must name (an agent does not choose which skill it replaces).
    #[serde(default)]
    pub name: Option<String>,
}

/// PUT /v1/knowledge (D.5 K4): the knowledge root, written to `<config>/knowledge.toml`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KnowledgeRootRequest {
    /// An absolute path or one starting with `~/`.
    pub root: String,
}

/// POST /v1/knowledge/folders (D.5 K5): a new folder, relative to the root.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KnowledgeFolderRequest {
    /// Its path relative to the root; its parent exists, its name starts with neither `.` nor `_`.
    pub path: String,
}

/// GET /v1/knowledge/folder and /v1/knowledge/note: a path relative to the knowledge root.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgePathQuery {
    /// Relative to the root; `.` (the default) is the root itself.
    #[serde(default)]
    pub path: Option<String>,
}

/// GET /v1/directories (D.13): the folders a picker shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryListing {
    /// The folder listed (absolute, links resolved); none: the work folders themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its folders (absolute paths), hidden ones and Handler's own left out; sorted.
    pub folders: Vec<String>,
}

/// GET /v1/directories?path=…
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryQuery {
    /// A folder inside a work folder (absolute or `~/…`); none: the work folders.
    #[serde(default)]
    pub path: Option<String>,
}

/// POST /v1/directories (D.13): a new folder inside a work folder.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DirectoryRequest {
    /// Absolute or `~/…`; its parent exists inside a work folder, its name is not hidden.
    pub path: String,
}

/// A cache the toolbox declares, as Settings → Caches lists it (B.6, decision 0087).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheDeclarationInfo {
    /// Its name (`[caches.<name>]`).
    pub name: String,
    /// The home path it is mounted at ("~/.cargo").
    pub target: String,
    /// What it holds.
    pub about: String,
    /// A folder any tool writes to (~/.cache), rather than one toolchain's.
    pub general: bool,
}

/// One cache's folder in a location (decision 0087).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheFolder {
    /// The cache's name.
    pub name: String,
    /// Its host folder.
    pub path: String,
    /// Its size as the runtime counts it (A.9 `cache size`); none: not made yet (no launch has
    /// created it) or not measurable (`error` says why).
    pub bytes: Option<u64>,
    /// Why it could not be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The global caches: one folder per cache under `$HANDLER_CACHE_DIR` (D.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalCaches {
    /// `$HANDLER_CACHE_DIR`.
    pub path: String,
    /// The projects choosing `global` (ad-hoc agents use them too): a write channel between them.
    pub users: Vec<String>,
    /// Its caches.
    pub caches: Vec<CacheFolder>,
}

/// A project's caches: its choice and, unless `off`, where they are (D.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectCaches {
    /// The project.
    pub project_id: String,
    /// Its name.
    pub name: String,
    /// What it chose.
    pub choice: CacheChoice,
    /// Its own folder (`<data>/caches/<project id>`), whatever it chose now.
    pub path: String,
    /// The caches of its own folder.
    pub caches: Vec<CacheFolder>,
}

/// `GET /v1/caches`: what is kept and where (decision 0087).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CachesOverview {
    /// The toolbox's declarations (toolchains, then general folders).
    pub declarations: Vec<CacheDeclarationInfo>,
    /// The global folder.
    pub global: GlobalCaches,
    /// Each project's own folder.
    pub projects: Vec<ProjectCaches>,
}

/// `POST /v1/caches/clear`: empties one cache (`name`) or all of one location — a project's own
/// folder or the global one (exactly one of `project` and `global`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheClearRequest {
    /// A project's own caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The global caches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
    /// One cache; none: every cache of the location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `DELETE /v1/projects/{id}` (200): the project is gone with its agents; its own cache
/// folders (`<data>/caches/<id>/…`, D.8) were emptied by the runtime and removed once its
/// sandboxes stopped — `caches` names them; `kept` those still in use, left for Settings →
/// Caches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectRemoved {
    /// The project's id.
    pub id: String,
    /// The cache folders removed with it.
    pub caches: Vec<String>,
    /// Why its cache folders were kept (a sandbox still mounting one), if they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// `POST /v1/accounts/{name}/login/window` (202): the terminal window handlerd opened on the
/// desktop for a file login (D.9), running `handler account login NAME --keep-open`; the web UI
/// then follows the account until its `loggedInAt` changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginWindow {
    /// The terminal emulator opened (its program).
    pub terminal: String,
    /// What runs in it (no secret is ever in it).
    pub command: Vec<String>,
}

/// POST /v1/ui/code's answer (issue 27 F12, decision 0133): a code the web UI's page exchanges
/// once for the token (`POST /ui/exchange`), so the token is never in a URL, a page on disk or a
/// browser's history.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UiCode {
    /// 128 random bits, hex: valid once.
    pub code: String,
    /// How long it is valid from now.
    pub expires_in_seconds: u64,
}
