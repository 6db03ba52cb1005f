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
    /// The agent asks before it edits a file or runs a command.
    Ask,
    /// The agent edits files without asking, and asks before it runs a command.
    AcceptEdits,
    /// The agent asks nothing (an unattended run, inside its sandbox).
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
    /// A folder or a file.
    pub kind: SlotKind,
    /// Whether the harness needs it to start (it is created when missing).
    pub required: bool,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// A session's own (at most one per harness), not the agent's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_session: bool,
    /// The file a file login writes: the account's credential, mounted from the account, not the
    /// agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub credential: bool,
    /// The content a new file slot starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<String>,
    /// The person's own files that start it, for an agent that asks to "start from my own
    /// settings" (issue 30 item 4, decision 0154): copied once, a later change offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seed: Vec<StateSeed>,
}

/// One of the person's own files or folders that seeds a state slot (issue 30 item 4, the
/// second seed's "Agent state"). Never a login or credential file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateSeed {
    /// On the host, `~/…`: the person's home (a link there is followed).
    #[schemars(regex(pattern = crate::patterns::HOME_PATH))]
    pub source: String,
    /// Where it goes, relative to a folder slot (default: the source's name); a file slot's
    /// seed is the slot itself and names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::patterns::RELATIVE_PATH))]
    pub target: Option<String>,
    /// A JSON or TOML file: only these top-level keys are kept (merged into a file slot's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// A JSON or TOML file: each dotted path removed (after `keep`; a `*` step is every key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

/// The names of login and credential files, which no seed is and no seeded folder carries
/// (compared without case): Claude's, Codex's, Gemini's, the generic ones.
pub const CREDENTIAL_NAMES: &[&str] = &[
    ".credentials.json",
    "credentials.json",
    "auth.json",
    "oauth_creds.json",
    "google_accounts.json",
    ".netrc",
    ".env",
    "id_rsa",
    "id_ed25519",
];

/// Whether file name `name` is a login or credential file's ([`CREDENTIAL_NAMES`], or a key:
/// `*.pem`, `*.key`).
pub fn is_credential_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.contains(&lower.as_str()) || lower.ends_with(".pem") || lower.ends_with(".key")
}

/// A folder or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SlotKind {
    /// A folder.
    Dir,
    /// A file.
    File,
}

/// Whether the vendor's terms let an automation run an agent on an account (I.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Unattended {
    /// The vendor's terms allow it.
    Allowed,
    /// The terms are unclear: the person reads them before an unattended run.
    CheckTerms,
    /// The terms forbid it: an agent with an interface cannot run on such an account.
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
    /// Whether the vendor's terms let an automation run an agent on such an account (I.7).
    pub unattended: Unattended,
    /// https: the vendor's terms.
    #[schemars(regex(pattern = crate::patterns::HTTPS_URL))]
    pub terms: String,
    /// When the terms were last read (a date), for `unattended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<String>,
    /// The subscriptions it logs in with, in words (shown when adding an account).
    pub subscription: String,
    /// Token login: the env var the harness reads the token from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The command that prints a token, to tell the person (e.g. `claude setup-token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_command: Option<String>,
    /// How a token starts (e.g. `sk-ant-oat01-`), to catch a pasted key of another kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_prefix: Option<String>,
    /// How long a token lasts, to remind the person before it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_lifetime_days: Option<u32>,
    /// File login: a credential state slot, its file name in `{dir}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A file login's command, run in a login sandbox; `{dir}` is the credential's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Environment of the login command; `{dir}` is the credential's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// What a session logged in with it reaches (E4).
    pub hosts: Vec<AllowEntry>,
    /// What the person does during the login, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// The plans an account may name (none: the harness has no plans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plans: Option<Vec<String>>,
    /// The variable the account's plan is given in (with `plans`).
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
    /// Its in-sandbox path, `~` the harness's home.
    pub target: String,
    /// Whether the harness needs it to start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Written once, then the harness's own (not rewritten at each start).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed: bool,
}

