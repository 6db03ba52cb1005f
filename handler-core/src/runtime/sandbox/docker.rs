//! What only the Docker engine needs (issue 19): the daemon's facts before planning (rootless
//! or not, the opt-in, the OCI runtime, the network filter image's id), filling the volumes that
//! stand in for image mounts (decision 0081), the RuntimeCheck's Docker items, and the labelled
//! containers and volumes `sweep` looks at (docker's listings carry labels as text; `inspect`
//! gives them as a map).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use handler_contracts::SandboxSpec;
use handler_contracts::sandbox::RuntimeCheckItem;
use handler_sandbox::egress::topology::{PROXY_IMAGE, Topology};
use handler_sandbox::plan::engine::IMAGE_VOLUME_MARKER;
use handler_sandbox::plan::engine::docker_takes_image_mounts;
use handler_sandbox::plan::{DockerFacts, ImageVolume, labels};
use serde_json::{Value, json};

use super::engine::{ALLOW_ROOTFUL_VAR, Kind, OCI_RUNTIME_VAR};
use super::podman::{self, PodmanError};
use super::{host, log};

/// Why an image volume could not be filled (decision 0081).
#[derive(Debug, thiserror::Error)]
pub enum ImageVolumeError {
    /// A docker command failed.
    #[error("image volume {volume}: {source}")]
    Docker {
        /// The volume being filled.
        volume: String,
        /// The failure.
        source: PodmanError,
    },
    /// The runtime folder (where the fill's lock lives) is unusable.
    #[error("image volume {volume}: {source}")]
    Host {
        /// The volume being filled.
        volume: String,
        /// The failure.
        source: super::host::HostError,
    },
    /// A file or a process on the host failed.
    #[error("image volume {volume}: {what}: {source}")]
    Io {
        /// The volume being filled.
        volume: String,
        /// What was being done (a path, or the program run).
        what: String,
        /// The failure.
        source: std::io::Error,
    },
    /// `docker export` or `tar` exited non-zero.
    #[error("image volume {volume}: {program}: {stderr}")]
    Exited {
        /// The volume being filled.
        volume: String,
        /// `docker export` or `tar`.
        program: &'static str,
        /// What it wrote on stderr.
        stderr: String,
    },
}

/// The label every image volume carries (besides `handler.image-mount.<id>`).
pub const IMAGE_VOLUME_LABEL: &str = "handler.image-volume";

/// Whether the daemon runs rootless (its security options name `rootless`).
pub fn daemon_rootless() -> Result<bool, PodmanError> {
    let opts = podman::run(&["info", "--format", "{{json .SecurityOptions}}"])?;
    Ok(opts.contains("name=rootless"))
}

/// Whether the daemon takes `--mount type=image` (decision 0082): its API version and its image
/// store, from `docker version` and `docker info`; `false` when either cannot be read.
pub fn daemon_takes_image_mounts() -> bool {
    let api = podman::run(&["version", "--format", "{{.Server.APIVersion}}"]);
    let store = podman::run(&["info", "--format", "{{json .DriverStatus}}"]);
    match (api, store) {
        (Ok(api), Ok(store)) => docker_takes_image_mounts(&api, &store),
        _ => false,
    }
}

/// Whether the person opted in to a rootful daemon (`HANDLER_DOCKER_ALLOW_ROOTFUL=1`).
pub fn rootful_allowed() -> bool {
    std::env::var(ALLOW_ROOTFUL_VAR).as_deref() == Ok("1")
}

