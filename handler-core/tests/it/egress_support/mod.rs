//! Test support for the egress proxy tests: a test CA and real HTTPS/HTTP servers that record
//! what they receive and echo it back, and clients that go through the proxy (CONNECT + TLS,
//! absolute-form http://), all over real sockets and real TLS.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use handler_contracts::sandbox::EgressEvent;
use handler_core::runtime::egress::{Events, Running};
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA for the test servers, as a company CA would be (the proxy is told to trust it).
pub(crate) struct TestCa {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: String,
}

impl TestCa {
    pub(crate) fn new() -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "Test servers CA");
        let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        let pem = issuer.pem();
        TestCa { issuer, pem }
    }

    pub(crate) fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    pub(crate) fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let p = CertificateParams::new(
            names
                .iter()
                .map(std::string::ToString::to_string)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let c = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        Arc::new(c)
    }
}

/// What a test server received: one text dump per request (method, target, headers, body).
#[derive(Clone, Default)]
pub(crate) struct Received(pub Arc<Mutex<Vec<String>>>);

impl Received {
    pub(crate) fn all(&self) -> String {
        self.0.lock().unwrap().join("\n---\n")
    }
}

async fn echo(
    req: Request<Incoming>,
    rec: Received,
    secret_to_echo: Arc<Mutex<String>>,
) -> Result<Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(std::string::ToString::to_string)
        .unwrap_or_default();
    if path.starts_with("/sse") {
        rec.0
            .lock()
            .unwrap()
            .push(format!("{} {}", parts.method, path));
        let secret = secret_to_echo.lock().unwrap().clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            for i in 0..3 {
                let ev = format!("data: event {i} {secret}\n\n");
                if tx.send(Ok(Frame::data(Bytes::from(ev)))).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
        let body = StreamBody::new(tokio_stream_from(rx)).boxed();
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap());
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        let n: usize = n.parse().unwrap_or(0);
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; n])).boxed()));
    }
    let body = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    if path.starts_with("/reverse") {
        // As a model asked to would: the body it received, reversed.
        rec.0.lock().unwrap().push(format!(
            "{} {}\n\n{}",
            parts.method,
            path,
            String::from_utf8_lossy(&body)
        ));
        let mut back = body.to_vec();
        back.reverse();
        return Ok(Response::new(Full::new(Bytes::from(back)).boxed()));
    }
    if path.starts_with("/encoded") {
        // The secret it echoes, base64-encoded and inside a JSON string.
        use base64::Engine as _;
        let secret = secret_to_echo.lock().unwrap().clone();
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("user:{secret}"));
        let json = serde_json::json!({ "b64": b64, "json": format!("say \"{secret}\"") });
        return Ok(Response::new(
            Full::new(Bytes::from(json.to_string())).boxed(),
        ));
    }
    if path.starts_with("/gzip") {
        // Compressed although not asked for (the proxy drops Accept-Encoding).
        let secret = secret_to_echo.lock().unwrap().clone();
        return Ok(Response::builder()
            .header("content-encoding", "gzip")
            .body(Full::new(Bytes::from(format!("not really gzip {secret}"))).boxed())
            .unwrap());
    }
    let mut dump = format!("{} {}\n", parts.method, path);
    for (k, v) in &parts.headers {
        dump.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    dump.push('\n');
    dump.push_str(&String::from_utf8_lossy(&body));
    rec.0.lock().unwrap().push(dump.clone());
    let secret = secret_to_echo.lock().unwrap().clone();
    Ok(Response::builder()
        .header("x-echo-secret", secret.clone())
        .body(Full::new(Bytes::from(format!("{dump}\nsecret={secret}\n"))).boxed())
        .unwrap())
}

/// Turns a channel into a stream of frames.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A test server (HTTPS when given a TLS config) on 0.0.0.0, recording requests.
pub(crate) struct Server {
    pub port: u16,
    pub received: Received,
    /// What the server puts in its answers (to check it is swapped back to the phantom).
    pub echo_secret: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub(crate) async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Server {
        Self::start_with(tls, false).await
    }

    /// [`Server::start`], its sockets with TCP_NODELAY when `nodelay` (as API servers set it).
    pub(crate) async fn start_with(
        tls: Option<Arc<rustls::ServerConfig>>,
        nodelay: bool,
    ) -> Server {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Received::default();
        let echo_secret = Arc::new(Mutex::new(String::new()));
        let (rec, sec) = (received.clone(), echo_secret.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    continue;
                };
                if nodelay {
                    let _ = s.set_nodelay(true);
                }
                let (rec, sec, tls) = (rec.clone(), sec.clone(), tls.clone());
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |r| echo(r, rec.clone(), sec.clone()));
                    let b = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(c) => {
                            let Ok(t) = tokio_rustls::TlsAcceptor::from(c).accept(s).await else {
                                return;
                            };
                            let _ = b.serve_connection(TokioIo::new(t), svc).await;
                        }
                        None => {
                            let _ = b.serve_connection(TokioIo::new(s), svc).await;
                        }
                    }
                });
            }
        });
        Server {
            port,
            received,
            echo_secret,
            task,
        }
    }
}

