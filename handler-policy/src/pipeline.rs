//! The pipeline for one agent and its clients: `handle(direction, frame) -> Vec<Action>`, P1–P9
//! in order, request-id routing between several clients and one agent, the pending-permission
//! table, tool-call tracking and F.6.2's session-id translation. No I/O.

use std::collections::{HashMap, HashSet, VecDeque};

use handler_contracts::acp;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::config::{ConfigError, PathResolver, PolicyConfig};
use crate::envelope::{self, IdKey, Kind, Malformed};
use crate::event::{Answerer, Event, Side};
use crate::json::{self, Splice};
use crate::redact::{self, Secrets};
use crate::rules::{self, Refusal};
use crate::tools::{ToolCallInfo, ToolCalls};

/// A client of the pipeline, numbered by the caller. The daemon may use one of its own for
/// the requests it makes itself (its initialize, session/new, session/load).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ClientId(pub u64);

/// Where a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A frame a client sent, with the client's id.
    FromClient(ClientId),
    /// A frame the agent wrote on its stdout.
    FromAgent,
}

/// What the caller does with a frame's outcome. Messages are one JSON text each, without the
/// line terminator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write this to the agent.
    ToAgent(Vec<u8>),
    /// Send this to one client.
    ToClient(ClientId, Vec<u8>),
    /// Send this to every attached client, but `except`.
    Broadcast {
        /// The client that caused the message, which already has its answer (none: every client).
        except: Option<ClientId>,
        /// The message, one JSON text.
        message: Vec<u8>,
    },
    /// Record this in the log.
    Log(Event),
}

static TOOL_CALL: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"tool_call").into_owned());
static META_PREFIX: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| {
        memchr::memmem::Finder::new(acp::DAEMON_META_PREFIX.as_bytes()).into_owned()
    });

/// Sessions methods that open a session (P2, P3, P8 apply to them).
const OPENERS: &[&str] = &[
    "session/new",
    "session/load",
    "session/resume",
    "session/fork",
];
/// The first id the pipeline uses for its own requests to the agent.
const OWN_ID_START: u64 = 1 << 32;

#[derive(Debug)]
enum Outstanding {
    /// A client's request; `id` is the client's own id (raw JSON).
    Client {
        client: ClientId,
        id: String,
        method: String,
        /// The (agent's) sessionId the request named.
        session: Option<String>,
        detached: bool,
    },
    /// A step of P7.
    Defaults { run: u64 },
}

#[derive(Debug)]
struct DefaultsRun {
    client: ClientId,
    client_id: String,
    detached: bool,
    method: String,
    session: String,
    /// The agent's session/new|load response, held.
    response: Vec<u8>,
    /// (method, params, what it sets)
    steps: VecDeque<(String, String, String)>,
    current: (String, String),
    mode: Option<String>,
    config_options: Option<String>,
}

#[derive(Debug)]
struct AgentRequest {
    seq: u64,
    id: String,
    method: String,
    message: Vec<u8>,
    session: Option<String>,
    tool_call: Option<ToolCallInfo>,
}

/// The pipeline's state for one agent connection.
pub struct Pipeline {
    cfg: PolicyConfig,
    scope: String,
    secrets: Secrets,
    resolver: Option<Box<dyn PathResolver>>,
    next_id: u64,
    next_seq: u64,
    to_agent: HashMap<IdKey, Outstanding>,
    from_agent: HashMap<IdKey, AgentRequest>,
    runs: HashMap<u64, DefaultsRun>,
    owned: HashSet<String>,
    tools: ToolCalls,
    translation: Option<(String, String)>,
    load_session: Option<bool>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("scope", &self.scope)
            .field("in_flight", &self.to_agent.len())
            .field("pending_from_agent", &self.from_agent.len())
            .field("owned", &self.owned)
            .finish_non_exhaustive()
    }
}

/// The outcome of P1–P6 and P8 on a client's message.
enum Verdict {
    Forward(Vec<u8>),
    Refuse(Refusal),
    Drop {
        policy: &'static str,
        reason: String,
    },
}

impl Pipeline {
    /// A pipeline with `cfg`. P2 checks paths lexically only; see [`Pipeline::with_resolver`].
    pub fn new(cfg: PolicyConfig) -> Result<Self, ConfigError> {
        let scope = rules::lexical_normalize(&cfg.scope)
            .ok_or_else(|| ConfigError::Scope(cfg.scope.clone()))?;
        if let Some(i) = cfg.secrets.iter().position(|(n, _)| n.is_empty()) {
            return Err(ConfigError::SecretName(i));
        }
        if cfg.max_message_bytes == 0 {
            return Err(ConfigError::MaxMessageBytes);
        }
        Ok(Pipeline {
            secrets: Secrets::new(&cfg.secrets),
            cfg,
            scope,
            resolver: None,
            next_id: OWN_ID_START,
            next_seq: 0,
            to_agent: HashMap::new(),
            from_agent: HashMap::new(),
            runs: HashMap::new(),
            owned: HashSet::new(),
            tools: ToolCalls::default(),
            translation: None,
            load_session: None,
        })
    }

