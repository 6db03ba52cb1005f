//! The launcher: the platform's sandbox executable (`handler-sandbox-podman`, contract A) run
//! with the SandboxSpec on fd 3 — secrets travel only there, never in argv or env — its stdio
//! the agent's ACP stream, its stderr logs and egress events. Also its `set-egress`, `set-allow` and
//! `sweep` verbs.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use handler_contracts::SandboxSpec;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Enforcement;
use handler_sandbox::verbs::{self, CacheVerb, Verb};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// A launch or a verb that failed.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// The sandbox executable cannot be started.
    #[error("cannot run the sandbox executable {program}: {source}")]
    Spawn {
        /// The executable.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The spec cannot be written to fd 3 (or the child's stdio taken).
    #[error("cannot hand the spec to the sandbox executable: {0}")]
    Spec(String),
    /// A verb failed (its stderr, bounded).
    #[error("{verb} exited with {code:?}: {stderr}")]
    Verb {
        /// The verb.
        verb: String,
        /// Its exit code (none: killed, or timed out).
        code: Option<i32>,
        /// What it printed on stderr, at most 2000 characters.
        stderr: String,
    },
}

/// A running sandbox: the launcher process and its stdio.
#[derive(Debug)]
pub struct Instance {
    /// The spec's name.
    pub name: String,
    /// The launcher process.
    pub child: Child,
    /// The agent's ACP input.
    pub stdin: ChildStdin,
    /// The agent's ACP output.
    pub stdout: ChildStdout,
    /// The launcher's logs and egress events.
    pub stderr: ChildStderr,
}

