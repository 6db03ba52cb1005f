//! `machine …` (issue 29, decision 0142): machines are containers made from a MachineSpec on
//! fd 3 with the launch's hardening, created and kept (`handler_sandbox::machine`'s plan), their
//! staged files in a persistent folder of the user's (`<data>/handler-sandbox/machines/<name>`,
//! 0700); every other verb first checks that the container is labelled as that machine, so
//! nothing but Handler's machines is ever touched. `exec` runs an ExecSpec's process with stdio
//! inherited, values by name, SIGTERM passed on, its exit code the verb's.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::PathBuf;
use std::process::Stdio;

use handler_contracts::machine::{ExecSpec, MACHINE_LABEL, MachineStats, container_name, valid_id};
use handler_contracts::parse::from_json;
use handler_contracts::sandbox::exit;
use handler_sandbox::egress::control::{ControlAnswer, ControlRequest};
use handler_sandbox::egress::topology::{
    CONTROL_SOCKET, MACHINE_PROXY_LABEL, PROXY_SOCKET, READY_MARKER,
};
use handler_sandbox::machine::{
    ENV_FILE_SLOT, ProcSample, STATS_FORMAT, parse_net_dev, parse_proc_io, parse_proc_stat,
    parse_stats, plan_create, plan_exec, stats_from_proc,
};
use handler_sandbox::plan::Engine;
use handler_sandbox::validate_spec;

use super::{engine, host, log, podman};
use crate::runtime::signals::{STOPPING, Signals};

/// Exit code: no machine of that id (or a container that is not one).
pub const NO_MACHINE: i32 = 3;

/// The folder of machines' staged files: `$XDG_DATA_HOME/handler-sandbox/machines` (else
/// `~/.local/share/…`; `machines-docker` for Docker's: a machine's name is its engine's, so one
/// user's Podman and Docker machines of one name never share a folder), made 0700.
pub(super) fn machines_dir() -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .ok_or("neither XDG_DATA_HOME nor HOME is set")?;
    let dir = base
        .join("handler-sandbox")
        .join(match super::engine::current() {
            super::engine::Kind::Podman => "machines",
            super::engine::Kind::Docker => "machines-docker",
        });
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

pub(super) fn read_fd3(what: &str) -> Result<String, (i32, String)> {
    let mut text = String::new();
    super::launch::take_spec_fd()
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| {
            (
                exit::INVALID_SPEC,
                format!("cannot read the {what} on fd 3: {e}"),
            )
        })?;
    Ok(text)
}

/// `machine create`: its code (0: created and started; the container id on stdout).
pub fn create() -> i32 {
    match try_create() {
        Ok(id) => {
            println!("{id}");
            0
        }
        Err((code, msg)) => {
            log(&format!("machine create: {msg}"));
            code
        }
    }
}

