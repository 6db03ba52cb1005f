//! What a start composes besides the harness (D.5, D.8, D.17), through a real daemon, a real
//! WebSocket client and the transport double (the spec it gets on fd 3 is recorded): knowledge
//! folders read-only at /knowledge/<name> and checked again at each start (K3), the toolbox's
//! caches where the project keeps them (project, global, off; ad hoc: global), made when
//! missing, and the agent's and its project's skills mounted read-only in the harness's
//! skillsDir, a missing or invalid one failing the start (`skill '<name>': …`).

use crate::daemon_support;

use std::path::Path;

use daemon_support::TestDaemon;
use daemon_support::acp::open;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite;

const TOKEN: &str = "fk-Launch0Token1111aaaa2222bbbb3333cc";

fn write_skill(d: &TestDaemon, name: &str, frontmatter_name: &str) {
    let dir = d.home.path().join(".config/handler-ai/skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {frontmatter_name}\ndescription: Test skill {name}\n---\n# {name}\n"),
    )
    .unwrap();
}

/// The spec of the `n`-th launch the transport double received.
fn launched(d: &TestDaemon, n: usize) -> Value {
    let log = d.sandbox_log();
    let line = log
        .lines()
        .filter(|l| l.starts_with("launch "))
        .nth(n)
        .unwrap_or_else(|| panic!("no launch #{n}: {log}"));
    serde_json::from_str(line.trim_start_matches("launch ")).unwrap()
}

fn mount<'a>(spec: &'a Value, target: &str) -> Option<&'a Value> {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["target"] == target)
}

fn canon(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

/// The refusal of a handshake: status and problem body.
async fn refused(d: &TestDaemon, agent: &str) -> (u16, Value) {
    match open(&d.acp_url(agent, ""), &d.protocols(), None).await {
        Ok(_) => panic!("the start was accepted"),
        Err(tungstenite::Error::Http(r)) => (
            r.status().as_u16(),
            r.body()
                .as_ref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null),
        ),
        Err(e) => panic!("not an HTTP refusal: {e}"),
    }
}

#[tokio::test]
async fn knowledge_caches_and_skills_reach_the_spec() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let h = d.home.path();
    std::fs::create_dir_all(h.join("knowledge/rust/notes")).unwrap();
    std::fs::create_dir_all(h.join("knowledge/design")).unwrap();
    write_skill(&d, "review", "review");
    write_skill(&d, "house-style", "house-style");
    let (s, p) = d
        .post(
            "/v1/projects",
            json!({"folder": d.scope(), "caches": "project", "agent": {"name": "Dev",
                "models": [{"account": "perso"}], "knowledge": ["rust", "design"], "skills": ["review"]}}),
        )
        .await;
    assert_eq!(s, 201, "{p}");
    let pid = p["id"].as_str().unwrap().to_string();
    let agent = p["agents"][0]["id"].as_str().unwrap().to_string();
    // The project gives house-style to all its agents (D.17; stored with the project).
    d.state
        .agents
        .update::<_, handler_core::daemon::store::StoreError>(|_, projects| {
            projects[0].skills = vec!["house-style".into()];
            Ok(())
        })
        .unwrap();

    let mut c = d.acp(&agent).await;
    c.start_session(&d.scope()).await;
    let spec = launched(&d, 0);
    // D.5: read-only at /knowledge/<folder name>, kind knowledge.
    for (name, rel) in [("rust", "knowledge/rust"), ("design", "knowledge/design")] {
        let m = mount(&spec, &format!("/knowledge/{name}")).unwrap_or_else(|| panic!("{spec}"));
        assert_eq!(m["source"], canon(&h.join(rel)));
        assert_eq!(m["readOnly"], true);
        assert_eq!(m["kind"], "knowledge");
    }
    // D.8: project caches at <data>/caches/<project id>/<name>, made at launch, read-write.
    let caches = h.join(".local/share/handler-ai/caches").join(&pid);
    let manifest = handler_harness::descriptors::toolbox_manifest().unwrap();
    assert!(!manifest.caches.is_empty());
    for (name, decl) in &manifest.caches {
        let target = decl.target.replacen('~', "/home/agent", 1);
        let m = mount(&spec, &target).unwrap_or_else(|| panic!("no cache at {target}: {spec}"));
        assert_eq!(m["source"], canon(&caches.join(name)));
        assert_eq!(m["kind"], "cache");
        assert_eq!(m["readOnly"], false);
        assert!(caches.join(name).is_dir());
    }
    // D.17: its skill and its project's, read-only in the harness's skillsDir.
    for s in ["review", "house-style"] {
        let m = mount(&spec, &format!("/home/agent/.fake/skills/{s}"))
            .unwrap_or_else(|| panic!("skill {s}: {spec}"));
        assert_eq!(
            m["source"],
            canon(&h.join(".config/handler-ai/skills").join(s))
        );
        assert_eq!(m["readOnly"], true);
    }
    drop(c);

    // Global: one folder per cache under $HANDLER_CACHE_DIR (default ~/.cache/handler-ai).
    let (s, v) = d
        .patch(&format!("/v1/projects/{pid}"), json!({"caches": "global"}))
        .await;
    assert_eq!(s, 200, "{v}");
    let mut c = d.acp(&agent).await;
    c.start_session(&d.scope()).await;
    let spec = launched(&d, 1);
    let m = mount(&spec, "/home/agent/.cargo").unwrap_or_else(|| panic!("{spec}"));
    assert_eq!(m["source"], canon(&h.join(".cache/handler-ai/cargo")));
    drop(c);

    // Off: none.
    let (s, _) = d
        .patch(&format!("/v1/projects/{pid}"), json!({"caches": "off"}))
        .await;
    assert_eq!(s, 200);
    let mut c = d.acp(&agent).await;
    c.start_session(&d.scope()).await;
    let spec = launched(&d, 2);
    assert!(
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["kind"] != "cache"),
        "{spec}"
    );
    drop(c);

    // An ad-hoc agent uses the global caches.
    let (s, v) = d.delete(&format!("/v1/projects/{pid}")).await;
    assert_eq!(s, 200, "{v}");
    let a = d.fake_agent("perso", json!({})).await;
    let mut c = d.acp(a["id"].as_str().unwrap()).await;
    c.start_session(&d.scope()).await;
    let spec = launched(&d, 3);
    let m = mount(&spec, "/home/agent/.npm").unwrap_or_else(|| panic!("{spec}"));
    assert_eq!(m["source"], canon(&h.join(".cache/handler-ai/npm")));
    d.stop().await;
}

