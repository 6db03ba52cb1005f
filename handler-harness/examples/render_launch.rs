//! Renders the launch of a Codex agent that runs on a local model server (a provider), from the
//! platform's Codex descriptor and an AgentSpec, and prints what the sandbox is asked to run:
//! image, argv, environment (secret values hidden), generated files, mounts and egress.
//!
//! `cargo run -p handler-harness --example render_launch`
#![allow(
    unreachable_pub,
    reason = "its items are also a module of the crate's test binary"
)]

use std::collections::BTreeMap;

use handler_contracts::access::{AgentSpec, Provider};
use handler_contracts::harness::{NeutralConfig, PermissionMode, RenderInput};
use handler_harness::{RenderContext, RenderError, builtin, render};

/// The provider: a llama.cpp server on the machine, one model, a key in Handler's store.
const PROVIDER: &str = r#"
apiVersion = "handler.provider/v1"
apiKey = { secret = "providers/llamacpp/apiKey" }
[endpoints]
responses = "http://127.0.0.1:8080/v1"
[[models]]
id = "qwen3.8-27B"
contextWindow = 200000
"#;

/// The key's value as the control plane resolved it (here a visibly fake one).
const API_KEY: &str = "sk-FAKE-0000000000000000";

/// The launch, described one line per item, or render's refusal.
pub fn run() -> Result<Vec<String>, RenderError> {
    let descriptor = builtin("codex")
        .expect("codex is a platform harness")
        .expect("the platform's descriptors parse");
    let provider: Provider = handler_contracts::parse::from_toml("llamacpp.toml", PROVIDER)?;
    let agent = AgentSpec {
        harness: "codex".into(),
        account: None,
        provider: Some("llamacpp".into()),
        account_login: None,
        account_plan: None,
        provider_spec: Some(provider),
        files: BTreeMap::new(),
        config: NeutralConfig {
            model: Some("qwen3.8-27B".into()),
            account_connectors: false,
        },
    };
    let input = RenderInput {
        descriptor,
        agent,
        scope: "/home/ada/src/shop".into(),
        secrets: BTreeMap::from([("apiKey".to_string(), API_KEY.to_string())]),
        skills: vec![],
        mcp_servers: vec![],
        terminal: None,
        permission_mode: PermissionMode::Ask,
        caches: BTreeMap::new(),
    };
    let ctx = RenderContext {
        data_dir: "/home/ada/.local/share/handler-ai".into(),
        agent_id: "a-7f3c".into(),
        instructions: None,
        shared_state: None,
    };
    let launch = render(&input, &ctx)?;
    let mut lines = vec![
        format!("image: {}", launch.image),
        format!("argv: {}", launch.argv.join(" ")),
    ];
    for (k, v) in &launch.env {
        let shown = if v == API_KEY { "[secret apiKey]" } else { v };
        lines.push(format!("env: {k}={shown}"));
    }
    for f in &launch.files {
        lines.push(format!("file: {} ({} bytes)", f.target, f.content.len()));
    }
    for m in &launch.mounts {
        lines.push(format!("mount: {} -> {}", m.source, m.target));
    }
    for e in &launch.egress {
        lines.push(format!("egress: {e}"));
    }
    Ok(lines)
}

fn main() -> Result<(), RenderError> {
    for l in run()? {
        println!("{l}");
    }
    Ok(())
}