fn try_create() -> Result<String, (i32, String)> {
    let spec = from_json("MachineSpec", &read_fd3("MachineSpec")?)
        .map_err(|e| (exit::INVALID_SPEC, format!("invalid spec: {e}")))?;
    let valid = validate_spec(&spec).map_err(|e| (e.exit_code(), e.to_string()))?;
    if nix::unistd::geteuid().is_root() {
        return Err((
            exit::UNENFORCEABLE,
            "refusing to run as root: machines run rootless as the host user (A3)".into(),
        ));
    }
    let setup = |e: String| (exit::SETUP_FAILED, format!("setup failed: {e}"));
    let dir = machines_dir().map_err(setup)?.join(&spec.name);
    let facts = host::gather(
        &spec,
        dir.to_string_lossy().into_owned(),
        host::launcher_self(),
    )
    .map_err(|e| setup(e.to_string()))?;
    let mut facts = facts;
    facts.exec_server = host::exec_server_image();
    let refused = |e: handler_sandbox::SpecError| (e.exit_code(), e.to_string());
    let plan = match engine::current() {
        engine::Kind::Podman => plan_create(Engine::Podman, &valid, &facts).map_err(refused)?,
        engine::Kind::Docker => {
            let d = super::docker::facts(&spec, &facts.instance_dir)
                .map_err(|e| setup(e.to_string()))?;
            plan_create(Engine::Docker(&d), &valid, &facts).map_err(refused)?
        }
    };
    if container_exists(&spec.name) {
        return Err((
            exit::SETUP_FAILED,
            format!("a container named {} exists already", spec.name),
        ));
    }
    // What a machine whose container is gone left (removed outside Handler): made afresh.
    if fs::symlink_metadata(&dir).is_ok() {
        fs::remove_dir_all(&dir).map_err(|e| setup(format!("{}: {e}", dir.display())))?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| setup(format!("{}: {e}", dir.display())))?;
    let mut plan = plan;
    if let Err(e) = fill_runtime_slot(&mut plan.args, &dir, spec.oci_runtime.as_deref()) {
        let _ = fs::remove_dir_all(&dir);
        return Err(e);
    }
    let made = super::launch::stage(&plan.stage)
        .map_err(|e| setup(format!("staging {}: {e}", dir.display())))
        .and_then(|()| match &plan.proxy {
            Some(p) => run_proxy(&spec.name, &dir, p),
            None => Ok(()),
        })
        .and_then(|()| {
            super::docker::fill_image_volumes(&plan.image_volumes).map_err(|e| setup(e.to_string()))
        })
        .and_then(|()| {
            let out = podman::command(&plan.args)
                .envs(&plan.podman_env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| setup(e.to_string()))?;
            if !out.status.success() {
                return Err(setup(format!(
                    "{} create: {}",
                    engine::current().name(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
            podman::run(&["start", &spec.name]).map_err(|e| setup(e.to_string()))?;
            // Its exec server, when it has one, up before the first exec (decision 0171).
            super::machine_server::wait_ready(&dir, super::machine_server::READY_WAIT);
            Ok(id)
        });
    if made.is_err() {
        let _ = podman::output(&remove_args(&spec.name));
        let _ = podman::output(&remove_args(&proxy_name(&spec.name)));
        let _ = fs::remove_dir_all(&dir);
    }
    made
}

/// Writes gVisor's wrapper (decision 0162) in the machine's staged folder, which lives as long
/// as the machine (every later `start` and `exec` goes through it too), and puts its path where
/// the plan holds its slot; `runsc` is found on PATH now (a clear error when it is missing).
fn fill_runtime_slot(
    args: &mut [String],
    dir: &std::path::Path,
    runtime: Option<&str>,
) -> Result<(), (i32, String)> {
    use handler_sandbox::plan::engine::{RUNTIME_SLOT, runsc_wrapper};
    let Some(slot) = args.iter_mut().find(|a| *a == RUNTIME_SLOT) else {
        return Ok(());
    };
    let named = runtime.unwrap_or("runsc");
    let found = if named.starts_with('/') {
        Some(PathBuf::from(named))
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(named))
                .find(|f| f.is_file())
        })
    };
    let Some(found) = found.filter(|f| f.is_file()) else {
        return Err((
            exit::UNENFORCEABLE,
            format!("ociRuntime: {named} is not installed here (Debian: apt install runsc)"),
        ));
    };
    let path = dir.join("oci-runtime");
    let _ = fs::remove_file(&path);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                runsc_wrapper(&found.display().to_string()).as_bytes(),
            )
        })
        .map_err(|e| (exit::SETUP_FAILED, format!("{}: {e}", path.display())))?;
    *slot = path.display().to_string();
    Ok(())
}

/// The container of machine `id`, once it is known to be that machine (its label).
fn machine(id: &str) -> Result<String, (i32, String)> {
    facts(id).map(|f| f.name)
}

/// What one inspect tells of machine `id`'s container: its name, whether it runs, and whether
/// it may have a proxy of its own (its network label says filtered, or it has none: made
/// before the label).
struct Facts {
    name: String,
    running: bool,
    proxied: bool,
}

