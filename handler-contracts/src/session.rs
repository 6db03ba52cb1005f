//! Contract F: the daemon-held Session (F.1) and its event log lines (F.5).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::control::{SessionInput, SessionOutput};

/// A session's state (F.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    Starting,
    Running,
    Stopped,
    Failed,
}

/// Who started a session (F.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionOrigin {
    Ui,
    Cli,
    Editor,
    Phone,
    Automation,
}

/// One ACP conversation the daemon holds (F.1). Stored and rewritten by the daemon: unknown
/// fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// "s_" + 16 hex.
    pub id: String,
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    pub harness: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub state: SessionState,
    pub busy: bool,
    pub pending_permissions: u32,
    pub attached: u32,
    pub remote: bool,
    pub can_resume: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_version: Option<String>,
    pub origin: SessionOrigin,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<SessionInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<SessionOutput>,
    pub created_at: String,
    pub last_activity_at: String,
    pub acp_url: String,
    /// Fields this version does not know, kept when the document is rewritten.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map<String, Value>,
}

/// How a session stopped (F.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopHow {
    Explicit,
    Idle,
    Exited,
    Error,
    RunEnded,
    DaemonRestarted,
    Deleted,
}

/// A turn's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnPhase {
    Start,
    End,
}

/// A lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LifecycleEvent {
    Started,
    Stopped,
}

/// What one event of the log says (F.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionEventKind {
    /// ACP session/update params.update, kept as the agent sent it.
    Update { update: Value },
    Turn {
        phase: TurnPhase,
        #[serde(
            default,
            rename = "stopReason",
            skip_serializing_if = "Option::is_none"
        )]
        stop_reason: Option<String>,
    },
    Lifecycle {
        event: LifecycleEvent,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        how: Option<StopHow>,
    },
}

/// One line of `events.ndjson` (F.5): seq strictly increasing from 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionEvent {
    pub seq: u64,
    /// RFC 3339 time.
    pub t: String,
    #[serde(flatten)]
    pub kind: SessionEventKind,
}