/// How a permission mode reaches the harness (B.1): an ACP mode, else env.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionMapping {
    /// The ACP session mode set at session start (P7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_mode: Option<String>,
    /// Environment the harness reads the mode from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

/// MCP transports (B.1 mcpTransports).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    /// A program the harness starts, speaking on its stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
    /// Server-sent events.
    Sse,
}

/// The env a harness starts stdio MCP servers with (B.1 mcpEnv).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpEnv {
    /// stdio servers get the harness's own environment.
    #[default]
    Inherit,
    /// stdio servers are started through handler-sandbox-env: the harness's secrets dropped (B6).
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
    /// The program and its fixed arguments.
    pub command: Vec<String>,
    /// The flags for each permission mode; exactly the modes `permissions` maps.
    pub permissions: BTreeMap<PermissionMode, Vec<String>>,
    /// The flag that takes the model (not with modelEnv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_flag: Option<String>,
    /// The variable that takes the model (not with modelFlag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_env: Option<String>,
    /// The flag that takes an MCP config file (not with mcpServersEnv).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config_flag: Option<String>,
    /// The variable that takes the MCP servers as JSON (not with mcpConfigFlag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers_env: Option<String>,
    /// The flag that takes the agent's instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_flag: Option<String>,
}

/// A harness descriptor, `harnesses/<name>/harness.toml` (B.1). Platform data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessDescriptor {
    /// `handler.harness/v1`.
    pub api_version: HarnessApiVersion,
    /// The harness's name (its folder under `harnesses/`).
    pub name: String,
    /// The product's name, shown to the person.
    pub product: String,
    /// Repository, no tag (B.6).
    #[schemars(regex(pattern = crate::patterns::IMAGE_REPOSITORY))]
    pub image: String,
    /// The command that speaks ACP on its stdio.
    #[schemars(length(min = 1))]
    pub acp_command: Vec<String>,
    /// The harness's home in the sandbox (`~` in its paths).
    pub home: String,
    /// What the harness keeps between starts: slot name → where and how.
    #[serde(default)]
    pub state_slots: BTreeMap<String, StateSlot>,
    /// How an account logs in; none: it runs on providers only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
    /// The account's own connectors (claude.ai MCP servers) exist for this harness (E).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub account_connectors: bool,
    /// The config files a provider may give it: slot name → where.
    #[serde(default)]
    pub config_files: BTreeMap<String, ConfigFileSlot>,
    /// The protocols it talks to a provider with, its preferred first; none: accounts only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_protocols: Vec<Protocol>,
    /// How each permission mode it has reaches it (at least one).
    #[schemars(extend("minProperties" = 1))]
    pub permissions: BTreeMap<PermissionMode, PermissionMapping>,
    /// The ACP config option that chooses the model, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_option: Option<String>,
    /// Where it reads skills from, when it reads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_dir: Option<String>,
    /// The MCP transports it accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_transports: Vec<McpTransport>,
    /// What environment its stdio MCP servers get.
    #[serde(default)]
    pub mcp_env: McpEnv,
    /// A file it reads its MCP servers from, instead of session/new (B7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config_file: Option<String>,
    /// Fixed environment it runs with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Paths in its home it writes besides its state slots (tmpfs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_paths: Vec<String>,
    /// Its own terminal program, for a person to use directly (D.16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalProgram>,
    /// Its CLI as a part, for a machine of another image (issue 30 item 2); none: it runs
    /// only from its own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<PartRecipe>,
}

/// A harness's CLI as a part (issue 30 item 2, decision 0164): what of its checked image a
/// machine gets, read-only, at `/opt/handler/parts/<name>`, with `bin/` first on its PATH.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartRecipe {
    /// The commands it puts on the PATH, each found on the image's PATH when the part is built
    /// (a link into a copied package stays a link; anything else is copied).
    #[schemars(length(min = 1))]
    pub bin: Vec<String>,
    /// npm packages copied whole from the image's global root (`npm root -g`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// The parts it runs on (`node` for an npm CLI), mounted with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
}

