//! The pure validators: each rule's accepted and refused cases, the refusal naming the field.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::collections::BTreeMap;

use handler_contracts::access::{Account, Provider};
use handler_contracts::addon::{AddonManifest, Binding};
use handler_contracts::control::ModelAccess;
use handler_contracts::harness::HarnessDescriptor;
use handler_contracts::miniapp::MiniAppManifest;
use handler_contracts::parse::from_toml;
use handler_contracts::validate::*;

fn toml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    from_toml("test", s).unwrap_or_else(|e| panic!("{e}"))
}

fn fails(r: Result<impl std::fmt::Debug, ValidationError>, path: &str, msg: &str) {
    let e = r.expect_err("should be refused");
    assert_eq!(e.path, path, "{e}");
    assert!(e.message.contains(msg), "{e}");
}

#[test]
fn secret_paths() {
    for ok in [
        "providers/openrouter/apiKey",
        "bindings/gh-work/token",
        "apps/standup/API_KEY",
        "a.b/c_d-e",
    ] {
        validate_secret_path(ok).unwrap();
    }
    fails(validate_secret_path(""), "path", "empty");
    fails(
        validate_secret_path("providers//apiKey"),
        "path",
        "empty segment",
    );
    fails(
        validate_secret_path("providers/.hidden/apiKey"),
        "path",
        "starts with a dot",
    );
    fails(
        validate_secret_path("../etc/passwd"),
        "path",
        "starts with a dot",
    );
    fails(
        validate_secret_path("providers/open router/apiKey"),
        "path",
        "letters, digits",
    );
    fails(validate_secret_path("/abs"), "path", "empty segment");
}

#[test]
fn skill_names() {
    for ok in ["a", "skill-creator", "x1-2", &"a".repeat(64)] {
        validate_skill_name(ok).unwrap();
    }
    for bad in [
        "",
        "Skill",
        "-a",
        "a-",
        "a--b",
        "a_b",
        "a.b",
        &"a".repeat(65),
    ] {
        fails(validate_skill_name(bad), "name", "lowercase");
    }
}

#[test]
fn context_names() {
    validate_context_name("Client A").unwrap();
    validate_context_name("Work_2-b").unwrap();
    fails(validate_context_name("any"), "name", "every context");
    fails(validate_context_name(""), "name", "1–32");
    fails(validate_context_name(&"x".repeat(33)), "name", "1–32");
    fails(validate_context_name("a/b"), "name", "1–32");
}

const APP: &str = "apiVersion = \"handler.miniapp/v1\"\nname = \"standup\"\nversion = \"1.0.0\"\n";

#[test]
fn mini_apps() {
    validate_miniapp(&toml::<MiniAppManifest>(APP)).unwrap();
    let app = |extra: &str| toml::<MiniAppManifest>(&format!("{APP}{extra}"));
    let bad_name: MiniAppManifest =
        toml("apiVersion = \"handler.miniapp/v1\"\nname = \"Standup\"\nversion = \"1.0.0\"\n");
    fails(validate_miniapp(&bad_name), "name", "DNS label");
    let long: MiniAppManifest = toml(&format!(
        "apiVersion = \"handler.miniapp/v1\"\nname = \"{}\"\nversion = \"1.0.0\"\n",
        "a".repeat(31)
    ));
    fails(validate_miniapp(&long), "name", "1–30");
    let bad_version: MiniAppManifest =
        toml("apiVersion = \"handler.miniapp/v1\"\nname = \"a\"\nversion = \"1.0\"\n");
    fails(
        validate_miniapp(&bad_version),
        "version",
        "semantic version",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"OK_1\", \"HANDLER_TOKEN\"]\n")),
        "needs.secrets[1]",
        "reserved",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"PATH\"]\n")),
        "needs.secrets[0]",
        "reserved",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"https_proxy\"]\n")),
        "needs.secrets[0]",
        "uppercase",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"HTTPS_PROXY\"]\n")),
        "needs.secrets[0]",
        "reserved",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"DENO_DIR\"]\n")),
        "needs.secrets[0]",
        "reserved",
    );
    fails(
        validate_miniapp(&app("[needs]\nsecrets = [\"A\", \"A\"]\n")),
        "needs.secrets[1]",
        "twice",
    );
    fails(
        validate_miniapp(&app("server = { entry = \"../main.ts\" }\n")),
        "server.entry",
        "normalized",
    );
    fails(
        validate_miniapp(&app("server = { entry = \"/srv/main.ts\" }\n")),
        "server.entry",
        "relative",
    );
    fails(
        validate_miniapp(&app("server = { entry = \"main.ts\" }\n")),
        "server.entry",
        "inside a directory",
    );
    fails(
        validate_miniapp(&app(
            "server = { entry = \"app/main.ts\" }\nui = { dir = \"app/ui\" }\n",
        )),
        "ui.dir",
        "overlaps",
    );
    fails(
        validate_miniapp(&app("[routes]\n\"GET /api/x\" = \"sync\"\n")),
        "routes.\"GET /api/x\"",
        "POST, PUT",
    );
    fails(
        validate_miniapp(&app("[routes]\n\"POST /x\" = \"sync\"\n")),
        "routes.\"POST /x\"",
        "/api/",
    );
    let files: String = (0..11)
        .map(|i| format!("{{ path = \"/f{i}\" }},"))
        .collect();
    fails(
        validate_miniapp(&app(&format!("[needs]\nfiles = [{files}]\n"))),
        "needs.files",
        "at most 10",
    );
}

