//! The egress proxy's runtime (A.3, A.4, E3): I/O only — listening, TLS, DNS, the settings file,
//! stderr — around the pure decisions of `handler_sandbox::egress`. `start` runs a proxy in this
//! process (tests, the binary); `run_from_stdin` is the `handler-egress-proxy` binary's body.

pub mod body;
pub mod ca;
pub mod claim;
pub mod control;
pub mod events;
pub mod launch;
pub mod pool;
pub mod proxy;
pub mod quickack;
pub mod relay;
pub mod resolve;
pub mod settings;
pub mod shim;
pub mod ws;

use std::net::SocketAddr;
use std::sync::Arc;

use handler_sandbox::egress::{ProxyConfig, ProxyMode, RandomSource, rebind};
use serde::Serialize;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;

pub use events::Events;
pub use settings::write_settings;

/// Why the proxy cannot start (it then exits non-zero and the sandbox does not start: fail
/// closed, A1).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    /// The configuration on stdin is not valid.
    Config(#[from] handler_sandbox::egress::SettingsError),
    #[error(transparent)]
    /// The CA, a certificate or the roots could not be set up.
    Tls(#[from] ca::TlsError),
    #[error(transparent)]
    /// The settings file cannot be read or is not valid.
    Settings(#[from] settings::LiveSettingsError),
    #[error("cannot listen on {addr}: {source}")]
    /// The proxy cannot listen where its configuration says.
    Listen {
        /// The address or socket path.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("cannot write the CA bundle {path}: {source}")]
    /// The CA bundle for the sandbox cannot be written.
    Bundle {
        /// Where it goes.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("cannot read the configuration: {0}")]
    /// The configuration cannot be read from stdin (or its file).
    Stdin(std::io::Error),
}

/// What the proxy prints on stdout once it listens (one JSON line).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ready {
    /// Always true: the proxy listens.
    pub ready: bool,
    /// The address it listens on (the port chosen when it asked for 0).
    pub listen: SocketAddr,
    /// The proxy's CA certificate (public).
    pub ca: String,
}

/// A proxy running in this process.
#[derive(Debug)]
pub struct Running {
    /// What it printed (or would print) as its ready line.
    pub ready: Ready,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.ready.listen
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a proxy: makes its CA, writes the sandbox's CA bundle, reads the settings (they must
/// be valid), listens.
pub async fn start(config: ProxyConfig, events: Events) -> Result<Running, ProxyError> {
    let injections = Arc::new(
        control::LiveInjections::new(config.injections.clone())
            .map_err(handler_sandbox::egress::SettingsError::from)?,
    );
    let ca = ca::Ca::new()?;
    let (roots, roots_pem) = ca::load_roots(&config.roots_files)?;
    let tls = ca::client_config(roots)?;
    if let Some(path) = &config.ca_bundle_out {
        // Written in place (not renamed): the sandbox may already hold a bind mount of the file.
        let bundle = format!("{roots_pem}{}", ca.pem());
        std::fs::write(path, bundle).map_err(|source| ProxyError::Bundle {
            path: path.clone(),
            source,
        })?;
    }
    let live = match (config.mode, &config.settings_file) {
        (ProxyMode::Filter, Some(p)) => {
            let live = settings::LiveSettings::open(std::path::Path::new(p))
                .await
                .map_err(ProxyError::Settings)?;
            live.spawn_watcher(events.clone());
            Some(live)
        }
        _ => None,
    };
    let host_addresses = guarded_addresses(&config);
    let listener =
        TcpListener::bind(&config.listen)
            .await
            .map_err(|source| ProxyError::Listen {
                addr: config.listen.clone(),
                source,
            })?;
    let listen = listener.local_addr().map_err(|source| ProxyError::Listen {
        addr: config.listen.clone(),
        source,
    })?;
    let ready = Ready {
        ready: true,
        listen,
        ca: ca.pem().to_string(),
    };
    // A machine's control socket before its proxy socket: the latter's presence says ready.
    let control = match &config.control_socket {
        Some(path) => Some(bind_unix(path, 0o600)?),
        None => None,
    };
    if let Some(c) = control {
        tokio::spawn(control::serve_control(c, injections.clone()));
    }
    let shared = Arc::new(proxy::Shared {
        mode: config.mode,
        live,
        injections,
        ca,
        tls,
        resolver: resolve::Resolver::new(config.resolve.clone()),
        host_addresses,
        events,
    });
    // The unix socket last: its presence says the proxy is ready (the sandbox's forwarder waits
    // for it).
    let unix = match &config.listen_unix {
        Some(path) => Some(bind_unix(path, 0o666)?),
        None => None,
    };
    let task = tokio::spawn(async move {
        match unix {
            Some(u) => {
                tokio::join!(
                    proxy::serve(listener, shared.clone()),
                    proxy::serve_unix(u, shared)
                );
            }
            None => proxy::serve(listener, shared).await,
        }
    });
    Ok(Running { ready, task })
}

/// The addresses the rebinding guard keeps a name from: the host's (from the configuration),
/// its loopback as slirp4netns shows it, and the host aliases of the proxy's /etc/hosts.
fn guarded_addresses(config: &ProxyConfig) -> Vec<std::net::IpAddr> {
    let mut host_addresses = config.host_addresses.clone();
    // The host's loopback as slirp4netns shows it (decision 0024): handlerd is there.
    if !host_addresses.contains(&rebind::SLIRP_HOST_LOOPBACK) {
        host_addresses.push(rebind::SLIRP_HOST_LOOPBACK);
    }
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        for a in rebind::host_alias_addresses(&hosts) {
            if !host_addresses.contains(&a) {
                host_addresses.push(a);
            }
        }
    }
    host_addresses
}

/// Listens on a unix socket at `path` (a stale one is replaced) with `mode`: the proxy's open to
/// the sandbox's user, a machine's control socket to the host user only.
fn bind_unix(path: &str, mode: u32) -> Result<tokio::net::UnixListener, ProxyError> {
    use std::os::unix::fs::PermissionsExt as _;
    let err = |source| ProxyError::Listen {
        addr: path.to_string(),
        source,
    };
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
        _ => {}
    }
    let l = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    Ok(l)
}

/// The binary: reads the configuration (JSON) from stdin to its end, starts, prints the ready
/// line on stdout, reports on stderr, and runs until killed.
pub async fn run_from_stdin() -> Result<(), ProxyError> {
    let mut text = String::new();
    tokio::io::stdin()
        .read_to_string(&mut text)
        .await
        .map_err(ProxyError::Stdin)?;
    run_with(text).await
}

/// The binary with `--config FILE`: a machine's proxy (decision 0153), whose configuration holds
/// no secret (a machine's injections are refused), read from a file of its settings folder so
/// the engine can start it again with the machine.
pub async fn run_from_file(path: &std::path::Path) -> Result<(), ProxyError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(ProxyError::Stdin)?;
    run_with(text).await
}

async fn run_with(text: String) -> Result<(), ProxyError> {
    let config = ProxyConfig::parse(&text)?;
    drop(text);
    let running = start(config, Events::stderr()).await?;
    println!(
        "{}",
        serde_json::to_string(&running.ready).expect("ready line")
    );
    // Until SIGTERM (its container stopped) or SIGINT.
    let mut signals = crate::runtime::signals::Signals::new(&[libc::SIGTERM, libc::SIGINT])
        .map_err(ProxyError::Stdin)?;
    signals.recv().await;
    Ok(())
}

/// Randomness from the operating system, for phantoms (E3).
#[derive(Debug, Default)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn next_u32(&mut self) -> u32 {
        rand::random()
    }
}
