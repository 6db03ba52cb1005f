//! The podman plan of a launch: the `podman run` (or, with tty, `podman create`) arguments, the
//! environment podman is started with (so the spec's env values reach podman by name, never in
//! argv), and the host files and folders to stage first, as a pure function of the spec and the
//! host facts. Refusals: 65 invalid (`validate`), 64 unenforceable here (A1). With a filtered
//! network or injections the plan holds the egress proxy's too (`proxy`: what to stage, its
//! podman arguments, its configuration), so the runtime only executes it.

pub mod engine;
mod proxy;

pub use engine::{DockerFacts, Engine, ImageVolume};
pub use proxy::ProxyPlan;

use std::collections::BTreeMap;

use handler_contracts::sandbox::{Confinement, SandboxSpec};

use crate::error::SpecError;
use crate::facts::{GitEntryKind, HostFacts, PathKind};
use crate::network::{NetworkPlan, plan_network_on};
use crate::validate::{ValidSpec, is_within, parse_mode, writable_dirs};

type Result<T = ()> = std::result::Result<T, SpecError>;

/// Labels the runtime puts on everything it creates.
pub mod labels {
    /// The instance's name (the spec's `name`): every container, network and volume of it.
    pub const SANDBOX: &str = "handler.sandbox";
    /// The launcher's pid, its start time (clock ticks since boot) and the boot id.
    pub const LAUNCHER_PID: &str = "handler.launcher.pid";
    /// The launcher's start time (clock ticks since boot), with its pid.
    pub const LAUNCHER_START: &str = "handler.launcher.start";
    /// The boot the launcher started in (`/proc/sys/kernel/random/boot_id`).
    pub const LAUNCHER_BOOT: &str = "handler.launcher.boot";
    /// The instance's private host folder.
    pub const INSTANCE_DIR: &str = "handler.instance-dir";
    /// `handler.image-mount.<id>`: an image the instance mounts (A6).
    pub const IMAGE_MOUNT_PREFIX: &str = "handler.image-mount.";
    /// A machine's id (issue 29): the only containers machine verbs touch.
    pub const MACHINE: &str = handler_contracts::machine::MACHINE_LABEL;
}

/// What a plan is for: a launch (its container lives as long as its launcher) or a machine
/// (created to outlive every process, issue 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind<'a> {
    /// `launch`.
    Launch,
    /// `machine create` of machine `id`.
    Machine(&'a str),
}

/// The image's PATH when it has none in its config (podman's default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the display's socket appears in the sandbox (under XDG_RUNTIME_DIR).
pub const WAYLAND_SOCKET_NAME: &str = "wayland-0";

/// Something to create under the instance folder before podman starts.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stage {
    /// A folder (parents included) with this mode.
    Dir {
        /// The folder's host path.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A file with this content and mode (its folder exists by then).
    File {
        /// The file's host path.
        path: String,
        /// What the file holds.
        content: String,
        /// Its permission bits.
        mode: u32,
    },
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stage::Dir { path, mode } => write!(f, "Dir({path}, {mode:o})"),
            Stage::File {
                path,
                content,
                mode,
            } => {
                write!(f, "File({path}, {mode:o}, {} bytes)", content.len())
            }
        }
    }
}

/// Everything the launcher needs to start the instance.
#[derive(Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// podman's arguments, from the verb (`run`, or `create` with tty) to the process's argv.
    pub args: Vec<String>,
    /// Variables set in podman's own environment, passed on by name (`-e NAME`): the spec's
    /// env values. Never in argv, never logged.
    pub podman_env: BTreeMap<String, String>,
    /// What to create under the instance folder first, in order.
    pub stage: Vec<Stage>,
    /// The network and what it needs around the container.
    pub network: NetworkPlan,
    /// tty mode (A): created, started by `attach`.
    pub tty: bool,
    /// The egress proxy to start beside the sandbox (a filtered network, or injections); the
    /// sandbox's forwarder holds the process until it answers (A1).
    pub proxy: Option<ProxyPlan>,
    /// Docker: the read-only volumes to fill from images before the sandbox starts (image
    /// mounts and the forwarder's filter image, decision 0081); empty for Podman.
    pub image_volumes: Vec<ImageVolume>,
}

impl std::fmt::Debug for LaunchPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LaunchPlan");
        d.field("args", &self.args)
            .field("podman_env", &self.podman_env.keys().collect::<Vec<_>>())
            .field("stage", &self.stage)
            .field("network", &self.network)
            .field("tty", &self.tty);
        // Only when there is one: the plans without a proxy read as they always did.
        if let Some(p) = &self.proxy {
            d.field("proxy", p);
        }
        if !self.image_volumes.is_empty() {
            d.field("image_volumes", &self.image_volumes);
        }
        d.finish()
    }
}

