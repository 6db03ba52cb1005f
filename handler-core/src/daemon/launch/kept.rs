//! The daemon's side of a kept agent (issue 28 item 6): the keeper's socket (in the daemon's
//! 0700 records folder), the connection and its hello, and the two tasks that carry the agent's
//! lines (numbered, so each is acknowledged once processed), the launch's stderr and its exit
//! over it. The keeper is `keep` (`runtime::sandbox::keep`); the frames are
//! `handler_sandbox::keep`'s.

use std::path::{Path, PathBuf};
use std::time::Duration;

use handler_sandbox::keep::{Down, FrameError, Frames, MAX_SMALL_FRAME, Up, Welcome};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};

use super::agent::AgentOut;

/// Why a kept agent cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    /// The socket cannot be connected to (in time).
    #[error("the agent's keeper at {path} does not answer: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The keeper ended before it answered.
    #[error("the agent's keeper ended before it answered")]
    Ended,
    /// It answered something else than its welcome.
    #[error("the agent's keeper answered no welcome: {0}")]
    Protocol(String),
}

/// The socket of sandbox `name`'s keeper: `<records>/<hash>.sock`, short whatever the name (a
/// unix socket's path holds 107 bytes).
pub fn socket_of(records_dir: &Path, name: &str) -> PathBuf {
    let h = sha2::Sha256::digest(name.as_bytes());
    let hex: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    records_dir.join(format!("{hex}.sock"))
}

/// A connected keeper, welcome read.
pub struct Link {
    /// What it said.
    pub welcome: Welcome,
    frames: Frames,
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
}

/// Connects to the keeper at `socket` (retrying until `within` passed or `ended` says it is
/// gone) and asks for the agent's lines from `from`.
pub async fn connect(
    socket: &Path,
    from: u64,
    within: Duration,
    mut ended: impl FnMut() -> bool,
) -> Result<Link, KeptError> {
    let deadline = tokio::time::Instant::now() + within;
    let stream = loop {
        match UnixStream::connect(socket).await {
            Ok(s) => break s,
            Err(e) => {
                if ended() {
                    return Err(KeptError::Ended);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(KeptError::Connect {
                        path: socket.to_path_buf(),
                        source: e,
                    });
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    };
    let (mut read, mut write) = stream.into_split();
    write
        .write_all(&Down::Hello { from }.encode())
        .await
        .map_err(|source| KeptError::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
    let mut frames = Frames::new(MAX_SMALL_FRAME);
    let mut buf = vec![0u8; 64 * 1024];
    let welcome = loop {
        match frames.next_up() {
            Ok(Some(Up::Welcome(w))) => break w,
            Ok(Some(other)) => return Err(KeptError::Protocol(format!("{other:?}"))),
            Ok(None) => {}
            Err(e) => return Err(KeptError::Protocol(e.to_string())),
        }
        let n = tokio::time::timeout_at(deadline, read.read(&mut buf))
            .await
            .map_err(|_| KeptError::Protocol("no welcome in time".into()))?
            .map_err(|source| KeptError::Connect {
                path: socket.to_path_buf(),
                source,
            })?;
        if n == 0 {
            return Err(KeptError::Ended);
        }
        frames.push(&buf[..n]);
    };
    Ok(Link {
        welcome,
        frames,
        read,
        write,
    })
}

/// The tasks' ends: lines to the agent, its lines (numbered), acknowledgements, its exit.
pub struct Wired {
    /// Lines for the agent's stdin.
    pub to_agent: mpsc::Sender<Vec<u8>>,
    /// The agent's lines, then its end.
    pub from_agent: mpsc::Receiver<AgentOut>,
    /// The last line processed (sent to the keeper as it changes).
    pub acks: watch::Sender<u64>,
    /// The launch's exit code, once the keeper said it.
    pub exit: watch::Receiver<Option<i32>>,
}

/// Starts the tasks over `link`: lines of at most `max` bytes; every stderr line to `stderr`
/// (whole: may be an egress event).
pub fn wire(link: Link, max: usize, mut stderr: impl FnMut(bool, &[u8]) + Send + 'static) -> Wired {
    let Link {
        mut frames,
        mut read,
        mut write,
        ..
    } = link;
    let (out_tx, from_agent) = mpsc::channel::<AgentOut>(64);
    let (exit_tx, exit) = watch::channel(None);
    // A line may be `max` bytes, plus its number.
    frames.set_limit(max.max(MAX_SMALL_FRAME) + 16);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            loop {
                let item = match frames.next_up() {
                    Ok(Some(Up::Out { n, line })) => AgentOut::Line(line, n),
                    Ok(Some(Up::TooBig)) => AgentOut::TooBig,
                    Ok(Some(Up::Err { whole, line })) => {
                        stderr(whole, &line);
                        continue;
                    }
                    Ok(Some(Up::Exit(code))) => {
                        let _ = exit_tx.send(Some(code));
                        continue;
                    }
                    Ok(Some(Up::Welcome(_))) => continue,
                    Ok(None) => break,
                    Err(e @ (FrameError::TooLong { .. } | FrameError::Malformed { .. })) => {
                        tracing::warn!(error = %e, "kept agent's stream refused");
                        let _ = out_tx.send(AgentOut::Eof).await;
                        return;
                    }
                };
                let last = matches!(item, AgentOut::TooBig);
                if out_tx.send(item).await.is_err() || last {
                    return;
                }
            }
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = out_tx.send(AgentOut::Eof).await;
                    return;
                }
                Ok(n) => frames.push(&buf[..n]),
            }
        }
    });
    let (to_agent, mut in_rx) = mpsc::channel::<Vec<u8>>(64);
    let (acks, mut ack_rx) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                m = in_rx.recv() => match m {
                    Some(m) => Down::In(m),
                    None => return,
                },
                r = ack_rx.changed() => match r {
                    Ok(()) => Down::Ack(*ack_rx.borrow_and_update()),
                    Err(_) => return,
                },
            };
            if write.write_all(&frame.encode()).await.is_err() {
                return;
            }
        }
    });
    Wired {
        to_agent,
        from_agent,
        acks,
        exit,
    }
}
