//! Fuzz target: arbitrary frames in arbitrary directions through a pipeline configured by the
//! first byte. Checks: no panic, every action carries one JSON object, and no agent-side secret
//! reaches a client (unless a client itself sent it).
//!
//! Input: `CONFIG FRAME\nFRAME\n…`, each frame's first byte its direction (`A` agent, `1`/`2` a
//! client, any other byte by its value mod 3).
#![no_main]

use std::collections::BTreeMap;

use handler_contracts::allow::AllowEntry;
use handler_contracts::harness::{McpServer, SessionDefaults};
use handler_contracts::sandbox::{Enforcement, NetworkPolicy};
use handler_policy::{Action, ClientId, Direction, Pipeline, PolicyConfig, UnattendedMode};
use libfuzzer_sys::fuzz_target;

const SECRET: &str = "SECRETvalue42";

fn config(flags: u8) -> PolicyConfig {
    let network = if flags & 0x10 != 0 {
        NetworkPolicy::Filtered {
            allow: vec![AllowEntry::parse("mcp.example.com:443").unwrap()],
            enforcement: Enforcement::Enforce,
        }
    } else if flags & 0x40 != 0 {
        NetworkPolicy::None
    } else {
        NetworkPolicy::Open
    };
    let mut cfg = PolicyConfig::new("/w/p", network);
    cfg.secrets = vec![("K".into(), SECRET.into())];
    if flags & 1 != 0 {
        cfg.session_defaults = SessionDefaults {
            mode_id: Some("plan".into()),
            config_options: BTreeMap::from([("model".into(), "m".into())]),
            mcp_servers: vec![McpServer::Stdio {
                name: "tools".into(),
                command: "/t".into(),
                args: vec![],
                env: vec![],
            }],
        };
    }
    cfg.unattended = match flags & 6 {
        2 => Some(UnattendedMode::Approve),
        4 => Some(UnattendedMode::AskAndDeny),
        _ => None,
    };
    if flags & 8 != 0 {
        cfg.client_session_id = Some("known".into());
    }
    if flags & 0x20 != 0 {
        cfg.max_message_bytes = 256;
    }
    cfg
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut p = Pipeline::new(config(flags)).expect("valid config");
    let mut client_sent_secret = false;
    for frame in rest.split(|b| *b == b'\n') {
        let Some((&d, bytes)) = frame.split_first() else {
            continue;
        };
        let dir = match d {
            b'A' => Direction::FromAgent,
            b'1' => Direction::FromClient(ClientId(1)),
            b'2' => Direction::FromClient(ClientId(2)),
            x if x % 3 == 0 => Direction::FromAgent,
            x => Direction::FromClient(ClientId((x % 3) as u64)),
        };
        if matches!(dir, Direction::FromClient(_)) && contains(bytes, SECRET.as_bytes()) {
            client_sent_secret = true;
        }
        if d % 7 == 0 {
            p.detach(ClientId(2));
        }
        for a in p.handle(dir, bytes) {
            let (to_client, msg) = match a {
                Action::ToAgent(m) => (false, m),
                Action::ToClient(_, m) | Action::Broadcast { message: m, .. } => (true, m),
                Action::Log(e) => {
                    let line = serde_json::to_string(&e).unwrap();
                    if !client_sent_secret {
                        assert!(!line.contains(SECRET), "secret in a log event: {line}");
                    }
                    continue;
                }
            };
            let v: serde_json::Value =
                serde_json::from_slice(&msg).expect("an action carries JSON");
            assert!(v.is_object(), "an action carries one object");
            if to_client && !client_sent_secret {
                assert!(
                    !contains(&msg, SECRET.as_bytes()),
                    "secret reached a client"
                );
                assert!(
                    !v.to_string().contains(SECRET),
                    "secret reached a client (escaped)"
                );
            }
        }
    }
    let _ = p.pending_requests();
});

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}
