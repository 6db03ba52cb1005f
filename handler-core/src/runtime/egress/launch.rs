//! The launcher's side of the egress filter (A.3, A.4, D.4): starting the proxy container the
//! plan describes (`handler_sandbox::ProxyPlan`) with its configuration on stdin and waiting for
//! its ready line (fail closed: no proxy, no sandbox), `set-egress`/`set-allow`, and `image
//! build-proxy`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use handler_contracts::sandbox::Enforcement;
use handler_sandbox::ProxyPlan;
use handler_sandbox::egress::Settings;
use handler_sandbox::egress::topology::PROXY_IMAGE;
pub use handler_sandbox::egress::topology::READY_MARKER;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::runtime::sandbox::podman::{Podman, PodmanError, PodmanProcess, SpawnError};

/// How long the proxy has to say it is ready.
pub const PROXY_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long set-egress/set-allow wait for an instance still starting (A.4).
pub const STARTING_WAIT: Duration = Duration::from_secs(60);

/// The running proxy container's podman process (its stderr relayed by the launcher: events pass).
#[derive(Debug)]
pub struct ProxyProcess<C> {
    /// Its podman process (none for a member of the warm pool: its engine runs it detached).
    pub child: Option<C>,
    /// Its container's name.
    pub name: String,
    /// A claimed member's claim connection (decision 0175): shut down at the end, which ends it.
    pub claim: Option<std::os::unix::net::UnixStream>,
}

/// Why the proxy did not start (the sandbox then does not start either: fail closed, A1).
#[derive(Debug, thiserror::Error)]
pub enum ProxyStartError {
    /// Its configuration could not be serialized.
    #[error(transparent)]
    Config(#[from] serde_json::Error),
    /// The pipe its output is relayed through could not be made.
    #[error("a pipe for the proxy's output: {0}")]
    Pipe(std::io::Error),
    /// podman could not be run.
    #[error(transparent)]
    Podman(#[from] PodmanError),
    /// The network filter image is missing.
    #[error(
        "the network filter is not built yet ({image}): run {} image build-proxy", crate::runtime::sandbox::engine::current().executable()
    )]
    NotBuilt {
        /// The image looked for.
        image: String,
    },
    /// It started but did not say it is ready.
    #[error(
        "the egress proxy did not start ({why}; {status}); the sandbox is not started without it"
    )]
    DidNotStart {
        /// What happened instead of its ready line.
        why: String,
        /// How its podman ended.
        status: String,
    },
    /// The ready marker could not be written.
    #[error("egress settings folder: {0}")]
    ReadyMarker(std::io::Error),
}

/// Starts the proxy container of `plan` and waits for its ready line, then writes the ready
/// marker. Errors say what is missing.
pub async fn start_proxy<P: Podman>(
    podman: &P,
    plan: &ProxyPlan,
) -> Result<ProxyProcess<P::Process>, ProxyStartError> {
    let config = serde_json::to_string(&plan.config)?;
    let io = podman.spawn_proxy(&plan.args).map_err(|e| match e {
        SpawnError::Pipe(e) => ProxyStartError::Pipe(e),
        SpawnError::Podman(e) => ProxyStartError::Podman(e),
    })?;
    let (child, mut stdin) = (io.process, io.stdin);
    if let Err(e) = stdin.write_all(config.as_bytes()).await {
        // Its podman ended first (a broken pipe): say why as for any start that fails.
        drop(stdin);
        let why = format!("its configuration could not be given: {e}");
        return Err(failed_start(podman, plan, child, &why).await);
    }
    // Closed: the proxy reads its configuration to the end.
    drop(stdin);
    let mut lines = BufReader::new(io.stdout).lines();
    let line = tokio::time::timeout(PROXY_START_TIMEOUT, lines.next_line()).await;
    let why = match line {
        Ok(Ok(Some(l))) if l.contains("\"ready\":true") => {
            std::fs::write(&plan.ready_file, "").map_err(ProxyStartError::ReadyMarker)?;
            return Ok(ProxyProcess {
                child: Some(child),
                claim: None,
                name: plan.container.clone(),
            });
        }
        // Not echoed: only its ready line is expected there.
        Ok(Ok(Some(_))) => "it answered something else than its ready line".to_string(),
        Ok(Ok(None)) => "it ended without a ready line".to_string(),
        Ok(Err(e)) => format!("reading its ready line: {e}"),
        Err(_) => format!("no ready line within {} s", PROXY_START_TIMEOUT.as_secs()),
    };
    Err(failed_start(podman, plan, child, &why).await)
}

