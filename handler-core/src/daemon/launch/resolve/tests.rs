//! Golden tests of resolve: the spec, the policy's configuration and the access of several
//! launches, from plain inputs (documents of `fixtures/contracts/`, the platform's descriptors),
//! the phantoms drawn from a counter. `INSTA_UPDATE=always` (or `cargo insta review`) updates.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::allow::AllowEntry;
use handler_contracts::control::{AgentOptions, ModelAccess, NetworkMode};
use handler_contracts::parse::from_toml;
use handler_contracts::sandbox::{Injection, MountKind};
use handler_contracts::validate::{AccessCatalog, UnusableDocument};
use handler_contracts::{Account, FileSource, HarnessDescriptor, McpServer, Provider};
use handler_sandbox::compose::AddonPart;
use handler_sandbox::egress::phantom::RandomSource;
use serde_json::json;

use super::*;

/// Counts instead of drawing: the same phantoms at every run.
struct Counter(u32);

impl RandomSource for Counter {
    fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        self.0
    }
}

#[derive(Default)]
struct Catalog {
    descriptors: BTreeMap<String, HarnessDescriptor>,
    accounts: BTreeMap<String, Account>,
    providers: BTreeMap<String, Provider>,
}

impl AccessCatalog for Catalog {
    fn descriptor(&self, harness: &str) -> Option<&HarnessDescriptor> {
        self.descriptors.get(harness)
    }
    fn account(&self, name: &str) -> Option<Result<&Account, &UnusableDocument>> {
        self.accounts.get(name).map(Ok)
    }
    fn provider(&self, name: &str) -> Option<Result<&Provider, &UnusableDocument>> {
        self.providers.get(name).map(Ok)
    }
}

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    for h in handler_harness::builtin_names() {
        let d = handler_harness::builtin(h).unwrap().unwrap();
        c.descriptors.insert(h.to_string(), d);
    }
    let doc = |name: &str, text: &str| (name.to_string(), text.to_string());
    for (name, text) in [
        doc(
            "claude-perso",
            include_str!("../../../../../fixtures/contracts/account/claude-perso.toml"),
        ),
        doc(
            "claude-pro",
            include_str!("../../../../../fixtures/contracts/account/claude-pro-pasted.toml"),
        ),
        doc(
            "codex-plan",
            include_str!("../../../../../fixtures/contracts/account/codex-plan.toml"),
        ),
    ] {
        let a = from_toml(&format!("accounts/{name}.toml"), &text).unwrap();
        c.accounts.insert(name, a);
    }
    for (name, text) in [
        doc(
            "openrouter",
            include_str!("../../../../../fixtures/contracts/provider/openrouter.toml"),
        ),
        doc(
            "llamacpp",
            include_str!("../../../../../fixtures/contracts/provider/llamacpp.toml"),
        ),
    ] {
        let p = from_toml(&format!("providers/{name}.toml"), &text).unwrap();
        c.providers.insert(name, p);
    }
    c
}

/// A repository as gather reads it: a main checkout at `root`, on `main` at a commit.
fn repo(root: &str) -> RepoFacts {
    RepoFacts {
        root: root.into(),
        layout: handler_sandbox::guard::Layout::Main,
        git_dir: format!("{root}/.git"),
        common_dir: format!("{root}/.git"),
        head: handler_sandbox::guard::Head::Branch {
            name: "main".into(),
            commit: Some("4b825dc642cb6eb9a060e54bf8d69288fbee4904".into()),
        },
        links: Vec::new(),
        alternates: None,
        shallow: None,
        user_name: Some("Ada".into()),
        user_email: Some("ada@example.com".into()),
    }
}

const SESSION_DIR: &str = "/home/u/.local/state/handler-ai/sessions/s_0123456789abcdef";

fn entry(s: &str) -> AllowEntry {
    AllowEntry::parse(s).unwrap()
}

/// One launch's inputs, the parts a case changes.
struct Case {
    access: ModelAccess,
    context: Option<&'static str>,
    options: AgentOptions,
    credential: Credential,
    addons: AddonLaunch,
    skills: Vec<(String, String)>,
    knowledge: Vec<String>,
    caches: BTreeMap<String, String>,
    display: Option<String>,
    purpose: Purpose,
    guard: GuardFacts,
}

