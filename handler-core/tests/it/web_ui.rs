//! The web UI as handlerd serves it (D intro, issue 17): `/` and its assets without the token,
//! with the Content-Security-Policy (the daemon itself only, no inline script, no framing) and
//! `nosniff`; the Host check still applies; the API still needs the token; and the committed
//! `web/openapi.json` the UI's types are generated from is what the daemon describes (the
//! drift test: `INSTA_UPDATE=always` writes it, then `npm run gen-api` and `npm run build`).

use crate::daemon_support::TestDaemon;

fn committed_openapi() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web/openapi.json")
}

#[test]
fn the_uis_openapi_json_is_what_the_daemon_describes() {
    let now =
        serde_json::to_string_pretty(&handler_core::daemon::openapi::document()).unwrap() + "\n";
    let path = committed_openapi();
    if std::env::var("INSTA_UPDATE").as_deref() == Ok("always") {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == now,
        "{} differs from GET /openapi.json: run INSTA_UPDATE=always cargo test -p handler-core \
         --test it -- web_ui::, then in handler-core/web: npm run gen-api && npm run build",
        path.display()
    );
}

async fn get(d: &TestDaemon, path: &str) -> reqwest::Response {
    d.http.get(format!("{}{path}", d.url)).send().await.unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_app_is_served_without_the_token_with_its_policy() {
    let d = TestDaemon::start().await;
    let r = get(&d, "/").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    let csp = header(&r, "content-security-policy").to_string();
    assert!(csp.contains("script-src 'self';"), "{csp}");
    assert!(
        csp.contains(&format!("connect-src 'self' ws://127.0.0.1:{} ", d.port)),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(header(&r, "x-content-type-options"), "nosniff");
    assert_eq!(header(&r, "referrer-policy"), "no-referrer");
    let html = r.text().await.unwrap();
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .filter(|s| s.starts_with("/assets/"))
        .unwrap_or_else(|| panic!("no module script in {html}"))
        .to_string();
    assert!(!html.contains("<script>"), "an inline script: {html}");
    let js = get(&d, &script).await;
    assert_eq!(js.status(), 200, "{script}");
    assert_eq!(
        header(&js, "content-type"),
        "text/javascript; charset=utf-8"
    );
    assert!(header(&js, "cache-control").contains("immutable"));
    assert!(header(&js, "content-security-policy").contains("default-src 'self'"));
}

#[tokio::test]
async fn only_the_uis_files_go_without_the_token() {
    let d = TestDaemon::start().await;
    let missing = get(&d, "/assets/nothing-here.js").await;
    assert_eq!(missing.status(), 404);
    for path in [
        "/v1/projects",
        "/openapi.json",
        "/assets/../v1/projects",
        "/other",
    ] {
        let r = get(&d, path).await;
        assert!(
            r.status() == 401 || path == "/other" && r.status() == 401,
            "{path}: {}",
            r.status()
        );
    }
    // The Host check (421) applies to the UI too: a rebinding page cannot read it.
    let r = d
        .http
        .get(format!("{}/", d.url))
        .header("host", format!("evil.example:{}", d.port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
    // A foreign page's request carries its Origin: refused (403) before anything.
    let r = d
        .http
        .get(format!("{}/v1/projects", d.url))
        .bearer_auth(&d.token)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // The UI's own origin passes.
    let r = d
        .http
        .get(format!("{}/v1/projects", d.url))
        .bearer_auth(&d.token)
        .header("origin", format!("http://127.0.0.1:{}", d.port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
