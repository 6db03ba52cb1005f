//! Contract G: addon manifests (G.1) and bindings (G.2). Both hand-written: unknown keys are errors.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::SecretRef;
use crate::allow::AllowEntry;
use crate::api_version::{AddonApiVersion, BindingApiVersion};

/// A setting slot: the env var a binding's value goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonSlot {
    #[schemars(transform = crate::schema::rules::addon_env_name)]
    pub env: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How a secret slot's value reaches the tool (G.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SecretDelivery {
    /// A phantom the proxy swaps back towards `hosts` (E3).
    #[default]
    Proxy,
    /// The value itself, for a tool that signs with it or speaks something else than HTTP.
    Env,
}

/// A secret slot (G.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"delivery": {"const": "env"}}, "required": ["delivery"]},
    "then" = {"not": {"required": ["hosts"]}}
))]
pub struct AddonSecretSlot {
    #[schemars(transform = crate::schema::rules::addon_env_name)]
    pub env: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its value goes: some of the addon's egress; default all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<AllowEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<SecretDelivery>,
}

/// An addon's stdio MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonMcp {
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
}

/// `addon.toml` (G.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend(
    "if" = {"required": ["image"]},
    "then" = {"required": ["commands"], "properties": {"commands": {"minItems": 1}}},
    "else" = {"properties": {"commands": {"maxItems": 0}}}
))]
pub struct AddonManifest {
    pub api_version: AddonApiVersion,
    /// = the directory name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = crate::schema::rules::addon_env_keys)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, AddonSlot>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_slots: BTreeMap<String, AddonSecretSlot>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<AddonMcp>,
}

/// `bindings/<name>.toml` (G.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binding {
    pub api_version: BindingApiVersion,
    pub addon: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, SecretRef>,
}