/// Env names podman itself reads (its configuration, storage, runtime dir…): giving them to
/// podman's own environment would change podman, so they travel in the instance's env file.
pub fn podman_reads(name: &str) -> bool {
    const PREFIXES: [&str; 7] = [
        "XDG_",
        "CONTAINERS_",
        "_CONTAINERS",
        "CONTAINER_",
        "LD_",
        "PODMAN_",
        "BUILDAH_",
    ];
    const NAMES: [&str; 9] = [
        "PATH",
        // containers/storage finds its configuration under HOME (a HOME that is not there on
        // the host: "cannot resolve /home/agent").
        "HOME",
        "TMPDIR",
        "NOTIFY_SOCKET",
        "DBUS_SESSION_BUS_ADDRESS",
        "STORAGE_DRIVER",
        "STORAGE_OPTS",
        "REGISTRY_AUTH_FILE",
        "GODEBUG",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

fn mount_path_ok(field: &str, p: &str) -> Result {
    if p.contains(',') {
        return Err(SpecError::unenforceable(
            field,
            format!("{p:?}: podman's --mount cannot express a path with ','"),
        ));
    }
    Ok(())
}

fn bind(source: &str, target: &str, read_only: bool) -> String {
    let mut s = format!("type=bind,source={source},destination={target}");
    if read_only {
        s.push_str(",ro=true");
    }
    s
}

fn relative(inner: &str, outer: &str) -> String {
    inner[outer.len()..].trim_start_matches('/').to_string()
}

/// The subordinate ids given to inner podman in a nested sandbox (A.5): every id of the
/// sandbox's user namespace (0..=count) except the agent's own.
pub fn nested_subids(id: u32, count: u32) -> String {
    let mut lines = Vec::new();
    if id > 1 {
        lines.push(format!("{id}:1:{}", id - 1));
    }
    if count > id {
        lines.push(format!("{id}:{}:{}", id + 1, count - id));
    }
    lines.join("\n") + "\n"
}

/// The processes (threads included) a sandbox may run at once, so a fork bomb stops there
/// (decision 0032): RLIMIT_NPROC always (rootless podman on cgroups v1 ignores `--pids-limit`),
/// and `--pids-limit` too where the pids controller is delegated; lowered to the launcher's own
/// hard limit, which a rootless container cannot exceed.
pub const PIDS_LIMIT: u64 = 4096;

/// `[containers]` keys of containers.conf that add nothing to what a sandbox sees or may do, or
/// that the plan sets itself on podman's command line (decision 0032). Any other key set to
/// something (not `[]`, `""`, `false`, `{}`) refuses the launch (64, A1/A2).
const CONF_KEYS_HARMLESS_OR_OVERRIDDEN: [&str; 22] = [
    "base_hosts_file",
    "cgroups",
    "default_sysctls",
    "default_ulimits",
    "dns_options",
    "dns_searches",
    "dns_servers",
    "http_proxy",
    "init",
    "init_path",
    "log_driver",
    "log_size_max",
    "log_tag",
    "netns",
    "no_hosts",
    "oom_score_adj",
    "pids_limit",
    "read_only",
    "shm_size",
    "tz",
    "umask",
    "userns",
];

/// Podman's own default capabilities: `default_capabilities` may name these (the distribution's
/// containers.conf lists them), never more.
const PODMAN_DEFAULT_CAPS: [&str; 11] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn conf_value_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null | serde_json::Value::Bool(false) => true,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A2 whatever the user's containers.conf says: refused (64) when its `[containers]` table
/// adds volumes, devices, env, mounts, capabilities, namespaces shared with the host or anything
/// else the plan does not set itself, naming the file and the key.
pub fn check_containers_conf(conf: &crate::facts::ContainersConf) -> Result {
    if let Some(e) = &conf.unreadable {
        return Err(SpecError::unenforceable("containers.conf", e.clone()));
    }
    for (key, (file, value)) in &conf.settings {
        let ok = match key.as_str() {
            "default_capabilities" => value.as_array().is_some_and(|a| {
                a.iter().all(|c| {
                    c.as_str().is_some_and(|c| {
                        let c = c.trim_start_matches("CAP_");
                        PODMAN_DEFAULT_CAPS
                            .iter()
                            .any(|d| d.eq_ignore_ascii_case(c))
                    })
                })
            }),
            // SELinux labelling may not be switched off.
            "label" => value.as_bool() != Some(false),
            k if CONF_KEYS_HARMLESS_OR_OVERRIDDEN.contains(&k) => true,
            _ => conf_value_empty(value),
        };
        if !ok {
            return Err(SpecError::unenforceable(
                "containers.conf",
                format!(
                    "{file}: [containers] {key} would change what every container sees or may do, which the sandbox cannot allow (A2): remove it there, or point CONTAINERS_CONF at a file without it"
                ),
            ));
        }
    }
    Ok(())
}

/// Where host path `p` appears in the sandbox through each writable mount that holds it: the
/// mount's index and the sandbox path. One folder can be mounted writable at two places (a
/// dev container's folder and an agent's scope, a scope inside another): each is a way in.
fn in_writable_mounts(spec: &SandboxSpec, facts: &HostFacts, p: &str) -> Vec<(usize, String)> {
    let source = |m: &handler_contracts::sandbox::Mount| {
        facts
            .canonical_sources
            .get(&m.source)
            .cloned()
            .unwrap_or_else(|| m.source.clone())
    };
    spec.mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.read_only)
        .map(|(i, m)| (i, m, source(m)))
        .filter(|(_, _, src)| is_within(p, src))
        .map(|(i, m, src)| {
            let rest = &p[src.trim_end_matches('/').len()..];
            let target = format!("{}{rest}", m.target.trim_end_matches('/'));
            (
                i,
                if target.is_empty() {
                    "/".into()
                } else {
                    target
                },
            )
        })
        .collect()
}

/// Whether sandbox path `target`, seen through writable mount `i`, is hidden by a mount lying
/// over it (the git guard's own git directory over `<root>/.git`, issue 14): the host's path is
/// then not in the sandbox at all.
fn covered(spec: &SandboxSpec, i: usize, target: &str) -> bool {
    let outer = spec.mounts[i].target.len();
    spec.mounts
        .iter()
        .enumerate()
        .any(|(j, m)| j != i && m.target.len() > outer && is_within(target, &m.target))
}

/// The read-only mounts that keep a writable scope's git repository out of the sandbox's reach
/// (issue 11, item 5): every path the host's git takes from it (git directory, common
/// directory, hooks, config files and their includes, a worktree's `.git` file) that lies in a
/// writable mount is mounted read-only over itself, so an agent cannot plant a hook or a
/// `core.fsmonitor` the person's next `git checkout` would run. Refused (64) when that cannot be
/// made to hold: a `.git` that is a symbolic link the sandbox can rewrite, or a path git would
/// read that does not exist yet where the sandbox could create it.
pub fn git_read_only(spec: &SandboxSpec, facts: &HostFacts) -> Result<Vec<String>> {
    let mut ro: Vec<(String, String)> = Vec::new();
    // What git would read that does not exist yet: (mount, what, host path, sandbox path).
    let mut missing: Vec<(usize, &str, &str, String)> = Vec::new();
    for repo in &facts.git {
        for (i, target) in in_writable_mounts(spec, facts, &repo.entry) {
            if covered(spec, i, &target) {
                continue;
            }
            match repo.kind {
                GitEntryKind::Symlink => {
                    return Err(SpecError::unenforceable(
                        format!("mounts[{i}].source"),
                        format!(
                            "{} is a symbolic link the sandbox could point elsewhere, and the host's git would follow it: replace it with the folder it names",
                            repo.entry
                        ),
                    ));
                }
                GitEntryKind::File => ro.push((repo.entry.clone(), target)),
                GitEntryKind::Dir => {}
            }
        }
        for gp in &repo.paths {
            // A writable mount inside what git reads (a scope in `.git/hooks`, in a hooks path).
            if gp.exists
                && let Some((i, m)) = spec.mounts.iter().enumerate().find(|(_, m)| {
                    let src = facts.canonical_sources.get(&m.source).unwrap_or(&m.source);
                    !m.read_only && is_within(src, &gp.path) && src != &gp.path
                })
            {
                return Err(SpecError::unenforceable(
                    format!("mounts[{i}].source"),
                    format!(
                        "{} lies inside {} ({}): the host's git takes it from there, so the sandbox may not write it",
                        m.source, gp.path, gp.what
                    ),
                ));
            }
            for (i, target) in in_writable_mounts(spec, facts, &gp.path) {
                if covered(spec, i, &target) {
                    continue;
                }
                if gp.exists {
                    ro.push((gp.path.clone(), target));
                } else {
                    missing.push((i, &gp.what, &gp.path, target));
                }
            }
        }
    }
    ro.sort();
    ro.dedup();
    // One read-only mount per place in the sandbox: the outermost of those lying in each other.
    let outermost: Vec<&(String, String)> = ro
        .iter()
        .filter(|(_, t)| !ro.iter().any(|(_, u)| u != t && is_within(t, u)))
        .collect();
    for (i, what, path, target) in missing {
        if !outermost.iter().any(|(_, u)| is_within(&target, u)) {
            return Err(SpecError::unenforceable(
                format!("mounts[{i}].source"),
                format!(
                    "{what} names {path}, which does not exist, in a folder the sandbox can write: the sandbox could create it and the host's git would use it"
                ),
            ));
        }
    }
    let mut out = Vec::new();
    for (p, t) in outermost {
        mount_path_ok("git", p)?;
        mount_path_ok("git", t)?;
        out.push(bind(p, t, true));
    }
    Ok(out)
}

/// The launch plan of a validated `spec` on a host with `facts`: the sandbox container's podman
/// arguments, environment and staging and, when the network is filtered or there are
/// injections, its egress proxy's ([`ProxyPlan`]). Refused (64) where this host cannot enforce
/// the spec; the sections follow contract A in order.
pub fn plan_launch(spec: &ValidSpec<'_>, facts: &HostFacts) -> Result<LaunchPlan> {
    plan_launch_on(Engine::Podman, spec, facts)
}

/// The launch plan of `spec` for Docker (`handler-sandbox-docker`): the same plan as Podman's
/// with each engine difference of [`engine`] applied, and the image volumes to fill first.
pub fn plan_launch_docker(
    spec: &ValidSpec<'_>,
    facts: &HostFacts,
    docker: &DockerFacts,
) -> Result<LaunchPlan> {
    plan_launch_on(Engine::Docker(docker), spec, facts)
}

/// The launch plan of `spec` on `engine` (see [`plan_launch`]).
pub fn plan_launch_on(
    engine: Engine<'_>,
    spec: &ValidSpec<'_>,
    facts: &HostFacts,
) -> Result<LaunchPlan> {
    plan_on(Kind::Launch, engine, spec, facts)
}

/// A launch's or a machine's plan (see [`plan_launch`], `crate::machine`).
pub(crate) fn plan_on(
    kind: Kind<'_>,
    engine: Engine<'_>,
    spec: &ValidSpec<'_>,
    facts: &HostFacts,
) -> Result<LaunchPlan> {
    let spec = spec.spec();
    check_host(engine, facts)?;
    // What the spec's OCI runtime cannot keep here (decision 0162).
    if let Some(e) = engine::runsc_refusal(engine, spec) {
        return Err(e);
    }
    let mut d = Draft::new(engine, spec, facts)?;
    let machine = matches!(kind, Kind::Machine(_));
    let (network, filter_volume) = plan_network_on(engine, spec, &d.inst, machine)?;
    d.args = base_args(kind, engine, spec, facts)?;
    d.image_volumes.extend(filter_volume);
    d.confinement()?;
    d.args.extend(network.podman_args.iter().cloned());
    // A machine's exec server (decision 0171), when the filter image has it.
    let server = match (kind, &facts.exec_server) {
        (Kind::Machine(_), Some(id)) => Some(crate::machine::exec_server::plan_server(
            engine,
            &d.inst,
            id,
            !network.argv_prefix.is_empty(),
        )),
        _ => None,
    };
    if let Some(s) = &server {
        d.args.extend(s.args.iter().cloned());
        d.stage.extend(s.stage.iter().cloned());
        d.image_volumes.extend(s.volume.clone());
    }
    d.resources()?;
    d.labels(kind);
    d.mounts()?;
    d.writable_paths()?;
    d.files()?;
    d.environment();
    d.display()?;
    d.literal.extend(network.env.clone());
    let podman_env = d.finish_args()?;
    let proxy = proxy::plan_proxy(engine, spec, facts, (&d.inst, machine));
    let mut args = d.args;
    args.push(spec.image.clone());
    if let Some(s) = server {
        args.extend(s.argv_prefix);
    }
    args.extend(network.argv_prefix.iter().cloned());
    args.extend(spec.argv.iter().cloned());
    Ok(LaunchPlan {
        args,
        podman_env,
        stage: d.stage,
        network,
        tty: spec.tty,
        proxy,
        image_volumes: d.image_volumes,
    })
}

/// What holds for every launch on this host: not root (A3), and a containers.conf that adds
/// nothing to a container (decision 0032).
fn check_host(engine: Engine<'_>, facts: &HostFacts) -> Result {
    if facts.uid == 0 {
        return Err(SpecError::unenforceable(
            "user.mode",
            "running as root: the sandbox runs rootless as the host user (A3); run the launcher as that user",
        ));
    }
    engine::check_engine(engine, facts)
}

/// The options of the spec's resources (A1: refused where rootless podman would ignore them).
pub fn resource_args(spec: &SandboxSpec, facts: &HostFacts) -> Result<Vec<String>> {
    let mut a = Vec::new();
    let Some(r) = &spec.resources else {
        return Ok(a);
    };
    if let Some(m) = &r.memory {
        if !facts.cgroup_memory {
            return Err(SpecError::unenforceable(
                "resources.memory",
                "rootless podman cannot limit memory here (needs cgroups v2 with the memory controller delegated)",
            ));
        }
        push(&mut a, &["--memory", m]);
    }
    if let Some(c) = &r.cpus {
        if !facts.cgroup_cpu {
            return Err(SpecError::unenforceable(
                "resources.cpus",
                "rootless podman cannot limit cpus here (needs cgroups v2 with the cpu controller delegated)",
            ));
        }
        push(&mut a, &["--cpus", c]);
    }
    Ok(a)
}

/// The verb and the options every sandbox has: its name, keep-id as the host user, the
/// workdir, the process limit, no proxy variables from podman, a read-only root, no entrypoint.
fn base_args(
    kind: Kind<'_>,
    engine: Engine<'_>,
    spec: &SandboxSpec,
    facts: &HostFacts,
) -> Result<Vec<String>> {
    let pids = facts.nproc_hard.map_or(PIDS_LIMIT, |h| h.min(PIDS_LIMIT));
    let mut args: Vec<String> = Vec::new();
    if let Kind::Machine(_) = kind {
        // Kept after its process ends (started again), no stdin: execs bring their own.
        push(&mut args, &["create", "--log-driver=none"]);
    } else if spec.tty {
        push(&mut args, &["create", "--tty", "--interactive"]);
    } else {
        push(
            &mut args,
            &["run", "--rm", "--interactive", "--log-driver=none"],
        );
    }
    push(&mut args, &["--name", &spec.name, "--pull=never", "--init"]);
    // gVisor on rootless Podman (decision 0162): keep-id with a read-only root does not start
    // under runsc, so the sandbox runs as container root, which rootless Podman maps to the
    // host user — the mapping rootless Docker gives every sandbox (capabilities dropped,
    // no-new-privileges, as always).
    let runsc = matches!(engine, Engine::Podman)
        && spec.oci_runtime.as_deref().is_some_and(engine::is_runsc);
    if runsc {
        push(&mut args, &["--user", "0:0"]);
    } else {
        args.extend(engine::user_args(engine, facts)?);
    }
    push(
        &mut args,
        &[
            "--workdir",
            &spec.workdir,
            "--ulimit",
            &format!("nproc={pids}:{pids}"),
        ],
    );
    args.extend(engine::proxy_variables_off(engine).map(String::from));
    push(&mut args, &["--read-only"]);
    // gVisor on rootless Podman leaves cgroups alone: the nproc rlimit above still holds.
    if facts.cgroup_pids && !runsc {
        push(&mut args, &["--pids-limit", &pids.to_string()]);
    }
    args.extend(engine::oci_runtime_args(engine, spec));
    push(&mut args, &engine::no_entrypoint(engine));
    Ok(args)
}

fn push(a: &mut Vec<String>, xs: &[&str]) {
    a.extend(xs.iter().map(std::string::ToString::to_string));
}

/// The plan being built, section by section.
struct Draft<'a> {
    spec: &'a SandboxSpec,
    facts: &'a HostFacts,
    engine: Engine<'a>,
    /// The instance folder, without a trailing `/`.
    inst: String,
    args: Vec<String>,
    stage: Vec<Stage>,
    /// Mount options and their values (`--mount …`, Docker's `--tmpfs …`), in order.
    mounts: Vec<[String; 2]>,
    /// The spec's labels and the runtime's.
    labels: BTreeMap<String, String>,
    /// `--env NAME=value` of the runtime's own variables (never secrets).
    literal: BTreeMap<String, String>,
    /// Names of the image's variables kept out (`--unsetenv`).
    unset: Vec<&'static str>,
    /// Docker: the volumes to fill from images first.
    image_volumes: Vec<ImageVolume>,
}