    /// A pipeline taking over a connection another pipeline opened (issue 28 item 6: a new
    /// daemon taking over a running agent): session `agent_session` is open (shown to clients
    /// as `client_session` when they differ, F.6.2), the agent's `initialize` said
    /// `load_session`, and `in_flight` — `(id as the agent got it, method)` — are requests of
    /// `owner` waiting for the agent's answer, which will reach `owner` with that id.
    pub fn resume(
        cfg: PolicyConfig,
        agent_session: &str,
        load_session: bool,
        owner: ClientId,
        in_flight: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let mut p = Self::new(cfg)?;
        p.load_session = Some(load_session);
        if let Some(alias) = p.cfg.client_session_id.clone()
            && alias != agent_session
        {
            p.translation = Some((alias, agent_session.to_owned()));
        }
        p.owned.insert(agent_session.to_owned());
        for (id, method) in in_flight {
            let Ok(raw) = serde_json::from_str::<Box<RawValue>>(id) else {
                continue;
            };
            let Some(key) = envelope::id_key(&raw) else {
                continue;
            };
            if let Some(n) = id.parse::<u64>().ok().filter(|n| *n >= OWN_ID_START) {
                p.next_id = p.next_id.max(n + 1);
            }
            p.to_agent.insert(
                key,
                Outstanding::Client {
                    client: owner,
                    id: id.clone(),
                    method: method.clone(),
                    session: Some(agent_session.to_owned()),
                    detached: false,
                },
            );
        }
        Ok(p)
    }

