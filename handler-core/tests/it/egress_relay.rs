//! The splice(2) relay of undecrypted tunnels (handler_core::runtime::egress::relay), on real sockets:
//! 64 MiB each way at once arrive intact (every byte checked), half-close is kept (an EOF one way
//! is passed on while the other way keeps flowing), TCP ↔ TCP and unix ↔ TCP — on the event
//! loop and on the blocking threads a unix-socket client gets (`relay::blocking`, which also end
//! both ways on a reset and when dropped) —, and a CONNECT through hyper hands its raw socket
//! over with the bytes it had already read (any other transport is copied).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use handler_core::runtime::egress::relay::{blocking, relay, relay_upgraded};
use http_body_util::Empty;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const MIB: u64 = 1 << 20;

/// The byte at position `i` of stream `seed`: any loss, duplication or reordering shows.
fn byte(seed: u64, i: u64) -> u8 {
    ((i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

async fn send_pattern(w: &mut (impl AsyncWrite + Unpin), seed: u64, n: u64) {
    send_pattern_from(w, seed, 0, n).await;
}

/// Reads to EOF, checking every byte against the pattern; returns how many came.
async fn check_pattern(r: &mut (impl AsyncRead + Unpin), seed: u64) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut pos = 0u64;
    loop {
        let k = r.read(&mut buf).await.unwrap();
        if k == 0 {
            return pos;
        }
        for (j, b) in buf[..k].iter().enumerate() {
            let i = pos + j as u64;
            assert_eq!(*b, byte(seed, i), "byte {i} of stream {seed:#x} differs");
        }
        pos += k as u64;
    }
}

/// A connected TCP pair: (the end a test drives, the end the relay gets).
async fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(l.local_addr().unwrap()), l.accept());
    (a.unwrap(), b.unwrap().0)
}

/// Both ways at once, 64 MiB each: the client's EOF comes first and reaches the server while
/// the server is still sending, and the server's data keeps flowing to the client after it.
/// `relayed_by` starts the relay under test towards the upstream socket it is given.
async fn both_ways<C>(client: C, relayed_by: impl FnOnce(TcpStream) -> Relayed)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut server, upstream) = tcp_pair().await;
    let relayed = relayed_by(upstream);
    let n = 64 * MIB;
    let (up_seed, down_seed) = (0x1234_5678, 0xABCD_EF01);
    let client_side = tokio::spawn(async move {
        let (mut r, mut w) = tokio::io::split(client);
        let sender = async {
            send_pattern(&mut w, up_seed, n).await;
            // Half-close: the client is done sending, not done reading.
            w.shutdown().await.unwrap();
        };
        let (_, got) = tokio::join!(sender, check_pattern(&mut r, down_seed));
        got
    });
    let (mut sr, mut sw) = server.split();
    // Both ways at once until the client's EOF arrives here...
    let (server_got, ()) = tokio::join!(
        check_pattern(&mut sr, up_seed),
        send_pattern_from(&mut sw, down_seed, 0, 8 * MIB)
    );
    assert_eq!(server_got, n, "the server got all the upload, then EOF");
    // ...then the rest of the download, after it: the relay must still carry this way.
    send_pattern_from(&mut sw, down_seed, 8 * MIB, n).await;
    sw.shutdown().await.unwrap();
    assert_eq!(
        client_side.await.unwrap(),
        n,
        "the client got all the download, then EOF"
    );
    let (up, down) = tokio::time::timeout(Duration::from_secs(10), relayed)
        .await
        .expect("the relay ends when both ways are closed")
        .unwrap()
        .unwrap();
    assert_eq!((up, down), (n, n));
}

