//! Relaying an upgraded WebSocket connection through the proxy frame by frame: towards and from
//! an injection's hosts the phantoms and values inside each message's payload (across its
//! fragments) are swapped (the pure
//! `wsframe::PayloadRewriter`), a phantom going where it must not cuts the connection; when a
//! policy change no longer allows the destination (egress-lessons), the frame in flight in each
//! direction is finished, then the client gets a close frame with code 1012 and the server a
//! masked one, and both connections end.

use std::future::Future;
use std::time::Duration;

use handler_sandbox::egress::wsframe::{self, POLICY_CHANGED, PayloadRewriter, SERVICE_RESTART};
use handler_sandbox::egress::{Hits, Rules};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::watch;

/// How long after a revocation the relay lets the frames in flight end and the peers answer the
/// close, before it drops both connections whatever their state.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

const BUF: usize = 16 * 1024;

/// How a relayed WebSocket ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Both sides closed it.
    Closed,
    /// A policy change revoked it; the close frames were sent where a frame boundary was reached.
    Revoked,
    /// The client sent a phantom where it must not go: cut before it left.
    Leak(Hits),
}

/// The swaps of one WebSocket: `up` for the client's frames (phantoms → values towards the
/// injections' hosts, every other phantom a leak), `down` for the server's (values → phantoms).
#[derive(Debug, Clone)]
pub struct Swaps {
    /// The client's frames: phantoms to values towards the injections' hosts.
    pub up: Rules,
    /// The server's frames: values back to phantoms.
    pub down: Rules,
}

/// Relays `client` ⇄ `server` (both already upgraded) until both directions end, a leak, or
/// `revoked` resolves: then each direction finishes its frame in flight and gets a close frame
/// 1012 — the client's unmasked, the server's masked with `mask` (drawn at random by the caller).
/// `injected` hears of each injection used, once.
pub async fn relay<C, S>(
    client: C,
    server: S,
    swaps: Swaps,
    revoked: impl Future<Output = ()>,
    mask: [u8; 4],
    injected: &(dyn Fn(Hits) + Sync),
) -> Ended
where
    C: AsyncRead + AsyncWrite + Send + Unpin,
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (client_read, client_write) = tokio::io::split(client);
    let (server_read, server_write) = tokio::io::split(server);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (leak_tx, mut leak_rx) = watch::channel(None::<Hits>);
    let up_stop = stop_rx.clone();
    let up = async {
        let leak = pump(
            client_read,
            server_write,
            up_stop,
            Some(mask),
            swaps.up,
            injected,
        )
        .await;
        if leak.is_some() {
            let _ = leak_tx.send(leak);
        }
    };
    let down = pump(
        server_read,
        client_write,
        stop_rx,
        None,
        swaps.down,
        injected,
    );
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = async { leak_rx.wait_for(Option::is_some).await.map(|_| ()) } => {}
        _ = async {
            revoked.await;
            let _ = stop_tx.send(true);
            tokio::time::sleep(CLOSE_GRACE).await;
        } => {}
    }
    if let Some(h) = leak_rx.borrow().clone() {
        return Ended::Leak(h);
    }
    if *stop_tx.borrow() {
        Ended::Revoked
    } else {
        Ended::Closed
    }
}

/// One direction: `src` to `dst`, frame by frame, payloads swapped by `rules`; after `stop`, up
/// to the end of the frame in flight, then a close frame (masked with `mask` when `dst` is the
/// server) unless this direction already sent one, then `dst` is shut and what `src` still sends
/// is read and dropped. Returns what leaked, if a phantom was going where it must not (nothing of
/// that read is written).
async fn pump<R, W>(
    mut src: R,
    mut dst: W,
    mut stop: watch::Receiver<bool>,
    mask: Option<[u8; 4]>,
    rules: Rules,
    injected: &(dyn Fn(Hits) + Sync),
) -> Option<Hits>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut p = Pump {
        swapping: !rules.is_empty(),
        frames: PayloadRewriter::new(rules),
        reported: Hits::default(),
        buf: vec![0u8; BUF],
        out: Vec::with_capacity(BUF),
        injected,
    };
    if let Some(ended) = p.until_stop(&mut src, &mut dst, &mut stop).await {
        return ended;
    }
    p.close(&mut src, &mut dst, mask).await
}

