//! Contract B: the harness descriptor (B.1), neutral config (B.2), render's input and output
//! (B.3), and the MCP server shape they carry.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::access::{AgentSpec, Protocol};
use crate::allow::AllowEntry;
use crate::api_version::{HarnessApiVersion, HarnessLaunchApiVersion};
use crate::sandbox::{GeneratedFile, Mount};

/// The permission modes an agent may start in (B.1, D.8).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    Ask,
    AcceptEdits,
    Bypass,
}

impl PermissionMode {
    /// All modes, narrowest first.
    pub const ALL: [PermissionMode; 3] = [
        PermissionMode::Ask,
        PermissionMode::AcceptEdits,
        PermissionMode::Bypass,
    ];

    /// The word used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Ask => "ask",
            PermissionMode::AcceptEdits => "accept-edits",
            PermissionMode::Bypass => "bypass",
        }
    }
}

/// A state slot of a harness (B.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"credential": {"const": true}}, "required": ["credential"]},
    "then" = {"properties": {"kind": {"const": "file"}, "perSession": {"const": false}}}
))]
pub struct StateSlot {
    /// In-sandbox path, "~" = home.
    pub target: String,
    pub kind: SlotKind,
    pub required: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_session: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub credential: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<String>,
}

/// A folder or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SlotKind {
    Dir,
    File,
}

/// Whether the vendor's terms let an automation run an agent on an account (I.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Unattended {
    Allowed,
    CheckTerms,
    Refused,
}

/// How an account of a harness logs in (B.1 login, D.9): exactly one of a token and a file; a
/// file login has its command; plans and planEnv go together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend(
    "oneOf" = [
        {"required": ["token"], "not": {"required": ["file"]}},
        {"required": ["file", "command"], "not": {"required": ["token"]},
         "properties": {"command": {"minItems": 1}}}
    ],
    "dependentRequired" = {"plans": ["planEnv"], "planEnv": ["plans"]}
))]
pub struct Login {
    pub unattended: Unattended,
    /// https: the vendor's terms.
    #[schemars(regex(pattern = crate::patterns::HTTPS_URL))]
    pub terms: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<String>,
    pub subscription: String,
    /// Token login: the env var the harness reads the token from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_lifetime_days: Option<u32>,
    /// File login: a credential state slot, its file name in `{dir}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// What a session logged in with it reaches (E4).
    pub hosts: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plans: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_env: Option<String>,
}

impl Login {
    /// A token login (the person gives Handler a token).
    pub fn is_token_login(&self) -> bool {
        self.token.is_some()
    }
    /// A file login (Handler runs the login and keeps the file).
    pub fn is_file_login(&self) -> bool {
        self.file.is_some()
    }
}

/// A config file slot a harness reads (B.1 configFiles).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFileSlot {
    pub target: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed: bool,
}

/// How a permission mode reaches the harness (B.1): an ACP mode, else env.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

/// MCP transports (B.1 mcpTransports).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    Stdio,
    Http,
    Sse,
}

/// The env a harness starts stdio MCP servers with (B.1 mcpEnv).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpEnv {
    #[default]
    Inherit,
    Sandbox,
}

/// A harness's own terminal program (B.1 terminal, D.16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("allOf" = [
    {"not": {"required": ["modelFlag", "modelEnv"]}},
    {"not": {"required": ["mcpConfigFlag", "mcpServersEnv"]}}
]))]
pub struct TerminalProgram {
    pub command: Vec<String>,
    pub permissions: BTreeMap<PermissionMode, Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_flag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config_flag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_flag: Option<String>,
}

/// A harness descriptor, `harnesses/<name>/harness.toml` (B.1). Platform data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessDescriptor {
    pub api_version: HarnessApiVersion,
    pub name: String,
    pub product: String,
    /// Repository, no tag (B.6).
    #[schemars(regex(pattern = crate::patterns::IMAGE_REPOSITORY))]
    pub image: String,
    #[schemars(length(min = 1))]
    pub acp_command: Vec<String>,
    pub home: String,
    #[serde(default)]
    pub state_slots: BTreeMap<String, StateSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
    /// The account's own connectors (claude.ai MCP servers) exist for this harness (E).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub account_connectors: bool,
    #[serde(default)]
    pub config_files: BTreeMap<String, ConfigFileSlot>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_protocols: Vec<Protocol>,
    #[schemars(extend("minProperties" = 1))]
    pub permissions: BTreeMap<PermissionMode, PermissionMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_option: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_transports: Vec<McpTransport>,
    #[serde(default)]
    pub mcp_env: McpEnv,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config_file: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalProgram>,
}

/// What a harness is configured with, whatever the harness (B.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NeutralConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub account_connectors: bool,
}

/// A `{name, value}` pair, as ACP lists env and headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

/// An http or sse MCP server's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteMcpTransport {
    Http,
    Sse,
}

/// An MCP server, in ACP session/new's shape (B.3 mcpServers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum McpServer {
    /// `{type: "http"|"sse", name, url, headers}`.
    Remote {
        #[serde(rename = "type")]
        transport: RemoteMcpTransport,
        name: String,
        url: String,
        #[serde(default)]
        headers: Vec<NameValue>,
    },
    /// `{name, command, args, env}` (no type field).
    Stdio {
        name: String,
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: Vec<NameValue>,
    },
}

impl McpServer {
    /// The server's name.
    pub fn name(&self) -> &str {
        match self {
            McpServer::Remote { name, .. } | McpServer::Stdio { name, .. } => name,
        }
    }
    /// Its transport.
    pub fn transport(&self) -> McpTransport {
        match self {
            McpServer::Stdio { .. } => McpTransport::Stdio,
            McpServer::Remote {
                transport: RemoteMcpTransport::Http,
                ..
            } => McpTransport::Http,
            McpServer::Remote {
                transport: RemoteMcpTransport::Sse,
                ..
            } => McpTransport::Sse,
        }
    }
}

/// render's input (B.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderInput {
    pub descriptor: HarnessDescriptor,
    pub agent: AgentSpec,
    pub scope: String,
    /// Resolved values (phantoms, E3), slot → value.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Vec<String>>,
    pub permission_mode: PermissionMode,
    /// Home path ("~" = the harness home) → host folder.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub caches: BTreeMap<String, String>,
}

/// What the control plane applies to every session (B.3, P7, P8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDefaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_options: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
}

/// render's output (B.3): intent, no sandbox details (B2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarnessLaunch {
    pub api_version: HarnessLaunchApiVersion,
    pub image: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub home: String,
    pub files: Vec<GeneratedFile>,
    pub mounts: Vec<Mount>,
    pub writable_paths: Vec<String>,
    pub egress: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_defaults: Option<SessionDefaults>,
}

/// A cache the toolbox declares (B.6 CacheDeclaration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheDeclaration {
    /// The home path it is mounted at, e.g. "~/.cargo".
    pub target: String,
    pub about: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub general: bool,
}

/// The toolbox's `toolbox.toml` (B.6 ToolboxManifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolboxManifest {
    #[serde(default)]
    pub caches: BTreeMap<String, CacheDeclaration>,
}
