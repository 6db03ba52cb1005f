//! A denied host as a question in the session (issue 13 item 7, decision 0110): when the proxy
//! denies a host for the session's sandbox, every attached client gets a standard
//! `session/request_permission` from the daemon — a synthetic tool call "Network access:
//! `host:port`" with allow once / allow always / reject — so any ACP client can answer it.
//! Allow always saves the entry in the agent's allow-list and switches its running sandboxes
//! (`services::live::allow_always`, the API's path); allow once switches this sandbox only.
//! Repeated denials of a host while its question is open are that one question.

use std::time::Duration;

use handler_contracts::allow::AllowEntry;
use handler_policy::ClientId;
use serde_json::{Value, json};

use super::Hub;
use crate::daemon::services::live as live_allow;

/// The option ids of a network question.
pub(crate) const ALLOW_ONCE: &str = "allow-once";
/// Saved in the agent's allow-list.
pub(crate) const ALLOW_ALWAYS: &str = "allow-always";
/// Denied, as it was.
pub(crate) const REJECT: &str = "reject";
/// How long an answer's switch of the allow-list may take before the hub goes on.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Whom the questions are about: the agent and the sandbox the proxy guards.
#[derive(Debug, Clone)]
pub(crate) struct Asking {
    /// The agent whose allow-list an "allow always" extends.
    pub agent_id: String,
    /// The session's sandbox.
    pub sandbox: String,
}

/// One open question.
#[derive(Debug)]
struct Question {
    /// Its JSON-RPC id, as JSON text (`"handler-net-1"`).
    id: String,
    /// Its tool call's id.
    call: String,
    /// The host denied, `<host>:<port>`.
    entry: AllowEntry,
    /// The request as sent, for clients attaching while it is open.
    request: String,
}

/// The session's network questions: off (a run, an agent saved with them off, a sandbox not
/// filtered) or whom they are about, and those open.
#[derive(Debug, Default)]
pub(crate) struct Questions {
    asking: Option<Asking>,
    open: Vec<Question>,
    next: u64,
}

/// The `session/request_permission` asking about `entry`.
pub(crate) fn request(id: &str, session_id: &str, call: &str, entry: &AllowEntry) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": call,
            "title": format!("Network access: `{entry}`"),
            "kind": "fetch",
            "status": "pending",
            "rawInput": {"host": entry.to_string()},
            "_meta": {"handler.dev/networkQuestion": true},
        },
        "options": [
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": "Allow always", "kind": "allow_always"},
            {"optionId": REJECT, "name": "Reject", "kind": "reject_once"},
        ],
    }})
}

/// The option an answer selected (None: cancelled, an error, or not an answer).
pub(crate) fn selected(answer: &Value) -> Option<&str> {
    let o = answer.pointer("/result/outcome")?;
    (o.get("outcome")?.as_str()? == "selected")
        .then(|| o.get("optionId")?.as_str())
        .flatten()
}

impl Questions {
    /// Questions about this sandbox of this agent (None: they are off).
    pub(crate) fn new(asking: Option<Asking>) -> Self {
        Questions {
            asking,
            ..Default::default()
        }
    }

    /// How many are open (counted with the session's pending permissions).
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

impl Hub {
    /// The proxy denied `host` for this session's sandbox: a question to every client that has
    /// its replay, unless questions are off, the host is not an entry or it is asked already.
    pub(crate) fn denied(&mut self, host: &str) {
        if self.questions.asking.is_none() {
            return;
        }
        let Ok(entry) = AllowEntry::parse(host) else {
            tracing::warn!(session = %self.id, %host, "a denied host that is no allow-list entry");
            return;
        };
        if self.questions.open.iter().any(|q| q.entry == entry) {
            return;
        }
        self.questions.next += 1;
        let call = format!("handler-net-{}", self.questions.next);
        let id = Value::from(call.clone()).to_string();
        let request = request(&call, &self.sid(), &call, &entry).to_string();
        tracing::info!(session = %self.id, host = %entry, "denied host asked about");
        self.questions.open.push(Question {
            id,
            call,
            entry,
            request: request.clone(),
        });
        self.broadcast(None, &request);
        self.state_changed();
    }

    /// Whether a client's response answers one of the daemon's network questions.
    pub(crate) fn is_question_answer(&self, id: &str) -> bool {
        self.questions.open.iter().any(|q| q.id == id)
    }

    /// A client answered a question (the first answer wins; the others are told
    /// `_handler/permission_resolved`), then what it chose is applied before the hub goes on,
    /// so the agent's next request meets the new list.
    pub(crate) async fn answer_question(&mut self, client: ClientId, id: &str, v: &Value) {
        let Some(i) = self.questions.open.iter().position(|q| q.id == id) else {
            return;
        };
        let q = self.questions.open.remove(i);
        let outcome = v.pointer("/result/outcome").cloned().unwrap_or(Value::Null);
        let resolved = json!({"jsonrpc": "2.0", "method": "_handler/permission_resolved",
            "params": {"requestId": q.call, "toolCallId": q.call, "outcome": outcome}});
        self.broadcast(Some(client), &resolved.to_string());
        self.state_changed();
        let Some(asking) = self.questions.asking.clone() else {
            return;
        };
        let (app, entry) = (self.app.clone(), q.entry);
        let switched = match selected(v) {
            Some(ALLOW_ALWAYS) => {
                let f = live_allow::allow_always(&app, &asking.agent_id, &entry);
                tokio::time::timeout(SWITCH_TIMEOUT, f).await
            }
            Some(ALLOW_ONCE) => {
                let f = live_allow::allow_once(&app, &asking.agent_id, &asking.sandbox, &entry);
                tokio::time::timeout(SWITCH_TIMEOUT, f).await
            }
            _ => return,
        };
        match switched {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(session = %self.id, host = %entry, error = %e.detail.unwrap_or(e.title), "a network answer not applied");
            }
            Err(_) => {
                tracing::warn!(session = %self.id, host = %entry, "a network answer timed out");
            }
        }
    }

    /// The open questions' requests, oldest first, for a client's replay.
    pub(crate) fn question_tail(&self) -> Vec<String> {
        self.questions
            .open
            .iter()
            .map(|q| q.request.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_a_standard_permission_request_naming_the_host() {
        let e = AllowEntry::parse("api.example.com:443").unwrap();
        let r = request("handler-net-1", "sess-1", "handler-net-1", &e);
        assert_eq!(r["method"], "session/request_permission");
        assert_eq!(r["params"]["sessionId"], "sess-1");
        assert_eq!(
            r["params"]["toolCall"]["title"],
            "Network access: `api.example.com:443`"
        );
        let kinds: Vec<&str> = r["params"]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    }

    #[test]
    fn only_a_selected_option_is_a_choice() {
        let pick =
            |o: Value| selected(&json!({"id": 1, "result": {"outcome": o}})).map(String::from);
        assert_eq!(
            pick(json!({"outcome": "selected", "optionId": "allow-always"})).as_deref(),
            Some(ALLOW_ALWAYS)
        );
        assert_eq!(pick(json!({"outcome": "cancelled"})), None);
        assert_eq!(selected(&json!({"id": 1, "error": {"code": 1}})), None);
    }
}
