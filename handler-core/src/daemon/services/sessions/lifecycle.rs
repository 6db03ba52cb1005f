//! A session's life (F.6): starting is single-flight (one hub per session, attaches wait for
//! it); a start launches the sandbox `handler-<agentId>-<sessionId>` as one of its agent's
//! connections, sends initialize, then session/new, or session/load when there is something
//! to load (P7 follows either); the end (stop, idle, agent exit, error) stops the sandbox,
//! logs it and closes the clients 4002.

use std::sync::Arc;
use std::time::Duration;

use handler_contracts::session::{SessionEventKind, SessionState, StopHow};
use handler_policy::Pipeline;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::access_of;
use super::hub::{Asking, Ending, Handle, Hub, Inbox, Questions, RunState, Started};
use crate::daemon::fsutil;
use crate::daemon::launch::agent::{self as start_path, AgentOut, Running};
use crate::daemon::launch::prepare::{Prepared, Purpose, canonicalize, prepare};
use crate::daemon::launch::records;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::services::running as live_allow;
use crate::daemon::state::AppState;
use crate::daemon::store::sessions::{EVENTS, read_log};
use handler_contracts::sandbox::{EgressDecision, EgressEvent, NetworkPolicy};

/// The record's extra field saying the session was created with an existing acpSessionId:
/// its first start loads it (and the agent's replay is then the history, F.5).
pub(crate) const IMPORTED: &str = "createdWithAcpSessionId";

/// The running hub of session `id`, started when there is none (single-flight, F.6.1).
/// `prepared` and `prompt` are a new session's: its first start and first prompt.
pub(crate) fn ensure_running(
    app: &AppState,
    id: &str,
    prepared: Option<Prepared>,
    prompt: Option<String>,
) -> ApiResult<Handle> {
    let mut m = app.live_sessions.lock();
    if let Some(h) = m.get(id)
        && !h.inbox.is_closed()
    {
        return Ok(h.clone());
    }
    if app.sessions.get(id).is_none() {
        return Err(ApiError::not_found(format!("session {id:?}")));
    }
    let (tx, rx) = mpsc::channel(1024);
    let weak = tx.downgrade();
    let (stx, srx) = watch::channel(Started::Pending);
    let h = Handle {
        inbox: tx,
        started: srx,
    };
    m.insert(id.to_owned(), h.clone());
    drop(m);
    tokio::spawn(run(
        app.clone(),
        id.to_owned(),
        (rx, weak),
        stx,
        (prepared, prompt),
    ));
    Ok(h)
}

/// A started session's parts the loop drives.
struct Live {
    hub: Hub,
    running: Running,
    stop: Arc<Notify>,
    agent_id: String,
    /// Taken over from an earlier daemon: open already (no initialize).
    taken_over: bool,
}

async fn run(
    app: AppState,
    id: String,
    (inbox, weak): (mpsc::Receiver<Inbox>, mpsc::WeakSender<Inbox>),
    started: watch::Sender<Started>,
    (prepared, prompt): (Option<Prepared>, Option<String>),
) {
    match launch(&app, &id, (prepared, prompt, weak), started.clone()).await {
        Err(reason) => {
            tracing::warn!(session = %id, %reason, "session start failed");
            let _ = started.send(Started::Failed(reason));
            app.live_sessions.remove(&id);
        }
        Ok(live) => {
            let inbox = drive(live, inbox).await;
            app.live_sessions.remove(&id);
            drop(inbox);
        }
    }
}

