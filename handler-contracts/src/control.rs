//! Contract D: the Control API's resources (D.1 and the sections that define bodies: D.8, D.16,
//! D.18, D.19) and its problem+json errors.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::allow::AllowEntry;
use crate::harness::{Login, PermissionMode};
use crate::sandbox::{Confinement, Enforcement};

mod bodies;
pub use bodies::*;

/// A network mode as an agent chooses it (D.1).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// No network at all (loopback only).
    None,
    /// Only through the sandbox's proxy, to the hosts allowed.
    Filtered,
    /// Unrestricted network.
    Open,
}

/// A harness as the API shows it (D.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarnessInfo {
    /// The harness's name.
    pub name: String,
    /// The product's name, what the UI shows (e.g. "Claude Code").
    pub product: String,
    /// The image repository (B.6); agents launch its `:latest`.
    pub image: String,
    /// Whether the image is built on this machine.
    pub image_present: bool,
    /// What `:latest` installed (B.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When `:latest` was built (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_at: Option<String>,
    /// The protocols it can use a provider with; empty: accounts only.
    pub provider_protocols: Vec<String>,
    /// How an account of it logs in (B.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<Login>,
    /// A file login's file name in its `{dir}` (D.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_file: Option<String>,
    /// The permission modes it offers (B.1).
    pub permissions: Vec<PermissionMode>,
}

/// The toolbox image (D.1, B.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolboxInfo {
    /// The toolbox image's repository.
    pub image: String,
    /// Whether the image is built on this machine.
    pub image_present: bool,
    /// When it was built (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_at: Option<String>,
    /// The user's toolbox folder (B.6).
    pub directory: String,
}

/// How often images are rebuilt (D.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateSchedule {
    /// Never: images are rebuilt only when asked.
    Off,
    /// Once a day.
    Daily,
    /// Once a week (the default).
    #[default]
    Weekly,
}

/// Automatic image updates (D.4). Stored in `<state>/image-updates.json`: unknown fields kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdates {
    /// How often images are rebuilt.
    pub schedule: UpdateSchedule,
    /// A run is in progress.
    pub running: bool,
    /// When the last run started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<String>,
    /// When the next run starts; none when off, now after a Handler upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<String>,
    /// The targets whose rebuild failed in the last run.
    #[serde(default)]
    pub last_failed: Vec<String>,
    /// Fields this version does not know, kept when the document is rewritten.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map<String, Value>,
}

/// PUT /v1/image-updates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageUpdatesRequest {
    /// The new schedule.
    pub schedule: UpdateSchedule,
}

/// The toolbox Containerfile (B.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolboxContainerfile {
    /// The user's Containerfile.
    pub content: String,
    /// The platform's default Containerfile, to compare or start again from.
    pub default_content: String,
}

/// PUT /v1/toolbox/containerfile: at most 256 KiB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolboxContainerfileUpdate {
    /// The new Containerfile (at most 256 KiB).
    pub content: String,
}

/// A slot of an addon, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonSlotInfo {
    /// The slot's name.
    pub name: String,
    /// Whether a binding must fill it.
    pub required: bool,
    /// What to put in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An addon as the API shows it (G.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonInfo {
    /// The addon's name (its folder's).
    pub name: String,
    /// What it gives an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its image repository, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Whether its image is built on this machine.
    pub image_present: bool,
    /// What its `:latest` installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When its `:latest` was built (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_at: Option<String>,
    /// The commands its image provides.
    pub commands: Vec<String>,
    /// The skills it brings.
    pub skills: Vec<String>,
    /// What a binding fills in: its settings.
    pub settings: Vec<AddonSlotInfo>,
    /// What a binding fills in: its secrets.
    pub secret_slots: Vec<AddonSlotInfo>,
    /// What its bindings' agents reach (its secrets' hosts).
    pub egress: Vec<String>,
    /// Why the addon's files are invalid, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where it is loaded from (G.1).
    pub directory: String,
    /// Shipped with Handler; else the user's.
    pub builtin: bool,
    /// The user's, in place of the built-in addon of that name.
    pub overrides_builtin: bool,
    /// Where it was installed from (G.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Installed from the catalog, which now ships other content.
    pub update_available: bool,
}