impl Case {
    fn new(access: ModelAccess, credential: Credential) -> Case {
        Case {
            access,
            context: None,
            options: AgentOptions::default(),
            credential,
            addons: AddonLaunch::default(),
            skills: Vec::new(),
            knowledge: Vec::new(),
            caches: BTreeMap::new(),
            display: None,
            purpose: Purpose::Connection,
            guard: GuardFacts {
                tree: SessionTree::Shared,
                repo: None,
            },
        }
    }

    fn resolve(self) -> Result<Prepared, ResolveError> {
        let catalog = catalog();
        let agent = AgentFacts {
            id: "a_golden1".into(),
            options: self.options,
            instructions: Some("Answer briefly.".into()),
        };
        let input = ResolveInput {
            catalog: &catalog,
            access: &self.access,
            context: self.context,
            agent: &agent,
            conn: "c7",
            place_dir: match self.purpose {
                Purpose::Session { .. } => SESSION_DIR,
                _ => "/home/u/.local/share/handler-ai/connections/c7",
            },
            purpose: self.purpose,
            guard: self.guard,
            skills_dir: "/home/u/.config/handler-ai/skills",
            data_dir: "/home/u/.local/share/handler-ai",
            max_message_bytes: 16 * 1024 * 1024,
            scope: "/home/u/code/app".into(),
            knowledge: self.knowledge,
            addons: self.addons,
            skills: self.skills,
            caches: self.caches,
            shared_state: None,
            credential: self.credential,
            display: self.display,
        };
        resolve(input, &mut Counter(7))
    }
}

