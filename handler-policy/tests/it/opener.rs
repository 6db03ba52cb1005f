//! `Pipeline::check_opener`: P2 and P3 on a session/load the daemon answers itself (F.4).

use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{Pipeline, PolicyConfig};
use serde_json::{Value, json};

#[test]
fn a_load_outside_the_scope_or_with_an_mcp_server_is_refused_and_one_inside_passes() {
    let p = Pipeline::new(PolicyConfig::new("/w", NetworkPolicy::None)).unwrap();
    let load = |params: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "session/load", "params": params}).to_string()
    };
    assert_eq!(
        p.check_opener(
            load(json!({"sessionId": "s", "cwd": "/w/sub", "mcpServers": []})).as_bytes()
        ),
        None
    );
    let e: Value = serde_json::from_slice(
        &p.check_opener(load(json!({"sessionId": "s", "cwd": "/etc"})).as_bytes())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(e["id"], 7);
    assert_eq!(e["error"]["code"], -32001);
    assert_eq!(e["error"]["data"]["policy"], "P2");
    let http =
        json!([{"type": "http", "name": "x", "url": "https://x.example/mcp", "headers": []}]);
    let e: Value = serde_json::from_slice(
        &p.check_opener(
            load(json!({"sessionId": "s", "cwd": "/w", "mcpServers": http})).as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(e["error"]["code"], -32002);
}
