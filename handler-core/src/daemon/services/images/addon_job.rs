//! An addon's build (G.4): its image built untagged from its folder FROM the toolbox's
//! `:latest` (without cache, without intermediate images), checked through the sandbox as
//! agents get it (the toolbox with the new image mounted at `/opt/addons/<name>`, strict, the
//! host user, no network; the probe of [`super::addon_verdict`]), then switched to
//! `<image>:latest`. A failure or a cancel removes what it built.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use handler_contracts::SandboxSpec;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

use super::addon_verdict::{self, PROBE};
use super::job::{Outcome, built, cancelled, log_line, remove, stage, switch};
use super::{ca, verbs};
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::BuildArgs;
use crate::daemon::launch::launcher::{self, Instance};
use crate::daemon::state::AppState;
use crate::daemon::store::addons::AddonSet;

/// How long the probe may take (its `check` included).
const PROBE_WITHIN: Duration = Duration::from_secs(120);

/// An addon to build: its name, folder, image repository, commands and check.
#[derive(Debug, Clone)]
pub struct AddonBuild {
    /// The addon's name.
    pub name: String,
    /// Its folder (the build context).
    pub dir: PathBuf,
    /// Its image repository (no tag).
    pub image: String,
    /// `commands`.
    pub commands: Vec<String>,
    /// `check`.
    pub check: Option<Vec<String>>,
}

/// The valid addon `name` with an image, as it is on disk now.
pub fn load(app: &AppState, name: &str) -> Result<AddonBuild, String> {
    let set = AddonSet::read(&app.config);
    let a = set
        .addons
        .get(name)
        .ok_or_else(|| format!("addon {name:?} is gone"))?;
    let m = a
        .manifest
        .as_ref()
        .map_err(|e| format!("addon {name:?} is invalid: {e}"))?;
    let image = m
        .image
        .clone()
        .ok_or_else(|| format!("addon {name:?} has no image"))?;
    Ok(AddonBuild {
        name: name.to_string(),
        dir: a.dir.clone(),
        image,
        commands: m.commands.clone(),
        check: m.check.clone(),
    })
}

/// Every valid addon with an image whose `:latest` exists (G.4: the ones in use).
pub async fn built_ones(app: &AppState) -> Vec<AddonBuild> {
    let set = AddonSet::read(&app.config);
    let mut out = Vec::new();
    for name in set.addons.keys() {
        let Ok(a) = load(app, name) else { continue };
        if verbs(app)
            .inspect(&format!("{}:latest", a.image))
            .await
            .is_some()
        {
            out.push(a);
        }
    }
    out
}

/// The build `id` of addon `name`: built, checked, switched.
pub(super) async fn run(app: &AppState, id: &str, name: &str, cancel: &Arc<Notify>) -> Outcome {
    let a = match load(app, name) {
        Ok(a) => a,
        Err(e) => return Outcome::Failed(e),
    };
    let toolbox = format!("{}:latest", app.config.toolbox_image);
    let work = app.builds.work_dir(id);
    let new = match build(app, id, &a, &toolbox, cancel).await {
        Ok(n) => n,
        Err(o) => return o,
    };
    let outcome = match verify(app, id, &a, &new, &toolbox, &work).await {
        Err(m) => Outcome::Failed(m),
        Ok(_) if cancelled(cancel) => Outcome::Cancelled,
        Ok(version) => {
            stage(app, id, "switch");
            switch_addon(app, id, &a, &new, version).await
        }
    };
    if !matches!(outcome, Outcome::Succeeded) {
        remove(app, id, &new).await;
    }
    outcome
}

/// Builds `a`'s image FROM `toolbox`, untagged, without cache; its id.
pub(super) async fn build(
    app: &AppState,
    id: &str,
    a: &AddonBuild,
    toolbox: &str,
    cancel: &Arc<Notify>,
) -> Result<String, Outcome> {
    stage(app, id, &format!("build addon:{}", a.name));
    let mut build_args = vec![format!("TOOLBOX_IMAGE={toolbox}")];
    build_args.extend(
        runtime_arg(app, a)
            .await
            .map_err(|e| Outcome::Failed(e.clone()))?,
    );
    let args = BuildArgs {
        context: a.dir.display().to_string(),
        file: None,
        build_args,
        no_cache: true,
        ca_bundle: ca::for_build(app, id).map_err(|e| Outcome::Failed(e.to_string()))?,
    };
    built(app, id, &args, cancel).await
}

