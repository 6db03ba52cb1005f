//! The ACP WebSocket endpoint (C.1–C.3): `/v1/agents/{id}/acp`. One socket = one sandbox = one
//! agent process: text frames (one JSON-RPC message each) go through the policy pipeline (C.4)
//! to the agent's stdin as NDJSON lines; the agent's stdout is re-framed line by line through
//! the pipeline to the client. Close → SIGTERM the sandbox; sandbox exit → close 1011.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use handler_contracts::acp::close;
use handler_contracts::control::ModelAccess;
use handler_policy::{Action, ClientId, Direction, Pipeline};
use tokio::sync::mpsc;

use super::running;
use super::ws::{close_msg, is_capacity, truncate};
use crate::daemon::launch::agent::{self as start_path, AgentOut, Place};
use crate::daemon::launch::gitguard::GuardSession;
use crate::daemon::launch::prepare::{Prepared, Purpose, canonicalize, prepare};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::{AppState, LiveAllow};
use crate::daemon::store::new_id;
use handler_contracts::control::{EgressRecord, ModelQuery};

/// The pipeline's own client number for this socket.
const CLIENT: ClientId = ClientId(1);

/// What an accepted connection carries to its relay: the prepared sandbox, the connection id,
/// the live allow-list and the git guard (issue 14), when its scope is a repository's root.
pub type Accepted = (
    Prepared,
    String,
    Option<LiveAllow>,
    Option<Arc<GuardSession>>,
);

/// What a connection starts with, before the upgrade: the agent (404), its model (the query's
/// or its first, 400), its sandbox prepared (400/409, the git guard's refusals 409), its
/// connection id and live allow-list.
pub fn accept(app: &AppState, id: &str, q: ModelQuery) -> ApiResult<Accepted> {
    let agent = app
        .agents
        .agent(id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let access = if q.account.is_some() || q.provider.is_some() {
        ModelAccess {
            harness: q.harness,
            account: q.account,
            provider: q.provider,
            model: q.model,
        }
    } else {
        let mut first = agent.models.first().cloned().ok_or_else(|| {
            ApiError::bad_request("model access unusable", "the agent has no model")
        })?;
        if q.model.is_some() {
            first.model = q.model;
        }
        first
    };
    let conn = new_id("c");
    let place = Place::connection(app, &conn);
    let prepared = prepare(app, &agent, &access, &place, Purpose::Connection)?;
    let allow = running::allow_of(app, &agent, &prepared);
    Ok((prepared, conn, allow, None))
}

/// After [`accept`] and before the upgrade: what its plan names made (the one every sandbox
/// gets, [`start_path::make`]) in `<data>/connections/<id>/guard/` — under `sessionTree =
/// "copy"` its checkout (decision 0122), else the guard of its scope's repository.
///
/// First, a sandbox that needs the network filter while it is not built: 503 at once (decision
/// 0178: an editor retries a connection; [`super::images::require_network_filter`]).
pub async fn guard(app: &AppState, accepted: &mut Accepted) -> ApiResult<()> {
    let (prepared, conn, _, guard) = accepted;
    super::images::require_network_filter(app, &prepared.spec).await?;
    *guard = start_path::make(app, &Place::connection(app, conn), prepared).await?;
    Ok(())
}

/// The git guard's moments on a connection (issue 14, items 2 and 3): the daemon sees the
/// `session/prompt` requests the pipeline hands to the agent and the agent's responses to them.
/// Before a prompt goes to the agent, follow; when its response comes back (the turn's end,
/// also a cancelled one), a bring-back, spawned (one at a time per connection).
struct Turns {
    guard: Option<Arc<GuardSession>>,
    /// The agent-side ids (raw JSON) of the prompts whose turn has not ended.
    prompts: HashSet<String>,
}

impl Turns {
    /// Follow before any `session/prompt` among `actions` reaches the agent; its id is noted.
    async fn before_agent(&mut self, app: &AppState, actions: &[Action]) {
        let Some(g) = &self.guard else { return };
        for a in actions {
            let Action::ToAgent(m) = a else { continue };
            if let Some(id) = request_id(m, "session/prompt") {
                g.follow(&*app.launcher).await;
                self.prompts.insert(id);
            }
        }
    }

    /// An agent's line: the response to a noted prompt starts a bring-back.
    fn agent_line(&mut self, app: &AppState, line: &[u8]) {
        let Some(g) = &self.guard else { return };
        if self.prompts.is_empty() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return;
        };
        let Some(id) = v.get("id").filter(|_| v.get("method").is_none()) else {
            return;
        };
        if self.prompts.remove(&id.to_string()) {
            let (g, app) = (g.clone(), app.clone());
            let reason = v
                .pointer("/result/stopReason")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("error");
            let when = format!("turn end ({reason})");
            tokio::spawn(async move { g.bring_back(&*app.launcher, &when).await });
        }
    }
}

/// The id (raw JSON) of `m` when it is a request for `method`.
fn request_id(m: &[u8], method: &str) -> Option<String> {
    if !m.windows(method.len()).any(|w| w == method.as_bytes()) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(m).ok()?;
    if v.get("method").and_then(serde_json::Value::as_str) != Some(method) {
        return None;
    }
    v.get("id").map(serde_json::Value::to_string)
}

