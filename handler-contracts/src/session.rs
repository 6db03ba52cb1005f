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
    /// The agent's output line it came from, as the agent's keeper numbered it (issue 28 item
    /// 6): a daemon taking a running agent over reads on after the last one logged, so no event
    /// is logged twice. The daemon's own; clients never see it.
    #[serde(default, rename = "agentLine", skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub agent_line: Option<u64>,
}

/// `POST /v1/sessions` (F.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRequest {
    /// The agent it belongs to.
    pub agent_id: String,
    /// One of the agent's models (its first when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::control::ModelAccess>,
    /// A first prompt, sent once the agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// An existing ACP session of the agent to load instead of a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// A run's input: required for an agent with an interface, refused for others (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<crate::control::SessionInput>,
    /// A folderless agent's session folder starts as a copy of this skill (D.18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_skill: Option<String>,
    /// Who starts it.
    pub origin: SessionOrigin,
}

/// `GET /v1/sessions` filters (F.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionQuery {
    /// Only this agent's.
    #[serde(default)]
    pub agent: Option<String>,
    /// Only this project's.
    #[serde(default)]
    pub project: Option<String>,
    /// Only sessions in this state.
    #[serde(default)]
    pub state: Option<SessionState>,
    /// Only runs working on this subject: `skill:<name>` (D.17, D.18).
    #[serde(default)]
    pub subject: Option<String>,
}

impl SessionQuery {
    /// Whether `s` passes every filter given.
    pub fn matches(&self, s: &Session) -> bool {
        let subject = s
            .input
            .as_ref()
            .and_then(|i| i.subject.as_ref())
            .map(|x| x.skill.as_str());
        // `skill:<name>` (D.17), or the bare name.
        let want = self
            .subject
            .as_deref()
            .map(|x| x.strip_prefix("skill:").unwrap_or(x));
        self.agent.as_deref().is_none_or(|a| a == s.agent_id)
            && self
                .project
                .as_deref()
                .is_none_or(|p| s.project_id.as_deref() == Some(p))
            && self.state.is_none_or(|st| st == s.state)
            && want.is_none_or(|x| subject == Some(x))
    }
}

/// The `_meta` key carrying an event's place in the log (F.5).
pub const META_SEQ: &str = "handler.dev/seq";
/// The `_meta` key of session/load asking only for the events after a seq (F.5).
pub const META_AFTER_SEQ: &str = "handler.dev/afterSeq";

impl SessionEvent {
    /// An update event (ACP session/update params.update).
    pub fn update(seq: u64, t: impl Into<String>, update: Value) -> Self {
        Self::new(seq, t, SessionEventKind::Update { update })
    }
    /// A turn's start.
    pub fn turn_start(seq: u64, t: impl Into<String>) -> Self {
        let kind = SessionEventKind::Turn {
            phase: TurnPhase::Start,
            stop_reason: None,
        };
        Self::new(seq, t, kind)
    }
    /// A turn's end, with how it ended.
    pub fn turn_end(seq: u64, t: impl Into<String>, stop_reason: impl Into<String>) -> Self {
        let kind = SessionEventKind::Turn {
            phase: TurnPhase::End,
            stop_reason: Some(stop_reason.into()),
        };
        Self::new(seq, t, kind)
    }
    /// The session's agent started.
    pub fn started(seq: u64, t: impl Into<String>, detail: Option<String>) -> Self {
        let kind = SessionEventKind::Lifecycle {
            event: LifecycleEvent::Started,
            detail,
            how: None,
        };
        Self::new(seq, t, kind)
    }
    /// The session stopped, and how.
    pub fn stopped(seq: u64, t: impl Into<String>, how: StopHow, detail: Option<String>) -> Self {
        let kind = SessionEventKind::Lifecycle {
            event: LifecycleEvent::Stopped,
            detail,
            how: Some(how),
        };
        Self::new(seq, t, kind)
    }
    fn new(seq: u64, t: impl Into<String>, kind: SessionEventKind) -> Self {
        SessionEvent {
            seq,
            t: t.into(),
            kind,
            agent_line: None,
        }
    }
    /// The line written to `events.ndjson` (without its `\n`).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What reading `events.ndjson` found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedLog {
    /// The events, in order.
    pub events: Vec<SessionEvent>,
    /// A last line cut by a crash mid-write was dropped.
    pub torn_tail: bool,
    /// Lines (1-based) before the last that are not events, skipped.
    pub bad_lines: Vec<usize>,
}

