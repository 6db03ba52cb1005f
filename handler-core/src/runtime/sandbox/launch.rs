//! `handler-sandbox-podman launch` (contract A): reads the SandboxSpec on fd 3, refuses what it
//! cannot enforce (64) or what is invalid (65) before anything starts, stages the instance's
//! private folder, executes the plan over [`Podman`] (stdio is the process's; with tty, created
//! and started by `attach`; the egress proxy beside it when the plan has one), and on exit or
//! SIGTERM removes everything it created (A4). Every decision is the plan's
//! (`handler_sandbox::plan_launch`): this module only runs its steps, in order.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use handler_contracts::SandboxSpec;
use handler_contracts::parse::from_json;
use handler_contracts::sandbox::{TTY_READY_LINE, exit};
use handler_sandbox::facts::LauncherId;
use handler_sandbox::plan::plan_launch_docker;
use handler_sandbox::plan::{LaunchPlan, Stage};
use handler_sandbox::{plan_launch, validate_spec};

use super::podman::{Podman, PodmanCli, PodmanProcess, SpawnError};
use super::watchdog::Watchdog;
use super::{engine, host, log, stderr};
use crate::runtime::egress::launch::{ProxyProcess, start_claimed, start_proxy};
use crate::runtime::signals::{STOPPING, Signals};

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
pub(crate) fn take_spec_fd() -> std::io::Result<fs::File> {
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

/// Reads the spec on fd 3 (it is validated once, by `run`, on its way to the plan).
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
    from_json("SandboxSpec", &text).map_err(|e| (exit::INVALID_SPEC, format!("invalid spec: {e}")))
}

/// The file in an instance folder naming its launcher (for sweep).
pub(crate) const LAUNCHER_FILE: &str = "launcher";

/// Writes `pid start boot` for sweep.
pub(crate) fn launcher_line(l: &LauncherId) -> String {
    format!("{} {} {}\n", l.pid, l.start, l.boot)
}

/// What one launch created, removed by `cleanup`.
struct Instance {
    dir: PathBuf,
    launcher: LauncherId,
    /// Removes the containers and the folder if this launcher dies without doing it (none in
    /// unit tests).
    watchdog: Option<Watchdog>,
}

impl Instance {
    /// Removes what this launcher created: its containers (by its labels), its folder.
    fn cleanup(&self, podman: &impl Podman, containers_too: bool) {
        if containers_too {
            podman.remove_containers_of(&self.launcher);
        }
        if let Err(e) = fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log(&format!(
                "cleanup: cannot remove {}: {e}",
                self.dir.display()
            ));
        }
        if let Some(w) = &self.watchdog {
            w.cleaned_up();
        }
    }
}

/// Removes every container labelled with this launcher (never another's).
pub(crate) fn remove_containers_of(l: &LauncherId) {
    PodmanCli.remove_containers_of(l);
}

/// Creates what a plan stages, in order: folders with their mode, files (new) with their
/// content and mode.
pub(crate) fn stage(stages: &[Stage]) -> std::io::Result<()> {
    for s in stages {
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
            // A stage this runtime does not know: refused, never skipped (A1).
            _ => return Err(std::io::Error::other("a stage this runtime cannot make")),
        }
    }
    Ok(())
}

/// Each step's time since the launch began, on stderr, when `HANDLER_LAUNCH_TIMINGS` is set
/// (issue 34 item 2: where a launch's time goes). Names and times only.
struct Steps(Option<std::time::Instant>);

impl Steps {
    fn new() -> Steps {
        Steps(std::env::var_os("HANDLER_LAUNCH_TIMINGS").map(|_| std::time::Instant::now()))
    }

    fn done(&self, step: &str) {
        if let Some(t) = self.0 {
            log(&format!(
                "timing: {step} at {:.1} ms",
                t.elapsed().as_secs_f64() * 1000.0
            ));
        }
    }
}