/// What a snapshot shows: the whole spec (the platform's own scripts by name: they are
/// platform data, not resolve's), the policy's configuration, the access, and what the start
/// makes (the harness, the live allow-list's fixed hosts, the session slot, the git guard).
fn shown(p: &Prepared) -> serde_json::Value {
    let slot = p
        .slot
        .as_ref()
        .map(|s| json!({"path": s.path, "kind": format!("{:?}", s.kind), "initial": s.initial}));
    let guard = match &p.guard {
        GuardPlan::None => json!("none"),
        GuardPlan::Open => json!("open"),
        GuardPlan::GitDir { facts, dir } => json!({"gitDir": {"root": facts.root, "dir": dir}}),
        GuardPlan::Copy {
            facts,
            dir,
            commit,
            rel,
        } => json!({"copy": {"root": facts.root, "dir": dir, "commit": commit, "rel": rel}}),
    };
    let mut v = json!({
        "spec": p.spec,
        "policy": p.policy,
        "access": p.access,
        "plan": {"harness": p.harness, "modelHosts": p.model_hosts, "slot": slot, "guard": guard},
    });
    for f in v["spec"]["files"].as_array_mut().into_iter().flatten() {
        if f["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("/opt/handler/bin/"))
        {
            f["content"] = json!("[platform data]");
        }
    }
    v
}

/// Each result as a snapshot shows it: the error, and what it says.
fn named(results: Vec<Result<Prepared, ResolveError>>) -> Vec<String> {
    results
        .into_iter()
        .map(|r| match r {
            Ok(_) => "resolved".to_string(),
            Err(e) => format!("{e:?} → {e}"),
        })
        .collect()
}

fn provider(name: &str, harness: &str, model: &str) -> ModelAccess {
    ModelAccess {
        harness: Some(harness.into()),
        account: None,
        provider: Some(name.into()),
        model: Some(model.into()),
    }
}

fn account(name: &str) -> ModelAccess {
    ModelAccess {
        account: Some(name.into()),
        ..Default::default()
    }
}

#[test]
fn an_ad_hoc_agent_with_a_providers_api_key() {
    let case = Case::new(
        provider("openrouter", "claude-code", "anthropic/claude-sonnet-4.5"),
        Credential::Provider {
            api_key: Some((
                "providers/openrouter/apiKey".into(),
                "sk-or-v1-0123456789abcdef0123456789abcdef".into(),
            )),
            files: BTreeMap::new(),
        },
    );
    let p = case.resolve().unwrap();
    insta::assert_json_snapshot!(shown(&p));
}

#[test]
fn a_provider_with_a_file_on_the_loopback_without_network() {
    let mut case = Case::new(
        provider("llamacpp", "codex", "qwen3.8-27B"),
        Credential::Provider {
            api_key: None,
            files: BTreeMap::from([(
                "instructions_md".to_string(),
                FileSource::Content("You are Codex…".into()),
            )]),
        },
    );
    case.options.network = Some(NetworkMode::None);
    let p = case.resolve().unwrap();
    insta::assert_json_snapshot!(shown(&p));
}

#[test]
fn a_filtered_network_with_injections_skills_knowledge_caches_and_an_addon() {
    let mut case = claude_pro();
    case.context = Some("Personal");
    case.options.allow = vec![entry("crates.io:443")];
    case.skills = vec![(
        "review".into(),
        "/home/u/.config/handler-ai/skills/review".into(),
    )];
    case.knowledge = vec!["/home/u/knowledge/rust".into()];
    case.caches = BTreeMap::from([(
        "~/.cargo/registry".into(),
        "/home/u/.cache/handler-ai/cargo".into(),
    )]);
    case.addons = AddonLaunch {
        parts: vec![AddonPart {
            addon: "github".into(),
            binding: "gh-work".into(),
            image: Some("localhost/handler-addon-github".into()),
            env: BTreeMap::from([(
                "GH_TOKEN".to_string(),
                "ghp-phantom-from-gather".to_string(),
            )]),
        }],
        egress: vec![(entry("api.github.com:443"), "addon github: gh-work".into())],
        skills: vec![(
            "gh-issues".into(),
            PathBuf::from("/home/u/.config/handler-ai/addons/github/skills/gh-issues"),
        )],
        mcp_servers: vec![McpServer::Stdio {
            name: "github".into(),
            command: "/opt/addons/github/bin/mcp".into(),
            args: vec![],
            env: vec![],
        }],
        injections: vec![Injection {
            name: "bindings/gh-work/token".into(),
            phantom: "ghp-phantom-from-gather".into(),
            value: "ghp-realvalue-from-gather".into(),
            hosts: vec![entry("api.github.com:443")],
            body: false,
        }],
        secrets: vec![(
            "bindings/gh-work/token".into(),
            "ghp-realvalue-from-gather".into(),
        )],
    };
    let p = case.resolve().unwrap();
    insta::assert_json_snapshot!(shown(&p));
}

#[test]
fn an_account_of_a_file_login_with_an_interface() {
    let mut case = Case::new(
        account("codex-plan"),
        Credential::LoginFile(
            "/home/u/.local/share/handler-ai/accounts/codex-plan/credential".into(),
        ),
    );
    case.options.network = Some(NetworkMode::Open);
    case.options.interface =
        Some(serde_json::from_value(json!({"result": {"type": "object"}})).unwrap());
    let p = case.resolve().unwrap();
    insta::assert_json_snapshot!(shown(&p));
}

#[test]
fn what_cannot_be_resolved_is_named() {
    let token = |v: &str| Credential::Token(Some(("accounts/claude-pro/token".into(), v.into())));
    let mut errors = Vec::new();
    // A token that is not the harness's.
    errors.push(Case::new(account("claude-pro"), token("sk-other-0123456789abcdef")).resolve());
    // A model not made for the project's context.
    let mut c = Case::new(
        account("claude-pro"),
        token("sk-ant-oat01-abcdefghij0123456789"),
    );
    c.context = Some("Work");
    errors.push(c.resolve());
    // An unknown account, an unknown harness.
    errors.push(Case::new(account("gone"), Credential::Token(None)).resolve());
    errors.push(Case::new(provider("openrouter", "nope", "x"), Credential::Token(None)).resolve());
    // An addon's skill of the same name as the agent's.
    let mut c = Case::new(
        account("claude-pro"),
        token("sk-ant-oat01-abcdefghij0123456789"),
    );
    c.skills = vec![("review".into(), "/s/review".into())];
    c.addons.skills = vec![("review".into(), PathBuf::from("/a/review"))];
    errors.push(c.resolve());
    // Two bindings of one addon.
    let mut c = Case::new(
        account("claude-pro"),
        token("sk-ant-oat01-abcdefghij0123456789"),
    );
    let part = AddonPart {
        addon: "github".into(),
        binding: "one".into(),
        image: Some("localhost/handler-addon-github".into()),
        env: BTreeMap::new(),
    };
    c.addons.parts = vec![
        part.clone(),
        AddonPart {
            binding: "two".into(),
            ..part
        },
    ];
    errors.push(c.resolve());
    insta::assert_debug_snapshot!(named(errors));
    assert_eq!(
        scope_source(None, None).unwrap_err(),
        ResolveError::NoFolder
    );
    assert_eq!(
        scope_source(Some("/p"), Some("/s")).unwrap(),
        ("folder", "/p".to_string())
    );
}

#[test]
fn resolve_draws_its_phantoms_from_the_source_it_is_given() {
    let key = || Credential::Provider {
        api_key: Some((
            "providers/openrouter/apiKey".into(),
            "sk-or-v1-0123456789abcdef0123456789abcdef".into(),
        )),
        files: BTreeMap::new(),
    };
    let access = provider("openrouter", "claude-code", "anthropic/claude-sonnet-4.5");
    let a = Case::new(access.clone(), key()).resolve().unwrap();
    let b = Case::new(access, key()).resolve().unwrap();
    assert_eq!(a.spec, b.spec);
    let phantom = &a.spec.injections[0].phantom;
    assert_eq!(
        phantom.len(),
        "sk-or-v1-0123456789abcdef0123456789abcdef".len()
    );
    assert_ne!(phantom, "sk-or-v1-0123456789abcdef0123456789abcdef");
}

#[test]
fn state_slots_are_placed_under_the_agent_and_its_account() {
    let c = catalog();
    let d = c.descriptor("codex").unwrap();
    let slots = state_slots("/data", StateOwner::Agent("a_1"), d, "codex-plan");
    assert!(!slots.is_empty());
    for s in &slots {
        assert!(
            s.path
                .starts_with("/data/agent-state/a_1/codex@codex-plan/"),
            "{}",
            s.path
        );
        assert_eq!(s.mount.source, s.path);
    }
    // The credential slot is the login file's, mounted from where Handler keeps it.
    assert!(slots.iter().all(|s| !s.mount.target.ends_with("auth.json")));
}

/// Decision 0170: a profile whose `stateScope` is `shared` keeps the state of its machines'
/// agents per harness and login, whichever agent; the same slots at the same targets.
#[test]
fn a_shared_profiles_state_is_the_profiles_per_harness_and_login() {
    let c = catalog();
    let d = c.descriptor("codex").unwrap();
    let own = state_slots("/data", StateOwner::Agent("a_1"), d, "codex-plan");
    let shared = state_slots("/data", StateOwner::Profile("team"), d, "codex-plan");
    assert_eq!(own.len(), shared.len());
    for (o, s) in own.iter().zip(&shared) {
        assert!(
            s.path
                .starts_with("/data/profile-state/team/codex@codex-plan/"),
            "{}",
            s.path
        );
        assert_eq!(o.mount.target, s.mount.target);
    }
}

#[test]
fn a_per_session_slot_is_bound_to_the_session_folders_agent() {
    let c = catalog();
    let d = c.descriptor("codex").unwrap();
    let slot = session_slot("/state/sessions/s_1", d).expect("codex declares one");
    assert_eq!(slot.path, "/state/sessions/s_1/agent");
    assert_eq!(slot.mount.source, slot.path);
    assert!(
        slot.mount.target.starts_with(&d.home),
        "{}",
        slot.mount.target
    );
    assert!(!slot.mount.target.contains('~'));
    let mut none = d.clone();
    none.state_slots.retain(|_, s| !s.per_session);
    assert!(session_slot("/s", &none).is_none());
}

/// The account of a pasted token (claude-code).
fn claude_pro() -> Case {
    Case::new(
        account("claude-pro"),
        Credential::Token(Some((
            "accounts/claude-pro/token".into(),
            "sk-ant-oat01-abcdefghijklmnopqrstuvwxyz0123456789".into(),
        ))),
    )
}

fn codex_plan() -> Case {
    Case::new(
        account("codex-plan"),
        Credential::LoginFile(
            "/home/u/.local/share/handler-ai/accounts/codex-plan/credential".into(),
        ),
    )
}

/// A session's whole plan (issue 28, item 2): its per-session slot in its folder, its run's
/// subject read-only, and — its scope a repository's root — its own git directory in the
/// session's `guard/` over the repository's (decision 0103); nothing added after resolve.
#[test]
fn a_guarded_session_with_its_slot_and_its_runs_subject() {
    let mut case = codex_plan();
    case.purpose = Purpose::Session {
        subject: Some("review".into()),
    };
    case.guard.repo = Some(repo("/home/u/code/app"));
    let p = case.resolve().unwrap();
    assert!(!p.spec.git_writable);
    insta::assert_json_snapshot!(shown(&p));
}

/// `sessionTree = "copy"` for a scope below its repository's root (decisions 0103, 0121): the
/// scope's mount replaced by the checkout's part, its `.git` at the root, the host's objects
/// read-only; its git writable; the environment that finds the checkout's `.git`.
#[test]
fn a_copy_session_below_the_repositorys_root() {
    let mut case = codex_plan();
    case.purpose = Purpose::Session { subject: None };
    case.options.session_tree = Some("copy".into());
    case.guard = GuardFacts {
        tree: SessionTree::Copy,
        repo: Some(repo("/home/u/code")),
    };
    let p = case.resolve().unwrap();
    assert!(p.spec.git_writable);
    assert!(
        !p.spec
            .mounts
            .iter()
            .any(|m| m.kind == MountKind::Scope || m.source == "/home/u/code/app"),
        "nothing of the host's tree is bound: {:?}",
        p.spec.mounts
    );
    insta::assert_json_snapshot!(shown(&p));
}

/// A connection (C.1) to a guarded scope: the guard's folder is the connection's; no session
/// slot; the model's hosts are the live allow-list's fixed part.
#[test]
fn a_guarded_connection_on_a_filtered_network() {
    let mut case = claude_pro();
    case.guard.repo = Some(repo("/home/u/code/app"));
    let p = case.resolve().unwrap();
    assert!(p.slot.is_none());
    assert!(!p.model_hosts.is_empty());
    insta::assert_json_snapshot!(shown(&p));
}

/// A terminal (D.16): the harness's own program with the person's arguments on a tty, the
/// terminal's variables in its environment, and the same guard as any sandbox (security F7);
/// under `gitGuard = "open"` the host's `.git` writable and no guard.
#[test]
fn a_terminal_and_an_open_git_guard() {
    let mut case = claude_pro();
    case.purpose = Purpose::Terminal {
        args: vec!["--resume".into()],
        env: BTreeMap::from([("TERM".to_string(), "xterm-256color".to_string())]),
    };
    case.guard.repo = Some(repo("/home/u/code/app"));
    let p = case.resolve().unwrap();
    assert!(p.spec.tty);
    assert_eq!(p.spec.env["TERM"], "xterm-256color");
    insta::assert_json_snapshot!(shown(&p));
    let mut open = claude_pro();
    open.purpose = Purpose::Terminal {
        args: Vec::new(),
        env: BTreeMap::new(),
    };
    open.options.git_guard = Some(handler_contracts::control::GitGuard::Open);
    let p = open.resolve().unwrap();
    assert_eq!(p.guard, GuardPlan::Open);
    assert!(p.spec.git_writable);
    assert!(p.spec.mounts.iter().all(|m| !m.source.contains("/guard/")));
}

/// What the guard refuses is refused by resolve, before anything is made (409s).
#[test]
fn what_the_guard_refuses_is_named() {
    let mut errors = Vec::new();
    let mut linked = repo("/home/u/code/app");
    linked.links.push(handler_sandbox::guard::Link {
        path: "/home/u/code/app/.git/hooks".into(),
        target: "/tmp/elsewhere".into(),
    });
    let mut c = codex_plan();
    c.guard.repo = Some(linked.clone());
    errors.push(c.resolve());
    let copy = |repo: Option<RepoFacts>| {
        let mut c = codex_plan();
        c.guard = GuardFacts {
            tree: SessionTree::Copy,
            repo,
        };
        c.resolve()
    };
    errors.push(copy(None));
    let mut empty = repo("/home/u/code/app");
    empty.head = handler_sandbox::guard::Head::Branch {
        name: "main".into(),
        commit: None,
    };
    errors.push(copy(Some(empty)));
    errors.push(copy(Some(linked)));
    errors.push(copy(Some(repo("/home/u/other"))));
    insta::assert_debug_snapshot!(named(errors));
}
