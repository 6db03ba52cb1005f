//! A machine from a folder's dev container (issue 30 item 1, decision 0161): the folder is
//! allowed (`HANDLER_DEVCONTAINER_FOLDERS`, compared resolved), its `.devcontainer/
//! devcontainer.json` (or `.devcontainer.json`) read as hostile data — one name at a time, no
//! link followed, bounded (`agentfs`) — checked (`handler_sandbox::machine::devcontainer`: a
//! key that reaches the host or widens the container is a 422 naming it) and staged with its
//! folder's other files in `<data>/machines/<id>/devcontainer`; the runtime's `machine up` runs
//! the Dev Container CLI on that copy only.

use std::path::{Path, PathBuf};

use handler_contracts::SandboxSpec;
use handler_contracts::machine::{DevcontainerSpec, DevcontainerUp, MachineRequest};
use handler_contracts::sandbox::{Mount, MountKind, NetworkPolicy};
use handler_sandbox::machine::devcontainer::{
    self, CONFIG_DIR, CONFIG_FILE, Layout, ROOT_FILE, workspace_target,
};
use serde::{Deserialize, Serialize};

use super::apps::folder as hostile;
use crate::daemon::agentfs;
use crate::daemon::config::DevcontainerFolders;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// The image a dev container machine's spec names: the CLI's to make.
pub const IMAGE: &str = "devcontainer";

/// The bound of a `devcontainer.json`.
const FILE_MAX: u64 = 256 << 10;

/// What a dev container machine's record keeps: its folder (resolved) and what `up` found.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    /// The folder, resolved.
    pub folder: String,
    /// What `machine up` (or `machine adopt`) answered.
    pub up: DevcontainerUp,
    /// Made by hand with `devcontainer up` and adopted (decision 0161).
    #[serde(default)]
    pub adopted: bool,
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid machine", detail)
}

/// The request's folder, resolved and allowed (400 naming `devcontainer`, 403 when the daemon's
/// list leaves it out).
pub fn folder_of(app: &AppState, req: &MachineRequest) -> ApiResult<PathBuf> {
    let Some(folder) = &req.devcontainer else {
        return Err(invalid(
            "devcontainer: a machine whose source is devcontainer names its folder (devcontainer: \"/path/to/repo\")",
        ));
    };
    if !folder.starts_with('/') {
        return Err(invalid(format!(
            "devcontainer: {folder:?} is not an absolute path"
        )));
    }
    let resolved = std::fs::canonicalize(folder)
        .map_err(|e| invalid(format!("devcontainer: {folder}: {e}")))?;
    if !resolved.is_dir() {
        return Err(invalid(format!("devcontainer: {folder} is not a folder")));
    }
    match &app.config.devcontainer_folders {
        DevcontainerFolders::Off => Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "dev containers are off",
            "devcontainer: this daemon makes no dev container (HANDLER_DEVCONTAINER_FOLDERS=off)",
        )),
        list if !list.allows(&resolved) => Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "folder not allowed",
            format!(
                "devcontainer: {} is not one of the folders HANDLER_DEVCONTAINER_FOLDERS allows: add it there",
                resolved.display()
            ),
        )),
        _ => Ok(resolved),
    }
}

/// Reads, checks and stages the folder's file into `stage` (made here): a 400 when there is
/// none or it cannot be read safely, a 422 naming the key refused.
pub fn stage(folder: &Path, stage: &Path) -> ApiResult<()> {
    let dir = hostile::open(folder)?
        .ok_or_else(|| invalid(format!("devcontainer: {} does not exist", folder.display())))?;
    let shown = folder.join(CONFIG_DIR);
    let refused = |e: agentfs::AgentFsError| invalid(format!("devcontainer: {e}"));
    let sub = agentfs::open_dir_at(&dir, CONFIG_DIR, &shown).map_err(refused)?;
    let in_sub = match &sub {
        Some(d) => {
            agentfs::read_at(d, CONFIG_FILE, &shown.join(CONFIG_FILE), FILE_MAX).map_err(refused)?
        }
        None => None,
    };
    let (text, layout, file) = match in_sub {
        Some(t) => (t, Layout::Folder, shown.join(CONFIG_FILE)),
        None => {
            let at = folder.join(ROOT_FILE);
            match agentfs::read_at(&dir, ROOT_FILE, &at, FILE_MAX).map_err(refused)? {
                Some(t) => (t, Layout::Root, at),
                None => {
                    return Err(invalid(format!(
                        "devcontainer: {} has no {CONFIG_DIR}/{CONFIG_FILE} or {ROOT_FILE}",
                        folder.display()
                    )));
                }
            }
        }
    };
    let text = String::from_utf8(text)
        .map_err(|_| invalid(format!("devcontainer: {} is not UTF-8", file.display())))?;
    let parsed = devcontainer::parse(&file.display().to_string(), &text)
        .map_err(|e| ApiError::unprocessable("dev container refused", e.to_string()))?;
    let checked = devcontainer::check(&parsed, layout, &folder.display().to_string())
        .map_err(|e| ApiError::unprocessable("dev container refused", e.to_string()))?;
    let to = stage.join(CONFIG_DIR);
    if let Some(sub) = &sub
        && layout == Layout::Folder
    {
        // Its Dockerfile and local features come with it, read the same way.
        hostile::copy_dir(sub, &shown, &to, &mut hostile::Budget::default()).map_err(|e| {
            ApiError::bad_request("dev container folder refused", e.detail.unwrap_or_default())
        })?;
    }
    std::fs::create_dir_all(&to).map_err(ApiError::internal)?;
    std::fs::write(
        to.join(CONFIG_FILE),
        serde_json::to_vec_pretty(&checked).map_err(ApiError::internal)?,
    )
    .map_err(ApiError::internal)
}

/// The MachineSpec of a dev container machine: its name and labels, the folder mounted at
/// `/workspaces/<name>` (the git guard's read-only `.git` planned over it), its network and
/// resources. Its image is the CLI's to make: `image` names the file's, else a build.
pub fn spec_of(
    req: &MachineRequest,
    folder: &Path,
    network: NetworkPolicy,
    labels: std::collections::BTreeMap<String, String>,
) -> ApiResult<SandboxSpec> {
    let source = folder.display().to_string();
    let target = workspace_target(&source);
    let doc = serde_json::json!({
        "apiVersion": "handler.sandbox/v1",
        "name": handler_contracts::machine::container_name(&req.name),
        "image": IMAGE,
        "argv": ["sh"],
        "env": {},
        "workdir": target,
        "user": {"mode": "host-user", "home": "/home/handler"},
        "mounts": [],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"},
        "labels": labels,
    });
    let mut spec: SandboxSpec = serde_json::from_value(doc).map_err(ApiError::internal)?;
    spec.network = network;
    spec.mounts = vec![Mount {
        source,
        target,
        read_only: false,
        kind: MountKind::State,
    }];
    if req.cpus.is_some() || req.memory.is_some() {
        spec.resources = Some(handler_contracts::sandbox::Resources {
            memory: req.memory.clone(),
            cpus: req.cpus.clone(),
        });
    }
    Ok(spec)
}

/// `machine up`'s document.
pub fn up_doc(spec: SandboxSpec, folder: &Path, stage: &Path) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(&DevcontainerSpec {
        spec,
        folder: folder.display().to_string(),
        config_dir: stage.display().to_string(),
    })
    .map_err(ApiError::internal)
}
