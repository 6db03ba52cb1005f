//! The ACP WebSocket endpoint (C.1–C.3): `/v1/agents/{id}/acp`. One socket = one sandbox = one
//! agent process: text frames (one JSON-RPC message each) go through the policy pipeline (C.4)
//! to the agent's stdin as NDJSON lines; the agent's stdout is re-framed line by line through
//! the pipeline to the client. Close → SIGTERM the sandbox; sandbox exit → close 1011.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};
use handler_contracts::acp::close;
use handler_contracts::control::{AgentConnection, ModelAccess};
use handler_policy::{Action, ClientId, Direction, Pipeline};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};

use super::live;
use crate::daemon::fsutil;
use crate::daemon::launch::gitguard::{self, GuardSession};
use crate::daemon::launch::launcher::{Instance, read_stderr, stop, stop_and_sweep};
use crate::daemon::launch::prepare::{Prepared, canonicalize, prepare};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::{AppState, LiveAllow, LiveConnection};
use crate::daemon::store::new_id;
use handler_contracts::control::{EgressRecord, ModelQuery};

/// How long a sandbox has to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);
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
    let mut prepared = prepare(app, &agent, &access, (&conn, None))?;
    super::images::require_network_filter(app, &prepared.spec)?;
    let guard = if is_copy(&agent)? {
        // Decision 0122: the checkout is made by `with_copy`, async, before the upgrade.
        None
    } else {
        guard_connection(app, &conn, &mut prepared)?
    };
    let required: Vec<_> =
        handler_contracts::hosts::required_hosts(&app.snapshot(), &prepared.access)
            .into_iter()
            .map(|r| r.host)
            .collect();
    let allow = live::at_launch(app, &agent, &prepared.spec.network, &required);
    Ok((prepared, conn, allow, guard))
}

/// Whether the agent's sandboxes get `sessionTree = "copy"` (a wrong value: 400 naming it).
fn is_copy(agent: &crate::daemon::store::StoredAgent) -> ApiResult<bool> {
    use handler_sandbox::copytree::SessionTree;
    SessionTree::parse(agent.options.session_tree.as_deref())
        .map(|t| t == SessionTree::Copy)
        .map_err(|e| ApiError::bad_request("sessionTree unusable", e.to_string()))
}

/// Decision 0122: a connection of a `sessionTree = "copy"` agent (agent `agent_id`), after
/// [`accept`] and before the upgrade: its checkout made in `<data>/connections/<id>/guard/tree`
/// (the helper container's reset, async), the scope's mount replaced by it, and its guard — the
/// bring-back at each turn's end and at close (the uncommitted work then kept at
/// `refs/handler/sessions/<connection id>/uncommitted`), follow before each prompt. A refusal
/// (no repository, no commit, the guard's) is a 409 naming `sessionTree`. Nothing for any
/// other agent.
pub async fn with_copy(app: &AppState, agent_id: &str, accepted: &mut Accepted) -> ApiResult<()> {
    let agent = app
        .agents
        .agent(agent_id)
        .ok_or_else(|| ApiError::not_found(format!("agent {agent_id:?}")))?;
    if !is_copy(&agent)? {
        return Ok(());
    }
    let (prepared, conn, _, guard) = accepted;
    *guard = Some(copy_guard(app, conn, prepared).await?);
    Ok(())
}

