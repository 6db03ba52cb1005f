//! Properties over random traffic: no input panics; with an agent that answers what it gets and
//! clients that answer what they are asked, every client request gets exactly one response,
//! carrying that client's own id (ids never leak between clients), every agent request gets
//! exactly one answer, and the ids in flight at the agent are unique.

use std::collections::{BTreeMap, HashMap};

use handler_contracts::harness::SessionDefaults;
use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig, UnattendedMode};
use proptest::prelude::*;
use serde_json::{Value, json};

fn config(defaults: bool, unattended: bool) -> PolicyConfig {
    let mut cfg = PolicyConfig::new("/w", NetworkPolicy::None);
    cfg.secrets = vec![("K".into(), "secret-value-42".into())];
    if defaults {
        cfg.session_defaults = SessionDefaults {
            mode_id: Some("plan".into()),
            config_options: BTreeMap::from([("model".into(), "m".into())]),
            mcp_servers: vec![],
        };
    }
    if unattended {
        cfg.unattended = Some(UnattendedMode::Approve);
    }
    cfg
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes, either way, never panic; every action is well-formed JSON.
    #[test]
    fn arbitrary_frames_never_panic(frames in prop::collection::vec((0u8..3, prop::collection::vec(any::<u8>(), 0..200)), 1..20)) {
        let mut p = Pipeline::new(config(true, false)).unwrap();
        for (d, f) in frames {
            let dir = if d == 0 { Direction::FromAgent } else { Direction::FromClient(ClientId(d as u64)) };
            for a in p.handle(dir, &f) {
                if let Action::ToAgent(b) | Action::ToClient(_, b) | Action::Broadcast { message: b, .. } = a {
                    serde_json::from_slice::<Value>(&b).expect("actions carry JSON");
                }
            }
        }
    }

    /// JSON-shaped frames (valid envelopes with random members) never panic either.
    #[test]
    fn json_rpc_shaped_frames_never_panic(msgs in prop::collection::vec(message(), 1..30), unattended in any::<bool>()) {
        let mut p = Pipeline::new(config(true, unattended)).unwrap();
        for (d, m) in msgs {
            let dir = if d == 0 { Direction::FromAgent } else { Direction::FromClient(ClientId(d as u64)) };
            for a in p.handle(dir, m.to_string().as_bytes()) {
                if let Action::ToAgent(b) | Action::ToClient(_, b) | Action::Broadcast { message: b, .. } = a {
                    let v: Value = serde_json::from_slice(&b).expect("actions carry JSON");
                    prop_assert!(!v.to_string().contains("secret-value-42") || matches!(dir, Direction::FromClient(_)));
                }
            }
        }
    }

    #[test]
    fn every_request_gets_exactly_one_response(ops in prop::collection::vec(op(), 1..60), defaults in any::<bool>(), unattended in any::<bool>()) {
        run_model(ops, defaults, unattended)?;
    }
}

fn id_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..4).prop_map(Value::from),
        Just(json!("a")),
        Just(json!("0")),
        Just(json!(1.5)),
        Just(json!(4294967296u64)),
    ]
}

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "initialize",
        "session/new",
        "session/load",
        "session/prompt",
        "session/set_mode",
        "session/list",
        "session/request_permission",
        "fs/read_text_file",
        "terminal/create",
        "_handler/x",
        "_ext/y",
        "session/update",
    ])
}

fn params() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"cwd": "/w", "mcpServers": []})),
        Just(
            json!({"cwd": "/etc", "mcpServers": [{"type": "http", "name": "x", "url": "https://h/"}]})
        ),
        Just(json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "secret-value-42"}]})),
        Just(
            json!({"sessionId": "s1", "toolCall": {"toolCallId": "t"}, "options": [{"optionId": "o", "kind": "allow_once"}]})
        ),
        Just(
            json!({"sessionId": "s1", "update": {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "secret-value-42"}, "_meta": {"handler.dev/seq": 1}})
        ),
        Just(json!({"clientCapabilities": {"fs": {"readTextFile": true}, "terminal": true}})),
        Just(json!([1, 2])),
        Just(json!(null)),
        Just(json!({"sessionId": 5, "cwd": ["/"]})),
    ]
}

fn message() -> impl Strategy<Value = (u8, Value)> {
    let req = (id_value(), method(), params())
        .prop_map(|(id, m, p)| json!({"jsonrpc": "2.0", "id": id, "method": m, "params": p}));
    let note =
        (method(), params()).prop_map(|(m, p)| json!({"jsonrpc": "2.0", "method": m, "params": p}));
    let resp = (id_value(), params(), any::<bool>()).prop_map(|(id, p, e)| {
        if e {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "secret-value-42"}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": "s1", "outcome": p}})
        }
    });
    (0u8..3, prop_oneof![req, note, resp])
}

#[derive(Debug, Clone)]
enum Op {
    /// Client c sends a request.
    ClientRequest {
        c: u64,
        id: Value,
        method: &'static str,
        params: Value,
    },
    /// The agent answers one of the requests it holds.
    AgentAnswer { pick: usize, error: bool },
    /// The agent asks the clients something.
    AgentRequest { method: &'static str },
    /// Client c answers one of the agent's requests it saw.
    ClientAnswer { c: u64, pick: usize },
    /// The agent sends a notification.
    AgentNotification,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3, id_value(), method(), params())
            .prop_map(|(c, id, method, params)| Op::ClientRequest { c, id, method, params }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(pick, error)| Op::AgentAnswer { pick, error }),
        2 => prop::sample::select(vec!["session/request_permission", "fs/read_text_file", "_ext/ask", "_handler/no"])
            .prop_map(|method| Op::AgentRequest { method }),
        2 => (0u64..3, any::<usize>()).prop_map(|(c, pick)| Op::ClientAnswer { c, pick }),
        1 => Just(Op::AgentNotification),
    ]
}

