//! Machines (issue 29 item 2, decision 0142): `/v1/machines` — a request checked (its id, the
//! daemon's allowed images, the network a machine can have today), made into a MachineSpec
//! (the machine's own folder `<data>/machines/<id>/work` at its workdir, kept across restarts)
//! and created by the runtime's `machine create`; its record in `<data>/machines/<id>.json`.
//! The state is always the runtime's: a machine whose container is gone is shown `missing`,
//! never made again; machines outlive handlerd (they are the person's) and a restarted daemon
//! lists them from its records, adopting by their labels those whose record is gone (decision
//! 0155).

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::SandboxSpec;
use handler_contracts::machine::parts::{MountedPart, PartLeftOut, PartsOutcome};
use handler_contracts::machine::profile::{self, Profile, Profiles};
use handler_contracts::machine::{
    DISPOSABLE, DISPOSABLE_DELAY_MS, Disposable, MachineInfo, MachineMount, MachineRequest,
    MachineState, MachineStats, container_name, disposable_id, is_disposable_id, valid_id,
};
use handler_contracts::sandbox::{Mount, MountKind, NetworkPolicy, Resources};
use handler_sandbox::verbs::MachineVerb;
use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;
use crate::daemon::launch::agent::{self as start_path, Place};
use crate::daemon::launch::launcher::LauncherError;
use crate::daemon::launch::prepare::{Purpose, prepare};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use handler_sandbox::machine::adopt;
use handler_sandbox::machine::session::{self, MachineBase};

/// The runtime's exit code for "no machine of that id" (`runtime::sandbox::machine`).
const NO_MACHINE: i32 = 3;

/// The process a machine starts with: it waits, and ends on SIGTERM.
const IDLE: [&str; 3] = [
    "sh",
    "-c",
    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done",
];

/// A machine's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    request: MachineRequest,
    container_id: String,
    created_at: String,
    /// The MachineSpec it was made from (decision 0147: what its agents' sessions are checked
    /// against). Absent in records made before it was kept: such a machine is for no agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<SandboxSpec>,
    /// A disposable machine's session and delay (decision 0148).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disposable: Option<Disposable>,
    /// A dev container's folder and what `machine up` found (decision 0161).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    devcontainer: Option<super::machine_devcontainer::Kept>,
    /// The parts it was made with (decision 0164).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<MountedPart>,
    /// The parts asked for and left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts_left_out: Vec<PartLeftOut>,
}

fn dir(app: &AppState) -> PathBuf {
    app.config.data_dir.join("machines")
}

fn record_path(app: &AppState, id: &str) -> PathBuf {
    dir(app).join(format!("{id}.json"))
}

fn read(app: &AppState, id: &str) -> ApiResult<Record> {
    if !valid_id(id) {
        return Err(ApiError::not_found(format!("machine {id:?}")));
    }
    let bytes = fsutil::read_optional(&record_path(app, id))
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found(format!("machine {id:?}")))?;
    serde_json::from_str(&bytes).map_err(ApiError::internal)
}

/// 404 unless machine `id` is one of this daemon's.
pub fn known(app: &AppState, id: &str) -> ApiResult<()> {
    read(app, id).map(|_| ())
}

/// The runtime's refusal as the API's: 64/65 name the field (422), 3 the machine gone (404).
fn refused(e: LauncherError) -> ApiError {
    match e {
        LauncherError::Verb {
            code: Some(64 | 65),
            stderr,
            ..
        } => ApiError::unprocessable("machine refused", stderr),
        LauncherError::Verb {
            code: Some(NO_MACHINE),
            stderr,
            ..
        } => ApiError::not_found(stderr),
        other => ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "the runtime failed",
            other.to_string(),
        ),
    }
}

/// A request's network (a 400 naming `network` or `allow`): `filtered` through the machine's
/// own proxy (decision 0153) to the hosts `allow` lists, enforced; `common` is what a filtered
/// machine made for agents allows when `allow` is left out (their common list), else none.
fn network_of(req: &MachineRequest, common: Option<NetworkPolicy>) -> ApiResult<NetworkPolicy> {
    let mode = req.network.as_deref().unwrap_or("none");
    if req.allow.is_some() && mode != "filtered" {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "allow: only a filtered machine has an allow-list (network is {mode:?}): set network to filtered, or leave allow out"
            ),
        ));
    }
    Ok(match mode {
        "none" => NetworkPolicy::None,
        "open" => NetworkPolicy::Open,
        "filtered" => match (&req.allow, common) {
            (Some(allow), _) => NetworkPolicy::Filtered {
                allow: allow.clone(),
                enforcement: handler_contracts::sandbox::Enforcement::Enforce,
            },
            (None, Some(common)) => common,
            (None, None) => {
                return Err(ApiError::bad_request(
                    "invalid machine",
                    "allow: a filtered machine names the hosts it may reach (allow: [\"HOST:PORT\", ...]); use [] for none",
                ));
            }
        },
        other => {
            return Err(ApiError::bad_request(
                "invalid machine",
                format!("network: {other:?} is not none, filtered or open"),
            ));
        }
    })
}

