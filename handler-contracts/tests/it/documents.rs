//! Round-trips every document type through its fixtures (parse → serialize → parse), checks
//! that read-modify-written documents keep fields this version does not know, and validates
//! every fixture against its committed JSON Schema.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::path::{Path, PathBuf};

use handler_contracts::access::{Account, Provider};
use handler_contracts::access::{AgentSpec, SecretRef};
use handler_contracts::addon::{AddonManifest, Binding};
use handler_contracts::control::*;
use handler_contracts::harness::{HarnessDescriptor, HarnessLaunch, RenderInput, ToolboxManifest};
use handler_contracts::miniapp::MiniAppManifest;
use handler_contracts::parse::{from_json, from_toml};
use handler_contracts::sandbox::{EgressEvent, RuntimeCheck, SandboxSpec};
use handler_contracts::session::{Session, SessionEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn fixtures(kind: &str, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root().join("fixtures/contracts").join(kind)];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    assert!(!out.is_empty(), "no .{ext} fixtures for {kind}");
    out.sort();
    out
}

fn schema_validator(schema: &str) -> jsonschema::Validator {
    let path = root().join("schemas").join(format!("{schema}.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn assert_schema_valid(schema: &str, what: &Path, value: &Value) {
    let v = schema_validator(schema);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} does not match schemas/{schema}.schema.json:\n{}",
        what.display(),
        errors.join("\n")
    );
}

/// Every field of `original` is in `out` with the same value (unknown fields included); only a
/// field holding its default (false, null, [] or {}) may be left out when written again.
fn assert_kept(original: &Value, out: &Value, what: &str, path: &str) {
    match (original, out) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => assert_kept(v, w, what, &p),
                    None => assert!(
                        matches!(v, Value::Bool(false) | Value::Null)
                            || v.as_array().is_some_and(std::vec::Vec::is_empty)
                            || v.as_object().is_some_and(serde_json::Map::is_empty),
                        "{what}: {p} was lost in a round trip"
                    ),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{what}: {path} changed length");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_kept(x, y, what, &format!("{path}[{i}]"));
            }
        }
        (a, b) => assert_eq!(a, b, "{what}: {path} changed in a round trip"),
    }
}

/// TOML documents: parse, serialize, parse again; and the document as JSON matches the schema.
fn toml_roundtrip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    kind: &str,
    schema: &str,
) {
    for path in fixtures(kind, "toml") {
        let text = std::fs::read_to_string(&path).unwrap();
        let what = path.display().to_string();
        let doc: T = from_toml(&what, &text).unwrap_or_else(|e| panic!("{e}"));
        let again = toml::to_string(&doc).unwrap_or_else(|e| panic!("{what}: serialize: {e}"));
        let back: T = from_toml(&what, &again)
            .unwrap_or_else(|e| panic!("{what} after a round trip: {e}\n{again}"));
        assert_eq!(doc, back, "{what}: changed in a round trip");
        let as_json: Value =
            serde_json::to_value(toml::from_str::<toml::Value>(&text).unwrap()).unwrap();
        assert_schema_valid(schema, &path, &as_json);
    }
}

/// JSON documents (whole files or one per line): parse, serialize, parse again, same JSON value
/// as the fixture (so unknown fields are kept), and valid against the schema.
fn json_roundtrip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    kind: &str,
    schema: &str,
) {
    let mut docs = Vec::new();
    for path in fixtures(kind, "json") {
        docs.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
    }
    for (path, text) in docs {
        let what = path.display().to_string();
        let doc: T = from_json(&what, &text).unwrap_or_else(|e| panic!("{e}"));
        let out = serde_json::to_value(&doc).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        assert_kept(&original, &out, &what, "");
        let back: T = serde_json::from_value(out.clone()).unwrap();
        assert_eq!(doc, back);
        assert_schema_valid(schema, &path, &original);
    }
}

fn jsonl_roundtrip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    kind: &str,
    schema: &str,
) {
    for path in fixtures(kind, "jsonl") {
        for (n, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            let what = format!("{}:{}", path.display(), n + 1);
            let doc: T = from_json(&what, line).unwrap_or_else(|e| panic!("{e}"));
            let out = serde_json::to_value(&doc).unwrap();
            let original: Value = serde_json::from_str(line).unwrap();
            assert_kept(&original, &out, &what, "");
            assert_schema_valid(schema, &path, &original);
        }
    }
}

