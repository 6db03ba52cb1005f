//! Contract A: the SandboxSpec a runtime launches, its network policy and injections, the
//! runtime check (A.8) and the egress event lines (A.3).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::allow::AllowEntry;
use crate::api_version::SandboxApiVersion;

/// A file the sandbox gets (A.1): mounted read-only, or with `seed` written into a writable path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratedFile {
    /// Its path in the sandbox.
    pub target: String,
    /// Its content (it may hold a secret, B3: never in argv).
    pub content: String,
    /// Octal mode, e.g. "0644" (default) or "0755".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// false: mounted read-only · true: written into a writable path (the home or a
    /// writablePaths entry) before start, may be rewritten, discarded with the instance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed: bool,
}

/// How locked down a sandbox is (A.5).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Confinement {
    /// The A3 hardening: no capability, no new privileges, read-only root (the default).
    #[default]
    Strict,
    /// Rootless containers inside the sandbox (fuse and tun devices, generated subordinate ids).
    Nested,
    /// Containers inside with fewer restrictions still; shown with a warning.
    Privileged,
}

/// What a mount is for (A.1).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum MountKind {
    /// The agent's folder, at the same path (A2).
    Scope,
    /// A harness's state slot (E6).
    State,
    /// A cache (B.6, D.8), read-write.
    Cache,
    /// Configuration given read-only (skills, an account's files).
    Config,
    /// A knowledge folder (K), read-only.
    Knowledge,
    /// A mini app's files (H).
    App,
    /// The Handler object a run works on (D.18).
    Subject,
}

/// A host path made visible in the sandbox (A.1, A2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Host path, absolute.
    pub source: String,
    /// Sandbox path; scope mounts use target = source.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// What it is for.
    pub kind: MountKind,
}

/// A read-only image filesystem (A6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageMount {
    /// The image, pinned to the id it resolves to when the sandbox is created (A6).
    pub image: String,
    /// Where its filesystem appears in the sandbox.
    pub target: String,
}

/// Who the process runs as (A3): v1 knows only the host user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxUser {
    /// How the process's user is chosen: v1 knows only the host user.
    pub mode: UserMode,
    /// The user's home in the sandbox.
    pub home: String,
}

/// `host-user`: the host user's uid/gid (rootless keep-id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UserMode {
    /// The host user's uid and gid (rootless, keep-id).
    HostUser,
}

/// Whether a filtered network refuses or only reports what no entry allows (A.3, A.4).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// What no entry allows is refused (403) and reported.
    #[default]
    Enforce,
    /// What no entry allows is let through and reported `unlisted`: how to learn the hosts an agent
    /// needs.
    LogOnly,
}

impl Enforcement {
    /// The word used on the command line (`set-egress NAME enforce|log-only`).
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Enforce => "enforce",
            Enforcement::LogOnly => "log-only",
        }
    }
}

/// The sandbox's network (A.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "mode",
    rename_all = "kebab-case",
    try_from = "NetworkPolicyFields"
)]
pub enum NetworkPolicy {
    /// No interface but loopback.
    None,
    /// Unrestricted egress.
    Open,
    /// Only through the sandbox's HTTP(S) proxy, to listed destinations.
    Filtered {
        /// The destinations allowed, each HOST:PORT.
        allow: Vec<AllowEntry>,
        /// Whether what no entry allows is refused or only reported.
        enforcement: Enforcement,
    },
}

/// NetworkPolicy as read: a plain struct, so that an error in an allow-list entry is reported
/// at its path (`network.allow[2]`), which serde's buffered internally tagged enums lose.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkPolicyFields {
    mode: String,
    #[serde(default)]
    allow: Option<Vec<AllowEntry>>,
    #[serde(default)]
    enforcement: Option<Enforcement>,
}

/// Why a network policy as read is not one (serde reports it at the policy's path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkPolicyError {
    /// `allow` or `enforcement` given to `none` or `open`.
    #[error("allow and enforcement belong to a filtered network, not {0}")]
    NotFiltered(String),
    /// A filtered network without `allow`.
    #[error("a filtered network needs `allow` (it may be empty)")]
    NoAllow,
    /// A filtered network without `enforcement`.
    #[error("a filtered network needs `enforcement` (enforce or log-only)")]
    NoEnforcement,
    /// Another mode.
    #[error("unknown network mode {0:?}: none, open or filtered")]
    UnknownMode(String),
}

