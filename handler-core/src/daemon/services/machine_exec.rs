//! A process in a machine over a WebSocket (issue 29 item 7, decision 0144): the client's
//! ExecSpec checked (the field named), the runtime's `machine exec` started with it on fd 3, its
//! stdout and stderr sent as frames, the client's frames written to its stdin, and its end sent
//! last. A client that goes away ends the process (SIGTERM, then SIGKILL after a grace).

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt as _, StreamExt as _};
use handler_contracts::machine::ExecSpec;
use handler_contracts::machine::exec_channel::{ExecEnd, STDERR, STDIN, STDOUT, frame, unframe};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::ws::close_msg;
use crate::daemon::launch::launcher::{self, Instance};
use crate::daemon::state::AppState;

/// How long the client has to send its ExecSpec.
const SPEC_WITHIN: Duration = Duration::from_secs(30);
/// How long a process whose client left has after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);
/// The largest frame of output sent.
const CHUNK: usize = 64 * 1024;

fn end_msg(end: &ExecEnd) -> Message {
    Message::Text(serde_json::to_string(end).unwrap_or_default().into())
}

/// Refuses the exec: its reason as the end, then a policy close.
async fn refuse(mut socket: WebSocket, why: String) {
    let _ = socket
        .send(end_msg(&ExecEnd {
            exit: None,
            error: Some(why.clone()),
        }))
        .await;
    let _ = socket
        .send(close_msg(1008, &super::ws::truncate(&why, 120)))
        .await;
}

/// The ExecSpec the client sent first, checked.
async fn read_spec(socket: &mut WebSocket) -> Result<ExecSpec, String> {
    let first = tokio::time::timeout(SPEC_WITHIN, socket.recv())
        .await
        .map_err(|_| format!("no ExecSpec within {} s", SPEC_WITHIN.as_secs()))?;
    let Some(Ok(Message::Text(t))) = first else {
        return Err("the first message must be the ExecSpec, as text".into());
    };
    let spec: ExecSpec = serde_json::from_str(&t).map_err(|e| format!("the ExecSpec: {e}"))?;
    spec.check().map_err(|e| e.to_string())?;
    if spec.tty {
        return Err("tty: this channel carries pipes, not a terminal (leave tty false)".into());
    }
    if !spec.injections.is_empty() {
        // Keys reach a machine only with an agent's session, from its own plan (0166).
        return Err(
            "injections: an exec of this channel brings no keys; an agent's session brings its own"
                .into(),
        );
    }
    Ok(spec)
}

/// Sends what `r` gives as frames of `stream` until its end.
fn pump(mut r: impl AsyncRead + Unpin + Send + 'static, stream: u8, tx: mpsc::Sender<Vec<u8>>) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(frame(stream, &buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Serves one exec in machine `id`.
pub async fn serve(app: AppState, id: String, mut socket: WebSocket) {
    let spec = match read_spec(&mut socket).await {
        // A dev container's user, folder and variables under the exec's own (decision 0161).
        Ok(s) => super::machines::exec_defaults(&app, &id, s),
        Err(why) => return refuse(socket, why).await,
    };
    let Instance {
        mut child,
        stdin,
        stdout,
        stderr,
        ..
    } = match app.launcher.machine_exec(&id, &spec) {
        Ok(i) => i,
        Err(e) => return refuse(socket, e.to_string()).await,
    };
    // Its program only: an argument or a value may be something the person keeps to themself.
    tracing::info!(machine = %id, program = %spec.argv[0], "machine exec");
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(16);
    pump(stdout, STDOUT, out_tx.clone());
    pump(stderr, STDERR, out_tx);
    let (mut sink, mut stream) = socket.split();
    // The client's frames go to stdin; its leaving is the process's end.
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut stdin = Some(stdin);
        while let Some(Ok(m)) = stream.next().await {
            match m {
                Message::Binary(b) => match unframe(&b) {
                    Some((STDIN, [])) => stdin = None,
                    Some((STDIN, bytes)) => {
                        if let Some(w) = stdin.as_mut()
                            && (w.write_all(bytes).await.is_err() || w.flush().await.is_err())
                        {
                            stdin = None;
                        }
                    }
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });
    loop {
        tokio::select! {
            f = out_rx.recv() => match f {
                Some(f) => {
                    if sink.send(Message::Binary(f.into())).await.is_err() {
                        launcher::stop(&mut child, GRACE).await;
                        return;
                    }
                }
                None => break,
            },
            _ = &mut gone => {
                let code = launcher::stop(&mut child, GRACE).await;
                tracing::info!(machine = %id, ?code, "machine exec ended: its client left");
                return;
            }
        }
    }
    let exit = child.wait().await.ok().and_then(|s| s.code());
    let _ = sink.send(end_msg(&ExecEnd { exit, error: None })).await;
    let _ = sink.send(close_msg(1000, "")).await;
}
