//! Transcript fixtures (`fixtures/policy/*.jsonl`): each line a message in with its direction
//! and the exact actions out, one file per rule. `INSTA_UPDATE=always` (the one golden switch,
//! docs/testing.md) rewrites the `out` fields from what the pipeline does (then read the diff).
//!
//! Line shapes: `{"config": PolicyConfig, "links": {path: canonical}}` starts a fresh pipeline
//! (links feed P2's resolver); `{"from": "client:N"|"agent", "in": message-or-raw-string,
//! "out": [...]}` is one frame; `{"detach": N}` detaches a client; `{"comment": "..."}`.
//! An action out is `{"to": "agent"|"client:N"|"all"|"all-but:N", ...}` with `"same": true`
//! (the input's bytes, unchanged), `"msg": value` (bytes equal to the value's compact JSON) or
//! `"raw": "text"`; or `{"log": event}`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig};
use serde_json::{Value, json};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/policy")
}

fn client(s: &str) -> Option<u64> {
    s.strip_prefix("client:").and_then(|n| n.parse().ok())
}

fn render(input: &[u8], to: String, bytes: &[u8]) -> Value {
    if bytes == input {
        return json!({"to": to, "same": true});
    }
    let text = String::from_utf8(bytes.to_vec()).expect("output is UTF-8");
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) if serde_json::to_string(&v).unwrap() == text => json!({"to": to, "msg": v}),
        Ok(_) => json!({"to": to, "raw": text}),
        Err(e) => panic!("output is not JSON ({e}): {text}"),
    }
}

fn run_fixture(name: &str) {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let update = test_support::golden::updating();
    let mut pipeline: Option<Pipeline> = None;
    let mut rewritten = Vec::new();
    let mut failures = Vec::new();
    let mut frames = 0;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            rewritten.push(line.to_string());
            continue;
        }
        let mut step: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", n + 1));
        if let Some(cfg) = step.get("config") {
            let cfg: PolicyConfig = serde_json::from_value(cfg.clone()).expect("config");
            let mut p = Pipeline::new(cfg).expect("valid config");
            if let Some(links) = step.get("links") {
                let links: BTreeMap<String, String> =
                    serde_json::from_value(links.clone()).unwrap();
                p = p.with_resolver(move |path: &str| {
                    // The longest link that is the path or one of its parents.
                    let hit = links
                        .iter()
                        .filter(|(l, _)| path == l.as_str() || path.starts_with(&format!("{l}/")))
                        .max_by_key(|(l, _)| l.len());
                    match hit {
                        Some((_, t)) if t == "ENOENT" => {
                            Err("no such file or directory".to_string())
                        }
                        Some((l, t)) => Ok(format!("{t}{}", &path[l.len()..])),
                        None => Ok(path.to_string()),
                    }
                });
            }
            pipeline = Some(p);
            rewritten.push(line.to_string());
            continue;
        }
        if step.get("from").is_none() && step.get("detach").is_none() {
            rewritten.push(line.to_string());
            continue;
        }
        let p = pipeline
            .as_mut()
            .unwrap_or_else(|| panic!("{name}:{}: no config line yet", n + 1));
        if let Some(c) = step.get("detach") {
            p.detach(ClientId(c.as_u64().unwrap()));
            rewritten.push(line.to_string());
            continue;
        }
        let Some(from) = step.get("from").and_then(Value::as_str) else {
            rewritten.push(line.to_string());
            continue;
        };
        frames += 1;
        let direction = match client(from) {
            Some(c) => Direction::FromClient(ClientId(c)),
            None if from == "agent" => Direction::FromAgent,
            None => panic!("{name}:{}: bad from {from:?}", n + 1),
        };
        let input: Vec<u8> = match &step["in"] {
            Value::String(raw) => raw.as_bytes().to_vec(),
            v => serde_json::to_vec(v).unwrap(),
        };
        let actions = p.handle(direction, &input);
        let actual: Vec<Value> = actions
            .iter()
            .map(|a| match a {
                Action::ToAgent(b) => render(&input, "agent".into(), b),
                Action::ToClient(c, b) => render(&input, format!("client:{}", c.0), b),
                Action::Broadcast {
                    except: None,
                    message,
                } => render(&input, "all".into(), message),
                Action::Broadcast {
                    except: Some(c),
                    message,
                } => render(&input, format!("all-but:{}", c.0), message),
                Action::Log(e) => json!({"log": e}),
            })
            .collect();
        let actual = Value::Array(actual);
        if update {
            step["out"] = actual;
            rewritten.push(serde_json::to_string(&step).unwrap());
        } else {
            let expected = step.get("out").cloned().unwrap_or(Value::Null);
            if serde_json::to_string(&expected).unwrap() != serde_json::to_string(&actual).unwrap()
            {
                failures.push(format!(
                    "{name}:{}: {from} {}\n  expected {}\n  actual   {}",
                    n + 1,
                    String::from_utf8_lossy(&input),
                    serde_json::to_string(&expected).unwrap(),
                    serde_json::to_string(&actual).unwrap()
                ));
            }
        }
    }
    assert!(frames > 0, "{name} has no frames");
    if update {
        std::fs::write(&path, rewritten.join("\n") + "\n").unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} step(s) differ:\n{}\n\n{}",
        failures.len(),
        failures.join("\n"),
        test_support::golden::how_to_update("handler-policy")
    );
}

#[test]
fn p1_initialize_offers_no_fs_or_terminal() {
    run_fixture("p1_initialize.jsonl");
}

#[test]
fn p2_cwd_and_additional_directories_in_scope() {
    run_fixture("p2_cwd_scope.jsonl");
}

#[test]
fn p3_mcp_destinations_follow_the_network() {
    run_fixture("p3_mcp_destinations.jsonl");
}

#[test]
fn p4_not_permitted_methods_and_sessions() {
    run_fixture("p4_not_permitted.jsonl");
}

#[test]
fn p5_secrets_never_reach_a_client() {
    run_fixture("p5_secrets.jsonl");
}

#[test]
fn p6_daemon_extension_names() {
    run_fixture("p6_extensions.jsonl");
}

#[test]
fn p7_session_defaults_before_handing_out() {
    run_fixture("p7_session_defaults.jsonl");
}

#[test]
fn p8_default_mcp_servers_added_never_replaced() {
    run_fixture("p8_mcp_defaults.jsonl");
}

#[test]
fn p9_unattended_permissions() {
    run_fixture("p9_unattended.jsonl");
}

#[test]
fn order_failing_p2_never_reaches_p7() {
    run_fixture("order.jsonl");
}

#[test]
fn ids_are_routed_per_client_and_first_answer_wins() {
    run_fixture("ids.jsonl");
}

#[test]
fn malformed_input_has_a_defined_outcome() {
    run_fixture("malformed.jsonl");
}

#[test]
fn session_id_translation_after_restart() {
    run_fixture("session_translation.jsonl");
}

/// Every fixture file is run by a test above.
#[test]
fn every_fixture_is_run() {
    let me = include_str!("fixtures.rs");
    for e in std::fs::read_dir(dir()).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".jsonl") {
            assert!(
                me.contains(&format!("run_fixture(\"{name}\")")),
                "{name} is not run by any test"
            );
        }
    }
}
