//! One way an agent's sandbox starts (issue 28): [`make`] (what the plan names before the
//! start: a session's slot, the copy or the scope's git guard — for every caller: security F7),
//! [`start`] (the launch, the sandbox registered as one of its agent's connections, its stdio
//! read and written by tasks, its egress events recorded) and
//! [`Running::end`] (stopped, swept, its work brought back, unregistered). Sessions and ACP
//! connections are thin callers of all three; terminals — whose launcher runs out of handlerd's
//! reach — of [`make`] and [`Registration`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use handler_contracts::control::{AgentConnection, ModelAccess};
use handler_contracts::harness::SlotKind;
use handler_contracts::sandbox::EgressEvent;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::{Notify, mpsc};

use super::gitguard::{self, GuardSession};
use super::launcher::{Instance, LauncherError, read_stderr, stop_and_sweep};
use super::prepare::{GuardPlan, Prepared};
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::{AppState, LiveAllow, LiveConnection};

/// How long a sandbox has to stop after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// Where a sandbox's guard keeps its git directory or checkout: a session's folder, or
/// `<data>/connections/<id>` for a connection or a terminal.
#[derive(Debug, Clone)]
pub struct Place {
    /// The session's or connection's id.
    pub id: String,
    /// Its folder (the guard's in `guard/`).
    pub folder: PathBuf,
    /// Whether it is a session's (its Files pane's baseline follows a copy's checkout).
    pub session: bool,
}

impl Place {
    /// Session `id`'s folder.
    pub fn session(app: &AppState, id: &str) -> Self {
        Place {
            id: id.to_string(),
            folder: app.sessions.folder(id),
            session: true,
        }
    }

    /// Connection (or terminal) `id`'s folder.
    pub fn connection(app: &AppState, id: &str) -> Self {
        Place {
            id: id.to_string(),
            folder: app.config.data_dir.join("connections").join(id),
            session: false,
        }
    }
}

/// Makes what `prepared` (resolve's whole plan for a sandbox at `place`) names before its
/// start — a session's state slot (F.2: its folder made 0700, or its file with its initial
/// content) and the git guard (issue 14, decision 0103: the sandbox's own git directory, or
/// under `sessionTree = "copy"` its checkout) — for every caller alike (security F7). Returns
/// the guard's session, which follows and brings back each turn.
pub async fn make(
    app: &AppState,
    place: &Place,
    prepared: &Prepared,
) -> ApiResult<Option<Arc<GuardSession>>> {
    if let Some(slot) = prepared.slot.clone() {
        tokio::task::spawn_blocking(move || make_slot(&slot))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?;
    }
    let g = match &prepared.guard {
        GuardPlan::None => return Ok(None),
        GuardPlan::Open => {
            tracing::warn!(sandbox = %place.id, "{}", handler_contracts::control::GIT_GUARD_OPEN_WARNING);
            return Ok(None);
        }
        GuardPlan::GitDir { facts, dir } => {
            let (facts, dir) = (facts.clone(), PathBuf::from(dir));
            tokio::task::spawn_blocking(move || gitguard::make_git_dir(facts, &dir))
                .await
                .map_err(ApiError::internal)?
        }
        GuardPlan::Copy {
            facts,
            dir,
            commit,
            rel,
        } => {
            gitguard::make_copy(
                &*app.launcher,
                facts.clone(),
                std::path::Path::new(dir),
                (commit, rel),
                &prepared.spec.image,
            )
            .await
        }
    };
    // Its refusals were resolve's: what fails here is the making (a file, git, the helper).
    let g = g.map_err(ApiError::internal)?;
    Ok(Some(guard_session(g, prepared, place)))
}

/// F.2: a session's state slot, its folder made 0700 or its file with its initial content
/// (never rewritten).
fn make_slot(slot: &super::resolve::StateSlotPlan) -> Result<(), String> {
    let p = std::path::Path::new(&slot.path);
    match slot.kind {
        SlotKind::Dir => fsutil::create_dir_private(p),
        SlotKind::File if !p.exists() => fsutil::write_atomic(p, slot.initial.as_bytes(), 0o600),
        SlotKind::File => Ok(()),
    }
    .map_err(|e| format!("{}: {e}", slot.path))
}

fn guard_session(g: gitguard::Guarded, prepared: &Prepared, place: &Place) -> Arc<GuardSession> {
    Arc::new(GuardSession::new(
        g,
        prepared.spec.image.clone(),
        place.id.clone(),
        place.folder.join(gitguard::LOG),
    ))
}

/// A sandbox registered as one of its agent's connections (`GET /v1/agents/{id}` lists it; the
/// live egress switch and allow-list reach it; deleting the agent notifies `stop`); dropped, it
/// is unregistered and waiters are told.
#[derive(Debug)]
pub struct Registration {
    app: AppState,
    agent: String,
    /// What the API shows of it.
    pub info: AgentConnection,
    /// Notified to stop it.
    pub stop: Arc<Notify>,
}

impl Registration {
    /// Registers connection `conn` (sandbox `sandbox`) of `agent`; `terminal`: the model a
    /// terminal runs with (D.16).
    pub fn new(
        app: &AppState,
        agent: &str,
        (conn, sandbox): (&str, &str),
        terminal: Option<ModelAccess>,
        allow: Option<LiveAllow>,
    ) -> Self {
        Self::again(
            app,
            agent,
            AgentConnection {
                id: conn.to_string(),
                sandbox: sandbox.to_string(),
                since: fsutil::now_rfc3339(),
                terminal,
            },
            allow,
        )
    }