const ADDON: &str = r#"apiVersion = "handler.addon/v1"
name = "github"
image = "localhost/handler-ai-addon-github"
commands = ["gh", "github-mcp-server"]
egress = ["api.github.com:443", "github.com:443"]
mcp = { command = ["github-mcp-server", "stdio"] }
[settings.host]
env = "GH_HOST"
[secretSlots.token]
env = "GH_TOKEN"
required = true
hosts = ["api.github.com:443"]
"#;

#[test]
fn addons_g1() {
    let good: AddonManifest = toml(ADDON);
    validate_addon(&good, Some("github")).unwrap();
    fails(
        validate_addon(&good, Some("gh")),
        "name",
        "differs from its directory",
    );
    let with = |from: &str, to: &str| -> AddonManifest {
        assert!(ADDON.contains(from), "{from}");
        toml(&ADDON.replace(from, to))
    };
    fails(
        validate_addon(&with("env = \"GH_HOST\"", "env = \"GH_TOKEN\""), None),
        "secretSlots.token.env",
        "also set by settings.host.env",
    );
    fails(
        validate_addon(&with("env = \"GH_HOST\"", "env = \"HTTPS_PROXY\""), None),
        "settings.host.env",
        "belongs to the platform",
    );
    fails(
        validate_addon(&with("env = \"GH_HOST\"", "env = \"SSL_CERT_FILE\""), None),
        "settings.host.env",
        "belongs to the platform",
    );
    fails(
        validate_addon(&with("env = \"GH_HOST\"", "env = \"PATH\""), None),
        "settings.host.env",
        "belongs to the platform",
    );
    fails(
        validate_addon(
            &with("[settings.host]", "[env]\nGH_HOST = \"x\"\n[settings.host]"),
            None,
        ),
        "settings.host.env",
        "also set by env.GH_HOST",
    );
    fails(
        validate_addon(
            &with("\"github-mcp-server\", \"stdio\"", "\"npx\", \"server\""),
            None,
        ),
        "mcp.command",
        "not one of the addon's commands",
    );
    fails(
        validate_addon(
            &with(
                "hosts = [\"api.github.com:443\"]",
                "hosts = [\"uploads.github.com:443\"]",
            ),
            None,
        ),
        "secretSlots.token.hosts[0]",
        "not one of the addon's egress",
    );
    fails(
        validate_addon(&with("hosts = [", "delivery = \"env\"\nhosts = ["), None),
        "secretSlots.token.hosts",
        "only with proxy delivery",
    );
    fails(
        validate_addon(
            &with("commands = [\"gh\", \"github-mcp-server\"]\n", ""),
            None,
        ),
        "commands",
        "required with image",
    );
}

