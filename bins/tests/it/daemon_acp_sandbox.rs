//! The C conformance against the real sandbox: handlerd runs as an unprivileged user (setpriv
//! to HANDLER_TEST_USER, default handler-test, when the tests run as root), launches the
//! scripted fake ACP agent (static, from fixtures/fake-agent) through handler-sandbox-podman in
//! a rootless Podman container (localhost/handler-test-busybox, .ci/setup-podman.sh), and a real
//! WebSocket client checks: no token → 401, bad Origin → 403, P1–P7 and P9 through the socket,
//! a 1 MB message intact both ways, close → no container left, agent exit → 1011. And a filtered
//! agent through the real network filter (its image built first, as the user): its account
//! token and a binding's secret delivered as phantoms the proxy swaps back towards their host (a
//! test server on the host, reached as host.containers.internal), other hosts denied, the egress
//! events recorded on the agent, PATCH {egress: log-only} switching the running sandbox, and a
//! PUT of the agent's allow-list reaching it (set-allow).
//! Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use test_support::user::{User, free_port};
use tokio_tungstenite::tungstenite::{self, Message};

const IMAGE: &str = "localhost/handler-test-busybox";
const TOKEN: &str = "fk-Sandbox0Token1111aaaa2222bbbb3333";

fn user() -> Option<User> {
    test_support::user::podman_user(IMAGE, "the daemon's sandbox tests")
}

struct Daemon {
    child: Child,
    port: u16,
    token: String,
    root: PathBuf,
    scope: String,
    http: reqwest::Client,
    user: User,
    /// The engine's CLI its sandboxes run on (`podman`, `docker`).
    cli: &'static str,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn start(u: User) -> Daemon {
    start_with(u, "c", "api.fake.test:443").await
}

/// A daemon in `/tmp/hdt-<pid>-<tag>`, its fake harness's login reaching `login_host`.
async fn start_with(u: User, tag: &str, login_host: &str) -> Daemon {
    start_on(u, tag, login_host, None).await
}