impl TryFrom<NetworkPolicyFields> for NetworkPolicy {
    type Error = NetworkPolicyError;
    fn try_from(f: NetworkPolicyFields) -> Result<Self, NetworkPolicyError> {
        match (f.mode.as_str(), f.allow, f.enforcement) {
            ("none", None, None) => Ok(NetworkPolicy::None),
            ("open", None, None) => Ok(NetworkPolicy::Open),
            ("none" | "open", _, _) => Err(NetworkPolicyError::NotFiltered(f.mode)),
            ("filtered", Some(allow), Some(enforcement)) => {
                Ok(NetworkPolicy::Filtered { allow, enforcement })
            }
            ("filtered", None, _) => Err(NetworkPolicyError::NoAllow),
            ("filtered", _, None) => Err(NetworkPolicyError::NoEnforcement),
            (other, _, _) => Err(NetworkPolicyError::UnknownMode(other.to_string())),
        }
    }
}

/// The schema of NetworkPolicy: its tagged form.
#[derive(JsonSchema)]
#[serde(tag = "mode", rename_all = "kebab-case")]
#[allow(dead_code)]
enum NetworkPolicySchema {
    /// No interface but loopback.
    None,
    /// Unrestricted egress.
    Open,
    /// Only through the sandbox's HTTP(S) proxy, to listed destinations.
    Filtered {
        allow: Vec<AllowEntry>,
        enforcement: Enforcement,
    },
}

impl JsonSchema for NetworkPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NetworkPolicy".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        NetworkPolicySchema::json_schema(g)
    }
}

impl NetworkPolicy {
    /// `none`, `open` or `filtered`.
    pub fn mode_name(&self) -> &'static str {
        match self {
            NetworkPolicy::None => "none",
            NetworkPolicy::Open => "open",
            NetworkPolicy::Filtered { .. } => "filtered",
        }
    }
}

/// Resource limits, as podman takes them ("512m", "1.5").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// The memory limit, e.g. `512m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The CPU limit, e.g. `1.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
}

/// A host Wayland socket the process may draw on (A.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Display {
    /// The display protocol: only Wayland.
    pub mode: DisplayMode,
    /// The host's Wayland socket, absolute.
    pub socket: String,
}

/// Only Wayland (A.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DisplayMode {
    /// A Wayland socket.
    Wayland,
}

/// A secret the sandbox's proxy gives, not the process (A.3, E3).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Injection {
    /// What egress events call it, e.g. `providers/openrouter/apiKey`.
    pub name: String,
    /// What the process holds: printable, no space, at least 8 characters.
    pub phantom: String,
    /// The secret: printable ASCII, exactly as long as the phantom.
    pub value: String,
    /// Allow-list entries it is given to; at least one.
    pub hosts: Vec<AllowEntry>,
    /// Whether its phantom is also swapped in request bodies and WebSocket messages (default
    /// false: headers, Basic credentials and the URL only, decision 0033). Only for a secret an
    /// API wants in a form body (an addon's secret slot), never a model endpoint's key or token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub body: bool,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("name", &self.name)
            .field("phantom", &self.phantom)
            .field("value", &"[redacted]")
            .field("hosts", &self.hosts)
            .field("body", &self.body)
            .finish()
    }
}

/// What a runtime launches (A.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// `handler.sandbox/v1`.
    pub api_version: SandboxApiVersion,
    /// Unique per instance, e.g. `handler-<agent>-<conn>`.
    pub name: String,
    /// How locked down the sandbox is (A.5); default strict.
    #[serde(default)]
    pub confinement: Confinement,
    /// The image the process runs in.
    pub image: String,
    /// The process's command (never a secret).
    pub argv: Vec<String>,
    /// The process's environment (not PATH when pathAppend is set).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The scope.
    pub workdir: String,
    /// Who the process runs as (A3).
    pub user: SandboxUser,
    /// The host paths it sees; nothing else of the host is visible (A2).
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Read-only image filesystems (A6).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_mounts: Vec<ImageMount>,
    /// Folders put before the image's PATH, in order: a machine's parts' `bin` (issue 30
    /// item 2), found before anything of the image's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_prepend: Vec<String>,
    /// Folders appended to the image's PATH.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_append: Vec<String>,
    /// Files written into the sandbox before the process starts.
    #[serde(default)]
    pub files: Vec<GeneratedFile>,
    /// Paths the process may write besides its mounts (tmpfs).
    #[serde(default)]
    pub writable_paths: Vec<String>,
    /// Its network (A.3).
    pub network: NetworkPolicy,
    /// Memory and CPU limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// A host Wayland socket the process may draw on (A.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<Display>,
    /// Labels for listing and cleanup (agent id, connection).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The process runs on a terminal of its own (D.16), reached through `attach`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// Secrets its proxy gives towards their hosts, the process holding only phantoms (A.3, E3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<Injection>,
    /// The writable scopes' git stays writable, as the host's (an agent's `gitGuard = "open"`,
    /// a risk confirmed, D.8): the runtime does not mount their git paths read-only (decision
    /// 0031). Left out: false, every writable scope's git read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git_writable: bool,
    /// The OCI runtime the engine starts it under (a machine profile's `ociRuntime`, e.g.
    /// `runsc`: gVisor's kernel in user space), a name or an absolute path; absent: the
    /// engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_runtime: Option<String>,
}