/// F2 (issue 27): an addon's image is its own `localhost/handler-ai-addon-<name>`, never another
/// image its switch would retag and its removal remove (the network filter, the toolbox, a
/// harness's, a person's).
#[test]
fn an_addons_image_is_its_own_name_only() {
    let good: AddonManifest = toml(ADDON);
    let own = "image = \"localhost/handler-ai-addon-github\"\n";
    for other in [
        "localhost/handler-network-filter",
        "localhost/handler-ai-toolbox",
        "localhost/handler-ai-claude-code",
        "docker.io/library/debian",
        "localhost/handler-ai-addon-gitlab",
        "localhost/handler-ai-addon-github:1.0",
        "localhost/handler-ai-addon-github@sha256:00",
        "-localhost/handler-ai-addon-github",
        "",
    ] {
        let a: AddonManifest = toml(&ADDON.replace(own, &format!("image = {other:?}\n")));
        fails(validate_addon(&a, None), "image", "an addon's image is");
    }
    let upper: AddonManifest = toml(
        &ADDON
            .replace("name = \"github\"", "name = \"GitHub\"")
            .replace("addon-github\"", "addon-GitHub\""),
    );
    fails(
        validate_addon(&upper, None),
        "name",
        "named as an image repository",
    );
    for name in ["-x", "x-", "a..b", "a/b"] {
        let a: AddonManifest = toml(
            &ADDON
                .replace("name = \"github\"", &format!("name = {name:?}"))
                .replace("addon-github\"", &format!("addon-{name}\"")),
        );
        fails(
            validate_addon(&a, None),
            "name",
            "named as an image repository",
        );
    }
    validate_addon(&good, Some("github")).unwrap();
    assert_eq!(
        handler_contracts::addon::addon_image("github"),
        "localhost/handler-ai-addon-github"
    );
}

#[test]
fn bindings_g2() {
    let addon: AddonManifest = toml(ADDON);
    let b = |s: &str| -> Binding {
        toml(&format!(
            "apiVersion = \"handler.binding/v1\"\naddon = \"github\"\n{s}"
        ))
    };
    let good = b(
        "[settings]\nhost = \"github.com\"\n[secrets]\ntoken = { secret = \"bindings/gh/token\" }\n",
    );
    validate_binding(&good, Some(Ok(&addon))).unwrap();
    fails(
        validate_binding(&good, None),
        "addon",
        "unknown addon \"github\"",
    );
    fails(
        validate_binding(&good, Some(Err("no image"))),
        "addon",
        "is invalid: no image",
    );
    fails(
        validate_binding(
            &b("[secrets]\ntoken = { env = \"T\" }\nother = { env = \"O\" }\n"),
            Some(Ok(&addon)),
        ),
        "secrets.other",
        "declares no secret slot",
    );
    fails(
        validate_binding(
            &b("[settings]\nport = \"1\"\n[secrets]\ntoken = { env = \"T\" }\n"),
            Some(Ok(&addon)),
        ),
        "settings.port",
        "declares no setting",
    );
    fails(
        validate_binding(&b("[settings]\nhost = \"x\"\n"), Some(Ok(&addon))),
        "secrets.token",
        "required by the addon",
    );
    fails(
        validate_binding(
            &b("[secrets]\ntoken = { secret = \"bindings/../x\" }\n"),
            Some(Ok(&addon)),
        ),
        "secrets.token.secret",
        "starts with a dot",
    );
}