/// The labels every machine of this daemon carries (decision 0155): made by handlerd, the
/// daemon's data folder's digest, its network as requested — what adoption reads back.
fn own_labels(app: &AppState, req: &MachineRequest) -> BTreeMap<String, String> {
    [
        ("handler.machine.made-by", "handlerd".to_string()),
        (adopt::DATA_LABEL, data_key(app)),
        (
            adopt::NETWORK_LABEL,
            req.network.clone().unwrap_or_else(|| "none".into()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// This daemon's mark on its machines: the first 16 hex digits of its data folder's sha256.
fn data_key(app: &AppState) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(app.config.data_dir.as_os_str().as_encoded_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The MachineSpec of `req` (checked; an image it names) for machine folder `work`.
fn spec_of(
    app: &AppState,
    req: &MachineRequest,
    image: &str,
    work: &str,
) -> ApiResult<SandboxSpec> {
    let network = network_of(req, None)?;
    // Decision 0163: with a folder, commands start in it unless the request says where, and
    // the machine's own folder stays at /work.
    let folder = req.folder.as_deref();
    let workdir = req
        .workdir
        .clone()
        .or_else(|| folder.map(String::from))
        .unwrap_or_else(|| "/work".into());
    let work_at = match (&req.workdir, folder) {
        (Some(w), Some(f)) if w != f => w.clone(),
        (_, Some(_)) => "/work".to_string(),
        (w, None) => w.clone().unwrap_or_else(|| "/work".into()),
    };
    let doc = serde_json::json!({
        "apiVersion": "handler.sandbox/v1",
        "name": container_name(&req.name),
        "image": image,
        "argv": IDLE,
        "env": {},
        "workdir": workdir,
        "user": {"mode": "host-user", "home": "/home/handler"},
        "mounts": [],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"},
        "labels": own_labels(app, req),
    });
    let mut spec: SandboxSpec = serde_json::from_value(doc).map_err(ApiError::internal)?;
    spec.network = network;
    spec.mounts = vec![Mount {
        source: work.to_string(),
        target: work_at,
        read_only: false,
        kind: MountKind::State,
    }];
    if let Some(f) = folder {
        spec.mounts.push(Mount {
            source: f.to_string(),
            target: f.to_string(),
            read_only: false,
            kind: MountKind::Scope,
        });
    }
    // Decision 0168: each target its own; a writable one a scope's (its `.git` read-only).
    for (i, m) in req.mounts.iter().enumerate() {
        let target = m.target.trim_end_matches('/');
        if let Some(other) = spec.mounts.iter().find(|x| x.target == target) {
            return Err(ApiError::bad_request(
                "invalid machine",
                format!(
                    "mounts[{i}].target: {target} is where {} is mounted already: give it another target",
                    if other.kind == MountKind::State {
                        "the machine's own folder".to_string()
                    } else {
                        other.source.clone()
                    }
                ),
            ));
        }
        spec.mounts.push(Mount {
            source: m.source.clone(),
            target: target.to_string(),
            read_only: m.read_only,
            // Writable: a scope's, at its own path (its repository guarded); read-only elsewhere.
            kind: if m.read_only {
                MountKind::Knowledge
            } else {
                MountKind::Scope
            },
        });
    }
    if req.cpus.is_some() || req.memory.is_some() {
        spec.resources = Some(Resources {
            memory: req.memory.clone(),
            cpus: req.cpus.clone(),
        });
    }
    Ok(spec)
}

/// The daemon's profiles (decision 0156): `<config>/profiles.toml`, none when it is missing; a
/// document that does not read or validate is a 422 naming the file and the field.
pub fn profiles(app: &AppState) -> ApiResult<Profiles> {
    let path = app.config.config_dir.join("profiles.toml");
    let Some(text) = fsutil::read_optional(&path).map_err(ApiError::internal)? else {
        return Ok(Profiles::default());
    };
    let bad = |e: String| {
        ApiError::unprocessable("profiles unusable", format!("{}: {e}", path.display()))
    };
    let doc: Profiles = toml::from_str(&text).map_err(|e| bad(e.message().to_string()))?;
    doc.validate().map_err(|e| bad(e.to_string()))?;
    Ok(doc)
}

/// Profile `name` (400 naming `profile` and the known ones).
fn profile(app: &AppState, name: &str, field: &str) -> ApiResult<Profile> {
    let all = profiles(app)?;
    all.profiles.get(name).cloned().ok_or_else(|| {
        ApiError::bad_request(
            "no such profile",
            format!(
                "{field}: no profile {name:?} (profiles: {}; in profiles.toml)",
                all.names()
            ),
        )
    })
}

/// Profile `name` for `disposable:<name>` (decision 0156): it exists and is disposable (400
/// naming `machine` otherwise).
pub fn disposable_profile(app: &AppState, name: &str) -> ApiResult<Profile> {
    let p = profile(app, name, "machine")?;
    if !p.disposable {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "machine: profile {name:?} is not disposable (disposable = true in profiles.toml), so no session makes one of it"
            ),
        ));
    }
    Ok(p)
}

/// POST /v1/machines: made and started (201).
pub async fn create(app: &AppState, req: MachineRequest) -> ApiResult<MachineInfo> {
    if let Some(name) = &req.profile
        && profile(app, name, "profile")?.disposable
    {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "profile: {name:?} is disposable: its machines are made at a session's start (an agent's machine \"disposable:{name}\"), never ahead of time"
            ),
        ));
    }
    if is_disposable_id(&req.name) {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "name: {:?} has the form of a session's disposable machine's id (d- and 16 hex digits): pick another",
                req.name
            ),
        ));
    }
    make(app, req, None).await
}

/// A request's name and image: a 400 naming the field.
fn check_request(app: &AppState, req: &MachineRequest) -> ApiResult<()> {
    if !valid_id(&req.name) {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "name: {:?} is not a machine id (a lowercase DNS label of at most 40 characters)",
                req.name
            ),
        ));
    }
    if !req.mounts.is_empty()
        && (!req.agents.is_empty() || req.source.as_deref() == Some("devcontainer"))
    {
        return Err(ApiError::bad_request(
            "invalid machine",
            "mounts: a machine made for agents mounts their scopes, a dev container its folder: leave mounts out",
        ));
    }
    if let Some((i, why)) = req
        .mounts
        .iter()
        .enumerate()
        .find_map(|(i, m)| MachineMount::target_refusal(&m.target).map(|w| (i, w)))
    {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!("mounts[{i}].target: {:?} {why}", req.mounts[i].target),
        ));
    }
    match req.source.as_deref() {
        None | Some("image") => {}
        Some("devcontainer") if req.folder.is_some() => {
            return Err(ApiError::bad_request(
                "invalid machine",
                "folder: a dev container is mounted its own folder (devcontainer): leave folder out",
            ));
        }
        Some("devcontainer") => return Ok(()),
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid machine",
                format!("source: {other:?} is not image or devcontainer"),
            ));
        }
    }
    if req.folder.is_some() && !req.agents.is_empty() {
        return Err(ApiError::bad_request(
            "invalid machine",
            "folder: a machine made for agents mounts their scopes: leave folder out",
        ));
    }
    match &req.image {
        Some(image) => {
            app.config
                .machine_images
                .check(image)
                .map_err(|e| ApiError::bad_request("invalid machine", format!("image: {e}")))?;
        }
        None if req.agents.is_empty() => {
            return Err(ApiError::bad_request(
                "invalid machine",
                "image: required, unless the machine is made for agents (agents: [...]), whose harness image it then runs",
            ));
        }
        None => {}
    }
    Ok(())
}