#[test]
fn accounts() {
    toml_roundtrip::<Account>("account", "account");
}

#[test]
fn providers() {
    toml_roundtrip::<Provider>("provider", "provider");
}

#[test]
fn addons() {
    toml_roundtrip::<AddonManifest>("addon", "addon");
}

#[test]
fn bindings() {
    toml_roundtrip::<Binding>("binding", "binding");
}

#[test]
fn miniapps() {
    toml_roundtrip::<MiniAppManifest>("miniapp", "miniapp");
}

#[test]
fn miniapp_api_bodies() {
    use handler_contracts::miniapp::*;
    json_roundtrip::<AppInfo>("app-info", "app-info");
    json_roundtrip::<AppRegisterRequest>("app-register-request", "app-register-request");
    json_roundtrip::<AppDeployRequest>("app-deploy-request", "app-deploy-request");
    json_roundtrip::<AppRollbackRequest>("app-rollback-request", "app-rollback-request");
    json_roundtrip::<AppSecretRequest>("app-secret-request", "app-secret-request");
    json_roundtrip::<AppLogin>("app-login", "app-login");
    json_roundtrip::<AppNotifications>("app-notifications", "app-notifications");
}

#[test]
fn machine_profiles() {
    toml_roundtrip::<handler_contracts::machine::profile::Profiles>("profiles", "profiles");
}

#[test]
fn toolbox_manifests() {
    toml_roundtrip::<ToolboxManifest>("toolbox-manifest", "toolbox-manifest");
}

#[test]
fn sandbox_specs() {
    json_roundtrip::<SandboxSpec>("sandbox-spec", "sandbox-spec");
}

#[test]
fn runtime_checks() {
    json_roundtrip::<RuntimeCheck>("runtime-check", "runtime-check");
}

#[test]
fn sessions_keep_unknown_fields() {
    json_roundtrip::<Session>("session", "session");
}

#[test]
fn agents_keep_unknown_fields() {
    json_roundtrip::<Agent>("agent", "agent");
}

#[test]
fn agent_requests() {
    json_roundtrip::<AgentRequest>("agent-request", "agent-request");
}

#[test]
fn projects_keep_unknown_fields() {
    json_roundtrip::<Project>("project", "project");
}

#[test]
fn image_updates_keep_unknown_fields() {
    json_roundtrip::<ImageUpdates>("image-updates", "image-updates");
}

#[test]
fn session_events() {
    jsonl_roundtrip::<SessionEvent>("session-event", "session-event");
}

#[test]
fn egress_events() {
    jsonl_roundtrip::<EgressEvent>("egress-event", "egress-event");
    for path in fixtures("egress-event", "jsonl") {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let e: EgressEvent = serde_json::from_str(line).unwrap();
            assert_eq!(EgressEvent::from_line(&e.to_line()), Some(e.clone()));
            assert!(e.to_line().starts_with("handler-egress {"));
        }
    }
}

#[test]
fn the_seed_examples_read_as_the_seed_says() {
    let text =
        std::fs::read_to_string(root().join("fixtures/contracts/provider/llamacpp.toml")).unwrap();
    let p: Provider = from_toml("llamacpp.toml", &text).unwrap();
    assert_eq!(p.models[0].id, "qwen3.8-27B");
    assert_eq!(p.models[0].context_window, Some(200_000));
    assert_eq!(p.endpoints.len(), 2);
    assert_eq!(
        p.files["codex"]["instructions_md"],
        handler_contracts::FileSource::Content("You are Codex…".into())
    );
    handler_contracts::validate::validate_provider(&p).unwrap();
    let text = std::fs::read_to_string(root().join("fixtures/contracts/account/claude-perso.toml"))
        .unwrap();
    let a: Account = from_toml("claude-perso.toml", &text).unwrap();
    assert_eq!(a.harness, "claude-code");
    assert_eq!(a.token, None);
}

