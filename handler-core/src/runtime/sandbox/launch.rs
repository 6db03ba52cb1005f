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
use handler_sandbox::egress::topology::Topology;
use handler_sandbox::facts::LauncherId;
use handler_sandbox::plan::{LaunchPlan, Stage, labels};
use handler_sandbox::{plan_launch, validate_spec};
use tokio::signal::unix::{SignalKind, signal};

use super::stderr::{self, Source};
use super::watchdog::Watchdog;
use super::{host, log, podman};
use crate::runtime::egress::launch::ProxyProcess;

/// How long a tty launch waits for `attach` (A: 60 s); `HANDLER_SANDBOX_ATTACH_TIMEOUT` (seconds)
/// shortens it for tests.
fn attach_timeout() -> Duration {
    std::env::var("HANDLER_SANDBOX_ATTACH_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs)
}

/// The descriptor the spec comes on (A).
const SPEC_FD: std::os::fd::RawFd = 3;

/// Takes the inherited fd 3 itself, once. Re-opening it by path (`/dev/fd/3`) is refused for a
/// pipe or file made by another uid (a wrapper that made the pipe as root then dropped to the
/// user): reading the descriptor needs no permission check.
#[allow(unsafe_code)]
fn take_spec_fd() -> std::io::Result<fs::File> {
    use std::os::fd::FromRawFd as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    static TAKEN: AtomicBool = AtomicBool::new(false);
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(std::io::Error::other("fd 3 was already read"));
    }
    // SAFETY: F_GETFD only asks whether fd 3 is open; it touches no memory.
    if unsafe { libc::fcntl(SPEC_FD, libc::F_GETFD) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd 3 is open (checked above), is the spec's by contract A (the launcher opens
    // nothing before reading it), and is owned from here on by this File only: TAKEN makes sure
    // no second owner is ever made.
    Ok(unsafe { fs::File::from_raw_fd(SPEC_FD) })
}

/// Reads and validates the spec on fd 3.
fn read_spec() -> Result<SandboxSpec, (i32, String)> {
    let mut text = String::new();
    take_spec_fd()
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
    /// Removes the containers and the folder if this launcher dies without doing it.
    watchdog: Watchdog,
}

impl Instance {
    /// Removes what this launcher created: its containers (by its labels), its folder.
    fn cleanup(&self, containers_too: bool) {
        if containers_too {
            remove_containers_of(&self.launcher);
        }
        if let Err(e) = fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log(&format!(
                "cleanup: cannot remove {}: {e}",
                self.dir.display()
            ));
        }
        self.watchdog.cleaned_up();
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
    // The watchdog first: from here on, this launcher's death (SIGKILL too) removes what it
    // made, daemon or not (decision 0038).
    let watchdog = match Watchdog::start(&launcher, &dir) {
        Ok(w) => w,
        Err(e) => {
            log(&format!("setup failed: cannot start the watchdog: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    // The instance folder: created empty, naming its launcher first (sweep reads it).
    if let Err(e) = fs::DirBuilder::new().mode(0o700).create(&dir) {
        log(&format!(
            "setup failed: instance folder {}: {e} (is an instance of that name running?)",
            dir.display()
        ));
        watchdog.cleaned_up();
        return exit::SETUP_FAILED;
    }
    watchdog.owns_folder();
    let mut inst = Instance {
        dir: dir.clone(),
        launcher: launcher.clone(),
        watchdog,
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
    let code = rt.block_on(run_instance(&spec, &plan, &mut inst));
    // What the sandbox and the proxy wrote last reaches stderr before the launcher ends.
    stderr::wait_all(Duration::from_secs(2));
    code
}

/// The egress proxy's start (filtered, or open with injections), or nothing to wait for.
async fn proxy_ready(
    spec: &SandboxSpec,
    inst: &Instance,
    topo: Option<&Topology>,
) -> Result<Option<ProxyProcess>, String> {
    let Some(topo) = topo else {
        return Ok(None);
    };
    let l = &inst.launcher;
    let labels: Vec<(String, String)> = vec![
        (labels::LAUNCHER_PID.into(), l.pid.to_string()),
        (labels::LAUNCHER_START.into(), l.start.to_string()),
        (labels::LAUNCHER_BOOT.into(), l.boot.clone()),
        (labels::SANDBOX.into(), spec.name.clone()),
    ];
    crate::runtime::egress::launch::start_proxy(&podman::program(), topo, spec, &labels)
        .await
        .map(Some)
}

/// Stops the proxy (if any) and removes what the instance created.
async fn finish(inst: &Instance, proxy: Option<ProxyProcess>, containers_too: bool) {
    let mut containers_too = containers_too;
    if let Some(mut p) = proxy {
        containers_too |= !p.stop(&podman::program(), Duration::from_secs(10)).await;
    }
    inst.cleanup(containers_too);
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
    // The egress proxy (filtered, or open with injections) starts beside the sandbox: the
    // sandbox's forwarder holds the process until the proxy's socket answers (A1: the process
    // never runs without its proxy; decision 0024). Its stderr is ours, so its egress events
    // are the launcher's (A.3).
    let topo = Topology::of(spec, &inst.dir.to_string_lossy());
    if let Some(t) = &topo
        && let Err(e) = crate::runtime::egress::launch::stage(t, spec)
    {
        log(&format!("setup failed: egress settings: {e}"));
        inst.cleanup(false);
        return exit::SETUP_FAILED;
    }
    let ready = proxy_ready(spec, inst, topo.as_ref());
    tokio::pin!(ready);

    let mut cmd = tokio::process::Command::new(podman::program());
    cmd.args(&plan.args).envs(&plan.podman_env);
    podman::die_with_parent(&mut cmd);
    // The process's stderr comes through the launcher (stderr::relay): only the launcher writes
    // event lines on its stderr (decision 0037).
    let err = match stderr::piped(Source::Sandbox) {
        Ok(e) => e,
        Err(e) => {
            log(&format!(
                "setup failed: a pipe for the sandbox's stderr: {e}"
            ));
            let proxy = ready.await.ok().flatten();
            finish(inst, proxy, true).await;
            return exit::SETUP_FAILED;
        }
    };
    if plan.tty {
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    } else {
        cmd.stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(err);
    }
    let spawned = cmd.spawn();
    // Our copy of the pipe's write end goes with the command: the relay ends with podman.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            log(&format!(
                "setup failed: cannot run {}: {e}",
                podman::program()
            ));
            let proxy = ready.await.ok().flatten();
            finish(inst, proxy, true).await;
            return exit::SETUP_FAILED;
        }
    };

    let stopped_by = |sig: i32, inst: &Instance| {
        log(&format!("signal {sig}: stopping the sandbox"));
        inst.cleanup(true);
        128 + sig
    };

    // Until the proxy is ready (at once without one), or the sandbox's podman ends first.
    let mut ended = None;
    let proxy = loop {
        tokio::select! {
            r = &mut ready => match r {
                Ok(p) => break p,
                Err(e) => {
                    log(&format!("setup failed: {e}"));
                    inst.cleanup(true);
                    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                    let _ = child.start_kill();
                    return exit::SETUP_FAILED;
                }
            },
            st = child.wait(), if ended.is_none() => ended = Some(st),
            _ = term.recv() => { let c = stopped_by(15, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
            _ = int.recv() => { let c = stopped_by(2, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
            _ = hup.recv() => { let c = stopped_by(1, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
        }
    };

    if !plan.tty {
        let status = match ended {
            Some(st) => st,
            None => tokio::select! {
                st = child.wait() => st,
                _ = term.recv() => { let c = stopped_by(15, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
                _ = int.recv() => { let c = stopped_by(2, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
                _ = hup.recv() => { let c = stopped_by(1, inst); let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await; let _ = child.start_kill(); return c; }
            },
        };
        return match status {
            Ok(st) if st.code() == Some(125) => {
                log("setup failed: podman could not start the sandbox (exit 125)");
                finish(inst, proxy, true).await;
                exit::SETUP_FAILED
            }
            Ok(st) => {
                finish(inst, proxy, false).await;
                code_of(st)
            }
            Err(e) => {
                log(&format!("waiting for podman: {e}"));
                finish(inst, proxy, true).await;
                exit::SETUP_FAILED
            }
        };
    }

    // tty: created (beside the proxy), say ready, wait for attach to start it, then its end.
    let created = match ended {
        Some(st) => st,
        None => tokio::select! {
            st = child.wait() => st,
            _ = term.recv() => return stopped_by(15, inst),
            _ = int.recv() => return stopped_by(2, inst),
            _ = hup.recv() => return stopped_by(1, inst),
        },
    };
    if !created.as_ref().is_ok_and(ExitStatus::success) {
        log("setup failed: podman could not create the sandbox");
        finish(inst, proxy, true).await;
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
                finish(inst, proxy, true).await;
                return exit::SETUP_FAILED;
            }
        }
        if Instant::now() >= deadline {
            log(&format!(
                "no attach within {} s: removing the sandbox",
                attach_timeout().as_secs()
            ));
            finish(inst, proxy, true).await;
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
    podman::die_with_parent(&mut wait);
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
    finish(inst, proxy, true).await;
    code
}

/// Whether an instance folder's launcher is gone (sweep). Unreadable: treated as live.
pub fn instance_dir_launcher(dir: &Path) -> Option<LauncherId> {
    let text = fs::read_to_string(dir.join(LAUNCHER_FILE)).ok()?;
    let mut f = text.split_whitespace();
    handler_sandbox::host::launcher_from_labels(f.next(), f.next(), f.next())
}
