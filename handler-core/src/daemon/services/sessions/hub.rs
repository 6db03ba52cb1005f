//! The LiveSession hub (F.4–F.7): one task per running session that owns the agent's stdio
//! (through the policy pipeline, once, C.4/F.6.6), the event log and the attachments. Its state
//! is its own; everything reaches it through its inbox, so no lock is held across an await.

use std::time::{Duration, Instant};

use handler_contracts::acp::{self, close};
use handler_contracts::session::{
    self as ev, SessionEvent, SessionState, StopHow, is_user_chunk, prompt_updates,
    replay_notification, with_seq,
};
use handler_policy::{Action, ClientId, Direction, Pipeline};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::daemon::fsutil;
use crate::daemon::state::AppState;
pub(crate) use crate::daemon::state::sessions::{Handle, Inbox, Out, Replay, Started};

mod questions;
use crate::daemon::store::sessions::EventLog;
pub(crate) use questions::{Asking, Questions};

/// The pipeline's client number for the daemon's own requests (initialize, session/new|load,
/// a session's first prompt).
pub(crate) const DAEMON: ClientId = ClientId(0);

const ID_INIT: &str = "\"handler-init\"";
const ID_OPEN: &str = "\"handler-open\"";
const ID_PROMPT: &str = "\"handler-prompt\"";

/// Waits until the start is over.
pub(crate) async fn wait_started(h: &Handle) -> Started {
    let mut rx = h.started.clone();
    let r = rx.wait_for(|s| *s != Started::Pending).await;
    r.map(|s| s.clone())
        .unwrap_or_else(|_| Started::Failed("the session stopped while starting".into()))
}

struct Attachment {
    id: ClientId,
    out: mpsc::Sender<Out>,
    close: Option<oneshot::Sender<(u16, String)>>,
    /// It has its replay: live traffic goes to it.
    ready: bool,
}

/// The turn in progress: who prompted, with which id (raw JSON).
struct Turn {
    client: ClientId,
    id: String,
}

/// How long an agent has to end a timed-out turn after session/cancel before the daemon ends it.
const CANCEL_GRACE: Duration = Duration::from_secs(15);

/// A run's state in its hub (D.18): its result schema, its turns' timeout, whether the turn in
/// progress timed out and whether the one retry was sent.
pub(crate) struct RunState {
    result: Value,
    timeout: Duration,
    deadline: Option<tokio::time::Instant>,
    timed_out: bool,
    retried: bool,
}

impl RunState {
    /// A run whose final message is judged against `result`, each turn cut after `timeout`.
    pub(crate) fn new(result: Value, timeout: Duration) -> Self {
        RunState {
            result,
            timeout,
            deadline: None,
            timed_out: false,
            retried: false,
        }
    }
}

/// How the hub's loop ended.
pub(crate) enum Ending {
    Stop(StopHow, String, Option<oneshot::Sender<()>>),
    AgentExit,
    Error(String),
    /// The daemon stops mid-turn: the kept agent goes on for the next one (issue 28 item 6).
    Leave,
}

/// The hub's state.
pub(crate) struct Hub {
    pub app: AppState,
    pub id: String,
    pub pipeline: Pipeline,
    pub secrets: Vec<(String, String)>,
    pub log: EventLog,
    pub to_agent: mpsc::Sender<Vec<u8>>,
    pub started: watch::Sender<Started>,
    /// The session's id as clients know it (the agent's may differ after a restart, F.6.2).
    pub sid: Option<String>,
    /// Whether to open with session/load (else session/new).
    pub load: bool,
    pub scope: String,
    pub first_prompt: Option<String>,
    pub unattended: bool,
    pub idle_since: Instant,
    clients: Vec<Attachment>,
    next_client: u64,
    init_result: Option<String>,
    modes: Value,
    config_options: Value,
    turn: Option<Turn>,
    /// Client requests whose success the others are shown: (client, id) → (method, params).
    watched: Vec<(ClientId, String, String, Value)>,
    /// The agent's replay of a restart's session/load, not logged nor relayed.
    suppress_replay: bool,
    /// The daemon's questions about denied hosts (issue 13 item 7).
    pub questions: Questions,
    pub ending: Option<Ending>,
    /// The git guard of the sandbox (issue 14): its work is brought back at each turn's end.
    pub git_guard: Option<std::sync::Arc<crate::daemon::launch::gitguard::GuardSession>>,
    /// A run's state (D.18), for a session of an agent with an interface started with an input.
    pub run: Option<RunState>,
    /// The agent's text since the last prompt (a run's answer).
    answer: String,
    /// The agent line being processed (its keeper's number): the events it makes say so
    /// (issue 28 item 6).
    pub agent_line: Option<u64>,
    /// A kept agent's sandbox name: its record keeps the session's opening for the next daemon.
    pub kept: Option<String>,
}

