//! The proxy server: an HTTP/1.1 forward proxy for http:// requests and CONNECT tunnels. Every
//! request is judged by the pure egress functions against the settings in force when it comes;
//! tunnels to an injection's hosts are decrypted (the proxy's CA) to swap phantoms and values,
//! every other tunnel is relayed untouched. WebSocket upgrades the proxy sees (ws://, and wss://
//! in a decrypted tunnel) are passed on and relayed frame by frame. Open tunnels and connections
//! are closed when a policy change no longer allows their destination, WebSockets with a close
//! frame 1012 on each side.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use handler_contracts::sandbox::EgressDecision;
use handler_sandbox::egress::authority::{self, Authority, Mismatch};
use handler_sandbox::egress::hello::{self, Start};
use handler_sandbox::egress::judge::{self, EGRESS_HEADER, Verdict};
use handler_sandbox::egress::{Hits, ProxyMode, Rules, rebind};
use http_body_util::BodyExt as _;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use crate::runtime::egress::body::{LeakSlot, ProxyBody, Rewriting, full};
use crate::runtime::egress::ca::Ca;
use crate::runtime::egress::events::Events;
use crate::runtime::egress::resolve::Resolver;
use crate::runtime::egress::settings::LiveSettings;
use crate::runtime::egress::{relay, ws};

/// Request bodies up to this size are read whole before they leave, so a leak is refused with a
/// clean 403 before anything was sent; longer ones are streamed and cut at the leak.
pub const LEAK_CHECK_BUFFER: u64 = 64 * 1024;

/// What every connection shares.
pub struct Shared {
    /// Whether the proxy filters or only reports.
    pub mode: ProxyMode,
    /// The live settings (filter mode), re-read when the file changes.
    pub live: Option<Arc<LiveSettings>>,
    /// The injections, with their phantoms and values: the configuration's, and a machine's
    /// live execs' (decision 0166).
    pub injections: Arc<crate::runtime::egress::control::LiveInjections>,
    /// The proxy's CA, minting leaves for decrypted tunnels.
    pub ca: Ca,
    /// The TLS client configuration towards upstreams (the roots).
    pub tls: Arc<rustls::ClientConfig>,
    /// The proxy's resolver (its fixed answers, then DNS).
    pub resolver: Resolver,
    /// The addresses the rebinding guard refuses for a name.
    pub host_addresses: Vec<IpAddr>,
    /// Where decisions and log lines go.
    pub events: Events,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

type SettingsRx = watch::Receiver<Arc<crate::runtime::egress::settings::SettingsRead>>;

/// Why no upstream connection was had.
#[derive(Debug, thiserror::Error)]
enum UpstreamError {
    #[error("cannot reach {target}: {source}")]
    Connect {
        target: Authority,
        source: std::io::Error,
    },
    #[error("{0}: not a TLS server name")]
    Name(String),
    #[error("TLS to {target} failed: {source}")]
    Tls {
        target: Authority,
        source: std::io::Error,
    },
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

/// The destinations a connection holds open, re-judged at each policy change.
#[derive(Clone, Default)]
struct Held(Arc<Mutex<HashSet<Authority>>>);

impl Held {
    fn add(&self, a: &Authority) {
        self.0.lock().expect("held").insert(a.clone());
    }
}

impl Shared {
    /// Judges a destination now: the verdict, and the allow-list in force.
    async fn judge(
        &self,
        target: &Authority,
    ) -> (Verdict, Vec<handler_contracts::allow::AllowEntry>) {
        match (&self.mode, &self.live) {
            (ProxyMode::Filter, Some(live)) => match &*live.current().await {
                Ok(s) => (
                    judge::judge(&s.allow, s.enforcement, &target.host, target.port),
                    s.allow.clone(),
                ),
                Err(_) => (Verdict::Denied, Vec::new()),
            },
            _ => (Verdict::Allowed, Vec::new()),
        }
    }

    /// Judges a destination and reports it: the allow-list in force when it may go on, else
    /// the refusal. An IP literal naming a loopback, link-local or host address must be listed
    /// exactly, in log-only too (decision 0035).
    async fn admit(
        &self,
        target: &Authority,
    ) -> Result<Vec<handler_contracts::allow::AllowEntry>, Response<ProxyBody>> {
        let (verdict, allow) = self.judge(target).await;
        if verdict.passes()
            && self.mode == ProxyMode::Filter
            && rebind::check_literal(&target.host, target.port, &allow, &self.host_addresses)
                .is_err()
        {
            self.events
                .emit(EgressDecision::Denied, &target.to_string(), None);
            return Err(plain(
                StatusCode::FORBIDDEN,
                "denied",
                &judge::literal_body(&target.to_string()),
            ));
        }
        self.report(verdict, target);
        if !verdict.passes() {
            return Err(denied(target));
        }
        Ok(allow)
    }

