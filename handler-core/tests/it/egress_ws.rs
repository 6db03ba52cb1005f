//! WebSockets through the egress proxy and what a policy change does to open connections (A.3,
//! A.4, egress-lessons "a policy change applies to open connections too"), with real sockets, a
//! real WebSocket library on both ends (tokio-tungstenite) and real TLS: ws:// forwarded and wss://
//! in a decrypted tunnel (the handshake's phantoms swapped) exchange messages; when the settings
//! file drops their host, the client gets a close frame 1012 and the server a masked one, never in
//! the middle of another frame; what is still allowed stays open; a kept-alive plain HTTP
//! connection to a dropped host is closed.

use crate::egress_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use egress_support::*;
use futures_util::{SinkExt as _, StreamExt as _};
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Injection;
use handler_sandbox::egress::wsframe::{FrameTracker, POLICY_CHANGED, SERVICE_RESTART};
use handler_sandbox::egress::{ProxyConfig, ProxyMode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

const PHANTOM: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
const VALUE: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";

/// How long a test waits for the proxy to act on a settings change (it polls every 100 ms).
const WAIT: Duration = Duration::from_secs(5);

/// What a WebSocket test server saw on one connection.
#[derive(Debug, Clone, PartialEq)]
enum Saw {
    Handshake(String),
    Text(String),
    Binary(usize),
    Close(Option<(u16, String)>),
    Error(String),
    End,
}

/// A WebSocket echo server (TLS when given a config) recording what each connection saw.
struct WsServer {
    port: u16,
    saw: Arc<Mutex<Vec<Vec<Saw>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WsServer {
    async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> WsServer {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let saw: Arc<Mutex<Vec<Vec<Saw>>>> = Arc::default();
        let all = saw.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    continue;
                };
                let i = {
                    let mut a = all.lock().unwrap();
                    a.push(Vec::new());
                    a.len() - 1
                };
                let (all, tls) = (all.clone(), tls.clone());
                tokio::spawn(async move {
                    let note = |s: Saw| all.lock().unwrap()[i].push(s);
                    match tls {
                        Some(c) => {
                            let Ok(t) = tokio_rustls::TlsAcceptor::from(c).accept(s).await else {
                                note(Saw::Error("TLS".into()));
                                return;
                            };
                            echo(t, &note).await;
                        }
                        None => echo(s, &note).await,
                    }
                });
            }
        });
        WsServer { port, saw, task }
    }

    fn conn(&self, i: usize) -> Vec<Saw> {
        self.saw.lock().unwrap().get(i).cloned().unwrap_or_default()
    }

    fn count(&self) -> usize {
        self.saw.lock().unwrap().len()
    }

    /// Waits until connection `i` has ended, and returns what it saw.
    async fn ended(&self, i: usize) -> Vec<Saw> {
        let t = tokio::time::Instant::now();
        loop {
            let c = self.conn(i);
            if c.last() == Some(&Saw::End) || t.elapsed() > WAIT {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One server connection: the handshake's headers recorded, text echoed, binary counted; the
/// text "split N MS" makes the server write the first N bytes of a 100 000-byte binary frame
/// itself, and the rest MS milliseconds later, so that the proxy is caught with a frame in flight.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(s: S, note: &impl Fn(Saw)) {
    let head = Arc::new(Mutex::new(String::new()));
    let h = head.clone();
    // The callback's signature is tungstenite's.
    #[allow(clippy::result_large_err)]
    let cb = move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                   resp: tokio_tungstenite::tungstenite::handshake::server::Response| {
        let mut d = format!("{} {}\n", req.method(), req.uri());
        for (k, v) in req.headers() {
            d.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        *h.lock().unwrap() = d;
        Ok(resp)
    };
    let mut ws = match tokio_tungstenite::accept_hdr_async(s, cb).await {
        Ok(ws) => ws,
        Err(e) => {
            note(Saw::Error(e.to_string()));
            return;
        }
    };
    note(Saw::Handshake(head.lock().unwrap().clone()));
    while let Some(m) = ws.next().await {
        match m {
            Ok(Message::Text(t)) => {
                let t = t.to_string();
                note(Saw::Text(t.clone()));
                if let Some(secret) = t.strip_prefix("fragments ") {
                    // The secret back in a message cut in two frames, inside the secret.
                    let (a, b) = secret.split_at(10);
                    let mut f = raw_frame(false, 0x1, format!("key {a}").as_bytes(), None);
                    f.extend_from_slice(&raw_frame(true, 0x0, b.as_bytes(), None));
                    ws.get_mut().write_all(&f).await.unwrap();
                    ws.get_mut().flush().await.unwrap();
                } else if let Some(args) = t.strip_prefix("split ") {
                    let (n, ms) = args.split_once(' ').unwrap();
                    let (n, ms): (usize, u64) = (n.parse().unwrap(), ms.parse().unwrap());
                    let f = binary_frame(&vec![b'z'; 100_000], None);
                    ws.get_mut().write_all(&f[..n]).await.unwrap();
                    ws.get_mut().flush().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let _ = ws.get_mut().write_all(&f[n..]).await;
                    let _ = ws.get_mut().flush().await;
                } else if ws.send(Message::text(format!("echo: {t}"))).await.is_err() {
                    break;
                }
            }
            Ok(Message::Binary(b)) => note(Saw::Binary(b.len())),
            Ok(Message::Close(c)) => {
                note(Saw::Close(
                    c.map(|c| (u16::from(c.code), c.reason.to_string())),
                ));
            }
            Ok(_) => {}
            Err(e) => {
                note(Saw::Error(e.to_string()));
                break;
            }
        }
    }
    note(Saw::End);
}

/// One frame, written by hand (RFC 6455 §5.2), payloads under 126 bytes.
fn raw_frame(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
    f.push(if mask.is_some() { 0x80 } else { 0 } | payload.len() as u8);
    let mut p = payload.to_vec();
    if let Some(k) = mask {
        f.extend_from_slice(&k);
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= k[i % 4];
        }
    }
    f.extend_from_slice(&p);
    f
}

/// One binary frame, written by hand (to send part of it).
fn binary_frame(payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    use tokio_tungstenite::tungstenite::protocol::frame::{Frame, coding::Data, coding::OpCode};
    let mut f = Frame::message(payload.to_vec(), OpCode::Data(Data::Binary), true);
    f.header_mut().mask = mask;
    let mut out = Vec::new();
    f.format(&mut out).unwrap();
    out
}

/// A proxy in filter mode with `allow`, names resolving to this machine, upstream roots `roots`.
async fn proxy(allow: &[String], injections: Vec<Injection>, roots: Option<&str>) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    let s = handler_sandbox::egress::Settings {
        enforcement: handler_contracts::sandbox::Enforcement::Enforce,
        allow: allow
            .iter()
            .map(|a| AllowEntry::parse(a).unwrap())
            .collect(),
    };
    handler_core::runtime::egress::write_settings(&settings, &s).unwrap();
    let mut roots_files = vec![];
    if let Some(pem) = roots {
        let p = dir.path().join("roots.pem");
        std::fs::write(&p, pem).unwrap();
        roots_files.push(p.to_string_lossy().into());
    }
    let ip = host_ip();
    let resolve: BTreeMap<String, std::net::IpAddr> =
        ["ws.test", "keep.test", "api.test", "plain.test"]
            .iter()
            .map(|n| (n.to_string(), ip))
            .collect();
    let events = Collected::default();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files,
        injections,
        host_addresses: vec![],
        resolve,
        control_socket: None,
    };
    let running = handler_core::runtime::egress::start(config, events.events())
        .await
        .unwrap();
    Proxy {
        running,
        dir,
        events,
    }
}

