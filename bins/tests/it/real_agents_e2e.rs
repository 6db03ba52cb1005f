//! The five real agents end to end (issue 15), opt-in (`#[ignore]`: minutes, the npm and PyPI
//! registries and the Debian mirror): through handlerd's API only, as the unprivileged test user,
//! the toolbox and the codex, claude-code, gemini, pi and vibe images are built (each only when
//! `GET /v1/harnesses` says it is missing, or all with `HANDLER_E2E_REBUILD=1`), a provider is
//! made on the scripted fake model (`fixtures/fake-model/fake_model.py`, on the host: the
//! sandbox reaches it as `host.containers.internal`), and per harness with a provider protocol
//! an agent with a **filtered** network whose allow-list is exactly its required hosts drives one
//! conversation over the ACP WebSocket: the fake model asks for a shell tool call (`env` into a
//! file of the scope), the permission request reaches this client (ask mode, where the harness
//! has one), the tool runs in the sandbox, the turn ends. Checked per harness: the fake server got
//! the real key (and never another), the sandbox's `env` holds the provider key's phantom only,
//! the file is in the scope owned by the user. Gemini runs on accounts only: its part is the
//! build's check (initialize, session/new, its modes). Figures and the run's summary go to
//! `$HANDLER_E2E_REPORT` (default `/var/tmp/handler-real-agents-e2e.md`).
//!
//! Run (root, after .ci/setup-podman.sh), as the user `handler-e2e` (its own image store; the
//! real images in `handler-test`'s would break the other image tests):
//! `HANDLER_TEST_USER=handler-e2e cargo test -p handler-bins --test it -- --ignored real_agents_e2e --nocapture`

use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use test_support::user::{USER, User, free_port, id_of};
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "sk-e2eRealProviderKey0123456789abcdefABCDEF";
const HARNESSES: &[&str] = &["codex", "claude-code", "gemini", "pi", "vibe"];
const COMMAND: &str = "env > handler-e2e-env.txt && echo handler-e2e";

struct Run {
    root: PathBuf,
    scope: PathBuf,
    port: u16,
    token: String,
    http: reqwest::Client,
    child: std::process::Child,
    model: std::process::Child,
    model_log: PathBuf,
    model_port: u16,
    report: Vec<String>,
    failures: Vec<String>,
    present: Vec<String>,
}

impl Drop for Run {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        let _ = self.model.kill();
        let _ = self.model.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The sandbox user: `$HANDLER_TEST_USER` (run it as `handler-e2e`, whose image store holds
/// the real images, so that the other tests' `handler-test` store stays free of them), else
/// the test user.
fn user() -> User {
    let name = std::env::var("HANDLER_TEST_USER").unwrap_or_else(|_| USER.into());
    User {
        uid: id_of("-u", &name).expect("the test user"),
        gid: id_of("-g", &name).expect("the test user"),
        name: Some(name),
    }
}

/// The fake model on all addresses (the sandbox reaches the host by its address), checking KEY.
fn fake_model(log: &std::path::Path) -> (std::process::Child, u16) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/fake-model/fake_model.py"
    );
    let mut c = std::process::Command::new("python3")
        .args([script, "--host", "0.0.0.0", "--port", "0", "--log"])
        .arg(log)
        .env("FAKE_MODEL_API_KEY", KEY)
        .env("FAKE_MODEL_COMMAND", COMMAND)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();
    (c, port)
}

