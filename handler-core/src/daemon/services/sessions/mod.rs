//! Daemon-held sessions (F): conversations that outlive their clients. `mod` holds the
//! resource's rules (create, list, get, delete, stop, cancel, the daemon's start; the live
//! sessions' registry is `App::live_sessions`); `live` the hub task that owns a session's agent and its
//! attachments; `attach` one WebSocket's side; `lifecycle` starting and stopping the agent.

mod attach;
pub mod files;
mod hub;
mod lifecycle;
mod run;
pub(crate) use run::unattended_use;

use std::path::{Path, PathBuf};

use handler_contracts::control::ModelAccess;
use handler_contracts::session::{
    Session, SessionEvent, SessionQuery, SessionRequest, SessionState, StopHow, open_turn,
};

use crate::daemon::fsutil;
use crate::daemon::launch::prepare::{GuardPlan, Purpose, prepare};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::sessions::read_log;

pub use attach::attach;
pub(crate) use attach::join;
pub(crate) use hub::{Handle, Inbox};
pub(crate) use hub::{Out, replay_lines};

fn live_handle(app: &AppState, id: &str) -> Option<Handle> {
    app.live_sessions.get(id)
}

/// A new session id: "s_" + 16 hex.
fn new_session_id() -> String {
    format!("s_{:016x}", rand::random::<u64>())
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("session {id:?}"))
}

/// A session's folder and the scope its agent works in (for F.8, the session's files).
pub fn folder_of(app: &AppState, id: &str) -> ApiResult<(PathBuf, PathBuf)> {
    let s = app.sessions.get(id).ok_or_else(|| not_found(id))?;
    Ok((app.sessions.folder(id), PathBuf::from(s.scope)))
}

/// POST /v1/sessions: a run's input checked (D.18), the model checked and the sandbox
/// prepared (400/404/409), then the
/// folder (0700) and record made before any sandbox, then the agent started; answers once it
/// runs or its start failed (the record says why).
pub async fn create(app: &AppState, req: SessionRequest) -> ApiResult<Session> {
    let agent = app
        .agents
        .agent(&req.agent_id)
        .ok_or_else(|| ApiError::not_found(format!("agent {:?}", req.agent_id)))?;
    let access = match req.model.clone() {
        Some(m) => m,
        None => agent.models.first().cloned().ok_or_else(|| {
            ApiError::bad_request("model access unusable", "the agent has no model")
        })?,
    };
    let run = run::start(app, &agent, &req, access.account.as_deref())?;
    if let Some(sk) = &req.from_skill {
        run::check_from_skill(app, &agent, sk)?;
    }
    let id = new_session_id();
    let subject = run.as_ref().and_then(|r| run::subject_of(&r.input));
    // Decision 0148: a disposable machine is made for the session before it is planned in it.
    crate::daemon::services::machines::disposable(app, &agent, &id).await?;
    let prepared = {
        let (app, agent, access, id) = (app.clone(), agent.clone(), access.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            let place = crate::daemon::services::machines::place_of_session(&app, &id, &agent);
            prepare(&app, &agent, &access, &place, Purpose::Session { subject })
        })
        .await
        .map_err(ApiError::internal)??
    };
    // A session needing the network filter waits for the build of it that is running, else is
    // refused with 503 now — not started to fail in its sandbox ("agent exited (66)").
    crate::daemon::services::images::await_network_filter(app, &prepared.spec).await?;
    if let Some(m) = crate::daemon::launch::agent::machine_of(&agent, &id) {
        // Decision 0147: refused now (409 naming what the machine lacks), not after the start.
        crate::daemon::services::machines::session_plan(app, &m, &agent.id, &prepared.spec)?;
    }
    let copy = matches!(prepared.guard, GuardPlan::Copy { .. });
    let now = fsutil::now_rfc3339();
    let record = Session {
        id: id.clone(),
        agent_id: agent.id.clone(),
        project_id: agent.project_id.clone(),
        harness: prepared.harness.clone(),
        account: prepared.access.account.clone(),
        provider: prepared.access.provider.clone(),
        model: prepared.access.model.clone(),
        scope: prepared.policy.scope.clone(),
        acp_session_id: req.acp_session_id.clone(),
        title: run.as_ref().map(|r| r.title.clone()),
        state: SessionState::Starting,
        busy: false,
        pending_permissions: 0,
        attached: 0,
        remote: false,
        can_resume: false,
        error: None,
        harness_version: None,
        origin: req.origin,
        last_stop_reason: None,
        answer: None,
        input: run.as_ref().map(|r| r.input.clone()),
        output: None,
        created_at: now.clone(),
        last_activity_at: now,
        acp_url: format!("ws://127.0.0.1:{}/v1/sessions/{id}/acp", app.port()),
        extra: Default::default(),
    };
    let mut record = record;
    record.harness_version = harness_version(app, &prepared.harness_image).await;
    if req.acp_session_id.is_some() {
        record.extra.insert(lifecycle::IMPORTED.into(), true.into());
    }
    app.sessions.create(&record).map_err(ApiError::internal)?;
    make_work(app, &record)?;
    if let Some(sk) = &req.from_skill {
        run::copy_skill(app, sk, Path::new(&record.scope))?;
    }
    if !copy {
        // Under copy the baseline is the checkout's, recorded once it is made (`launch::agent::make`).
        files::record_baseline(app, &id).await;
    }
    let prompt = run.map(|r| r.prompt).or(req.prompt);
    let handle = lifecycle::ensure_running(app, &id, Some(prepared), prompt)?;
    let _ = hub::wait_started(&handle).await;
    app.sessions.get(&id).ok_or_else(|| not_found(&id))
}

