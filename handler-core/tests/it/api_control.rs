//! The Control API over real HTTP (D): auth on every route, problem+json shapes, /openapi.json
//! covering every route, docs/api.md's route list generated from the same table (its drift
//! test), the stores (accounts, providers, secrets, folders, contexts), each E1 refusal, risks
//! (409 then confirmRisks), projects, and no secret value in any answer or log.

use crate::daemon_support;

use std::os::unix::fs::PermissionsExt;

use daemon_support::{TestDaemon, assert_problem, bodies, logs};
use handler_core::daemon::routes::table;
use serde_json::{Value, json};

const TOKEN_A: &str = "fk-Secret0TokenAAAA1111bbbb2222cccc3333";
const KEY_P: &str = "sk-or-v1-KeyPPPP4444qqqq5555rrrr6666ssss";
const SECRET_S: &str = "s3cret-Store-Value-7777tttt8888";

/// Path parameters that once slipped past the token check (a path ending in `/acp`), and a
/// plain one: every route of the table is tried with each.
const PARAMS: &[&str] = &["x", "acp", "x/acp", "a%2Facp", "acp/acp", "x%2F..%2Facp"];

fn concrete_with(path: &str, param: &str) -> String {
    let rest = if param == "x" {
        "providers/x/apiKey"
    } else {
        param
    };
    path.replace("{*path}", rest)
        .replace("{name}", param)
        .replace("{id}", param)
}

/// Whether a concrete path is one the router matches to `pattern` (`{x}` one segment).
fn matches_route(pattern: &str, path: &str) -> bool {
    let (p, c): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    p.len() == c.len() && p.iter().zip(&c).all(|(p, c)| p.starts_with('{') || p == c)
}

fn concrete(path: &str) -> String {
    concrete_with(path, "x")
}

/// A body a handler would act on, so that a request let through shows as something else than 401.
fn body_for(method: &str) -> Option<Value> {
    matches!(method, "PUT" | "POST" | "PATCH").then(|| {
        json!({"name": "acp", "harness": "fake", "value": "v", "token": {"command": ["/bin/touch", "/tmp/handler-pwned"]}})
    })
}

#[tokio::test]
async fn token_file_is_0600_and_every_route_needs_it() {
    let d = TestDaemon::start().await;
    let tf = d.home.path().join(".config/handler-ai/token");
    let meta = std::fs::metadata(&tf).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(&tf).unwrap().trim(), d.token);
    let ws_token = format!("acp.v1, bearer.{}", d.token);
    let upgrades: Vec<(&str, &str)> = table()
        .iter()
        .filter(|r| r.upgrade)
        .map(|r| (r.method, r.path))
        .collect();
    assert!(!upgrades.is_empty());
    for r in table() {
        for param in PARAMS {
            let url = format!("{}{}", d.url, concrete_with(r.path, param));
            let m = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
            // The subprotocol token is a token only on the routes the table marks as upgrades.
            let mut tries: Vec<(Option<&str>, Option<&str>)> = vec![
                (None, None),
                (Some("Bearer wrong-token"), None),
                (Some("Basic abc"), None),
                (None, Some("acp.v1, bearer.wrong")),
            ];
            let path = concrete_with(r.path, param);
            if !upgrades
                .iter()
                .any(|(m, p)| *m == r.method && matches_route(p, &path))
            {
                tries.push((None, Some(&ws_token)));
            }
            for (auth, proto) in tries {
                let mut req = d.http.request(m.clone(), &url);
                if let Some(a) = auth {
                    req = req.header("authorization", a);
                }
                if let Some(p) = proto {
                    req = req
                        .header("sec-websocket-protocol", p)
                        .header("connection", "upgrade")
                        .header("upgrade", "websocket")
                        .header("sec-websocket-version", "13")
                        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
                }
                if let Some(b) = body_for(r.method) {
                    req = req.json(&b);
                }
                let res = req.send().await.unwrap();
                assert_eq!(
                    res.status().as_u16(),
                    401,
                    "{} {url} with {auth:?} {proto:?}",
                    r.method,
                );
                assert_eq!(res.headers()["content-type"], "application/problem+json");
                let p: Value = res.json().await.unwrap();
                assert_eq!(p["status"], 401);
                assert_eq!(p["title"], "unauthorized");
            }
        }
    }
    // Unknown routes too, also ending in /acp.
    for path in ["/v1/nothing", "/v1/nothing/acp", "/acp"] {
        let res = d.http.get(format!("{}{path}", d.url)).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 401, "{path}");
    }
    // Nothing was stored by those requests: no account, secret or provider named acp.
    for path in [
        "/v1/accounts",
        "/v1/providers",
        "/v1/contexts",
        "/v1/bindings",
    ] {
        let (s, v) = d.get(path).await;
        assert_eq!(s, 200);
        assert!(!v.to_string().contains("\"acp\""), "{path}: {v}");
    }
    let (s, v) = d.get("/v1/secrets").await;
    assert_eq!(s, 200);
    assert!(!v.to_string().contains("acp"), "{v}");
    d.stop().await;
}

#[tokio::test]
async fn an_account_named_acp_needs_the_token_and_its_command_never_runs() {
    let d = TestDaemon::start().await;
    let canary = d.home.path().join("pwned");
    let body = json!({"name": "acp", "harness": "fake",
        "token": {"command": ["/bin/touch", canary.display().to_string()]}});
    for (m, path) in [
        ("PUT", "/v1/accounts/acp"),
        ("POST", "/v1/accounts/acp"),
        ("PUT", "/v1/accounts/acp/token"),
        ("PUT", "/v1/secrets/x/acp"),
        ("PUT", "/v1/providers/acp"),
        ("PUT", "/v1/contexts/acp"),
    ] {
        let res = d
            .http
            .request(
                reqwest::Method::from_bytes(m.as_bytes()).unwrap(),
                format!("{}{path}", d.url),
            )
            .header(
                "sec-websocket-protocol",
                format!("acp.v1, bearer.{}", d.token),
            )
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 401, "{m} {path}");
    }
    assert!(
        !d.home
            .path()
            .join(".config/handler-ai/accounts/acp.toml")
            .exists()
    );
    let (s, v) = d.get("/v1/accounts").await;
    assert_eq!((s, v), (200, json!([])));
    assert!(!canary.exists());
    d.stop().await;
}

