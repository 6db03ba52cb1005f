//! The container engine a plan is for — rootless Podman or Docker (issue 19) — and every way the
//! two differ, each a named function: who the process runs as (decision 0080), the entrypoint
//! reset, the proxy variables, tmpfs ownership, unset variables, the names the engine reads
//! itself, image mounts (Docker: a volume filled once from the image, decision 0081), the `open`
//! network, the OCI runtime, and what each engine refuses up front. Everything else of a plan —
//! validation, mounts, files, the egress topology, the proxy's configuration — is shared.

use handler_contracts::sandbox::SandboxSpec;

use crate::error::SpecError;
use crate::facts::HostFacts;
use crate::network::SLIRP_HOST_LOOPBACK;

/// What the launcher found out about the Docker daemon (`docker info`) and its settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerFacts {
    /// The daemon runs rootless (`docker info`'s security options name `rootless`).
    pub rootless: bool,
    /// The person opted in to a rootful daemon (`HANDLER_DOCKER_ALLOW_ROOTFUL=1`), knowing that
    /// a member of the `docker` group is root-equivalent on this host.
    pub allow_rootful: bool,
    /// The `ociRuntime` setting (e.g. `runsc`), passed to docker as given (`--runtime`).
    pub oci_runtime: Option<String>,
    /// The image id of the network filter image, when the spec needs the egress proxy and the
    /// image exists (its forwarder is mounted from it).
    pub filter_image_id: Option<String>,
    /// The engine takes `--mount type=image` ([`docker_takes_image_mounts`]): image mounts are
    /// then the image itself, as on Podman, instead of volumes filled from it (decision 0082).
    pub image_mounts: bool,
}

/// The Docker API version from which `--mount type=image` exists (Docker 28).
pub const IMAGE_MOUNT_API: (u32, u32) = (1, 48);

/// Whether a Docker daemon takes `--mount type=image` (decision 0082): its API version
/// (`docker version`'s `Server.APIVersion`, e.g. `1.41`) is at least [`IMAGE_MOUNT_API`] and its
/// images are in the containerd image store, the only one image mounts work with (`docker
/// info`'s `DriverStatus` as JSON names the driver type `io.containerd.snapshotter.v1`).
pub fn docker_takes_image_mounts(api_version: &str, driver_status: &str) -> bool {
    let mut parts = api_version.trim().split('.').map(str::parse::<u32>);
    let version = match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), None) => (major, minor),
        _ => return false,
    };
    version >= IMAGE_MOUNT_API && driver_status.contains("io.containerd.snapshotter")
}

/// The engine a plan is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine<'a> {
    /// Rootless Podman (`handler-sandbox-podman`).
    Podman,
    /// Docker (`handler-sandbox-docker`), with what was found out about the daemon.
    Docker(&'a DockerFacts),
}

/// A read-only volume a Docker plan mounts in place of an image mount (decision 0081): the
/// runtime fills it once from the image, writing [`IMAGE_VOLUME_MARKER`] last; a volume
/// without the marker is removed and filled again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageVolume {
    /// The volume's name: `handler-image-<id>`, so a moved tag is a new volume.
    pub name: String,
    /// The image as the spec names it.
    pub image: String,
    /// The image id it is pinned to (resolved when the launch was planned).
    pub image_id: String,
}

/// The file written last into a filled image volume.
pub const IMAGE_VOLUME_MARKER: &str = ".handler-filled";

/// The name of the volume filled from image `image_id`: the id in it, so a moved tag is a new
/// volume (the old one is left for `cache`/`docker volume prune`).
pub fn image_volume_name(image_id: &str) -> String {
    format!("handler-image-{}", image_id.trim_start_matches("sha256:"))
}

type Result<T = ()> = std::result::Result<T, SpecError>;