/// F.2: a folderless agent's session works in its folder's `work/`, made now with the folder.
fn make_work(app: &AppState, record: &Session) -> ApiResult<()> {
    let folder = app.sessions.folder(&record.id);
    let own = std::fs::canonicalize(&folder).map(|f| f.join("work"));
    if own.is_ok_and(|w| w == Path::new(&record.scope)) {
        crate::daemon::store::folders::work_folder(&folder).map_err(ApiError::internal)?;
    }
    Ok(())
}

/// The version of the harness image a new session starts on: its `:latest`'s
/// `/usr/share/handler/version` (B.6, D.4 switch), none when the image or the file is missing.
async fn harness_version(app: &AppState, image: &str) -> Option<String> {
    crate::daemon::services::images::facts(app, image, false)
        .await
        .version
}

/// GET /v1/sessions, filtered.
pub fn list(app: &AppState, q: &SessionQuery) -> Vec<Session> {
    app.sessions
        .list()
        .into_iter()
        .filter(|s| q.matches(s))
        .collect()
}

/// GET /v1/sessions/{id}
pub fn get(app: &AppState, id: &str) -> ApiResult<Session> {
    app.sessions.get(id).ok_or_else(|| not_found(id))
}

/// GET /v1/sessions/{id}/events: the event log's events after seq `after` (F.5), as written:
/// every line was redacted of the session's secrets before it reached the file.
pub fn events(app: &AppState, id: &str, after: u64) -> ApiResult<Vec<SessionEvent>> {
    get(app, id)?;
    let path = app
        .sessions
        .folder(id)
        .join(crate::daemon::store::sessions::EVENTS);
    let parsed = read_log(&path).map_err(ApiError::internal)?;
    Ok(parsed
        .events
        .into_iter()
        .filter(|e| e.seq > after)
        .collect())
}