#[test]
fn harness_descriptors() {
    toml_roundtrip::<HarnessDescriptor>("harness-descriptor", "harness-descriptor");
    for path in fixtures("harness-descriptor", "toml") {
        let d: HarnessDescriptor = from_toml("d", &std::fs::read_to_string(path).unwrap()).unwrap();
        handler_contracts::validate::validate_descriptor(&d).unwrap();
    }
}

#[test]
fn render_inputs_and_launches() {
    json_roundtrip::<RenderInput>("render-input", "render-input");
    json_roundtrip::<HarnessLaunch>("harness-launch", "harness-launch");
    json_roundtrip::<AgentSpec>("agent-spec", "agent-spec");
    json_roundtrip::<SecretRef>("secret-ref", "secret-ref");
}

#[test]
fn control_api_resources() {
    json_roundtrip::<HarnessInfo>("harness-info", "harness-info");
    json_roundtrip::<ToolboxInfo>("toolbox-info", "toolbox-info");
    json_roundtrip::<ImageUpdatesRequest>("image-updates-request", "image-updates-request");
    json_roundtrip::<ToolboxContainerfile>("toolbox-containerfile", "toolbox-containerfile");
    json_roundtrip::<ToolboxContainerfileUpdate>(
        "toolbox-containerfile-update",
        "toolbox-containerfile-update",
    );
    json_roundtrip::<AddonInfo>("addon-info", "addon-info");
    json_roundtrip::<AddonCatalogEntry>("addon-catalog-entry", "addon-catalog-entry");
    json_roundtrip::<AddonPreview>("addon-preview", "addon-preview");
    json_roundtrip::<AddonPreviewRequest>("addon-preview-request", "addon-preview-request");
    json_roundtrip::<AddonInstallRequest>("addon-install-request", "addon-install-request");
    json_roundtrip::<AddonInstalled>("addon-installed", "addon-installed");
    json_roundtrip::<Build>("build", "build");
    json_roundtrip::<BuildLog>("build-log", "build-log");
    json_roundtrip::<BindingInfo>("binding-info", "binding-info");
    json_roundtrip::<BindingRequest>("binding-request", "binding-request");
    json_roundtrip::<SkillInfo>("skill-info", "skill-info");
    json_roundtrip::<SkillRequest>("skill-request", "skill-request");
    json_roundtrip::<CreateSkillRequest>("create-skill-request", "create-skill-request");
    json_roundtrip::<SkillUrlRequest>("skill-url-request", "skill-url-request");
    json_roundtrip::<SkillFileRequest>("skill-file-request", "skill-file-request");
    json_roundtrip::<ModelAccess>("model-access", "model-access");
    json_roundtrip::<AgentSettings>("agent-settings", "agent-settings");
    json_roundtrip::<AdHocAgentRequest>("ad-hoc-agent-request", "ad-hoc-agent-request");
    json_roundtrip::<KnowledgeListing>("knowledge-listing", "knowledge-listing");
    json_roundtrip::<KnowledgeFolderView>("knowledge-folder-view", "knowledge-folder-view");
    json_roundtrip::<KnowledgeNote>("knowledge-note", "knowledge-note");
    json_roundtrip::<SessionInput>("session-input", "session-input");
    json_roundtrip::<SessionOutput>("session-output", "session-output");
    json_roundtrip::<BuiltinAgent>("builtin-agent", "builtin-agent");
    json_roundtrip::<ContextInfo>("context-info", "context-info");
    json_roundtrip::<TerminalStart>("terminal-start", "terminal-start");
    json_roundtrip::<TerminalStarted>("terminal-started", "terminal-started");
    json_roundtrip::<NetworkFilterInfo>("network-filter-info", "network-filter-info");
    json_roundtrip::<Problem>("problem", "problem");
}

/// Every schema has fixtures: a new document type comes with an example that round-trips.
#[test]
fn every_document_type_has_fixtures() {
    for (name, _) in handler_contracts::schema::all_schemas() {
        let dir = root().join("fixtures/contracts").join(name);
        let has = std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        assert!(
            has,
            "no fixture for the {name} schema under fixtures/contracts/{name}/"
        );
    }
}
