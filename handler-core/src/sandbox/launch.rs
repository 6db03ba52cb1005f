//! `handler-sandbox-podman launch` (contract A): reads the SandboxSpec on fd 3, refuses what it
//! cannot enforce (64) or what is invalid (65) before anything starts, stages the instance's
//! private folder, runs the plan with podman (stdio is the process's; with tty, created and
//! started by `attach`), and on exit or SIGTERM removes everything it created (A4).

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use handler_contracts::SandboxSpec;
use handler_contracts::parse::from_json;
use handler_contracts::sandbox::{TTY_READY_LINE, exit};
use handler_sandbox::facts::LauncherId;
use handler_sandbox::network::NetworkResource;
use handler_sandbox::plan::{LaunchPlan, Stage, labels};
use handler_sandbox::{plan_launch, validate_spec};
use tokio::signal::unix::{SignalKind, signal};

use super::{host, log, podman};

/// How long a tty launch waits for `attach` (A: 60 s); `HANDLER_SANDBOX_ATTACH_TIMEOUT` (seconds)
/// shortens it for tests.
fn attach_timeout() -> Duration {
    std::env::var("HANDLER_SANDBOX_ATTACH_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs)
}

/// Reads and validates the spec on fd 3.
fn read_spec() -> Result<SandboxSpec, (i32, String)> {
    let mut text = String::new();
    fs::File::open("/dev/fd/3")
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| {
            (
                exit::INVALID_SPEC,
                format!("cannot read the SandboxSpec on fd 3: {e}"),
            )
        })?;
    let spec: SandboxSpec = from_json("SandboxSpec", &text)
        .map_err(|e| (exit::INVALID_SPEC, format!("invalid spec: {e}")))?;
    validate_spec(&spec).map_err(|e| (e.exit_code(), e.to_string()))?;
    Ok(spec)
}

/// The file in an instance folder naming its launcher (for sweep).
pub const LAUNCHER_FILE: &str = "launcher";

/// Writes `pid start boot` for sweep.
pub fn launcher_line(l: &LauncherId) -> String {
    format!("{} {} {}\n", l.pid, l.start, l.boot)
}

/// What one launch created, removed by `cleanup`.
struct Instance {
    dir: PathBuf,
    launcher: LauncherId,
    networks: Vec<String>,
}

impl Instance {
    /// Removes what this launcher created: its containers (by its labels), networks, folder.
    fn cleanup(&self, containers_too: bool) {
        if containers_too {
            remove_containers_of(&self.launcher);
        }
        for n in &self.networks {
            if let Err(e) = podman::run(&["network", "rm", "-f", n]) {
                log(&format!("cleanup: {e}"));
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log(&format!(
                "cleanup: cannot remove {}: {e}",
                self.dir.display()
            ));
        }
    }
}

/// Removes every container labelled with this launcher (never another's).
pub fn remove_containers_of(l: &LauncherId) {
    let pid = format!("label={}={}", labels::LAUNCHER_PID, l.pid);
    let start = format!("label={}={}", labels::LAUNCHER_START, l.start);
    match podman::run(&["ps", "-a", "-q", "--filter", &pid, "--filter", &start]) {
        Ok(ids) => {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f", "--time", "3"];
                args.extend(ids);
                if let Err(e) = podman::run(&args) {
                    log(&format!("cleanup: {e}"));
                }
            }
        }
        Err(e) => log(&format!("cleanup: {e}")),
    }
}

fn stage(plan: &LaunchPlan) -> std::io::Result<()> {
    for s in &plan.stage {
        match s {
            Stage::Dir { path, mode } => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(*mode)
                    .create(path)?;
                fs::set_permissions(path, fs::Permissions::from_mode(*mode))?;
            }
            Stage::File {
                path,
                content,
                mode,
            } => {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(*mode)
                    .open(path)?;
                f.write_all(content.as_bytes())?;
                fs::set_permissions(path, fs::Permissions::from_mode(*mode))?;
            }
        }
    }
    Ok(())
}