impl ParsedLog {
    /// The seq the next event gets.
    pub fn next_seq(&self) -> u64 {
        self.events.last().map_or(1, |e| e.seq + 1)
    }
    /// Whether the log holds any update (a restart's agent replay is then not the history).
    pub fn has_updates(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.kind, SessionEventKind::Update { .. }))
    }
    /// Whether the last turn started has not ended.
    pub fn open_turn(&self) -> bool {
        open_turn(&self.events)
    }
}

/// Whether the last turn of `events` started and has not ended.
pub fn open_turn(events: &[SessionEvent]) -> bool {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            SessionEventKind::Turn { phase, .. } => Some(*phase == TurnPhase::Start),
            _ => None,
        })
        .unwrap_or(false)
}

/// Parses `events.ndjson`: a last line without its `\n` or not an event (a crash mid-write) is
/// dropped; earlier lines that are not events are skipped and named; events whose seq does not
/// increase are skipped too (the log's order is its truth).
pub fn parse_log(text: &str) -> ParsedLog {
    let mut out = ParsedLog::default();
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let last = i + 1 == n;
        match serde_json::from_str::<SessionEvent>(line) {
            Ok(e) if !last || complete => {
                if out.events.last().is_some_and(|p| p.seq >= e.seq) {
                    out.bad_lines.push(i + 1);
                } else {
                    out.events.push(e);
                }
            }
            _ if last => out.torn_tail = true,
            _ => out.bad_lines.push(i + 1),
        }
    }
    out
}

/// The update events a client gets on attach (F.5): those after `after_seq`, in order.
pub fn replay_after(
    events: &[SessionEvent],
    after_seq: Option<u64>,
) -> impl Iterator<Item = (u64, &Value)> {
    let after = after_seq.unwrap_or(0);
    events.iter().filter_map(move |e| match &e.kind {
        SessionEventKind::Update { update } if e.seq > after => Some((e.seq, update)),
        _ => None,
    })
}

/// The session/update notification replaying one logged update, `_meta` carrying its seq.
pub fn replay_notification(session_id: &str, seq: u64, update: &Value) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session_id, "update": update, "_meta": {META_SEQ: seq}},
    })
    .to_string()
}

/// One log line as a replay reads it: its seq, its kind and, for an update, the update's text
/// as logged (borrowed, never built into a `Value`).
#[derive(Deserialize)]
struct RawEvent<'a> {
    seq: u64,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    update: Option<&'a serde_json::value::RawValue>,
}

/// An attach's replay straight from the log's text (F.5, decision 0112): the session/update
/// notifications of the updates with `after < seq <= upto`, in order, each carrying the logged
/// update's text unchanged and its seq in `_meta`. The lines `parse_log` keeps and no others (a
/// torn last line, lines that are not events, a seq not above the one before are skipped): the
/// same messages as [`replay_after`] and [`replay_notification`] over [`parse_log`], without a
/// `Value` per event.
pub fn replay_from_text(
    text: &str,
    session_id: &str,
    after: Option<u64>,
    upto: u64,
) -> Vec<String> {
    let after = after.unwrap_or(0);
    let sid = Value::from(session_id).to_string();
    let complete = text.ends_with('\n');
    let mut lines = text.split_terminator('\n').peekable();
    let mut last_seq = 0;
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        let last = lines.peek().is_none();
        if line.trim().is_empty() || (last && !complete) {
            continue;
        }
        let Ok(e) = serde_json::from_str::<RawEvent<'_>>(line) else {
            continue;
        };
        if e.seq <= last_seq {
            continue;
        }
        last_seq = e.seq;
        if e.kind != "update" || e.seq <= after || e.seq > upto {
            continue;
        }
        let Some(update) = e.update else { continue };
        out.push(format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":{sid},"update":{},"_meta":{{"{META_SEQ}":{}}}}}}}"#,
            update.get(),
            e.seq
        ));
    }
    out
}

