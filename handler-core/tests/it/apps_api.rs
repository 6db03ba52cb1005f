//! Mini apps through a real daemon (H, decision 0157): a folder registered, deployed as a copy,
//! served at `<name>.localhost:<port>` behind its login cookie and H.4's rules, rolled back and
//! removed; the folder read as hostile data (a link refuses the deploy), needs a deploy adds
//! confirmed first, secrets set through the API only and never answered.

use crate::daemon_support;

use std::path::{Path, PathBuf};

use daemon_support::{TestDaemon, assert_problem};
use serde_json::json;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The sample app copied into the daemon's home (the agent's folder).
fn sample(d: &TestDaemon, name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/miniapps/hello");
    let to = d.home.path().join("code").join(name);
    copy(&from, &to);
    if name != "hello" {
        let m = std::fs::read_to_string(to.join("app.toml")).unwrap();
        std::fs::write(
            to.join("app.toml"),
            m.replace("name = \"hello\"", &format!("name = \"{name}\"")),
        )
        .unwrap();
    }
    to
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn set_version(folder: &Path, version: &str, extra: &str) {
    let m = std::fs::read_to_string(folder.join("app.toml")).unwrap();
    let mut out: String = m
        .lines()
        .filter(|l| !l.starts_with("version"))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(&format!("version = \"{version}\"\n{extra}"));
    std::fs::write(folder.join("app.toml"), out).unwrap();
}

/// A client that reaches `<app>.localhost` at the daemon, as a browser would.
fn browser(d: &TestDaemon, apps: &[&str]) -> reqwest::Client {
    let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for a in apps {
        b = b.resolve(
            &format!("{a}.localhost"),
            std::net::SocketAddr::from(([127, 0, 0, 1], d.port)),
        );
    }
    b.build().unwrap()
}

fn origin(d: &TestDaemon, app: &str) -> String {
    format!("http://{app}.localhost:{}", d.port)
}

/// Logs `client` in to `app`'s origin: the cookie's value.
async fn login(d: &TestDaemon, client: &reqwest::Client, app: &str) -> String {
    let (s, l) = d.post(&format!("/v1/apps/{app}/login"), json!({})).await;
    assert_eq!(s, 200, "{l}");
    let url = l["url"].as_str().unwrap();
    assert!(
        url.starts_with(&format!("{}/_handler/login?code=", origin(d, app))),
        "{url}"
    );
    let res = client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-security-policy"], CSP);
    let set = res.headers()["set-cookie"].to_str().unwrap().to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(
        !set.to_ascii_lowercase().contains("domain"),
        "host-only: {set}"
    );
    let body = res.text().await.unwrap();
    assert!(body.contains("url=/"), "goes on to / by itself: {body}");
    // Used once.
    let again = client.get(url).send().await.unwrap();
    assert_eq!(again.status(), 401);
    set.split(';')
        .next()
        .unwrap()
        .trim_start_matches("handler_app=")
        .to_string()
}

async fn page(
    d: &TestDaemon,
    client: &reqwest::Client,
    app: &str,
    path: &str,
    cookie: Option<&str>,
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut req = client.get(format!("{}{path}", origin(d, app)));
    if let Some(c) = cookie {
        req = req.header("cookie", format!("handler_app={c}"));
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    assert_eq!(headers["content-security-policy"], CSP, "{path}");
    (status, res.text().await.unwrap(), headers)
}

#[tokio::test]
async fn an_app_is_registered_deployed_served_at_its_own_origin_rolled_back_and_removed() {
    let d = TestDaemon::start().await;
    let folder = sample(&d, "hello");
    let (s, a) = d
        .post("/v1/apps", json!({"folder": folder.display().to_string()}))
        .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["name"], "hello");
    assert_eq!(a["url"], format!("{}/", origin(&d, "hello")));
    assert_eq!(a["state"], "stopped");
    assert!(a["deployed"].is_null(), "{a}");
    assert_eq!(a["source"]["version"], "1.0.0");
    let (s, again) = d
        .post("/v1/apps", json!({"folder": folder.display().to_string()}))
        .await;
    assert_eq!(s, 200, "the same folder again: {again}");

    let client = browser(&d, &["hello", "other"]);
    let (s, body, _) = page(&d, &client, "hello", "/", None).await;
    assert_eq!(s, 401, "no cookie: {body}");
    assert!(body.contains("handler app open hello"), "{body}");
    let cookie = login(&d, &client, "hello").await;
    let (s, body, _) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert_eq!(s, 503, "not deployed yet: {body}");

    let (s, a) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["deployed"], "1.0.0");
    assert_eq!(a["versions"][0]["backend"], false);
    let (s, body, h) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("Hello from version 1"), "{body}");
    assert_eq!(h["content-type"], "text/html");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let (s, _, h) = page(&d, &client, "hello", "/assets/app.js", Some(&cookie)).await;
    assert_eq!(s, 200);
    assert_eq!(h["content-type"], "text/javascript");
    let (s, body, _) = page(&d, &client, "hello", "/runs/42", Some(&cookie)).await;
    assert_eq!(
        (s, body.contains("Hello from version 1")),
        (200, true),
        "a client-side route"
    );
    let (s, _, _) = page(&d, &client, "hello", "/missing.png", Some(&cookie)).await;
    assert_eq!(s, 404);
    let (s, _, _) = page(&d, &client, "hello", "/../../app.toml", Some(&cookie)).await;
    assert_eq!(s, 404);

    // Handler's API is not on an app's origin, even with the token; an app is not on Handler's.
    for path in ["/v1/apps", "/openapi.json", "/v1/agents"] {
        let res = client
            .get(format!("{}{path}", origin(&d, "hello")))
            .header("cookie", format!("handler_app={cookie}"))
            .bearer_auth(&d.token)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let body = res.text().await.unwrap();
        assert!(!body.contains("\"openapi\""), "{path}: {body}");
        assert!(
            status == 200 && body.contains("Hello from version 1") || status == 404,
            "{path}: {status} {body}"
        );
    }
    let res = d
        .http
        .get(format!("{}/_handler/login?code={}", d.url, "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        401,
        "Handler's own origin has no app route (needs the token)"
    );

    // The cookie is the app's alone.
    let (s, a2) = d
        .post(
            "/v1/apps",
            json!({"folder": sample(&d, "other").display().to_string()}),
        )
        .await;
    assert_eq!(s, 201, "{a2}");
    let (s, _, _) = page(&d, &client, "other", "/", Some(&cookie)).await;
    assert_eq!(s, 401, "hello's cookie on other's origin");

    // The served version is a copy: the agent's edits show only after a deploy.
    std::fs::write(
        folder.join("ui/dist/index.html"),
        "<h1>Hello from version 2</h1>",
    )
    .unwrap();
    let (_, body, _) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert!(body.contains("version 1"), "{body}");
    let (s, p) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_problem(s, &p, 409, "version deployed");
    set_version(&folder, "1.1.0", "");
    let (s, a) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["deployed"], "1.1.0");
    assert_eq!(a["versions"].as_array().unwrap().len(), 2);
    let (_, body, _) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert!(body.contains("version 2"), "{body}");
    let (s, a) = d
        .post("/v1/apps/hello/rollback", json!({"version": "1.0.0"}))
        .await;
    assert_eq!((s, &a["deployed"]), (200, &json!("1.0.0")), "{a}");
    let (_, body, _) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert!(body.contains("version 1"), "{body}");
    let (s, p) = d
        .post("/v1/apps/hello/rollback", json!({"version": "9.9.9"}))
        .await;
    assert_problem(s, &p, 404, "not found");
    let (s, log) = d.get("/v1/apps/hello/logs").await;
    assert_eq!(s, 200, "{log}");

    let (s, list) = d.get("/v1/apps").await;
    assert_eq!(s, 200);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello", "other"]);

    let (s, _) = d.delete("/v1/apps/hello").await;
    assert_eq!(s, 204);
    let (s, body, _) = page(&d, &client, "hello", "/", Some(&cookie)).await;
    assert_eq!(s, 404, "{body}");
    assert!(
        folder.join("app.toml").is_file(),
        "the folder stays the agent's"
    );
    assert!(
        !d.home
            .path()
            .join(".local/share/handler-ai/apps/hello")
            .exists()
    );
    let (s, p) = d.get("/v1/apps/hello").await;
    assert_problem(s, &p, 404, "not found");
}

