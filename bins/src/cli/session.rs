//! `handler attach SESSION` and `handler session list|show|stop|rm|log`: daemon-held sessions
//! from the terminal.

use std::io::IsTerminal;

use anyhow::Context;
use clap::{Args, Subcommand};
use handler_contracts::session::SessionEvent;
use handler_core::client::Discovery;
use handler_core::client::api::{Api, encode};
use serde_json::Value;

use super::chat::{Action, Chat, Out};

/// `handler attach SESSION [-- PROMPT]`.
#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The session's id (`handler session list`).
    pub session: String,
    /// A prompt; without a terminal, the one turn to run.
    #[arg(last = true)]
    pub prompt: Vec<String>,
}

/// `handler session …`.
#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// The sessions, oldest first.
    #[command(visible_alias = "ls")]
    List {
        /// The API's objects, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One session.
    Show {
        /// Its id.
        session: String,
        /// The API's object, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop its sandbox (attaching restarts it).
    Stop {
        /// Its id.
        session: String,
    },
    /// Share it with paired devices (remote control, D.7); --off stops sharing it.
    Share {
        /// Its id.
        session: String,
        /// Stop sharing it: its devices are detached.
        #[arg(long)]
        off: bool,
    },
    /// Stop it and remove its folder and history.
    #[command(alias = "remove")]
    Rm {
        /// Its id.
        session: String,
    },
    /// Its conversation, from handlerd's event log (secrets redacted).
    Log {
        /// Its id.
        session: String,
        /// Only what came after this event (its seq).
        #[arg(long, default_value_t = 0)]
        after_seq: u64,
    },
}

/// Runs `handler attach`.
pub async fn run_attach(args: AttachArgs) -> anyhow::Result<i32> {
    let api = Api::new(Discovery::from_process_env()?);
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let prompt = (!args.prompt.is_empty()).then(|| args.prompt.join(" "));
    match prompt {
        Some(p) if !tty => super::attach::one_turn(&api, &args.session, &p).await,
        _ if !tty => {
            eprintln!("handler: no terminal: give a prompt after -- for one turn");
            Ok(super::run::REFUSED)
        }
        first => super::attach::chat(&api, &args.session, first).await,
    }
}

/// Runs `handler session …`.
pub async fn run_session(cmd: SessionCommand) -> anyhow::Result<i32> {
    let api = Api::new(Discovery::from_process_env()?);
    let path = |id: &str| format!("/v1/sessions/{}", encode(id));
    match cmd {
        SessionCommand::List { json } => {
            let list = api.get("/v1/sessions").await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                print!("{}", table(list.as_array().map_or(&[][..], Vec::as_slice)));
            }
        }
        SessionCommand::Show { session, json } => {
            let s = api.get(&path(&session)).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", details(&s));
            }
        }
        SessionCommand::Stop { session } => {
            api.post(&format!("{}/stop", path(&session)), &Value::Null)
                .await?;
            eprintln!("handler: session {session} is stopped (handler attach restarts it)");
        }
        SessionCommand::Share { session, off } => {
            let p = format!("{}/share", path(&session));
            if off {
                api.delete(&p).await?;
                eprintln!("handler: session {session} is no longer shared");
            } else {
                api.post(&p, &Value::Null).await?;
                eprintln!(
                    "handler: session {session} is shared with your paired devices (handler remote devices)"
                );
            }
        }
        SessionCommand::Rm { session } => {
            api.delete(&path(&session)).await?;
            eprintln!("handler: session {session} is removed");
        }
        SessionCommand::Log { session, after_seq } => {
            let q = format!("{}/events?afterSeq={after_seq}", path(&session));
            let events: Vec<SessionEvent> = serde_json::from_value(api.get(&q).await?)
                .context("handlerd's answer is not a list of session events")?;
            for line in log_lines(events) {
                println!("{line}");
            }
        }
    }
    Ok(0)
}