/// Boxed futures, so the trait stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the control plane needs of a sandbox runtime (contract A's binding).
pub trait Launcher: Send + Sync + std::fmt::Debug {
    /// Starts `launch` with the spec on fd 3.
    fn launch(&self, spec: &SandboxSpec) -> Result<Instance, LauncherError>;
    /// `set-egress <name> enforce|log-only` on a running instance (A.4).
    fn set_egress<'a>(
        &'a self,
        name: &'a str,
        e: Enforcement,
    ) -> BoxFuture<'a, Result<(), LauncherError>>;
    /// `set-allow <name> [entry …]` on a running instance: replaces its allow-list (A.4).
    fn set_allow<'a>(
        &'a self,
        name: &'a str,
        entries: &'a [AllowEntry],
    ) -> BoxFuture<'a, Result<(), LauncherError>>;
    /// `sweep`: removes what launchers that died left behind.
    fn sweep(&self) -> BoxFuture<'_, Result<String, LauncherError>>;
    /// `proxy-pool fill`: a warm proxy for the first filtered agent (decision 0175). Nothing
    /// for a runtime without a pool.
    fn warm_proxy_pool(&self) -> BoxFuture<'_, Result<String, LauncherError>> {
        Box::pin(async { Ok(String::new()) })
    }
    /// Starts `keep` (issue 28 item 6) with the spec on fd 3, out of handlerd's process group
    /// and with no stdio of handlerd's: the agent's stdio is served on `keep.socket`, so the
    /// sandbox outlives this daemon. Answers the keeper process.
    fn launch_kept(&self, spec: &SandboxSpec, keep: &verbs::Keep) -> Result<Child, LauncherError> {
        let _ = (spec, keep);
        Err(no_verb("keep"))
    }
    /// Starts `keep --machine ID` with the ExecSpec on fd 3, as [`Launcher::launch_kept`]: a
    /// session's agent in machine `keep.machine` outlives the daemon (decision 0167).
    fn machine_exec_kept(
        &self,
        exec: &handler_contracts::machine::ExecSpec,
        keep: &verbs::Keep,
    ) -> Result<Child, LauncherError> {
        let _ = (exec, keep);
        Err(no_verb("keep"))
    }
    /// Starts a tty `launch` (D.16) out of handlerd's reach: in a session of its own (a
    /// `systemd-run --user --scope` when `in_unit`), stdout and stderr into `log`; answers the
    /// launcher process and the argv that attaches to the sandbox.
    fn launch_terminal(
        &self,
        spec: &SandboxSpec,
        log: std::fs::File,
        in_unit: bool,
    ) -> Result<(Child, Vec<String>), LauncherError> {
        let _ = (spec, log, in_unit);
        Err(LauncherError::Spec(
            "this launcher cannot start terminals".into(),
        ))
    }

    /// `cache size PATH…` (A.9): the runtime's output, one `{"path", "bytes"}` line per folder
    /// (files written with inner ids counted).
    fn cache_size<'a>(
        &'a self,
        paths: &'a [String],
    ) -> BoxFuture<'a, Result<String, LauncherError>> {
        let _ = paths;
        Box::pin(async { Err(no_verb("cache size")) })
    }
    /// `cache clear PATH…` (A.9): empties each folder, refused while a sandbox mounts it.
    fn cache_clear<'a>(&'a self, paths: &'a [String]) -> BoxFuture<'a, Result<(), LauncherError>> {
        let _ = paths;
        Box::pin(async { Err(no_verb("cache clear")) })
    }

    /// `machine …` (issue 29): the verb with `doc` (a MachineSpec or an ExecSpec) on fd 3 when
    /// given; its stdout.
    fn machine<'a>(
        &'a self,
        verb: &'a verbs::MachineVerb,
        doc: Option<Vec<u8>>,
    ) -> BoxFuture<'a, Result<String, LauncherError>> {
        let _ = (verb, doc);
        Box::pin(async { Err(no_verb("machine")) })
    }

    /// `machine exec ID` (issue 29) with `exec` on fd 3, its stdio piped: the process in the
    /// machine as an [`Instance`] named by the machine.
    fn machine_exec(
        &self,
        id: &str,
        exec: &handler_contracts::machine::ExecSpec,
    ) -> Result<Instance, LauncherError> {
        let _ = (id, exec);
        Err(no_verb("machine exec"))
    }

    /// `git-follow` (issue 14, item 3).
    fn git_follow<'a>(&'a self, f: &'a verbs::Follow) -> BoxFuture<'a, Result<(), LauncherError>> {
        let _ = f;
        Box::pin(async { Err(no_verb("git-follow")) })
    }
    /// `git-copy` (decision 0103: `sessionTree = "copy"`'s checkout and uncommitted work).
    fn git_copy<'a>(&'a self, c: &'a verbs::Copy) -> BoxFuture<'a, Result<(), LauncherError>> {
        let _ = c;
        Box::pin(async { Err(no_verb("git-copy")) })
    }
    /// `git-bundle` (issue 14): the bundle's bytes (its exit codes 3 nothing new, 4 no git in
    /// the image come back as [`LauncherError::Verb`]).
    fn git_bundle<'a>(
        &'a self,
        b: &'a verbs::Bundle,
    ) -> BoxFuture<'a, Result<Vec<u8>, LauncherError>> {
        let _ = b;
        Box::pin(async { Err(no_verb("git-bundle")) })
    }
}

fn no_verb(verb: &str) -> LauncherError {
    LauncherError::Verb {
        verb: verb.into(),
        code: None,
        stderr: format!("this launcher has no {verb} verb"),
    }
}

/// The sandbox executable, e.g. `["handler-sandbox-podman"]` (or a wrapper that runs it as
/// another user: fds are inherited).
#[derive(Debug, Clone)]
pub struct ProcessLauncher {
    /// The program and its first arguments; the verb follows them.
    pub command: Vec<String>,
    /// The daemon's state folder: each launch is recorded there ([`super::records`]), so the
    /// next daemon stops what this one left (F.6.5). None: not recorded.
    pub records: Option<std::path::PathBuf>,
}

impl ProcessLauncher {
    fn command(&self, verb: &Verb) -> Command {
        let mut c = Command::new(&self.command[0]);
        c.args(&self.command[1..]).args(verb.to_args());
        c
    }

