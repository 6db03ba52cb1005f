//! What a live session does beyond F.7's conformance, with the fake sandbox (the agent on the
//! host, its stderr the sandbox's): a denied host asked about as a permission request (one
//! question per host while it is open, in a re-attaching client's replay, allow always saved
//! in the agent's list, allow once in the sandbox only, reject asking again next time; off for
//! an agent saved with `askDeniedHosts: false`; never answered by an agent's request that takes
//! its id), the session sandbox's egress events recorded
//! on its agent, POST …/cancel reaching the agent and the turn ending `cancelled`, a client
//! that falls behind closed 4003 and missing nothing when it re-attaches after its last seq,
//! and a folderless agent's session working in its own `work/` (F.2, a link there refused).

use crate::daemon_support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use daemon_support::{Options, TestDaemon, acp::Acp};
use handler_contracts::sandbox::{EgressDecision, EgressEvent};
use handler_contracts::session::{SessionEventKind, TurnPhase, parse_log};
use serde_json::{Value, json};

const TOKEN: &str = "fk-SessionsLive0Token111aaaa2222bbbb";

/// A session of a new agent (`extra` settings) of account perso: (id, acpSessionId, acpUrl).
async fn session(d: &TestDaemon, extra: Value) -> (String, String, String, String) {
    d.fake_account("perso", TOKEN).await;
    let a = d.fake_agent("perso", extra).await;
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": a["id"], "origin": "ui"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    assert_eq!(v["state"], "running", "{v}");
    let text = |k: &str| v[k].as_str().unwrap().to_string();
    (
        text("id"),
        text("acpSessionId"),
        text("acpUrl"),
        a["id"].as_str().unwrap().to_string(),
    )
}

/// Attached: initialize and session/load done (`after`: `handler.dev/afterSeq`).
async fn attach(d: &TestDaemon, url: &str, sid: &str, after: Option<u64>) -> Acp {
    // The session's folder, which P2 wants as the cwd.
    let id = url.rsplit('/').nth(1).unwrap();
    let scope = d.get(&format!("/v1/sessions/{id}")).await.1["scope"]
        .as_str()
        .unwrap()
        .to_string();
    let mut c = daemon_support::acp::open(url, &d.protocols(), None)
        .await
        .unwrap_or_else(|e| panic!("attach: {e}: {}", daemon_support::logs()));
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let mut params = json!({"sessionId": sid, "cwd": scope, "mcpServers": []});
    if let Some(a) = after {
        params["_meta"] = json!({"handler.dev/afterSeq": a});
    }
    let r = c.request("session/load", params).await;
    assert!(r["result"].is_object(), "{r}");
    c
}

async fn until(c: &mut Acp, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    if let Some(i) = c.seen.iter().position(&pred) {
        return c.seen.remove(i);
    }
    loop {
        match c.next().await {
            Ok(m) if pred(&m) => return m,
            Ok(m) => c.seen.push(m),
            Err(close) => panic!("closed ({close:?}) waiting for {what}; seen {:?}", c.seen),
        }
    }
}

fn is_question(m: &Value, host: &str) -> bool {
    m["method"] == "session/request_permission"
        && m["params"]["toolCall"]["title"] == format!("Network access: `{host}`")
}

/// The agent writes the proxy's `denied` event for `host` on its stderr.
async fn deny(c: &mut Acp, host: &str) {
    let line = EgressEvent {
        decision: EgressDecision::Denied,
        host: host.to_string(),
        secret: None,
    }
    .to_line();
    let r = c.request("_fake/stderr", json!({"line": line})).await;
    assert!(r["result"].is_object(), "{r}");
}

/// Waits until `n` denials of `host` are recorded on the agent, then sends a frame behind them
/// through the hub (so the hub has read them).
async fn recorded(d: &TestDaemon, c: &mut Acp, agent: &str, host: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, ev) = d.get(&format!("/v1/agents/{agent}/egress-events")).await;
        let got = ev
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["decision"] == "denied" && e["host"] == host)
            .count();
        if got >= n {
            break;
        }
        assert!(Instant::now() < deadline, "egress events: {ev}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.request("_fake/echo", json!({})).await;
}