/// The OCI runtime of `req`'s profile (decision 0162: the seed's profile-only `ociRuntime`).
fn oci_runtime_of(app: &AppState, req: &MachineRequest) -> ApiResult<Option<String>> {
    match &req.profile {
        Some(name) => Ok(profile(app, name, "profile")?.oci_runtime),
        None => Ok(None),
    }
}

/// Decision 0156: what the request leaves out, from its profile.
fn with_profile(app: &AppState, req: MachineRequest) -> ApiResult<MachineRequest> {
    Ok(match &req.profile {
        Some(name) => {
            let p = profile(app, name, "profile")?;
            for part in &p.parts {
                tracing::info!(profile = %name, part, "part left out: no part of that id is built");
            }
            profile::apply(&req, &p)
        }
        None => req,
    })
}

/// Makes machine `req` (checked here), `disposable` for a session's own, counted and made under
/// `machine_make` (409 past `HANDLER_MACHINE_MAX`).
/// `image` on the engine: pulled now (the build `pull:<image>`, its progress under
/// `/v1/builds`) when the engine says it has none; 422 naming it when the pull fails.
async fn pulled(app: &AppState, image: &str) -> ApiResult<()> {
    if super::images::verbs(app).exists(image).await != Some(false) {
        return Ok(());
    }
    super::images::run_to_end(
        app,
        format!("{}{image}", super::images::target::PULL_PREFIX),
    )
    .await
    .map_err(|e| {
        ApiError::unprocessable(
            "image not pulled",
            format!("image: {image} is not on this machine and could not be pulled: {e}"),
        )
    })
}

/// `req` with its profile's settings, checked (a 400 naming the field), its folder resolved
/// (decision 0163: inside a work folder, never Handler's own — an agent's scope's rule; the
/// record keeps it resolved).
fn checked(app: &AppState, req: MachineRequest) -> ApiResult<MachineRequest> {
    let mut req = with_profile(app, req)?;
    check_request(app, &req)?;
    if let Some(f) = &req.folder {
        let canon = crate::daemon::store::folders::check_scope(&app.config, "folder", f)?;
        req.folder = Some(canon.display().to_string());
    }
    // Decision 0168: each source where a folder may be, resolved for the record.
    for (i, m) in req.mounts.iter_mut().enumerate() {
        let field = format!("mounts[{i}].source");
        let canon = crate::daemon::store::folders::check_scope(&app.config, &field, &m.source)?;
        let canon = canon.display().to_string();
        if m.target == m.source {
            m.target.clone_from(&canon);
        }
        m.source = canon;
        if !m.read_only && m.target.trim_end_matches('/') != m.source {
            return Err(ApiError::bad_request(
                "invalid machine",
                format!(
                    "mounts[{i}].target: a writable folder is mounted at its own path ({}), where the git guard keeps its .git read-only: leave the target out, or mount it read-only",
                    m.source
                ),
            ));
        }
    }
    Ok(req)
}

/// The record's path of a new machine `name`: 409 when the daemon keeps its most machines or
/// one of that name exists. Called under `machine_make`.
fn room_for(app: &AppState, name: &str) -> ApiResult<PathBuf> {
    let kept = ids(app).len();
    if kept >= app.config.machine_max {
        return Err(ApiError::conflict(
            "too many machines",
            format!(
                "this daemon keeps {kept} machines, its most (HANDLER_MACHINE_MAX={}): delete one (handler machine rm NAME)",
                app.config.machine_max
            ),
        ));
    }
    let path = record_path(app, name);
    if path.exists() {
        return Err(ApiError::conflict(
            "machine exists",
            format!("name: a machine {name:?} exists already"),
        ));
    }
    Ok(path)
}

async fn make(
    app: &AppState,
    req: MachineRequest,
    disposable: Option<Disposable>,
) -> ApiResult<MachineInfo> {
    let mut req = checked(app, req)?;
    // Decision 0165: an image the engine does not have is pulled first, as a build.
    if req.source.as_deref() != Some("devcontainer")
        && let Some(image) = &req.image
    {
        pulled(app, image).await?;
    }
    // Decision 0164: its parts ready before it is made (built now if need be), one that
    // cannot be built left out by name; not held under the lock that makes machines.
    let mut parts = if req.parts.is_empty() {
        PartsOutcome::default()
    } else {
        super::parts::ensure(app, &req.parts).await?
    };
    let _making = app.machine_make.lock().await;
    let path = room_for(app, &req.name)?;
    if req.source.as_deref() == Some("devcontainer") {
        return make_devcontainer(app, req, parts, disposable).await;
    }
    let work = dir(app).join(&req.name).join("work");
    fsutil::create_dir_private(&work).map_err(ApiError::internal)?;
    let made = match &req.image {
        _ if !req.agents.is_empty() => {
            let base = plain_base(app, &req, &work.display().to_string(), disposable.as_ref());
            match for_agents(app, &req, base).await {
                Ok((spec, needs)) => agents_parts(app, &mut parts, &needs, disposable.is_some())
                    .await
                    .map(|()| spec),
                Err(e) => Err(e),
            }
        }
        Some(image) => spec_of(app, &req, image, &work.display().to_string()),
        None => unreachable!("refused above"),
    };
    let mounted: Vec<MountedPart> = parts.ready.iter().map(|r| r.part.clone()).collect();
    let made = made.and_then(|s| {
        handler_sandbox::machine::parts::with_parts(s, &mounted)
            .map_err(|e| ApiError::bad_request("invalid machine", e.to_string()))
    });
    let spec = match made.and_then(|s| Ok((s, oci_runtime_of(app, &req)?))) {
        Ok((s, runtime)) => SandboxSpec {
            oci_runtime: runtime,
            ..s
        },
        Err(e) => {
            let _ = std::fs::remove_dir_all(dir(app).join(&req.name));
            return Err(e);
        }
    };
    req.image = Some(spec.image.clone());
    if let NetworkPolicy::Filtered { allow, .. } = &spec.network {
        // The record names the list the machine was made with (its agents' common one).
        req.allow = Some(allow.clone());
    }
    let doc = serde_json::to_vec(&spec).map_err(ApiError::internal)?;
    let out = app
        .launcher
        .machine(&MachineVerb::Create, Some(doc))
        .await
        .map_err(refused);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            let _ = std::fs::remove_dir_all(dir(app).join(&req.name));
            return Err(e);
        }
    };
    let r = Record {
        request: req,
        container_id: out.trim().to_string(),
        created_at: fsutil::now_rfc3339(),
        spec: Some(spec),
        disposable,
        devcontainer: None,
        parts: mounted,
        parts_left_out: parts.left_out,
    };
    let bytes = serde_json::to_vec_pretty(&r).map_err(ApiError::internal)?;
    fsutil::write_atomic(&path, &bytes, 0o600).map_err(ApiError::internal)?;
    tracing::info!(machine = %r.request.name, image = %r.request.image.as_deref().unwrap_or_default(), agents = ?r.request.agents, "machine made");
    super::machine_events::poke(app);
    Ok(info(r, MachineState::Running))
}

