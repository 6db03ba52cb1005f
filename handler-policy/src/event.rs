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

/// Who answered a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Answerer {
    Client(ClientId),
    /// P9.
    Daemon,
}
