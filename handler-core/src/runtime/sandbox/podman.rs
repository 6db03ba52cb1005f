//! Calls to the podman CLI (decision 0001: the CLI, not podman-api): one function that runs a
//! podman command and gives its output, or an error with podman's own words; and the
//! [`Podman`] trait, what `launch` executes a plan over (its containers, their processes), with
//! [`PodmanCli`], the implementation that runs the podman CLI.

use std::future::Future;
use std::time::Duration;

use handler_sandbox::LaunchPlan;
use handler_sandbox::facts::LauncherId;
use handler_sandbox::plan::labels;
use tokio::io::{AsyncRead, AsyncWrite};

use super::stderr::{self, Source};

use std::process::{Command, Output, Stdio};

/// The engine's executable: `$HANDLER_PODMAN`, else `podman` on PATH (Docker's: `$HANDLER_DOCKER`,
/// else `docker`; [`super::engine`]).
pub fn program() -> String {
    super::engine::current().program()
}

/// A podman command with these arguments (stdin closed).
pub(crate) fn command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut c = Command::new(program());
    c.args(args).stdin(Stdio::null());
    c
}

/// A podman call that failed.
#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    #[error("cannot run {program}: {source}")]
    /// podman could not be run at all.
    Spawn {
        /// The podman executable tried.
        program: String,
        /// Why it could not be run.
        source: std::io::Error,
    },
    #[error("{} {verb} failed: {stderr}", super::engine::current().name())]
    /// podman ran and failed.
    Failed {
        /// Its verb (the first two arguments).
        verb: String,
        /// Its exit code, if it exited.
        code: Option<i32>,
        /// What it wrote on stderr.
        stderr: String,
    },
}

/// Runs podman with `args`, capturing stdout and stderr.
pub(crate) fn output(args: &[&str]) -> Result<Output, PodmanError> {
    command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| PodmanError::Spawn {
            program: program(),
            source,
        })
}