/// The `ociRuntime` setting (`HANDLER_DOCKER_OCI_RUNTIME`), when set and not empty.
pub fn oci_runtime() -> Option<String> {
    std::env::var(OCI_RUNTIME_VAR)
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// The daemon's facts for planning `spec` (the filter image's id only when it needs a proxy;
/// whether it takes `type=image` only when something is mounted from an image).
pub fn facts(spec: &SandboxSpec, instance_dir: &str) -> Result<DockerFacts, PodmanError> {
    let needs_filter = Topology::of(spec, instance_dir).is_some();
    let filter_image_id = if needs_filter {
        host::image_id(PROXY_IMAGE).ok()
    } else {
        None
    };
    Ok(DockerFacts {
        rootless: daemon_rootless()?,
        allow_rootful: rootful_allowed(),
        oci_runtime: oci_runtime(),
        filter_image_id,
        image_mounts: (needs_filter || !spec.image_mounts.is_empty())
            && daemon_takes_image_mounts(),
    })
}

/// A volume's folder on the host (`docker volume inspect`), `None` when it does not exist.
fn mountpoint(name: &str) -> Option<String> {
    podman::run(&["volume", "inspect", "--format", "{{.Mountpoint}}", name])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Makes sure every volume of the plan is filled from its image (decision 0081): one with the
/// marker is used; one without (a fill that stopped half way) is removed and filled again.
/// Concurrent launchers fill one volume once (a lock file per volume in the runtime folder).
pub fn fill_image_volumes(volumes: &[ImageVolume]) -> Result<(), ImageVolumeError> {
    for v in volumes {
        let io = |what: String| {
            let volume = v.name.clone();
            move |source| ImageVolumeError::Io {
                volume,
                what,
                source,
            }
        };
        let docker = |source| ImageVolumeError::Docker {
            volume: v.name.clone(),
            source,
        };
        let base = host::runtime_base(nix::unistd::getuid().as_raw()).map_err(|source| {
            ImageVolumeError::Host {
                volume: v.name.clone(),
                source,
            }
        })?;
        let lock_path = base.join(format!("{}.lock", v.name));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(lock_path.display().to_string()))?;
        let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| io(lock_path.display().to_string())(e.into()))?;
        if let Some(mp) = mountpoint(&v.name) {
            if Path::new(&mp).join(IMAGE_VOLUME_MARKER).exists() {
                continue;
            }
            log(&format!(
                "image volume {} has no completion marker: filling it again",
                v.name
            ));
            podman::run(&["volume", "rm", "-f", &v.name]).map_err(docker)?;
        }
        fill(v)?;
    }
    Ok(())
}

/// Creates volume `v` and fills it: the image's files exported from a container never started,
/// extracted by the host's tar into the volume's folder, the marker written last.
fn fill(v: &ImageVolume) -> Result<(), ImageVolumeError> {
    let docker = |source| ImageVolumeError::Docker {
        volume: v.name.clone(),
        source,
    };
    let mount_label = format!("{}{}={}", labels::IMAGE_MOUNT_PREFIX, v.image_id, v.image);
    let own_label = format!("{IMAGE_VOLUME_LABEL}=1");
    podman::run(&[
        "volume",
        "create",
        "--label",
        &mount_label,
        "--label",
        &own_label,
        &v.name,
    ])
    .map_err(docker)?;
    let mp = mountpoint(&v.name).ok_or_else(|| ImageVolumeError::Io {
        volume: v.name.clone(),
        what: "docker volume inspect".into(),
        source: std::io::Error::other("the new volume has no folder"),
    })?;
    let ctr = podman::run(&[
        "create",
        "--pull=never",
        "--entrypoint",
        "",
        "--label",
        "handler.image-read=1",
        &v.image_id,
        "/",
    ])
    .map_err(docker)?
    .trim()
    .to_string();
    let result = export_into(&v.name, &ctr, &mp);
    let _ = podman::run(&["rm", "-f", &ctr]);
    result?;
    let marker = Path::new(&mp).join(IMAGE_VOLUME_MARKER);
    fs::File::create(&marker)
        .and_then(|mut f| f.write_all(format!("{}\n", v.image_id).as_bytes()))
        .map_err(|source| ImageVolumeError::Io {
            volume: v.name.clone(),
            what: marker.display().to_string(),
            source,
        })
}