/// [`start_with`] on runtime `runtime` (`HANDLER_RUNTIME`, issue 19): its sandbox executable
/// next to handlerd, which picks it by that setting; `None`: `HANDLER_SANDBOX_COMMAND` names
/// handler-sandbox-podman, as before.
async fn start_on(u: User, tag: &str, login_host: &str, runtime: Option<&str>) -> Daemon {
    let root = PathBuf::from(format!("/tmp/hdt-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let scope = home.join("code/app");
    let bin = root.join("bin");
    for d in [&scope, &bin, &home.join("harnesses/fake")] {
        std::fs::create_dir_all(d).unwrap();
    }
    let agent = test_support::static_build::fakes().agent.clone();
    test_support::handlerd::install(&[
        (
            bin.join("handlerd"),
            PathBuf::from(env!("CARGO_BIN_EXE_handlerd")),
        ),
        (
            bin.join("handler-sandbox-podman"),
            PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-podman")),
        ),
        (
            bin.join("handler-sandbox-docker"),
            PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-docker")),
        ),
        (bin.join("fake-acp-agent"), agent.clone()),
        // The agent binary in the sandbox: inside the scope, mounted at the same path.
        (scope.join(".bin/fake-acp-agent"), agent),
    ]);
    let descriptor = test_support::descriptor::sandbox_fake(
        "Fake ACP agent",
        IMAGE,
        &format!("\"{}\"", scope.join(".bin/fake-acp-agent").display()),
        login_host,
    );
    std::fs::write(home.join("harnesses/fake/harness.toml"), descriptor).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    u.give(&root);
    let port = free_port();
    // Podman finds the user's image store through HOME: the real home; Handler's own folders here.
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::write(
        root.join("config/folders.toml"),
        format!("roots = [\"{}\"]\n", home.join("code").display()),
    )
    .unwrap();
    u.give(&root);
    let mut env = test_support::handlerd::env(&root, &home.join("harnesses"), port);
    env.push(match runtime {
        Some(r) => ("HANDLER_RUNTIME", r.to_string()),
        None => (
            "HANDLER_SANDBOX_COMMAND",
            bin.join("handler-sandbox-podman").display().to_string(),
        ),
    });
    env.extend([
        ("HOME", u.home()),
        ("HANDLER_ALLOWED_ORIGINS", "http://ui.local".to_string()),
        ("HANDLER_LOG", "info".to_string()),
    ]);
    let (child, token) =
        test_support::handlerd::spawn_as(&u, &bin.join("handlerd"), &env, &root, port).await;
    let http = reqwest::Client::new();
    let scope = scope.display().to_string();
    Daemon {
        child,
        port,
        token,
        root,
        scope,
        http,
        user: u,
        cli: if runtime == Some("docker") {
            "docker"
        } else {
            "podman"
        },
    }
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .put(format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
    async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .patch(format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
    async fn get(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }
    fn url(&self, agent: &str) -> String {
        format!("ws://127.0.0.1:{}/v1/agents/{agent}/acp", self.port)
    }
    fn containers(&self, label: &str) -> Vec<String> {
        let home = self.user.home();
        let o = self
            .user
            .cmd(
                self.cli,
                &[
                    "ps",
                    "-a",
                    "--filter",
                    &format!("label={label}"),
                    "--format",
                    "{{.Names}}",
                ],
                &[("HOME", home)],
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("handlerd.log")).unwrap_or_default()
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(
    url: &str,
    protocols: &[String],
    origin: Option<&str>,
) -> Result<Ws, tungstenite::Error> {
    let acp = test_support::acp::open(url, protocols, origin).await?;
    assert_eq!(acp.protocol.as_deref(), Some("acp.v1"));
    Ok(acp.ws)
}

struct Client {
    ws: Ws,
    next: u64,
    seen: Vec<Value>,
}

impl Client {
    async fn recv(&mut self) -> Result<Value, Option<u16>> {
        loop {
            match tokio::time::timeout(Duration::from_secs(60), self.ws.next())
                .await
                .expect("a message within 60 s")
            {
                Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(&t).unwrap()),
                Some(Ok(Message::Close(c))) => return Err(c.map(|c| u16::from(c.code))),
                Some(Ok(_)) => {}
                _ => return Err(None),
            }
        }
    }
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.ws
            .send(Message::Text(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                    .to_string()
                    .into(),
            ))
            .await
            .unwrap();
        loop {
            let m = self.recv().await.unwrap_or_else(|c| {
                panic!(
                    "closed ({c:?}) while waiting for {method}: {}",
                    daemon_logs()
                )
            });
            if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                return m;
            }
            self.seen.push(m);
        }
    }
}

/// Every test daemon's log of this process (for a failure's message).
fn daemon_logs() -> String {
    let prefix = format!("hdt-{}-", std::process::id());
    std::fs::read_dir("/tmp")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| std::fs::read_to_string(e.path().join("handlerd.log")).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn refused(e: tungstenite::Error) -> u16 {
    match e {
        tungstenite::Error::Http(r) => r.status().as_u16(),
        other => panic!("not an HTTP refusal: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_conformance_in_a_real_rootless_sandbox() {
    let Some(u) = user() else { return };
    acp_conformance(start(u).await).await;
}

/// The same C conformance case through handlerd on the Docker runtime (issue 19): handlerd
/// picks handler-sandbox-docker by `HANDLER_RUNTIME=docker`, the fake agent runs in a rootless
/// Docker sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_conformance_in_a_real_rootless_docker_sandbox() {
    let Some(u) = user() else { return };
    acp_conformance(start_on(u, "dk", "api.fake.test:443", Some("docker")).await).await;
}

/// Contract C through a real sandbox: auth, the ACP session, the policy's permission flow.
async fn acp_conformance(d: Daemon) {
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    // Locked down: no network (no proxy image needed), ask.
    let (s, a) = d.post("/v1/agents", json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none", "permissions": "ask"})).await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", d.token)];

    // No token → 401; bad Origin → 403.
    assert_eq!(
        refused(
            open(&d.url(&id), &["acp.v1".into()], None)
                .await
                .err()
                .unwrap()
        ),
        401
    );
    assert_eq!(
        refused(
            open(&d.url(&id), &protocols, Some("http://evil.example"))
                .await
                .err()
                .unwrap()
        ),
        403
    );

    let ws = open(&d.url(&id), &protocols, Some("http://ui.local"))
        .await
        .expect("accepted");
    let mut c = Client {
        ws,
        next: 0,
        seen: vec![],
    };
    // P1
    let r = c.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true}})).await;
    assert_eq!(
        r["result"]["_meta"]["fake/received"]["clientCapabilities"],
        json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}),
        "{r}"
    );
    // It runs in the sandbox: the container exists, labelled with the agent.
    let (_, view) = (0, d.get(&format!("/v1/agents/{id}")).await);
    let sandbox = view["connections"][0]["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !d.containers(&format!("handler.agent={id}")).is_empty()
            || !d
                .containers(&format!("handler.sandbox={sandbox}"))
                .is_empty(),
        "no container for {sandbox}"
    );
    // P2
    let r = c
        .request("session/new", json!({"cwd": "/etc", "mcpServers": []}))
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    // P3: no network: every http MCP server refused.
    let r = c.request("session/new", json!({"cwd": d.scope, "mcpServers": [{"type": "http", "name": "m", "url": "https://mcp.example.org/x", "headers": []}]})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    // P7 (ask → session mode "default") applied, the session handed out.
    let r = c
        .request("session/new", json!({"cwd": d.scope, "mcpServers": []}))
        .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    // P4
    let r = c
        .request(
            "_fake/request",
            json!({"method": "terminal/create", "params": {"sessionId": sid, "command": "sh"}}),
        )
        .await;
    assert_eq!(r["result"]["response"]["error"]["code"], -32003, "{r}");
    // P5: the agent holds a phantom; the value it says is replaced.
    let r = c.request("_fake/env", json!({"name": "FAKE_TOKEN"})).await;
    let phantom = r["result"]["value"].as_str().unwrap().to_string();
    assert!(
        phantom != TOKEN && phantom.len() == TOKEN.len(),
        "{phantom}"
    );
    c.request("_fake/say", json!({"sessionId": sid, "text": TOKEN}))
        .await;
    let said = c
        .seen
        .iter()
        .rev()
        .find(|m| m["method"] == "session/update")
        .unwrap();
    assert_eq!(
        said["params"]["update"]["content"]["text"],
        "[secret accounts/perso/token]"
    );
    // P6
    let r = c.request("_handler/x", json!({})).await;
    assert_eq!(r["error"]["code"], -32601);
    // 1 MB both ways, intact.
    let big: String = (0..1024 * 1024)
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect();
    let r = c.request("_fake/echo", json!({"blob": big})).await;
    assert!(r["result"]["blob"] == json!(big), "1 MB came back altered");
    // Close → no container left.
    c.ws.close(None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    while !d
        .containers(&format!("handler.sandbox={sandbox}"))
        .is_empty()
        || !d.containers(&format!("handler.agent={id}")).is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "a container outlived its socket: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Agent exit → 1011.
    let ws = open(&d.url(&id), &protocols, None).await.unwrap();
    let mut c = Client {
        ws,
        next: 0,
        seen: vec![],
    };
    c.ws.send(Message::Text(
        json!({"jsonrpc": "2.0", "id": 1, "method": "_fake/exit", "params": {"code": 7}})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    loop {
        match c.recv().await {
            Ok(_) => continue,
            Err(code) => {
                assert_eq!(code, Some(1011), "{}", d.log());
                break;
            }
        }
    }

    // P9: an agent with an interface gets its permission requests answered by the daemon.
    let (s, a2) = d.post("/v1/agents", json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none", "interface": {"result": {"type": "object"}}})).await;
    assert_eq!(s, 201, "{a2}");
    let ws = open(&d.url(a2["id"].as_str().unwrap()), &protocols, None)
        .await
        .unwrap();
    let mut c = Client {
        ws,
        next: 0,
        seen: vec![],
    };
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let r = c
        .request("session/new", json!({"cwd": d.scope, "mcpServers": []}))
        .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let r = c
        .request("_fake/request", json!({"method": "session/request_permission", "params": {"sessionId": sid, "toolCall": {"toolCallId": "t"}, "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]}}))
        .await;
    assert_eq!(
        r["result"]["response"]["result"]["outcome"]["optionId"], "ok",
        "{r}"
    );
    c.ws.close(None).await.unwrap();
    assert!(!d.log().contains(TOKEN), "the token reached handlerd's log");
}

const PROXY_IMAGE: &str = "localhost/handler-network-filter:latest";

/// The network filter image in the user's store (`image build-proxy`, A.7), built from this
/// checkout's proxy by every run of this test: an image left by an older build would test the
/// older proxy.
pub(crate) fn ensure_network_filter(u: &User) {
    if u.name.is_some() {
        // As root: the image every container test of this process shares.
        test_support::network_filter::ensure(Path::new(env!(
            "CARGO_BIN_EXE_handler-sandbox-podman"
        )));
        return;
    }
    let home = u.home();
    let exists = |u: &User| {
        u.cmd(
            "podman",
            &["image", "exists", PROXY_IMAGE],
            &[("HOME", home.clone())],
        )
        .status()
        .is_ok_and(|s| s.success())
    };
    let dir = PathBuf::from(format!("/tmp/hdt-{}-proxy", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, src) in [
        (
            "handler-egress-proxy",
            test_support::static_build::static_proxy(),
        ),
        (
            "handler-sandbox-podman",
            PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-podman")),
        ),
    ] {
        std::fs::copy(&src, dir.join(name)).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    u.give(&dir);
    let out = u
        .cmd(
            dir.join("handler-sandbox-podman").to_str().unwrap(),
            &["image", "build-proxy"],
            &[
                ("HOME", home.clone()),
                (
                    "HANDLER_EGRESS_PROXY_BIN",
                    dir.join("handler-egress-proxy").display().to_string(),
                ),
            ],
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && exists(u),
        "image build-proxy failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One request a test server saw: its path and headers (lowercase names).
type Seen =
    std::sync::Arc<std::sync::Mutex<Vec<(String, std::collections::BTreeMap<String, String>)>>>;

/// A plain HTTP server on the host (all addresses: a container reaches the host through its
/// address, as host.containers.internal): records each request, answers whether the headers
/// held the real secrets (never echoing them).
async fn test_server(real: Vec<(&'static str, String)>) -> (u16, Seen) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Default::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                return;
            };
            let seen = s2.clone();
            let real = real.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf).into_owned();
                let mut lines = text.split("\r\n");
                let path = lines
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .unwrap_or_default()
                    .to_string();
                let headers: std::collections::BTreeMap<String, String> = lines
                    .take_while(|l| !l.is_empty())
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let body: Vec<String> = real
                    .iter()
                    .map(|(h, v)| {
                        let got = headers.get(*h).map(String::as_str).unwrap_or_default();
                        format!("{h}={}", if got == v { "real" } else { "other" })
                    })
                    .collect();
                let body = body.join(" ");
                seen.lock().unwrap().push((path, headers));
                let _ = c
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    (port, seen)
}

const PROBE_KEY: &str = "pk-ProbeBindingKey-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_agent_through_the_real_network_filter() {
    let Some(u) = user() else { return };
    ensure_network_filter(&u);
    let (port, seen) = test_server(vec![
        ("authorization", format!("Bearer {TOKEN}")),
        ("x-probe-key", PROBE_KEY.to_string()),
    ])
    .await;
    let host = format!("host.containers.internal:{port}");
    let d = start_with(u, "filtered", &host).await;
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    // An addon whose secret slot goes to the same host (G4, E3: a binding's secret towards its
    // addon's egress).
    let addon = d.root.join("config/addons/probe");
    std::fs::create_dir_all(&addon).unwrap();
    std::fs::write(
        addon.join("addon.toml"),
        format!(
            "apiVersion = \"handler.addon/v1\"\nname = \"probe\"\negress = [\"{host}\"]\n[secretSlots.key]\nenv = \"PROBE_KEY\"\nrequired = true\n"
        ),
    )
    .unwrap();
    d.user.give(&d.root.join("config/addons"));
    let (s, v) = d
        .post(
            "/v1/bindings",
            json!({"name": "probe", "addon": "probe", "secrets": {"key": PROBE_KEY}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    // Guarded: filtered, enforced.
    let (s, a) = d
        .post(
            "/v1/agents",
            json!({"models": [{"account": "perso"}], "scope": d.scope, "bindings": ["probe"]}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["network"], "filtered");
    let id = a["id"].as_str().unwrap().to_string();
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", d.token)];
    let ws = open(&d.url(&id), &protocols, None)
        .await
        .unwrap_or_else(|e| panic!("the filtered agent did not start: {e}: {}", d.log()));
    let mut c = Client {
        ws,
        next: 0,
        seen: vec![],
    };
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    // The agent holds phantoms of the same length.
    let mut phantoms = Vec::new();
    for (var, real) in [("FAKE_TOKEN", TOKEN), ("PROBE_KEY", PROBE_KEY)] {
        let r = c.request("_fake/env", json!({"name": var})).await;
        let p = r["result"]["value"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string();
        assert!(p != real && p.len() == real.len(), "{var}: {p}");
        phantoms.push(p);
    }
    // Through the proxy to the allowed host: the server sees the real values.
    let r = c
        .request(
            "_fake/http",
            json!({"url": format!("http://{host}/check"), "headers": {
                "Authorization": "Bearer ${FAKE_TOKEN}", "X-Probe-Key": "${PROBE_KEY}"}}),
        )
        .await;
    assert_eq!(r["result"]["status"], 200, "{r}: {}", d.log());
    assert_eq!(
        r["result"]["body"], "authorization=real x-probe-key=real",
        "{r}"
    );
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, "/check");
        assert_eq!(seen[0].1["authorization"], format!("Bearer {TOKEN}"));
        assert_eq!(seen[0].1["x-probe-key"], PROBE_KEY);
    }
    // An unlisted host is denied while enforced.
    let r = c
        .request(
            "_fake/http",
            json!({"url": "http://unlisted.invalid/x", "headers": {}}),
        )
        .await;
    assert_eq!(r["result"]["status"], 403, "{r}");
    // The egress events are the agent's.
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let ev = d.get(&format!("/v1/agents/{id}/egress-events")).await;
        let list = ev.as_array().cloned().unwrap_or_default();
        let has = |decision: &str, host: &str, secret: Option<&str>| {
            list.iter().any(|e| {
                e["decision"] == decision
                    && e["host"] == host
                    && secret.is_none_or(|s| e["secret"] == s)
            })
        };
        if has("injected", &host, Some("accounts/perso/token"))
            && has("injected", &host, Some("bindings/probe/key"))
            && has("denied", "unlisted.invalid:80", None)
        {
            break list;
        }
        assert!(Instant::now() < deadline, "egress events: {ev}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        events
            .iter()
            .any(|e| e["decision"] == "allowed" && e["host"] == host.as_str()),
        "{events:?}"
    );
    // A.4: log-only, live: the same host now passes the filter (and fails to resolve: 502).
    let (s, v) = d
        .patch(&format!("/v1/agents/{id}"), json!({"egress": "log-only"}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["egress"], "log-only");
    let r = c
        .request(
            "_fake/http",
            json!({"url": "http://unlisted.invalid/x", "headers": {}}),
        )
        .await;
    assert_ne!(r["result"]["status"], 403, "{r}: {}", d.log());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ev = d.get(&format!("/v1/agents/{id}/egress-events")).await;
        if ev
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["decision"] == "unlisted" && e["host"] == "unlisted.invalid:80")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no unlisted event: {ev}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Back to enforce: denied again.
    let (s, _) = d
        .patch(&format!("/v1/agents/{id}"), json!({"egress": "enforce"}))
        .await;
    assert_eq!(s, 200);
    let r = c
        .request(
            "_fake/http",
            json!({"url": "http://unlisted.invalid/y", "headers": {}}),
        )
        .await;
    assert_eq!(r["result"]["status"], 403, "{r}");
    // A.4: a PUT that lists the host opens it live (set-allow), one that drops it closes it;
    // the model's host and the addon's stay reachable throughout.
    let agent_body = |allow: Value| {
        json!({"models": [{"account": "perso"}], "scope": d.scope, "bindings": ["probe"],
            "allow": allow})
    };
    let (s, v) = d
        .put(
            &format!("/v1/agents/{id}"),
            agent_body(json!(["unlisted.invalid:80"])),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let r = c
        .request(
            "_fake/http",
            json!({"url": "http://unlisted.invalid/z", "headers": {}}),
        )
        .await;
    assert_ne!(r["result"]["status"], 403, "{r}: {}", d.log());
    let (s, v) = d
        .put(&format!("/v1/agents/{id}"), agent_body(json!([])))
        .await;
    assert_eq!(s, 200, "{v}");
    let r = c
        .request(
            "_fake/http",
            json!({"url": "http://unlisted.invalid/w", "headers": {}}),
        )
        .await;
    assert_eq!(r["result"]["status"], 403, "{r}");
    let r = c
        .request(
            "_fake/http",
            json!({"url": format!("http://{host}/check"), "headers": {
                "Authorization": "Bearer ${FAKE_TOKEN}", "X-Probe-Key": "${PROBE_KEY}"}}),
        )
        .await;
    assert_eq!(r["result"]["status"], 200, "{r}: {}", d.log());
    // Close: the sandbox and its proxy go.
    let sandbox = d.get(&format!("/v1/agents/{id}")).await["connections"][0]["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    c.ws.close(None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    while !d.containers(&format!("handler.agent={id}")).is_empty()
        || !d
            .containers(&format!("handler.sandbox={sandbox}"))
            .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "a container outlived its socket: {}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = d.log();
    assert!(!log.contains(TOKEN), "the token reached handlerd's log");
    assert!(
        !log.contains(PROBE_KEY),
        "the binding's key reached handlerd's log"
    );
}
