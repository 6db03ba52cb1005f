//! The images room (D.4, B.6, G.4): builds — one at a time, queued — of a harness or an addon
//! (an untagged image FROM the toolbox's `:latest`, without cache → the check → the switch) or
//! of the network filter (the runtime's `image build-proxy`); their records and logs; the image facts
//! `GET /v1/harnesses` shows. Every image operation is the sandbox executable's `image` verb.

pub mod addon_job;
pub mod addon_verdict;
pub mod app_runtime;
pub mod base;
pub mod ca;
pub mod check;
pub mod job;
pub mod lineage;
pub mod local_base;
pub mod part_job;
pub mod progress;
pub mod schedule;
pub mod target;
pub mod toolbox;
pub mod updates;
pub mod verdict;

use std::sync::Arc;

use handler_contracts::control::{Build, BuildLog, BuildRequest, BuildState};
use serde_json::Map;
use tokio::sync::Notify;

use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::ImageVerbs;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::new_id;

/// The toolbox target (D.4).
pub const TOOLBOX: &str = "toolbox";
/// The network filter target (D.4).
pub const NETWORK_FILTER: &str = "network-filter";

/// The sandbox executable's image verbs, as this daemon runs them.
pub fn verbs(app: &AppState) -> ImageVerbs {
    ImageVerbs {
        command: app.config.sandbox_command.clone(),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e)
}

/// What a build's target may name now: the harnesses and the addons (their image, or why
/// they are invalid).
fn known(app: &AppState) -> target::Known {
    let set = crate::daemon::store::addons::AddonSet::read(&app.config);
    target::Known {
        harnesses: app.snapshot().descriptors.keys().cloned().collect(),
        addons: set
            .addons
            .into_iter()
            .map(|(n, a)| (n, a.manifest.map(|m| m.image)))
            .collect(),
        parts: part_job::catalog(app)
            .map(|c| c.into_keys().collect())
            .unwrap_or_default(),
        machine_images: app.config.machine_images.clone(),
    }
}

/// The rules behind POST /v1/builds: the target checked, the build recorded (running, stage
/// "waiting" until the one before it ends) and started; 202 with it.
pub async fn start(app: &AppState, req: BuildRequest) -> ApiResult<Build> {
    let target = req.target.trim().to_string();
    target::decide(&target, &known(app))
        .map_err(|why| ApiError::unprocessable("target unknown", why))?;
    let b = Build {
        id: new_id("b_"),
        target,
        state: BuildState::Running,
        stage: Some("waiting".into()),
        step: None,
        steps: None,
        versions: Default::default(),
        error: None,
        started_at: fsutil::now_rfc3339(),
        ended_at: None,
        extra: Map::new(),
    };
    app.builds.put(&b).map_err(internal)?;
    let cancel = Arc::new(Notify::new());
    app.builds
        .cancels
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(b.id.clone(), cancel.clone());
    let (a, id) = (app.clone(), b.id.clone());
    tokio::spawn(async move { job::run(a, id, cancel).await });
    Ok(b)
}

/// Starts the build of `target` and waits for its end (one at a time with every other build,
/// its log under `/v1/builds`): its error when it did not succeed.
pub async fn run_to_end(app: &AppState, target: String) -> Result<(), String> {
    let b = start(app, BuildRequest { target })
        .await
        .map_err(|e| e.to_string())?;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let now = get(app, &b.id).await.map_err(|e| e.to_string())?;
        match now.state {
            BuildState::Running => {}
            BuildState::Succeeded => return Ok(()),
            s => {
                return Err(now.error.unwrap_or_else(|| {
                    format!("build {} {}", b.id, format!("{s:?}").to_lowercase())
                }));
            }
        }
    }
}

/// The rules behind GET /v1/builds: every build, newest first.
pub async fn list(app: &AppState) -> ApiResult<Vec<Build>> {
    let mut v = app.builds.list().map_err(internal)?;
    v.reverse();
    Ok(v)
}

/// The rules behind GET /v1/builds/{id}.
pub async fn get(app: &AppState, id: &str) -> ApiResult<Build> {
    app.builds
        .get(id)
        .map_err(internal)?
        .ok_or_else(|| ApiError::not_found(format!("build {id:?}")))
}

/// The rules behind GET /v1/builds/{id}/log?offset=.
pub async fn log(app: &AppState, id: &str, offset: u64) -> ApiResult<BuildLog> {
    let b = get(app, id).await?;
    app.builds
        .read_log(id, offset, b.state != BuildState::Running)
        .map_err(internal)
}

