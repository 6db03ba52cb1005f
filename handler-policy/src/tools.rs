//! Tracking of tool calls from session/update (tool_call, tool_call_update), so a permission
//! request that carries only a toolCallId can still be described.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use serde_json::value::RawValue;

use crate::json;

/// How many tool calls are remembered (the oldest are forgotten first).
const CAPACITY: usize = 1024;

/// What is known of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallInfo {
    /// The tool call's id, as the agent gave it.
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Its title (what the agent says it does), secrets redacted.
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Its kind (read, edit, execute…), as an open string.
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Its last status (pending, in_progress, completed, failed), as an open string.
    pub status: Option<String>,
}

impl ToolCallInfo {
    /// Fills the fields `raw` (a ToolCall or ToolCallUpdate object) sets.
    fn merge(&mut self, raw: &json::Members<'_>) {
        for (field, slot) in [
            ("title", &mut self.title),
            ("kind", &mut self.kind),
            ("status", &mut self.status),
        ] {
            if let Some(v) = raw.get(field).and_then(json::string) {
                *slot = Some(v.into_owned());
            }
        }
    }
}

/// Tool calls by (sessionId, toolCallId).
#[derive(Debug, Default)]
pub(crate) struct ToolCalls {
    calls: HashMap<(String, String), ToolCallInfo>,
    order: VecDeque<(String, String)>,
}

impl ToolCalls {
    /// Records a session/update's `update` when it is a tool_call or tool_call_update.
    pub(crate) fn observe(&mut self, session_id: &str, update: &json::Members<'_>) {
        let Some(kind) = update.get("sessionUpdate").and_then(json::string) else {
            return;
        };
        if kind != "tool_call" && kind != "tool_call_update" {
            return;
        }
        let Some(id) = update.get("toolCallId").and_then(json::string) else {
            return;
        };
        let key = (session_id.to_owned(), id.into_owned());
        if !self.calls.contains_key(&key) {
            if self.order.len() >= CAPACITY {
                if let Some(old) = self.order.pop_front() {
                    self.calls.remove(&old);
                }
            }
            self.order.push_back(key.clone());
        }
        let entry = self
            .calls
            .entry(key.clone())
            .or_insert_with(|| ToolCallInfo {
                tool_call_id: key.1.clone(),
                ..Default::default()
            });
        entry.merge(update);
    }

    /// Describes a permission request's `toolCall`: what was tracked, updated by what the
    /// request itself says.
    pub(crate) fn describe(
        &self,
        session_id: Option<&str>,
        tool_call: &RawValue,
    ) -> Option<ToolCallInfo> {
        let m = json::members(tool_call)?;
        let id = m.get("toolCallId").and_then(json::string)?.into_owned();
        let mut info = session_id
            .and_then(|s| self.calls.get(&(s.to_owned(), id.clone())))
            .cloned()
            .unwrap_or_else(|| ToolCallInfo {
                tool_call_id: id,
                ..Default::default()
            });
        info.merge(&m);
        Some(info)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn a_bare_tool_call_id_is_described_from_earlier_updates() {
        let mut t = ToolCalls::default();
        let u = members(
            r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Run ls","kind":"execute","status":"pending"}"#,
        );
        t.observe("s", &json::members(&u).unwrap());
        let u = members(
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"in_progress"}"#,
        );
        t.observe("s", &json::members(&u).unwrap());
        let d = t
            .describe(Some("s"), &members(r#"{"toolCallId":"c1"}"#))
            .unwrap();
        assert_eq!(d.title.as_deref(), Some("Run ls"));
        assert_eq!(d.kind.as_deref(), Some("execute"));
        assert_eq!(d.status.as_deref(), Some("in_progress"));
        assert!(
            t.describe(Some("other"), &members(r#"{"toolCallId":"c1"}"#))
                .unwrap()
                .title
                .is_none()
        );
    }

    #[test]
    fn capacity_is_bounded() {
        let mut t = ToolCalls::default();
        for i in 0..CAPACITY + 10 {
            let u = members(&format!(
                r#"{{"sessionUpdate":"tool_call","toolCallId":"c{i}"}}"#
            ));
            t.observe("s", &json::members(&u).unwrap());
        }
        assert_eq!(t.len(), CAPACITY);
    }
}