/// The checkout and guard of [`with_copy`] for the sandbox `prepared` of connection `conn`.
async fn copy_guard(
    app: &AppState,
    conn: &str,
    prepared: &mut Prepared,
) -> ApiResult<Arc<GuardSession>> {
    let scope = gitguard::scope_source(&prepared.spec).ok_or_else(|| {
        ApiError::conflict(
            "sessionTree refused",
            "sessionTree: \"copy\" needs a scope to check out, and the connection has none",
        )
    })?;
    let folder = app.config.data_dir.join("connections").join(conn);
    let (g, mounts) = gitguard::prepare_copy(
        &*app.launcher,
        &gitguard::seen_dir(&app.config.data_dir),
        std::path::Path::new(&scope),
        &folder.join("guard"),
        &prepared.spec.image,
    )
    .await
    .map_err(|e| {
        if e.is_refusal() {
            ApiError::conflict("sessionTree refused", e.to_string())
        } else {
            ApiError::internal(e)
        }
    })?;
    gitguard::copy_into(&mut prepared.spec, &g, mounts, &scope);
    Ok(Arc::new(GuardSession::new(
        g,
        prepared.spec.image.clone(),
        conn.to_string(),
        folder.join(gitguard::LOG),
    )))
}

/// The git guard of any sandbox of `agent` outside a session (a connection, a terminal:
/// security F7): under `sessionTree = "copy"` its checkout (`copy_guard`), else the
/// guard of its scope's repository (`guard_connection`); refusals are 409s.
pub async fn guard_sandbox(
    app: &AppState,
    agent: &crate::daemon::store::StoredAgent,
    conn: &str,
    prepared: &mut Prepared,
) -> ApiResult<Option<Arc<GuardSession>>> {
    if is_copy(agent)? {
        return copy_guard(app, conn, prepared).await.map(Some);
    }
    guard_connection(app, conn, prepared)
}

/// Issue 14: the connection's own git directory in `<data>/connections/<id>/guard/`, its mounts
/// added; a refusal is a 409 naming each link.
fn guard_connection(
    app: &AppState,
    conn: &str,
    prepared: &mut Prepared,
) -> ApiResult<Option<Arc<GuardSession>>> {
    if gitguard::open_warned(&prepared.spec, conn) {
        return Ok(None);
    }
    let Some(scope) = gitguard::scope_source(&prepared.spec) else {
        return Ok(None);
    };
    let folder = app.config.data_dir.join("connections").join(conn);
    let mut mounts = Vec::new();
    let g = match gitguard::guard_scope(
        &gitguard::seen_dir(&app.config.data_dir),
        std::path::Path::new(&scope),
        &folder.join("guard"),
        &mut mounts,
    ) {
        Ok(Some(g)) => g,
        Ok(None) => return Ok(None),
        Err(e @ gitguard::GitGuardError::Refused(_)) => {
            return Err(ApiError::conflict(
                "git guard refused the scope",
                e.to_string(),
            ));
        }
        Err(e) => return Err(ApiError::internal(e)),
    };
    prepared.spec.mounts.extend(mounts);
    Ok(Some(Arc::new(GuardSession::new(
        g,
        prepared.spec.image.clone(),
        conn.to_owned(),
        folder.join(gitguard::LOG),
    ))))
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
        match memchr_nl(buf) {
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

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// One read of the agent's stdout.
pub(crate) enum AgentOut {
    /// A line, without its `\n`.
    Line(Vec<u8>),
    /// A line over the size limit.
    TooBig,
    /// The end of its output.
    Eof,
}

pub(crate) fn close_msg(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(reason.to_string()),
    }))
}

