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
    pub harness: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub plan: Option<String>,
    #[serde(default)]
    pub connectors: bool,
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
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default)]
    pub connectors: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contexts: Option<Vec<String>>,
    /// "token" or "file" (B.1 login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    pub logged_in: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logged_in_at: Option<String>,
    /// Where the token is: `{secret: "accounts/<name>/token"}` or the person's reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretRef>,
    /// Why the file is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// GET /v1/agents?project=…
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentQuery {
    #[serde(default)]
    pub project: Option<String>,
}

/// PATCH /v1/agents/{id}: the live switch of enforcement (A.4), not confirmed (D.8), applied to
/// its running sandboxes; and its words.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPatch {
    #[serde(default)]
    pub egress: Option<Enforcement>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub instructions: Option<String>,
}

/// POST /v1/agents/{id}/duplicate: a new agent with its settings, nothing linked (D.8).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DuplicateRequest {
    /// Default: "<its name> (copy)".
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub confirm_risks: bool,
}

/// The model a connection runs with (C.1): the agent's first, or the one the query names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelQuery {
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub harness: Option<String>,
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
    pub folder: String,
    /// Default: the folder's name.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub caches: Option<CacheChoice>,
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
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub caches: Option<CacheChoice>,
    /// "" removes it.
    #[serde(default)]
    pub context: Option<String>,
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
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub endpoints: Option<BTreeMap<Protocol, String>>,
    #[serde(default)]
    pub models: Option<Vec<ProviderModel>>,
    #[serde(default)]
    pub files: Option<BTreeMap<String, BTreeMap<String, FileSource>>>,
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
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub endpoints: BTreeMap<Protocol, String>,
    #[serde(default)]
    pub models: Vec<ProviderModel>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, BTreeMap<String, FileSource>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contexts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<SecretRef>,
    /// A `{secret}` key that has no value makes the provider incomplete (D.14).
    pub key_set: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A provider template (D.12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderTemplate {
    pub name: String,
    pub provider: Provider,
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// PUT /v1/secrets/{path}: a value and its description.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRequest {
    pub value: String,
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
    pub at: String,
    pub sandbox: String,
    #[serde(flatten)]
    pub event: EgressEvent,
}

/// The presets a new project's first agent copies (D.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// none, ask.
    LockedDown,
    /// filtered, enforce, strict, bypass: the defaults of new agents.
    #[default]
    Guarded,
    /// open, bypass.
    Open,
}