impl<'a> Draft<'a> {
    /// An empty plan of `spec` in the instance folder `facts` name (a mount path, no trailing
    /// `/`).
    fn new(engine: Engine<'a>, spec: &'a SandboxSpec, facts: &'a HostFacts) -> Result<Self> {
        let inst = facts.instance_dir.trim_end_matches('/').to_string();
        mount_path_ok("instance folder", &inst)?;
        Ok(Draft {
            spec,
            facts,
            engine,
            args: Vec::new(),
            inst,
            stage: Vec::new(),
            mounts: Vec::new(),
            labels: BTreeMap::new(),
            literal: BTreeMap::new(),
            unset: Vec::new(),
            image_volumes: Vec::new(),
        })
    }

    /// A `--mount` of this value.
    fn mount(&mut self, value: String) {
        self.mounts.push(["--mount".into(), value]);
    }

    /// Confinement (A3, A.5): strict drops every capability; nested gets fuse, tun and the
    /// subordinate ids of the sandbox's user namespace; privileged is podman's.
    fn confinement(&mut self) -> Result {
        match self.spec.confinement {
            Confinement::Strict => push(
                &mut self.args,
                &["--cap-drop", "all", "--security-opt", "no-new-privileges"],
            ),
            Confinement::Nested => {
                if let Some(e) = engine::nested_refusal(self.engine) {
                    return Err(e);
                }
                self.nested()?;
            }
            Confinement::Privileged => push(&mut self.args, &["--privileged"]),
        }
        Ok(())
    }

