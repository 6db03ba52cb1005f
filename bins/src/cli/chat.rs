//! The terminal chat's ACP client as a state machine without I/O: the messages it sends
//! (initialize, session/load with `afterSeq`, prompts, cancel, modes, the model), and what each
//! message from handlerd becomes (streamed text by lines, a tool call as one line with its
//! status, a coloured diff, a plan, a permission question with a key per option kind, the turn's
//! end). `run.rs` feeds it a WebSocket and a terminal.

use std::collections::HashMap;

use crossterm::style::Stylize;
use serde_json::{Value, json};

/// One thing to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A whole line of the agent's text (markdown, rendered by the terminal side).
    Markdown(String),
    /// A line already styled (tool calls, plans, diffs, notes).
    Line(String),
}

/// A permission question waiting for a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Permission {
    /// The request's id (answered with it).
    pub id: Value,
    /// What the tool call does.
    pub title: String,
    /// (key, optionId, name) per option.
    pub options: Vec<(char, String, String)>,
}

impl Permission {
    /// The question as one line: `Allow? [y] Allow  [n] Reject`.
    pub fn question(&self) -> String {
        let keys: Vec<String> = self
            .options
            .iter()
            .map(|(k, _, n)| format!("[{k}] {n}"))
            .collect();
        format!(
            "{} {}  {}",
            "?".yellow().bold(),
            self.title,
            keys.join("  ")
        )
    }
}

/// What a message from handlerd asks of the terminal side.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Show this.
    Show(Out),
    /// Ask this permission.
    Ask(Permission),
    /// Another client answered this permission: withdraw the question.
    Withdrawn(Value),
    /// The turn ended with this stop reason.
    TurnEnded(String),
    /// session/load answered: the replay is over, live traffic follows.
    Loaded,
    /// A request of ours failed (its error message).
    Failed(String),
    /// Send this message to handlerd.
    Send(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Initialize,
    Load,
    Prompt,
    Other,
}

/// The chat's state: requests in flight, tool calls seen, the last replayed seq.
#[derive(Debug, Default)]
pub struct Chat {
    /// The agent's ACP session id (the Session's `acpSessionId`).
    pub session_id: String,
    next_id: u64,
    calls: HashMap<u64, Call>,
    tools: HashMap<String, String>,
    text: String,
    /// The highest `handler.dev/seq` seen (for a re-attach's `afterSeq`).
    pub last_seq: u64,
    /// A turn is in progress.
    pub busy: bool,
    /// The session's modes (id, name) and the current one.
    pub modes: Vec<(String, String)>,
    /// The current mode's id.
    pub mode: Option<String>,
    /// The model option's id and its values, when the agent has one.
    pub model_option: Option<(String, Vec<String>)>,
}

/// The key for an option's kind; others get digits.
pub fn key_for(kind: &str, index: usize) -> char {
    match kind {
        "allow_once" => 'y',
        "allow_always" => 'a',
        "reject_once" => 'n',
        "reject_always" => 'r',
        _ => char::from_digit((index as u32 + 1) % 10, 10).unwrap_or('0'),
    }
}

impl Chat {
    /// A chat of this ACP session.
    pub fn new(session_id: &str) -> Chat {
        Chat {
            session_id: session_id.into(),
            ..Chat::default()
        }
    }

    fn request(&mut self, call: Call, method: &str, params: Value) -> Value {
        self.next_id += 1;
        self.calls.insert(self.next_id, call);
        json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
    }

    /// `initialize` (handlerd answers it from the agent's cached result).
    pub fn initialize(&mut self) -> Value {
        let params = json!({"protocolVersion": 1, "clientCapabilities": {}});
        self.request(Call::Initialize, "initialize", params)
    }

    /// `session/load`, replaying only what came after `after_seq` when non-zero.
    pub fn load(&mut self, cwd: &str, after_seq: u64) -> Value {
        let mut params = json!({"sessionId": self.session_id, "cwd": cwd, "mcpServers": []});
        if after_seq > 0 {
            params["_meta"] = json!({"handler.dev/afterSeq": after_seq});
        }
        self.request(Call::Load, "session/load", params)
    }

