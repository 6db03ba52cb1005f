//! The egress proxy on the host, with real sockets and real TLS (A.3, A.4, E3, egress-lessons):
//! allow/deny/log-only with their events, live switching, closing what a new policy no longer
//! allows, injections (headers, Basic, query, body, responses), leaks, SSE streaming,
//! undecrypted tunnels, CONNECT/SNI/Host agreement, anti-fronting, the DNS-rebinding guard and
//! failing closed.

use crate::egress_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use egress_support::*;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Injection;
use handler_sandbox::egress::{ProxyConfig, ProxyMode};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const PHANTOM: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
const VALUE: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";
const OTHER_PHANTOM: &str = "tok-Zz99Yy88Xx77Ww66Vv55Uu44Tt33";
const OTHER_VALUE: &str = "tok-Aa11Bb22Cc33Dd44Ee55Ff66Gg77";

/// The machine itself as the sandbox names it (plain http:// may carry values there, 0036).
const HOST_ALIAS: &str = "host.containers.internal";

struct World {
    ca: TestCa,
    https: Server,
    http: Server,
    proxy: Proxy,
}

/// Test servers on this machine's outward address, names for them (api.test, other.test,
/// plain.test, inj.test), and a proxy trusting the test CA towards upstreams.
async fn world(enforcement: &str, allow: &[&str], injections: Vec<Injection>) -> World {
    world_with(enforcement, allow, |_, _| injections).await
}

/// [`world`], the injections made once the servers' ports are known.
async fn world_with(
    enforcement: &str,
    allow: &[&str],
    injections: impl FnOnce(&Server, &Server) -> Vec<Injection>,
) -> World {
    let ca = TestCa::new();
    let https = Server::start(Some(ca.server_config(&[
        "api.test",
        "other.test",
        "inj.test",
    ])))
    .await;
    let http = Server::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, &ca.pem).unwrap();
    let ip = host_ip();
    let resolve: BTreeMap<String, std::net::IpAddr> = [
        "api.test",
        "other.test",
        "plain.test",
        "inj.test",
        HOST_ALIAS,
    ]
    .iter()
    .map(|n| (n.to_string(), ip))
    .collect();
    let events = Collected::default();
    let settings = dir.path().join("settings.json");
    let allow = expand(allow, &https, &http);
    let injections = injections(&https, &http);
    let s = handler_sandbox::egress::Settings {
        enforcement: serde_json::from_value(serde_json::json!(enforcement)).unwrap(),
        allow: allow
            .iter()
            .map(|a| AllowEntry::parse(a).unwrap())
            .collect(),
    };
    handler_core::runtime::egress::write_settings(&settings, &s).unwrap();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: Some(dir.path().join("bundle.pem").to_string_lossy().into()),
        roots_files: vec![roots.to_string_lossy().into()],
        injections,
        host_addresses: vec![],
        resolve,
        control_socket: None,
    };
    let running = handler_core::runtime::egress::start(config, events.events())
        .await
        .unwrap();
    World {
        ca,
        https,
        http,
        proxy: Proxy {
            running,
            dir,
            events,
        },
    }
}

/// `{https}` and `{http}` in entries become the servers' ports.
fn expand(allow: &[&str], https: &Server, http: &Server) -> Vec<String> {
    allow
        .iter()
        .map(|a| {
            a.replace("{https}", &https.port.to_string())
                .replace("{http}", &http.port.to_string())
        })
        .collect()
}