    fn report(&self, verdict: Verdict, target: &Authority) {
        if self.mode == ProxyMode::Filter {
            self.events
                .emit(verdict.decision(), &target.to_string(), None);
        }
    }

    fn report_hits(&self, hits: &Hits, target: &Authority) {
        for name in &hits.injected {
            self.events
                .emit(EgressDecision::Injected, &target.to_string(), Some(name));
        }
        for name in &hits.leaked {
            self.events
                .emit(EgressDecision::Leak, &target.to_string(), Some(name));
        }
    }

    /// Resolves once and picks the address to dial (the DNS-rebinding guard).
    async fn address(
        &self,
        target: &Authority,
        allow: &[handler_contracts::allow::AllowEntry],
    ) -> Result<SocketAddr, Response<ProxyBody>> {
        let resolved = self.resolver.lookup(&target.host).await.map_err(|e| {
            plain(
                StatusCode::BAD_GATEWAY,
                "unreachable",
                &format!("handler egress filter: {e}\n"),
            )
        })?;
        // Reporting mode filters nothing; the guard is the filter's.
        if self.mode == ProxyMode::Report {
            return resolved
                .first()
                .map(|ip| SocketAddr::new(*ip, target.port))
                .ok_or_else(|| {
                    plain(
                        StatusCode::BAD_GATEWAY,
                        "unreachable",
                        &format!("handler egress filter: {} has no address\n", target.host),
                    )
                });
        }
        match rebind::pick_address(
            &target.host,
            target.port,
            &resolved,
            allow,
            &self.host_addresses,
        ) {
            Ok(ip) => Ok(SocketAddr::new(ip, target.port)),
            Err(rebind::Rebinding::NoAddress { host }) => Err(plain(
                StatusCode::BAD_GATEWAY,
                "unreachable",
                &format!("handler egress filter: {host} has no address\n"),
            )),
            Err(rebind::Rebinding::Guarded { addr, .. }) => {
                self.events
                    .emit(EgressDecision::Denied, &target.to_string(), None);
                Err(plain(
                    StatusCode::FORBIDDEN,
                    "denied",
                    &judge::rebinding_body(&target.to_string(), &addr.to_string()),
                ))
            }
        }
    }

    /// Whether the policy now in `rx` still allows every held destination.
    fn still_allowed(&self, rx: &SettingsRx, held: &Held) -> bool {
        let s = rx.borrow();
        match &**s {
            Err(_) => held.0.lock().expect("held").is_empty(),
            Ok(s) => held
                .0
                .lock()
                .expect("held")
                .iter()
                .all(|a| judge::judge(&s.allow, s.enforcement, &a.host, a.port).passes()),
        }
    }

    /// Resolves when a policy change no longer allows one of `held` (never in report mode).
    async fn revoked(self: &Arc<Self>, held: &Held) {
        let Some(live) = &self.live else {
            return std::future::pending().await;
        };
        let mut rx = live.subscribe();
        // A change between the judgment and this subscription counts too.
        if !self.still_allowed(&rx, held) {
            return;
        }
        loop {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            if !self.still_allowed(&rx, held) {
                return;
            }
        }
    }
}

fn plain(status: StatusCode, tag: &'static str, body: &str) -> Response<ProxyBody> {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        HeaderName::from_static(EGRESS_HEADER),
        HeaderValue::from_static(tag),
    );
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn denied(target: &Authority) -> Response<ProxyBody> {
    plain(
        StatusCode::FORBIDDEN,
        "denied",
        &judge::denied_body(&target.to_string()),
    )
}

/// Serves the proxy on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                shared.events.log(&format!("accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move { serve_client(stream, shared).await });
    }
}

