//! One build's life (D.4): it waits its turn (one build at a time), builds untagged through the
//! runtime's `image build` (its output in the log, podman's STEP n/m on the record), checks the
//! new image, and switches `:latest` to it; a failure or a cancel removes what it built. The
//! image `:latest` replaces is removed when no container uses it (retried after later builds).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::FutureExt;
use handler_contracts::HarnessDescriptor;
use handler_contracts::control::BuildState;
use tokio::sync::Notify;

use super::{NETWORK_FILTER, TOOLBOX_IMAGE, check, progress, verbs};
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::{BuildArgs, ImageError, ImageVerbs};
use crate::daemon::state::AppState;

/// How a build ended.
#[derive(Debug)]
enum Outcome {
    Succeeded,
    Failed(String),
    Cancelled,
}

/// Appends a line (ANSI removed) to the build's log, and podman's STEP n/m to its record.
fn log_line(app: &AppState, id: &str, line: &str) {
    let clean = progress::clean(line);
    if let Err(e) = app.builds.append_log(id, &format!("{clean}\n")) {
        tracing::warn!(build = id, error = %e, "build log not written");
    }
    if let Some((n, m)) = progress::step(&clean) {
        let _ = app.builds.update(id, |b| {
            b.step = Some(n);
            b.steps = Some(m);
        });
    }
}

fn stage(app: &AppState, id: &str, s: &str) {
    log_line(app, id, &format!("== {s}"));
    let _ = app.builds.update(id, |b| {
        b.stage = Some(s.to_string());
        b.step = None;
        b.steps = None;
    });
}

/// Runs build `id` to its end and records how it ended.
pub async fn run(app: AppState, id: String, cancel: Arc<Notify>) {
    let outcome = {
        let guard = tokio::select! {
            g = app.builds.queue.lock() => Some(g),
            () = cancel.notified() => None,
        };
        match guard {
            None => Outcome::Cancelled,
            Some(_turn) => {
                let o = target(&app, &id, &cancel).await;
                remove_stale(&app).await;
                let _ = std::fs::remove_dir_all(app.builds.work_dir(&id));
                o
            }
        }
    };
    app.builds
        .cancels
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&id);
    if app
        .builds
        .stopping
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        // Left running: the next start marks it failed ("daemon restarted").
        return;
    }
    let (state, error) = match outcome {
        Outcome::Succeeded => (BuildState::Succeeded, None),
        Outcome::Failed(e) => (BuildState::Failed, Some(e)),
        Outcome::Cancelled => (BuildState::Cancelled, None),
    };
    log_line(
        &app,
        &id,
        &format!(
            "== {state:?}{}",
            error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        )
        .to_lowercase(),
    );
    let _ = app.builds.update(&id, |b| {
        b.state = state;
        b.error = error;
        b.ended_at = Some(fsutil::now_rfc3339());
    });
}