#[test]
fn knowledge_folders_k1_k2() {
    let root = "/home/me/knowledge";
    let got = normalize_knowledge_folders(
        root,
        &[
            "recipes".into(),
            "/home/me/knowledge/work/notes".into(),
            "recipes/".into(),
            "./travel".into(),
        ],
    )
    .unwrap();
    assert_eq!(got, vec!["recipes", "travel", "work/notes"]);
    assert_eq!(
        normalize_knowledge_folders(root, &[".".into()]).unwrap(),
        vec!["."]
    );
    assert_eq!(
        normalize_knowledge_folders(root, &[root.into()]).unwrap(),
        vec!["."]
    );
    fails(
        normalize_knowledge_folders(root, &["/home/me/other".into()]),
        "knowledge[0]",
        "outside the knowledge root",
    );
    fails(
        normalize_knowledge_folders(root, &["/home/me/knowledgeX".into()]),
        "knowledge[0]",
        "outside the knowledge root",
    );
    fails(
        normalize_knowledge_folders(root, &["a".into(), "../secrets".into()]),
        "knowledge[1]",
        "'..'",
    );
    fails(
        normalize_knowledge_folders(root, &["work/.git".into()]),
        "knowledge[0]",
        "hidden component",
    );
    fails(
        normalize_knowledge_folders(root, &["work".into(), "work/notes".into()]),
        "knowledge",
        "is inside",
    );
    fails(
        normalize_knowledge_folders(root, &[".".into(), "work".into()]),
        "knowledge",
        "is inside",
    );
    fails(
        normalize_knowledge_folders(root, &["a/notes".into(), "b/notes".into()]),
        "knowledge",
        "/knowledge/notes",
    );
}

#[test]
fn home_expansion() {
    assert_eq!(expand_home("f", "~", "/home/me").unwrap(), "/home/me");
    assert_eq!(
        expand_home("f", "~/code", "/home/me/").unwrap(),
        "/home/me/code"
    );
    assert_eq!(expand_home("f", "/abs/x", "/home/me").unwrap(), "/abs/x");
    fails(
        expand_home("files.vibe.config.file", "~bob/x", "/home/me"),
        "files.vibe.config.file",
        "~user is not supported",
    );
    fails(
        expand_home("roots[0]", "code", "/home/me"),
        "roots[0]",
        "not an absolute path",
    );
}

fn descriptor(extra: &str) -> HarnessDescriptor {
    toml(&format!(
        r#"apiVersion = "handler.harness/v1"
name = "claude-code"
product = "Claude Code"
image = "localhost/handler-ai-claude-code"
acpCommand = ["claude-agent-acp"]
home = "/home/agent"
{extra}
[permissions.ask]
sessionMode = "default"
[permissions.bypass]
sessionMode = "bypassPermissions"
"#
    ))
}

const TOKEN_LOGIN: &str = r#"accountConnectors = true
providerProtocols = ["anthropic"]
[login]
unattended = "check-terms"
terms = "https://www.anthropic.com/legal/consumer-terms"
subscription = "Claude Pro or Max"
token = "CLAUDE_CODE_OAUTH_TOKEN"
tokenPrefix = "sk-ant-oat01-"
hosts = ["api.anthropic.com:443"]
plans = ["pro", "max"]
planEnv = "HANDLER_PLAN"
"#;

const FILE_LOGIN: &str = r#"[stateSlots.auth]
target = "~/.codex/auth.json"
kind = "file"
required = false
credential = true
[login]
unattended = "refused"
terms = "https://openai.com/policies/terms-of-use"
subscription = "ChatGPT Plus or Pro"
file = "auth.json"
command = ["npx", "-y", "@openai/codex", "login"]
hosts = ["chatgpt.com:443"]
"#;

#[test]
fn descriptors_b1() {
    validate_descriptor(&descriptor(TOKEN_LOGIN)).unwrap();
    validate_descriptor(&descriptor(FILE_LOGIN)).unwrap();
    let tagged = descriptor("").clone();
    let mut d = tagged.clone();
    d.image = "localhost/handler-ai-claude-code:1.0".into();
    fails(validate_descriptor(&d), "image", "without tag");
    for bad in ["-x", "", "localhost/a b"] {
        d.image = bad.into();
        fails(validate_descriptor(&d), "image", "not an image repository");
    }
    fails(
        validate_descriptor(&descriptor(
            &TOKEN_LOGIN.replace("planEnv = \"HANDLER_PLAN\"\n", ""),
        )),
        "login",
        "both or neither",
    );
    fails(
        validate_descriptor(&descriptor(&format!("{TOKEN_LOGIN}file = \"x\"\n"))),
        "login",
        "exactly one of token and file",
    );
    fails(
        validate_descriptor(&descriptor(
            &FILE_LOGIN.replace("file = \"auth.json\"", "file = \"creds.json\""),
        )),
        "login.file",
        "credential state slot",
    );
    let mut d = descriptor("");
    d.permissions.clear();
    fails(validate_descriptor(&d), "permissions", "at least one");
    let d = descriptor("[terminal]\ncommand = [\"claude\"]\npermissions = { ask = [] }\n");
    fails(
        validate_descriptor(&d),
        "terminal.permissions",
        "exactly the modes",
    );
}