/// One connection's life.
#[expect(
    clippy::too_many_lines,
    reason = "the select loop of one socket: both directions share its pipeline, pending writes and close"
)]
pub async fn relay(
    app: AppState,
    agent_id: String,
    (prepared, conn, allow, guard): Accepted,
    socket: WebSocket,
) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let pipeline = Pipeline::new(prepared.policy.clone()).map(|p| p.with_resolver(canonicalize));
    let mut pipeline = match pipeline {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(agent = %agent_id, error = %e, "policy configuration refused");
            let _ = ws_tx
                .send(close_msg(
                    close::AGENT_EXITED,
                    "policy configuration refused",
                ))
                .await;
            return;
        }
    };
    let mut running = match start_path::start(&app, &agent_id, &conn, &prepared, allow, |_| {}) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(agent = %agent_id, error = %e, "sandbox launch failed");
            let _ = ws_tx
                .send(close_msg(
                    close::AGENT_EXITED,
                    &truncate(&format!("launch failed: {e}"), 120),
                ))
                .await;
            return;
        }
    };
    let sandbox = running.sandbox.clone();
    let stop_signal = running.stop_signal();
    let in_tx = running.to_agent.clone();
    let max = app.config.max_message_bytes;
    tracing::info!(agent = %agent_id, connection = %conn, %sandbox, "ACP connection opened");

    let mut turns = Turns {
        guard: guard.clone(),
        prompts: HashSet::new(),
    };
    let ending: Option<(u16, String)>;
    loop {
        tokio::select! {
            msg = ws_rx.next() => {
                match msg {
                    Some(Ok(Message::Text(t))) => {
                        let actions = pipeline.handle(Direction::FromClient(CLIENT), t.as_bytes());
                        turns.before_agent(&app, &actions).await;
                        if !apply(&agent_id, actions, &in_tx, &mut ws_tx).await { ending = None; break; }
                    }
                    Some(Ok(Message::Binary(_))) => {
                        ending = Some((close::UNSUPPORTED_DATA, "binary frames are not ACP: one JSON-RPC message per text frame".into()));
                        break;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_))) | None => { ending = None; break; }
                    Some(Err(e)) => {
                        let too_big = is_capacity(&e);
                        tracing::info!(agent = %agent_id, error = %e, "client socket error");
                        ending = too_big.then(|| (close::MESSAGE_TOO_BIG, format!("a message over {max} bytes")));
                        break;
                    }
                }
            }
            out = running.from_agent.recv() => {
                match out {
                    Some(AgentOut::Line(l, _)) => {
                        if l.iter().all(u8::is_ascii_whitespace) { continue; }
                        turns.agent_line(&app, &l);
                        let actions = pipeline.handle(Direction::FromAgent, &l);
                        if !apply(&agent_id, actions, &in_tx, &mut ws_tx).await { ending = None; break; }
                    }
                    Some(AgentOut::TooBig) => {
                        ending = Some((close::MESSAGE_TOO_BIG, format!("the agent sent a message over {max} bytes")));
                        break;
                    }
                    Some(AgentOut::Eof) | None => {
                        let code = running.exit_code(Duration::from_secs(10)).await
                            .map_or_else(|| "signal".to_string(), |c| c.to_string());
                        ending = Some((close::AGENT_EXITED, format!("agent exited ({code})")));
                        break;
                    }
                }
            }
            _ = stop_signal.notified() => {
                ending = Some((1001, "the agent is stopping".into()));
                break;
            }
        }
    }
    drop(in_tx);
    if let Some((code, reason)) = &ending {
        let _ = ws_tx.send(close_msg(*code, &truncate(reason, 120))).await;
    }
    // A launcher that was killed could not clean up: swept at once (in `end`).
    let (exit, registration) = running
        .end(&app, guard.as_deref(), "connection close")
        .await;
    let _ = ws_tx.close().await;
    drop(registration);
    tracing::info!(agent = %agent_id, connection = %conn, %sandbox, exit = ?exit, close = ?ending.map(|e| e.0), "ACP connection closed, sandbox stopped");
}

/// Carries out the pipeline's actions; false when the client is gone.
async fn apply<S>(
    agent: &str,
    actions: Vec<Action>,
    to_agent: &mpsc::Sender<Vec<u8>>,
    ws_tx: &mut S,
) -> bool
where
    S: futures_util::Sink<Message> + Unpin,
{
    for a in actions {
        match a {
            Action::ToAgent(m) => {
                let _ = to_agent.send(m).await;
            }
            Action::ToClient(_, m) | Action::Broadcast { message: m, .. } => {
                let text = match String::from_utf8(m) {
                    Ok(t) => t,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                };
                if ws_tx.send(Message::Text(text.into())).await.is_err() {
                    return false;
                }
            }
            Action::Log(ev) => {
                tracing::info!(agent = %agent, event = %serde_json::to_string(&ev).unwrap_or_default(), "policy");
            }
        }
    }
    true
}

/// The egress events recorded for an agent (404 for an unknown agent).
pub fn egress_events(app: &AppState, id: &str) -> ApiResult<Vec<EgressRecord>> {
    if app.agents.agent(id).is_none() {
        return Err(ApiError::not_found(format!("agent {id:?}")));
    }
    let m = app
        .egress_events
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(m.get(id)
        .map(|q| q.iter().cloned().collect())
        .unwrap_or_default())
}