/// An entry of the addon catalog (G.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonCatalogEntry {
    /// The addon's name.
    pub name: String,
    /// What it gives an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it is installed.
    pub installed: bool,
}

/// What an installed addon replaces (G.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AddonReplaces {
    /// The built-in addon of that name.
    Builtin,
    /// An addon installed earlier from a source.
    Installed,
    /// The user's own addon of that name.
    Own,
}

/// What installing a source would bring (G.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonPreview {
    /// The source previewed, as given.
    pub source: String,
    /// The digest of what was found there; installing names it, so that what is installed is what
    /// was seen.
    pub digest: String,
    /// The addon's name.
    pub name: String,
    /// What it gives an agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its image, when it has one: its Containerfile runs code when built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The commands its image provides.
    pub commands: Vec<String>,
    /// The variables it sets.
    pub env: Vec<String>,
    /// Its settings.
    pub settings: Vec<AddonSlotInfo>,
    /// Its secrets.
    pub secret_slots: Vec<AddonSlotInfo>,
    /// The hosts its tools reach.
    pub egress: Vec<String>,
    /// Its MCP server's command, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<String>>,
    /// The skills it brings.
    pub skills: Vec<String>,
    /// What installing it replaces, when an addon of that name exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<AddonReplaces>,
}

/// POST /v1/addons/preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonPreviewRequest {
    /// `catalog:<name>`, an absolute folder, or an https:// `.tar.gz`.
    pub source: String,
}

/// POST /v1/addons/install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonInstallRequest {
    /// The source, as previewed.
    pub source: String,
    /// The digest the preview gave: installing refuses other content.
    pub digest: String,
}

/// An image build (D.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BuildState {
    /// In progress.
    Running,
    /// Built, checked and switched to.
    Succeeded,
    /// Stopped by an error (`error` says which).
    Failed,
    /// Cancelled before it ended.
    Cancelled,
}

/// A rebuild (D.4). Stored by the daemon: unknown fields kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    /// The build's id.
    pub id: String,
    /// A harness name, "toolbox", "network-filter" or `addon:<name>`.
    pub target: String,
    /// Where it is.
    pub state: BuildState,
    /// What it does now, e.g. "build vibe", "check vibe", "switch".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Podman's STEP n of the current image build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// Podman's m of STEP n/m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// Harness → what its new image installed.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Fields this version does not know, kept when the document is rewritten.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map<String, Value>,
}

/// An installed addon and its first build (G.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonInstalled {
    /// The addon, as installed.
    pub addon: AddonInfo,
    /// Its image's first build, when it has an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
}

/// A build's log (D.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildLog {
    /// The log from the offset asked for.
    pub text: String,
    /// The offset to ask from next.
    pub next_offset: u64,
    /// The build ended: nothing more will come.
    pub complete: bool,
}

/// A binding as the API shows it (G.2): secret slot names only, never their references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingInfo {
    /// The binding's name.
    pub name: String,
    /// The addon it binds, when its file names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addon: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its settings' values.
    pub settings: BTreeMap<String, String>,
    /// The secret slots it fills (names only, never their references).
    pub secrets: Vec<String>,
    /// The bound secret slots with an env, file or command reference (written by hand).
    pub hand_written: Vec<String>,
    /// The bound secret slots that name a value of the secret store (D.14): slot → its path
    /// (a path, never the value; decision 0109).
    #[serde(default)]
    pub secret_paths: BTreeMap<String, String>,
    /// Why it is invalid (then it cannot be selected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agents that picked it: `agents/<project>/<name>`, `ad-hoc/<agent id>`.
    pub used_by: Vec<String>,
}

