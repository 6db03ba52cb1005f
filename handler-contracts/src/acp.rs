//! Contract C: the ACP endpoint's constants — policy error codes (C.4), session attach errors
//! (F.4), WebSocket subprotocols and close codes (C.1, C.3, F.4).

/// P2: cwd outside scope.
pub const ERR_CWD_OUTSIDE_SCOPE: i64 = -32001;
/// P3 (and P8's name clash): MCP destination not allowed.
pub const ERR_MCP_NOT_ALLOWED: i64 = -32002;
/// P4: not permitted.
pub const ERR_NOT_PERMITTED: i64 = -32003;
/// P7: session defaults could not be applied.
pub const ERR_SESSION_DEFAULTS: i64 = -32004;
/// F.4: one session per attachment.
pub const ERR_ONE_SESSION_PER_ATTACHMENT: i64 = -32010;
/// F.4: turn in progress.
pub const ERR_TURN_IN_PROGRESS: i64 = -32011;
/// D.18: unattended.
pub const ERR_UNATTENDED: i64 = -32012;
/// JSON-RPC: method not found (P6 answers `_handler/*` requests with it).
pub const ERR_METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: parse error.
pub const ERR_PARSE: i64 = -32700;
/// JSON-RPC: invalid request.
pub const ERR_INVALID_REQUEST: i64 = -32600;

/// The subprotocol both sides speak (C.1).
pub const SUBPROTOCOL_ACP: &str = "acp.v1";
/// The prefix of the subprotocol carrying the token (C.1).
pub const SUBPROTOCOL_BEARER_PREFIX: &str = "bearer.";
/// Default largest message (C.1): 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// WebSocket close codes (C.1, C.3, F.4, F.7).
pub mod close {
    /// A binary frame was sent.
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// A message over the size limit.
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// The agent exited: reason `agent exited (<code>)`.
    pub const AGENT_EXITED: u16 = 1011;
    /// Attached elsewhere (F.7).
    pub const ATTACHED_ELSEWHERE: u16 = 4001;
    /// Session stopped (F.4).
    pub const SESSION_STOPPED: u16 = 4002;
    /// Too slow (F.7).
    pub const TOO_SLOW: u16 = 4003;
    /// Remote access disabled (F.4).
    pub const REMOTE_DISABLED: u16 = 4004;
}

/// The `_meta` key prefix and method prefix owned by the daemon (P6).
pub const DAEMON_META_PREFIX: &str = "handler.dev/";
/// Extension methods owned by the daemon (P6).
pub const DAEMON_METHOD_PREFIX: &str = "_handler/";
/// The JSON-RPC string ids of the daemon's own requests (its questions to clients, its start
/// requests to the agent); an agent's request with such an id is refused (P6, decision 0132),
/// so a client's answer to it can never be taken for the answer to one of the daemon's.
pub const DAEMON_ID_PREFIX: &str = "handler-";
