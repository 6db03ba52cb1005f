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
    "exec-spec" => crate::machine::ExecSpec,
    "machine-stats" => crate::machine::MachineStats,
    "machine-request" => crate::machine::MachineRequest,
    "machine-info" => crate::machine::MachineInfo,
    "machine-event" => crate::machine::events::MachineEvent,
    "profiles" => crate::machine::profile::Profiles,
    "exec-end" => crate::machine::exec_channel::ExecEnd,
    // D.7 (docs/remote.md)
    "remote-envelope" => crate::remote::envelope::Envelope,
    "remote-status" => crate::remote::api::RemoteStatus,
    "remote-session-frame" => crate::remote::device::SessionFrame,
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
    "project-removed" => ProjectRemoved,
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
    "app-info" => AppInfo,
    "app-register-request" => AppRegisterRequest,
    "app-deploy-request" => AppDeployRequest,
    "app-rollback-request" => AppRollbackRequest,
    "app-secret-request" => AppSecretRequest,
    "app-login" => AppLogin,
    "app-notifications" => AppNotifications,
}

/// Rules the schemas state beyond what the types say, for the derive's `transform` attributes:
/// each mirrors a check of [`crate::validate`].
pub(crate) mod rules {
    use schemars::Schema;
    use serde_json::{Value, json};

    use crate::patterns;
    use crate::sandbox::{CA_ENV_VARS, PROXY_ENV_VARS};

    /// A provider's endpoints: at least one, each an http(s) URL.
    pub(crate) fn http_url_values(s: &mut Schema) {
        s.insert("minProperties".into(), json!(1));
        // A map keyed by an enum has one property per key; other maps, `additionalProperties`.
        if let Some(Value::Object(props)) = s.get_mut("properties") {
            for v in props.values_mut() {
                if let Value::Object(v) = v {
                    v.insert("pattern".into(), json!(patterns::HTTP_URL));
                }
            }
        }
        if let Some(Value::Object(values)) = s.get_mut("additionalProperties") {
            values.insert("pattern".into(), json!(patterns::HTTP_URL));
        }
    }

    /// What an addon's variable may not be named (G1): the platform's.
    fn addon_reserved() -> Value {
        let mut names = vec!["PATH", "HOME"];
        names.extend(PROXY_ENV_VARS);
        names.extend(CA_ENV_VARS);
        json!({"enum": names})
    }

    /// An addon slot's variable: an environment variable name the platform does not own.
    pub(crate) fn addon_env_name(s: &mut Schema) {
        s.insert("pattern".into(), json!(patterns::ENV_NAME));
        s.insert("not".into(), addon_reserved());
    }

    /// An addon's `env` table: its keys are variable names the platform does not own.
    pub(crate) fn addon_env_keys(s: &mut Schema) {
        s.insert(
            "propertyNames".into(),
            json!({"pattern": patterns::ENV_NAME, "not": addon_reserved()}),
        );
    }

    /// A mini app's secrets (H.2): names of its form, none twice, none the platform's.
    pub(crate) fn miniapp_secret_names(s: &mut Schema) {
        let mut reserved = vec!["PATH", "HOME", "NO_COLOR", "TINI_SUBREAPER"];
        reserved.extend(
            PROXY_ENV_VARS
                .iter()
                .filter(|v| v.bytes().all(|b| !b.is_ascii_lowercase())),
        );
        s.insert("uniqueItems".into(), json!(true));
        s.insert(
            "items".into(),
            json!({
                "type": "string",
                "pattern": patterns::MINIAPP_SECRET_NAME,
                "not": {"anyOf": [
                    {"pattern": "^HANDLER_"},
                    {"pattern": "^DENO_"},
                    {"enum": reserved}
                ]}
            }),
        );
    }
}

/// The text of a schema file as `gen-schemas` writes it: pretty JSON and a final newline.
pub fn schema_file_text(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).expect("a schema serializes");
    s.push('\n');
    s
}