/// The rules behind POST /v1/builds/{id}/cancel: 409 when it has ended; the build stops (what
/// it built removed) and is answered as it is then.
pub async fn cancel(app: &AppState, id: &str) -> ApiResult<Build> {
    let b = get(app, id).await?;
    let handle = app
        .builds
        .cancels
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(id)
        .cloned();
    let (BuildState::Running, Some(n)) = (b.state, handle) else {
        return Err(ApiError::conflict(
            "build ended",
            format!("build {id} is {:?}: nothing to cancel", b.state).to_lowercase(),
        ));
    };
    n.notify_one();
    for _ in 0..600 {
        let now = get(app, id).await?;
        if now.state != BuildState::Running {
            return Ok(now);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    get(app, id).await
}

pub use crate::daemon::store::builds::ImageFacts;

/// The facts of `<repository>:latest`, from memory when read under the same build generation
/// (issue 34 item 5, decisions 0145, 0149: a build's end reads them again at once); older than
/// `HANDLER_IMAGE_FACTS_TTL`, answered from memory while one task reads them again (this bounds
/// how late a change made outside Handler, such as `podman rmi`, is seen); callers arriving
/// together wait for one read; `fresh` asks now.
pub async fn facts(app: &AppState, repository: &str, fresh: bool) -> ImageFacts {
    facts_of(app, &format!("{repository}:latest"), fresh).await
}

/// [`facts`] of image `reference` (a repository and its tag), memoized the same way (a part's
/// source and its own image, decision 0164).
pub async fn facts_of(app: &AppState, reference: &str, fresh: bool) -> ImageFacts {
    let slot = app
        .builds
        .facts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(reference.to_string())
        .or_default()
        .clone();
    let generation = app
        .builds
        .generation
        .load(std::sync::atomic::Ordering::SeqCst);
    let (a, r) = (app.clone(), reference.to_string());
    slot.get(
        generation,
        app.config.image_facts_ttl,
        fresh,
        move || async move { read_facts(&a, &r).await },
    )
    .await
    .0
}

/// The facts of image `reference`, asked of the runtime (`image inspect`, `image read` once per
/// image id).
async fn read_facts(app: &AppState, reference: &str) -> ImageFacts {
    let v = verbs(app);
    let Some(i) = v.inspect(reference).await else {
        return ImageFacts::default();
    };
    let id = i["id"].as_str().unwrap_or_default().to_string();
    let built_at = i["created"].as_str().map(String::from);
    let cached = app
        .builds
        .versions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&id)
        .cloned();
    let version = match cached {
        Some(v) => v,
        None => {
            let read = v
                .read(&id, handler_contracts::IMAGE_VERSION_FILE)
                .await
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty());
            app.builds
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.clone(), read.clone());
            read
        }
    };
    ImageFacts {
        present: true,
        version,
        built_at,
        id: Some(id).filter(|i| !i.is_empty()),
    }
}

/// The rules behind GET /v1/network-filter: from memory, asked now when `fresh`.
pub async fn network_filter(
    app: &AppState,
    fresh: bool,
) -> handler_contracts::control::NetworkFilterInfo {
    let repo = handler_sandbox::egress::topology::PROXY_IMAGE
        .trim_end_matches(":latest")
        .to_string();
    let f = facts(app, &repo, fresh).await;
    handler_contracts::control::NetworkFilterInfo {
        image: repo,
        image_present: f.present,
        version: f.version,
        built_at: f.built_at,
    }
}

/// The rules behind GET /v1/runtime: the sandbox executable's `check` (A.8), 502 when it
/// prints none; from memory as the image facts are (decision 0149), read now when `fresh`.
pub async fn runtime(
    app: &AppState,
    fresh: bool,
) -> ApiResult<handler_contracts::sandbox::RuntimeCheck> {
    // No build changes what the host can do: one generation.
    let a = app.clone();
    app.runtime_check
        .get(0, app.config.image_facts_ttl, fresh, move || async move {
            read_runtime(&a).await
        })
        .await
        .0
}

