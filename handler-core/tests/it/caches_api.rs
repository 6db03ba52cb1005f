//! Settings → Caches through a real daemon (D.8, decision 0087): `GET /v1/caches` lists the
//! toolbox's declarations, the global folder with the projects choosing it and each project's
//! own folder, sized through the runtime's `cache size` (none before a launch made it);
//! `POST /v1/caches/clear` empties one cache or a location through `cache clear`, refused (409
//! naming the sandbox) while a running sandbox mounts it; bad requests name the field.

use crate::daemon_support;

use std::path::PathBuf;

use daemon_support::{TestDaemon, assert_problem};
use serde_json::{Value, json};

const TOKEN: &str = "fk-Caches0Token1111aaaa2222bbbb3333cc";

async fn project(d: &TestDaemon, caches: &str) -> (String, String) {
    d.fake_account("perso", TOKEN).await;
    let (s, p) = d
        .post(
            "/v1/projects",
            json!({"folder": d.scope(), "caches": caches,
                "agent": {"name": "Dev", "models": [{"account": "perso"}]}}),
        )
        .await;
    assert_eq!(s, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_string();
    (id, p["agents"][0]["id"].as_str().unwrap().to_string())
}

fn own_folder(d: &TestDaemon, pid: &str, name: &str) -> PathBuf {
    d.home
        .path()
        .join(".local/share/handler-ai/caches")
        .join(pid)
        .join(name)
}

fn cache<'a>(location: &'a Value, name: &str) -> &'a Value {
    location["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no cache {name}: {location}"))
}