/// Create or replace (and rename) a binding (D.15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingRequest {
    /// Its name (a new name renames it).
    pub name: String,
    /// The addon it binds.
    pub addon: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A value for each setting.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// New values, to the secret store.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Secret slots to empty.
    #[serde(default)]
    pub remove_secrets: Vec<String>,
    /// Secret slots given a value already in the secret store (D.14): slot → its path, one
    /// that is set and not an account's token (decision 0109).
    #[serde(default)]
    pub secret_paths: BTreeMap<String, String>,
}

/// A place in a skill's files (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScanHit {
    /// The file, relative to the skill's folder.
    pub path: String,
    /// The line, 1-based.
    pub line: u32,
    /// What was found: a host, the line with its hidden characters shown, a blob's start.
    pub text: String,
}

/// What handlerd finds in a skill's files (D.17); at most 100 of each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillScan {
    /// Executable files (paths).
    pub executables: Vec<String>,
    /// Files that are not UTF-8 text.
    pub binaries: Vec<String>,
    /// URLs in its text, by host.
    pub hosts: Vec<ScanHit>,
    /// Invisible or bidirectional Unicode (format characters).
    pub hidden_text: Vec<ScanHit>,
    /// Long base64 or hex runs.
    pub blobs: Vec<ScanHit>,
}

/// One file of a skill's folder (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillFile {
    /// Its path, relative to the skill's folder.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it is executable.
    pub executable: bool,
    /// Its text, when one file is read and it is UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A skill of the library (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillInfo {
    /// The skill's name (its folder's and its SKILL.md's).
    pub name: String,
    /// Its SKILL.md's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The projects (ids) that give it to all their agents.
    pub projects: Vec<String>,
    /// Its folder's other files (no hidden ones, no links).
    pub files: Vec<SkillFile>,
    /// Why it is invalid (then no agent can use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agents that picked it: `agents/<project>/<agent>`, `ad-hoc/<agent>`.
    pub used_by: Vec<String>,
    /// Its SKILL.md, when one skill is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// When one skill is read: `sha256:…` of its files (what a review saw, D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When one skill is read: what handlerd finds in its files, no model involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<SkillScan>,
}

/// Create or replace a skill (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillRequest {
    /// Its SKILL.md (its frontmatter's name names it: a new name renames it).
    pub content: String,
    /// The projects (ids) that give it to all their agents; left out: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<String>>,
}

/// Create a skill, maybe as a copy of another's files (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSkillRequest {
    /// Its SKILL.md.
    pub content: String,
    /// The projects (ids) that give it to all their agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<String>>,
    /// A skill whose other files the new one starts with (its own SKILL.md is `content`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_of: Option<String>,
}

/// Import a skill from a URL (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillUrlRequest {
    /// An https:// URL: a repository's folder or an archive.
    pub url: String,
}

/// Write one file of a skill: exactly one of text and base64 (D.17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    {"required": ["text"], "not": {"required": ["base64"]}},
    {"required": ["base64"], "not": {"required": ["text"]}}
]))]
pub struct SkillFileRequest {
    /// The file's content as UTF-8 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The file's content in base64 (a binary file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// Whether the file is executable; left out: unchanged (a new file: not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<bool>,
}

/// What an agent runs as (D.1, E): exactly one of account and provider; a provider needs the
/// harness that talks to it.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend(
    "oneOf" = [
        {"required": ["account"], "not": {"required": ["provider"]}},
        {"required": ["provider", "harness"], "not": {"required": ["account"]}}
    ]
))]
pub struct ModelAccess {
    /// The harness: an account's by default; a provider needs the harness that talks to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    /// The account it runs on (exactly one of account and provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The provider it runs on (exactly one of account and provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model; default: the harness's or the provider's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What a run takes and gives back (D.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// An object schema (draft 2020-12): the form filled to start a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Value>,
    /// The Handler object a run works on, read-only at `/subject/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<InterfaceSubject>,
    /// What its final message gives back.
    pub result: Value,
    /// The longest a turn may take, in seconds (default 1800, at most 86 400).
    #[serde(default = "default_timeout_sec")]
    pub timeout_sec: u32,
}