/// One direction's state: its frames, the injections reported so far, its buffers.
struct Pump<'a> {
    swapping: bool,
    frames: PayloadRewriter,
    reported: Hits,
    buf: Vec<u8>,
    out: Vec<u8>,
    injected: &'a (dyn Fn(Hits) + Sync),
}

impl Pump<'_> {
    /// Checks what the last read did: reports new injections, stops at a leak.
    fn check(&mut self) -> Option<Hits> {
        if !self.swapping {
            return None;
        }
        let hits = self.frames.hits();
        if hits.is_leak() {
            return Some(hits);
        }
        let new: std::collections::BTreeSet<String> = hits
            .injected
            .difference(&self.reported.injected)
            .cloned()
            .collect();
        if !new.is_empty() {
            self.reported.injected.extend(new.iter().cloned());
            (self.injected)(Hits {
                injected: new,
                leaked: Default::default(),
            });
        }
        None
    }

    /// Relays until `stop` (then `None`) or the end of this direction: `Some` of what it
    /// returns (a leak, or nothing).
    async fn until_stop<R, W>(
        &mut self,
        src: &mut R,
        dst: &mut W,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<Option<Hits>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            tokio::select! {
                biased;
                Ok(()) = async { stop.wait_for(|s| *s).await.map(|_| ()) } => return None,
                r = src.read(&mut self.buf) => match r {
                    Ok(0) | Err(_) => {
                        // What was held back (the end of a fragment) goes out before the end.
                        self.out.clear();
                        self.frames.flush(&mut self.out);
                        if self.check().is_none() {
                            let _ = dst.write_all(&self.out).await;
                        }
                        let _ = dst.shutdown().await;
                        return Some(None);
                    }
                    Ok(n) => {
                        self.out.clear();
                        self.frames.push(&self.buf[..n], &mut self.out, false);
                        if let Some(leak) = self.check() {
                            return Some(Some(leak));
                        }
                        if dst.write_all(&self.out).await.is_err() {
                            return Some(None);
                        }
                    }
                }
            }
        }
    }

    /// After `stop`: up to the end of the frame in flight, then the close frame (unless this
    /// direction sent one), `dst` shut, and what `src` still sends read and dropped.
    async fn close<R, W>(&mut self, src: &mut R, dst: &mut W, mask: Option<[u8; 4]>) -> Option<Hits>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        while !self.frames.tracker().at_boundary() {
            if self.frames.tracker().broken().is_some() {
                // Not frames as far as we can tell: no close frame can be put in, only the end.
                let _ = dst.shutdown().await;
                return None;
            }
            let n = match src.read(&mut self.buf).await {
                Ok(0) | Err(_) => {
                    let _ = dst.shutdown().await;
                    return None;
                }
                Ok(n) => n,
            };
            self.out.clear();
            self.frames.push(&self.buf[..n], &mut self.out, true);
            if let Some(leak) = self.check() {
                return Some(leak);
            }
            if dst.write_all(&self.out).await.is_err() {
                return None;
            }
        }
        // Nothing held back stays behind the close frame.
        self.out.clear();
        self.frames.flush(&mut self.out);
        if let Some(leak) = self.check() {
            return Some(leak);
        }
        if dst.write_all(&self.out).await.is_err() {
            return None;
        }
        if !self.frames.tracker().close_seen() {
            let frame = wsframe::close_frame(SERVICE_RESTART, POLICY_CHANGED, mask);
            if dst.write_all(&frame).await.is_err() {
                return None;
            }
        }
        let _ = dst.flush().await;
        let _ = dst.shutdown().await;
        // The peer answers the close (and anything it had in flight); that is not passed on.
        while let Ok(n) = src.read(&mut self.buf).await {
            if n == 0 {
                break;
            }
        }
        None
    }
}
