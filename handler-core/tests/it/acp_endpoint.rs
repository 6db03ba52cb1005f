//! The ACP WebSocket endpoint (C.1–C.3) with a real WebSocket client, the scripted fake agent
//! and the transport double (fake-sandbox: the spec on fd 3, the agent run on the host): auth
//! (401), Origin (403), framing (1003, 1009, 1 MB intact), P1–P7 and P9 through the socket,
//! close → the agent stopped, agent exit → 1011, the live egress switch, egress events, E3
//! phantoms. The same conformance against the real sandbox: bins/tests/daemon_acp_sandbox.rs.

use crate::daemon_support;

use std::time::Duration;

use daemon_support::acp::{open, refused_status};
use daemon_support::{Options, TestDaemon};
use serde_json::{Value, json};

const TOKEN: &str = "fk-Acp0Token1111aaaa2222bbbb3333cccc";

async fn setup(extra: Value) -> (TestDaemon, String) {
    setup_with(Options::default(), extra).await
}

async fn setup_with(o: Options, extra: Value) -> (TestDaemon, String) {
    let d = TestDaemon::start_with(o).await;
    d.fake_account("perso", TOKEN).await;
    let a = d.fake_agent("perso", extra).await;
    let id = a["id"].as_str().unwrap().to_string();
    (d, id)
}

fn pid_alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test]
async fn handshake_needs_the_token_an_allowed_origin_and_answers_acp_v1() {
    let (d, id) = setup_with(
        Options {
            origins: vec!["http://ui.local".into()],
            ..Default::default()
        },
        json!({}),
    )
    .await;
    let url = d.acp_url(&id, "");
    let e = open(&url, &["acp.v1".into()], None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(401));
    let e = open(&url, &["acp.v1".into(), "bearer.wrong".into()], None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(401));
    let e = open(&url, &d.protocols(), Some("http://evil.example"))
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(403));
    let e = open(&d.acp_url("a_nope", ""), &d.protocols(), None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(404));
    let mut c = open(&url, &d.protocols(), Some("http://ui.local"))
        .await
        .expect("allowed origin");
    assert_eq!(c.protocol.as_deref(), Some("acp.v1"));
    let r = c
        .request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    assert_eq!(r["result"]["protocolVersion"], 1);
    drop(c);
    d.stop().await;
}

#[tokio::test]
async fn the_model_by_query_is_checked_before_accepting() {
    let (d, id) = setup(json!({})).await;
    let e = open(&d.acp_url(&id, "account=ghost"), &d.protocols(), None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(400));
    let e = open(
        &d.acp_url(&id, "provider=ghost&harness=fake"),
        &d.protocols(),
        None,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(refused_status(&e), Some(400));
    // A project with a context the account is not made for: 409.
    let (s, _) = d
        .post("/v1/contexts", json!({"name": "Work", "color": "blue"}))
        .await;
    assert_eq!(s, 201);
    let (s, _) = d.post("/v1/accounts", json!({"name": "work", "harness": "fake", "contexts": ["Work"], "token": {"value": TOKEN}})).await;
    assert_eq!(s, 201);
    let (s, p) = d.post("/v1/projects", json!({"folder": d.scope(), "context": "Work", "agent": {"name": "Dev", "models": [{"account": "work"}]}})).await;
    assert_eq!(s, 201, "{p}");
    let pa = p["agents"][0]["id"].as_str().unwrap();
    let e = open(&d.acp_url(pa, "account=perso"), &d.protocols(), None)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused_status(&e), Some(409));
    let mut c = open(&d.acp_url(pa, "account=work"), &d.protocols(), None)
        .await
        .expect("its own account");
    c.start_session(&d.scope()).await;
    d.stop().await;
}