fn default_timeout_sec() -> u32 {
    1800
}

/// The Handler object a run works on (D.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InterfaceSubject {
    /// A skill of the library (D.17).
    Skill,
}

/// How an agent is contained and equipped, but not where it works (D.1 AgentSettings, without
/// its models).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentOptions {
    /// Its network; left out: the preset of new agents (filtered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkMode>,
    /// Filtered only: refuse what no entry allows, or only report it (live-switchable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Enforcement>,
    /// Its own allow-list entries, on top of those its models and addons require.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<AllowEntry>,
    /// How locked down its sandboxes are (A.5); default strict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<Confinement>,
    /// Its starting mode, one every harness of its models offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionMode>,
    /// Its addons, by binding name (G.3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<String>,
    /// Knowledge folders (D.5), relative to the knowledge root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<String>,
    /// Its sandboxes get the host's Wayland display (A.6).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub display: bool,
    /// "Start from my own settings" (issue 30 item 4, decision 0154): its state is seeded once
    /// from the person's own harness settings (never a login), a later change offered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed_state: bool,
    /// What a run takes and gives back; its sessions are then unattended (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<AgentInterface>,
    /// Filtered only: a host the proxy denies becomes a permission question in its sessions'
    /// clients (allow once, allow always, reject); left out: yes. Never for runs (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_denied_hosts: Option<bool>,
    /// How a scope's git directory is guarded in its sandboxes (issue 14); left out: fetch.
    /// `open` widens (a risk to confirm, D.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_guard: Option<GitGuard>,
    /// What its sandboxes see at the scope (issue 14, decision 0103): one of [`SessionTree`]'s
    /// names; left out: shared. Text, so that a wrong value is a 400 naming `sessionTree` at
    /// save. `copy` needs the scope to be a git repository's root with a commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<SessionTree>")]
    pub session_tree: Option<String>,
    /// The machine its sessions run in (issue 29, decision 0147): one made for it
    /// (`POST /v1/machines` with `agents`), or `disposable`: a machine made for each session
    /// at its start and removed `disposableDelayMs` after it ends (decision 0148); left out:
    /// each session in a sandbox of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// With `machine: disposable`: milliseconds a session's machine is kept after the session
    /// ends (a resumed session finds it again); left out: 300000, five minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposable_delay_ms: Option<u64>,
}

/// What a sandbox sees at its scope's path (issue 14, decision 0103): the names
/// `sessionTree` takes (parsed by `handler_sandbox::copytree::SessionTree::parse`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionTree {
    /// The host's tree is bound read-write (the git guard gives only the git directory).
    #[default]
    Shared,
    /// A checkout of Handler's own (working tree and `.git`), nothing of the host's tree bound;
    /// the host's tree moves only by `merge --ff-only` when the work comes back.
    Copy,
}

/// How a scope's git directory is guarded in a sandbox (issue 14), the narrower first.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GitGuard {
    /// The sandbox commits in a git directory of its own, the host's objects read-only; the
    /// work comes back by bundle (docs/git-guard.md).
    #[default]
    Fetch,
    /// The host's `.git` writable in the sandbox, as before the guard: a hook, a config or a
    /// link the agent plants there runs or is written through in the person's next git command.
    Open,
}

impl GitGuard {
    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            GitGuard::Fetch => "fetch",
            GitGuard::Open => "open",
        }
    }
}

/// The warning an agent with `gitGuard = "open"` is shown with.
pub const GIT_GUARD_OPEN_WARNING: &str = "gitGuard open: the host's .git is writable in its sandboxes; a hook, config or link an agent writes there runs in your next git command";

/// How an agent is set up (D.1 AgentSettings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSettings {
    /// 1..n, once each, the first by default.
    pub models: Vec<ModelAccess>,
    /// How it is contained and what it gets: network, confinement, mode, addons, knowledge.
    #[serde(flatten)]
    pub options: AgentOptions,
}