/// A live session/update notification with its seq added to `params._meta` (F.7), so a client
/// can re-attach with afterSeq; `None` when it is not a notification with params.
pub fn with_seq(notification: &str, seq: u64) -> Option<String> {
    let mut v: Value = serde_json::from_str(notification).ok()?;
    let params = v.get_mut("params")?.as_object_mut()?;
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()?.insert(META_SEQ.into(), seq.into());
    Some(v.to_string())
}

/// The afterSeq a session/load's params ask for (F.5).
pub fn after_seq(params: &Value) -> Option<u64> {
    params.get("_meta")?.get(META_AFTER_SEQ)?.as_u64()
}

/// The updates a prompt is logged as (F.5): one user_message_chunk per content block.
pub fn prompt_updates(prompt: &Value) -> Vec<Value> {
    prompt
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|b| serde_json::json!({"sessionUpdate": "user_message_chunk", "content": b}))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether an update is the agent's echo of a prompt (relayed during a turn, not logged).
pub fn is_user_chunk(update: &Value) -> bool {
    update.get("sessionUpdate").and_then(Value::as_str) == Some("user_message_chunk")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log(events: &[SessionEvent]) -> String {
        events.iter().map(|e| e.to_line() + "\n").collect()
    }

    #[test]
    fn events_are_written_as_the_seed_shows_them() {
        let e = SessionEvent::stopped(3, "t", StopHow::DaemonRestarted, None);
        assert_eq!(
            e.to_line(),
            r#"{"seq":3,"t":"t","kind":"lifecycle","event":"stopped","how":"daemon_restarted"}"#
        );
        let e = SessionEvent::turn_end(4, "t", "end_turn");
        assert_eq!(
            e.to_line(),
            r#"{"seq":4,"t":"t","kind":"turn","phase":"end","stopReason":"end_turn"}"#
        );
    }

    #[test]
    fn the_replay_from_text_is_the_replay_of_the_parsed_log() {
        let mut text = log(&[
            SessionEvent::started(1, "t", None),
            SessionEvent::update(
                2,
                "t",
                json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a \"quoted\" \u{e9} line"}}),
            ),
            SessionEvent::turn_start(3, "t"),
            SessionEvent::update(4, "t", json!({"sessionUpdate": "plan", "entries": []})),
        ]);
        text.push_str("not an event\n");
        text.push_str(&SessionEvent::update(4, "t", json!({"sessionUpdate": "dup"})).to_line());
        text.push('\n');
        text.push_str(&SessionEvent::update(5, "t", json!({"sessionUpdate": "x"})).to_line());
        text.push('\n');
        text.push_str(r#"{"seq":6,"t":"t","kind":"upd"#);
        let parsed = parse_log(&text);
        for (after, upto) in [(None, 9), (Some(2), 9), (None, 4), (Some(5), 9)] {
            let want: Vec<String> = replay_after(&parsed.events, after)
                .filter(|(seq, _)| *seq <= upto)
                .map(|(seq, u)| replay_notification("s \"1\"", seq, u))
                .collect();
            let got = replay_from_text(&text, "s \"1\"", after, upto);
            let parse = |v: &[String]| -> Vec<Value> {
                v.iter().map(|m| serde_json::from_str(m).unwrap()).collect()
            };
            assert_eq!(parse(&got), parse(&want), "after {after:?} upto {upto}");
        }
        assert_eq!(replay_from_text(&text, "s", None, 9).len(), 3);
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_earlier_lines_kept() {
        let full = log(&[
            SessionEvent::started(1, "t", None),
            SessionEvent::update(2, "t", json!({"sessionUpdate": "agent_message_chunk"})),
        ]);
        let torn = format!("{full}{{\"seq\":3,\"t\":\"t\",\"kind\":\"upd");
        let p = parse_log(&torn);
        assert!(p.torn_tail);
        assert_eq!(p.events.len(), 2);
        assert_eq!(p.next_seq(), 3);
        // A complete last line without its newline is torn too (the write may be partial).
        let p = parse_log(full.trim_end());
        assert!(p.torn_tail);
        assert_eq!(p.events.len(), 1);
        let p = parse_log(&full);
        assert!(!p.torn_tail && p.bad_lines.is_empty());
    }

    #[test]
    fn bad_middle_lines_and_seqs_that_do_not_increase_are_skipped() {
        let a = SessionEvent::started(1, "t", None).to_line();
        let b = SessionEvent::turn_start(1, "t").to_line();
        let c = SessionEvent::turn_start(2, "t").to_line();
        let p = parse_log(&format!("{a}\nnot json\n{b}\n{c}\n"));
        assert_eq!(p.bad_lines, vec![2, 3]);
        assert_eq!(p.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(p.open_turn());
    }

    #[test]
    fn replay_selects_updates_after_the_seq_asked() {
        let events = vec![
            SessionEvent::started(1, "t", None),
            SessionEvent::update(2, "t", json!({"n": 2})),
            SessionEvent::turn_start(3, "t"),
            SessionEvent::update(4, "t", json!({"n": 4})),
        ];
        let all: Vec<u64> = replay_after(&events, None).map(|(s, _)| s).collect();
        assert_eq!(all, [2, 4]);
        let after: Vec<u64> = replay_after(&events, Some(2)).map(|(s, _)| s).collect();
        assert_eq!(after, [4]);
        let n: Value =
            serde_json::from_str(&replay_notification("s1", 4, &json!({"n": 4}))).unwrap();
        assert_eq!(n["params"]["_meta"][META_SEQ], 4);
        assert_eq!(n["params"]["sessionId"], "s1");
    }

    #[test]
    fn live_updates_get_their_seq_and_prompts_become_user_chunks() {
        let n = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{},"_meta":{"x":1}}}"#;
        let v: Value = serde_json::from_str(&with_seq(n, 7).unwrap()).unwrap();
        assert_eq!(v["params"]["_meta"], json!({"x": 1, META_SEQ: 7}));
        assert!(with_seq(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 1).is_none());
        let u = prompt_updates(&json!([{"type": "text", "text": "hi"}]));
        assert_eq!(u.len(), 1);
        assert!(is_user_chunk(&u[0]));
        assert_eq!(after_seq(&json!({"_meta": {META_AFTER_SEQ: 5}})), Some(5));
    }

    #[test]
    fn queries_filter_by_agent_state_and_subject() {
        let q = SessionQuery {
            agent: Some("a1".into()),
            state: Some(SessionState::Stopped),
            ..Default::default()
        };
        let s: Session = serde_json::from_value(json!({
            "id": "s_1", "agentId": "a1", "harness": "h", "scope": "/w", "state": "stopped",
            "busy": false, "pendingPermissions": 0, "attached": 0, "remote": false,
            "canResume": true, "origin": "ui", "createdAt": "t", "lastActivityAt": "t", "acpUrl": "u"
        }))
        .unwrap();
        assert!(q.matches(&s));
        let q = SessionQuery {
            subject: Some("x".into()),
            ..Default::default()
        };
        assert!(!q.matches(&s));
    }
}