/// What the daemon learns before launching: the session, its agent, its sandbox prepared.
async fn launch(
    app: &AppState,
    id: &str,
    (prepared, prompt, inbox): (Option<Prepared>, Option<String>, mpsc::WeakSender<Inbox>),
    started: watch::Sender<Started>,
) -> Result<Live, String> {
    let s = app.sessions.get(id).ok_or("the session was deleted")?;
    let agent = app
        .agents
        .agent(&s.agent_id)
        .ok_or_else(|| format!("its agent {:?} does not exist (deleted)", s.agent_id))?;
    // Decision 0148: a resumed session whose disposable machine has gone gets a new one.
    crate::daemon::services::machines::disposable(app, &agent, id)
        .await
        .map_err(|e| e.detail.unwrap_or(e.title))?;
    let place = crate::daemon::services::machines::place_of_session(app, id, &agent);
    let prepared = match prepared {
        Some(p) => p,
        None => plan(app, &s, &agent, &place).await?,
    };
    let guard = start_path::make(app, &place, &prepared)
        .await
        .map_err(|e| e.detail.unwrap_or(e.title))?;
    if guard.as_ref().is_some_and(|g| g.guarded.copy.is_some()) {
        // Decision 0121: the Files pane's baseline is the checkout's (kept across restarts).
        super::files::record_baseline(app, id).await;
    }
    super::files::record_mounts(app, id, &prepared.spec.mounts);
    app.sessions.update(id, |r| {
        r.state = SessionState::Starting;
        r.error = None;
    });
    let log = app.sessions.log(id).map_err(|e| e.to_string())?;
    let parsed = read_log(&app.sessions.folder(id).join(EVENTS)).map_err(|e| e.to_string())?;
    let had_turn = parsed
        .events
        .iter()
        .any(|e| matches!(e.kind, SessionEventKind::Turn { .. }));
    let imported = s.extra.get(IMPORTED).and_then(serde_json::Value::as_bool) == Some(true);
    // F.6.2: a session stopped before its first turn has nothing to load: session/new, its
    // new id translated to the one clients know.
    let load = s.acp_session_id.is_some() && (had_turn || imported);
    let mut policy = prepared.policy.clone();
    if !load {
        policy.client_session_id = s.acp_session_id.clone();
    }
    let asking = asking(&s, &agent, &prepared, &policy);
    let pipeline = Pipeline::new(policy)
        .map_err(|e| format!("policy configuration refused: {e}"))?
        .with_resolver(canonicalize);
    let allow = live_allow::allow_of(app, &agent, &prepared);
    let on_egress = denied_to(inbox);
    let running = match start_path::machine_of(&agent, id) {
        // Decision 0147: the session's plan run by exec in its agent's machine.
        Some(m) => {
            let exec =
                crate::daemon::services::machines::session_exec(app, &m, &agent.id, &prepared.spec)
                    .await
                    .map_err(|e| e.detail.unwrap_or(e.title))?;
            let what = start_path::KeptStart::Machine {
                id: &m,
                exec: &exec,
            };
            start_path::start_kept(app, (&agent.id, id), (&prepared, what), None, on_egress).await
        }
        None => {
            let what = start_path::KeptStart::Launch;
            start_path::start_kept(app, (&agent.id, id), (&prepared, what), allow, on_egress).await
        }
    }
    .map_err(|e| format!("launch failed: {e}"))?;
    Ok(live(
        app,
        (&s, &agent),
        running,
        Parts {
            pipeline,
            log,
            started,
            guard,
            asking,
        },
        (load, prompt),
    ))
}

/// What a hub is made of besides its sandbox.
struct Parts {
    pipeline: Pipeline,
    log: crate::daemon::store::sessions::EventLog,
    started: watch::Sender<Started>,
    guard: Option<Arc<crate::daemon::launch::gitguard::GuardSession>>,
    asking: Option<Asking>,
}

/// Session `s`'s loop over `running`: its hub (opened with session/load when `load`, `prompt`
/// its first), its run state, its questions.
fn live(
    app: &AppState,
    (s, agent): (
        &handler_contracts::session::Session,
        &crate::daemon::store::StoredAgent,
    ),
    running: Running,
    p: Parts,
    (load, prompt): (bool, Option<String>),
) -> Live {
    let stop = running.stop_signal();
    let mut hub = Hub::new(
        app.clone(),
        s.id.clone(),
        p.pipeline,
        p.log,
        running.to_agent.clone(),
        p.started,
        (s.acp_session_id.clone(), load, s.scope.clone()),
        prompt,
    );
    hub.git_guard = p.guard;
    hub.kept = running.kept_record().map(String::from);
    hub.run = run_state(s, agent);
    hub.questions = Questions::new(p.asking);
    Live {
        hub,
        running,
        stop,
        agent_id: agent.id.clone(),
        taken_over: false,
    }
}

