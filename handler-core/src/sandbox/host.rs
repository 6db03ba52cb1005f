//! Looking at the host for the launcher: the user's ids and subordinate ranges, devices, cgroup
//! delegation, what each path of a spec is, the images a spec resolves, the launcher's own
//! identity (pid, start time, boot), and the per-user folder holding instance folders.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use handler_contracts::SandboxSpec;
use handler_sandbox::facts::{HostFacts, LauncherId, PathKind};
use handler_sandbox::host::{stat_start_time, subid_count};

use super::podman;

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The start time of process `pid` (clock ticks since boot), None when there is no such process.
pub fn process_start(pid: u32) -> Option<u64> {
    stat_start_time(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process as a launcher.
pub fn launcher_self() -> LauncherId {
    let pid = std::process::id();
    LauncherId {
        pid,
        start: process_start(pid).unwrap_or(0),
        boot: boot_id(),
    }
}

/// The user's name (for /etc/subuid), or its uid as text.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// The size of the user's subordinate range in `file` (/etc/subuid or /etc/subgid).
pub fn subids(file: &str, uid: u32) -> Option<u32> {
    subid_count(&fs::read_to_string(file).ok()?, &user_name(uid), uid)
}

/// What `path` is (symlinks followed).
pub fn path_kind(path: &str) -> PathKind {
    match fs::metadata(path) {
        Err(_) => PathKind::Missing,
        Ok(m) if m.is_dir() => PathKind::Directory,
        Ok(m) if m.is_file() => PathKind::File,
        Ok(m) if m.file_type().is_socket() => PathKind::Socket,
        Ok(_) => PathKind::Other,
    }
}

/// Whether rootless podman can set this cgroup controller for `uid`: cgroups v2 with the
/// controller delegated to the user's systemd service.
pub fn cgroup_delegated(uid: u32, controller: &str) -> bool {
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return false;
    }
    let f =
        format!("/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers");
    fs::read_to_string(f).is_ok_and(|s| s.split_whitespace().any(|c| c == controller))
}

/// The folder holding this user's instance folders: `$XDG_RUNTIME_DIR/handler-sandbox`, else
/// `/tmp/handler-sandbox-<uid>`; created 0700, and refused when another user owns it.
pub fn runtime_base(uid: u32) -> Result<PathBuf, String> {
    let base = match std::env::var("XDG_RUNTIME_DIR") {
        Ok(d) if !d.is_empty() && Path::new(&d).is_dir() => {
            PathBuf::from(d).join("handler-sandbox")
        }
        _ => PathBuf::from(format!("/tmp/handler-sandbox-{uid}")),
    };
    match fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", base.display())),
    }
    let m = fs::symlink_metadata(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    if !m.is_dir() || m.uid() != uid {
        return Err(format!("{} is not a folder of this user's", base.display()));
    }
    if m.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(&base, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", base.display()))?;
    }
    Ok(base)
}

/// The image's PATH from its config.
pub fn image_path(image: &str) -> Result<Option<String>, podman::PodmanError> {
    let env = podman::json(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Env}}",
        image,
    ])?;
    Ok(env.as_array().and_then(|a| {
        a.iter()
            .filter_map(|v| v.as_str())
            .find_map(|s| s.strip_prefix("PATH=").map(str::to_string))
    }))
}

/// The id an image reference resolves to now.
pub fn image_id(image: &str) -> Result<String, podman::PodmanError> {
    Ok(
        podman::run(&["image", "inspect", "--format", "{{.Id}}", image])?
            .trim()
            .to_string(),
    )
}

/// The host facts a spec's plan needs. Errors: an image that cannot be resolved (setup failed).
pub fn gather(
    spec: &SandboxSpec,
    instance_dir: String,
    launcher: LauncherId,
) -> Result<HostFacts, String> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let mut paths = BTreeMap::new();
    for m in &spec.mounts {
        paths.insert(m.source.clone(), path_kind(&m.source));
    }
    if let Some(d) = &spec.display {
        paths.insert(d.socket.clone(), path_kind(&d.socket));
    }
    let mut image_ids = BTreeMap::new();
    for im in &spec.image_mounts {
        let id = image_id(&im.image).map_err(|e| format!("image mount {:?}: {e}", im.image))?;
        image_ids.insert(im.image.clone(), id);
    }
    let image_path = if spec.path_append.is_empty() && spec.image_mounts.is_empty() {
        None
    } else {
        image_path(&spec.image).map_err(|e| format!("image {:?}: {e}", spec.image))?
    };
    let nested = spec.confinement == handler_contracts::sandbox::Confinement::Nested;
    Ok(HostFacts {
        uid,
        gid,
        subuid_count: if nested {
            subids("/etc/subuid", uid)
        } else {
            None
        },
        subgid_count: if nested {
            subids("/etc/subgid", uid)
        } else {
            None
        },
        has_fuse: Path::new("/dev/fuse").exists(),
        has_tun: Path::new("/dev/net/tun").exists(),
        cgroup_memory: spec.resources.as_ref().is_some_and(|r| r.memory.is_some())
            && cgroup_delegated(uid, "memory"),
        cgroup_cpu: spec.resources.as_ref().is_some_and(|r| r.cpus.is_some())
            && cgroup_delegated(uid, "cpu"),
        paths,
        image_path,
        image_ids,
        instance_dir,
        launcher,
    })
}