/// What a harness is configured with, whatever the harness (B.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NeutralConfig {
    /// The model, when not the default (an account's is set over ACP, a provider's is written in
    /// its config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Whether the account's own connectors are used.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub account_connectors: bool,
}

/// A `{name, value}` pair, as ACP lists env and headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NameValue {
    /// The environment variable's or the header's name.
    pub name: String,
    /// Its value (it may be a secret: never logged).
    pub value: String,
}

/// An http or sse MCP server's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteMcpTransport {
    /// Streamable HTTP.
    Http,
    /// Server-sent events.
    Sse,
}

/// An MCP server, in ACP session/new's shape (B.3 mcpServers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum McpServer {
    /// `{type: "http"|"sse", name, url, headers}`.
    Remote {
        /// `http` or `sse`.
        #[serde(rename = "type")]
        transport: RemoteMcpTransport,
        /// Its name, unique in the session.
        name: String,
        /// Its URL; its host:port is added to the egress (P3).
        url: String,
        /// Headers sent with each request.
        #[serde(default)]
        headers: Vec<NameValue>,
    },
    /// `{name, command, args, env}` (no type field).
    Stdio {
        /// Its name, unique in the session.
        name: String,
        /// The program, as the sandbox finds it.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Its environment (kept by name when the harness's secrets are dropped, B6).
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
    /// The harness's descriptor.
    pub descriptor: HarnessDescriptor,
    /// What the agent runs as: its account or provider, resolved (E).
    pub agent: AgentSpec,
    /// The agent's folder (absolute).
    pub scope: String,
    /// Resolved values (phantoms, E3), slot → value.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// The skills' folders on the host (absolute), mounted read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// The MCP servers every session gets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
    /// For a terminal (B8): the person's arguments; none: the ACP command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Vec<String>>,
    /// The mode the agent starts in.
    pub permission_mode: PermissionMode,
    /// Home path ("~" = the harness home) → host folder.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub caches: BTreeMap<String, String>,
}

/// What the control plane applies to every session (B.3, P7, P8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDefaults {
    /// The ACP session mode set after session/new|load (P7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_id: Option<String>,
    /// ACP config options set after session/new|load (P7): option id → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_options: BTreeMap<String, String>,
    /// MCP servers added to every session/new|load|resume (P8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServer>,
}

/// render's output (B.3): intent, no sandbox details (B2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarnessLaunch {
    /// `handler.harness-launch/v1`.
    pub api_version: HarnessLaunchApiVersion,
    /// The image, with its tag.
    pub image: String,
    /// The command the sandbox runs (never a secret, B3).
    pub argv: Vec<String>,
    /// Its environment (secrets only here and in files, B3).
    pub env: BTreeMap<String, String>,
    /// Its home folder.
    pub home: String,
    /// Files written into the sandbox before it starts.
    pub files: Vec<GeneratedFile>,
    /// State, config and cache mounts, in a stable order.
    pub mounts: Vec<Mount>,
    /// Paths in the home it may write (tmpfs).
    pub writable_paths: Vec<String>,
    /// The hosts the harness needs (its login's, the provider's, remote MCP servers').
    pub egress: Vec<AllowEntry>,
    /// What the policy applies at session start; none when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_defaults: Option<SessionDefaults>,
}

/// A cache the toolbox declares (B.6 CacheDeclaration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheDeclaration {
    /// The home path it is mounted at, e.g. "~/.cargo".
    pub target: String,
    /// What it caches, shown to the person.
    pub about: String,
    /// Shared by every agent (a package manager's cache), not one project's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub general: bool,
}

/// The toolbox's `toolbox.toml` (B.6 ToolboxManifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolboxManifest {
    /// The caches it declares: name → where and what.
    #[serde(default)]
    pub caches: BTreeMap<String, CacheDeclaration>,
}