/// Session `s`'s plan (a start that was not given one, a take-over).
async fn plan(
    app: &AppState,
    s: &handler_contracts::session::Session,
    agent: &crate::daemon::store::StoredAgent,
    place: &start_path::Place,
) -> Result<Prepared, String> {
    let (app, agent, access, place) = (app.clone(), agent.clone(), access_of(s), place.clone());
    let subject = s.input.as_ref().and_then(super::run::subject_of);
    tokio::task::spawn_blocking(move || {
        prepare(&app, &agent, &access, &place, Purpose::Session { subject })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.detail.unwrap_or(e.title))
}

/// A run's state (D.18) for a session of an agent with an interface started with an input.
fn run_state(
    s: &handler_contracts::session::Session,
    agent: &crate::daemon::store::StoredAgent,
) -> Option<RunState> {
    agent
        .options
        .interface
        .as_ref()
        .filter(|_| s.input.is_some())
        .map(|i| {
            RunState::new(
                i.result.clone(),
                Duration::from_secs(u64::from(i.timeout_sec)),
            )
        })
}

/// Takes over the kept agent of `record` at this daemon's start (issue 28 item 6): its
/// session's plan prepared again (its policy, allow-list, guard), the keeper connected from the
/// line after the last its log holds, the hub opened as the record says with the prompt still
/// in progress, the agent's unanswered questions asked again; the session stays running.
pub(crate) async fn adopt(app: &AppState, record: records::Record) -> Result<(), String> {
    let k = record.kept.clone().ok_or("not a kept agent")?;
    let open = k.open.clone().ok_or("its session was still opening")?;
    let id = k.session.clone();
    let s = app.sessions.get(&id).ok_or("the session was deleted")?;
    let agent = app
        .agents
        .agent(&s.agent_id)
        .ok_or_else(|| format!("its agent {:?} was deleted", s.agent_id))?;
    // A machine's session (decision 0167) is planned in its machine's place, as it started.
    let place = match &k.machine {
        Some(_) => crate::daemon::services::machines::place_of_session(app, &id, &agent),
        None => start_path::Place::session(app, &id),
    };
    let prepared = plan(app, &s, &agent, &place).await?;
    // What the plan names exists already (the same session's): made again, it is kept.
    let guard = start_path::make(app, &place, &prepared)
        .await
        .map_err(|e| e.detail.unwrap_or(e.title))?;
    let log = app.sessions.log(&id).map_err(|e| e.to_string())?;
    let after = log.last_agent_line();
    let (tx, rx) = mpsc::channel(1024);
    let weak = tx.downgrade();
    let allow = live_allow::allow_of(app, &agent, &prepared);
    let on_egress = denied_to(weak.clone());
    let (running, welcome) = start_path::adopt(
        app,
        &record,
        after,
        prepared.policy.secrets.clone(),
        allow,
        on_egress,
    )
    .await
    .map_err(|e| e.to_string())?;
    if k.machine.is_none() {
        network_now(app, &agent, &prepared, &running.sandbox).await;
    }
    let mut policy = prepared.policy.clone();
    policy.client_session_id = s.acp_session_id.clone();
    let asking = asking(&s, &agent, &prepared, &policy);
    let prompt = welcome
        .in_flight
        .iter()
        .find(|(_, m)| m == "session/prompt")
        .map(|(id, _)| id.clone());
    let pipeline = resumed(policy, &open, &welcome.in_flight)?;
    let (stx, srx) = watch::channel(Started::Pending);
    let parts = Parts {
        pipeline,
        log,
        started: stx,
        guard,
        asking,
    };
    let mut live = live(app, (&s, &agent), running, parts, (false, None));
    live.taken_over = true;
    live.hub.taken_over(&open, prompt);
    for q in &welcome.asked {
        live.hub.agent_line(q.as_bytes()).await;
    }
    tracing::info!(session = %live.hub.id, sandbox = %record.name, after, "kept agent taken over");
    drive_registered(app, live, (tx, rx), srx);
    Ok(())
}

/// The pipeline of a taken-over agent: its session open as the record says, the daemon's
/// requests in flight its own.
fn resumed(
    policy: handler_policy::PolicyConfig,
    open: &records::OpenRecord,
    in_flight: &[(String, String)],
) -> Result<Pipeline, String> {
    Ok(Pipeline::resume(
        policy,
        &open.agent_session,
        open.load_session,
        super::hub::DAEMON,
        in_flight,
    )
    .map_err(|e| format!("policy configuration refused: {e}"))?
    .with_resolver(canonicalize))
}

/// The agent's allow-list and egress may have changed while no daemon ran (as for a terminal
/// taken back, F13): a taken-over sandbox gets them now.
async fn network_now(
    app: &AppState,
    agent: &crate::daemon::store::StoredAgent,
    prepared: &Prepared,
    sandbox: &str,
) {
    if let Err(e) = live_allow::apply_allow(app, agent).await {
        tracing::warn!(%sandbox, error = %e.problem().detail.unwrap_or_default(), "a kept agent taken over kept its allow-list");
    }
    if let (Some(e), NetworkPolicy::Filtered { .. }) =
        (agent.options.egress, &prepared.spec.network)
        && let Err(err) = app.launcher.set_egress(sandbox, e).await
    {
        tracing::warn!(%sandbox, error = %err, "a kept agent taken over kept its egress");
    }
}

/// A taken-over session's hub in the registry, and its loop.
fn drive_registered(
    app: &AppState,
    live: Live,
    (tx, rx): (mpsc::Sender<Inbox>, mpsc::Receiver<Inbox>),
    started: watch::Receiver<Started>,
) {
    let id = live.hub.id.clone();
    app.live_sessions
        .lock()
        .insert(id.clone(), Handle { inbox: tx, started });
    let app = app.clone();
    tokio::spawn(async move {
        let inbox = drive(live, rx).await;
        app.live_sessions.remove(&id);
        drop(inbox);
    });
}

/// A denial becomes the session's question (the hub decides whether to ask).
fn denied_to(inbox: mpsc::WeakSender<Inbox>) -> impl Fn(&EgressEvent) + Send + Sync + 'static {
    move |ev: &EgressEvent| {
        if ev.decision == EgressDecision::Denied
            && let Some(tx) = inbox.upgrade()
        {
            let _ = tx.try_send(Inbox::Denied {
                host: ev.host.clone(),
            });
        }
    }
}