/// Machine `id`'s container, checked to be that machine by its label (or, a dev container made
/// by hand and adopted, by the id its staged folder records: decision 0161), in one inspect
/// with its state and network (issue 29's warm start: one engine call before the exec).
fn facts(id: &str) -> Result<Facts, (i32, String)> {
    if !valid_id(id) {
        return Err((exit::INVALID_SPEC, format!("{id:?} is not a machine id")));
    }
    let name = container_name(id);
    let format = format!(
        "{{{{index .Config.Labels \"{MACHINE_LABEL}\"}}}}|{{{{.Id}}}}|{{{{.State.Running}}}}|{{{{index .Config.Labels \"{}\"}}}}",
        handler_sandbox::machine::adopt::NETWORK_LABEL
    );
    let line = podman::run(&["inspect", "--type", "container", "--format", &format, &name])
        .map_err(|_| (NO_MACHINE, format!("no machine {id:?}")))?;
    let f: Vec<&str> = line.trim().split('|').collect();
    let labelled = f.first() == Some(&id);
    // A dev container someone made by hand, adopted (decision 0161): named so by Handler, and
    // that very container is the one its staged folder records.
    let adopted = || adopted(&name).is_some_and(|c| f.get(1) == Some(&c.as_str()));
    if !labelled && !adopted() {
        return Err((NO_MACHINE, format!("no machine {id:?}")));
    }
    Ok(Facts {
        running: f.get(2) == Some(&"true"),
        proxied: matches!(f.get(3), Some(&"filtered" | &"<no value>" | &"")),
        name,
    })
}

/// The container id machine container `name` adopted, as its staged folder records it.
fn adopted(name: &str) -> Option<String> {
    let f = machines_dir()
        .ok()?
        .join(name)
        .join(handler_sandbox::machine::devcontainer::ADOPTED_FILE);
    fs::read_to_string(f)
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
}

/// The proxy container's name of machine container `name` (decision 0153).
fn proxy_name(name: &str) -> String {
    format!("{name}-egress")
}

/// The proxy container of machine `id`, when it has one (labelled as that machine's proxy).
fn proxy_of(id: &str) -> Option<String> {
    let name = proxy_name(&container_name(id));
    let format = format!("{{{{index .Config.Labels \"{MACHINE_PROXY_LABEL}\"}}}}");
    match podman::run(&["inspect", "--type", "container", "--format", &format, &name]) {
        Ok(l) if l.trim() == id => Some(name),
        _ => None,
    }
}