    async fn run_verb(&self, verb: &Verb) -> Result<String, LauncherError> {
        self.run_verb_bytes(verb)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    async fn run_verb_bytes(&self, verb: &Verb) -> Result<Vec<u8>, LauncherError> {
        let name = verb.to_args().swap_remove(0);
        let mut c = self.command(verb);
        c.stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(90), c.output())
            .await
            .map_err(|_| LauncherError::Verb {
                verb: name.clone(),
                code: None,
                stderr: "timed out after 90 s".into(),
            })?
            .map_err(|source| LauncherError::Spawn {
                program: self.command[0].clone(),
                source,
            })?;
        outcome(&name, out)
    }
}

/// A verb's output: its stdout when it succeeded, else its code and stderr (bounded).
fn outcome(verb: &str, out: std::process::Output) -> Result<Vec<u8>, LauncherError> {
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(LauncherError::Verb {
        verb: verb.to_string(),
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr)
            .trim()
            .chars()
            .take(2000)
            .collect(),
    })
}

/// Spawns `c` (`program` names it in errors) with `doc` on its fd 3 — a pipe written by a
/// thread and closed once written: the one way a spec reaches the sandbox executable (A:
/// secrets travel only there, never in argv or env).
fn spawn_with_doc(mut c: Command, doc: Vec<u8>, program: &str) -> Result<Child, LauncherError> {
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| LauncherError::Spec(e.to_string()))?;
    let mut writer = std::fs::File::from(writer);
    c.fd_mappings(vec![FdMapping {
        parent_fd: reader,
        child_fd: 3,
    }])
    .map_err(|e| LauncherError::Spec(e.to_string()))?;
    let child = c.spawn().map_err(|source| LauncherError::Spawn {
        program: program.to_string(),
        source,
    })?;
    // Our copy of the read end goes with the command; the writer is closed once written.
    drop(c);
    std::thread::spawn(move || {
        let _ = writer.write_all(&doc);
    });
    Ok(child)
}

impl ProcessLauncher {
    /// `keep` with `doc` (its SandboxSpec or ExecSpec) on fd 3, its stdio none of handlerd's.
    fn kept(&self, doc: Vec<u8>, keep: &verbs::Keep) -> Result<Child, LauncherError> {
        let mut c = self.command(&Verb::Keep(keep.clone()));
        // Its own process group: a ^C to handlerd's terminal, or handlerd's end, is not its.
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        spawn_with_doc(c, doc, &self.command[0])
    }

    /// `verb` with `doc` on fd 3 and its stdio piped, as instance `name`.
    fn piped(&self, verb: &Verb, doc: Vec<u8>, name: &str) -> Result<Instance, LauncherError> {
        let mut c = self.command(verb);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = spawn_with_doc(c, doc, &self.command[0])?;
        let no = |what: &str| LauncherError::Spec(format!("no {what}"));
        Ok(Instance {
            name: name.to_string(),
            stdin: child.stdin.take().ok_or_else(|| no("stdin"))?,
            stdout: child.stdout.take().ok_or_else(|| no("stdout"))?,
            stderr: child.stderr.take().ok_or_else(|| no("stderr"))?,
            child,
        })
    }
}

impl Launcher for ProcessLauncher {
    fn launch(&self, spec: &SandboxSpec) -> Result<Instance, LauncherError> {
        let json = serde_json::to_vec(spec).map_err(|e| LauncherError::Spec(e.to_string()))?;
        let inst = self.piped(&Verb::Launch, json, &spec.name)?;
        if let (Some(state), Some(pid)) = (&self.records, inst.child.id())
            && let Err(e) = super::records::record(state, &spec.name, pid, None)
        {
            tracing::warn!(sandbox = %spec.name, error = %e, "launch not recorded: a later handlerd will not stop it");
        }
        Ok(inst)
    }

    fn machine_exec(
        &self,
        id: &str,
        exec: &handler_contracts::machine::ExecSpec,
    ) -> Result<Instance, LauncherError> {
        let json = serde_json::to_vec(exec).map_err(|e| LauncherError::Spec(e.to_string()))?;
        let verb = Verb::Machine(verbs::MachineVerb::Exec { id: id.into() });
        self.piped(&verb, json, id)
    }