/// Whom a session's questions about denied hosts are about (issue 13 item 7): None for a
/// sandbox that is not filtered, a run (D.18: unattended, or given an input) and an agent
/// saved with `askDeniedHosts: false`.
fn asking(
    s: &handler_contracts::session::Session,
    agent: &crate::daemon::store::StoredAgent,
    prepared: &Prepared,
    policy: &handler_policy::PolicyConfig,
) -> Option<Asking> {
    let filtered = matches!(prepared.spec.network, NetworkPolicy::Filtered { .. });
    let run = s.input.is_some() || policy.unattended.is_some();
    (filtered && !run && agent.options.ask_denied_hosts != Some(false)).then(|| Asking {
        agent_id: agent.id.clone(),
        sandbox: prepared.spec.name.clone(),
    })
}

/// The hub's loop, until its ending; then the end. Gives the inbox back, to be dropped once
/// the session is out of the registry.
async fn drive(mut l: Live, mut inbox: mpsc::Receiver<Inbox>) -> mpsc::Receiver<Inbox> {
    if !l.taken_over {
        l.hub.begin().await;
    }
    let idle = l.hub.app.config.session_idle_timeout;
    let mut tick = tokio::time::interval(
        (idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30)),
    );
    while l.hub.ending.is_none() {
        let deadline = l.hub.run_deadline();
        tokio::select! {
            () = until(deadline) => l.hub.turn_timed_out().await,
            m = inbox.recv() => match m {
                Some(m) => handle(&mut l.hub, m).await,
                None => l.hub.ending = Some(Ending::Stop(StopHow::Explicit, "stopped".into(), None)),
            },
            o = l.running.from_agent.recv() => match o {
                Some(AgentOut::Line(line, n)) => {
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        l.hub.agent_line = (n > 0).then_some(n);
                        l.hub.agent_line(&line).await;
                        l.hub.agent_line = None;
                    }
                    l.running.ack(n);
                }
                Some(AgentOut::TooBig) => {
                    let max = l.hub.app.config.max_message_bytes;
                    l.hub.ending = Some(Ending::Error(format!("the agent sent a message over {max} bytes")));
                }
                Some(AgentOut::Eof) | None => l.hub.ending = Some(Ending::AgentExit),
            },
            _ = l.stop.notified() => {
                let gone = l.hub.app.agents.agent(&l.agent_id).is_none();
                l.hub.ending = Some(if gone {
                    Ending::Stop(StopHow::Deleted, "its agent was deleted".into(), None)
                } else if l.running.is_kept() && l.hub.busy() {
                    // An upgrade never cuts a turn: the next daemon takes the agent over.
                    Ending::Leave
                } else {
                    Ending::Stop(StopHow::Explicit, "the daemon is stopping".into(), None)
                });
            }
            _ = tick.tick() => {
                if l.hub.idle_due() {
                    l.hub.ending = Some(Ending::Stop(StopHow::Idle, "idle timeout".into(), None));
                }
            }
        }
    }
    finish(l).await;
    inbox
}

