//! The remote connector (docs/remote.md § The connector): one task that long-polls the gateway
//! outbound for this daemon's mailbox, opens each envelope (a refused one is logged by its
//! reason, never its content, and the device told), answers the remote methods, and runs each
//! device's attachments as ordinary F.7 attachments of the session's hub — the policy applies
//! between the device and the agent as for any client. A sender task seals and posts what goes
//! back, in order, with one counter per device kept above every one used before a restart.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use handler_contracts::acp::close;
use handler_contracts::remote::api::RemoteState;
use handler_contracts::remote::device::{
    self as dev, Closed, ERR_NOT_ALLOWED, ERR_NOT_ATTACHED, ERR_NOT_SHARED, SessionFrame,
    SharedSession, StartableAgent,
};
use handler_contracts::remote::envelope::{Envelope, KeyPair, Link, Role};
use handler_contracts::remote::gateway::{Mail, MailBatch};
use handler_contracts::remote::key32;
use handler_contracts::session::SessionState;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::record::{Device, Devices, Settings};
use super::{Attached, TOKEN_SECRET, http, key_pair, lock};
use crate::daemon::fsutil;
use crate::daemon::services::sessions::{Inbox, Out, join, replay_lines};
use crate::daemon::state::AppState;

/// How long one poll waits at the gateway.
const WAIT_SECS: u64 = 20;
/// Counters reserved at once towards a device (written before use).
const RESERVE: u64 = 1000;
/// The most bytes of one answer of the gateway read (a batch is at most 50 envelopes of under
/// 1 MiB): a hostile gateway cannot make handlerd hold more.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// A JSON answer read up to `max` bytes (None: longer, cut off, or not that JSON).
async fn bounded_json<T: serde::de::DeserializeOwned>(
    mut r: reqwest::Response,
    max: usize,
) -> Option<T> {
    let mut buf = Vec::new();
    while let Some(chunk) = r.chunk().await.ok()? {
        if buf.len() + chunk.len() > max {
            return None;
        }
        buf.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&buf).ok()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

use super::Outbox;

/// The connector, for the daemon's life: off without a gateway, polling with one, started
/// again when the settings change.
pub async fn run(app: AppState) {
    loop {
        let changed = app.remote.changed.notified();
        let Some(s) = Settings::read(&app.config.state_dir) else {
            app.remote.set_light(RemoteState::Off, None);
            changed.await;
            continue;
        };
        let (Ok(token), Ok(key)) = (app.secrets.value(TOKEN_SECRET), key_pair(&app)) else {
            app.remote.set_light(
                RemoteState::Unauthorized,
                Some("no credential: set it up again".into()),
            );
            changed.await;
            continue;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&app.remote.outbox) = Some(tx.clone());
        let sender = tokio::spawn(send_loop(
            app.clone(),
            s.clone(),
            token.clone(),
            key.clone(),
            rx,
        ));
        tokio::select! {
            () = poll_loop(&app, &s, &token, &key, &tx) => {}
            () = changed => {}
        }
        sender.abort();
        *lock(&app.remote.outbox) = None;
    }
}

/// One long poll of the gateway: the batch, or None with the light saying why.
async fn poll_once(
    app: &AppState,
    client: &reqwest::Client,
    s: &Settings,
    token: &str,
    after: u64,
) -> Option<MailBatch> {
    let r = client
        .get(format!(
            "{}/v1/mail?after={after}&wait={WAIT_SECS}",
            s.gateway
        ))
        .bearer_auth(token)
        .send()
        .await;
    match r {
        Ok(r) if r.status() == reqwest::StatusCode::UNAUTHORIZED => {
            app.remote.set_light(
                RemoteState::Unauthorized,
                Some(
                    "the gateway refused this daemon's credential: `handler remote setup` again"
                        .into(),
                ),
            );
            None
        }
        Ok(r) if r.status().is_success() => {
            let batch = bounded_json::<MailBatch>(r, MAX_ANSWER).await;
            if batch.is_none() {
                app.remote.set_light(
                    RemoteState::Unreachable,
                    Some(format!(
                        "the gateway's answer is not a mail batch of at most {MAX_ANSWER} bytes"
                    )),
                );
            }
            batch
        }
        Ok(r) => {
            app.remote.set_light(
                RemoteState::Unreachable,
                Some(format!("the gateway answered {}", r.status())),
            );
            None
        }
        Err(e) => {
            app.remote
                .set_light(RemoteState::Unreachable, Some(e.to_string()));
            None
        }
    }
}

async fn poll_loop(app: &AppState, s: &Settings, token: &str, key: &KeyPair, out: &Outbox) {
    let client = http();
    let mut after = 0u64;
    let mut backoff = 1u64;
    loop {
        let batch = poll_once(app, &client, s, token, after).await;
        let Some(batch) = batch else {
            tokio::time::sleep(Duration::from_secs(backoff)).await;
            backoff = (backoff * 2).min(30);
            continue;
        };
        backoff = 1;
        light_from_attachments(app);
        for m in batch.messages {
            after = after.max(m.seq());
            match m {
                Mail::Paired {
                    pairing_id,
                    device_id,
                    device_pk,
                    proof,
                    name,
                    ..
                } => {
                    paired(
                        app,
                        s,
                        token,
                        key,
                        &pairing_id,
                        &device_id,
                        &device_pk,
                        &proof,
                        &name,
                    )
                    .await;
                }
                Mail::Envelope { envelope, .. } => opened(app, key, &envelope, out),
            }
        }
    }
}

fn light_from_attachments(app: &AppState) {
    let n = app.remote.attached_count();
    app.remote.set_light(
        if n > 0 {
            RemoteState::Ok
        } else {
            RemoteState::Idle
        },
        None,
    );
}

/// A device claimed a pairing: kept when its proof holds, revoked at the gateway otherwise.
#[allow(
    clippy::too_many_arguments,
    reason = "the notice's fields, as the gateway gives them"
)]
async fn paired(
    app: &AppState,
    s: &Settings,
    token: &str,
    key: &KeyPair,
    pairing_id: &str,
    device_id: &str,
    device_pk: &str,
    proof: &str,
    name: &str,
) {
    let keys = lock(&app.remote.pending).remove(pairing_id).map(|(k, _)| k);
    let holds = match (keys, key32(device_pk)) {
        (Some(k), Some(pk)) => k.device_proof_holds(&pk, &key.public(), proof),
        _ => false,
    };
    let valid_id = device_id.len() == 18
        && device_id.starts_with("v_")
        && device_id[2..].bytes().all(|b| b.is_ascii_hexdigit());
    if !holds || !valid_id {
        tracing::warn!(device = %device_id.escape_debug(), "pairing refused: the proof does not hold (a wrong or old code); device revoked");
        let _ = revoke_with(s, token, device_id).await;
        return;
    }
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    let _g = lock(&app.remote.records);
    let mut d = Devices::read(&app.config.state_dir);
    d.list.retain(|x| x.id != device_id);
    d.list.push(Device {
        id: device_id.to_owned(),
        name,
        public_key: device_pk.to_owned(),
        paired_at: fsutil::now_rfc3339(),
        last_seen_at: None,
        recv_n: 0,
        send_reserved: 0,
    });
    if let Err(e) = d.write(&app.config.state_dir) {
        tracing::error!(error = %e, "devices.json not written: the device is not kept");
        return;
    }
    tracing::info!(device = %device_id, "device paired");
}

