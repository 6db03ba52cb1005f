//! Runs the ACP policy pipeline over a short transcript — a client opening a session outside the
//! agent's folder and then inside it, the agent answering, the agent leaking a token and asking
//! to read a host file — and prints what the pipeline does with each frame.
//!
//! `cargo run -p handler-policy --example run_transcript`
#![allow(
    unreachable_pub,
    reason = "its items are also a module of the crate's test binary"
)]

use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig};

/// The transcript: (who sends, the frame).
const TRANSCRIPT: &[(&str, &str)] = &[
    (
        "client",
        r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/etc","mcpServers":[]}}"#,
    ),
    (
        "client",
        r#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/work/project","mcpServers":[]}}"#,
    ),
    (
        "agent",
        r#"{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}"#,
    ),
    (
        "agent",
        r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"found ghp_0123456789abcdef in .env"}}}}"#,
    ),
    (
        "agent",
        r#"{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s-1","path":"/home/ada/.ssh/id_ed25519"}}"#,
    ),
];

/// The pipeline's actions over [`TRANSCRIPT`], one line per action, for a project at
/// `/work/project` whose agent holds the secret `GITHUB_TOKEN`.
pub fn run() -> Result<Vec<String>, handler_policy::ConfigError> {
    let mut cfg = PolicyConfig::new("/work/project", NetworkPolicy::Open);
    cfg.secrets = vec![("GITHUB_TOKEN".into(), "ghp_0123456789abcdef".into())];
    let mut pipeline = Pipeline::new(cfg)?;
    let client = ClientId(1);
    let mut lines = Vec::new();
    for (from, frame) in TRANSCRIPT {
        let direction = if *from == "client" {
            Direction::FromClient(client)
        } else {
            Direction::FromAgent
        };
        lines.push(format!("{from} → {frame}"));
        for action in pipeline.handle(direction, frame.as_bytes()) {
            lines.push(format!("    {}", describe(&action)));
        }
    }
    Ok(lines)
}

/// One action as a line of text.
fn describe(action: &Action) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match action {
        Action::ToAgent(m) => format!("to the agent: {}", text(m)),
        Action::ToClient(c, m) => format!("to client {}: {}", c.0, text(m)),
        Action::Broadcast { message, .. } => format!("to every client: {}", text(message)),
        Action::Log(event) => format!("log: {event:?}"),
    }
}

fn main() -> Result<(), handler_policy::ConfigError> {
    for l in run()? {
        println!("{l}");
    }
    Ok(())
}
