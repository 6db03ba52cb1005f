//! The relay of a tunnel that is not decrypted: splice(2) moves the bytes socket → pipe → socket
//! inside the kernel, both ways at once, so the proxy never copies them through user space. An
//! EOF one way shuts down writing on the other side while the other way keeps flowing
//! (half-close, as `tokio::io::copy_bidirectional` does); the first error ends both ways.
//! Decision 0025 says why this is a small module on `nix` rather than a crate. A client on the
//! proxy's unix socket is relayed by [`blocking`] instead (decision 0176).

pub mod blocking;

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixStream};

/// The pipe asked for each way. Larger pipes take more of a socket's queue per splice (fewer
/// system calls); a pipe's pages count against the user's pipe quota (`fs.pipe-user-pages-soft`,
/// 64 MiB by default), and past it the kernel refuses the size and the pipe keeps its default.
pub const PIPE_SIZE: usize = 256 * 1024;

/// The buffer each way when the relay falls back to copying through user space.
pub const COPY_BUF: usize = 64 * 1024;

/// A tokio socket the relay can splice from and to: its descriptor, its readiness, and
/// `poll_shutdown` to end the writing side.
pub trait Socket: AsFd + AsyncWrite + Unpin {
    /// Waits until the socket may have bytes to read (or an EOF, or an error).
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Waits until the socket may take bytes.
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Runs a read-side system call; a `WouldBlock` from it clears the read readiness.
    fn try_read_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    /// Runs a write-side system call; a `WouldBlock` from it clears the write readiness.
    fn try_write_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($($t:ty),+) => {$(
        impl Socket for $t {
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_read_ready(self, cx)
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_write_ready(self, cx)
            }
            fn try_read_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                self.try_io(tokio::io::Interest::READABLE, f)
            }
            fn try_write_io<R>(&self, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                self.try_io(tokio::io::Interest::WRITABLE, f)
            }
        }
    )+};
}

socket!(TcpStream, UnixStream);