#[tokio::test]
async fn a_hostile_or_wrong_folder_is_refused_naming_what_and_added_needs_wait_for_the_person() {
    let d = TestDaemon::start().await;
    let (s, p) = d.post("/v1/apps", json!({"folder": "code/hello"})).await;
    assert_problem(s, &p, 400, "invalid folder");
    assert!(p["detail"].as_str().unwrap().starts_with("folder:"), "{p}");

    let folder = sample(&d, "hello");
    set_version(&folder, "one", "");
    let (s, p) = d
        .post("/v1/apps", json!({"folder": folder.display().to_string()}))
        .await;
    assert_problem(s, &p, 400, "invalid app.toml");
    assert!(p["detail"].as_str().unwrap().contains("version"), "{p}");
    set_version(&folder, "1.0.0", "");
    let (s, a) = d
        .post("/v1/apps", json!({"folder": folder.display().to_string()}))
        .await;
    assert_eq!(s, 201, "{a}");

    // The same name from another folder.
    let twin = d.home.path().join("code/twin");
    copy(&folder, &twin);
    let (s, p) = d
        .post("/v1/apps", json!({"folder": twin.display().to_string()}))
        .await;
    assert_problem(s, &p, 409, "name taken");

    // A link in the UI folder refuses the deploy, naming it; nothing is deployed.
    let link = folder.join("ui/dist/assets/secret.txt");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let (s, p) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_problem(s, &p, 400, "app folder refused");
    assert!(p["detail"].as_str().unwrap().contains("secret.txt"), "{p}");
    let (_, a) = d.get("/v1/apps/hello").await;
    assert!(a["deployed"].is_null(), "{a}");
    std::fs::remove_file(&link).unwrap();

    // A backend needs the runtime, which this Handler does not have: refused, not half-deployed.
    std::fs::create_dir_all(folder.join("server")).unwrap();
    std::fs::write(
        folder.join("server/main.ts"),
        "Deno.serve(() => new Response('x'))",
    )
    .unwrap();
    let (s, p) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_problem(s, &p, 503, "no runtime");
    std::fs::remove_dir_all(folder.join("server")).unwrap();

    let (s, a) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_eq!(s, 200, "{a}");

    // A version that asks for more: listed, refused until the person confirms, then refused
    // while its secret has no value.
    set_version(
        &folder,
        "1.1.0",
        "[needs]\negress = [\"api.example.com:443\"]\nsecrets = [\"API_KEY\"]\n",
    );
    let (_, a) = d.get("/v1/apps/hello").await;
    assert_eq!(
        a["source"]["addedNeeds"],
        json!(["egress api.example.com:443", "secret API_KEY"]),
        "{a}"
    );
    let (s, p) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_problem(s, &p, 409, "needs added");
    assert!(
        p["detail"].as_str().unwrap().contains("secret API_KEY"),
        "{p}"
    );
    // What the person saw is what is accepted: a need added since is refused, naming it.
    let (s, p) = d
        .post(
            "/v1/apps/hello/deploy",
            json!({"confirmAddedNeeds": ["egress api.example.com:443"]}),
        )
        .await;
    assert_problem(s, &p, 409, "needs added");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("secret API_KEY") && !detail.contains("egress"),
        "{p}"
    );
    let seen = json!({"confirmAddedNeeds": ["egress api.example.com:443", "secret API_KEY"]});
    let (s, p) = d.post("/v1/apps/hello/deploy", seen.clone()).await;
    assert_problem(s, &p, 409, "secret not set");
    assert!(p["detail"].as_str().unwrap().contains("API_KEY"), "{p}");
    let (s, p) = d
        .put("/v1/apps/hello/secrets/api_key", json!({"value": "v"}))
        .await;
    assert_problem(s, &p, 400, "invalid secret name");
    let value = "sk-app-Secret0Value1111";
    let (s, _) = d
        .put("/v1/apps/hello/secrets/API_KEY", json!({"value": value}))
        .await;
    assert_eq!(s, 204);
    let (s, a) = d.post("/v1/apps/hello/deploy", seen).await;
    assert_eq!(s, 200, "{a}");
    assert_eq!(a["secrets"], json!([{"name": "API_KEY", "set": true}]));
    assert_eq!(a["needs"]["egress"], json!(["api.example.com:443"]));
    assert!(
        a["source"]["addedNeeds"].is_null(),
        "nothing more to add: {a}"
    );
    // Rolling back to a version that did not declare it is fine; the value is never answered.
    let (s, a) = d
        .post("/v1/apps/hello/rollback", json!({"version": "1.0.0"}))
        .await;
    assert_eq!(s, 200, "{a}");
    for path in ["/v1/apps", "/v1/apps/hello", "/v1/secrets"] {
        let (_, v) = d.get(path).await;
        assert!(!v.to_string().contains(value), "{path}: {v}");
    }
    let res = d
        .http
        .get(format!("{}/v1/apps/hello/logs", d.url))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap();
    assert!(!res.text().await.unwrap().contains(value));
    assert!(
        !std::fs::read_to_string(folder.join("app.toml"))
            .unwrap()
            .contains(value)
    );
    // Removing the app removes its secrets.
    let (s, _) = d.delete("/v1/apps/hello").await;
    assert_eq!(s, 204);
    let (_, v) = d.get("/v1/secrets").await;
    assert!(!v.to_string().contains("apps/hello"), "{v}");
}

