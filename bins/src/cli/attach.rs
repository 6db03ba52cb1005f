//! Attaching to a daemon-held session (`WS /v1/sessions/{id}/acp`) and chatting: in a terminal
//! (raw keys: a line editor, a key per permission option, Ctrl-C cancels the turn and a second
//! one detaches, `/mode`, `/model`, `/stop`), or for one turn without one (the answer printed,
//! exit 0 on `end_turn`). The ACP logic is [`super::chat::Chat`]'s.

use std::io::Write;

use anyhow::{Context, bail};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures_util::{SinkExt, StreamExt};
use handler_core::client::api::{Api, encode};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::chat::{Action, Chat, Out, Permission};

type Ws = handler_core::client::WebSocket;

/// Opens the session's ACP WebSocket with the token as a subprotocol (F.4), over the client's
/// transport (the unix socket by default, decision 0135).
pub(crate) async fn connect(api: &Api, session: &str) -> anyhow::Result<Ws> {
    let path = format!("/v1/sessions/{}/acp", encode(session));
    handler_core::client::connect_ws(api.discovery(), &path, None)
        .await
        .map_err(|e| anyhow::anyhow!("cannot attach to session {session}: {e}"))
}

async fn send(ws: &mut Ws, v: &Value) -> anyhow::Result<()> {
    ws.send(Message::text(v.to_string()))
        .await
        .context("the session's connection failed")
}

/// What the WebSocket gave.
enum Incoming {
    Msg(Value),
    Closed(u16, String),
}

async fn next(ws: &mut Ws) -> Incoming {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                if let Ok(v) = serde_json::from_str(&t) {
                    return Incoming::Msg(v);
                }
            }
            Some(Ok(Message::Close(f))) => {
                let (c, r) = f.map_or((1005, String::new()), |f| {
                    (f.code.into(), f.reason.to_string())
                });
                return Incoming::Closed(c, r);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Incoming::Closed(1006, e.to_string()),
            None => return Incoming::Closed(1006, "connection lost".into()),
        }
    }
}

/// The session's ACP id and folder, from `GET /v1/sessions/{id}`.
pub(crate) async fn session_facts(api: &Api, id: &str) -> anyhow::Result<(String, String)> {
    let s = api.get(&format!("/v1/sessions/{}", encode(id))).await?;
    let acp = s["acpSessionId"].as_str().unwrap_or_default().to_string();
    let scope = s["scope"].as_str().unwrap_or("/").to_string();
    Ok((acp, scope))
}

/// initialize + session/load; the replay's actions (shown unless `quiet`).
async fn setup(ws: &mut Ws, chat: &mut Chat, cwd: &str, term: &mut Term) -> anyhow::Result<()> {
    let init = chat.initialize();
    send(ws, &init).await?;
    let after = chat.last_seq;
    let load = chat.load(cwd, after);
    send(ws, &load).await?;
    loop {
        match next(ws).await {
            Incoming::Msg(m) => {
                for a in chat.on_message(&m) {
                    match a {
                        Action::Loaded => return Ok(()),
                        Action::Failed(e) => bail!("the session cannot be loaded: {e}"),
                        other => term.act(ws, chat, other).await?,
                    }
                }
            }
            Incoming::Closed(c, r) => bail!("the session closed the connection ({c}): {r}"),
        }
    }
}

/// One turn without a terminal: prints the answer; 0 on `end_turn`, 1 otherwise.
pub(crate) async fn one_turn(api: &Api, session: &str, prompt: &str) -> anyhow::Result<i32> {
    let (acp, scope) = session_facts(api, session).await?;
    let mut ws = connect(api, session).await?;
    let mut chat = Chat::new(&acp);
    let mut quiet = Term::quiet();
    setup(&mut ws, &mut chat, &scope, &mut quiet).await?;
    let mut term = Term::plain();
    let p = chat.prompt(prompt);
    send(&mut ws, &p).await?;
    loop {
        match next(&mut ws).await {
            Incoming::Msg(m) => {
                for a in chat.on_message(&m) {
                    match a {
                        Action::TurnEnded(reason) => {
                            let _ = ws.close(None).await;
                            if reason == "end_turn" {
                                return Ok(0);
                            }
                            eprintln!("handler: the turn ended: {reason}");
                            return Ok(1);
                        }
                        Action::Failed(e) => bail!("the prompt failed: {e}"),
                        Action::Ask(p) => {
                            // Nobody to ask: refused, and said so.
                            eprintln!("handler: refused (no terminal to ask): {}", p.title);
                            let no = p.options.iter().find(|o| o.0 == 'n').map(|o| o.0);
                            let answer = no.and_then(|k| chat.answer(&p, k));
                            send(&mut ws, &answer.unwrap_or_else(|| chat.cancelled(&p))).await?;
                        }
                        other => term.act(&mut ws, &mut chat, other).await?,
                    }
                }
            }
            Incoming::Closed(c, r) => bail!("the session closed the connection ({c}): {r}"),
        }
    }
}

