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
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::{Notify, mpsc, watch};

use super::gitguard::{self, GuardSession};
use super::kept;
use super::launcher::{Instance, LauncherError, read_stderr, stop_and_sweep};
use super::prepare::{GuardPlan, Prepared};
use super::records::{self, LauncherPid};
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::{AppState, LiveAllow, LiveConnection};
use handler_sandbox::verbs;

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
    /// In a machine made from a profile whose `stateScope` is `shared`: that profile, whose
    /// state its agents share (decision 0170). Set by the machines' service, which knows.
    pub shared_state: Option<String>,
}

impl Place {
    /// Session `id`'s folder.
    pub fn session(app: &AppState, id: &str) -> Self {
        Place {
            id: id.to_string(),
            folder: app.sessions.folder(id),
            session: true,
            shared_state: None,
        }
    }

    /// Agent `agent`'s place in machine `machine` (decision 0147): its slot and git guard are
    /// the machine's, in `<data>/machines/<machine>/agents/<agent>`, made when the machine is
    /// made for it and mounted into it then; each of its sessions there uses them.
    pub fn machine(app: &AppState, machine: &str, agent: &str) -> Self {
        Place {
            id: machine.to_string(),
            folder: app
                .config
                .data_dir
                .join("machines")
                .join(machine)
                .join("agents")
                .join(agent),
            session: true,
            shared_state: None,
        }
    }

    /// Where session `id` of `agent` is planned: in the agent's machine when it has one (its
    /// disposable one for `disposable`, decision 0148), else in the session's own folder.
    pub fn of_session(app: &AppState, id: &str, agent: &crate::daemon::store::StoredAgent) -> Self {
        match machine_of(agent, id) {
            Some(m) => Self::machine(app, &m, &agent.id),
            None => Self::session(app, id),
        }
    }

    /// Connection (or terminal) `id`'s folder.
    pub fn connection(app: &AppState, id: &str) -> Self {
        Place {
            id: id.to_string(),
            folder: app.config.data_dir.join("connections").join(id),
            session: false,
            shared_state: None,
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
    /// A line, without its `\n`, and its number from the agent's keeper (0: not kept).
    Line(Vec<u8>, u64),
    /// A line over the size limit.
    TooBig,
    /// The end of its output.
    Eof,
}

/// How a started sandbox's launcher is held.
#[derive(Debug)]
enum Held {
    /// `launch`, handlerd's child: its stdio is handlerd's pipes.
    Child(Child),
    /// `keep` (issue 28 item 6): the agent's stdio on the keeper's socket; the keeper is this
    /// daemon's child when this daemon started it.
    Kept {
        child: Option<Child>,
        keeper: LauncherPid,
        /// Its record's name (the sandbox's; a machine session's `<container>.<session>`).
        record: String,
        acks: watch::Sender<u64>,
        exit: watch::Receiver<Option<i32>>,
    },
}

/// A started agent sandbox: messages to its stdin, lines from its stdout, its registration.
#[derive(Debug)]
pub struct Running {
    /// The sandbox's name.
    pub sandbox: String,
    /// The launcher.
    held: Held,
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
            AgentOut::Line(l, n) => write!(f, "Line({} bytes, #{n})", l.len()),
            AgentOut::TooBig => f.write_str("TooBig"),
            AgentOut::Eof => f.write_str("Eof"),
        }
    }
}

/// Where a sandbox's stderr goes: its egress events recorded for the agent and handed to
/// `on_egress`, its other lines logged with every secret value replaced.
struct StderrSink<F> {
    app: AppState,
    agent: String,
    sandbox: String,
    secrets: Vec<(String, String)>,
    on_egress: F,
}

impl<F: Fn(&EgressEvent)> StderrSink<F> {
    fn event(&self, ev: EgressEvent) {
        tracing::info!(agent = %self.agent, sandbox = %self.sandbox, decision = ?ev.decision, host = %ev.host, "egress");
        (self.on_egress)(&ev);
        self.app.record_egress(&self.agent, &self.sandbox, ev);
    }