fn id_text(v: &Value) -> String {
    v.get("id")
        .map(Value::to_string)
        .unwrap_or_else(|| "null".into())
}

fn error_response(id: &str, code: i64, message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{}}}"#,
        json!({"code": code, "message": message})
    )
}

impl Hub {
    /// A hub for a session whose agent was just launched.
    #[allow(clippy::too_many_arguments, reason = "the parts of one start")]
    pub(crate) fn new(
        app: AppState,
        id: String,
        pipeline: Pipeline,
        log: EventLog,
        to_agent: mpsc::Sender<Vec<u8>>,
        started: watch::Sender<Started>,
        (sid, load, scope): (Option<String>, bool, String),
        first_prompt: Option<String>,
    ) -> Self {
        let secrets = pipeline.config().secrets.clone();
        let unattended = pipeline.config().unattended.is_some();
        Hub {
            app,
            id,
            pipeline,
            secrets,
            log,
            to_agent,
            started,
            sid,
            load,
            scope,
            first_prompt,
            unattended,
            idle_since: Instant::now(),
            clients: Vec::new(),
            next_client: 1,
            init_result: None,
            modes: Value::Null,
            config_options: Value::Null,
            turn: None,
            watched: Vec::new(),
            suppress_replay: false,
            questions: Questions::default(),
            ending: None,
            git_guard: None,
            run: None,
            answer: String::new(),
            agent_line: None,
            kept: None,
        }
    }

    /// The hub of a kept agent this daemon takes over (issue 28 item 6): open as `open` says,
    /// the prompt `prompt` (its id as the agent got it) still in progress when there is one.
    pub(crate) fn taken_over(
        &mut self,
        open: &crate::daemon::launch::records::OpenRecord,
        prompt: Option<String>,
    ) {
        self.init_result = Some(open.init_result.clone());
        self.modes = open.modes.clone();
        self.config_options = open.config_options.clone();
        self.load = false;
        self.first_prompt = None;
        if let Some(id) = prompt {
            self.turn = Some(Turn { client: DAEMON, id });
        }
        self.note(|n, t| {
            SessionEvent::started(n, t, Some("taken over by a restarted daemon".into()))
        });
        let busy = self.turn.is_some();
        self.app.sessions.update(&self.id, |s| {
            s.state = SessionState::Running;
            s.busy = busy;
            s.error = None;
        });
        let _ = self.started.send(Started::Running);
    }

    /// A kept agent's record keeps what the session's opening learnt, for the next daemon.
    fn save_open(&self) {
        let (Some(name), Some(init)) = (&self.kept, &self.init_result) else {
            return;
        };
        let Some(agent_session) = self.pipeline.agent_sessions().into_iter().next() else {
            return;
        };
        let open = crate::daemon::launch::records::OpenRecord {
            init_result: init.clone(),
            agent_session,
            load_session: self.pipeline.agent_load_session().unwrap_or(false),
            modes: self.modes.clone(),
            config_options: self.config_options.clone(),
        };
        crate::daemon::launch::records::kept_opened(&self.app.config.state_dir, name, open);
    }

    // ---- the log --------------------------------------------------------------------------