/// How long a machine's proxy may take to make its socket.
const PROXY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Stages and runs a new machine's proxy (`run --detach`), then waits for it.
pub(super) fn run_proxy(
    machine: &str,
    dir: &std::path::Path,
    p: &handler_sandbox::plan::ProxyPlan,
) -> Result<(), (i32, String)> {
    let setup = |e: String| (exit::SETUP_FAILED, format!("setup failed: {e}"));
    super::launch::stage(&p.stage).map_err(|e| setup(format!("staging its proxy: {e}")))?;
    let out = podman::command(&p.args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| setup(e.to_string()))?;
    if !out.status.success() {
        let missing = !podman::output(&["image", "exists", &p.image])
            .is_ok_and(|o| o.status.success())
            && !podman::output(&["image", "inspect", &p.image]).is_ok_and(|o| o.status.success());
        return Err(setup(if missing {
            format!(
                "the network filter is not built yet ({}): run {} image build-proxy",
                p.image,
                engine::current().executable()
            )
        } else {
            format!(
                "its egress proxy did not start: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        }));
    }
    wait_proxy(machine, dir)
}

/// Waits for a machine's proxy to make its socket, then marks its settings ready
/// (set-egress/set-allow wait for the mark).
fn wait_proxy(machine: &str, dir: &std::path::Path) -> Result<(), (i32, String)> {
    let sock = dir.join("egress-sock").join(PROXY_SOCKET);
    let deadline = std::time::Instant::now() + PROXY_WAIT;
    while !sock.exists() {
        if std::time::Instant::now() >= deadline {
            let tail =
                podman::run(&["logs", "--tail", "5", &proxy_name(machine)]).unwrap_or_default();
            return Err((
                exit::SETUP_FAILED,
                format!(
                    "its egress proxy made no socket within {} s (the machine is not started without it): {}",
                    PROXY_WAIT.as_secs(),
                    tail.trim()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    fs::write(dir.join("egress").join(READY_MARKER), "")
        .map_err(|e| (exit::SETUP_FAILED, format!("egress settings folder: {e}")))
}

/// Starts machine `id`'s proxy, if it has one, and waits for it: its old socket removed first,
/// so the wait is for the new one.
fn start_proxy(id: &str, machine: &str) -> Result<(), (i32, String)> {
    let Some(proxy) = proxy_of(id) else {
        return Ok(());
    };
    let dir = machines_dir().map_err(|e| (1, e))?.join(machine);
    let _ = fs::remove_file(dir.join("egress-sock").join(PROXY_SOCKET));
    let _ = fs::remove_file(dir.join("egress").join(READY_MARKER));
    engine_call(&["start", &proxy])?;
    wait_proxy(machine, &dir)
}

fn verb(what: &str, id: &str, f: impl FnOnce(&str) -> Result<(), (i32, String)>) -> i32 {
    match machine(id).and_then(|name| f(&name)) {
        Ok(()) => 0,
        Err((code, msg)) => {
            log(&format!("machine {what} {id}: {msg}"));
            code
        }
    }
}

fn engine_call(args: &[&str]) -> Result<String, (i32, String)> {
    podman::run(args).map_err(|e| (1, e.to_string()))
}

/// `machine start|stop|restart ID`.
pub fn state(what: &str, id: &str) -> i32 {
    verb(what, id, |name| {
        // The proxy first and the machine after it, stopped the other way round.
        let stop = || -> Result<(), (i32, String)> {
            engine_call(&["stop", "--time", "10", name])?;
            if let Some(p) = proxy_of(id) {
                engine_call(&["stop", "--time", "10", &p])?;
            }
            Ok(())
        };
        let start = || -> Result<(), (i32, String)> {
            start_proxy(id, name)?;
            engine_call(&["start", name])?;
            // Its exec server, when it has one, up before the next exec (decision 0171).
            if let Ok(d) = machines_dir() {
                super::machine_server::wait_ready(&d.join(name), super::machine_server::READY_WAIT);
            }
            Ok(())
        };
        match what {
            "stop" => stop(),
            "start" => start(),
            _ => stop().and_then(|()| start()),
        }
    })
}

/// The engine's words to remove container `name` at once (an engine difference: Docker's `rm`
/// has no `--time`).
pub(super) fn remove_args(name: &str) -> Vec<&str> {
    match engine::current() {
        engine::Kind::Podman => vec!["rm", "-f", "--time", "0", name],
        engine::Kind::Docker => vec!["rm", "-f", name],
    }
}

/// `machine rm ID`: the container and its staged files.
pub fn rm(id: &str) -> i32 {
    if valid_id(id) && !container_exists(&container_name(id)) {
        // Its container is gone (removed outside Handler): what it left here goes too.
        if let Some(p) = proxy_of(id) {
            let _ = podman::output(&remove_args(&p));
        }
        if let Ok(d) = machines_dir() {
            let _ = fs::remove_dir_all(d.join(container_name(id)));
        }
    }
    verb("rm", id, |name| {
        engine_call(&remove_args(name))?;
        if let Some(p) = proxy_of(id) {
            engine_call(&remove_args(&p))?;
        }
        if let Ok(d) = machines_dir() {
            let _ = fs::remove_dir_all(d.join(name));
        }
        Ok(())
    })
}

/// Whether the engine has a container named `name` (anyone's).
pub(super) fn container_exists(name: &str) -> bool {
    podman::output(&[
        "inspect",
        "--type",
        "container",
        "--format",
        "{{.Id}}",
        name,
    ])
    .is_ok_and(|o| o.status.success())
}

/// `machine ls`: the engine's records (`inspect`) of every container labelled as a machine, a
/// JSON array (`[]` when none). The proxies of filtered machines carry another label.
pub fn ls() -> i32 {
    let listed = podman::run(&[
        "ps",
        "-a",
        "--filter",
        &format!("label={MACHINE_LABEL}"),
        "--format",
        "{{.ID}}",
    ]);
    let ids: Vec<String> = match listed {
        Ok(out) => out.split_whitespace().map(String::from).collect(),
        Err(e) => {
            eprintln!("machine ls: {e}");
            return 1;
        }
    };
    if ids.is_empty() {
        println!("[]");
        return 0;
    }
    let mut args = vec!["inspect", "--type", "container"];
    args.extend(ids.iter().map(String::as_str));
    match podman::json(&args) {
        Ok(v) => {
            println!("{v}");
            0
        }
        // One was removed between the list and the inspect (another's `rm`): the engine
        // refuses the whole inspect, so each is read alone and a gone one left out.
        Err(e) => {
            let each: Vec<serde_json::Value> = ids
                .iter()
                .filter_map(|id| podman::json(&["inspect", "--type", "container", id]).ok())
                .filter_map(|v| v.as_array().and_then(|a| a.first().cloned()))
                .collect();
            if each.is_empty() {
                // None could be read: not a race, the engine's own failure.
                eprintln!("machine ls: {e}");
                return 1;
            }
            println!("{}", serde_json::Value::Array(each));
            0
        }
    }
}

/// `machine status ID`: the runtime's record (JSON).
pub fn status(id: &str) -> i32 {
    verb("status", id, |name| {
        let v = podman::json(&["inspect", "--type", "container", name])
            .map_err(|e| (1, e.to_string()))?;
        let record = v.as_array().and_then(|a| a.first()).cloned().unwrap_or(v);
        println!("{record}");
        Ok(())
    })
}

/// `machine stats ID`: the seed's Stats (JSON); `{"running": false}` when stopped.
pub fn stats(id: &str) -> i32 {
    verb("stats", id, |name| {
        let running = engine_call(&[
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Running}}",
            name,
        ])?;
        if running.trim() != "true" {
            println!("{}", serde_json::json!(MachineStats::default()));
            return Ok(());
        }
        let cores = engine_call(&[
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.HostConfig.NanoCpus}}",
            name,
        ])
        .ok()
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|n| *n > 0.0)
        .map(|n| n / 1e9);
        let engine = engine_call(&["stats", "--no-stream", "--format", STATS_FORMAT, name])
            .ok()
            .and_then(|line| parse_stats(line.lines().next().unwrap_or_default(), cores));
        // Rootless without cgroups v2 (a hybrid host) Podman has none, and Docker's are its
        // daemon's (no process counted in a running machine): /proc has the machine's own.
        let s = match engine {
            Some(s) if s.pids.unwrap_or(0) > 0 => s,
            _ => from_proc(name, cores)?,
        };
        println!("{}", serde_json::json!(s));
        Ok(())
    })
}

/// The machine's processes now: those in its first process's pid namespace.
fn samples(ns: &std::path::Path) -> BTreeMap<u32, ProcSample> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let p = e.path();
        if fs::read_link(p.join("ns/pid")).ok().as_deref() != Some(ns) {
            continue;
        }
        let Some((ticks, rss_pages)) = fs::read_to_string(p.join("stat"))
            .ok()
            .and_then(|t| parse_proc_stat(&t))
        else {
            continue;
        };
        let (read, write) = fs::read_to_string(p.join("io"))
            .map(|t| parse_proc_io(&t))
            .unwrap_or_default();
        out.insert(
            pid,
            ProcSample {
                ticks,
                rss_pages,
                read,
                write,
            },
        );
    }
    out
}

/// Stats from `/proc`: two samples half a second apart of the machine's processes.
fn from_proc(name: &str, cores: Option<f64>) -> Result<MachineStats, (i32, String)> {
    let pid = engine_call(&[
        "inspect",
        "--type",
        "container",
        "--format",
        "{{.State.Pid}}",
        name,
    ])?;
    let pid = pid.trim();
    let ns = fs::read_link(format!("/proc/{pid}/ns/pid"))
        .map_err(|e| (1, format!("the machine's processes cannot be read: {e}")))?;
    let before = samples(&ns);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = samples(&ns);
    let limit = engine_call(&[
        "inspect",
        "--type",
        "container",
        "--format",
        "{{.HostConfig.Memory}}",
        name,
    ])
    .ok()
    .and_then(|m| m.trim().parse::<u64>().ok())
    .filter(|m| *m > 0)
    .or_else(|| {
        fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| kb * 1024)
        })
    })
    .unwrap_or(0);
    let net = fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default();
    // SAFETY: sysconf only reads a configuration value.
    #[allow(unsafe_code)]
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let hz = u64::try_from(hz).unwrap_or(100);
    let page = u64::try_from(page).unwrap_or(4096);
    Ok(stats_from_proc(
        &before,
        &after,
        500,
        (hz, page),
        limit,
        net,
        cores,
    ))
}