/// `launch`: returns the exit code (A).
pub fn run() -> i32 {
    let steps = Steps::new();
    let spec = match read_spec() {
        Ok(s) => s,
        Err((code, msg)) => {
            log(&msg);
            return code;
        }
    };
    // The one validation of the spec: the plan takes only a validated one.
    let valid = match validate_spec(&spec) {
        Ok(v) => v,
        Err(e) => {
            log(&e.to_string());
            return e.exit_code();
        }
    };
    steps.done("validated");
    if nix::unistd::geteuid().is_root() {
        log(
            "refusing to run as root: the sandbox runs rootless as the host user (A3); run launch as that user",
        );
        return exit::UNENFORCEABLE;
    }
    let launcher = host::launcher_self();
    let uid = nix::unistd::getuid().as_raw();
    let dir = match host::runtime_base(uid) {
        Ok(b) => b.join(&spec.name),
        Err(e) => {
            log(&format!("setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    let facts = match host::gather(&spec, dir.to_string_lossy().into_owned(), launcher.clone()) {
        Ok(f) => f,
        Err(e) => {
            log(&format!("setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    steps.done("host facts");
    let plan = match plan_for(&valid, &facts) {
        Ok(p) => p,
        Err((code, msg)) => {
            log(&msg);
            return code;
        }
    };
    steps.done("planned");
    let mut inst = match prepare(&launcher, &dir, &plan) {
        Ok(i) => i,
        Err(code) => return code,
    };
    steps.done("prepared (watchdog, folder, staging)");
    // Docker: the volumes standing in for image mounts, filled before anything starts.
    if let Err(e) = super::docker::fill_image_volumes(&plan.image_volumes) {
        log(&format!("setup failed: {e}"));
        inst.cleanup(&PodmanCli, false);
        return exit::SETUP_FAILED;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&format!("setup failed: {e}"));
            inst.cleanup(&PodmanCli, false);
            return exit::SETUP_FAILED;
        }
    };
    let code = rt.block_on(run_instance(&PodmanCli, &spec.name, &plan, &mut inst));
    // What the sandbox and the proxy wrote last reaches stderr before the launcher ends.
    stderr::wait_all(Duration::from_secs(2));
    code
}

/// The plan of `valid` for this process's engine (Docker's facts asked of the daemon first).
fn plan_for(
    valid: &handler_sandbox::ValidSpec<'_>,
    facts: &handler_sandbox::HostFacts,
) -> Result<LaunchPlan, (i32, String)> {
    let refused = |e: handler_sandbox::SpecError| (e.exit_code(), e.to_string());
    match engine::current() {
        engine::Kind::Podman => plan_launch(valid, facts).map_err(refused),
        engine::Kind::Docker => {
            let d = super::docker::facts(valid.spec(), &facts.instance_dir)
                .map_err(|e| (exit::SETUP_FAILED, format!("setup failed: {e}")))?;
            plan_launch_docker(valid, facts, &d).map_err(refused)
        }
    }
}

/// The watchdog, then the instance folder (naming its launcher first) and the plan's staging;
/// the exit code when one of them fails.
fn prepare(launcher: &LauncherId, dir: &Path, plan: &LaunchPlan) -> Result<Instance, i32> {
    // The watchdog first: from here on, this launcher's death (SIGKILL too) removes what it
    // made, daemon or not (decision 0038).
    let watchdog = match Watchdog::start(launcher, dir) {
        Ok(w) => w,
        Err(e) => {
            log(&format!("setup failed: cannot start the watchdog: {e}"));
            return Err(exit::SETUP_FAILED);
        }
    };
    // A name still held by an instance that is ending (its daemon died: it is stopping, or was
    // told to) is waited for; one a dead launcher left is removed (issue 28).
    free_name(dir, NAME_WAIT);
    // The instance folder: created empty, naming its launcher first (sweep reads it).
    if let Err(e) = fs::DirBuilder::new().mode(0o700).create(dir) {
        log(&format!(
            "setup failed: instance folder {}: {e} (an instance of that name is still running after {} s)",
            dir.display(),
            NAME_WAIT.as_secs()
        ));
        watchdog.cleaned_up();
        return Err(exit::SETUP_FAILED);
    }
    watchdog.owns_folder();
    let inst = Instance {
        dir: dir.to_path_buf(),
        launcher: launcher.clone(),
        watchdog: Some(watchdog),
    };
    if let Err(e) = fs::write(dir.join(LAUNCHER_FILE), launcher_line(launcher))
        .and_then(|()| stage(&plan.stage))
    {
        log(&format!("setup failed: staging {}: {e}", dir.display()));
        inst.cleanup(&PodmanCli, false);
        return Err(exit::SETUP_FAILED);
    }
    Ok(inst)
}

/// How long a launch waits for an earlier instance of its name to end.
const NAME_WAIT: Duration = Duration::from_secs(30);

/// Frees instance folder `dir` when it can: the leftovers of a dead launcher (its containers,
/// the folder) are removed at once; a live launcher's folder is waited for until it is gone or
/// `within` passed (then the launch fails as before, naming the folder). A folder that names no
/// launcher yet (one being set up) counts as live.
fn free_name(dir: &Path, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    let boot = host::boot_id();
    let mut said = false;
    while fs::symlink_metadata(dir).is_ok() {
        if let Some(old) = instance_dir_launcher(dir)
            && !handler_sandbox::host::launcher_alive(&old, host::process_start(old.pid), &boot)
        {
            log(&format!(
                "instance folder {}: its launcher {} is gone: removing what it left",
                dir.display(),
                old.pid
            ));
            PodmanCli.remove_containers_of(&old);
            let _ = fs::remove_dir_all(dir);
            return;
        }
        if std::time::Instant::now() >= deadline {
            return;
        }
        if !said {
            log(&format!(
                "instance folder {}: an instance of this name is ending: waiting for it",
                dir.display()
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the proxy (if any) and removes what the instance created.
async fn finish<P: Podman>(
    podman: &P,
    inst: &Instance,
    proxy: Option<ProxyProcess<P::Process>>,
    containers_too: bool,
) {
    let mut containers_too = containers_too;
    if let Some(mut p) = proxy {
        containers_too |= !p.stop(podman, Duration::from_secs(10)).await;
    }
    inst.cleanup(podman, containers_too);
}

/// A signal stopped the launch: everything is removed; the code is 128 + the signal. `child`:
/// the sandbox's podman, waited for (10 s at most) and killed. A claimed proxy (`proxy`) is let
/// go first: it carries no label of this launcher, and left running it would see its folder go
/// ("cannot read the egress settings") until this launcher's exit closed its connection.
async fn stopped_by<P: Podman>(
    podman: &P,
    inst: &Instance,
    sig: i32,
    proxy: Option<&mut ProxyProcess<P::Process>>,
    child: Option<&mut P::Process>,
) -> i32 {
    log(&format!("signal {sig}: stopping the sandbox"));
    if let Some(p) = proxy {
        p.release_claimed(podman);
    }
    inst.cleanup(podman, true);
    if let Some(child) = child {
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        // Again once its client ended (Docker's daemon finishes a create its client left).
        podman.remove_containers_of(&inst.launcher);
    }
    128 + sig
}

/// Executes `plan` (instance `name`, already staged in `inst`): the proxy's staging, the
/// sandbox container, the proxy container until it is ready, then the sandbox's end (or, with
/// tty, its creation, `attach` and its end); everything removed after.
async fn run_instance<P: Podman>(
    podman: &P,
    name: &str,
    plan: &LaunchPlan,
    inst: &mut Instance,
) -> i32 {
    let Ok(mut signals) = Signals::new(&STOPPING) else {
        log("setup failed: cannot handle signals");
        inst.cleanup(podman, false);
        return exit::SETUP_FAILED;
    };
    // The egress proxy (filtered, or open with injections) starts beside the sandbox: the
    // sandbox's forwarder holds the process until the proxy's socket answers (A1: the process
    // never runs without its proxy; decision 0024). Its stderr is ours, so its egress events
    // are the launcher's (A.3).
    // A warm member of the proxy pool, when one waits, stands in for starting one (decision
    // 0175): its folders become the instance's before the staging below.
    let claimed = match &plan.proxy {
        Some(p) if p.pooled && handler_sandbox::egress::pool::pool_serves(&p.image) => {
            podman.claim_warm_proxy(&inst.dir)
        }
        _ => None,
    };
    if let Some(p) = &plan.proxy
        && let Err(e) = stage(&p.stage)
    {
        log(&format!("setup failed: egress settings: {e}"));
        if let Some(c) = &claimed {
            podman.remove(&c.container, Duration::from_secs(10)).await;
        }
        inst.cleanup(podman, false);
        return exit::SETUP_FAILED;
    }
    let ready = async {
        match (&plan.proxy, claimed) {
            (Some(p), Some(c)) => start_claimed(podman, p, c).await.map(Some),
            (Some(p), None) => start_proxy(podman, p).await.map(Some),
            (None, _) => Ok(None),
        }
    };
    tokio::pin!(ready);
    let mut child = match podman.spawn_sandbox(plan) {
        Ok(c) => c,
        Err(e) => {
            match e {
                SpawnError::Pipe(e) => log(&format!(
                    "setup failed: a pipe for the sandbox's stderr: {e}"
                )),
                SpawnError::Podman(e) => log(&format!("setup failed: {e}")),
            }
            let proxy = ready.await.ok().flatten();
            finish(podman, inst, proxy, true).await;
            return exit::SETUP_FAILED;
        }
    };
    // Until the proxy is ready (at once without one), or the sandbox's podman ends first.
    let mut ended = None;
    let proxy = loop {
        tokio::select! {
            r = &mut ready => match r {
                Ok(p) => break p,
                Err(e) => {
                    log(&format!("setup failed: {e}"));
                    inst.cleanup(podman, true);
                    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    // Again once its client ended: Docker's daemon makes the container of a
                    // request its client no longer waits for, after the first removal.
                    podman.remove_containers_of(&inst.launcher);
                    return exit::SETUP_FAILED;
                }
            },
            st = child.wait(), if ended.is_none() => ended = Some(st),
            sig = signals.recv() => return stopped_by(podman, inst, sig, None, Some(&mut child)).await,
        }
    };
    if plan.proxy.as_ref().is_some_and(|p| p.pooled) {
        // The next filtered launch finds a warm proxy (this one's start went first).
        podman.refill_proxy_pool();
    }
    let run = Running {
        podman,
        inst,
        proxy,
        signals,
    };
    if plan.tty {
        run.tty(name, child, ended).await
    } else {
        run.until_exit(child, ended).await
    }
}

/// A sandbox whose podman runs, with its proxy ready (if it has one).
struct Running<'a, P: Podman> {
    podman: &'a P,
    inst: &'a Instance,
    proxy: Option<ProxyProcess<P::Process>>,
    signals: Signals,
}

impl<P: Podman> Running<'_, P> {
    /// Without tty: the sandbox's podman runs the process; its end is the launch's (125:
    /// podman could not start it).
    async fn until_exit(
        mut self,
        mut child: P::Process,
        ended: Option<std::io::Result<ExitStatus>>,
    ) -> i32 {
        let (podman, inst) = (self.podman, self.inst);
        let status = match ended {
            Some(st) => st,
            None => tokio::select! {
                st = child.wait() => st,
                sig = self.signals.recv() => return stopped_by(podman, inst, sig, self.proxy.as_mut(), Some(&mut child)).await,
            },
        };
        match status {
            Ok(st) if st.code() == Some(125) => {
                log("setup failed: podman could not start the sandbox (exit 125)");
                finish(podman, inst, self.proxy, true).await;
                exit::SETUP_FAILED
            }
            Ok(st) => {
                finish(podman, inst, self.proxy, false).await;
                crate::runtime::signals::exit_code(st)
            }
            Err(e) => {
                log(&format!("waiting for podman: {e}"));
                finish(podman, inst, self.proxy, true).await;
                exit::SETUP_FAILED
            }
        }
    }

    /// tty: created (beside the proxy), say ready, wait for `attach` to start it, then its end.
    async fn tty(
        mut self,
        name: &str,
        mut child: P::Process,
        ended: Option<std::io::Result<ExitStatus>>,
    ) -> i32 {
        let (podman, inst) = (self.podman, self.inst);
        let created = match ended {
            Some(st) => st,
            None => tokio::select! {
                st = child.wait() => st,
                sig = self.signals.recv() => return stopped_by(podman, inst, sig, self.proxy.as_mut(), None).await,
            },
        };
        if !created.as_ref().is_ok_and(ExitStatus::success) {
            log("setup failed: podman could not create the sandbox");
            finish(podman, inst, self.proxy, true).await;
            return exit::SETUP_FAILED;
        }
        self.attached(name).await
    }

    /// The created tty sandbox: the ready line, then `attach` within the timeout, then its end.
    async fn attached(mut self, name: &str) -> i32 {
        let (podman, inst) = (self.podman, self.inst);
        eprintln!("{TTY_READY_LINE}");
        let deadline = Instant::now() + attach_timeout();
        loop {
            match podman.state(name).as_deref() {
                Ok("created" | "configured") => {}
                Ok(_) => break,
                Err(e) => {
                    log(&format!("the sandbox went away: {e}"));
                    finish(podman, inst, self.proxy, true).await;
                    return exit::SETUP_FAILED;
                }
            }
            if Instant::now() >= deadline {
                log(&format!(
                    "no attach within {} s: removing the sandbox",
                    attach_timeout().as_secs()
                ));
                finish(podman, inst, self.proxy, true).await;
                return exit::SETUP_FAILED;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(150)) => {}
                sig = self.signals.recv() => return stopped_by(podman, inst, sig, self.proxy.as_mut(), None).await,
            }
        }
        let code = tokio::select! {
            c = podman.wait_exit(name) => c,
            sig = self.signals.recv() => return stopped_by(podman, inst, sig, self.proxy.as_mut(), None).await,
        };
        finish(podman, inst, self.proxy, true).await;
        code.unwrap_or(exit::SETUP_FAILED)
    }
}

/// Whether an instance folder's launcher is gone (sweep). Unreadable: treated as live.
pub(crate) fn instance_dir_launcher(dir: &Path) -> Option<LauncherId> {
    let text = fs::read_to_string(dir.join(LAUNCHER_FILE)).ok()?;
    let mut f = text.split_whitespace();
    handler_sandbox::host::launcher_from_labels(f.next(), f.next(), f.next())
}

#[cfg(test)]
mod tests {
    //! The executor over a recording [`Podman`]: the plan's steps run in order, and what fails
    //! is cleaned up, without podman or root.

    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::os::unix::process::ExitStatusExt as _;
    use std::rc::Rc;

    use handler_sandbox::HostFacts;

    use super::super::podman::{PodmanError, ProxyIo};
    use super::*;

    type Log = Rc<RefCell<Vec<String>>>;

    /// Records every call; the sandbox's process ends with `exit`, the proxy says `ready`.
    struct Fake {
        log: Log,
        exit: i32,
        ready: &'static str,
    }

    struct FakeProcess {
        log: Log,
        name: &'static str,
        exit: i32,
    }

    impl PodmanProcess for FakeProcess {
        async fn wait(&mut self) -> std::io::Result<ExitStatus> {
            tokio::task::yield_now().await;
            self.log.borrow_mut().push(format!("ended {}", self.name));
            Ok(ExitStatus::from_raw(self.exit << 8))
        }

        fn start_kill(&mut self) -> std::io::Result<()> {
            self.log.borrow_mut().push(format!("kill {}", self.name));
            Ok(())
        }
    }

    impl Podman for Fake {
        type Process = FakeProcess;

        fn spawn_sandbox(&self, plan: &LaunchPlan) -> Result<FakeProcess, SpawnError> {
            let verb = &plan.args[0];
            self.log.borrow_mut().push(format!("sandbox {verb}"));
            Ok(FakeProcess {
                log: self.log.clone(),
                name: "sandbox",
                exit: self.exit,
            })
        }

        fn spawn_proxy(&self, args: &[String]) -> Result<ProxyIo<FakeProcess>, SpawnError> {
            self.log.borrow_mut().push(format!("proxy {}", args[0]));
            Ok(ProxyIo {
                process: FakeProcess {
                    log: self.log.clone(),
                    name: "proxy",
                    exit: 0,
                },
                stdin: Box::new(tokio::io::sink()),
                stdout: Box::new(std::io::Cursor::new(self.ready.as_bytes().to_vec())),
            })
        }

        async fn remove(&self, name: &str, _within: Duration) -> bool {
            self.log.borrow_mut().push(format!("rm {name}"));
            true
        }

        fn remove_detached(&self, name: &str) {
            self.log
                .borrow_mut()
                .push(format!("rm in the background {name}"));
        }

        fn claim_warm_proxy(&self, _inst: &Path) -> Option<crate::runtime::egress::pool::Claimed> {
            self.log.borrow_mut().push("claim a warm proxy".into());
            None
        }

        fn refill_proxy_pool(&self) {
            self.log.borrow_mut().push("refill the pool".into());
        }

        fn state(&self, name: &str) -> Result<String, PodmanError> {
            self.log.borrow_mut().push(format!("state {name}"));
            Ok("exited".into())
        }

        async fn wait_exit(&self, name: &str) -> Option<i32> {
            self.log.borrow_mut().push(format!("wait {name}"));
            Some(self.exit)
        }

        fn image_exists(&self, image: &str) -> bool {
            self.log.borrow_mut().push(format!("image exists {image}"));
            false
        }

        fn remove_containers_of(&self, l: &LauncherId) {
            self.log
                .borrow_mut()
                .push(format!("rm by launcher {}", l.pid));
        }
    }

    fn facts(dir: &Path) -> HostFacts {
        HostFacts {
            uid: 1000,
            gid: 1000,
            subuid_count: None,
            subgid_count: None,
            has_fuse: false,
            has_tun: false,
            cgroup_memory: false,
            cgroup_cpu: false,
            paths: BTreeMap::new(),
            image_path: None,
            image_ids: BTreeMap::new(),
            instance_dir: dir.display().to_string(),
            launcher: LauncherId {
                pid: 4242,
                start: 1,
                boot: "b".into(),
            },
            git: Vec::new(),
            canonical_sources: BTreeMap::new(),
            nproc_hard: None,
            cgroup_pids: false,
            containers_conf: Default::default(),
            host_addresses: Vec::new(),
            exec_server: None,
        }
    }

    /// Plans `network` in a fresh instance folder, stages it as `launch` does, and executes it
    /// over `fake`: the exit code, the calls, and whether the folder is gone.
    fn execute(network: serde_json::Value, tty: bool, fake: Fake) -> (i32, Vec<String>, bool) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb1");
        let spec: SandboxSpec = serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1", "name": "sb1", "image": "img", "argv": ["sh"],
            "workdir": "/w", "user": {"mode": "host-user", "home": "/home/u"},
            "network": network, "tty": tty,
        }))
        .unwrap();
        let plan = plan_launch(&validate_spec(&spec).unwrap(), &facts(&dir)).unwrap();
        fs::create_dir(&dir).unwrap();
        stage(&plan.stage).unwrap();
        let mut inst = Instance {
            dir: dir.clone(),
            launcher: facts(&dir).launcher,
            watchdog: None,
        };
        let log = fake.log.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let code = rt.block_on(run_instance(&fake, "sb1", &plan, &mut inst));
        let calls = log.borrow().clone();
        (code, calls, !dir.exists())
    }

    fn fake(exit: i32, ready: &'static str) -> Fake {
        Fake {
            log: Rc::default(),
            exit,
            ready,
        }
    }

    fn at(calls: &[String], call: &str) -> usize {
        calls
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("no {call:?} in {calls:?}"))
    }

    #[test]
    fn a_filtered_launch_runs_the_sandbox_beside_its_proxy_then_removes_both() {
        let ready = "{\"ready\":true,\"listen\":\"127.0.0.1:3128\",\"ca\":\"\"}\n";
        let (code, calls, gone) = execute(
            serde_json::json!({"mode": "filtered", "allow": ["a.com:443"], "enforcement": "enforce"}),
            false,
            fake(3, ready),
        );
        assert_eq!(code, 3, "{calls:?}");
        // The sandbox's podman first (its forwarder waits for the proxy), then the proxy's; at
        // the end the proxy is removed and waited for, and nothing is removed by label.
        assert!(
            at(&calls, "sandbox run") < at(&calls, "proxy run"),
            "{calls:?}"
        );
        assert!(
            at(&calls, "proxy run") < at(&calls, "rm sb1-egress"),
            "{calls:?}"
        );
        assert!(
            at(&calls, "ended sandbox") < at(&calls, "rm sb1-egress"),
            "{calls:?}"
        );
        assert!(
            at(&calls, "rm sb1-egress") < at(&calls, "ended proxy"),
            "{calls:?}"
        );
        assert!(
            !calls.iter().any(|c| c.starts_with("rm by launcher")),
            "{calls:?}"
        );
        // A warm proxy is asked for before anything starts (none waits here: one is started);
        // the pool's refill only once the launch's own proxy answered (decision 0175).
        assert!(
            at(&calls, "claim a warm proxy") < at(&calls, "sandbox run"),
            "{calls:?}"
        );
        assert!(
            at(&calls, "proxy run") < at(&calls, "refill the pool")
                && at(&calls, "refill the pool") < at(&calls, "ended sandbox"),
            "{calls:?}"
        );
        assert!(gone);
    }

    /// A signal with a claimed proxy (decision 0175): the proxy is let go — its claim
    /// connection shut, its removal begun — before the instance's containers and folder go, so
    /// it never runs on without its settings (it carries no label of this launcher).
    #[test]
    fn a_signal_lets_a_claimed_proxy_go_before_the_instance_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb1");
        fs::create_dir(&dir).unwrap();
        let inst = Instance {
            dir: dir.clone(),
            launcher: facts(&dir).launcher,
            watchdog: None,
        };
        let (ours, member) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut proxy = ProxyProcess::<FakeProcess> {
            child: None,
            name: "handler-proxy-pool-1".into(),
            claim: Some(ours),
        };
        let fake = fake(0, "");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let code = rt.block_on(stopped_by(&fake, &inst, 15, Some(&mut proxy), None));
        assert_eq!(code, 128 + 15);
        member.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(
            (&member).read(&mut buf).map_err(|e| e.kind()),
            Ok(0),
            "the member's connection ended, so it ends"
        );
        let calls = fake.log.borrow().clone();
        assert!(
            at(&calls, "rm in the background handler-proxy-pool-1")
                < at(&calls, "rm by launcher 4242"),
            "{calls:?}"
        );
        assert!(!dir.exists());
    }

    #[test]
    fn a_proxy_that_never_says_ready_stops_the_launch_and_everything_goes() {
        let (code, calls, gone) = execute(
            serde_json::json!({"mode": "filtered", "allow": [], "enforcement": "enforce"}),
            false,
            fake(0, ""),
        );
        assert_eq!(code, exit::SETUP_FAILED, "{calls:?}");
        // Killed, its image looked for (to say it is not built), the launcher's containers and
        // folder removed, the sandbox's podman killed.
        assert!(
            at(&calls, "kill proxy")
                < at(
                    &calls,
                    "image exists localhost/handler-network-filter:latest"
                )
        );
        assert!(
            at(&calls, "rm by launcher 4242") < at(&calls, "kill sandbox"),
            "{calls:?}"
        );
        assert!(gone);
    }

    #[test]
    fn without_a_proxy_the_sandboxs_code_is_the_launchs_and_125_is_a_failed_setup() {
        let (code, calls, gone) = execute(serde_json::json!({"mode": "none"}), false, fake(7, ""));
        assert_eq!((code, gone), (7, true), "{calls:?}");
        assert_eq!(calls, ["sandbox run", "ended sandbox"]);
        let (code, calls, _) = execute(serde_json::json!({"mode": "none"}), false, fake(125, ""));
        assert_eq!(code, exit::SETUP_FAILED);
        assert_eq!(
            calls,
            ["sandbox run", "ended sandbox", "rm by launcher 4242"]
        );
    }

    #[test]
    fn a_tty_launch_creates_waits_for_attach_then_for_the_container() {
        let (code, calls, gone) = execute(serde_json::json!({"mode": "none"}), true, fake(0, ""));
        assert_eq!((code, gone), (0, true), "{calls:?}");
        assert_eq!(
            calls,
            [
                "sandbox create",
                "ended sandbox",
                "state sb1",
                "wait sb1",
                "rm by launcher 4242"
            ]
        );
    }
}