struct Catalog {
    descriptors: Vec<HarnessDescriptor>,
    accounts: BTreeMap<String, Account>,
    providers: BTreeMap<String, Provider>,
    broken: UnusableDocument,
}

impl AccessCatalog for Catalog {
    fn descriptor(&self, harness: &str) -> Option<&HarnessDescriptor> {
        self.descriptors.iter().find(|d| d.name == harness)
    }
    fn account(&self, name: &str) -> Option<Result<&Account, &UnusableDocument>> {
        if name == "broken" {
            return Some(Err(&self.broken));
        }
        self.accounts.get(name).map(Ok)
    }
    fn provider(&self, name: &str) -> Option<Result<&Provider, &UnusableDocument>> {
        self.providers.get(name).map(Ok)
    }
}

fn catalog() -> Catalog {
    let claude = descriptor(TOKEN_LOGIN);
    let mut codex = descriptor(FILE_LOGIN);
    codex.name = "codex".into();
    codex.provider_protocols = vec![
        handler_contracts::Protocol::Responses,
        handler_contracts::Protocol::OpenaiChat,
    ];
    let mut gemini = descriptor("");
    gemini.name = "gemini".into();
    let acc = |s: &str| toml::<Account>(&format!("apiVersion = \"handler.account/v1\"\n{s}"));
    let accounts = BTreeMap::from([
        (
            "claude-perso".to_string(),
            acc("harness = \"claude-code\"\nplan = \"max\"\n"),
        ),
        (
            "claude-bad-plan".to_string(),
            acc("harness = \"claude-code\"\nplan = \"team\"\n"),
        ),
        ("codex-plus".to_string(), acc("harness = \"codex\"\n")),
        (
            "codex-token".to_string(),
            acc("harness = \"codex\"\ntoken = { env = \"T\" }\n"),
        ),
        (
            "codex-connectors".to_string(),
            acc("harness = \"codex\"\nconnectors = true\n"),
        ),
        ("gemini-acc".to_string(), acc("harness = \"gemini\"\n")),
        ("ghost".to_string(), acc("harness = \"nope\"\n")),
    ]);
    let llamacpp: Provider = toml(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/contracts/provider/llamacpp.toml"
        ))
        .unwrap(),
    );
    let anthropic_only: Provider = toml(
        "apiVersion = \"handler.provider/v1\"\n[endpoints]\nanthropic = \"https://api.anthropic.com\"\n[[models]]\nid = \"claude-x\"\n",
    );
    let providers = BTreeMap::from([
        ("llamacpp".to_string(), llamacpp),
        ("anthropic".to_string(), anthropic_only),
    ]);
    Catalog {
        descriptors: vec![claude, codex, gemini],
        accounts,
        providers,
        broken: UnusableDocument::Invalid(ValidationError::new("line 3", "unknown field `tokn`")),
    }
}

fn access(
    account: Option<&str>,
    provider: Option<&str>,
    harness: Option<&str>,
    model: Option<&str>,
) -> ModelAccess {
    ModelAccess {
        account: account.map(Into::into),
        provider: provider.map(Into::into),
        harness: harness.map(Into::into),
        model: model.map(Into::into),
    }
}