#[tokio::test]
async fn framing_binary_1003_oversize_1009_and_1mb_intact_both_ways() {
    let (d, id) = setup(json!({})).await;
    // 1 MB through the pipeline both ways, intact.
    let mut c = d.acp(&id).await;
    let big: String = (0..1024 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let r = c.request("_fake/echo", json!({"blob": big})).await;
    assert_eq!(r["result"]["blob"].as_str().map(str::len), Some(big.len()));
    assert!(r["result"]["blob"] == json!(big));
    // A binary frame: 1003.
    use futures_util::SinkExt;
    c.ws.send(tokio_tungstenite::tungstenite::Message::Binary(
        vec![1, 2, 3].into(),
    ))
    .await
    .unwrap();
    let close = c.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1003);
    d.stop().await;

    // Over the configured limit: 1009.
    let (d, id) = setup_with(
        Options {
            max_message_bytes: Some(64 * 1024),
            ..Default::default()
        },
        json!({}),
    )
    .await;
    let mut c = d.acp(&id).await;
    let r = c
        .request("_fake/echo", json!({"x": "y".repeat(32 * 1024)}))
        .await;
    assert!(r["result"].is_object());
    c.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "_fake/echo", "params": {"x": "z".repeat(100 * 1024)}})).await;
    let close = c.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1009, "{close:?}");
    d.stop().await;
}

#[tokio::test]
async fn close_stops_the_agent_and_agent_exit_closes_1011() {
    let (d, id) = setup(json!({})).await;
    let mut c = d.acp(&id).await;
    let pid = c.request("_fake/pid", json!({})).await["result"]["pid"]
        .as_i64()
        .unwrap();
    assert!(pid_alive(pid));
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    assert_eq!(a["connections"].as_array().unwrap().len(), 1, "{a}");
    c.ws.close(None).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while pid_alive(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent outlived its socket"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    assert_eq!(a["connections"], json!([]), "{a}");
    assert!(a["lastUsedAt"].is_string());

    let mut c = d.acp(&id).await;
    c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "_fake/exit", "params": {"code": 3}}))
        .await;
    let close = c.closed().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1011);
    assert_eq!(close.reason.as_str(), "agent exited (3)");
    d.stop().await;
}

#[tokio::test]
async fn daemon_shutdown_stops_every_agent() {
    let (d, id) = setup(json!({})).await;
    let mut c = d.acp(&id).await;
    let pid = c.request("_fake/pid", json!({})).await["result"]["pid"]
        .as_i64()
        .unwrap();
    d.stop().await;
    assert!(!pid_alive(pid), "SIGTERM of the daemon stops its sandboxes");
    let close = c.closed().await;
    assert_eq!(close.map(|c| u16::from(c.code)), Some(1001));
}

#[tokio::test]
async fn p1_p2_p3_p4_p6_through_the_socket() {
    let (d, id) = setup(json!({"allow": ["mcp.allowed.test:443"]})).await;
    let mut c = d.acp(&id).await;
    // P1: no client capability acting outside the sandbox reaches the agent.
    let r = c.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true}})).await;
    let got = &r["result"]["_meta"]["fake/received"]["clientCapabilities"];
    assert_eq!(got["fs"]["readTextFile"], false, "{r}");
    assert_eq!(got["fs"]["writeTextFile"], false, "{r}");
    assert_eq!(got["terminal"], false, "{r}");
    // P2: cwd outside the scope.
    let r = c
        .request("session/new", json!({"cwd": "/etc", "mcpServers": []}))
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert_eq!(r["error"]["data"]["policy"], "P2");
    // P3: an MCP server the network does not allow; an allowed one passes.
    let r = c.request("session/new", json!({"cwd": d.scope(), "mcpServers": [{"type": "http", "name": "x", "url": "https://mcp.evil.test/x", "headers": []}]})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["policy"], "P3");
    let r = c.request("session/new", json!({"cwd": d.scope(), "mcpServers": [{"type": "http", "name": "x", "url": "https://mcp.allowed.test/x", "headers": []}]})).await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    // P4: the agent asks the client for a file: answered -32003 by the daemon.
    let r = c.request("_fake/request", json!({"method": "fs/read_text_file", "params": {"sessionId": sid, "path": "/etc/passwd"}})).await;
    assert_eq!(r["result"]["response"]["error"]["code"], -32003, "{r}");
    assert!(
        c.seen.iter().all(|m| m["method"] != "fs/read_text_file"),
        "never forwarded: {:?}",
        c.seen
    );
    // P4: a session the connection does not own.
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": "sess-other", "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32003, "{r}");
    // P6: the daemon's extension methods.
    let r = c.request("_handler/anything", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    c.request(
        "_fake/notify",
        json!({"method": "_handler/spoof", "params": {}}),
    )
    .await;
    c.request("_fake/notify", json!({"method": "_other/ok", "params": {}}))
        .await;
    assert!(
        c.seen.iter().all(|m| m["method"] != "_handler/spoof"),
        "{:?}",
        c.seen
    );
    assert!(
        c.seen.iter().any(|m| m["method"] == "_other/ok"),
        "{:?}",
        c.seen
    );
    // A prompt works.
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn");
    assert!(
        c.seen
            .iter()
            .any(|m| m["params"]["update"]["content"]["text"] == "hello")
    );
    d.stop().await;
}

