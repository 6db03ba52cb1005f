//! Egress proxy benchmarks (ignored; run by bench/egress-bench.sh in release): bulk download
//! through a relayed tunnel against direct on loopback, measured side by side in one run, and
//! injected HTTPS requests per second with keep-alive. Figures are printed, never asserted.

mod egress_support;

use std::time::Instant;

use egress_support::*;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::{Enforcement, Injection};
use handler_sandbox::egress::{ProxyConfig, ProxyMode, Settings};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const MB: usize = 1 << 20;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_tunnel_throughput_and_injected_rps() {
    let ca = TestCa::new();
    let http = Server::start(None).await;
    let https = Server::start(Some(ca.server_config(&["api.test"]))).await;
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, &ca.pem).unwrap();
    let settings = dir.path().join("settings.json");
    let entries = [
        format!("bulk.test:{}", http.port),
        format!("api.test:{}", https.port),
    ];
    handler_core::egress::write_settings(
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
    let ip = host_ip();
    let config = ProxyConfig {
        mode: ProxyMode::Filter,
        listen: "127.0.0.1:0".into(),
        listen_unix: None,
        settings_file: Some(settings.to_string_lossy().into()),
        ca_bundle_out: None,
        roots_files: vec![roots.to_string_lossy().into()],
        injections: vec![Injection {
            name: "providers/bench/apiKey".into(),
            phantom: phantom.into(),
            value: value.into(),
            hosts: vec![AllowEntry::parse(&entries[1]).unwrap()],
        }],
        host_addresses: vec![],
        resolve: [("bulk.test".to_string(), ip), ("api.test".to_string(), ip)].into(),
    };
    let proxy = handler_core::egress::start(config, handler_core::egress::Events::with(|_| {}))
        .await
        .unwrap();

    // Bulk download: direct and through a tunnel, alternated, 5 rounds of 256 MiB.
    let n = 256 * MB;
    let (mut direct, mut tunnel) = (0f64, 0f64);
    for _ in 0..5 {
        let t = Instant::now();
        let s = tokio::net::TcpStream::connect((ip, http.port))
            .await
            .unwrap();
        assert!(download(s, http.port, n).await >= n);
        direct += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let Connect::Open(s) = connect(proxy.addr(), &entries[0]).await else {
            panic!()
        };
        assert!(download(s, http.port, n).await >= n);
        tunnel += t.elapsed().as_secs_f64();
    }
    let mbps = |secs: f64| (5 * n) as f64 / MB as f64 / secs;
    println!(
        "bulk download: direct {:.0} MiB/s, through a tunnel {:.0} MiB/s, ratio {:.2}",
        mbps(direct),
        mbps(tunnel),
        direct / tunnel
    );

    // Injected HTTPS requests with keep-alive, one connection, sequential.
    let (mut s, _) = https_session(
        proxy.addr(),
        &entries[1],
        "api.test",
        &[pem_der(&proxy.ready.ca)],
    )
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