async fn revoke_with(s: &Settings, token: &str, device: &str) -> Result<(), reqwest::Error> {
    http()
        .delete(format!("{}/v1/devices/{device}", s.gateway))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()
        .map(|_| ())
}

/// Revokes a device at the gateway (its credential gets 401 from then on).
pub(super) async fn revoke_at_gateway(
    app: &AppState,
    s: &Settings,
    device: &str,
) -> Result<(), String> {
    let token = app.secrets.value(TOKEN_SECRET).map_err(|e| e.to_string())?;
    match revoke_with(s, &token, device).await {
        Ok(()) => Ok(()),
        Err(e) if e.status() == Some(reqwest::StatusCode::NOT_FOUND) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn link_of(key: &KeyPair, daemon: &str, d: &Device) -> Option<Link> {
    let pk = key32(&d.public_key)?;
    Link::new(Role::Daemon, daemon, &d.id, key, &pk).ok()
}

/// An envelope from the gateway: opened, or refused by its reason (logged without content; a
/// known device is told why).
fn opened(app: &AppState, key: &KeyPair, e: &Envelope, out: &Outbox) {
    let Some(s) = Settings::read(&app.config.state_dir) else {
        return;
    };
    let device = Devices::read(&app.config.state_dir)
        .list
        .into_iter()
        .find(|d| d.id == e.from || (e.from == s.daemon_id && d.id == e.to));
    let Some(device) = device else {
        tracing::warn!(
            reason = "misrouted",
            "envelope refused: from no paired device"
        );
        return;
    };
    let Some(link) = link_of(key, &s.daemon_id, &device) else {
        return;
    };
    let plain = match link.open(e, now_ms(), device.recv_n) {
        Ok(p) => p,
        Err(r) => {
            tracing::warn!(device = %device.id, n = e.n, reason = r.word(), "envelope refused");
            let notice = json!({"refused": {"reason": r.word(), "n": e.n}});
            let _ = out.send((device.id.clone(), notice.to_string()));
            return;
        }
    };
    {
        let _g = lock(&app.remote.records);
        let mut all = Devices::read(&app.config.state_dir);
        if let Some(d) = all.list.iter_mut().find(|d| d.id == device.id) {
            d.recv_n = e.n;
            d.last_seen_at = Some(fsutil::now_rfc3339());
        }
        if let Err(err) = all.write(&app.config.state_dir) {
            tracing::error!(error = %err, "devices.json not written: envelope dropped");
            return;
        }
    }
    let Ok(v) = serde_json::from_slice::<Value>(&plain) else {
        tracing::warn!(device = %device.id, "a device's message is not JSON: dropped");
        return;
    };
    dispatch(app, &device.id, v, out);
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn is_shared(app: &AppState, session: &str) -> bool {
    app.sessions.get(session).is_some_and(|s| {
        s.remote && matches!(s.state, SessionState::Running | SessionState::Starting)
    })
}

/// One opened message of a device: an attached session's ACP, or a remote method.
fn dispatch(app: &AppState, device: &str, v: Value, out: &Outbox) {
    match serde_json::from_value::<SessionFrame>(v.clone()) {
        Ok(f) => session_frame(app, device, f, out),
        Err(_) => method(app, device, &v, out),
    }
}

/// An ACP message for an attached session: refused when not shared (-32020), not allowed
/// (-32022) or not attached (-32021); else given to the attachment.
fn session_frame(app: &AppState, device: &str, f: SessionFrame, out: &Outbox) {
    let Some(m) = f.message else { return };
    let id = m.get("id").cloned();
    let method = m.get("method").and_then(Value::as_str);
    let refuse = |code, msg: &str| {
        if let Some(id) = &id {
            let v = json!({"session": f.session, "message": rpc_error(id, code, msg)});
            let _ = out.send((device.to_owned(), v.to_string()));
        }
    };
    if !is_shared(app, &f.session) {
        return refuse(ERR_NOT_SHARED, "not shared");
    }
    if !dev::acp_allowed(method) {
        return refuse(ERR_NOT_ALLOWED, "not allowed from a device");
    }
    let to_hub = lock(&app.remote.attached)
        .iter()
        .find(|a| a.device == device && a.session == f.session)
        .map(|a| a.to_hub.clone());
    match to_hub {
        Some(tx) => {
            let _ = tx.try_send(m.to_string());
        }
        None => refuse(ERR_NOT_ATTACHED, "not attached"),
    }
}

/// A remote method: `remote/sessions`, `remote/attach`, `remote/detach`; anything else -32022.
fn method(app: &AppState, device: &str, v: &Value, out: &Outbox) {
    let send = |v: Value| {
        let _ = out.send((device.to_owned(), v.to_string()));
    };
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    let session = v
        .pointer("/params/sessionId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match v.get("method").and_then(Value::as_str) {
        Some(dev::METHOD_SESSIONS) => {
            let list: Vec<SharedSession> = app
                .sessions
                .list()
                .into_iter()
                .filter(|s| is_shared(app, &s.id))
                .map(listed)
                .collect();
            send(json!({"jsonrpc": "2.0", "id": id, "result": {"sessions": list}}));
        }
        Some(dev::METHOD_ATTACH) => attach_method(app, device, session, id, out),
        Some(dev::METHOD_AGENTS) => {
            send(json!({"jsonrpc": "2.0", "id": id, "result": {"agents": startable(app)}}));
        }
        Some(dev::METHOD_START) => {
            let agent = v
                .pointer("/params/agentId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !app.agents.agent(agent).is_some_and(|a| a.remote_start) {
                return send(rpc_error(
                    &id,
                    ERR_NOT_ALLOWED,
                    "this agent does not let devices start sessions (remoteStart)",
                ));
            }
            let prompt = v
                .pointer("/params/prompt")
                .and_then(Value::as_str)
                .map(String::from);
            let (app, device, agent, out) = (
                app.clone(),
                device.to_owned(),
                agent.to_owned(),
                out.clone(),
            );
            tokio::spawn(async move { start(&app, &device, &agent, prompt, id, &out).await });
        }
        Some(dev::METHOD_DETACH) => {
            close_all(
                app,
                |a| a.device == device && a.session == session,
                1000,
                "detached",
            );
            send(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
        }
        _ => send(rpc_error(
            &id,
            ERR_NOT_ALLOWED,
            "not a method a device may call",
        )),
    }
}

/// `remote/attach`: refused when not shared (-32020); answered at once when already attached;
/// else the device's attachment started (it answers once joined).
fn attach_method(app: &AppState, device: &str, session: String, id: Value, out: &Outbox) {
    let send = |v: Value| {
        let _ = out.send((device.to_owned(), v.to_string()));
    };
    if !is_shared(app, &session) {
        return send(rpc_error(&id, ERR_NOT_SHARED, "not shared"));
    }
    let already = lock(&app.remote.attached)
        .iter()
        .any(|a| a.device == device && a.session == session);
    if already {
        return send(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    }
    let (to_hub, from_device) = mpsc::channel(256);
    let (close_tx, close_rx) = oneshot::channel();
    lock(&app.remote.attached).push(Attached {
        device: device.to_owned(),
        session: session.clone(),
        to_hub,
        close: Some(close_tx),
    });
    tokio::spawn(attachment(
        app.clone(),
        device.to_owned(),
        session,
        id,
        from_device,
        close_rx,
        out.clone(),
    ));
}

/// A session as `remote/sessions` lists it.
fn listed(s: handler_contracts::session::Session) -> SharedSession {
    SharedSession {
        id: s.id,
        agent_id: s.agent_id,
        acp_session_id: s.acp_session_id,
        cwd: s.scope,
        title: s.title,
        busy: s.busy,
        pending_permissions: s.pending_permissions,
    }
}

/// The agents a device may start sessions of (`remoteStart`).
fn startable(app: &AppState) -> Vec<StartableAgent> {
    app.agents
        .agents()
        .into_iter()
        .filter(|a| a.remote_start)
        .map(|a| StartableAgent {
            name: a
                .name
                .clone()
                .or_else(|| {
                    a.scope
                        .as_deref()
                        .and_then(|s| s.rsplit('/').next())
                        .map(String::from)
                })
                .unwrap_or_else(|| a.id.clone()),
            id: a.id,
            project_id: a.project_id,
        })
        .collect()
}

/// `remote/start`: a session of a `remoteStart` agent, started for the device (origin `phone`)
/// and shared; its listing answered, or why it could not start.
async fn start(
    app: &AppState,
    device: &str,
    agent: &str,
    prompt: Option<String>,
    id: Value,
    out: &Outbox,
) {
    let req = handler_contracts::session::SessionRequest {
        agent_id: agent.to_owned(),
        model: None,
        prompt,
        acp_session_id: None,
        input: None,
        from_skill: None,
        origin: handler_contracts::session::SessionOrigin::Phone,
    };
    let answer = match crate::daemon::services::sessions::create(app, req).await {
        Ok(s) => match super::share(app, &s.id) {
            Ok(s) => {
                tracing::info!(session = %s.id, %device, %agent, "session started from a device");
                json!({"jsonrpc": "2.0", "id": id, "result": listed(s)})
            }
            Err(e) => rpc_error(&id, -32603, &e.problem().detail.unwrap_or_default()),
        },
        Err(e) => rpc_error(
            &id,
            -32603,
            &e.problem().detail.unwrap_or_else(|| e.problem().title),
        ),
    };
    let _ = out.send((device.to_owned(), answer.to_string()));
}

/// Closes the devices' attachments `which` holds for (the device is told `code`).
pub(super) fn close_all(
    app: &AppState,
    which: impl Fn(&Attached) -> bool,
    code: u16,
    reason: &str,
) {
    for a in lock(&app.remote.attached).iter_mut().filter(|a| which(a)) {
        if let Some(c) = a.close.take() {
            let _ = c.send((code, reason.to_owned()));
        }
    }
}

fn frame(session: &str, message: &str) -> String {
    format!(r#"{{"session":{},"message":{message}}}"#, json!(session))
}

/// One device's attachment to a session: joined to the hub as any client, its traffic sealed
/// to the device, the device's ACP given to the hub; closed by the hub (4001, 4002, 4003), by
/// unsharing or revoking (4004), or by the device.
async fn attachment(
    app: AppState,
    device: String,
    session: String,
    reply: Value,
    mut from_device: mpsc::Receiver<String>,
    mut closing: oneshot::Receiver<(u16, String)>,
    out: Outbox,
) {
    let send = |text: String| {
        let _ = out.send((device.clone(), text));
    };
    let mut j = match join(&app, &session).await {
        Ok(j) => j,
        Err(reason) => {
            lock(&app.remote.attached).retain(|a| !(a.device == device && a.session == session));
            send(rpc_error(&reply, -32603, &reason).to_string());
            return;
        }
    };
    send(json!({"jsonrpc": "2.0", "id": reply, "result": {}}).to_string());
    light_from_attachments(&app);
    tracing::info!(session = %session, %device, client = j.client.0, "device attached");
    let ending: Option<(u16, String)> = loop {
        tokio::select! {
            biased;
            o = j.out.recv() => match o {
                Some(Out::Text(t)) => send(frame(&session, &t)),
                Some(Out::Replay(r)) => {
                    let lines = tokio::task::spawn_blocking(move || replay_lines(&r)).await.unwrap_or_default();
                    for l in lines {
                        send(frame(&session, &l));
                    }
                }
                None => break j.close.try_recv().ok().or(Some((close::SESSION_STOPPED, "session stopped".into()))),
            },
            c = &mut j.close => break c.ok(),
            c = &mut closing => break c.ok(),
            m = from_device.recv() => match m {
                Some(text) => {
                    if j.handle.inbox.send(Inbox::Frame { client: j.client, text }).await.is_err() {
                        break Some((close::SESSION_STOPPED, "session stopped".into()));
                    }
                }
                None => break None,
            },
        }
    };
    let _ = j
        .handle
        .inbox
        .send(Inbox::Detach { client: j.client })
        .await;
    lock(&app.remote.attached).retain(|a| !(a.device == device && a.session == session));
    if let Some((code, reason)) = ending {
        let f = SessionFrame {
            session: session.clone(),
            message: None,
            closed: Some(Closed { code, reason }),
        };
        send(serde_json::to_string(&f).unwrap_or_default());
    }
    light_from_attachments(&app);
    tracing::info!(session = %session, %device, "device detached");
}

/// Seals and posts what goes to devices, in order; a full mailbox or an unreachable gateway is
/// tried again (for a minute), a device the gateway no longer knows is dropped.
async fn send_loop(
    app: AppState,
    s: Settings,
    token: String,
    key: KeyPair,
    mut rx: mpsc::UnboundedReceiver<(String, String)>,
) {
    let client = http();
    let mut next: HashMap<String, u64> = HashMap::new();
    while let Some((device, text)) = rx.recv().await {
        let Some(d) = Devices::read(&app.config.state_dir)
            .list
            .into_iter()
            .find(|d| d.id == device)
        else {
            continue;
        };
        let Some(link) = link_of(&key, &s.daemon_id, &d) else {
            continue;
        };
        let n = next.get(&device).copied().unwrap_or(d.send_reserved) + 1;
        if n > d.send_reserved {
            let _g = lock(&app.remote.records);
            let mut all = Devices::read(&app.config.state_dir);
            if let Some(x) = all.list.iter_mut().find(|x| x.id == device) {
                x.send_reserved = n + RESERVE;
            }
            if all.write(&app.config.state_dir).is_err() {
                tracing::error!("devices.json not written: a message to a device dropped");
                continue;
            }
        }
        next.insert(device.clone(), n);
        let e = link.seal(n, now_ms(), rand::random(), text.as_bytes());
        let url = format!("{}/v1/mail/{device}", s.gateway);
        for attempt in 0..12u32 {
            match client.post(&url).bearer_auth(&token).json(&e).send().await {
                Ok(r) if r.status().is_success() => break,
                Ok(r) if r.status() == reqwest::StatusCode::FORBIDDEN => break,
                Ok(r) => {
                    tracing::debug!(status = %r.status(), attempt, "envelope not taken: again");
                }
                Err(err) => tracing::debug!(error = %err, attempt, "envelope not posted: again"),
            }
            tokio::time::sleep(Duration::from_millis(250u64 << attempt.min(7))).await;
        }
    }
}
