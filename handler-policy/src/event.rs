//! What the pipeline reports for the daemon's log: refusals, drops, rewrites, permission
//! answers, sessions handed out. Events carry no secret values (P5 redacts before anything is
//! described).

use serde::Serialize;

use crate::ClientId;

/// Which side a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Side {
    Client(ClientId),
    Agent,
}

/// One thing worth logging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
#[non_exhaustive]
pub enum Event {
    /// A request answered with an error by the pipeline (a policy or a malformed message).
    #[serde(rename_all = "camelCase")]
    Refused {
        from: Side,
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'static str>,
        code: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        reason: String,
    },
    /// A message not passed on (a notification refused, an unroutable response, bad input).
    #[serde(rename_all = "camelCase")]
    Dropped {
        from: Side,
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        reason: String,
    },
    /// A message passed on with a change a policy made.
    #[serde(rename_all = "camelCase")]
    Rewritten {
        from: Side,
        policy: &'static str,
        method: Option<String>,
        what: String,
    },
    /// Secret values replaced by `[secret NAME]` (P5): the names only.
    #[serde(rename_all = "camelCase")]
    Redacted { names: Vec<String> },
    /// The agent's initialize answer (the daemon records `loadSession`).
    #[serde(rename_all = "camelCase")]
    AgentInitialized { load_session: bool },
    /// A session handed out to a client, after P7.
    #[serde(rename_all = "camelCase")]
    SessionOpened { session_id: String, method: String },
    /// P7 could not apply the defaults: the client got -32004.
    #[serde(rename_all = "camelCase")]
    SessionDefaultsFailed {
        session_id: String,
        step: String,
        reason: String,
    },
    /// F.6.2: the agent's session id and the one clients know.
    #[serde(rename_all = "camelCase")]
    SessionTranslated {
        client_session_id: String,
        agent_session_id: String,
    },
    /// A permission request answered, by a client or by the daemon (P9, "permission
    /// answered").
    #[serde(rename_all = "camelCase")]
    PermissionAnswered {
        by: Answerer,
        request_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_call: Option<crate::tools::ToolCallInfo>,
        outcome: String,
    },
}

impl Event {
    /// The event with `f` applied to every text it carries (P5 redaction of the log).
    pub(crate) fn map_text(self, f: &dyn Fn(String) -> String) -> Event {
        let o = |v: Option<String>| v.map(f);
        match self {
            Event::Refused {
                from,
                policy,
                code,
                method,
                reason,
            } => Event::Refused {
                from,
                policy,
                code,
                method: o(method),
                reason: f(reason),
            },
            Event::Dropped {
                from,
                policy,
                method,
                reason,
            } => Event::Dropped {
                from,
                policy,
                method: o(method),
                reason: f(reason),
            },
            Event::Rewritten {
                from,
                policy,
                method,
                what,
            } => Event::Rewritten {
                from,
                policy,
                method: o(method),
                what: f(what),
            },
            Event::Redacted { names } => Event::Redacted { names },
            Event::AgentInitialized { load_session } => Event::AgentInitialized { load_session },
            Event::SessionOpened { session_id, method } => Event::SessionOpened {
                session_id: f(session_id),
                method: f(method),
            },
            Event::SessionDefaultsFailed {
                session_id,
                step,
                reason,
            } => Event::SessionDefaultsFailed {
                session_id: f(session_id),
                step: f(step),
                reason: f(reason),
            },
            Event::SessionTranslated {
                client_session_id,
                agent_session_id,
            } => Event::SessionTranslated {
                client_session_id: f(client_session_id),
                agent_session_id: f(agent_session_id),
            },
            Event::PermissionAnswered {
                by,
                request_id,
                session_id,
                tool_call,
                outcome,
            } => Event::PermissionAnswered {
                by,
                request_id: f(request_id),
                session_id: o(session_id),
                tool_call: tool_call.map(|t| crate::tools::ToolCallInfo {
                    tool_call_id: f(t.tool_call_id),
                    title: o(t.title),
                    kind: o(t.kind),
                    status: o(t.status),
                }),
                outcome: f(outcome),
            },
        }
    }
}

/// Who answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Answerer {
    Client(ClientId),
    /// P9.
    Daemon,
}