    fn nested(&mut self) -> Result {
        let facts = self.facts;
        if !facts.has_fuse || !facts.has_tun {
            let missing: Vec<&str> = [
                (!facts.has_fuse, "/dev/fuse"),
                (!facts.has_tun, "/dev/net/tun"),
            ]
            .into_iter()
            .filter_map(|(m, d)| m.then_some(d))
            .collect();
            return Err(SpecError::unenforceable(
                "confinement",
                format!(
                    "nested needs /dev/fuse and /dev/net/tun; this host lacks {}",
                    missing.join(" and ")
                ),
            ));
        }
        let (Some(uc), Some(gc)) = (facts.subuid_count, facts.subgid_count) else {
            return Err(SpecError::unenforceable(
                "confinement",
                "nested needs subordinate uid and gid ranges for the host user (/etc/subuid, /etc/subgid)",
            ));
        };
        push(
            &mut self.args,
            &["--device", "/dev/fuse", "--device", "/dev/net/tun"],
        );
        push(
            &mut self.args,
            &[
                "--security-opt",
                "unmask=/proc/*",
                "--security-opt",
                "label=disable",
            ],
        );
        let inst = &self.inst;
        self.stage.push(Stage::File {
            path: format!("{inst}/subuid"),
            content: nested_subids(facts.uid, uc),
            mode: 0o644,
        });
        self.stage.push(Stage::File {
            path: format!("{inst}/subgid"),
            content: nested_subids(facts.gid, gc),
            mode: 0o644,
        });
        let (uid_file, gid_file) = (format!("{inst}/subuid"), format!("{inst}/subgid"));
        self.mount(bind(&uid_file, "/etc/subuid", true));
        self.mount(bind(&gid_file, "/etc/subgid", true));
        Ok(())
    }