/// Stops a proxy that did not start and says why (the image missing, else what happened).
async fn failed_start<P: Podman>(
    podman: &P,
    plan: &ProxyPlan,
    mut child: P::Process,
    why: &str,
) -> ProxyStartError {
    let _ = child.start_kill();
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(st)) => format!("podman {st}"),
        _ => "podman did not end".to_string(),
    };
    if !podman.image_exists(&plan.image) {
        return ProxyStartError::NotBuilt {
            image: plan.image.clone(),
        };
    }
    ProxyStartError::DidNotStart {
        why: why.to_string(),
        status,
    }
}

impl<C: PodmanProcess> ProxyProcess<C> {
    /// Stops and removes the proxy container (`podman rm -f`: when `launch` returns, nothing of
    /// the instance is left, A4; a `--rm` container is otherwise removed later, by conmon), and
    /// waits for its `podman run` at most `within`. False when that failed (the caller then
    /// removes the instance's containers by label).
    pub async fn stop(&mut self, podman: &impl Podman<Process = C>, within: Duration) -> bool {
        if self.release_claimed(podman) {
            return true;
        }
        let removed = podman.remove(&self.name, within).await;
        let ended = match &mut self.child {
            Some(c) => matches!(tokio::time::timeout(within, c.wait()).await, Ok(Ok(_))),
            None => true,
        };
        removed && ended
    }
}

impl<C> ProxyProcess<C> {
    /// Ends a claimed member of the warm pool (decision 0175): it ends when its claim connection
    /// does, and its engine removes it (`--rm`); the removal is made sure of in the background,
    /// off the launch's end (issue 34 item 1). False when this proxy was not claimed (its
    /// container is the instance's, removed by name or by the launcher's labels).
    pub fn release_claimed<P: Podman>(&mut self, podman: &P) -> bool {
        let Some(conn) = self.claim.take() else {
            return false;
        };
        let _ = conn.shutdown(std::net::Shutdown::Both);
        podman.remove_detached(&self.name);
        true
    }
}

/// Gives a claimed member of the warm pool (decision 0175) the configuration of `plan` and waits
/// for its ready line on the claim connection, relaying its log lines before it; then its
/// events are relayed from the same connection as a started proxy's are, and the ready marker
/// is written. On failure the member is removed.
pub async fn start_claimed<P: Podman>(
    podman: &P,
    plan: &ProxyPlan,
    claimed: super::pool::Claimed,
) -> Result<ProxyProcess<P::Process>, ProxyStartError> {
    use crate::runtime::sandbox::stderr::{Source, relay};
    let super::pool::Claimed { stream, container } = claimed;
    let line = handler_sandbox::egress::pool::claim_line(&plan.config)?;
    let fail = |why: String| ProxyStartError::DidNotStart {
        why,
        status: format!("warm proxy {container}"),
    };
    let io = (|| {
        stream.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(stream)
    })();
    let mut conn = match io {
        Ok(c) => c,
        Err(e) => {
            let _ = podman.remove(&container, Duration::from_secs(10)).await;
            return Err(fail(format!("its claim connection: {e}")));
        }
    };
    let got = give_and_read_ready(&mut conn, &line);
    let left = match tokio::time::timeout(PROXY_START_TIMEOUT, got).await {
        Ok(Ok(left)) => left,
        Ok(Err(why)) => {
            let _ = podman.remove(&container, Duration::from_secs(10)).await;
            return Err(fail(why.to_string()));
        }
        Err(_) => {
            let _ = podman.remove(&container, Duration::from_secs(10)).await;
            return Err(fail(format!(
                "no ready line within {} s",
                PROXY_START_TIMEOUT.as_secs()
            )));
        }
    };
    let std_conn = conn.into_std().and_then(|c| {
        c.set_nonblocking(false)?;
        Ok(c)
    });
    let std_conn = std_conn.and_then(|c| Ok((c.try_clone()?, c)));
    let claim = match std_conn {
        Ok((held, c)) => {
            relay(
                std::io::Read::chain(std::io::Cursor::new(left), c),
                Source::Proxy,
            );
            held
        }
        Err(e) => {
            let _ = podman.remove(&container, Duration::from_secs(10)).await;
            return Err(fail(format!("its claim connection: {e}")));
        }
    };
    std::fs::write(&plan.ready_file, "").map_err(ProxyStartError::ReadyMarker)?;
    Ok(ProxyProcess {
        child: None,
        name: container,
        claim: Some(claim),
    })
}