/// A host an agent's sandbox requires, and what requires it (E4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequiredHost {
    /// The allow-list entry required.
    pub host: AllowEntry,
    /// What requires it, e.g. `addon playwright: browser` (the addon and its binding).
    pub by: String,
}

/// One of an agent's models, as it is now (D.1 AgentModel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentModel {
    /// The harness, resolved.
    pub harness: String,
    /// The account, when it runs on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The provider, when it runs on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why a session cannot start with it now (E1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Filtered only: what its account or provider, the agent's HTTP MCP servers and its addons
    /// require in a sandbox running with it (E4).
    #[serde(default)]
    pub required_hosts: Vec<RequiredHost>,
}

/// One of an agent's running sandboxes (D.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentConnection {
    /// The connection's id.
    pub id: String,
    /// Its sandbox's name.
    pub sandbox: String,
    /// When it started (RFC 3339).
    pub since: String,
    /// A terminal's (D.16): the model it runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<ModelAccess>,
}

/// An agent (D.1). Stored in `<state>/agents.json`: unknown fields kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// Its id, kept when its settings change.
    pub id: String,
    /// Its models, the first the default: each session runs with one (F.3).
    pub models: Vec<AgentModel>,
    /// Its folder; absent (only without a project): each session works in a folder of its own
    /// (F.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Its network.
    pub network: NetworkMode,
    /// How locked down its sandboxes are.
    pub confinement: Confinement,
    /// Its starting permission mode.
    pub permissions: PermissionMode,
    /// Filtered only: refuse or only report what no entry allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Enforcement>,
    /// Its own allow-list entries.
    #[serde(default)]
    pub allow: Vec<AllowEntry>,
    /// Its addons, by binding name.
    #[serde(default)]
    pub bindings: Vec<String>,
    /// Its knowledge folders, relative to the knowledge root.
    #[serde(default)]
    pub knowledge: Vec<String>,
    /// Its sandboxes get the host's Wayland display.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub display: bool,
    /// Its state is seeded from the person's own settings (decision 0154).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed_state: bool,
    /// What a run takes and gives back (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<AgentInterface>,
    /// Filtered only: whether a denied host is asked about in its sessions (left out: yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_denied_hosts: Option<bool>,
    /// How its scope's git directory is guarded (left out: fetch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_guard: Option<GitGuard>,
    /// What its sandboxes see at the scope (left out: shared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<SessionTree>")]
    pub session_tree: Option<String>,
    /// The machine its sessions run in (decision 0147), `disposable`: one per session
    /// (decision 0148); left out: a sandbox of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// With `machine: disposable`: how long a session's machine outlives it (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposable_delay_ms: Option<u64>,
    /// What a person should know before using it (`gitGuard` open: the host's `.git` writable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Its name (optional for an ad-hoc agent: clients fall back to the folder's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The project it is an agent of (D.8); none: ad hoc.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Sent before a session's first request (F.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// An ad-hoc agent's: the built-in agent it is (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The skills it picked (D.17).
    #[serde(default)]
    pub skills: Vec<String>,
    /// The skills its project gives all its agents (D.17).
    #[serde(default)]
    pub project_skills: Vec<String>,
    /// Its project's context (D.19): the models it may run with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Its ACP URL (C.1): a plain connection runs with its first model, or the one its query names.
    pub acp_url: String,
    /// Its running sandboxes (connections, sessions, terminals).
    #[serde(default)]
    pub connections: Vec<AgentConnection>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Its last session start or resume, or connection (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// In the answer to a PUT or PATCH while the agent has running sandboxes: the fields that
    /// changed and apply only to its next sandbox (network, confinement, scope, instructions…);
    /// its allow-list and enforcement reach the running ones at once (A.4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_sandbox: Vec<String>,
    /// Fields this version does not know, kept when the document is rewritten.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map<String, Value>,
}

