//! `handler-gateway` (D.7, docs/remote.md § The gateway): the relay a person runs on any small
//! server. handlerd polls it outbound, paired devices talk to it; it routes sealed envelopes by
//! their header between a daemon and its devices, keeps each recipient's mailbox bounded and on
//! disk (redb), and checks credentials — a revoked device gets 401. It never sees plaintext: the
//! envelopes are sealed end to end (`handler_contracts::remote::envelope`).

mod api;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use api::router;

/// The gateway's settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the store lives.
    pub data: PathBuf,
    /// PEM certificate chain and key: HTTPS (without: HTTP, for loopback and tests).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// When set, registering a daemon needs it as the Bearer credential.
    pub registration_token: Option<String>,
}

/// The gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The store.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// A file or the socket.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The certificate or key.
    #[error("TLS: {0}")]
    Tls(String),
}

/// Logs to stderr, `RUST_LOG` or info.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The state every request shares.
#[derive(Debug)]
pub struct Gateway {
    store: store::Store,
    registration_token: Option<String>,
    waiters: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Notify>>>,
}

impl Gateway {
    /// The notify of `id`'s mailbox.
    fn waiter(&self, id: &str) -> Arc<tokio::sync::Notify> {
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(id.to_owned())
            .or_default()
            .clone()
    }
}

/// Opens the store and binds; answers the address bound and the serving future.
pub async fn bind(
    c: GatewayConfig,
) -> Result<(SocketAddr, impl Future<Output = ()>), GatewayError> {
    std::fs::create_dir_all(&c.data)
        .map_err(|e| GatewayError::Io(c.data.display().to_string(), e))?;
    let state = Arc::new(Gateway {
        store: store::Store::open(&c.data)?,
        registration_token: c.registration_token.clone(),
        waiters: Default::default(),
    });
    let app = router(state);
    let listener = tokio::net::TcpListener::bind(c.listen)
        .await
        .map_err(|e| GatewayError::Io(c.listen.to_string(), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| GatewayError::Io(c.listen.to_string(), e))?;
    let tls = match &c.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let serve = async move {
        match tls {
            None => {
                let _ = axum::serve(listener, app).await;
            }
            Some(acceptor) => serve_tls(listener, acceptor, app).await,
        }
    };
    Ok((addr, serve))
}

fn tls_acceptor(cert: &PathBuf, key: &PathBuf) -> Result<tokio_rustls::TlsAcceptor, GatewayError> {
    let read =
        |p: &PathBuf| std::fs::read(p).map_err(|e| GatewayError::Io(p.display().to_string(), e));
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| GatewayError::Tls(format!("{}: {e}", cert.display())))?;
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| GatewayError::Tls(format!("{}: {e}", key.display())))?
        .ok_or_else(|| GatewayError::Tls(format!("{}: no private key", key.display())))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| GatewayError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| GatewayError::Tls(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// HTTPS: each connection's TLS handshake (10 s at most), then HTTP/1.1 over it.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: axum::Router,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let hs = tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp));
            let Ok(Ok(tls)) = hs.await else { return };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}