async fn send_pattern_from(w: &mut (impl AsyncWrite + Unpin), seed: u64, from: u64, to: u64) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut pos = from;
    while pos < to {
        let k = (to - pos).min(buf.len() as u64) as usize;
        for (j, b) in buf[..k].iter_mut().enumerate() {
            *b = byte(seed, pos + j as u64);
        }
        w.write_all(&buf[..k]).await.unwrap();
        pos += k as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_to_tcp_moves_64_mib_each_way_intact_with_half_close() {
    let (client, proxy_side) = tcp_pair().await;
    both_ways(client, |up| on_event_loop(proxy_side, up)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_to_tcp_moves_64_mib_each_way_intact_with_half_close() {
    let (client, proxy_side) = UnixStream::pair().unwrap();
    both_ways(client, |up| on_event_loop(proxy_side, up)).await;
}

/// A running relay: the bytes it moved each way, once both have ended.
type Relayed = tokio::task::JoinHandle<std::io::Result<(u64, u64)>>;

/// The event loop's splice relay of `proxy_side` ↔ `upstream`.
fn on_event_loop(
    mut proxy_side: impl handler_core::runtime::egress::relay::Socket + Send + 'static,
    mut upstream: TcpStream,
) -> Relayed {
    tokio::spawn(async move { relay(&mut proxy_side, &mut upstream).await })
}

/// The relay a client on the proxy's unix socket gets: two blocking threads.
fn on_threads(client: UnixStream, server: TcpStream, early: &'static [u8]) -> Relayed {
    let Ok(p) = blocking::prepare(client, server) else {
        panic!("no relay threads prepared")
    };
    tokio::spawn(async move { blocking::relay(p, early).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_to_tcp_on_threads_moves_64_mib_each_way_intact_with_half_close() {
    let (client, proxy_side) = UnixStream::pair().unwrap();
    both_ways(client, |up| on_threads(proxy_side, up, b"")).await;
}

/// On threads too: a peer's reset ends both ways with an error, and dropping the relay (a
/// revoked tunnel) ends both ways at once — each peer sees its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_threads_end_on_a_reset_and_when_the_relay_is_dropped() {
    let (mut client, proxy_side) = UnixStream::pair().unwrap();
    let (server, upstream) = tcp_pair().await;
    let relayed = on_threads(proxy_side, upstream, b"early");
    let mut early = [0u8; 5];
    let mut server = server;
    server.read_exact(&mut early).await.unwrap();
    assert_eq!(&early, b"early");
    server.set_zero_linger().unwrap();
    drop(server);
    a_reset_ended(relayed, &mut client).await;

    let (mut client, proxy_side) = UnixStream::pair().unwrap();
    let (mut server, upstream) = tcp_pair().await;
    let relayed = on_threads(proxy_side, upstream, b"");
    client.write_all(b"flowing").await.unwrap();
    let mut got = [0u8; 7];
    server.read_exact(&mut got).await.unwrap();
    relayed.abort();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), server.read_to_end(&mut rest))
        .await
        .expect("the server sees the end of a dropped relay")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
        .await
        .expect("the client sees the end of a dropped relay")
        .unwrap();
    assert!(rest.is_empty());
}

/// The request/response shape of half-close: the client sends and shuts down its writing; the
/// server reads to EOF, only then answers, and the client reads the answer and then EOF.
#[tokio::test]
async fn an_eof_one_way_leaves_the_other_way_open() {
    for (unix, threads) in [(false, false), (true, false), (true, true)] {
        let (mut server, upstream) = tcp_pair().await;
        let (mut client, relayed): (Box<dyn Stream>, _) = if threads {
            let (c, p) = UnixStream::pair().unwrap();
            (Box::new(c), on_threads(p, upstream, b""))
        } else if unix {
            let (c, p) = UnixStream::pair().unwrap();
            (Box::new(c), on_event_loop(p, upstream))
        } else {
            let (c, p) = tcp_pair().await;
            (Box::new(c), on_event_loop(p, upstream))
        };
        client.write_all(b"the whole request").await.unwrap();
        client.shutdown().await.unwrap();
        let mut req = Vec::new();
        server.read_to_end(&mut req).await.unwrap();
        assert_eq!(req, b"the whole request");
        // The relay is still there for the other way.
        assert!(!relayed.is_finished());
        server.write_all(b"the answer, after EOF").await.unwrap();
        let mut first = [0u8; 21];
        client.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"the answer, after EOF");
        server.write_all(b" and more").await.unwrap();
        server.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b" and more");
        let (up, down) = relayed.await.unwrap().unwrap();
        assert_eq!(
            (up, down),
            (17, 30),
            "unix client: {unix}, threads: {threads}"
        );
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A peer that resets its connection ends the relay with an error, the other way included.
#[tokio::test]
async fn a_reset_ends_the_relay() {
    let (mut server, upstream) = tcp_pair().await;
    let (client, p) = tcp_pair().await;
    let relayed = on_event_loop(p, upstream);
    // Closing with a zero linger sends a reset, not an EOF.
    client.set_zero_linger().unwrap();
    drop(client);
    a_reset_ended(relayed, &mut server).await;
}

/// `relayed` ends (10 s at most) with an error — a reset, not an EOF — and then `other`, the
/// peer on the relay's other side, sees the end too: the relay's sockets are gone.
async fn a_reset_ended(relayed: Relayed, other: &mut (impl AsyncRead + Unpin)) {
    let r = tokio::time::timeout(Duration::from_secs(10), relayed)
        .await
        .expect("the relay ends after a reset")
        .unwrap();
    assert!(r.is_err(), "a reset is an error, not an EOF: {r:?}");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), other.read_to_end(&mut rest))
        .await
        .expect("the other side sees the end")
        .unwrap();
}

/// A hyper server on `io` that answers one CONNECT and relays the upgraded connection to
/// `target` with `relay_upgraded`; returns what the relay moved.
async fn connect_server<I>(io: I, target: std::net::SocketAddr) -> (u64, u64)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let on = hyper::upgrade::on(&mut req);
        let tx = tx.lock().unwrap().take();
        async move {
            tokio::spawn(async move {
                let up = on.await.unwrap();
                let server = TcpStream::connect(target).await.unwrap();
                let moved = relay_upgraded(up, server).await.unwrap();
                let _ = tx.unwrap().send(moved);
            });
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    tokio::spawn(
        hyper::server::conn::http1::Builder::new()
            .serve_connection(io, svc)
            .with_upgrades(),
    );
    rx.await.unwrap()
}

/// Sends CONNECT with the first tunnel bytes in the same write, reads the 200, then echoes.
async fn through_connect(mut client: impl AsyncRead + AsyncWrite + Unpin) {
    client
        .write_all(b"CONNECT up.test:1 HTTP/1.1\r\nHost: up.test:1\r\n\r\nearly bytes|")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(client.read(&mut b).await.unwrap(), 1, "head: {head:?}");
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    send_pattern(&mut client, 5, 4 * MIB).await;
    client.shutdown().await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    assert!(
        back.starts_with(b"early bytes|"),
        "the early bytes came first"
    );
    let rest = &back[12..];
    assert_eq!(rest.len() as u64, 4 * MIB);
    assert!(
        rest.iter()
            .enumerate()
            .all(|(i, b)| *b == byte(5, i as u64)),
        "the echo is intact"
    );
}

/// An echo server: sends back what it reads, then closes its writing at EOF.
async fn echo_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let (mut r, mut w) = s.split();
        tokio::io::copy(&mut r, &mut w).await.unwrap();
        w.shutdown().await.unwrap();
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_from_a_tcp_client_is_relayed_with_its_early_bytes() {
    let target = echo_server().await;
    let (client, proxy_side) = tcp_pair().await;
    let (moved, ()) = tokio::join!(
        connect_server(TokioIo::new(proxy_side), target),
        through_connect(client)
    );
    assert_eq!(moved, (12 + 4 * MIB, 12 + 4 * MIB));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_from_a_unix_client_is_relayed_with_its_early_bytes() {
    let target = echo_server().await;
    let (client, proxy_side) = UnixStream::pair().unwrap();
    let (moved, ()) = tokio::join!(
        connect_server(TokioIo::new(proxy_side), target),
        through_connect(client)
    );
    assert_eq!(moved, (12 + 4 * MIB, 12 + 4 * MIB));
}

/// Any other transport under hyper (here an in-memory pipe) is relayed by copying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_over_another_transport_is_copied() {
    let target = echo_server().await;
    let (client, proxy_side) = tokio::io::duplex(64 * 1024);
    let (moved, ()) = tokio::join!(
        connect_server(TokioIo::new(proxy_side), target),
        through_connect(client)
    );
    assert_eq!(moved, (12 + 4 * MIB, 12 + 4 * MIB));
}
