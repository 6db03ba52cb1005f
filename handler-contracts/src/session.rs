//! Contract F: the daemon-held Session (F.1) and its event log lines (F.5).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::control::{SessionInput, SessionOutput};

/// A session's state (F.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// Its sandbox and agent are starting.
    Starting,
    /// Its agent runs.
    Running,
    /// Stopped; it can be attached again, which restarts it.
    Stopped,
    /// Its start or its run failed (`error` says why).
    Failed,
}

/// Who started a session (F.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionOrigin {
    /// The web UI.
    Ui,
    /// The `handler` CLI.
    Cli,
    /// An editor speaking ACP.
    Editor,
    /// A paired phone.
    Phone,
    /// An automation's agent run (I.3).
    Automation,
}

/// One ACP conversation the daemon holds (F.1). Stored and rewritten by the daemon: unknown
/// fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// "s_" + 16 hex.
    pub id: String,
    /// The agent it belongs to.
    pub agent_id: String,
    /// Its agent's project (D.8), as of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// The harness of the model it was started with (F.3).
    pub harness: String,
    /// The account of the model it was started with, when an account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The provider of the model it was started with, when a provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model it was started with, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its agent's folder (or its own, F.2) at creation: resuming needs the same.
    pub scope: String,
    /// The agent's own session id, known after session/new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// Its title, from the agent's session_info_update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where it is in its life.
    pub state: SessionState,
    /// A session/prompt is in progress.
    pub busy: bool,
    /// Permission requests awaiting an answer.
    pub pending_permissions: u32,
    /// Clients attached now (F.7).
    pub attached: u32,
    /// Reachable from paired devices; off after a stop.
    pub remote: bool,
    /// The agent advertised loadSession: a stopped session can restart.
    pub can_resume: bool,
    /// Why it failed, or why its last start or run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the harness image had installed at the last start (B.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_version: Option<String>,
    /// Who started it.
    pub origin: SessionOrigin,
    /// How its last turn ended (end_turn, cancelled, timed_out…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stop_reason: Option<String>,
    /// A run's (D.18): the agent's last message, kept when the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// A run's input, for an agent with an interface (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<SessionInput>,
    /// A run's result, once its turn ended (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<SessionOutput>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When something last happened in it (RFC 3339).
    pub last_activity_at: String,
    /// Its ACP WebSocket URL (F.4).
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
    /// A client stopped it.
    Explicit,
    /// Stopped after its idle timeout (F.6.3).
    Idle,
    /// The agent exited by itself.
    Exited,
    /// Stopped for an error (a message too big, a failed start).
    Error,
    /// A run ended (D.18).
    RunEnded,
    /// The daemon restarted (F.6.5).
    DaemonRestarted,
    /// The session was deleted.
    Deleted,
}

/// A turn's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnPhase {
    /// A prompt was forwarded to the agent.
    Start,
    /// The agent answered the prompt.
    End,
}

/// A lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LifecycleEvent {
    /// The session's agent started.
    Started,
    /// The session stopped (`how` says how).
    Stopped,
}

/// What one event of the log says (F.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionEventKind {
    /// ACP session/update params.update, kept as the agent sent it.
    Update {
        /// The update, as the agent sent it.
        update: Value,
    },
    /// A turn started or ended.
    Turn {
        /// Whether the turn starts or ends.
        phase: TurnPhase,
        #[serde(
            default,
            rename = "stopReason",
            skip_serializing_if = "Option::is_none"
        )]
        /// How the turn ended (the prompt's stopReason), at its end.
        stop_reason: Option<String>,
    },
    /// The session started or stopped.
    Lifecycle {
        /// Started or stopped.
        event: LifecycleEvent,
        /// More about it, in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// How it stopped (`stopped` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        how: Option<StopHow>,
    },
}

/// One line of `events.ndjson` (F.5): seq strictly increasing from 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionEvent {
    /// Its place in the log, from 1, strictly increasing.
    pub seq: u64,
    /// RFC 3339 time.
    pub t: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: SessionEventKind,
}