/// Serves the proxy on a unix socket (the sandbox's forwarder connects there) until dropped.
pub async fn serve_unix(listener: tokio::net::UnixListener, shared: Arc<Shared>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                shared.events.log(&format!("accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move { serve_client(stream, shared).await });
    }
}

async fn serve_client<S>(stream: S, shared: Arc<Shared>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let held = Held::default();
    let upstream = Upstream::default();
    let svc = {
        let (shared, held, upstream) = (shared.clone(), held.clone(), upstream.clone());
        service_fn(move |req| {
            let (shared, held, upstream) = (shared.clone(), held.clone(), upstream.clone());
            async move { Ok::<_, Infallible>(handle(req, shared, held, upstream).await) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    tokio::select! {
        _ = conn => {}
        _ = shared.revoked(&held) => {}
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    held: Held,
    upstream: Upstream,
) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        return connect(req, shared).await;
    }
    match (req.uri().scheme_str(), req.uri().authority()) {
        (Some("http"), Some(a)) => {
            let target = match Authority::parse(a.as_str(), Some(80)) {
                Ok(t) => t,
                Err(e) => {
                    return plain(
                        StatusCode::BAD_REQUEST,
                        "bad-request",
                        &format!("handler egress filter: {e}\n"),
                    );
                }
            };
            let host = req
                .headers()
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok());
            if let Err(m) = authority::check_forward(&target, host) {
                shared.events.emit(
                    EgressDecision::Denied,
                    &host
                        .and_then(|h| Authority::parse(h, Some(80)).ok())
                        .unwrap_or(target.clone())
                        .to_string(),
                    None,
                );
                return plain(
                    StatusCode::FORBIDDEN,
                    "mismatch",
                    &judge::mismatch_body(&m.to_string()),
                );
            }
            let allow = match shared.admit(&target).await {
                Ok(a) => a,
                Err(r) => return r,
            };
            let addr = match shared.address(&target, &allow).await {
                Ok(a) => a,
                Err(r) => return r,
            };
            held.add(&target);
            forward(req, &shared, &target, addr, false, &upstream).await
        }
        _ => plain(
            StatusCode::BAD_REQUEST,
            "bad-request",
            "handler egress filter: this is an HTTP proxy; send http:// requests in absolute form, or CONNECT host:port\n",
        ),
    }
}

async fn connect(mut req: Request<Incoming>, shared: Arc<Shared>) -> Response<ProxyBody> {
    let target = match req
        .uri()
        .authority()
        .map(|a| Authority::parse(a.as_str(), None))
    {
        Some(Ok(t)) => t,
        _ => {
            return plain(
                StatusCode::BAD_REQUEST,
                "bad-request",
                "handler egress filter: CONNECT needs host:port\n",
            );
        }
    };
    let allow = match shared.admit(&target).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let addr = match shared.address(&target, &allow).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let held = Held::default();
    held.add(&target);
    if shared.injections.injects_into(&target.host, target.port) {
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            tokio::select! {
                _ = injected_tunnel(TokioIo::new(upgraded), shared.clone(), target, addr) => {}
                _ = shared.revoked(&held) => {}
            }
        });
        return Response::new(full(Bytes::new()));
    }
    let server = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                "unreachable",
                &format!("handler egress filter: cannot reach {target}: {e}\n"),
            );
        }
    };
    let _ = server.set_nodelay(true);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        tokio::select! {
            _ = relayed_tunnel(upgraded, server, shared.clone(), target) => {}
            _ = shared.revoked(&held) => {}
        }
    });
    Response::new(full(Bytes::new()))
}

/// A tunnel that is not decrypted (decision 0034): its client's first bytes are read first. A
/// TLS ClientHello must name the CONNECT target (else a fatal alert, a `denied` event, the end);
/// TLS that agrees, and anything that is not TLS, is relayed with splice(2) (zero copy, else a
/// 64 KiB copy each way), the bytes read first handed on.
async fn relayed_tunnel(
    upgraded: hyper::upgrade::Upgraded,
    mut server: TcpStream,
    shared: Arc<Shared>,
    target: Authority,
) {
    let (mut client, mut first) = relay::Client::of(upgraded);
    if shared.mode == ProxyMode::Report {
        // An open sandbox's proxy filters nothing (it has its own route out anyway).
        let _ = relay::relay_client(client, &first, server).await;
        return;
    }
    let start = match peek_start(&mut client, &mut first, &mut server).await {
        Ok(s) => s,
        Err(_) => return,
    };
    if let Err(m) = hello::check_start(&target, &start) {
        let named = match &m {
            Mismatch::Sni { sni, .. } => Authority::parse(sni, Some(target.port))
                .map_or_else(|_| target.to_string(), |a| a.to_string()),
            _ => target.to_string(),
        };
        shared.events.emit(EgressDecision::Denied, &named, None);
        shared.events.log(&format!(
            "refused a tunnel: {m} (domain fronting is not allowed)"
        ));
        // A fatal TLS alert: unrecognized_name (112), or decode_error (50) for a ClientHello
        // that cannot be read.
        let code = if matches!(m, Mismatch::BadHello { .. }) {
            50
        } else {
            112
        };
        let _ = client
            .write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, code])
            .await;
        let _ = client.shutdown().await;
        return;
    }
    let _ = relay::relay_client(client, &first, server).await;
}