/// Sleeps until `deadline`; forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn handle(hub: &mut Hub, m: Inbox) {
    match m {
        Inbox::Attach { out, close, reply } => {
            let c = hub.attach(out, close);
            let _ = reply.send(c);
        }
        Inbox::Frame { client, text } => hub.frame(client, text).await,
        Inbox::Detach { client } => hub.detach(client),
        Inbox::Stop { how, reason, done } => hub.ending = Some(Ending::Stop(how, reason, done)),
        Inbox::Cancel => hub.cancel().await,
        Inbox::Denied { host } => hub.denied(&host),
    }
}

/// The end (F.6.3, F.6.4): the sandbox stopped, the log's last events, the clients closed
/// 4002, the record stopped (failed when the agent exited non-zero unasked, or for an error).
async fn finish(mut l: Live) {
    let ending = l.hub.ending.take().unwrap_or(Ending::AgentExit);
    if matches!(ending, Ending::Leave) {
        l.hub.leave();
        let registration = l.running.leave();
        tracing::info!(session = %l.hub.id, "daemon stopping mid-turn: the kept agent goes on for the next daemon");
        drop(registration);
        return;
    }
    let exit = match ending {
        Ending::AgentExit => l.running.exit_code(Duration::from_secs(10)).await,
        _ => None,
    };
    let app = l.hub.app.clone();
    let guard = l.hub.git_guard.clone();
    let (_, registration) = l.running.end(&app, guard.as_deref(), "session stop").await;
    let mut done: Option<oneshot::Sender<()>> = None;
    let (how, detail, error) = match ending {
        Ending::Stop(how, reason, d) => {
            done = d;
            (how, reason, None)
        }
        Ending::AgentExit => {
            let code = exit.map_or_else(|| "signal".to_owned(), |c| c.to_string());
            let detail = format!("agent exited ({code})");
            let err = (exit != Some(0)).then(|| detail.clone());
            (StopHow::Exited, detail, err)
        }
        Ending::Error(reason) => (StopHow::Error, reason.clone(), Some(reason)),
        Ending::Leave => return,
    };
    l.hub.finish(how, Some(detail.clone()));
    if *l.hub.started.borrow() == Started::Pending {
        let _ = l.hub.started.send(Started::Failed(detail.clone()));
    }
    app.sessions.update(&l.hub.id, |r| {
        r.state = if error.is_some() {
            SessionState::Failed
        } else {
            SessionState::Stopped
        };
        r.error = error.clone();
        r.busy = false;
        r.pending_permissions = 0;
        r.attached = 0;
        r.last_activity_at = fsutil::now_rfc3339();
    });
    drop(registration);
    crate::daemon::services::machines::session_ended(&app, &l.hub.id);
    tracing::info!(session = %l.hub.id, how = ?how, %detail, "session stopped, sandbox gone");
    if let Some(d) = done {
        let _ = d.send(());
    }
}