/// The sandbox executable's `check`, asked now.
async fn read_runtime(app: &AppState) -> ApiResult<handler_contracts::sandbox::RuntimeCheck> {
    let v = verbs(app).check().await.map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "runtime check failed",
            e.to_string(),
        )
    })?;
    let mut check: handler_contracts::sandbox::RuntimeCheck =
        serde_json::from_value(v).map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::BAD_GATEWAY,
                "runtime check failed",
                format!("not a RuntimeCheck: {e}"),
            )
        })?;
    // Which runtime runs, and why (issue 19): the executable and the setting that chose it.
    check
        .items
        .push(handler_contracts::sandbox::RuntimeCheckItem {
            name: "selected".into(),
            ok: true,
            required: false,
            detail: format!(
                "{} (chosen by {})",
                app.config
                    .sandbox_command
                    .first()
                    .map_or("", String::as_str),
                app.config.runtime_chosen_by
            ),
        });
    Ok(check)
}

/// At handlerd's start (D.4): the network filter built when it is missing, whatever the
/// schedule; agents needing it are refused meanwhile ([`require_network_filter`]).
pub async fn ensure_network_filter(app: &AppState) {
    use crate::daemon::store::builds::{FILTER_MISSING, FILTER_PRESENT, FILTER_UNKNOWN};
    let image = handler_sandbox::egress::topology::PROXY_IMAGE;
    let state = match verbs(app).exists(image).await {
        Some(true) => FILTER_PRESENT,
        Some(false) => FILTER_MISSING,
        None => FILTER_UNKNOWN,
    };
    app.builds
        .filter
        .store(state, std::sync::atomic::Ordering::SeqCst);
    if state == FILTER_MISSING {
        tracing::info!("the network filter is not built: building it");
        let req = BuildRequest {
            target: NETWORK_FILTER.into(),
        };
        if let Err(e) = start(app, req).await {
            tracing::warn!(error = %e.problem().detail.unwrap_or_default(), "network filter build not started");
        }
    }
}

/// How long a start needing the network filter waits for the build of it that is running.
pub const FILTER_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// As [`require_network_filter`], but a start that comes while the network filter is being
/// built — the build handlerd starts when it finds it missing ([`ensure_network_filter`]) —
/// waits for that build (at most [`FILTER_WAIT`]) instead of being refused: a `handler run` just
/// after handlerd's first start runs once the filter is there, as a person expects.
///
/// # Errors
/// 503 when the filter is still missing afterwards (no build of it, or it failed).
pub async fn await_network_filter(
    app: &AppState,
    spec: &handler_contracts::SandboxSpec,
) -> ApiResult<()> {
    let start = std::time::Instant::now();
    while lacks_network_filter(app, spec)
        && start.elapsed() < FILTER_WAIT
        && filter_build_running(app)
    {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    require_network_filter(app, spec).await
}

/// A build of the network filter is running (or waiting its turn).
fn filter_build_running(app: &AppState) -> bool {
    app.builds.list().is_ok_and(|builds| {
        builds
            .iter()
            .any(|b| b.target == NETWORK_FILTER && b.state == BuildState::Running)
    })
}

/// `spec`'s sandbox needs the network filter (a filtered network, or secrets the proxy adds, E3)
/// and it is not built.
fn lacks_network_filter(app: &AppState, spec: &handler_contracts::SandboxSpec) -> bool {
    let needs = matches!(
        spec.network,
        handler_contracts::sandbox::NetworkPolicy::Filtered { .. }
    ) || !spec.injections.is_empty();
    needs
        && app.builds.filter.load(std::sync::atomic::Ordering::SeqCst)
            == crate::daemon::store::builds::FILTER_MISSING
}

/// A start whose sandbox needs the network filter while it is not built: 503 "the network
/// filter is not built yet". Before refusing, the engine is asked once whether the image is
/// there after all: made behind handlerd's back since it last looked (loaded or built by hand
/// after its own build failed), the engine's word, not a stale "missing", decides.
///
/// # Errors
/// 503 when the engine has no network filter image either.
pub async fn require_network_filter(
    app: &AppState,
    spec: &handler_contracts::SandboxSpec,
) -> ApiResult<()> {
    if lacks_network_filter(app, spec)
        && verbs(app)
            .exists(handler_sandbox::egress::topology::PROXY_IMAGE)
            .await
            == Some(true)
    {
        app.builds.filter.store(
            crate::daemon::store::builds::FILTER_PRESENT,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
    if lacks_network_filter(app, spec) {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "network filter not built",
            "the network filter is not built yet",
        ));
    }
    Ok(())
}