/// What set-egress/set-allow change.
#[derive(Debug, Clone)]
pub enum Change {
    /// Switch the enforcement (enforce or report).
    Enforcement(Enforcement),
    /// Replace the allow-list.
    Allow(Vec<handler_contracts::allow::AllowEntry>),
}

/// Why a live change failed, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no running sandbox named {0}")]
    /// No instance of that name runs.
    NoInstance(String),
    #[error("{0} is not filtered: its network cannot be switched (A.4)")]
    /// The instance's network is not filtered: nothing to switch.
    NotFiltered(String),
    #[error("{0} did not finish starting within 60 s")]
    /// The instance did not finish starting within the wait.
    Starting(String),
    #[error("cannot apply the change: {0}")]
    /// The settings could not be read, locked or written.
    Io(String),
}

impl ChangeError {
    /// 1 for no such instance or I/O, 64 for a sandbox that is not filtered, 66 still starting.
    pub fn exit_code(&self) -> i32 {
        match self {
            ChangeError::NoInstance(_) | ChangeError::Io(_) => 1,
            ChangeError::NotFiltered(_) => handler_contracts::sandbox::exit::UNENFORCEABLE,
            ChangeError::Starting(_) => handler_contracts::sandbox::exit::SETUP_FAILED,
        }
    }
}

/// Applies a change to the instance folder `dir` (`<runtime base>/<name>`): waits for a starting
/// instance's proxy (60 s at most), then rewrites its settings atomically.
pub fn apply_change(dir: &Path, name: &str, change: Change) -> Result<Settings, ChangeError> {
    apply_change_within(dir, name, change, STARTING_WAIT)
}

/// [`apply_change`] with another wait (tests).
pub fn apply_change_within(
    dir: &Path,
    name: &str,
    change: Change,
    wait: Duration,
) -> Result<Settings, ChangeError> {
    let settings_dir: PathBuf = dir.join("egress");
    let deadline = Instant::now() + wait;
    loop {
        if !dir.exists() {
            return Err(ChangeError::NoInstance(name.to_string()));
        }
        if settings_dir.join(READY_MARKER).exists() {
            break;
        }
        if dir.join("launcher").exists()
            && !settings_dir.exists()
            && Instant::now() > deadline - wait + Duration::from_secs(5)
        {
            // Staged without egress settings five seconds into waiting: not a filtered instance.
            return Err(ChangeError::NotFiltered(name.to_string()));
        }
        if Instant::now() >= deadline {
            return Err(ChangeError::Starting(name.to_string()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // One change at a time: two set-allow/set-egress at once each read, change and write the
    // whole file, so without the lock one's change could be lost. The lock file is in the
    // instance folder (neither container mounts it) and goes with it.
    let _lock = lock_settings(dir)?;
    let file = settings_dir.join("settings.json");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ChangeError::NotFiltered(name.to_string()));
        }
        Err(e) => return Err(ChangeError::Io(e.to_string())),
    };
    let mut s = Settings::parse(&text).map_err(|e| ChangeError::Io(e.to_string()))?;
    match change {
        Change::Enforcement(e) => s.enforcement = e,
        Change::Allow(a) => s.allow = a,
    }
    super::write_settings(&file, &s).map_err(|e| ChangeError::Io(e.to_string()))?;
    Ok(s)
}

/// The lock file of an instance's settings.
pub const SETTINGS_LOCK: &str = "egress.lock";

/// Takes the instance's settings lock (flock, released when dropped or when the process ends).
fn lock_settings(dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, ChangeError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(SETTINGS_LOCK))
        .map_err(|e| ChangeError::Io(format!("the settings lock: {e}")))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| ChangeError::Io(format!("the settings lock: {e}")))
}