#[tokio::test]
async fn the_users_toolbox_declares_the_caches() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let tb = d.home.path().join(".config/handler-ai/toolbox");
    std::fs::create_dir_all(&tb).unwrap();
    std::fs::write(
        tb.join("toolbox.toml"),
        "[caches.gradle]\ntarget = \"~/.gradle\"\nabout = \"Gradle's caches\"\n",
    )
    .unwrap();
    let a = d.fake_agent("perso", json!({})).await;
    let mut c = d.acp(a["id"].as_str().unwrap()).await;
    c.start_session(&d.scope()).await;
    let spec = launched(&d, 0);
    let caches: Vec<&Value> = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "cache")
        .collect();
    assert_eq!(caches.len(), 1, "{spec}");
    assert_eq!(caches[0]["target"], "/home/agent/.gradle");
    drop(c);
    // A toolbox.toml with an unknown key fails the start, naming the file and the line.
    std::fs::write(
        tb.join("toolbox.toml"),
        "[caches.gradle]\ntarget = \"~/.gradle\"\nabout = \"x\"\ncolour = 1\n",
    )
    .unwrap();
    let (s, p) = refused(&d, a["id"].as_str().unwrap()).await;
    assert_eq!(s, 400, "{p}");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("toolbox/toolbox.toml") && detail.contains("line 4"),
        "{detail}"
    );
    d.stop().await;
}

#[tokio::test]
async fn a_removed_knowledge_folder_or_a_broken_skill_fails_the_start() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let h = d.home.path();
    std::fs::create_dir_all(h.join("knowledge/rust")).unwrap();
    write_skill(&d, "review", "review");
    let a = d
        .fake_agent(
            "perso",
            json!({"knowledge": ["rust"], "skills": ["review"]}),
        )
        .await;
    let id = a["id"].as_str().unwrap().to_string();
    // K3: removed since the save.
    std::fs::remove_dir(h.join("knowledge/rust")).unwrap();
    let (s, p) = refused(&d, &id).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["title"], "knowledge unusable", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("rust"), "{p}");
    std::fs::create_dir_all(h.join("knowledge/rust")).unwrap();
    // A skill whose SKILL.md no longer names it.
    write_skill(&d, "review", "other-name");
    let (s, p) = refused(&d, &id).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["title"], "skill unusable", "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("skill 'review': "),
        "{p}"
    );
    // A skill deleted from the library.
    std::fs::remove_dir_all(h.join(".config/handler-ai/skills/review")).unwrap();
    let (s, p) = refused(&d, &id).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["detail"], "skill 'review': not in the library", "{p}");
    // Back in order: it starts.
    write_skill(&d, "review", "review");
    let mut c = d.acp(&id).await;
    c.start_session(&d.scope()).await;
    d.stop().await;
}

