//! The relay of a tunnel whose client came over the proxy's unix socket (a sandbox's way in),
//! on two blocking threads, one per way, each splicing socket → pipe → socket (issue 34 item 6,
//! decision 0176). A unix socket's send buffer is small and not autotuned, so a non-blocking
//! relay would go back to the event loop about every chunk; a blocking splice waits in the
//! kernel instead. Same semantics as the event-loop relay: half-close kept, the first error ends
//! both ways, the bytes moved each way returned; dropping the future ends both ways.

use std::io;
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};

use super::PIPE_SIZE;

/// Each relay thread's stack: a splice loop needs little, and a sandbox may hold many tunnels.
const STACK: usize = 64 * 1024;

/// At most this many tunnels on threads at once (two threads each); the next ones are relayed
/// on the event loop. Threads count against the user's process limit (`RLIMIT_NPROC`, shared
/// with every process of the user): an agent opening tunnels without end must not use it up.
pub const MAX_THREADED: usize = 128;

/// Tunnels on threads now.
static THREADED: AtomicUsize = AtomicUsize::new(0);

/// One tunnel's place among [`MAX_THREADED`]; given back when its last thread has ended.
struct Permit(());

impl Permit {
    fn take() -> Option<Permit> {
        THREADED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_THREADED).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(()))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        THREADED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One way's blocking pipe: (read end, write end, its size).
struct Pipe(OwnedFd, OwnedFd, usize);

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let size = i32::try_from(PIPE_SIZE).unwrap_or(i32::MAX);
        // Refused past the user's pipe quota: the pipe keeps its default size.
        let n = match fcntl(&w, FcntlArg::F_SETPIPE_SZ(size)) {
            Ok(n) => n,
            Err(_) => fcntl(&w, FcntlArg::F_GETPIPE_SZ)?,
        };
        Ok(Pipe(
            r,
            w,
            usize::try_from(n).unwrap_or(PIPE_SIZE).max(4096),
        ))
    }
}

/// What a relay needs before its threads start: both sockets (blocking), a pipe per way.
pub struct Prepared {
    client: UnixStream,
    server: std::net::TcpStream,
    up: Pipe,
    down: Pipe,
    permit: Permit,
}

/// Why a relay could not be prepared.
pub enum NotPrepared {
    /// [`MAX_THREADED`] tunnels are on threads already, or no pipe can be had (out of
    /// descriptors): the sockets back, untouched, for the event loop's relay.
    Elsewhere(tokio::net::UnixStream, tokio::net::TcpStream),
    /// A socket could not leave the event loop or be made blocking: the tunnel ends.
    Failed(io::Error),
}

/// Takes both sockets out of the event loop, makes them blocking, and gets a pipe per way.
///
/// # Errors
/// [`NotPrepared`]: the sockets back when no pipe can be had, else the error.
pub fn prepare(
    client: tokio::net::UnixStream,
    server: tokio::net::TcpStream,
) -> Result<Prepared, NotPrepared> {
    let Some(permit) = Permit::take() else {
        return Err(NotPrepared::Elsewhere(client, server));
    };
    super::raise_open_files();
    let pipes = Pipe::new().and_then(|up| Ok((up, Pipe::new()?)));
    let Ok((up, down)) = pipes else {
        return Err(NotPrepared::Elsewhere(client, server));
    };
    let blocking = || -> io::Result<_> {
        // `into_std` deregisters a socket from the event loop; only then may it block.
        let (client, server) = (client.into_std()?, server.into_std()?);
        client.set_nonblocking(false)?;
        server.set_nonblocking(false)?;
        Ok((client, server))
    };
    let (client, server) = blocking().map_err(NotPrepared::Failed)?;
    Ok(Prepared {
        client,
        server,
        up,
        down,
        permit,
    })
}

/// Ends both ways of both sockets: a thread blocked in a splice on either returns.
struct Stop(Vec<OwnedFd>);

