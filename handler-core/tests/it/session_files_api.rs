//! The session's files over HTTP (F.8) on a session of the fake sandbox: the baseline recorded
//! when it is created, the changes since (ignored files left out), All files, a file with how it
//! changed, the refusals (a path that leaves the folder 400, a link on the way 400, an unknown
//! mount 404, an unknown session 404).

use crate::daemon_support;

use daemon_support::TestDaemon;
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
