//! Binding and serving (the top layer): building the state, listening on loopback and on the
//! user's unix socket (its peers checked: this user only, decision 0135), the graceful stop that
//! closes every sandbox, signals and logs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// The unix socket's folder is not this user's alone.
    #[error(transparent)]
    SocketFolder(#[from] crate::socket::FolderError),
    /// The unix socket cannot be bound.
    #[error("cannot listen on {path}: {source}")]
    SocketBind {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Another handlerd answers on the unix socket.
    #[error("another handlerd listens on {0} (stop it, or give this one another HANDLER_SOCKET)")]
    SocketInUse(PathBuf),
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
            records: Some(config.state_dir.clone()),
        })
    });
    let app = AppState(Arc::new(App {
        secrets: SecretStore::new(config.data_dir.join("secrets.json")),
        sessions: SessionStore::open(&config.state_dir),
        live_sessions: Default::default(),
        ui_codes: Default::default(),
        apps: Default::default(),
        accounts: TomlDocs::new(&config.accounts_dir),
        providers: TomlDocs::new(&config.providers_dir),
        bindings: TomlDocs::new(&config.bindings_dir),
        contexts: TomlFile::new(store::contexts::path(&config)),
        folders: TomlFile::new(store::folders::path(&config)),
        bound_port: config.port.into(),
        catalog_reads: 0.into(),
        machines_seen: Default::default(),
        machine_make: tokio::sync::Mutex::new(()),
        disposable_idle: Mutex::new(HashMap::new()),
        remote: Default::default(),
        runtime_check: Default::default(),
        config,
        token: token.into(),
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
    /// The unix socket bound, if any (removed when the serving task ends).
    pub socket: Option<PathBuf>,
    /// The serving task (ends after `shutdown`).
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds the unix socket at `path`: its folder made or checked first (0700, this user's), a
/// socket left by a handlerd that died removed, one another handlerd answers on refused; the
/// socket itself 0600.
pub fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener, DaemonError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    crate::socket::prepare_folder(path)?;
    let err = |source| DaemonError::SocketBind {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(DaemonError::SocketInUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        Ok(_) => {
            return Err(err(std::io::Error::other("it exists and is not a socket")));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

/// The unix socket's listener: a connection whose peer is not this user (SO_PEERCRED) is
/// closed at once, before a byte is read.
struct OwnerOnly {
    listener: tokio::net::UnixListener,
    uid: u32,
}

impl axum::serve::Listener for OwnerOnly {
    type Io = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((s, a)) => match s.peer_cred() {
                    Ok(c) if c.uid() == self.uid => return (s, a),
                    Ok(c) => tracing::warn!(
                        uid = c.uid(),
                        pid = ?c.pid(),
                        "socket connection closed: its peer is another user"
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "socket connection closed: its peer's credentials are unknown"
                    ),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// Binds `127.0.0.1:<port>` and the unix socket (when configured), sweeps what dead launchers
/// left, serves both until `shutdown` resolves, then stops every sandbox (SIGTERM) and waits
/// for them (30 s at most).
#[expect(
    clippy::too_many_lines,
    reason = "the two listeners, the background tasks and the graceful stop, in order"
)]
pub async fn serve(
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Running, DaemonError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], state.config.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind { addr, source })?;
    let socket = state.config.socket.clone();
    let unix = socket.as_deref().map(bind_socket).transpose()?;
    let addr = listener
        .local_addr()
        .map_err(|source| DaemonError::Bind { addr, source })?;
    state
        .bound_port
        .store(addr.port(), std::sync::atomic::Ordering::Relaxed);
    // F.6.5: the previous daemon's sandboxes still ending are told to stop; its terminals,
    // which outlive it (D.16), are taken back (security F13).
    let back = crate::daemon::launch::records::at_start(&state.config.state_dir);
    match state.launcher.sweep().await {
        Ok(out) => tracing::info!(output = %out.trim(), "sandbox sweep done"),
        Err(e) => tracing::warn!(error = %e, "sandbox sweep failed"),
    }
    crate::daemon::services::terminals::take_back(&state, back.terminals).await;
    // Agents that outlived the previous daemon are taken over (issue 28 item 6).
    crate::daemon::services::sessions::take_over(&state, back.kept).await;
    let st = state.clone();
    tokio::spawn(async move {
        crate::daemon::services::images::ensure_network_filter(&st).await;
        // A warm proxy for the first filtered agent (decision 0175), when the network filter is
        // there; its idle time ends it.
        if st.builds.filter.load(std::sync::atomic::Ordering::SeqCst)
            == crate::daemon::store::builds::FILTER_PRESENT
            && let Err(e) = st.launcher.warm_proxy_pool().await
        {
            tracing::warn!(error = %e, "warm proxy pool");
        }
        // The listings' facts read once now (decision 0149): a first page load, `GET
        // /v1/harnesses` or `/v1/runtime`, does not wait on the engine.
        if let Err(e) = crate::daemon::services::images::runtime(&st, false).await {
            tracing::warn!(error = %e.problem().detail.unwrap_or_default(), "runtime check");
        }
        crate::daemon::services::harnesses::list(&st, false).await;
    });
    if let Err(e) = crate::daemon::services::images::updates::stored(&state) {
        tracing::warn!(error = %e.problem().detail.unwrap_or_default(), "image-updates.json");
    }
    tokio::spawn(crate::daemon::services::images::updates::scheduler(
        state.clone(),
    ));
    // Disposable machines (decision 0148): the last daemon's taken back, each removed after its
    // delay once no session runs in it.
    // Machines whose record is gone are adopted by their labels first (decision 0155).
    // Mini apps' queued requests the last daemon left (H.10): delivered in order.
    crate::daemon::services::apps::queue::resume_all(&state);
    let st = state.clone();
    tokio::spawn(async move {
        crate::daemon::services::machines::adopt(&st).await;
        crate::daemon::services::machines::dispose(st).await;
    });
    let app = routes::router(state.clone());
    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    // Remote control's connector (D.7): outbound to the gateway only, ended with the daemon.
    let (st, mut ending) = (state.clone(), stopping.subscribe());
    tokio::spawn(async move {
        tokio::select! {
            () = crate::daemon::services::remote::connector(st) => {}
            _ = ending.wait_for(|s| *s) => {}
        }
    });
    let unix_task = unix.map(|listener| {
        let app = app.clone().layer(axum::Extension(auth::ViaSocket));
        let listener = OwnerOnly {
            listener,
            uid: crate::socket::own_uid(),
        };
        tokio::spawn(async move {
            let graceful = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(graceful)
                .await
            {
                tracing::error!(error = %e, "socket server stopped");
            }
        })
    });
    let st = state.clone();
    let socket_path = socket.clone();
    let task = tokio::spawn(async move {
        let graceful = async move {
            shutdown.await;
            let _ = stopping.send(true);
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
        if let Some(t) = unix_task {
            let _ = t.await;
        }
        if let Some(p) = socket_path {
            let _ = std::fs::remove_file(p);
        }
    });
    match &socket {
        Some(p) => tracing::info!(%addr, socket = %p.display(), "handlerd listening"),
        None => tracing::info!(%addr, "handlerd listening"),
    }
    Ok(Running {
        addr,
        state,
        socket,
        task,
    })
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