    /// Resources (A1: refused where rootless podman would ignore them).
    fn resources(&mut self) -> Result {
        let r = resource_args(self.spec, self.facts)?;
        self.args.extend(r);
        Ok(())
    }

    /// Labels: the spec's, then the runtime's (instance, launcher, instance folder).
    fn labels(&mut self, kind: Kind<'_>) {
        let (spec, l) = (self.spec, &self.facts.launcher);
        self.labels = spec.labels.clone();
        self.labels
            .insert(labels::SANDBOX.into(), spec.name.clone());
        if let Kind::Machine(id) = kind {
            // No launcher's labels: no sweep or watchdog takes a machine for a dead launch's.
            self.labels.insert(labels::MACHINE.into(), id.to_string());
            self.labels
                .insert(labels::INSTANCE_DIR.into(), self.inst.clone());
            return;
        }
        self.labels
            .insert(labels::LAUNCHER_PID.into(), l.pid.to_string());
        self.labels
            .insert(labels::LAUNCHER_START.into(), l.start.to_string());
        self.labels
            .insert(labels::LAUNCHER_BOOT.into(), l.boot.clone());
        self.labels
            .insert(labels::INSTANCE_DIR.into(), self.inst.clone());
    }

    /// Mounts exactly as listed (A2), the host's git kept read-only (issue 11, item 5), image
    /// mounts pinned to the id resolved now (A6).
    fn mounts(&mut self) -> Result {
        let (spec, facts) = (self.spec, self.facts);
        self.binds(0)?;
        if !spec.git_writable {
            for g in git_read_only(spec, facts)? {
                self.mount(g);
            }
        }
        for m in image_mounts(self.engine, spec, facts)? {
            self.mount(m.mount);
            self.image_volumes.extend(m.volume);
            self.labels
                .insert(format!("{}{}", labels::IMAGE_MOUNT_PREFIX, m.id), m.image);
        }
        Ok(())
    }