    fn launch_kept(&self, spec: &SandboxSpec, keep: &verbs::Keep) -> Result<Child, LauncherError> {
        let json = serde_json::to_vec(spec).map_err(|e| LauncherError::Spec(e.to_string()))?;
        self.kept(json, keep)
    }

    fn machine_exec_kept(
        &self,
        exec: &handler_contracts::machine::ExecSpec,
        keep: &verbs::Keep,
    ) -> Result<Child, LauncherError> {
        let json = serde_json::to_vec(exec).map_err(|e| LauncherError::Spec(e.to_string()))?;
        self.kept(json, keep)
    }

    fn set_egress<'a>(
        &'a self,
        name: &'a str,
        e: Enforcement,
    ) -> BoxFuture<'a, Result<(), LauncherError>> {
        Box::pin(async move {
            self.run_verb(&Verb::SetEgress {
                name: name.into(),
                mode: e.as_str().into(),
            })
            .await
            .map(|_| ())
        })
    }

    fn set_allow<'a>(
        &'a self,
        name: &'a str,
        entries: &'a [AllowEntry],
    ) -> BoxFuture<'a, Result<(), LauncherError>> {
        Box::pin(async move {
            let entries = entries.iter().map(|e| e.as_str().to_string()).collect();
            self.run_verb(&Verb::SetAllow {
                name: name.into(),
                entries,
            })
            .await
            .map(|_| ())
        })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<String, LauncherError>> {
        Box::pin(async move { self.run_verb(&Verb::Sweep).await })
    }

    fn warm_proxy_pool(&self) -> BoxFuture<'_, Result<String, LauncherError>> {
        Box::pin(async move {
            self.run_verb(&Verb::ProxyPool(verbs::PoolVerb::Fill { after_ms: 0 }))
                .await
        })
    }

    fn cache_size<'a>(
        &'a self,
        paths: &'a [String],
    ) -> BoxFuture<'a, Result<String, LauncherError>> {
        Box::pin(async move {
            let paths = paths.to_vec();
            self.run_verb(&Verb::Cache(CacheVerb::Size { paths })).await
        })
    }

    fn cache_clear<'a>(&'a self, paths: &'a [String]) -> BoxFuture<'a, Result<(), LauncherError>> {
        Box::pin(async move {
            let paths = paths.to_vec();
            self.run_verb(&Verb::Cache(CacheVerb::Clear { paths }))
                .await
                .map(|_| ())
        })
    }

    fn launch_terminal(
        &self,
        spec: &SandboxSpec,
        log: std::fs::File,
        in_unit: bool,
    ) -> Result<(Child, Vec<String>), LauncherError> {
        let json = serde_json::to_vec(spec).map_err(|e| LauncherError::Spec(e.to_string()))?;
        let wrapper: &[&str] = if in_unit {
            &["systemd-run", "--user", "--scope", "--quiet", "--"]
        } else {
            &["setsid"]
        };
        let mut c = Command::new(wrapper[0]);
        c.args(&wrapper[1..])
            .args(&self.command)
            .args(Verb::Launch.to_args());
        let err = log
            .try_clone()
            .map_err(|e| LauncherError::Spec(e.to_string()))?;
        c.stdin(Stdio::null()).stdout(log).stderr(err);
        let child = spawn_with_doc(c, json, wrapper[0])?;
        let mut attach = self.command.clone();
        attach.extend(
            Verb::Attach {
                name: spec.name.clone(),
            }
            .to_args(),
        );
        Ok((child, attach))
    }

    fn git_bundle<'a>(
        &'a self,
        b: &'a verbs::Bundle,
    ) -> BoxFuture<'a, Result<Vec<u8>, LauncherError>> {
        Box::pin(async move { self.run_verb_bytes(&Verb::GitBundle(b.clone())).await })
    }

    fn git_copy<'a>(&'a self, c: &'a verbs::Copy) -> BoxFuture<'a, Result<(), LauncherError>> {
        Box::pin(async move { self.run_verb(&Verb::GitCopy(c.clone())).await.map(|_| ()) })
    }

    fn git_follow<'a>(&'a self, f: &'a verbs::Follow) -> BoxFuture<'a, Result<(), LauncherError>> {
        Box::pin(async move { self.run_verb(&Verb::GitFollow(f.clone())).await.map(|_| ()) })
    }

    fn machine<'a>(
        &'a self,
        verb: &'a verbs::MachineVerb,
        doc: Option<Vec<u8>>,
    ) -> BoxFuture<'a, Result<String, LauncherError>> {
        Box::pin(async move {
            let verb = Verb::Machine(verb.clone());
            let Some(doc) = doc else {
                return self.run_verb(&verb).await;
            };
            let mut c = self.command(&verb);
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let child = spawn_with_doc(c, doc, &self.command[0])?;
            let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
                .await
                .map_err(|_| LauncherError::Verb {
                    verb: "machine".into(),
                    code: None,
                    stderr: "timed out after 300 s".into(),
                })?
                .map_err(|e| LauncherError::Spec(e.to_string()))?;
            outcome("machine", out).map(|b| String::from_utf8_lossy(&b).into_owned())
        })
    }
}

