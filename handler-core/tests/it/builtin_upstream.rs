//! The built-in skill-creator's upstream skill (decision 0123), fetched at set-up from a test
//! server over real TLS (a test CA) through `$HANDLER_SKILL_CREATOR_URL`/`_DIGEST`, never from
//! the internet: listed before set-up (`fetches`), installed with the agent when its digest is
//! the pinned one, refused with nothing written when it differs (502), 502 `fetch failed`
//! naming the URL and the setting when unreachable, never fetched when the library has a skill
//! of that name (kept).

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::addon_install::archive_server;
use crate::daemon_support::{self, Options, TestDaemon, assert_problem};
use crate::egress_support::TestCa;
use handler_contracts::skill_scan::{ScanFile, digest};
use handler_core::daemon::config::UpstreamOverride;
use serde_json::{Value, json};

const TOKEN: &str = "fk-BuiltinUp0Token111aaaa2222bbbb3333";
const SKILL: &str =
    "---\nname: skill-creator\ndescription: Creates skills (a test's)\n---\n# Make one\n";

/// The test's upstream skill: `(path, bytes, executable)`, a licence file and a script.
fn upstream_files(licence: &str) -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        ("SKILL.md", SKILL.as_bytes().to_vec(), false),
        ("LICENSE.txt", licence.as_bytes().to_vec(), false),
        ("scripts/init.py", b"print('init')\n".to_vec(), true),
    ]
}

/// The files as a zip below one folder (as a published archive of the skill).
fn zip_of(files: &[(&str, Vec<u8>, bool)]) -> Vec<u8> {
    use std::io::Write as _;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, bytes, exec) in files {
        let mode = if *exec { 0o755 } else { 0o644 };
        let o = zip::write::SimpleFileOptions::default().unix_permissions(mode);
        w.start_file(format!("skill-creator/{path}"), o).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The files' digest by the contracts' rule (what `SkillInfo.digest` says once installed).
fn digest_of(files: &[(&str, Vec<u8>, bool)]) -> String {
    let sf: Vec<ScanFile<'_>> = files
        .iter()
        .map(|(path, bytes, executable)| ScanFile {
            path,
            bytes,
            executable: *executable,
        })
        .collect();
    digest(&sf)
}

/// A daemon trusting `ca` whose skill-creator is fetched from `url` with `digest`.
async fn daemon(ca: &TestCa, dir: &Path, url: &str, digest: &str) -> TestDaemon {
    let pem = dir.join("ca.pem");
    std::fs::write(&pem, &ca.pem).unwrap();
    let d = TestDaemon::start_with(Options {
        build_ca_bundle: Some(pem),
        skill_creator_source: UpstreamOverride {
            url: Some(url.to_string()),
            digest: Some(digest.to_string()),
        },
        ..Options::default()
    })
    .await;
    d.fake_account("perso", TOKEN).await;
    d
}

async fn set_up(d: &TestDaemon) -> (u16, Value) {
    d.post(
        "/v1/agents",
        json!({"origin": "skill-creator", "models": [{"account": "perso"}], "permissions": "bypass"}),
    )
    .await
}

/// Nothing of a refused set-up is left: no agent, no skill, no staging folder.
async fn nothing_written(d: &TestDaemon) {
    let (_, agents) = d.get("/v1/agents").await;
    assert_eq!(agents, json!([]), "no agent");
    let skills = d.home.path().join(".config/handler-ai/skills");
    let left: Vec<String> = std::fs::read_dir(&skills)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "no skill written: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skill_creator_is_set_up_with_its_upstream_skill_only_when_its_digest_is_pinned() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let files = upstream_files("Apache License 2.0 (a test's copy)\n");
    let pinned = digest_of(&files);
    let body = Arc::new(Mutex::new(zip_of(&upstream_files("changed\n"))));
    let (port, task) = archive_server(&ca, body.clone()).await;
    let url = format!("https://localhost:{port}/skill-creator.zip");
    let d = daemon(&ca, dir.path(), &url, &pinned).await;

    // Listed before set-up: the skill it fetches, from where, its licence and digest.
    let (_, l) = d.get("/v1/builtin-agents").await;
    let creator = &l[0];
    assert_eq!(creator["name"], "skill-creator");
    assert_eq!(
        creator["skills"],
        json!(["handler-skills", "skill-creator"])
    );
    assert_eq!(
        creator["fetches"],
        json!([{"name": "skill-creator", "url": url, "license": "Apache-2.0", "digest": pinned}])
    );

    // Other content than the pinned: refused, nothing half set up.
    let (s, v) = set_up(&d).await;
    assert_problem(s, &v, 502, "upstream skill differs");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains(&url) && detail.contains(&pinned), "{v}");
    nothing_written(&d).await;

    *body.lock().unwrap() = zip_of(&files);
    let (s, a) = set_up(&d).await;
    assert_eq!(s, 201, "{a}: {}", daemon_support::logs());
    assert_eq!(a["origin"], "skill-creator");
    assert_eq!(
        a["skills"],
        json!(["handler-skills", "skill-creator"]),
        "{a}"
    );
    let (s, sk) = d.get("/v1/skills/skill-creator").await;
    assert_eq!(s, 200, "{sk}");
    assert_eq!(sk["digest"], pinned.as_str(), "what was pinned: {sk}");
    assert_eq!(sk["content"], SKILL);
    assert!(sk.get("error").is_none(), "{sk}");
    assert_eq!(
        sk["files"],
        json!([
            {"path": "LICENSE.txt", "size": 35, "executable": false},
            {"path": "scripts/init.py", "size": 14, "executable": true},
        ]),
        "its licence kept in its folder: {sk}"
    );
    let (s, hs) = d.get("/v1/skills/handler-skills").await;
    assert_eq!(s, 200, "the shipped skill too: {hs}");
    let (_, l) = d.get("/v1/builtin-agents").await;
    assert_eq!(l[0]["agentId"], a["id"]);
    task.abort();
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_naming_its_url_and_the_setting() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://localhost:{port}/skill-creator.zip");
    let d = daemon(&ca, dir.path(), &url, "sha256:00").await;
    let (s, v) = set_up(&d).await;
    assert_problem(s, &v, 502, "fetch failed");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains(&url), "names the URL: {v}");
    assert!(
        detail.contains("try again") && detail.contains("HANDLER_SKILL_CREATOR_URL"),
        "says how to retry and which setting points at a mirror: {v}"
    );
    nothing_written(&d).await;
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_of_that_name_in_the_library_is_kept_and_nothing_is_fetched() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://localhost:{port}/skill-creator.zip");
    let d = daemon(&ca, dir.path(), &url, "sha256:00").await;
    let own = "---\nname: skill-creator\ndescription: the user's own\n---\nmine\n";
    let (s, v) = d.post("/v1/skills", json!({"content": own})).await;
    assert_eq!(s, 201, "{v}");
    let (s, a) = set_up(&d).await;
    assert_eq!(s, 201, "no fetch (its server is down): {a}");
    assert_eq!(
        a["skills"],
        json!(["handler-skills", "skill-creator"]),
        "{a}"
    );
    let (_, sk) = d.get("/v1/skills/skill-creator").await;
    assert_eq!(sk["content"], own, "kept: {sk}");
    d.stop().await;
}