/// Reads the client's first bytes until `hello::classify` can tell what they are. If the server
/// speaks first, what it says goes to the client at once and the protocol is neither TLS nor
/// HTTP (whose clients speak first): nothing more is waited for.
async fn peek_start(
    client: &mut relay::Client,
    first: &mut Vec<u8>,
    server: &mut TcpStream,
) -> std::io::Result<Start> {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let start = hello::classify(first);
        if start != Start::NeedMore {
            return Ok(start);
        }
        if first.len() >= hello::MAX_HELLO {
            return Ok(Start::Other);
        }
        tokio::select! {
            r = client.read(&mut chunk) => match r? {
                // The client ended before it said enough: relay what there is.
                0 => return Ok(Start::Other),
                n => first.extend_from_slice(&chunk[..n]),
            },
            r = server.readable() => {
                r?;
                match server.try_read(&mut chunk) {
                    Ok(0) => return Ok(Start::Other),
                    Ok(n) => {
                        client.write_all(&chunk[..n]).await?;
                        return Ok(Start::Other);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// A tunnel to an injection's host, by its client's first byte (decision 0078): a TLS record
/// is decrypted ([`decrypted_tunnel`]); anything else is served as plain HTTP/1.1 — what undici's
/// `EnvHttpProxyAgent` (pi's client) sends through CONNECT to an `http://` origin — its requests
/// judged and rewritten as the forward proxy's `http://` ones and sent on without TLS.
async fn injected_tunnel(
    mut io: TokioIo<hyper::upgrade::Upgraded>,
    shared: Arc<Shared>,
    target: Authority,
    addr: SocketAddr,
) {
    let mut first = [0u8; 1];
    if !matches!(io.read(&mut first).await, Ok(1)) {
        return;
    }
    let (r, w) = tokio::io::split(io);
    let io = tokio::io::join(std::io::Cursor::new(first).chain(r), w);
    if first[0] == TLS_HANDSHAKE {
        decrypted_tunnel(io, shared, target, addr).await;
        return;
    }
    let upstream = Upstream::default();
    let svc = service_fn(move |req: Request<Incoming>| {
        let (shared, target, upstream) = (shared.clone(), target.clone(), upstream.clone());
        async move {
            let tunnel = TunnelTo {
                target,
                addr,
                tls: false,
            };
            Ok::<_, Infallible>(tunnel_request(req, shared, tunnel, upstream, None).await)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await;
}

/// The first byte of a TLS handshake record (a ClientHello).
const TLS_HANDSHAKE: u8 = 0x16;

/// Where a tunnel's requests go: its CONNECT target at the address judged, over TLS or not.
struct TunnelTo {
    target: Authority,
    addr: SocketAddr,
    tls: bool,
}

/// A tunnel to an injection's host: TLS ends here (a leaf for the CONNECT target), the requests
/// are rewritten and sent on over TLS to the address judged.
async fn decrypted_tunnel<IO>(io: IO, shared: Arc<Shared>, target: Authority, addr: SocketAddr)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let start = match LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await {
        Ok(s) => s,
        Err(e) => {
            shared.events.log(&format!(
                "TLS from the sandbox towards {target} failed: {e}"
            ));
            return;
        }
    };
    let sni = start.client_hello().server_name().map(str::to_string);
    let mismatch = authority::check_sni(&target, sni.as_deref()).err();
    // On a mismatch the handshake completes for the name the client asked for, so that it reads
    // a clear 403 rather than a certificate error.
    let cert_host = match (&mismatch, &sni) {
        (Some(_), Some(s)) => s.clone(),
        _ => target.host.clone(),
    };
    let config = match shared.ca.server_config(&cert_host) {
        Ok(c) => c,
        Err(e) => {
            shared.events.log(&e.to_string());
            return;
        }
    };
    let tls = match start.into_stream(config).await {
        Ok(t) => t,
        Err(e) => {
            shared.events.log(&format!(
                "TLS from the sandbox towards {target} failed: {e}"
            ));
            return;
        }
    };
    if let Some(m) = &mismatch {
        shared.events.emit(
            EgressDecision::Denied,
            &sni.as_deref()
                .map_or(target.to_string(), |s| format!("{s}:{}", target.port)),
            None,
        );
        shared.events.log(&m.to_string());
    }
    let upstream = Upstream::default();
    let svc = service_fn(move |req: Request<Incoming>| {
        let (shared, target, upstream, mismatch) = (
            shared.clone(),
            target.clone(),
            upstream.clone(),
            mismatch.clone(),
        );
        async move {
            let tunnel = TunnelTo {
                target,
                addr,
                tls: true,
            };
            Ok::<_, Infallible>(tunnel_request(req, shared, tunnel, upstream, mismatch).await)
        }
    });
    // With upgrades: a WebSocket in the tunnel goes on in its own task (`forward`), judged anew
    // at each policy change.
    let _ = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(tls), svc)
        .with_upgrades()
        .await;
}

/// One request inside a decrypted tunnel: refused (403) when the tunnel's TLS named another
/// server (`mismatch`) or its Host or URI names another than the CONNECT target, else forwarded.
async fn tunnel_request(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    tunnel: TunnelTo,
    upstream: Upstream,
    mismatch: Option<Mismatch>,
) -> Response<ProxyBody> {
    let TunnelTo { target, addr, tls } = tunnel;
    if let Some(m) = mismatch {
        return plain(
            StatusCode::FORBIDDEN,
            "mismatch",
            &judge::mismatch_body(&m.to_string()),
        );
    }
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok());
    if let Err(m) = authority::check_tunnel_request(
        &target,
        host,
        req.uri()
            .authority()
            .map(hyper::http::uri::Authority::as_str),
    ) {
        shared.events.emit(
            EgressDecision::Denied,
            &host
                .and_then(|h| Authority::parse(h, Some(443)).ok())
                .unwrap_or(target.clone())
                .to_string(),
            None,
        );
        return plain(
            StatusCode::FORBIDDEN,
            "mismatch",
            &judge::mismatch_body(&m.to_string()),
        );
    }
    forward(req, &shared, &target, addr, tls, &upstream).await
}

/// An upstream connection's request side, with the destination it was opened for.
type Kept = (
    Authority,
    hyper::client::conn::http1::SendRequest<ProxyBody>,
);

/// One kept-alive upstream connection per client connection or tunnel.
#[derive(Clone, Default)]
struct Upstream(Arc<tokio::sync::Mutex<Option<Kept>>>);

impl Upstream {
    async fn sender(
        &self,
        shared: &Shared,
        target: &Authority,
        addr: SocketAddr,
        tls: bool,
    ) -> Result<hyper::client::conn::http1::SendRequest<ProxyBody>, UpstreamError> {
        let mut slot = self.0.lock().await;
        if let Some((a, mut s)) = slot.take() {
            if a == *target && s.ready().await.is_ok() {
                return Ok(s);
            }
        }
        drop(slot);
        open_upstream(shared, target, addr, tls, false).await
    }

    async fn put_back(
        &self,
        target: &Authority,
        s: hyper::client::conn::http1::SendRequest<ProxyBody>,
    ) {
        *self.0.lock().await = Some((target.clone(), s));
    }
}

/// A new connection to `target` at `addr` (TLS when `tls`), able to switch protocols when
/// `upgrades` (a WebSocket handshake gets a connection of its own, never the kept-alive one).
async fn open_upstream(
    shared: &Shared,
    target: &Authority,
    addr: SocketAddr,
    tls: bool,
    upgrades: bool,
) -> Result<hyper::client::conn::http1::SendRequest<ProxyBody>, UpstreamError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| UpstreamError::Connect {
            target: target.clone(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let tcp = crate::runtime::egress::quickack::QuickAck::new(tcp);
    let sender = if tls {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|_| UpstreamError::Name(target.host.clone()))?;
        let stream = TlsConnector::from(shared.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|source| UpstreamError::Tls {
                target: target.clone(),
                source,
            })?;
        let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        drive(conn, upgrades);
        s
    } else {
        let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        drive(conn, upgrades);
        s
    };
    Ok(sender)
}

/// Runs an upstream connection in its own task (with upgrades when asked).
fn drive<T>(conn: hyper::client::conn::http1::Connection<T, ProxyBody>, upgrades: bool)
where
    T: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
{
    if upgrades {
        tokio::spawn(conn.with_upgrades());
    } else {
        tokio::spawn(conn);
    }
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

fn strip_hop_by_hop(h: &mut hyper::HeaderMap) {
    let listed: Vec<String> = h
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .map(std::string::ToString::to_string)
        .chain(listed)
    {
        h.remove(name.as_str());
    }
}

/// Rewrites every header value with `rules`; returns what was injected or leaked.
fn rewrite_headers(h: &mut hyper::HeaderMap, rules: &Rules) -> Hits {
    let mut hits = Hits::default();
    if rules.is_empty() {
        return hits;
    }
    for (name, value) in h.iter_mut() {
        let (out, hh) = rules.header_value(name.as_str(), value.as_bytes());
        if out != value.as_bytes() {
            if let Ok(v) = HeaderValue::from_bytes(&out) {
                *value = v;
            }
        }
        hits.merge(hh);
    }
    hits
}

fn leak_response(shared: &Shared, hits: &Hits, target: &Authority) -> Response<ProxyBody> {
    shared.report_hits(
        &Hits {
            injected: Default::default(),
            leaked: hits.leaked.clone(),
        },
        target,
    );
    let name = hits.leaked.iter().next().cloned().unwrap_or_default();
    plain(
        StatusCode::FORBIDDEN,
        "leak",
        &judge::leak_body(&target.to_string(), &name),
    )
}

/// The refusal of a request that would carry an injection's value over plain http://.
fn cleartext_response(shared: &Shared, hits: &Hits, target: &Authority) -> Response<ProxyBody> {
    shared
        .events
        .emit(EgressDecision::Denied, &target.to_string(), None);
    let name = hits.injected.iter().next().cloned().unwrap_or_default();
    plain(
        StatusCode::FORBIDDEN,
        "cleartext",
        &judge::cleartext_body(&target.to_string(), &name),
    )
}

/// The response's content coding, when it has one other than `identity`.
fn encoded(h: &hyper::HeaderMap) -> Option<String> {
    h.get_all(hyper::header::CONTENT_ENCODING)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .find(|v| !v.is_empty() && v != "identity")
}

/// The 502 for an answer from an injection's host that the proxy cannot read to swap values
/// back (compressed although asked uncompressed); reported as `denied` with a log line.
fn encoded_response(shared: &Shared, target: &Authority, what: &str) -> Response<ProxyBody> {
    shared
        .events
        .emit(EgressDecision::Denied, &target.to_string(), None);
    shared.events.log(&format!(
        "refused an answer from {target}: it came with {what}, so a secret's value in it could not be replaced"
    ));
    plain(
        StatusCode::BAD_GATEWAY,
        "encoded",
        &judge::encoded_body(&target.to_string(), what),
    )
}

/// The `Upgrade` value of a WebSocket handshake (GET, `Connection: upgrade`, `Upgrade:
/// websocket`); other upgrades are not passed on (their headers are hop-by-hop and dropped).
fn websocket_upgrade(req: &Request<Incoming>) -> Option<HeaderValue> {
    let connection_upgrade = req
        .headers()
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let upgrade = req.headers().get(hyper::header::UPGRADE)?;
    let websocket = upgrade.to_str().is_ok_and(|v| {
        v.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("websocket"))
    });
    (req.method() == Method::GET && connection_upgrade && websocket).then(|| upgrade.clone())
}

/// Puts back the two headers a protocol switch needs (after the hop-by-hop ones were dropped).
fn keep_upgrade(h: &mut hyper::HeaderMap, upgrade: &HeaderValue) {
    h.insert(
        hyper::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    h.insert(hyper::header::UPGRADE, upgrade.clone());
}

/// Sends one request on to `target` at `addr`, phantoms swapped towards its injections' hosts,
/// refused when it carries another's; the response's values swapped back. A WebSocket handshake
/// goes on a connection of its own; when the server switches protocols, both sides are relayed
/// frame by frame (`ws::relay`) until they close or a policy change revokes `target`.
async fn forward(
    mut req: Request<Incoming>,
    shared: &Arc<Shared>,
    target: &Authority,
    addr: SocketAddr,
    tls: bool,
    upstream: &Upstream,
) -> Response<ProxyBody> {
    let websocket = websocket_upgrade(&req);
    let client_upgrade = websocket.as_ref().map(|_| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let injecting = shared.injections.injects_into(&target.host, target.port);
    // Values travel over TLS, or to the machine itself (decision 0036).
    let secure = tls || judge::cleartext_stays_on_this_machine(&target.host);
    let rules = Arc::new(shared.injections.request_rules(&target.host, target.port));
    // Bodies and WebSocket messages: only the injections that opt in are swapped there
    // (decision 0033); every other injection's phantom is still a leak.
    let body_rules = Arc::new(shared.injections.request_body_rules(
        &target.host,
        target.port,
        secure,
    ));
    let mut hits = match rewrite_request_head(&mut parts, &rules, websocket.as_ref(), injecting) {
        Ok(h) => h,
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                "bad-request",
                &format!("handler egress filter: {e}\n"),
            );
        }
    };
    if hits.is_leak() {
        return leak_response(shared, &hits, target);
    }
    if !secure && !hits.injected.is_empty() {
        // Plain http:// would carry the value in cleartext (decision 0036).
        return cleartext_response(shared, &hits, target);
    }
    let leaked: LeakSlot = Arc::new(std::sync::Mutex::new(None));
    let body = match request_body(body, &body_rules, &mut hits, shared, target, &leaked).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    shared.report_hits(&hits, target);

    let opened = match websocket {
        Some(_) => open_upstream(shared, target, addr, tls, true).await,
        None => upstream.sender(shared, target, addr, tls).await,
    };
    let mut sender = match opened {
        Ok(s) => s,
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                "unreachable",
                &format!("handler egress filter: {e}\n"),
            );
        }
    };
    let result = sender.send_request(Request::from_parts(parts, body)).await;
    if websocket.is_none() {
        upstream.put_back(target, sender).await;
    }
    let resp = match result {
        Ok(r) => r,
        Err(e) => {
            if let Some(h) = leaked.lock().expect("leak slot").take() {
                return leak_response(shared, &h, target);
            }
            return plain(
                StatusCode::BAD_GATEWAY,
                "unreachable",
                &format!("handler egress filter: {target}: {e}\n"),
            );
        }
    };
    match client_upgrade {
        Some(client) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
            switched(resp, client, shared, target, injecting, &body_rules)
        }
        _ => response(resp, shared, target, injecting),
    }
}

/// The request's target (in origin form) and headers rewritten by `rules`, hop-by-hop headers
/// dropped, a WebSocket upgrade kept (uncompressed when values are swapped), and responses
/// asked uncompressed when `injecting`; what was swapped or leaked, or why the rewritten target
/// is no URI.
fn rewrite_request_head(
    parts: &mut hyper::http::request::Parts,
    rules: &Rules,
    websocket: Option<&HeaderValue>,
    injecting: bool,
) -> Result<Hits, hyper::http::Error> {
    let mut hits = Hits::default();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let (pq, h) = rules.bytes(pq.as_bytes());
    hits.merge(h);
    parts.uri = Uri::builder().path_and_query(pq).build()?;
    strip_hop_by_hop(&mut parts.headers);
    if let Some(u) = websocket {
        keep_upgrade(&mut parts.headers, u);
        if !rules.is_empty() {
            // Frames are swapped and checked uncompressed (no permessage-deflate).
            parts
                .headers
                .remove(hyper::header::SEC_WEBSOCKET_EXTENSIONS);
        }
    }
    hits.merge(rewrite_headers(&mut parts.headers, rules));
    if injecting {
        // Responses from an injection's hosts come uncompressed, so values can be swapped back.
        parts.headers.remove(hyper::header::ACCEPT_ENCODING);
    }
    Ok(hits)
}

/// The request's body with `body_rules` applied: small ones read whole and checked before
/// anything leaves (a leak refused here), others streamed and cut at a leak (`leaked`).
async fn request_body(
    body: Incoming,
    body_rules: &Arc<Rules>,
    hits: &mut Hits,
    shared: &Arc<Shared>,
    target: &Authority,
    leaked: &LeakSlot,
) -> Result<ProxyBody, Response<ProxyBody>> {
    if body_rules.is_empty() {
        return Ok(body.map_err(Into::into).boxed());
    }
    let small = body
        .size_hint()
        .upper()
        .is_some_and(|n| n <= LEAK_CHECK_BUFFER);
    if small {
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return Err(plain(
                    StatusCode::BAD_REQUEST,
                    "bad-request",
                    &format!("handler egress filter: {e}\n"),
                ));
            }
        };
        let (out, h) = body_rules.bytes(&bytes);
        hits.merge(h);
        if hits.is_leak() {
            return Err(leak_response(shared, hits, target));
        }
        return Ok(full(out));
    }
    let (s, t) = (shared.clone(), target.clone());
    Ok(Rewriting::new(
        body.map_err(Into::into).boxed(),
        body_rules.clone(),
        Some(leaked.clone()),
        move |h| {
            s.report_hits(
                &Hits {
                    injected: h.injected,
                    leaked: Default::default(),
                },
                &t,
            );
        },
    )
    .boxed())
}