/// `machine exec ID`: the ExecSpec on fd 3 run in the machine; its exit code.
pub fn exec(id: &str) -> i32 {
    let spec = match read_fd3("ExecSpec").and_then(|t| {
        let e: ExecSpec = from_json("ExecSpec", &t)
            .map_err(|e| (exit::INVALID_SPEC, format!("invalid ExecSpec: {e}")))?;
        e.check()
            .map_err(|e| (exit::INVALID_SPEC, format!("invalid ExecSpec: {e}")))?;
        Ok(e)
    }) {
        Ok(s) => s,
        Err((code, msg)) => {
            log(&format!("machine exec {id}: {msg}"));
            return code;
        }
    };
    // A running exec server (decision 0171) takes the exec with no engine call: the machine's
    // own staged folder, which only Handler's machines have, says it is there.
    let staged = machines_dir().ok().map(|d| d.join(container_name(id)));
    let server = staged.filter(|d| valid_id(id) && super::machine_server::usable(d, &spec));
    let f = match &server {
        Some(d) => Facts {
            name: container_name(id),
            running: true,
            proxied: d.join("egress-ctl").is_dir(),
        },
        None => match facts(id) {
            Ok(f) => f,
            Err((code, msg)) => return no_such(id, code, &msg),
        },
    };
    // A stopped machine is started for an exec that asks for it (a session's: its proxy first);
    // another's exec in it is refused by the engine, as before.
    if !f.running
        && spec.start_stopped
        && let Err((code, msg)) =
            start_proxy(id, &f.name).and_then(|()| engine_call(&["start", &f.name]).map(|_| ()))
    {
        log(&format!("machine exec {id}: starting it: {msg}"));
        return code;
    }
    // Its keys, held by the machine's proxy until this connection closes (decision 0166).
    let held = match hold_injections(id, &f, &spec, server.is_none()) {
        Ok(h) => h,
        Err((code, msg)) => {
            log(&format!("machine exec {id}: {msg}"));
            return code;
        }
    };
    let events = follow_events(id, f.proxied);
    let code = match server.map(|d| super::machine_server::run(&d, &spec)) {
        Some(super::machine_server::Outcome::Code(c)) => c,
        Some(super::machine_server::Outcome::NotTaken(why)) => {
            log(&format!("machine exec {id}: by the engine: {why}"));
            match facts(id) {
                Ok(_) => run_exec(id, plan_of(id, &spec)),
                Err((code, msg)) => no_such(id, code, &msg),
            }
        }
        None => run_exec(id, plan_of(id, &spec)),
    };
    events.stop();
    drop(held);
    code
}