/// Who the process runs as (A3, decision 0080). Podman: keep-id, the host user's uid and gid.
/// Rootless Docker: container uid 0, which is the host user (the daemon's user namespace maps 0
/// to it; capabilities dropped, no-new-privileges). A rootful daemon: the host user's ids, and
/// only when opted in (refused 64 otherwise: the daemon is root).
pub fn user_args(engine: Engine<'_>, facts: &HostFacts) -> Result<Vec<String>> {
    user_args_of(engine, (facts.uid, facts.gid))
}

/// [`user_args`] for the host user's `(uid, gid)` (the git guard's helper container, issue 14).
pub fn user_args_of(engine: Engine<'_>, (uid, gid): (u32, u32)) -> Result<Vec<String>> {
    let ids = format!("{uid}:{gid}");
    Ok(match engine {
        Engine::Podman => vec!["--userns=keep-id".into(), "--user".into(), ids],
        Engine::Docker(d) if d.rootless => vec!["--user".into(), "0:0".into()],
        Engine::Docker(d) if d.allow_rootful => vec!["--user".into(), ids],
        Engine::Docker(_) => return Err(rootful_refusal()),
    })
}

/// Why a rootful Docker daemon is refused without the opt-in.
pub fn rootful_refusal() -> SpecError {
    SpecError::unenforceable(
        "user.mode",
        "the Docker daemon runs as root (not rootless): whoever can reach it is root-equivalent, so A3's rootless runtime does not hold; run a rootless dockerd (dockerd-rootless.sh), or set HANDLER_DOCKER_ALLOW_ROOTFUL=1 to accept that consequence",
    )
}

/// The argument that clears the image's entrypoint (the spec's argv is the whole command).
pub fn no_entrypoint(engine: Engine<'_>) -> [&'static str; 2] {
    match engine {
        Engine::Podman => ["--entrypoint", "[]"],
        Engine::Docker(_) => ["--entrypoint", ""],
    }
}