/// One way of the relay: its pipe and where it is.
struct Way {
    pipe_r: OwnedFd,
    pipe_w: OwnedFd,
    /// The most one splice into the pipe asks for (the pipe's size).
    chunk: usize,
    /// Bytes in the pipe, not yet sent on.
    in_pipe: usize,
    /// The source said EOF.
    eof: bool,
    /// EOF passed on: the destination's writing side is shut down.
    done: bool,
    /// Bytes sent on.
    moved: u64,
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_NONBLOCK.union(SpliceFFlags::SPLICE_F_MOVE);

impl Way {
    fn new() -> io::Result<Way> {
        let (pipe_r, pipe_w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let size = i32::try_from(PIPE_SIZE).unwrap_or(i32::MAX);
        // Refused past the user's pipe quota: the pipe keeps its default size.
        let chunk = match fcntl(&pipe_w, FcntlArg::F_SETPIPE_SZ(size)) {
            Ok(n) => n,
            Err(_) => fcntl(&pipe_w, FcntlArg::F_GETPIPE_SZ)?,
        };
        Ok(Way {
            pipe_r,
            pipe_w,
            chunk: usize::try_from(chunk).unwrap_or(PIPE_SIZE).max(4096),
            in_pipe: 0,
            eof: false,
            done: false,
            moved: 0,
        })
    }

    /// Moves what `from` has to `to` until either would block; at `from`'s EOF, shuts down
    /// `to`'s writing side and is done. The pipe is only filled when empty and only emptied
    /// when filled, so a `WouldBlock` always comes from the socket (and clears its readiness).
    fn poll_move<R: Socket, W: Socket>(
        &mut self,
        cx: &mut Context<'_>,
        from: &R,
        to: &mut W,
    ) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            while self.in_pipe > 0 {
                ready!(to.poll_write_ready(cx))?;
                let out = to.as_fd();
                match to.try_write_io(|| {
                    Ok(splice(&self.pipe_r, None, out, None, self.in_pipe, FLAGS)?)
                }) {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(n) => {
                        self.in_pipe -= n;
                        self.moved += n as u64;
                    }
                    Err(e) if retry(&e) => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if self.eof {
                ready!(Pin::new(&mut *to).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            ready!(from.poll_read_ready(cx))?;
            let src = from.as_fd();
            match from.try_read_io(|| Ok(splice(src, None, &self.pipe_w, None, self.chunk, FLAGS)?))
            {
                Ok(0) => self.eof = true,
                Ok(n) => self.in_pipe = n,
                Err(e) if retry(&e) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Relays `a` ↔ `b` with splice(2) until both ways have seen EOF (each passed on as a shutdown
/// of the other side's writing), or the first error. Returns the bytes moved a → b and b → a.
pub async fn relay<A: Socket, B: Socket>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)> {
    let (a2b, b2a) = pipes()?;
    run(a2b, b2a, a, b).await
}

/// The two ways' pipes.
fn pipes() -> io::Result<(Way, Way)> {
    raise_open_files();
    Ok((Way::new()?, Way::new()?))
}

/// A spliced tunnel holds six descriptors (two sockets, two pipes) instead of two — ten on
/// threads ([`blocking`]) — so the first time, the soft limit on open files (often 1024) is
/// raised to the hard one, as Go programs do at start.
fn raise_open_files() {
    static RAISE: std::sync::Once = std::sync::Once::new();
    RAISE.call_once(|| {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            // An unlimited hard limit is still capped by fs.nr_open (2^20 by default).
            let want = hard.min(1 << 20);
            if soft < want {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, want, hard);
            }
        }
    });
}

async fn run<A: Socket, B: Socket>(
    mut a2b: Way,
    mut b2a: Way,
    a: &mut A,
    b: &mut B,
) -> io::Result<(u64, u64)> {
    poll_fn(|cx| {
        let ab = a2b.poll_move(cx, &*a, b)?;
        let ba = b2a.poll_move(cx, &*b, a)?;
        match (ab, ba) {
            (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(Ok((a2b.moved, b2a.moved))),
            _ => Poll::Pending,
        }
    })
    .await
}

/// A CONNECT tunnel's client underneath hyper's upgraded connection: a TCP or unix socket the
/// relay can splice, or (any other transport) the upgraded connection itself.
pub enum Client {
    /// A TCP socket.
    Tcp(TcpStream),
    /// A unix socket (the sandbox's forwarder).
    Unix(UnixStream),
    /// Any other transport: hyper's upgraded connection.
    Other(TokioIo<Upgraded>),
}

impl Client {
    /// The client of an upgraded CONNECT, and the bytes hyper already read past its head.
    pub fn of(upgraded: Upgraded) -> (Client, Vec<u8>) {
        let upgraded = match upgraded.downcast::<TokioIo<TcpStream>>() {
            Ok(parts) => return (Client::Tcp(parts.io.into_inner()), parts.read_buf.to_vec()),
            Err(u) => u,
        };
        match upgraded.downcast::<TokioIo<UnixStream>>() {
            Ok(parts) => (Client::Unix(parts.io.into_inner()), parts.read_buf.to_vec()),
            Err(u) => (Client::Other(TokioIo::new(u)), Vec::new()),
        }
    }
}

macro_rules! each {
    ($self:ident, $c:ident => $e:expr) => {
        match $self.get_mut() {
            Client::Tcp($c) => $e,
            Client::Unix($c) => $e,
            Client::Other($c) => $e,
        }
    };
}

impl AsyncRead for Client {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, c => Pin::new(c).poll_read(cx, buf))
    }
}

impl AsyncWrite for Client {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, c => Pin::new(c).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, c => Pin::new(c).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, c => Pin::new(c).poll_shutdown(cx))
    }
}

/// Relays a CONNECT tunnel's client (hyper's upgraded connection) ↔ `server`. When the client
/// is a TCP or unix socket underneath, the bytes hyper already read past the CONNECT go to the
/// server first and the rest is spliced (a unix socket's on two blocking threads, [`blocking`]);
/// otherwise (or when no pipe can be had) the bytes are copied through user space.
pub async fn relay_upgraded(upgraded: Upgraded, server: TcpStream) -> io::Result<(u64, u64)> {
    let (client, early) = Client::of(upgraded);
    relay_client(client, &early, server).await
}

/// Relays `client` ↔ `server`, `early` (the client's bytes read already) sent first.
pub async fn relay_client(
    client: Client,
    early: &[u8],
    mut server: TcpStream,
) -> io::Result<(u64, u64)> {
    match client {
        Client::Tcp(c) => relay_raw(c, early, &mut server).await,
        Client::Unix(c) => match blocking::prepare(c, server) {
            Ok(p) => blocking::relay(p, early).await,
            Err(blocking::NotPrepared::Elsewhere(c, mut server)) => {
                relay_raw(c, early, &mut server).await
            }
            Err(blocking::NotPrepared::Failed(e)) => Err(e),
        },
        Client::Other(mut c) => {
            server.write_all(early).await?;
            let (up, down) =
                tokio::io::copy_bidirectional_with_sizes(&mut c, &mut server, COPY_BUF, COPY_BUF)
                    .await?;
            Ok((up + early.len() as u64, down))
        }
    }
}

async fn relay_raw<C: Socket + tokio::io::AsyncRead>(
    mut client: C,
    early: &[u8],
    server: &mut TcpStream,
) -> io::Result<(u64, u64)> {
    server.write_all(early).await?;
    let early = early.len() as u64;
    // No pipe (out of descriptors): copy instead.
    let (up, down) = match pipes() {
        Ok((a2b, b2a)) => run(a2b, b2a, &mut client, server).await?,
        Err(_) => {
            tokio::io::copy_bidirectional_with_sizes(&mut client, server, COPY_BUF, COPY_BUF)
                .await?
        }
    };
    Ok((up + early, down))
}