/// A container someone made by hand for the folder adopted, never duplicated (the seed's
/// connect); none (the runtime's 3): made by `machine up`. What it found, and whether adopted.
async fn adopt_or_up(
    app: &AppState,
    doc: Vec<u8>,
) -> ApiResult<(handler_contracts::machine::DevcontainerUp, bool)> {
    let mut adopted = true;
    let mut out = app
        .launcher
        .machine(&MachineVerb::Adopt, Some(doc.clone()))
        .await;
    if let Err(LauncherError::Verb {
        code: Some(NO_MACHINE),
        ..
    }) = &out
    {
        adopted = false;
        out = app.launcher.machine(&MachineVerb::Up, Some(doc)).await;
    }
    let up = serde_json::from_str(out.map_err(refused)?.trim()).map_err(ApiError::internal)?;
    Ok((up, adopted))
}

/// The parts a dev container was asked for and does not have: those left out, and every one
/// when the container was made by hand and adopted (a running container never gains a part).
fn adopted_parts(adopted: bool, parts: PartsOutcome) -> Vec<PartLeftOut> {
    let mut out = parts.left_out;
    if adopted {
        out.extend(parts.ready.into_iter().map(|r| PartLeftOut {
            id: r.part.id,
            reason: "the dev container was made by hand and adopted: a running container never gains a part (make it again with Handler)".into(),
        }));
    }
    out
}

/// The machine made from folder `shown`, if one was.
fn dev_container_of(app: &AppState, shown: &str) -> Option<String> {
    ids(app)
        .into_iter()
        .find(|id| read(app, id).is_ok_and(|r| r.devcontainer.is_some_and(|d| d.folder == shown)))
}

/// The request's folder allowed and its file read, checked and staged in `stage`, off the async
/// task and within 60 s (decision 0161).
async fn staged(
    app: &AppState,
    req: &MachineRequest,
    stage: &std::path::Path,
) -> ApiResult<std::path::PathBuf> {
    use super::machine_devcontainer as dc;
    let (app2, req2, stage) = (app.clone(), req.clone(), stage.to_path_buf());
    let read = tokio::task::spawn_blocking(move || {
        let folder = dc::folder_of(&app2, &req2)?;
        fsutil::create_dir_private(&stage).map_err(ApiError::internal)?;
        dc::stage(&folder, &stage).map(|()| folder)
    });
    match tokio::time::timeout(std::time::Duration::from_secs(60), read).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ApiError::internal(e)),
        Err(_) => Err(ApiError::internal(
            "reading the dev container's folder took over 60 s",
        )),
    }
}

/// Makes dev container machine `req` (decision 0161; under `machine_make`, counted): its folder
/// allowed, its file read, checked and staged off the async task, then `machine up`.
async fn make_devcontainer(
    app: &AppState,
    req: MachineRequest,
    parts: PartsOutcome,
    disposable: Option<Disposable>,
) -> ApiResult<MachineInfo> {
    if oci_runtime_of(app, &req)?.is_some() {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "profiles.{}.ociRuntime: a dev container is made by the Dev Container CLI, which takes no OCI runtime",
                req.profile.as_deref().unwrap_or_default()
            ),
        ));
    }
    let at = dir(app).join(&req.name);
    let r = match devcontainer_made(app, req, parts, disposable, &at).await {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&at);
            return Err(e);
        }
    };
    let bytes = serde_json::to_vec_pretty(&r).map_err(ApiError::internal)?;
    fsutil::write_atomic(&record_path(app, &r.request.name), &bytes, 0o600)
        .map_err(ApiError::internal)?;
    let folder = r.devcontainer.as_ref().map(|d| d.folder.clone());
    tracing::info!(machine = %r.request.name, folder = ?folder, adopted = ?r.devcontainer.as_ref().map(|d| d.adopted), "dev container machine made");
    super::machine_events::poke(app);
    Ok(info(r, MachineState::Running))
}

/// [`make_devcontainer`]'s work in machine folder `at` (removed by the caller when it fails):
/// the record of what was made or adopted.
async fn devcontainer_made(
    app: &AppState,
    mut req: MachineRequest,
    mut parts: PartsOutcome,
    disposable: Option<Disposable>,
    at: &std::path::Path,
) -> ApiResult<Record> {
    use super::machine_devcontainer as dc;
    let stage = at.join("devcontainer");
    let folder = staged(app, &req, &stage).await?;
    // One folder makes one dev container (the second seed's rule).
    let shown = folder.display().to_string();
    if let Some(other) = dev_container_of(app, &shown) {
        return Err(ApiError::conflict(
            "folder has a dev container",
            format!(
                "devcontainer: {shown} is machine {other:?}'s already: use it (handler machine exec {other} -- …) or delete it first"
            ),
        ));
    }
    req.image = None;
    req.devcontainer = Some(shown);
    let mut labels = own_labels(app, &req);
    labels.insert("handler.machine.source".into(), "devcontainer".into());
    if let Some(d) = &disposable {
        // Decision 0148: a disposable machine says so, and for which session.
        labels.insert(adopt::DISPOSABLE_LABEL.into(), "true".into());
        labels.insert(adopt::SESSION_LABEL.into(), d.session.clone());
    }
    let spec = dev_spec(app, &req, &folder, labels, &mut parts).await?;
    let mounted: Vec<MountedPart> = parts.ready.iter().map(|r| r.part.clone()).collect();
    let spec = handler_sandbox::machine::parts::with_parts(spec, &mounted)
        .map_err(|e| ApiError::bad_request("invalid machine", e.to_string()))?;
    if let NetworkPolicy::Filtered { allow, .. } = &spec.network {
        // The record names the list it was made with (its agents' common one).
        req.allow = Some(allow.clone());
    }
    // Made for agents: the spec their sessions are held to (decision 0169).
    let kept_spec = (!req.agents.is_empty()).then(|| spec.clone());
    let doc = dc::up_doc(spec, &folder, &stage)?;
    let (up, adopted) = adopt_or_up(app, doc).await?;
    Ok(Record {
        request: req,
        container_id: up.container_id.clone(),
        created_at: fsutil::now_rfc3339(),
        spec: kept_spec,
        disposable,
        devcontainer: Some(dc::Kept {
            folder: folder.display().to_string(),
            up,
            adopted,
        }),
        parts: if adopted { Vec::new() } else { mounted },
        parts_left_out: adopted_parts(adopted, parts),
    })
}