/// Stops a live session (`how` logged) and waits until its sandbox is gone.
async fn stop_live(app: &AppState, id: &str, how: StopHow, reason: &str) {
    if let Some(h) = live_handle(app, id) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = Inbox::Stop {
            how,
            reason: reason.to_string(),
            done: Some(tx),
        };
        if h.inbox.send(stop).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// POST /v1/sessions/{id}/stop: its clients closed 4002, its sandbox stopped; it can be
/// attached again, which restarts it.
pub async fn stop(app: &AppState, id: &str) -> ApiResult<Session> {
    get(app, id)?;
    stop_live(app, id, StopHow::Explicit, "stopped by a client").await;
    get(app, id)
}

/// POST /v1/sessions/{id}/cancel: the turn in progress cancelled (session/cancel to the agent).
pub async fn cancel(app: &AppState, id: &str) -> ApiResult<Session> {
    get(app, id)?;
    if let Some(h) = live_handle(app, id) {
        let _ = h.inbox.send(Inbox::Cancel).await;
    }
    get(app, id)
}

/// DELETE /v1/sessions/{id}: stopped, then its whole folder removed (F.2).
pub async fn delete(app: &AppState, id: &str) -> ApiResult<()> {
    get(app, id)?;
    stop_live(app, id, StopHow::Deleted, "session deleted").await;
    app.sessions.delete(id).map_err(ApiError::internal)
}

/// At the daemon's start (F.6.5): every session that was starting or running is marked stopped
/// (failed if it never got an ACP session), an open turn logged ended `daemon_restarted`, then
/// a lifecycle event; their sandboxes died with the old daemon (the sweep removes leftovers).
/// Sessions whose agent outlived the previous daemon (a live keeper, its session open: issue 28
/// item 6) are left running, for `take_over`.
pub fn mark_stopped_at_start(app: &AppState) {
    let kept: std::collections::HashSet<String> =
        crate::daemon::launch::records::list(&app.config.state_dir)
            .into_iter()
            .filter(|r| r.launcher.alive())
            .filter_map(|r| r.kept.filter(|k| k.open.is_some()).map(|k| k.session))
            .collect();
    for s in app.sessions.list() {
        if !matches!(s.state, SessionState::Starting | SessionState::Running) {
            continue;
        }
        if kept.contains(&s.id) {
            continue;
        }
        mark_stopped(app, &s);
    }
}

/// Takes over the agents that outlived the previous daemon (issue 28 item 6); one that cannot
/// be is stopped (its keeper SIGTERMed: launch stops and cleans up) and its session marked
/// stopped as F.6.5 says.
pub async fn take_over(app: &AppState, kept: Vec<crate::daemon::launch::records::Record>) {
    for r in kept {
        let session = r
            .kept
            .as_ref()
            .map(|k| k.session.clone())
            .unwrap_or_default();
        if let Err(e) = lifecycle::adopt(app, r.clone()).await {
            tracing::warn!(session = %session, sandbox = %r.name, error = %e, "a kept agent cannot be taken over: stopping it");
            r.launcher.signal(nix::sys::signal::Signal::SIGTERM);
            crate::daemon::launch::records::forget(&app.config.state_dir, &r.name);
            if let Some(s) = app.sessions.get(&session)
                && matches!(s.state, SessionState::Starting | SessionState::Running)
            {
                mark_stopped(app, &s);
            }
        }
    }
}

/// F.6.5 for one session: an open turn logged ended `daemon_restarted`, the lifecycle event,
/// the record stopped (failed if it never got an ACP session).
fn mark_stopped(app: &AppState, s: &Session) {
    {
        let path = app
            .sessions
            .folder(&s.id)
            .join(crate::daemon::store::sessions::EVENTS);
        let open = read_log(&path).is_ok_and(|p| open_turn(&p.events));
        match app.sessions.log(&s.id) {
            Ok(mut log) => {
                let now = fsutil::now_rfc3339();
                if open {
                    let _ = log.append(
                        |n| SessionEvent::turn_end(n, &now, "daemon_restarted"),
                        |l| l,
                    );
                }
                let _ = log.append(
                    |n| SessionEvent::stopped(n, &now, StopHow::DaemonRestarted, None),
                    |l| l,
                );
            }
            Err(e) => tracing::warn!(session = %s.id, error = %e, "event log not writable"),
        }
        let failed = s.acp_session_id.is_none();
        app.sessions.update(&s.id, |r| {
            r.state = if failed {
                SessionState::Failed
            } else {
                SessionState::Stopped
            };
            if failed {
                r.error = Some("the daemon restarted before the session started".into());
            }
            r.busy = false;
            r.pending_permissions = 0;
            r.attached = 0;
        });
        tracing::info!(session = %s.id, "session marked stopped: the daemon restarted");
    }
}

/// The model a session was started with, as a ModelAccess.
fn access_of(s: &Session) -> ModelAccess {
    ModelAccess {
        // A provider's model names its harness; an account's is the account's.
        harness: Some(s.harness.clone()).filter(|h| !h.is_empty() && s.provider.is_some()),
        account: s.account.clone(),
        provider: s.provider.clone(),
        model: s.model.clone(),
    }
}