/// Stops a launcher: SIGTERM (it stops and cleans up its sandbox, A4), SIGKILL after `grace`.
/// Returns its exit code (None when killed by a signal).
pub async fn stop(child: &mut Child, grace: Duration) -> Option<i32> {
    if let Ok(Some(st)) = child.try_wait() {
        return st.code();
    }
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(st)) => st.code(),
        _ => {
            tracing::warn!("sandbox launcher did not stop after SIGTERM: killing it");
            let _ = child.kill().await;
            None
        }
    }
}

/// Stops a launcher as [`stop`] does; when it did not end with an exit code of its own (killed
/// by a signal: by someone else, or by `stop` after the grace), it could not remove its sandbox,
/// so what dead launchers left is swept at once (its watchdog does the same; this covers a
/// launcher that has none, or whose watchdog was killed too).
pub async fn stop_and_sweep(
    launcher: &dyn Launcher,
    child: &mut Child,
    grace: Duration,
) -> Option<i32> {
    let code = stop(child, grace).await;
    if code.is_none() {
        tracing::warn!("a sandbox launcher was killed: sweeping what it left");
        if let Err(e) = launcher.sweep().await {
            tracing::warn!(error = %e, "sweep after a killed launcher failed");
        }
    }
    code
}

/// Reads a launcher's stderr to its end in bounded lines ([`crate::lines::MAX_LINE`]): `event`
/// gets each whole line that is an egress event, `text` every other line or piece (a long line
/// comes in pieces, none of which is taken for an event).
pub async fn read_stderr(
    stderr: impl tokio::io::AsyncRead + Unpin,
    mut event: impl FnMut(handler_contracts::sandbox::EgressEvent),
    mut text: impl FnMut(String),
) {
    crate::lines::for_each_piece(stderr, crate::lines::MAX_LINE + 64, |p| {
        let line = String::from_utf8_lossy(p.bytes);
        match handler_contracts::sandbox::EgressEvent::from_line(&line).filter(|_| p.whole()) {
            Some(ev) => event(ev),
            None => text(line.into_owned()),
        }
    })
    .await;
}

/// The first text lines of a sandbox's stderr (egress events left out), read in the background
/// while a short-lived sandbox (an image's check or probe) runs, for its build log.
pub struct StderrTail {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl StderrTail {
    /// Starts reading `stderr`, keeping at most `cap` lines.
    pub fn collect(stderr: ChildStderr, cap: usize) -> Self {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let kept = lines.clone();
        let reader = tokio::spawn(async move {
            read_stderr(
                stderr,
                |_| {},
                |t| {
                    let mut v = kept
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if v.len() < cap {
                        v.push(t);
                    }
                },
            )
            .await;
        });
        StderrTail { lines, reader }
    }

    /// The lines kept, once stderr ended (or `within` passed: what was read by then).
    pub async fn finish(self, within: Duration) -> Vec<String> {
        let _ = tokio::time::timeout(within, self.reader).await;
        std::mem::take(
            &mut *self
                .lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}