/// The option that keeps the engine's own proxy variables out of the sandbox, if it has one
/// (Docker passes none unless the client's config.json names proxies).
pub fn proxy_variables_off(engine: Engine<'_>) -> Option<&'static str> {
    match engine {
        Engine::Podman => Some("--http-proxy=false"),
        Engine::Docker(_) => None,
    }
}

/// A tmpfs at `dest` owned by the sandbox's user with `mode`: the option and its value.
/// Podman chowns it (`chown=true`); Docker's is owned by container uid 0 (the host user when
/// rootless), or by the given ids when the daemon is rootful.
pub fn tmpfs(engine: Engine<'_>, facts: &HostFacts, dest: &str, mode: u32) -> [String; 2] {
    match engine {
        Engine::Podman => [
            "--mount".into(),
            format!("type=tmpfs,destination={dest},tmpfs-mode={mode:o},chown=true"),
        ],
        Engine::Docker(d) => {
            let (uid, gid) = if d.rootless {
                (0, 0)
            } else {
                (facts.uid, facts.gid)
            };
            [
                "--tmpfs".into(),
                format!("{dest}:rw,exec,mode={mode:o},uid={uid},gid={gid}"),
            ]
        }
    }
}

/// The arguments that keep variable `name` (set by the image) out of the sandbox. Docker has no
/// `--unsetenv` and passes nothing of its own environment, so only an image's `ENV` could set
/// one: nothing is given (an empty value would be a variable the image never had).
pub fn unset_env(engine: Engine<'_>, name: &str) -> Vec<String> {
    match engine {
        Engine::Podman => vec!["--unsetenv".into(), name.into()],
        Engine::Docker(_) => Vec::new(),
    }
}

/// Env names docker reads itself (its configuration, its daemon's address, its proxy, the
/// dynamic loader): giving them to docker's own environment would change docker, so their
/// values travel in the instance's env file instead (never in argv, never in docker's env).
pub fn docker_reads(name: &str) -> bool {
    const PREFIXES: [&str; 4] = ["DOCKER_", "BUILDKIT_", "LD_", "XDG_"];
    const NAMES: [&str; 10] = [
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "GODEBUG",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

/// Whether the engine reads env name `name` itself.
pub fn engine_reads(engine: Engine<'_>, name: &str) -> bool {
    match engine {
        Engine::Podman => super::podman_reads(name),
        Engine::Docker(_) => docker_reads(name),
    }
}

/// The `--mount` value that mounts image `id` (named `image`) read-only at `target` and, for a
/// Docker engine that refuses `type=image` (20.10 does), the volume to fill from it first.
pub fn image_mount(
    engine: Engine<'_>,
    image: &str,
    id: &str,
    target: &str,
) -> (String, Option<ImageVolume>) {
    match engine {
        Engine::Podman => (format!("type=image,source={id},destination={target}"), None),
        Engine::Docker(d) if d.image_mounts => {
            (format!("type=image,source={id},destination={target}"), None)
        }
        Engine::Docker(_) => {
            let name = image_volume_name(id);
            (
                format!("type=volume,source={name},destination={target},readonly,volume-nocopy"),
                Some(ImageVolume {
                    name,
                    image: image.to_string(),
                    image_id: id.to_string(),
                }),
            )
        }
    }
}

/// Why an image can not be mounted on `engine` (`field` names it): a rootful Docker daemon
/// without `type=image` would need a volume whose folder is root's, so the runtime cannot fill
/// it (decision 0081).
pub fn image_volume_refusal(engine: Engine<'_>, field: &str) -> Option<SpecError> {
    match engine {
        Engine::Docker(d) if !d.rootless && !d.image_mounts => Some(SpecError::unenforceable(
            field,
            "a rootful Docker daemon's volumes are root's and it refuses --mount type=image: the image cannot be mounted (decision 0081); use a rootless dockerd, or Docker 28+ with the containerd image store",
        )),
        _ => None,
    }
}

/// The network filter image's mount for the sandbox's forwarder (A.3): Podman mounts the image;
/// Docker a volume filled from it, which needs its id (refused 64 when the image is missing).
pub fn filter_image_mount(engine: Engine<'_>) -> Result<(String, Option<ImageVolume>)> {
    use crate::egress::topology::{PROXY_IMAGE, SANDBOX_FILTER_DIR};
    match engine {
        Engine::Podman => Ok(image_mount(
            engine,
            PROXY_IMAGE,
            PROXY_IMAGE,
            SANDBOX_FILTER_DIR,
        )),
        Engine::Docker(DockerFacts {
            filter_image_id: Some(id),
            ..
        }) => Ok(image_mount(engine, PROXY_IMAGE, id, SANDBOX_FILTER_DIR)),
        Engine::Docker(_) => Err(SpecError::unenforceable(
            "network",
            format!(
                "the network filter image {PROXY_IMAGE} is missing: build it with `handler-sandbox-docker image build-proxy`"
            ),
        )),
    }
}

/// Options of the proxy's container that only one engine has (Podman: the host's rlimits).
pub fn proxy_extra_args(engine: Engine<'_>) -> &'static [&'static str] {
    match engine {
        Engine::Podman => &["--ulimit", "host"],
        Engine::Docker(_) => &[],
    }
}

/// The name a container uses for the host (a service listening on the host's loopback).
pub fn host_alias(engine: Engine<'_>) -> &'static str {
    match engine {
        Engine::Podman => "host.containers.internal",
        Engine::Docker(_) => "host.docker.internal",
    }
}

/// The options of a container with a route out (`open`, and the proxy's container): Podman's
/// slirp4netns with the host's loopback; Docker's default bridge, which under rootless Docker
/// leaves through the daemon's slirp4netns, the host's loopback at the same address. Docker's
/// containers get both host names, so a setting written for one engine works on the other.
pub fn open_network_args(engine: Engine<'_>) -> Vec<String> {
    let host = |n: &str| format!("{n}:{SLIRP_HOST_LOOPBACK}");
    match engine {
        Engine::Podman => vec![
            "--network".into(),
            "slirp4netns:allow_host_loopback=true".into(),
            "--add-host".into(),
            host("host.containers.internal"),
        ],
        Engine::Docker(_) => vec![
            "--network".into(),
            "bridge".into(),
            "--add-host".into(),
            host("host.docker.internal"),
            "--add-host".into(),
            host("host.containers.internal"),
        ],
    }
}

/// The options of a filtered sandbox: no interface but loopback. Podman writes the host's name
/// into its /etc/hosts by itself; Docker is given both names (the address is only a name there:
/// with no route, the proxy alone reaches it, and refuses the literal unless listed, decision
/// 0035).
pub fn no_route_args(engine: Engine<'_>) -> Vec<String> {
    let mut a = vec!["--network".to_string(), "none".to_string()];
    if let Engine::Docker(_) = engine {
        for n in ["host.docker.internal", "host.containers.internal"] {
            a.extend(["--add-host".into(), format!("{n}:{SLIRP_HOST_LOOPBACK}")]);
        }
    }
    a
}

/// `--runtime <ociRuntime>`: the spec's (a machine profile's, decision 0162), else Docker's
/// daemon-wide setting; passed as given, so a host without it refuses with the engine's own
/// message. gVisor (`runsc`) under rootless Podman runs through [`runsc_wrapper`]:
/// [`runsc_refusal`] keeps a spec from asking for what that loses.
pub fn oci_runtime_args(engine: Engine<'_>, spec: &SandboxSpec) -> Vec<String> {
    let named = spec.oci_runtime.clone().or_else(|| match engine {
        Engine::Docker(DockerFacts {
            oci_runtime: Some(r),
            ..
        }) => Some(r.clone()),
        _ => None,
    });
    let Some(r) = named else {
        return Vec::new();
    };
    if matches!(engine, Engine::Podman) && is_runsc(&r) {
        // Podman passes `--runtime-flag` to the runtime only in the command it is given with
        // (`create`), not at a later `start` or `exec`: the runtime is a wrapper that always
        // adds them ([`runsc_wrapper`]), written by the runtime executable where [`RUNTIME_SLOT`]
        // is.
        return vec!["--runtime".to_string(), RUNTIME_SLOT.to_string()];
    }
    vec!["--runtime".to_string(), r]
}

/// The word a plan holds where the path of the runtime's wrapper goes (gVisor on Podman).
pub const RUNTIME_SLOT: &str = "<oci-runtime>";

/// The wrapper gVisor runs through on rootless Podman (decision 0162): `runsc` (at `path`)
/// told to leave cgroups alone (the user has none delegated) and to give the sandbox no network
/// (it cannot join the rootless network namespace), at every call Podman makes.
pub fn runsc_wrapper(path: &str) -> String {
    format!(
        "#!/bin/sh\n# Handler's gVisor for rootless Podman (decision 0162).\nexec '{}' --ignore-cgroups --network=none \"$@\"\n",
        path.replace('\'', "'\\''")
    )
}

/// Whether runtime `r` is gVisor's `runsc` (by its name or its path's last name).
pub fn is_runsc(r: &str) -> bool {
    r.rsplit('/').next() == Some("runsc")
}

/// What a spec under gVisor cannot have on rootless Podman (A1: refused, 64, never weakened):
/// a network (runsc gives it none there), resource limits (runsc leaves cgroups alone there).
pub fn runsc_refusal(engine: Engine<'_>, spec: &SandboxSpec) -> Option<SpecError> {
    let r = spec.oci_runtime.as_deref()?;
    if !(matches!(engine, Engine::Podman) && is_runsc(r)) {
        return None;
    }
    if !spec.name.starts_with("handler-m-") {
        return Some(SpecError::unenforceable(
            "ociRuntime",
            "gVisor on rootless Podman is given to machines (a profile's ociRuntime), whose staged folder keeps its wrapper",
        ));
    }
    if !matches!(
        spec.network,
        handler_contracts::sandbox::NetworkPolicy::None
    ) {
        return Some(SpecError::unenforceable(
            "network",
            "under runsc, rootless Podman gives a sandbox no network of its own (gVisor cannot join the rootless network namespace): use network none, or another OCI runtime",
        ));
    }
    if spec.resources.is_some() {
        return Some(SpecError::unenforceable(
            "resources",
            "under runsc, rootless Podman leaves cgroups alone (none are delegated here), so no limit would hold: leave cpus and memory out",
        ));
    }
    None
}

/// Whether `nested` confinement (A.5: rootless podman inside) can be given: not on Docker,
/// where the sandbox's user is uid 0 of the daemon's namespace and inner podman would run
/// rootful there (refused 64, never weakened).
pub fn nested_refusal(engine: Engine<'_>) -> Option<SpecError> {
    match engine {
        Engine::Podman => None,
        Engine::Docker(_) => Some(SpecError::unenforceable(
            "confinement",
            "nested is not offered on Docker: the sandbox's user is uid 0 of the daemon's user namespace, so podman inside would not be rootless; use handler-sandbox-podman",
        )),
    }
}

/// What each engine refuses on the host as a whole: Podman a containers.conf that adds to a
/// container (decision 0032); Docker a rootful daemon without the opt-in (decision 0080).
pub fn check_engine(engine: Engine<'_>, facts: &HostFacts) -> Result {
    match engine {
        Engine::Podman => super::check_containers_conf(&facts.containers_conf),
        Engine::Docker(d) if !d.rootless && !d.allow_rootful => Err(rootful_refusal()),
        Engine::Docker(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(rootless: bool, allow_rootful: bool) -> DockerFacts {
        DockerFacts {
            rootless,
            allow_rootful,
            ..DockerFacts::default()
        }
    }

    fn facts() -> HostFacts {
        HostFacts {
            uid: 1000,
            gid: 1001,
            subuid_count: None,
            subgid_count: None,
            has_fuse: false,
            has_tun: false,
            cgroup_memory: false,
            cgroup_cpu: false,
            paths: Default::default(),
            image_path: None,
            image_ids: Default::default(),
            instance_dir: "/i".into(),
            launcher: crate::LauncherId {
                pid: 1,
                start: 2,
                boot: "b".into(),
            },
            git: Vec::new(),
            canonical_sources: Default::default(),
            nproc_hard: None,
            cgroup_pids: false,
            containers_conf: Default::default(),
            host_addresses: Vec::new(),
            exec_server: None,
        }
    }

    #[test]
    fn the_user_is_container_root_under_rootless_docker_and_refused_rootful_without_opt_in() {
        let f = facts();
        assert_eq!(
            user_args(Engine::Podman, &f).unwrap(),
            ["--userns=keep-id", "--user", "1000:1001"]
        );
        let rootless = docker(true, false);
        assert_eq!(
            user_args(Engine::Docker(&rootless), &f).unwrap(),
            ["--user", "0:0"]
        );
        let rootful = docker(false, false);
        let e = user_args(Engine::Docker(&rootful), &f).unwrap_err();
        assert_eq!((e.exit_code(), e.field()), (64, "user.mode"));
        assert!(
            e.to_string().contains("HANDLER_DOCKER_ALLOW_ROOTFUL"),
            "{e}"
        );
        assert_eq!(check_engine(Engine::Docker(&rootful), &f), Err(e));
        let opted = docker(false, true);
        assert_eq!(
            user_args(Engine::Docker(&opted), &f).unwrap(),
            ["--user", "1000:1001"]
        );
        assert!(check_engine(Engine::Docker(&opted), &f).is_ok());
    }

    #[test]
    fn tmpfs_is_the_users_on_each_engine() {
        let f = facts();
        assert_eq!(
            tmpfs(Engine::Podman, &f, "/h", 0o700)[1],
            "type=tmpfs,destination=/h,tmpfs-mode=700,chown=true"
        );
        let d = docker(true, false);
        assert_eq!(
            tmpfs(Engine::Docker(&d), &f, "/h", 0o700),
            ["--tmpfs", "/h:rw,exec,mode=700,uid=0,gid=0"]
        );
        let d = docker(false, true);
        assert_eq!(
            tmpfs(Engine::Docker(&d), &f, "/h", 0o755)[1],
            "/h:rw,exec,mode=755,uid=1000,gid=1001"
        );
    }

    #[test]
    fn the_small_differences() {
        let d = docker(true, false);
        let e = Engine::Docker(&d);
        assert_eq!(no_entrypoint(Engine::Podman), ["--entrypoint", "[]"]);
        assert_eq!(no_entrypoint(e), ["--entrypoint", ""]);
        assert_eq!(
            proxy_variables_off(Engine::Podman),
            Some("--http-proxy=false")
        );
        assert_eq!(proxy_variables_off(e), None);
        assert_eq!(
            unset_env(Engine::Podman, "DISPLAY"),
            ["--unsetenv", "DISPLAY"]
        );
        assert!(unset_env(e, "DISPLAY").is_empty());
        assert_eq!(host_alias(e), "host.docker.internal");
        assert!(nested_refusal(Engine::Podman).is_none());
        assert_eq!(nested_refusal(e).unwrap().exit_code(), 64);
        let plain: SandboxSpec = serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1", "name": "s", "image": "i", "argv": ["sh"],
            "workdir": "/w", "user": {"mode": "host-user", "home": "/h"},
            "network": {"mode": "none"}
        }))
        .unwrap();
        assert!(oci_runtime_args(e, &plain).is_empty());
        let g = DockerFacts {
            oci_runtime: Some("runsc".into()),
            ..d.clone()
        };
        assert_eq!(
            oci_runtime_args(Engine::Docker(&g), &plain),
            ["--runtime", "runsc"]
        );
        assert!(oci_runtime_args(Engine::Podman, &plain).is_empty());
        // A profile's runtime: as given; gVisor on rootless Podman with what it needs there.
        let gvisor = SandboxSpec {
            name: "handler-m-g".into(),
            oci_runtime: Some("/usr/bin/runsc".into()),
            ..plain.clone()
        };
        assert_eq!(
            oci_runtime_args(Engine::Podman, &gvisor),
            ["--runtime", RUNTIME_SLOT]
        );
        assert_eq!(
            runsc_wrapper("/usr/bin/runsc"),
            "#!/bin/sh\n# Handler's gVisor for rootless Podman (decision 0162).\nexec '/usr/bin/runsc' --ignore-cgroups --network=none \"$@\"\n"
        );
        assert_eq!(
            oci_runtime_args(Engine::Docker(&g), &gvisor),
            ["--runtime", "/usr/bin/runsc"]
        );
        assert!(runsc_refusal(Engine::Podman, &gvisor).is_none());
        // A launch is not a machine: its instance folder would not keep the wrapper.
        let launch = SandboxSpec {
            name: "handler-a-1".into(),
            ..gvisor.clone()
        };
        assert_eq!(
            runsc_refusal(Engine::Podman, &launch).map(|e| e.field().to_string()),
            Some("ociRuntime".to_string())
        );
        let open = SandboxSpec {
            network: handler_contracts::sandbox::NetworkPolicy::Open,
            ..gvisor.clone()
        };
        assert_eq!(
            runsc_refusal(Engine::Podman, &open).map(|e| (e.exit_code(), e.field().to_string())),
            Some((64, "network".to_string()))
        );
        assert!(runsc_refusal(Engine::Docker(&g), &open).is_none());
    }

    #[test]
    fn docker_reads_its_own_names_which_never_reach_its_environment() {
        for n in [
            "DOCKER_HOST",
            "DOCKER_CONFIG",
            "PATH",
            "HOME",
            "HTTPS_PROXY",
            "LD_PRELOAD",
        ] {
            assert!(docker_reads(n), "{n}");
        }
        for n in ["MISTRAL_API_KEY", "OPENAI_API_KEY", "CONTAINERS_CONF_X"] {
            assert!(!docker_reads(n), "{n}");
        }
        let d = docker(true, false);
        assert!(engine_reads(Engine::Podman, "CONTAINERS_CONF"));
        assert!(!engine_reads(Engine::Docker(&d), "CONTAINERS_CONF"));
    }

    #[test]
    fn an_image_mount_on_docker_is_a_volume_named_by_the_image_id() {
        let d = docker(true, false);
        let id = format!("sha256:{}", "b".repeat(64));
        let (m, v) = image_mount(Engine::Docker(&d), "localhost/x:1", &id, "/opt/x");
        let name = format!("handler-image-{}", "b".repeat(64));
        assert_eq!(
            m,
            format!("type=volume,source={name},destination=/opt/x,readonly,volume-nocopy")
        );
        let v = v.unwrap();
        assert_eq!(
            (v.name, v.image.as_str(), v.image_id),
            (name, "localhost/x:1", id)
        );
        let (m, v) = image_mount(Engine::Podman, "localhost/x:1", "abc", "/opt/x");
        assert_eq!(m, "type=image,source=abc,destination=/opt/x");
        assert!(v.is_none());
    }

    #[test]
    fn a_docker_engine_with_type_image_mounts_the_image_itself() {
        let d = DockerFacts {
            image_mounts: true,
            ..docker(false, true)
        };
        let id = format!("sha256:{}", "c".repeat(64));
        let (m, v) = image_mount(Engine::Docker(&d), "localhost/x:1", &id, "/opt/x");
        assert_eq!(m, format!("type=image,source={id},destination=/opt/x"));
        assert!(v.is_none(), "no volume to fill");
        assert!(image_volume_refusal(Engine::Docker(&d), "f").is_none());
        let old = docker(false, true);
        let e = image_volume_refusal(Engine::Docker(&old), "imageMounts[0].image").unwrap();
        assert_eq!((e.exit_code(), e.field()), (64, "imageMounts[0].image"));
        assert!(image_volume_refusal(Engine::Docker(&docker(true, false)), "f").is_none());
    }

    #[test]
    fn type_image_needs_api_1_48_and_the_containerd_image_store() {
        let containerd = r#"[["driver-type","io.containerd.snapshotter.v1"]]"#;
        let overlay2 = r#"[["Backing Filesystem","extfs"],["Supports d_type","true"]]"#;
        assert!(docker_takes_image_mounts("1.48", containerd));
        assert!(docker_takes_image_mounts("1.51\n", containerd));
        assert!(docker_takes_image_mounts("2.0", containerd));
        assert!(!docker_takes_image_mounts("1.47", containerd));
        assert!(!docker_takes_image_mounts("1.41", containerd), "20.10");
        assert!(
            !docker_takes_image_mounts("1.51", overlay2),
            "graph drivers refuse it"
        );
        for bad in ["", "1", "1.x", "1.48.1", "v1.48"] {
            assert!(!docker_takes_image_mounts(bad, containerd), "{bad:?}");
        }
    }

    #[test]
    fn the_open_network_reaches_the_hosts_loopback_by_both_names_on_docker() {
        let d = docker(true, false);
        assert_eq!(
            open_network_args(Engine::Docker(&d)),
            [
                "--network",
                "bridge",
                "--add-host",
                "host.docker.internal:10.0.2.2",
                "--add-host",
                "host.containers.internal:10.0.2.2"
            ]
        );
        assert_eq!(
            open_network_args(Engine::Podman)[1],
            "slirp4netns:allow_host_loopback=true"
        );
    }
}