#[tokio::test]
async fn api_requests_on_an_apps_origin_follow_h4() {
    let d = TestDaemon::start().await;
    let folder = sample(&d, "hello");
    let (s, _) = d
        .post("/v1/apps", json!({"folder": folder.display().to_string()}))
        .await;
    assert_eq!(s, 201);
    let (s, _) = d.post("/v1/apps/hello/deploy", json!({})).await;
    assert_eq!(s, 200);
    let client = browser(&d, &["hello", "nothing"]);
    let cookie = login(&d, &client, "hello").await;
    let own = origin(&d, "hello");
    let call = |method: reqwest::Method, headers: Vec<(&'static str, String)>| {
        let mut r = client
            .request(method, format!("{own}/api/checkin"))
            .header("cookie", format!("handler_app={cookie}"));
        for (k, v) in headers {
            r = r.header(k, v);
        }
        async move {
            let res = r.send().await.unwrap();
            assert_eq!(res.headers()["content-security-policy"], CSP);
            res.status().as_u16()
        }
    };
    assert_eq!(
        call(
            reqwest::Method::POST,
            vec![("origin", "http://evil.example".into())]
        )
        .await,
        403,
        "a cross-site POST"
    );
    assert_eq!(
        call(reqwest::Method::POST, vec![]).await,
        403,
        "a POST without Origin"
    );
    assert_eq!(
        call(
            reqwest::Method::GET,
            vec![("sec-fetch-site", "cross-site".into())]
        )
        .await,
        403
    );
    assert_eq!(
        call(reqwest::Method::POST, vec![("origin", origin(&d, "other"))]).await,
        403,
        "another app's origin"
    );
    // The app's own: past the rules, to an app without a backend.
    assert_eq!(
        call(
            reqwest::Method::POST,
            vec![
                ("origin", own.clone()),
                ("sec-fetch-site", "same-origin".into())
            ]
        )
        .await,
        404
    );
    // No cookie: 401 after the rules.
    let res = client
        .get(format!("{own}/api/checkin"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    // A name that is no app.
    let res = client
        .get(format!("{}/", origin(&d, "nothing")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
}