/// Image volumes whose image is gone (decision 0081), removed by `sweep`: a harness rebuilt
/// makes a new volume (the image id is in its name), so the old one would stay forever. A volume
/// a container still uses is refused by docker and kept; one whose image exists is never touched.
pub fn remove_stale_image_volumes() -> Result<Vec<String>, PodmanError> {
    let list = labelled("volume", IMAGE_VOLUME_LABEL)?;
    let mut removed = Vec::new();
    for v in list.as_array().into_iter().flatten() {
        let Some(name) = v["Name"].as_str() else {
            continue;
        };
        let ids: Vec<&str> = v["Labels"]
            .as_object()
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.strip_prefix(labels::IMAGE_MOUNT_PREFIX))
                    .collect()
            })
            .unwrap_or_default();
        let gone = !ids.is_empty()
            && ids
                .iter()
                .all(|id| podman::run(&["image", "inspect", "--format", "{{.Id}}", id]).is_err());
        if gone {
            match podman::run(&["volume", "rm", name]) {
                Ok(_) => removed.push(name.to_string()),
                Err(e) => log(&format!("sweep: image volume {name} kept: {e}")),
            }
        }
    }
    Ok(removed)
}

/// `docker export CTR | tar -x -C DIR`, for volume `volume`.
fn export_into(volume: &str, ctr: &str, dir: &str) -> Result<(), ImageVolumeError> {
    let io = |what: &str| {
        let (volume, what) = (volume.to_string(), what.to_string());
        move |source| ImageVolumeError::Io {
            volume,
            what,
            source,
        }
    };
    let mut export = podman::command(["export", ctr])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("docker export"))?;
    let out = export
        .stdout
        .take()
        .ok_or_else(|| io("docker export")(std::io::Error::other("no stdout")))?;
    let tar = std::process::Command::new("tar")
        .args(["-x", "--no-same-owner", "--exclude=./dev/*", "-C", dir])
        .stdin(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(io("tar"))?;
    let ex = export.wait_with_output().map_err(io("docker export"))?;
    let exited = |program, stderr: &[u8]| ImageVolumeError::Exited {
        volume: volume.to_string(),
        program,
        stderr: String::from_utf8_lossy(stderr).trim().to_string(),
    };
    if !ex.status.success() {
        return Err(exited("docker export", &ex.stderr));
    }
    if !tar.status.success() {
        return Err(exited("tar", &tar.stderr));
    }
    Ok(())
}

