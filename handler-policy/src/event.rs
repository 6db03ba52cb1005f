//! What the pipeline reports for the daemon's log: refusals, drops, rewrites, permission
//! answers, sessions handed out. Events carry no secret values (P5 redacts before anything is
//! described).

use serde::Serialize;

use crate::ClientId;

/// Which side a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Side {
    /// A client, by its id.
    Client(ClientId),
    /// The agent.
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
        /// Who sent the request.
        from: Side,
        /// The rule that refused it (`P1`–`P9`), none for a malformed message.
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'static str>,
        /// The JSON-RPC error code answered.
        code: i64,
        /// The request's method, when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        /// Why, as the error's message says.
        reason: String,
    },
    /// A message not passed on (a notification refused, an unroutable response, bad input).
    #[serde(rename_all = "camelCase")]
    Dropped {
        /// Who sent the message.
        from: Side,
        /// The rule that dropped it, none for a message no rule concerns (an unroutable response).
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'static str>,
        /// The message's method, when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        /// Why it was not passed on.
        reason: String,
    },
    /// A message passed on with a change a policy made.
    #[serde(rename_all = "camelCase")]
    Rewritten {
        /// Who sent the message.
        from: Side,
        /// The rule that changed it.
        policy: &'static str,
        /// The message's method.
        method: Option<String>,
        /// What was changed, in words.
        what: String,
    },
    /// Secret values replaced by `[secret NAME]` (P5): the names only.
    #[serde(rename_all = "camelCase")]
    Redacted {
        /// The names of the secrets replaced, in the order first met.
        names: Vec<String>,
    },
    /// The agent's initialize answer (the daemon records `loadSession`).
    #[serde(rename_all = "camelCase")]
    AgentInitialized {
        /// Whether the agent can load (replay) an earlier session.
        load_session: bool,
    },
    /// A session handed out to a client, after P7.
    #[serde(rename_all = "camelCase")]
    SessionOpened {
        /// The session's id as clients know it.
        session_id: String,
        /// The method that opened it (session/new, load, resume or fork).
        method: String,
    },
    /// P7 could not apply the defaults: the client got -32004.
    #[serde(rename_all = "camelCase")]
    SessionDefaultsFailed {
        /// The session the defaults were for, as clients know it.
        session_id: String,
        /// The request that failed (session/set_mode or session/set_config_option).
        step: String,
        /// The agent's error, as it answered it.
        reason: String,
    },
    /// F.6.2: the agent's session id and the one clients know.
    #[serde(rename_all = "camelCase")]
    SessionTranslated {
        /// The session id clients know (the launch's).
        client_session_id: String,
        /// The agent's own id for the session.
        agent_session_id: String,
    },
    /// A permission request answered, by a client or by the daemon (P9, "permission
    /// answered").
    #[serde(rename_all = "camelCase")]
    PermissionAnswered {
        /// Who answered: a client or the daemon.
        by: Answerer,
        /// The agent's request id (raw JSON).
        request_id: String,
        /// The session asked about, as clients know it.
        #[serde(skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// The tool call asked about, as far as the updates before it told.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_call: Option<crate::tools::ToolCallInfo>,
        /// The answer: the option kind chosen, or cancelled.
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
    /// A client answered, by its id.
    Client(ClientId),
    /// P9.
    Daemon,
}