/// Whether an ELF file is statically linked (no program interpreter).
pub fn is_static_elf(bytes: &[u8]) -> bool {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        o + 4 <= bytes.len()
            && u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes")) != 3
    })
}

/// Why the network filter image was not built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildProxyError {
    /// The proxy binary cannot be read.
    #[error(
        "the egress proxy binary {}: {source} (.ci/install.sh puts a static one beside handler-sandbox-podman; HANDLER_EGRESS_PROXY_BIN names another)",
        path.display()
    )]
    NoBinary {
        /// Where it was looked for.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The proxy binary is dynamically linked.
    #[error(
        "{} is not a static binary (the network filter image is FROM scratch): install Handler with .ci/install.sh, or build one with fixtures/egress/build-static-proxy.sh and give it in HANDLER_EGRESS_PROXY_BIN",
        .0.display()
    )]
    NotStatic(PathBuf),
    /// `$HANDLER_EGRESS_EXTRA_ROOTS` names a file with no PEM certificate.
    #[error("{EXTRA_ROOTS_VAR} {}: no PEM certificate in it", .0.display())]
    NoExtraRoots(PathBuf),
    /// A file of the build could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was read or written.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The engine failed a step; its stderr.
    #[error("{engine} {step} failed: {stderr}")]
    Engine {
        /// `podman` or `docker`.
        engine: &'static str,
        /// `build` or `tag`.
        step: &'static str,
        /// What it said.
        stderr: String,
    },
    /// The new image does not start.
    #[error("the new network filter image does not run: {0}")]
    DoesNotRun(String),
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> BuildProxyError {
    let what = what.to_string();
    move |source| BuildProxyError::Io { what, source }
}

fn engine_failed(step: &'static str, stderr: &[u8]) -> BuildProxyError {
    BuildProxyError::Engine {
        engine: crate::runtime::sandbox::engine::current().name(),
        step,
        stderr: String::from_utf8_lossy(stderr).into_owned(),
    }
}

/// The proxy binary for the image: `$HANDLER_EGRESS_PROXY_BIN`, else `handler-egress-proxy`
/// beside this executable; it must be static (the image is FROM scratch).
pub fn proxy_binary() -> Result<PathBuf, BuildProxyError> {
    let path = match std::env::var_os("HANDLER_EGRESS_PROXY_BIN") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(io("this executable's path"))?
            .with_file_name("handler-egress-proxy"),
    };
    let bytes = std::fs::read(&path).map_err(|source| BuildProxyError::NoBinary {
        path: path.clone(),
        source,
    })?;
    if !is_static_elf(&bytes) {
        return Err(BuildProxyError::NotStatic(path));
    }
    Ok(path)
}

/// The variable naming a PEM file of further roots the network filter trusts towards upstreams
/// (a company CA, a test CA); they go into the image's roots, so into the sandboxes' bundle too.
pub const EXTRA_ROOTS_VAR: &str = "HANDLER_EGRESS_EXTRA_ROOTS";