/// Every platform harness, its golden render input given the default toolbox's caches and a
/// skill, composed with knowledge and an addon, makes a spec the sandbox accepts (A.1
/// validation): the caches' nested folders (~/.cache and ~/.cache/uv, ~/.local and its podman
/// store) do not clash with the harnesses' own mounts, seeds or writable paths.
#[test]
fn every_harness_composes_with_the_default_caches_into_a_valid_spec() {
    use handler_contracts::RenderInput;
    use handler_contracts::control::NetworkMode;
    use handler_contracts::sandbox::{Confinement, Enforcement};
    use handler_sandbox::compose::{AddonPart, ComposeInput, compose};
    let manifest = handler_harness::descriptors::toolbox_manifest().unwrap();
    let caches: std::collections::BTreeMap<String, String> = manifest
        .caches
        .iter()
        .map(|(n, c)| (c.target.clone(), format!("/data/caches/p_1/{n}")))
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/render/inputs");
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with("__bypass__plain.json") {
            continue;
        }
        let req: handler_harness::RenderRequest =
            serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
        let input = RenderInput {
            caches: caches.clone(),
            skills: if req.input.descriptor.skills_dir.is_some() {
                vec!["/cfg/skills/review".into()]
            } else {
                Vec::new()
            },
            ..req.input
        };
        let launch =
            handler_harness::render(&input, &req.context).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ci = ComposeInput {
            name: "handler-a-1-c1".into(),
            scope: input.scope.clone(),
            network: NetworkMode::Filtered,
            enforcement: Enforcement::Enforce,
            allow: Vec::new(),
            required: Vec::new(),
            confinement: Confinement::Strict,
            state: Vec::new(),
            caches: caches.clone(),
            knowledge: vec!["/home/me/knowledge/rust".into()],
            injections: Vec::new(),
            display: None,
            labels: Default::default(),
            addons: vec![AddonPart {
                addon: "tools".into(),
                binding: "tb".into(),
                image: Some("localhost/handler-addon-tools".into()),
                env: [("TOOLS_MODE".to_string(), "ci".to_string())].into(),
            }],
        };
        let spec = compose(&launch, &ci).unwrap_or_else(|e| panic!("{name}: {e}"));
        handler_sandbox::validate::validate_spec(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            spec.mounts
                .iter()
                .filter(|m| m.kind == handler_contracts::sandbox::MountKind::Cache)
                .count(),
            manifest.caches.len(),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} harnesses checked");
}

/// K4: the root set in <config>/knowledge.toml is read at each start; folders stay relative, so
/// an agent follows a new root (and fails when its folder is not under it, K3).
#[tokio::test]
async fn the_knowledge_root_of_knowledge_toml_is_read_at_each_start() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let h = d.home.path();
    std::fs::create_dir_all(h.join("vault-a/rust")).unwrap();
    std::fs::create_dir_all(h.join("vault-b/rust")).unwrap();
    let toml = h.join(".config/handler-ai/knowledge.toml");
    std::fs::write(&toml, "root = \"~/vault-a\"\n").unwrap();
    let a = d.fake_agent("perso", json!({"knowledge": ["rust"]})).await;
    assert_eq!(a["knowledge"], json!(["rust"]));
    let id = a["id"].as_str().unwrap().to_string();
    let mut c = d.acp(&id).await;
    c.start_session(&d.scope()).await;
    let m = mount(&launched(&d, 0), "/knowledge/rust").cloned().unwrap();
    assert_eq!(m["source"], canon(&h.join("vault-a/rust")));
    drop(c);
    std::fs::write(&toml, "root = \"~/vault-b\"\n").unwrap();
    let mut c = d.acp(&id).await;
    c.start_session(&d.scope()).await;
    let m = mount(&launched(&d, 1), "/knowledge/rust").cloned().unwrap();
    assert_eq!(m["source"], canon(&h.join("vault-b/rust")));
    drop(c);
    std::fs::remove_dir(h.join("vault-b/rust")).unwrap();
    let (s, p) = refused(&d, &id).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["title"], "knowledge unusable");
    d.stop().await;
}