    /// The spec's mounts from number `from` on, exactly as listed (A2): each source exists.
    fn binds(&mut self, from: usize) -> Result {
        let (spec, facts) = (self.spec, self.facts);
        for (i, m) in spec.mounts.iter().enumerate().skip(from) {
            mount_path_ok(&format!("mounts[{i}].source"), &m.source)?;
            mount_path_ok(&format!("mounts[{i}].target"), &m.target)?;
            if facts.path_kind(&m.source) == PathKind::Missing {
                return Err(SpecError::invalid(
                    format!("mounts[{i}].source"),
                    format!("{:?} does not exist", m.source),
                ));
            }
            self.mount(bind(&m.source, &m.target, m.read_only));
        }
        Ok(())
    }

    /// Writable paths: a tmpfs owned by the user, or, when something is placed inside one (seed
    /// files, mounts, files), a private host folder prepared with those places owned by the user.
    fn writable_paths(&mut self) -> Result {
        let (spec, facts) = (self.spec, self.facts);
        let inner_targets: Vec<(String, bool)> = spec
            .mounts
            .iter()
            .map(|m| {
                (
                    m.target.clone(),
                    facts.path_kind(&m.source) != PathKind::Directory,
                )
            })
            .chain(spec.image_mounts.iter().map(|m| (m.target.clone(), false)))
            .chain(
                spec.files
                    .iter()
                    .filter(|f| !f.seed)
                    .map(|f| (f.target.clone(), true)),
            )
            .collect();
        for (wi, w) in writable_dirs(spec).iter().enumerate() {
            self.writable_path(wi, w, &inner_targets)?;
        }
        Ok(())
    }

