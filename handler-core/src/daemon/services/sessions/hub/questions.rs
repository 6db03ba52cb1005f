//! A denied host as a question in the session (issue 13 item 7, decision 0110): when the proxy
//! denies a host for the session's sandbox, every attached client gets a standard
//! `session/request_permission` from the daemon — a synthetic tool call "Network access:
//! `host:port`" with allow once / allow always / reject — so any ACP client can answer it.
//! Allow always saves the entry in the agent's allow-list and switches its running sandboxes
//! (`services::running::allow_always`, the API's path); allow once switches this sandbox only.
//! Repeated denials of a host while its question is open are that one question.
//! A question's id is `handler-net-<128 random bits>`: nobody but the session's clients sees it,
//! and the pipeline refuses an agent's request with an id starting `handler-` (P6), so only a
//! client's answer to the daemon's own open question of this session is taken as one
//! (issue 27 F5, decision 0132).

use std::time::Duration;

use handler_contracts::allow::AllowEntry;
use handler_policy::ClientId;
use serde_json::{Value, json};

use super::Hub;
use crate::daemon::services::running as live_allow;

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
    /// Its JSON-RPC id, as JSON text (`"handler-net-<32 hex digits>"`).
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
}

/// A question's JSON-RPC id (and its tool call's) from 128 random bits: no agent can guess the
/// id of a question it provoked.
pub(crate) fn question_id(nonce: u128) -> String {
    format!("handler-net-{nonce:032x}")
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

    /// Opens a question about `entry` in session `session_id`, its id from `nonce` (128 random
    /// bits, the caller's): the request to send, or None when questions are off or `entry` is
    /// asked already.
    fn ask(&mut self, entry: AllowEntry, session_id: &str, nonce: u128) -> Option<String> {
        let call = question_id(nonce);
        let id = Value::from(call.clone()).to_string();
        if self.asking.is_none() || self.open.iter().any(|q| q.entry == entry || q.id == id) {
            return None;
        }
        let request = request(&call, session_id, &call, &entry).to_string();
        self.open.push(Question {
            id,
            call,
            entry,
            request: request.clone(),
        });
        Some(request)
    }

    /// Whether `id` (a response's id as JSON text) is that of a question open now.
    fn is_open(&self, id: &str) -> bool {
        self.open.iter().any(|q| q.id == id)
    }

    /// The open question a client's response with `id` answers, closed.
    fn take(&mut self, id: &str) -> Option<Question> {
        let i = self.open.iter().position(|q| q.id == id)?;
        Some(self.open.remove(i))
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
        let sid = self.sid();
        let shown = entry.to_string();
        let Some(request) = self.questions.ask(entry, &sid, rand::random()) else {
            return;
        };
        tracing::info!(session = %self.id, host = %shown, "denied host asked about");
        self.broadcast(None, &request);
        self.state_changed();
    }

    /// Whether a client's response answers one of this session's open network questions.
    pub(crate) fn is_question_answer(&self, id: &str) -> bool {
        self.questions.is_open(id)
    }

    /// A client answered a question (the first answer wins; the others are told
    /// `_handler/permission_resolved`), then what it chose is applied before the hub goes on,
    /// so the agent's next request meets the new list.
    pub(crate) async fn answer_question(&mut self, client: ClientId, id: &str, v: &Value) {
        let Some(q) = self.questions.take(id) else {
            return;
        };
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

    fn asking() -> Questions {
        Questions::new(Some(Asking {
            agent_id: "a_1".into(),
            sandbox: "handler-s-1".into(),
        }))
    }

    /// The request's id as a response carries it (JSON text).
    fn id_of(request: &str) -> String {
        let v: Value = serde_json::from_str(request).unwrap();
        v["id"].to_string()
    }

    #[test]
    fn a_questions_id_is_128_random_bits_never_a_counter() {
        let mut q = asking();
        let a = q.ask(AllowEntry::parse("a.example.com:443").unwrap(), "sess-1", 1);
        let nonce = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let b = q.ask(
            AllowEntry::parse("b.example.com:443").unwrap(),
            "sess-1",
            nonce,
        );
        let (a, b) = (id_of(&a.unwrap()), id_of(&b.unwrap()));
        assert_eq!(a, r#""handler-net-00000000000000000000000000000001""#);
        assert_eq!(b, r#""handler-net-0123456789abcdeffedcba9876543210""#);
        // What an agent would guess from the order of its denials is no question's id.
        assert!(!q.is_open(r#""handler-net-1""#));
        assert!(!q.is_open(r#""handler-net-2""#));
    }

    #[test]
    fn only_a_question_open_in_this_session_is_answered() {
        let (mut mine, mut other) = (asking(), asking());
        let entry = AllowEntry::parse("api.example.com:443").unwrap();
        let r = mine.ask(entry.clone(), "sess-1", 7).unwrap();
        let id = id_of(&r);
        assert!(mine.is_open(&id));
        // Another session never asked it, even about the same host.
        assert!(!other.is_open(&id));
        other.ask(entry.clone(), "sess-2", 8).unwrap();
        assert!(!other.is_open(&id));
        // Asked once while open; answered once: then it is no question any more.
        assert_eq!(mine.ask(entry.clone(), "sess-1", 9), None);
        assert_eq!(mine.take(&id).map(|q| q.entry), Some(entry));
        assert!(!mine.is_open(&id));
        assert!(mine.take(&id).is_none());
        // Questions off: nothing is asked, so nothing is answered.
        let mut off = Questions::new(None);
        let e = AllowEntry::parse("x.example.com:443").unwrap();
        assert_eq!(off.ask(e, "sess-1", 7), None);
        assert!(!off.is_open(&id));
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