fn no_such(id: &str, code: i32, msg: &str) -> i32 {
    log(&format!(
        "machine exec {id}: {msg} (a container removed outside Handler: delete the machine and make it again)"
    ));
    code
}

fn plan_of(id: &str, spec: &ExecSpec) -> handler_sandbox::machine::ExecPlan {
    match engine::current() {
        engine::Kind::Podman => plan_exec(Engine::Podman, id, spec),
        engine::Kind::Docker => {
            let d = handler_sandbox::plan::DockerFacts::default();
            plan_exec(Engine::Docker(&d), id, spec)
        }
    }
}

/// A filtered machine's egress events, from now on, on this exec's stderr (where a launch's
/// are): the proxy's log followed for as long as the exec runs — found and started on a
/// thread of its own, off the exec's start (`--since` now: nothing is missed meanwhile). The
/// thread lives until [`Follower::stop`]: the follower dies with the thread that started it.
fn follow_events(id: &str, proxied: bool) -> Follower {
    let (keep, kept) = std::sync::mpsc::channel::<()>();
    let follower = Follower {
        slot: std::sync::Arc::default(),
        _keep: keep,
    };
    if !proxied {
        return follower;
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().to_string())
        .unwrap_or_default();
    let id = id.to_string();
    let to = std::sync::Arc::clone(&follower.slot);
    std::thread::spawn(move || {
        let Some(p) = proxy_of(&id) else { return };
        let mut c = podman::command(["logs", "--follow", "--since", &since, &p]);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        podman::die_with_parent_std(&mut c);
        if let Ok(mut to) = to.lock()
            && !to.0
        {
            // The exec may be over already: then nothing is followed.
            to.1 = c.spawn().ok();
        }
        // Until the exec is over (the sender dropped).
        let _ = kept.recv();
    });
    follower
}