#[tokio::test]
async fn p5_secrets_never_reach_the_client_and_the_agent_holds_a_phantom() {
    let (d, id) = setup(json!({})).await;
    let mut c = d.acp(&id).await;
    let sid = c.start_session(&d.scope()).await;
    // E3: the agent's token is a phantom of the same form.
    let r = c.request("_fake/env", json!({"name": "FAKE_TOKEN"})).await;
    let phantom = r["result"]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    assert_ne!(phantom, TOKEN);
    assert_eq!(phantom.len(), TOKEN.len());
    assert!(phantom.starts_with("fk-"));
    // P5: the value, said by the agent, is replaced.
    c.request(
        "_fake/say",
        json!({"sessionId": sid, "text": format!("the token is {TOKEN}")}),
    )
    .await;
    let said: Vec<&Value> = c
        .seen
        .iter()
        .filter(|m| m["method"] == "session/update")
        .collect();
    let text = said.last().unwrap()["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap();
    assert_eq!(text, "the token is [secret accounts/perso/token]");
    // The spec handed to the launcher carries the injection towards the login's hosts.
    let log = d.sandbox_log();
    let spec: Value = serde_json::from_str(
        log.lines()
            .find(|l| l.starts_with("launch "))
            .unwrap()
            .trim_start_matches("launch "),
    )
    .unwrap();
    assert_eq!(spec["injections"][0]["name"], "accounts/perso/token");
    assert_eq!(spec["injections"][0]["phantom"], phantom.as_str());
    assert_eq!(spec["injections"][0]["hosts"], json!(["api.fake.test:443"]));
    assert_eq!(
        spec["network"],
        json!({"mode": "filtered", "allow": ["api.fake.test:443"], "enforcement": "enforce"})
    );
    assert!(!log.contains(TOKEN));
    assert!(!daemon_support::logs().contains(TOKEN));
    // E6: its state folders exist, with their initial content.
    let state = d.home.path().join(format!(
        ".local/share/handler-ai/agent-state/{id}/fake@perso"
    ));
    assert!(state.join("history").is_dir());
    assert_eq!(
        std::fs::read_to_string(state.join("settings")).unwrap(),
        "{}"
    );
    d.stop().await;
}

#[tokio::test]
async fn p7_session_defaults_failing_gives_32004() {
    let (d, id) = setup(json!({})).await;
    // The agent refuses the permission mode's session mode (bypass → bypassPermissions).
    std::fs::write(
        std::path::Path::new(&d.scope()).join(".fake-agent-script.json"),
        json!({"replies": {"session/set_mode": {"error": {"code": -32602, "message": "no such mode"}}}}).to_string(),
    )
    .unwrap();
    let mut c = d.acp(&id).await;
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let r = c
        .request("session/new", json!({"cwd": d.scope(), "mcpServers": []}))
        .await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert_eq!(r["error"]["data"]["policy"], "P7");
    d.stop().await;
}

#[tokio::test]
async fn p9_an_agent_with_an_interface_gets_its_permissions_answered() {
    let (d, id) = setup(json!({"interface": {"result": {"type": "object"}}})).await;
    let mut c = d.acp(&id).await;
    let sid = c.start_session(&d.scope()).await;
    let r = c
        .request(
            "_fake/request",
            json!({"method": "session/request_permission", "params": {"sessionId": sid, "toolCall": {"toolCallId": "t1"}, "options": [
                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"}]}}),
        )
        .await;
    assert_eq!(
        r["result"]["response"]["result"]["outcome"],
        json!({"outcome": "selected", "optionId": "yes"}),
        "{r}"
    );
    assert!(
        c.seen
            .iter()
            .all(|m| m["method"] != "session/request_permission"),
        "answered by the daemon"
    );
    d.stop().await;
}

#[tokio::test]
async fn the_live_egress_switch_and_egress_events() {
    let (d, id) = setup(json!({})).await;
    let mut c = d.acp(&id).await;
    c.request(
        "_fake/stderr",
        json!({"line": "handler-egress {\"decision\":\"unlisted\",\"host\":\"crates.io:443\"}"}),
    )
    .await;
    let (s, v) = d
        .patch(&format!("/v1/agents/{id}"), json!({"egress": "log-only"}))
        .await;
    assert_eq!(s, 200, "{v}");
    let sandbox = v["connections"][0]["sandbox"].as_str().unwrap().to_string();
    assert!(
        d.sandbox_log()
            .contains(&format!("set-egress {sandbox} log-only")),
        "{}",
        d.sandbox_log()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, ev) = d.get(&format!("/v1/agents/{id}/egress-events")).await;
        if ev.as_array().is_some_and(|a| !a.is_empty()) {
            assert_eq!(ev[0]["decision"], "unlisted");
            assert_eq!(ev[0]["host"], "crates.io:443");
            assert_eq!(ev[0]["sandbox"], sandbox.as_str());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no egress event recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    d.stop().await;
}

#[tokio::test]
async fn a_changed_allow_list_reaches_the_running_sandbox_and_the_rest_waits_for_the_next() {
    let (d, id) = setup(json!({"allow": ["crates.io:443"]})).await;
    let _c = d.acp(&id).await;
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    let sandbox = a["connections"][0]["sandbox"].as_str().unwrap().to_string();
    // The new list replaces the old one live: crates.io closed, pypi.org open, the model's host
    // kept.
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope(),
        "allow": ["pypi.org:443"]});
    let (s, v) = d.put(&format!("/v1/agents/{id}"), body.clone()).await;
    assert_eq!(s, 200, "{v}");
    assert!(v.get("nextSandbox").is_none(), "{v}");
    let log = d.sandbox_log();
    let line = log
        .lines()
        .find(|l| l.starts_with(&format!("set-allow {sandbox}")))
        .unwrap_or_else(|| panic!("no set-allow: {log}"));
    assert_eq!(
        line,
        format!("set-allow {sandbox} api.fake.test:443 pypi.org:443"),
        "{log}"
    );
    // The same list again: nothing sent.
    let (s, _) = d.put(&format!("/v1/agents/{id}"), body).await;
    assert_eq!(s, 200);
    assert_eq!(d.sandbox_log().matches("set-allow").count(), 1);
    // What cannot change live is named in the answer; the list goes with it (narrowed).
    let (s, v) = d
        .put(
            &format!("/v1/agents/{id}"),
            json!({"models": [{"account": "perso"}], "scope": d.scope(), "network": "none"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["nextSandbox"], json!(["network"]), "{v}");
    // A PATCH of its instructions too (they are rendered at a start); its name is not.
    let (s, v) = d
        .patch(
            &format!("/v1/agents/{id}"),
            json!({"instructions": "Be brief."}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["nextSandbox"], json!(["instructions"]), "{v}");
    let (s, v) = d
        .patch(&format!("/v1/agents/{id}"), json!({"name": "Renamed"}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(v.get("nextSandbox").is_none(), "{v}");
    assert!(
        d.sandbox_log()
            .contains(&format!("set-allow {sandbox} api.fake.test:443\n")),
        "{}",
        d.sandbox_log()
    );
    d.stop().await;
}