#[test]
fn model_access_e1() {
    let c = catalog();
    let ok = check_model_access(&access(Some("claude-perso"), None, None, None), &c).unwrap();
    assert_eq!(ok.harness, "claude-code");
    let ok = check_model_access(
        &access(None, Some("llamacpp"), Some("codex"), Some("qwen3.8-27B")),
        &c,
    )
    .unwrap();
    assert_eq!(
        (ok.harness.as_str(), ok.protocol),
        ("codex", Some(handler_contracts::Protocol::Responses))
    );
    let ok = check_model_access(&access(None, Some("llamacpp"), Some("codex"), None), &c).unwrap();
    assert_eq!(
        ok.model.as_deref(),
        Some("qwen3.8-27B"),
        "the provider's first model by default"
    );

    let refusals = [
        (
            access(Some("claude-perso"), Some("llamacpp"), None, None),
            "model",
            "both an account and a provider",
        ),
        (access(None, None, Some("codex"), None), "model", "neither"),
        (
            access(Some("nobody"), None, None, None),
            "account",
            "does not exist",
        ),
        (
            access(Some("broken"), None, None, None),
            "account",
            "is invalid: line 3",
        ),
        (
            access(Some("claude-perso"), None, Some("codex"), None),
            "harness",
            "is for claude-code, not codex",
        ),
        (
            access(Some("ghost"), None, None, None),
            "account",
            "unknown harness \"nope\"",
        ),
        (
            access(Some("gemini-acc"), None, None, None),
            "account",
            "has no login",
        ),
        (
            access(Some("claude-bad-plan"), None, None, None),
            "account",
            "not one of claude-code's plans",
        ),
        (
            access(Some("codex-token"), None, None, None),
            "account",
            "has no token",
        ),
        (
            access(Some("codex-connectors"), None, None, None),
            "account",
            "no account connectors",
        ),
        (
            access(None, Some("nowhere"), Some("codex"), None),
            "provider",
            "does not exist",
        ),
        (
            access(None, Some("llamacpp"), None, None),
            "harness",
            "needs the harness",
        ),
        (
            access(None, Some("llamacpp"), Some("nope"), None),
            "harness",
            "unknown harness",
        ),
        (
            access(None, Some("anthropic"), Some("codex"), None),
            "provider",
            "no endpoint for a protocol codex speaks (responses, openai-chat)",
        ),
        (
            access(None, Some("llamacpp"), Some("gemini"), None),
            "provider",
            "runs only on an account",
        ),
        (
            access(None, Some("llamacpp"), Some("codex"), Some("gpt-9")),
            "model",
            "not one of provider \"llamacpp\"'s models",
        ),
    ];
    for (a, path, msg) in refusals {
        let e = check_model_access(&a, &c).expect_err(&format!("{a:?} should be refused"));
        assert_eq!(e.path, path, "{a:?}: {e}");
        assert!(e.message.contains(msg), "{a:?}: {e}");
    }
}

#[test]
fn providers_e() {
    let p = |s: &str| -> Provider { toml(&format!("apiVersion = \"handler.provider/v1\"\n{s}")) };
    fails(
        validate_provider(&p("endpoints = {}\n[[models]]\nid = \"m\"\n")),
        "endpoints",
        "at least one",
    );
    fails(
        validate_provider(&p(
            "[endpoints]\nanthropic = \"ftp://x\"\n[[models]]\nid = \"m\"\n",
        )),
        "endpoints.anthropic",
        "http(s) URL",
    );
    fails(
        validate_provider(&p("models = []\n[endpoints]\nanthropic = \"https://x\"\n")),
        "models",
        "at least one",
    );
    fails(
        validate_provider(&p(
            "[endpoints]\nanthropic = \"https://x\"\n[[models]]\nid = \"m\"\n[[models]]\nid = \"m\"\n",
        )),
        "models[1].id",
        "twice",
    );
    fails(
        validate_provider(&p(
            "[endpoints]\nanthropic = \"https://x\"\n[[models]]\nid = \"m\"\ncontextWindow = 100\nmaxOutput = 100\n",
        )),
        "models[0].maxOutput",
        "smaller than contextWindow",
    );
    fails(
        validate_provider(&p(
            "apiKey = { secret = \"providers/.x\" }\n[endpoints]\nanthropic = \"https://x\"\n[[models]]\nid = \"m\"\n",
        )),
        "apiKey.secret",
        "dot",
    );
    fails(
        validate_provider(&p(
            "contexts = [\"a/b\"]\n[endpoints]\nanthropic = \"https://x\"\n[[models]]\nid = \"m\"\n",
        )),
        "contexts[0]",
        "1–32",
    );
}
