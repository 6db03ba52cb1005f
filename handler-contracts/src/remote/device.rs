//! What a device says inside its envelopes (docs/remote.md § The device's protocol). Each
//! plaintext is one JSON object: a JSON-RPC message of the remote methods
//! ([`METHOD_SESSIONS`], [`METHOD_ATTACH`], [`METHOD_DETACH`]), or a [`SessionFrame`] carrying one
//! ACP message of an attached session. ACP from a device is limited to [`ACP_ALLOWED`] and
//! answers; what the daemon sends back is the attachment's traffic, as any client's (F.7).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The session is not shared (D.7).
pub const ERR_NOT_SHARED: i64 = -32020;
/// The device is not attached to the session (D.7).
pub const ERR_NOT_ATTACHED: i64 = -32021;
/// The method is not one a device may call (D.7).
pub const ERR_NOT_ALLOWED: i64 = -32022;

/// `remote/sessions`: the shared sessions.
pub const METHOD_SESSIONS: &str = "remote/sessions";
/// `remote/attach {sessionId}`: an F.7 attachment for this device.
pub const METHOD_ATTACH: &str = "remote/attach";
/// `remote/detach {sessionId}`.
pub const METHOD_DETACH: &str = "remote/detach";
/// `remote/agents`: the agents whose owner let paired devices start sessions (`remoteStart`).
pub const METHOD_AGENTS: &str = "remote/agents";
/// `remote/start {agentId, prompt?}`: a new session of such an agent, shared, its
/// [`SharedSession`] answered.
pub const METHOD_START: &str = "remote/start";

/// The ACP requests and notifications a device may send an attached session; answers (to a
/// permission request) are always let through.
pub const ACP_ALLOWED: &[&str] = &[
    "initialize",
    "session/load",
    "session/prompt",
    "session/cancel",
    "session/set_mode",
    "session/set_config_option",
];

/// Whether a device may send an ACP message with this method (None: an answer).
pub fn acp_allowed(method: Option<&str>) -> bool {
    method.is_none_or(|m| ACP_ALLOWED.contains(&m))
}

/// One ACP message of an attached session, either way; or, from the daemon, the attachment's
/// end (`closed`: 4004 when unshared, 4002 when the session stopped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionFrame {
    /// The session (`s_…`).
    pub session: String,
    /// The ACP message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<serde_json::Value>,
    /// The attachment ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Closed>,
}

/// How an attachment ended, as a WebSocket close would say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Closed {
    /// F.4's close code.
    pub code: u16,
    /// Its reason.
    pub reason: String,
}

/// An agent a device may start sessions of, as `remote/agents` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartableAgent {
    /// Its id.
    pub id: String,
    /// Its name (a project's agent) or its folder's.
    pub name: String,
    /// Its project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
}

/// A shared session as `remote/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedSession {
    /// Its id.
    pub id: String,
    /// Its agent's id.
    pub agent_id: String,
    /// The ACP session id to load and prompt (once the agent gave one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// The folder its agent works in: `session/load`'s `cwd`.
    pub cwd: String,
    /// Its title, once the agent gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A turn is in progress.
    pub busy: bool,
    /// Permission requests waiting.
    pub pending_permissions: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_may_prompt_and_answer_but_not_open_other_sessions_or_reach_the_host() {
        for m in [
            "session/prompt",
            "session/cancel",
            "session/load",
            "initialize",
        ] {
            assert!(acp_allowed(Some(m)), "{m}");
        }
        assert!(acp_allowed(None));
        for m in [
            "session/new",
            "fs/read_text_file",
            "terminal/create",
            "_handler/x",
            "",
        ] {
            assert!(!acp_allowed(Some(m)), "{m}");
        }
    }
}