#[derive(Default)]
struct World {
    /// Requests the agent holds: (id as sent to it, method).
    agent_holds: Vec<(Value, String)>,
    /// Responses the agent got to its own requests, by its id.
    agent_answers: HashMap<String, usize>,
    agent_sent: Vec<String>,
    next_agent_id: u64,
    next_session: u64,
    /// Per client: ids of the requests sent (multiset) and of the responses received.
    sent: HashMap<u64, Vec<String>>,
    got: HashMap<u64, Vec<String>>,
    /// Agent requests the clients saw, by id.
    visible: Vec<Value>,
}

impl World {
    fn apply(&mut self, actions: Vec<Action>) -> Result<(), TestCaseError> {
        for a in actions {
            match a {
                Action::ToAgent(b) => {
                    let v: Value = serde_json::from_slice(&b).unwrap();
                    if let Some(m) = v.get("method").and_then(Value::as_str) {
                        if let Some(id) = v.get("id") {
                            prop_assert!(
                                !self.agent_holds.iter().any(|(h, _)| h == id),
                                "id {id} sent to the agent twice while in flight"
                            );
                            self.agent_holds.push((id.clone(), m.to_owned()));
                        }
                    } else {
                        *self.agent_answers.entry(v["id"].to_string()).or_default() += 1;
                    }
                }
                Action::ToClient(c, b) => {
                    let v: Value = serde_json::from_slice(&b).unwrap();
                    prop_assert!(v.get("method").is_none(), "only responses go to one client");
                    self.got.entry(c.0).or_default().push(v["id"].to_string());
                }
                Action::Broadcast { message, .. } => {
                    let v: Value = serde_json::from_slice(&message).unwrap();
                    if let (Some(_), Some(id)) = (v.get("method"), v.get("id")) {
                        self.visible.push(id.clone());
                    }
                }
                Action::Log(_) => {}
            }
        }
        Ok(())
    }

    fn agent_answer(
        &mut self,
        p: &mut Pipeline,
        pick: usize,
        error: bool,
    ) -> Result<(), TestCaseError> {
        if self.agent_holds.is_empty() {
            return Ok(());
        }
        let (id, method) = self.agent_holds.remove(pick % self.agent_holds.len());
        let msg = if error {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "no"}})
        } else if method == "session/new" {
            self.next_session += 1;
            json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": format!("s{}", self.next_session)}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        };
        let actions = p.handle(Direction::FromAgent, msg.to_string().as_bytes());
        self.apply(actions)
    }
}

fn run_model(ops: Vec<Op>, defaults: bool, unattended: bool) -> Result<(), TestCaseError> {
    let mut p = Pipeline::new(config(defaults, unattended)).unwrap();
    let mut w = World::default();
    for op in ops {
        match op {
            Op::ClientRequest {
                c,
                id,
                method,
                params,
            } => {
                let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
                w.sent.entry(c).or_default().push(id.to_string());
                let actions = p.handle(
                    Direction::FromClient(ClientId(c)),
                    msg.to_string().as_bytes(),
                );
                w.apply(actions)?;
            }
            Op::AgentAnswer { pick, error } => w.agent_answer(&mut p, pick, error)?,
            Op::AgentRequest { method } => {
                let id = w.next_agent_id;
                w.next_agent_id += 1;
                w.agent_sent.push(id.to_string());
                let msg = json!({"jsonrpc": "2.0", "id": id, "method": method,
                    "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t"},
                               "options": [{"optionId": "ok", "kind": "allow_once"}]}});
                let actions = p.handle(Direction::FromAgent, msg.to_string().as_bytes());
                w.apply(actions)?;
            }
            Op::ClientAnswer { c, pick } => {
                if !w.visible.is_empty() {
                    let id = w.visible[pick % w.visible.len()].clone();
                    let msg = json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "cancelled"}}});
                    let actions = p.handle(
                        Direction::FromClient(ClientId(c)),
                        msg.to_string().as_bytes(),
                    );
                    w.apply(actions)?;
                }
            }
            Op::AgentNotification => {
                let msg = json!({"jsonrpc": "2.0", "method": "session/update",
                    "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}}});
                let actions = p.handle(Direction::FromAgent, msg.to_string().as_bytes());
                w.apply(actions)?;
            }
        }
    }
    // Drain: the agent answers everything (P7 may ask more), then client 0 answers what is left.
    let mut guard = 0;
    while !w.agent_holds.is_empty() {
        w.agent_answer(&mut p, 0, false)?;
        guard += 1;
        prop_assert!(guard < 10_000);
    }
    for id in w.visible.clone() {
        let msg =
            json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "cancelled"}}});
        let actions = p.handle(
            Direction::FromClient(ClientId(0)),
            msg.to_string().as_bytes(),
        );
        w.apply(actions)?;
    }
    prop_assert_eq!(p.in_flight(), 0);
    prop_assert_eq!(p.pending_requests().len(), 0);
    for c in 0..3u64 {
        let mut sent = w.sent.remove(&c).unwrap_or_default();
        let mut got = w.got.remove(&c).unwrap_or_default();
        sent.sort();
        got.sort();
        prop_assert_eq!(sent, got, "client {}: request ids vs response ids", c);
    }
    for id in &w.agent_sent {
        prop_assert_eq!(
            w.agent_answers.get(id).copied().unwrap_or(0),
            1,
            "agent request {} answers",
            id
        );
    }
    Ok(())
}