/// Reads an HTTP response head, byte by byte (nothing after it).
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// A ws:// connection through the proxy: the handshake in absolute form (as a forward proxy
/// gets it), then the stream handed to tungstenite as a client. `Err` holds the refusal's head.
async fn ws_via(
    proxy: std::net::SocketAddr,
    authority: &str,
    path: &str,
) -> Result<WebSocketStream<TcpStream>, String> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    s.write_all(
        format!(
            "GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = read_head(&mut s).await;
    if !head.starts_with("HTTP/1.1 101") {
        return Err(head);
    }
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    assert!(
        head.to_ascii_lowercase().contains(&format!(
            "sec-websocket-accept: {}",
            accept.to_ascii_lowercase()
        )),
        "{head}"
    );
    Ok(WebSocketStream::from_raw_socket(s, Role::Client, None).await)
}

/// Sends `text` and expects the server's echo.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>, text: &str) {
    ws.send(Message::text(text)).await.unwrap();
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("an echo in time")
        .expect("open")
        .expect("a message");
    assert_eq!(m, Message::text(format!("echo: {text}")));
}

/// The next message, which must be a close frame 1012 "egress policy changed"; then the end.
async fn expect_1012<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) {
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("a close frame in time")
        .expect("a message before the end")
        .expect("a valid (unmasked) frame");
    let Message::Close(Some(CloseFrame { code, reason })) = m else {
        panic!("expected a close frame, got {m:?}")
    };
    assert_eq!(code, CloseCode::Restart);
    assert_eq!(u16::from(code), SERVICE_RESTART);
    assert_eq!(reason.as_str(), POLICY_CHANGED);
    // Then the connection ends (the client's answering close may or may not get through).
    let end = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("the connection ended in time");
    assert!(
        matches!(end, None | Some(Err(_))),
        "nothing after the close: {end:?}"
    );
}