    /// Adds the host's path resolution to P2: after the lexical check, each path's canonical
    /// form (symlinks resolved by `resolver`) must also be inside the scope.
    pub fn with_resolver(mut self, resolver: impl PathResolver + 'static) -> Self {
        self.resolver = Some(Box::new(resolver));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Whether the agent advertised `loadSession` (known once its initialize answer passed).
    pub fn agent_load_session(&self) -> Option<bool> {
        self.load_session
    }

    /// The sessions open on this connection, as the agent knows them.
    pub fn agent_sessions(&self) -> Vec<String> {
        let mut v: Vec<String> = self.owned.iter().cloned().collect();
        v.sort();
        v
    }

    /// The sessions handed out on this connection (clients' ids).
    pub fn sessions(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .owned
            .iter()
            .map(|s| self.sid_to_client(s).to_owned())
            .collect();
        v.sort();
        v
    }

    /// The agent's requests still waiting for a client's answer, in the order they came, as
    /// clients receive them: re-send them to a client that attaches (F.4).
    pub fn pending_requests(&self) -> Vec<Vec<u8>> {
        let mut v: Vec<&AgentRequest> = self.from_agent.values().collect();
        v.sort_by_key(|r| r.seq);
        v.into_iter().map(|r| r.message.clone()).collect()
    }

    /// How many session/request_permission are waiting for an answer (F.1 pendingPermissions).
    pub fn pending_permissions(&self) -> usize {
        self.from_agent
            .values()
            .filter(|r| r.method == "session/request_permission")
            .count()
    }

    /// How many requests are in flight towards the agent.
    pub fn in_flight(&self) -> usize {
        self.to_agent.len()
    }

    /// A client went away: responses due to it will be dropped (the turn goes on).
    pub fn detach(&mut self, client: ClientId) {
        for o in self.to_agent.values_mut() {
            if let Outstanding::Client {
                client: c,
                detached,
                ..
            } = o
            {
                if *c == client {
                    *detached = true;
                }
            }
        }
        for r in self.runs.values_mut() {
            if r.client == client {
                r.detached = true;
            }
        }
    }

    /// P2 and P3 on a client's session opener that the caller answers itself (a Session's
    /// session/load, F.4): the error response to send the client, or `None` when it passes.
    pub fn check_opener(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let Ok((_, Kind::Request { id, params, .. })) = envelope::parse(frame) else {
            return None;
        };
        let empty = json::Members(Vec::new());
        let pm = params.and_then(json::members);
        let pmr = pm.as_ref().unwrap_or(&empty);
        let checked = rules::p2_scope(&self.scope, self.resolver.as_deref(), pmr)
            .and_then(|()| rules::p3_mcp(&self.cfg.network, pmr));
        checked
            .err()
            .map(|r| error_response(id.get(), &r.error_json()))
    }

    /// Handles one frame (one WebSocket text message or one NDJSON line, without its `\n`).
    pub fn handle(&mut self, direction: Direction, frame: &[u8]) -> Vec<Action> {
        let mut out = self.handle_inner(direction, frame);
        if !self.secrets.is_empty() {
            // P5 covers the log too: no event carries a secret value.
            for a in &mut out {
                if let Action::Log(e) = a {
                    let ev = std::mem::replace(e, Event::Redacted { names: Vec::new() });
                    *e = ev.map_text(&|t| self.redact_text(t));
                }
            }
        }
        out
    }

    fn handle_inner(&mut self, direction: Direction, frame: &[u8]) -> Vec<Action> {
        let mut out = Vec::new();
        let side = match direction {
            Direction::FromClient(c) => Side::Client(c),
            Direction::FromAgent => Side::Agent,
        };
        if frame.len() > self.cfg.max_message_bytes {
            let reason = format!(
                "message of {} bytes exceeds the limit of {} bytes",
                frame.len(),
                self.cfg.max_message_bytes
            );
            self.malformed(
                direction,
                side,
                acp::ERR_INVALID_REQUEST,
                None,
                true,
                reason,
                &mut out,
            );
            return out;
        }
        let (_env, kind) = match envelope::parse(frame) {
            Ok(k) => k,
            Err(m) => {
                let (code, id, answerable, reason) = match m {
                    Malformed::NotJson(e) => (acp::ERR_PARSE, None, true, format!("not JSON: {e}")),
                    Malformed::Batch => (
                        acp::ERR_INVALID_REQUEST,
                        None,
                        true,
                        "batch messages are not supported".into(),
                    ),
                    Malformed::NotObject => (
                        acp::ERR_INVALID_REQUEST,
                        None,
                        true,
                        "a JSON-RPC message is an object".into(),
                    ),
                    Malformed::Invalid { reason, id } => {
                        let looks_like_response = !frame_has_member(frame, "method")
                            && (frame_has_member(frame, "result")
                                || frame_has_member(frame, "error"));
                        (
                            acp::ERR_INVALID_REQUEST,
                            id,
                            !looks_like_response,
                            reason.to_string(),
                        )
                    }
                };
                self.malformed(direction, side, code, id, answerable, reason, &mut out);
                return out;
            }
        };
        self.dispatch(direction, kind, frame, &mut out);
        out
    }

    fn dispatch(
        &mut self,
        direction: Direction,
        kind: Kind<'_>,
        frame: &[u8],
        out: &mut Vec<Action>,
    ) {
        match (direction, kind) {
            (Direction::FromClient(c), Kind::Request { id, method, params }) => {
                self.client_request(c, frame, id, &method, params, out);
            }
            (Direction::FromClient(c), Kind::Notification { method, params }) => {
                self.client_notification(c, frame, &method, params, out);
            }
            (Direction::FromClient(c), Kind::Response { id, result, error }) => {
                self.client_response(c, frame, id, result, error, out);
            }
            (Direction::FromAgent, Kind::Request { id, method, params }) => {
                self.agent_request(frame, id, &method, params, out);
            }
            (Direction::FromAgent, Kind::Notification { method, params }) => {
                self.agent_notification(frame, &method, params, out);
            }
            (Direction::FromAgent, Kind::Response { id, result, error }) => {
                self.agent_response(frame, id, result, error, out);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn malformed(
        &mut self,
        direction: Direction,
        side: Side,
        code: i64,
        id: Option<String>,
        answerable: bool,
        reason: String,
        out: &mut Vec<Action>,
    ) {
        match direction {
            Direction::FromClient(c) if answerable => {
                let err = serde_json::json!({"code": code, "message": reason}).to_string();
                out.push(Action::ToClient(
                    c,
                    error_response(id.as_deref().unwrap_or("null"), &err),
                ));
                out.push(Action::Log(Event::Refused {
                    from: side,
                    policy: None,
                    code,
                    method: None,
                    reason,
                }));
            }
            _ => out.push(Action::Log(Event::Dropped {
                from: side,
                policy: None,
                method: None,
                reason,
            })),
        }
    }

    // ---- client → agent -------------------------------------------------------------------

    fn client_request(
        &mut self,
        client: ClientId,
        frame: &[u8],
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        let side = Side::Client(client);
        let mut splice = Splice::new();
        // Id towards the agent: the client's own when it is plain and free, else one of ours.
        let key = envelope::id_key(id).expect("requests have usable ids");
        let agent_key = if envelope::id_is_plain(id) && !self.to_agent.contains_key(&key) {
            key
        } else {
            let (k, text) = self.fresh_id();
            splice.replace(json::span(frame, id.get()), text);
            k
        };
        let verdict = self.check_client_message(side, frame, method, params, splice, out);
        match verdict {
            Verdict::Forward(bytes) => {
                let session = self
                    .params_session(params)
                    .map(|s| self.sid_to_agent(&s).to_owned());
                self.to_agent.insert(
                    agent_key,
                    Outstanding::Client {
                        client,
                        id: id.get().to_owned(),
                        method: method.to_owned(),
                        session,
                        detached: false,
                    },
                );
                out.push(Action::ToAgent(bytes));
            }
            Verdict::Refuse(r) => {
                out.push(Action::ToClient(
                    client,
                    error_response(id.get(), &r.error_json()),
                ));
                out.push(Action::Log(Event::Refused {
                    from: side,
                    policy: Some(r.policy),
                    code: r.code,
                    method: Some(method.to_owned()),
                    reason: r.message,
                }));
            }
            Verdict::Drop { policy, reason } => {
                // Requests are never dropped: answer them.
                let r = Refusal {
                    code: acp::ERR_INVALID_REQUEST,
                    policy,
                    message: reason,
                    name: None,
                };
                out.push(Action::ToClient(
                    client,
                    error_response(id.get(), &r.error_json()),
                ));
                out.push(Action::Log(Event::Refused {
                    from: side,
                    policy: Some(policy),
                    code: r.code,
                    method: Some(method.to_owned()),
                    reason: r.message,
                }));
            }
        }
    }

    fn client_notification(
        &mut self,
        client: ClientId,
        frame: &[u8],
        method: &str,
        params: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        let side = Side::Client(client);
        match self.check_client_message(side, frame, method, params, Splice::new(), out) {
            Verdict::Forward(bytes) => out.push(Action::ToAgent(bytes)),
            Verdict::Refuse(r) => out.push(Action::Log(Event::Dropped {
                from: side,
                policy: Some(r.policy),
                method: Some(method.to_owned()),
                reason: r.message,
            })),
            Verdict::Drop { policy, reason } => out.push(Action::Log(Event::Dropped {
                from: side,
                policy: Some(policy),
                method: Some(method.to_owned()),
                reason,
            })),
        }
    }

    /// P1–P8 on a client's request or notification, in order. `splice` holds the edits made
    /// so far (the id).
    fn check_client_message(
        &mut self,
        side: Side,
        frame: &[u8],
        method: &str,
        params: Option<&RawValue>,
        mut splice: Splice,
        out: &mut Vec<Action>,
    ) -> Verdict {
        let pm = params.and_then(json::members);
        // P1
        if method == "initialize" {
            let p1 = rules::p1_initialize(frame, params);
            if !p1.is_empty() {
                out.push(Action::Log(Event::Rewritten {
                    from: side,
                    policy: "P1",
                    method: Some(method.to_owned()),
                    what: "clientCapabilities.fs and terminal set to false".into(),
                }));
                splice.extend(p1);
            }
        }
        let opener = OPENERS.contains(&method);
        let empty = json::Members(Vec::new());
        let pmr = pm.as_ref().unwrap_or(&empty);
        if opener {
            // P2
            if let Err(r) = rules::p2_scope(&self.scope, self.resolver.as_deref(), pmr) {
                return Verdict::Refuse(r);
            }
            // P3
            if let Err(r) = rules::p3_mcp(&self.cfg.network, pmr) {
                return Verdict::Refuse(r);
            }
        }
        // P4
        if !(rules::AGENT_METHODS.contains(&method) || method.starts_with('_')) {
            return Verdict::Refuse(Refusal {
                code: acp::ERR_NOT_PERMITTED,
                policy: "P4",
                message: format!("{method} is not an ACP agent method"),
                name: None,
            });
        }
        if let Err(r) = self.p4_sessions(frame, method, pmr, &mut splice) {
            return Verdict::Refuse(r);
        }
        // P6
        if rules::is_daemon_method(method) {
            return Verdict::Refuse(Refusal {
                code: acp::ERR_METHOD_NOT_FOUND,
                policy: "P6",
                message: format!("{method}: methods under _handler/ belong to the daemon"),
                name: None,
            });
        }
        // P8
        if opener
            && !self.cfg.session_defaults.mcp_servers.is_empty()
            && let Err(r) =
                self.p8_defaults(side, frame, method, params, pm.as_ref(), &mut splice, out)
        {
            return Verdict::Refuse(r);
        }
        let bytes = if splice.is_empty() {
            frame.to_vec()
        } else {
            splice.apply(frame)
        };
        // P6: handler.dev/* _meta keys removed.
        match self.strip_meta(bytes, side, Some(method), out) {
            Ok(b) => Verdict::Forward(b),
            Err(()) => Verdict::Drop {
                policy: "P6",
                reason: "message nested too deeply".into(),
            },
        }
    }

    /// P4 on the sessions a client's message names: each one this connection opened (the
    /// agent's id written in place of a translated one), none the translation hides.
    fn p4_sessions(
        &self,
        frame: &[u8],
        method: &str,
        pmr: &json::Members<'_>,
        splice: &mut Splice,
    ) -> Result<(), Refusal> {
        for sid in pmr.all("sessionId") {
            let Some(s) = json::string(sid) else { continue };
            let hidden = self
                .translation
                .as_ref()
                .is_some_and(|(_, agent)| *agent == s);
            let agent_sid = self.sid_to_agent(&s).to_owned();
            if hidden {
                return Err(Refusal {
                    code: acp::ERR_NOT_PERMITTED,
                    policy: "P4",
                    message: format!("session {s:?} is not open on this connection"),
                    name: None,
                });
            }
            if agent_sid != s {
                splice.replace(json::span(frame, sid.get()), json::quote(&agent_sid));
            }
            if !rules::OPENING_METHODS.contains(&method) && !self.owned.contains(&agent_sid) {
                return Err(Refusal {
                    code: acp::ERR_NOT_PERMITTED,
                    policy: "P4",
                    message: format!("session {s:?} is not open on this connection"),
                    name: None,
                });
            }
        }
        Ok(())
    }

    /// P8: the launch's MCP servers added to a session opener's, a client's server of the same
    /// name refused.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one message being checked"
    )]
    fn p8_defaults(
        &self,
        side: Side,
        frame: &[u8],
        method: &str,
        params: Option<&RawValue>,
        pm: Option<&json::Members<'_>>,
        splice: &mut Splice,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        let empty = json::Members(Vec::new());
        let pmr = pm.unwrap_or(&empty);
        let existing = pm
            .and_then(|m| m.get("mcpServers"))
            .filter(|v| v.get() != "null");
        match rules::p8_merge(&self.cfg.session_defaults.mcp_servers, existing) {
            Err(r) => return Err(r),
            Ok(list) => {
                match (existing, params) {
                    (Some(e), _) => splice.replace(json::span(frame, e.get()), list),
                    (None, Some(p)) if pm.is_some() => {
                        let r = json::span(frame, p.get());
                        let sep = if pmr.0.is_empty() { "" } else { "," };
                        splice.insert(r.end - 1, format!("{sep}\"mcpServers\":{list}"));
                    }
                    _ => {}
                }
                out.push(Action::Log(Event::Rewritten {
                    from: side,
                    policy: "P8",
                    method: Some(method.to_owned()),
                    what: format!(
                        "added MCP servers {:?}",
                        self.cfg
                            .session_defaults
                            .mcp_servers
                            .iter()
                            .map(handler_contracts::McpServer::name)
                            .collect::<Vec<_>>()
                    ),
                }));
            }
        }
        Ok(())
    }

    fn client_response(
        &mut self,
        client: ClientId,
        frame: &[u8],
        id: &RawValue,
        result: Option<&RawValue>,
        _error: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        let side = Side::Client(client);
        let key = envelope::id_key(id).expect("responses have usable ids");
        let Some(req) = self.from_agent.remove(&key) else {
            out.push(Action::Log(Event::Dropped {
                from: side,
                policy: None,
                method: None,
                reason: format!("answer to id {} which is not waiting for one", id.get()),
            }));
            return;
        };
        let bytes = match self.strip_meta(frame.to_vec(), side, None, out) {
            Ok(b) => b,
            Err(()) => {
                // Keep the request answerable by another client.
                self.from_agent.insert(key, req);
                out.push(Action::Log(Event::Dropped {
                    from: side,
                    policy: Some("P6"),
                    method: None,
                    reason: "message nested too deeply".into(),
                }));
                return;
            }
        };
        out.push(Action::ToAgent(bytes));
        if req.method != "session/request_permission" {
            return;
        }
        let outcome_raw = result
            .and_then(json::members)
            .and_then(|m| m.get("outcome").map(|o| o.get().to_owned()))
            .unwrap_or_else(|| "null".into());
        let resolved = format!(
            r#"{{"jsonrpc":"2.0","method":"_handler/permission_resolved","params":{{"requestId":{},"toolCallId":{},"outcome":{}}}}}"#,
            req.id,
            req.tool_call
                .as_ref()
                .map(|t| json::quote(&t.tool_call_id))
                .unwrap_or_else(|| "null".into()),
            outcome_raw
        );
        let resolved = self.redact(resolved.into_bytes(), out);
        out.push(Action::Broadcast {
            except: Some(client),
            message: resolved,
        });
        out.push(Action::Log(Event::PermissionAnswered {
            by: Answerer::Client(client),
            request_id: req.id,
            session_id: req.session.map(|s| self.sid_to_client(&s).to_owned()),
            tool_call: req.tool_call,
            outcome: self.redact_text(outcome_text(result)),
        }));
    }

    // ---- agent → client -------------------------------------------------------------------

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per agent request the policy treats (C.4), each a short rule"
    )]
    fn agent_request(
        &mut self,
        frame: &[u8],
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        let refuse = |out: &mut Vec<Action>, r: Refusal| refuse_agent(out, id, method, r);
        if let Err(r) = agent_request_method(method) {
            return refuse(out, r);
        }
        let key = envelope::id_key(id).expect("requests have usable ids");
        // P6: the daemon's ids are its own, so a client's answer to its question is never
        // the agent's to provoke (decision 0132).
        if let IdKey::Str(s) = &key
            && rules::is_daemon_id(s)
        {
            let r = Refusal {
                code: acp::ERR_INVALID_REQUEST,
                policy: "P6",
                message: format!(
                    "id {}: ids starting {} belong to the daemon",
                    id.get(),
                    acp::DAEMON_ID_PREFIX
                ),
                name: None,
            };
            return refuse(out, r);
        }
        if self.from_agent.contains_key(&key) {
            let r = Refusal {
                code: acp::ERR_INVALID_REQUEST,
                policy: "P4",
                message: format!("id {} is already waiting for an answer", id.get()),
                name: None,
            };
            return refuse(out, r);
        }
        let pm = params.and_then(json::members);
        let session = pm
            .as_ref()
            .and_then(|m| m.get("sessionId"))
            .and_then(json::string)
            .map(std::borrow::Cow::into_owned);
        let tool_call = (method == "session/request_permission")
            .then(|| self.permission_tool_call(pm.as_ref(), session.as_deref()))
            .flatten();
        // P9
        if let Some((result, outcome)) = self.p9_answer(method, pm.as_ref()) {
            out.push(Action::ToAgent(
                format!(
                    r#"{{"jsonrpc":"2.0","id":{},"result":{}}}"#,
                    id.get(),
                    result
                )
                .into_bytes(),
            ));
            out.push(Action::Log(Event::PermissionAnswered {
                by: Answerer::Daemon,
                request_id: id.get().to_owned(),
                session_id: session.as_deref().map(|s| self.sid_to_client(s).to_owned()),
                tool_call,
                outcome,
            }));
            return;
        }
        let Ok(message) = self.agent_output(frame, Some(method), params, None, out) else {
            let r = Refusal {
                code: acp::ERR_INVALID_REQUEST,
                policy: "P6",
                message: "message nested too deeply".into(),
                name: None,
            };
            return refuse(out, r);
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.from_agent.insert(
            key,
            AgentRequest {
                seq,
                id: id.get().to_owned(),
                method: method.to_owned(),
                message: message.clone(),
                session,
                tool_call,
            },
        );
        out.push(Action::Broadcast {
            except: None,
            message,
        });
    }

    /// What a permission request asks about: its tool call, completed from the updates seen
    /// before (an agent may send only the id), secrets redacted (P5).
    fn permission_tool_call(
        &self,
        pm: Option<&json::Members<'_>>,
        session: Option<&str>,
    ) -> Option<ToolCallInfo> {
        pm.and_then(|m| m.get("toolCall"))
            .and_then(|t| self.tools.describe(session, t))
            .map(|t| self.redact_tool(t))
    }

    /// P9: in an unattended run, the daemon's answer (result JSON, outcome logged) to a
    /// permission request or an elicitation; `None` when the request goes to the clients.
    fn p9_answer(&self, method: &str, pm: Option<&json::Members<'_>>) -> Option<(String, String)> {
        let mode = self.cfg.unattended?;
        match method {
            "session/request_permission" => {
                Some(rules::p9_choose(mode, pm.and_then(|m| m.get("options"))))
            }
            "elicitation/create" => Some((
                r#"{"action":"cancel"}"#.to_owned(),
                "cancel (elicitation)".to_owned(),
            )),
            _ => None,
        }
    }

    fn agent_notification(
        &mut self,
        frame: &[u8],
        method: &str,
        params: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        // P6
        if rules::is_daemon_method(method) {
            out.push(Action::Log(Event::Dropped {
                from: Side::Agent,
                policy: Some("P6"),
                method: Some(method.to_owned()),
                reason: format!("{method}: methods under _handler/ belong to the daemon"),
            }));
            return;
        }
        if method == "session/update" && TOOL_CALL.find(frame).is_some() {
            if let Some(pm) = params.and_then(json::members) {
                let sid = pm.get("sessionId").and_then(json::string);
                let update = pm.get("update").and_then(json::members);
                if let (Some(sid), Some(update)) = (sid, update) {
                    self.tools.observe(&sid, &update);
                }
            }
        }
        match self.agent_output(frame, Some(method), params, None, out) {
            Ok(message) => out.push(Action::Broadcast {
                except: None,
                message,
            }),
            Err(()) => out.push(Action::Log(Event::Dropped {
                from: Side::Agent,
                policy: Some("P6"),
                method: Some(method.to_owned()),
                reason: "message nested too deeply".into(),
            })),
        }
    }

    /// The agent's answer to initialize: whether it can load sessions (recorded and logged).
    fn note_initialized(&mut self, rm: Option<&json::Members<'_>>, out: &mut Vec<Action>) {
        let load = rm
            .and_then(|m| m.get("agentCapabilities"))
            .and_then(json::members)
            .and_then(|c| c.get("loadSession"))
            .is_some_and(|v| v.get() == "true");
        self.load_session = Some(load);
        out.push(Action::Log(Event::AgentInitialized { load_session: load }));
    }

    /// F: the first session/new's id is shown to clients as the launch's client session id
    /// when the two differ.
    fn translate_first_session(&mut self, sid: &str, out: &mut Vec<Action>) {
        if self.translation.is_some() {
            return;
        }
        if let Some(alias) = self.cfg.client_session_id.clone()
            && alias != sid
        {
            out.push(Action::Log(Event::SessionTranslated {
                client_session_id: alias.clone(),
                agent_session_id: sid.to_owned(),
            }));
            self.translation = Some((alias, sid.to_owned()));
        }
    }

    fn agent_response(
        &mut self,
        frame: &[u8],
        id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        let key = envelope::id_key(id).expect("responses have usable ids");
        let Some(o) = self.to_agent.remove(&key) else {
            out.push(Action::Log(Event::Dropped {
                from: Side::Agent,
                policy: None,
                method: None,
                reason: format!(
                    "response to id {} which no request is waiting for",
                    id.get()
                ),
            }));
            return;
        };
        match o {
            Outstanding::Defaults { run } => self.defaults_step(run, result, error, out),
            Outstanding::Client {
                client,
                id: client_id,
                method,
                session,
                detached,
            } => {
                let rm = result.and_then(json::members);
                if method == "initialize" && result.is_some() {
                    self.note_initialized(rm.as_ref(), out);
                }
                let opened = match method.as_str() {
                    "session/new" | "session/fork" => rm
                        .as_ref()
                        .and_then(|m| m.get("sessionId"))
                        .and_then(json::string)
                        .map(std::borrow::Cow::into_owned),
                    "session/load" | "session/resume" if result.is_some() => session.clone(),
                    _ => None,
                };
                if result.is_some() && matches!(method.as_str(), "session/close" | "session/delete")
                {
                    if let Some(s) = &session {
                        self.owned.remove(s);
                    }
                }
                if let Some(sid) = opened {
                    if method == "session/new" {
                        self.translate_first_session(&sid, out);
                    }
                    let d = &self.cfg.session_defaults;
                    if matches!(method.as_str(), "session/new" | "session/load")
                        && (d.mode_id.is_some() || !d.config_options.is_empty())
                    {
                        self.start_defaults(client, client_id, detached, method, sid, frame, out);
                        return;
                    }
                    self.owned.insert(sid.clone());
                    out.push(Action::Log(Event::SessionOpened {
                        session_id: self.sid_to_client(&sid).to_owned(),
                        method: method.clone(),
                    }));
                }
                self.deliver_response(client, &client_id, detached, frame, out);
            }
        }
    }

    /// Sends an agent's response to the client that asked, with its own id.
    fn deliver_response(
        &mut self,
        client: ClientId,
        client_id: &str,
        detached: bool,
        frame: &[u8],
        out: &mut Vec<Action>,
    ) {
        if detached {
            out.push(Action::Log(Event::Dropped {
                from: Side::Agent,
                policy: None,
                method: None,
                reason: format!("response due to client {} which has detached", client.0),
            }));
            return;
        }
        let Ok((env, _)) = envelope::parse(frame) else {
            return;
        };
        let id = env.id.expect("responses have ids");
        let bytes = match self.agent_output(frame, None, None, Some((id, client_id)), out) {
            Ok(b) => b,
            Err(()) => {
                let err = serde_json::json!({"code": acp::ERR_INVALID_REQUEST,
                    "message": "the agent's response was nested too deeply"})
                .to_string();
                error_response(client_id, &err)
            }
        };
        out.push(Action::ToClient(client, bytes));
    }

    // ---- P7 -------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn start_defaults(
        &mut self,
        client: ClientId,
        client_id: String,
        detached: bool,
        method: String,
        session: String,
        response: &[u8],
        out: &mut Vec<Action>,
    ) {
        let d = &self.cfg.session_defaults;
        let mut steps = VecDeque::new();
        let sid = json::quote(&session);
        if let Some(m) = &d.mode_id {
            steps.push_back((
                "session/set_mode".to_owned(),
                format!(r#"{{"sessionId":{sid},"modeId":{}}}"#, json::quote(m)),
                format!("mode {m:?}"),
            ));
        }
        for (k, v) in &d.config_options {
            steps.push_back((
                "session/set_config_option".to_owned(),
                format!(
                    r#"{{"sessionId":{sid},"configId":{},"value":{}}}"#,
                    json::quote(k),
                    json::quote(v)
                ),
                format!("option {k:?} = {v:?}"),
            ));
        }
        let run_id = self.next_seq;
        self.next_seq += 1;
        let run = DefaultsRun {
            client,
            client_id,
            detached,
            method,
            session,
            response: response.to_vec(),
            steps,
            current: (String::new(), String::new()),
            mode: d.mode_id.clone(),
            config_options: None,
        };
        self.runs.insert(run_id, run);
        self.next_defaults_step(run_id, out);
    }

    fn next_defaults_step(&mut self, run_id: u64, out: &mut Vec<Action>) {
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        if let Some((method, params, label)) = run.steps.pop_front() {
            run.current = (method.clone(), label);
            let (key, id_text) = self.fresh_id();
            self.to_agent
                .insert(key, Outstanding::Defaults { run: run_id });
            out.push(Action::ToAgent(
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id_text},"method":"{method}","params":{params}}}"#
                )
                .into_bytes(),
            ));
            return;
        }
        let run = self.runs.remove(&run_id).expect("present");
        // Done: hand the session out, its response showing the mode and options applied.
        let mut splice = Splice::new();
        if let Ok((env, _)) = envelope::parse(&run.response) {
            if let Some(rm) = env.result.and_then(json::members) {
                if let (Some(mode), Some(modes)) =
                    (&run.mode, rm.get("modes").and_then(json::members))
                {
                    if let Some(cur) = modes.get("currentModeId") {
                        splice.replace(json::span(&run.response, cur.get()), json::quote(mode));
                    }
                }
                if let (Some(opts), Some(cur)) = (&run.config_options, rm.get("configOptions")) {
                    splice.replace(json::span(&run.response, cur.get()), opts.clone());
                }
            }
        }
        let response = if splice.is_empty() {
            run.response
        } else {
            splice.apply(&run.response)
        };
        self.owned.insert(run.session.clone());
        out.push(Action::Log(Event::SessionOpened {
            session_id: self.sid_to_client(&run.session).to_owned(),
            method: run.method.clone(),
        }));
        self.deliver_response(run.client, &run.client_id, run.detached, &response, out);
    }

    fn defaults_step(
        &mut self,
        run_id: u64,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
        out: &mut Vec<Action>,
    ) {
        if let Some(err) = error {
            let Some(run) = self.runs.remove(&run_id) else {
                return;
            };
            let agent_msg = json::members(err)
                .and_then(|m| {
                    m.get("message")
                        .and_then(json::string)
                        .map(std::borrow::Cow::into_owned)
                })
                .unwrap_or_default();
            let reason = self.redact_text(format!(
                "{} ({}): {}",
                run.current.1, run.current.0, agent_msg
            ));
            out.push(Action::Log(Event::SessionDefaultsFailed {
                session_id: self.sid_to_client(&run.session).to_owned(),
                step: run.current.0.clone(),
                reason: reason.clone(),
            }));
            if run.detached {
                return;
            }
            let r = Refusal {
                code: acp::ERR_SESSION_DEFAULTS,
                policy: "P7",
                message: format!("session defaults could not be applied: {reason}"),
                name: None,
            };
            let bytes = self.redact(error_response(&run.client_id, &r.error_json()), out);
            out.push(Action::ToClient(run.client, bytes));
            return;
        }
        if let Some(opts) = result
            .and_then(json::members)
            .and_then(|m| m.get("configOptions"))
        {
            if let Some(run) = self.runs.get_mut(&run_id) {
                run.config_options = Some(opts.get().to_owned());
            }
        }
        self.next_defaults_step(run_id, out);
    }

    // ---- helpers --------------------------------------------------------------------------

    /// What the clients receive of an agent's message: the id restored (responses), the
    /// session id translated (F.6.2), `handler.dev/*` `_meta` keys removed (P6), secrets
    /// redacted (P5). The original bytes when none of these applies.
    fn agent_output(
        &mut self,
        frame: &[u8],
        method: Option<&str>,
        params: Option<&RawValue>,
        restore_id: Option<(&RawValue, &str)>,
        out: &mut Vec<Action>,
    ) -> Result<Vec<u8>, ()> {
        let mut splice = Splice::new();
        if let Some((id, client_id)) = restore_id {
            if id.get() != client_id {
                splice.replace(json::span(frame, id.get()), client_id.to_owned());
            }
        }
        if let Some((alias, agent_sid)) = &self.translation {
            let holder = match restore_id {
                Some(_) => envelope::parse(frame).ok().and_then(|(e, _)| e.result),
                None => params,
            };
            if let Some(m) = holder.and_then(json::members) {
                for sid in m.all("sessionId") {
                    if json::string(sid).is_some_and(|s| s == agent_sid.as_str()) {
                        splice.replace(json::span(frame, sid.get()), json::quote(alias));
                    }
                }
            }
        }
        let bytes = if splice.is_empty() {
            frame.to_vec()
        } else {
            splice.apply(frame)
        };
        let bytes = self.strip_meta(bytes, Side::Agent, method, out)?;
        Ok(self.redact(bytes, out))
    }

    /// P6 on a whole message: `handler.dev/*` keys of `_meta` objects removed.
    fn strip_meta(
        &self,
        bytes: Vec<u8>,
        side: Side,
        method: Option<&str>,
        out: &mut Vec<Action>,
    ) -> Result<Vec<u8>, ()> {
        if META_PREFIX.find(&bytes).is_none() && !redact::has_hiding_escape(&bytes) {
            return Ok(bytes);
        }
        let Ok(root) = serde_json::from_slice::<&RawValue>(&bytes) else {
            return Ok(bytes);
        };
        let mut splice = Splice::new();
        let removed = rules::p6_strip_meta(&bytes, root, &mut splice, 0)?;
        if removed == 0 {
            return Ok(bytes);
        }
        out.push(Action::Log(Event::Rewritten {
            from: side,
            policy: "P6",
            method: method.map(str::to_owned),
            what: format!("removed {removed} handler.dev/ _meta key(s)"),
        }));
        Ok(splice.apply(&bytes))
    }

    /// P5 on a whole message.
    fn redact(&self, bytes: Vec<u8>, out: &mut Vec<Action>) -> Vec<u8> {
        match self.secrets.redact(&bytes) {
            None => bytes,
            Some((b, names)) => {
                out.push(Action::Log(Event::Redacted { names }));
                b
            }
        }
    }

    fn redact_text(&self, text: String) -> String {
        if self.secrets.is_empty() {
            return text;
        }
        let q = json::quote(&text);
        match self.secrets.redact(q.as_bytes()) {
            Some((b, _)) => serde_json::from_slice(&b).unwrap_or_default(),
            None => text,
        }
    }

    fn redact_tool(&self, mut t: ToolCallInfo) -> ToolCallInfo {
        t.title = t.title.map(|s| self.redact_text(s));
        t.tool_call_id = self.redact_text(t.tool_call_id);
        t
    }

    fn params_session(&self, params: Option<&RawValue>) -> Option<String> {
        params
            .and_then(json::members)
            .and_then(|m| m.get("sessionId"))
            .and_then(json::string)
            .map(std::borrow::Cow::into_owned)
    }

    fn sid_to_agent<'s>(&'s self, s: &'s str) -> &'s str {
        match &self.translation {
            Some((alias, agent)) if alias == s => agent,
            _ => s,
        }
    }

    fn sid_to_client<'s>(&'s self, s: &'s str) -> &'s str {
        match &self.translation {
            Some((alias, agent)) if agent == s => alias,
            _ => s,
        }
    }

    fn fresh_id(&mut self) -> (IdKey, String) {
        loop {
            let n = self.next_id;
            self.next_id += 1;
            let key = IdKey::Num(n.to_string());
            if !self.to_agent.contains_key(&key) {
                return (key, n.to_string());
            }
        }
    }
}