impl World {
    fn t(&self, host: &str) -> String {
        format!("{host}:{}", self.https.port)
    }
    fn h(&self, host: &str) -> String {
        format!("{host}:{}", self.http.port)
    }
    fn set(&self, enforcement: &str, allow: &[&str]) {
        self.proxy.set(
            enforcement,
            &expand(allow, &self.https, &self.http)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
    }
    fn event(&self, decision: &str, host: &str) -> String {
        format!(r#"handler-egress {{"decision":"{decision}","host":"{host}"}}"#)
    }
    fn secret_event(&self, decision: &str, host: &str, secret: &str) -> String {
        format!(r#"handler-egress {{"decision":"{decision}","host":"{host}","secret":"{secret}"}}"#)
    }
    async fn https_get(&self, host: &str, path: &str) -> Result<Got, String> {
        let (mut s, peer) = https_session(
            self.proxy.addr(),
            &self.t(host),
            host,
            &[self.ca.der(), self.proxy.ca()],
        )
        .await?;
        let mut g = send(&mut s, get(path, &self.t(host))).await;
        g.peer_cert = peer;
        Ok(g)
    }
}

fn injection(name: &str, phantom: &str, value: &str, hosts: &[String]) -> Injection {
    Injection {
        name: name.into(),
        phantom: phantom.into(),
        value: value.into(),
        hosts: hosts
            .iter()
            .map(|h| AllowEntry::parse(h).unwrap())
            .collect(),
        body: false,
    }
}

#[tokio::test]
async fn an_allowed_host_is_reached_over_https_and_http() {
    let w = world(
        "enforce",
        &["api.test:{https}", "plain.test:{http}"],
        vec![],
    )
    .await;
    let g = w.https_get("api.test", "/hello").await.unwrap();
    assert_eq!(g.status, 200);
    assert!(g.body.starts_with("GET /hello"), "{}", g.body);
    assert!(
        w.proxy.events.has(&w.event("allowed", &w.t("api.test"))),
        "{:?}",
        w.proxy.events.lines()
    );
    let uri = format!("http://{}/plain?x=1", w.h("plain.test"));
    let g = http_via(w.proxy.addr(), get(&uri, &w.h("plain.test"))).await;
    assert_eq!(g.status, 200, "{}", g.body);
    assert!(
        g.body.starts_with("GET /plain?x=1"),
        "origin form upstream: {}",
        g.body
    );
    assert!(w.proxy.events.has(&w.event("allowed", &w.h("plain.test"))));
    // The bundle holds the roots and the proxy's CA.
    let bundle = std::fs::read_to_string(w.proxy.dir.path().join("bundle.pem")).unwrap();
    assert!(bundle.contains(w.ca.pem.trim()) && bundle.contains(w.proxy.running.ready.ca.trim()));
}

#[tokio::test]
async fn an_unlisted_host_is_refused_with_a_reason_and_a_denied_event() {
    let w = world("enforce", &["api.test:{https}"], vec![]).await;
    let Connect::Refused { status, head, body } = connect(w.proxy.addr(), &w.t("other.test")).await
    else {
        panic!("other.test was let through")
    };
    assert_eq!(status, 403);
    assert!(
        head.to_ascii_lowercase()
            .contains("x-handler-egress: denied"),
        "{head}"
    );
    assert!(
        body.contains(&w.t("other.test"))
            && body.contains("not on this sandbox's allow-list")
            && body.contains("can allow it"),
        "{body}"
    );
    assert!(w.proxy.events.has(&w.event("denied", &w.t("other.test"))));
    // The port is part of the entry.
    let uri = format!("http://{}/", w.h("api.test"));
    let g = http_via(w.proxy.addr(), get(&uri, &w.h("api.test"))).await;
    assert_eq!(g.status, 403);
    assert_eq!(g.headers["x-handler-egress"], "denied");
    assert!(
        w.https.received.all().is_empty() && w.http.received.all().is_empty(),
        "nothing reached a server"
    );
}

#[tokio::test]
async fn log_only_lets_an_unlisted_host_through_and_reports_it() {
    let w = world("log-only", &["api.test:{https}"], vec![]).await;
    let g = w.https_get("other.test", "/x").await.unwrap();
    assert_eq!(g.status, 200);
    assert!(w.proxy.events.has(&w.event("unlisted", &w.t("other.test"))));
    let g = w.https_get("api.test", "/x").await.unwrap();
    assert_eq!(g.status, 200);
    assert!(w.proxy.events.has(&w.event("allowed", &w.t("api.test"))));
}

#[tokio::test]
async fn set_allow_and_set_egress_apply_to_the_next_request() {
    let w = world("enforce", &[], vec![]).await;
    let uri = format!("http://{}/", w.h("plain.test"));
    // One client connection, kept alive across the changes.
    let s = tokio::net::TcpStream::connect(w.proxy.addr())
        .await
        .unwrap();
    let (mut c, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    assert_eq!(
        send(&mut c, get(&uri, &w.h("plain.test"))).await.status,
        403
    );
    w.set("enforce", &["plain.test:{http}"]);
    assert_eq!(
        send(&mut c, get(&uri, &w.h("plain.test"))).await.status,
        200,
        "set-allow applies at once"
    );
    w.set("enforce", &[]);
    assert_eq!(
        http_via(w.proxy.addr(), get(&uri, &w.h("plain.test")))
            .await
            .status,
        403
    );
    w.set("log-only", &[]);
    assert_eq!(
        http_via(w.proxy.addr(), get(&uri, &w.h("plain.test")))
            .await
            .status,
        200,
        "set-egress log-only"
    );
    assert!(w.proxy.events.has(&w.event("unlisted", &w.h("plain.test"))));
}

#[tokio::test]
async fn a_policy_change_closes_tunnels_it_no_longer_allows() {
    let w = world("log-only", &["api.test:{https}"], vec![]).await;
    let Connect::Open(mut unlisted) = connect(w.proxy.addr(), &w.t("other.test")).await else {
        panic!()
    };
    let Connect::Open(listed) = connect(w.proxy.addr(), &w.t("api.test")).await else {
        panic!()
    };
    w.set("enforce", &["api.test:{https}"]);
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(3), unlisted.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the unlisted tunnel was closed: {closed:?}"
    );
    // The allowed tunnel stays open: a TLS hello gets an answer from the server.
    let mut s = {
        let tls = client_tls(&[w.ca.der()])
            .connect(
                rustls::pki_types::ServerName::try_from("api.test").unwrap(),
                listed,
            )
            .await
            .expect("the allowed tunnel still works");
        let (s, c) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(c);
        s
    };
    assert_eq!(
        send(&mut s, get("/still", &w.t("api.test"))).await.status,
        200
    );
}

#[tokio::test]
async fn a_tunnel_to_a_host_without_injections_is_not_decrypted() {
    let w = world("enforce", &["api.test:{https}", "inj.test:{https}"], vec![]).await;
    // With only the test CA trusted, TLS succeeds: the client talks to the server itself.
    let (mut s, peer) = https_session(w.proxy.addr(), &w.t("api.test"), "api.test", &[w.ca.der()])
        .await
        .unwrap();
    assert_eq!(send(&mut s, get("/", &w.t("api.test"))).await.status, 200);
    let peer = peer.unwrap();
    let proxy_ca = w.proxy.ca();
    assert!(
        !contains(peer.as_ref(), &name_of(&proxy_ca)),
        "the leaf is the server's own"
    );
    // With only the proxy's CA trusted, TLS fails: the proxy did not step in.
    assert!(
        https_session(w.proxy.addr(), &w.t("api.test"), "api.test", &[proxy_ca])
            .await
            .is_err()
    );
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
fn name_of(_ca: &rustls::pki_types::CertificateDer<'_>) -> Vec<u8> {
    b"Handler sandbox egress proxy CA".to_vec()
}

async fn injection_world() -> World {
    // Ports are only known once the servers run: start them, then the proxy with their entries.
    let w = world("enforce", &[], vec![]).await;
    let api = w.t("api.test");
    let inj = w.t("inj.test");
    let injections = vec![
        injection(
            "providers/x/apiKey",
            PHANTOM,
            VALUE,
            std::slice::from_ref(&api),
        ),
        injection(
            "bindings/b/token",
            OTHER_PHANTOM,
            OTHER_VALUE,
            std::slice::from_ref(&inj),
        ),
    ];
    let allow = vec![api, inj, w.t("other.test"), w.h("plain.test")];
    let names = ["api.test", "other.test", "plain.test", "inj.test"];
    proxy_beside(w, (allow, injections), &names, None).await
}

/// A proxy of its own beside `w`'s servers (its own is dropped): enforcing `allow`, with
/// `injections`, resolving `names` to the servers, with a control socket at `control` (a
/// machine's, decision 0166) when given.
async fn proxy_beside(
    w: World,
    (allow, injections): (Vec<String>, Vec<Injection>),
    names: &[&str],
    control: Option<&std::path::Path>,
) -> World {
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, &w.ca.pem).unwrap();
    let settings = dir.path().join("settings.json");
    let s = handler_sandbox::egress::Settings {
        enforcement: handler_contracts::sandbox::Enforcement::Enforce,
        allow: allow
            .iter()
            .map(|a| AllowEntry::parse(a).unwrap())
            .collect(),
    };
    handler_core::runtime::egress::write_settings(&settings, &s).unwrap();
    let events = Collected::default();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![roots.to_string_lossy().into()],
        injections,
        host_addresses: vec![],
        resolve: names.iter().map(|n| (n.to_string(), host_ip())).collect(),
        control_socket: control.map(|c| c.to_string_lossy().into()),
    };
    let running = handler_core::runtime::egress::start(config, events.events())
        .await
        .unwrap();
    World {
        ca: w.ca,
        https: w.https,
        http: w.http,
        proxy: Proxy {
            running,
            dir,
            events,
        },
    }
}

#[tokio::test]
async fn the_server_gets_the_value_and_the_process_only_the_phantom() {
    let w = injection_world().await;
    *w.https.echo_secret.lock().unwrap() = VALUE.to_string();
    let (mut s, peer) = https_session(
        w.proxy.addr(),
        &w.t("api.test"),
        "api.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    assert!(peer.is_some(), "the proxy's leaf, trusted through its CA");
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("user:{PHANTOM}"));
    let body = format!(r#"{{"key":"{PHANTOM}","n":1}}"#);
    let req = Request::post(format!("/v1/call?key={PHANTOM}&x=1"))
        .header("host", w.t("api.test"))
        .header("x-api-key", PHANTOM)
        .header("authorization", format!("Basic {basic}"))
        .header("accept-encoding", "gzip")
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let seen = w.https.received.all();
    let real_basic = base64::engine::general_purpose::STANDARD.encode(format!("user:{VALUE}"));
    assert!(
        seen.contains(&format!("/v1/call?key={VALUE}&x=1")),
        "query: {seen}"
    );
    assert!(
        seen.contains(&format!("x-api-key: {VALUE}")),
        "header: {seen}"
    );
    assert!(
        seen.contains(&format!("authorization: Basic {real_basic}")),
        "basic: {seen}"
    );
    // The body is not swapped (decision 0033): what the process wrote there reaches the model.
    assert!(
        seen.contains(&format!(r#"{{"key":"{PHANTOM}","n":1}}"#)),
        "body: {seen}"
    );
    assert_eq!(
        seen.matches(PHANTOM).count(),
        1,
        "no phantom reached the server but the body's: {seen}"
    );
    assert!(
        !seen.contains("accept-encoding"),
        "Accept-Encoding dropped: {seen}"
    );
    // The server echoes the secret back (headers and body): the process reads the phantom.
    assert!(!g.body.contains(VALUE), "{}", g.body);
    assert!(g.body.contains(&format!("secret={PHANTOM}")));
    assert_eq!(g.headers["x-echo-secret"], PHANTOM);
    assert!(w.proxy.events.has(&w.secret_event(
        "injected",
        &w.t("api.test"),
        "providers/x/apiKey"
    )));
    assert!(w.proxy.events.has(&w.event("allowed", &w.t("api.test"))));
}

#[tokio::test]
async fn a_phantom_sent_to_another_allowed_host_is_refused_as_a_leak() {
    let w = injection_world().await;
    // Plain http:// to another allowed host.
    let uri = format!("http://{}/?k={PHANTOM}", w.h("plain.test"));
    let g = http_via(w.proxy.addr(), get(&uri, &w.h("plain.test"))).await;
    assert_eq!(g.status, 403, "{}", g.body);
    assert_eq!(g.headers["x-handler-egress"], "leak");
    assert!(
        w.proxy
            .events
            .has(&w.secret_event("leak", &w.h("plain.test"), "providers/x/apiKey")),
        "{:?}",
        w.proxy.events.lines()
    );
    // In a decrypted tunnel to another injection's host.
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t("inj.test"),
        "inj.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    let req = Request::post("/")
        .header("host", w.t("inj.test"))
        .body(Full::new(Bytes::from(format!("k={PHANTOM}"))))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 403);
    assert!(
        w.proxy
            .events
            .has(&w.secret_event("leak", &w.t("inj.test"), "providers/x/apiKey"))
    );
    assert!(
        w.https.received.all().is_empty() && w.http.received.all().is_empty(),
        "nothing left"
    );
}

#[tokio::test]
async fn a_long_streamed_body_is_cut_at_a_leak() {
    let w = injection_world().await;
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
    >(4);
    let s = tokio::net::TcpStream::connect(w.proxy.addr())
        .await
        .unwrap();
    let (mut c, conn) = hyper::client::conn::http1::handshake::<_, http_body_util::StreamBody<_>>(
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let uri = format!("http://{}/upload", w.h("plain.test"));
    let body = http_body_util::StreamBody::new(futures_util::stream::poll_fn({
        let mut rx = rx;
        move |cx| rx.poll_recv(cx)
    }));
    let req = Request::post(uri)
        .header("host", w.h("plain.test"))
        .body(body)
        .unwrap();
    let resp = tokio::spawn(async move { c.send_request(req).await.map(|r| r.status().as_u16()) });
    tx.send(Ok(hyper::body::Frame::data(Bytes::from(vec![
        b'a';
        100_000
    ]))))
    .await
    .unwrap();
    tx.send(Ok(hyper::body::Frame::data(Bytes::from(format!(
        "xx{}",
        &PHANTOM[..10]
    )))))
    .await
    .unwrap();
    tx.send(Ok(hyper::body::Frame::data(Bytes::from(
        PHANTOM[10..].to_string(),
    ))))
    .await
    .unwrap();
    drop(tx);
    let status = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.ok(), Some(403));
    assert!(
        w.proxy
            .events
            .has(&w.secret_event("leak", &w.h("plain.test"), "providers/x/apiKey"))
    );
    assert!(
        !w.http.received.all().contains(PHANTOM),
        "the phantom never left"
    );
}

#[tokio::test]
async fn an_sse_stream_arrives_event_by_event_with_values_swapped() {
    let w = injection_world().await;
    *w.https.echo_secret.lock().unwrap() = VALUE.to_string();
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t("api.test"),
        "api.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    s.ready().await.unwrap();
    let resp = s.send_request(get("/sse", &w.t("api.test"))).await.unwrap();
    let mut body = resp.into_body();
    let start = Instant::now();
    let mut got = String::new();
    let mut first_at = None;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            got.push_str(std::str::from_utf8(&d).unwrap());
            if first_at.is_none() && got.contains("\n\n") {
                first_at = Some(start.elapsed());
            }
        }
    }
    let first_at = first_at.unwrap();
    assert!(
        first_at < Duration::from_millis(350),
        "the first event came before the stream ended: {first_at:?}"
    );
    assert!(start.elapsed() >= Duration::from_millis(700));
    assert_eq!(got.matches(&format!(" {PHANTOM}\n\n")).count(), 3, "{got}");
    assert!(!got.contains(VALUE));
}

#[tokio::test]
async fn sni_and_host_must_name_the_connect_target() {
    let w = injection_world().await;
    // SNI other than the CONNECT target.
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t("api.test"),
        "other.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    let g = send(&mut s, get("/", "other.test")).await;
    assert_eq!(g.status, 403);
    assert_eq!(g.headers["x-handler-egress"], "mismatch");
    // Host other than the CONNECT target.
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t("api.test"),
        "api.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    let req = Request::get("/")
        .header("host", w.t("other.test"))
        .header("x-api-key", PHANTOM)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 403);
    assert!(
        g.body.contains(&format!("Host is {}", w.t("other.test"))),
        "{}",
        g.body
    );
    assert!(w.https.received.all().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_plain_request_host_must_equal_its_uri() {
    let w = world("enforce", &["plain.test:{http}"], vec![]).await;
    let uri = format!("http://{}/", w.h("plain.test"));
    let g = http_via(w.proxy.addr(), get(&uri, "evil.test")).await;
    assert_eq!(g.status, 403);
    assert_eq!(g.headers["x-handler-egress"], "mismatch");
    assert!(w.http.received.all().is_empty());
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_unless_the_address_is_listed() {
    let w = world("enforce", &["loop.test:{http}"], vec![]).await;
    // A second proxy whose resolver sends loop.test to 127.0.0.1.
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::copy(w.proxy.settings_path(), &settings).unwrap();
    let events = Collected::default();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![],
        injections: vec![],
        host_addresses: vec![],
        resolve: [("loop.test".to_string(), "127.0.0.1".parse().unwrap())].into(),
        control_socket: None,
    };
    let p = handler_core::runtime::egress::start(config, events.events())
        .await
        .unwrap();
    let uri = format!("http://{}/", w.h("loop.test"));
    let g = http_via(p.addr(), get(&uri, &w.h("loop.test"))).await;
    assert_eq!(g.status, 403, "{}", g.body);
    assert!(g.body.contains("127.0.0.1"), "{}", g.body);
    let listed = handler_sandbox::egress::Settings {
        enforcement: handler_contracts::sandbox::Enforcement::Enforce,
        allow: vec![
            AllowEntry::parse(&w.h("loop.test")).unwrap(),
            AllowEntry::parse(&w.h("127.0.0.1")).unwrap(),
        ],
    };
    handler_core::runtime::egress::write_settings(&settings, &listed).unwrap();
    let g = http_via(p.addr(), get(&uri, &w.h("loop.test"))).await;
    assert_eq!(g.status, 200, "listed by address: {}", g.body);
}

#[tokio::test]
async fn a_broken_settings_file_denies_everything() {
    let w = world("enforce", &["plain.test:{http}"], vec![]).await;
    std::fs::write(w.proxy.settings_path(), "{not json").unwrap();
    let uri = format!("http://{}/", w.h("plain.test"));
    let g = http_via(w.proxy.addr(), get(&uri, &w.h("plain.test"))).await;
    assert_eq!(g.status, 403, "fail closed");
    w.set("enforce", &["plain.test:{http}"]);
    assert_eq!(
        http_via(w.proxy.addr(), get(&uri, &w.h("plain.test")))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_proxy_with_invalid_settings_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        r#"{"enforcement":"enforce","allow":["no-port.test"]}"#,
    )
    .unwrap();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![],
        injections: vec![],
        host_addresses: vec![],
        resolve: BTreeMap::new(),
        control_socket: None,
    };
    let e = handler_core::runtime::egress::start(config, Collected::default().events())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("allow[0]"), "{e}");
    let _ = tokio::io::sink().write_all(b"").await;
}

// ---- Issue 11: bodies (decision 0033), IP literals (0035), relayed tunnels' SNI (0034),
// encoded answers and plain http:// (0036).

/// A world whose api.test (HTTPS) carries the model key's injection, and whose inj.test
/// (HTTPS too) an injection that opts in to bodies.
async fn body_world() -> World {
    world_with(
        "enforce",
        &["api.test:{https}", "inj.test:{https}", "plain.test:{http}"],
        |https, http| {
            let mut form = injection(
                "bindings/f/key",
                OTHER_PHANTOM,
                OTHER_VALUE,
                &[format!("inj.test:{}", https.port)],
            );
            form.body = true;
            vec![
                injection(
                    "providers/x/apiKey",
                    PHANTOM,
                    VALUE,
                    &[format!("api.test:{}", https.port)],
                ),
                form,
                injection(
                    "bindings/p/key",
                    "pk-Qq11Ww22Ee33Rr44",
                    "pk-Zz99Xx88Cc77Vv66",
                    &[format!("plain.test:{}", http.port)],
                ),
            ]
        },
    )
    .await
}

async fn post(w: &World, host: &str, path: &str, body: String) -> Got {
    let (mut s, _) = https_session(w.proxy.addr(), &w.t(host), host, &[w.proxy.ca()])
        .await
        .unwrap();
    let req = Request::post(path)
        .header("host", w.t(host))
        .header("x-api-key", PHANTOM)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    send(&mut s, req).await
}

#[tokio::test]
async fn a_phantom_in_a_prompt_reaches_the_model_host_as_the_phantom() {
    let w = body_world().await;
    let prompt = format!(r#"{{"messages":[{{"role":"user","content":"repeat {PHANTOM}"}}]}}"#);
    let g = post(&w, "api.test", "/v1/messages", prompt.clone()).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let seen = w.https.received.all();
    assert!(seen.contains(&prompt), "the body as it was sent: {seen}");
    assert!(
        seen.contains(&format!("x-api-key: {VALUE}")),
        "the header still: {seen}"
    );
    assert!(!seen.contains(&format!("repeat {VALUE}")), "{seen}");
}

#[tokio::test]
async fn a_model_echoing_a_prompt_reversed_never_gives_the_process_the_key() {
    let w = body_world().await;
    let g = post(&w, "api.test", "/reverse", format!("key={PHANTOM}")).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let reversed: String = VALUE.chars().rev().collect();
    assert!(
        !g.body.contains(&reversed),
        "the real key, reversed: {}",
        g.body
    );
    assert!(
        g.body.contains(&PHANTOM.chars().rev().collect::<String>()),
        "{}",
        g.body
    );
    assert!(!w.https.received.all().contains(VALUE.split_at(8).1));
}

#[tokio::test]
async fn an_injection_that_opts_in_is_still_swapped_in_a_body() {
    let w = body_world().await;
    let g = post(
        &w,
        "inj.test",
        "/token",
        format!("client_secret={OTHER_PHANTOM}&x=1"),
    )
    .await;
    // x-api-key carries the model key's phantom to a host it is not for: a leak, refused.
    assert_eq!(g.status, 403, "{}", g.body);
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t("inj.test"),
        "inj.test",
        &[w.proxy.ca()],
    )
    .await
    .unwrap();
    let req = Request::post("/token")
        .header("host", w.t("inj.test"))
        .body(Full::new(Bytes::from(format!(
            "client_secret={OTHER_PHANTOM}&x=1"
        ))))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let seen = w.https.received.all();
    assert!(
        seen.contains(&format!("client_secret={OTHER_VALUE}&x=1")),
        "{seen}"
    );
    assert!(!g.body.contains(OTHER_VALUE), "{}", g.body);
    // The model key's phantom in that body is a leak.
    let req = Request::post("/token")
        .header("host", w.t("inj.test"))
        .body(Full::new(Bytes::from(format!("k={PHANTOM}"))))
        .unwrap();
    assert_eq!(send(&mut s, req).await.status, 403);
}

#[tokio::test]
async fn a_value_echoed_base64_or_json_escaped_comes_back_as_the_phantom() {
    let w = body_world().await;
    *w.https.echo_secret.lock().unwrap() = VALUE.to_string();
    let g = post(&w, "api.test", "/encoded", String::new()).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let v: serde_json::Value = serde_json::from_str(&g.body).unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(v["b64"].as_str().unwrap())
        .unwrap();
    let decoded = String::from_utf8_lossy(&decoded).to_string();
    assert!(!decoded.contains(&VALUE[1..VALUE.len() - 1]), "{decoded}");
    assert!(
        decoded.contains(&PHANTOM[1..PHANTOM.len() - 1]),
        "{decoded}"
    );
    assert_eq!(v["json"], format!("say \"{PHANTOM}\""));
}

#[tokio::test]
async fn an_encoded_answer_from_an_injection_host_is_refused_with_502() {
    let w = body_world().await;
    *w.https.echo_secret.lock().unwrap() = VALUE.to_string();
    let g = post(&w, "api.test", "/gzip", String::new()).await;
    assert_eq!(g.status, 502, "{}", g.body);
    assert_eq!(g.headers["x-handler-egress"], "encoded");
    assert!(!g.body.contains(VALUE), "{}", g.body);
    assert!(g.body.contains("Content-Encoding gzip"), "{}", g.body);
    assert!(
        w.proxy.events.has(&w.event("denied", &w.t("api.test"))),
        "{:?}",
        w.proxy.events.lines()
    );
}

#[tokio::test]
async fn plain_http_to_an_injection_host_never_carries_the_value() {
    let w = body_world().await;
    let uri = format!("http://{}/", w.h("plain.test"));
    let req = Request::get(&uri)
        .header("host", w.h("plain.test"))
        .header("authorization", "Bearer pk-Qq11Ww22Ee33Rr44")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let g = http_via(w.proxy.addr(), req).await;
    assert_eq!(g.status, 403, "{}", g.body);
    assert_eq!(g.headers["x-handler-egress"], "cleartext");
    assert!(
        g.body.contains("bindings/p/key") && g.body.contains("https://"),
        "{}",
        g.body
    );
    assert!(w.http.received.all().is_empty(), "nothing was sent");
    // Without the phantom, the request goes on.
    let g = http_via(w.proxy.addr(), get(&uri, &w.h("plain.test"))).await;
    assert_eq!(g.status, 200, "{}", g.body);
}

#[tokio::test]
async fn plain_http_in_a_tunnel_to_an_injection_host_is_served_as_http() {
    // undici's EnvHttpProxyAgent (pi's client) tunnels http:// origins: CONNECT, then plain
    // HTTP/1.1 in the tunnel (decision 0078)
    let w = world_with(
        "enforce",
        &["host.containers.internal:{http}", "plain.test:{http}"],
        |_, http| {
            vec![
                injection(
                    "providers/x/apiKey",
                    PHANTOM,
                    VALUE,
                    &[format!("{HOST_ALIAS}:{}", http.port)],
                ),
                injection(
                    "bindings/p/key",
                    OTHER_PHANTOM,
                    OTHER_VALUE,
                    &[format!("plain.test:{}", http.port)],
                ),
            ]
        },
    )
    .await;
    *w.http.echo_secret.lock().unwrap() = VALUE.to_string();
    let mut s = plain_tunnel(&w, &w.h(HOST_ALIAS)).await;
    let req = Request::post("/v1/chat/completions")
        .header("host", w.h(HOST_ALIAS))
        .header("authorization", format!("Bearer {PHANTOM}"))
        .body(Full::new(Bytes::from("{}")))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let seen = w.http.received.all();
    assert!(
        seen.contains(&format!("authorization: Bearer {VALUE}")),
        "{seen}"
    );
    assert!(!seen.contains(PHANTOM), "{seen}");
    assert!(!g.body.contains(VALUE), "{}", g.body);
    assert!(g.body.contains(&format!("secret={PHANTOM}")), "{}", g.body);
    assert!(w.proxy.events.has(&w.secret_event(
        "injected",
        &w.h(HOST_ALIAS),
        "providers/x/apiKey"
    )));
    // kept alive: a second request; one naming another host than the CONNECT target is refused
    let g = send(&mut s, get("/again", &w.h(HOST_ALIAS))).await;
    assert_eq!(g.status, 200, "{}", g.body);
    let g = send(&mut s, get("/fronted", &w.h("plain.test"))).await;
    assert_eq!(g.status, 403, "{}", g.body);
    assert_eq!(g.headers["x-handler-egress"], "mismatch");
    assert!(!w.http.received.all().contains("/fronted"));
    // a value never travels in clear beyond this machine, tunnel or not (decision 0036)
    let mut s = plain_tunnel(&w, &w.h("plain.test")).await;
    let req = Request::get("/")
        .header("host", w.h("plain.test"))
        .header("authorization", format!("Bearer {OTHER_PHANTOM}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 403, "{}", g.body);
    assert_eq!(g.headers["x-handler-egress"], "cleartext");
    assert!(!w.http.received.all().contains(OTHER_VALUE));
}

/// A CONNECT tunnel to `target` with plain HTTP/1.1 inside it.
async fn plain_tunnel(w: &World, target: &str) -> Sender {
    let Connect::Open(t) = connect(w.proxy.addr(), target).await else {
        panic!("CONNECT {target} refused")
    };
    let (s, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(t))
        .await
        .unwrap();
    tokio::spawn(conn);
    s
}

#[tokio::test]
async fn ip_literals_of_loopback_metadata_or_the_host_are_refused_in_log_only_too() {
    let w = world("log-only", &[], vec![]).await;
    let port = w.http.port;
    for target in [
        format!("127.0.0.1:{port}"),
        format!("10.0.2.2:{port}"),
        "169.254.169.254:80".to_string(),
        format!("[::1]:{port}"),
    ] {
        match connect(w.proxy.addr(), &target).await {
            Connect::Refused { status, body, .. } => {
                assert_eq!(status, 403, "{target}: {body}");
                assert!(body.contains("exactly"), "{body}");
            }
            Connect::Open(_) => panic!("{target} was let through"),
        }
    }
    let uri = format!("http://127.0.0.1:{port}/");
    let g = http_via(w.proxy.addr(), get(&uri, &format!("127.0.0.1:{port}"))).await;
    assert_eq!(g.status, 403, "{}", g.body);
    let lines = w.proxy.events.lines();
    assert!(
        w.proxy
            .events
            .has(&w.event("denied", &format!("127.0.0.1:{port}"))),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("unlisted")),
        "not let through as unlisted: {lines:?}"
    );
    assert!(w.http.received.all().is_empty());
    // An entry naming exactly that address:port allows it.
    w.set("log-only", &["127.0.0.1:{http}"]);
    let g = http_via(w.proxy.addr(), get(&uri, &format!("127.0.0.1:{port}"))).await;
    assert_eq!(g.status, 200, "{}", g.body);
    w.set("enforce", &["127.0.0.1:{http}"]);
    assert!(matches!(
        connect(w.proxy.addr(), &format!("127.0.0.1:{port}")).await,
        Connect::Open(_)
    ));
}

#[tokio::test]
async fn a_relayed_tunnel_whose_tls_names_another_host_is_refused() {
    // other.test has no injection: its tunnels are relayed, not decrypted. The server's
    // certificate also names api.test, as a shared CDN's would.
    let w = world("enforce", &["other.test:{https}"], vec![]).await;
    let r = https_session(
        w.proxy.addr(),
        &w.t("other.test"),
        "api.test",
        &[w.ca.der()],
    )
    .await;
    assert!(r.is_err(), "fronting through other.test's address");
    assert!(
        w.https.received.all().is_empty(),
        "nothing reached the server"
    );
    assert!(
        w.proxy.events.has(&w.event("denied", &w.t("api.test"))),
        "{:?}",
        w.proxy.events.lines()
    );
    // The right name still goes through, the server's own certificate.
    let (mut s, peer) = https_session(
        w.proxy.addr(),
        &w.t("other.test"),
        "other.test",
        &[w.ca.der()],
    )
    .await
    .unwrap();
    assert!(peer.is_some());
    assert_eq!(send(&mut s, get("/", &w.t("other.test"))).await.status, 200);
}

#[tokio::test]
async fn a_tunnel_that_is_neither_tls_nor_http_is_relayed_as_it_is() {
    let w = world("enforce", &["plain.test:{http}"], vec![]).await;
    // A server that speaks first (as SSH or SMTP do).
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"220 hello\r\n").await.unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).await.unwrap();
        s.write_all(&b).await.unwrap();
    });
    w.set("enforce", &[&format!("plain.test:{port}")]);
    let Connect::Open(mut s) = connect(w.proxy.addr(), &format!("plain.test:{port}")).await else {
        panic!("CONNECT refused")
    };
    let mut b = [0u8; 11];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"220 hello\r\n");
    s.write_all(b"\x00ping").await.unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"\x00ping");
}

