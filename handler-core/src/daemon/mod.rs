//! handlerd, the control plane (D): the HTTP/JSON Control API on loopback with its token, the
//! stores (accounts, providers, secrets, work folders, contexts, agents and projects), the
//! resolution and launch of an agent's sandbox, and the ACP WebSocket endpoint (C).

pub mod accounts;
pub mod acp;
pub mod addons;
pub mod agents;
pub mod auth;
pub mod caches;
pub mod catalog;
pub mod config;
pub mod contexts;
pub mod folders;
pub mod fsutil;
pub mod harnesses;
pub mod launch;
pub mod live;
pub mod openapi;
pub mod prepare;
pub mod problem;
pub mod providers;
pub mod routes;
pub mod secretref;
pub mod secrets;
pub mod skills;
pub mod store;
pub mod tomlfile;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use handler_contracts::control::AgentConnection;
use handler_contracts::sandbox::EgressEvent;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

pub use config::DaemonConfig;

use crate::daemon::launch::launcher::{Launcher, ProcessLauncher};

/// A running connection's handle: how to stop it.
#[derive(Debug)]
pub struct LiveConnection {
    pub info: AgentConnection,
    pub stop: Arc<Notify>,
    /// A filtered sandbox's allow-list, switched live when the agent changes (A.4).
    pub allow: Option<live::LiveAllow>,
}

/// An egress event as recorded for an agent (A.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressRecord {
    pub at: String,
    pub sandbox: String,
    #[serde(flatten)]
    pub event: EgressEvent,
}

/// How many egress events are kept per agent.
pub const EGRESS_EVENTS_KEPT: usize = 1000;

/// The daemon's shared state.
#[derive(Debug)]
pub struct App {
    pub config: DaemonConfig,
    pub token: String,
    pub secrets: secrets::SecretStore,
    pub agents: store::AgentStore,
    pub launcher: Arc<dyn Launcher>,
    /// Serializes writes of files and stores.
    pub write_lock: tokio::sync::Mutex<()>,
    /// The port bound (the configured one, or the one picked for 0).
    pub bound_port: std::sync::atomic::AtomicU16,
    pub connections: Mutex<HashMap<String, Vec<LiveConnection>>>,
    pub connections_changed: Notify,
    pub egress_events: Mutex<HashMap<String, std::collections::VecDeque<EgressRecord>>>,
}

/// The state handlers get.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl App {
    /// Accounts, providers and descriptors as they are on disk now.
    pub fn snapshot(&self) -> catalog::Snapshot {
        catalog::Snapshot::read(&self.config)
    }
    /// The port the API listens on.
    pub fn port(&self) -> u16 {
        self.bound_port.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// An agent's running sandboxes.
    pub fn connections_of(&self, agent: &str) -> Vec<AgentConnection> {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .map(|v| v.iter().map(|c| c.info.clone()).collect())
            .unwrap_or_default()
    }
    /// Asks an agent's connections to stop (their sandboxes get SIGTERM).
    pub async fn stop_connections(&self, agent: &str) {
        let stops: Vec<Arc<Notify>> = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .map(|v| v.iter().map(|c| c.stop.clone()).collect())
            .unwrap_or_default();
        for s in stops {
            s.notify_one();
        }
    }
    /// Records an egress event of one of an agent's sandboxes.
    pub fn record_egress(&self, agent: &str, sandbox: &str, event: EgressEvent) {
        let mut m = self.egress_events.lock().unwrap_or_else(|e| e.into_inner());
        let q = m.entry(agent.to_string()).or_default();
        q.push_back(EgressRecord {
            at: fsutil::now_rfc3339(),
            sandbox: sandbox.to_string(),
            event,
        });
        while q.len() > EGRESS_EVENTS_KEPT {
            q.pop_front();
        }
    }
    fn live_count(&self) -> usize {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(Vec::len)
            .sum()
    }
}

/// Starting the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("the token file {path}: {source}")]
    Token {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Store(#[from] store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Builds the state: the token (made on first start), the stores.
pub fn build(
    config: DaemonConfig,
    launcher: Option<Arc<dyn Launcher>>,
) -> Result<AppState, DaemonError> {
    fsutil::create_dir_private(&config.config_dir).map_err(|source| DaemonError::Token {
        path: config.config_dir.display().to_string(),
        source,
    })?;
    let token =
        auth::load_or_create_token(&config.token_path()).map_err(|source| DaemonError::Token {
            path: config.token_path().display().to_string(),
            source,
        })?;
    let agents = store::AgentStore::open(&config.state_dir)?;
    let launcher = launcher.unwrap_or_else(|| {
        Arc::new(ProcessLauncher {
            command: config.sandbox_command.clone(),
        })
    });
    Ok(AppState(Arc::new(App {
        secrets: secrets::SecretStore::new(config.data_dir.join("secrets.json")),
        bound_port: config.port.into(),
        config,
        token,
        agents,
        launcher,
        write_lock: tokio::sync::Mutex::new(()),
        connections: Mutex::new(HashMap::new()),
        connections_changed: Notify::new(),
        egress_events: Mutex::new(HashMap::new()),
    })))
}

/// A daemon listening; `shutdown` stops it gracefully.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    pub state: AppState,
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds 127.0.0.1:<port>, sweeps what dead launchers left, serves until `shutdown` resolves,
/// then stops every sandbox (SIGTERM) and waits for them (30 s at most).
pub async fn serve(
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Running, DaemonError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], state.config.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| DaemonError::Bind { addr, source })?;
    state
        .bound_port
        .store(addr.port(), std::sync::atomic::Ordering::Relaxed);
    match state.launcher.sweep().await {
        Ok(out) => tracing::info!(output = %out.trim(), "sandbox sweep done"),
        Err(e) => tracing::warn!(error = %e, "sandbox sweep failed"),
    }
    let app = routes::router(state.clone());
    let st = state.clone();
    let task = tokio::spawn(async move {
        let graceful = async move {
            shutdown.await;
            tracing::info!("stopping: closing every connection and its sandbox");
            let all: Vec<Arc<Notify>> = st
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .flatten()
                .map(|c| c.stop.clone())
                .collect();
            for s in all {
                s.notify_one();
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while st.live_count() > 0 && tokio::time::Instant::now() < deadline {
                let _ = tokio::time::timeout(
                    Duration::from_millis(200),
                    st.connections_changed.notified(),
                )
                .await;
            }
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(graceful)
            .await
        {
            tracing::error!(error = %e, "server stopped");
        }
    });
    tracing::info!(%addr, "handlerd listening");
    Ok(Running { addr, state, task })
}

/// Resolves at SIGTERM or SIGINT.
pub async fn signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

/// handlerd's whole life: configuration from the environment, logs, serve until a signal.
pub async fn run() -> Result<(), DaemonError> {
    run_with(DaemonConfig::from_env()?).await
}

/// Serves with `config` until SIGTERM or SIGINT.
pub async fn run_with(config: DaemonConfig) -> Result<(), DaemonError> {
    let state = build(config, None)?;
    let running = serve(state, signals()).await?;
    let _ = running.task.await;
    tracing::info!("handlerd stopped");
    Ok(())
}

/// Structured logs on stderr (`HANDLER_LOG` filter, `HANDLER_LOG_FORMAT=json`).
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HANDLER_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("HANDLER_LOG_FORMAT").as_deref() == Ok("json") {
        b.json().try_init()
    } else {
        b.try_init()
    };
}
