//! Automatic image updates (D.4): `<state>/image-updates.json` (ImageUpdates, unknown fields
//! kept; the first start and the Handler version that last ran them in `firstStart` and
//! `handlerVersion`), `GET/PUT /v1/image-updates`, `POST /v1/image-updates/run`, and the run:
//! the network filter, then every harness and addon image already built, one build after the
//! other. The toolbox never: it is the user's. When a run is due is `schedule::next_run`; the
//! scheduler's look at a given time is `tick`.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use handler_contracts::control::{BuildRequest, BuildState, ImageUpdates, ImageUpdatesRequest};
use serde_json::{Map, Value};

use super::{NETWORK_FILTER, schedule, start, verbs};
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// This handlerd's version: a different one recorded means an upgrade (a run at once).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

fn path(app: &AppState) -> std::path::PathBuf {
    app.config.state_dir.join("image-updates.json")
}

fn time(v: Option<&str>) -> Option<SystemTime> {
    v.and_then(|t| humantime::parse_rfc3339(t).ok())
}

fn fmt(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The stored document; on the first start it is made (weekly, this version, now).
pub fn stored(app: &AppState) -> ApiResult<ImageUpdates> {
    let p = path(app);
    if let Some(text) = fsutil::read_optional(&p).map_err(ApiError::internal)? {
        return serde_json::from_str(&text)
            .map_err(|e| ApiError::internal(format!("{}: {e}", p.display())));
    }
    let mut extra = Map::new();
    extra.insert("firstStart".into(), Value::String(fsutil::now_rfc3339()));
    extra.insert("handlerVersion".into(), Value::String(VERSION.into()));
    let u = ImageUpdates {
        schedule: Default::default(),
        running: false,
        last_run: None,
        next_run: None,
        last_failed: Vec::new(),
        extra,
    };
    write(app, &u)?;
    Ok(u)
}

fn write(app: &AppState, u: &ImageUpdates) -> ApiResult<()> {
    let mut u = u.clone();
    u.running = false;
    u.next_run = None;
    let bytes = serde_json::to_vec_pretty(&u).map_err(ApiError::internal)?;
    fsutil::write_atomic(&path(app), &bytes, 0o600).map_err(ApiError::internal)
}

fn facts<'a>(u: &'a ImageUpdates, now: SystemTime) -> schedule::Facts<'a> {
    schedule::Facts {
        schedule: u.schedule,
        first_start: time(u.extra.get("firstStart").and_then(Value::as_str)).unwrap_or(now),
        last_run: time(u.last_run.as_deref()),
        last_version: u.extra.get("handlerVersion").and_then(Value::as_str),
        version: VERSION,
        now,
    }
}

/// The rules behind GET /v1/image-updates: the document, whether a run is going on, the next.
pub async fn get(app: &AppState) -> ApiResult<ImageUpdates> {
    let mut u = stored(app)?;
    u.running = app.builds.updates_running.load(Ordering::SeqCst);
    u.next_run = schedule::next_run(&facts(&u, SystemTime::now())).map(fmt);
    Ok(u)
}

/// The rules behind PUT /v1/image-updates.
pub async fn put(app: &AppState, req: ImageUpdatesRequest) -> ApiResult<ImageUpdates> {
    let _g = app.write_lock.lock().await;
    let mut u = stored(app)?;
    u.schedule = req.schedule;
    write(app, &u)?;
    drop(_g);
    get(app).await
}

/// The rules behind POST /v1/image-updates/run: 409 while one runs; else started.
pub async fn run_now(app: &AppState) -> ApiResult<ImageUpdates> {
    if app.builds.updates_running.swap(true, Ordering::SeqCst) {
        return Err(ApiError::conflict(
            "updates running",
            "an update run is going on",
        ));
    }
    let a = app.clone();
    tokio::spawn(async move { run(&a).await });
    get(app).await
}

/// One run (the flag already set): the network filter, then each harness image already built.
async fn run(app: &AppState) {
    let started = fsutil::now_rfc3339();
    let mut targets = vec![NETWORK_FILTER.to_string()];
    for d in app.snapshot().descriptors.values() {
        if verbs(app)
            .inspect(&format!("{}:latest", d.image))
            .await
            .is_some()
        {
            targets.push(d.name.clone());
        }
    }
    // D.4: every addon image already built too, each built FROM the toolbox and checked like a
    // harness image, switched only once checked.
    for a in super::addon_job::built_ones(app).await {
        targets.push(format!("{}{}", super::target::ADDON_PREFIX, a.name));
    }
    let mut failed = Vec::new();
    for t in targets {
        let ok = match start(app, BuildRequest { target: t.clone() }).await {
            Ok(b) => wait(app, &b.id).await == Some(BuildState::Succeeded),
            Err(_) => false,
        };
        if !ok {
            failed.push(t);
        }
    }
    {
        let _g = app.write_lock.lock().await;
        if let Ok(mut u) = stored(app) {
            u.last_run = Some(started);
            u.last_failed = failed;
            u.extra
                .insert("handlerVersion".into(), Value::String(VERSION.into()));
            let _ = write(app, &u);
        }
    }
    app.builds.updates_running.store(false, Ordering::SeqCst);
}

async fn wait(app: &AppState, id: &str) -> Option<BuildState> {
    loop {
        let b = app.builds.get(id).ok().flatten()?;
        if b.state != BuildState::Running {
            return Some(b.state);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// handlerd's scheduler: every ten minutes, [`tick`] at the clock's time.
pub async fn scheduler(app: AppState) {
    loop {
        tokio::time::sleep(Duration::from_secs(600)).await;
        tick(&app, SystemTime::now()).await;
    }
}

/// One look of the scheduler at `now` (the clock is the caller's): a run, waited for, when one
/// is due (`schedule::due`) and none is going on. Whether it ran.
pub async fn tick(app: &AppState, now: SystemTime) -> bool {
    let due = stored(app)
        .map(|u| schedule::due(&facts(&u, now)))
        .unwrap_or(false);
    if due && !app.builds.updates_running.swap(true, Ordering::SeqCst) {
        tracing::info!("automatic image updates: starting");
        run(app).await;
        return true;
    }
    false
}
