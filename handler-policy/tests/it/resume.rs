//! `Pipeline::resume`: a pipeline taking over an agent another one opened (issue 28 item 6) —
//! the session is open and translated, the prompt in flight reaches its owner, the agent's
//! later requests are relayed as before.

use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig};
use serde_json::{Value, json};

fn to_client(actions: &[Action]) -> Vec<(ClientId, Value)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToClient(c, m) => Some((*c, serde_json::from_slice(m).unwrap())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_resumed_pipeline_ends_the_prompt_it_took_over_and_relays_the_session() {
    let mut cfg = PolicyConfig::new("/w", NetworkPolicy::None);
    // The clients know the session as `client-sid`; the agent (restarted with session/new
    // before its first turn, F.6.2) as `agent-sid`.
    cfg.client_session_id = Some("client-sid".into());
    let daemon = ClientId(0);
    let mut p = Pipeline::resume(
        cfg,
        "agent-sid",
        true,
        daemon,
        &[("\"handler-prompt\"".into(), "session/prompt".into())],
    )
    .unwrap();
    assert_eq!(p.agent_load_session(), Some(true));
    assert_eq!(p.agent_sessions(), vec!["agent-sid".to_string()]);
    assert_eq!(p.sessions(), vec!["client-sid".to_string()]);
    assert_eq!(p.in_flight(), 1);
    // The agent's update is shown with the clients' id.
    let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "agent-sid", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}});
    let out = p.handle(Direction::FromAgent, update.to_string().as_bytes());
    let shown = out.iter().find_map(|a| match a {
        Action::Broadcast { message, .. } => {
            Some(serde_json::from_slice::<Value>(message).unwrap())
        }
        _ => None,
    });
    assert_eq!(shown.unwrap()["params"]["sessionId"], "client-sid");
    // The prompt's answer reaches the daemon, with the id the agent had.
    let done =
        json!({"jsonrpc": "2.0", "id": "handler-prompt", "result": {"stopReason": "end_turn"}});
    let out = to_client(&p.handle(Direction::FromAgent, done.to_string().as_bytes()));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, daemon);
    assert_eq!(out[0].1["id"], "handler-prompt");
    assert_eq!(out[0].1["result"]["stopReason"], "end_turn");
    assert_eq!(p.in_flight(), 0);
    // A client's next prompt on the clients' id goes to the agent's session.
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": "client-sid", "prompt": []}});
    let out = p.handle(
        Direction::FromClient(ClientId(4)),
        prompt.to_string().as_bytes(),
    );
    let sent = out.iter().find_map(|a| match a {
        Action::ToAgent(m) => Some(serde_json::from_slice::<Value>(m).unwrap()),
        _ => None,
    });
    assert_eq!(sent.unwrap()["params"]["sessionId"], "agent-sid", "{out:?}");
}

#[test]
fn without_a_translation_the_agents_id_is_the_clients() {
    let cfg = PolicyConfig::new("/w", NetworkPolicy::None);
    let p = Pipeline::resume(cfg, "s1", false, ClientId(0), &[]).unwrap();
    assert_eq!(p.sessions(), vec!["s1".to_string()]);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.agent_load_session(), Some(false));
}
