//! The images room through a real daemon and the transport double wrapped by a script that
//! plays the runtime's image verbs (A.7) with no network filter built: handlerd starts its build
//! at once (D.4), a filtered agent is refused meanwhile with "the network filter is not built
//! yet" while one without network starts; `GET /v1/harnesses` says the image is absent,
//! `GET /v1/runtime` is the runtime's `check`, and the default toolbox was copied on this
//! first start (B.6).

use crate::daemon_support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use daemon_support::acp::open;
use daemon_support::{Options, TestDaemon, fakes};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite;

const TOKEN: &str = "fk-Images0Token1111aaaa2222bbbb3333cc";

/// A runtime whose image store is empty: `image inspect` exits 1, `image build-proxy` fails,
/// `check` prints a RuntimeCheck; every other verb goes to the fake sandbox.
fn runtime_script(dir: &std::path::Path) -> Vec<String> {
    let f = fakes();
    let script = dir.join("runtime.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             case \"$1 $2\" in\n\
             'image inspect') echo \"no image $4\" >&2; exit 1;;\n\
             'image build-proxy') echo 'STEP 1/2: FROM scratch' >&2; sleep 1; echo 'build-proxy: no static proxy here' >&2; exit 1;;\n\
             'check '*) echo '{{\"runtime\": \"fake 1\", \"ok\": true, \"items\": [{{\"name\": \"storage-driver\", \"ok\": false, \"required\": false, \"detail\": \"vfs: use overlay\"}}]}}'; exit 0;;\n\
             esac\n\
             exec {} --log {} \"$@\"\n",
            f.sandbox.display(),
            dir.join("sandbox.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    vec![script.display().to_string()]
}

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
async fn a_missing_network_filter_is_built_at_start_and_refuses_filtered_agents_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let d = TestDaemon::start_with(Options {
        sandbox_command: Some(runtime_script(dir.path())),
        ..Options::default()
    })
    .await;
    d.fake_account("perso", TOKEN).await;
    let filtered = d.fake_agent("perso", json!({})).await;
    let (s, p) = refused(&d, filtered["id"].as_str().unwrap()).await;
    assert_eq!(s, 503, "{p}");
    assert_eq!(p["detail"], "the network filter is not built yet", "{p}");
    let none = d
        .fake_agent("perso", json!({"name": "offline", "network": "none"}))
        .await;
    let mut c = d.acp(none["id"].as_str().unwrap()).await;
    c.start_session(&d.scope()).await;

    // The build handlerd started by itself: the runtime's build-proxy, its output in the log.
    let deadline = Instant::now() + Duration::from_secs(30);
    let b = loop {
        let (_, v) = d.get("/v1/builds").await;
        let b = v
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["target"] == "network-filter")
            .cloned();
        if let Some(b) = b.filter(|b| b["state"] != "running") {
            break b;
        }
        assert!(Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(b["state"], "failed", "{b}");
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("no static proxy here"),
        "{b}"
    );
    let (_, log) = d
        .get(&format!(
            "/v1/builds/{}/log?offset=0",
            b["id"].as_str().unwrap()
        ))
        .await;
    assert!(log["text"].as_str().unwrap().contains("STEP 1/2"), "{log}");
    assert_eq!(log["complete"], true);
    let (s, nf) = d.get("/v1/network-filter").await;
    assert_eq!(
        (s, nf["imagePresent"].as_bool()),
        (200, Some(false)),
        "{nf}"
    );

    let (_, h) = d.get("/v1/harnesses/fake").await;
    assert_eq!(h["imagePresent"], false, "{h}");
    let (s, r) = d.get("/v1/runtime").await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["runtime"], "fake 1");
    assert_eq!(r["items"][0]["name"], "storage-driver");
    // Which runtime runs and why: the daemon's own last item.
    let last = &r["items"][r["items"].as_array().unwrap().len() - 1];
    assert_eq!(last["name"], "selected", "{r}");
    assert!(
        last["detail"]
            .as_str()
            .unwrap()
            .contains("runtime.sh (chosen by "),
        "{r}"
    );

    // D.4: automatic updates, weekly by default from the first start; off; a run now.
    let (_, u) = d.get("/v1/image-updates").await;
    assert_eq!(
        (u["schedule"].as_str(), u["running"].as_bool()),
        (Some("weekly"), Some(false)),
        "{u}"
    );
    assert!(u["nextRun"].is_string(), "{u}");
    let (s, u) = d.put("/v1/image-updates", json!({"schedule": "off"})).await;
    assert_eq!(s, 200, "{u}");
    assert!(u.get("nextRun").is_none(), "{u}");
    let stored = d
        .home
        .path()
        .join(".local/state/handler-ai/image-updates.json");
    let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    assert_eq!(on_disk["schedule"], "off");
    assert!(on_disk["firstStart"].is_string(), "{on_disk}");
    let (s, p) = d
        .put("/v1/image-updates", json!({"schedule": "hourly"}))
        .await;
    assert!(s == 400 || s == 422, "{s} {p}");
    let (s, u) = d.post("/v1/image-updates/run", json!({})).await;
    assert_eq!(s, 202, "{u}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let u = loop {
        let (_, u) = d.get("/v1/image-updates").await;
        if u["running"] == false && u["lastRun"].is_string() {
            break u;
        }
        assert!(Instant::now() < deadline, "{u}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(u["lastFailed"], json!(["network-filter"]), "{u}");

    // B.6: the default toolbox in the user's folder, on this first start.
    let tb = d.home.path().join(".config/handler-ai/toolbox");
    assert_eq!(
        std::fs::read_to_string(tb.join("Containerfile")).unwrap(),
        handler_harness::descriptors::TOOLBOX_CONTAINERFILE
    );
    assert!(tb.join("toolbox.toml").is_file());
    let (_, t) = d.get("/v1/toolbox").await;
    assert_eq!(t["directory"], tb.display().to_string(), "{t}");
    let (_, c) = d.get("/v1/toolbox/containerfile").await;
    assert_eq!(c["content"], c["defaultContent"]);
    d.stop().await;
}

/// Decision 0175: a daemon that finds the network filter built warms the proxy pool as it
/// starts — one `proxy-pool fill` at once, so the first filtered agent claims a proxy already
/// running — and one that must build the filter first does not ask for it.
#[tokio::test]
async fn the_daemon_warms_the_proxy_pool_as_it_starts_when_the_network_filter_is_there() {
    let filter = handler_sandbox::egress::topology::PROXY_IMAGE;
    let d = TestDaemon::start_with(Options {
        images: vec![filter.to_string()],
        ..Options::default()
    })
    .await;
    let t0 = Instant::now();
    while !d.sandbox_log().contains("proxy-pool fill after 0") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{}",
            d.sandbox_log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.sandbox_log().matches("proxy-pool").count(), 1);
    d.stop().await;

    let d = TestDaemon::start().await;
    let asked = format!("image inspect {filter}");
    let t0 = Instant::now();
    while !d.sandbox_log().contains(&asked) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{}",
            d.sandbox_log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !d.sandbox_log().contains("proxy-pool"),
        "no pool without the filter: {}",
        d.sandbox_log()
    );
    d.stop().await;
}

