//! `handler machine exec NAME -- ARGV…` (issue 29, decision 0144): the ExecSpec sent over
//! `WS /v1/machines/{id}/exec`, this process's stdin sent as frames, the machine's stdout and
//! stderr written here, and its exit code this command's.

use std::io::Write as _;

use futures_util::{SinkExt as _, StreamExt as _};
use handler_contracts::machine::ExecSpec;
use handler_contracts::machine::exec_channel::{
    ExecEnd, STDERR, STDIN, STDOUT, SUBPROTOCOL_EXEC, frame, unframe,
};
use tokio::io::AsyncReadExt as _;
use tokio_tungstenite::tungstenite::Message;

use super::out::{Ctx, seg};

/// The ExecSpec of `argv`, the variables named taken from this environment.
pub(crate) fn spec(
    argv: Vec<String>,
    cwd: Option<String>,
    user: Option<String>,
    names: &[String],
) -> anyhow::Result<ExecSpec> {
    let mut env = std::collections::BTreeMap::new();
    for n in names {
        let v = std::env::var(n).map_err(|_| {
            anyhow::anyhow!("--env {n}: no such variable here (set it, or leave it out)")
        })?;
        env.insert(n.clone(), v);
    }
    Ok(ExecSpec {
        argv,
        cwd,
        env,
        user,
        tty: false,
        start_stopped: false,
        injections: Vec::new(),
    })
}

/// Runs `spec` in machine `name`; returns its exit code.
pub(crate) async fn run(ctx: &Ctx, name: &str, spec: &ExecSpec) -> anyhow::Result<i32> {
    let path = format!("/v1/machines/{}/exec", seg(name));
    let ws =
        handler_core::client::connect_ws_as(ctx.api.discovery(), &path, SUBPROTOCOL_EXEC, None)
            .await
            .map_err(|e| anyhow::anyhow!("cannot run in machine {name}: {e}"))?;
    let (mut sink, mut stream) = ws.split();
    sink.send(Message::text(serde_json::to_string(spec)?))
        .await?;
    // Stdin, read by a task: frames until its end, then the empty frame that closes it there.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = tx.send(frame(STDIN, b"")).await;
                    return;
                }
                Ok(n) => {
                    if tx.send(frame(STDIN, &buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut stdin_open = true;
    loop {
        tokio::select! {
            f = rx.recv(), if stdin_open => match f {
                Some(f) => {
                    stdin_open = f.len() > 1;
                    if sink.send(Message::binary(f)).await.is_err() {
                        stdin_open = false;
                    }
                }
                None => stdin_open = false,
            },
            m = stream.next() => match m {
                Some(Ok(Message::Binary(b))) => match unframe(&b) {
                    Some((STDOUT, bytes)) => {
                        let mut o = std::io::stdout().lock();
                        o.write_all(bytes)?;
                        o.flush()?;
                    }
                    Some((STDERR, bytes)) => {
                        let mut e = std::io::stderr().lock();
                        e.write_all(bytes)?;
                        e.flush()?;
                    }
                    _ => {}
                },
                Some(Ok(Message::Text(t))) => {
                    let end: ExecEnd = serde_json::from_str(&t)?;
                    if let Some(why) = end.error {
                        anyhow::bail!("machine {name}: {why}");
                    }
                    // Killed by a signal: 128 + its number is not known here; 137 as a shell says.
                    return Ok(end.exit.unwrap_or(137));
                }
                Some(Ok(Message::Close(f))) => {
                    let why = f.map(|f| f.reason.to_string()).unwrap_or_default();
                    anyhow::bail!("machine {name}: the exec ended without its exit code {why}");
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => anyhow::bail!("machine {name}: the exec's connection failed: {e}"),
                None => anyhow::bail!("machine {name}: the exec's connection ended (is handlerd running?)"),
            },
        }
    }
}
