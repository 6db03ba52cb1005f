//! Knowledge folders over HTTP (D.5): the listing three levels deep (parents first, `.` and `_`
//! names left out, `exists`), a folder's view, a note, a new folder (K5), the root set in
//! knowledge.toml and refused when `$HANDLER_KNOWLEDGE_DIR` sets it; the folder pickers'
//! `/v1/directories` (D.13) confined to the work folders.

use crate::daemon_support::{Options, TestDaemon, assert_problem};
use serde_json::json;

fn mkdir(p: &std::path::Path) {
    std::fs::create_dir_all(p).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_is_listed_browsed_read_and_made_inside_its_root() {
    let d = TestDaemon::start().await;
    let home = d.home.path();
    let (s, v) = d.get("/v1/knowledge").await;
    assert_eq!(s, 200);
    let root = home.join("knowledge");
    assert_eq!(
        v,
        json!({"root": root.display().to_string(), "source": "default", "exists": false, "folders": []})
    );
    for f in [
        "rust/guides/async/deeper",
        "web",
        ".obsidian",
        "_drafts",
        "rust/_private",
    ] {
        mkdir(&root.join(f));
    }
    std::fs::write(
        root.join("rust/README.md"),
        "# Rust\nSee [guides](guides/).\n",
    )
    .unwrap();
    std::fs::write(root.join("rust/ownership.md"), "Borrowing.\n").unwrap();
    std::fs::write(root.join("rust/.secret.md"), "no").unwrap();
    std::fs::write(root.join("rust/blob.bin"), [0xffu8, 0xfe]).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    let (_, v) = d.get("/v1/knowledge").await;
    assert_eq!(v["exists"], true);
    assert_eq!(
        v["folders"],
        json!(["rust", "rust/guides", "rust/guides/async", "web"]),
        "three levels, parents first, no . or _ names, no links"
    );

    let (s, v) = d.get("/v1/knowledge/folder?path=rust").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["folders"], json!(["guides"]));
    assert_eq!(v["notes"], json!(["README.md", "blob.bin", "ownership.md"]));
    assert_eq!(v["index"], "# Rust\nSee [guides](guides/).\n");
    let (s, v) = d.get("/v1/knowledge/folder").await;
    assert_eq!((s, v["path"].as_str()), (200, Some(".")), "{v}");
    let (s, v) = d.get("/v1/knowledge/note?path=rust/ownership.md").await;
    assert_eq!(s, 200);
    assert_eq!(
        v,
        json!({"path": "rust/ownership.md", "text": "Borrowing.\n"})
    );
    for (q, status, title) in [
        ("note?path=rust/.secret.md", 400, "path invalid"),
        ("note?path=etc/passwd", 400, "path invalid"),
        ("note?path=/etc/passwd", 400, "path invalid"),
        ("note?path=rust/..%2F..%2F.ssh", 400, "path invalid"),
        ("note?path=rust/blob.bin", 400, "path invalid"),
        ("note?path=rust", 400, "path invalid"),
        ("note?path=rust/none.md", 404, "not found"),
        ("folder?path=.obsidian", 400, "path invalid"),
        ("folder?path=rust/ownership.md", 400, "path invalid"),
    ] {
        let (s, p) = d.get(&format!("/v1/knowledge/{q}")).await;
        assert_problem(s, &p, status, title);
        assert!(
            p["detail"].as_str().unwrap().starts_with("path"),
            "{q}: {p}"
        );
    }

    let (s, v) = d
        .post("/v1/knowledge/folders", json!({"path": "rust/new"}))
        .await;
    assert_eq!((s, v["path"].as_str()), (201, Some("rust/new")), "{v}");
    assert!(root.join("rust/new").is_dir());
    let (s, p) = d
        .post("/v1/knowledge/folders", json!({"path": "rust/new"}))
        .await;
    assert_problem(s, &p, 409, "folder exists");
    for bad in ["_drafts2", ".hidden", "rust/_x", "etc/x", "../out"] {
        let (s, p) = d.post("/v1/knowledge/folders", json!({"path": bad})).await;
        assert_problem(s, &p, 400, "path invalid");
    }
    let (s, _) = d
        .post("/v1/knowledge/folders", json!({"path": "gone/x"}))
        .await;
    assert_eq!(s, 404);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_is_set_in_knowledge_toml_unless_the_environment_sets_it() {
    let d = TestDaemon::start().await;
    let home = d.home.path();
    mkdir(&home.join("notes/team"));
    let (s, v) = d.put("/v1/knowledge", json!({"root": "~/notes"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["source"].as_str(), v["folders"].clone()),
        (Some("config"), json!(["team"]))
    );
    let toml = std::fs::read_to_string(d.state.config.config_dir.join("knowledge.toml")).unwrap();
    assert!(toml.contains("root = \"~/notes\""), "{toml}");
    // An agent's folders follow the new root (K4).
    d.fake_account("perso", "fk-Knowledge0Token1111aaaa2222")
        .await;
    let a = d.fake_agent("perso", json!({"knowledge": ["team"]})).await;
    assert_eq!(a["knowledge"], json!(["team"]));
    for bad in ["~/.config/handler-ai", "relative/path", "~other/x"] {
        let (s, p) = d.put("/v1/knowledge", json!({"root": bad})).await;
        assert_problem(s, &p, 400, "knowledge root invalid");
        assert!(p["detail"].as_str().unwrap().starts_with("root: "), "{p}");
    }
    d.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let d = TestDaemon::start_with(Options {
        knowledge_dir: Some(dir.path().to_path_buf()),
        ..Options::default()
    })
    .await;
    let (_, v) = d.get("/v1/knowledge").await;
    assert_eq!(
        (v["source"].as_str(), v["exists"].as_bool()),
        (Some("env"), Some(true))
    );
    let (s, p) = d.put("/v1/knowledge", json!({"root": "~/notes"})).await;
    assert_problem(s, &p, 409, "knowledge root set by the environment");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_folder_pickers_list_and_make_folders_inside_the_work_folders() {
    let d = TestDaemon::start().await;
    let code = std::fs::canonicalize(d.home.path().join("code")).unwrap();
    mkdir(&code.join(".cache"));
    mkdir(&code.join("lib"));
    let (s, v) = d.get("/v1/directories").await;
    assert_eq!(s, 200);
    assert_eq!(v, json!({"folders": [code.display().to_string()]}));
    let (s, v) = d
        .get(&format!("/v1/directories?path={}", code.display()))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["folders"],
        json!([
            code.join("app").display().to_string(),
            code.join("lib").display().to_string()
        ])
    );
    let (s, v) = d
        .post("/v1/directories", json!({"path": "~/code/lib/new"}))
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["path"], code.join("lib/new").display().to_string());
    assert!(code.join("lib/new").is_dir());
    let (s, p) = d
        .post("/v1/directories", json!({"path": "~/code/lib/new"}))
        .await;
    assert_problem(s, &p, 409, "folder exists");
    let (s, p) = d
        .post("/v1/directories", json!({"path": "~/code/.hidden"}))
        .await;
    assert_problem(s, &p, 400, "path invalid");
    mkdir(&d.home.path().join("elsewhere"));
    let (s, p) = d
        .post("/v1/directories", json!({"path": "~/elsewhere/x"}))
        .await;
    assert_problem(s, &p, 400, "scope outside work folders");
    let (s, p) = d.get("/v1/directories?path=/etc").await;
    assert_problem(s, &p, 400, "scope outside work folders");
    assert!(!d.home.path().join("elsewhere/x").exists());
    d.stop().await;
}