fn server_closed_with_1012(saw: &[Saw]) -> bool {
    saw.contains(&Saw::Close(Some((1012, POLICY_CHANGED.into()))))
}

#[tokio::test]
async fn a_ws_connection_through_the_proxy_is_closed_with_1012_when_its_host_is_dropped() {
    let server = WsServer::start(None).await;
    let (dropped, kept) = (
        format!("ws.test:{}", server.port),
        format!("keep.test:{}", server.port),
    );
    let p = proxy(&[dropped.clone(), kept.clone()], vec![], None).await;

    let mut a = ws_via(p.addr(), &dropped, "/chat").await.unwrap();
    round_trip(&mut a, "hello").await;
    round_trip(&mut a, "again").await;
    let mut b = ws_via(p.addr(), &kept, "/chat").await.unwrap();
    round_trip(&mut b, "kept").await;
    assert_eq!(server.count(), 2);
    let Saw::Handshake(h) = &server.conn(0)[0] else {
        panic!("{:?}", server.conn(0))
    };
    assert!(h.starts_with("GET /chat\n"), "origin form upstream: {h}");
    assert!(h.contains("upgrade: websocket"), "{h}");

    p.set("enforce", &[&kept]);
    expect_1012(&mut a).await;
    let saw = server.ended(0).await;
    assert!(
        server_closed_with_1012(&saw),
        "the server got a masked close 1012: {saw:?}"
    );
    assert!(!saw.iter().any(|s| matches!(s, Saw::Error(_))), "{saw:?}");

    // The connection to the host still allowed stays open and works.
    round_trip(&mut b, "still here").await;
    assert!(!server.conn(1).contains(&Saw::End));
    // A new connection to the dropped host is refused.
    let refused = ws_via(p.addr(), &dropped, "/chat").await.unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        p.events
            .lines()
            .iter()
            .any(|l| l.contains(&format!(r#""decision":"denied","host":"{dropped}""#))),
        "{:?}",
        p.events.lines()
    );
    assert_eq!(server.count(), 2, "nothing reached the server");
    // A close by the client goes through as it is, and the relay ends with both sides.
    b.close(None).await.unwrap();
    let reply = tokio::time::timeout(WAIT, b.next()).await.expect("in time");
    assert!(
        matches!(reply, Some(Ok(Message::Close(None)))),
        "the server's answering close: {reply:?}"
    );
    let end = tokio::time::timeout(WAIT, b.next())
        .await
        .expect("ended in time");
    assert!(matches!(end, None | Some(Err(_))), "{end:?}");
    let saw = server.ended(1).await;
    assert!(
        saw.contains(&Saw::Close(None)) && saw.last() == Some(&Saw::End),
        "{saw:?}"
    );
}

#[tokio::test]
async fn a_server_frame_in_flight_at_the_change_arrives_whole_before_the_1012() {
    let server = WsServer::start(None).await;
    let target = format!("ws.test:{}", server.port);
    let p = proxy(std::slice::from_ref(&target), vec![], None).await;
    let mut ws = ws_via(p.addr(), &target, "/").await.unwrap();
    round_trip(&mut ws, "hi").await;
    // The server writes 1000 bytes of a 100 000-byte binary frame now, the rest 1 s later.
    ws.send(Message::text("split 1000 1000")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.set("enforce", &[]);
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("in time")
        .expect("a message")
        .expect("valid frames");
    assert_eq!(m, Message::binary(vec![b'z'; 100_000]), "whole, not cut");
    expect_1012(&mut ws).await;
    let saw = server.ended(0).await;
    assert!(server_closed_with_1012(&saw), "{saw:?}");
}

#[tokio::test]
async fn a_client_frame_in_flight_at_the_change_reaches_the_server_whole_before_the_1012() {
    let server = WsServer::start(None).await;
    let target = format!("ws.test:{}", server.port);
    let p = proxy(std::slice::from_ref(&target), vec![], None).await;
    let mut ws = ws_via(p.addr(), &target, "/").await.unwrap();
    round_trip(&mut ws, "hi").await;
    // 7 bytes of a masked 50 000-byte binary frame, written by hand.
    let up = binary_frame(&[b'u'; 50_000], Some([1, 2, 3, 4]));
    ws.get_mut().write_all(&up[..7]).await.unwrap();
    ws.get_mut().flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.set("enforce", &[]);
    // Well past the proxy's poll: the change is seen while the frame is in flight.
    tokio::time::sleep(Duration::from_millis(600)).await;
    ws.get_mut().write_all(&up[7..]).await.unwrap();
    ws.get_mut().flush().await.unwrap();
    expect_1012(&mut ws).await;
    let saw = server.ended(0).await;
    let bin = saw.iter().position(|s| *s == Saw::Binary(50_000));
    let close = saw
        .iter()
        .position(|s| *s == Saw::Close(Some((1012, POLICY_CHANGED.into()))));
    assert!(
        matches!((bin, close), (Some(b), Some(c)) if b < c),
        "the whole frame, then the masked close: {saw:?}"
    );
}

const OTHER_PHANTOM: &str = "tok-Zz99Yy88Xx77Ww66Vv55Uu44Tt33";
const OTHER_VALUE: &str = "tok-Aa11Bb22Cc33Dd44Ee55Ff66Gg77";

/// A TLS WebSocket server named api.test and keep.test; a proxy allowing both, with an injection
/// for each (PHANTOM → VALUE towards api.test, OTHER_PHANTOM → OTHER_VALUE towards keep.test),
/// both swapped in messages too.
async fn wss_world() -> (WsServer, String, String, Proxy) {
    wss_world_with(true).await
}

/// [`wss_world`], api.test's injection swapped in messages only when `body` (decision 0033).
async fn wss_world_with(body: bool) -> (WsServer, String, String, Proxy) {
    let ca = TestCa::new();
    let server = WsServer::start(Some(ca.server_config(&["api.test", "keep.test"]))).await;
    let api = format!("api.test:{}", server.port);
    let keep = format!("keep.test:{}", server.port);
    let injection = |name: &str, phantom: &str, value: &str, host: &str| Injection {
        name: name.into(),
        phantom: phantom.into(),
        value: value.into(),
        hosts: vec![AllowEntry::parse(host).unwrap()],
        body,
    };
    let injections = vec![
        injection("providers/x/apiKey", PHANTOM, VALUE, &api),
        injection("bindings/b/token", OTHER_PHANTOM, OTHER_VALUE, &keep),
    ];
    let p = proxy(&[api.clone(), keep.clone()], injections, Some(&ca.pem)).await;
    (server, api, keep, p)
}

/// A wss:// connection to `authority` (api.test or keep.test) through a CONNECT tunnel the proxy
/// decrypts, the handshake carrying PHANTOM in the query and an Authorization header.
async fn wss_via(
    p: &Proxy,
    authority: &str,
) -> WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>> {
    let Connect::Open(tunnel) = connect(p.addr(), authority).await else {
        panic!("CONNECT refused")
    };
    let host = authority.split(':').next().unwrap().to_string();
    let tls = client_tls(&[p.ca()])
        .connect(
            rustls::pki_types::ServerName::try_from(host).unwrap(),
            tunnel,
        )
        .await
        .expect("the proxy's leaf");
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("wss://{authority}/v1/realtime?key={PHANTOM}"),
    )
    .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {PHANTOM}").parse().unwrap(),
    );
    req.headers_mut().insert(
        "sec-websocket-extensions",
        "permessage-deflate; client_max_window_bits"
            .parse()
            .unwrap(),
    );
    let (ws, resp) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

#[tokio::test]
async fn a_wss_connection_in_a_decrypted_tunnel_has_its_secrets_swapped_and_is_closed_with_1012() {
    let (server, api, keep, p) = wss_world().await;
    let mut ws = wss_via(&p, &api).await;
    round_trip(&mut ws, "over tls").await;
    let Saw::Handshake(h) = &server.conn(0)[0] else {
        panic!("{:?}", server.conn(0))
    };
    assert!(h.contains(&format!("authorization: Bearer {VALUE}")), "{h}");
    assert!(h.contains(&format!("key={VALUE}")), "{h}");
    assert!(!h.contains(PHANTOM), "{h}");
    assert!(
        !h.contains("sec-websocket-extensions"),
        "no compression, so that frames can be swapped: {h}"
    );
    assert!(
        p.events.has(&format!(
            r#"handler-egress {{"decision":"injected","host":"{api}","secret":"providers/x/apiKey"}}"#
        )),
        "{:?}",
        p.events.lines()
    );

    // In messages too: the server reads the value, its echo comes back with the phantom.
    let text = format!(r#"{{"type":"auth","key":"{PHANTOM}"}}"#);
    ws.send(Message::text(text.clone())).await.unwrap();
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("a message");
    assert_eq!(
        m,
        Message::text(format!("echo: {text}")),
        "the phantom again"
    );
    let sent = format!(r#"{{"type":"auth","key":"{VALUE}"}}"#);
    assert!(
        server.conn(0).contains(&Saw::Text(sent)),
        "the server read the value: {:?}",
        server.conn(0)
    );

    p.set("enforce", &[&keep]);
    expect_1012(&mut ws).await;
    let saw = server.ended(0).await;
    assert!(server_closed_with_1012(&saw), "{saw:?}");
    assert!(
        !saw.iter()
            .any(|s| matches!(s, Saw::Text(t) if t.contains(PHANTOM))),
        "{saw:?}"
    );
}

#[tokio::test]
async fn a_websocket_message_carrying_another_hosts_phantom_is_cut_with_a_leak_event() {
    let (server, api, _keep, p) = wss_world().await;
    let mut ws = wss_via(&p, &api).await;
    round_trip(&mut ws, "first").await;
    ws.send(Message::text(format!("exfiltrate {OTHER_PHANTOM}")))
        .await
        .unwrap();
    let end = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("cut in time");
    assert!(
        matches!(end, None | Some(Err(_))),
        "the connection was cut: {end:?}"
    );
    let saw = server.ended(0).await;
    assert!(
        !saw.iter()
            .any(|s| matches!(s, Saw::Text(t) if t.contains("exfiltrate"))),
        "the message never reached the server: {saw:?}"
    );
    assert!(
        p.events.has(&format!(
            r#"handler-egress {{"decision":"leak","host":"{api}","secret":"bindings/b/token"}}"#
        )),
        "{:?}",
        p.events.lines()
    );
}

#[tokio::test]
async fn a_kept_alive_http_connection_to_a_dropped_host_is_closed() {
    let http = Server::start(None).await;
    let (dropped, kept) = (
        format!("plain.test:{}", http.port),
        format!("keep.test:{}", http.port),
    );
    let p = proxy(&[dropped.clone(), kept.clone()], vec![], None).await;
    let open = |authority: String| {
        let addr = p.addr();
        async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let (mut c, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            let uri = format!("http://{authority}/");
            assert_eq!(send(&mut c, get(&uri, &authority)).await.status, 200);
            (c, task, uri)
        }
    };
    let (_a, a_conn, _) = open(dropped.clone()).await;
    let (mut b, b_conn, b_uri) = open(kept.clone()).await;
    p.set("enforce", &[&kept]);
    tokio::time::timeout(WAIT, a_conn)
        .await
        .expect("the connection to the dropped host was closed")
        .unwrap()
        .unwrap();
    assert!(!b_conn.is_finished(), "the other connection stays open");
    assert_eq!(send(&mut b, get(&b_uri, &kept)).await.status, 200);
}

#[test]
fn the_frame_tracker_agrees_with_tungstenite_on_where_frames_end() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for (i, n) in [0usize, 1, 125, 126, 127, 65_535, 65_536, 70_001]
        .into_iter()
        .enumerate()
    {
        let mut f = Frame::message(vec![i as u8; n], OpCode::Data(Data::Binary), i % 3 != 0);
        if i % 2 == 0 {
            f.header_mut().mask = Some([i as u8, 0x55, 0xAA, 0x0F]);
        }
        f.format(&mut bytes).unwrap();
        ends.push(bytes.len());
        Frame::ping(vec![1, 2, 3]).format(&mut bytes).unwrap();
        ends.push(bytes.len());
    }
    Frame::close(Some(CloseFrame {
        code: CloseCode::Restart,
        reason: "bye".into(),
    }))
    .format(&mut bytes)
    .unwrap();
    ends.push(bytes.len());
    for chunk in [1usize, 2, 3, 7, 13, 4096] {
        let mut t = FrameTracker::new();
        let mut found = Vec::new();
        for (k, c) in bytes.chunks(chunk).enumerate() {
            let mut at = k * chunk;
            let mut rest = c;
            while !rest.is_empty() {
                if t.at_boundary() {
                    t.feed(&rest[..1]);
                    (at, rest) = (at + 1, &rest[1..]);
                    continue;
                }
                let n = t.to_boundary(rest);
                (at, rest) = (at + n, &rest[n..]);
                if t.at_boundary() {
                    found.push(at);
                }
            }
        }
        assert_eq!(found, ends, "chunks of {chunk}");
        assert!(t.close_seen());
    }
}

#[tokio::test]
async fn a_message_to_the_model_host_carries_the_phantom_unless_its_injection_opts_in() {
    let (server, api, _keep, p) = wss_world_with(false).await;
    let mut ws = wss_via(&p, &api).await;
    let text = format!("repeat {PHANTOM}");
    ws.send(Message::text(text.clone())).await.unwrap();
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(m, Message::text(format!("echo: {text}")));
    assert!(
        server.conn(0).contains(&Saw::Text(text)),
        "{:?}",
        server.conn(0)
    );
    let Saw::Handshake(h) = &server.conn(0)[0] else {
        panic!("{:?}", server.conn(0))
    };
    assert!(
        h.contains(&format!("authorization: Bearer {VALUE}")),
        "the handshake still: {h}"
    );
}

#[tokio::test]
async fn secrets_split_between_the_frames_of_a_message_are_swapped_both_ways() {
    let (server, api, _keep, p) = wss_world().await;
    let mut ws = wss_via(&p, &api).await;
    round_trip(&mut ws, "first").await;
    // From the server: the value cut in two frames reaches the process as the phantom.
    ws.send(Message::text(format!("fragments {VALUE}")))
        .await
        .unwrap();
    let m = tokio::time::timeout(WAIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        m,
        Message::text(format!("key {PHANTOM}")),
        "never the value"
    );
    // From the client: a phantom cut in two frames (a ping between) reaches the server as the
    // value.
    let (k1, k2) = ([1, 2, 3, 4], [9, 8, 7, 6]);
    let mut f = raw_frame(
        false,
        0x1,
        format!("auth {}", &PHANTOM[..12]).as_bytes(),
        Some(k1),
    );
    f.extend_from_slice(&raw_frame(true, 0x9, b"hi", Some(k2)));
    f.extend_from_slice(&raw_frame(true, 0x0, &PHANTOM.as_bytes()[12..], Some(k2)));
    ws.get_mut().write_all(&f).await.unwrap();
    ws.get_mut().flush().await.unwrap();
    let want = Saw::Text(format!("auth {VALUE}"));
    let deadline = std::time::Instant::now() + WAIT;
    while !server.conn(0).contains(&want) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.conn(0).contains(&want), "{:?}", server.conn(0));
}