/// A follower of a machine's proxy's log, for one exec.
struct Follower {
    /// Whether the exec is over, and the follower once started.
    slot: std::sync::Arc<std::sync::Mutex<(bool, Option<std::process::Child>)>>,
    /// Dropped last: the thread that started the follower ends then.
    _keep: std::sync::mpsc::Sender<()>,
}

impl Follower {
    /// The exec is over: the follower is stopped (or never starts).
    fn stop(self) {
        if let Ok(mut f) = self.slot.lock() {
            f.0 = true;
            if let Some(mut f) = f.1.take() {
                let _ = f.kill();
                let _ = f.wait();
            }
        }
    }
}

/// Connects to socket `name` in folder `dir` whatever the folder's path's length: through the
/// folder's own descriptor (`/proc/self/fd/N/name`), since a socket's path is at most 107
/// bytes and a disposable machine's folder under the user's data folder can be longer.
fn connect_in(
    dir: &std::path::Path,
    name: &str,
) -> std::io::Result<std::os::unix::net::UnixStream> {
    let (_fd, at) = super::machine_server::through(dir)?;
    std::os::unix::net::UnixStream::connect(at(name))
}

/// Gives the machine's running proxy this exec's injections on its control socket (decision
/// 0166) and answers the connection that holds them: closed when the exec ends — or when this
/// process dies — which takes them back. None when the exec has none. Refused (64) in a machine
/// without a proxy or made before its proxy took keys.
fn hold_injections(
    id: &str,
    f: &Facts,
    spec: &ExecSpec,
    ask_engine: bool,
) -> Result<Option<std::os::unix::net::UnixStream>, (i32, String)> {
    use std::io::{BufRead as _, Write as _};
    if spec.injections.is_empty() {
        return Ok(None);
    }
    let refused = |why: String| (exit::UNENFORCEABLE, format!("injections: {why}"));
    // By the exec server, no engine call: a proxy that is gone answers no connection below.
    if !f.proxied || ask_engine && proxy_of(id).is_none() {
        return Err(refused(format!(
            "machine {id:?} is not filtered: it has no egress proxy to swap keys (make it with --network filtered)"
        )));
    }
    let dir = machines_dir()
        .map_err(|e| (exit::SETUP_FAILED, e))?
        .join(&f.name)
        .join("egress-ctl");
    let mut conn = connect_in(&dir, CONTROL_SOCKET).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            refused(format!(
                "machine {id:?} was made before its proxy could take keys: make it again"
            ))
        } else {
            (
                exit::SETUP_FAILED,
                format!("its proxy's control socket: {e}"),
            )
        }
    })?;
    let timeout = Some(std::time::Duration::from_secs(10));
    let setup = |e: std::io::Error| {
        (
            exit::SETUP_FAILED,
            format!("its proxy's control socket: {e}"),
        )
    };
    conn.set_read_timeout(timeout).map_err(setup)?;
    conn.set_write_timeout(timeout).map_err(setup)?;
    let req = ControlRequest {
        injections: spec.injections.clone(),
    };
    let mut line = serde_json::to_vec(&req).map_err(|e| (exit::SETUP_FAILED, e.to_string()))?;
    line.push(b'\n');
    conn.write_all(&line).map_err(setup)?;
    line.fill(0);
    let mut answer = String::new();
    std::io::BufReader::new(conn.try_clone().map_err(setup)?)
        .take(4096)
        .read_line(&mut answer)
        .map_err(setup)?;
    match serde_json::from_str::<ControlAnswer>(&answer) {
        Ok(a) if a.ok => {
            // Held for the exec's life: no timeout on a connection nobody reads again.
            conn.set_read_timeout(None).map_err(setup)?;
            Ok(Some(conn))
        }
        Ok(a) => Err(refused(a.error.unwrap_or_default())),
        Err(_) => Err((
            exit::SETUP_FAILED,
            "its proxy's control socket answered nothing readable".into(),
        )),
    }
}