/// The roots of `$HANDLER_EGRESS_EXTRA_ROOTS`, checked to be PEM certificates; none when unset.
fn extra_roots() -> Result<Vec<u8>, BuildProxyError> {
    let Some(path) = std::env::var_os(EXTRA_ROOTS_VAR) else {
        return Ok(Vec::new());
    };
    let path = PathBuf::from(path);
    let text = std::fs::read_to_string(&path)
        .map_err(io(format!("{EXTRA_ROOTS_VAR} {}", path.display())))?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(BuildProxyError::NoExtraRoots(path));
    }
    let mut out = b"\n".to_vec();
    out.extend(text.into_bytes());
    out.push(b'\n');
    Ok(out)
}

/// `image build-proxy`: builds the network filter image (FROM scratch: the static proxy and the
/// build host's roots), without cache, checks that it runs, and tags it. Exit 0 or 1.
pub fn build_proxy(podman: &str) -> Result<String, BuildProxyError> {
    let bin = proxy_binary()?;
    let ctx = std::env::temp_dir().join(format!("handler-build-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ctx);
    std::fs::create_dir_all(&ctx).map_err(io(ctx.display()))?;
    let result = build_context(&bin, &ctx).and_then(|()| build_image(podman, &ctx));
    let _ = std::fs::remove_dir_all(&ctx);
    result
}

/// The build context in `ctx`: the static proxy `bin`, the host's roots (and the extra ones),
/// the Containerfile.
fn build_context(bin: &Path, ctx: &Path) -> Result<(), BuildProxyError> {
    std::fs::copy(bin, ctx.join("handler-egress-proxy")).map_err(io("copying the proxy"))?;
    let mut roots = std::fs::read("/etc/ssl/certs/ca-certificates.crt")
        .map_err(io("the host's roots /etc/ssl/certs/ca-certificates.crt"))?;
    roots.extend(extra_roots()?);
    std::fs::write(ctx.join("ca-certificates.crt"), roots).map_err(io("writing the roots"))?;
    let mut f = std::fs::File::create(ctx.join("Containerfile"))
        .map_err(io("writing the Containerfile"))?;
    f.write_all(
        b"FROM scratch\nLABEL handler.network-filter=1\n# Its binary runs a machine's execs too (decision 0171).\nLABEL handler.exec-server=1\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n\
          COPY handler-egress-proxy /handler-egress-proxy\nENTRYPOINT [\"/handler-egress-proxy\"]\n",
    )
    .map_err(io("writing the Containerfile"))?;
    Ok(())
}

/// Builds the image of `ctx` without cache, checks that it runs, and tags it.
fn build_image(podman: &str, ctx: &Path) -> Result<String, BuildProxyError> {
    let untagged = format!("{PROXY_IMAGE}-new");
    let old = image_id(podman, PROXY_IMAGE);
    let out = std::process::Command::new(podman)
        .args([
            "build",
            "--no-cache",
            "--file",
            &ctx.join("Containerfile").to_string_lossy(),
            "--tag",
            &untagged,
            &ctx.to_string_lossy(),
        ])
        .envs(crate::runtime::sandbox::image::docker_build_env())
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("cannot run {podman}")))?;
    if !out.status.success() {
        return Err(engine_failed("build", &out.stderr));
    }
    let check = std::process::Command::new(podman)
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "all",
            &untagged,
            "--version",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("cannot run {podman}")))?;
    if !check.status.success()
        || !String::from_utf8_lossy(&check.stdout).contains("handler-egress-proxy")
    {
        let _ = std::process::Command::new(podman)
            .args(["rmi", &untagged])
            .output();
        return Err(BuildProxyError::DoesNotRun(
            String::from_utf8_lossy(&check.stderr).into_owned(),
        ));
    }
    let tag = std::process::Command::new(podman)
        .args(["tag", &untagged, PROXY_IMAGE])
        .output()
        .map_err(io(format!("cannot run {podman}")))?;
    let drop_name: &[&str] = match crate::runtime::sandbox::engine::current() {
        // alone, `untag IMAGE` drops every name
        crate::runtime::sandbox::engine::Kind::Podman => &["untag", &untagged, &untagged],
        // docker's rmi of one of two names removes that name only
        crate::runtime::sandbox::engine::Kind::Docker => &["rmi", &untagged],
    };
    let _ = std::process::Command::new(podman).args(drop_name).output();
    if !tag.status.success() {
        return Err(engine_failed("tag", &tag.stderr));
    }
    // The warm proxies run the image replaced: they go, the next launches start with the new one
    // (decision 0175).
    if let Err(e) = super::pool::drain() {
        crate::runtime::sandbox::log(&format!("image build-proxy: {e}"));
    }
    remove_replaced(podman, old.as_deref());
    Ok(PROXY_IMAGE.to_string())
}