/// This machine's address towards the outside (not loopback), else loopback.
pub(crate) fn host_ip() -> IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    match s
        .connect("192.0.2.200:9")
        .or_else(|_| s.connect("10.255.255.1:9"))
    {
        Ok(()) => s.local_addr().unwrap().ip(),
        Err(_) => "127.0.0.1".parse().unwrap(),
    }
}

/// Events collected by a test.
#[derive(Clone, Default)]
pub(crate) struct Collected(pub Arc<Mutex<Vec<EgressEvent>>>);

impl Collected {
    pub(crate) fn events(&self) -> Events {
        let me = self.clone();
        Events::with(move |e| me.0.lock().unwrap().push(e.clone()))
    }
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(handler_contracts::sandbox::EgressEvent::to_line)
            .collect()
    }
    pub(crate) fn has(&self, line: &str) -> bool {
        self.lines().iter().any(|l| l == line)
    }
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// The answer to a CONNECT: the open tunnel, or the refusal's status, headers and body.
pub(crate) enum Connect {
    Open(TcpStream),
    Refused {
        status: u16,
        head: String,
        body: String,
    },
}

pub(crate) async fn connect(proxy: SocketAddr, target: &str) -> Connect {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    // As HTTP clients do (curl, Node, Python's http.client): no Nagle delay on small writes.
    s.set_nodelay(true).unwrap();
    let head = test_support::connect::connect_head(&mut s, target).await;
    let status: u16 = head[9..12].parse().unwrap();
    if status == 200 {
        return Connect::Open(s);
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.unwrap();
    Connect::Refused {
        status,
        head,
        body: String::from_utf8(body).unwrap(),
    }
}

/// A TLS client trusting these roots, http/1.1.
pub(crate) fn client_tls(roots: &[CertificateDer<'static>]) -> tokio_rustls::TlsConnector {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let mut c = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(c))
}

pub(crate) fn pem_der(pem: &str) -> CertificateDer<'static> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
}

/// A response as the client saw it.
#[derive(Debug)]
pub(crate) struct Got {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
    /// The issuer's DER of the certificate the server presented (HTTPS).
    pub peer_cert: Option<CertificateDer<'static>>,
}

pub(crate) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Opens a tunnel and TLS inside it (SNI `sni`), ready for requests.
pub(crate) async fn https_session(
    proxy: SocketAddr,
    target: &str,
    sni: &str,
    roots: &[CertificateDer<'static>],
) -> Result<(Sender, Option<CertificateDer<'static>>), String> {
    let Connect::Open(s) = connect(proxy, target).await else {
        return Err("CONNECT refused".into());
    };
    let tls = client_tls(roots)
        .connect(ServerName::try_from(sni.to_string()).unwrap(), s)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned());
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok((sender, peer))
}

pub(crate) async fn send(sender: &mut Sender, req: Request<Full<Bytes>>) -> Got {
    sender.ready().await.unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
        peer_cert: None,
    }
}

/// One plain http:// request through the proxy (absolute form).
pub(crate) async fn http_via(proxy: SocketAddr, req: Request<Full<Bytes>>) -> Got {
    let s = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    send(&mut sender, req).await
}

pub(crate) fn get(uri: &str, host: &str) -> Request<Full<Bytes>> {
    Request::get(uri)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Keeps a proxy alive for a test.
pub(crate) struct Proxy {
    pub running: Running,
    pub dir: tempfile::TempDir,
    pub events: Collected,
}

impl Proxy {
    pub(crate) fn addr(&self) -> SocketAddr {
        self.running.addr()
    }
    pub(crate) fn ca(&self) -> CertificateDer<'static> {
        pem_der(&self.running.ready.ca)
    }
    pub(crate) fn settings_path(&self) -> std::path::PathBuf {
        self.dir.path().join("settings.json")
    }
    pub(crate) fn set(&self, enforcement: &str, allow: &[&str]) {
        let s = handler_sandbox::egress::Settings {
            enforcement: serde_json::from_value(serde_json::json!(enforcement)).unwrap(),
            allow: allow
                .iter()
                .map(|a| handler_contracts::allow::AllowEntry::parse(a).unwrap())
                .collect(),
        };
        handler_core::runtime::egress::write_settings(&self.settings_path(), &s).unwrap();
    }
}
