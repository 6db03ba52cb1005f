//! A mini app's backend on demand (H.3, H.5; decision 0158): started in its sandbox by the first
//! `/api` request — concurrent first requests wait on the one start (the app's slot lock) —,
//! running once `GET /api/health` answers 200 on its socket, stopped after
//! `HANDLER_APP_IDLE_TIMEOUT` without a request (a streamed answer counts as use), and by a
//! deploy, a rollback, a secret's change or the app's removal. A backend that does not become
//! healthy, or exits on its own, is `failed`; the next request tries again. Its output goes to
//! the app's log with every secret value replaced by `[secret NAME]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use handler_contracts::miniapp::AppState as Phase;
use handler_sandbox::app::{AppSandboxInput, SOCKET_NAME, app_sandbox_spec};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{app_dir, deployed_manifest, log, record, secret_path, version_dir};
use crate::daemon::launch::launcher::{self, Instance};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::images::{self, app_runtime};
use crate::daemon::state::AppState as Daemon;
use crate::daemon::state::apps::Running;

/// How long a backend has to answer `GET /api/health` with 200.
pub const HEALTH_WITHIN: Duration = Duration::from_secs(30);
/// The memory a backend gets when its manifest names none (H.1), where the host can enforce it.
pub const DEFAULT_MEMORY: &str = "512m";

/// What a request needs of a running backend.
#[derive(Debug, Clone)]
pub struct Handle {
    /// The socket on the host.
    pub socket: PathBuf,
    /// When it was last used.
    pub last_used: Arc<std::sync::Mutex<Instant>>,
    /// Answers being streamed now.
    pub streams: Arc<AtomicUsize>,
    /// Its idle connections.
    pub pool: crate::daemon::state::apps::IdleConnections,
}

impl Handle {
    /// Marks a use now.
    pub fn touch(&self) {
        *self
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }
}

fn handle(r: &Running) -> Handle {
    Handle {
        socket: r.socket.clone(),
        last_used: r.last_used.clone(),
        streams: r.streams.clone(),
        pool: r.pool.clone(),
    }
}

/// The longest path a unix socket may have (`sun_path` holds 108 bytes with its final NUL).
const SOCKET_PATH_MAX: usize = 107;

