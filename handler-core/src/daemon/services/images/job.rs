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

use super::{NETWORK_FILTER, TOOLBOX, ca, check, progress, verbs};
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::{BuildArgs, ImageError, ImageVerbs};
use crate::daemon::state::AppState;

/// How a build ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Built, checked and switched.
    Succeeded,
    /// Why it failed.
    Failed(String),
    /// Cancelled.
    Cancelled,
}

/// Appends a line (ANSI removed) to the build's log, and podman's STEP n/m to its record.
pub(super) fn log_line(app: &AppState, id: &str, line: &str) {
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

/// Starts stage `s` of build `id` (its step counters cleared), said in its log.
pub(super) fn stage(app: &AppState, id: &str, s: &str) {
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
            Ok(_) => {
                app.builds.filter.store(
                    crate::daemon::store::builds::FILTER_PRESENT,
                    std::sync::atomic::Ordering::SeqCst,
                );
                Outcome::Succeeded
            }
            Err(ImageError::Cancelled) => Outcome::Cancelled,
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    if b.target == TOOLBOX {
        return toolbox(app, id, cancel).await;
    }
    if b.target == super::app_runtime::TARGET {
        return super::app_runtime::run(app, id, cancel).await;
    }
    if let Some(name) = b.target.strip_prefix(super::target::ADDON_PREFIX) {
        return super::addon_job::run(app, id, name, cancel).await;
    }
    if let Some(part) = b.target.strip_prefix(super::target::PART_PREFIX) {
        return super::part_job::run(app, id, part, cancel).await;
    }
    if let Some(image) = b.target.strip_prefix(super::target::PULL_PREFIX) {
        stage(app, id, &format!("pull {image}"));
        return match verbs(app)
            .pull(image, |l| log_line(app, id, &l), cancel.clone())
            .await
        {
            Ok(i) => {
                log_line(app, id, &format!("pulled {i}"));
                Outcome::Succeeded
            }
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
    let work = app.builds.work_dir(id);
    let toolbox = format!("{}:latest", app.config.toolbox_image);
    let built = match build_harness(app, id, d, &toolbox, &work, cancel).await {
        Ok(b) => b,
        Err(o) => return o,
    };
    let outcome = match verify(app, id, d, &built, &work).await {
        Err(m) => Outcome::Failed(m),
        Ok(_) if cancelled(cancel) => Outcome::Cancelled,
        Ok(version) => {
            stage(app, id, "switch");
            switch_harness(app, id, d, &built, version).await
        }
    };
    if !matches!(outcome, Outcome::Succeeded) {
        remove(app, id, &built).await;
    }
    outcome
}

pub(super) async fn remove(app: &AppState, id: &str, image: &str) {
    match verbs(app).remove(image).await {
        Ok(()) => log_line(app, id, &format!("removed {image}")),
        Err(e) => log_line(app, id, &format!("could not remove {image}: {e}")),
    }
}

/// Builds `d`'s image FROM `toolbox`, untagged, without cache; its id.
async fn build_harness(
    app: &AppState,
    id: &str,
    d: &HarnessDescriptor,
    toolbox: &str,
    work: &Path,
    cancel: &Arc<Notify>,
) -> Result<String, Outcome> {
    let work = work.join(&d.name);
    fsutil::create_dir_private(&work)
        .map_err(|e| Outcome::Failed(format!("{}: {e}", work.display())))?;
    let ctx = context(app, &d.name, &work).map_err(Outcome::Failed)?;
    stage(app, id, &format!("build {}", d.name));
    let args = BuildArgs {
        context: ctx.display().to_string(),
        file: None,
        build_args: vec![format!("TOOLBOX_IMAGE={toolbox}")],
        no_cache: true,
        ca_bundle: ca::for_build(app, id).map_err(|e| Outcome::Failed(e.to_string()))?,
    };
    built(app, id, &args, cancel).await
}

/// Runs `image build`; the new image's id.
pub(super) async fn built(
    app: &AppState,
    id: &str,
    args: &BuildArgs,
    cancel: &Arc<Notify>,
) -> Result<String, Outcome> {
    match verbs(app)
        .build(args, |l| log_line(app, id, &l), cancel.clone())
        .await
    {
        Ok(i) if !i.is_empty() => {
            log_line(app, id, &format!("built {i}"));
            Ok(i)
        }
        Ok(_) => Err(Outcome::Failed("image build printed no image id".into())),
        Err(ImageError::Cancelled) => Err(Outcome::Cancelled),
        Err(e) => Err(Outcome::Failed(e.to_string())),
    }
}

pub(super) fn cancelled(cancel: &Arc<Notify>) -> bool {
    cancel.notified().now_or_never().is_some()
}

/// The check of `built` for `d`: its version file read, then the check proper; its version.
async fn verify(
    app: &AppState,
    id: &str,
    d: &HarnessDescriptor,
    built: &str,
    work: &Path,
) -> Result<String, String> {
    stage(app, id, &format!("check {}", d.name));
    let version = match verbs(app)
        .read(built, handler_contracts::IMAGE_VERSION_FILE)
        .await
    {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            return Err(format!(
                "check {}: the new image has no {} (B.6)",
                d.name,
                handler_contracts::IMAGE_VERSION_FILE
            ));
        }
    };
    log_line(app, id, &format!("check {}: version {version}", d.name));
    let conn = format!("{}-{}", id.replace('_', "-"), d.name);
    let say = |l: &str| log_line(app, id, l);
    check::check(app, d, built, &work.join(&d.name), &conn, &say)
        .await
        .map_err(|m| format!("check {}: {m}", d.name))?;
    log_line(app, id, &format!("check {}: passed", d.name));
    Ok(version)
}

/// Switches `d`'s `:latest` to `built` and records what it installed.
async fn switch_harness(
    app: &AppState,
    id: &str,
    d: &HarnessDescriptor,
    built: &str,
    version: String,
) -> Outcome {
    if let Err(e) = switch(app, id, &d.image, built, &verbs(app)).await {
        return Outcome::Failed(e);
    }
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

/// The toolbox (D.4, G.4): built untagged without cache, then every harness and addon image
/// already built rebuilt FROM it and checked; all switched, or none (every image built removed).
async fn toolbox(app: &AppState, id: &str, cancel: &Arc<Notify>) -> Outcome {
    let work = app.builds.work_dir(id);
    let tb = match toolbox_image(app, id, &work, cancel).await {
        Ok(t) => t,
        Err(o) => return o,
    };
    let mut done = Rebuilt::default();
    let mut failure = rebuild_harnesses(app, id, &tb, &work, cancel, &mut done)
        .await
        .err();
    if failure.is_none() {
        failure = rebuild_addons(app, id, &tb, &work, cancel, &mut done)
            .await
            .err();
    }
    if failure.is_none() && cancelled(cancel) {
        failure = Some(Outcome::Cancelled);
    }
    if let Some(f) = failure {
        let addons = done.addons.iter().map(|(_, h, _)| h);
        for h in done.harnesses.iter().map(|(_, h, _)| h).chain(addons) {
            remove(app, id, h).await;
        }
        remove(app, id, &tb).await;
        return match f {
            Outcome::Failed(m) => Outcome::Failed(format!("{m}; nothing switched")),
            o => o,
        };
    }
    stage(app, id, "switch");
    if let Err(e) = switch(app, id, &app.config.toolbox_image, &tb, &verbs(app)).await {
        return Outcome::Failed(e);
    }
    for (d, h, v) in done.harnesses {
        if let Outcome::Failed(e) = switch_harness(app, id, &d, &h, v).await {
            return Outcome::Failed(e);
        }
    }
    for (a, h, v) in done.addons {
        if let Outcome::Failed(e) = super::addon_job::switch_addon(app, id, &a, &h, v).await {
            return Outcome::Failed(e);
        }
    }
    Outcome::Succeeded
}

/// What a toolbox rebuild has built and checked so far: (what, new image, version).
#[derive(Default)]
struct Rebuilt {
    harnesses: Vec<(HarnessDescriptor, String, String)>,
    addons: Vec<(super::addon_job::AddonBuild, String, String)>,
}

/// The new toolbox, untagged, without cache, FROM its base (pulled, or made locally).
async fn toolbox_image(
    app: &AppState,
    id: &str,
    work: &Path,
    cancel: &Arc<Notify>,
) -> Result<String, Outcome> {
    stage(app, id, "base");
    let from = match super::local_base::prepare(app, id, work, cancel).await {
        Ok(s) => s,
        Err(super::local_base::NoBase::Cancelled) => return Err(Outcome::Cancelled),
        Err(super::local_base::NoBase::Failed(m)) => return Err(Outcome::Failed(m)),
    };
    stage(app, id, "build toolbox");
    let args = BuildArgs {
        context: app.config.toolbox_dir.display().to_string(),
        file: from.file,
        build_args: from.build_args,
        no_cache: true,
        ca_bundle: ca::for_build(app, id).map_err(|e| Outcome::Failed(e.to_string()))?,
    };
    built(app, id, &args, cancel).await
}

/// Every harness image built FROM the toolbox `:latest`, rebuilt FROM `tb` and checked, into
/// `done`; one built FROM anything else (another toolbox, by hand) is left alone.
async fn rebuild_harnesses(
    app: &AppState,
    id: &str,
    tb: &str,
    work: &Path,
    cancel: &Arc<Notify>,
    done: &mut Rebuilt,
) -> Result<(), Outcome> {
    let descriptors: Vec<HarnessDescriptor> = app.snapshot().descriptors.into_values().collect();
    let toolbox = format!("{}:latest", app.config.toolbox_image);
    let old = verbs(app).inspect(&toolbox).await.unwrap_or_default();
    for d in descriptors {
        let latest = format!("{}:latest", d.image);
        let Some(image) = verbs(app).inspect(&latest).await else {
            continue;
        };
        if !super::lineage::built_from(&image, &old) {
            log_line(
                app,
                id,
                &format!("{latest} is not built FROM {toolbox}: left as it is"),
            );
            continue;
        }
        let h = build_harness(app, id, &d, tb, work, cancel).await?;
        match verify(app, id, &d, &h, work).await {
            Ok(v) => done.harnesses.push((d, h, v)),
            Err(m) => {
                remove(app, id, &h).await;
                return Err(Outcome::Failed(m));
            }
        }
    }
    Ok(())
}

/// Every addon image already built (G.4), rebuilt FROM `tb` and checked in it, into `done`.
async fn rebuild_addons(
    app: &AppState,
    id: &str,
    tb: &str,
    work: &Path,
    cancel: &Arc<Notify>,
    done: &mut Rebuilt,
) -> Result<(), Outcome> {
    for a in super::addon_job::built_ones(app).await {
        let h = super::addon_job::build(app, id, &a, tb, cancel).await?;
        match super::addon_job::verify(app, id, &a, &h, tb, work).await {
            Ok(v) => done.addons.push((a, h, v)),
            Err(m) => {
                remove(app, id, &h).await;
                return Err(Outcome::Failed(m));
            }
        }
    }
    Ok(())
}

/// `:latest` of `repository` moved to `built`; the image it replaces removed, or kept for
/// later while a container uses it (running agents keep their image).
pub(super) async fn switch(
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
        if let Some(names) = other_names(v, &old).await {
            log_line(
                app,
                id,
                &format!("kept {old}: it is also {}", names.join(", ")),
            );
            return Ok(());
        }
        match v.remove(&old).await {
            Ok(()) => log_line(app, id, &format!("removed the image it replaces, {old}")),
            Err(e) => {
                log_line(app, id, &format!("kept {old}, still in use: {e}"));
                if let Err(e) = app.builds.add_stale(&old) {
                    tracing::warn!(image = %old, error = %e, "a kept image is not remembered");
                }
            }
        }
    }
    Ok(())
}

/// The names an image still has once `:latest` moved off it, when it has any: then another
/// name (a base image the toolbox was a second name of, a tag the person made) owns it, and
/// removing it by id would delete that name's image.
async fn other_names(v: &ImageVerbs, image: &str) -> Option<Vec<String>> {
    let names: Vec<String> = v
        .inspect(image)
        .await?
        .get("names")?
        .as_array()?
        .iter()
        .filter_map(|n| n.as_str().map(String::from))
        .filter(|n| !n.is_empty() && !n.starts_with("<none>"))
        .collect();
    (!names.is_empty()).then_some(names)
}

/// Retries removing the images replaced while a container used them.
async fn remove_stale(app: &AppState) {
    let list = app.builds.take_stale();
    let v = verbs(app);
    let mut kept = Vec::new();
    for old in list {
        // Named again since (or still another name's): not Handler's to remove any more.
        if other_names(&v, &old).await.is_some() {
            continue;
        }
        if v.remove(&old).await.is_err() && v.inspect(&old).await.is_some() {
            kept.push(old);
        }
    }
    if let Err(e) = app.builds.keep_stale(kept) {
        tracing::warn!(error = %e, "the images kept in use are not remembered");
    }
}