/// The server switched protocols: its answer passed on (values swapped back), and both sides
/// relayed frame by frame; refused when it chose an extension frames could not be read under.
fn switched(
    mut resp: Response<Incoming>,
    client: hyper::upgrade::OnUpgrade,
    shared: &Arc<Shared>,
    target: &Authority,
    injecting: bool,
    body_rules: &Rules,
) -> Response<ProxyBody> {
    let server = hyper::upgrade::on(&mut resp);
    let (mut parts, _) = resp.into_parts();
    let upgrade = parts.headers.get(hyper::header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(u) = &upgrade {
        keep_upgrade(&mut parts.headers, u);
    }
    if injecting {
        let back = shared.injections.response_rules(&target.host, target.port);
        rewrite_headers(&mut parts.headers, &back);
    }
    if injecting
        && parts
            .headers
            .contains_key(hyper::header::SEC_WEBSOCKET_EXTENSIONS)
    {
        // An extension (permessage-deflate) nobody asked for: frames could not be read.
        return encoded_response(shared, target, "a WebSocket extension");
    }
    let swaps = ws::Swaps {
        up: body_rules.clone(),
        down: shared.injections.response_rules(&target.host, target.port),
    };
    spawn_websocket(shared.clone(), target.clone(), swaps, client, server);
    Response::from_parts(parts, full(Bytes::new()))
}

/// An answer passed on: hop-by-hop headers dropped and, from an injection's hosts, values
/// swapped back in its headers and body (refused when it is encoded all the same).
fn response(
    resp: Response<Incoming>,
    shared: &Arc<Shared>,
    target: &Authority,
    injecting: bool,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = body.map_err(Into::into).boxed();
    if !injecting {
        return Response::from_parts(parts, body);
    }
    if let Some(enc) = encoded(&parts.headers) {
        // Asked uncompressed (Accept-Encoding dropped) yet encoded: a value inside could not be
        // swapped back, so the answer is not passed on.
        return encoded_response(shared, target, &format!("Content-Encoding {enc}"));
    }
    let back = Arc::new(shared.injections.response_rules(&target.host, target.port));
    rewrite_headers(&mut parts.headers, &back);
    Response::from_parts(parts, Rewriting::new(body, back, None, |_| {}).boxed())
}

/// Relays a WebSocket once both sides have switched protocols (payloads swapped by `swaps`),
/// until they close it, a leak, or a policy change no longer allows `target` (then close frames
/// 1012, `ws::relay`).
fn spawn_websocket(
    shared: Arc<Shared>,
    target: Authority,
    swaps: ws::Swaps,
    client: hyper::upgrade::OnUpgrade,
    server: hyper::upgrade::OnUpgrade,
) {
    tokio::spawn(async move {
        let (client, server) = match tokio::join!(client, server) {
            (Ok(c), Ok(s)) => (c, s),
            (c, s) => {
                if let Some(e) = c.err().or(s.err()) {
                    shared
                        .events
                        .log(&format!("WebSocket to {target} not relayed: {e}"));
                }
                return;
            }
        };
        let held = Held::default();
        held.add(&target);
        let injected = |h: Hits| shared.report_hits(&h, &target);
        let ended = ws::relay(
            TokioIo::new(client),
            TokioIo::new(server),
            swaps,
            shared.revoked(&held),
            rand::random(),
            &injected,
        )
        .await;
        match ended {
            ws::Ended::Closed => {}
            ws::Ended::Revoked => shared.events.log(&format!(
                "closed a WebSocket to {target} (1012): the egress policy no longer allows it"
            )),
            ws::Ended::Leak(h) => {
                shared.report_hits(
                    &Hits {
                        injected: Default::default(),
                        leaked: h.leaked,
                    },
                    &target,
                );
                shared.events.log(&format!(
                    "cut a WebSocket to {target}: a message carried a secret's stand-in not meant for it"
                ));
            }
        }
    });
}