/// A runtime whose network filter is missing until its `image build-proxy`, which takes a
/// moment and then succeeds (noting it in the log the fake sandbox writes its verbs to) — or,
/// unless `builds`, fails; the file `filter-built` in `dir` is the image.
fn building_runtime_script(dir: &std::path::Path, builds: bool) -> Vec<String> {
    let f = fakes();
    let (script, built, log) = (
        dir.join("runtime.sh"),
        dir.join("filter-built"),
        dir.join("sandbox.log"),
    );
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             case \"$1 $2\" in\n\
             'image inspect') if [ -e {built} ]; then exec {sandbox} --log {log} \"$@\"; fi; echo \"no image $4\" >&2; exit 1;;\n\
             'image build-proxy') sleep 2; {build};;\n\
             esac\n\
             exec {sandbox} --log {log} \"$@\"\n",
            build = if builds {
                format!("touch {}; echo 'build-proxy done' >> {}; exit 0", built.display(), log.display())
            } else {
                format!("echo 'build-proxy failed' >> {}; echo 'no registry here' >&2; exit 1", log.display())
            },
            built = built.display(),
            sandbox = f.sandbox.display(),
            log = log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    vec![script.display().to_string()]
}

/// handlerd over [`building_runtime_script`] (in the returned folder), with a filtered agent.
async fn with_building_runtime(builds: bool) -> (tempfile::TempDir, TestDaemon, Value) {
    let dir = tempfile::tempdir().unwrap();
    let d = TestDaemon::start_with(Options {
        sandbox_command: Some(building_runtime_script(dir.path(), builds)),
        ..Options::default()
    })
    .await;
    d.fake_account("perso", TOKEN).await;
    let filtered = d.fake_agent("perso", json!({})).await;
    (dir, d, filtered)
}