async fn answer(c: &mut Acp, q: &Value, option: &str) {
    c.send(&json!({"jsonrpc": "2.0", "id": q["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}}))
        .await;
}

async fn pending(d: &TestDaemon, id: &str) -> Value {
    d.get(&format!("/v1/sessions/{id}")).await.1["pendingPermissions"].clone()
}

/// The allow-list in force in the agent's one running sandbox now.
fn live_allow(d: &TestDaemon, agent: &str) -> Vec<String> {
    let m = d.state.connections.lock().unwrap();
    m[agent][0]
        .allow
        .as_ref()
        .expect("a filtered sandbox")
        .now
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_host_is_one_question_whose_answers_switch_the_allow_list() {
    let d = TestDaemon::start().await;
    let (id, sid, url, agent) = session(&d, json!({})).await;
    let mut a = attach(&d, &url, &sid, None).await;
    let mut b = attach(&d, &url, &sid, None).await;
    let host = "api.example.com:443";
    deny(&mut a, host).await;
    deny(&mut a, host).await;
    let q = until(&mut a, "the question", |m| is_question(m, host)).await;
    assert_eq!(
        until(&mut b, "the question", |m| is_question(m, host)).await,
        q
    );
    assert_eq!(q["params"]["sessionId"], sid.as_str(), "{q}");
    let options: Vec<(&str, &str)> = q["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        options,
        [
            ("allow-once", "allow_once"),
            ("allow-always", "allow_always"),
            ("reject", "reject_once")
        ]
    );
    // Both denials read by the hub: still one question.
    recorded(&d, &mut a, &agent, host, 2).await;
    assert_eq!(pending(&d, &id).await, 1);
    assert!(!a.seen.iter().any(|m| is_question(m, host)), "{:?}", a.seen);
    // A client attaching now gets it after its replay.
    let mut c = attach(&d, &url, &sid, None).await;
    let again = until(&mut c, "the open question", |m| is_question(m, host)).await;
    assert_eq!(again["id"], q["id"]);

    // Allow always (b first; a's later answer changes nothing): saved, switched, told. a answers
    // once told, as two WebSockets' frames have no order between them.
    answer(&mut b, &q, "allow-always").await;
    let r = until(&mut a, "resolved", |m| {
        m["method"] == "_handler/permission_resolved"
    })
    .await;
    answer(&mut a, &q, "reject").await;
    assert_eq!(r["params"]["requestId"], q["id"], "{r}");
    assert_eq!(r["params"]["outcome"]["optionId"], "allow-always", "{r}");
    a.request("_fake/echo", json!({})).await;
    assert_eq!(pending(&d, &id).await, 0);
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    assert!(
        view["allow"].as_array().unwrap().contains(&json!(host)),
        "{view}"
    );
    assert!(live_allow(&d, &agent).contains(&host.to_string()));

    // Allow once: in this sandbox, not saved.
    let once = "once.example.com:443";
    deny(&mut a, once).await;
    let q = until(&mut b, "the question", |m| is_question(m, once)).await;
    answer(&mut b, &q, "allow-once").await;
    until(&mut a, "resolved", |m| {
        m["method"] == "_handler/permission_resolved"
    })
    .await;
    a.request("_fake/echo", json!({})).await;
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    assert!(
        !view["allow"].as_array().unwrap().contains(&json!(once)),
        "{view}"
    );
    assert!(live_allow(&d, &agent).contains(&once.to_string()));

    // Reject: nothing changes; the next denial asks again.
    let no = "no.example.com:443";
    deny(&mut a, no).await;
    let q = until(&mut a, "the question", |m| is_question(m, no)).await;
    answer(&mut a, &q, "reject").await;
    until(&mut b, "resolved", |m| {
        m["method"] == "_handler/permission_resolved"
    })
    .await;
    assert!(!live_allow(&d, &agent).contains(&no.to_string()));
    deny(&mut a, no).await;
    let q2 = until(&mut a, "the second question", |m| is_question(m, no)).await;
    assert_ne!(q2["id"], q["id"]);
    d.stop().await;
}

/// Issue 27 F5: the agent provokes a question about a host of its choosing, then asks something
/// harmless with the question's id — guessed from the order of its denials, then the question's
/// real id (the worst case) — and the person allows what they are shown. Neither request reaches
/// the client (P6 refuses the daemon's ids); the allow-list is unchanged, the question still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_request_with_a_question_id_never_answers_the_question() {
    let d = TestDaemon::start().await;
    let (id, sid, url, agent) = session(&d, json!({})).await;
    let mut a = attach(&d, &url, &sid, None).await;
    let host = "evil.example.com:443";
    deny(&mut a, host).await;
    let q = until(&mut a, "the question", |m| is_question(m, host)).await;
    let qid = q["id"].as_str().unwrap().to_string();
    let hex = qid.strip_prefix("handler-net-").unwrap_or_default();
    assert!(
        hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{q}"
    );
    for (n, guess) in [(9001, "handler-net-1".to_string()), (9002, qid)] {
        let harmless = json!({"sessionId": sid,
            "toolCall": {"toolCallId": "t1", "title": "Read README.md"},
            "options": [{"optionId": "allow-always", "name": "Allow", "kind": "allow_always"}]});
        a.send(
            &json!({"jsonrpc": "2.0", "id": n, "method": "_fake/request", "params": {
            "id": guess, "method": "session/request_permission", "params": harmless}}),
        )
        .await;
        loop {
            let m = match a.next().await {
                Ok(m) => m,
                Err(close) => panic!("closed ({close:?}); seen {:?}", a.seen),
            };
            if m["method"] == "session/request_permission" && m["id"] == guess.as_str() {
                // The person allows what the agent asked (the code before the fix got here).
                answer(&mut a, &m, "allow-always").await;
                break;
            }
            if m["id"] == n && m.get("method").is_none() {
                // The agent's own request was refused: what the fake agent got back.
                let e = &m["result"]["response"]["error"];
                assert_eq!(e["data"]["policy"], "P6", "{m}");
                break;
            }
            a.seen.push(m);
        }
        // Behind the answer (if any): the hub applied it before reading this.
        a.request("_fake/echo", json!({})).await;
        let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
        assert!(
            !view["allow"].as_array().unwrap().contains(&json!(host)),
            "{guess}: {view}"
        );
        assert!(
            !live_allow(&d, &agent).contains(&host.to_string()),
            "{guess}"
        );
        assert_eq!(
            pending(&d, &id).await,
            1,
            "{guess}: the question is still open"
        );
    }
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_saved_without_questions_only_records_the_denial() {
    let d = TestDaemon::start().await;
    let (id, sid, url, agent) = session(&d, json!({"askDeniedHosts": false})).await;
    let (_, view) = d.get(&format!("/v1/agents/{agent}")).await;
    assert_eq!(view["askDeniedHosts"], false, "{view}");
    let mut a = attach(&d, &url, &sid, None).await;
    let host = "api.example.com:443";
    deny(&mut a, host).await;
    // The session sandbox's egress events are its agent's (F.3), named by its sandbox.
    recorded(&d, &mut a, &agent, host, 1).await;
    let (_, ev) = d.get(&format!("/v1/agents/{agent}/egress-events")).await;
    let sandbox = d.state.connections_of(&agent)[0].sandbox.clone();
    assert!(
        sandbox.ends_with(&id.replace('_', "-")) || sandbox.contains(&id),
        "{sandbox}"
    );
    assert!(
        ev.as_array()
            .unwrap()
            .iter()
            .any(|e| e["sandbox"] == sandbox.as_str()),
        "{ev}"
    );
    assert!(
        !a.seen
            .iter()
            .any(|m| m["method"] == "session/request_permission")
    );
    assert_eq!(pending(&d, &id).await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_agent_and_the_turn_ends_cancelled() {
    let d = TestDaemon::start().await;
    let (id, sid, url, _) = session(&d, json!({})).await;
    let mut a = attach(&d, &url, &sid, None).await;
    a.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "ask:wait"}]}}))
        .await;
    until(&mut a, "the agent's permission request", |m| {
        m["method"] == "session/request_permission"
    })
    .await;
    let (s, v) = d
        .post(&format!("/v1/sessions/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    let r = until(&mut a, "the prompt's response", |m| m["id"] == 77).await;
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    let ended = until(&mut a, "turn_ended", |m| {
        m["method"] == "_handler/turn_ended"
    })
    .await;
    assert_eq!(ended["params"]["stopReason"], "cancelled", "{ended}");
    let log = std::fs::read_to_string(d.state.sessions.folder(&id).join("events.ndjson")).unwrap();
    assert!(
        parse_log(&log).events.iter().any(|e| matches!(&e.kind,
            SessionEventKind::Turn { phase: TurnPhase::End, stop_reason: Some(r) } if r == "cancelled")),
        "{log}"
    );
    let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(v["busy"], false, "{v}");
    assert_eq!(v["lastStopReason"], "cancelled", "{v}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_falls_behind_is_closed_4003_and_misses_nothing_after() {
    let d = TestDaemon::start_with(Options {
        session_queue: Some(16),
        ..Default::default()
    })
    .await;
    let (_, sid, url, _) = session(&d, json!({})).await;
    let mut slow = attach(&d, &url, &sid, None).await;
    let mut fast = attach(&d, &url, &sid, None).await;
    // The slow one reads nothing while the agent says ~26 MB: its socket's buffers fill, then
    // its queue of 16.
    let text = "x".repeat(64 * 1024);
    let mut last = 0;
    for _ in 0..400 {
        fast.request("_fake/say", json!({"sessionId": sid, "text": text}))
            .await;
        if let Some(s) = fast
            .seen
            .drain(..)
            .filter_map(|m| m["params"]["_meta"]["handler.dev/seq"].as_u64())
            .max()
        {
            last = s;
        }
    }
    let mut seen_seq = 0;
    let code = loop {
        match slow.next().await {
            Ok(m) => {
                if let Some(s) = m["params"]["_meta"]["handler.dev/seq"].as_u64() {
                    seen_seq = seen_seq.max(s);
                }
            }
            Err(c) => break c.map(|c| u16::from(c.code)),
        }
    };
    assert_eq!(code, Some(4003), "{}", daemon_support::logs());
    assert!(seen_seq < last, "it fell behind: {seen_seq} of {last}");
    // Re-attached after its last seq: every later update, in order, up to the last.
    let mut again = attach(&d, &url, &sid, Some(seen_seq)).await;
    let seqs: Vec<u64> = again
        .seen
        .drain(..)
        .filter_map(|m| m["params"]["_meta"]["handler.dev/seq"].as_u64())
        .collect();
    assert_eq!(
        seqs.first(),
        Some(&(seen_seq + 1)),
        "{:?}",
        &seqs[..seqs.len().min(5)]
    );
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
    assert_eq!(seqs.last(), Some(&last));
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folderless_agents_session_works_in_its_own_work_folder() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let (s, a) = d
        .post("/v1/agents", json!({"models": [{"account": "perso"}]}))
        .await;
    assert_eq!(s, 201, "{a}");
    assert!(a.get("scope").is_none_or(Value::is_null), "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    // A plain connection still has no folder to work in.
    let e = daemon_support::acp::open(
        &format!("ws://127.0.0.1:{}/v1/agents/{agent}/acp", d.port),
        &d.protocols(),
        None,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(daemon_support::acp::refused_status(&e), Some(400));
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": agent, "origin": "ui"}))
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    assert_eq!(v["state"], "running", "{v}: {}", daemon_support::logs());
    let id = v["id"].as_str().unwrap().to_string();
    let folder = std::fs::canonicalize(d.state.sessions.folder(&id)).unwrap();
    let work = folder.join("work");
    assert_eq!(v["scope"], work.display().to_string(), "{v}");
    let mode = std::fs::metadata(&work).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    // The agent runs in it (the fake sandbox starts it in its workdir).
    let sid = v["acpSessionId"].as_str().unwrap().to_string();
    let url = v["acpUrl"].as_str().unwrap().to_string();
    let mut c = attach(&d, &url, &sid, None).await;
    let r = c.request("_fake/env", json!({"name": "PWD"})).await;
    drop(c);
    let pwd = r["result"]["value"].as_str().map(String::from);
    assert!(pwd.is_none_or(|p| p == work.display().to_string()), "{r}");
    // Stopped, its work/ swapped for a link to another folder: the restart is refused.
    let (s, _) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert_eq!(s, 200);
    std::fs::remove_dir_all(&work).unwrap();
    std::os::unix::fs::symlink(d.scope(), &work).unwrap();
    let mut c = daemon_support::acp::open(&url, &d.protocols(), None)
        .await
        .unwrap();
    let f = c.closed().await.expect("a close frame");
    assert_eq!(u16::from(f.code), 1011, "{f:?}");
    assert!(f.reason.contains("work"), "{f:?}");
    d.stop().await;
}

/// The lag of each attachment on a streaming turn: a driver asks the agent to say `N` chunks,
/// one after the other; each attachment's lag is the time from the driver's request to the
/// chunk's arrival. Run with 1 attachment (the driver alone) and with 8 (the driver and 7
/// readers: `HANDLER_SESSION_MAX_ATTACH`'s default, so none is closed 4001), every attachment
/// measured, ratios in one run; then handlerd's resident memory (this process: the daemon runs
/// in it, its agents are other processes) idle and with 10 live sessions. Ignored: `cargo test
/// --release -p handler-core --test it -- --ignored sessions_live::attachments_benchmark
/// --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark"]
async fn attachments_benchmark() {
    const N: usize = 2000;
    let d = TestDaemon::start().await;
    let idle = rss_kb();
    let (_, sid, url, agent) = session(&d, json!({})).await;
    let mut report = Vec::new();
    for n in [1usize, 8] {
        let mut readers = Vec::new();
        for _ in 1..n {
            let c = attach(&d, &url, &sid, None).await;
            readers.push(tokio::spawn(read_chunks(c, N)));
        }
        let mut driver = attach(&d, &url, &sid, None).await;
        let (sent, at) = drive_chunks(&mut driver, &sid, N).await;
        let mut lags: Vec<Duration> = at.iter().zip(&sent).map(|(a, s)| *a - *s).collect();
        for r in readers {
            let at = r.await.unwrap();
            assert_eq!(at.len(), N, "a reader missed chunks");
            lags.extend(at.iter().zip(&sent).map(|(a, s)| a.duration_since(*s)));
        }
        drop(driver);
        lags.sort();
        let p = |q: f64| lags[((lags.len() as f64 * q) as usize).min(lags.len() - 1)];
        report.push((n, p(0.5), p(0.99)));
        // The attachments of this round gone before the next one's.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut ids = Vec::new();
    for _ in 0..9 {
        let (s, v) = d
            .post("/v1/sessions", json!({"agentId": agent, "origin": "ui"}))
            .await;
        assert_eq!(s, 201, "{v}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let live = rss_kb();
    let (one, eight) = (report[0], report[1]);
    println!(
        "{N} chunks: 1 attachment lag p50 {:?} p99 {:?}; 8 attachments p50 {:?} ({:.2}x) p99 {:?} ({:.2}x)",
        one.1,
        one.2,
        eight.1,
        eight.1.as_secs_f64() / one.1.as_secs_f64(),
        eight.2,
        eight.2.as_secs_f64() / one.2.as_secs_f64()
    );
    println!(
        "resident memory: idle {idle} kB, 10 live sessions {live} kB ({:.2}x, +{} kB per session)",
        live as f64 / idle as f64,
        (live.saturating_sub(idle)) / 10
    );
    d.stop().await;
}

/// This process's resident memory in kB (`VmRSS`).
fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A reader attachment: when each of `n` agent chunks arrived.
async fn read_chunks(mut c: Acp, n: usize) -> Vec<Instant> {
    let mut at = Vec::with_capacity(n);
    while at.len() < n {
        match c.next().await {
            Ok(m) if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk" => {
                at.push(Instant::now());
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    at
}

/// The driver: `n` `_fake/say` requests one after the other (paced by the agent: its answer
/// follows its chunk); when each was sent and when its chunk reached the driver.
async fn drive_chunks(c: &mut Acp, sid: &str, n: usize) -> (Vec<Instant>, Vec<Instant>) {
    let (mut sent, mut at) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        c.next += 1;
        let id = c.next;
        let text = format!("chunk {i} of a streaming answer");
        sent.push(Instant::now());
        c.send(&json!({"jsonrpc": "2.0", "id": id, "method": "_fake/say",
            "params": {"sessionId": sid, "text": text}}))
            .await;
        loop {
            let m = c.next().await.expect("the driver stays attached");
            if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                at.push(Instant::now());
            } else if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                break;
            }
        }
    }
    assert_eq!(at.len(), n, "the driver missed chunks");
    (sent, at)
}