/// How lines reach the person.
struct Term {
    raw: bool,
    quiet: bool,
    skin: termimad::MadSkin,
    input: String,
    asking: Option<Permission>,
}

impl Term {
    fn quiet() -> Term {
        Term {
            quiet: true,
            ..Term::plain()
        }
    }
    fn plain() -> Term {
        Term {
            raw: false,
            quiet: false,
            skin: termimad::MadSkin::default(),
            input: String::new(),
            asking: None,
        }
    }
    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        let mut out = std::io::stdout().lock();
        if self.raw {
            let _ = write!(out, "\r\x1b[2K{}\r\n", text.replace('\n', "\r\n"));
            let _ = write!(out, "{}", self.prompt_line());
        } else {
            let _ = writeln!(out, "{text}");
        }
        let _ = out.flush();
    }
    fn prompt_line(&self) -> String {
        match &self.asking {
            Some(p) => p.question(),
            None => format!("› {}", self.input),
        }
    }
    fn markdown(&self, text: &str) -> String {
        if !self.raw {
            return text.to_string();
        }
        let width = crossterm::terminal::size().map_or(80, |(w, _)| w as usize);
        self.skin
            .text(text, Some(width.max(20)))
            .to_string()
            .trim_end()
            .to_string()
    }
    async fn act(&mut self, ws: &mut Ws, chat: &mut Chat, a: Action) -> anyhow::Result<()> {
        match a {
            Action::Show(Out::Markdown(t)) => self.line(&self.markdown(&t)),
            Action::Show(Out::Line(t)) => self.line(&t),
            Action::Send(v) => send(ws, &v).await?,
            Action::Ask(p) => {
                self.asking = Some(p);
                self.line("");
            }
            Action::Withdrawn(id) => {
                if self.asking.as_ref().is_some_and(|p| p.id == id) {
                    self.asking = None;
                    self.line("(answered elsewhere)");
                }
            }
            Action::TurnEnded(r) if r != "end_turn" => self.line(&format!("(turn {r})")),
            Action::Failed(e) => self.line(&format!("handler: {e}")),
            Action::TurnEnded(_) | Action::Loaded => {}
        }
        let _ = chat;
        Ok(())
    }
}

/// Restores the terminal when the chat ends, however it ends.
struct RawGuard;

impl Drop for RawGuard {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
        println!();
    }
}

/// The chat in a terminal until the person detaches or stops the session; the exit code.
pub(crate) async fn chat(api: &Api, session: &str, first: Option<String>) -> anyhow::Result<i32> {
    let (acp, scope) = session_facts(api, session).await?;
    let mut chat = Chat::new(&acp);
    let mut term = Term::plain();
    term.raw = true;
    crossterm::terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
    let _guard = RawGuard;
    let keys = key_reader();
    let mut keys = keys;
    term.line(&format!(
        "session {session}: Enter sends, Ctrl-C cancels the turn (twice: detach), /mode, /model, /stop"
    ));
    loop {
        let mut ws = connect(api, session).await?;
        setup(&mut ws, &mut chat, &scope, &mut term).await?;
        if let Some(p) = chat.mode.clone() {
            term.line(&format!("mode: {p}"));
        }
        let mut pending_first = first.clone().filter(|_| chat.last_seq == 0);
        if let Some(text) = pending_first.take() {
            term.line(&format!("> {text}"));
            let p = chat.prompt(&text);
            send(&mut ws, &p).await?;
        }
        match live(api, session, &mut ws, &mut chat, &mut term, &mut keys).await? {
            End::Exit(code) => return Ok(code),
            End::Reattach => term.line("(re-attaching)"),
        }
    }
}

enum End {
    Exit(i32),
    Reattach,
}

fn key_reader() -> mpsc::UnboundedReceiver<KeyEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(ev) = crossterm::event::read() {
            if let Event::Key(k) = ev
                && k.kind != KeyEventKind::Release
                && tx.send(k).is_err()
            {
                return;
            }
        }
    });
    rx
}