    /// Writable path number `wi` (`user.home` after the listed ones) at `w`; `inner_targets`:
    /// every place something else is put at, and whether it is a file.
    fn writable_path(&mut self, wi: usize, w: &str, inner_targets: &[(String, bool)]) -> Result {
        let spec = self.spec;
        let field = if wi < spec.writable_paths.len() {
            format!("writablePaths[{wi}]")
        } else {
            "user.home".into()
        };
        mount_path_ok(&field, w)?;
        let dir_mode = if w == spec.user.home { 0o700 } else { 0o755 };
        let has_seeds = spec.files.iter().any(|f| f.seed && is_within(&f.target, w));
        let inner: Vec<&(String, bool)> = inner_targets
            .iter()
            .filter(|(t, _)| is_within(t, w) && t != w)
            .collect();
        if !has_seeds && inner.is_empty() {
            self.mounts
                .push(engine::tmpfs(self.engine, self.facts, w, dir_mode));
            return Ok(());
        }
        let host = format!("{}/w{wi}", self.inst);
        self.stage.push(Stage::Dir {
            path: host.clone(),
            mode: dir_mode,
        });
        for (t, is_file) in inner {
            let rel = relative(t, w);
            let (parent, _) = rel.rsplit_once('/').unwrap_or(("", &rel));
            if !parent.is_empty() {
                self.stage.push(Stage::Dir {
                    path: format!("{host}/{parent}"),
                    mode: 0o755,
                });
            }
            self.stage.push(if *is_file {
                Stage::File {
                    path: format!("{host}/{rel}"),
                    content: String::new(),
                    mode: 0o644,
                }
            } else {
                Stage::Dir {
                    path: format!("{host}/{rel}"),
                    mode: 0o755,
                }
            });
        }
        for (i, f) in spec.files.iter().enumerate() {
            if !(f.seed && is_within(&f.target, w)) {
                continue;
            }
            let mode = file_mode(i, f.mode.as_deref())?;
            let rel = relative(&f.target, w);
            if let Some((parent, _)) = rel.rsplit_once('/') {
                self.stage.push(Stage::Dir {
                    path: format!("{host}/{parent}"),
                    mode: 0o755,
                });
            }
            self.stage.push(Stage::File {
                path: format!("{host}/{rel}"),
                content: f.content.clone(),
                mode,
            });
        }
        self.mount(bind(&host, w, false));
        Ok(())
    }

    /// Files: read-only, from the instance folder.
    fn files(&mut self) -> Result {
        let spec = self.spec;
        if spec.files.iter().any(|f| !f.seed) {
            self.stage.push(Stage::Dir {
                path: format!("{}/files", self.inst),
                mode: 0o755,
            });
        }
        for (i, f) in spec.files.iter().enumerate().filter(|(_, f)| !f.seed) {
            mount_path_ok(&format!("files[{i}].target"), &f.target)?;
            let mode = file_mode(i, f.mode.as_deref())?;
            let host = format!("{}/files/{i}", self.inst);
            self.stage.push(Stage::File {
                path: host.clone(),
                content: f.content.clone(),
                mode,
            });
            self.mount(bind(&host, &f.target, true));
        }
        Ok(())
    }

    /// The runtime's variables: HOME (A3), PATH with `pathPrepend` and `pathAppend` (A6).
    fn environment(&mut self) {
        let spec = self.spec;
        self.literal.insert("HOME".into(), spec.user.home.clone());
        if !spec.path_append.is_empty()
            || !spec.path_prepend.is_empty()
            || !spec.image_mounts.is_empty()
        {
            let image = self
                .facts
                .image_path
                .clone()
                .unwrap_or_else(|| DEFAULT_PATH.to_string());
            let mut path = spec.path_prepend.join(":");
            if !path.is_empty() {
                path.push(':');
            }
            path.push_str(&image);
            for p in &spec.path_append {
                path.push(':');
                path.push_str(p);
            }
            self.literal.insert("PATH".into(), path);
        }
    }

    /// Display (A.6, A7): only that socket, under a runtime folder of the user's own; without
    /// one, no display variable reaches the sandbox.
    fn display(&mut self) -> Result {
        let Some(d) = &self.spec.display else {
            self.unset.extend(["DISPLAY", "WAYLAND_DISPLAY"]);
            if !self.spec.env.contains_key("XDG_RUNTIME_DIR") {
                self.unset.push("XDG_RUNTIME_DIR");
            }
            return Ok(());
        };
        mount_path_ok("display.socket", &d.socket)?;
        match self.facts.path_kind(&d.socket) {
            PathKind::Socket => {}
            PathKind::Missing => {
                return Err(SpecError::unenforceable(
                    "display.socket",
                    format!("{:?} does not exist", d.socket),
                ));
            }
            _ => {
                return Err(SpecError::unenforceable(
                    "display.socket",
                    format!("{:?} is not a socket", d.socket),
                ));
            }
        }
        let run = format!("/run/user/{}", self.facts.uid);
        self.mounts
            .push(engine::tmpfs(self.engine, self.facts, &run, 0o700));
        self.mount(bind(
            &d.socket,
            &format!("{run}/{WAYLAND_SOCKET_NAME}"),
            false,
        ));
        self.literal.insert("XDG_RUNTIME_DIR".into(), run);
        self.literal
            .insert("WAYLAND_DISPLAY".into(), WAYLAND_SOCKET_NAME.into());
        self.unset.push("DISPLAY");
        Ok(())
    }

