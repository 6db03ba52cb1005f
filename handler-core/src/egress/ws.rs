//! Relaying an upgraded WebSocket connection through the proxy, frames passed on as they are, and
//! closing it when a policy change no longer allows its destination (egress-lessons): the frame in
//! flight in each direction is finished (the pure `wsframe` tracker says where it ends), then the
//! client gets a close frame with code 1012 and the server a masked one, and both connections end.

use std::future::Future;
use std::time::Duration;

use handler_sandbox::egress::wsframe::{self, FrameTracker, POLICY_CHANGED, SERVICE_RESTART};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::watch;

/// How long after a revocation the relay lets the frames in flight end and the peers answer the
/// close, before it drops both connections whatever their state.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

const BUF: usize = 16 * 1024;

/// How a relayed WebSocket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Both sides closed it.
    Closed,
    /// A policy change revoked it; the close frames were sent where a frame boundary was reached.
    Revoked,
}

/// Relays `client` ⇄ `server` (both already upgraded) until both directions end, or `revoked`
/// resolves: then each direction finishes its frame in flight and gets a close frame 1012 — the
/// client's unmasked, the server's masked with `mask` (drawn at random by the caller).
pub async fn relay<C, S>(
    client: C,
    server: S,
    revoked: impl Future<Output = ()>,
    mask: [u8; 4],
) -> Ended
where
    C: AsyncRead + AsyncWrite + Send + Unpin,
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (server_read, server_write) = tokio::io::split(server);
    let (stop_tx, stop_rx) = watch::channel(false);
    let up = pump(client_read, server_write, stop_rx.clone(), Some(mask));
    let down = pump(server_read, client_write, stop_rx, None);
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = async {
            revoked.await;
            let _ = stop_tx.send(true);
            tokio::time::sleep(CLOSE_GRACE).await;
        } => {}
    }
    if *stop_tx.borrow() {
        Ended::Revoked
    } else {
        Ended::Closed
    }
}

/// One direction: `src` to `dst`, frame boundaries followed; after `stop`, up to the end of the
/// frame in flight, then a close frame (masked with `mask` when `dst` is the server) unless this
/// direction already sent one, then `dst` is shut and what `src` still sends is read and dropped.
async fn pump<R, W>(mut src: R, mut dst: W, mut stop: watch::Receiver<bool>, mask: Option<[u8; 4]>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut tracker = FrameTracker::new();
    let mut buf = vec![0u8; BUF];
    loop {
        tokio::select! {
            biased;
            Ok(()) = async { stop.wait_for(|s| *s).await.map(|_| ()) } => break,
            r = src.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = dst.shutdown().await;
                    return;
                }
                Ok(n) => {
                    tracker.feed(&buf[..n]);
                    if dst.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
    while !tracker.at_boundary() {
        if tracker.broken().is_some() {
            // Not frames as far as we can tell: no close frame can be put in, only the end.
            let _ = dst.shutdown().await;
            return;
        }
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = dst.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        let k = tracker.to_boundary(&buf[..n]);
        if dst.write_all(&buf[..k]).await.is_err() {
            return;
        }
    }
    if !tracker.close_seen() {
        let frame = wsframe::close_frame(SERVICE_RESTART, POLICY_CHANGED, mask);
        if dst.write_all(&frame).await.is_err() {
            return;
        }
    }
    let _ = dst.flush().await;
    let _ = dst.shutdown().await;
    // The peer answers the close (and anything it had in flight); that is not passed on.
    while let Ok(n) = src.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}