async fn start() -> Run {
    let u = user();
    let root = PathBuf::from(format!("/var/tmp/hre2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let scope = home.join("code/e2e");
    std::fs::create_dir_all(&scope).unwrap();
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(
        root.join("config/folders.toml"),
        format!("roots = [\"{}\"]\n", home.join("code").display()),
    )
    .unwrap();
    for (n, src) in [
        ("handlerd", env!("CARGO_BIN_EXE_handlerd")),
        (
            "handler-sandbox-podman",
            env!("CARGO_BIN_EXE_handler-sandbox-podman"),
        ),
    ] {
        std::fs::copy(src, root.join("bin").join(n)).unwrap();
    }
    // The static egress proxy beside the sandbox executable, as an install puts it: handlerd
    // builds the network filter from it at its start when the user's store has none.
    std::fs::copy(
        test_support::static_build::static_proxy(),
        root.join("bin/handler-egress-proxy"),
    )
    .unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    u.give(&root);
    let model_log = root.join("fake-model.jsonl");
    let (model, model_port) = fake_model(&model_log);
    let port = free_port();
    let mut env = test_support::handlerd::env(&root, &home.join("harnesses"), port);
    env.extend([
        ("HOME", u.home()),
        ("TMPDIR", "/var/tmp".to_string()),
        (
            "HANDLER_SANDBOX_COMMAND",
            root.join("bin/handler-sandbox-podman")
                .display()
                .to_string(),
        ),
        (
            "HANDLER_TOOLBOX_DIR",
            root.join("toolbox").display().to_string(),
        ),
        (
            "HANDLER_BUILD_CA_BUNDLE",
            "/etc/ssl/certs/ca-certificates.crt".to_string(),
        ),
        ("HANDLER_LOG", "info".to_string()),
    ]);
    let (child, token) =
        test_support::handlerd::spawn_as(&u, &root.join("bin/handlerd"), &env, &root, port).await;
    Run {
        root,
        scope,
        port,
        token,
        http: reqwest::Client::new(),
        child,
        model,
        model_log,
        model_port,
        report: Vec::new(),
        failures: Vec::new(),
        present: Vec::new(),
    }
}

impl Run {
    async fn call(&self, m: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .request(m, format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let res = r.send().await.unwrap();
        (
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        )
    }
    async fn get(&self, path: &str) -> Value {
        let (s, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "{path}: {v}");
        v
    }
    async fn post(&self, path: &str, body: Value) -> Value {
        let (s, v) = self.call(reqwest::Method::POST, path, Some(body)).await;
        assert!(s == 201 || s == 202, "{path}: {s} {v}");
        v
    }

    /// Builds `target` through the API; its time in seconds, or why it failed (its log is
    /// written to `/var/tmp/handler-e2e-build-<target>.log`).
    async fn build(&mut self, target: &str) -> Result<u64, String> {
        let b = self.post("/v1/builds", json!({"target": target})).await;
        let id = b["id"].as_str().unwrap().to_string();
        let t0 = Instant::now();
        let b = loop {
            let b = self.get(&format!("/v1/builds/{id}")).await;
            if b["state"] != "running" {
                break b;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(3600),
                "build {target}: {b}"
            );
            tokio::time::sleep(Duration::from_secs(3)).await;
        };
        let log = self.get(&format!("/v1/builds/{id}/log?offset=0")).await;
        let text = log["text"].as_str().unwrap_or_default().to_string();
        std::fs::write(format!("/var/tmp/handler-e2e-build-{target}.log"), &text).unwrap();
        if b["state"] == "succeeded" {
            Ok(t0.elapsed().as_secs())
        } else {
            Err(format!("{}: {}", b["state"], b["error"]))
        }
    }

    /// The toolbox and the five images, each built when missing (all with HANDLER_E2E_REBUILD);
    /// a failed harness build is recorded in `failures` (the test fails at its end).
    async fn images(&mut self) {
        let rebuild = std::env::var("HANDLER_E2E_REBUILD").as_deref() == Ok("1");
        // Always from this checkout's egress proxy (seconds): an older filter image in the
        // store would hide a proxy change.
        let s = self
            .build("network-filter")
            .await
            .expect("the network filter builds");
        self.report
            .push(format!("| network-filter | built in {s} s | | |"));
        let t = self.get("/v1/toolbox").await;
        if rebuild || t["imagePresent"] != true {
            let s = self.build("toolbox").await.expect("the toolbox builds");
            self.report.push(format!(
                "| toolbox | built in {s} s | {} | |",
                size(t["image"].as_str().unwrap())
            ));
        }
        let only = std::env::var("HANDLER_E2E_HARNESSES").unwrap_or_default();
        for h in HARNESSES {
            if !only.is_empty() && !only.split_whitespace().any(|o| o == *h) {
                continue;
            }
            let info = self.harness(h).await;
            let built = if rebuild || info["imagePresent"] != true {
                match self.build(h).await {
                    Ok(s) => format!("built in {s} s"),
                    Err(e) => {
                        self.failures.push(format!("{h}: build {e}"));
                        self.report.push(format!("| {h} | build {e} | | |"));
                        continue;
                    }
                }
            } else {
                "present (built earlier)".to_string()
            };
            let info = self.harness(h).await;
            assert_eq!(info["imagePresent"], true, "{info}");
            self.report.push(format!(
                "| {h} | {built} | {} | version {} |",
                size(info["image"].as_str().unwrap()),
                info["version"]
            ));
            self.present.push(h.to_string());
        }
    }

    async fn harness(&self, name: &str) -> Value {
        let all = self.get("/v1/harnesses").await;
        all.as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no harness {name}: {all}"))
    }
}

/// The image's size, as podman says (a measurement, not through the API).
fn size(image: &str) -> String {
    let u = user();
    let tag = format!("{image}:latest");
    let args = ["image", "inspect", "--format", "{{.Size}}", &tag];
    let o = u
        .cmd("podman", &args, &[("HOME", u.home())])
        .current_dir("/tmp")
        .output()
        .unwrap();
    let b: f64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0.0);
    format!("{:.0} MB", b / 1e6)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into())).await.unwrap();
}

