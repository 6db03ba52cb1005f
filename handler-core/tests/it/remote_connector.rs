//! The remote connector against a hostile gateway (D.7): an answer to its poll larger than it
//! reads (64 MiB) is refused — the light says so — instead of being held in memory.

use crate::daemon_support::TestDaemon;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A gateway that registers the daemon, then answers every poll with `size` bytes.
async fn hostile_gateway(size: usize) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let n = s.read(&mut head).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&head[..n]).to_string();
                if req.starts_with("POST /v1/daemons") {
                    let body =
                        r#"{"daemonId":"d_0123456789abcdef","token":"d_0123456789abcdef.x"}"#;
                    let _ = s
                        .write_all(format!("HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes())
                        .await;
                } else {
                    let _ = s
                        .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n").as_bytes())
                        .await;
                    let chunk = vec![b' '; 1 << 20];
                    let mut sent = 0;
                    while sent < size {
                        if s.write_all(&chunk).await.is_err() {
                            return;
                        }
                        sent += chunk.len();
                    }
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_answer_over_the_bound_is_refused_not_held() {
    let port = hostile_gateway(80 << 20).await;
    let d = TestDaemon::start().await;
    let (s, v) = d
        .put(
            "/v1/remote",
            serde_json::json!({"gateway": format!("http://127.0.0.1:{port}")}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v) = d.get("/v1/remote").await;
        if v["state"] == "unreachable"
            && v["detail"]
                .as_str()
                .is_some_and(|d| d.contains("at most 67108864 bytes"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "the light stayed {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    d.stop().await;
}