/// The id of `image` (none when it does not exist).
fn image_id(podman: &str, image: &str) -> Option<String> {
    let out = std::process::Command::new(podman)
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("sha256:")
        .to_string();
    (out.status.success() && !id.is_empty()).then_some(id)
}

/// The switch's second half (D.4): the network filter image `:latest` replaced is removed
/// unless a container uses it (running sandboxes keep theirs); so is every earlier one left
/// untagged (label `handler.network-filter`) that no container uses any more. Said on stderr.
fn remove_replaced(podman: &str, old: Option<&str>) {
    let new = image_id(podman, PROXY_IMAGE);
    let mut ids: Vec<String> = old
        .filter(|o| new.as_deref() != Some(*o))
        .map(|o| vec![o.to_string()])
        .unwrap_or_default();
    if let Ok(out) = std::process::Command::new(podman)
        .args([
            "images",
            "-q",
            "--no-trunc",
            "--filter",
            "dangling=true",
            "--filter",
            "label=handler.network-filter=1",
        ])
        .stdin(Stdio::null())
        .output()
    {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let id = l.trim().trim_start_matches("sha256:").to_string();
            if !id.is_empty() && !ids.contains(&id) && new.as_deref() != Some(id.as_str()) {
                ids.push(id);
            }
        }
    }
    for id in ids {
        match crate::runtime::sandbox::image::users_of(&id) {
            Ok(users) if users.is_empty() => {
                let rm = std::process::Command::new(podman)
                    .args(["rmi", &id])
                    .stdin(Stdio::null())
                    .output();
                if rm.is_ok_and(|o| o.status.success()) {
                    crate::runtime::sandbox::log(&format!(
                        "image build-proxy: removed the image it replaces, {id}"
                    ));
                }
            }
            Ok(users) => crate::runtime::sandbox::log(&format!(
                "image build-proxy: kept {id}, in use by {}",
                users.join(", ")
            )),
            Err(e) => crate::runtime::sandbox::log(&format!("image build-proxy: {e}")),
        }
    }
}

/// Why a claimed member gave no ready line.
#[derive(Debug, thiserror::Error)]
enum NotReady {
    /// Its configuration could not be written.
    #[error("its configuration could not be given: {0}")]
    Give(std::io::Error),
    /// The connection ended first.
    #[error("it ended without a ready line")]
    Ended,
    /// Reading failed.
    #[error("reading its ready line: {0}")]
    Read(std::io::Error),
}

/// Writes the configuration `line` on a claimed member's connection and reads up to its ready
/// line, relaying the log lines before it; what was read past the ready line (its first events).
async fn give_and_read_ready(
    conn: &mut tokio::net::UnixStream,
    line: &str,
) -> Result<Vec<u8>, NotReady> {
    use crate::runtime::sandbox::stderr::{Source, line_for};
    conn.write_all(line.as_bytes())
        .await
        .map_err(NotReady::Give)?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut l = String::new();
        match reader.read_line(&mut l).await {
            Ok(0) => return Err(NotReady::Ended),
            Ok(_) if l.contains("\"ready\":true") => break,
            // Its log lines before it is ready (why it fails) reach stderr as a proxy's.
            Ok(_) => {
                let piece = crate::lines::Piece {
                    bytes: l.trim_end().as_bytes(),
                    starts: true,
                    ends: true,
                };
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr().lock(),
                    &line_for(Source::Proxy, &piece),
                );
            }
            Err(e) => return Err(NotReady::Read(e)),
        }
    }
    Ok(reader.buffer().to_vec())
}