/// The event log as the chat shows it: updates as lines, turns' ends, starts and stops.
pub fn log_lines(events: Vec<SessionEvent>) -> Vec<String> {
    use handler_contracts::session::{SessionEventKind, TurnPhase};
    let mut chat = Chat::new("");
    let mut out = Vec::new();
    let take = |actions: Vec<Action>, out: &mut Vec<String>| {
        for a in actions {
            if let Action::Show(Out::Markdown(l) | Out::Line(l)) = a {
                out.push(l);
            }
        }
    };
    for e in events {
        match e.kind {
            SessionEventKind::Update { update } => take(chat.on_update(&update), &mut out),
            SessionEventKind::Turn {
                phase: TurnPhase::End,
                stop_reason,
            } => {
                take(chat.flush(), &mut out);
                out.push(format!("(turn ended: {})", stop_reason.unwrap_or_default()));
            }
            SessionEventKind::Lifecycle { event, detail, .. } => {
                take(chat.flush(), &mut out);
                let word = serde_json::to_value(event)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from));
                let detail = detail.map(|d| format!(": {d}")).unwrap_or_default();
                out.push(format!("({} {}{detail})", word.unwrap_or_default(), e.t));
            }
            _ => {}
        }
    }
    take(chat.flush(), &mut out);
    out
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

/// Sessions as a table: id, state, agent, model, title, last activity.
pub fn table(list: &[Value]) -> String {
    let mut rows = vec![
        ["ID", "STATE", "AGENT", "ON", "TITLE", "LAST ACTIVITY"]
            .map(String::from)
            .to_vec(),
    ];
    for v in list {
        let state = if v["busy"] == true {
            format!("{} (busy)", s(v, "state"))
        } else {
            s(v, "state").into()
        };
        let on = [s(v, "account"), s(v, "provider")].concat();
        rows.push(vec![
            s(v, "id").into(),
            state,
            s(v, "agentId").into(),
            format!("{} {on}", s(v, "harness")),
            s(v, "title").into(),
            s(v, "lastActivityAt").into(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One session, a field a line.
pub fn details(v: &Value) -> String {
    let mut out = String::new();
    for k in [
        "id",
        "state",
        "agentId",
        "projectId",
        "harness",
        "account",
        "provider",
        "model",
        "scope",
        "title",
        "origin",
        "lastStopReason",
        "error",
        "createdAt",
        "lastActivityAt",
    ] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
            let x = x.as_str().map_or_else(|| x.to_string(), String::from);
            out.push_str(&format!("{k}: {x}\n"));
        }
    }
    for k in ["busy", "pendingPermissions", "attached"] {
        out.push_str(&format!("{k}: {}\n", v[k]));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_log_reads_as_the_conversation() {
        let log = [
            json!({"seq": 1, "t": "T1", "kind": "lifecycle", "event": "started"}),
            json!({"seq": 2, "t": "T2", "kind": "update", "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}}),
            json!({"seq": 3, "t": "T3", "kind": "update", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}}}),
            json!({"seq": 4, "t": "T4", "kind": "turn", "phase": "end", "stopReason": "end_turn"}),
        ]
        .map(|v| serde_json::from_value(v).unwrap())
        .to_vec();
        let lines: Vec<String> = super::log_lines(log)
            .into_iter()
            .map(|l| crate::cli::chat::strip_ansi(&l))
            .collect();
        assert_eq!(
            lines,
            vec!["(started T1)", "> hi", "hello", "(turn ended: end_turn)"]
        );
    }

    #[test]
    fn sessions_read_as_a_table() {
        let t = super::table(&[
            json!({"id": "s_1", "state": "running", "busy": true, "agentId": "a_1", "harness": "fake", "account": "perso", "lastActivityAt": "T"}),
        ]);
        assert_eq!(
            t.lines().nth(1).unwrap(),
            "s_1  running (busy)  a_1    fake perso         T"
        );
    }
}
