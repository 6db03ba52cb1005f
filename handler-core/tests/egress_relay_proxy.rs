//! The proxy splices the tunnels it does not decrypt, whether the client came over TCP or over the
//! proxy's unix socket: while a tunnel is open the process holds
//! its two pipes (one each way), and gives them back when the tunnel closes; since a spliced
//! tunnel holds six descriptors, the process's soft open-file limit is raised to the hard one.
//! Its own test binary, so that no other test's descriptors or limits are involved.
#![allow(
    clippy::too_many_lines,
    reason = "a test reads as the scenario it runs, step by step"
)]

#[path = "it/egress_support/mod.rs"]
mod egress_support;

use std::time::{Duration, Instant};

use egress_support::*;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Enforcement;
use handler_sandbox::egress::{ProxyConfig, ProxyMode, Settings};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::UnixStream;

/// Pipe descriptors this process holds (two per pipe).
fn pipe_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("pipe:"))
        .count()
}

#[tokio::test]
async fn tunnels_through_the_proxy_over_tcp_and_its_unix_socket_are_spliced() {
    let http = Server::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let target = format!("plain.test:{}", http.port);
    let settings = dir.path().join("settings.json");
    handler_core::runtime::egress::write_settings(
        &settings,
        &Settings {
            enforcement: Enforcement::Enforce,
            allow: vec![AllowEntry::parse(&target).unwrap()],
        },
    )
    .unwrap();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: Some(dir.path().join("proxy.sock").to_string_lossy().into()),
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![],
        injections: vec![],
        host_addresses: vec![],
        resolve: [("plain.test".to_string(), host_ip())].into(),
        control_socket: None,
    };
    let proxy = handler_core::runtime::egress::start(
        config,
        handler_core::runtime::egress::Events::with(|_| {}),
    )
    .await
    .unwrap();
    // A low soft limit, as a login session often has.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 256.min(hard), hard).unwrap();
    let before = pipe_fds();
    let Connect::Open(s) = connect(proxy.addr(), &target).await else {
        panic!("the tunnel is refused")
    };
    download_while_open(s, &target, before).await;
    assert_eq!(
        getrlimit(Resource::RLIMIT_NOFILE).unwrap(),
        (hard.min(1 << 20), hard),
        "the soft limit on open files is raised to the hard one"
    );
    // The same through the proxy's unix socket, the sandbox's way in.
    let mut s = UnixStream::connect(dir.path().join("proxy.sock"))
        .await
        .unwrap();
    test_support::connect::connect_open(&mut s, &target).await;
    download_while_open(s, &target, before).await;
}

/// Downloads through an open tunnel (keep-alive), checking that the relay holds its two pipes
/// while open and gives them back once the client is gone.
async fn download_while_open(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    target: &str,
    before: usize,
) {
    s.write_all(format!("GET /bytes/300000 HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let k = s.read(&mut buf).await.unwrap();
        assert!(k > 0, "the tunnel closed early");
        got.extend_from_slice(&buf[..k]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    // The answer came back through the relay, which is open (keep-alive) and holds its pipes.
    assert_eq!(pipe_fds() - before, 4, "two pipes, each with two ends");
    let head_len = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    while got.len() < head_len + 300_000 {
        let k = s.read(&mut buf).await.unwrap();
        assert!(k > 0, "the body was cut");
        got.extend_from_slice(&buf[..k]);
    }
    assert!(got[head_len..].iter().all(|b| *b == b'x'));
    drop(s);
    let t = Instant::now();
    while pipe_fds() != before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the pipes are given back when the tunnel closes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
