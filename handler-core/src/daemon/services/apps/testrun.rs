//! A version's tests before its deploy (H.3, H.6; decision 0158): `deno test` on the server
//! folder of the staged copy, in the backend's sandbox with its permissions, an empty data folder
//! and no secret (H.2); their output in the app's log, the end of it in the refusal.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use handler_contracts::miniapp::MiniAppManifest;
use handler_sandbox::app::{AppSandboxInput, app_sandbox_spec};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::backend::resources;
use super::{app_dir, log};
use crate::daemon::launch::launcher::{self, Instance};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::images::{self, app_runtime};
use crate::daemon::state::AppState as Daemon;

/// How long a version's tests may run.
pub const TESTS_WITHIN: Duration = Duration::from_secs(300);

/// Runs the version's tests (H.3, H.6): `deno test` on its server folder, copied at `staged`,
/// with the backend's permissions, an empty data folder and no secret; 422 with the end of their
/// output when they fail.
pub async fn run_tests(
    d: &Daemon,
    name: &str,
    staged: &Path,
    m: &MiniAppManifest,
) -> ApiResult<()> {
    let scratch = scratch(d, name)?;
    let spec = spec(d, name, staged, m, scratch.path()).await;
    images::require_network_filter(d, &spec).await?;
    log(
        d,
        name,
        &format!("testing {}: {}", m.version, spec.argv.join(" ")),
    );
    let Instance {
        mut child,
        stdin,
        stdout,
        stderr,
        ..
    } = d
        .launcher
        .launch(&spec)
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "tests not started", e.to_string()))?;
    drop(stdin);
    let tail = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let out = tokio::spawn(keep_tail(d.clone(), name.to_string(), stdout, tail.clone()));
    let err = tokio::spawn(keep_tail(d.clone(), name.to_string(), stderr, tail.clone()));
    let status = tokio::time::timeout(TESTS_WITHIN, child.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), out).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), err).await;
    let tail: Vec<String> = tail
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    match status {
        Ok(Ok(st)) if st.success() => {
            log(d, name, &format!("the tests of {} passed", m.version));
            Ok(())
        }
        Ok(Ok(st)) => Err(ApiError::unprocessable(
            "tests failed",
            format!(
                "{name} {}: deno test exited with {st}, not deployed: {}",
                m.version,
                tail.join(" / ")
            ),
        )),
        Ok(Err(e)) => Err(ApiError::internal(e)),
        Err(_) => {
            launcher::stop_and_sweep(&*d.launcher, &mut child, Duration::from_secs(10)).await;
            Err(ApiError::unprocessable(
                "tests failed",
                format!(
                    "{name} {}: the tests did not end within {} s, not deployed",
                    m.version,
                    TESTS_WITHIN.as_secs()
                ),
            ))
        }
    }
}

/// An empty data folder and socket folder for the tests, removed after them.
fn scratch(d: &Daemon, name: &str) -> ApiResult<tempfile::TempDir> {
    let scratch = tempfile::Builder::new()
        .prefix(".tests-")
        .tempdir_in(app_dir(d, name))
        .map_err(ApiError::internal)?;
    for sub in ["data", "run"] {
        std::fs::create_dir(scratch.path().join(sub)).map_err(ApiError::internal)?;
    }
    Ok(scratch)
}

/// The tests' sandbox: the backend's, with `deno test` on the server folder.
async fn spec(
    d: &Daemon,
    name: &str,
    staged: &Path,
    m: &MiniAppManifest,
    scratch: &Path,
) -> handler_contracts::SandboxSpec {
    let suffix: u32 = rand::random();
    let needs = m.needs.clone().unwrap_or_default();
    app_sandbox_spec(&AppSandboxInput {
        name: format!("handler-app-test-{name}-{suffix:08x}"),
        app: name.to_string(),
        version: m.version.clone(),
        image: format!("{}:latest", app_runtime::IMAGE),
        version_dir: staged.display().to_string(),
        data_dir: scratch.join("data").display().to_string(),
        run_dir: scratch.join("run").display().to_string(),
        entry: m.server_entry().to_string(),
        egress: needs.egress,
        secrets: BTreeMap::new(),
        resources: resources(d, name, m.resources.clone()).await,
        files: Vec::new(),
        notify_dir: None,
        test: true,
    })
}

/// Logs every line and keeps the last ten (a test run's failure names them).
async fn keep_tail<R: tokio::io::AsyncRead + Unpin>(
    d: Daemon,
    name: String,
    from: R,
    tail: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        log(&d, &name, &format!("| test: {l}"));
        let mut t = tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.push_back(l.chars().take(300).collect());
        if t.len() > 10 {
            t.pop_front();
        }
    }
}
