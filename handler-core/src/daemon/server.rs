//! Binding and serving (the top layer): building the state, listening on loopback, the
//! graceful stop that closes every sandbox, signals and logs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::daemon::api::{auth, routes};
use crate::daemon::config::{self, DaemonConfig};
use crate::daemon::fsutil;
use crate::daemon::launch::launcher::{Launcher, ProcessLauncher};
use crate::daemon::state::{App, AppState};
use crate::daemon::store;
use crate::daemon::store::agents::{AgentStore, StoreError};
use crate::daemon::store::documents::{TomlDocs, TomlFile};
use crate::daemon::store::secrets::SecretStore;
use crate::daemon::store::sessions::SessionStore;

/// Starting the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The token file cannot be read or made.
    #[error("the token file {path}: {source}")]
    Token {
        /// The token file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The agents store cannot be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The builds store cannot be opened.
    #[error(transparent)]
    Builds(#[from] store::builds::BuildStoreError),
    /// The platform data cannot be written out (decision 0118).
    #[error("the platform data {path}: {source}")]
    Platform {
        /// Its folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The port cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The default toolbox copied into the user's folder on the first start (B.6).
fn install_toolbox(config: &DaemonConfig) {
    let dir = config.toolbox_dir.display();
    match crate::daemon::services::images::toolbox::install_default(&config.toolbox_dir) {
        Ok(true) => tracing::info!(%dir, "the default toolbox copied"),
        Ok(false) => {}
        Err(e) => tracing::warn!(%dir, error = %e, "the default toolbox not copied"),
    }
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
    let agents = AgentStore::open(&config.state_dir)?;
    store::platform::install(&config).map_err(|source| DaemonError::Platform {
        path: config.platform_dir.display().to_string(),
        source,
    })?;
    install_toolbox(&config);
    let config_state_dir = config.state_dir.clone();
    let launcher = launcher.unwrap_or_else(|| {
        Arc::new(ProcessLauncher {
            command: config.sandbox_command.clone(),
        })
    });
    let app = AppState(Arc::new(App {
        secrets: SecretStore::new(config.data_dir.join("secrets.json")),
        sessions: SessionStore::open(&config.state_dir),
        live_sessions: Default::default(),
        accounts: TomlDocs::new(&config.accounts_dir),
        providers: TomlDocs::new(&config.providers_dir),
        bindings: TomlDocs::new(&config.bindings_dir),
        contexts: TomlFile::new(store::contexts::path(&config)),
        folders: TomlFile::new(store::folders::path(&config)),
        bound_port: config.port.into(),
        config,
        token,
        agents,
        launcher,
        write_lock: tokio::sync::Mutex::new(()),
        connections: Mutex::new(HashMap::new()),
        connections_changed: Notify::new(),
        egress_events: Mutex::new(HashMap::new()),
        builds: store::builds::BuildStore::open(&config_state_dir)?,
    }));
    crate::daemon::services::sessions::mark_stopped_at_start(&app);
    Ok(app)
}

/// A daemon listening; `shutdown` stops it gracefully.
#[derive(Debug)]
pub struct Running {
    /// The address bound.
    pub addr: SocketAddr,
    /// The state it serves.
    pub state: AppState,
    /// The serving task (ends after `shutdown`).
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds `127.0.0.1:<port>`, sweeps what dead launchers left, serves until `shutdown` resolves,
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
    let st = state.clone();
    tokio::spawn(async move { crate::daemon::services::images::ensure_network_filter(&st).await });
    if let Err(e) = crate::daemon::services::images::updates::stored(&state) {
        tracing::warn!(error = %e.problem().detail.unwrap_or_default(), "image-updates.json");
    }
    tokio::spawn(crate::daemon::services::images::updates::scheduler(
        state.clone(),
    ));
    let app = routes::router(state.clone());
    let st = state.clone();
    let task = tokio::spawn(async move {
        let graceful = async move {
            shutdown.await;
            tracing::info!("stopping: closing every connection and its sandbox");
            let all: Vec<Arc<Notify>> = st
                .connections
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .flatten()
                .map(|c| c.stop.clone())
                .collect();
            for s in all {
                s.notify_one();
            }
            stop_builds(&st).await;
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

/// Stops a running build (its processes, what they left): its record stays running, so the
/// next start marks it failed ("daemon restarted", D.4). Waits 20 s at most.
async fn stop_builds(st: &AppState) {
    st.builds
        .stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let cancels: Vec<Arc<Notify>> = st
        .builds
        .cancels
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .values()
        .cloned()
        .collect();
    for c in cancels {
        c.notify_one();
    }
    let _ = tokio::time::timeout(Duration::from_secs(20), st.builds.queue.lock()).await;
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
/// Colours only on a terminal, and never with `NO_COLOR` set (a file, journald, a pipe: none).
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HANDLER_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .with_writer(std::io::stderr);
    let _ = if std::env::var("HANDLER_LOG_FORMAT").as_deref() == Ok("json") {
        b.json().try_init()
    } else {
        b.try_init()
    };
}
