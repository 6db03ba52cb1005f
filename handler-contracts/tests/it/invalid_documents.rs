//! Every invalid fixture (`fixtures/contracts/invalid/<schema>/…`) is refused by BOTH the Rust
//! reader and validator AND the published JSON Schema, so that a client generated from
//! `schemas/` refuses what Handler refuses (issue 12, item 9). Rules JSON Schema cannot state
//! (across documents, counting, comparing two fields) are listed apart with their reason: their
//! fixtures are refused by Rust and still pass the schema, and the test says when a schema
//! starts to cover one. Every valid fixture passing its schema is `documents.rs`'s test.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use handler_contracts::access::{Account, Provider, SecretRef};
use handler_contracts::addon::AddonManifest;
use handler_contracts::control::{AgentRequest, ModelAccess, SkillFileRequest};
use handler_contracts::harness::HarnessDescriptor;
use handler_contracts::miniapp::MiniAppManifest;
use handler_contracts::parse::{from_json, from_toml};
use handler_contracts::validate::{self, AccessCatalog, UnusableDocument};
use serde_json::Value;

/// Refused by both: (fixture, the field the Rust refusal names).
const BOTH_REFUSE: &[(&str, &str)] = &[
    ("account/context-too-long.toml", "contexts[1]"),
    ("account/harness-empty.toml", "harness"),
    ("account/token-command-empty.toml", "token"),
    ("account/token-file-empty.toml", "token.file"),
    ("account/token-literal.toml", "token"),
    ("addon/commands-without-image.toml", "commands"),
    ("addon/env-not-a-name.toml", "env.GH-PROMPT"),
    ("addon/env-reserved.toml", "env.HTTPS_PROXY"),
    (
        "addon/hosts-with-env-delivery.toml",
        "secretSlots.token.hosts",
    ),
    ("addon/image-without-commands.toml", "commands"),
    ("addon/mcp-command-empty.toml", "mcp.command"),
    ("addon/secret-env-not-a-name.toml", "secretSlots.token.env"),
    ("addon/setting-env-reserved.toml", "settings.host.env"),
    ("agent-request/skill-double-hyphen.json", "skills[1]"),
    ("agent-request/skill-too-long.json", "skills[1]"),
    ("agent-request/skill-trailing-hyphen.json", "skills[1]"),
    ("agent-request/skill-uppercase.json", "skills[1]"),
    ("harness-descriptor/acp-command-empty.toml", "acpCommand"),
    (
        "harness-descriptor/credential-folder.toml",
        "stateSlots.credentials",
    ),
    (
        "harness-descriptor/credential-per-session.toml",
        "stateSlots.credentials",
    ),
    (
        "harness-descriptor/file-login-without-command.toml",
        "login.command",
    ),
    ("harness-descriptor/image-with-digest.toml", "image"),
    ("harness-descriptor/image-with-tag.toml", "image"),
    (
        "harness-descriptor/login-neither-token-nor-file.toml",
        "login",
    ),
    ("harness-descriptor/login-token-and-file.toml", "login"),
    ("harness-descriptor/model-flag-and-env.toml", "terminal"),
    ("harness-descriptor/no-permission-mode.toml", "permissions"),
    ("harness-descriptor/plans-without-plan-env.toml", "login"),
    ("harness-descriptor/terms-not-https.toml", "login.terms"),
    (
        "harness-descriptor/seed-outside-home.toml",
        "stateSlots.config_dir.seed[0].source",
    ),
    (
        "harness-descriptor/seed-target-escapes.toml",
        "stateSlots.config_dir.seed[0].target",
    ),
    ("miniapp/entry-absolute.toml", "server.entry"),
    ("miniapp/entry-not-in-a-folder.toml", "server.entry"),
    ("miniapp/file-path-empty.toml", "needs.files[0].path"),
    ("miniapp/name-too-long.toml", "name"),
    ("miniapp/name-uppercase.toml", "name"),
    ("miniapp/route-get.toml", "routes.\"GET /api/checkin\""),
    ("miniapp/route-outside-api.toml", "routes.\"POST /checkin\""),
    ("miniapp/secret-lowercase.toml", "needs.secrets[0]"),
    ("miniapp/secret-proxy-variable.toml", "needs.secrets[0]"),
    ("miniapp/secret-reserved.toml", "needs.secrets[0]"),
    ("miniapp/secret-twice.toml", "needs.secrets[1]"),
    ("miniapp/too-many-files.toml", "needs.files"),
    ("miniapp/ui-dir-not-normalized.toml", "ui.dir"),
    ("miniapp/version-not-semver.toml", "version"),
    ("model-access/account-and-provider.json", "model"),
    ("model-access/neither.json", "model"),
    ("model-access/provider-without-harness.json", "harness"),
    (
        "provider/api-key-command-empty-program.toml",
        "apiKey.command",
    ),
    ("provider/api-key-env-not-a-name.toml", "apiKey.env"),
    ("provider/api-key-secret-dot-segment.toml", "apiKey.secret"),
    ("provider/context-not-a-name.toml", "contexts[0]"),
    ("provider/endpoint-not-http.toml", "endpoints.openai-chat"),
    ("provider/model-id-empty.toml", "models[0].id"),
    ("provider/models-empty.toml", "models"),
    ("provider/no-endpoint.toml", "endpoints"),
    // A reader's refusal of the whole value names no field.
    ("secret-ref/command-empty.json", ""),
    ("secret-ref/env-not-a-name.json", "ref.env"),
    ("secret-ref/literal.json", ""),
    ("secret-ref/secret-empty-segment.json", "ref.secret"),
    ("secret-ref/two-keys.json", ""),
    ("skill-file-request/neither.json", "text"),
    ("skill-file-request/text-and-base64.json", "text"),
];

