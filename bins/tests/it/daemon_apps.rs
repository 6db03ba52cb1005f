//! Mini apps for real (issue 31, decisions 0157–0158): handlerd as the test user builds the
//! runtime image (Deno from the npm registry, its sha512 as pinned, checked in a sandbox), then
//! the sample counter (`fixtures/miniapps/counter`) is registered, tested, deployed and used over
//! HTTP through `counter.localhost`: its backend cold-started in a real rootless sandbox by the
//! first `/api` request, a streamed answer passed through, its secret in its log only as
//! `[secret GREETING]`, stopped when idle and started again by the next request with its data
//! kept, kept across a redeploy and a rollback; a version whose tests fail is not deployed, one
//! that never becomes healthy is `failed` with its log and tried again by the next request.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const GREETING: &str = "hello-Secret0Value-4471";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn set_version(folder: &Path, from: &str, to: &str) {
    let m = std::fs::read_to_string(folder.join("app.toml")).unwrap();
    std::fs::write(
        folder.join("app.toml"),
        m.replace(
            &format!("version = \"{from}\""),
            &format!("version = \"{to}\""),
        ),
    )
    .unwrap();
}

async fn wait_build(d: &TempDaemon, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (_, b) = d
            .call(reqwest::Method::GET, &format!("/v1/builds/{id}"), None)
            .await;
        if b["state"] != "running" {
            return b;
        }
        assert!(Instant::now() < deadline, "the build did not end: {b}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Starts a build of `target` and waits for its end.
async fn build(d: &TempDaemon, target: &str) -> Value {
    let (s, b) = d
        .call(
            reqwest::Method::POST,
            "/v1/builds",
            Some(json!({"target": target})),
        )
        .await;
    assert_eq!(s, 202, "{b}");
    wait_build(d, b["id"].as_str().unwrap()).await
}

async fn app_state(d: &TempDaemon) -> Value {
    d.call(reqwest::Method::GET, "/v1/apps/counter", None)
        .await
        .1
}

struct Browser {
    client: reqwest::Client,
    origin: String,
    cookie: String,
}

impl Browser {
    async fn login(d: &TempDaemon) -> Browser {
        let client = reqwest::Client::builder()
            .resolve(
                "counter.localhost",
                std::net::SocketAddr::from(([127, 0, 0, 1], d.port)),
            )
            .build()
            .unwrap();
        let (s, l) = d
            .call(
                reqwest::Method::POST,
                "/v1/apps/counter/login",
                Some(json!({})),
            )
            .await;
        assert_eq!(s, 200, "{l}");
        let res = client.get(l["url"].as_str().unwrap()).send().await.unwrap();
        let cookie = res.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        Browser {
            client,
            origin: format!("http://counter.localhost:{}", d.port),
            cookie,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> (u16, String, reqwest::header::HeaderMap) {
        let res = self
            .client
            .request(method, format!("{}{path}", self.origin))
            .header("cookie", &self.cookie)
            .header("origin", &self.origin)
            .send()
            .await
            .unwrap();
        let (s, h) = (res.status().as_u16(), res.headers().clone());
        (s, res.text().await.unwrap(), h)
    }

    async fn checkin(&self) -> u64 {
        let (s, b, _) = self.call(reqwest::Method::POST, "/api/checkin").await;
        assert_eq!(s, 200, "{b}");
        serde_json::from_str::<Value>(&b).unwrap()["count"]
            .as_u64()
            .unwrap()
    }

    async fn count(&self) -> Value {
        let (s, b, _) = self.call(reqwest::Method::GET, "/api/count").await;
        assert_eq!(s, 200, "{b}");
        serde_json::from_str(&b).unwrap()
    }
}

/// Deploys what the folder holds, accepting what the app shows it adds (as a client asks).
async fn deploy(d: &TempDaemon) -> (u16, Value) {
    let (_, a) = d.call(reqwest::Method::GET, "/v1/apps/counter", None).await;
    let seen = a["source"]["addedNeeds"].clone();
    let seen = if seen.is_null() { json!([]) } else { seen };
    d.call(
        reqwest::Method::POST,
        "/v1/apps/counter/deploy",
        Some(json!({"confirmAddedNeeds": seen})),
    )
    .await
}

async fn logs(d: &TempDaemon) -> String {
    d.http
        .get(format!("http://127.0.0.1:{}/v1/apps/counter/logs", d.port))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_sample_app_is_tested_deployed_cold_started_idle_stopped_and_keeps_its_data() {
    let Some(u) = test_support::user::podman_user(IMAGE, "the mini app tests") else {
        return;
    };
    // It builds an image and runs containers of the test user's: not while an images test
    // counts that user's containers (daemon_images::a_cancelled_build_leaves_no_image…).
    let _one = crate::daemon_images::ONE_AT_A_TIME.lock().await;
    // Built by this test from nothing, every run.
    let _ = u
        .cmd(
            "podman",
            &["rmi", "--force", "localhost/handler-app-runtime:latest"],
            &[("HOME", u.home())],
        )
        .output();
    crate::daemon_acp_sandbox::ensure_network_filter(&u);
    // A toolbox for the built-in miniapp addon's build: the test image under a name of its own.
    let toolbox = "localhost/handler-test-apps-toolbox";
    assert!(
        u.cmd(
            "podman",
            &["tag", IMAGE, &format!("{toolbox}:latest")],
            &[("HOME", u.home())],
        )
        .status()
        .unwrap()
        .success()
    );
    let l = Layout::new(&format!("hda-{}", std::process::id()), false);
    l.fake_harness("");
    let folder = l.home.join("code/counter");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/miniapps/counter"),
        &folder,
    );
    let home = l.home.clone();
    let mut d = l
        .spawn(
            u,
            &[
                ("HANDLER_APP_IDLE_TIMEOUT", "3".to_string()),
                ("HANDLER_TOOLBOX_IMAGE", toolbox.to_string()),
            ],
        )
        .await;

    // Registered; its deploy needs the runtime, then its secret.
    let (s, a) = d
        .call(
            reqwest::Method::POST,
            "/v1/apps",
            Some(json!({"folder": folder.display().to_string()})),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    let (s, p) = deploy(&d).await;
    assert_eq!((s, &p["title"]), (409, &json!("secret not set")), "{p}");
    let (s, _) = d
        .call(
            reqwest::Method::PUT,
            "/v1/apps/counter/secrets/GREETING",
            Some(json!({"value": GREETING})),
        )
        .await;
    assert_eq!(s, 204);
    let (s, p) = deploy(&d).await;
    assert_eq!((s, &p["title"]), (503, &json!("no runtime")), "{p}");
    // The built-in miniapp addon takes its Deno from the runtime (decision 0160): not before.
    let miniapp = build(&d, "addon:miniapp").await;
    assert_eq!(miniapp["state"], "failed", "{miniapp}");
    assert!(
        miniapp["error"]
            .as_str()
            .unwrap()
            .contains("handler build start app-runtime"),
        "{miniapp}"
    );

    let (s, b) = d
        .call(
            reqwest::Method::POST,
            "/v1/builds",
            Some(json!({"target": "app-runtime"})),
        )
        .await;
    assert_eq!(s, 202, "{b}");
    let b = wait_build(&d, b["id"].as_str().unwrap()).await;
    assert_eq!(b["state"], "succeeded", "{b}");
    assert_eq!(b["versions"]["deno"], "2.9.6", "{b}");
    // Now it builds (no network: its Deno is the runtime's), its check passes, it is switched.
    let miniapp = build(&d, "addon:miniapp").await;
    assert_eq!(miniapp["state"], "succeeded", "{miniapp}");
    assert_eq!(
        miniapp["versions"]["addon:miniapp"], "deno 2.9.6",
        "{miniapp}"
    );

    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["versions"][0]["runtime"], "deno 2.9.6");
    assert_eq!(a["versions"][0]["backend"], true);
    assert_eq!(a["state"], "stopped", "not started before a request");
    assert!(logs(&d).await.contains("the tests of 1.0.0 passed"));

    // The first request starts it; concurrent first requests wait on the one start.
    let web = Browser::login(&d).await;
    let (s, b, _) = web.call(reqwest::Method::GET, "/api/health").await;
    assert_eq!(s, 200, "{b}: {}", logs(&d).await);
    let (first, second) = tokio::join!(web.checkin(), web.count());
    assert_eq!(first, 1);
    assert!(second["count"].as_u64().unwrap() <= 1, "{second}");
    assert_eq!(second["greeting"], "set");
    assert_eq!(app_state(&d).await["state"], "running");
    assert_eq!(
        logs(&d).await.matches("starting 1.0.0").count(),
        1,
        "one start"
    );

    // A streamed answer comes through as it is made, under H.4's policy, not the backend's.
    let res = web
        .client
        .get(format!("{}/api/events", web.origin))
        .header("cookie", &web.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    assert!(
        res.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'self'")
    );
    let body = res.text().await.unwrap();
    assert_eq!(body.matches("data: tick").count(), 3, "{body}");

    // Its secret reaches it, and its log only by name.
    let (s, _, _) = web.call(reqwest::Method::GET, "/api/greet").await;
    assert_eq!(s, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = logs(&d).await;
    assert!(log.contains("greeting with [secret GREETING]"), "{log}");
    assert!(!log.contains(GREETING), "{log}");

    // No network: the backend reaches nothing.
    let (s, b, _) = web
        .call(reqwest::Method::GET, "/api/reach?url=http://example.com/")
        .await;
    assert_eq!(s, 502, "{b}");

    // Idle: stopped; the next request starts it again, its data kept.
    let deadline = Instant::now() + Duration::from_secs(30);
    while app_state(&d).await["state"] != "stopped" {
        assert!(Instant::now() < deadline, "never stopped when idle");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(logs(&d).await.contains("the backend stopped: idle for 3 s"));
    assert_eq!(web.checkin().await, 2);

    // A redeploy keeps the data; a rollback too.
    set_version(&folder, "1.0.0", "1.1.0");
    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        app_state(&d).await["state"],
        "stopped",
        "the old version's backend stopped"
    );
    assert_eq!(web.checkin().await, 3);
    assert_eq!(web.count().await["version"], "1.1.0");
    let (s, a) = d
        .call(
            reqwest::Method::POST,
            "/v1/apps/counter/rollback",
            Some(json!({"version": "1.0.0"})),
        )
        .await;
    assert_eq!(s, 200, "{a}");
    let c = web.count().await;
    assert_eq!((&c["version"], &c["count"]), (&json!("1.0.0"), &json!(3)));

    // Egress: exactly `needs.egress`, through the filter and Deno's own permission.
    let (port, hits) = crate::temp_daemon::http_ok_server().await;
    let allowed = format!("host.containers.internal:{port}");
    set_version(&folder, "1.1.0", "1.2.0");
    let manifest = std::fs::read_to_string(folder.join("app.toml")).unwrap();
    std::fs::write(
        folder.join("app.toml"),
        manifest.replace(
            "secrets = [\"GREETING\"]",
            &format!("secrets = [\"GREETING\"]\negress = [\"{allowed}\"]"),
        ),
    )
    .unwrap();
    let (_, a) = d.call(reqwest::Method::GET, "/v1/apps/counter", None).await;
    assert_eq!(
        a["source"]["addedNeeds"],
        json!([format!("egress {allowed}")]),
        "{a}"
    );
    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    let (s, b, _) = web
        .call(
            reqwest::Method::GET,
            &format!("/api/reach?url=http://{allowed}/ok"),
        )
        .await;
    assert_eq!((s, b.as_str()), (200, "reached 200"), "{}", logs(&d).await);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (s, b, _) = web
        .call(
            reqwest::Method::GET,
            "/api/reach?url=http://denied.example.org/",
        )
        .await;
    assert_eq!(s, 502, "{b}");
    assert_eq!(web.count().await["count"], 3, "data kept across versions");

    // Tests that fail: not deployed.
    set_version(&folder, "1.2.0", "1.3.0");
    std::fs::write(
        folder.join("server/broken_test.ts"),
        "Deno.test(\"fails\", () => { throw new Error(\"on purpose\"); });\n",
    )
    .unwrap();
    let (s, p) = deploy(&d).await;
    assert_eq!((s, &p["title"]), (422, &json!("tests failed")), "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("broken_test.ts"),
        "{p}"
    );
    assert_eq!(app_state(&d).await["deployed"], "1.2.0");
    std::fs::remove_file(folder.join("server/broken_test.ts")).unwrap();

    // A backend that never becomes healthy: failed, with its log; the next request tries again.
    set_version(&folder, "1.3.0", "1.4.0");
    let main = folder.join("server/main.ts");
    let text = std::fs::read_to_string(&main).unwrap();
    std::fs::write(
        &main,
        text.replace(
            "if (import.meta.main) {",
            "if (import.meta.main) {\n  console.log(\"broken start\");\n  Deno.exit(3);",
        ),
    )
    .unwrap();
    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    let (s, b, _) = web.call(reqwest::Method::GET, "/api/count").await;
    assert_eq!(s, 502, "{b}");
    assert_eq!(app_state(&d).await["state"], "failed");
    let (s, _, _) = web.call(reqwest::Method::GET, "/api/count").await;
    assert_eq!(s, 502);
    let log = logs(&d).await;
    assert!(log.contains("broken start"), "{log}");
    assert_eq!(
        log.matches("starting 1.4.0").count(),
        2,
        "tried again: {log}"
    );

    // Queued routes (H.10): answered at once while the backend cannot start, kept across a
    // SIGKILL of handlerd, delivered in order and once each when a version runs.
    let mut ids = Vec::new();
    for note in ["one", "two", "three"] {
        let res = web
            .client
            .post(format!("{}/api/visit", web.origin))
            .header("cookie", &web.cookie)
            .header("origin", &web.origin)
            .body(note)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202);
        let v: Value = res.json().await.unwrap();
        ids.push(v["queued"].as_str().unwrap().to_string());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let bin = d.root.join("bin/handlerd");
    d.kill_and_start(&bin).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !logs(&d).await.contains("resuming the queue's delivery") {
        assert!(Instant::now() < deadline, "{}", logs(&d).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    std::fs::write(&main, &text).unwrap();
    set_version(&folder, "1.4.0", "1.5.0");
    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    let web = Browser::login(&d).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = web.count().await;
        if c["visits"] == json!(["one", "two", "three"]) {
            break;
        }
        assert!(Instant::now() < deadline, "{c}\n{}", logs(&d).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = logs(&d).await;
    for id in &ids {
        assert!(
            log.contains(&format!("delivered {id} (200 OK)")),
            "{id}: {log}"
        );
    }

    files_and_notifications(&d, &web, &home, &folder).await;

    // Removing it stops nothing left behind and keeps the folder.
    let (s, _) = d
        .call(reqwest::Method::DELETE, "/v1/apps/counter", None)
        .await;
    assert_eq!(s, 204);
    assert!(folder.join("app.toml").is_file());
}

/// H.9 (decision 0160): host files inside a work folder at their own paths, read-only unless
/// `rw`, and nothing outside one; notifications on the socket, hostile lines dropped, kept for
/// the API.
async fn files_and_notifications(d: &TempDaemon, web: &Browser, home: &Path, folder: &Path) {
    // Absolute paths: handlerd's HOME is the test user's, not this layout's (`~/…` is
    // expanded by the unit tests of `check_app_file` and `app_sandbox_spec`).
    let code = home.join("code");
    let (notes, out) = (code.join("notes.txt"), code.join("out"));
    std::fs::write(&notes, "hello notes").unwrap();
    std::fs::create_dir_all(&out).unwrap();
    d.user.give(&notes);
    d.user.give(&out);
    let outside = home.join("outside.txt");
    std::fs::write(&outside, "not for apps").unwrap();
    let (notes_s, out_s) = (notes.display().to_string(), out.display().to_string());
    set_version(folder, "1.5.0", "1.6.0");
    let manifest = std::fs::read_to_string(folder.join("app.toml")).unwrap();
    let with = |files: &str| {
        std::fs::write(
            folder.join("app.toml"),
            manifest.replace(
                "secrets = [\"GREETING\"]",
                &format!("secrets = [\"GREETING\"]\nnotify = true\nfiles = [{files}]"),
            ),
        )
        .unwrap();
    };
    with(&format!("{{path = \"{}\"}}", outside.display()));
    let (s, p) = deploy(d).await;
    assert_eq!(
        (s, &p["title"]),
        (400, &json!("file outside work folders")),
        "{p}"
    );
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("needs.files[0].path: "),
        "{p}"
    );
    with(&format!(
        "{{path = \"{notes_s}\"}}, {{path = \"{out_s}\", mode = \"rw\"}}"
    ));
    let (_, a) = d.call(reqwest::Method::GET, "/v1/apps/counter", None).await;
    assert_eq!(
        a["source"]["addedNeeds"],
        json!([
            format!("file {notes_s} (ro)"),
            format!("file {out_s} (rw)"),
            "notify"
        ]),
        "{a}"
    );
    let (s, a) = deploy(d).await;
    assert_eq!(s, 200, "{a}");

    let (s, b, _) = web
        .call(
            reqwest::Method::GET,
            &format!("/api/files?ro={notes_s}&rw={out_s}"),
        )
        .await;
    assert_eq!(s, 200, "{b}: {}", logs(d).await);
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["notes"], "hello notes");
    assert_ne!(v["readOnly"], "writable", "{v}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello notes");
    assert_eq!(
        std::fs::read_to_string(out.join("copy.txt")).unwrap(),
        "hello notes"
    );

    // Two good lines, one with an unknown key, one too long: two kept, two dropped.
    let lines = format!(
        "{}\n{}\n{}\n{}\n",
        json!({"title": "Run logged", "body": "5 km"}),
        json!({"title": "x", "href": "http://evil.example/"}),
        json!({"title": "t".repeat(81)}),
        json!({"title": "Streak", "body": "3 days"}),
    );
    let res = web
        .client
        .post(format!("{}/api/notify", web.origin))
        .header("cookie", &web.cookie)
        .header("origin", &web.origin)
        .body(lines)
        .send()
        .await
        .unwrap();
    let (s, b) = (res.status(), res.text().await.unwrap());
    assert_eq!(s, 200, "{b}\n{}", logs(d).await);
    let deadline = Instant::now() + Duration::from_secs(10);
    let n = loop {
        let (s, n) = d
            .call(reqwest::Method::GET, "/v1/apps/counter/notifications", None)
            .await;
        assert_eq!(s, 200, "{n}");
        if n["notifications"].as_array().unwrap().len() >= 2 {
            break n;
        }
        assert!(Instant::now() < deadline, "{n}\n{}", logs(d).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let got: Vec<(&str, &str, &str)> = n["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["title"].as_str().unwrap(),
                n["body"].as_str().unwrap(),
                n["version"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("Run logged", "5 km", "1.6.0"),
            ("Streak", "3 days", "1.6.0")
        ]
    );
    let log = logs(d).await;
    assert!(
        log.contains("notify: dropped: not a notification (unknown field `href`"),
        "{log}"
    );
    assert!(
        log.contains("notify: dropped: title: 81 characters"),
        "{log}"
    );
    assert!(
        !log.contains("evil.example"),
        "a dropped line is never echoed: {log}"
    );
}

/// The median of `v` (milliseconds).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `GET path` over the unix socket at `socket`, straight to the backend: its time in ms.
async fn direct(socket: &Path, path: &str) -> f64 {
    let t = Instant::now();
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", "counter.localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let res = tx.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let _ = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap();
    t.elapsed().as_secs_f64() * 1000.0
}

/// bench/apps.sh: a backend's cold start (the first `/api` answer after a stop) and a warm
/// request through handlerd's app origin, against the same request on the backend's own socket,
/// in the same run. Prints one JSON line.
#[tokio::test]
#[ignore = "a benchmark: bench/apps.sh"]
async fn bench_an_apps_cold_start_and_warm_requests_against_its_own_socket() {
    let Some(u) = test_support::user::podman_user(IMAGE, "the mini app benchmark") else {
        return;
    };
    let _one = crate::daemon_images::ONE_AT_A_TIME.lock().await;
    let l = Layout::new(&format!("hdab-{}", std::process::id()), false);
    l.fake_harness("");
    let folder = l.home.join("code/counter");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/miniapps/counter"),
        &folder,
    );
    let root = l.root.clone();
    let d = l.spawn(u, &[]).await;
    let (s, b) = d
        .call(
            reqwest::Method::POST,
            "/v1/builds",
            Some(json!({"target": "app-runtime"})),
        )
        .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(
        wait_build(&d, b["id"].as_str().unwrap()).await["state"],
        "succeeded"
    );
    let path = folder.display().to_string();
    d.call(
        reqwest::Method::POST,
        "/v1/apps",
        Some(json!({"folder": path})),
    )
    .await;
    d.call(
        reqwest::Method::PUT,
        "/v1/apps/counter/secrets/GREETING",
        Some(json!({"value": GREETING})),
    )
    .await;
    let (s, a) = deploy(&d).await;
    assert_eq!(s, 200, "{a}");
    let web = Browser::login(&d).await;
    let mut cold = Vec::new();
    for _ in 0..5 {
        let (s, _) = d
            .call(reqwest::Method::POST, "/v1/apps/counter/stop", None)
            .await;
        assert_eq!(s, 204);
        let t = Instant::now();
        let (s, b, _) = web.call(reqwest::Method::GET, "/api/health").await;
        assert_eq!(s, 200, "{b}");
        cold.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let socket = root.join("state/apps/counter/http.sock");
    assert!(socket.exists(), "{}", socket.display());
    let (mut through, mut own) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let t = Instant::now();
        let (s, _, _) = web.call(reqwest::Method::GET, "/api/count").await;
        assert_eq!(s, 200);
        through.push(t.elapsed().as_secs_f64() * 1000.0);
        own.push(direct(&socket, "/api/count").await);
    }
    let (c, t, o) = (median(cold), median(through), median(own));
    println!(
        "{}",
        json!({"coldStartMs": c, "warmThroughHandlerdMs": t, "warmOwnSocketMs": o, "ratio": t / o})
    );
}