#[tokio::test]
async fn a_foreign_host_is_421_before_the_token_on_every_route() {
    let d = TestDaemon::start().await;
    let port = d.port;
    let bad = [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        "127.0.0.1".to_string(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("app.localhost:{}", port.wrapping_add(1)),
        format!("a.b.localhost:{port}"),
        format!("127.0.0.2:{port}"),
    ];
    for r in table() {
        let url = format!("{}{}", d.url, concrete(r.path));
        let m = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
        for host in &bad {
            for with_token in [false, true] {
                let mut req = d.http.request(m.clone(), &url).header("host", host);
                if with_token {
                    req = req.bearer_auth(&d.token);
                }
                let res = req.send().await.unwrap();
                assert_eq!(
                    res.status().as_u16(),
                    421,
                    "{} {} Host {host}",
                    r.method,
                    r.path
                );
                assert_eq!(res.headers()["content-type"], "application/problem+json");
            }
            // `<name>.localhost` with the port is a mini app's origin (decision 0157): never
            // Handler's API, even with the token; no app has that name here.
            let mut req = d
                .http
                .request(m.clone(), &url)
                .header("host", format!("app.localhost:{port}"))
                .bearer_auth(&d.token);
            if r.method != "GET" {
                req = req.header("origin", format!("http://app.localhost:{port}"));
            }
            let res = req.send().await.unwrap();
            assert_eq!(res.status().as_u16(), 404, "{} {}", r.method, r.path);
            assert!(res.headers().contains_key("content-security-policy"));
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
    ] {
        let res = d
            .http
            .get(format!("{}/v1/accounts", d.url))
            .header("host", &host)
            .bearer_auth(&d.token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "Host {host}");
    }
    d.stop().await;
}

#[tokio::test]
async fn a_foreign_origin_is_403_on_every_route() {
    let d = TestDaemon::start_with(daemon_support::Options {
        origins: vec!["http://ui.local".into()],
        ..Default::default()
    })
    .await;
    let port = d.port;
    for r in table() {
        let url = format!("{}{}", d.url, concrete(r.path));
        let m = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
        for origin in [
            "http://evil.example",
            "null",
            &format!("http://127.0.0.1:{}", port.wrapping_add(1)),
            &format!("https://localhost:{port}"),
        ] {
            let mut req = d
                .http
                .request(m.clone(), &url)
                .bearer_auth(&d.token)
                .header("origin", origin);
            if let Some(b) = body_for(r.method) {
                req = req.json(&b);
            }
            let res = req.send().await.unwrap();
            assert_eq!(
                res.status().as_u16(),
                403,
                "{} {} Origin {origin}",
                r.method,
                r.path
            );
            let p: Value = res.json().await.unwrap();
            assert_eq!(p["title"], "origin not allowed");
        }
    }
    for origin in [
        "http://ui.local".to_string(),
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ] {
        let res = d
            .http
            .get(format!("{}/v1/accounts", d.url))
            .bearer_auth(&d.token)
            .header("origin", &origin)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "Origin {origin}");
    }
    d.stop().await;
}

#[test]
fn a_token_file_others_could_read_is_replaced_and_another_mode_fixed_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    let old = "a".repeat(64);
    std::fs::write(&tf, format!("{old}\n")).unwrap();
    std::fs::set_permissions(&tf, std::fs::Permissions::from_mode(0o644)).unwrap();
    let t = handler_core::daemon::auth::load_or_create_token(&tf).unwrap();
    assert_ne!(t, old, "a token others could read is not kept");
    assert_eq!(std::fs::read_to_string(&tf).unwrap().trim(), t);
    assert_eq!(
        std::fs::metadata(&tf).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::set_permissions(&tf, std::fs::Permissions::from_mode(0o400)).unwrap();
    let again = handler_core::daemon::auth::load_or_create_token(&tf).unwrap();
    assert_eq!(again, t, "the owner's own token kept");
    assert_eq!(
        std::fs::metadata(&tf).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A link is refused, not followed.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&tf, &link).unwrap();
    assert!(handler_core::daemon::auth::load_or_create_token(&link).is_err());
}

/// The refusal of an ACP handshake: its status and body.
async fn acp_refusal(d: &TestDaemon, agent: &str) -> (u16, String) {
    match daemon_support::acp::open(&d.acp_url(agent, ""), &d.protocols(), None).await {
        Ok(_) => (101, String::new()),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => (
            r.status().as_u16(),
            String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned(),
        ),
        Err(e) => panic!("{e}"),
    }
}

async fn agent_on(d: &TestDaemon, account: &str, token: Value) -> String {
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": account, "harness": "fake", "token": token}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let a = d.fake_agent(account, json!({})).await;
    a["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn token_references_are_checked_files_bounded_and_commands_timed_out() {
    let d = TestDaemon::start_with(daemon_support::Options {
        secret_command_timeout: Some(std::time::Duration::from_secs(1)),
        ..Default::default()
    })
    .await;
    // An empty command is a 400 naming the field, on create and on PUT …/token.
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "e", "harness": "fake", "token": {"command": []}}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("token.command"),
        "{v}"
    );
    d.fake_account("perso", TOKEN_A).await;
    for bad in [
        json!({"command": []}),
        json!({"command": [""]}),
        json!({"env": "NOT A NAME"}),
        json!({"file": ""}),
    ] {
        let (s, v) = d.put("/v1/accounts/perso/token", bad.clone()).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(v["detail"].as_str().unwrap().starts_with("token."), "{v}");
    }
    // A file larger than 1 MiB (its first line a valid token) is refused, /dev/zero too: at
    // save (E1), and at start for a file that grew after it was saved.
    let big = d.home.path().join("big-token");
    let mut content = format!("{TOKEN_A}\n").into_bytes();
    content.resize(2 * 1024 * 1024, b'x');
    std::fs::write(&big, &content).unwrap();
    for (file, why) in [
        (big.display().to_string(), "larger than 1 MiB"),
        ("/dev/zero".to_string(), "not a regular file"),
    ] {
        let (s, v) = d
            .post(
                "/v1/accounts",
                json!({"name": "big", "harness": "fake", "token": {"file": file}}),
            )
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(v["detail"].as_str().unwrap().contains(why), "{v}");
    }
    std::fs::write(&big, format!("{TOKEN_A}\n")).unwrap();
    let id = agent_on(&d, "big", json!({"file": big.display().to_string()})).await;
    std::fs::write(&big, content).unwrap();
    let (s, body) = acp_refusal(&d, &id).await;
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("larger than 1 MiB"), "{body}");
    // A slow command is killed after its time limit, and the daemon answers meanwhile.
    let id = agent_on(
        &d,
        "slow",
        json!({"command": ["/bin/sh", "-c", format!("sleep 6; echo {TOKEN_A}")]}),
    )
    .await;
    let started = std::time::Instant::now();
    let url = d.acp_url(&id, "");
    let protocols = d.protocols();
    let opening = tokio::spawn(async move {
        daemon_support::acp::open(&url, &protocols, None)
            .await
            .err()
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (s, _) = d.get("/v1/accounts").await;
    assert_eq!(s, 200);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(800),
        "the daemon answers while a secret command runs (not after its 1 s limit)"
    );
    let e = opening.await.unwrap().expect("refused");
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => {
            assert_eq!(r.status().as_u16(), 400);
            let body =
                String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("did not finish within 1 s"), "{body}");
            assert!(!body.contains(TOKEN_A), "{body}");
        }
        e => panic!("{e}"),
    }
    d.stop().await;
}

#[tokio::test]
async fn the_token_survives_a_restart() {
    let d = TestDaemon::start().await;
    let again = handler_core::daemon::auth::load_or_create_token(
        &d.home.path().join(".config/handler-ai/token"),
    )
    .unwrap();
    assert_eq!(again, d.token);
    d.stop().await;
}