/// The build argument `APP_RUNTIME_IMAGE` for an addon whose Containerfile declares it (the
/// built-in `miniapp`: its Deno is the mini app runtime's, verified once, decision 0160): the
/// runtime's `:latest`, which must be built; none for the others.
async fn runtime_arg(app: &AppState, a: &AddonBuild) -> Result<Option<String>, String> {
    const ARG: &str = "APP_RUNTIME_IMAGE";
    let text = crate::daemon::agentfs::read_in(&a.dir, Path::new("Containerfile"), 256 * 1024)
        .map_err(|e| format!("addon {}: its Containerfile: {e}", a.name))?
        .unwrap_or_default();
    if !super::base::declares_arg(&String::from_utf8_lossy(&text), ARG) {
        return Ok(None);
    }
    let image = format!("{}:latest", super::app_runtime::IMAGE);
    if verbs(app).exists(&image).await != Some(true) {
        return Err(format!(
            "addon {} is built from the mini app runtime, which is not built yet: handler build start app-runtime, then build the addon again",
            a.name
        ));
    }
    Ok(Some(format!("{ARG}={image}")))
}

/// `:latest` of `a` moved to `new`; its version recorded as `addon:<name>`.
pub(super) async fn switch_addon(
    app: &AppState,
    id: &str,
    a: &AddonBuild,
    new: &str,
    version: String,
) -> Outcome {
    if let Err(e) = switch(app, id, &a.image, new, &verbs(app)).await {
        return Outcome::Failed(e);
    }
    let _ = app.builds.update(id, |b| {
        b.versions.insert(format!("addon:{}", a.name), version);
    });
    Outcome::Succeeded
}

/// The check of `new` for `a` in `toolbox` (G.4); its version, or why it fails.
pub async fn verify(
    app: &AppState,
    id: &str,
    a: &AddonBuild,
    new: &str,
    toolbox: &str,
    work: &Path,
) -> Result<String, String> {
    let what = format!("check addon:{}", a.name);
    stage(app, id, &what);
    let say = |l: &str| log_line(app, id, &format!("{what}: {l}"));
    let spec = probe_spec(id, a, new, toolbox, work).map_err(|e| format!("{what}: {e}"))?;
    say(&format!("starting {} without network", spec.name));
    let out = probe(app, &spec, &say)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let p = addon_verdict::read(&out);
    for l in &p.check_out {
        say(&format!("check: {l}"));
    }
    let v = addon_verdict::verdict(&a.commands, a.check.as_deref(), &p)
        .map_err(|why| format!("{what}: {}", why.join("; ")))?;
    say(&format!("version {v}"));
    say("passed");
    Ok(v)
}

/// The probe's sandbox: the toolbox, `new` mounted at the addon's path, no PATH appended.
fn probe_spec(
    id: &str,
    a: &AddonBuild,
    new: &str,
    toolbox: &str,
    work: &Path,
) -> Result<SandboxSpec, String> {
    let scope = work.join(format!("addon-{}", a.name));
    fsutil::create_dir_private(&scope).map_err(|e| format!("{}: {e}", scope.display()))?;
    let scope = std::fs::canonicalize(&scope).map_err(|e| e.to_string())?;
    let scope = scope.display().to_string();
    let target = handler_sandbox::compose::addon_mount_path(&a.name);
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        PROBE.into(),
        "probe".into(),
    ];
    argv.push(target.clone());
    argv.extend(a.check.clone().unwrap_or_default());
    let v = json!({
        "apiVersion": "handler.sandbox/v1",
        "name": format!("handler-check-{}-{}", id.replace('_', "-").to_lowercase(), a.name),
        "confinement": "strict",
        "image": toolbox,
        "argv": argv,
        "env": {},
        "workdir": scope,
        "user": {"mode": "host-user", "home": "/home/agent"},
        "mounts": [{"source": scope, "target": scope, "readOnly": true, "kind": "scope"}],
        "imageMounts": [{"image": new, "target": target}],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"},
        "labels": {"handler.check": id},
    });
    serde_json::from_value(v).map_err(|e| format!("the probe's spec: {e}"))
}

/// Runs the probe's sandbox to its end; what it printed (the launcher's lines to `say`).
pub(super) async fn probe(
    app: &AppState,
    spec: &SandboxSpec,
    say: &(dyn Fn(&str) + Sync),
) -> Result<String, String> {
    let Instance {
        mut child,
        stdin,
        mut stdout,
        stderr,
        ..
    } = app
        .launcher
        .launch(spec)
        .map_err(|e| format!("the sandbox did not start: {e}"))?;
    drop(stdin);
    let tail = launcher::StderrTail::collect(stderr, 200);
    let mut out = Vec::new();
    let read = tokio::time::timeout(
        PROBE_WITHIN,
        (&mut stdout).take(1 << 20).read_to_end(&mut out),
    )
    .await;
    launcher::stop_and_sweep(&*app.launcher, &mut child, Duration::from_secs(10)).await;
    for l in tail.finish(Duration::from_secs(5)).await {
        say(&format!("sandbox: {l}"));
    }
    match read {
        Err(_) => Err(format!(
            "the probe did not end within {} s",
            PROBE_WITHIN.as_secs()
        )),
        Ok(Err(e)) => Err(format!("the probe's output: {e}")),
        Ok(Ok(_)) => Ok(String::from_utf8_lossy(&out).into_owned()),
    }
}