/// Create (POST) or replace (PUT) an agent of a project (D.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentRequest {
    /// Its models (1..n, once each), the first the default.
    pub models: Vec<ModelAccess>,
    /// How it is contained and what it gets.
    #[serde(flatten)]
    pub options: AgentOptions,
    /// Its goal; required, unique in the project (case-insensitive).
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Sent before a session's first request (F.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// It becomes its project's default agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// The owner's paired devices may start sessions of it (D.7).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote_start: bool,
    /// Skills it picks, not its project's (D.17); default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = crate::patterns::SKILL_NAME), length(max = 64)))]
    pub skills: Vec<String>,
    /// Save although it widens what the agent may do (network, confinement, mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirm_risks: bool,
}

/// Create (POST /v1/agents) or replace an ad-hoc agent (D.1, D.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdHocAgentRequest {
    /// Its models (1..n, once each), the first the default.
    pub models: Vec<ModelAccess>,
    /// How it is contained and what it gets.
    #[serde(flatten)]
    pub options: AgentOptions,
    /// Its folder; none: each session works in a folder of its own (F.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Its name; default: its folder's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Sent before a session's first request (F.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The built-in agent it is set up from (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Skills it picks (D.17); default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = crate::patterns::SKILL_NAME), length(max = 64)))]
    pub skills: Vec<String>,
    /// The owner's paired devices may start sessions of it (D.7), as a project's agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote_start: bool,
    /// Save although it widens what the agent may do (network, confinement, mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirm_risks: bool,
}

/// Where a project's agents keep the toolbox's caches (D.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CacheChoice {
    /// Caches of its own, for the project's agents (the default).
    #[default]
    Project,
    /// The caches every project with `global` shares.
    Global,
    /// No caches: every start downloads again.
    Off,
}

/// A project (D.8). Stored in `<state>/projects.json`: unknown fields kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// "p_" + 10 hex.
    pub id: String,
    /// Its name; default: its folder's.
    pub name: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its folder (one project per folder).
    pub folder: String,
    /// The agent a request goes to unless another is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_agent: Option<String>,
    /// The toolbox's caches (B.6) its agents get.
    pub caches: CacheChoice,
    /// Its context (D.19): only the accounts and providers made for it run its agents; none: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Its agents: the default first, then by name.
    #[serde(default)]
    pub agents: Vec<Agent>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Its agents' last use (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
    /// Fields this version does not know, kept when the document is rewritten.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map<String, Value>,
}

/// The knowledge root and its folders (D.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeListing {
    /// The knowledge root (absolute).
    pub root: String,
    /// Where the root comes from.
    pub source: KnowledgeRootSource,
    /// Whether the root exists.
    pub exists: bool,
    /// Its folders an agent may be given, relative to it.
    pub folders: Vec<String>,
}

/// Where the knowledge root comes from (D.5 K4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KnowledgeRootSource {
    /// `$HANDLER_KNOWLEDGE_DIR`.
    Env,
    /// Handler's configuration.
    Config,
    /// The default folder.
    Default,
}

/// One knowledge folder, browsed (D.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeFolderView {
    /// The folder, relative to the root.
    pub path: String,
    /// Its sub-folders.
    pub folders: Vec<String>,
    /// Its notes (files).
    pub notes: Vec<String>,
    /// Its index note's text, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
}

/// A knowledge note (D.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeNote {
    /// The note, relative to the root.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// A run's input (D.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInput {
    /// The form filled, valid against the interface's `fields`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Map<String, Value>>,
    /// The Handler object the run works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<SubjectRef>,
}