fn code_of(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// `launch`: returns the exit code (A).
pub fn run() -> i32 {
    let spec = match read_spec() {
        Ok(s) => s,
        Err((code, msg)) => {
            log(&msg);
            return code;
        }
    };
    if nix::unistd::geteuid().is_root() {
        log(
            "refusing to run as root: the sandbox runs rootless as the host user (A3); run launch as that user",
        );
        return exit::UNENFORCEABLE;
    }
    let launcher = host::launcher_self();
    let uid = nix::unistd::getuid().as_raw();
    let base = match host::runtime_base(uid) {
        Ok(b) => b,
        Err(e) => {
            log(&format!("setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    let dir = base.join(&spec.name);
    let facts = match host::gather(&spec, dir.to_string_lossy().into_owned(), launcher.clone()) {
        Ok(f) => f,
        Err(e) => {
            log(&format!("setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    let plan = match plan_launch(&spec, &facts) {
        Ok(p) => p,
        Err(e) => {
            log(&e.to_string());
            return e.exit_code();
        }
    };
    // The instance folder: created empty, naming its launcher first (sweep reads it).
    if let Err(e) = fs::DirBuilder::new().mode(0o700).create(&dir) {
        log(&format!(
            "setup failed: instance folder {}: {e} (is an instance of that name running?)",
            dir.display()
        ));
        return exit::SETUP_FAILED;
    }
    let mut inst = Instance {
        dir: dir.clone(),
        launcher: launcher.clone(),
        networks: Vec::new(),
    };
    if let Err(e) =
        fs::write(dir.join(LAUNCHER_FILE), launcher_line(&launcher)).and_then(|()| stage(&plan))
    {
        log(&format!("setup failed: staging {}: {e}", dir.display()));
        inst.cleanup(false);
        return exit::SETUP_FAILED;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&format!("setup failed: {e}"));
            inst.cleanup(false);
            return exit::SETUP_FAILED;
        }
    };
    rt.block_on(async move {
        let code = run_instance(&spec, &plan, &mut inst).await;
        code
    })
}

/// The error of a network-creating thread that panicked.
fn panicked() -> podman::PodmanError {
    podman::PodmanError::Failed {
        verb: "network create".into(),
        code: None,
        stderr: "the creating thread panicked".into(),
    }
}

async fn run_instance(spec: &SandboxSpec, plan: &LaunchPlan, inst: &mut Instance) -> i32 {
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        _ => {
            log("setup failed: cannot handle signals");
            inst.cleanup(false);
            return exit::SETUP_FAILED;
        }
    };
    // The network's own resources first (none for none/open), created side by side: each is
    // one `podman network create`, and a filtered sandbox has two.
    let pid = format!("{}={}", labels::LAUNCHER_PID, inst.launcher.pid);
    let start = format!("{}={}", labels::LAUNCHER_START, inst.launcher.start);
    let boot = format!("{}={}", labels::LAUNCHER_BOOT, inst.launcher.boot);
    let sandbox = format!("{}={}", labels::SANDBOX, spec.name);
    // A filtered sandbox's internal network has no DNS (decision 0023): it is created on a free
    // subnet the launcher picks, and its proxy gets a fixed address there.
    let topo = handler_sandbox::egress::topology::Topology::of(spec, &inst.dir.to_string_lossy());
    let internal = topo.as_ref().and_then(|t| t.internal_network.clone());
    let mut proxy_ip = None;
    let created: Vec<(String, Result<String, String>)> = std::thread::scope(|s| {
        let internal_handle = match (&topo, &internal) {
            (Some(t), Some(name)) => {
                let (pid, start, boot, sandbox) = (&pid, &start, &boot, &sandbox);
                let seed = inst.launcher.pid;
                Some((
                    name.clone(),
                    s.spawn(move || {
                        crate::egress::launch::create_internal_network(t, seed, |create_args| {
                            let mut args = vec!["network", "create"];
                            for l in [pid, start, boot, sandbox] {
                                args.extend(["--label", l.as_str()]);
                            }
                            args.extend(create_args.iter().map(String::as_str));
                            podman::run(&args)
                        })
                    }),
                ))
            }
            _ => None,
        };
        let handles: Vec<_> = plan
            .network
            .resources
            .iter()
            .filter(|r| match r {
                NetworkResource::Network { name, .. } => Some(name) != internal.as_ref(),
            })
            .map(|r| match r {
                NetworkResource::Network { name, create_args } => {
                    let mut args = vec!["network", "create"];
                    for l in [&pid, &start, &boot, &sandbox] {
                        args.extend(["--label", l.as_str()]);
                    }
                    args.extend(create_args.iter().map(String::as_str));
                    (name.clone(), s.spawn(move || podman::run(&args)))
                }
            })
            .collect();
        let mut out: Vec<(String, Result<String, String>)> = handles
            .into_iter()
            .map(|(n, h)| {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(panicked()))
                    .map_err(|e| e.to_string());
                (n, r)
            })
            .collect();
        if let Some((n, h)) = internal_handle {
            let r = h.join().unwrap_or_else(|_| Err(panicked().to_string()));
            out.push((n, r.map(|ip| ip.to_string())));
        }
        out
    });
    let mut failed = None;
    for (name, r) in created {
        match r {
            Ok(out) => {
                if Some(&name) == internal.as_ref() {
                    proxy_ip = out.parse::<std::net::Ipv4Addr>().ok();
                }
                inst.networks.push(name)
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        log(&format!("setup failed: {e}"));
        inst.cleanup(false);
        return exit::SETUP_FAILED;
    }

    // The egress proxy (filtered, or open with injections): started once its networks exist and
    // before the sandbox, which never starts without it (A1: fail closed; a process starting
    // beside it would find no proxy for its first requests, decision 0022). Its stderr is ours,
    // so its egress events are the launcher's (A.3).
    // The sandbox reaches its proxy by the address it was given on the internal network.
    let mut sandbox_args = plan.args.clone();
    if let Some(t) = &topo {
        let host = t.sandbox_host_args(proxy_ip);
        if !sandbox_args.is_empty() {
            sandbox_args.splice(1..1, host);
        }
    }
    let mut _proxy = None;
    let created_early =
        topo.is_some() && !plan.tty && plan.args.first().map(String::as_str) == Some("run");
    if let Some(topo) = &topo {
        let l = &inst.launcher;
        let labels: Vec<(String, String)> = vec![
            (labels::LAUNCHER_PID.into(), l.pid.to_string()),
            (labels::LAUNCHER_START.into(), l.start.to_string()),
            (labels::LAUNCHER_BOOT.into(), l.boot.clone()),
            (labels::SANDBOX.into(), spec.name.clone()),
        ];
        if let Err(e) = crate::egress::launch::stage(topo, spec) {
            log(&format!("setup failed: egress settings: {e}"));
            inst.cleanup(false);
            return exit::SETUP_FAILED;
        }
        let program = podman::program();
        let proxy = crate::egress::launch::start_proxy(&program, topo, spec, &labels, proxy_ip);
        // While the proxy starts, the sandbox container is created (not started: decision 0022).
        let create = async {
            if !created_early {
                return Ok(());
            }
            let mut args = sandbox_args.clone();
            args[0] = "create".into();
            let out = tokio::process::Command::new(podman::program())
                .args(&args)
                .envs(&plan.podman_env)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .await
                .map_err(|e| format!("cannot run {}: {e}", podman::program()))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "podman could not create the sandbox: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let (proxy, created) = tokio::join!(proxy, create);
        match proxy.and_then(|p| created.map(|()| p)) {
            Ok(p) => _proxy = Some(p),
            Err(e) => {
                log(&format!("setup failed: {e}"));
                inst.cleanup(true);
                return exit::SETUP_FAILED;
            }
        }
    }

    let mut cmd = tokio::process::Command::new(podman::program());
    if created_early {
        cmd.args(["start", "--attach", "--interactive", &spec.name]);
    } else {
        cmd.args(&sandbox_args).envs(&plan.podman_env);
    }
    if plan.tty {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
    } else {
        cmd.stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            log(&format!(
                "setup failed: cannot run {}: {e}",
                podman::program()
            ));
            inst.cleanup(false);
            return exit::SETUP_FAILED;
        }
    };

    let stopped_by = |sig: i32, inst: &Instance| {
        log(&format!("signal {sig}: stopping the sandbox"));
        inst.cleanup(true);
        128 + sig
    };

    if !plan.tty {
        let status = tokio::select! {
            st = child.wait() => st,
            _ = term.recv() => { let c = stopped_by(15, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
            _ = int.recv() => { let c = stopped_by(2, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
            _ = hup.recv() => { let c = stopped_by(1, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
        };
        return match status {
            Ok(st) if st.code() == Some(125) => {
                log("setup failed: podman could not start the sandbox (exit 125)");
                inst.cleanup(true);
                exit::SETUP_FAILED
            }
            Ok(st) => {
                inst.cleanup(false);
                code_of(st)
            }
            Err(e) => {
                log(&format!("waiting for podman: {e}"));
                inst.cleanup(true);
                exit::SETUP_FAILED
            }
        };
    }

    // tty: create, say ready, wait for attach to start it, then for its end.
    let created = tokio::select! {
        st = child.wait() => st,
        _ = term.recv() => return stopped_by(15, inst),
        _ = int.recv() => return stopped_by(2, inst),
        _ = hup.recv() => return stopped_by(1, inst),
    };
    if !created.as_ref().is_ok_and(ExitStatus::success) {
        log("setup failed: podman could not create the sandbox");
        inst.cleanup(true);
        return exit::SETUP_FAILED;
    }
    eprintln!("{TTY_READY_LINE}");
    let deadline = Instant::now() + attach_timeout();
    loop {
        let state = podman::run(&[
            "container",
            "inspect",
            "--format",
            "{{.State.Status}}",
            &spec.name,
        ]);
        match state.as_deref().map(str::trim) {
            Ok("created") | Ok("configured") => {}
            Ok(_) => break,
            Err(e) => {
                log(&format!("the sandbox went away: {e}"));
                inst.cleanup(true);
                return exit::SETUP_FAILED;
            }
        }
        if Instant::now() >= deadline {
            log(&format!(
                "no attach within {} s: removing the sandbox",
                attach_timeout().as_secs()
            ));
            inst.cleanup(true);
            return exit::SETUP_FAILED;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(150)) => {}
            _ = term.recv() => return stopped_by(15, inst),
            _ = int.recv() => return stopped_by(2, inst),
            _ = hup.recv() => return stopped_by(1, inst),
        }
    }
    let mut wait = tokio::process::Command::new(podman::program());
    wait.args(["wait", &spec.name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = tokio::select! {
        o = wait.output() => o,
        _ = term.recv() => return stopped_by(15, inst),
        _ = int.recv() => return stopped_by(2, inst),
        _ = hup.recv() => return stopped_by(1, inst),
    };
    let code = out
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<i32>()
                .ok()
        })
        .unwrap_or(exit::SETUP_FAILED);
    inst.cleanup(true);
    code
}

/// Whether an instance folder's launcher is gone (sweep). Unreadable: treated as live.
pub fn instance_dir_launcher(dir: &Path) -> Option<LauncherId> {
    let text = fs::read_to_string(dir.join(LAUNCHER_FILE)).ok()?;
    let mut f = text.split_whitespace();
    handler_sandbox::host::launcher_from_labels(f.next(), f.next(), f.next())
}