/// A permission answer's outcome in words: `selected ID`, `cancelled`, `error`, or its JSON.
fn outcome_text(result: Option<&RawValue>) -> String {
    let Some(result) = result else {
        return "error".into();
    };
    let Some(o) = json::members(result).and_then(|m| m.get("outcome")) else {
        return result.get().to_owned();
    };
    let Some(m) = json::members(o) else {
        return o.get().to_owned();
    };
    match (
        m.get("outcome").and_then(json::string).as_deref(),
        m.get("optionId").and_then(json::string),
    ) {
        (Some("selected"), Some(id)) => format!("selected {id}"),
        (Some(other), _) => other.to_owned(),
        _ => o.get().to_owned(),
    }
}

/// `{"jsonrpc":"2.0","id":ID,"error":ERR}`.
fn error_response(id: &str, err_json: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{err_json}}}"#).into_bytes()
}

/// Whether a top-level member named `name` appears in `frame` (a rough check for frames the
/// envelope parser refused).
fn frame_has_member(frame: &[u8], name: &str) -> bool {
    serde_json::from_slice::<json::Members<'_>>(frame)
        .map(|m| m.get(name).is_some())
        .unwrap_or(false)
}

/// Answers an agent's request with the refusal's error, and logs it.
fn refuse_agent(out: &mut Vec<Action>, id: &RawValue, method: &str, r: Refusal) {
    out.push(Action::ToAgent(error_response(id.get(), &r.error_json())));
    out.push(Action::Log(Event::Refused {
        from: Side::Agent,
        policy: Some(r.policy),
        code: r.code,
        method: Some(method.to_owned()),
        reason: r.message,
    }));
}

/// P4 and P6 on an agent's request: only the client methods ACP lets an agent call (and
/// extensions), none of the daemon's own.
fn agent_request_method(method: &str) -> Result<(), Refusal> {
    // P4
    if !(rules::AGENT_TO_CLIENT_REQUESTS.contains(&method) || method.starts_with('_')) {
        return Err(Refusal {
            code: acp::ERR_NOT_PERMITTED,
            policy: "P4",
            message: format!("{method} is not permitted: the agent works in its sandbox"),
            name: None,
        });
    }
    // P6
    if rules::is_daemon_method(method) {
        return Err(Refusal {
            code: acp::ERR_METHOD_NOT_FOUND,
            policy: "P6",
            message: format!("{method}: methods under _handler/ belong to the daemon"),
            name: None,
        });
    }
    Ok(())
}