#[tokio::test]
async fn a_websocket_answer_with_an_extension_the_proxy_dropped_is_refused() {
    // A server that switches protocols with permessage-deflate although nobody offered it.
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).await.unwrap() == 0 {
                return;
            }
            head.push(b[0]);
        }
        s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
              Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        )
        .await
        .unwrap();
        let _ = s.read(&mut b).await;
    });
    let target = format!("plain.test:{port}");
    let t2 = target.clone();
    let w = world_with("enforce", &[&target], move |_, _| {
        vec![injection("bindings/p/key", PHANTOM, VALUE, &[t2])]
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(w.proxy.addr())
        .await
        .unwrap();
    s.write_all(
        format!(
            "GET http://{target}/ws HTTP/1.1\r\nHost: {target}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut got))
        .await
        .unwrap()
        .unwrap();
    let got = String::from_utf8_lossy(&got[..n]).to_string();
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    assert!(got.contains("x-handler-egress: encoded"), "{got}");
}

/// A machine's proxy (decision 0166): no injection of its own, a control socket on which each
/// exec gives it its own.
async fn machine_world() -> (World, tempfile::TempDir, std::path::PathBuf) {
    let w = world("enforce", &[], vec![]).await;
    let sockets = tempfile::tempdir().unwrap();
    let control = sockets.path().join("control.sock");
    let allow = vec![w.t("api.test"), w.t("other.test")];
    let w = proxy_beside(
        w,
        (allow, vec![]),
        &["api.test", "other.test"],
        Some(&control),
    )
    .await;
    (w, sockets, control)
}

/// What the server saw of one request carrying the phantom in a header.
async fn with_phantom(w: &World, host: &str) -> String {
    w.https.received.0.lock().unwrap().clear();
    let (mut s, _) = https_session(
        w.proxy.addr(),
        &w.t(host),
        host,
        &[w.ca.der(), w.proxy.ca()],
    )
    .await
    .unwrap();
    let req = Request::get("/k")
        .header("host", w.t(host))
        .header("x-api-key", PHANTOM)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let g = send(&mut s, req).await;
    assert_eq!(g.status, 200, "{}", g.body);
    w.https.received.all()
}

/// Says `line` on the control socket; the answer and the connection (which holds what it gave).
async fn control(
    path: &std::path::Path,
    line: &str,
) -> (serde_json::Value, tokio::net::UnixStream) {
    let mut c = tokio::net::UnixStream::connect(path).await.unwrap();
    c.write_all(line.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !got.ends_with(b"\n") {
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "the proxy closed without answering");
        got.extend_from_slice(&buf[..n]);
    }
    (serde_json::from_slice(&got).unwrap(), c)
}

#[tokio::test]
async fn a_machines_proxy_swaps_an_execs_keys_only_while_its_connection_is_open() {
    let (w, _dir, sock) = machine_world().await;
    // Owner-only: the machine never mounts it, and no other user reaches it.
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // No exec holds a key: the phantom goes out as it is (and the tunnel is not decrypted).
    assert!(with_phantom(&w, "api.test").await.contains(PHANTOM));
    let req = handler_sandbox::egress::control::ControlRequest {
        injections: vec![injection(
            "providers/x/apiKey",
            PHANTOM,
            VALUE,
            &[w.t("api.test")],
        )],
    };
    let line = format!("{}\n", serde_json::to_string(&req).unwrap());
    let (answer, held) = control(&sock, &line).await;
    assert_eq!(answer, serde_json::json!({"ok": true}));
    // Held: swapped towards its host, a leak towards another allowed one.
    let seen = with_phantom(&w, "api.test").await;
    assert!(seen.contains(&format!("x-api-key: {VALUE}")), "{seen}");
    assert!(!seen.contains(PHANTOM), "{seen}");
    assert!(w.proxy.events.has(&w.secret_event(
        "injected",
        &w.t("api.test"),
        "providers/x/apiKey"
    )));
    // The same phantom for another value, while it is held: refused, the value never echoed.
    let other: String = VALUE.chars().rev().collect();
    let clash = line.replace(VALUE, &other);
    let (answer, _c) = control(&sock, &clash).await;
    assert_eq!(answer["ok"], false, "{answer}");
    assert!(!answer.to_string().contains(&other), "{answer}");
    // A line that is not a request is refused without being echoed.
    let (answer, _c) = control(&sock, &format!("{{\"secret\":\"{VALUE}\"}}\n")).await;
    assert_eq!(answer["ok"], false);
    assert!(!answer.to_string().contains(VALUE), "{answer}");
    // The exec ends (its connection closes): the key is gone with it.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = with_phantom(&w, "api.test").await;
        if seen.contains(PHANTOM) && !seen.contains(VALUE) {
            break;
        }
        assert!(Instant::now() < deadline, "still swapped: {seen}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