async fn live(
    api: &Api,
    session: &str,
    ws: &mut Ws,
    chat: &mut Chat,
    term: &mut Term,
    keys: &mut mpsc::UnboundedReceiver<KeyEvent>,
) -> anyhow::Result<End> {
    let mut cancelling = false;
    loop {
        tokio::select! {
            m = next(ws) => match m {
                Incoming::Msg(m) => {
                    for a in chat.on_message(&m) {
                        if matches!(a, Action::TurnEnded(_) | Action::Failed(_)) {
                            cancelling = false;
                        }
                        term.act(ws, chat, a).await?;
                    }
                }
                Incoming::Closed(4003 | 1006, _) => return Ok(End::Reattach),
                Incoming::Closed(c, r) => {
                    term.line(&format!("handler: the session closed the connection ({c}): {r}"));
                    return Ok(End::Exit(if c == 4002 { 0 } else { 1 }));
                }
            },
            k = keys.recv() => {
                let Some(k) = k else { return Ok(End::Exit(0)) };
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                if ctrl && k.code == KeyCode::Char('c') {
                    if chat.busy && !cancelling {
                        cancelling = true;
                        if let Some(p) = term.asking.take() {
                            send(ws, &chat.cancelled(&p)).await?;
                        }
                        send(ws, &chat.cancel()).await?;
                        term.line("cancelling the turn (Ctrl-C again detaches)");
                        continue;
                    }
                    return detach(ws, term, session).await;
                }
                if ctrl && k.code == KeyCode::Char('d') && term.input.is_empty() {
                    return detach(ws, term, session).await;
                }
                if let Some(end) = key(api, session, ws, chat, term, k).await? {
                    return Ok(end);
                }
            }
        }
    }
}

async fn detach(ws: &mut Ws, term: &mut Term, session: &str) -> anyhow::Result<End> {
    let _ = ws.close(None).await;
    term.asking = None;
    term.input.clear();
    term.line(&format!(
        "detached; the session goes on: handler attach {session}"
    ));
    Ok(End::Exit(0))
}

async fn key(
    api: &Api,
    session: &str,
    ws: &mut Ws,
    chat: &mut Chat,
    term: &mut Term,
    k: KeyEvent,
) -> anyhow::Result<Option<End>> {
    if let Some(p) = term.asking.clone() {
        if let KeyCode::Char(c) = k.code
            && let Some(answer) = chat.answer(&p, c)
        {
            term.asking = None;
            let chosen = p.options.iter().find(|o| o.0 == c.to_ascii_lowercase());
            term.line(&format!("  → {}", chosen.map_or("", |o| o.2.as_str())));
            send(ws, &answer).await?;
        }
        return Ok(None);
    }
    match k.code {
        KeyCode::Char(c) => term.input.push(c),
        KeyCode::Backspace => {
            term.input.pop();
        }
        KeyCode::Enter => {
            let text = std::mem::take(&mut term.input);
            return command(api, session, ws, chat, term, text.trim()).await;
        }
        _ => return Ok(None),
    }
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\r\x1b[2K{}", term.prompt_line());
    let _ = out.flush();
    Ok(None)
}

async fn command(
    api: &Api,
    session: &str,
    ws: &mut Ws,
    chat: &mut Chat,
    term: &mut Term,
    text: &str,
) -> anyhow::Result<Option<End>> {
    let (verb, arg) = text.split_once(' ').unwrap_or((text, ""));
    let arg = arg.trim();
    match verb {
        "" => term.line(""),
        "/stop" => {
            api.post(
                &format!("/v1/sessions/{}/stop", encode(session)),
                &Value::Null,
            )
            .await?;
            term.line("the session is stopped (handler attach restarts it)");
            return Ok(Some(End::Exit(0)));
        }
        "/mode" if arg.is_empty() => {
            let list: Vec<String> = chat
                .modes
                .iter()
                .map(|m| format!("{} ({})", m.0, m.1))
                .collect();
            term.line(&format!("modes: {}", list.join(", ")));
        }
        "/mode" => {
            let m = chat.set_mode(arg);
            send(ws, &m).await?;
            term.line(&format!("mode: {arg}"));
        }
        "/model" if arg.is_empty() => {
            let list = chat.model_option.as_ref().map(|m| m.1.join(", "));
            term.line(&format!(
                "models: {}",
                list.unwrap_or_else(|| "the agent offers no choice".into())
            ));
        }
        "/model" => {
            let m = chat.set_model(arg);
            send(ws, &m).await?;
            term.line(&format!("model: {arg}"));
        }
        _ if chat.busy => term.line("a turn is in progress (Ctrl-C cancels it)"),
        _ => {
            term.line(&format!("> {text}"));
            let p = chat.prompt(text);
            send(ws, &p).await?;
        }
    }
    Ok(None)
}