/// One connection's life.
// Over 80 lines: the two directions of one socket share its state (pipeline, pending writes, close); splitting it along C.2/C.3 is left for a later step (issue 12 item 6).
pub async fn relay(
    app: AppState,
    agent_id: String,
    (prepared, conn, allow, guard): Accepted,
    socket: WebSocket,
) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let sandbox = prepared.spec.name.clone();
    let Instance {
        mut child,
        stdin,
        stdout,
        stderr,
        ..
    } = match app.launcher.launch(&prepared.spec) {
        Ok(i) => i,
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
    let pipeline = Pipeline::new(prepared.policy.clone()).map(|p| p.with_resolver(canonicalize));
    let mut pipeline = match pipeline {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(agent = %agent_id, error = %e, "policy configuration refused");
            let _ = stop(&mut child, STOP_GRACE).await;
            let _ = ws_tx
                .send(close_msg(
                    close::AGENT_EXITED,
                    "policy configuration refused",
                ))
                .await;
            return;
        }
    };
    let stop_signal = Arc::new(Notify::new());
    {
        let mut m = app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(agent_id.clone()).or_default().push(LiveConnection {
            info: AgentConnection {
                id: conn.clone(),
                sandbox: sandbox.clone(),
                since: fsutil::now_rfc3339(),
                terminal: None,
            },
            stop: stop_signal.clone(),
            allow,
        });
    }
    app.agents.touch(&agent_id);
    tracing::info!(agent = %agent_id, connection = %conn, %sandbox, "ACP connection opened");
    let secrets: Vec<(String, String)> = prepared.policy.secrets.clone();

    // The agent's stdout, line by line.
    let max = app.config.max_message_bytes;
    let (out_tx, mut out_rx) = mpsc::channel::<AgentOut>(64);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(256 * 1024, stdout);
        loop {
            match read_line(&mut r, max).await {
                Ok(Some(l)) => {
                    if out_tx.send(AgentOut::Line(l)).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(false) => {
                    let _ = out_tx.send(AgentOut::Eof).await;
                    return;
                }
                Err(true) => {
                    let _ = out_tx.send(AgentOut::TooBig).await;
                    return;
                }
            }
        }
    });
    // Its stderr: egress events recorded, the rest logged (secret values replaced).
    {
        let app = app.clone();
        let agent_id = agent_id.clone();
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            // Bounded lines (crate::daemon::launch::launcher::read_stderr).
            read_stderr(
                stderr,
                |ev| {
                    tracing::info!(agent = %agent_id, %sandbox, decision = ?ev.decision, host = %ev.host, "egress");
                    app.record_egress(&agent_id, &sandbox, ev);
                },
                |line| {
                    let l = handler_policy::redact(&line, &secrets);
                    tracing::info!(agent = %agent_id, %sandbox, line = %l, "sandbox stderr");
                },
            )
            .await;
        });
    }
    // Writes to the agent, in order, without blocking the loop.
    let (in_tx, mut in_rx) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(mut m) = in_rx.recv().await {
            m.push(b'\n');
            if stdin.write_all(&m).await.is_err() || stdin.flush().await.is_err() {
                return;
            }
        }
    });

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
            out = out_rx.recv() => {
                match out {
                    Some(AgentOut::Line(l)) => {
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
                        let code = match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
                            Ok(Ok(st)) => st.code().map_or_else(|| "signal".to_string(), |c| c.to_string()),
                            _ => "unknown".to_string(),
                        };
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
    // A launcher that was killed could not clean up: swept at once.
    let exit = stop_and_sweep(&*app.launcher, &mut child, STOP_GRACE).await;
    let _ = ws_tx.close().await;
    if let Some(g) = guard {
        g.bring_back_at_end(&*app.launcher, "connection close")
            .await;
    }
    {
        let mut m = app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = m.get_mut(&agent_id) {
            v.retain(|c| c.info.id != conn);
            if v.is_empty() {
                m.remove(&agent_id);
            }
        }
    }
    app.connections_changed.notify_waiters();
    tracing::info!(agent = %agent_id, connection = %conn, %sandbox, exit = ?exit, close = ?ending.map(|e| e.0), "ACP connection closed, sandbox stopped");
}

pub(crate) fn truncate(s: &str, n: usize) -> String {
    // A close reason is at most 123 bytes.
    let mut out = String::new();
    for c in s.chars() {
        if out.len() + c.len_utf8() > n {
            break;
        }
        out.push(c);
    }
    out
}

pub(crate) fn is_capacity(e: &axum::Error) -> bool {
    // tungstenite's CapacityError, as axum wraps it: "Space limit exceeded: Message too long: …".
    let text = format!("{e} {:?}", e);
    text.contains("Message too long")
        || text.contains("Space limit exceeded")
        || text.contains("Capacity")
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