/// Runs podman with `args`; its stdout when it succeeds.
pub fn run(args: &[&str]) -> Result<String, PodmanError> {
    let out = output(args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(PodmanError::Failed {
            verb: args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs podman with `args` and reads its stdout as JSON.
pub fn json(args: &[&str]) -> Result<serde_json::Value, PodmanError> {
    let text = run(args)?;
    let text = if text.trim().is_empty() {
        "null"
    } else {
        text.trim()
    };
    serde_json::from_str(text).map_err(|e| PodmanError::Failed {
        verb: args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
        code: None,
        stderr: format!("unreadable JSON output: {e}"),
    })
}

/// Makes a podman child of the launcher die with it (SIGKILL when the launcher ends, also by
/// SIGKILL): a podman left running after its launcher could still create or keep a container
/// nobody removes. The launcher spawns from its one (main) thread, which lives as long as it.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes two system calls
    // (prctl, getppid), both async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The launcher died before the line above: end at once.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// [`die_with_parent`] for a `std` command (a helper the runtime spawns: a machine exec's
/// follower of its proxy's log). The kernel's "parent" is the spawning *thread*: spawn from
/// one that lives as long as the helper should.
#[allow(unsafe_code)]
pub fn die_with_parent_std(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = nix::unistd::getpid();
    // SAFETY: as in die_with_parent: two async-signal-safe system calls, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Starts `cmd` in the background, in a process group of its own and without stdio, not
/// waited for: it goes on after the launcher (a thread reaps it if the launcher is still there).
pub fn spawn_detached(mut cmd: std::process::Command) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    if let Ok(mut child) = cmd.spawn() {
        std::thread::spawn(move || child.wait());
    }
}

/// A podman process the launcher started (`podman run`, `podman create`).
pub trait PodmanProcess {
    /// Waits for it to end.
    fn wait(&mut self) -> impl Future<Output = std::io::Result<std::process::ExitStatus>>;
    /// Kills it (SIGKILL) without waiting.
    fn start_kill(&mut self) -> std::io::Result<()>;
}

impl PodmanProcess for tokio::process::Child {
    fn wait(&mut self) -> impl Future<Output = std::io::Result<std::process::ExitStatus>> {
        tokio::process::Child::wait(self)
    }

    fn start_kill(&mut self) -> std::io::Result<()> {
        tokio::process::Child::start_kill(self)
    }
}

/// Why a podman process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The pipe its stderr is relayed through could not be made.
    #[error("a pipe for its stderr: {0}")]
    Pipe(std::io::Error),
    /// podman itself could not be run.
    #[error(transparent)]
    Podman(#[from] PodmanError),
}

/// The proxy container's podman process with its stdin (the configuration goes there) and its
/// stdout (its ready line comes there).
pub struct ProxyIo<P> {
    /// The process.
    pub process: P,
    /// Its stdin.
    pub stdin: Box<dyn AsyncWrite + Unpin>,
    /// Its stdout.
    pub stdout: Box<dyn AsyncRead + Unpin>,
}

/// What the launcher asks of podman to execute a plan: the few calls `launch` really makes. The
/// processes it starts die with the launcher; their stderr reaches the launcher's through the
/// relays (decision 0037).
pub trait Podman {
    /// The processes it starts.
    type Process: PodmanProcess;

    /// Starts the sandbox container: `podman` with the plan's arguments and environment; stdio
    /// the launcher's own (none with tty), stderr relayed.
    fn spawn_sandbox(&self, plan: &LaunchPlan) -> Result<Self::Process, SpawnError>;

    /// Starts the proxy container: `podman` with `args`, its stdin and stdout piped back,
    /// stderr relayed as the proxy's.
    fn spawn_proxy(&self, args: &[String]) -> Result<ProxyIo<Self::Process>, SpawnError>;

    /// `podman rm -f --time 0 --ignore NAME`: whether it succeeded within `within`.
    fn remove(&self, name: &str, within: Duration) -> impl Future<Output = bool>;

    /// `remove` started in the background (its own process group, no stdio), not waited for.
    fn remove_detached(&self, name: &str);

    /// A warm proxy of the pool claimed for instance folder `inst` (decision 0175), if one waits.
    fn claim_warm_proxy(
        &self,
        inst: &std::path::Path,
    ) -> Option<crate::runtime::egress::pool::Claimed>;

    /// Tops the warm proxy pool up in the background.
    fn refill_proxy_pool(&self);

    /// The state of container `name` (`created`, `running`, `exited`…).
    fn state(&self, name: &str) -> Result<String, PodmanError>;

    /// `podman wait NAME`: the container's exit code, `None` when it cannot be told.
    fn wait_exit(&self, name: &str) -> impl Future<Output = Option<i32>>;

    /// Whether `image` exists locally.
    fn image_exists(&self, image: &str) -> bool;

    /// Removes every container labelled with launcher `l` (never another's).
    fn remove_containers_of(&self, l: &LauncherId);
}

/// [`Podman`] over the podman CLI ([`program`]).
#[derive(Debug, Clone, Default)]
pub struct PodmanCli;

impl Podman for PodmanCli {
    type Process = tokio::process::Child;

    fn spawn_sandbox(&self, plan: &LaunchPlan) -> Result<Self::Process, SpawnError> {
        let mut cmd = tokio::process::Command::new(program());
        cmd.args(&plan.args).envs(&plan.podman_env);
        die_with_parent(&mut cmd);
        // The process's stderr comes through the launcher (stderr::relay): only the launcher
        // writes event lines on its stderr (decision 0037).
        let err = stderr::piped(Source::Sandbox).map_err(SpawnError::Pipe)?;
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
        spawned.map_err(|source| {
            SpawnError::Podman(PodmanError::Spawn {
                program: program(),
                source,
            })
        })
    }

    fn spawn_proxy(&self, args: &[String]) -> Result<ProxyIo<Self::Process>, SpawnError> {
        // Its stderr (events and log lines) comes on a pipe of its own that the launcher
        // relays: the sandbox cannot write there (decision 0037). Its podman dies with the
        // launcher.
        let err = stderr::piped(Source::Proxy).map_err(SpawnError::Pipe)?;
        let mut cmd = tokio::process::Command::new(program());
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let spawned = cmd.spawn();
        drop(cmd);
        let mut child = spawned.map_err(|source| {
            SpawnError::Podman(PodmanError::Spawn {
                program: program(),
                source,
            })
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(SpawnError::Pipe(std::io::Error::other(
                "no stdin or stdout",
            )));
        };
        Ok(ProxyIo {
            process: child,
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
        })
    }

    async fn remove(&self, name: &str, within: Duration) -> bool {
        let rm = tokio::process::Command::new(program())
            .args(super::engine::current().rm_args(0))
            .arg(name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        matches!(tokio::time::timeout(within, rm).await, Ok(Ok(s)) if s.success())
    }

    fn remove_detached(&self, name: &str) {
        let mut rm = std::process::Command::new(program());
        rm.args(super::engine::current().rm_args(0)).arg(name);
        spawn_detached(rm);
    }

    fn claim_warm_proxy(
        &self,
        inst: &std::path::Path,
    ) -> Option<crate::runtime::egress::pool::Claimed> {
        crate::runtime::egress::pool::claim(inst)
    }

    fn refill_proxy_pool(&self) {
        crate::runtime::egress::pool::spawn_refill();
    }

    fn state(&self, name: &str) -> Result<String, PodmanError> {
        run(&[
            "container",
            "inspect",
            "--format",
            "{{.State.Status}}",
            name,
        ])
        .map(|s| s.trim().to_string())
    }

    async fn wait_exit(&self, name: &str) -> Option<i32> {
        let mut wait = tokio::process::Command::new(program());
        die_with_parent(&mut wait);
        wait.args(["wait", name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let out = wait.output().await.ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    }

    fn image_exists(&self, image: &str) -> bool {
        command(super::engine::current().image_exists_args(image))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn remove_containers_of(&self, l: &LauncherId) {
        let pid = format!("label={}={}", labels::LAUNCHER_PID, l.pid);
        let start = format!("label={}={}", labels::LAUNCHER_START, l.start);
        match run(&["ps", "-a", "-q", "--filter", &pid, "--filter", &start]) {
            Ok(ids) => {
                let ids: Vec<&str> = ids.split_whitespace().collect();
                if !ids.is_empty() {
                    let rm = super::engine::current().rm_args(3);
                    let mut args: Vec<&str> = rm.iter().map(String::as_str).collect();
                    args.extend(ids);
                    if let Err(e) = run(&args) {
                        super::log(&format!("cleanup: {e}"));
                    }
                }
            }
            Err(e) => super::log(&format!("cleanup: {e}")),
        }
    }
}