impl Stop {
    fn now(&self) {
        for fd in &self.0 {
            let _ = nix::sys::socket::shutdown(fd.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
    }
}

/// Ends both ways when the relay's future goes, finished or dropped (the threads hold the
/// [`Stop`] too, so its own drop would come only after them).
struct OnDrop(Arc<Stop>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.now();
    }
}

/// Relays the prepared sockets, `early` (the client's bytes read already) sent to the server
/// first, on two threads; returns the bytes moved client → server and server → client. The
/// first error ends both ways; dropping the future (a revoked tunnel) ends them too.
///
/// # Errors
/// The first error of either way, or no thread to be had.
pub async fn relay(p: Prepared, early: &[u8]) -> io::Result<(u64, u64)> {
    let Prepared {
        client,
        server,
        up,
        down,
        permit,
    } = p;
    // Each thread holds the permit too: it is given back when the last of them has ended.
    let permit = Arc::new(permit);
    // The threads hold clones; these two end them from here (drop, or the first error).
    let stop = Arc::new(Stop(vec![
        OwnedFd::from(client.try_clone()?),
        OwnedFd::from(server.try_clone()?),
    ]));
    let _ends = OnDrop(stop.clone());
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    let up = spawn(OwnedFd::from(c2), s2, early.to_vec(), up, (&stop, &permit))?;
    let down = spawn(
        OwnedFd::from(server),
        client,
        Vec::new(),
        down,
        (&stop, &permit),
    )?;
    let (up, down) = (up.await, down.await);
    let closed = || io::Error::other("a relay thread ended without an answer");
    let moved_up = up.map_err(|_| closed())??;
    let moved_down = down.map_err(|_| closed())??;
    Ok((moved_up + early.len() as u64, moved_down))
}

/// Starts the thread that writes `first` to `to` and then moves `from` → `to` through `pipe`;
/// its answer (the bytes spliced) comes on the receiver.
fn spawn<W: io::Write + AsFd + Send + 'static>(
    from: OwnedFd,
    mut to: W,
    first: Vec<u8>,
    pipe: Pipe,
    (stop, permit): (&Arc<Stop>, &Arc<Permit>),
) -> io::Result<tokio::sync::oneshot::Receiver<io::Result<u64>>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (stop, permit) = (stop.clone(), permit.clone());
    std::thread::Builder::new()
        .name("handler-relay".into())
        .stack_size(STACK)
        .spawn(move || {
            let moved = to.write_all(&first).and_then(|()| way(&from, &to, &pipe));
            if moved.is_err() {
                stop.now();
            }
            let _ = tx.send(moved);
            drop(permit);
        })?;
    Ok(rx)
}

/// Moves `from` → `to` until `from`'s EOF, then shuts down `to`'s writing side.
fn way(from: &impl AsFd, to: &impl AsFd, pipe: &Pipe) -> io::Result<u64> {
    let Pipe(r, w, chunk) = pipe;
    let mut moved = 0u64;
    loop {
        let n = again(|| splice(from, None, w, None, *chunk, SpliceFFlags::SPLICE_F_MOVE))?;
        if n == 0 {
            let fd = to.as_fd().as_raw_fd();
            let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Write);
            return Ok(moved);
        }
        let mut left = n;
        while left > 0 {
            match again(|| splice(r, None, to, None, left, SpliceFFlags::SPLICE_F_MOVE))? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                k => left -= k,
            }
        }
        moved += n as u64;
    }
}

/// A system call retried while a signal interrupts it.
fn again(mut f: impl FnMut() -> nix::Result<usize>) -> io::Result<usize> {
    loop {
        match f() {
            Err(nix::errno::Errno::EINTR) => {}
            r => return Ok(r?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past [`MAX_THREADED`] tunnels on threads, a tunnel goes back to the event loop with its
    /// sockets untouched; a place given back is taken again.
    #[tokio::test]
    async fn past_the_cap_a_tunnel_stays_on_the_event_loop() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let places: Vec<Permit> = std::iter::from_fn(Permit::take).collect();
        assert_eq!(places.len(), MAX_THREADED);
        let (mut client, proxy_side) = tokio::net::UnixStream::pair().unwrap();
        let server = tokio::net::TcpStream::connect(addr).await.unwrap();
        let Err(NotPrepared::Elsewhere(back, server)) = prepare(proxy_side, server) else {
            panic!("a tunnel past the cap was not given back")
        };
        // Still registered with the event loop, and still the same connection.
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut back = back;
        back.write_all(b"still here").await.unwrap();
        let mut got = [0u8; 10];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"still here");
        drop(places);
        assert!(prepare(back, server).is_ok(), "a place given back is free");
        assert_eq!(
            THREADED.load(Ordering::Acquire),
            0,
            "the prepared relay dropped its place"
        );
    }
}
