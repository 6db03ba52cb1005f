//! Shared helpers of the daemon's tests: the fake agent built static, a daemon on a free port in
//! a throwaway home, an HTTP client, and a log buffer to grep for secrets.

#![allow(dead_code)]

pub(crate) use test_support::acp;
pub(crate) use test_support::descriptor::fake as fake_descriptor;
pub(crate) use test_support::static_build::fakes;

use std::sync::{Arc, Mutex, OnceLock};

use handler_core::daemon::{self, AppState, DaemonConfig};
use serde_json::Value;

/// Everything the daemon logged in this test binary.
pub(crate) fn logs() -> String {
    String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned()
}

fn log_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static B: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    B.get_or_init(|| Arc::new(Mutex::new(Vec::new())))
}

#[derive(Clone)]
struct BufWriter(Arc<Mutex<Vec<u8>>>);
impl std::io::Write for BufWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn init_logs() {
    static I: OnceLock<()> = OnceLock::new();
    I.get_or_init(|| {
        let buf = log_buffer().clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || BufWriter(buf.clone()))
            .try_init();
    });
}

/// A daemon for one test.
pub(crate) struct TestDaemon {
    pub url: String,
    pub port: u16,
    pub token: String,
    pub home: tempfile::TempDir,
    pub state: AppState,
    pub http: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Options of a test daemon.
#[derive(Default)]
pub(crate) struct Options {
    /// The sandbox command; default: the fake sandbox logging to `<home>/sandbox.log`.
    pub sandbox_command: Option<Vec<String>>,
    pub max_message_bytes: Option<usize>,
    pub origins: Vec<String>,
    pub secret_command_timeout: Option<std::time::Duration>,
    /// `$HANDLER_BUILD_CA_BUNDLE` (extra CAs of image builds and skill imports).
    pub build_ca_bundle: Option<std::path::PathBuf>,
    /// `$HANDLER_KNOWLEDGE_DIR`.
    pub knowledge_dir: Option<std::path::PathBuf>,
    /// An attachment's queue (F.7), when not the default.
    pub session_queue: Option<usize>,
    /// `$HANDLER_IMAGE_FACTS_TTL`, when not the default.
    pub image_facts_ttl: Option<std::time::Duration>,
    /// `$HANDLER_TERMINAL` (the web UI's Log in window).
    pub terminal: Option<String>,
    /// `$HANDLER_CLI`.
    pub handler_cli: Option<std::path::PathBuf>,
    /// `$HANDLER_SKILL_CREATOR_URL` / `_DIGEST` (the built-in skill-creator's upstream skill).
    pub skill_creator_source: handler_core::daemon::config::UpstreamOverride,
    /// The images the fake runtime has from the start (`<home>/sandbox.log.images`).
    pub images: Vec<String>,
}

impl TestDaemon {
    /// A daemon with the fake harness and the fake sandbox.
    pub(crate) async fn start() -> TestDaemon {
        Self::start_with(Options::default()).await
    }

    pub(crate) async fn start_with(o: Options) -> TestDaemon {
        init_logs();
        let f = fakes();
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join("code/app")).unwrap();
        std::fs::create_dir_all(h.join("harnesses/fake")).unwrap();
        if !o.images.is_empty() {
            std::fs::write(h.join("sandbox.log.images"), o.images.join("\n") + "\n").unwrap();
        }
        std::fs::write(
            h.join("harnesses/fake/harness.toml"),
            fake_descriptor(&f.agent),
        )
        .unwrap();
        let mut c = DaemonConfig::with_home(h);
        c.port = 0;
        c.harnesses_dirs = vec![h.join("harnesses")];
        c.sandbox_command = o.sandbox_command.unwrap_or_else(|| {
            vec![
                f.sandbox.display().to_string(),
                "--log".into(),
                h.join("sandbox.log").display().to_string(),
            ]
        });
        if let Some(m) = o.max_message_bytes {
            c.max_message_bytes = m;
        }
        c.allowed_origins.extend(o.origins);
        if let Some(t) = o.secret_command_timeout {
            c.secret_command_timeout = t;
        }
        c.build_ca_bundle = o.build_ca_bundle;
        if o.knowledge_dir.is_some() {
            c.knowledge_dir = o.knowledge_dir;
        }
        if let Some(t) = o.image_facts_ttl {
            c.image_facts_ttl = t;
        }
        if let Some(q) = o.session_queue {
            c.session_queue = q;
        }
        c.terminal = o.terminal;
        c.handler_cli = o.handler_cli;
        c.skill_creator_source = o.skill_creator_source;
        let state = daemon::build(c, None).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let running = daemon::serve(state.clone(), async {
            let _ = rx.await;
        })
        .await
        .unwrap();
        let token = state.token();
        TestDaemon {
            url: format!("http://{}", running.addr),
            port: running.addr.port(),
            token,
            home,
            state,
            http: reqwest::Client::new(),
            shutdown: Some(tx),
            task: Some(running.task),
        }
    }