    fn text(&self, line: &str) {
        let l = handler_policy::redact(line, &self.secrets);
        tracing::info!(agent = %self.agent, sandbox = %self.sandbox, line = %l, "sandbox stderr");
    }

    /// A line as the keeper passes it (`whole`: may be an event).
    fn line(&self, whole: bool, bytes: &[u8]) {
        let line = String::from_utf8_lossy(bytes);
        match EgressEvent::from_line(&line).filter(|_| whole) {
            Some(ev) => self.event(ev),
            None => self.text(&line),
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
    let instance = app.launcher.launch(&prepared.spec)?;
    Ok(wire(
        app,
        (agent, conn),
        instance,
        prepared,
        allow,
        on_egress,
    ))
}

/// The machine session `session` of `agent` runs in (decisions 0147, 0148): its agent's
/// `machine`, or for `disposable` (`disposable:<profile>`) the session's own (`d-<hex>`); None:
/// a sandbox of its own.
pub fn machine_of(agent: &crate::daemon::store::StoredAgent, session: &str) -> Option<String> {
    agent.options.machine.as_deref().map(|m| {
        if m == handler_contracts::machine::DISPOSABLE
            || m.starts_with(handler_contracts::machine::profile::DISPOSABLE_PREFIX)
        {
            handler_contracts::machine::disposable_id(session)
        } else {
            m.to_string()
        }
    })
}

/// Runs session `conn` of `agent` in machine `machine` by `exec` (decision 0147: resolve's plan
/// `prepared` made into an exec by `handler_sandbox::machine::session::plan_session`), wired as
/// [`start`] wires a launch; registered under the machine's container name. Not kept (the exec
/// ends with this daemon, the machine does not): [`start_kept`] with [`KeptStart::Machine`] is
/// the kept way, this its fallback. No live allow-list is registered: a filtered
/// machine's list is the machine's, made from all its agents' (decision 0153), so one agent's
/// "allow" never switches it for the others — it is saved for that agent's next sandbox.
pub fn start_in_machine(
    app: &AppState,
    (agent, conn): (&str, &str),
    (machine, exec): (&str, &handler_contracts::machine::ExecSpec),
    prepared: &Prepared,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Result<Running, LauncherError> {
    let mut instance = app.launcher.machine_exec(machine, exec)?;
    instance.name = handler_contracts::machine::container_name(machine);
    Ok(wire(
        app,
        (agent, conn),
        instance,
        prepared,
        None,
        on_egress,
    ))
}

/// A started `instance` as connection `conn` of `agent` (see [`start`]).
fn wire(
    app: &AppState,
    (agent, conn): (&str, &str),
    instance: Instance,
    prepared: &Prepared,
    allow: Option<LiveAllow>,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Running {
    let Instance {
        child,
        stdin,
        stdout,
        stderr,
        name: sandbox,
    } = instance;
    let registration = Registration::new(app, agent, (conn, &sandbox), None, allow);
    let max = app.config.max_message_bytes;
    let (out_tx, from_agent) = mpsc::channel::<AgentOut>(64);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(256 * 1024, stdout);
        loop {
            let item = match crate::lines::read_line(&mut r, max).await {
                Ok(Some(l)) => AgentOut::Line(l, 0),
                Ok(None) | Err(false) => AgentOut::Eof,
                Err(true) => AgentOut::TooBig,
            };
            let last = !matches!(item, AgentOut::Line(..));
            if out_tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    let sink = StderrSink {
        app: app.clone(),
        agent: agent.to_string(),
        sandbox: sandbox.clone(),
        secrets: prepared.policy.secrets.clone(),
        on_egress,
    };
    tokio::spawn(async move {
        read_stderr(stderr, |ev| sink.event(ev), |line| sink.text(&line)).await;
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
    Running {
        sandbox,
        held: Held::Child(child),
        to_agent,
        from_agent,
        registration,
    }
}

/// The bytes of agent output a keeper holds while no daemon reads them (beyond, the agent
/// waits): room for a few of the largest messages.
fn keep_buffer(max_line: usize) -> usize {
    (4 * max_line).clamp(16 << 20, 256 << 20)
}

/// What a keeper runs for a session: its own sandbox's launch, or its agent's exec in a machine
/// (decision 0167).
#[derive(Debug, Clone, Copy)]
pub enum KeptStart<'a> {
    /// `launch` of the session's plan.
    Launch,
    /// `machine exec` of `exec` in machine `id` (its plan made into an exec, decision 0147).
    Machine {
        /// The machine's id.
        id: &'a str,
        /// The exec.
        exec: &'a handler_contracts::machine::ExecSpec,
    },
}

impl KeptStart<'_> {
    /// The sandbox the session's agent runs in, as the agent's connections show it.
    fn sandbox(&self, prepared: &Prepared) -> String {
        match self {
            KeptStart::Launch => prepared.spec.name.clone(),
            KeptStart::Machine { id, .. } => handler_contracts::machine::container_name(id),
        }
    }

    /// The keeper's record (one per session: several sessions share a machine).
    fn record(&self, prepared: &Prepared, session: &str) -> String {
        match self {
            KeptStart::Launch => prepared.spec.name.clone(),
            KeptStart::Machine { id, .. } => {
                format!(
                    "{}.{session}",
                    handler_contracts::machine::container_name(id)
                )
            }
        }
    }

    /// Started without a keeper: [`start`], or [`start_in_machine`] (no live allow-list).
    fn unkept(
        self,
        app: &AppState,
        (agent, session): (&str, &str),
        prepared: &Prepared,
        allow: Option<LiveAllow>,
        on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
    ) -> Result<Running, LauncherError> {
        match self {
            KeptStart::Launch => start(app, agent, session, prepared, allow, on_egress),
            KeptStart::Machine { id, exec } => {
                start_in_machine(app, (agent, session), (id, exec), prepared, on_egress)
            }
        }
    }
}

/// Starts session `session` of `agent` kept (issue 28 item 6): `keep` runs `what` — `prepared`'s
/// launch, or its exec in a machine (decision 0167) — and holds its stdio on a socket in the
/// daemon's records folder, so the agent outlives this daemon and the next one takes it over
/// ([`adopt`]). Falls back to starting it unkept when agents are not to outlive the daemon
/// (`HANDLER_KEEP_TIMEOUT=0`) or the launcher cannot keep (it has no `keep` verb: a usage
/// error, exit 2).
pub async fn start_kept(
    app: &AppState,
    (agent, session): (&str, &str),
    (prepared, what): (&Prepared, KeptStart<'_>),
    allow: Option<LiveAllow>,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Result<Running, LauncherError> {
    let state = &app.config.state_dir;
    let dir = records::dir(state);
    if app.config.keep_timeout.is_zero() || fsutil::create_dir_private(&dir).is_err() {
        return what.unkept(app, (agent, session), prepared, allow, on_egress);
    }
    let sandbox = what.sandbox(prepared);
    let record = what.record(prepared, session);
    let machine = match what {
        KeptStart::Launch => None,
        KeptStart::Machine { id, .. } => Some(id.to_string()),
    };
    let keep = verbs::Keep {
        socket: kept::socket_of(&dir, &record),
        timeout: app.config.keep_timeout.as_secs(),
        max_line: app.config.max_message_bytes,
        buffer: keep_buffer(app.config.max_message_bytes),
        machine: machine.clone(),
    };
    let started = match what {
        KeptStart::Launch => app.launcher.launch_kept(&prepared.spec, &keep),
        KeptStart::Machine { exec, .. } => app.launcher.machine_exec_kept(exec, &keep),
    };
    let mut child = match started {
        Ok(c) => c,
        Err(LauncherError::Verb { .. }) => {
            return what.unkept(app, (agent, session), prepared, allow, on_egress);
        }
        Err(e) => return Err(e),
    };
    let pid = child.id().unwrap_or(0);
    let kept_record = records::KeptRecord {
        session: session.to_string(),
        agent: agent.to_string(),
        socket: keep.socket.clone(),
        machine,
        open: None,
    };
    let keeper = match records::record_kept(state, &record, pid, kept_record) {
        Ok(r) => r.launcher,
        Err(e) => {
            tracing::warn!(sandbox = %record, error = %e, "kept launch not recorded: a later handlerd will not take it over");
            LauncherPid::of(pid).unwrap_or(LauncherPid {
                pid,
                start: 0,
                boot: String::new(),
            })
        }
    };
    let link = kept::connect(&keep.socket, 1, Duration::from_secs(30), || {
        !matches!(child.try_wait(), Ok(None))
    })
    .await;
    let link = match link {
        Ok(l) => l,
        Err(e) => {
            let code = child.wait().await.ok().and_then(|s| s.code());
            records::forget(state, &record);
            if code == Some(2) {
                // A sandbox executable without `keep` (an older install, a test double) says
                // so with a usage error: the agent starts as before, not kept.
                tracing::info!(sandbox = %sandbox, "the sandbox executable cannot keep agents: started without a keeper");
                return what.unkept(app, (agent, session), prepared, allow, on_egress);
            }
            return Err(LauncherError::Verb {
                verb: "keep".into(),
                code,
                stderr: e.to_string(),
            });
        }
    };
    // A machine's session registers no live allow-list (decision 0153).
    let allow = allow.filter(|_| matches!(what, KeptStart::Launch));
    let registration = Registration::new(app, agent, (session, &sandbox), None, allow);
    Ok(kept_running(
        app,
        link,
        (sandbox, record, prepared.policy.secrets.clone()),
        (Some(child), keeper),
        registration,
        on_egress,
    ))
}

/// Takes over the kept agent of `record` (issue 28 item 6): connects to its keeper, asking
/// for the agent's lines after `after` (the last its session's log holds), registered as
/// connection `record.kept.session` with `allow`. Gives its keeper's welcome too.
pub async fn adopt(
    app: &AppState,
    record: &records::Record,
    after: u64,
    secrets: Vec<(String, String)>,
    allow: Option<LiveAllow>,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Result<(Running, handler_sandbox::keep::Welcome), kept::KeptError> {
    let Some(k) = record.kept.as_ref() else {
        return Err(kept::KeptError::Ended);
    };
    let keeper = record.launcher.clone();
    let socket = k.socket.clone();
    let link = kept::connect(&k.socket, after + 1, Duration::from_secs(10), || {
        !keeper.alive() || !socket.exists()
    })
    .await?;
    // A machine's session is shown as its machine's container, without a live allow-list.
    let (sandbox, allow) = match &k.machine {
        Some(m) => (handler_contracts::machine::container_name(m), None),
        None => (record.name.clone(), allow),
    };
    let registration = Registration::new(app, &k.agent, (&k.session, &sandbox), None, allow);
    let welcome = link.welcome.clone();
    Ok((
        kept_running(
            app,
            link,
            (sandbox, record.name.clone(), secrets),
            (None, keeper),
            registration,
            on_egress,
        ),
        welcome,
    ))
}

fn kept_running(
    app: &AppState,
    link: kept::Link,
    (sandbox, record, secrets): (String, String, Vec<(String, String)>),
    (child, keeper): (Option<Child>, LauncherPid),
    registration: Registration,
    on_egress: impl Fn(&EgressEvent) + Send + Sync + 'static,
) -> Running {
    let sink = StderrSink {
        app: app.clone(),
        agent: registration.agent().to_string(),
        sandbox: sandbox.clone(),
        secrets,
        on_egress,
    };
    let w = kept::wire(link, app.config.max_message_bytes, move |whole, line| {
        sink.line(whole, line);
    });
    Running {
        sandbox,
        held: Held::Kept {
            child,
            keeper,
            record,
            acks: w.acks,
            exit: w.exit,
        },
        to_agent: w.to_agent,
        from_agent: w.from_agent,
        registration,
    }
}

impl Running {
    /// The stop signal (deleting the agent, handlerd stopping).
    pub fn stop_signal(&self) -> Arc<Notify> {
        self.registration.stop.clone()
    }

    /// Whether the agent is kept (it outlives this daemon).
    pub fn is_kept(&self) -> bool {
        matches!(self.held, Held::Kept { .. })
    }

    /// The keeper's record, when the agent is kept.
    pub fn kept_record(&self) -> Option<&str> {
        match &self.held {
            Held::Kept { record, .. } => Some(record),
            Held::Child(_) => None,
        }
    }

    /// Every agent line up to `n` is processed (its events logged): its keeper may forget them.
    pub fn ack(&self, n: u64) {
        if let Held::Kept { acks, .. } = &self.held
            && n > 0
        {
            acks.send_if_modified(|a| {
                let more = n > *a;
                *a = (*a).max(n);
                more
            });
        }
    }

    /// The launcher's exit code once its agent's output ended (`within` at most; None: a
    /// signal, or still running).
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        match &mut self.held {
            Held::Child(child) => match tokio::time::timeout(within, child.wait()).await {
                Ok(Ok(st)) => st.code(),
                _ => None,
            },
            Held::Kept { exit, .. } => {
                let r = tokio::time::timeout(within, exit.wait_for(Option::is_some)).await;
                r.ok().and_then(|r| r.ok().and_then(|c| *c))
            }
        }
    }

    /// Leaves a kept agent running for the next daemon (this one is stopping while its turn
    /// goes on): nothing is stopped; the registration is given back to drop.
    pub fn leave(self) -> Registration {
        let Running {
            held, registration, ..
        } = self;
        if let Held::Kept {
            child: Some(child), ..
        } = held
        {
            // Not waited for: it outlives this daemon (a zombie only until then).
            drop(child);
        }
        registration
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
            sandbox,
            held,
            to_agent,
            registration,
            ..
        } = self;
        drop(to_agent);
        let exit = match held {
            Held::Child(mut child) => stop_and_sweep(&*app.launcher, &mut child, STOP_GRACE).await,
            Held::Kept {
                child,
                keeper,
                record,
                mut exit,
                ..
            } => {
                let code = stop_kept(child, &keeper, &mut exit).await;
                if code.is_none() {
                    tracing::warn!(sandbox = %sandbox, "a kept agent's keeper was killed: sweeping what it left");
                    if let Err(e) = app.launcher.sweep().await {
                        tracing::warn!(error = %e, "sweep after a killed keeper failed");
                    }
                }
                records::forget(&app.config.state_dir, &record);
                code
            }
        };
        if let Some(g) = guard {
            g.bring_back_at_end(&*app.launcher, why).await;
        }
        (exit, registration)
    }
}

/// Stops a keeper: SIGTERM (it passes it to launch, which stops and cleans up, A4), its exit
/// code when it says it; SIGKILL after [`STOP_GRACE`] (launch then gets SIGTERM by its death
/// signal). None: killed.
async fn stop_kept(
    child: Option<Child>,
    keeper: &LauncherPid,
    exit: &mut watch::Receiver<Option<i32>>,
) -> Option<i32> {
    if let Some(mut child) = child {
        if !matches!(child.try_wait(), Ok(Some(_))) {
            keeper.signal(nix::sys::signal::Signal::SIGTERM);
        }
        return match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(st)) => st.code().or(*exit.borrow()),
            _ => {
                tracing::warn!("a keeper did not stop after SIGTERM: killing it");
                let _ = child.kill().await;
                None
            }
        };
    }
    keeper.signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    while keeper.alive() && tokio::time::Instant::now() < deadline {
        let _ = tokio::time::timeout(Duration::from_millis(100), exit.changed()).await;
    }
    if keeper.alive() {
        tracing::warn!("a keeper did not stop after SIGTERM: killing it");
        keeper.signal(nix::sys::signal::Signal::SIGKILL);
        return None;
    }
    *exit.borrow()
}