    /// `session/prompt` with one text block.
    pub fn prompt(&mut self, text: &str) -> Value {
        self.busy = true;
        let params =
            json!({"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]});
        self.request(Call::Prompt, "session/prompt", params)
    }

    /// `session/cancel` (a notification).
    pub fn cancel(&self) -> Value {
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.session_id}})
    }

    /// `session/set_mode`.
    pub fn set_mode(&mut self, mode: &str) -> Value {
        let params = json!({"sessionId": self.session_id, "modeId": mode});
        self.request(Call::Other, "session/set_mode", params)
    }

    /// The model: `session/set_config_option` on the agent's model option, else
    /// `session/set_model`.
    pub fn set_model(&mut self, model: &str) -> Value {
        match self.model_option.clone() {
            Some((id, _)) => {
                let params = json!({"sessionId": self.session_id, "configId": id, "value": model});
                self.request(Call::Other, "session/set_config_option", params)
            }
            None => {
                let params = json!({"sessionId": self.session_id, "modelId": model});
                self.request(Call::Other, "session/set_model", params)
            }
        }
    }

    /// The answer to `p` for `key`, or none when no option has that key.
    pub fn answer(&self, p: &Permission, key: char) -> Option<Value> {
        let key = key.to_ascii_lowercase();
        let (_, option, _) = p.options.iter().find(|(k, _, _)| *k == key)?;
        Some(json!({"jsonrpc": "2.0", "id": p.id,
            "result": {"outcome": {"outcome": "selected", "optionId": option}}}))
    }

    /// The answer when the turn is cancelled (ACP: pending permissions answer `cancelled`).
    pub fn cancelled(&self, p: &Permission) -> Value {
        json!({"jsonrpc": "2.0", "id": p.id, "result": {"outcome": {"outcome": "cancelled"}}})
    }

    /// The text not yet shown (a last line without its newline).
    pub fn flush(&mut self) -> Vec<Action> {
        if self.text.is_empty() {
            return vec![];
        }
        let rest = std::mem::take(&mut self.text);
        vec![Action::Show(Out::Markdown(rest))]
    }

    /// What one message from handlerd means.
    pub fn on_message(&mut self, msg: &Value) -> Vec<Action> {
        let method = msg.get("method").and_then(Value::as_str);
        match (method, msg.get("id")) {
            (Some(m), Some(id)) => self.on_request(m, id, &msg["params"]),
            (Some(m), None) => self.on_notification(m, &msg["params"]),
            (None, Some(id)) => self.on_response(id, msg),
            (None, None) => vec![],
        }
    }

    fn on_response(&mut self, id: &Value, msg: &Value) -> Vec<Action> {
        let Some(call) = id.as_u64().and_then(|n| self.calls.remove(&n)) else {
            return vec![];
        };
        if let Some(e) = msg.get("error") {
            if call == Call::Prompt {
                self.busy = false;
            }
            let text = e["message"].as_str().unwrap_or("error").to_string();
            let mut out = self.flush();
            out.push(Action::Failed(text));
            return out;
        }
        let result = &msg["result"];
        match call {
            Call::Load => {
                self.read_modes(result);
                let mut out = self.flush();
                out.push(Action::Loaded);
                out
            }
            Call::Prompt => {
                self.busy = false;
                let mut out = self.flush();
                let reason = result["stopReason"].as_str().unwrap_or("end_turn");
                out.push(Action::TurnEnded(reason.to_string()));
                out
            }
            Call::Initialize | Call::Other => vec![],
        }
    }

    fn read_modes(&mut self, result: &Value) {
        if let Some(m) = result.get("modes") {
            self.mode = m["currentModeId"].as_str().map(String::from);
            self.modes = m["availableModes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| {
                    let id = x["id"].as_str()?.to_string();
                    Some((id.clone(), x["name"].as_str().unwrap_or(&id).to_string()))
                })
                .collect();
        }
        let options = result["configOptions"].as_array().into_iter().flatten();
        for o in options {
            if o["category"] == "model" || o["id"] == "model" {
                let values = o["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["value"].as_str().map(String::from))
                    .collect();
                let id = o["id"].as_str().unwrap_or("model").to_string();
                self.model_option = Some((id, values));
            }
        }
    }

    fn on_request(&mut self, method: &str, id: &Value, params: &Value) -> Vec<Action> {
        if method != "session/request_permission" {
            // The chat offers no client capability (files, terminals): say so.
            return vec![Action::Send(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("method not found: {method}")}}))];
        }
        let tool = &params["toolCall"];
        let title = tool["title"]
            .as_str()
            .map(String::from)
            .or_else(|| {
                tool["toolCallId"]
                    .as_str()
                    .and_then(|t| self.tools.get(t).cloned())
            })
            .unwrap_or_else(|| "the agent asks".into());
        let options = params["options"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, o)| {
                let kind = o["kind"].as_str().unwrap_or_default();
                let option = o["optionId"].as_str().unwrap_or_default().to_string();
                let name = o["name"].as_str().unwrap_or(&option).to_string();
                (key_for(kind, i), option, name)
            })
            .collect();
        let mut out = self.flush();
        out.push(Action::Ask(Permission {
            id: id.clone(),
            title,
            options,
        }));
        out
    }

    fn on_notification(&mut self, method: &str, params: &Value) -> Vec<Action> {
        match method {
            "session/update" => {
                if let Some(seq) = params["_meta"]["handler.dev/seq"].as_u64() {
                    self.last_seq = self.last_seq.max(seq);
                }
                self.on_update(&params["update"])
            }
            "_handler/session_state" => {
                if let Some(b) = params["busy"].as_bool() {
                    self.busy = b;
                }
                vec![]
            }
            "_handler/permission_resolved" => vec![Action::Withdrawn(params["requestId"].clone())],
            _ => vec![],
        }
    }

    /// One `session/update`'s update.
    pub fn on_update(&mut self, u: &Value) -> Vec<Action> {
        let kind = u["sessionUpdate"].as_str().unwrap_or_default();
        if kind == "agent_message_chunk" {
            if let Some(t) = u["content"]["text"].as_str() {
                self.text.push_str(t);
            }
            return self.complete_lines();
        }
        let mut out = self.flush();
        let lines = match kind {
            "user_message_chunk" => text_of(u)
                .lines()
                .map(|l| format!("{} {l}", ">".dark_grey()))
                .collect(),
            "agent_thought_chunk" => vec![text_of(u).dark_grey().italic().to_string()],
            "tool_call" | "tool_call_update" => self.tool_lines(u),
            "plan" => plan_lines(u),
            "current_mode_update" => {
                self.mode = u["currentModeId"].as_str().map(String::from);
                vec![
                    format!("mode: {}", self.mode.clone().unwrap_or_default())
                        .dark_grey()
                        .to_string(),
                ]
            }
            "session_info_update" => u["title"]
                .as_str()
                .map(|t| vec![format!("— {t} —").bold().to_string()])
                .unwrap_or_default(),
            _ => vec![],
        };
        out.extend(lines.into_iter().map(|l| Action::Show(Out::Line(l))));
        out
    }

    fn complete_lines(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(i) = self.text.find('\n') {
            let line: String = self.text.drain(..=i).collect();
            out.push(Action::Show(Out::Markdown(
                line.trim_end_matches('\n').into(),
            )));
        }
        out
    }

    fn tool_lines(&mut self, u: &Value) -> Vec<String> {
        let id = u["toolCallId"].as_str().unwrap_or_default().to_string();
        if let Some(t) = u["title"].as_str() {
            self.tools.insert(id.clone(), t.to_string());
        }
        let title = self.tools.get(&id).cloned().unwrap_or_else(|| id.clone());
        let status = u["status"].as_str().unwrap_or("pending");
        let mark = match status {
            "completed" => "✓".green().to_string(),
            "failed" => "✗".red().to_string(),
            "in_progress" => "…".yellow().to_string(),
            _ => "·".dark_grey().to_string(),
        };
        let mut lines = vec![format!("{mark} {title} {}", status.dark_grey())];
        for c in u["content"].as_array().into_iter().flatten() {
            if c["type"] == "diff" {
                lines.extend(diff_lines(
                    c["path"].as_str().unwrap_or_default(),
                    c["oldText"].as_str().unwrap_or_default(),
                    c["newText"].as_str().unwrap_or_default(),
                ));
            }
        }
        lines
    }
}