/// Whether `path` fits a unix socket address: a clear error naming how to fix it, not the
/// system's, when it does not.
pub(super) fn socket_path_ok(path: &Path) -> ApiResult<()> {
    let n = path.as_os_str().len();
    if n > SOCKET_PATH_MAX {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "socket path too long",
            format!(
                "{} is {n} bytes, over the {SOCKET_PATH_MAX} a unix socket's path may have: set HANDLER_STATE_DIR to a shorter folder",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The backend's folder for its socket, on the host.
pub fn run_dir(d: &Daemon, name: &str) -> PathBuf {
    d.config.state_dir.join("apps").join(name)
}

/// The state the API shows.
pub fn phase(d: &Daemon, name: &str) -> Phase {
    d.apps.phase(name)
}

/// A running backend for `name`, started now if it is not (H.5).
pub async fn ensure(d: &Daemon, name: &str) -> ApiResult<Handle> {
    let slot = d.apps.slot(name);
    let mut s = slot.lock().await;
    if let Some(r) = s.running.as_mut() {
        match r.child.try_wait() {
            Ok(None) => {
                let h = handle(r);
                h.touch();
                return Ok(h);
            }
            _ => {
                log(d, name, "the backend exited on its own");
                s.running = None;
                d.apps.set_phase(name, Phase::Failed);
            }
        }
    }
    d.apps.set_phase(name, Phase::Starting);
    match start(d, name).await {
        Ok(r) => {
            let h = handle(&r);
            s.generation += 1;
            let generation = s.generation;
            s.running = Some(r);
            d.apps.set_phase(name, Phase::Running);
            tokio::spawn(idle_stop(d.clone(), name.to_string(), generation));
            Ok(h)
        }
        Err(e) => {
            d.apps.set_phase(name, Phase::Failed);
            log(
                d,
                name,
                &format!(
                    "the backend did not start: {}",
                    e.detail.clone().unwrap_or_default()
                ),
            );
            Err(e)
        }
    }
}

/// Stops `name`'s backend if it runs (a deploy, a rollback, a secret changed, the app removed).
pub async fn stop(d: &Daemon, name: &str, why: &str) {
    let slot = d.apps.slot(name);
    let mut s = slot.lock().await;
    if let Some(mut r) = s.running.take() {
        s.generation += 1;
        launcher::stop_and_sweep(&*d.launcher, &mut r.child, Duration::from_secs(10)).await;
        log(d, name, &format!("the backend stopped: {why}"));
    }
    d.apps.set_phase(name, Phase::Stopped);
    // What stopped it may let a waiting queue through now (a new version, a secret).
    d.apps.waker(name).notify_one();
}

/// Stops the backend once it has not been used for the idle timeout (no answer streaming).
async fn idle_stop(d: Daemon, name: String, generation: u64) {
    let idle = d.config.app_idle_timeout;
    let tick = (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let slot = d.apps.slot(&name);
        let mut s = slot.lock().await;
        if s.generation != generation {
            return;
        }
        let Some(r) = s.running.as_mut() else {
            return;
        };
        if !matches!(r.child.try_wait(), Ok(None)) {
            log(&d, &name, "the backend exited on its own");
            s.running = None;
            d.apps.set_phase(&name, Phase::Failed);
            return;
        }
        let last = *r
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if r.streams.load(Ordering::SeqCst) == 0 && last.elapsed() >= idle {
            let mut r = s.running.take().expect("checked above");
            s.generation += 1;
            launcher::stop_and_sweep(&*d.launcher, &mut r.child, Duration::from_secs(10)).await;
            log(
                &d,
                &name,
                &format!("the backend stopped: idle for {} s", idle.as_secs()),
            );
            d.apps.set_phase(&name, Phase::Stopped);
            return;
        }
    }
}

/// Replaces every secret value in `line` by `[secret NAME]` (H.2).
pub fn redact(line: &str, secrets: &BTreeMap<String, String>) -> String {
    let mut out = line.to_string();
    let mut by_length: Vec<(&String, &String)> = secrets.iter().collect();
    by_length.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for (name, value) in by_length {
        if !value.is_empty() {
            out = out.replace(value.as_str(), &format!("[secret {name}]"));
        }
    }
    out
}

/// The secrets the version declares, with their values (409 naming one without).
fn secret_values(
    d: &Daemon,
    name: &str,
    declared: &[String],
) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for s in declared {
        let v = d.secrets.value(&secret_path(name, s)).map_err(|_| {
            ApiError::conflict(
                "secret not set",
                format!("needs.secrets: {s} has no value (handler app secret set {name} {s})"),
            )
        })?;
        out.insert(s.clone(), v);
    }
    Ok(out)
}

/// The memory a backend gets: its manifest's (enforced or refused by the runtime, A1), else
/// [`DEFAULT_MEMORY`] where the host can enforce limits, else none (said in the log).
pub(super) async fn resources(
    d: &Daemon,
    name: &str,
    declared: Option<handler_contracts::sandbox::Resources>,
) -> Option<handler_contracts::sandbox::Resources> {
    if declared.as_ref().is_some_and(|r| r.memory.is_some()) {
        return declared;
    }
    let can = images::runtime(d, false)
        .await
        .is_ok_and(|c| c.items.iter().any(|i| i.name == "cgroup-limits" && i.ok));
    if can {
        let mut r = declared.unwrap_or_default();
        r.memory = Some(DEFAULT_MEMORY.into());
        Some(r)
    } else {
        log(
            d,
            name,
            &format!(
                "this host cannot enforce memory limits: the backend runs without the default {DEFAULT_MEMORY}"
            ),
        );
        declared
    }
}

/// The version `name` serves, if it has a backend: 503 when nothing is deployed, 404 when the
/// version has no backend.
fn deployed_backend(d: &Daemon, name: &str) -> ApiResult<String> {
    let r = record(d, name)?.ok_or_else(|| ApiError::not_found(format!("no mini app {name:?}")))?;
    let version = r.deployed.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not deployed",
            format!("{name} is not deployed yet (handler app deploy {name})"),
        )
    })?;
    if !r.versions.iter().any(|v| v.version == version && v.backend) {
        return Err(ApiError::not_found(format!(
            "{name} {version} has no backend"
        )));
    }
    Ok(version)
}

