//! Remote control (D.7's conformance, docs/remote.md) with a real `handler-gateway` process, a
//! real handlerd (the fake sandbox and the scripted fake agent) and a Python device
//! (fixtures/remote, `cryptography` from PyPI in a venv). Everything between the two and the
//! gateway passes a recording relay, which — with the gateway's store — must hold no prompt,
//! no token, no key and no pairing code. Fails when the venv cannot be made, unless
//! HANDLER_SKIP_PYTHON_TESTS=1.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::acp::open;
use test_support::user::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "fk-Remote0Token1111aaaa2222bbbb3333";
const PROMPT: &str = "ask: may I deploy the thing on Tuesday?";

/// A gateway process on `port` with its store in `data`.
struct Gateway(Child);

impl Gateway {
    fn start(port: u16, data: &Path) -> Gateway {
        let mut c = Command::new(env!("CARGO_BIN_EXE_handler-gateway"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data")
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening on"), "gateway: {line}");
        Gateway(c)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Copies `r` to `w`, keeping a copy in `seen`.
async fn pipe<R, W>(mut r: R, mut w: W, seen: Arc<Mutex<Vec<u8>>>)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16384];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        seen.lock().unwrap().extend_from_slice(&buf[..n]);
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// A relay on a free port to 127.0.0.1:`to`, keeping every byte either way.
async fn recording_relay(to: u16, seen: Arc<Mutex<Vec<u8>>>) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut a, _)) = l.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut b) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                    return;
                };
                let (ar, aw) = a.split();
                let (br, bw) = b.split();
                tokio::join!(pipe(ar, bw, seen.clone()), pipe(br, aw, seen.clone()));
            });
        }
    });
    port
}

/// handlerd as this user with the fake sandbox, in a temporary folder.
struct Daemon {
    child: Child,
    root: PathBuf,
    port: u16,
    token: String,
    env: Vec<(&'static str, String)>,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
    }
}