async fn recv(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(Duration::from_secs(300), ws.next())
            .await
            .expect("a message within 300 s")
        {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
            Some(Ok(Message::Close(c))) => panic!("closed: {c:?}"),
            Some(Ok(_)) => {}
            e => panic!("the socket ended: {e:?}"),
        }
    }
}

/// What one conversation showed.
#[derive(Default)]
struct Turn {
    first_update: Option<Duration>,
    permissions: usize,
    stop: Value,
    /// The agent's text (its message chunks), for a failure's message.
    said: String,
}

/// Sends request `id` and reads until its answer: permission requests answered with an
/// allowing option, the first `session/update` timed from `t0`.
async fn request(
    ws: &mut Ws,
    id: u64,
    method: &str,
    params: Value,
    t0: Instant,
    turn: &mut Turn,
) -> Value {
    send(
        ws,
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .await;
    loop {
        let m = recv(ws).await;
        if m["id"] == json!(id) && m.get("method").is_none() {
            return m;
        }
        match m["method"].as_str() {
            Some("session/update") => {
                turn.first_update.get_or_insert(t0.elapsed());
                if let Some(t) = m["params"]["update"]["content"]["text"].as_str()
                    && turn.said.len() < 2000
                {
                    turn.said.push_str(t);
                }
            }
            Some("session/request_permission") => {
                turn.permissions += 1;
                let opts = m["params"]["options"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let pick = opts
                    .iter()
                    .find(|o| o["kind"] == "allow_once")
                    .or_else(|| {
                        opts.iter()
                            .find(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("allow")))
                    })
                    .unwrap_or_else(|| panic!("no allowing option: {m}"));
                send(ws, json!({"jsonrpc": "2.0", "id": m["id"], "result": {"outcome": {"outcome": "selected", "optionId": pick["optionId"]}}})).await;
            }
            Some(other) if m.get("id").is_some() => {
                send(ws, json!({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": format!("{other}: not offered")}})).await;
            }
            _ => {}
        }
    }
}

/// One conversation with harness `h` on the provider: checks and the report's line.
async fn converse(run: &mut Run, h: &str) {
    let ask = h != "pi"; // pi has no asking mode (its descriptor maps bypass only)
    let a = run
        .post(
            "/v1/agents",
            json!({"models": [{"provider": "fake", "harness": h, "model": "fake-model"}],
                   "scope": run.scope.join(h).display().to_string(), "network": "filtered",
                   "permissions": if ask { "ask" } else { "bypass" }}),
        )
        .await;
    let want = format!("host.containers.internal:{}", run.model_port);
    let hosts: Vec<&str> = a["models"][0]["requiredHosts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["host"].as_str())
        .collect();
    assert_eq!(hosts, vec![want.as_str()], "{h}: {a}");
    assert!(a["allow"].as_array().is_none_or(Vec::is_empty), "{a}");
    let id = a["id"].as_str().unwrap();
    let url = format!("ws://127.0.0.1:{}/v1/agents/{id}/acp", run.port);
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", run.token)];
    let t0 = Instant::now();
    let mut ws = test_support::acp::open(&url, &protocols, None)
        .await
        .unwrap()
        .ws;
    let mut turn = Turn::default();
    let init = request(
        &mut ws,
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
        t0,
        &mut turn,
    )
    .await;
    assert!(init.get("result").is_some(), "{h}: {init}");
    let scope = run.scope.join(h).display().to_string();
    let new = request(
        &mut ws,
        2,
        "session/new",
        json!({"cwd": scope, "mcpServers": []}),
        t0,
        &mut turn,
    )
    .await;
    let sid = new["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{h}: {new}"))
        .to_string();
    let r = request(
        &mut ws,
        3,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "Run the command, please."}]}),
        t0,
        &mut turn,
    )
    .await;
    turn.stop = r["result"]["stopReason"].clone();
    assert_eq!(turn.stop, "end_turn", "{h}: {r}");
    if ask {
        assert!(
            turn.permissions >= 1,
            "{h}: no permission request reached the client"
        );
    }
    let file = run.scope.join(h).join("handler-e2e-env.txt");
    let meta = std::fs::metadata(&file).unwrap_or_else(|e| {
        panic!(
            "{h}: {}: {e}; the agent said {:?}; the scope holds {:?}; the model's last requests: {}",
            file.display(),
            turn.said,
            std::fs::read_dir(run.scope.join(h))
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                .unwrap_or_default(),
            last_requests(run)
        )
    });
    assert_eq!(meta.uid(), user().uid, "{h}: the file is the user's");
    let env = std::fs::read_to_string(&file).unwrap();
    assert!(
        !env.contains(KEY),
        "{h}: the real key is in the sandbox's env"
    );
    let phantom: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(_, v)| v))
        .filter(|v| v.len() == KEY.len() && v.as_bytes()[2] == b'-' && *v != KEY)
        .collect();
    assert!(
        !phantom.is_empty(),
        "{h}: no phantom of the key in the env:\n{env}"
    );
    drop(ws);
    run.report.push(format!(
        "| {h} | {} | {} permission request(s) | stop {} | first session/update {:.2} s after connecting |",
        if ask { "ask" } else { "bypass" },
        turn.permissions,
        turn.stop,
        turn.first_update.map_or(f64::NAN, |d| d.as_secs_f64())
    ));
}