#[tokio::test]
async fn openapi_describes_every_route_and_body() {
    let d = TestDaemon::start().await;
    let (s, doc) = d.get("/openapi.json").await;
    assert_eq!(s, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    for r in table() {
        let p = handler_core::daemon::openapi::doc_path(r.path);
        let op = &doc["paths"][&p][r.method.to_lowercase()];
        assert!(
            op.is_object(),
            "{} {p} missing from /openapi.json",
            r.method
        );
        assert!(op["responses"]["default"]["content"]["application/problem+json"].is_object());
        if r.request.is_some() {
            assert!(
                op["requestBody"]["content"]["application/json"]["schema"].is_object(),
                "{} {p}",
                r.method
            );
        }
    }
    // Every $ref resolves.
    let text = doc.to_string();
    for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = &part[..part.find('"').unwrap()];
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "unresolved $ref {name}"
        );
    }
    d.stop().await;
}

/// docs/api.md lists exactly the route table's routes (its part between the markers of
/// `api_md`): a route added, removed or described anew without regenerating the page fails here
/// with the diff; `INSTA_UPDATE=always` (the one golden switch) rewrites that part only.
#[test]
fn docs_api_md_lists_every_route_of_the_table() {
    use handler_core::daemon::api::api_md;
    use test_support::golden;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let generated = api_md::with_routes(&page).unwrap_or_else(|| {
        panic!(
            "docs/api.md lacks the markers of its generated part: put the lines\n{}\n{}\nwhere the routes go, then run INSTA_UPDATE=always cargo test -p handler-core --test it -- api_control::docs_api_md",
            api_md::BEGIN,
            api_md::END
        )
    });
    let problems: Vec<String> = golden::check_file(&path, "docs/api.md", &generated)
        .into_iter()
        .collect();
    golden::assert_none(
        &problems,
        "handler-core --test it -- api_control::docs_api_md",
    );
}

#[tokio::test]
async fn problems_for_unknown_routes_methods_and_bad_bodies() {
    let d = TestDaemon::start().await;
    let (s, v, ct) = d.call("GET", "/v1/nothing", None).await;
    assert_problem(s, &v, 404, "not found");
    assert_eq!(ct, "application/problem+json");
    let (s, v, _) = d.call("PATCH", "/v1/accounts", Some(json!({}))).await;
    assert_problem(s, &v, 405, "method not allowed");
    let res = d
        .http
        .post(format!("{}/v1/accounts", d.url))
        .bearer_auth(&d.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 400);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let (s, v) = d
        .post("/v1/accounts", json!({"name": "a", "harness": 7}))
        .await;
    assert_problem(s, &v, 422, "invalid body");
    assert!(v["detail"].as_str().unwrap().contains("harness"), "{v}");
    let (s, v) = d.get("/v1/agents/a_nope").await;
    assert_problem(s, &v, 404, "not found");
    d.stop().await;
}

/// B.1 `tokenLifetimeDays` → `AccountInfo.expiresAt` (decision 0150): a pasted token of a login
/// with a lifetime expires that long after it was given; `soon` in its last 30 days, then
/// `expired`; none for a reference (when it was given is not known) or a file login.
#[tokio::test]
async fn a_tokens_expiry_follows_its_logins_lifetime() {
    let d = TestDaemon::start().await;
    let token = "sk-ant-oat01-0123456789abcdef";
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "cc", "harness": "claude-code", "token": {"value": token}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let secs = |t: &Value| {
        humantime::parse_rfc3339_weak(t.as_str().unwrap())
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let given = secs(&v["loggedInAt"]);
    assert_eq!(secs(&v["expiresAt"]), given + 365 * 86_400, "{v}");
    assert_eq!(v["expiry"], "valid");
    // Given 340 and 400 days ago (the store's own record of when).
    let store = d.home.path().join(".local/share/handler-ai/secrets.json");
    let backdate = |days: u64| {
        let mut doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400);
        let e = doc.get_mut("accounts/cc/token").expect("the token's entry");
        e["updatedAt"] = json!(humantime::format_rfc3339_seconds(then).to_string());
        std::fs::write(&store, doc.to_string()).unwrap();
    };
    backdate(340);
    let (_, v) = d.get("/v1/accounts/cc").await;
    assert_eq!(v["expiry"], "soon", "{v}");
    backdate(400);
    let (_, v) = d.get("/v1/accounts").await;
    let cc = v
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "cc")
        .unwrap();
    assert_eq!(cc["expiry"], "expired", "{cc}");
    // A reference: when it was given is not known.
    let (_, v) = d
        .put("/v1/accounts/cc/token", json!({"env": "MY_CC_TOKEN"}))
        .await;
    assert!(
        v.get("expiresAt").is_none() && v.get("expiry").is_none(),
        "{v}"
    );
    // A file login has no token lifetime.
    let (_, v) = d
        .post("/v1/accounts", json!({"name": "work", "harness": "codex"}))
        .await;
    assert!(v.get("expiry").is_none(), "{v}");
    d.stop().await;
}

#[tokio::test]
async fn accounts_token_login_file_login_and_the_secret_store() {
    let d = TestDaemon::start().await;
    // A pasted token: to the store, the file has a reference.
    let (s, v) = d.post("/v1/accounts", json!({"name": "perso", "harness": "fake", "description": "me", "token": {"value": TOKEN_A}})).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["token"], json!({"secret": "accounts/perso/token"}));
    assert_eq!(v["loggedIn"], true);
    assert_eq!(v["login"], "token");
    let file =
        std::fs::read_to_string(d.home.path().join(".config/handler-ai/accounts/perso.toml"))
            .unwrap();
    assert!(
        file.contains("accounts/perso/token") && !file.contains(TOKEN_A),
        "{file}"
    );
    let store = d.home.path().join(".local/share/handler-ai/secrets.json");
    assert_eq!(
        std::fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Not the harness's prefix: 422.
    let (s, v) = d.post("/v1/accounts", json!({"name": "bad", "harness": "fake", "token": {"value": "xx-not-a-fake-token-000000"}})).await;
    assert_problem(s, &v, 422, "token invalid");
    // A reference kept as given.
    let (s, v) = d
        .put("/v1/accounts/perso/token", json!({"env": "MY_FAKE_TOKEN"}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["token"], json!({"env": "MY_FAKE_TOKEN"}));
    let (_, secrets) = d.get("/v1/secrets").await;
    assert!(
        !secrets.to_string().contains("accounts/perso/token"),
        "a replaced pasted token is removed: {secrets}"
    );
    // A file login: no token; its credential kept 0600.
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "codex", "token": {"value": "abc"}}),
        )
        .await;
    assert_problem(s, &v, 400, "account invalid");
    let (s, v) = d
        .post("/v1/accounts", json!({"name": "work", "harness": "codex"}))
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["loggedIn"], false);
    let (s, v) = d
        .put(
            "/v1/accounts/work/login",
            json!({"content": "{\"tokens\": {\"access_token\": \"zzz-cred-9999\"}}"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["loggedIn"], true);
    let cred = d
        .home
        .path()
        .join(".local/share/handler-ai/accounts/work/credential");
    assert_eq!(
        std::fs::metadata(&cred).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Unknown harness, plan not its, connectors it lacks.
    let (s, v) = d
        .post("/v1/accounts", json!({"name": "x", "harness": "nope"}))
        .await;
    assert_problem(s, &v, 400, "account invalid");
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "x", "harness": "claude-code", "plan": "gold"}),
        )
        .await;
    assert_problem(s, &v, 400, "account invalid");
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "x", "harness": "codex", "connectors": true}),
        )
        .await;
    assert_problem(s, &v, 400, "account invalid");
    let (s, v) = d
        .post("/v1/accounts", json!({"name": "perso", "harness": "fake"}))
        .await;
    assert_problem(s, &v, 409, "account exists");
    // List, one, delete.
    let (_, list) = d.get("/v1/accounts").await;
    assert_eq!(list.as_array().unwrap().len(), 2);
    let (s, _) = d.delete("/v1/accounts/work").await;
    assert_eq!(s, 204);
    assert!(!cred.exists());
    let (s, v) = d.get("/v1/accounts/work").await;
    assert_problem(s, &v, 404, "not found");
    d.stop().await;
}