    /// Labels, mounts, unset and literal variables into the arguments, then the spec's env:
    /// by name from podman's environment (returned), or through the instance's env file for
    /// the names podman reads itself.
    fn finish_args(&mut self) -> Result<BTreeMap<String, String>> {
        for (k, v) in &self.labels {
            self.args.push("--label".into());
            self.args.push(format!("{k}={v}"));
        }
        for m in std::mem::take(&mut self.mounts) {
            self.args.extend(m);
        }
        for u in &self.unset {
            self.args.extend(engine::unset_env(self.engine, u));
        }
        for (k, v) in &self.literal {
            self.args.push("--env".into());
            self.args.push(format!("{k}={v}"));
        }
        let mut podman_env = BTreeMap::new();
        let mut env_file = String::new();
        for (k, v) in &self.spec.env {
            if engine::engine_reads(self.engine, k) {
                if v.contains('\n') || v.contains('\r') {
                    return Err(SpecError::unenforceable(
                        format!("env.{k}"),
                        "podman reads this name itself, so its value goes through an env file, which cannot hold a newline",
                    ));
                }
                env_file.push_str(&format!("{k}={v}\n"));
            } else {
                self.args.push("--env".into());
                self.args.push(k.clone());
                podman_env.insert(k.clone(), v.clone());
            }
        }
        if !env_file.is_empty() {
            let path = format!("{}/env", self.inst);
            self.stage.push(Stage::File {
                path: path.clone(),
                content: env_file,
                mode: 0o600,
            });
            self.args.push("--env-file".into());
            self.args.push(path);
        }
        Ok(podman_env)
    }
}

/// The mode of `files[i]` (0644 when the spec gives none).
fn file_mode(i: usize, mode: Option<&str>) -> Result<u32> {
    Ok(mode
        .map(|m| parse_mode(&format!("files[{i}].mode"), m))
        .transpose()?
        .unwrap_or(0o644))
}

/// What a dev container made for agents is given of its composed spec beside its folder and
/// its parts (decision 0169): the agents' mounts after the folder's (`mounts[0]`, which the
/// Dev Container CLI mounts as its `workspaceMount`) exactly as listed, their writable paths
/// (their homes: a tmpfs of the user's, or a staged folder when their state lies inside) and
/// their staged files read-only — as a launch of the same spec has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMounts {
    /// The engine's mount options (`--mount …`, Docker's `--tmpfs …`).
    pub args: Vec<String>,
    /// What to create under the instance folder before the CLI runs.
    pub stage: Vec<Stage>,
}

/// [`AgentMounts`] of `spec` on `engine` (its instance folder is `facts.instance_dir`). The git
/// guard and the image mounts are the caller's, planned over the whole spec.
pub fn agent_mounts(
    engine: Engine<'_>,
    spec: &SandboxSpec,
    facts: &HostFacts,
) -> Result<AgentMounts> {
    let mut d = Draft::new(engine, spec, facts)?;
    d.binds(1)?;
    d.writable_paths()?;
    d.files()?;
    Ok(AgentMounts {
        args: d.mounts.into_iter().flatten().collect(),
        stage: d.stage,
    })
}

/// One of a spec's image mounts as the engine takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedImageMount {
    /// The `--mount` value.
    pub mount: String,
    /// The volume to fill from the image first (Docker without image mounts).
    pub volume: Option<ImageVolume>,
    /// The image's id it is pinned to.
    pub id: String,
    /// The image as the spec names it.
    pub image: String,
}

/// `spec`'s image mounts (A6) on `engine`, each pinned to the id `facts` resolved: a target
/// that is not a mount path, an image not resolved, or a volume the engine's daemon would own
/// refused naming `imageMounts[i]`. Shared by launches, machines and dev containers (whose
/// parts are image mounts, decision 0164).
pub fn image_mounts(
    engine: Engine<'_>,
    spec: &SandboxSpec,
    facts: &HostFacts,
) -> Result<Vec<PlannedImageMount>> {
    let mut out = Vec::new();
    for (i, im) in spec.image_mounts.iter().enumerate() {
        mount_path_ok(&format!("imageMounts[{i}].target"), &im.target)?;
        if let Some(e) = engine::image_volume_refusal(engine, &format!("imageMounts[{i}].image")) {
            return Err(e);
        }
        let Some(id) = facts.image_ids.get(&im.image) else {
            return Err(SpecError::unenforceable(
                format!("imageMounts[{i}].image"),
                format!("{:?} was not resolved to an image id", im.image),
            ));
        };
        let (mount, volume) = engine::image_mount(engine, &im.image, id, &im.target);
        out.push(PlannedImageMount {
            mount,
            volume,
            id: id.clone(),
            image: im.image.clone(),
        });
    }
    Ok(out)
}
