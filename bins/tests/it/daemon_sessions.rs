//! Daemon-held sessions (F.7's conformance) against real rootless sandboxes: handlerd as the
//! unprivileged test user launches the scripted fake agent (fixtures/fake-agent) in Podman, and
//! real WebSocket clients create, attach, prompt, detach, re-attach with the replay, share a
//! session (each other's prompt, turn end, mode change, the first permission answer winning),
//! go beyond the attachment limit, stop and restart it (session/load, P7, the daemon's log as
//! the history), let it stop for idleness, delete it; and handlerd SIGKILLed mid-turn, then
//! restarted, takes its agent over mid-turn (issue 28 item 6) — or, with the agent's keeper
//! killed too, finds it stopped with `daemon_restarted` and restarts it on attach.
//! Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::acp::{Acp, open, refused_status};
use test_support::user::User;

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const TOKEN: &str = "fk-Sessions0Token111aaaa2222bbbb3333";

fn user() -> Option<User> {
    test_support::user::podman_user(IMAGE, "the sessions tests")
}

/// handlerd as the test user, the fake agent in its scope.
struct Daemon(TempDaemon);

impl std::ops::Deref for Daemon {
    type Target = TempDaemon;
    fn deref(&self) -> &TempDaemon {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut TempDaemon {
        &mut self.0
    }
}

/// A daemon in `/tmp/hds-<pid>-<tag>` with `extra` settings, the fake agent in its scope with a
/// script whose session/load replays a message (as real agents do).
async fn start(u: User, tag: &str, extra: &[(&'static str, &str)]) -> Daemon {
    let l = Layout::new(&format!("hds-{}-{tag}", std::process::id()), false);
    std::fs::write(
        l.scope.join(".fake-agent-script.json"),
        r#"{"loadReplay": true}"#,
    )
    .unwrap();
    // A per-session slot (F.2), as the real harnesses declare for their history.
    l.fake_harness(
        "[stateSlots.sessions]\ntarget = \"~/.fake/sessions\"\nkind = \"dir\"\nrequired = false\nperSession = true\n",
    );
    let extra: Vec<(&'static str, String)> =
        extra.iter().map(|(k, v)| (*k, v.to_string())).collect();
    Daemon(l.spawn(u, &extra).await)
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }
    fn url(&self, session: &str) -> String {
        format!("ws://127.0.0.1:{}/v1/sessions/{session}/acp", self.port)
    }
    fn protocols(&self) -> Vec<String> {
        vec!["acp.v1".into(), format!("bearer.{}", self.token)]
    }
    async fn attach(&self, session: &str) -> Acp {
        let a = open(&self.url(session), &self.protocols(), None)
            .await
            .unwrap_or_else(|e| panic!("attach: {e}: {}", self.log()));
        assert_eq!(a.protocol.as_deref(), Some("acp.v1"));
        a
    }
    fn containers(&self, session: &str) -> Vec<String> {
        let o = self
            .user
            .cmd(
                "podman",
                &[
                    "ps",
                    "-a",
                    "--filter",
                    &format!("label=handler.connection={session}"),
                    "--format",
                    "{{.Names}}",
                ],
                &[("HOME", self.user.home())],
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
    fn folder(&self, session: &str) -> PathBuf {
        self.root.join("state/sessions").join(session)
    }
    fn events(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(self.folder(session).join("events.ndjson"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    /// An account and an agent (no network, permissions bypass: P7 sets bypassPermissions).
    async fn agent(&self) -> String {
        let (s, v) = self
            .post(
                "/v1/accounts",
                json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let (s, a) = self
            .post(
                "/v1/agents",
                json!({"models": [{"account": "perso"}], "scope": self.scope, "network": "none", "permissions": "bypass", "confirmRisks": true}),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        a["id"].as_str().unwrap().to_string()
    }
    async fn create(&self, agent: &str) -> Value {
        let (s, v) = self
            .post("/v1/sessions", json!({"agentId": agent, "origin": "ui"}))
            .await;
        assert_eq!(s, 201, "{v}: {}", self.log());
        assert_eq!(v["state"], "running", "{v}: {}", self.log());
        v
    }
    async fn state_becomes(&self, session: &str, want: &[&str], secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let (_, v) = self.get(&format!("/v1/sessions/{session}")).await;
            if want.iter().any(|w| v["state"] == *w) {
                return v;
            }
            assert!(Instant::now() < deadline, "still {v}: {}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    async fn no_container(&self, session: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.containers(session).is_empty() {
            assert!(
                Instant::now() < deadline,
                "containers left: {:?}",
                self.containers(session)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// The next message (from `seen` first) that `pred` accepts; the others are kept.
async fn until(c: &mut Acp, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    if let Some(i) = c.seen.iter().position(&pred) {
        return c.seen.remove(i);
    }
    loop {
        match c.next().await {
            Ok(m) if pred(&m) => return m,
            Ok(m) => c.seen.push(m),
            Err(close) => panic!(
                "closed ({close:?}) while waiting for {what}; seen {:?}",
                c.seen
            ),
        }
    }
}

fn method_is(m: &Value, method: &str) -> bool {
    m["method"] == method
}

fn chunk_text(m: &Value) -> Option<&str> {
    (m["method"] == "session/update")
        .then(|| m["params"]["update"]["content"]["text"].as_str())
        .flatten()
}

/// initialize (from the cache) and session/load: the messages of the replay, then the result.
async fn load(c: &mut Acp, sid: &str, scope: &str, after: Option<u64>) -> (Vec<Value>, Value) {
    let r = c
        .request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    assert_eq!(r["result"]["agentCapabilities"]["loadSession"], true, "{r}");
    let mut params = json!({"sessionId": sid, "cwd": scope, "mcpServers": []});
    if let Some(a) = after {
        params["_meta"] = json!({"handler.dev/afterSeq": a});
    }
    let r = c.request("session/load", params).await;
    assert!(r["result"].is_object(), "{r}");
    (std::mem::take(&mut c.seen), r)
}

/// The close code and reason `c` gets within 20 s (the daemon's log otherwise).
async fn closed_with(c: &mut Acp, d: &Daemon) -> (u16, String) {
    match tokio::time::timeout(Duration::from_secs(20), c.closed()).await {
        Ok(f) => f
            .map(|f| (u16::from(f.code), f.reason.to_string()))
            .unwrap_or_default(),
        Err(_) => panic!("not closed: {}", d.log()),
    }
}

/// The close code `c` gets within 20 s (the daemon's log otherwise).
async fn closed(c: &mut Acp, d: &Daemon) -> u16 {
    match tokio::time::timeout(Duration::from_secs(20), c.closed()).await {
        Ok(f) => f.map(|f| u16::from(f.code)).unwrap_or(0),
        Err(_) => panic!("not closed: {}", d.log()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_outlive_their_clients_in_real_rootless_sandboxes() {
    let Some(u) = user() else { return };
    let d = start(u, "conf", &[("HANDLER_SESSION_MAX_ATTACH", "3")]).await;
    let agent = d.agent().await;
    let s = d.create(&agent).await;
    let id = s["id"].as_str().unwrap().to_string();
    let sid = s["acpSessionId"].as_str().unwrap().to_string();
    assert!(
        id.len() == 18 && id.starts_with("s_") && id[2..].chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(s["canResume"], true, "{s}");
    assert_eq!(
        (s["harness"].as_str(), s["account"].as_str()),
        (Some("fake"), Some("perso")),
        "{s}"
    );
    let mode = std::fs::metadata(d.folder(&id))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the session's folder");
    assert_eq!(d.containers(&id).len(), 1, "one sandbox");
    assert!(d.containers(&id)[0].starts_with(&format!("handler-{}", agent.replace('_', "-"))));
    // The per-session slot is the folder's agent/ (F.2).
    let o = d
        .user
        .cmd(
            "podman",
            &[
                "inspect",
                "--format",
                "{{range .Mounts}}{{.Source}}={{.Destination}} {{end}}",
                &d.containers(&id)[0],
            ],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    let mounts = String::from_utf8_lossy(&o.stdout).to_string();
    let want = format!(
        "{}=/home/agent/.fake/sessions",
        d.folder(&id).join("agent").display()
    );
    assert!(mounts.contains(&want), "{want} not in {mounts}");
    // Its sandbox is one of its agent's connections (D.1, F.3).
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    assert_eq!(view["connections"][0]["id"], id.as_str(), "{view}");
    assert_eq!(
        view["connections"][0]["sandbox"],
        d.containers(&id)[0].as_str(),
        "{view}"
    );

    // 401 without the token, 404 for an unknown session.
    let e = open(&d.url(&id), &["acp.v1".into()], None)
        .await
        .err()
        .unwrap();
    assert_eq!(refused_status(&e), Some(401));
    let e = open(&d.url("s_00000000deadbeef"), &d.protocols(), None)
        .await
        .err()
        .unwrap();
    assert_eq!(refused_status(&e), Some(404));
    assert_eq!(d.get("/v1/sessions/s_00000000deadbeef").await.0, 404);

    // Attach, prompt, detach: the agent stays.
    let mut a = d.attach(&id).await;
    let (_, r) = load(&mut a, &sid, &d.scope, None).await;
    assert_eq!(
        r["result"]["modes"]["currentModeId"], "bypassPermissions",
        "P7: {r}"
    );
    let r = a
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let echo = until(&mut a, "the agent's chunk", |m| {
        chunk_text(m) == Some("hello")
    })
    .await;
    assert!(
        echo["params"]["_meta"]["handler.dev/seq"]
            .as_u64()
            .is_some(),
        "{echo}"
    );
    drop(a);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(
        (v["state"].as_str(), v["attached"].as_u64()),
        (Some("running"), Some(0)),
        "{v}"
    );
    assert_eq!(d.containers(&id).len(), 1, "the agent stays");

    // Two attachments: B prompts a turn that waits for a permission; C sees the prompt, busy,
    // the request; C's prompt while busy → -32011; another session → -32010.
    let mut b = d.attach(&id).await;
    let (replay, _) = load(&mut b, &sid, &d.scope, None).await;
    let texts: Vec<&str> = replay.iter().filter_map(chunk_text).collect();
    assert_eq!(
        texts,
        ["hello", "hello"],
        "the prompt and the answer: {replay:?}"
    );
    let mut c = d.attach(&id).await;
    load(&mut c, &sid, &d.scope, None).await;
    b.send(&json!({"jsonrpc": "2.0", "id": 50, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "ask:write"}]}})).await;
    let shown = until(&mut c, "B's prompt", |m| {
        m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    })
    .await;
    assert_eq!(shown["params"]["update"]["content"]["text"], "ask:write");
    until(&mut c, "busy", |m| {
        method_is(m, "_handler/session_state") && m["params"]["busy"] == true
    })
    .await;
    until(&mut c, "the permission request", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    until(&mut b, "the permission request", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32011, "{r}");
    let r = c
        .request("session/new", json!({"cwd": d.scope, "mcpServers": []}))
        .await;
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let r = c
        .request(
            "session/set_mode",
            json!({"sessionId": "other", "modeId": "default"}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32010, "{r}");

    // B reloads mid-turn: the replay, busy, the pending request; it answers first and wins.
    drop(b);
    let mut b2 = d.attach(&id).await;
    let (seen, _) = load(&mut b2, &sid, &d.scope, Some(2)).await;
    assert!(
        seen.iter()
            .filter_map(|m| m["params"]["_meta"]["handler.dev/seq"].as_u64())
            .all(|n| n > 2),
        "afterSeq: {seen:?}"
    );
    b2.seen = seen;
    until(&mut b2, "busy", |m| {
        method_is(m, "_handler/session_state") && m["params"]["busy"] == true
    })
    .await;
    let req = until(&mut b2, "the pending request", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    let answer = |opt: &str| json!({"jsonrpc": "2.0", "id": req["id"], "result": {"outcome": {"outcome": "selected", "optionId": opt}}});
    b2.send(&answer("yes")).await;
    let resolved = until(&mut c, "permission_resolved", |m| {
        method_is(m, "_handler/permission_resolved")
    })
    .await;
    assert_eq!(
        resolved["params"]["outcome"]["optionId"], "yes",
        "{resolved}"
    );
    c.send(&answer("no")).await; // dropped: answered once
    until(&mut b2, "the turn's end", |m| {
        method_is(m, "_handler/turn_ended")
    })
    .await;
    until(&mut c, "the turn's end", |m| {
        method_is(m, "_handler/turn_ended")
    })
    .await;
    until(&mut c, "the answer the agent got", |m| {
        chunk_text(m) == Some("answered \"yes\"")
    })
    .await;

    // A mode change is shown to the other.
    let r = c
        .request(
            "session/set_mode",
            json!({"sessionId": sid, "modeId": "default"}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let m = until(&mut b2, "the mode change", |m| {
        m["params"]["update"]["sessionUpdate"] == "current_mode_update"
    })
    .await;
    assert_eq!(m["params"]["update"]["currentModeId"], "default");

    // Beyond the limit (3): the oldest is closed 4001; still one sandbox.
    let mut e1 = d.attach(&id).await;
    load(&mut e1, &sid, &d.scope, None).await;
    let mut e2 = d.attach(&id).await;
    load(&mut e2, &sid, &d.scope, None).await;
    assert_eq!(closed(&mut c, &d).await, 4001, "C attached before B2");
    assert_eq!(d.containers(&id).len(), 1);

    // Stop: clients closed 4002, no sandbox; attach → restarted with session/load, P7 again,
    // the history from the daemon's log, not the agent's replay.
    let (st, v) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert_eq!((st, v["state"].as_str()), (200, Some("stopped")), "{v}");
    assert_eq!(closed(&mut b2, &d).await, 4002);
    d.no_container(&id).await;
    let mut f = d.attach(&id).await;
    let (replay, r) = load(&mut f, &sid, &d.scope, None).await;
    assert_eq!(
        r["result"]["modes"]["currentModeId"], "bypassPermissions",
        "P7 on restart: {r}"
    );
    let texts: Vec<&str> = replay.iter().filter_map(chunk_text).collect();
    assert!(
        texts.contains(&"ask:write") && texts.contains(&"answered \"yes\""),
        "{texts:?}"
    );
    assert!(!texts.contains(&"the agent's own replay"), "{texts:?}");
    let st = f.request("_fake/state", json!({})).await;
    assert_eq!(
        st["result"],
        json!({"mode": "bypassPermissions", "loads": 1, "news": 0}),
        "{st}"
    );
    let r = f
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    // The log: seq from 1, strictly increasing; turns and lifecycle with how.
    let ev = d.events(&id);
    let seqs: Vec<u64> = ev.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.first() == Some(&1) && seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "{seqs:?}"
    );
    assert!(
        ev.iter()
            .any(|e| e["kind"] == "lifecycle" && e["how"] == "explicit"),
        "{ev:?}"
    );
    assert_eq!(
        ev.iter()
            .filter(|e| e["kind"] == "turn" && e["phase"] == "end")
            .count(),
        3
    );

    // Delete: stopped, the folder gone, 404.
    let (st, _) = d
        .call(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(st, 204);
    assert_eq!(closed(&mut f, &d).await, 4002);
    assert!(!d.folder(&id).exists());
    assert_eq!(d.get(&format!("/v1/sessions/{id}")).await.0, 404);
    d.no_container(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattached_idle_session_stops_and_an_agent_exit_closes_4002() {
    let Some(u) = user() else { return };
    let d = start(u, "idle", &[("HANDLER_SESSION_IDLE_TIMEOUT", "2")]).await;
    let agent = d.agent().await;
    let id = d.create(&agent).await["id"].as_str().unwrap().to_string();
    let v = d.state_becomes(&id, &["stopped"], 30).await;
    assert_eq!(v["busy"], false);
    d.no_container(&id).await;
    assert!(
        d.events(&id).iter().any(|e| e["how"] == "idle"),
        "{:?}",
        d.events(&id)
    );

    // Stopped before its first turn: restarted with session/new, the agent's new id translated
    // to the one clients know, both ways (F.6.2).
    let sid = v["acpSessionId"].as_str().unwrap().to_string();
    let mut a = d.attach(&id).await;
    load(&mut a, &sid, &d.scope, None).await;
    let st = a.request("_fake/state", json!({})).await;
    assert_eq!(
        (
            st["result"]["news"].as_u64(),
            st["result"]["loads"].as_u64()
        ),
        (Some(1), Some(0)),
        "{st}"
    );
    let r = a
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let chunk = until(&mut a, "the answer", |m| chunk_text(m) == Some("hi")).await;
    assert_eq!(
        chunk["params"]["sessionId"],
        sid.as_str(),
        "translated back: {chunk}"
    );

    // Attached, the agent exits: the client is closed 4002, the session stopped (failed: code 3).
    a.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "_fake/exit", "params": {"code": 3}}))
        .await;
    assert_eq!(closed(&mut a, &d).await, 4002);
    let v = d.state_becomes(&id, &["stopped", "failed"], 30).await;
    assert!(d.events(&id).iter().any(|e| e["how"] == "exited"), "{v}");
    // An agent without loadSession cannot resume a session that had a turn: 1011 and why.
    let script = Path::new(&d.scope).join(".fake-agent-script.json");
    std::fs::write(&script, r#"{"replies": {"initialize": {"result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": false}}}}}"#).unwrap();
    let mut a = d.attach(&id).await;
    let (code, reason) = closed_with(&mut a, &d).await;
    assert_eq!(code, 1011);
    assert!(
        reason.contains("this agent cannot resume sessions"),
        "{reason}"
    );
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(v["state"], "failed", "{v}");
    d.no_container(&id).await;

    // Created with an existing acpSessionId: the log is empty, the agent's replay is the
    // history, logged and relayed (F.5).
    std::fs::write(&script, r#"{"loadReplay": true}"#).unwrap();
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent, "origin": "editor", "acpSessionId": "old-7"}),
        )
        .await;
    assert_eq!(
        (s, v["state"].as_str(), v["acpSessionId"].as_str()),
        (201, Some("running"), Some("old-7")),
        "{v}"
    );
    let id2 = v["id"].as_str().unwrap().to_string();
    let mut a = d.attach(&id2).await;
    let (replay, _) = load(&mut a, "old-7", &d.scope, None).await;
    assert!(
        replay
            .iter()
            .filter_map(chunk_text)
            .any(|t| t == "the agent's own replay"),
        "{replay:?}"
    );

    // Listing filters.
    let (_, l) = d.get(&format!("/v1/sessions?agent={agent}")).await;
    assert_eq!(l.as_array().map(Vec::len), Some(2), "{l}");
    let (_, l) = d.get("/v1/sessions?state=failed").await;
    assert_eq!(l.as_array().map(Vec::len), Some(1), "{l}");
    let (_, l) = d.get("/v1/sessions?agent=nobody").await;
    assert_eq!(l, json!([]));

    // Deleting the agent stops its sessions; they keep their folders and cannot be attached.
    let (st, _) = d
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/agents/{agent}"),
            None,
        )
        .await;
    assert_eq!(st, 204);
    assert_eq!(closed(&mut a, &d).await, 4002);
    let v = d.state_becomes(&id2, &["stopped"], 30).await;
    assert!(d.events(&id2).iter().any(|e| e["how"] == "deleted"), "{v}");
    assert!(d.folder(&id2).is_dir());
    d.no_container(&id2).await;
    let mut a = d.attach(&id2).await;
    let (code, reason) = closed_with(&mut a, &d).await;
    assert_eq!(code, 1011);
    assert!(reason.contains("deleted"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlerd_and_the_agents_keeper_killed_mid_turn_restart_with_the_session_stopped() {
    let Some(u) = user() else { return };
    let mut d = start(u, "kill", &[]).await;
    // An agent that goes on for two minutes once its input ends (as a harness finishing its
    // turn): the old instance would hold the session's sandbox name past the restart.
    std::fs::write(
        d.scope_dir().join(".fake-agent-script.json"),
        r#"{"loadReplay": true, "lingerAfterEof": 120}"#,
    )
    .unwrap();
    let agent = d.agent().await;
    let s = d.create(&agent).await;
    let (id, sid) = (
        s["id"].as_str().unwrap().to_string(),
        s["acpSessionId"].as_str().unwrap().to_string(),
    );
    let mut a = d.attach(&id).await;
    load(&mut a, &sid, &d.scope, None).await;
    a.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "ask:mid-turn"}]}})).await;
    until(&mut a, "the permission request", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    let logged = d.events(&id);
    // SIGKILL, to handlerd and to the agent's keeper (an agent that cannot be taken over):
    // nothing runs its shutdown.
    let keeper = keeper_pid(&d, &id);
    let _ = Command::new("kill")
        .args(["-KILL", &keeper.to_string(), &d.child.id().to_string()])
        .status();
    let _ = d.child.wait();
    drop(a);
    let bin = d.root.join("bin/handlerd");
    d.start_from(&bin).await;
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(v["state"], "stopped", "{v}");
    let ev = d.events(&id);
    assert_eq!(
        &ev[..logged.len()],
        &logged[..],
        "the log up to the kill is intact"
    );
    let tail: Vec<&Value> = ev[logged.len()..].iter().collect();
    assert!(
        tail.iter()
            .any(|e| e["kind"] == "turn" && e["stopReason"] == "daemon_restarted"),
        "{tail:?}"
    );
    assert!(
        tail.iter().any(|e| e["how"] == "daemon_restarted"),
        "{tail:?}"
    );
    // Attached at once (issue 28): the old instance stopped with its keeper (its death signal),
    // and the new launch waited for its name instead of failing with 66.
    let t0 = std::time::Instant::now();
    let mut a = d.attach(&id).await;
    let (replay, _) = load(&mut a, &sid, &d.scope, None).await;
    assert!(
        replay
            .iter()
            .filter_map(chunk_text)
            .any(|t| t == "ask:mid-turn"),
        "{replay:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "the old instance was waited out, not stopped: {:?}",
        t0.elapsed()
    );
    assert_eq!(d.containers(&id).len(), 1);
}

/// The daemon's network question about `host`.
async fn question(c: &mut Acp, host: &str) -> Value {
    let title = format!("Network access: `{host}`");
    let is = |m: &Value| {
        method_is(m, "session/request_permission") && m["params"]["toolCall"]["title"] == *title
    };
    until(c, "the network question", is).await
}

/// `c`'s answer to the daemon's question `q`: option `option`.
async fn answer(c: &mut Acp, q: &Value, option: &str) {
    c.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}}))
        .await;
}

/// Issue 13 item 7 with a real filtered sandbox (the network filter built from this checkout):
/// a host the proxy denies is asked about, once while the question is open, to both clients;
/// the first answer wins (the other told `_handler/permission_resolved`); allow always saves
/// the entry in the agent's allow-list and the retried request passes; allow once lets a
/// second host through this sandbox without saving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_host_becomes_a_question_that_allows_it() {
    let Some(u) = user() else { return };
    if u.name.is_some() {
        test_support::network_filter::ensure(Path::new(env!(
            "CARGO_BIN_EXE_handler-sandbox-podman"
        )));
    }
    let (always, once) = (
        crate::temp_daemon::http_ok_server().await.0,
        crate::temp_daemon::http_ok_server().await.0,
    );
    let always = format!("host.containers.internal:{always}");
    let once = format!("host.containers.internal:{once}");
    let d = start(u, "net", &[]).await;
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, a) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": d.scope}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["network"], "filtered", "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let s = d.create(&agent).await;
    let (id, sid) = (
        s["id"].as_str().unwrap().to_string(),
        s["acpSessionId"].as_str().unwrap().to_string(),
    );
    let mut a = d.attach(&id).await;
    load(&mut a, &sid, &d.scope, None).await;
    let mut b = d.attach(&id).await;
    load(&mut b, &sid, &d.scope, None).await;
    let get = |host: &str| json!({"url": format!("http://{host}/x"), "headers": {}});

    // Denied twice while the question is open: one question, to both clients.
    for _ in 0..2 {
        let r = a.request("_fake/http", get(&always)).await;
        assert_eq!(r["result"]["status"], 403, "{r}: {}", d.log());
    }
    let q = question(&mut a, &always).await;
    let qb = question(&mut b, &always).await;
    assert_eq!(q, qb);
    assert_eq!(q["params"]["sessionId"], sid.as_str(), "{q}");
    let kinds: Vec<&Value> = q["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["kind"])
        .collect();
    assert_eq!(
        kinds,
        [
            &json!("allow_once"),
            &json!("allow_always"),
            &json!("reject_once")
        ]
    );
    // Both denials recorded, then a frame behind them in the hub's inbox: one question open.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, ev) = d.get(&format!("/v1/agents/{agent}/egress-events")).await;
        let denied = ev
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["decision"] == "denied" && e["host"] == always.as_str())
            .count();
        if denied >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "egress events: {ev}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.request("_fake/env", json!({"name": "HOME"})).await;
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(v["pendingPermissions"], 1, "{v}");
    assert!(
        !a.seen
            .iter()
            .any(|m| method_is(m, "session/request_permission")),
        "a second question: {:?}",
        a.seen
    );

    // Allow always, answered by b: a is told, the retry passes, the agent's list holds it.
    answer(&mut b, &q, "allow-always").await;
    let r = until(&mut a, "permission_resolved", |m| {
        method_is(m, "_handler/permission_resolved")
    })
    .await;
    assert_eq!(r["params"]["requestId"], q["id"], "{r}");
    assert_eq!(r["params"]["outcome"]["optionId"], "allow-always", "{r}");
    let r = a.request("_fake/http", get(&always)).await;
    assert_eq!(r["result"]["status"], 200, "{r}: {}", d.log());
    assert_eq!(r["result"]["body"], "ok", "{r}");
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    assert!(
        view["allow"].as_array().unwrap().contains(&json!(always)),
        "{view}"
    );
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(v["pendingPermissions"], 0, "{v}");

    // Allow once: this sandbox lets the host through, the agent's list does not hold it.
    let r = b.request("_fake/http", get(&once)).await;
    assert_eq!(r["result"]["status"], 403, "{r}");
    let q = question(&mut a, &once).await;
    answer(&mut a, &q, "allow-once").await;
    until(&mut b, "permission_resolved", |m| {
        method_is(m, "_handler/permission_resolved")
    })
    .await;
    let r = b.request("_fake/http", get(&once)).await;
    assert_eq!(r["result"]["status"], 200, "{r}: {}", d.log());
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    let allow = view["allow"].as_array().unwrap();
    assert!(!allow.contains(&json!(once)), "{view}");
    assert!(allow.contains(&json!(always)), "{view}");
    assert_eq!(
        d.call(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
            .await
            .0,
        204
    );
    d.no_container(&id).await;
}

/// The official TypeScript ACP SDK (`@agentclientprotocol/sdk`, handler-core/web's dependency)
/// as a session client over the session WebSocket (issue 13): the Node script
/// handler-core/web/e2e/acp_sdk_client.mjs attaches to a session of the fake agent in a real
/// sandbox, prompts, detaches and re-attaches with session/load: the replay is the daemon's log
/// (the prompt as `user_message_chunk`, the answer), each with its `handler.dev/seq`; the agent
/// kept running between the two attachments. Needs `npm ci` in handler-core/web
/// (.ci/setup-browser.sh) and Node 20+ (`--experimental-websocket`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_acp_sdk_attaches_prompts_and_replays() {
    let Some(u) = user() else { return };
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../handler-core/web");
    assert!(
        web.join("node_modules/@agentclientprotocol/sdk").exists(),
        "{}: no node_modules: run .ci/setup-browser.sh (npm ci)",
        web.display()
    );
    let d = start(u, "tssdk", &[]).await;
    let agent = d.agent().await;
    let s = d.create(&agent).await;
    let id = s["id"].as_str().unwrap().to_string();
    let sid = s["acpSessionId"].as_str().unwrap().to_string();
    let before = d.containers(&id);
    let (url, scope, token) = (d.url(&id), d.scope.clone(), d.token.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("--experimental-websocket")
            .arg("e2e/acp_sdk_client.mjs")
            .args([&url, &sid, &scope, "hello from typescript"])
            .env("HANDLER_TOKEN", token)
            .current_dir(web)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}\nhandlerd: {}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["protocol"], "acp.v1", "{v}");
    assert_eq!(v["protocolVersion"], 1, "{v}");
    assert_eq!(v["loadSession"], true, "{v}");
    assert_eq!(v["stopReason"], "end_turn", "{v}");
    let said = json!(["agent_message_chunk", "hello from typescript"]);
    assert!(v["live"].as_array().unwrap().contains(&said), "{v}");
    assert_eq!(
        v["replay"],
        json!([["user_message_chunk", "hello from typescript"], said]),
        "the daemon's log replayed (not the agent's own replay): {v}"
    );
    let seqs: Vec<u64> = v["replaySeqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().expect("each replayed update has its seq"))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{v}");
    assert_eq!(v["modes"], "bypassPermissions", "P7's mode: {v}");
    // Detaching left the agent running in the same sandbox.
    assert_eq!(d.containers(&id), before, "the same sandbox");
    let (_, now) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(now["state"], "running", "{now}");
    let (st, _) = d
        .call(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
        .await;
    assert!(st == 200 || st == 204, "{st}");
    d.no_container(&id).await;
}

/// The keeper's record of session `id`'s sandbox: its pid (the launcher a restarted daemon
/// takes over, issue 28 item 6).
fn keeper_pid(d: &Daemon, id: &str) -> u32 {
    let dir = d.root.join("state/launchers");
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let Ok(v) = serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap_or_default())
        else {
            continue;
        };
        if v["kept"]["session"] == id {
            return u32::try_from(v["launcher"]["pid"].as_u64().unwrap()).unwrap();
        }
    }
    panic!("no kept record for {id} in {}", dir.display());
}

/// Whether process `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// The chunks `chunk-N` in `msgs`, in order, and the highest `handler.dev/seq` among them.
fn chunks(msgs: &[Value]) -> (Vec<String>, u64) {
    let mut seq = 0;
    let mut out = Vec::new();
    for m in msgs {
        if let Some(t) = chunk_text(m).filter(|t| t.starts_with("chunk-")) {
            out.push(t.to_string());
            seq = seq.max(
                m["params"]["_meta"]["handler.dev/seq"]
                    .as_u64()
                    .unwrap_or(0),
            );
        }
    }
    (out, seq)
}

/// Reads `c` until the turn ends (`_handler/turn_ended`): every message before it.
async fn until_turn_end(c: &mut Acp, d: &Daemon) -> Vec<Value> {
    let mut got = std::mem::take(&mut c.seen);
    if got.iter().any(|m| method_is(m, "_handler/turn_ended")) {
        return got;
    }
    loop {
        match tokio::time::timeout(Duration::from_secs(60), c.next()).await {
            Ok(Ok(m)) => {
                let end = method_is(&m, "_handler/turn_ended");
                got.push(m);
                if end {
                    return got;
                }
            }
            Ok(Err(close)) => panic!("closed ({close:?}) mid-turn; got {got:?}: {}", d.log()),
            Err(_) => panic!("no turn end in 60 s; got {got:?}: {}", d.log()),
        }
    }
}

/// `expected` chunk-1..=n, each once and in order.
fn every_chunk_once(seen: &[String], n: usize) {
    let want: Vec<String> = (1..=n).map(|i| format!("chunk-{i}")).collect();
    assert_eq!(seen, &want[..], "every chunk exactly once, in order");
}

/// Issue 28 item 6 (B6), in real rootless sandboxes with real WebSocket clients: a turn
/// streaming from the fake agent goes on while handlerd is SIGKILLed and restarted, and again
/// while it is stopped and replaced by another binary (an upgrade); the session is running
/// throughout; the client re-attached with afterSeq gets every event exactly once (and the log
/// holds each once); a question the agent asked before a kill is asked again after it and its
/// answer ends the turn; the agent keeps one sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_goes_on_across_a_handlerd_kill_and_an_upgrade() {
    let Some(u) = user() else { return };
    let mut d = start(u, "keep", &[]).await;
    let agent = d.agent().await;
    let s = d.create(&agent).await;
    let (id, sid) = (
        s["id"].as_str().unwrap().to_string(),
        s["acpSessionId"].as_str().unwrap().to_string(),
    );
    let bin = d.root.join("bin/handlerd");
    for (round, n) in [("kill", 40usize), ("upgrade", 30)] {
        let mut a = d.attach(&id).await;
        load(&mut a, &sid, &d.scope, None).await;
        a.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": format!("stream:{n}:150")}]}})).await;
        let third = until(&mut a, "the third chunk", |m| {
            chunk_text(m) == Some("chunk-3")
        })
        .await;
        // What the client saw: the messages before the third chunk, and it.
        let (mut seen, _) = chunks(&std::mem::take(&mut a.seen));
        seen.push("chunk-3".into());
        let after = third["params"]["_meta"]["handler.dev/seq"]
            .as_u64()
            .unwrap();
        drop(a);
        if round == "kill" {
            d.kill_and_start(&bin).await;
        } else {
            // Stopped as a service manager stops it, then a rebuilt binary in its place.
            test_support::handlerd::stop(&mut d.child);
            let new = d.root.join("bin/handlerd-new");
            std::fs::copy(&bin, &new).unwrap();
            d.start_from(&new).await;
        }
        let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
        assert_eq!(v["state"], "running", "{round}: {v}: {}", d.log());
        assert_eq!(v["busy"], true, "{round}: the turn goes on: {v}");
        let mut a = d.attach(&id).await;
        let (replay, _) = load(&mut a, &sid, &d.scope, Some(after)).await;
        let (more, _) = chunks(&replay);
        seen.extend(more);
        let live = until_turn_end(&mut a, &d).await;
        seen.extend(chunks(&live).0);
        every_chunk_once(&seen, n);
        let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
        assert_eq!(v["state"], "running", "{round}: {v}");
        assert_eq!(v["busy"], false, "{round}: {v}");
        assert_eq!(d.containers(&id).len(), 1, "{round}: one sandbox");
    }
    // The log holds each chunk of each turn once.
    let logged: Vec<String> = d
        .events(&id)
        .iter()
        .filter_map(|e| e["update"]["content"]["text"].as_str().map(String::from))
        .filter(|t| t.starts_with("chunk-"))
        .collect();
    assert_eq!(logged.len(), 70, "{logged:?}");
    // A question asked before a kill is asked again after it; its answer ends the turn.
    let mut a = d.attach(&id).await;
    load(&mut a, &sid, &d.scope, None).await;
    a.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "ask:across"}]}})).await;
    until(&mut a, "the question", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    drop(a);
    d.kill_and_start(&bin).await;
    let mut a = d.attach(&id).await;
    load(&mut a, &sid, &d.scope, None).await;
    let q = until(&mut a, "the question again", |m| {
        method_is(m, "session/request_permission")
    })
    .await;
    assert_eq!(q["params"]["toolCall"]["title"], "ask:across", "{q}");
    a.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})).await;
    until(&mut a, "the turn's end", |m| {
        method_is(m, "_handler/turn_ended")
    })
    .await;
    assert_eq!(d.containers(&id).len(), 1);
    // The taken-over agent stops as any: its sandbox goes.
    let (st, _) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    d.no_container(&id).await;
}

/// Issue 28 item 6: a kept agent whose daemon never comes back stops after its timeout, and
/// nothing of it is left (its keeper, its sandbox, its socket).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_agent_whose_daemon_never_returns_is_gone_after_its_timeout() {
    let Some(u) = user() else { return };
    let mut d = start(u, "orphan", &[("HANDLER_KEEP_TIMEOUT", "3")]).await;
    let agent = d.agent().await;
    let s = d.create(&agent).await;
    let id = s["id"].as_str().unwrap().to_string();
    let keeper = keeper_pid(&d, &id);
    assert_eq!(d.containers(&id).len(), 1);
    let _ = Command::new("kill")
        .args(["-KILL", &d.child.id().to_string()])
        .status();
    let _ = d.child.wait();
    let deadline = Instant::now() + Duration::from_secs(60);
    while running(keeper) || !d.containers(&id).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left after the timeout: keeper running {}, containers {:?}",
            running(keeper),
            d.containers(&id)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let sockets: Vec<_> = std::fs::read_dir(d.root.join("state/launchers"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sock"))
        .collect();
    assert!(sockets.is_empty(), "{sockets:?}");
}