#[tokio::test]
async fn a_hand_written_account_keeps_its_comments_and_a_literal_token_is_invalid() {
    let d = TestDaemon::start().await;
    let dir = d.home.path().join(".config/handler-ai/accounts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hand.toml"), "# my own account\napiVersion = \"handler.account/v1\"\nharness = \"fake\" # the fake one\ntoken = { env = \"HAND_TOKEN\" }\n").unwrap();
    std::fs::write(
        dir.join("literal.toml"),
        format!("apiVersion = \"handler.account/v1\"\nharness = \"fake\"\ntoken = \"{TOKEN_A}\"\n"),
    )
    .unwrap();
    let (_, v) = d.get("/v1/accounts/literal").await;
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("literal secret is not allowed") && err.contains("line 3"),
        "{err}"
    );
    assert!(!err.contains(TOKEN_A));
    let (s, v) = d
        .put(
            "/v1/accounts/hand",
            json!({"harness": "fake", "description": "by API"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["token"],
        json!({"env": "HAND_TOKEN"}),
        "a hand-written reference is kept"
    );
    let text = std::fs::read_to_string(dir.join("hand.toml")).unwrap();
    assert!(text.starts_with("# my own account\n"), "{text}");
    assert!(text.contains("# the fake one"), "{text}");
    assert!(text.contains("description = \"by API\""), "{text}");
    d.stop().await;
}

#[tokio::test]
async fn providers_from_templates_keys_to_the_store_and_hand_written_references_kept() {
    let d = TestDaemon::start().await;
    let (s, t) = d.get("/v1/provider-templates").await;
    assert_eq!(s, 200);
    assert!(
        t.as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "openrouter"),
        "{t}"
    );
    let (s, v) = d
        .post(
            "/v1/providers",
            json!({"name": "or", "template": "openrouter", "apiKey": KEY_P}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["apiKey"], json!({"secret": "providers/or/apiKey"}));
    assert_eq!(v["keySet"], true);
    assert_eq!(
        v["endpoints"]["openai-chat"],
        "https://openrouter.ai/api/v1"
    );
    let file = std::fs::read_to_string(d.home.path().join(".config/handler-ai/providers/or.toml"))
        .unwrap();
    assert!(!file.contains(KEY_P));
    let (_, s1) = d.get("/v1/secrets/providers/or/apiKey").await;
    assert_eq!(s1["hosts"], json!(["openrouter.ai:443"]), "{s1}");
    // Invalid: no endpoint, duplicate model, bad URL.
    let (s, v) = d
        .post(
            "/v1/providers",
            json!({"name": "p2", "endpoints": {}, "models": [{"id": "m"}]}),
        )
        .await;
    assert_problem(s, &v, 400, "provider invalid");
    let (s, v) = d
        .post(
            "/v1/providers",
            json!({"name": "p2", "endpoints": {"openai-chat": "ftp://x"}, "models": [{"id": "m"}]}),
        )
        .await;
    assert_problem(s, &v, 400, "provider invalid");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("endpoints.openai-chat"),
        "{v}"
    );
    // A hand-written env key survives a PUT without a key.
    let dir = d.home.path().join(".config/handler-ai/providers");
    std::fs::write(dir.join("hand.toml"), "# mine\napiVersion = \"handler.provider/v1\"\napiKey = { env = \"HAND_KEY\" }\n[endpoints]\nopenai-chat = \"http://127.0.0.1:3000/v1\"\n[[models]]\nid = \"q\"\n").unwrap();
    let (s, v) = d.put("/v1/providers/hand", json!({"endpoints": {"openai-chat": "http://127.0.0.1:3001/v1"}, "models": [{"id": "q"}, {"id": "r"}]})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["apiKey"], json!({"env": "HAND_KEY"}));
    let text = std::fs::read_to_string(dir.join("hand.toml")).unwrap();
    assert!(
        text.starts_with("# mine\n") && text.contains("3001"),
        "{text}"
    );
    let (s, _) = d.delete("/v1/providers/or").await;
    assert_eq!(s, 204);
    let (s, _) = d.get("/v1/secrets/providers/or/apiKey").await;
    assert_eq!(s, 404);
    d.stop().await;
}

/// Issue 27: a provider's `{ file }` config file is a regular file of at most 1 MiB, refused
/// otherwise at save (400 naming `files.<harness>.<slot>`) and at start (read bounded: never
/// `/dev/zero` without end).
/// E1: an account's `{ file }` token is refused at save as at start when it is not a regular
/// file of at most 1 MiB (a device, a folder, a larger or missing file): 400 naming `token.file`,
/// nothing written.
#[tokio::test]
async fn an_accounts_token_file_is_regular_and_small_at_save() {
    let d = TestDaemon::start().await;
    let big = d.home.path().join("big.txt");
    std::fs::write(&big, vec![b'a'; 1024 * 1024 + 1]).unwrap();
    let good = d.home.path().join("token.txt");
    std::fs::write(&good, format!("{TOKEN_A}\n")).unwrap();
    let body = |file: &str| json!({"name": "work", "harness": "fake", "token": {"file": file}});
    for (file, why) in [
        ("/dev/zero".to_string(), "not a regular file"),
        ("/tmp".to_string(), "not a regular file"),
        (big.display().to_string(), "larger than 1 MiB"),
        (
            d.home.path().join("none.txt").display().to_string(),
            "No such file",
        ),
    ] {
        let (s, v) = d.post("/v1/accounts", body(&file)).await;
        assert_problem(s, &v, 400, "token invalid");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("token.file") && detail.contains(why),
            "{file}: {v}"
        );
    }
    assert!(
        !d.home
            .path()
            .join(".config/handler-ai/accounts/work.toml")
            .exists()
    );
    let (s, v) = d
        .post("/v1/accounts", body(&good.display().to_string()))
        .await;
    assert_eq!(s, 201, "{v}");
    d.stop().await;
}

