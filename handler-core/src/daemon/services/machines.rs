//! Machines (issue 29 item 2, decision 0142): `/v1/machines` — a request checked (its id, the
//! daemon's allowed images, the network a machine can have today), made into a MachineSpec
//! (the machine's own folder `<data>/machines/<id>/work` at its workdir, kept across restarts)
//! and created by the runtime's `machine create`; its record in `<data>/machines/<id>.json`.
//! The state is always the runtime's: a machine whose container is gone is shown `missing`,
//! never made again; machines outlive handlerd (they are the person's) and a restarted daemon
//! lists them from its records.

use std::path::PathBuf;

use handler_contracts::SandboxSpec;
use handler_contracts::machine::{
    MachineInfo, MachineRequest, MachineState, MachineStats, container_name, valid_id,
};
use handler_contracts::sandbox::{Mount, MountKind, NetworkPolicy, Resources};
use handler_sandbox::verbs::MachineVerb;
use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;
use crate::daemon::launch::launcher::LauncherError;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

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

/// The MachineSpec of `req` (checked) for machine folder `work`.
fn spec_of(req: &MachineRequest, work: &str) -> ApiResult<SandboxSpec> {
    let network = match req.network.as_deref().unwrap_or("none") {
        "none" => NetworkPolicy::None,
        "open" => NetworkPolicy::Open,
        "filtered" => {
            return Err(ApiError::bad_request(
                "invalid machine",
                "network: a filtered machine needs an egress proxy as long-lived as it, which is not built yet: use none or open",
            ));
        }
        other => {
            return Err(ApiError::bad_request(
                "invalid machine",
                format!("network: {other:?} is not none or open"),
            ));
        }
    };
    let workdir = req.workdir.clone().unwrap_or_else(|| "/work".into());
    let doc = serde_json::json!({
        "apiVersion": "handler.sandbox/v1",
        "name": container_name(&req.name),
        "image": req.image,
        "argv": IDLE,
        "env": {},
        "workdir": workdir,
        "user": {"mode": "host-user", "home": "/home/handler"},
        "mounts": [],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"},
        "labels": {"handler.machine.made-by": "handlerd"},
    });
    let mut spec: SandboxSpec = serde_json::from_value(doc).map_err(ApiError::internal)?;
    spec.network = network;
    spec.mounts = vec![Mount {
        source: work.to_string(),
        target: spec.workdir.clone(),
        read_only: false,
        kind: MountKind::State,
    }];
    if req.cpus.is_some() || req.memory.is_some() {
        spec.resources = Some(Resources {
            memory: req.memory.clone(),
            cpus: req.cpus.clone(),
        });
    }
    Ok(spec)
}

/// POST /v1/machines: made and started (201).
pub async fn create(app: &AppState, req: MachineRequest) -> ApiResult<MachineInfo> {
    if !valid_id(&req.name) {
        return Err(ApiError::bad_request(
            "invalid machine",
            format!(
                "name: {:?} is not a machine id (a lowercase DNS label of at most 40 characters)",
                req.name
            ),
        ));
    }
    app.config
        .machine_images
        .check(&req.image)
        .map_err(|e| ApiError::bad_request("invalid machine", format!("image: {e}")))?;
    let path = record_path(app, &req.name);
    if path.exists() {
        return Err(ApiError::conflict(
            "machine exists",
            format!("name: a machine {:?} exists already", req.name),
        ));
    }
    let work = dir(app).join(&req.name).join("work");
    fsutil::create_dir_private(&work).map_err(ApiError::internal)?;
    let spec = spec_of(&req, &work.display().to_string())?;
    let doc = serde_json::to_vec(&spec).map_err(ApiError::internal)?;
    let out = app
        .launcher
        .machine(&MachineVerb::Create, Some(doc))
        .await
        .map_err(refused)?;
    let r = Record {
        request: req,
        container_id: out.trim().to_string(),
        created_at: fsutil::now_rfc3339(),
    };
    let bytes = serde_json::to_vec_pretty(&r).map_err(ApiError::internal)?;
    fsutil::write_atomic(&path, &bytes, 0o600).map_err(ApiError::internal)?;
    tracing::info!(machine = %r.request.name, image = %r.request.image, "machine made");
    super::machine_events::poke(app);
    Ok(info(r, MachineState::Running))
}

fn info(r: Record, state: MachineState) -> MachineInfo {
    MachineInfo {
        id: r.request.name.clone(),
        request: r.request,
        state,
        container_id: r.container_id,
        created_at: r.created_at,
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
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(get(app, &id).await?);
    }
    Ok(out)
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
pub async fn delete(app: &AppState, id: &str) -> ApiResult<()> {
    read(app, id)?;
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
    tracing::info!(machine = %id, "machine removed");
    super::machine_events::poke(app);
    Ok(())
}
