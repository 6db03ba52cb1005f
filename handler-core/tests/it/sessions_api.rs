//! The sessions resource (F.3) over HTTP with the fake sandbox: a session created and listed,
//! the request's refusals (an unknown agent 404, an unknown field 422, an unknown session 404);
//! and an official ACP client library (Python `agent-client-protocol`, its WebSocket stream)
//! attaching, prompting, detaching and re-attaching with the replay. The Python part fails
//! when the library cannot be installed, unless HANDLER_SKIP_PYTHON_TESTS=1.

use crate::daemon_support;

use std::path::Path;
use std::process::Command;

use daemon_support::TestDaemon;
use serde_json::{Value, json};

async fn session(d: &TestDaemon) -> Value {
    d.fake_account("perso", "fk-Sessions0Token1111aaaa2222bbbb")
        .await;
    let a = d.fake_agent("perso", json!({})).await;
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": a["id"], "origin": "cli"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    v
}

/// Issue 28, item 2: `POST /v1/sessions` reads (and validates) the account/provider catalog
/// once — gather's — for the model check, the plan, the harness and its image, the live
/// allow-list and the start; a restart of the session reads it once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_start_reads_the_catalog_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let d = TestDaemon::start().await;
    d.fake_account("perso", "fk-Sessions0Token1111aaaa2222bbbb")
        .await;
    let a = d.fake_agent("perso", json!({})).await;
    let before = d.state.catalog_reads.load(SeqCst);
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": a["id"], "origin": "cli"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(d.state.catalog_reads.load(SeqCst) - before, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_created_listed_and_refused_with_the_field_named() {
    let d = TestDaemon::start().await;
    let v = session(&d).await;
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(v["origin"], "cli");
    assert_eq!(v["scope"], d.scope());
    let id = v["id"].as_str().unwrap();
    assert!(
        v["acpUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/sessions/{id}/acp"))
    );
    let (s, l) = d.get("/v1/sessions?state=running").await;
    assert_eq!((s, l.as_array().map(Vec::len)), (200, Some(1)), "{l}");
    let (s, l) = d.get("/v1/sessions?state=stopped").await;
    assert_eq!((s, l), (200, json!([])));
    let (s, p) = d
        .post(
            "/v1/sessions",
            json!({"agentId": "a_nobody", "origin": "ui"}),
        )
        .await;
    daemon_support::assert_problem(s, &p, 404, "not found");
    let (s, p) = d
        .post(
            "/v1/sessions",
            json!({"agentId": v["agentId"], "origin": "ui", "colour": 1}),
        )
        .await;
    assert_eq!(s, 422, "{p}");
    assert!(
        p["detail"].as_str().unwrap_or_default().contains("colour"),
        "{p}"
    );
    let (s, _) = d.get("/v1/sessions/s_0000000000000000").await;
    assert_eq!(s, 404);
    let (s, v) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("stopped")), "{v}");
    let (s, _) = d.delete(&format!("/v1/sessions/{id}")).await;
    assert_eq!(s, 204);

    // A first prompt given at creation: sent once the agent runs, logged, its turn ended.
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": v["agentId"], "origin": "automation", "prompt": "first words"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let log = d
        .state
        .sessions
        .folder(v["id"].as_str().unwrap())
        .join("events.ndjson");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let events = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("\"phase\":\"end\"") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        events.contains("\"user_message_chunk\"") && events.contains("first words"),
        "{events}"
    );
    assert!(events.contains("\"stopReason\":\"end_turn\""), "{events}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_acp_client_attaches_prompts_and_reattaches_with_the_replay() {
    let venv = tempfile::tempdir().unwrap();
    let py = std::env::var("HANDLER_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let made = Command::new(&py)
        .args(["-m", "venv"])
        .arg(venv.path())
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.path().join("bin/pip"))
            .args(["install", "-q", "agent-client-protocol[http]==0.12.1"])
            .status()
            .is_ok_and(|s| s.success());
    if !made {
        if std::env::var("HANDLER_SKIP_PYTHON_TESTS").as_deref() == Ok("1") {
            eprintln!(
                "skipped: cannot install agent-client-protocol (HANDLER_SKIP_PYTHON_TESTS=1)"
            );
            return;
        }
        panic!(
            "cannot install agent-client-protocol[http] from PyPI in a venv (see docs/ci-needs.md)"
        );
    }
    let d = TestDaemon::start().await;
    let v = session(&d).await;
    let url = v["acpUrl"].as_str().unwrap().to_string();
    let sid = v["acpSessionId"].as_str().unwrap().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/daemon/session_client.py");
    let (scope, token, py_bin) = (d.scope(), d.token.clone(), venv.path().join("bin/python"));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py_bin)
            .arg(script)
            .args([url, token, scope, sid])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon_support::logs()
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["loadSession"], true);
    assert_eq!(v["firstReplay"], json!([]), "a new session has no history");
    assert_eq!(
        v["replay"],
        json!([
            ["user_message_chunk", "hello from python"],
            ["agent_message_chunk", "hello from python"]
        ]),
        "the daemon's log, replayed"
    );
    d.stop().await;
}

/// Benchmark (F.5, docs/benchmarks.md): attaching to a session whose log holds 100 000 update
/// events, from session/load to its response (every event replayed over the WebSocket), against
/// reading the file. Ignored: `cargo test --release -p handler-core --test it --
/// --ignored sessions_api::replay_benchmark --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark"]
async fn replay_benchmark() {
    use handler_contracts::session::SessionEvent;
    use std::io::Write;
    use std::time::Instant;
    const N: u64 = 100_000;
    let d = TestDaemon::start().await;
    let v = session(&d).await;
    let id = v["id"].as_str().unwrap().to_string();
    let sid = v["acpSessionId"].as_str().unwrap().to_string();
    let (s, _) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert_eq!(s, 200);
    let path = d.state.sessions.folder(&id).join("events.ndjson");
    let first = std::fs::read_to_string(&path).unwrap().lines().count() as u64 + 1;
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mut buf = String::new();
        for seq in first..first + N {
            let u = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("chunk {seq} of a long answer, about eighty bytes of text")}});
            buf.push_str(&SessionEvent::update(seq, "2026-12-01T00:00:00Z", u).to_line());
            buf.push('\n');
        }
        f.write_all(buf.as_bytes()).unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    let t = Instant::now();
    let bytes = std::fs::read(&path).unwrap();
    let read = t.elapsed();
    let t = Instant::now();
    let parsed = handler_contracts::session::parse_log(std::str::from_utf8(&bytes).unwrap());
    let parse = t.elapsed();
    assert!(parsed.events.len() as u64 >= N);
    let url = v["acpUrl"].as_str().unwrap().to_string();
    let mut c = test_support::acp::open(&url, &d.protocols(), None)
        .await
        .unwrap();
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let t = Instant::now();
    let r = c
        .request(
            "session/load",
            json!({"sessionId": sid, "cwd": d.scope(), "mcpServers": []}),
        )
        .await;
    let replay = t.elapsed();
    assert!(r["result"].is_object(), "{r}");
    let last = c
        .seen
        .iter()
        .rev()
        .find_map(|m| m["params"]["_meta"]["handler.dev/seq"].as_u64());
    assert_eq!(last, Some(first + N - 1));
    assert!(c.seen.len() as u64 >= N);
    println!(
        "replay of {N} events ({:.1} MiB): read {read:?}, read+parse {:?}, attach replay to the last event {replay:?} ({:.1}x the read+parse)",
        size as f64 / 1048576.0,
        read + parse,
        replay.as_secs_f64() / (read + parse).as_secs_f64()
    );
    d.stop().await;
}