#[tokio::test]
async fn caches_are_listed_sized_and_emptied() {
    let d = TestDaemon::start().await;
    let (pid, _) = project(&d, "project").await;
    let (s, o) = d.get("/v1/caches").await;
    assert_eq!(s, 200, "{o}");
    // The declarations: the default toolbox's, toolchains before general folders.
    let manifest = handler_harness::descriptors::toolbox_manifest().unwrap();
    let decls = o["declarations"].as_array().unwrap();
    assert_eq!(decls.len(), manifest.caches.len());
    let general: Vec<bool> = decls.iter().map(|d| d["general"] == true).collect();
    assert!(general.is_sorted(), "toolchains first: {decls:?}");
    let cargo = decls.iter().find(|d| d["name"] == "cargo").unwrap();
    assert_eq!(cargo["target"], "~/.cargo");
    assert_eq!(o["global"]["users"], json!([]));
    let p = &o["projects"][0];
    assert_eq!(p["projectId"], pid.as_str());
    assert_eq!(p["choice"], "project");
    // No launch made the folders: not made yet, never a guess.
    assert_eq!(cache(p, "npm")["bytes"], Value::Null);
    assert!(
        !d.sandbox_log().contains("cache size"),
        "nothing to measure"
    );

    // A folder with content is measured by the runtime's verb.
    let npm = own_folder(&d, &pid, "npm");
    std::fs::create_dir_all(npm.join("_cacache")).unwrap();
    std::fs::write(npm.join("_cacache/index"), b"12345").unwrap();
    let (_, o) = d.get("/v1/caches").await;
    assert_eq!(cache(&o["projects"][0], "npm")["bytes"], 5, "{o}");
    assert_eq!(cache(&o["projects"][0], "pip")["bytes"], Value::Null);
    assert!(
        d.sandbox_log().contains("cache size /"),
        "{}",
        d.sandbox_log()
    );

    // Emptying one: its content goes, the folder stays.
    let (s, b) = d
        .post("/v1/caches/clear", json!({"project": pid, "name": "npm"}))
        .await;
    assert_eq!(s, 204, "{b}");
    assert!(npm.is_dir() && !npm.join("_cacache").exists());
    let (_, o) = d.get("/v1/caches").await;
    assert_eq!(cache(&o["projects"][0], "npm")["bytes"], 0);

    // Choosing global lists the project among the global folder's users.
    let (s, v) = d
        .patch(&format!("/v1/projects/{pid}"), json!({"caches": "global"}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, o) = d.get("/v1/caches").await;
    assert_eq!(o["global"]["users"], json!([pid]));
    assert_eq!(o["projects"][0]["choice"], "global");
    // A whole location whose folders were never made: nothing to do.
    let (s, b) = d.post("/v1/caches/clear", json!({"global": true})).await;
    assert_eq!(s, 204, "{b}");
    d.stop().await;
}

/// D.8: a project's own caches go with it — emptied by the runtime's verb, then the empty
/// folders removed — and the answer names them; the global caches stay.
#[tokio::test]
async fn a_deleted_projects_own_caches_are_removed_and_named() {
    let d = TestDaemon::start().await;
    let (pid, _) = project(&d, "project").await;
    let npm = own_folder(&d, &pid, "npm");
    std::fs::create_dir_all(npm.join("_cacache/deep")).unwrap();
    std::fs::write(npm.join("_cacache/deep/index"), b"12345").unwrap();
    let global = d.home.path().join(".cache/handler-ai/npm");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::write(global.join("kept"), b"x").unwrap();
    let (s, v) = d.delete(&format!("/v1/projects/{pid}")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["caches"], json!([npm.display().to_string()]), "{v}");
    assert!(v.get("kept").is_none(), "{v}");
    assert!(!npm.exists(), "its npm cache is gone");
    assert!(!npm.parent().unwrap().exists(), "its cache folder is gone");
    assert!(
        d.sandbox_log().contains("cache clear"),
        "{}",
        d.sandbox_log()
    );
    assert!(global.join("kept").exists(), "the global caches stay");
    d.stop().await;
}

#[tokio::test]
async fn a_bad_clear_names_what_is_wrong() {
    let d = TestDaemon::start().await;
    let (pid, _) = project(&d, "project").await;
    for (body, status, word) in [
        (json!({}), 400, "project, global"),
        (
            json!({"project": pid, "global": true}),
            400,
            "project, global",
        ),
        (json!({"project": "p_0000000000"}), 404, "p_0000000000"),
        (
            json!({"global": true, "name": "nosuchcache"}),
            404,
            "nosuchcache",
        ),
    ] {
        let (s, b) = d.post("/v1/caches/clear", body.clone()).await;
        assert_eq!(s, status, "{body}: {b}");
        assert!(b["detail"].as_str().unwrap().contains(word), "{body}: {b}");
    }
    let (s, b) = d
        .post("/v1/caches/clear", json!({"global": true, "nme": "npm"}))
        .await;
    assert!(s == 400 || s == 422, "{b}");
    assert!(b["detail"].as_str().unwrap().contains("nme"), "{b}");
    d.stop().await;
}

#[tokio::test]
async fn clearing_is_refused_while_a_sandbox_mounts_the_cache() {
    let d = TestDaemon::start().await;
    let (pid, agent) = project(&d, "project").await;
    let mut c = d.acp(&agent).await;
    c.start_session(&d.scope()).await;
    // The launch made the project's folders; the sandbox still runs.
    let npm = own_folder(&d, &pid, "npm");
    std::fs::write(npm.join("kept"), b"x").unwrap();
    let (s, b) = d
        .post("/v1/caches/clear", json!({"project": pid, "name": "npm"}))
        .await;
    assert_problem(s, &b, 409, "cache in use");
    assert!(b["detail"].as_str().unwrap().contains("fake-"), "{b}");
    assert!(npm.join("kept").exists(), "nothing emptied");
    // Another location is not held: the global folders, made for it, are emptied.
    let global = d.home.path().join(".cache/handler-ai/npm");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::write(global.join("old"), b"x").unwrap();
    let (s, b) = d.post("/v1/caches/clear", json!({"global": true})).await;
    assert_eq!(s, 204, "{b}");
    assert!(!global.join("old").exists());
    drop(c);
    d.stop().await;
}

#[test]
fn what_is_kept_where_is_one_pure_function() {
    use handler_contracts::control::CacheChoice;
    use handler_core::daemon::services::caches::layout;
    use handler_core::daemon::store::StoredProject;
    use std::path::Path;
    let project = |id: &str, name: &str, caches: CacheChoice| -> StoredProject {
        serde_json::from_value(json!({"id": id, "name": name, "folder": "/w",
            "caches": caches, "createdAt": "2026-12-02T00:00:00Z"}))
        .unwrap()
    };
    let m = handler_contracts::parse::from_toml(
        "toolbox.toml",
        "[caches.npm]\ntarget = \"~/.npm\"\nabout = \"npm\"\n\
         [caches.cache]\ntarget = \"~/.cache\"\nabout = \"any\"\ngeneral = true\n\
         [caches.cargo]\ntarget = \"~/.cargo\"\nabout = \"cargo\"\n",
    )
    .unwrap();
    let ps = [
        project("p_2", "web", CacheChoice::Global),
        project("p_1", "api", CacheChoice::Project),
        project("p_3", "zed", CacheChoice::Off),
    ];
    let o = layout(&m, &ps, Path::new("/c"), Path::new("/d"));
    insta::assert_json_snapshot!(o);
}