/// One item of a host check (A.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCheckItem {
    /// What was checked.
    pub name: String,
    /// Whether it holds.
    pub ok: bool,
    /// false: only some sandboxes need it.
    pub required: bool,
    /// What was found, or how to fix it.
    pub detail: String,
}

/// What `handler-sandbox-<impl> check` prints (A.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCheck {
    /// e.g. "podman 4.3.1".
    pub runtime: String,
    /// Whether every required item holds: sandboxes can run on this host.
    pub ok: bool,
    /// Each thing checked.
    pub items: Vec<RuntimeCheckItem>,
}

/// What an egress event says happened (A.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EgressDecision {
    /// A request an entry allows, let through.
    Allowed,
    /// A request no entry allows, refused (enforce).
    Denied,
    /// A request no entry allows, let through (log only).
    Unlisted,
    /// A secret's value given to a request towards one of its hosts.
    Injected,
    /// A phantom seen going to a host it is not for: refused.
    Leak,
}

/// One `handler-egress {…}` line on the launcher's stderr (A.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressEvent {
    /// What happened.
    pub decision: EgressDecision,
    /// `<host>:<port>`, as the entry that would allow it.
    pub host: String,
    /// The injection's name, for `injected` and `leak`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// The prefix of an egress event line on stderr.
pub const EGRESS_EVENT_PREFIX: &str = "handler-egress ";

impl EgressEvent {
    /// The stderr line, without its newline.
    pub fn to_line(&self) -> String {
        format!(
            "{EGRESS_EVENT_PREFIX}{}",
            serde_json::to_string(self).expect("an egress event serializes")
        )
    }

    /// Reads a stderr line; `None` when it is not an egress event.
    pub fn from_line(line: &str) -> Option<Self> {
        serde_json::from_str(line.strip_prefix(EGRESS_EVENT_PREFIX)?.trim()).ok()
    }
}

/// Exit codes of a sandbox executable before the sandboxed process starts (A).
pub mod exit {
    /// The spec cannot be fully enforced here (A1).
    pub const UNENFORCEABLE: i32 = 64;
    /// The spec is invalid.
    pub const INVALID_SPEC: i32 = 65;
    /// Setup failed.
    pub const SETUP_FAILED: i32 = 66;
}

/// Whether `r` can name an OCI runtime: a name (letters, digits, `.`, `_`, `-`, not starting
/// with `-`) or an absolute path of such names — never an option an engine would read.
pub fn is_oci_runtime(r: &str) -> bool {
    let name_ok = |n: &str| {
        !n.is_empty()
            && !n.starts_with('-')
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    match r.strip_prefix('/') {
        Some(path) => path.split('/').all(|n| name_ok(n) && n != ".."),
        None => name_ok(r) && r.len() <= 64,
    }
}

/// The line a tty launch prints on stderr once it waits for `attach` (A).
pub const TTY_READY_LINE: &str = "handler-ready";

/// Where the sandbox finds the CA bundle with its proxy's CA (A.3, trust).
pub const CA_BUNDLE_PATH: &str = "/run/handler/ca-bundle.pem";

/// The variables pointed at the CA bundle; a spec's env must not set them (A.3).
pub const CA_ENV_VARS: [&str; 6] = [
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "DENO_CERT",
];

/// The proxy variables the runtime sets for a filtered sandbox (A.3).
pub const PROXY_ENV_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
];

/// The display variables a spec's env must not set (A7).
pub const DISPLAY_ENV_VARS: [&str; 3] = ["WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "DISPLAY"];
