//! Egress proxy benchmarks (ignored; run by bench/egress-bench.sh in release): bulk download
//! through a relayed tunnel against direct on loopback, measured side by side in one run (same
//! client code, pairs alternated in order, median of the pairs' ratios), and injected HTTPS
//! requests per second with keep-alive. Figures are printed, never asserted.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark reads as the scenario it measures, step by step"
)]

// Its own binary (benchmarks, run alone in release, docs/testing.md); the helpers of `it`.
#[path = "it/egress_support/mod.rs"]
mod egress_support;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Instant;

use egress_support::*;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::{Enforcement, Injection};
use handler_sandbox::egress::{ProxyConfig, ProxyMode, Settings};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const MB: usize = 1 << 20;

/// A bulk server that sends `GET /bytes/N` answers from one static buffer, so that a download
/// costs the server only its sends (the test server builds each body anew, a fixed cost added
/// to both paths that hides part of the relay's).
async fn static_bulk_server(ip: IpAddr) -> SocketAddr {
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let chunk = bytes::Bytes::from(vec![b'x'; 4 * MB]);
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => head.extend_from_slice(&buf[..k]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let n: usize = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.strip_prefix("/bytes/"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\n\r\n");
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                let mut left = n;
                while left > 0 {
                    let k = left.min(chunk.len());
                    if s.write_all(&chunk[..k]).await.is_err() {
                        return;
                    }
                    left -= k;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// CPU time this process has used so far (all its threads: the client, the proxy and the
/// server), in clock ticks (`USER_HZ`, 100 per second on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the line, 12th and 13th after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Opens a tunnel through the proxy's unix socket (the sandbox's way in, decision 0024).
async fn connect_unix(path: &Path, target: &str) -> tokio::net::UnixStream {
    let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
    test_support::connect::connect_open(&mut s, target).await;
    s
}

/// How the client reaches the proxy.
#[derive(Clone, Copy)]
enum Via<'a> {
    Tcp(SocketAddr),
    Unix(&'a Path),
}

/// Starts the proxy on a tokio runtime of its own (two workers, as its own process has in a
/// sandbox's proxy container), beside the test's runtime where the clients and the servers run
/// (sharing one runtime, the proxy competed with them for two workers: a cost it does not pay in
/// production, and the bare relay below, on threads of its own, did not pay either). Its ready
/// line; the proxy runs until the process ends.
fn proxy_on_its_own_runtime(config: ProxyConfig) -> handler_core::runtime::egress::Ready {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let events = handler_core::runtime::egress::Events::with(|_| {});
            let p = handler_core::runtime::egress::start(config, events)
                .await
                .unwrap();
            tx.send(p.ready.clone()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

/// A bare relay, the least any relay can cost (issue 34 item 6's baseline): a listener (TCP, or
/// a unix socket at `unix`: the same way in as the tunnel it is compared with) whose every
/// connection is joined to `server` by two blocking threads, each moving one way with splice(2)
/// through its own pipe of the proxy's size (socket → pipe → socket, no CONNECT, no policy, no
/// event loop). Its address, when TCP.
fn bare_splice_relay(server: SocketAddr, unix: Option<&Path>) -> Option<SocketAddr> {
    use std::os::fd::OwnedFd;
    if let Some(path) = unix {
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            relay_each(|| l.accept().map(|(s, _)| OwnedFd::from(s)), server);
        });
        return None;
    }
    let l = std::net::TcpListener::bind((server.ip(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || relay_each(|| l.accept().map(|(s, _)| OwnedFd::from(s)), server));
    Some(addr)
}

/// Joins each connection `accept` gives to a new connection to `server`, spliced both ways.
fn relay_each(accept: impl Fn() -> std::io::Result<std::os::fd::OwnedFd>, server: SocketAddr) {
    use nix::fcntl::{FcntlArg, SpliceFFlags, fcntl, splice};
    use nix::sys::socket::{Shutdown, shutdown};
    use std::os::fd::{AsRawFd as _, OwnedFd};
    while let Ok(client) = accept() {
        let upstream = OwnedFd::from(std::net::TcpStream::connect(server).unwrap());
        for (from, to) in [
            (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
            (upstream, client),
        ] {
            std::thread::spawn(move || {
                let (r, w) = nix::unistd::pipe().unwrap();
                let size = handler_core::runtime::egress::relay::PIPE_SIZE;
                let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(i32::try_from(size).unwrap()));
                let flags = SpliceFFlags::SPLICE_F_MOVE;
                loop {
                    let n = splice(&from, None, &w, None, size, flags).unwrap_or(0);
                    if n == 0 {
                        let _ = shutdown(to.as_raw_fd(), Shutdown::Write);
                        return;
                    }
                    let mut left = n;
                    while left > 0 {
                        match splice(&r, None, &to, None, left, flags) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => left -= k,
                        }
                    }
                }
            });
        }
    }
}

/// Downloads `n` bytes `rounds` times direct, through the bare splice relay of
/// [`bare_splice_relay`] and through a tunnel of the proxy, in rounds whose order rotates, after
/// one warm-up round; prints MiB/s of each path over all rounds, the median, lowest and highest
/// of the rounds' ratios (direct time ÷ tunnel time, relay time ÷ tunnel time), and the CPU time
/// of each path per GiB (client, relay or proxy and server are this one process: the whole cost,
/// what the throughput ratio is when the CPU is the bottleneck, whatever else the machine runs).
async fn bulk(
    what: &str,
    proxy: Via<'_>,
    server: SocketAddr,
    target: &str,
    n: usize,
    rounds: usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let relay_sock = dir.path().join("bare-relay.sock");
    let relay = bare_splice_relay(
        server,
        matches!(proxy, Via::Unix(_)).then_some(relay_sock.as_path()),
    );
    let relay_sock = &relay_sock;
    let path = |which: usize| async move {
        let (t, c) = (Instant::now(), cpu_ticks());
        let got = match (which, proxy) {
            (0, _) => {
                download(
                    tokio::net::TcpStream::connect(server).await.unwrap(),
                    server.port(),
                    n,
                )
                .await
            }
            (1, _) => match relay {
                Some(addr) => {
                    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
                    download(s, server.port(), n).await
                }
                None => {
                    let s = tokio::net::UnixStream::connect(relay_sock).await.unwrap();
                    download(s, server.port(), n).await
                }
            },
            (_, Via::Tcp(addr)) => {
                let Connect::Open(s) = connect(addr, target).await else {
                    panic!("tunnel to {target} refused")
                };
                download(s, server.port(), n).await
            }
            (_, Via::Unix(path)) => {
                download(connect_unix(path, target).await, server.port(), n).await
            }
        };
        assert!(got >= n);
        (t.elapsed().as_secs_f64(), cpu_ticks() - c)
    };
    for which in 0..3 {
        path(which).await;
    }
    let (mut secs, mut cpu) = ([0f64; 3], [0u64; 3]);
    let (mut direct_ratios, mut relay_ratios) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let mut round = [(0f64, 0u64); 3];
        for k in 0..3 {
            let which = (i + k) % 3;
            round[which] = path(which).await;
        }
        for which in 0..3 {
            secs[which] += round[which].0;
            cpu[which] += round[which].1;
        }
        direct_ratios.push(round[0].0 / round[2].0);
        relay_ratios.push(round[1].0 / round[2].0);
    }
    direct_ratios.sort_by(f64::total_cmp);
    relay_ratios.sort_by(f64::total_cmp);
    let mbps = |secs: f64| (rounds * n) as f64 / MB as f64 / secs;
    let gib = (rounds * n) as f64 / (1u64 << 30) as f64;
    let per_gib = |ticks: u64| ticks as f64 / 100.0 / gib;
    println!(
        "bulk download ({what}, {rounds} × {} MiB): direct {:.0} MiB/s, bare splice relay {:.0} MiB/s, through a tunnel {:.0} MiB/s; tunnel ÷ direct median {:.2} (rounds {:.2}–{:.2}); tunnel ÷ bare relay median {:.2} (rounds {:.2}–{:.2}); CPU per GiB: direct {:.2} s, bare relay {:.2} s, tunnel {:.2} s",
        n / MB,
        mbps(secs[0]),
        mbps(secs[1]),
        mbps(secs[2]),
        direct_ratios[rounds / 2],
        direct_ratios[0],
        direct_ratios[rounds - 1],
        relay_ratios[rounds / 2],
        relay_ratios[0],
        relay_ratios[rounds - 1],
        per_gib(cpu[0]),
        per_gib(cpu[1]),
        per_gib(cpu[2]),
    );
}

async fn download(
    mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    port: u16,
    n: usize,
) -> usize {
    s.write_all(
        format!("GET /bytes/{n} HTTP/1.1\r\nHost: bulk.test:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let k = s.read(&mut buf).await.unwrap();
        if k == 0 {
            return total;
        }
        total += k;
    }
}

/// The time to the first answer on a new HTTPS connection to `server` (`host`, its allow-list
/// `entry`): TCP, TLS and one request direct, against CONNECT, TLS with the proxy's leaf, the
/// request rewritten (phantom → value) and sent on over the proxy's own TLS; 40 of each,
/// alternated, medians.
async fn first_answer(
    what: &str,
    proxy: SocketAddr,
    server: SocketAddr,
    (host, entry): (&str, &str),
    (server_ca, proxy_ca): (
        &rustls::pki_types::CertificateDer<'static>,
        &rustls::pki_types::CertificateDer<'static>,
    ),
    (phantom, value): (&str, &str),
) {
    let req = |key: &str| {
        hyper::Request::get(format!("/v1?k={key}"))
            .header("host", entry)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    let direct = || async {
        let t = Instant::now();
        let s = tokio::net::TcpStream::connect(server).await.unwrap();
        s.set_nodelay(true).unwrap();
        let tls = client_tls(std::slice::from_ref(server_ca))
            .connect(
                rustls::pki_types::ServerName::try_from(host.to_string()).unwrap(),
                s,
            )
            .await
            .unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        assert_eq!(send(&mut sender, req(value)).await.status, 200);
        t.elapsed().as_secs_f64()
    };
    let proxied = || async {
        let t = Instant::now();
        let (mut sender, _) = https_session(proxy, entry, host, std::slice::from_ref(proxy_ca))
            .await
            .unwrap();
        assert_eq!(send(&mut sender, req(phantom)).await.status, 200);
        t.elapsed().as_secs_f64()
    };
    direct().await;
    proxied().await; // the leaf is minted once, then cached
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for i in 0..40 {
        if i % 2 == 0 {
            d.push(direct().await);
            p.push(proxied().await);
        } else {
            p.push(proxied().await);
            d.push(direct().await);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (md, mp) = (median(&mut d), median(&mut p));
    println!(
        "first answer on a new HTTPS connection, {what}, 40 alternated, medians: direct {:.2} ms, through the proxy {:.2} ms, proxied ÷ direct {:.2}",
        md * 1e3,
        mp * 1e3,
        mp / md
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_tunnel_throughput_and_injected_rps() {
    let ca = TestCa::new();
    let http = Server::start(None).await;
    let https = Server::start(Some(ca.server_config(&["api.test"]))).await;
    let https_nd = Server::start_with(Some(ca.server_config(&["api2.test"])), true).await;
    let https_relayed = Server::start(Some(ca.server_config(&["plain.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, &ca.pem).unwrap();
    let settings = dir.path().join("settings.json");
    let ip = host_ip();
    let bulk_server = static_bulk_server(ip).await;
    let entries = [
        format!("bulk.test:{}", http.port),
        format!("api.test:{}", https.port),
        format!("static.test:{}", bulk_server.port()),
        format!("api2.test:{}", https_nd.port),
        format!("plain.test:{}", https_relayed.port),
    ];
    handler_core::runtime::egress::write_settings(
        &settings,
        &Settings {
            enforcement: Enforcement::Enforce,
            allow: entries
                .iter()
                .map(|e| AllowEntry::parse(e).unwrap())
                .collect(),
        },
    )
    .unwrap();
    let phantom = "sk-bench-AbCdEfGh0123456789xyzwABCDEFGH";
    let value = "sk-bench-QwErTyUi9876543210abcdZYXWVUTS";
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: Some(dir.path().join("proxy.sock").to_string_lossy().into()),
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![roots.to_string_lossy().into()],
        injections: vec![Injection {
            name: "providers/bench/apiKey".into(),
            phantom: phantom.into(),
            value: value.into(),
            hosts: vec![
                AllowEntry::parse(&entries[1]).unwrap(),
                AllowEntry::parse(&entries[3]).unwrap(),
            ],
            body: false,
        }],
        host_addresses: vec![],
        resolve: [
            ("bulk.test".to_string(), ip),
            ("api.test".to_string(), ip),
            ("static.test".to_string(), ip),
            ("api2.test".to_string(), ip),
            ("plain.test".to_string(), ip),
        ]
        .into(),
        control_socket: None,
    };
    let proxy = proxy_on_its_own_runtime(config);

    // Bulk download, direct and through a tunnel: from a server sending one static buffer (the
    // relay's cost alone), and from the test server (a body built per request, as before);
    // the client reaching the proxy over TCP, and over its unix socket (a sandbox's way in).
    let rounds = 9;
    let sock = dir.path().join("proxy.sock");
    let http_addr = SocketAddr::new(ip, http.port);
    for (what, via) in [
        ("TCP", Via::Tcp(proxy.listen)),
        ("unix socket", Via::Unix(&sock)),
    ] {
        let what_static = format!("static body, client over {what}");
        bulk(
            &what_static,
            via,
            bulk_server,
            &entries[2],
            256 * MB,
            rounds,
        )
        .await;
        let what_test = format!("test server, body built per request, client over {what}");
        bulk(&what_test, via, http_addr, &entries[0], 256 * MB, rounds).await;
    }

    // Time to the first answer on a new HTTPS connection (egress-lessons: time-to-first-byte
    // through the proxy is part of its benchmark), to a server with TCP_NODELAY (as API servers
    // set it) and to one without.
    let proxy_ca = pem_der(&proxy.ca);
    for (what, port, entry) in [
        ("server with TCP_NODELAY", https_nd.port, &entries[3]),
        ("server without TCP_NODELAY", https.port, &entries[1]),
    ] {
        let host = entry.split(':').next().unwrap();
        first_answer(
            what,
            proxy.listen,
            SocketAddr::new(ip, port),
            (host, entry),
            (&ca.der(), &proxy_ca),
            (phantom, value),
        )
        .await;
    }
    // A host without injections: its tunnel is relayed untouched (TLS end to end).
    let host = entries[4].split(':').next().unwrap();
    first_answer(
        "server without TCP_NODELAY, tunnel relayed (no injection)",
        proxy.listen,
        SocketAddr::new(ip, https_relayed.port),
        (host, &entries[4]),
        (&ca.der(), &ca.der()),
        (value, value),
    )
    .await;

    // Injected HTTPS requests with keep-alive, one connection, sequential.
    let (mut s, _) = https_session(proxy.listen, &entries[1], "api.test", &[pem_der(&proxy.ca)])
        .await
        .unwrap();
    let req = || {
        hyper::Request::get(format!("/v1?k={phantom}"))
            .header("host", entries[1].as_str())
            .header("authorization", format!("Bearer {phantom}"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    for _ in 0..200 {
        send(&mut s, req()).await;
    }
    let k = 3000;
    let t = Instant::now();
    for _ in 0..k {
        assert_eq!(send(&mut s, req()).await.status, 200);
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "injected HTTPS requests, keep-alive, one connection: {:.0} requests/s (client, proxy and server on this machine)",
        k as f64 / secs
    );
}
