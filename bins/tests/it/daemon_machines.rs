//! `/v1/machines` (issue 29 item 2) through handlerd as the test user, on real rootless Podman:
//! a machine made from an allowed image (others refused, the field named), listed with its
//! state, its stats and status, stopped and started; still there and running after handlerd is
//! SIGKILLed and restarted, and adopted by its labels when its record is gone (another
//! daemon's never); shown `missing` once its container is removed outside Handler;
//! deleted. The change channel (item 3) follows all of it, over a real WebSocket and through
//! `handler machine ls --watch`. Sessions in a machine made for their agent (item 4) and in a
//! disposable machine of their own (item 6).

use std::io::BufRead as _;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

async fn daemon(tag: &str) -> Option<TempDaemon> {
    daemon_with(tag, &[]).await
}

/// [`daemon`] with `extra` settings.
async fn daemon_with(tag: &str, extra: &[(&'static str, String)]) -> Option<TempDaemon> {
    let u = test_support::user::podman_user(IMAGE, "the machine API tests")?;
    let l = Layout::new(&format!("hdm-{}-{tag}", std::process::id()), true);
    l.fake_harness("");
    let mut env = vec![(
        "HANDLER_MACHINE_IMAGES",
        "localhost/handler-test-busybox:*".to_string(),
    )];
    env.extend(extra.iter().cloned());
    Some(l.spawn(u, &env).await)
}

/// `handler ARGS` as the daemon's user, with its settings: (exit code, stdout, stderr).
fn handler(d: &TempDaemon, args: &[&str]) -> (i32, String, String) {
    let bin = d.root.join("bin/handler");
    let o = d
        .user
        .cmd(bin.to_str().unwrap(), args, &d.env)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn post(d: &TempDaemon, path: &str, body: Value) -> (u16, Value) {
    d.call(reqwest::Method::POST, path, Some(body)).await
}

async fn get(d: &TempDaemon, path: &str) -> (u16, Value) {
    d.call(reqwest::Method::GET, path, None).await
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The change channel, as the web UI opens it (the token and the channel's subprotocol).
async fn watcher(d: &TempDaemon) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut req = format!("ws://127.0.0.1:{}/v1/machines/events", d.port)
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        format!("handler.machines.v1, bearer.{}", d.token)
            .parse()
            .unwrap(),
    );
    let (ws, resp) = tokio_tungstenite::connect_async(req)
        .await
        .unwrap_or_else(|e| panic!("the change channel refused: {e}"));
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "handler.machines.v1"
    );
    ws
}

/// The channel's next message (within 15 s: the poller reads every 2 s).
async fn next(ws: &mut Ws) -> Value {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(15), ws.next())
            .await
            .expect("a message of the change channel within 15 s");
        match m {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => panic!("the change channel ended: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_made_listed_stopped_started_kept_across_a_restart_and_deleted() {
    let Some(mut d) = daemon("api").await else {
        return;
    };
    leftover(&d, "handler-m-box");
    // Without the channel's subprotocol, or without the token: refused before any upgrade.
    {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        for protocols in [format!("bearer.{}", d.token), "handler.machines.v1".into()] {
            let mut req = format!("ws://127.0.0.1:{}/v1/machines/events", d.port)
                .into_client_request()
                .unwrap();
            req.headers_mut()
                .insert("sec-websocket-protocol", protocols.parse().unwrap());
            let e = tokio_tungstenite::connect_async(req).await.unwrap_err();
            assert!(e.to_string().contains("40"), "{protocols}: {e}");
        }
    }
    let mut ws = watcher(&d).await;
    assert_eq!(
        next(&mut ws).await,
        json!({"type": "snapshot", "machines": []})
    );
    // Refusals name their field.
    for (body, field) in [
        (json!({"name": "box", "image": "node:22"}), "image"),
        (json!({"name": "box", "image": "-x"}), "image"),
        (json!({"name": "Box", "image": IMAGE}), "name"),
        (
            json!({"name": "box", "image": IMAGE, "network": "bridge"}),
            "network",
        ),
        (
            json!({"name": "box", "image": IMAGE, "network": "filtered"}),
            "allow",
        ),
    ] {
        let (st, v) = post(&d, "/v1/machines", body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().starts_with(field),
            "{body}: {v}"
        );
    }
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "box", "image": IMAGE, "extra": 1}),
    )
    .await;
    assert_eq!(st, 422, "an unknown key: {v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("extra"),
        "{v}"
    );
    // Made from the command line; listed there as JSON.
    let (code, out, err) = handler(&d, &["machine", "create", "box", "--image", IMAGE]);
    assert_eq!(code, 0, "{out}{err}: {}", d.log());
    assert!(out.contains("machine box made (running)"), "{out}");
    let ev = next(&mut ws).await;
    assert_eq!(ev["type"], "added", "{ev}");
    assert_eq!(ev["machine"]["id"], "box", "{ev}");
    assert_eq!(ev["machine"]["state"], "running", "{ev}");
    let (code, out, err) = handler(&d, &["--json", "machine", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["id"], "box", "{listed}");
    assert_eq!(listed[0]["state"], "running", "{listed}");
    let (code, out, _) = handler(&d, &["machine", "stats", "box"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("cpu "), "{out}");
    let (st, v) = post(&d, "/v1/machines", json!({"name": "box", "image": IMAGE})).await;
    assert_eq!(st, 409, "{v}");
    let (_, list) = get(&d, "/v1/machines").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["id"], "box");
    let (st, s) = get(&d, "/v1/machines/box/stats").await;
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["running"], true, "{s}");
    let (st, r) = get(&d, "/v1/machines/box/status").await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["Config"]["Labels"]["handler.machine"], "box", "{r}");
    let (st, _) = post(&d, "/v1/machines/box/stop", json!({})).await;
    assert_eq!(st, 204);
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "stopped", "{m}");
    let ev = next(&mut ws).await;
    assert_eq!(
        (&ev["type"], &ev["machine"]["state"]),
        (&json!("changed"), &json!("stopped")),
        "{ev}"
    );
    let (_, s) = get(&d, "/v1/machines/box/stats").await;
    assert_eq!(s, json!({"running": false}));
    let (st, _) = post(&d, "/v1/machines/box/start", json!({})).await;
    assert_eq!(st, 204);
    let ev = next(&mut ws).await;
    assert_eq!(ev["machine"]["state"], "running", "{ev}");
    drop(ws);
    // Machines are the person's: handlerd SIGKILLed and restarted finds it running.
    let bin = d.root.join("bin/handlerd");
    d.kill_and_start(&bin).await;
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "running", "{m}: {}", d.log());
    // Decision 0155: its record lost (and a stranger's machine beside it, another daemon's),
    // the next daemon adopts it by its labels — and only it.
    let (_, before) = get(&d, "/v1/machines/box").await;
    leftover(&d, "handler-m-stranger");
    let o = d
        .user
        .cmd(
            "podman",
            &[
                "run",
                "-d",
                "--name",
                "handler-m-stranger",
                "--label",
                "handler.machine=stranger",
                "--label",
                "handler.machine.data=0000000000000000",
                IMAGE,
                "sleep",
                "600",
            ],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(d.root.join("data/machines/box.json")).unwrap();
    d.kill_and_start(&bin).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let m = loop {
        let (st, m) = get(&d, "/v1/machines/box").await;
        if st == 200 {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not adopted: {m}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(m["state"], "running", "{m}");
    assert_eq!(m["containerId"], before["containerId"], "{m}");
    // The engine's name of the image (with its tag).
    assert_eq!(
        m["request"]["image"],
        format!("{}:latest", before["request"]["image"].as_str().unwrap()),
        "{m}"
    );
    assert_eq!(m["request"]["network"], "none", "{m}");
    assert!(
        d.log().contains("machine adopted by its labels"),
        "{}",
        d.log()
    );
    let (_, all) = get(&d, "/v1/machines").await;
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["box"], "another daemon's machine is never adopted");
    leftover(&d, "handler-m-stranger");
    let mut ws = watcher(&d).await;
    let ev = next(&mut ws).await;
    assert_eq!(ev["type"], "snapshot", "{ev}");
    assert_eq!(ev["machines"][0]["state"], "running", "{ev}");
    // `handler machine exec` through the daemon: stdin, stdout, stderr and the exit code; a
    // value by name; a file one exec writes read by the next; a machine it does not have.
    let bin_cli = d.root.join("bin/handler");
    let exec = |args: &[&str], input: &str, extra: Option<(&'static str, &str)>| {
        let mut env = d.env.clone();
        env.extend(extra.map(|(k, v)| (k, v.to_string())));
        let mut c = d.user.cmd(bin_cli.to_str().unwrap(), args, &env);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = exec(
        &[
            "machine",
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "cat > note; echo out; echo err >&2; exit 3",
        ],
        "hello from stdin\n",
        None,
    );
    assert_eq!((code, out.as_str()), (3, "out\n"), "{err}: {}", d.log());
    assert!(err.contains("err"), "{err}");
    let (code, out, err) = exec(
        &[
            "machine",
            "exec",
            "box",
            "-e",
            "SECRET_X",
            "--",
            "sh",
            "-c",
            "cat note; echo \"v=$SECRET_X\"",
        ],
        "",
        Some(("SECRET_X", "s3cr3t-Exec-Value")),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "hello from stdin\nv=s3cr3t-Exec-Value\n");
    assert!(
        !d.log().contains("s3cr3t-Exec-Value"),
        "a value in handlerd's log"
    );
    let (code, _, err) = exec(&["machine", "exec", "nope", "--", "true"], "", None);
    assert_ne!(code, 0);
    assert!(err.contains("nope"), "{err}");
    let (code, _, err) = exec(
        &["machine", "exec", "box", "-e", "UNSET_HERE", "--", "true"],
        "",
        None,
    );
    assert_ne!(code, 0);
    assert!(err.contains("--env UNSET_HERE"), "{err}");
    // Removed behind Handler's back: shown missing, never made again.
    let o = d
        .user
        .cmd(
            "podman",
            &["rm", "-f", "--time", "0", "handler-m-box"],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The channel sees it within its poll, with no call to the API. A poll that falls between
    // `rm`'s stop and its removal sees it stopped first: the engine's own order.
    let mut ev = next(&mut ws).await;
    if ev["type"] == "changed" && ev["machine"]["state"] == "stopped" {
        ev = next(&mut ws).await;
    }
    assert_eq!(
        (&ev["type"], &ev["machine"]["state"]),
        (&json!("changed"), &json!("missing")),
        "{ev}"
    );
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "missing", "{m}");
    let (st, _) = get(&d, "/v1/machines/box/status").await;
    assert_eq!(st, 404);
    let (st, _) = d
        .call(reqwest::Method::DELETE, "/v1/machines/box", None)
        .await;
    assert_eq!(st, 204);
    let (st, _) = get(&d, "/v1/machines/box").await;
    assert_eq!(st, 404);
    let (_, list) = get(&d, "/v1/machines").await;
    assert_eq!(list, json!([]));
    assert_eq!(next(&mut ws).await, json!({"type": "removed", "id": "box"}));
    // `handler machine ls --watch`: the list, then a line per change.
    let bin = d.root.join("bin/handler");
    let mut cli = d
        .user
        .cmd(bin.to_str().unwrap(), &["machine", "ls", "--watch"], &d.env)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let out = cli.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(15)).unwrap();
    assert!(first.starts_with("no machines"), "{first}");
    // Its name is free again: nothing it left holds it.
    let (st, m) = post(&d, "/v1/machines", json!({"name": "box", "image": IMAGE})).await;
    assert_eq!(st, 201, "{m}");
    let added = lines.recv_timeout(Duration::from_secs(15)).unwrap();
    assert_eq!(added, format!("+ box  {IMAGE}  running"));
    let _ = cli.kill();
    let _ = cli.wait();
    let (code, out, err) = handler(&d, &["machine", "rm", "box"]);
    assert_eq!(code, 0, "{out}{err}");
    let (st, _) = get(&d, "/v1/machines/box").await;
    assert_eq!(st, 404);
}

const TOKEN: &str = "fk-Machines0Token111aaaa2222bbbb3333";

/// What session `id`'s log holds so far, as text.
fn events(d: &TempDaemon, id: &str) -> String {
    std::fs::read_to_string(d.root.join("state/sessions").join(id).join("events.ndjson"))
        .unwrap_or_default()
}

/// Waits (60 s at most) until session `id`'s log contains `text`.
async fn said(d: &TempDaemon, id: &str, text: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !events(d, id).contains(text) {
        assert!(
            std::time::Instant::now() < deadline,
            "{text:?} not in session {id}'s log: {}\n{}",
            events(d, id),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A session of `agent` started with `prompt`: its id.
async fn session(d: &TempDaemon, agent: &str, prompt: &str) -> String {
    let (st, v) = post(
        d,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": prompt}),
    )
    .await;
    assert_eq!(st, 201, "{v}: {}", d.log());
    assert_eq!(v["state"], "running", "{v}: {}", d.log());
    v["id"].as_str().unwrap().to_string()
}

/// `wget URL` in machine `machine` through `handler machine exec`: (exit code, stdout, stderr).
/// Events are followed for the exec's life: it waits a second after its request (busybox's
/// `wget -T` crashes: no timeout flag).
fn wget_in(d: &TempDaemon, machine: &str, url: &str) -> (i32, String, String) {
    let script = format!("wget -q -O - {url}; rc=$?; sleep 1; exit $rc");
    sh_in(d, machine, &script)
}

/// `sh -c SCRIPT` in machine `machine` through `handler machine exec`: (exit code, stdout,
/// stderr).
fn sh_in(d: &TempDaemon, machine: &str, script: &str) -> (i32, String, String) {
    handler(d, &["machine", "exec", machine, "--", "sh", "-c", script])
}

/// Removes container `name` an earlier run that failed may have left.
fn leftover(d: &TempDaemon, name: &str) {
    let _ = d
        .user
        .cmd(
            "podman",
            &["rm", "-f", "-t", "0", name],
            &[("HOME", d.user.home())],
        )
        .output();
}

/// The fake harness's account `perso`.
async fn account(d: &TempDaemon) {
    let (st, v) = post(
        d,
        "/v1/accounts",
        json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
}

/// The containers of the test user labelled `label`.
fn containers(d: &TempDaemon, label: &str) -> Vec<String> {
    let o = d
        .user
        .cmd(
            "podman",
            &[
                "ps",
                "-a",
                "--filter",
                &format!("label={label}"),
                "--format",
                "{{.Names}}",
            ],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Issue 29 item 4 (decision 0147): a machine made for an agent (its harness image, its
/// sandbox's mounts planned in, labelled with it); the agent set to it; two sessions one after
/// the other run in it by exec — no sandbox of their own — and see each other's files (the
/// machine's own /tmp); deleting it while one runs is refused (409) naming it; handlerd
/// SIGKILLed and restarted finds it running and a new session runs in it; deleted with force,
/// that session is stopped first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_in_a_machine_made_for_their_agent_and_share_it() {
    let Some(mut d) = daemon("sess").await else {
        return;
    };
    leftover(&d, "handler-m-agentbox");
    account(&d).await;
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
        "permissions": "bypass", "confirmRisks": true});
    let (st, a) = post(&d, "/v1/agents", body.clone()).await;
    assert_eq!(st, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    // Made for an agent that does not exist, or wider than the agent's sandbox: refused, named.
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "agentbox", "agents": ["a_nope"]}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["detail"].as_str().unwrap().starts_with("agents[0]"),
        "{v}"
    );
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "agentbox", "agents": [agent], "network": "open"}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("network"), "{v}");
    let (st, m) = post(
        &d,
        "/v1/machines",
        json!({"name": "agentbox", "agents": [agent]}),
    )
    .await;
    assert_eq!(st, 201, "{m}: {}", d.log());
    assert_eq!(
        m["request"]["image"],
        format!("{IMAGE}:latest"),
        "the harness's image: {m}"
    );
    let (_, r) = get(&d, "/v1/machines/agentbox/status").await;
    assert_eq!(
        r["Config"]["Labels"]["handler.agents"],
        agent.as_str(),
        "{r}"
    );
    assert!(
        r["Config"]["Labels"].get("handler.agent").is_none(),
        "no launch's label on a machine: {r}"
    );
    // The agent set to a machine this daemon does not have: 400 naming the field; to box: 200.
    let put = |machine: &str| {
        let mut b = body.clone();
        b["machine"] = json!(machine);
        b
    };
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(put("nope")),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("machine"), "{v}");
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(put("agentbox")),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["machine"], "agentbox", "{v}");

    // Two sessions, one after the other, in the one machine.
    let one = session(
        &d,
        &agent,
        "sh: echo one-was-here > /work/from-one && echo wrote-it",
    )
    .await;
    said(&d, &one, "exit 0\\nwrote-it").await;
    assert_eq!(
        containers(&d, &format!("handler.connection={one}")),
        Vec::<String>::new(),
        "a session in a machine has no sandbox of its own"
    );
    let (_, view) = get(&d, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["connections"][0]["sandbox"], "handler-m-agentbox",
        "{view}"
    );
    let (st, _) = post(&d, &format!("/v1/sessions/{one}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    // Its turn takes a while: the daemon is killed in the middle of it (below).
    let two = session(&d, &agent, "sh: sleep 8; cat /work/from-one").await;
    // Deleting the machine while a session runs in it: refused, naming the session.
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/agentbox", None)
        .await;
    assert_eq!(st, 409, "{v}");
    assert!(v["detail"].as_str().unwrap().contains(&two), "{v}");
    assert_eq!(get(&d, "/v1/machines/agentbox").await.1["state"], "running");

    // handlerd SIGKILLed mid-turn: the machine is the person's, still running, and the agent's
    // exec is kept (decision 0167): the next daemon takes the session over and the turn ends
    // in its log.
    let bin = d.root.join("bin/handlerd");
    assert!(
        !events(&d, &two).contains("one-was-here"),
        "the turn ended too soon"
    );
    d.kill_and_start(&bin).await;
    let (_, m) = get(&d, "/v1/machines/agentbox").await;
    assert_eq!(m["state"], "running", "{m}: {}", d.log());
    said(&d, &two, "exit 0\\none-was-here").await;
    let (_, s2) = get(&d, &format!("/v1/sessions/{two}")).await;
    assert_eq!(s2["state"], "running", "taken over: {s2}");
    let (_, view) = get(&d, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["connections"][0]["sandbox"], "handler-m-agentbox",
        "{view}"
    );
    // Stopped (no session in it now): the next session's exec starts it again.
    let (st, v) = post(&d, &format!("/v1/sessions/{two}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}: {v}");
    let (st, v) = post(&d, "/v1/machines/agentbox/stop", json!({})).await;
    assert!(st == 200 || st == 204, "{st}: {v}");
    assert_eq!(get(&d, "/v1/machines/agentbox").await.1["state"], "stopped");
    let three = session(&d, &agent, "sh: cat /work/from-one; echo three-ran").await;
    said(&d, &three, "one-was-here\\nthree-ran").await;
    // Deleted with force: the session is stopped first, then the machine and its folder go.
    let (st, v) = d
        .call(
            reqwest::Method::DELETE,
            "/v1/machines/agentbox?force=true",
            None,
        )
        .await;
    assert_eq!(st, 204, "{v}: {}", d.log());
    let (_, s) = get(&d, &format!("/v1/sessions/{three}")).await;
    assert_ne!(s["state"], "running", "{s}");
    assert_eq!(get(&d, "/v1/machines/agentbox").await.0, 404);
    assert!(containers(&d, "handler.machine=agentbox").is_empty());
    assert!(!d.root.join("data/machines/agentbox").exists());
}

/// Issue 29 item 6 (decision 0148): an agent whose machine is `disposable` — each session gets
/// a machine of its own, made at its start (labelled with it), kept while it runs however long,
/// kept for its delay after it stops and found again by the session resumed then (the same
/// container, its files), removed once the delay passes with no session; a create past
/// `HANDLER_MACHINE_MAX` refused; handlerd SIGKILLed: the machine the last daemon left is taken
/// back with its session's kept agent, kept while that runs and removed after its delay.
#[tokio::test(flavor = "multi_thread")]
async fn a_disposable_machine_lives_for_its_session_and_its_delay() {
    const DELAY: Duration = Duration::from_secs(4);
    let Some(mut d) = daemon_with("disp", &[("HANDLER_MACHINE_MAX", "2".into())]).await else {
        return;
    };
    leftover(&d, "handler-m-filler");
    account(&d).await;
    let body = |delay: u128, machine: &str| {
        json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
            "permissions": "bypass", "confirmRisks": true, "machine": machine,
            "disposableDelayMs": delay})
    };
    // A delay under a second, or another session's machine by its id: refused, named.
    let (st, v) = post(&d, "/v1/agents", body(10, "disposable")).await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("disposableDelayMs"),
        "{v}"
    );
    let (st, v) = post(&d, "/v1/agents", body(5000, "d-0123456789abcdef")).await;
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("machine"), "{v}");
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "d-0123456789abcdef", "image": IMAGE}),
    )
    .await;
    assert_eq!(
        st, 400,
        "a person's machine cannot take a disposable id: {v}"
    );
    let (st, a) = post(&d, "/v1/agents", body(DELAY.as_millis(), "disposable")).await;
    assert_eq!(st, 201, "{a}");
    assert_eq!(a["disposableDelayMs"], DELAY.as_millis() as u64, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    // Another machine, so the next disposable one is the daemon's last (max 2).
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "filler", "image": IMAGE}),
    )
    .await;
    assert_eq!(st, 201, "{v}");

    let one = session(&d, &agent, "sh: echo kept > /work/f && echo wrote-it").await;
    said(&d, &one, "exit 0\\nwrote-it").await;
    let m = format!("d-{}", one.trim_start_matches("s_"));
    let (st, info) = get(&d, &format!("/v1/machines/{m}")).await;
    assert_eq!(st, 200, "{info}: {}", d.log());
    assert_eq!(info["disposable"]["session"], one.as_str(), "{info}");
    assert_eq!(info["state"], "running", "{info}");
    let container = info["containerId"].clone();
    assert_eq!(
        containers(&d, &format!("handler.session={one}")),
        vec![format!("handler-m-{m}")]
    );
    // Past the max: the next session's machine is refused, and nothing of it is left.
    let (st, v) = post(
        &d,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": "hi"}),
    )
    .await;
    assert_eq!(st, 409, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("HANDLER_MACHINE_MAX"),
        "{v}"
    );
    let (_, all) = get(&d, "/v1/machines").await;
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    // Kept while its session runs, longer than its delay.
    tokio::time::sleep(DELAY + Duration::from_secs(1)).await;
    assert_eq!(
        get(&d, &format!("/v1/machines/{m}")).await.0,
        200,
        "{}",
        d.log()
    );
    // Stopped: kept for its delay; the session resumed in it (an attach) finds it, the same.
    let (st, _) = post(&d, &format!("/v1/sessions/{one}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (st, info) = get(&d, &format!("/v1/machines/{m}")).await;
    assert_eq!(st, 200, "kept for its delay: {}", d.log());
    let url = format!("ws://127.0.0.1:{}/v1/sessions/{one}/acp", d.port);
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", d.token)];
    let client = test_support::acp::open(&url, &protocols, None)
        .await
        .unwrap_or_else(|e| panic!("attach: {e}: {}", d.log()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get(&d, &format!("/v1/sessions/{one}")).await.1["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(info["containerId"], container, "kept after the stop");
    let (_, again) = get(&d, &format!("/v1/machines/{m}")).await;
    assert_eq!(
        again["containerId"], container,
        "the resumed session's is the same machine"
    );
    let (_, view) = get(&d, &format!("/v1/agents/{agent}")).await;
    assert_eq!(
        view["connections"][0]["sandbox"],
        format!("handler-m-{m}"),
        "{view}"
    );
    drop(client);
    let (st, _) = post(&d, &format!("/v1/sessions/{one}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    // Then gone once its delay has passed with no session in it.
    let deadline = std::time::Instant::now() + DELAY + Duration::from_secs(15);
    while get(&d, &format!("/v1/machines/{m}")).await.0 != 404 {
        if std::time::Instant::now() >= deadline {
            let (_, view) = get(&d, &format!("/v1/agents/{agent}")).await;
            panic!(
                "not removed: {}\nconnections: {}",
                d.log(),
                view["connections"]
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(containers(&d, &format!("handler.session={one}")).is_empty());
    assert!(!d.root.join("data/machines").join(&m).exists());

    // handlerd SIGKILLed while a session runs in one: the next daemon takes the machine back
    // (listed, running) and the session's kept agent over (decision 0167) — the machine is
    // kept while it runs — then, the session stopped, removes the machine after its delay.
    let two = session(&d, &agent, "sh: echo two").await;
    said(&d, &two, "exit 0\\ntwo").await;
    let m2 = format!("d-{}", two.trim_start_matches("s_"));
    let bin = d.root.join("bin/handlerd");
    d.kill_and_start(&bin).await;
    let (st, info) = get(&d, &format!("/v1/machines/{m2}")).await;
    assert_eq!(
        (st, &info["state"]),
        (200, &json!("running")),
        "{info}: {}",
        d.log()
    );
    let (_, s2) = get(&d, &format!("/v1/sessions/{two}")).await;
    assert_eq!(s2["state"], "running", "taken over: {s2}: {}", d.log());
    tokio::time::sleep(DELAY + Duration::from_secs(1)).await;
    assert_eq!(
        get(&d, &format!("/v1/machines/{m2}")).await.0,
        200,
        "kept while its session runs"
    );
    let (st, _) = post(&d, &format!("/v1/sessions/{two}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    let deadline = std::time::Instant::now() + DELAY + Duration::from_secs(15);
    while get(&d, &format!("/v1/machines/{m2}")).await.0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "not removed: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        d.log()
            .contains("disposable machine removed after its delay"),
        "{}",
        d.log()
    );
    let (st, _) = d
        .call(reqwest::Method::DELETE, "/v1/machines/filler", None)
        .await;
    assert_eq!(st, 204);
}

/// Benchmark (issue 29, `bench/machine-session.sh`): a session's start — `POST /v1/sessions`
/// with a prompt until its answer is in the session's log — for one agent whose sessions run in
/// a running machine made for it ÷ for the same agent's settings launched in a fresh sandbox,
/// alternated, medians, `HANDLER_BENCH_ROUNDS` (default 9) after a warm-up pair. Prints `BENCH`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: bench/machine-session.sh"]
async fn bench_a_session_start_in_a_warm_machine_against_a_fresh_launch() {
    let Some(d) = daemon("bench").await else {
        return;
    };
    leftover(&d, "handler-m-benchbox");
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    account(&d).await;
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
        "permissions": "bypass", "confirmRisks": true});
    let (_, fresh) = post(&d, "/v1/agents", body.clone()).await;
    let fresh = fresh["id"].as_str().unwrap().to_string();
    let (_, boxed) = post(&d, "/v1/agents", body.clone()).await;
    let boxed = boxed["id"].as_str().unwrap().to_string();
    let (st, m) = post(
        &d,
        "/v1/machines",
        json!({"name": "benchbox", "agents": [boxed]}),
    )
    .await;
    assert_eq!(st, 201, "{m}: {}", d.log());
    let mut b = body.clone();
    b["machine"] = json!("benchbox");
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{boxed}"),
            Some(b),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    // One session start, timed to its answer, then stopped.
    let once = |agent: String| {
        let d = &d;
        async move {
            let t = std::time::Instant::now();
            let id = session(d, &agent, "sh: echo bench-answer").await;
            while !events(d, &id).contains("exit 0\\nbench-answer") {
                assert!(t.elapsed() < Duration::from_secs(60), "{}", d.log());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let took = t.elapsed();
            let (st, _) = post(d, &format!("/v1/sessions/{id}/stop"), json!({})).await;
            assert!(st == 200 || st == 204, "{st}");
            took
        }
    };
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let c = once(fresh.clone()).await;
        let w = once(boxed.clone()).await;
        if round > 0 {
            cold.push(c);
            warm.push(w);
        }
    }
    warm.sort();
    cold.sort();
    let (w, c) = (warm[warm.len() / 2], cold[cold.len() / 2]);
    println!(
        "BENCH session start rounds={rounds} fresh-launch={:.1}ms in-machine={:.1}ms ratio={:.2}x",
        c.as_secs_f64() * 1e3,
        w.as_secs_f64() * 1e3,
        w.as_secs_f64() / c.as_secs_f64()
    );
    let (st, _) = d
        .call(
            reqwest::Method::DELETE,
            "/v1/machines/benchbox?force=true",
            None,
        )
        .await;
    assert_eq!(st, 204);
}

/// Decision 0153 through handlerd: a machine made `filtered` with its allow-list (the list
/// refused with another network, and required without agents) gets its own proxy container
/// beside it, labelled with it; `handler machine exec` in it reaches the allowed host and is
/// refused another; the record names the list. An agent whose key goes behind a phantom (decision
/// 0166): a machine made for it and another agent is refused naming the secret and the other
/// agent; made for it alone, its session's requests carry the real key to the key's host while
/// the agent holds only the phantom. Deleted, the proxy goes with the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_machine_has_its_own_proxy_and_reaches_only_its_allowed_hosts() {
    let (port, hits, heads) = crate::temp_daemon::http_ok_server_seen().await;
    let allowed = format!("host.containers.internal:{port}");
    let Some(d) = keyed_daemon("filt", &allowed, None).await else {
        return;
    };
    crate::daemon_acp_sandbox::ensure_network_filter(&d.user);
    leftover(&d, "handler-m-fbox");
    leftover(&d, "handler-m-fbox-egress");
    leftover(&d, "handler-m-fagent");
    leftover(&d, "handler-m-fagent-egress");
    for (body, status) in [
        (
            json!({"name": "fbox", "image": IMAGE, "network": "open", "allow": [allowed]}),
            400,
        ),
        (
            json!({"name": "fbox", "image": IMAGE, "network": "filtered"}),
            400,
        ),
        // An entry that is not HOST:PORT: the document itself is refused (422), naming it.
        (
            json!({"name": "fbox", "image": IMAGE, "network": "filtered", "allow": ["no-port"]}),
            422,
        ),
    ] {
        let field = "allow";
        let (st, v) = post(&d, "/v1/machines", body.clone()).await;
        assert_eq!(st, status, "{body}: {v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().contains(field),
            "{body}: {v}"
        );
    }
    let (code, out, err) = handler(
        &d,
        &[
            "machine",
            "create",
            "fbox",
            "--image",
            IMAGE,
            "--network",
            "filtered",
            "--allow",
            &allowed,
        ],
    );
    assert_eq!(code, 0, "{out}{err}\n{}", d.log());
    let (_, m) = get(&d, "/v1/machines/fbox").await;
    assert_eq!(m["request"]["network"], "filtered", "{m}");
    assert_eq!(m["request"]["allow"], json!([allowed]), "{m}");
    assert_eq!(
        containers(&d, "handler.machine-proxy=fbox"),
        ["handler-m-fbox-egress"],
        "the machine's own proxy, labelled with it"
    );
    // Events are followed for the exec's life: it waits a second after its request.
    // (busybox's wget -T crashes: no timeout flag.)
    let wget = |url: String| wget_in(&d, "fbox", &url);
    let (code, out, err) = wget(format!("http://{allowed}/ok"));
    assert_eq!((code, out.as_str()), (0, "ok"), "{err}\n{}", d.log());
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (code, out, err) = wget("http://denied.example.org/".into());
    assert_ne!(code, 0, "the proxy let it through: {out}{err}");
    assert!(
        err.contains("denied.example.org:80") && err.contains("denied"),
        "its egress event on the exec's stderr: {err}"
    );
    // Deleted: the proxy goes with it.
    let (code, out, err) = handler(&d, &["machine", "rm", "fbox"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(containers(&d, "handler.machine-proxy=fbox").is_empty());
    keys_in_a_machine(&d, &allowed, &heads).await;
    an_agents_session_in_a_dev_container(&d, &allowed, &heads, "podman").await;
}

/// Decision 0169 on rootless Docker (issue 30's "Podman and Docker"): the same agent's session
/// in a dev container made for it, the Dev Container CLI driving Docker, filtered through the
/// machine's own proxy (Docker's network filter image), a phantom only; and a container made by
/// hand for a folder adopted, not duplicated (decision 0161), as on Podman.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_session_runs_in_a_dev_container_on_docker() {
    let (port, _hits, heads) = crate::temp_daemon::http_ok_server_seen().await;
    let allowed = format!("host.containers.internal:{port}");
    let Some(d) = keyed_daemon("devdock", &allowed, Some("docker")).await else {
        return;
    };
    test_support::network_filter::ensure_docker(std::path::Path::new(env!(
        "CARGO_BIN_EXE_handler-sandbox-docker"
    )));
    account(&d).await;
    an_agents_session_in_a_dev_container(&d, &allowed, &heads, "docker").await;
    adopts_a_container_made_by_hand(&d, "docker").await;
}

/// Decision 0169 (issue 30): a dev container made for an agent — a repository whose Dockerfile
/// builds FROM the local image, with a local feature, made by the Dev Container CLI, filtered through
/// its own proxy. The agent's session runs in it as its user, with the repository's variables
/// (the container's, the feature's, the file's remoteEnv) and its own home; it writes the
/// repository, whose `.git` stays read-only there; its request carries the real token to the
/// key's host while the agent holds only the phantom. A container made by hand for the folder is
/// not adopted for agents (it has none of their mounts).
async fn an_agents_session_in_a_dev_container(
    d: &TempDaemon,
    allowed: &str,
    heads: &crate::temp_daemon::Heads,
    cli: &str,
) {
    let engine = |args: &[&str]| d.engine_cli(cli, args, &[]);
    for c in ["handler-m-devag", "handler-m-devag-egress", "hand-devsite"] {
        engine(&["rm", "-f", c]);
    }
    let repo = dev_repo(
        d,
        "devsite",
        "{\"build\": {\"dockerfile\": \"Dockerfile\"}, \"features\": {\"./feat\": {}}, \"containerEnv\": {\"CE\": \"cont\"}, \"remoteEnv\": {\"RE\": \"remote\"}}",
    );
    // Its image built FROM the local one (no registry here).
    std::fs::write(
        repo.join(".devcontainer/Dockerfile"),
        format!("FROM {IMAGE}\nRUN echo built-from-local > /built-ok\n"),
    )
    .unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(git.success());
    d.user.give(&repo);
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "filtered",
        "allow": [allowed], "permissions": "bypass", "confirmRisks": true});
    let (st, a) = post(d, "/v1/agents", body.clone()).await;
    assert_eq!(st, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (code, out, err) = handler(
        d,
        &[
            "machine",
            "create",
            "devag",
            "--devcontainer",
            repo.to_str().unwrap(),
            "--agent",
            &agent,
            "--network",
            "filtered",
        ],
    );
    assert_eq!(code, 0, "{out}{err}\n{}", d.log());
    let (_, m) = get(d, "/v1/machines/devag").await;
    assert_eq!(m["request"]["agents"], json!([agent]), "{m}");
    assert_eq!(
        m["request"]["allow"],
        json!([allowed]),
        "its agent's list: {m}"
    );
    let mut put = body.clone();
    put["machine"] = json!("devag");
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(put),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    heads.lock().unwrap().clear();
    let s = session(
        d,
        &agent,
        &format!(
            "sh: id -u; echo $CE $FEAT $RE; echo home=$HOME; cat /built-ok /feat-ok; \
             echo from-agent > /workspaces/devsite/agent-wrote && echo wrote; \
             touch /workspaces/devsite/.git/hooks/planted 2>/dev/null || echo hooks-read-only; \
             wget -q -O - --header \"Authorization: Bearer $FAKE_TOKEN\" http://{allowed}/key && echo; \
             echo \"held ${{#FAKE_TOKEN}}\""
        ),
    )
    .await;
    said(
        d,
        &s,
        &format!(
            "exit 0\\n{}\\ncont on remote\\nhome=/home/agent\\nbuilt-from-local\\nfeature-installed\\nwrote\\nhooks-read-only\\nok\\nheld {}",
            // Rootless Docker's containers run as their root, which is the host user.
            if cli == "docker" {
                "0".to_string()
            } else {
                d.user.uid.to_string()
            },
            TOKEN.len()
        ),
    )
    .await;
    let seen = heads.lock().unwrap().join("\n");
    assert!(
        seen.contains(&format!("Bearer {TOKEN}")),
        "the server got the real token: {seen}"
    );
    assert!(!events(d, &s).contains(TOKEN), "{}", events(d, &s));
    assert_eq!(
        std::fs::read_to_string(repo.join("agent-wrote")).unwrap(),
        "from-agent\n"
    );
    assert!(!repo.join(".git/hooks/planted").exists());
    let (st, _) = post(d, &format!("/v1/sessions/{s}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    let (code, out, err) = handler(d, &["machine", "rm", "--force", "devag"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, left) = engine(&[
        "ps",
        "-a",
        "--filter",
        "label=handler.machine-proxy=devag",
        "-q",
    ]);
    assert_eq!(left.trim(), "", "its proxy goes with it");
    // Made by hand for the folder: never adopted for agents.
    let (ok, out) = engine(&[
        "run",
        "-d",
        "--name",
        "hand-devsite",
        "-l",
        &format!("devcontainer.local_folder={}", repo.display()),
        IMAGE,
        "sleep",
        "600",
    ]);
    assert!(ok, "{out}");
    let (st, v) = post(
        d,
        "/v1/machines",
        json!({"name": "devag", "source": "devcontainer", "devcontainer": repo,
            "agents": [agent], "network": "filtered"}),
    )
    .await;
    assert_eq!(st, 422, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("made by hand"),
        "{v}"
    );
    engine(&["rm", "-f", "hand-devsite"]);
    // A disposable profile of the folder's dev container: the session's own, made at its start
    // for its agent, removed after its delay once it stopped.
    let profiles = d.root.join("config/profiles.toml");
    std::fs::write(
        &profiles,
        format!(
            "[profiles.devp]\ndevcontainer = \"{}\"\ndisposable = true\ndisposableDelay = 1000\n",
            repo.display()
        ),
    )
    .unwrap();
    d.user.give(&profiles);
    let mut put = body.clone();
    put["machine"] = json!("disposable:devp");
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(put),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let s = session(d, &agent, "sh: echo $RE; cat /built-ok").await;
    said(d, &s, "exit 0\\nremote\\nbuilt-from-local").await;
    let id = format!("d-{}", s.trim_start_matches("s_"));
    let (st, m) = get(d, &format!("/v1/machines/{id}")).await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["request"]["source"], "devcontainer", "{m}");
    assert_eq!(m["disposable"]["session"], s.as_str(), "{m}");
    let (st, _) = post(d, &format!("/v1/sessions/{s}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get(d, &format!("/v1/machines/{id}")).await.0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session's dev container outlived its delay: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (_, left) = engine(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=handler.machine={id}"),
        "-q",
    ]);
    assert_eq!(left.trim(), "", "its container removed");
}

/// Decision 0166 through handlerd: an agent whose account token goes behind a phantom towards
/// `allowed`. A machine made for it and a second agent is refused (400) naming the secret and
/// the other agent, and nothing of it is made; made for it alone, its session's request carries
/// the real token to that host, and the agent never holds it.
async fn keys_in_a_machine(d: &TempDaemon, allowed: &str, heads: &crate::temp_daemon::Heads) {
    account(d).await;
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "filtered",
        "allow": [allowed], "permissions": "bypass", "confirmRisks": true});
    let (st, a) = post(d, "/v1/agents", body.clone()).await;
    assert_eq!(st, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (st, b) = post(d, "/v1/agents", body).await;
    assert_eq!(st, 201, "{b}");
    let other = b["id"].as_str().unwrap().to_string();
    let (st, v) = post(
        d,
        "/v1/machines",
        json!({"name": "fagent", "agents": [agent, other], "network": "filtered"}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    let why = v["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("accounts/perso/token") && why.contains(&other) && why.contains("readable"),
        "{v}"
    );
    assert!(!d.root.join("data/machines/fagent").exists());
    let (st, v) = post(
        d,
        "/v1/machines",
        json!({"name": "fagent", "agents": [agent], "network": "filtered"}),
    )
    .await;
    assert_eq!(st, 201, "{v}: {}", d.log());
    let (st, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(json!({"models": [{"account": "perso"}], "scope": d.scope,
                "network": "filtered", "allow": [allowed], "permissions": "bypass",
                "confirmRisks": true, "machine": "fagent"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    heads.lock().unwrap().clear();
    let s = session(
        d,
        &agent,
        &format!(
            "sh: wget -q -O - --header \"Authorization: Bearer $FAKE_TOKEN\" http://{allowed}/key && echo; \
             echo \"held ${{#FAKE_TOKEN}}\"; env | grep -c '{}[{}]{}'",
            &TOKEN[..4],
            &TOKEN[4..5],
            &TOKEN[5..]
        ),
    )
    .await;
    said(d, &s, &format!("ok\\nheld {}\\n0", TOKEN.len())).await;
    let seen = heads.lock().unwrap().join("\n");
    assert!(
        seen.contains(&format!("Bearer {TOKEN}")),
        "the server got the real token: {seen}"
    );
    assert!(
        !events(d, &s).contains(TOKEN),
        "the agent saw the token: {}",
        events(d, &s)
    );
    let (code, out, err) = handler(d, &["machine", "rm", "--force", "fagent"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(containers(d, "handler.machine-proxy=fagent").is_empty());
}

/// A daemon on `runtime` (None: Podman) whose fake login's token goes to `allowed` (an
/// injection towards that test server).
async fn keyed_daemon(tag: &str, allowed: &str, runtime: Option<&str>) -> Option<TempDaemon> {
    let u = test_support::user::podman_user(IMAGE, "the machine API tests")?;
    let l = Layout::new(&format!("hdm-{}-{tag}", std::process::id()), true);
    l.fake_harness_at(IMAGE, allowed, "");
    let images = (
        "HANDLER_MACHINE_IMAGES",
        "localhost/handler-test-busybox:*".to_string(),
    );
    Some(l.spawn_on(u, &[images], runtime).await)
}

/// The engine's working folder of container `name`. (A memory limit would be the obvious
/// field, but rootless Podman here cannot enforce one, and a machine that asks is refused.)
fn workdir_of(d: &TempDaemon, name: &str) -> String {
    let o = d
        .user
        .cmd(
            "podman",
            &["inspect", "--format", "{{.Config.WorkingDir}}", name],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Decision 0162: a profile's `ociRuntime = "runsc"` runs its machine under gVisor (its own
/// kernel in user space: `dmesg` is gVisor's); a filtered one is refused naming the network
/// (runsc gives it none under rootless Podman), a malformed runtime naming the field. Where
/// Decision 0170: a profile's `stateScope = "shared"` — two agents of one harness and one login
/// in a machine made from it share one state (refused without it: two states at one target),
/// which lives in the profile's own folder and not in either agent's; the seed's `state =
/// "host"` (the host's sign-in mounted in) is refused naming the field.
async fn shared_state_profile(d: &TempDaemon, write: &dyn Fn(&str)) {
    leftover(d, "handler-m-pair");
    write("[profiles.team]\nstate = \"host\"\n");
    let (st, v) = get(d, "/v1/profiles").await;
    assert_eq!(st, 422, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("profiles.team.state"),
        "{v}"
    );
    write(&format!(
        "[profiles.team]\nimage = \"{IMAGE}\"\nstateScope = \"shared\"\n"
    ));
    let body = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
        "permissions": "bypass", "confirmRisks": true});
    let mut agents = Vec::new();
    for _ in 0..2 {
        let (st, a) = post(d, "/v1/agents", body.clone()).await;
        assert_eq!(st, 201, "{a}");
        agents.push(a["id"].as_str().unwrap().to_string());
    }
    let (st, v) = post(d, "/v1/machines", json!({"name": "pair", "agents": agents})).await;
    assert_eq!(st, 400, "each agent's own state at one target: {v}");
    assert!(v["detail"].as_str().unwrap().contains(".fake"), "{v}");
    let (st, m) = post(
        d,
        "/v1/machines",
        json!({"name": "pair", "agents": agents, "profile": "team"}),
    )
    .await;
    assert_eq!(st, 201, "{m}: {}", d.log());
    for a in &agents {
        let mut b = body.clone();
        b["machine"] = json!("pair");
        let (st, v) = d
            .call(reqwest::Method::PUT, &format!("/v1/agents/{a}"), Some(b))
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let one = session(
        d,
        &agents[0],
        "sh: echo from-one > ~/.fake/history/note && echo wrote",
    )
    .await;
    said(d, &one, "exit 0\\nwrote").await;
    let two = session(d, &agents[1], "sh: cat ~/.fake/history/note").await;
    said(d, &two, "exit 0\\nfrom-one").await;
    let shared = d
        .root
        .join("data/profile-state/team/fake@perso/history/note");
    assert_eq!(
        std::fs::read_to_string(&shared).unwrap_or_default(),
        "from-one\n",
        "{}",
        shared.display()
    );
    assert!(
        !d.root
            .join(format!(
                "data/agent-state/{}/fake@perso/history/note",
                agents[0]
            ))
            .exists()
    );
    let (st, v) = d
        .call(
            reqwest::Method::DELETE,
            "/v1/machines/pair?force=true",
            None,
        )
        .await;
    assert_eq!(st, 204, "{v}");
    assert!(shared.exists(), "a profile's state outlives its machines");
}

/// runsc cannot run here, the case says the engine's reason and goes no further.
async fn gvisor_profile(d: &TempDaemon, write: &dyn Fn(&str)) {
    write("[profiles.gvisor]\nociRuntime = \"--privileged\"\n");
    let (st, v) = get(d, "/v1/profiles").await;
    assert_eq!(st, 422, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("profiles.gvisor.ociRuntime"),
        "{v}"
    );
    write(&format!(
        "[profiles.gvisor]\nimage = \"{IMAGE}\"\nociRuntime = \"runsc\"\n"
    ));
    leftover(d, "handler-m-gbox");
    let (st, v) = post(
        d,
        "/v1/machines",
        json!({"name": "gbox", "profile": "gvisor", "network": "filtered", "allow": []}),
    )
    .await;
    assert_eq!(st, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("network"), "{v}");
    let (st, m) = post(
        d,
        "/v1/machines",
        json!({"name": "gbox", "profile": "gvisor"}),
    )
    .await;
    if st != 201 {
        eprintln!("SKIPPED: gVisor (runsc) cannot run a machine here: {m}");
        return;
    }
    let (code, out, err) = sh_in(d, "gbox", "dmesg | head -1");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gVisor"), "not under gVisor: {out}{err}");
    // Started again (every later call of the engine's goes through the same wrapper).
    let (st, v) = post(d, "/v1/machines/gbox/restart", json!({})).await;
    assert!(st < 300, "{v}");
    let (code, out, err) = sh_in(d, "gbox", "dmesg | head -1");
    assert!(
        code == 0 && out.contains("gVisor"),
        "after a restart: {out}{err}"
    );
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/gbox", None)
        .await;
    assert_eq!(st, 204, "{v}");
}

/// Decision 0156 (issue 30 item 3): the daemon's profiles (profiles.toml) listed; a machine
/// made from one has what its request leaves out (its image, its working folder); an unknown profile is
/// refused naming the known ones, a disposable one is never made ahead of time; an agent's
/// `disposable:<profile>` gives each session a machine from that profile (its folder, its
/// delay), removed after it; a profile the daemon cannot keep (an OCI runtime) is refused
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_fill_a_machine_and_a_disposable_one_makes_each_sessions() {
    let Some(d) = daemon("prof").await else {
        return;
    };
    leftover(&d, "handler-m-profbox");
    let file = d.root.join("config/profiles.toml");
    let write = |text: &str| {
        std::fs::write(&file, text).unwrap();
        d.user.give(&file);
    };
    write(&format!(
        "[profiles.small]\ntitle = \"Small\"\nimage = \"{IMAGE}\"\nworkdir = \"/srv/small\"\n\
         parts = [\"codex\"]\n\
         [profiles.scratch]\ntitle = \"Scratch\"\ndisposable = true\ndisposableDelay = 2000\n\
         workdir = \"/scratch\"\n"
    ));
    let (st, v) = get(&d, "/v1/profiles").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v[0]["name"], "scratch", "{v}");
    assert_eq!(v[1]["profile"]["workdir"], "/srv/small", "{v}");
    let (code, out, err) = handler(&d, &["profile", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("scratch") && out.contains("per session"),
        "{out}"
    );
    // Refused: a profile it does not have (the known named), a disposable one ahead of time.
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "profbox", "profile": "nope"}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("profile") && detail.contains("scratch, small"),
        "{v}"
    );
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "profbox", "profile": "scratch"}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("disposable"), "{v}");
    // Made from a profile: its image and folder; the record names the profile.
    let (code, out, err) = handler(&d, &["machine", "create", "profbox", "--profile", "small"]);
    assert_eq!(code, 0, "{out}{err}\n{}", d.log());
    let (_, m) = get(&d, "/v1/machines/profbox").await;
    assert_eq!(m["request"]["profile"], "small", "{m}");
    assert_eq!(m["request"]["workdir"], "/srv/small", "{m}");
    assert_eq!(workdir_of(&d, "handler-m-profbox"), "/srv/small");
    assert!(d.log().contains("part left out"), "{}", d.log());
    let (code, out, err) = handler(&d, &["machine", "rm", "profbox"]);
    assert_eq!(code, 0, "{out}{err}");

    // An agent's machine per session from a disposable profile.
    account(&d).await;
    let body = |machine: &str| {
        json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
            "permissions": "bypass", "confirmRisks": true, "machine": machine})
    };
    let (st, v) = post(&d, "/v1/agents", body("disposable:small")).await;
    assert_eq!(st, 400, "not disposable: {v}");
    assert!(v["detail"].as_str().unwrap().starts_with("machine"), "{v}");
    let (st, a) = post(&d, "/v1/agents", body("disposable:scratch")).await;
    assert_eq!(st, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let one = session(&d, &agent, "sh: echo in-scratch").await;
    said(&d, &one, "exit 0\\nin-scratch").await;
    let id = format!("d-{}", one.trim_start_matches("s_"));
    let (st, info) = get(&d, &format!("/v1/machines/{id}")).await;
    assert_eq!(st, 200, "{info}: {}", d.log());
    assert_eq!(info["request"]["profile"], "scratch", "{info}");
    assert_eq!(info["disposable"]["delayMs"], 2000, "{info}");
    assert_eq!(workdir_of(&d, &format!("handler-m-{id}")), "/scratch");
    let (st, _) = post(&d, &format!("/v1/sessions/{one}/stop"), json!({})).await;
    assert!(st == 200 || st == 204, "{st}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get(&d, &format!("/v1/machines/{id}")).await.0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session's machine outlived its delay: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    shared_state_profile(&d, &write).await;
    gvisor_profile(&d, &write).await;
    let (st, _) = d
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/agents/{agent}"),
            None,
        )
        .await;
    assert!(st == 200 || st == 204, "{st}");
}

/// Writes a repository for a dev container: `.devcontainer/devcontainer.json` (`file`) and a
/// local feature that installs a marker file and a variable; given to the daemon's user.
fn dev_repo(d: &TempDaemon, name: &str, file: &str) -> std::path::PathBuf {
    let repo = d.root.join(name);
    let feat = repo.join(".devcontainer/feat");
    std::fs::create_dir_all(&feat).unwrap();
    std::fs::write(repo.join(".devcontainer/devcontainer.json"), file).unwrap();
    std::fs::write(
        feat.join("devcontainer-feature.json"),
        r#"{"id": "feat", "version": "1.0.0", "name": "feat", "containerEnv": {"FEAT": "on"}}"#,
    )
    .unwrap();
    let install = feat.join("install.sh");
    std::fs::write(&install, "#!/bin/sh\necho feature-installed > /feat-ok\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&install, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(repo.join("README"), "mine\n").unwrap();
    d.user.give(&repo);
    repo
}

/// Decision 0161 (issue 30 item 1): a folder's devcontainer.json (JSON with comments) made into
/// a machine by the real Dev Container CLI on rootless Podman — a local image and a local
/// feature — with Handler's hardening (no capability, no network, the host user); `handler
/// machine exec` runs as its remote user in the folder as mounted inside, with the container's,
/// the feature's and the file's remoteEnv variables, and writes the person's folder. What reaches
/// the host or widens the container is refused naming the key, before the CLI runs (an
/// `initializeCommand` never runs); a link for the file is never followed; removing the
/// machine removes its container and never the folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_container_is_made_by_the_cli_from_a_folders_file_and_reached_as_its_user() {
    // Node's part (decision 0164) is built from this toolbox (setup-podman.sh's busybox with
    // the host's node and patchelf).
    let Some(mut d) = daemon_with(
        "dev",
        &[(
            "HANDLER_TOOLBOX_IMAGE",
            "localhost/handler-test-node".to_string(),
        )],
    )
    .await
    else {
        return;
    };
    assert!(
        std::process::Command::new("devcontainer")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the Dev Container CLI is missing: .ci/setup-podman.sh installs @devcontainers/cli"
    );
    leftover(&d, "handler-m-devbox");
    let marker = d.root.join("init-ran");
    let file = format!(
        "// the project's own\n{{\n  \"image\": \"{IMAGE}\",\n  \"features\": {{\"./feat\": {{}}}},\n  \"containerEnv\": {{\"CE\": \"cont\"}},\n  \"remoteEnv\": {{\"RE\": \"remote\"}},\n}}\n"
    );
    let repo = dev_repo(&d, "app", &file);
    // Refusals before the CLI runs: each names its key.
    for (name, body, key) in [
        (
            "priv",
            format!("{{\"image\": \"{IMAGE}\", \"privileged\": true}}"),
            "privileged",
        ),
        (
            "init",
            format!(
                "{{\"image\": \"{IMAGE}\", \"initializeCommand\": \"touch {}\"}}",
                marker.display()
            ),
            "initializeCommand",
        ),
        (
            "netw",
            format!("{{\"image\": \"{IMAGE}\", \"runArgs\": [\"--network=host\"]}}"),
            "runArgs[0]",
        ),
        (
            "bind",
            format!(
                "{{\"image\": \"{IMAGE}\", \"mounts\": [\"source=/etc,target=/e,type=bind\"]}}"
            ),
            "mounts[0]",
        ),
    ] {
        let r = dev_repo(&d, &format!("bad-{name}"), &body);
        let (st, v) = post(
            &d,
            "/v1/machines",
            json!({"name": format!("bad-{name}"), "source": "devcontainer", "devcontainer": r}),
        )
        .await;
        assert_eq!(st, 422, "{name}: {v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("devcontainer.json: {key}:")),
            "{name}: {v}"
        );
    }
    assert!(!marker.exists(), "initializeCommand ran on the host");
    // No file, a link for the file, another source: 400s naming what.
    let empty = d.root.join("no-file");
    std::fs::create_dir_all(&empty).unwrap();
    let linked = d.root.join("linked");
    std::fs::create_dir_all(linked.join(".devcontainer")).unwrap();
    std::os::unix::fs::symlink(
        repo.join(".devcontainer/devcontainer.json"),
        linked.join(".devcontainer/devcontainer.json"),
    )
    .unwrap();
    d.user.give(&empty);
    d.user.give(&linked);
    for (body, says) in [
        (
            json!({"name": "x", "source": "devcontainer", "devcontainer": empty}),
            "has no .devcontainer/devcontainer.json",
        ),
        (
            json!({"name": "x", "source": "devcontainer", "devcontainer": linked}),
            "symbolic link",
        ),
        (
            json!({"name": "x", "source": "devcontainer"}),
            "devcontainer:",
        ),
        (
            json!({"name": "x", "source": "compose", "image": IMAGE}),
            "source:",
        ),
    ] {
        let (st, v) = post(&d, "/v1/machines", body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().contains(says),
            "{body}: {v}"
        );
    }
    // Made through the CLI (`handler machine create --devcontainer`), with Node's part.
    let (code, out, err) = handler(
        &d,
        &[
            "machine",
            "create",
            "devbox",
            "--devcontainer",
            repo.to_str().unwrap(),
            "--part",
            "node",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (st, m) = get(&d, "/v1/machines/devbox").await;
    assert_eq!(st, 200, "{m}");
    let node = m["parts"][0]["id"] == "node";
    if !node {
        // Only a machine without node has no localhost/handler-test-node: then it is left out.
        assert_eq!(m["partsLeftOut"][0]["id"], "node", "{m}");
        eprintln!("dev container: Node's part left out ({m}): its case skipped");
    }
    assert_eq!(m["state"], "running", "{m}");
    assert_eq!(m["request"]["source"], "devcontainer", "{m}");
    assert_eq!(
        m["devcontainer"]["remoteWorkspaceFolder"], "/workspaces/app",
        "{m}"
    );
    assert!(
        m["devcontainer"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("RE")),
        "{m}"
    );
    let inspect = |d: &TempDaemon, format: &str| {
        let o = d
            .user
            .cmd(
                "podman",
                &["inspect", "--format", format, "handler-m-devbox"],
                &[("HOME", d.user.home())],
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(inspect(&d, "{{.HostConfig.NetworkMode}}"), "none");
    assert!(inspect(&d, "{{.HostConfig.CapDrop}}").contains("CAP_SYS_CHROOT"));
    assert_eq!(
        inspect(
            &d,
            "{{index .Config.Labels \"handler.devcontainer.folder\"}}"
        ),
        repo.display().to_string()
    );
    assert_eq!(inspect(&d, "{{.Id}}"), m["containerId"].as_str().unwrap());
    let (code, out, err) = sh_in(
        &d,
        "devbox",
        "id -u; pwd; echo $CE $FEAT $RE; cat /feat-ok; echo inside > made-inside; command -v node && node -e 'console.log(6*7)'; echo \"${PATH%%:*}\"",
    );
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let mut want = vec![
        d.user.uid.to_string(),
        "/workspaces/app".into(),
        "cont on remote".into(),
        "feature-installed".into(),
    ];
    if node {
        // The part's node, first on the PATH every exec is given, runs in busybox.
        want.extend([
            "/opt/handler/parts/node/bin/node".into(),
            "42".into(),
            "/opt/handler/parts/node/bin".into(),
        ]);
    } else {
        want.push(lines.last().unwrap_or(&"").to_string());
    }
    assert_eq!(lines, want, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(repo.join("made-inside")).unwrap(),
        "inside\n"
    );
    let (code, out, _) = handler(&d, &["machine", "ls"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("devcontainer {}", repo.display())),
        "{out}"
    );
    // Its record gone and handlerd started again: adopted by its labels, its user, folder
    // inside and the file's remoteEnv read back from the engine (decision 0155).
    std::fs::remove_file(d.root.join("data/machines/devbox.json")).unwrap();
    let bin = d.root.join("bin/handlerd");
    d.kill_and_start(&bin).await;
    let (st, m) = get(&d, "/v1/machines/devbox").await;
    assert_eq!(st, 200, "{m}: {}", d.log());
    assert_eq!(
        m["request"]["devcontainer"],
        repo.display().to_string(),
        "{m}"
    );
    assert_eq!(
        m["devcontainer"]["remoteWorkspaceFolder"], "/workspaces/app",
        "{m}"
    );
    let (code, out, err) = sh_in(&d, "devbox", "id -u; pwd; echo $RE");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out,
        format!("{}\n/workspaces/app\nremote\n", d.user.uid),
        "{err}"
    );
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/devbox", None)
        .await;
    assert_eq!(st, 204, "{v}");
    assert_eq!(inspect(&d, "{{.Id}}"), "", "its container is removed");
    assert_eq!(
        std::fs::read_to_string(repo.join("README")).unwrap(),
        "mine\n"
    );
    assert!(repo.join(".devcontainer/devcontainer.json").exists());
    adopts_a_container_made_by_hand(&d, "podman").await;
}

/// A container someone made by hand for a folder (the CLI's own `devcontainer.local_folder`
/// label) is adopted by a request for that folder, never duplicated: only with the network it
/// has (open), reached as its file's user where the folder is mounted; removed with the machine.
async fn adopts_a_container_made_by_hand(d: &TempDaemon, cli: &str) {
    let hand = dev_repo(d, "hand", &format!("{{\"image\": \"{IMAGE}\"}}"));
    let podman = |args: &[&str]| {
        let o = d
            .user
            .cmd(cli, args, &[("HOME", d.user.home())])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    podman(&["rm", "-f", "hand-made", "handler-m-handy"]);
    let folder_label = format!("devcontainer.local_folder={}", hand.display());
    let made = podman(&[
        "run",
        "-d",
        "--name",
        "hand-made",
        "-l",
        &folder_label,
        "-l",
        r#"devcontainer.metadata=[{"remoteEnv":{"RE":"hand"}}]"#,
        "--mount",
        &format!(
            "type=bind,source={},target=/workspaces/hand",
            hand.display()
        ),
        IMAGE,
        "sleep",
        "3600",
    ]);
    assert!(!made.is_empty(), "the container made by hand");
    let body = |network: &str| json!({"name": "handy", "source": "devcontainer", "devcontainer": hand, "network": network});
    let (st, v) = post(d, "/v1/machines", body("none")).await;
    assert_eq!(st, 422, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("made by hand") && detail.contains("network"),
        "{v}"
    );
    let (st, m) = post(d, "/v1/machines", body("open")).await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    assert_eq!(m["devcontainer"]["adopted"], true, "{m}");
    assert_eq!(m["containerId"].as_str().unwrap(), made, "{m}");
    assert_eq!(
        m["devcontainer"]["remoteWorkspaceFolder"], "/workspaces/hand",
        "{m}"
    );
    let names = || {
        podman(&[
            "ps",
            "-a",
            "--filter",
            &format!("label={folder_label}"),
            "--format",
            "{{.Names}}",
        ])
    };
    assert_eq!(names(), "handler-m-handy", "adopted, not duplicated");
    let (code, out, err) = sh_in(d, "handy", "echo $RE; pwd");
    assert_eq!(
        (code, out.as_str()),
        (0, "hand\n/workspaces/hand\n"),
        "{err}"
    );
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/handy", None)
        .await;
    assert_eq!(st, 204, "{v}");
    assert_eq!(names(), "", "removed with the machine");
    assert!(hand.join(".devcontainer/devcontainer.json").exists());
}

/// Decision 0161: a filtered dev container has the machine's own proxy (decision 0153) and
/// Handler's forwarder feature: an exec reaches the allowed host and is refused another, and
/// still after a restart (the forwarder starts with the container). One folder makes one dev
/// container: a second machine for it is a 409 naming the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_dev_container_reaches_only_its_allowed_hosts_through_its_own_proxy() {
    let Some(d) = daemon("devf").await else {
        return;
    };
    crate::daemon_acp_sandbox::ensure_network_filter(&d.user);
    leftover(&d, "handler-m-devf");
    leftover(&d, "handler-m-devf-egress");
    let (port, hits) = crate::temp_daemon::http_ok_server().await;
    let allowed = format!("host.containers.internal:{port}");
    let repo = dev_repo(&d, "site", &format!("{{\"image\": \"{IMAGE}\"}}"));
    let (st, m) = post(
        &d,
        "/v1/machines",
        json!({"name": "devf", "source": "devcontainer", "devcontainer": repo,
            "network": "filtered", "allow": [allowed]}),
    )
    .await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    assert_eq!(
        containers(&d, "handler.machine-proxy=devf"),
        ["handler-m-devf-egress"],
        "the machine's own proxy"
    );
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "devf2", "source": "devcontainer", "devcontainer": repo}),
    )
    .await;
    assert_eq!(st, 409, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("\"devf\""), "{v}");
    let wget = |url: String| wget_in(&d, "devf", &url);
    let (code, out, err) = wget(format!("http://{allowed}/ok"));
    assert_eq!((code, out.as_str()), (0, "ok"), "{err}\n{}", d.log());
    let (code, out, err) = wget("http://denied.example.org/".into());
    assert_ne!(code, 0, "the proxy let it through: {out}{err}");
    let (st, v) = post(&d, "/v1/machines/devf/restart", json!({})).await;
    assert!(st < 300, "{v}");
    let (code, out, err) = wget(format!("http://{allowed}/again"));
    assert_eq!(
        (code, out.as_str()),
        (0, "ok"),
        "after a restart: {err}\n{}",
        d.log()
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/devf", None)
        .await;
    assert_eq!(st, 204, "{v}");
    assert!(containers(&d, "handler.machine-proxy=devf").is_empty());
}

/// Decision 0161's cost: `POST /v1/machines` of a dev container (the Dev Container CLI on a
/// staged copy of a file naming the busybox image, no feature: the CLI's own work, the check
/// after, the probe) ÷ of a machine from the same image, each deleted after, alternated, medians
/// of `HANDLER_BENCH_ROUNDS` (default 9) after a warm-up pair. Prints `BENCH`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: bench/devcontainer-create.sh"]
async fn bench_a_dev_container_create_against_an_image_machine_create() {
    let Some(d) = daemon("dcbench").await else {
        return;
    };
    leftover(&d, "handler-m-bdev");
    leftover(&d, "handler-m-bimg");
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let repo = dev_repo(&d, "bench", &format!("{{\"image\": \"{IMAGE}\"}}"));
    let once = |body: Value| {
        let d = &d;
        async move {
            let name = body["name"].as_str().unwrap().to_string();
            let t = std::time::Instant::now();
            let (st, m) = post(d, "/v1/machines", body).await;
            let took = t.elapsed();
            assert_eq!(st, 201, "{m}\n{}", d.log());
            let (st, _) = d
                .call(
                    reqwest::Method::DELETE,
                    &format!("/v1/machines/{name}"),
                    None,
                )
                .await;
            assert_eq!(st, 204);
            took
        }
    };
    let (mut dev, mut img) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let i = once(json!({"name": "bimg", "image": IMAGE})).await;
        let v = once(json!({"name": "bdev", "source": "devcontainer", "devcontainer": repo})).await;
        if round > 0 {
            img.push(i);
            dev.push(v);
        }
    }
    dev.sort();
    img.sort();
    let (v, i) = (dev[dev.len() / 2], img[img.len() / 2]);
    println!(
        "BENCH machine create rounds={rounds} image={:.1}ms devcontainer={:.1}ms ratio={:.2}x",
        i.as_secs_f64() * 1e3,
        v.as_secs_f64() * 1e3,
        v.as_secs_f64() / i.as_secs_f64()
    );
}

/// Decision 0163: a machine made with a folder of the person's (inside a work folder) has it at
/// its own path, commands start there, and what an exec writes is in the folder; its `.git`
/// is read-only inside (the git guard). A folder outside the work folders, one of Handler's own,
/// or with agents is refused naming `folder`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_mounts_a_folder_of_the_persons_at_its_own_path() {
    let Some(d) = daemon("fold").await else {
        return;
    };
    leftover(&d, "handler-m-fbox2");
    let scope = std::path::PathBuf::from(&d.scope);
    std::fs::create_dir_all(scope.join(".git/hooks")).unwrap();
    std::fs::write(scope.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(scope.join(".git/config"), "[core]\n").unwrap();
    d.user.give(&scope.join(".git"));
    // Decision 0168: another folder of the person's, at a target of its own.
    let data = scope.parent().unwrap().join("shared-data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f"), "from-the-host\n").unwrap();
    d.user.give(&data);
    let data_s = data.display().to_string();
    for (body, says) in [
        (
            json!({"name": "fbox2", "image": IMAGE, "folder": "/etc"}),
            "folder:",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE, "mounts": [{"source": "/etc", "target": "/e"}]}),
            "mounts[0].source:",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE,
                "mounts": [{"source": data_s, "target": "/opt/handler/parts/node"}]}),
            "mounts[0].target:",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE, "mounts": [{"source": data_s, "target": "/opt"}]}),
            "mounts[0].target:",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE, "folder": d.scope,
                "mounts": [{"source": data_s, "target": d.scope}]}),
            "mounts[0].target:",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE,
                "mounts": [{"source": data_s, "target": "/work"}]}),
            "mounts[0].target:",
        ),
        (
            json!({"name": "fbox2", "agents": ["a_x"], "mounts": [{"source": data_s, "target": "/d"}]}),
            "mounts:",
        ),
        // Writable elsewhere than its own path: the git guard would not see its repository.
        (
            json!({"name": "fbox2", "image": IMAGE, "mounts": [{"source": data_s, "target": "/d"}]}),
            "mounts[0].target: a writable folder",
        ),
        (
            json!({"name": "fbox2", "image": IMAGE, "folder": d.root.join("config")}),
            "folder:",
        ),
        (
            json!({"name": "fbox2", "source": "devcontainer", "devcontainer": d.scope, "folder": d.scope}),
            "folder:",
        ),
    ] {
        let (st, v) = post(&d, "/v1/machines", body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().starts_with(says),
            "{body}: {v}"
        );
    }
    let (code, out, err) = handler(
        &d,
        &[
            "machine",
            "create",
            "fbox2",
            "--image",
            IMAGE,
            "--folder",
            &d.scope,
            "-v",
            &format!("{data_s}:/data:ro"),
        ],
    );
    assert_eq!(code, 0, "{out}{err}\n{}", d.log());
    let (_, m) = get(&d, "/v1/machines/fbox2").await;
    let canon = std::fs::canonicalize(&scope).unwrap().display().to_string();
    assert_eq!(m["request"]["folder"], canon.as_str(), "{m}");
    let data_canon = std::fs::canonicalize(&data).unwrap().display().to_string();
    assert_eq!(
        m["request"]["mounts"],
        json!([{"source": data_canon, "target": "/data", "readOnly": true}]),
        "{m}"
    );
    let (code, out, err) = sh_in(
        &d,
        "fbox2",
        "cat /data/f; touch /data/x 2>/dev/null && echo data-writable || echo data-read-only",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "from-the-host\ndata-read-only\n", "{err}");
    let (code, out, err) = sh_in(
        &d,
        "fbox2",
        "pwd; echo made > from-machine; echo x >> .git/config && echo git-writable || echo git-read-only",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, format!("{canon}\ngit-read-only\n"), "{err}");
    assert_eq!(
        std::fs::read_to_string(scope.join("from-machine")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(scope.join(".git/config")).unwrap(),
        "[core]\n"
    );
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/fbox2", None)
        .await;
    assert_eq!(st, 204, "{v}");
    assert!(
        scope.join("from-machine").exists(),
        "the folder is the person's: kept"
    );
}