/// Waits (20 s at most) until `GET /v1/builds` lists a network-filter build that `is`.
async fn until_filter_build(d: &TestDaemon, is: impl Fn(&Value) -> bool) {
    let t0 = Instant::now();
    loop {
        let (_, v) = d.get("/v1/builds").await;
        if v.as_array()
            .unwrap()
            .iter()
            .any(|b| b["target"] == "network-filter" && is(b))
        {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A session that needs the network filter, asked for while handlerd is building it (its first
/// start), waits for that build and then starts — it is neither refused nor started to fail in
/// its sandbox ("agent exited (66)", which a fresh machine's first `handler run` met).
#[tokio::test]
async fn a_session_asked_for_while_the_network_filter_builds_waits_for_it_and_starts() {
    let (dir, d, filtered) = with_building_runtime(true).await;
    // The build handlerd starts by itself is running.
    until_filter_build(&d, |_| true).await;
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": filtered["id"], "origin": "ui"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let log = std::fs::read_to_string(dir.path().join("sandbox.log")).unwrap_or_default();
    let built = log
        .find("build-proxy done")
        .expect("answered after the build");
    let launched = log.find("launch").unwrap_or(usize::MAX);
    assert!(
        built < launched,
        "the sandbox started before the filter was built: {log}"
    );
    let id = v["id"].as_str().unwrap();
    let t0 = Instant::now();
    loop {
        let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
        if v["state"] == "running" {
            break;
        }
        assert!(v["state"] == "starting", "{v}");
        assert!(t0.elapsed() < Duration::from_secs(30), "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d.stop().await;
}

/// A network filter made behind handlerd's back — loaded or built by hand after handlerd's own
/// build of it failed — is seen by the next start that needs it: the session starts instead of
/// a 503 from the "missing" handlerd noted at its start (CI met it: a test built Docker's filter
/// itself while the daemon's build of it failed).
#[tokio::test]
async fn a_network_filter_made_by_hand_after_handlerds_build_failed_lets_the_next_session_start() {
    let (dir, d, filtered) = with_building_runtime(false).await;
    until_filter_build(&d, |b| b["state"] == "failed").await;
    let ask = || {
        d.post(
            "/v1/sessions",
            json!({"agentId": filtered["id"], "origin": "ui"}),
        )
    };
    let (s, v) = ask().await;
    assert_eq!(s, 503, "no filter, no build of it running: {v}");
    assert_eq!(v["title"], "network filter not built", "{v}");
    // Made by hand: the fake runtime now answers `image inspect` for it.
    std::fs::write(dir.path().join("filter-built"), "").unwrap();
    std::fs::write(
        dir.path().join("sandbox.log.images"),
        format!("{}\n", handler_sandbox::egress::topology::PROXY_IMAGE),
    )
    .unwrap();
    let (s, v) = ask().await;
    assert_eq!(s, 201, "the filter is there now: {v}");
    d.stop().await;
}