async fn target(app: &AppState, id: &str, cancel: &Arc<Notify>) -> Outcome {
    let Some(b) = app.builds.get(id).ok().flatten() else {
        return Outcome::Failed("the build's record is gone".into());
    };
    if b.target == NETWORK_FILTER {
        stage(app, id, "build network-filter");
        return match verbs(app)
            .build_proxy(|l| log_line(app, id, &l), cancel.clone())
            .await
        {
            Ok(_) => Outcome::Succeeded,
            Err(ImageError::Cancelled) => Outcome::Cancelled,
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let Some(d) = app.snapshot().descriptors.get(&b.target).cloned() else {
        return Outcome::Failed(format!("harness {:?} is gone", b.target));
    };
    harness(app, id, &d, cancel).await
}

/// The harness's build context: its folder beside its descriptor (`<dir>/<name>/`), or the
/// platform's Containerfile written into the build's work folder.
fn context(app: &AppState, name: &str, work: &Path) -> Result<PathBuf, String> {
    for dir in app.config.harnesses_dirs.iter().rev() {
        let d = dir.join(name);
        if d.join("harness.toml").is_file() {
            return if d.join("Containerfile").is_file() {
                Ok(d)
            } else {
                Err(format!(
                    "{}: no Containerfile beside harness.toml",
                    d.display()
                ))
            };
        }
    }
    let text = handler_harness::descriptors::containerfile(name)
        .ok_or_else(|| format!("harness {name:?} has no Containerfile"))?;
    let ctx = work.join("context");
    fsutil::create_dir_private(&ctx).map_err(|e| e.to_string())?;
    fsutil::write_atomic(&ctx.join("Containerfile"), text.as_bytes(), 0o644)
        .map_err(|e| e.to_string())?;
    Ok(ctx)
}

async fn harness(app: &AppState, id: &str, d: &HarnessDescriptor, cancel: &Arc<Notify>) -> Outcome {
    let v = verbs(app);
    let work = app.builds.work_dir(id);
    if let Err(e) = fsutil::create_dir_private(&work) {
        return Outcome::Failed(format!("{}: {e}", work.display()));
    }
    let ctx = match context(app, &d.name, &work) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e),
    };
    stage(app, id, &format!("build {}", d.name));
    let args = BuildArgs {
        context: ctx.display().to_string(),
        file: None,
        build_args: vec![format!("TOOLBOX_IMAGE={TOOLBOX_IMAGE}:latest")],
        no_cache: true,
    };
    let built = match v
        .build(&args, |l| log_line(app, id, &l), cancel.clone())
        .await
    {
        Ok(i) if !i.is_empty() => i,
        Ok(_) => return Outcome::Failed("image build printed no image id".into()),
        Err(ImageError::Cancelled) => return Outcome::Cancelled,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    log_line(app, id, &format!("built {built}"));
    let outcome = check_and_switch(app, id, d, &built, &work, cancel).await;
    if !matches!(outcome, Outcome::Succeeded) {
        match v.remove(&built).await {
            Ok(()) => log_line(app, id, &format!("removed {built}")),
            Err(e) => log_line(app, id, &format!("could not remove {built}: {e}")),
        }
    }
    outcome
}

fn cancelled(cancel: &Arc<Notify>) -> bool {
    cancel.notified().now_or_never().is_some()
}

async fn check_and_switch(
    app: &AppState,
    id: &str,
    d: &HarnessDescriptor,
    built: &str,
    work: &Path,
    cancel: &Arc<Notify>,
) -> Outcome {
    let v = verbs(app);
    stage(app, id, &format!("check {}", d.name));
    let version = match v.read(built, handler_contracts::IMAGE_VERSION_FILE).await {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            return Outcome::Failed(format!(
                "check {}: the new image has no {} (B.6)",
                d.name,
                handler_contracts::IMAGE_VERSION_FILE
            ));
        }
    };
    log_line(app, id, &format!("check {}: version {version}", d.name));
    let conn = id.replace('_', "-");
    let say = |l: &str| log_line(app, id, l);
    if let Err(missing) = check::check(app, d, built, work, &conn, &say).await {
        return Outcome::Failed(format!("check {}: {missing}", d.name));
    }
    log_line(app, id, &format!("check {}: passed", d.name));
    if cancelled(cancel) {
        return Outcome::Cancelled;
    }
    stage(app, id, "switch");
    match switch(app, id, &d.image, built, &v).await {
        Ok(()) => {
            app.builds
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(built.to_string(), Some(version.clone()));
            let _ = app.builds.update(id, |b| {
                b.versions.insert(d.name.clone(), version);
            });
            Outcome::Succeeded
        }
        Err(e) => Outcome::Failed(e),
    }
}

/// `:latest` of `repository` moved to `built`; the image it replaces removed, or kept for
/// later while a container uses it (running agents keep their image).
async fn switch(
    app: &AppState,
    id: &str,
    repository: &str,
    built: &str,
    v: &ImageVerbs,
) -> Result<(), String> {
    let latest = format!("{repository}:latest");
    let old = v
        .inspect(&latest)
        .await
        .and_then(|i| i["id"].as_str().map(String::from));
    v.tag(built, &latest).await.map_err(|e| e.to_string())?;
    log_line(app, id, &format!("{latest} is now {built}"));
    if let Some(old) = old.filter(|o| !built.starts_with(o.as_str()) && !o.starts_with(built)) {
        match v.remove(&old).await {
            Ok(()) => log_line(app, id, &format!("removed the image it replaces, {old}")),
            Err(e) => {
                log_line(app, id, &format!("kept {old}, still in use: {e}"));
                app.builds
                    .stale
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(old);
            }
        }
    }
    Ok(())
}

/// Retries removing the images replaced while a container used them.
async fn remove_stale(app: &AppState) {
    let list: Vec<String> = std::mem::take(
        &mut *app
            .builds
            .stale
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let v = verbs(app);
    let mut kept = Vec::new();
    for old in list {
        if v.remove(&old).await.is_err() && v.inspect(&old).await.is_some() {
            kept.push(old);
        }
    }
    app.builds
        .stale
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .extend(kept);
}