#[tokio::test]
async fn a_providers_config_files_are_regular_and_small_at_save_and_at_start() {
    let d = TestDaemon::start().await;
    let big = d.home.path().join("big.md");
    std::fs::write(&big, vec![b'a'; 1024 * 1024 + 1]).unwrap();
    let good = d.home.path().join("prompt.md");
    std::fs::write(&good, "You are Codex").unwrap();
    let body = |file: &str| {
        json!({"name": "local", "endpoints": {"openai-chat": "http://127.0.0.1:9/v1"},
            "models": [{"id": "m1"}], "files": {"fake": {"instructions_md": {"file": file}}}})
    };
    for (file, why) in [
        ("/dev/zero".to_string(), "not a regular file"),
        ("/tmp".to_string(), "not a regular file"),
        (big.display().to_string(), "larger than 1 MiB"),
        (
            d.home.path().join("none.md").display().to_string(),
            "No such file",
        ),
        ("relative.md".to_string(), "not an absolute path"),
    ] {
        let (s, v) = d.post("/v1/providers", body(&file)).await;
        assert_problem(s, &v, 400, "provider invalid");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("files.fake.instructions_md") && detail.contains(why),
            "{file}: {v}"
        );
    }
    assert!(
        !d.home
            .path()
            .join(".config/handler-ai/providers/local.toml")
            .exists()
    );
    let (s, v) = d
        .post("/v1/providers", body(&good.display().to_string()))
        .await;
    assert_eq!(s, 201, "{v}");
    // A hand-written one naming /dev/zero: its start is refused, not read without end.
    std::fs::write(
        d.home.path().join(".config/handler-ai/providers/zero.toml"),
        "apiVersion = \"handler.provider/v1\"\n[endpoints]\nopenai-chat = \"http://127.0.0.1:9/v1\"\n[[models]]\nid = \"m1\"\n[files.fake]\ninstructions_md = { file = \"/dev/zero\" }\n",
    )
    .unwrap();
    let (s, a) = d
        .post(
            "/v1/agents",
            json!({"models": [{"provider": "zero", "harness": "fake"}], "scope": d.scope()}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    let (s, body) = acp_refusal(&d, a["id"].as_str().unwrap()).await;
    assert_eq!(s, 400, "{body}");
    assert!(
        body.contains("files.instructions_md: file /dev/zero: not a regular file"),
        "{body}"
    );
    d.stop().await;
}

#[tokio::test]
async fn secrets_are_written_never_read() {
    let d = TestDaemon::start().await;
    let (s, v) = d
        .put(
            "/v1/secrets/bindings/gh/token",
            json!({"value": SECRET_S, "description": "GitHub"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"path": "bindings/gh/token", "description": "GitHub", "updatedAt": v["updatedAt"]})
    );
    let (_, list) = d.get("/v1/secrets").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(SECRET_S));
    let (s, v) = d
        .put("/v1/secrets/accounts/x/token", json!({"value": "abcdefgh"}))
        .await;
    assert_problem(s, &v, 400, "secret path reserved");
    let (s, v) = d
        .put("/v1/secrets/a/.hidden", json!({"value": "abcdefgh"}))
        .await;
    assert_problem(s, &v, 400, "secret path invalid");
    let (s, v) = d.put("/v1/secrets/a/b", json!({"value": ""})).await;
    assert_problem(s, &v, 422, "secret invalid");
    let (s, _) = d.delete("/v1/secrets/bindings/gh/token").await;
    assert_eq!(s, 204);
    let (s, _) = d.delete("/v1/secrets/bindings/gh/token").await;
    assert_eq!(s, 404);
    d.stop().await;
}

#[tokio::test]
async fn work_folders_and_contexts() {
    let d = TestDaemon::start().await;
    let (s, v) = d.get("/v1/folders").await;
    assert_eq!(s, 200);
    assert_eq!(v["roots"], json!(["~/code"]));
    let (s, v) = d
        .put("/v1/folders", json!({"roots": ["~/code", "relative/path"]}))
        .await;
    assert_problem(s, &v, 400, "folders invalid");
    let (s, v) = d
        .put("/v1/folders", json!({"roots": ["~/elsewhere"]}))
        .await;
    assert_eq!(s, 200, "{v}");
    // The scope is now outside every work folder (D.13).
    d.fake_account("perso", TOKEN_A).await;
    let (s, v) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": d.scope()}),
        )
        .await;
    assert_problem(s, &v, 400, "scope outside work folders");
    let (s, _) = d.put("/v1/folders", json!({"roots": ["~/code"]})).await;
    assert_eq!(s, 200);

    let (s, v) = d
        .post("/v1/contexts", json!({"name": "Work", "color": "blue"}))
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d
        .post("/v1/contexts", json!({"name": "any", "color": "blue"}))
        .await;
    assert_problem(s, &v, 400, "context invalid");
    let (s, v) = d
        .post("/v1/contexts", json!({"name": "work", "color": "pink"}))
        .await;
    assert_problem(s, &v, 409, "context exists");
    let (s, v) = d.put("/v1/contexts/Work", json!({"color": "violet"})).await;
    assert_eq!((s, v["color"].clone()), (200, json!("violet")));
    // A project in Work runs only what is made for it: perso has no contexts (409).
    let (s, v) = d.post("/v1/projects", json!({"folder": d.scope(), "context": "Work", "agent": {"name": "Dev", "models": [{"account": "perso"}]}})).await;
    assert_problem(s, &v, 409, "not for this project's context");
    let (s, _) = d
        .put(
            "/v1/accounts/perso",
            json!({"harness": "fake", "contexts": ["Work"]}),
        )
        .await;
    assert_eq!(s, 200);
    let (s, v) = d.post("/v1/projects", json!({"folder": d.scope(), "context": "Work", "agent": {"name": "Dev", "models": [{"account": "perso"}]}})).await;
    assert_eq!(s, 201, "{v}");
    let (_, c) = d.get("/v1/contexts/Work").await;
    assert_eq!(c["accounts"], json!(["perso"]));
    assert_eq!(c["projects"], json!(["app"]));
    let (s, v) = d.delete("/v1/contexts/Work").await;
    assert_problem(s, &v, 409, "context in use");
    d.stop().await;
}