impl Daemon {
    async fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let f = test_support::static_build::fakes();
        for d in ["home/code/app", "harnesses/fake", "config"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(
            root.join("harnesses/fake/harness.toml"),
            test_support::descriptor::fake(&f.agent),
        )
        .unwrap();
        std::fs::write(
            root.join("config/folders.toml"),
            format!("roots = [\"{}\"]\n", root.join("home/code").display()),
        )
        .unwrap();
        let port = free_port();
        let mut env = test_support::handlerd::env(&root, &root.join("harnesses"), port);
        env.push(("HOME", root.join("home").display().to_string()));
        env.push((
            "HANDLER_SANDBOX_COMMAND",
            format!(
                "{} --log {}",
                f.sandbox.display(),
                root.join("sandbox.log").display()
            ),
        ));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_handlerd"));
        cmd.env_remove("XDG_RUNTIME_DIR").envs(env.iter().cloned());
        let (child, token) = test_support::handlerd::spawn(cmd, &root, port).await;
        Daemon {
            child,
            root,
            port,
            token,
            env,
            http: reqwest::Client::new(),
            _dir: dir,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let res = r.send().await.unwrap();
        let s = res.status().as_u16();
        (s, res.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> Value {
        let (s, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "{path}: {v}");
        v
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// `handler ARGS` against this daemon: exit code and stdout + stderr.
    fn handler(&self, args: &[&str]) -> (i32, String, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_handler"))
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("handlerd.log")).unwrap_or_default()
    }

    /// Waits (60 s) for the light to be `state`.
    async fn light(&self, state: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.get("/v1/remote").await;
            if v["state"] == state {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the light stayed {v}, not {state}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A local tab: a WebSocket attachment to `sid`, initialized and loaded.
    async fn tab(&self, sid: &str, acp: &Value, scope: &Path) -> test_support::acp::Acp {
        let url = format!("ws://127.0.0.1:{}/v1/sessions/{sid}/acp", self.port);
        let protocols = ["acp.v1".into(), format!("bearer.{}", self.token)];
        let mut tab = open(&url, &protocols, None).await.unwrap();
        tab.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
        tab.request(
            "session/load",
            json!({"sessionId": acp, "cwd": scope, "mcpServers": []}),
        )
        .await;
        tab
    }

    async fn session(&self, agent: &str) -> Value {
        let (s, v) = self
            .post("/v1/sessions", json!({"agentId": agent, "origin": "cli"}))
            .await;
        assert_eq!(s, 201, "{v}: {}", self.log());
        assert_eq!(v["state"], "running", "{v}");
        v
    }
}

/// The Python device, one command a line, one JSON answer a line.
struct Device {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Device {
    fn start(python: &Path) -> Device {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/remote/device_repl.py");
        let mut child = Command::new(python)
            .arg(script)
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/remote"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Device {
            child,
            stdin,
            lines,
        }
    }

    /// One command's answer (60 s at most); an `error` answer fails the test.
    async fn cmd(&mut self, line: &str) -> Value {
        let v = self.try_cmd(line).await;
        assert!(
            v.get("error").is_none() || v.get("jsonrpc").is_some() || v.get("session").is_some(),
            "{line}: {v}"
        );
        v
    }

    /// initialize and session/load of an attached session, as any client's first messages.
    async fn load(&mut self, sid: &str, acp: &Value, scope: &Path) -> (Value, Value) {
        let init = json!({"jsonrpc": "2.0", "id": 6, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let i = self.cmd(&format!("acp {sid} {init}")).await;
        let load = json!({"jsonrpc": "2.0", "id": 7, "method": "session/load",
            "params": {"sessionId": acp, "cwd": scope, "mcpServers": []}});
        (i, self.cmd(&format!("acp {sid} {load}")).await)
    }

    async fn try_cmd(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let l = tokio::task::block_in_place(|| self.lines.recv_timeout(Duration::from_secs(60)))
            .unwrap_or_else(|_| panic!("the device did not answer {line}"));
        serde_json::from_str(&l).unwrap()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A venv with `cryptography` (None: skipped by HANDLER_SKIP_PYTHON_TESTS=1).
fn python(venv: &Path) -> Option<PathBuf> {
    let py = std::env::var("HANDLER_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let made = Command::new(&py)
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "cryptography==48.0.0"])
            .status()
            .is_ok_and(|s| s.success());
    if made {
        return Some(venv.join("bin/python"));
    }
    assert_eq!(
        std::env::var("HANDLER_SKIP_PYTHON_TESTS").as_deref(),
        Ok("1"),
        "cannot install cryptography from PyPI in a venv (see docs/ci-needs.md)"
    );
    eprintln!("skipped: cannot install cryptography (HANDLER_SKIP_PYTHON_TESTS=1)");
    None
}

/// Ports handlerd listens on, with their addresses (hex, as /proc/net/tcp{,6} says).
fn listening(port: u16) -> Vec<String> {
    let hex = format!("{port:04X}");
    let mut v = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for l in std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() > 3 && cols[3] == "0A" && cols[1].ends_with(&format!(":{hex}")) {
                v.push(cols[1].to_owned());
            }
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paired_device_reaches_shared_sessions_only_through_a_gateway_that_reads_nothing() {
    let venv = tempfile::tempdir().unwrap();
    let Some(py) = python(venv.path()) else {
        return;
    };
    let gw_dir = tempfile::tempdir().unwrap();
    let gw_port = free_port();
    let mut gateway = Gateway::start(gw_port, &gw_dir.path().join("store"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let relay = recording_relay(gw_port, seen.clone()).await;
    let gw_url = format!("http://127.0.0.1:{relay}");
    let d = Daemon::start().await;

    // handlerd listens on loopback only: remote control adds no listener.
    let listeners = listening(d.port);
    assert!(!listeners.is_empty());
    assert!(
        listeners
            .iter()
            .all(|a| a == &format!("0100007F:{:04X}", d.port)),
        "{listeners:?}"
    );

    // Off without a gateway; a gateway only over https or to loopback.
    assert_eq!(d.get("/v1/remote").await["state"], "off");
    let (s, v) = d
        .call(
            reqwest::Method::PUT,
            "/v1/remote",
            Some(json!({"gateway": "http://gw.example.com"})),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("gateway"), "{v}");
    let (code, out, err) = d.handler(&["remote", "setup", &gw_url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("remote control: idle"), "{out}");
    d.light("idle").await;

    // Two sessions of the fake agent; one shared.
    let (s, _) = d
        .post(
            "/v1/accounts",
            json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201);
    let scope = std::fs::canonicalize(d.root.join("home/code/app")).unwrap();
    let (s, agent) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": scope}),
        )
        .await;
    assert_eq!(s, 201, "{agent}");
    let agent = agent["id"].as_str().unwrap().to_owned();
    let shared = d.session(&agent).await;
    let other = d.session(&agent).await;
    let (sid, oid) = (
        shared["id"].as_str().unwrap(),
        other["id"].as_str().unwrap(),
    );
    let (code, _, err) = d.handler(&["session", "share", sid]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.get(&format!("/v1/sessions/{sid}")).await["remote"], true);

    // Pairing: the code (and its QR code) from the CLI; the device proves it.
    let (code, out, err) = d.handler(&["--json", "remote", "pair"]);
    assert_eq!(code, 0, "{err}");
    let p: Value = serde_json::from_str(&out).unwrap();
    let pairing_code = p["code"].as_str().unwrap().to_owned();
    assert!(p["qrSvg"].as_str().unwrap().starts_with("<?xml"), "{p}");
    assert!(
        p["uri"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/device#code={pairing_code}"))
    );
    let mut dev = Device::start(&py);
    // A wrong code finds no pairing.
    let wrong = dev
        .try_cmd(&format!("pair {gw_url} AAAA-AAAA-AAAA-AAAA-AAAA"))
        .await;
    assert!(wrong["error"].as_str().unwrap().contains("404"), "{wrong}");
    let paired = dev.cmd(&format!("pair {gw_url} {pairing_code}")).await;
    let device_id = paired["deviceId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while d
        .get("/v1/remote/devices")
        .await
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the device was never kept: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let devices = d.get("/v1/remote/devices").await;
    assert_eq!(devices[0]["id"], device_id.as_str());
    assert_eq!(devices[0]["name"], "test phone");
    // The code is used.
    let again = dev.try_cmd(&format!("pair {gw_url} {pairing_code}")).await;
    assert!(again["error"].as_str().unwrap().contains("404"), "{again}");

    // It lists the shared sessions only.
    let list = dev
        .cmd(r#"call {"jsonrpc": "2.0", "id": 1, "method": "remote/sessions"}"#)
        .await;
    let ids: Vec<&str> = list["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sid]);
    // Not shared: -32020; not attached: -32021; outside the allow-list: -32022.
    let r = dev
        .cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 2, "method": "remote/attach", "params": {{"sessionId": "{oid}"}}}}"#))
        .await;
    assert_eq!(r["error"]["code"], -32020, "{r}");
    let prompt = |id: u32, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": shared["acpSessionId"], "prompt": [{"type": "text", "text": text}]}})
    };
    let r = dev.cmd(&format!("acp {sid} {}", prompt(3, "hello"))).await;
    assert_eq!(r["message"]["error"]["code"], -32021, "{r}");
    let r = dev
        .cmd(r#"call {"jsonrpc": "2.0", "id": 4, "method": "session/new", "params": {}}"#)
        .await;
    assert_eq!(r["error"]["code"], -32022, "{r}");

    // remoteStart: only an agent whose owner allowed it is listed and can be started from the
    // device; its session starts shared, from the phone.
    let r = dev
        .cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 40, "method": "remote/start", "params": {{"agentId": "{agent}"}}}}"#))
        .await;
    assert_eq!(r["error"]["code"], -32022, "{r}");
    let (s, starter) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": scope, "remoteStart": true}),
        )
        .await;
    assert_eq!(s, 201, "{starter}");
    let starter = starter["id"].as_str().unwrap().to_owned();
    let r = dev
        .cmd(r#"call {"jsonrpc": "2.0", "id": 41, "method": "remote/agents"}"#)
        .await;
    let listed: Vec<&str> = r["result"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [starter.as_str()], "{r}");
    let r = dev
        .cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 42, "method": "remote/start", "params": {{"agentId": "{starter}"}}}}"#))
        .await;
    let started = r["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let s = d.get(&format!("/v1/sessions/{started}")).await;
    assert_eq!(
        (
            s["origin"].as_str(),
            s["remote"].as_bool(),
            s["state"].as_str()
        ),
        (Some("phone"), Some(true), Some("running")),
        "{s}"
    );
    let (st, _) = d
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{started}/share"),
            None,
        )
        .await;
    assert_eq!(st, 200);

    // Attached: an ordinary attachment (initialize and session/load answered by the daemon).
    let r = dev
        .cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 5, "method": "remote/attach", "params": {{"sessionId": "{sid}"}}}}"#))
        .await;
    assert!(r["result"].is_object(), "{r}");
    let light = d.light("ok").await;
    assert_eq!(light["attached"], 1);
    let (init, load) = dev.load(sid, &shared["acpSessionId"], &scope).await;
    assert!(
        init["message"]["result"]["protocolVersion"].is_number(),
        "{init}"
    );
    assert!(load["message"]["result"].is_object(), "{load}");
    let fs = json!({"jsonrpc": "2.0", "id": 8, "method": "fs/read_text_file", "params": {"path": "/etc/passwd"}});
    let r = dev.cmd(&format!("acp {sid} {fs}")).await;
    assert_eq!(r["message"]["error"]["code"], -32022, "{r}");

    // A local tab attached beside it sees the device's prompt; the device answers the
    // permission request (the first answer wins) and its turn ends.
    let mut tab = d.tab(sid, &shared["acpSessionId"], &scope).await;
    let r = dev.cmd(&format!("send {sid} {}", prompt(9, PROMPT))).await;
    assert_eq!(r, json!({}));
    let ask = dev
        .cmd(&format!("wait {sid} session/request_permission"))
        .await;
    let ask_id = ask["message"]["id"].clone();
    let mut tab_saw_prompt = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tab_saw_prompt {
        assert!(
            Instant::now() < deadline,
            "the tab never saw the device's prompt"
        );
        let m = tab.next().await.expect("the tab stays attached");
        tab_saw_prompt = m["method"] == "session/update"
            && m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
            && m["params"]["update"]["content"]["text"] == PROMPT;
    }
    let answer = json!({"jsonrpc": "2.0", "id": ask_id, "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}});
    dev.cmd(&format!("acp {sid} {answer}")).await;
    let done = dev.cmd(&format!("response {sid} 9")).await;
    assert_eq!(
        done["message"]["result"]["stopReason"], "end_turn",
        "{done}"
    );
    let mut resolved = false;
    while !resolved {
        let m = tab.next().await.expect("the tab stays attached");
        resolved = m["method"] == "_handler/permission_resolved";
    }

    // Replayed, 10-minute-old, altered and reflected envelopes are refused (logged without
    // their content; the old one reported as expired).
    for (kind, reason) in [
        ("replayed", "replayed"),
        ("old", "expired"),
        ("altered", "altered"),
        ("reflected", "reflected"),
    ] {
        let r = dev.cmd(&format!("attack {kind}")).await;
        assert_eq!(r["refused"]["reason"], reason, "{kind}: {r}");
        assert!(
            d.log().contains(&format!("reason=\"{reason}\""))
                || d.log().contains(&format!("reason={reason}")),
            "{kind}: {}",
            d.log()
        );
    }

    // The gateway restarts without losing a queued envelope.
    dev.cmd(r#"send-call {"jsonrpc": "2.0", "id": 20, "method": "remote/sessions"}"#)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(gateway);
    gateway = Gateway::start(gw_port, &gw_dir.path().join("store"));
    let r = dev.cmd("response - 20").await;
    assert_eq!(r["result"]["sessions"][0]["id"], sid, "{r}");

    // Unsharing closes the device's attachment with 4004; then it cannot attach.
    let (code, _, err) = d.handler(&["session", "share", sid, "--off"]);
    assert_eq!(code, 0, "{err}");
    let closed = dev.cmd(&format!("wait {sid} closed")).await;
    assert_eq!(closed["closed"]["code"], 4004, "{closed}");
    d.light("idle").await;
    let r = dev
        .cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 21, "method": "remote/attach", "params": {{"sessionId": "{sid}"}}}}"#))
        .await;
    assert_eq!(r["error"]["code"], -32020, "{r}");

    // A stopped session is no longer shared, and cannot be shared (409).
    let (s, _) = d
        .post(&format!("/v1/sessions/{oid}/share"), json!({}))
        .await;
    assert_eq!(s, 200);
    let (s, v) = d.post(&format!("/v1/sessions/{oid}/stop"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(d.get(&format!("/v1/sessions/{oid}")).await["remote"], false);
    let (s, v) = d
        .post(&format!("/v1/sessions/{oid}/share"), json!({}))
        .await;
    assert_eq!(s, 409, "{v}");

    // A revoked device gets 401 from the gateway.
    assert_eq!(dev.cmd("status").await["status"], 200);
    let (code, _, err) = d.handler(&["remote", "revoke", &device_id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(dev.cmd("status").await["status"], 401);

    // The gateway sees no plaintext: no prompt, no answer, no token, no key, no code.
    let secrets: Value =
        serde_json::from_str(&std::fs::read_to_string(d.root.join("data/secrets.json")).unwrap())
            .unwrap();
    let daemon_key = secrets
        .pointer("/remote~1daemon-key/value")
        .and_then(Value::as_str)
        .map(String::from);
    let mut held = seen.lock().unwrap().clone();
    for f in std::fs::read_dir(gw_dir.path().join("store")).unwrap() {
        held.extend(std::fs::read(f.unwrap().path()).unwrap());
    }
    let held = String::from_utf8_lossy(&held).into_owned();
    assert!(held.contains("/v1/mail"), "the relay recorded the traffic");
    let mut never = vec![
        PROMPT.to_owned(),
        "may I deploy".into(),
        TOKEN.into(),
        d.token.clone(),
        "Allow".into(),
    ];
    never.push(pairing_code.clone());
    never.push(pairing_code.replace('-', ""));
    never.extend(daemon_key);
    for s in &never {
        assert!(!held.contains(s.as_str()), "the gateway saw {s:?}");
    }
    // Refusals are logged by their reason, without the envelope's content (the probe's method).
    let log = d.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("envelope refused"))
        .collect();
    assert!(refusals.len() >= 4, "{log}");
    assert!(
        refusals
            .iter()
            .all(|l| !l.contains("remote/sessions") && !l.contains("ct=") && !l.contains("nonce")),
        "{refusals:?}"
    );

    // Unauthorized: a gateway that does not know this daemon (its store lost).
    drop(gateway);
    let _fresh = Gateway::start(gw_port, &gw_dir.path().join("other-store"));
    let v = d.light("unauthorized").await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("handler remote setup"),
        "{v}"
    );
    let (code, out, _) = d.handler(&["remote", "off"]);
    assert_eq!(code, 0, "{out}");
    d.light("off").await;
}

/// The cost of remote control where a person waits (issue 32): a prompt sent and the agent's
/// first update back, from a device through the gateway, against a local WebSocket attachment
/// of the same session, alternated in one run, medians. Run by bench/remote-prompt.sh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bench/remote-prompt.sh"]
async fn bench_a_devices_prompt_against_a_local_attachment() {
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let venv = tempfile::tempdir().unwrap();
    let Some(py) = python(venv.path()) else {
        return;
    };
    let gw_dir = tempfile::tempdir().unwrap();
    let gw_port = free_port();
    let _gateway = Gateway::start(gw_port, gw_dir.path());
    let gw_url = format!("http://127.0.0.1:{gw_port}");
    let d = Daemon::start().await;
    assert_eq!(d.handler(&["remote", "setup", &gw_url]).0, 0);
    d.post(
        "/v1/accounts",
        json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
    )
    .await;
    let scope = std::fs::canonicalize(d.root.join("home/code/app")).unwrap();
    let (_, agent) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": scope}),
        )
        .await;
    let s = d.session(agent["id"].as_str().unwrap()).await;
    let (sid, acp) = (s["id"].as_str().unwrap(), s["acpSessionId"].clone());
    d.handler(&["session", "share", sid]);
    let (_, out, _) = d.handler(&["--json", "remote", "pair"]);
    let code = serde_json::from_str::<Value>(&out).unwrap()["code"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut dev = Device::start(&py);
    dev.cmd(&format!("pair {gw_url} {code}")).await;
    while d
        .get("/v1/remote/devices")
        .await
        .as_array()
        .unwrap()
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    dev.cmd(&format!(r#"call {{"jsonrpc": "2.0", "id": 1, "method": "remote/attach", "params": {{"sessionId": "{sid}"}}}}"#)).await;
    let mut tab = d.tab(sid, &acp, &scope).await;
    dev.load(sid, &acp, &scope).await;
    dev.cmd("drain").await;
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let id = 100 + i;
        let p = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": acp, "prompt": [{"type": "text", "text": format!("remote {i}")}]}});
        let t = Instant::now();
        dev.cmd(&format!("send {sid} {p}")).await;
        dev.cmd(&format!("wait {sid} session/update")).await;
        remote.push(t.elapsed());
        dev.cmd(&format!("response {sid} {id}")).await;
        let t = Instant::now();
        tab.send(&json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "session/prompt",
            "params": {"sessionId": acp, "prompt": [{"type": "text", "text": format!("local {i}")}]}})).await;
        loop {
            let m = tab.next().await.unwrap();
            if m["method"] == "session/update"
                && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            {
                break;
            }
        }
        local.push(t.elapsed());
        loop {
            let m = tab.next().await.unwrap();
            if m["id"] == json!(1000 + i) && m.get("method").is_none() {
                break;
            }
        }
        // The device's own view of the local turn, dropped before the next round.
        tokio::time::sleep(Duration::from_millis(100)).await;
        dev.cmd("drain").await;
    }
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (r, l) = (med(&mut remote), med(&mut local));
    println!(
        "BENCH remote prompt→first update: device via gateway {:.1} ms, local attachment {:.1} ms, ratio {:.2}x ({rounds} rounds)",
        r.as_secs_f64() * 1000.0,
        l.as_secs_f64() * 1000.0,
        r.as_secs_f64() / l.as_secs_f64()
    );
}

/// The gateway in production: HTTPS with its certificate (rustls), registration closed to
/// daemons without the registration token, a device's credential of another daemon refused.
#[tokio::test]
async fn the_gateway_serves_https_and_registers_only_with_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let port = free_port();
    let mut c = Command::new(env!("CARGO_BIN_EXE_handler-gateway"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .arg("--data")
        .arg(dir.path().join("store"))
        .env("HANDLER_GATEWAY_REGISTRATION_TOKEN", "reg-Token0123456789")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _g = Gateway(c);
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ck.cert.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://localhost:{port}");
    let r = https.get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Plain HTTP to the TLS port gets no answer.
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await;
    assert!(plain.map_or(true, |r| r.status() != 200));
    // Registration: 401 without the token or with another, 201 with it.
    let r = https
        .post(format!("{url}/v1/daemons"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = https
        .post(format!("{url}/v1/daemons"))
        .bearer_auth("reg-wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = https
        .post(format!("{url}/v1/daemons"))
        .bearer_auth("reg-Token0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let reg: Value = r.json().await.unwrap();
    let token = reg["token"].as_str().unwrap();
    // Its credential polls; a forged one of the same id does not.
    let r = https
        .get(format!("{url}/v1/mail?wait=0"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let forged = format!("{}.AAAA", reg["daemonId"].as_str().unwrap());
    let r = https
        .get(format!("{url}/v1/mail?wait=0"))
        .bearer_auth(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The device page is served with its CSP.
    let r = https.get(format!("{url}/device")).send().await.unwrap();
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(r.text().await.unwrap().contains("/device.js"));
}