/// The MachineSpec of dev container `req` for `folder`: its own (decision 0161), or, made for
/// agents, composed from their plans as an image machine's is, the folder in the place of the
/// machine's own (decision 0169), their parts added to `parts`.
async fn dev_spec(
    app: &AppState,
    req: &MachineRequest,
    folder: &std::path::Path,
    labels: BTreeMap<String, String>,
    parts: &mut PartsOutcome,
) -> ApiResult<SandboxSpec> {
    use super::machine_devcontainer as dc;
    if req.agents.is_empty() {
        return dc::spec_of(req, folder, network_of(req, None)?, labels);
    }
    let shown = folder.display().to_string();
    let base = MachineBase {
        id: req.name.clone(),
        image: Some(dc::IMAGE.into()),
        argv: vec!["sh".into()],
        workdir: handler_sandbox::machine::devcontainer::workspace_target(&shown),
        work: shown,
        network: NetworkPolicy::None,
        resources: resources_of(req),
        labels,
    };
    let (spec, needs) = for_agents(app, req, base).await?;
    agents_parts(app, parts, &needs, false).await?;
    Ok(spec)
}

/// The MachineSpec of `req` made for its agents (decision 0147): each agent's launch plan for
/// a session in this machine (its first model), its slot and git guard made in the machine's
/// folder, composed by `handler_sandbox::machine::session::for_agents` (a 400 naming what
/// cannot be kept).
/// The parts `needs` names (each agent's own, `(agent, part)`) added to `parts`, built now if
/// need be (under the machine's lock: an agent's harness is known once its plan is). A machine
/// made for one session (`for_one`, decision 0148) is not made when its agent's part cannot be
/// built (the seed's rule): 422 naming the part and why.
async fn agents_parts(
    app: &AppState,
    parts: &mut PartsOutcome,
    needs: &[(String, String)],
    for_one: bool,
) -> ApiResult<()> {
    let missing: Vec<String> = needs
        .iter()
        .map(|(_, p)| p.clone())
        .filter(|p| !parts.ready.iter().any(|r| &r.part.id == p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let more = super::parts::ensure(app, &missing).await?;
    if for_one
        && let Some((agent, l)) = needs
            .iter()
            .find_map(|(a, p)| more.left_out.iter().find(|l| &l.id == p).map(|l| (a, l)))
    {
        return Err(ApiError::unprocessable(
            "part not built",
            format!(
                "agent {agent:?} runs its CLI from part {:?}, which could not be built: {}",
                l.id, l.reason
            ),
        ));
    }
    for r in more.ready {
        if !parts.ready.iter().any(|x| x.part.id == r.part.id) {
            parts.ready.push(r);
        }
    }
    parts.left_out.extend(more.left_out);
    Ok(())
}

/// Part `harness`'s id, when its agent runs in a machine of `image` (not the harness's own
/// image, which holds the CLI already) and the harness has a part.
fn part_need(
    app: &AppState,
    harness: &str,
    image: Option<&str>,
    plan_image: &str,
) -> Option<String> {
    let d = app.snapshot().descriptors.get(harness).cloned()?;
    d.part.as_ref()?;
    let own = |i: &str| i == d.image || i.starts_with(&format!("{}:", d.image)) || i == plan_image;
    match image {
        Some(i) if !own(i) => Some(harness.to_string()),
        _ => None,
    }
}

/// The base of image machine `req` made for agents in machine folder `work` (its network is
/// [`for_agents`]'s to settle).
fn plain_base(
    app: &AppState,
    req: &MachineRequest,
    work: &str,
    disposable: Option<&Disposable>,
) -> MachineBase {
    MachineBase {
        id: req.name.clone(),
        image: req.image.clone(),
        argv: IDLE.iter().map(|a| (*a).to_string()).collect(),
        workdir: req.workdir.clone().unwrap_or_else(|| "/work".into()),
        work: work.to_string(),
        network: NetworkPolicy::None,
        resources: resources_of(req),
        labels: own_labels(app, req)
            .into_iter()
            .chain(disposable.into_iter().flat_map(|d| {
                // Decision 0148: a disposable machine says so, and for which session.
                [
                    (adopt::DISPOSABLE_LABEL.to_string(), "true".to_string()),
                    (adopt::SESSION_LABEL.to_string(), d.session.clone()),
                ]
            }))
            .collect(),
    }
}

/// The resources `req` asks for, if any.
fn resources_of(req: &MachineRequest) -> Option<Resources> {
    (req.cpus.is_some() || req.memory.is_some()).then(|| Resources {
        memory: req.memory.clone(),
        cpus: req.cpus.clone(),
    })
}

/// A machine for `req.agents`: the MachineSpec of their plans, and each agent's part need
/// (`(agent, part)`: its harness's CLI as a part when the machine runs another image than the
/// harness's, decision 0164).
async fn for_agents(
    app: &AppState,
    req: &MachineRequest,
    mut base: MachineBase,
) -> ApiResult<(SandboxSpec, Vec<(String, String)>)> {
    let mut harnesses = Vec::with_capacity(req.agents.len());
    let mut plans = Vec::with_capacity(req.agents.len());
    for (i, a) in req.agents.iter().enumerate() {
        let agent = app.agents.agent(a).ok_or_else(|| {
            ApiError::bad_request("invalid machine", format!("agents[{i}]: no agent {a:?}"))
        })?;
        let access = agent.models.first().cloned().ok_or_else(|| {
            ApiError::bad_request(
                "invalid machine",
                format!("agents[{i}]: {a:?} has no model"),
            )
        })?;
        let mut place = Place::machine(app, &req.name, a);
        place.shared_state = shared_state_of(app, req.profile.as_deref());
        let prepared = {
            let (app, agent, place) = (app.clone(), agent.clone(), place.clone());
            tokio::task::spawn_blocking(move || {
                prepare(
                    &app,
                    &agent,
                    &access,
                    &place,
                    Purpose::Session { subject: None },
                )
            })
            .await
            .map_err(ApiError::internal)??
        };
        start_path::make(app, &place, &prepared).await?;
        harnesses.push(prepared.harness.clone());
        plans.push((a.clone(), prepared.spec));
    }
    // The machine's image: the request's, else the first agent's harness image; every other
    // agent whose CLI that image lacks gets it as its part.
    let image = base
        .image
        .clone()
        .or_else(|| plans.first().map(|(_, p)| p.image.clone()));
    let needs: Vec<(String, String)> = plans
        .iter()
        .zip(&harnesses)
        .filter_map(|((a, p), h)| {
            part_need(app, h, image.as_deref(), &p.image).map(|part| (a.clone(), part))
        })
        .collect();
    let refs: Vec<(&str, &SandboxSpec)> = plans.iter().map(|(a, p)| (a.as_str(), p)).collect();
    // Filtered with no list of its own: what every one of its agents' sandboxes allows.
    let common = (req.network.as_deref() == Some("filtered") && req.allow.is_none())
        .then(|| session::common_filter(&refs));
    base.network = network_of(req, common)?;
    session::for_agents(&base, &refs)
        .map(|spec| (spec, needs))
        .map_err(|e| ApiError::bad_request("machine refused", e.to_string()))
}

/// The profile whose state the agents of a machine made from profile `profile` share
/// (decision 0170): that profile, when its `stateScope` is `shared`.
fn shared_state_of(app: &AppState, profile: Option<&str>) -> Option<String> {
    let name = profile?;
    let scope = profiles(app).ok()?.profiles.get(name)?.state_scope;
    (scope == Some(profile::StateScope::Shared)).then(|| name.to_string())
}

/// Where session `id` of `agent` is planned ([`Place::of_session`]): in its machine, with the
/// state its machine's profile shares (decision 0170) — the profile the machine was made from,
/// or, before a disposable one is made, the one its agent names.
pub fn place_of_session(
    app: &AppState,
    id: &str,
    agent: &crate::daemon::store::StoredAgent,
) -> Place {
    let mut place = Place::of_session(app, id, agent);
    if let Some(m) = start_path::machine_of(agent, id) {
        let profile = read(app, &m)
            .ok()
            .and_then(|r| r.request.profile)
            .or_else(|| {
                agent
                    .options
                    .machine
                    .as_deref()
                    .and_then(|m| m.strip_prefix(profile::DISPOSABLE_PREFIX))
                    .map(String::from)
            });
        place.shared_state = shared_state_of(app, profile.as_deref());
    }
    place
}

/// The exec that runs a session of `agent` planned as `plan` in machine `id` (decision 0147):
/// 404 no such machine; 409 the machine cannot give the session what its own sandbox would
/// have had (named). The runtime's exec starts a stopped machine first (the exec asks it to:
/// `startStopped`) and names one whose container is gone (one inspect, no call from here:
/// issue 29's warm start).
pub async fn session_exec(
    app: &AppState,
    id: &str,
    agent: &str,
    plan: &SandboxSpec,
) -> ApiResult<handler_contracts::machine::ExecSpec> {
    // No engine call here (issue 29's warm start): the runtime's exec checks the machine, starts
    // it when stopped and names it when its container is gone, in one inspect.
    session_plan(app, id, agent, plan)
}

/// [`session_exec`] without asking the runtime: the machine's record only (a session's create
/// refuses with it at once; its start asks the runtime).
pub fn session_plan(
    app: &AppState,
    id: &str,
    agent: &str,
    plan: &SandboxSpec,
) -> ApiResult<handler_contracts::machine::ExecSpec> {
    let r = read(app, id)?;
    if r.spec.is_none() && !r.request.agents.is_empty() {
        // Decision 0155: adopted by its labels, the plan its agents' sessions are held to is gone.
        return Err(ApiError::conflict(
            "the machine cannot run this session",
            format!(
                "machine {id:?} was adopted by its labels without the plan it was made with: make it again for its agents (handler machine rm {id}, then handler machine create {id} --agent …)"
            ),
        ));
    }
    // Decision 0164: an agent whose CLI comes from its part runs only where the part is.
    let harness = app
        .snapshot()
        .descriptors
        .values()
        .find(|d| plan.image == d.image || plan.image.starts_with(&format!("{}:", d.image)))
        .map(|d| d.name.clone());
    let machine_image = match &r.devcontainer {
        Some(_) => Some(super::machine_devcontainer::IMAGE),
        None => r.request.image.as_deref(),
    };
    if let Some(p) = harness.and_then(|h| part_need(app, &h, machine_image, &plan.image))
        && !r.parts.iter().any(|m| m.id == p)
    {
        let why = r
            .parts_left_out
            .iter()
            .find(|l| l.id == p)
            .map(|l| format!(" (it was left out: {})", l.reason))
            .unwrap_or_default();
        return Err(ApiError::conflict(
            "the machine cannot run this session",
            format!(
                "machine {id:?} has no part {p:?}, which agent {agent:?} runs its CLI from{why}: make the machine again with it (handler part build {p}, then handler machine create … --part {p})"
            ),
        ));
    }
    let spec = r.spec.clone().unwrap_or_else(|| SandboxSpec {
        labels: Default::default(),
        ..plan.clone()
    });
    let exec = session::plan_session(id, &spec, agent, plan)
        .map_err(|e| ApiError::conflict("the machine cannot run this session", e.to_string()))?;
    Ok(match &r.devcontainer {
        // Decision 0169: as the dev container's user, with its variables under the agent's own
        // and its own home (where its state is).
        Some(d) => session::in_dev_container(exec, &d.up, &plan.user.home),
        None => exec,
    })
}

/// The sessions (and other connections) running in machine `id` now: (agent, connection).
fn running_in(
    app: &AppState,
    id: &str,
) -> Vec<(String, String, std::sync::Arc<tokio::sync::Notify>)> {
    let name = container_name(id);
    app.connections
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .flat_map(|(agent, v)| {
            v.iter()
                .filter(|c| c.info.sandbox == name)
                .map(|c| (agent.clone(), c.info.id.clone(), c.stop.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn info(r: Record, state: MachineState) -> MachineInfo {
    MachineInfo {
        id: r.request.name.clone(),
        request: r.request,
        state,
        container_id: r.container_id,
        created_at: r.created_at,
        disposable: r.disposable,
        devcontainer: r
            .devcontainer
            .map(|d| handler_contracts::machine::DevcontainerInfo {
                folder: d.folder,
                remote_user: d.up.remote_user,
                remote_workspace_folder: d.up.remote_workspace_folder,
                env: d.up.env.into_keys().collect(),
                adopted: d.adopted,
            }),
        parts: r.parts,
        parts_left_out: r.parts_left_out,
    }
}

/// The exec defaults of machine `id`: a dev container's user, folder inside and variables
/// (decision 0161), under what the exec names itself. Other machines: `exec` as it is.
pub fn exec_defaults(
    app: &AppState,
    id: &str,
    exec: handler_contracts::machine::ExecSpec,
) -> handler_contracts::machine::ExecSpec {
    match read(app, id) {
        Ok(Record {
            devcontainer: Some(d),
            ..
        }) => session::dev_container_defaults(exec, &d.up),
        _ => exec,
    }
}

/// The runtime's record of machine `id` (None: its container is gone).
async fn runtime_record(app: &AppState, id: &str) -> ApiResult<Option<serde_json::Value>> {
    match app
        .launcher
        .machine(&MachineVerb::Status { id: id.into() }, None)
        .await
    {
        Ok(out) => Ok(Some(
            serde_json::from_str(out.trim()).map_err(ApiError::internal)?,
        )),
        Err(LauncherError::Verb {
            code: Some(NO_MACHINE),
            ..
        }) => Ok(None),
        Err(e) => Err(refused(e)),
    }
}

fn state_of(record: Option<&serde_json::Value>) -> MachineState {
    match record {
        None => MachineState::Missing,
        Some(r) if r.pointer("/State/Running") == Some(&serde_json::Value::Bool(true)) => {
            MachineState::Running
        }
        Some(_) => MachineState::Stopped,
    }
}

/// GET /v1/machines/{id}.
pub async fn get(app: &AppState, id: &str) -> ApiResult<MachineInfo> {
    let r = read(app, id)?;
    let rec = runtime_record(app, id).await?;
    Ok(info(r, state_of(rec.as_ref())))
}

/// GET /v1/machines: every machine this daemon made, with its state now.
pub async fn list(app: &AppState) -> ApiResult<Vec<MachineInfo>> {
    let mut out = Vec::new();
    for id in ids(app) {
        out.push(get(app, &id).await?);
    }
    Ok(out)
}

/// The ids of this daemon's machines (its records), sorted.
fn ids(app: &AppState) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir(app))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_suffix(".json"))
                        .filter(|n| valid_id(n))
                        .map(String::from)
                })
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// GET /v1/machines/{id}/status: the runtime's record (404 when its container is gone).
pub async fn status(app: &AppState, id: &str) -> ApiResult<serde_json::Value> {
    read(app, id)?;
    runtime_record(app, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("machine {id:?}'s container (missing)")))
}

/// GET /v1/machines/{id}/stats.
pub async fn stats(app: &AppState, id: &str) -> ApiResult<MachineStats> {
    read(app, id)?;
    let out = app
        .launcher
        .machine(&MachineVerb::Stats { id: id.into() }, None)
        .await
        .map_err(refused)?;
    serde_json::from_str(out.trim()).map_err(ApiError::internal)
}

/// POST /v1/machines/{id}/start|stop|restart (204).
pub async fn set_state(app: &AppState, id: &str, to: &str) -> ApiResult<()> {
    read(app, id)?;
    let verb = match to {
        "start" => MachineVerb::Start { id: id.into() },
        "stop" => MachineVerb::Stop { id: id.into() },
        _ => MachineVerb::Restart { id: id.into() },
    };
    let done = app.launcher.machine(&verb, None).await.map_err(refused);
    super::machine_events::poke(app);
    done?;
    tracing::info!(machine = %id, to, "machine state written");
    Ok(())
}

/// DELETE /v1/machines/{id} (204): the container and everything in it, its folder, its record.
/// While sessions run in it: 409 naming them, unless `force`, which stops them first (their
/// work brought back by their git guard, as any session's end).
pub async fn delete(app: &AppState, id: &str, force: bool) -> ApiResult<()> {
    read(app, id)?;
    let running = running_in(app, id);
    if !running.is_empty() {
        let names: Vec<&str> = running.iter().map(|(_, c, _)| c.as_str()).collect();
        if !force {
            return Err(ApiError::conflict(
                "the machine is in use",
                format!(
                    "machine {id:?} runs {}: stop them first, or delete with ?force=true to stop them",
                    names.join(", ")
                ),
            ));
        }
        tracing::info!(machine = %id, sessions = ?names, "stopping the sessions of a machine being deleted");
        for (_, _, stop) in &running {
            stop.notify_waiters();
            stop.notify_one();
        }
        let deadline = tokio::time::Instant::now()
            + crate::daemon::launch::agent::STOP_GRACE
            + std::time::Duration::from_secs(10);
        while !running_in(app, id).is_empty() {
            if tokio::time::Instant::now() > deadline {
                return Err(ApiError::conflict(
                    "the machine is in use",
                    format!("machine {id:?}: its sessions did not stop in time"),
                ));
            }
            let wait = app.connections_changed.notified();
            let _ = tokio::time::timeout(std::time::Duration::from_millis(200), wait).await;
        }
    }
    match app
        .launcher
        .machine(&MachineVerb::Rm { id: id.into() }, None)
        .await
    {
        Ok(_)
        | Err(LauncherError::Verb {
            code: Some(NO_MACHINE),
            ..
        }) => {}
        Err(e) => return Err(refused(e)),
    }
    let _ = std::fs::remove_dir_all(dir(app).join(id));
    std::fs::remove_file(record_path(app, id)).map_err(ApiError::internal)?;
    idle(app).remove(id);
    tracing::info!(machine = %id, "machine removed");
    super::machine_events::poke(app);
    Ok(())
}

/// How long a disposable machine being started in is not counted idle: its session's start
/// (planning, the exec, the registration) takes less.
const START_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

fn idle(
    app: &AppState,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
    app.disposable_idle
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Session `session` has ended (stopped, or its start failed): its disposable machine's delay
/// counts from now, not from the end of the grace its start put in (a session that started and
/// stopped between two of the keeper's looks would otherwise keep it for the whole grace).
pub fn session_ended(app: &AppState, session: &str) {
    let id = disposable_id(session);
    if let Some(since) = idle(app).get_mut(&id) {
        *since = std::time::Instant::now();
    }
}

/// Session `session`'s disposable machine made, unless it has one already (a resumed session
/// within the delay finds it again), when `agent`'s machine is `disposable` (decision 0148):
/// made for this agent, with its network (none, open, or filtered by its own proxy), labelled with the session; its delay
/// put off while the session starts. None for another agent.
pub async fn disposable(
    app: &AppState,
    agent: &crate::daemon::store::StoredAgent,
    session: &str,
) -> ApiResult<Option<String>> {
    let from = match agent.options.machine.as_deref() {
        Some(DISPOSABLE) => None,
        Some(m) if m.starts_with(profile::DISPOSABLE_PREFIX) => {
            let name = &m[profile::DISPOSABLE_PREFIX.len()..];
            Some((name.to_string(), disposable_profile(app, name)?))
        }
        _ => return Ok(None),
    };
    let id = disposable_id(session);
    {
        // Under `machine_make`, as the keeper's removal: found and put off, or gone and made.
        let _held = app.machine_make.lock().await;
        idle(app).insert(id.clone(), std::time::Instant::now() + START_GRACE);
        if read(app, &id).is_ok() {
            return Ok(Some(id));
        }
    }
    // Filtered (the default): the machine's own proxy allows what the agent's sandbox would
    // (decision 0153); an agent whose access puts keys behind phantoms is refused by the plan.
    let network = match agent.options.network {
        Some(handler_contracts::control::NetworkMode::None) => "none",
        Some(handler_contracts::control::NetworkMode::Open) => "open",
        _ => "filtered",
    };
    // A profile's network, when it names one, else the agent's; its other settings fill in
    // (`make` applies it), its delay before the agent's.
    let req = MachineRequest {
        name: id.clone(),
        source: None,
        devcontainer: None,
        image: None,
        agents: vec![agent.id.clone()],
        cpus: None,
        memory: None,
        workdir: None,
        folder: None,
        mounts: Vec::new(),
        network: from
            .as_ref()
            .and_then(|(_, p)| p.network.clone())
            .or_else(|| Some(network.into())),
        allow: None,
        profile: from.as_ref().map(|(n, _)| n.clone()),
        parts: Vec::new(),
    };
    let d = Disposable {
        session: session.to_string(),
        delay_ms: from
            .as_ref()
            .and_then(|(_, p)| p.disposable_delay)
            .or(agent.options.disposable_delay_ms)
            .unwrap_or(DISPOSABLE_DELAY_MS),
    };
    make(app, req, Some(d)).await?;
    tracing::info!(machine = %id, session, "disposable machine made for its session");
    Ok(Some(id))
}

/// Machines adopted by their labels (issue 29 item 5, decision 0155), once at the daemon's
/// start: every container the engine lists as a machine of this daemon's data folder whose
/// record is gone gets one again (its request as its labels tell it; made for agents, it has no
/// plan to check their sessions against, so they are refused until it is made again). Never a
/// machine made again: only what the engine has is recorded.
pub async fn adopt(app: &AppState) {
    let listed = match app.launcher.machine(&MachineVerb::Ls, None).await {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(error = %e, "machines: the engine's list cannot be read; none adopted");
            return;
        }
    };
    let Ok(inspect) = serde_json::from_str::<serde_json::Value>(listed.trim()) else {
        tracing::warn!("machines: the engine's list is not JSON; none adopted");
        return;
    };
    let _making = app.machine_make.lock().await;
    let known = ids(app);
    let mut adopted = 0;
    for a in adopt::adoptable(&inspect, &data_key(app), &known) {
        let id = a.request.name.clone();
        let r = Record {
            request: a.request,
            container_id: a.container_id,
            created_at: a.created_at,
            spec: None,
            disposable: a.disposable,
            // A dev container's user, folder inside and variables, read back (decision 0155).
            devcontainer: a
                .devcontainer
                .map(|(folder, up)| super::machine_devcontainer::Kept {
                    folder,
                    up,
                    adopted: false,
                }),
            parts: Vec::new(),
            parts_left_out: Vec::new(),
        };
        let written = serde_json::to_vec_pretty(&r)
            .map_err(std::io::Error::other)
            .and_then(|b| {
                fsutil::create_dir_private(&dir(app))?;
                fsutil::write_atomic(&record_path(app, &id), &b, 0o600)
            });
        match written {
            Ok(()) => {
                adopted += 1;
                tracing::info!(machine = %id, agents = ?r.request.agents, "machine adopted by its labels (its record was gone)");
            }
            Err(e) => tracing::warn!(machine = %id, error = %e, "machine not adopted"),
        }
    }
    if adopted > 0 {
        super::machine_events::poke(app);
    }
}

/// The disposable machines' keeper (decision 0148), for the daemon's life: every half second,
/// each disposable machine of this daemon's records (those the last daemon left included)
/// with no session in it is removed once its delay has passed since its last session ended
/// (or since this daemon started); one with a session in it is kept. A removal that fails is
/// logged and tried again after another delay.
pub async fn dispose(app: AppState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        tick.tick().await;
        let records = {
            let app = app.clone();
            tokio::task::spawn_blocking(move || {
                ids(&app)
                    .into_iter()
                    .filter_map(|id| read(&app, &id).ok())
                    .filter_map(|r| r.disposable.map(|d| (r.request.name, d)))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default()
        };
        for (id, d) in records {
            if !due(&app, &id, &d) {
                continue;
            }
            // Asked again under `machine_make`: a session starting in it now has put it off.
            let _held = app.machine_make.lock().await;
            if !due(&app, &id, &d) {
                continue;
            }
            match delete(&app, &id, false).await {
                Ok(()) => {
                    tracing::info!(machine = %id, session = %d.session, "disposable machine removed after its delay");
                }
                Err(e) => {
                    tracing::warn!(machine = %id, error = %e.detail.unwrap_or(e.title), "disposable machine kept: tried again after its delay");
                    idle(&app).insert(id, std::time::Instant::now());
                }
            }
        }
    }
}

/// Whether disposable machine `id` is to be removed now: no session in it, and its delay
/// passed since it was last seen with one (its clock started here when not yet running).
fn due(app: &AppState, id: &str, d: &Disposable) -> bool {
    let busy = !running_in(app, id).is_empty();
    let mut idle = idle(app);
    if busy {
        idle.remove(id);
        return false;
    }
    let since = *idle
        .entry(id.to_string())
        .or_insert_with(std::time::Instant::now);
    std::time::Instant::now() >= since + std::time::Duration::from_millis(d.delay_ms)
}