    fn append(&mut self, make: impl FnOnce(u64) -> SessionEvent) -> u64 {
        let secrets = &self.secrets;
        let line = self.agent_line;
        let make = |n| {
            let mut e = make(n);
            e.agent_line = e.agent_line.or(line);
            e
        };
        match self
            .log
            .append(make, |l| handler_policy::redact(&l, secrets))
        {
            Ok(seq) => seq,
            Err(e) => {
                tracing::error!(session = %self.id, error = %e, "event log not written");
                self.log.last_seq()
            }
        }
    }

    fn now() -> String {
        fsutil::now_rfc3339()
    }

    /// Logs a lifecycle or turn event.
    pub(crate) fn note(&mut self, make: impl FnOnce(u64, String) -> SessionEvent) {
        let t = Self::now();
        self.append(|n| make(n, t));
    }

    // ---- sending --------------------------------------------------------------------------

    fn sid(&self) -> String {
        self.sid.clone().unwrap_or_default()
    }

    /// Queues a message for one client; one whose queue is full is closed 4003 (F.7).
    fn send_to(&mut self, client: ClientId, msg: Out) {
        let Some(i) = self.clients.iter().position(|c| c.id == client) else {
            return;
        };
        if let Err(e) = self.clients[i].out.try_send(msg) {
            let full = matches!(e, mpsc::error::TrySendError::Full(_));
            let mut a = self.clients.remove(i);
            if full {
                tracing::info!(session = %self.id, client = client.0, "attachment too slow: closed");
                if let Some(c) = a.close.take() {
                    let _ = c.send((close::TOO_SLOW, "too slow".into()));
                }
            }
            self.state_changed();
        }
    }