fn text_of(u: &Value) -> String {
    u["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn plan_lines(u: &Value) -> Vec<String> {
    let mut lines = vec!["plan:".bold().to_string()];
    for e in u["entries"].as_array().into_iter().flatten() {
        let box_ = match e["status"].as_str() {
            Some("completed") => "[x]",
            Some("in_progress") => "[~]",
            _ => "[ ]",
        };
        lines.push(format!(
            "  {box_} {}",
            e["content"].as_str().unwrap_or_default()
        ));
    }
    lines
}

/// A file's change as coloured unified-diff lines.
pub fn diff_lines(path: &str, old: &str, new: &str) -> Vec<String> {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut lines = vec![format!("  {} {path}", "diff".bold())];
    for change in diff.iter_all_changes() {
        let text = change.value().trim_end_matches('\n');
        let line = match change.tag() {
            similar::ChangeTag::Delete => format!("  - {text}").red().to_string(),
            similar::ChangeTag::Insert => format!("  + {text}").green().to_string(),
            similar::ChangeTag::Equal => continue,
        };
        lines.push(line);
    }
    lines
}

/// `s` without its ANSI CSI sequences (ESC [ … final byte): what a test compares.
#[cfg(test)]
pub(crate) fn strip_ansi(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == 0x1b && b.get(i + 1) == Some(&b'[') {
            i += 2;
            while i < b.len() && !(0x40..=0x7e).contains(&b[i]) {
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