/// Each E1 refusal: 400 model access unusable, the detail naming the reason.
#[tokio::test]
async fn every_e1_refusal_is_a_clear_400() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN_A).await;
    let (s, _) = d.post("/v1/providers", json!({"name": "local", "endpoints": {"anthropic": "http://127.0.0.1:9/v1"}, "models": [{"id": "m1"}]})).await;
    assert_eq!(s, 201);
    let (s, _) = d.post("/v1/providers", json!({"name": "oai", "endpoints": {"openai-chat": "http://127.0.0.1:9/v1"}, "models": [{"id": "m1"}]})).await;
    assert_eq!(s, 201);
    let acc = d.home.path().join(".config/handler-ai/accounts");
    std::fs::write(
        acc.join("onpi.toml"),
        "apiVersion = \"handler.account/v1\"\nharness = \"pi\"\n",
    )
    .unwrap();
    std::fs::write(
        acc.join("typo.toml"),
        "apiVersion = \"handler.account/v1\"\nharnes = \"fake\"\n",
    )
    .unwrap();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"account": "perso", "provider": "oai"}),
            "names both an account and a provider",
        ),
        (
            json!({"model": "m1"}),
            "names neither an account nor a provider",
        ),
        (
            json!({"account": "ghost"}),
            "account \"ghost\" does not exist",
        ),
        (json!({"account": "typo"}), "account \"typo\" is invalid"),
        (json!({"account": "onpi"}), "pi has no login"),
        (
            json!({"account": "perso", "harness": "codex"}),
            "is for fake, not codex",
        ),
        (
            json!({"provider": "ghost", "harness": "fake"}),
            "provider \"ghost\" does not exist",
        ),
        (
            json!({"provider": "oai"}),
            "needs the harness that talks to it",
        ),
        (
            json!({"provider": "oai", "harness": "nope"}),
            "unknown harness \"nope\"",
        ),
        (
            json!({"provider": "local", "harness": "fake"}),
            "has no endpoint for a protocol fake speaks (openai-chat)",
        ),
        (
            json!({"provider": "oai", "harness": "gemini"}),
            "gemini runs only on an account",
        ),
        (
            json!({"provider": "oai", "harness": "fake", "model": "m9"}),
            "\"m9\" is not one of provider \"oai\"'s models",
        ),
    ];
    for (m, reason) in cases {
        let (s, v) = d
            .post("/v1/agents", json!({"models": [m], "scope": d.scope()}))
            .await;
        assert_problem(s, &v, 400, "model access unusable");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.contains(reason),
            "{m}: {detail:?} should say {reason:?}"
        );
        assert!(detail.starts_with("models[0]"), "{detail}");
    }
    let (s, v) = d
        .post("/v1/agents", json!({"models": [], "scope": d.scope()}))
        .await;
    assert_problem(s, &v, 400, "model access unusable");
    // A usable one saves.
    let (s, v) = d
        .post(
            "/v1/agents",
            json!({"models": [{"provider": "oai", "harness": "fake"}], "scope": d.scope()}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["models"][0]["model"], Value::Null);
    assert_eq!(v["models"][0]["harness"], "fake");
    d.stop().await;
}

