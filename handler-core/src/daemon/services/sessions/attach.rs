//! One attachment's WebSocket side (F.4, C.1 transport): the session made to run (restarted,
//! or its start waited for; 1011 with the reason when it cannot), then text frames to the hub
//! and the attachment's queue to the socket: a replay streamed from the log file, then live
//! traffic. Closing the socket only detaches.

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use handler_contracts::acp::close;
use handler_policy::ClientId;
use tokio::sync::{mpsc, oneshot};

use super::hub::{Handle, Inbox, Out, Started, replay_lines, wait_started};
use super::lifecycle::ensure_running;
use crate::daemon::services::ws::{close_msg, is_capacity, truncate};
use crate::daemon::state::AppState;

/// An attachment joined to its hub.
pub(crate) struct Joined {
    pub(crate) client: ClientId,
    pub(crate) handle: Handle,
    pub(crate) out: mpsc::Receiver<Out>,
    pub(crate) close: oneshot::Receiver<(u16, String)>,
}

/// Makes the session run and joins it (a hub ending while we join: tried again).
pub(crate) async fn join(app: &AppState, id: &str) -> Result<Joined, String> {
    for _ in 0..150 {
        let handle =
            ensure_running(app, id, None, None).map_err(|e| e.detail.unwrap_or(e.title))?;
        if let Started::Failed(r) = wait_started(&handle).await {
            return Err(r);
        }
        let (out_tx, out) = mpsc::channel(app.config.session_queue.max(1));
        let (close_tx, close) = oneshot::channel();
        let (reply_tx, reply) = oneshot::channel();
        let attach = Inbox::Attach {
            out: out_tx,
            close: close_tx,
            reply: reply_tx,
        };
        if handle.inbox.send(attach).await.is_ok()
            && let Ok(client) = reply.await
        {
            return Ok(Joined {
                client,
                handle,
                out,
                close,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err("the session could not be started".into())
}

/// One attachment's life.
pub async fn attach(app: AppState, id: String, socket: WebSocket) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let mut j = match join(&app, &id).await {
        Ok(j) => j,
        Err(reason) => {
            tracing::info!(session = %id, %reason, "attach refused: the session cannot run");
            let _ = ws_tx
                .send(close_msg(close::AGENT_EXITED, &truncate(&reason, 120)))
                .await;
            return;
        }
    };
    tracing::info!(session = %id, client = j.client.0, "attached");
    let max = app.config.max_message_bytes;
    let ending: Option<(u16, String)> = loop {
        tokio::select! {
            biased;
            out = j.out.recv() => match out {
                Some(Out::Text(t)) => {
                    if ws_tx.send(Message::Text(t.into())).await.is_err() { break None; }
                }
                Some(Out::Replay(r)) => {
                    let lines = tokio::task::spawn_blocking(move || replay_lines(&r)).await.unwrap_or_default();
                    // Fed without a flush per message, flushed once (decision 0058).
                    let mut ok = true;
                    for l in lines {
                        if ws_tx.feed(Message::Text(l.into())).await.is_err() { ok = false; break; }
                    }
                    if !ok || ws_tx.flush().await.is_err() { break None; }
                }
                None => break j.close.try_recv().ok().or(Some((close::SESSION_STOPPED, "session stopped".into()))),
            },
            c = &mut j.close => break c.ok(),
            msg = ws_rx.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let f = Inbox::Frame { client: j.client, text: t.to_string() };
                    if j.handle.inbox.send(f).await.is_err() {
                        break Some((close::SESSION_STOPPED, "session stopped".into()));
                    }
                }
                Some(Ok(Message::Binary(_))) => break Some((close::UNSUPPORTED_DATA, "binary frames are not ACP: one JSON-RPC message per text frame".into())),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Err(e)) => break is_capacity(&e).then(|| (close::MESSAGE_TOO_BIG, format!("a message over {max} bytes"))),
            },
        }
    };
    let _ = j
        .handle
        .inbox
        .send(Inbox::Detach { client: j.client })
        .await;
    if let Some((code, reason)) = &ending {
        let _ = ws_tx.send(close_msg(*code, &truncate(reason, 120))).await;
    }
    let _ = ws_tx.close().await;
    tracing::info!(session = %id, client = j.client.0, close = ?ending.map(|e| e.0), "detached");
}