/// The rootless daemon's pid (`docker.pid` beside its socket), whose user namespace holds the
/// sandboxes' inner ids: `cache` verbs enter it (`nsenter -U`), as podman's `unshare` does.
pub fn daemon_pid() -> Option<u32> {
    let host = podman::run(&[
        "context",
        "inspect",
        "--format",
        "{{.Endpoints.docker.Host}}",
    ])
    .ok();
    let host = std::env::var("DOCKER_HOST").ok().or(host)?;
    let sock = Path::new(host.trim().strip_prefix("unix://")?);
    fs::read_to_string(sock.parent()?.join("docker.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How an inspected item's name is read.
type NameOf = fn(&Value) -> Option<String>;

/// Containers or volumes labelled `label=<key>` as `[{<id_key>: name, "Labels": {…}}]`, the form
/// sweep reads (docker's listings give labels as one text; `inspect` as a map).
pub fn labelled(kind: &str, key: &str) -> Result<Value, PodmanError> {
    let filter = format!("label={key}");
    let (ls, id_key, name_of): (Vec<&str>, &str, NameOf) = match kind {
        "volume" => (
            vec!["volume", "ls", "-q", "--filter", &filter],
            "Name",
            |v| v["Name"].as_str().map(str::to_string),
        ),
        _ => (vec!["ps", "-a", "-q", "--filter", &filter], "Names", |v| {
            v["Name"]
                .as_str()
                .map(|n| n.trim_start_matches('/').to_string())
        }),
    };
    let ids = podman::run(&ls)?;
    let mut out = Vec::new();
    for id in ids.split_whitespace() {
        let inspect = if kind == "volume" {
            podman::json(&["volume", "inspect", id])
        } else {
            podman::json(&["container", "inspect", id])
        };
        // One removed meanwhile is simply not listed.
        let Ok(v) = inspect else { continue };
        let Some(item) = v.get(0) else { continue };
        let labels = item
            .get("Labels")
            .filter(|l| !l.is_null())
            .or_else(|| item["Config"].get("Labels"))
            .cloned()
            .unwrap_or(Value::Null);
        if let Some(name) = name_of(item) {
            out.push(json!({ id_key: name, "Labels": labels }));
        }
    }
    Ok(Value::Array(out))
}

/// The RuntimeCheck items only Docker has: the daemon (rootless, or rootful and whether opted
/// in, decision 0080), image mounts (the volume fallback), the OCI runtime setting, gVisor.
#[expect(
    clippy::too_many_lines,
    reason = "one RuntimeCheck item per Docker fact, in the order the check prints them"
)]
pub fn check_items(items: &mut Vec<RuntimeCheckItem>) -> String {
    let item = |name: &str, ok: bool, required: bool, detail: String| RuntimeCheckItem {
        name: name.into(),
        ok,
        required,
        detail,
    };
    let version = podman::run(&["version", "--format", "{{.Server.Version}}"]);
    let Ok(version) = version.map(|v| v.trim().to_string()) else {
        let e = podman::run(&["version"])
            .err()
            .map_or_else(String::new, |e| e.to_string());
        items.push(item("docker", false, true, format!("no Docker daemon answers ({e}): start a rootless dockerd (dockerd-rootless.sh), see docs/ci-needs.md")));
        return "docker (not reachable)".into();
    };
    items.push(item(
        "docker",
        true,
        true,
        format!("dockerd {version} through {}", Kind::Docker.program()),
    ));
    let rootless = daemon_rootless().unwrap_or(false);
    let allowed = rootful_allowed();
    items.push(item(
        "rootless-daemon",
        rootless || allowed,
        true,
        if rootless {
            "the daemon runs rootless: container uid 0 is this user (decision 0080)".into()
        } else if allowed {
            format!("the daemon runs as ROOT, accepted by {ALLOW_ROOTFUL_VAR}=1: whoever reaches it is root-equivalent")
        } else {
            format!("the daemon runs as root: launch refuses (64); run a rootless dockerd, or set {ALLOW_ROOTFUL_VAR}=1 accepting that the docker group is root-equivalent")
        },
    ));
    let type_image = daemon_takes_image_mounts();
    items.push(item(
        "image-mounts",
        type_image || rootless,
        false,
        if type_image {
            "--mount type=image: image mounts are the images themselves (decision 0082)".into()
        } else if rootless {
            "no --mount type=image here (it needs Docker 28+ with the containerd image store): image mounts are read-only volumes filled from the image (decision 0081)".into()
        } else {
            "a rootful daemon's volumes are root's and it has no --mount type=image: image mounts are refused".into()
        },
    ));
    let runtimes = podman::json(&["info", "--format", "{{json .Runtimes}}"]).unwrap_or(Value::Null);
    let has = |r: &str| runtimes.get(r).is_some();
    items.push(item(
        "gvisor",
        has("runsc"),
        false,
        if has("runsc") {
            "runsc is installed (ociRuntime = runsc)".into()
        } else {
            "runsc (gVisor) is not installed".into()
        },
    ));
    if let Some(r) = oci_runtime() {
        items.push(item(
            "oci-runtime",
            has(&r),
            true,
            if has(&r) {
                format!("{OCI_RUNTIME_VAR}={r}: the daemon has it")
            } else {
                format!(
                    "{OCI_RUNTIME_VAR}={r}: the daemon has no such runtime (docker will refuse)"
                )
            },
        ));
    }
    format!(
        "docker {version}{}",
        if rootless {
            " (rootless)"
        } else {
            " (rootful)"
        }
    )
}