/// Refused by Rust only, with why JSON Schema cannot say it: (fixture, field, reason).
const RUST_ONLY: &[(&str, &str, &str)] = &[
    (
        "harness-descriptor/seed-a-credential.toml",
        "stateSlots.config_dir.seed[0].source",
        "a list of names no path may end with: a regular expression without look-ahead cannot refuse them",
    ),
    (
        "harness-descriptor/seed-filter-not-json.toml",
        "stateSlots.config_dir.seed[0]",
        "between fields: keep and drop only where `source` ends in .json or .toml",
    ),
    (
        "account/plan-unknown.toml",
        "plan",
        "across documents: the plans are the harness descriptor's",
    ),
    (
        "addon/host-not-in-egress.toml",
        "secretSlots.token.hosts[0]",
        "within the document but between fields: a slot's hosts are values of `egress`, which JSON Schema cannot refer to",
    ),
    (
        "addon/image-not-its-own.toml",
        "image",
        "between fields: the image is `localhost/handler-ai-addon-` followed by `name`'s value",
    ),
    (
        "addon/mcp-command-not-listed.toml",
        "mcp.command",
        "between fields: the MCP command must be a value of `commands`",
    ),
    (
        "addon/variable-set-twice.toml",
        "secretSlots.token.env",
        "between fields: one variable name across `env`, `settings.*.env` and `secretSlots.*.env` (uniqueness over values scattered in several maps)",
    ),
    (
        "harness-descriptor/login-file-not-a-credential-slot.toml",
        "login.file",
        "between fields: the file must end the target of a credential slot in `stateSlots`",
    ),
    (
        "harness-descriptor/terminal-permissions-differ.toml",
        "terminal.permissions",
        "between fields: the terminal's modes are exactly the keys of `permissions`",
    ),
    (
        "harness-descriptor/two-per-session-slots.toml",
        "stateSlots",
        "counting across a map's values: at most one slot with perSession (JSON Schema counts only array items)",
    ),
    (
        "miniapp/ui-inside-server.toml",
        "ui.dir",
        "between fields: the UI folder must not overlap the server entry's folder (a prefix test of two values)",
    ),
    (
        "model-access/unknown-provider.json",
        "provider",
        "across documents: the provider must exist (E1)",
    ),
    (
        "provider/endpoint-without-host.toml",
        "endpoints.openai-chat",
        "the URL's authority is parsed (host, port) as an allow-list entry; the schema checks only the scheme and that something follows it",
    ),
    (
        "provider/max-output-not-below-window.toml",
        "models[0].maxOutput",
        "between fields: maxOutput < contextWindow compares two values",
    ),
    (
        "provider/model-listed-twice.toml",
        "models[1].id",
        "uniqueness by a key: uniqueItems compares whole models, not their ids",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("fixtures/contracts")
}

fn invalid_fixtures() -> Vec<String> {
    let base = root().join("invalid");
    let mut out = Vec::new();
    for kind in std::fs::read_dir(&base).unwrap().flatten() {
        for f in std::fs::read_dir(kind.path()).unwrap().flatten() {
            let p = f.path();
            out.push(
                p.strip_prefix(&base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    out.sort();
    out
}

fn fixture(name: &str) -> (String, String) {
    let path = root().join("invalid").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (name.split('/').next().unwrap().to_string(), text)
}

/// A descriptor named `name` with a token login and the plans `pro` and `team` (the contract's
/// fixture descriptor, its file login made a token login).
fn token_descriptor(name: &str) -> HarnessDescriptor {
    let text =
        std::fs::read_to_string(root().join("harness-descriptor/fixture-harness.toml")).unwrap();
    let mut d: HarnessDescriptor = from_toml("fixture-harness.toml", &text).unwrap();
    d.name = name.to_string();
    let login = d.login.as_mut().unwrap();
    login.file = None;
    login.command = None;
    login.token = Some("FIXTURE_TOKEN".into());
    d
}

/// The catalog E1 looks things up in: the contract's account and provider fixtures.
struct Catalog {
    accounts: BTreeMap<String, Account>,
    providers: BTreeMap<String, Provider>,
}

impl Catalog {
    fn from_fixtures() -> Self {
        let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
        let mut accounts = BTreeMap::new();
        accounts.insert(
            "claude-perso".to_string(),
            from_toml("a", &read("account/claude-perso.toml")).unwrap(),
        );
        let mut providers = BTreeMap::new();
        providers.insert(
            "llamacpp".to_string(),
            from_toml("p", &read("provider/llamacpp.toml")).unwrap(),
        );
        Catalog {
            accounts,
            providers,
        }
    }
}

impl AccessCatalog for Catalog {
    fn descriptor(&self, _harness: &str) -> Option<&HarnessDescriptor> {
        None
    }
    fn account(&self, name: &str) -> Option<Result<&Account, &UnusableDocument>> {
        self.accounts.get(name).map(Ok)
    }
    fn provider(&self, name: &str) -> Option<Result<&Provider, &UnusableDocument>> {
        self.providers.get(name).map(Ok)
    }
}

/// The field the Rust reader or validator names in refusing the document; `None` if it accepts.
fn rust_refusal(kind: &str, name: &str, text: &str) -> Option<String> {
    fn read<T: serde::de::DeserializeOwned>(
        name: &str,
        text: &str,
        toml: bool,
    ) -> Result<T, String> {
        let r = if toml {
            from_toml(name, text)
        } else {
            from_json(name, text)
        };
        r.map_err(|e| e.path().to_string())
    }
    fn checked<T>(
        r: Result<T, String>,
        check: impl FnOnce(&T) -> Result<(), validate::ValidationError>,
    ) -> Option<String> {
        match r {
            Err(path) => Some(path),
            Ok(doc) => check(&doc).err().map(|e| e.path),
        }
    }
    match kind {
        "provider" => checked(
            read::<Provider>(name, text, true),
            validate::validate_provider,
        ),
        "account" => checked(read::<Account>(name, text, true), |a| {
            let d = token_descriptor("claude-code");
            validate::validate_account(a, (a.harness == d.name).then_some(&d))
        }),
        "secret-ref" => checked(read::<SecretRef>(name, text, false), |r| {
            validate::validate_secret_ref("ref", r)
        }),
        "miniapp" => checked(
            read::<MiniAppManifest>(name, text, true),
            validate::validate_miniapp,
        ),
        "addon" => checked(read::<AddonManifest>(name, text, true), |a| {
            validate::validate_addon(a, None)
        }),
        "harness-descriptor" => checked(
            read::<HarnessDescriptor>(name, text, true),
            validate::validate_descriptor,
        ),
        "model-access" => checked(read::<ModelAccess>(name, text, false), |m| {
            validate::check_model_access(m, &Catalog::from_fixtures()).map(|_| ())
        }),
        "skill-file-request" => checked(
            read::<SkillFileRequest>(name, text, false),
            validate::validate_skill_file_request,
        ),
        "agent-request" => checked(read::<AgentRequest>(name, text, false), |r| {
            for (i, s) in r.skills.iter().enumerate() {
                validate::validate_skill_name(s).map_err(|e| {
                    validate::ValidationError::new(format!("skills[{i}]"), e.message)
                })?;
            }
            Ok(())
        }),
        other => panic!("{name}: no Rust check for documents of kind {other}"),
    }
}

/// The schema's errors for the document (TOML read as JSON, as `documents.rs` does).
fn schema_errors(kind: &str, name: &str, text: &str) -> Vec<String> {
    let path = root()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("schemas")
        .join(format!("{kind}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc: Value = if name.ends_with(".toml") {
        serde_json::to_value(toml::from_str::<toml::Value>(text).unwrap()).unwrap()
    } else {
        serde_json::from_str(text).unwrap()
    };
    validator
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

#[test]
fn every_invalid_fixture_is_listed_once() {
    let listed: Vec<&str> = BOTH_REFUSE
        .iter()
        .map(|c| c.0)
        .chain(RUST_ONLY.iter().map(|c| c.0))
        .collect();
    let mut problems = Vec::new();
    for f in invalid_fixtures() {
        match listed.iter().filter(|l| **l == f).count() {
            1 => {}
            0 => problems.push(format!("{f} is in no list of this test")),
            _ => problems.push(format!("{f} is listed twice")),
        }
    }
    for l in &listed {
        if !root().join("invalid").join(l).is_file() {
            problems.push(format!("{l} is listed but not a fixture"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn rust_and_the_schema_both_refuse_each_invalid_document() {
    let mut problems = Vec::new();
    for (name, field) in BOTH_REFUSE {
        let (kind, text) = fixture(name);
        match rust_refusal(&kind, name, &text) {
            None => problems.push(format!("{name}: Rust accepts it")),
            Some(path) if path != *field => {
                problems.push(format!("{name}: Rust refuses {path:?}, not {field:?}"));
            }
            Some(_) => {}
        }
        if schema_errors(&kind, name, &text).is_empty() {
            problems.push(format!("{name}: schemas/{kind}.schema.json accepts it"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn rules_the_schema_cannot_state_are_refused_by_rust() {
    let mut problems = Vec::new();
    for (name, field, why) in RUST_ONLY {
        assert!(!why.is_empty());
        let (kind, text) = fixture(name);
        match rust_refusal(&kind, name, &text) {
            None => problems.push(format!("{name}: Rust accepts it")),
            Some(path) if path != *field => {
                problems.push(format!("{name}: Rust refuses {path:?}, not {field:?}"));
            }
            Some(_) => {}
        }
        let errors = schema_errors(&kind, name, &text);
        if !errors.is_empty() {
            problems.push(format!(
                "{name}: the schema now refuses it too ({}): move it to BOTH_REFUSE",
                errors.join("; ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The validators whose rules reach the schemas through the fixtures above (directly, or through
/// the validator that calls them).
const VALIDATORS_WITH_FIXTURES: &[&str] = &[
    "validate_secret_path",
    "validate_secret_ref",
    "validate_skill_name",
    "validate_context_name",
    "validate_miniapp_name",
    "validate_miniapp_secret_name",
    "validate_miniapp",
    "validate_addon",
    "validate_descriptor",
    "validate_account",
    "validate_provider",
    "validate_skill_file_request",
    "check_model_access",
];

/// Validators with no document of their own to put in a schema, and why.
const VALIDATORS_WITHOUT_A_SCHEMA: &[(&str, &str)] = &[
    (
        "validate_binding",
        "across documents: a binding is checked against its addon's slots; its own secret references are SecretRefs, whose rules the binding schema carries",
    ),
    (
        "normalize_knowledge_folders",
        "needs the knowledge root (a setting of the machine) and compares folders with each other",
    ),
    (
        "expand_home",
        "needs the person's home folder: `~/x` is valid in a document, absolute only once expanded",
    ),
];

/// Every public validator of `src/validate.rs` is either covered by fixtures here or listed with
/// the reason no schema can carry it: a new validator makes this test ask which.
#[test]
fn every_validator_is_covered_or_excused() {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/validate.rs"))
            .unwrap();
    let mut problems = Vec::new();
    for line in src.lines() {
        let Some(rest) = line.strip_prefix("pub fn ") else {
            continue;
        };
        let name = rest.split(['(', '<']).next().unwrap_or(rest);
        let covered = VALIDATORS_WITH_FIXTURES.contains(&name);
        let excused = VALIDATORS_WITHOUT_A_SCHEMA.iter().any(|(n, _)| *n == name);
        if covered == excused {
            problems.push(format!(
                "validate::{name}: list it in exactly one of VALIDATORS_WITH_FIXTURES (with invalid fixtures) and VALIDATORS_WITHOUT_A_SCHEMA (with the reason)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
