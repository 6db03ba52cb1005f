//! The JSON Schemas (draft 2020-12) of every document, generated from the types. `schemas/` holds
//! them as committed files; `gen-schemas` writes them and a test fails when they drift.

use serde_json::Value;

macro_rules! schemas {
    ($($file:literal => $ty:ty),* $(,)?) => {
        /// Every schema: (file stem under `schemas/`, schema). Sorted by file stem.
        pub fn all_schemas() -> Vec<(&'static str, Value)> {
            let mut v = vec![$(($file, schema_of::<$ty>())),*];
            v.sort_by(|a, b| a.0.cmp(b.0));
            v
        }
    };
}

fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let schema = generator.into_root_schema_for::<T>();
    serde_json::to_value(schema).expect("a schema serializes")
}

use crate::access::*;
use crate::addon::*;
use crate::control::*;
use crate::harness::*;
use crate::miniapp::*;
use crate::sandbox::*;
use crate::session::*;

schemas! {
    // A
    "sandbox-spec" => SandboxSpec,
    "runtime-check" => RuntimeCheck,
    "egress-event" => EgressEvent,
    // B
    "harness-descriptor" => HarnessDescriptor,
    "render-input" => RenderInput,
    "harness-launch" => HarnessLaunch,
    "toolbox-manifest" => ToolboxManifest,
    // E
    "account" => Account,
    "provider" => Provider,
    "agent-spec" => AgentSpec,
    "secret-ref" => SecretRef,
    // D
    "harness-info" => HarnessInfo,
    "toolbox-info" => ToolboxInfo,
    "image-updates" => ImageUpdates,
    "image-updates-request" => ImageUpdatesRequest,
    "toolbox-containerfile" => ToolboxContainerfile,
    "toolbox-containerfile-update" => ToolboxContainerfileUpdate,
    "addon-info" => AddonInfo,
    "addon-catalog-entry" => AddonCatalogEntry,
    "addon-preview" => AddonPreview,
    "addon-preview-request" => AddonPreviewRequest,
    "addon-install-request" => AddonInstallRequest,
    "addon-installed" => AddonInstalled,
    "binding-info" => BindingInfo,
    "binding-request" => BindingRequest,
    "skill-info" => SkillInfo,
    "skill-request" => SkillRequest,
    "create-skill-request" => CreateSkillRequest,
    "skill-url-request" => SkillUrlRequest,
    "skill-file-request" => SkillFileRequest,
    "build" => Build,
    "build-log" => BuildLog,
    "model-access" => ModelAccess,
    "agent-settings" => AgentSettings,
    "agent" => Agent,
    "agent-request" => AgentRequest,
    "ad-hoc-agent-request" => AdHocAgentRequest,
    "project" => Project,
    "knowledge-listing" => KnowledgeListing,
    "knowledge-folder-view" => KnowledgeFolderView,
    "knowledge-note" => KnowledgeNote,
    "session-input" => SessionInput,
    "session-output" => SessionOutput,
    "builtin-agent" => BuiltinAgent,
    "context-info" => ContextInfo,
    "terminal-start" => TerminalStart,
    "terminal-started" => TerminalStarted,
    "network-filter-info" => NetworkFilterInfo,
    "problem" => Problem,
    // F
    "session" => Session,
    "session-event" => SessionEvent,
    // G
    "addon" => AddonManifest,
    "binding" => Binding,
    // H
    "miniapp" => MiniAppManifest,
}

/// The text of a schema file as `gen-schemas` writes it: pretty JSON and a final newline.
pub fn schema_file_text(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).expect("a schema serializes");
    s.push('\n');
    s
}