async fn start(d: &Daemon, name: &str) -> ApiResult<Running> {
    let version = deployed_backend(d, name)?;
    let m = deployed_manifest(d, name, &version)?;
    let needs = m.needs.clone().unwrap_or_default();
    let secrets = secret_values(d, name, &needs.secrets)?;
    // Paths in work folders, which agents write: resolved off the async task, within a bound.
    let (d2, needs2) = (d.clone(), needs.clone());
    let files = super::blocking(move || super::app_files(&d2, Some(&needs2))).await?;
    require_runtime(d).await?;
    let notify = if needs.notify {
        Some(super::notify::listen(d, name, &version)?)
    } else {
        None
    };
    let image = format!("{}:latest", app_runtime::IMAGE);
    let run = run_dir(d, name);
    crate::daemon::fsutil::create_dir_private(&run).map_err(ApiError::internal)?;
    let socket = run.join(SOCKET_NAME);
    socket_path_ok(&socket)?;
    let _ = std::fs::remove_file(&socket);
    let suffix: u32 = rand::random();
    let spec = app_sandbox_spec(&AppSandboxInput {
        name: format!("handler-app-{name}-{suffix:08x}"),
        app: name.to_string(),
        version: version.clone(),
        image,
        version_dir: version_dir(d, name, &version).display().to_string(),
        data_dir: app_dir(d, name).join("data").display().to_string(),
        run_dir: run.display().to_string(),
        entry: m.server_entry().to_string(),
        egress: needs.egress.clone(),
        secrets: secrets.clone(),
        resources: resources(d, name, m.resources.clone()).await,
        files,
        notify_dir: notify.as_ref().map(|(dir, _)| dir.display().to_string()),
        test: false,
    });
    images::require_network_filter(d, &spec).await?;
    log(d, name, &format!("starting {version} in {}", spec.name));
    let Instance {
        mut child,
        stdin,
        stdout,
        stderr,
        ..
    } = d.launcher.launch(&spec).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "backend not started",
            e.to_string(),
        )
    })?;
    drop(stdin);
    let secrets = Arc::new(secrets);
    tokio::spawn(to_log(d.clone(), name.to_string(), stdout, secrets.clone()));
    tokio::spawn(to_log(d.clone(), name.to_string(), stderr, secrets));
    if let Err(e) = healthy(&socket, &mut child).await {
        launcher::stop_and_sweep(&*d.launcher, &mut child, Duration::from_secs(10)).await;
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "backend failed",
            format!("{name}'s backend {e} (handler app logs {name})"),
        ));
    }
    log(d, name, &format!("{version} is healthy"));
    Ok(Running {
        child,
        socket,
        last_used: Arc::new(std::sync::Mutex::new(Instant::now())),
        streams: Arc::new(AtomicUsize::new(0)),
        notify: notify.map(|(_, guard)| guard),
        pool: Default::default(),
    })
}

async fn to_log<R: tokio::io::AsyncRead + Unpin>(
    d: Daemon,
    name: String,
    from: R,
    secrets: Arc<BTreeMap<String, String>>,
) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        log(&d, &name, &format!("| {}", redact(&l, &secrets)));
    }
}

/// Waits for `GET /api/health` to answer 200 on `socket`; why not, if it does not in time.
async fn healthy(socket: &Path, child: &mut tokio::process::Child) -> Result<(), String> {
    let deadline = Instant::now() + HEALTH_WITHIN;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("exited ({st}) before it was healthy"));
        }
        if socket.exists() && health_ok(socket).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "did not answer GET /api/health with 200 within {} s",
                HEALTH_WITHIN.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

async fn health_ok(socket: &Path) -> bool {
    let req = axum::http::Request::get("/api/health")
        .header("host", "localhost")
        .body(axum::body::Body::empty());
    let Ok(req) = req else { return false };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), super::proxy::send(socket, req)).await,
        Ok(Ok(res)) if res.status() == StatusCode::OK
    )
}

/// Whether the runtime image is there (503 naming how to build it, if not).
pub async fn require_runtime(d: &Daemon) -> ApiResult<()> {
    let image = format!("{}:latest", app_runtime::IMAGE);
    if images::verbs(d).exists(&image).await == Some(true) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no runtime",
            "the mini app runtime is not built yet (handler build start app-runtime)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_over_107_bytes_is_refused_saying_how_to_fix_it() {
        assert!(
            socket_path_ok(Path::new(
                "/home/me/.local/state/handler-ai/apps/x/http.sock"
            ))
            .is_ok()
        );
        let long = format!("/{}/http.sock", "s".repeat(100));
        let e = socket_path_ok(Path::new(&long)).unwrap_err();
        assert_eq!(e.title, "socket path too long");
        assert!(e.detail.unwrap().contains("HANDLER_STATE_DIR"));
        assert!(socket_path_ok(Path::new(&format!("/{}", "s".repeat(106)))).is_ok());
    }

    #[test]
    fn every_secret_value_is_replaced_by_its_name() {
        let s = BTreeMap::from([
            ("API_KEY".to_string(), "sk-123".to_string()),
            ("OTHER".to_string(), "pw".to_string()),
        ]);
        assert_eq!(
            redact("key sk-123 and pw, sk-123 again", &s),
            "key [secret API_KEY] and [secret OTHER], [secret API_KEY] again"
        );
    }
}