    /// The scope every test agent works in.
    pub(crate) fn scope(&self) -> String {
        std::fs::canonicalize(self.home.path().join("code/app"))
            .unwrap()
            .display()
            .to_string()
    }

    /// An authorized request; answers status, body (JSON or null) and content type.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, String) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self
            .http
            .request(m, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let res = r.send().await.unwrap();
        let status = res.status().as_u16();
        let ct = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = res.text().await.unwrap();
        record_body(&text);
        let v = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, v, ct)
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let (s, v, _) = self.call("GET", path, None).await;
        (s, v)
    }
    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, v, _) = self.call("POST", path, Some(body)).await;
        (s, v)
    }
    pub(crate) async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, v, _) = self.call("PUT", path, Some(body)).await;
        (s, v)
    }
    pub(crate) async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, v, _) = self.call("PATCH", path, Some(body)).await;
        (s, v)
    }
    pub(crate) async fn delete(&self, path: &str) -> (u16, Value) {
        let (s, v, _) = self.call("DELETE", path, None).await;
        (s, v)
    }

    /// What the fake sandbox recorded.
    pub(crate) fn sandbox_log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("sandbox.log")).unwrap_or_default()
    }

    /// A token account of the fake harness, logged in with `token`.
    pub(crate) async fn fake_account(&self, name: &str, token: &str) {
        let (s, v) = self
            .post(
                "/v1/accounts",
                serde_json::json!({"name": name, "harness": "fake", "token": {"value": token}}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }

    /// An ad-hoc agent in the scope on `account`, `extra` merged in.
    pub(crate) async fn fake_agent(&self, account: &str, extra: Value) -> Value {
        let mut body = serde_json::json!({"models": [{"account": account}], "scope": self.scope()});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let (s, v) = self.post("/v1/agents", body).await;
        assert_eq!(s, 201, "{v}");
        v
    }

    /// Stops it as SIGTERM would: connections closed, sandboxes stopped.
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// Every response body the tests saw (for the secrets grep).
pub(crate) fn bodies() -> String {
    body_buffer().lock().unwrap().clone()
}

fn body_buffer() -> &'static Mutex<String> {
    static B: OnceLock<Mutex<String>> = OnceLock::new();
    B.get_or_init(|| Mutex::new(String::new()))
}

pub(crate) fn record_body(text: &str) {
    let mut b = body_buffer().lock().unwrap();
    b.push_str(text);
    b.push('\n');
}

/// Asserts an RFC 9457 problem with `status` and `title`.
pub(crate) fn assert_problem(status: u16, body: &Value, want_status: u16, title: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["status"], want_status, "{body}");
    assert_eq!(body["title"], title, "{body}");
    assert!(body["type"].is_string(), "{body}");
}

impl TestDaemon {
    /// The ACP URL of an agent, with a query.
    pub(crate) fn acp_url(&self, agent: &str, query: &str) -> String {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("ws://127.0.0.1:{}/v1/agents/{agent}/acp{q}", self.port)
    }
    /// The subprotocols a client offers.
    pub(crate) fn protocols(&self) -> Vec<String> {
        vec!["acp.v1".into(), format!("bearer.{}", self.token)]
    }
    /// Connects to an agent's ACP endpoint with the token.
    pub(crate) async fn acp(&self, agent: &str) -> acp::Acp {
        acp::open(&self.acp_url(agent, ""), &self.protocols(), None)
            .await
            .expect("ACP socket opens")
    }
}