/// The fake model's last three requests, shortened (a failure's message).
fn last_requests(run: &Run) -> String {
    let text = std::fs::read_to_string(&run.model_log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..]
        .iter()
        .map(|l| {
            let s: String = l.chars().rev().take(1500).collect();
            s.chars().rev().collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fake model's log: per request, the key check's verdict.
fn auths(run: &Run) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for l in std::fs::read_to_string(&run.model_log)
        .unwrap_or_default()
        .lines()
    {
        let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
        *n.entry(v["auth"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: minutes, the npm and PyPI registries and the Debian mirror"]
async fn real_agents_e2e() {
    assert!(
        test_support::user::is_root(),
        "run as root (the sandbox user is {USER})"
    );
    let mut run = start().await;
    run.report.push("| image | build | size | |".into());
    run.images().await;
    let base = format!("http://127.0.0.1:{}", run.model_port);
    run.post(
        "/v1/providers",
        json!({"name": "fake", "endpoints": {"anthropic": base, "openai-chat": format!("{base}/v1"), "responses": format!("{base}/v1")},
               "models": [{"id": "fake-model"}], "apiKey": KEY}),
    )
    .await;
    run.report.push(String::new());
    run.report
        .push("| harness | mode | permission | turn | time |".into());
    let only = std::env::var("HANDLER_E2E_HARNESSES").unwrap_or_default();
    run.present
        .retain(|h| only.is_empty() || only.split_whitespace().any(|o| o == h));
    let talk: Vec<String> = run
        .present
        .iter()
        .filter(|h| *h != "gemini")
        .cloned()
        .collect();
    for h in talk.iter().map(String::as_str) {
        std::fs::create_dir_all(run.scope.join(h)).unwrap();
        user().give(&run.scope.join(h));
        let before = auths(&run);
        let talked = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(converse(
            &mut run, h,
        )))
        .await;
        if let Err(p) = talked {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(ToString::to_string))
                .unwrap_or_default();
            let why: String = why.chars().take(1500).collect();
            run.report.push(format!(
                "| {h} | FAILED: {} | | | |",
                why.replace('\n', " ")
            ));
            run.failures.push(format!("{h}: {why}"));
            continue;
        }
        let after = auths(&run);
        let ok = after.get("ok").copied().unwrap_or(0) - before.get("ok").copied().unwrap_or(0);
        assert!(
            ok >= 1,
            "{h}: the fake model got no request with the real key: {after:?}"
        );
        assert_eq!(
            after.get("wrong"),
            before.get("wrong"),
            "{h}: a phantom reached the model"
        );
        run.report.push(format!(
            "| {h} | | {ok} model request(s) with the real key | | |"
        ));
    }
    let out = std::env::var("HANDLER_E2E_REPORT")
        .unwrap_or_else(|_| "/var/tmp/handler-real-agents-e2e.md".into());
    std::fs::write(&out, run.report.join("\n") + "\n").unwrap();
    println!("{}", run.report.join("\n"));
    assert!(run.failures.is_empty(), "{:?}", run.failures);
}
