//! Contract E: what an agent runs as — accounts, providers, secret references, and the resolved
//! AgentSpec render takes.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::api_version::{AccountApiVersion, ProviderApiVersion};
use crate::harness::NeutralConfig;

/// The protocols a provider's endpoints speak (E).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Anthropic's Messages API (`/v1/messages`).
    Anthropic,
    /// OpenAI's Chat Completions API (`/v1/chat/completions`), which most local servers speak.
    OpenaiChat,
    /// OpenAI's Responses API (`/v1/responses`).
    Responses,
}

impl Protocol {
    /// The word used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiChat => "openai-chat",
            Protocol::Responses => "responses",
        }
    }
}

/// Where a secret is (E2): never the value itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SecretRef {
    /// Handler's secret store (D.14), e.g. `providers/openrouter/apiKey`.
    Secret(#[schemars(regex(pattern = crate::patterns::SECRET_PATH))] String),
    /// An environment variable of the control plane.
    Env(#[schemars(regex(pattern = crate::patterns::ENV_NAME))] String),
    /// A host file (first line, trimmed).
    File(#[schemars(length(min = 1))] String),
    /// The stdout of a command, e.g. `["pass", "show", "x"]`: a program and its arguments.
    Command(
        #[schemars(length(min = 1), extend("prefixItems" = [{"type": "string", "minLength": 1}]))]
        Vec<String>,
    ),
}

/// The message given for a literal where a reference is expected (E2). It never repeats the
/// literal: it may be the secret.
pub const LITERAL_SECRET_ERROR: &str = "a literal secret is not allowed here (E2): write a reference such as { secret = \"providers/<name>/apiKey\" }, { env = \"VAR\" }, { file = \"~/path\" } or { command = [\"pass\", \"show\", \"name\"] }";

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SecretRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a secret reference: { secret }, { env }, { file } or { command }")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<SecretRef, E> {
                Err(E::custom(LITERAL_SECRET_ERROR))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SecretRef, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty table is not a secret reference: use one of secret, env, file, command",
                    ));
                };
                let r = match key.as_str() {
                    "secret" => SecretRef::Secret(map.next_value()?),
                    "env" => SecretRef::Env(map.next_value()?),
                    "file" => SecretRef::File(map.next_value()?),
                    "command" => {
                        let argv: Vec<String> = map.next_value()?;
                        if argv.is_empty() {
                            return Err(de::Error::custom("command: an empty command"));
                        }
                        SecretRef::Command(argv)
                    }
                    other => {
                        return Err(de::Error::unknown_field(
                            other,
                            &["secret", "env", "file", "command"],
                        ));
                    }
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a secret reference has exactly one key: `{key}` and `{extra}` given"
                    )));
                }
                Ok(r)
            }
        }
        d.deserialize_any(V)
    }
}

/// Where a whole config file's content comes from (E FileSource).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum FileSource {
    /// A host file (≤ 1 MiB).
    File(String),
    /// An environment variable of the control plane.
    Env(String),
    /// Inline.
    Content(String),
}

/// An account: a subscription one harness logs in with (E, D.9). Hand-written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    /// `handler.account/v1`.
    pub api_version: AccountApiVersion,
    /// The harness the subscription logs in to (a descriptor's name).
    #[schemars(length(min = 1))]
    pub harness: String,
    /// What the person calls it, shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The subscription's plan, one of the harness login's `plans` (given to the harness in its
    /// planEnv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Whether the account's own connectors (claude.ai MCP servers) are used by agents running on
    /// it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connectors: bool,
    /// Where the token of a token login is (E2): never the token itself. A file login has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretRef>,
    /// The contexts (D.19) the account may be used in; `any` or none: every context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(regex(pattern = crate::patterns::CONTEXT_NAME)))]
    pub contexts: Option<Vec<String>>,
}

/// One model a provider serves (E ProviderModel, B.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderModel {
    /// The model's id, as the provider's API takes it.
    #[schemars(length(min = 1))]
    pub id: String,
    /// A name to show, when the id is not one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The context window, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The most tokens one answer may have (below the context window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u64>,
    /// Whether the model reasons (thinks) before it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
    /// Whether the model takes images as input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
    /// The sampling temperature harnesses should use with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Per harness: merged into the entry written for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub native: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
}

/// A provider: where model calls go (E, D.12). Hand-written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provider {
    /// `handler.provider/v1`.
    pub api_version: ProviderApiVersion,
    /// What the person calls it, shown in lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// At least one: an http(s) URL per protocol.
    #[schemars(transform = crate::schema::rules::http_url_values)]
    pub endpoints: BTreeMap<Protocol, String>,
    /// Where the key is (E2), when the provider needs one: the sandbox gets a phantom of it (E3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<SecretRef>,
    /// The models it serves, the first the default; at least one.
    #[schemars(length(min = 1))]
    pub models: Vec<ProviderModel>,
    /// harness → its config file slot → content source.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, BTreeMap<String, FileSource>>,
    /// The contexts (D.19) the provider may be used in; `any` or none: every context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(regex(pattern = crate::patterns::CONTEXT_NAME)))]
    pub contexts: Option<Vec<String>>,
}

/// An account or a provider, resolved for render (E AgentSpec).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The harness it runs (a descriptor's name).
    pub harness: String,
    /// The account's name, when it runs on an account (exactly one of account and provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The provider's name, when it runs on a provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The account's credential file Handler keeps (a file login).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_login: Option<String>,
    /// The account's plan, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_plan: Option<String>,
    /// The provider's document, when it runs on a provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_spec: Option<Provider>,
    /// The provider's files for this harness (slot → source).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileSource>,
    /// What the harness is configured with, whatever the harness (B.2): the model, the account's
    /// connectors.
    pub config: NeutralConfig,
}
