//! The session's files over HTTP (F.8) on a session of the fake sandbox: the baseline recorded
//! when it is created, the changes since (ignored files left out), All files, a file with how it
//! changed, the refusals (a path that leaves the folder 400, a link on the way 400, an unknown
//! mount 404, an unknown session 404); and the mounts recorded at its start (the Access tab),
//! a knowledge folder read through `mount` with the same refusals, the scope and a state slot
//! (not browsable) 404.

use crate::daemon_support;

use daemon_support::{Options, TestDaemon};
use serde_json::{Value, json};

fn change_of<'a>(changes: &'a Value, path: &str) -> Option<&'a str> {
    changes["changes"]
        .as_array()?
        .iter()
        .find(|c| c["path"] == path)
        .and_then(|c| c["change"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_files_follow_what_changed_since_it_started() {
    let d = TestDaemon::start().await;
    let scope = std::path::PathBuf::from(d.scope());
    std::fs::write(scope.join("kept.txt"), "before\n").unwrap();
    std::fs::write(scope.join("gone.txt"), "soon gone\n").unwrap();
    std::fs::write(scope.join(".gitignore"), "ignored.txt\n").unwrap();
    d.fake_account("perso", "fk-SessionFiles0Token111aaaa2222")
        .await;
    let a = d.fake_agent("perso", json!({})).await;
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": a["id"], "origin": "ui"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    let id = v["id"].as_str().unwrap();
    assert!(
        d.state.sessions.folder(id).join("baseline.json").is_file(),
        "no baseline at creation"
    );

    // The agent's work (written here as it would be, in its scope).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(scope.join("kept.txt"), "before\nand after\n").unwrap();
    std::fs::remove_file(scope.join("gone.txt")).unwrap();
    std::fs::write(scope.join("new.txt"), "new\n").unwrap();
    std::fs::write(scope.join("ignored.txt"), "not shown\n").unwrap();
    std::os::unix::fs::symlink("/etc", scope.join("out")).unwrap();

    let (s, c) = d.get(&format!("/v1/sessions/{id}/changes")).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(change_of(&c, "kept.txt"), Some("modified"), "{c}");
    assert_eq!(change_of(&c, "gone.txt"), Some("deleted"), "{c}");
    assert_eq!(change_of(&c, "new.txt"), Some("added"), "{c}");
    assert_eq!(change_of(&c, "ignored.txt"), None, "{c}");

    let (s, f) = d
        .get(&format!("/v1/sessions/{id}/file?path=kept.txt"))
        .await;
    assert_eq!(s, 200, "{f}");
    assert_eq!(f["change"], "modified", "{f}");
    assert_eq!(f["content"]["text"], "before\nand after\n", "{f}");
    let (s, f) = d
        .get(&format!("/v1/sessions/{id}/file?path=gone.txt"))
        .await;
    assert_eq!((s, f["change"].as_str()), (200, Some("deleted")), "{f}");

    let (s, l) = d.get(&format!("/v1/sessions/{id}/files")).await;
    assert_eq!(s, 200, "{l}");
    assert!(l.to_string().contains("new.txt"), "{l}");

    for bad in ["../x", "out/passwd", "/etc/passwd", ".git/config"] {
        let (s, p) = d.get(&format!("/v1/sessions/{id}/file?path={bad}")).await;
        daemon_support::assert_problem(s, &p, 400, "path not shown");
    }
    let (s, p) = d
        .get(&format!("/v1/sessions/{id}/files?mount=/knowledge"))
        .await;
    daemon_support::assert_problem(s, &p, 404, "not found");
    let (s, _) = d.get("/v1/sessions/s_0000000000000000/changes").await;
    assert_eq!(s, 404);
    let (s, _) = d
        .get(&format!("/v1/sessions/{id}/file?path=nothing.txt"))
        .await;
    assert_eq!(s, 404);
    d.stop().await;
}

fn get_mount<'a>(mounts: &'a Value, target: &str) -> &'a Value {
    mounts
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["target"] == target)
        .unwrap_or_else(|| panic!("no mount {target} in {mounts}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knowledge_folder_is_read_through_mount_and_the_others_are_not() {
    let root = tempfile::tempdir().unwrap();
    let team = root.path().join("team");
    std::fs::create_dir_all(team.join("howto")).unwrap();
    std::fs::write(team.join("howto/deploy.md"), "# Deploy\n").unwrap();
    std::fs::write(root.path().join("secret.txt"), "outside the folder\n").unwrap();
    std::os::unix::fs::symlink("../secret.txt", team.join("leak.md")).unwrap();
    std::os::unix::fs::symlink(root.path(), team.join("up")).unwrap();
    let d = TestDaemon::start_with(Options {
        knowledge_dir: Some(root.path().to_path_buf()),
        ..Options::default()
    })
    .await;
    d.fake_account("perso", "fk-SessionMounts0Token111aaaa222")
        .await;
    let a = d.fake_agent("perso", json!({"knowledge": ["team"]})).await;
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": a["id"], "origin": "ui"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    let id = v["id"].as_str().unwrap();

    // The mounts recorded at its start: the knowledge folder browsable and first, read-only;
    // the scope there too, writable, not browsable.
    let (s, m) = d.get(&format!("/v1/sessions/{id}/mounts")).await;
    assert_eq!(s, 200, "{m}");
    let k = &m[0];
    assert_eq!(
        (
            k["target"].as_str(),
            k["kind"].as_str(),
            k["readOnly"].as_bool(),
            k["browsable"].as_bool()
        ),
        (
            Some("/knowledge/team"),
            Some("knowledge"),
            Some(true),
            Some(true)
        ),
        "{m}"
    );
    let scope = get_mount(&m, &d.scope());
    assert_eq!(
        (
            scope["kind"].as_str(),
            scope["readOnly"].as_bool(),
            scope["browsable"].as_bool()
        ),
        (Some("scope"), Some(false), Some(false)),
        "{m}"
    );
    assert!(
        d.state.sessions.folder(id).join("mounts.json").is_file(),
        "recorded in the session's folder"
    );

    // All files of the mount, and a file read through it (no change: a mount has no baseline).
    let (s, l) = d
        .get(&format!("/v1/sessions/{id}/files?mount=/knowledge/team"))
        .await;
    assert_eq!(s, 200, "{l}");
    assert!(l.to_string().contains("deploy.md"), "{l}");
    assert!(!l.to_string().contains("secret.txt"), "{l}");
    let (s, f) = d
        .get(&format!(
            "/v1/sessions/{id}/file?path=howto/deploy.md&mount=/knowledge/team"
        ))
        .await;
    assert_eq!(s, 200, "{f}");
    assert_eq!(f["content"]["text"], "# Deploy\n", "{f}");
    assert!(f["change"].is_null() && f["earlier"].is_null(), "{f}");

    // Links in the mount (at the end or on the way) and paths that leave it: 400 naming them.
    for bad in ["leak.md", "up/secret.txt", "../secret.txt", "/etc/passwd"] {
        let (s, p) = d
            .get(&format!(
                "/v1/sessions/{id}/file?path={bad}&mount=/knowledge/team"
            ))
            .await;
        daemon_support::assert_problem(s, &p, 400, "path not shown");
        let named = bad.trim_start_matches('/').split('/').next().unwrap();
        assert!(p["detail"].as_str().unwrap().contains(named), "{bad}: {p}");
    }
    // The scope, a state slot, an unknown target: not browsable mounts, 404 naming the mount.
    let others: Vec<String> = m
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["browsable"] == false)
        .map(|x| x["target"].as_str().unwrap().to_string())
        .chain(["/knowledge/other".to_string()])
        .collect();
    for target in &others {
        let (s, p) = d
            .get(&format!("/v1/sessions/{id}/files?mount={target}"))
            .await;
        daemon_support::assert_problem(s, &p, 404, "not found");
        assert!(
            p["detail"].as_str().unwrap().contains(target.as_str()),
            "{p}"
        );
    }
    let (s, _) = d.get("/v1/sessions/s_0000000000000000/mounts").await;
    assert_eq!(s, 404);
    d.stop().await;
}