/// Issue 11, item 3: the stored folder is checked again at every start (D.13), symbolic links
/// resolved now: swapped for a link to Handler's own folders or outside the work folders, the
/// start is refused (400 naming the folder), never mounted.
#[tokio::test]
async fn a_scope_swapped_for_a_link_is_refused_at_start() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let h = d.home.path().to_path_buf();
    let a = d.fake_agent("perso", json!({})).await;
    let id = a["id"].as_str().unwrap().to_string();
    let mut c = d.acp(&id).await;
    c.start_session(&d.scope()).await;
    drop(c);
    let config = h.join(".config/handler-ai");
    std::fs::create_dir_all(&config).unwrap();
    let outside = h.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let scope = h.join("code/app");
    for (target, title) in [
        (config.clone(), "scope is Handler's"),
        (h.join(".local/share/handler-ai"), "scope is Handler's"),
        (outside.clone(), "scope outside work folders"),
    ] {
        std::fs::create_dir_all(&target).unwrap();
        let _ = std::fs::remove_dir(&scope);
        let _ = std::fs::remove_file(&scope);
        std::os::unix::fs::symlink(&target, &scope).unwrap();
        let (s, p) = refused(&d, &id).await;
        assert_eq!(s, 400, "{p}");
        assert_eq!(p["title"], title, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("scope: ") && detail.contains(&canon(&target)),
            "{detail}"
        );
    }
    // Only the first start reached the sandbox.
    assert_eq!(
        d.sandbox_log()
            .lines()
            .filter(|l| l.starts_with("launch "))
            .count(),
        1
    );
    d.stop().await;
}

/// Issue 11, item 3: Handler's config, data, state and cache folders are no scope and no work
/// folder: a scope that is one, is inside one or holds one is refused (400), and so is a work
/// folder root that is or lies inside one (a root holding them, like `~`, is fine: its scopes
/// are checked one by one).
#[tokio::test]
async fn handlers_own_folders_are_no_scope_and_no_work_folder() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let h = d.home.path().to_path_buf();
    for dir in [
        ".config/handler-ai/skills",
        ".local/share/handler-ai",
        ".local/state/handler-ai",
        ".cache/handler-ai",
    ] {
        std::fs::create_dir_all(h.join(dir)).unwrap();
    }
    // The data folder was accepted as a scope besides the work folders.
    let (s, p) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": canon(&h.join(".local/share/handler-ai"))}),
        )
        .await;
    assert_eq!(
        (s, p["title"].as_str()),
        (400, Some("scope is Handler's")),
        "{p}"
    );
    // With `~` as a work folder: the scopes holding or inside Handler's folders are refused.
    let (s, p) = d.put("/v1/folders", json!({"roots": ["~"]})).await;
    assert_eq!(s, 200, "{p}");
    for scope in [
        "~/.local",
        "~/.config/handler-ai/skills",
        "~/.cache/handler-ai",
        "~/.local/state/handler-ai",
        "~",
    ] {
        let (s, p) = d
            .post(
                "/v1/agents",
                json!({"models": [{"account": "perso"}], "scope": scope}),
            )
            .await;
        assert_eq!(s, 400, "{scope}: {p}");
        assert_eq!(p["title"], "scope is Handler's", "{scope}: {p}");
        assert!(p["detail"].as_str().unwrap().starts_with("scope: "), "{p}");
    }
    let (s, p) = d
        .post(
            "/v1/projects",
            json!({"folder": "~/.local/share/handler-ai", "agent": {"name": "x", "models": [{"account": "perso"}]}}),
        )
        .await;
    assert_eq!(s, 400, "{p}");
    assert!(p["detail"].as_str().unwrap().starts_with("folder: "), "{p}");
    d.fake_agent("perso", json!({})).await;
    // Handler's folders as work folders.
    for root in [
        "~/.local/share/handler-ai",
        "~/.config/handler-ai/skills",
        "~/.cache/handler-ai/x",
    ] {
        let (s, p) = d
            .put("/v1/folders", json!({"roots": ["~/code", root]}))
            .await;
        assert_eq!(s, 400, "{root}: {p}");
        assert!(
            p["detail"].as_str().unwrap().starts_with("roots[1]: "),
            "{p}"
        );
    }
    d.stop().await;
}
