//! Contract G: addon manifests (G.1) and bindings (G.2). Both hand-written: unknown keys are errors.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::SecretRef;
use crate::allow::AllowEntry;
use crate::api_version::{AddonApiVersion, BindingApiVersion};

/// The image repository an addon named `name` builds (G.1, decision 0134): Handler's own
/// namespace for addons, so an addon never names (and its switch never retags, its removal never
/// removes) the toolbox, a harness image, the network filter or a person's image.
pub fn addon_image(name: &str) -> String {
    format!("localhost/handler-ai-addon-{name}")
}

/// A setting slot: the env var a binding's value goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonSlot {
    /// The environment variable the bound value is given in, inside the sandbox.
    #[schemars(transform = crate::schema::rules::addon_env_name)]
    pub env: String,
    /// Whether a binding must give it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// What to put in it, shown when binding.
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
    /// The environment variable the secret (or its phantom) is given in, inside the sandbox.
    #[schemars(transform = crate::schema::rules::addon_env_name)]
    pub env: String,
    /// Whether a binding must give it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// What secret it wants, shown when binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where its value goes: some of the addon's egress; default all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<AllowEntry>>,
    /// How the value reaches the tool; default `proxy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<SecretDelivery>,
}

/// An addon's stdio MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonMcp {
    /// The command that starts it (one of the addon's commands, then its arguments).
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
    /// `handler.addon/v1`.
    pub api_version: AddonApiVersion,
    /// = the directory name.
    pub name: String,
    /// What it gives an agent, shown in the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The image whose `bin/` provides the commands (mounted into the sandbox): exactly
    /// `localhost/handler-ai-addon-<name>` ([`addon_image`]), no tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The commands the image provides, exactly: required with an image, none without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// A command that shows the addon works (e.g. `["gh", "--version"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    /// Fixed environment variables it sets in the sandbox.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = crate::schema::rules::addon_env_keys)]
    pub env: BTreeMap<String, String>,
    /// Its settings: slot name → the variable a binding's value goes to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, AddonSlot>,
    /// Its secrets: slot name → the variable and the hosts its value is for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_slots: BTreeMap<String, AddonSecretSlot>,
    /// The hosts its tools reach, added to the sandbox's allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AllowEntry>,
    /// Its stdio MCP server, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<AddonMcp>,
}

/// `bindings/<name>.toml` (G.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binding {
    /// `handler.binding/v1`.
    pub api_version: BindingApiVersion,
    /// The addon it binds (its name).
    pub addon: String,
    /// What this binding is for (e.g. which account), shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A value for each of the addon's settings: slot → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// Where each of the addon's secrets is (E2): slot → reference, never the value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, SecretRef>,
}
