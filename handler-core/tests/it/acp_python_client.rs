//! An official ACP client library (Python `agent-client-protocol`, with its WebSocket stream
//! helper) against /v1/agents/{id}/acp: installed in a venv under the test's temp folder from
//! PyPI (docs/ci-needs.md). Fails when it cannot be installed, unless
//! HANDLER_SKIP_PYTHON_TESTS=1.

use crate::daemon_support;

use std::path::Path;
use std::process::Command;

use daemon_support::TestDaemon;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_acp_client_talks_to_an_agent_through_the_endpoint() {
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
    d.fake_account("perso", "fk-Python0Token1111aaaa2222bbbb3333")
        .await;
    let a = d.fake_agent("perso", json!({})).await;
    let url = d.acp_url(a["id"].as_str().unwrap(), "");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/daemon/acp_client.py");
    let scope = d.scope();
    let token = d.token.clone();
    let py_bin = venv.path().join("bin/python");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py_bin)
            .arg(script)
            .arg(url)
            .arg(token)
            .arg(scope)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["protocolVersion"], 1);
    assert_eq!(v["loadSession"], true);
    assert_eq!(v["stopReason"], "end_turn");
    assert_eq!(v["echo"], json!({"n": 42}));
    d.stop().await;
}