/// The skill a run works on (D.18).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubjectRef {
    /// The skill's name.
    pub skill: String,
    /// Set by handlerd at the start: what the run saw (D.17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// A run's result (D.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionOutput {
    /// Whether the value matches the interface's `result`.
    pub valid: bool,
    /// The parsed result (valid or not, when it parsed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Why it is not valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A built-in agent (D.18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuiltinAgent {
    /// Its name (the origin of the agent set up from it).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// The name the agent set up from it gets.
    pub agent_name: String,
    /// The description the agent set up from it gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_description: Option<String>,
    /// The instructions the agent set up from it gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Its default network.
    pub network: NetworkMode,
    /// Its default enforcement (filtered only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Enforcement>,
    /// Its default allow-list entries.
    #[serde(default)]
    pub allow: Vec<AllowEntry>,
    /// Its default confinement.
    pub confinement: Confinement,
    /// Its default permission mode.
    pub permissions: PermissionMode,
    /// The skills that come with it (installed in the library).
    #[serde(default)]
    pub skills: Vec<String>,
    /// What a run of it takes and gives back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<AgentInterface>,
    /// Its skills fetched from their upstream when it is set up (not shipped with Handler,
    /// decision 0123); also named in `skills`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fetches: Vec<UpstreamSkill>,
    /// The agent set up from it, once there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// A built-in agent's skill fetched from its upstream at set-up, pinned by its digest
/// (decision 0123).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSkill {
    /// The skill's name in the library.
    pub name: String,
    /// Where it is fetched from (an `https://` archive or a repository's folder).
    pub url: String,
    /// Its licence (an SPDX identifier); its licence file is kept in the skill's folder.
    pub license: String,
    /// The digest it must have (`SkillInfo.digest`'s), else the set-up is refused.
    pub digest: String,
}

/// A context's colour (D.19).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ContextColor {
    /// The UI's blue context badge.
    Blue,
    /// The UI's violet context badge.
    Violet,
    /// The UI's cyan context badge.
    Cyan,
    /// The UI's pink context badge.
    Pink,
    /// The UI's slate context badge.
    Slate,
}

/// A project context (D.19).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextInfo {
    /// 1–32 letters, digits, spaces, - and _; never "any".
    pub name: String,
    /// Its color in the UI (never the accent's nor a status's).
    pub color: ContextColor,
    /// The projects in it, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<String>>,
    /// The accounts made for it (not those for `any`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<String>>,
    /// The providers made for it (not those for `any`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<String>>,
}

/// POST /v1/agents/{id}/terminal (D.16).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerminalStart {
    /// The client's terminal type, given as TERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<String>,
    /// The client's COLORTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colorterm: Option<String>,
    /// Arguments for the program (B8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The model it runs with; default: the agent's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelAccess>,
}

/// A started terminal (D.16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerminalStarted {
    /// The sandbox's name.
    pub sandbox: String,
    /// The command that puts the program on the client's terminal (the sandbox's `attach`).
    pub attach: Vec<String>,
}

/// The network filter image (D.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkFilterInfo {
    /// The proxy image's repository.
    pub image: String,
    /// Whether it is built on this machine.
    pub image_present: bool,
    /// What its `:latest` installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When its `:latest` was built (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_at: Option<String>,
}

/// An error of the Control API, `application/problem+json` (RFC 9457).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URI naming the problem's type (`type` in JSON).
    #[serde(rename = "type", default = "about_blank")]
    pub kind: String,
    /// A short summary of the problem's type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The request's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

fn about_blank() -> String {
    "about:blank".to_string()
}

/// One seed of an agent's state as it stands (decision 0154): `GET /v1/agents/{id}/seed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeedInfo {
    /// The harness and the account or provider whose state it is (`claude-code@perso`).
    pub state: String,
    /// The state slot.
    pub slot: String,
    /// The person's file or folder (`~/…`).
    pub source: String,
    /// `seeded` (as copied), `changed` (the host's differs since: offered, never forced),
    /// `absent` (not on this host: skipped), `new` (not seeded yet).
    pub status: SeedStatus,
    /// When it was last copied (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeded_at: Option<String>,
}

/// Where a seed stands (decision 0154).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SeedStatus {
    /// Copied, and the host's is as it was.
    Seeded,
    /// The host's changed since it was copied.
    Changed,
    /// Not on this host.
    Absent,
    /// Not copied yet (the agent's next session seeds it).
    New,
}