/// Runs an exec's plan (its env file written 0600 and removed after); its exit code.
fn run_exec(id: &str, plan: handler_sandbox::machine::ExecPlan) -> i32 {
    let mut args = plan.args.clone();
    let mut file = None;
    if let Some(content) = &plan.env_file {
        let path = match machines_dir() {
            Ok(d) => d.join(format!(".exec-{}-{}.env", id, std::process::id())),
            Err(e) => {
                log(&format!("machine exec {id}: setup failed: {e}"));
                return exit::SETUP_FAILED;
            }
        };
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, content.as_bytes()));
        if let Err(e) = written {
            log(&format!(
                "machine exec {id}: setup failed: {}: {e}",
                path.display()
            ));
            return exit::SETUP_FAILED;
        }
        for a in &mut args {
            if a == ENV_FILE_SLOT {
                *a = path.to_string_lossy().into_owned();
            }
        }
        file = Some(path);
    }
    let code = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(async {
            let Ok(mut signals) = Signals::new(&STOPPING) else {
                return exit::SETUP_FAILED;
            };
            let mut cmd = tokio::process::Command::new(podman::program());
            cmd.args(&args).envs(&plan.engine_env);
            super::podman::die_with_parent(&mut cmd);
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    log(&format!("machine exec {id}: {e}"));
                    return exit::SETUP_FAILED;
                }
            };
            tokio::select! {
                st = child.wait() => code_of(st),
                sig = signals.recv() => {
                    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
                    }
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await;
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    128 + sig
                }
            }
        }),
        Err(e) => {
            log(&format!("machine exec {id}: setup failed: {e}"));
            exit::SETUP_FAILED
        }
    };
    if let Some(p) = file {
        let _ = fs::remove_file(p);
    }
    code
}

fn code_of(st: std::io::Result<std::process::ExitStatus>) -> i32 {
    st.map_or(exit::SETUP_FAILED, crate::runtime::signals::exit_code)
}