    /// Registers a connection as it was shown before (a terminal a later handlerd takes back).
    pub fn again(
        app: &AppState,
        agent: &str,
        info: AgentConnection,
        allow: Option<LiveAllow>,
    ) -> Self {
        let stop = Arc::new(Notify::new());
        app.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(agent.to_string())
            .or_default()
            .push(LiveConnection {
                info: info.clone(),
                stop: stop.clone(),
                allow,
            });
        app.agents.touch(agent);
        app.connections_changed.notify_waiters();
        Registration {
            app: app.clone(),
            agent: agent.to_string(),
            info,
            stop,
        }
    }
}

impl Registration {
    /// The agent's id.
    pub fn agent(&self) -> &str {
        &self.agent
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut m = self
            .app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = m.get_mut(&self.agent) {
            v.retain(|c| c.info.id != self.info.id);
            if v.is_empty() {
                m.remove(&self.agent);
            }
        }
        drop(m);
        self.app.connections_changed.notify_waiters();
    }
}

/// One read of the agent's stdout.
pub enum AgentOut {
    /// A line, without its `\n`.
    Line(Vec<u8>),
    /// A line over the size limit.
    TooBig,
    /// The end of its output.
    Eof,
}

/// Reads one line (without its `\n`), at most `max` bytes; `Err(true)` when longer.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Vec<u8>>, bool> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await.map_err(|_| false)?;
        if buf.is_empty() {
            return Ok(if line.is_empty() { None } else { Some(line) });
        }
        match buf.iter().position(|&c| c == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                if line.len() > max {
                    return Err(true);
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
                if line.len() > max {
                    return Err(true);
                }
            }
        }
    }
}

/// A started agent sandbox: messages to its stdin, lines from its stdout, its registration.
#[derive(Debug)]
pub struct Running {
    /// The sandbox's name.
    pub sandbox: String,
    /// The launcher process.
    child: Child,
    /// Lines to the agent's stdin, written in order (a `\n` added).
    pub to_agent: mpsc::Sender<Vec<u8>>,
    /// The agent's stdout, line by line, then [`AgentOut::Eof`] or [`AgentOut::TooBig`].
    pub from_agent: mpsc::Receiver<AgentOut>,
    /// Its registration as one of the agent's connections.
    pub registration: Registration,
}

impl std::fmt::Debug for AgentOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentOut::Line(l) => write!(f, "Line({} bytes)", l.len()),
            AgentOut::TooBig => f.write_str("TooBig"),
            AgentOut::Eof => f.write_str("Eof"),
        }
    }
}

/// Launches `prepared` as connection `conn` of `agent`: registered (with `allow`, its live
/// allow-list), its stdout read in bounded lines, its stdin written by a task, its stderr's
/// egress events recorded for the agent and handed to `on_egress`, its other lines logged with
/// every secret value replaced.
pub fn start(
    app: &AppState,
    agent: &str,
    conn: &str,
    prepared: &Prepared,
    allow: Option<LiveAllow>,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Result<Running, LauncherError> {
    let Instance {
        child,
        stdin,
        stdout,
        stderr,
        name: sandbox,
    } = app.launcher.launch(&prepared.spec)?;
    let registration = Registration::new(app, agent, (conn, &sandbox), None, allow);
    let max = app.config.max_message_bytes;
    let (out_tx, from_agent) = mpsc::channel::<AgentOut>(64);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(256 * 1024, stdout);
        loop {
            let item = match read_line(&mut r, max).await {
                Ok(Some(l)) => AgentOut::Line(l),
                Ok(None) | Err(false) => AgentOut::Eof,
                Err(true) => AgentOut::TooBig,
            };
            let last = !matches!(item, AgentOut::Line(_));
            if out_tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    let secrets = prepared.policy.secrets.clone();
    let (app2, agent_id, name) = (app.clone(), agent.to_string(), sandbox.clone());
    tokio::spawn(async move {
        read_stderr(
            stderr,
            |ev| {
                tracing::info!(agent = %agent_id, sandbox = %name, decision = ?ev.decision, host = %ev.host, "egress");
                on_egress(&ev);
                app2.record_egress(&agent_id, &name, ev);
            },
            |line| {
                let l = handler_policy::redact(&line, &secrets);
                tracing::info!(agent = %agent_id, sandbox = %name, line = %l, "sandbox stderr");
            },
        )
        .await;
    });
    let (to_agent, mut in_rx) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(mut m) = in_rx.recv().await {
            m.push(b'\n');
            if stdin.write_all(&m).await.is_err() || stdin.flush().await.is_err() {
                return;
            }
        }
    });
    Ok(Running {
        sandbox,
        child,
        to_agent,
        from_agent,
        registration,
    })
}

impl Running {
    /// The stop signal (deleting the agent, handlerd stopping).
    pub fn stop_signal(&self) -> Arc<Notify> {
        self.registration.stop.clone()
    }

    /// The launcher's exit code once its agent's output ended (`within` at most; None: a
    /// signal, or still running).
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(Ok(st)) => st.code(),
            _ => None,
        }
    }

    /// The end: stdin closed, the sandbox stopped (SIGTERM, killed after [`STOP_GRACE`], swept
    /// when killed), its work brought back by `guard` (`why` names the moment in its log). The
    /// launcher's exit code (None: killed) and the registration, to drop once the caller has
    /// written what it writes of the end (handlerd's own stop waits for the last one to go).
    pub async fn end(
        self,
        app: &AppState,
        guard: Option<&GuardSession>,
        why: &str,
    ) -> (Option<i32>, Registration) {
        let Running {
            mut child,
            to_agent,
            registration,
            ..
        } = self;
        drop(to_agent);
        let exit = stop_and_sweep(&*app.launcher, &mut child, STOP_GRACE).await;
        if let Some(g) = guard {
            g.bring_back_at_end(&*app.launcher, why).await;
        }
        (exit, registration)
    }
}