    /// Sends to every client that has its replay, but `except`.
    fn broadcast(&mut self, except: Option<ClientId>, text: &str) {
        let ids: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|c| c.ready && Some(c.id) != except)
            .map(|c| c.id)
            .collect();
        for id in ids {
            self.send_to(id, Out::Text(text.to_owned()));
        }
    }

    /// The permission requests waiting for an answer: the agent's and the daemon's questions.
    fn pending(&self) -> usize {
        self.pipeline.pending_permissions() + self.questions.len()
    }

    fn session_state_message(&self) -> String {
        json!({"jsonrpc": "2.0", "method": "_handler/session_state", "params": {
            "sessionId": self.sid(), "state": "running", "busy": self.turn.is_some(),
            "pendingPermissions": self.pending(),
            "attached": self.clients.len(),
        }})
        .to_string()
    }

    /// `_handler/session_state` to every client (F.7) and the record brought up to date.
    fn state_changed(&mut self) {
        let busy = self.turn.is_some();
        let pending = self.pending() as u32;
        let attached = self.clients.len() as u32;
        self.app.sessions.update(&self.id, |r| {
            r.busy = busy;
            r.pending_permissions = pending;
            r.attached = attached;
            r.last_activity_at = fsutil::now_rfc3339();
        });
        let m = self.session_state_message();
        self.broadcast(None, &m);
    }

    // ---- the pipeline's actions -----------------------------------------------------------

    async fn apply(&mut self, actions: Vec<Action>) {
        let mut work: std::collections::VecDeque<Action> = actions.into();
        while let Some(a) = work.pop_front() {
            match a {
                Action::ToAgent(m) => {
                    let _ = self.to_agent.send(m).await;
                }
                Action::ToClient(c, m) => work.extend(self.deliver(c, m)),
                Action::Broadcast { except, message } => self.agent_broadcast(except, message),
                Action::Log(e) => {
                    tracing::info!(session = %self.id, event = %serde_json::to_string(&e).unwrap_or_default(), "policy");
                }
            }
        }
    }

    /// A message for one client (the daemon's own answers give more actions to carry out).
    fn deliver(&mut self, c: ClientId, m: Vec<u8>) -> Vec<Action> {
        let text = String::from_utf8_lossy(&m).into_owned();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let id = id_text(&v);
        let mut more = Vec::new();
        if self
            .turn
            .as_ref()
            .is_some_and(|t| t.client == c && t.id == id)
        {
            let reason = v
                .pointer("/result/stopReason")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned();
            let reason = self.end_turn(&reason);
            more = self.run_turn_ended(&reason);
        }
        if c == DAEMON {
            let mut actions = self.own_response(&id, &v);
            actions.extend(more);
            return actions;
        }
        if let Some(i) = self.watched.iter().position(|w| w.0 == c && w.1 == id) {
            let (_, _, method, params) = self.watched.remove(i);
            if v.get("result").is_some() {
                self.show_change(c, &method, &params, v.get("result"));
            }
        }
        // A response due to a client that has detached is dropped (send_to finds none).
        self.send_to(c, Out::Text(text));
        more
    }

    /// The turn in progress ended with `reason` (`timed_out` for a run's turn cut by its
    /// timeout): logged, shown, the record updated. Gives the reason as recorded.
    fn end_turn(&mut self, reason: &str) -> String {
        self.turn = None;
        let reason = match &mut self.run {
            Some(r) if r.timed_out => {
                r.timed_out = false;
                "timed_out"
            }
            _ => reason,
        };
        if let Some(g) = self.git_guard.clone() {
            let app = self.app.clone();
            let when = format!("turn end ({reason})");
            tokio::spawn(async move { g.bring_back(&*app.launcher, &when).await });
        }
        let r = reason.to_owned();
        self.note(|n, t| SessionEvent::turn_end(n, t, r));
        let reason = reason.to_owned();
        self.app
            .sessions
            .update(&self.id, |s| s.last_stop_reason = Some(reason.clone()));
        let ended = json!({"jsonrpc": "2.0", "method": "_handler/turn_ended",
            "params": {"sessionId": self.sid(), "stopReason": reason}})
        .to_string();
        self.broadcast(None, &ended);
        self.state_changed();
        reason
    }

    // ---- runs (D.18) ----------------------------------------------------------------------

    /// When the turn in progress of a run is cut (its timeout, then the grace after cancel).
    pub(crate) fn run_deadline(&self) -> Option<tokio::time::Instant> {
        self.turn.as_ref()?;
        self.run.as_ref()?.deadline
    }

    /// A run's turn past its timeout: session/cancel, the turn then ends `timed_out`; an agent
    /// that does not end it within the grace has it ended by the daemon.
    pub(crate) async fn turn_timed_out(&mut self) {
        let Some(r) = self.run.as_mut() else {
            return;
        };
        if r.timed_out {
            tracing::warn!(session = %self.id, "the agent did not end its cancelled turn");
            let reason = self.end_turn("cancelled");
            let more = self.run_turn_ended(&reason);
            return self.apply(more).await;
        }
        r.timed_out = true;
        r.deadline = Some(tokio::time::Instant::now() + CANCEL_GRACE);
        tracing::info!(session = %self.id, "run turn timed out: cancelled");
        self.cancel().await;
    }

    /// After a run's turn: at end_turn its result judged, one more turn with the error when it
    /// is missing or invalid; then the output and the answer kept and the session stopped (a
    /// turn that did not end has no output).
    fn run_turn_ended(&mut self, reason: &str) -> Vec<Action> {
        let Some(r) = self.run.as_mut() else {
            return Vec::new();
        };
        r.deadline = None;
        let mut output = None;
        if reason == "end_turn" {
            let out = handler_contracts::run::judge(&self.answer, &r.result);
            if !out.valid && !r.retried {
                r.retried = true;
                let text = handler_contracts::run::retry_turn(out.error.as_deref().unwrap_or(""));
                let frame = json!({"jsonrpc": "2.0", "id": "handler-prompt", "method": "session/prompt",
                    "params": {"sessionId": self.sid(), "prompt": [{"type": "text", "text": text}]}});
                return self.prompt(DAEMON, ID_PROMPT.into(), &frame, &frame.to_string());
            }
            output = Some(out);
        }
        let answer = handler_policy::redact(&self.answer, &self.secrets);
        let valid = output.as_ref().map(|o| o.valid);
        self.app.sessions.update(&self.id, |s| {
            s.output = output.clone();
            s.answer = Some(answer.clone());
        });
        tracing::info!(session = %self.id, %reason, ?valid, "run ended");
        let detail = format!("run ended ({reason})");
        self.ending = Some(Ending::Stop(StopHow::RunEnded, detail, None));
        Vec::new()
    }

    /// A client's mode or option change, shown to the others (F.7) and logged.
    fn show_change(&mut self, by: ClientId, method: &str, params: &Value, result: Option<&Value>) {
        let update = if method == "session/set_mode" {
            let mode = params.get("modeId").cloned().unwrap_or(Value::Null);
            if let Some(m) = self.modes.as_object_mut() {
                m.insert("currentModeId".into(), mode.clone());
            }
            json!({"sessionUpdate": "current_mode_update", "currentModeId": mode})
        } else {
            let opts = result
                .and_then(|r| r.get("configOptions"))
                .cloned()
                .unwrap_or(Value::Null);
            self.config_options = opts.clone();
            json!({"sessionUpdate": "config_option_update", "configOptions": opts})
        };
        let t = Self::now();
        let seq = self.append(|n| SessionEvent::update(n, t, update.clone()));
        let msg = replay_notification(&self.sid(), seq, &update);
        self.broadcast(Some(by), &msg);
        self.save_open();
    }

    /// An agent's notification or request, for every client that has its replay.
    fn agent_broadcast(&mut self, except: Option<ClientId>, message: Vec<u8>) {
        let text = String::from_utf8_lossy(&message).into_owned();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let method = v.get("method").and_then(Value::as_str).unwrap_or_default();
        if method != "session/update" || v.get("id").is_some() {
            self.broadcast(except, &text);
            if method == "session/request_permission" {
                self.state_changed();
            }
            return;
        }
        if self.suppress_replay {
            return;
        }
        let update = v.pointer("/params/update").cloned().unwrap_or(Value::Null);
        if self.turn.is_some() && is_user_chunk(&update) {
            // The agent's echo of a prompt the daemon logged already: relayed, not logged.
            return self.broadcast(except, &text);
        }
        self.track(&update);
        if self.turn.is_some()
            && update.get("sessionUpdate").and_then(Value::as_str) == Some("agent_message_chunk")
            && let Some(t) = update.pointer("/content/text").and_then(Value::as_str)
        {
            self.answer.push_str(t);
        }
        let t = Self::now();
        let seq = self.append(|n| SessionEvent::update(n, t, update));
        let text = with_seq(&text, seq).unwrap_or(text);
        self.broadcast(except, &text);
    }

    /// What the agent's updates change in the session: its title, mode, options.
    fn track(&mut self, update: &Value) {
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("session_info_update") => {
                if let Some(title) = update.get("title").and_then(Value::as_str) {
                    let title = title.to_owned();
                    self.app
                        .sessions
                        .update(&self.id, |s| s.title = Some(title));
                }
            }
            Some("current_mode_update") => {
                if let (Some(m), Some(id)) =
                    (self.modes.as_object_mut(), update.get("currentModeId"))
                {
                    m.insert("currentModeId".into(), id.clone());
                }
                self.save_open();
            }
            Some("config_option_update") => {
                if let Some(o) = update.get("configOptions") {
                    self.config_options = o.clone();
                }
                self.save_open();
            }
            _ => {}
        }
    }

    // ---- the daemon's own requests (F.6.2) ------------------------------------------------

    /// Sends the daemon's initialize (P1 applies to it).
    pub(crate) async fn begin(&mut self) {
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":{ID_INIT},"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{"fs":{{"readTextFile":false,"writeTextFile":false}},"terminal":false}},"clientInfo":{{"name":"handler","version":"{}"}}}}}}"#,
            env!("CARGO_PKG_VERSION")
        );
        let actions = self
            .pipeline
            .handle(Direction::FromClient(DAEMON), init.as_bytes());
        self.apply(actions).await;
    }

    fn own_response(&mut self, id: &str, v: &Value) -> Vec<Action> {
        if let Some(e) = v.get("error") {
            let msg = e.get("message").and_then(Value::as_str).unwrap_or("error");
            if id != ID_PROMPT {
                self.fail(format!("the agent refused its start: {msg}"));
            }
            return Vec::new();
        }
        let result = v.get("result").cloned().unwrap_or(Value::Null);
        match id {
            ID_INIT => self.initialized(result),
            ID_OPEN => self.opened(result),
            _ => Vec::new(),
        }
    }

    fn fail(&mut self, reason: String) {
        tracing::warn!(session = %self.id, %reason, "session start failed");
        self.ending = Some(Ending::Error(reason));
    }

    fn initialized(&mut self, result: Value) -> Vec<Action> {
        let can_resume = result
            .pointer("/agentCapabilities/loadSession")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.init_result = Some(result.to_string());
        self.app
            .sessions
            .update(&self.id, |s| s.can_resume = can_resume);
        let cwd = json!(self.scope);
        let open = if self.load {
            if !can_resume {
                self.fail("this agent cannot resume sessions".into());
                return Vec::new();
            }
            self.suppress_replay = self.log.has_updates();
            json!({"jsonrpc": "2.0", "id": "handler-open", "method": "session/load",
                "params": {"sessionId": self.sid(), "cwd": cwd, "mcpServers": []}})
        } else {
            json!({"jsonrpc": "2.0", "id": "handler-open", "method": "session/new",
                "params": {"cwd": cwd, "mcpServers": []}})
        };
        self.pipeline
            .handle(Direction::FromClient(DAEMON), open.to_string().as_bytes())
    }

    fn opened(&mut self, result: Value) -> Vec<Action> {
        self.suppress_replay = false;
        if !self.load {
            // The pipeline shows the agent's id as the one clients know (F.6.2).
            if let Some(s) = result.get("sessionId").and_then(Value::as_str) {
                self.sid = Some(s.to_owned());
            }
        }
        self.modes = result.get("modes").cloned().unwrap_or(Value::Null);
        self.config_options = result.get("configOptions").cloned().unwrap_or(Value::Null);
        let sid = self.sid.clone();
        self.app.sessions.update(&self.id, |s| {
            s.acp_session_id = sid;
            s.state = SessionState::Running;
            s.error = None;
        });
        self.note(|n, t| SessionEvent::started(n, t, None));
        self.save_open();
        let _ = self.started.send(Started::Running);
        tracing::info!(session = %self.id, "session running");
        if let Some(p) = self.first_prompt.take() {
            let frame = json!({"jsonrpc": "2.0", "id": "handler-prompt", "method": "session/prompt",
                "params": {"sessionId": self.sid(), "prompt": [{"type": "text", "text": p}]}});
            return self.prompt(DAEMON, ID_PROMPT.into(), &frame, &frame.to_string());
        }
        Vec::new()
    }

    // ---- clients --------------------------------------------------------------------------

    /// A client attached; beyond the limit the oldest is closed 4001 (F.7).
    pub(crate) fn attach(
        &mut self,
        out: mpsc::Sender<Out>,
        close: oneshot::Sender<(u16, String)>,
    ) -> ClientId {
        while self.clients.len() >= self.app.config.session_max_attach {
            let mut oldest = self.clients.remove(0);
            if let Some(c) = oldest.close.take() {
                let _ = c.send((close::ATTACHED_ELSEWHERE, "attached elsewhere".into()));
            }
        }
        let id = ClientId(self.next_client);
        self.next_client += 1;
        self.clients.push(Attachment {
            id,
            out,
            close: Some(close),
            ready: false,
        });
        self.state_changed();
        id
    }

    /// A client's WebSocket closed: never affects the agent or the turn (F.4).
    pub(crate) fn detach(&mut self, client: ClientId) {
        let before = self.clients.len();
        self.clients.retain(|c| c.id != client);
        self.watched.retain(|w| w.0 != client);
        if self.clients.is_empty() {
            self.idle_since = Instant::now();
        }
        if before != self.clients.len() {
            self.state_changed();
        }
    }

    /// A client's frame: the setup answered by the daemon, F.4's refusals, the rest through the
    /// pipeline.
    pub(crate) async fn frame(&mut self, client: ClientId, text: String) {
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            let actions = self
                .pipeline
                .handle(Direction::FromClient(client), text.as_bytes());
            return self.apply(actions).await;
        };
        let method = v.get("method").and_then(Value::as_str).unwrap_or_default();
        let is_request = v.get("id").is_some() && !method.is_empty();
        if is_request {
            let id = id_text(&v);
            if let Some(answer) = self.refusal(method, &v) {
                return self.send_to(client, Out::Text(error_response(&id, answer.0, answer.1)));
            }
            match method {
                "initialize" => {
                    let r = self.init_result.clone().unwrap_or_else(|| "{}".into());
                    let m = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{r}}}"#);
                    return self.send_to(client, Out::Text(m));
                }
                "session/load" => return self.load(client, &id, &text, &v),
                "session/prompt" => {
                    if let Some(g) = self.git_guard.clone() {
                        g.follow(&*self.app.launcher).await;
                    }
                    let actions = self.prompt(client, id, &v, &text);
                    return self.apply(actions).await;
                }
                "session/set_mode" | "session/set_config_option" => {
                    let params = v.get("params").cloned().unwrap_or(Value::Null);
                    self.watched.push((client, id, method.to_owned(), params));
                }
                _ => {}
            }
        }
        let answer = !is_request && v.get("id").is_some();
        if answer && self.is_question_answer(&id_text(&v)) {
            return self.answer_question(client, &id_text(&v), &v).await;
        }
        let actions = self
            .pipeline
            .handle(Direction::FromClient(client), text.as_bytes());
        self.apply(actions).await;
        if answer {
            self.state_changed();
        }
    }

    /// F.4's refusals: another session (-32010), a prompt while busy (-32011), a prompt to a
    /// run (-32012).
    fn refusal(&self, method: &str, v: &Value) -> Option<(i64, &'static str)> {
        const OTHER: (i64, &str) = (
            acp::ERR_ONE_SESSION_PER_ATTACHMENT,
            "one session per attachment",
        );
        if matches!(method, "session/new" | "session/resume" | "session/fork") {
            return Some(OTHER);
        }
        let named = v.pointer("/params/sessionId").and_then(Value::as_str);
        if named.is_some_and(|s| Some(s) != self.sid.as_deref()) {
            return Some(OTHER);
        }
        if method == "session/prompt" && self.unattended {
            return Some((acp::ERR_UNATTENDED, "unattended"));
        }
        if method == "session/prompt" && self.turn.is_some() {
            return Some((acp::ERR_TURN_IN_PROGRESS, "turn in progress"));
        }
        None
    }

    /// session/load: P2/P3, then the log's replay, the result with the current modes and
    /// options, `_handler/session_state`, the pending requests (F.4 step 2).
    fn load(&mut self, client: ClientId, id: &str, text: &str, v: &Value) {
        if let Some(err) = self.pipeline.check_opener(text.as_bytes()) {
            let e = String::from_utf8_lossy(&err).into_owned();
            return self.send_to(client, Out::Text(e));
        }
        let mut result = serde_json::Map::new();
        if !self.modes.is_null() {
            result.insert("modes".into(), self.modes.clone());
        }
        if !self.config_options.is_null() {
            result.insert("configOptions".into(), self.config_options.clone());
        }
        let mut tail = vec![format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#,
            Value::Object(result)
        )];
        tail.push(self.session_state_message());
        tail.extend(
            self.pipeline
                .pending_requests()
                .into_iter()
                .map(|m| String::from_utf8_lossy(&m).into_owned()),
        );
        tail.extend(self.question_tail());
        let replay = Replay {
            path: self.log.path().to_path_buf(),
            after: v.get("params").and_then(ev::after_seq),
            upto: self.log.last_seq(),
            session_id: self.sid(),
            tail,
        };
        self.send_to(client, Out::Replay(Box::new(replay)));
        if let Some(a) = self.clients.iter_mut().find(|c| c.id == client) {
            a.ready = true;
        }
    }

    /// A prompt: logged as user_message_chunk updates, shown to the others, the turn started
    /// and the session busy (F.5, F.7), then forwarded.
    fn prompt(&mut self, client: ClientId, id: String, v: &Value, frame: &str) -> Vec<Action> {
        let prompt = v.pointer("/params/prompt").cloned().unwrap_or(Value::Null);
        for update in prompt_updates(&prompt) {
            let t = Self::now();
            let seq = self.append(|n| SessionEvent::update(n, t, update.clone()));
            let msg = replay_notification(&self.sid(), seq, &update);
            let msg = handler_policy::redact(&msg, &self.secrets);
            self.broadcast(Some(client), &msg);
        }
        self.note(SessionEvent::turn_start);
        self.turn = Some(Turn { client, id });
        self.answer.clear();
        if let Some(r) = &mut self.run {
            r.deadline = Some(tokio::time::Instant::now() + r.timeout);
            r.timed_out = false;
        }
        self.state_changed();
        self.pipeline
            .handle(Direction::FromClient(client), frame.as_bytes())
    }

    /// POST …/cancel: session/cancel to the agent for the turn in progress.
    pub(crate) async fn cancel(&mut self) {
        if self.turn.is_none() {
            return;
        }
        let n = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.sid()}});
        let actions = self
            .pipeline
            .handle(Direction::FromClient(DAEMON), n.to_string().as_bytes());
        self.apply(actions).await;
    }

    /// A line the agent wrote.
    pub(crate) async fn agent_line(&mut self, line: &[u8]) {
        let actions = self.pipeline.handle(Direction::FromAgent, line);
        self.apply(actions).await;
    }

    /// Whether a turn is in progress.
    pub(crate) fn busy(&self) -> bool {
        self.turn.is_some()
    }

    /// Whether an idle stop is due (F.6.3): running, unattached, not busy, nothing pending.
    pub(crate) fn idle_due(&self) -> bool {
        *self.started.borrow() == Started::Running
            && self.clients.is_empty()
            && self.turn.is_none()
            && self.pending() == 0
            && self.idle_since.elapsed() >= self.app.config.session_idle_timeout
    }

    /// This daemon stops while the kept agent's turn goes on (issue 28 item 6): nothing is
    /// logged (the next daemon takes the session over); every client is closed 1001, as for
    /// any stopping daemon.
    pub(crate) fn leave(&mut self) {
        for mut c in self.clients.drain(..) {
            if let Some(cl) = c.close.take() {
                let _ = cl.send((1001, "the daemon is stopping; the agent goes on".into()));
            }
        }
    }

    /// The end: an open turn logged ended `stopped`, the lifecycle event, every client closed
    /// 4002 (F.6.4).
    pub(crate) fn finish(&mut self, how: StopHow, detail: Option<String>) {
        if self.turn.take().is_some() {
            self.note(|n, t| SessionEvent::turn_end(n, t, "stopped"));
        }
        let d = detail.clone();
        self.note(|n, t| SessionEvent::stopped(n, t, how, d));
        let reason = crate::daemon::services::ws::truncate(
            &format!(
                "session stopped: {}",
                detail.as_deref().unwrap_or("stopped")
            ),
            120,
        );
        for mut c in self.clients.drain(..) {
            if let Some(cl) = c.close.take() {
                let _ = cl.send((close::SESSION_STOPPED, reason.clone()));
            }
        }
    }
}

/// A replay for a WebSocket: the log's updates in the range, read straight from its text
/// (decision 0112), then the tail.
pub(crate) fn replay_lines(r: &Replay) -> Vec<String> {
    let text = std::fs::read_to_string(&r.path).unwrap_or_default();
    let mut out = ev::replay_from_text(&text, &r.session_id, r.after, r.upto);
    out.extend(r.tail.iter().cloned());
    out
}
