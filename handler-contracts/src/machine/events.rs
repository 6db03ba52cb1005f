//! The machines' change channel (issue 29 item 3, decision 0143): `GET /v1/machines/events`
//! sends a [`MachineEvent::Snapshot`] first, then what changed — [`changes`] between two lists,
//! a pure function of what was sent and what is now.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::MachineInfo;

/// The WebSocket subprotocol of the channel (offered beside `bearer.<token>`).
pub const SUBPROTOCOL_MACHINES: &str = "handler.machines.v1";

/// One message of the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum MachineEvent {
    /// Every machine now, sorted by id: the first message, and again after a client fell behind.
    Snapshot {
        /// The machines.
        machines: Vec<MachineInfo>,
    },
    /// A machine made since the last message.
    Added {
        /// It.
        machine: MachineInfo,
    },
    /// A machine whose state (or record) is not what the last message said.
    Changed {
        /// It, now.
        machine: MachineInfo,
    },
    /// A machine deleted since the last message.
    Removed {
        /// Its id.
        id: String,
    },
}

/// What a client that was told `before` must be told for it to know `now`: removals, then
/// additions and changes, each in id order. Nothing when they are the same.
pub fn changes(before: &[MachineInfo], now: &[MachineInfo]) -> Vec<MachineEvent> {
    let old: BTreeMap<&str, &MachineInfo> = before.iter().map(|m| (m.id.as_str(), m)).collect();
    let new: BTreeMap<&str, &MachineInfo> = now.iter().map(|m| (m.id.as_str(), m)).collect();
    let mut out: Vec<MachineEvent> = old
        .keys()
        .filter(|id| !new.contains_key(*id))
        .map(|id| MachineEvent::Removed { id: id.to_string() })
        .collect();
    for (id, m) in &new {
        match old.get(id) {
            None => out.push(MachineEvent::Added {
                machine: (*m).clone(),
            }),
            Some(o) if o != m => out.push(MachineEvent::Changed {
                machine: (*m).clone(),
            }),
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{MachineRequest, MachineState};

    fn m(id: &str, state: MachineState) -> MachineInfo {
        MachineInfo {
            id: id.into(),
            request: MachineRequest {
                name: id.into(),
                source: None,
                devcontainer: None,
                image: Some("debian:bookworm-slim".into()),
                agents: Vec::new(),
                cpus: None,
                memory: None,
                workdir: None,
                folder: None,
                mounts: Vec::new(),
                network: None,
                allow: None,
                profile: None,
                parts: Vec::new(),
            },
            state,
            container_id: format!("c-{id}"),
            created_at: "2026-12-03T14:00:00Z".into(),
            disposable: None,
            devcontainer: None,
            parts: Vec::new(),
            parts_left_out: Vec::new(),
        }
    }

    #[test]
    fn the_same_list_is_no_change() {
        let l = [m("a", MachineState::Running), m("b", MachineState::Stopped)];
        assert!(changes(&l, &l).is_empty());
    }

    #[test]
    fn removals_come_first_then_additions_and_changes_in_id_order() {
        let before = [
            m("a", MachineState::Running),
            m("b", MachineState::Running),
            m("d", MachineState::Running),
        ];
        let now = [
            m("c", MachineState::Running),
            m("b", MachineState::Stopped),
            m("a", MachineState::Running),
        ];
        let got = changes(&before, &now);
        assert_eq!(
            got,
            vec![
                MachineEvent::Removed { id: "d".into() },
                MachineEvent::Changed {
                    machine: m("b", MachineState::Stopped)
                },
                MachineEvent::Added {
                    machine: m("c", MachineState::Running)
                },
            ]
        );
    }

    #[test]
    fn the_messages_are_tagged_by_type() {
        let v = serde_json::to_value(MachineEvent::Removed { id: "a".into() }).unwrap();
        assert_eq!(v, serde_json::json!({"type": "removed", "id": "a"}));
        let v = serde_json::to_value(MachineEvent::Snapshot { machines: vec![] }).unwrap();
        assert_eq!(v, serde_json::json!({"type": "snapshot", "machines": []}));
    }
}
