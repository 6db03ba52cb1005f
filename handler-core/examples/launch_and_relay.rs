//! Launch a sandbox and relay ACP with handler-core as a library: a SandboxSpec (contract A) is
//! handed to the sandbox executable on fd 3 by `ProcessLauncher`, and one `initialize` request
//! goes to the agent and its answer back through the policy pipeline (C.4), as handlerd does.
//! The agent here is a two-line shell script inside the busybox test image, so no model is needed.
//!
//! ```sh
//! # as an unprivileged user, with rootless Podman and the image .ci/setup-podman.sh makes:
//! HANDLER_SANDBOX_LAUNCHER=target/debug/handler-sandbox-podman \
//!     cargo run -p handler-core --example launch_and_relay
//! ```
//! `HANDLER_SANDBOX_LAUNCHER` is the sandbox executable and any prefix (split on spaces; e.g.
//! a `setpriv …` that runs it as another user); `HANDLER_EXAMPLE_IMAGE` the image.
#![allow(
    unreachable_pub,
    reason = "its items are also a module of handler-bins' test binary"
)]

use std::time::Duration;

use handler_contracts::SandboxSpec;
use handler_contracts::sandbox::NetworkPolicy;
use handler_core::daemon::launch::launcher::{Launcher, ProcessLauncher};
use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The agent: answers the first request it reads with a fixed `initialize` result.
const AGENT: &str = r#"read -r line; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}'; read -r rest || true"#;

/// What went wrong, named.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    /// The spec is not a valid SandboxSpec.
    #[error("the spec: {0}")]
    Spec(#[from] serde_json::Error),
    /// The pipeline's configuration is refused.
    #[error(transparent)]
    Policy(#[from] handler_policy::ConfigError),
    /// The sandbox could not start.
    #[error(transparent)]
    Launch(#[from] handler_core::daemon::launch::launcher::LauncherError),
    /// The agent's stdio failed.
    #[error("the agent's stdio: {0}")]
    Io(#[from] std::io::Error),
    /// The agent ended or said nothing within 60 s.
    #[error("the agent gave no answer (its launcher's stderr: {0})")]
    NoAnswer(String),
}

/// The spec of a sandbox named `name` running the script agent in `image`, with no network.
pub fn spec(name: &str, image: &str) -> Result<SandboxSpec, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": image,
        "argv": ["sh", "-c", AGENT], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/agent"}, "mounts": [], "files": [],
        "writablePaths": [], "network": {"mode": "none"}, "injections": []
    }))
}

/// Launches the sandbox with `launcher`, relays one `initialize` each way through the pipeline
/// and returns what reached the client, then the launcher's exit code.
pub async fn run(
    launcher: Vec<String>,
    image: &str,
) -> Result<(String, Option<i32>), ExampleError> {
    let spec = spec(&format!("handler-example-{}", std::process::id()), image)?;
    let mut pipeline = Pipeline::new(PolicyConfig::new("/tmp", NetworkPolicy::None))?;
    let mut sandbox = ProcessLauncher {
        command: launcher,
        records: None,
    }
    .launch(&spec)?;
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#;
    for action in pipeline.handle(Direction::FromClient(ClientId(1)), request) {
        if let Action::ToAgent(bytes) = action {
            sandbox.stdin.write_all(&bytes).await?;
            sandbox.stdin.write_all(b"\n").await?;
        }
    }
    let mut line = String::new();
    let mut out = BufReader::new(&mut sandbox.stdout);
    let read = tokio::time::timeout(Duration::from_secs(60), out.read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        let _ = sandbox.child.start_kill();
        let mut err = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut sandbox.stderr, &mut err).await;
        return Err(ExampleError::NoAnswer(
            err.trim().chars().take(2000).collect(),
        ));
    }
    let mut answer = String::new();
    for action in pipeline.handle(Direction::FromAgent, line.trim_end().as_bytes()) {
        if let Action::ToClient(_, bytes) = action {
            answer = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    drop(sandbox.stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), sandbox.child.wait()).await;
    Ok((
        answer,
        status.ok().and_then(Result::ok).and_then(|s| s.code()),
    ))
}

#[tokio::main]
async fn main() {
    let launcher = std::env::var("HANDLER_SANDBOX_LAUNCHER")
        .unwrap_or_else(|_| "handler-sandbox-podman".into())
        .split_whitespace()
        .map(String::from)
        .collect();
    let image = std::env::var("HANDLER_EXAMPLE_IMAGE")
        .unwrap_or_else(|_| "localhost/handler-test-busybox:latest".into());
    match run(launcher, &image).await {
        Ok((answer, code)) => {
            println!("the client got: {answer}");
            println!("the sandbox ended with {code:?}");
        }
        Err(e) => {
            eprintln!("launch_and_relay: {e}");
            std::process::exit(1);
        }
    }
}