#[tokio::test]
async fn an_agent_says_why_its_model_cannot_start_and_what_hosts_it_requires() {
    let d = TestDaemon::start().await;
    let (s, _) = d
        .post("/v1/accounts", json!({"name": "nolog", "harness": "fake"}))
        .await;
    assert_eq!(s, 201);
    d.fake_account("perso", TOKEN_A).await;
    let (s, _) = d.post("/v1/providers", json!({"name": "oai", "endpoints": {"openai-chat": "http://localhost:3000/v1"}, "models": [{"id": "m1"}], "apiKey": KEY_P})).await;
    assert_eq!(s, 201);
    let a = d.fake_agent("nolog", json!({"models": [{"account": "nolog"}, {"account": "perso"}, {"provider": "oai", "harness": "fake"}]})).await;
    assert_eq!(
        a["models"][0]["problem"],
        "account \"nolog\" is not logged in"
    );
    assert!(a["models"][1]["problem"].is_null(), "{a}");
    assert_eq!(
        a["models"][1]["requiredHosts"],
        json!([{"host": "api.fake.test:443", "by": "account perso"}])
    );
    assert_eq!(
        a["models"][2]["requiredHosts"],
        json!([{"host": "host.containers.internal:3000", "by": "provider oai"}])
    );
    assert_eq!(a["network"], "filtered");
    assert_eq!(a["egress"], "enforce");
    assert_eq!(
        a["acpUrl"],
        format!(
            "ws://127.0.0.1:{}/v1/agents/{}/acp",
            d.port,
            a["id"].as_str().unwrap()
        )
    );
    // The key removed from the store: the provider is incomplete.
    let (s, _) = d.delete("/v1/secrets/providers/oai/apiKey").await;
    assert_eq!(s, 204);
    let (_, a) = d
        .get(&format!("/v1/agents/{}", a["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        a["models"][2]["problem"],
        "provider \"oai\": secret providers/oai/apiKey is not set"
    );
    d.stop().await;
}

#[tokio::test]
async fn widening_an_agent_needs_confirm_risks() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN_A).await;
    let base = json!({"models": [{"account": "perso"}], "scope": d.scope()});
    let with = |extra: Value| {
        let mut b = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    // Narrower than the preset: no confirmation.
    let (s, v) = d
        .post(
            "/v1/agents",
            with(json!({"network": "none", "permissions": "ask"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    for (extra, what) in [
        (json!({"network": "open"}), "network: an open network"),
        (json!({"egress": "log-only"}), "in log only"),
        (json!({"confinement": "nested"}), "confinement: nested"),
        (
            json!({"confinement": "privileged"}),
            "confinement: privileged",
        ),
    ] {
        let (s, v) = d.post("/v1/agents", with(extra.clone())).await;
        assert_problem(s, &v, 409, "risks not confirmed");
        assert!(v["detail"].as_str().unwrap().contains(what), "{extra}: {v}");
        let mut ok = with(extra.clone());
        ok["confirmRisks"] = json!(true);
        let (s, v) = d.post("/v1/agents", ok).await;
        assert_eq!(s, 201, "{extra}: {v}");
    }
    // PUT from none/ask to bypass: 409, then accepted.
    let (s, v) = d
        .put(
            &format!("/v1/agents/{id}"),
            with(json!({"network": "none", "permissions": "bypass"})),
        )
        .await;
    assert_problem(s, &v, 409, "risks not confirmed");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("permissions: bypass instead of ask"),
        "{v}"
    );
    let (s, v) = d
        .put(
            &format!("/v1/agents/{id}"),
            with(json!({"network": "none", "permissions": "bypass", "confirmRisks": true})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["permissions"], "bypass");
    // A mode its harness does not offer.
    let (s, v) = d
        .post("/v1/agents", with(json!({"permissions": "accept-edits"})))
        .await;
    assert_problem(s, &v, 400, "permissions unusable");
    // egress without a filtered network.
    let (s, v) = d
        .post(
            "/v1/agents",
            with(json!({"network": "none", "egress": "enforce"})),
        )
        .await;
    assert_problem(s, &v, 400, "agent invalid");
    // The live switch is not confirmed (D.8).
    let (s, v) = d.post("/v1/agents", base.clone()).await;
    assert_eq!(s, 201);
    let (s, v2) = d
        .patch(
            &format!("/v1/agents/{}", v["id"].as_str().unwrap()),
            json!({"egress": "log-only"}),
        )
        .await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!(v2["egress"], "log-only");
    d.stop().await;
}

#[tokio::test]
async fn projects_presets_unique_names_default_agent_and_duplicate() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN_A).await;
    let (s, p) = d.post("/v1/projects", json!({"folder": d.scope(), "preset": "locked-down", "agent": {"name": "Dev", "models": [{"account": "perso"}]}})).await;
    assert_eq!(s, 201, "{p}");
    assert!(p["id"].as_str().unwrap().starts_with("p_"));
    assert_eq!(p["name"], "app");
    let dev = &p["agents"][0];
    assert_eq!(
        (dev["network"].as_str(), dev["permissions"].as_str()),
        (Some("none"), Some("ask"))
    );
    assert_eq!(p["defaultAgent"], dev["id"]);
    let pid = p["id"].as_str().unwrap();
    // One project per folder.
    let (s, v) = d
        .post(
            "/v1/projects",
            json!({"folder": d.scope(), "agent": {"name": "X", "models": [{"account": "perso"}]}}),
        )
        .await;
    assert_problem(s, &v, 409, "project exists");
    // Names: required, unique case-insensitively.
    let (s, v) = d
        .post(
            &format!("/v1/projects/{pid}/agents"),
            json!({"name": "  ", "models": [{"account": "perso"}]}),
        )
        .await;
    assert_problem(s, &v, 422, "invalid body");
    let (s, v) = d
        .post(
            &format!("/v1/projects/{pid}/agents"),
            json!({"name": "dEV", "models": [{"account": "perso"}]}),
        )
        .await;
    assert_problem(s, &v, 409, "name taken");
    // A second agent: the defaults of new agents (Guarded), made default.
    let (s, rev) = d
        .post(
            &format!("/v1/projects/{pid}/agents"),
            json!({"name": "Review", "default": true, "models": [{"account": "perso"}]}),
        )
        .await;
    assert_eq!(s, 201, "{rev}");
    assert_eq!(rev["network"], "filtered");
    assert_eq!(rev["projectId"], pid);
    assert_eq!(rev["scope"], d.scope());
    let (_, p) = d.get(&format!("/v1/projects/{pid}")).await;
    assert_eq!(p["defaultAgent"], rev["id"]);
    assert_eq!(p["agents"][0]["id"], rev["id"], "default first");
    // Duplicate: its settings, a new id, nothing linked.
    let (s, dup) = d
        .post(
            &format!("/v1/agents/{}/duplicate", rev["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(s, 201, "{dup}");
    assert_eq!(dup["name"], "Review (copy)");
    assert_ne!(dup["id"], rev["id"]);
    assert_eq!(dup["network"], rev["network"]);
    let (_, all) = d.get(&format!("/v1/agents?project={pid}")).await;
    assert_eq!(all.as_array().unwrap().len(), 3);
    // Delete an agent, the project.
    let (s, _) = d
        .delete(&format!("/v1/agents/{}", dup["id"].as_str().unwrap()))
        .await;
    assert_eq!(s, 204);
    let (s, v) = d.delete(&format!("/v1/projects/{pid}")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"id": pid, "caches": []}),
        "no launch made its caches"
    );
    let (_, all) = d.get("/v1/agents").await;
    assert_eq!(all, json!([]));
    // The store is a file, written atomically.
    let agents =
        std::fs::read_to_string(d.home.path().join(".local/state/handler-ai/agents.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&agents).unwrap(), json!([]));
    d.stop().await;
}

#[tokio::test]
async fn harnesses_are_listed_with_their_logins() {
    let d = TestDaemon::start().await;
    let (s, v) = d.get("/v1/harnesses").await;
    assert_eq!(s, 200);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    for n in ["claude-code", "codex", "fake", "gemini", "pi", "vibe"] {
        assert!(names.contains(&n), "{names:?}");
    }
    let (_, codex) = d.get("/v1/harnesses/codex").await;
    assert_eq!(codex["loginFile"], "auth.json");
    assert_eq!(codex["providerProtocols"], json!(["responses"]));
    let (_, fake) = d.get("/v1/harnesses/fake").await;
    assert_eq!(fake["permissions"], json!(["ask", "bypass"]));
    d.stop().await;
}

/// Issue 34 item 5 (decisions 0145, 0149): listings answer from memory — each harness's image
/// and the runtime's check are read once at the daemon's start, before any request; requests
/// arriving together wait for one read, not eight; past `HANDLER_IMAGE_FACTS_TTL` the last
/// answer is given and the runtime asked again behind it; `?fresh=true` asks now.
#[tokio::test]
async fn the_harness_listing_asks_the_runtime_once_per_image() {
    use daemon_support::Options;
    // The network filter's image is checked at start, apart from the listings.
    // (Concurrent verbs may write into one line: occurrences are counted.)
    let inspects = |d: &TestDaemon| {
        let log = d.sandbox_log();
        log.matches("image inspect").count()
            - log
                .matches("image inspect localhost/handler-network-filter")
                .count()
    };
    let checks = |d: &TestDaemon| d.sandbox_log().matches("check").count();
    // Until `count` has not moved for half a second (at most 20 s).
    async fn settled(d: &TestDaemon, count: impl Fn(&TestDaemon) -> usize) -> usize {
        let t = std::time::Instant::now();
        let mut last = (count(d), std::time::Instant::now());
        while last.1.elapsed() < std::time::Duration::from_millis(500) {
            assert!(t.elapsed() < std::time::Duration::from_secs(20));
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let now = count(d);
            if now != last.0 {
                last = (now, std::time::Instant::now());
            }
        }
        last.0
    }
    let d = TestDaemon::start_with(Options {
        image_facts_ttl: Some(std::time::Duration::from_secs(600)),
        ..Options::default()
    })
    .await;
    // Read at start, before any request.
    let warm = settled(&d, inspects).await;
    assert_eq!(settled(&d, checks).await, 1, "{}", d.sandbox_log());
    let (s, v) = d.get("/v1/harnesses").await;
    assert_eq!(s, 200);
    let n = v.as_array().unwrap().len();
    assert!(warm >= n, "{n} harnesses: {}", d.sandbox_log());
    // (Read once more if the network filter's build this daemon starts — the fake runtime
    // fails it — ended after the start's read: a build's end is a new generation.)
    let base = settled(&d, inspects).await;
    assert!(base <= warm + n, "{}", d.sandbox_log());
    let together = (0..8).map(|_| d.get("/v1/harnesses"));
    for (s, again) in futures_util::future::join_all(together).await {
        assert_eq!((s, &again), (200, &v));
    }
    let (_, one) = d.get("/v1/harnesses/fake").await;
    assert_eq!(one["imagePresent"], false, "{one}");
    let (s, r) = d.get("/v1/runtime").await;
    assert_eq!(
        (s, r["runtime"].as_str()),
        (200, Some("fake-sandbox")),
        "{r}"
    );
    let together = (0..8).map(|_| d.get("/v1/runtime"));
    for (s, again) in futures_util::future::join_all(together).await {
        assert_eq!((s, &again), (200, &r));
    }
    assert_eq!(
        (inspects(&d), checks(&d)),
        (base, 1),
        "answered from memory: {}",
        d.sandbox_log()
    );
    // Asked now, not from memory.
    let together = (0..8).map(|_| d.get("/v1/runtime?fresh=true"));
    futures_util::future::join_all(together).await;
    let fresh = checks(&d);
    assert!((2..=9).contains(&fresh), "{}", d.sandbox_log());
    let (s, _) = d.get("/v1/runtime?fresh=maybe").await;
    assert_eq!(s, 400);
    // The image facts too: one listing asked now reads every harness's image again.
    let (s, again) = d.get("/v1/harnesses?fresh=true").await;
    assert_eq!((s, &again), (200, &v));
    assert_eq!(inspects(&d), base + n, "{}", d.sandbox_log());
    let (s, _) = d.get("/v1/harnesses/fake?fresh=true").await;
    assert_eq!(
        (s, inspects(&d)),
        (200, base + n + 1),
        "{}",
        d.sandbox_log()
    );
    let filter = |d: &TestDaemon| {
        d.sandbox_log()
            .matches("image inspect localhost/handler-network-filter")
            .count()
    };
    let before = settled(&d, filter).await;
    let (s, _) = d.get("/v1/network-filter?fresh=true").await;
    assert_eq!((s, filter(&d)), (200, before + 1), "{}", d.sandbox_log());
    let (s, _) = d.get("/v1/harnesses?fresh=1").await;
    assert_eq!(s, 400);
    // Parts (decision 0164) are listed from memory too: after a first listing, eight together
    // ask the runtime nothing.
    let (s, parts) = d.get("/v1/parts").await;
    assert_eq!(s, 200, "{parts}");
    assert!(!parts.as_array().unwrap().is_empty(), "{parts}");
    let first = settled(&d, inspects).await;
    let together = (0..8).map(|_| d.get("/v1/parts"));
    for (s, again) in futures_util::future::join_all(together).await {
        assert_eq!((s, &again), (200, &parts));
    }
    assert_eq!(inspects(&d), first, "{}", d.sandbox_log());
    d.stop().await;

    // A TTL of 0: every answer from memory is read again behind it, one read at a time.
    let d = TestDaemon::start_with(Options {
        image_facts_ttl: Some(std::time::Duration::ZERO),
        ..Options::default()
    })
    .await;
    let before = settled(&d, inspects).await;
    let (_, first) = d.get("/v1/harnesses").await;
    assert_eq!(
        settled(&d, inspects).await,
        before + n,
        "{}",
        d.sandbox_log()
    );
    let (_, second) = d.get("/v1/harnesses").await;
    assert_eq!(first, second);
    assert_eq!(
        settled(&d, inspects).await,
        before + 2 * n,
        "{}",
        d.sandbox_log()
    );
    let before = settled(&d, checks).await;
    d.get("/v1/runtime").await;
    assert_eq!(settled(&d, checks).await, before + 1);
    d.stop().await;
}

/// Run last in spirit: every body and log line so far, with the secrets this file uses.
#[tokio::test]
async fn no_secret_value_in_any_answer_or_log_line() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN_A).await;
    let (s, _) = d
        .post(
            "/v1/providers",
            json!({"name": "or", "template": "openrouter", "apiKey": KEY_P}),
        )
        .await;
    assert_eq!(s, 201);
    let (s, _) = d
        .put("/v1/secrets/apps/x/KEY", json!({"value": SECRET_S}))
        .await;
    assert_eq!(s, 200);
    for p in [
        "/v1/accounts",
        "/v1/accounts/perso",
        "/v1/providers",
        "/v1/providers/or",
        "/v1/secrets",
        "/v1/secrets/apps/x/KEY",
        "/openapi.json",
    ] {
        let (s, _) = d.get(p).await;
        assert_eq!(s, 200, "{p}");
    }
    // The values are stored.
    let store = std::fs::read_to_string(d.home.path().join(".local/share/handler-ai/secrets.json"))
        .unwrap();
    assert!(store.contains(TOKEN_A) && store.contains(KEY_P) && store.contains(SECRET_S));
    let (b, l) = (bodies(), logs());
    for secret in [TOKEN_A, KEY_P, SECRET_S] {
        assert!(!b.contains(secret), "a response body holds a secret");
        assert!(!l.contains(secret), "a log line holds a secret");
    }
    assert!(l.contains("account created"), "the logs were captured");
    d.stop().await;
}

#[tokio::test]
async fn the_token_rotates_and_the_old_one_is_refused_at_once() {
    let d = TestDaemon::start().await;
    let tf = d.home.path().join(".config/handler-ai/token");
    let status = |token: String| {
        let req = d
            .http
            .get(format!("{}/v1/accounts", d.url))
            .bearer_auth(token);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let res = d
        .http
        .post(format!("{}/v1/token/rotate", d.url))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    let new = std::fs::read_to_string(&tf).unwrap().trim().to_string();
    assert_ne!(new, d.token);
    assert_eq!(new.len(), 64);
    let meta = std::fs::metadata(&tf).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        status(d.token.clone()).await,
        401,
        "the old token still works"
    );
    assert_eq!(status(new.clone()).await, 200);
    // The old token cannot rotate it again either.
    let res = d
        .http
        .post(format!("{}/v1/token/rotate", d.url))
        .bearer_auth(&d.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    assert!(!logs().contains(&new), "the new token reached the log");
    d.stop().await;
}

/// Issue 27 F12: the web UI's URL carries a one-time code, never the token. `POST /v1/ui/code`
/// (with the token) gives one; `POST /ui/exchange` (no token) answers the token once for it;
/// the same code again, a made-up one, or one without the token's route are refused.
#[tokio::test]
async fn a_ui_code_is_exchanged_for_the_token_once() {
    let d = TestDaemon::start().await;
    let code = |auth: bool| {
        let mut req = d.http.post(format!("{}/v1/ui/code", d.url));
        if auth {
            req = req.bearer_auth(&d.token);
        }
        async move { req.send().await.unwrap() }
    };
    assert_eq!(code(false).await.status().as_u16(), 401);
    let res = code(true).await;
    assert_eq!(res.status().as_u16(), 201);
    let v: serde_json::Value = res.json().await.unwrap();
    let c = v["code"].as_str().unwrap().to_string();
    assert_eq!(c.len(), 32, "{v}");
    assert_eq!(v["expiresInSeconds"], 60, "{v}");
    assert!(!c.contains(&d.token));
    let exchange = |c: String| {
        let req = d
            .http
            .post(format!("{}/ui/exchange", d.url))
            .json(&serde_json::json!({ "code": c }));
        async move {
            let r = req.send().await.unwrap();
            let s = r.status().as_u16();
            (s, r.json::<serde_json::Value>().await.unwrap_or_default())
        }
    };
    let (s, v) = exchange(c.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["token"], d.token.as_str());
    let (s, v) = exchange(c).await;
    assert_eq!(s, 401, "a code works once: {v}");
    assert!(!v.to_string().contains(&d.token));
    let (s, _) = exchange("0".repeat(32)).await;
    assert_eq!(s, 401);
    // A page of another origin gets nothing (the Origin check is in front of it).
    let res = d
        .http
        .post(format!("{}/ui/exchange", d.url))
        .header("Origin", "http://evil.example")
        .json(&serde_json::json!({ "code": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    d.stop().await;
}
