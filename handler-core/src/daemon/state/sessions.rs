//! The live sessions' registry (F.6.1, decision 0057): session id → the handle of its hub (its
//! inbox and its start), held by `App`. An entry lives from the start until the sandbox is
//! gone, so a second start cannot race the first one's container name. The messages a hub's
//! inbox takes are defined here, beside the handle that carries them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use handler_contracts::session::StopHow;
use handler_policy::ClientId;
use tokio::sync::{mpsc, oneshot, watch};

/// What an attachment's WebSocket side sends.
#[derive(Debug)]
pub enum Out {
    /// One JSON-RPC message.
    Text(String),
    /// The log's updates up to a seq, then the messages that follow a replay (F.4 step 2).
    Replay(Box<Replay>),
}

/// A replay the WebSocket side streams from the log file itself (a long log never fills the
/// queue): the updates with `after < seq <= upto`, then `tail`.
#[derive(Debug)]
pub struct Replay {
    /// The event log.
    pub path: PathBuf,
    /// `handler.dev/afterSeq`, when the client gave one.
    pub after: Option<u64>,
    /// The last seq the replay covers (what follows is live traffic).
    pub upto: u64,
    /// The session id as clients know it.
    pub session_id: String,
    /// The messages after the updates: the result, the state, the pending requests.
    pub tail: Vec<String>,
}

/// What a hub's inbox takes.
#[derive(Debug)]
pub enum Inbox {
    /// A client attaches: its queue, how it is closed, its number back.
    Attach {
        /// Its queue.
        out: mpsc::Sender<Out>,
        /// How the hub closes it (code, reason).
        close: oneshot::Sender<(u16, String)>,
        /// Its client number.
        reply: oneshot::Sender<ClientId>,
    },
    /// A client's text frame.
    Frame {
        /// Who sent it.
        client: ClientId,
        /// The frame.
        text: String,
    },
    /// A client's WebSocket closed.
    Detach {
        /// Who left.
        client: ClientId,
    },
    /// Stop the session.
    Stop {
        /// How it stops (logged).
        how: StopHow,
        /// Why.
        reason: String,
        /// Told once the sandbox is gone.
        done: Option<oneshot::Sender<()>>,
    },
    /// Cancel the turn in progress.
    Cancel,
    /// The proxy denied `host` (`<host>:<port>`) for the session's sandbox (A events).
    Denied {
        /// The entry that would allow it.
        host: String,
    },
}

/// How a start went.
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// Still starting.
    Pending,
    /// The agent runs and its session is open.
    Running,
    /// It could not start, and why.
    Failed(String),
}

/// A live session's handle: its inbox and its start.
#[derive(Debug, Clone)]
pub struct Handle {
    /// The hub's inbox.
    pub inbox: mpsc::Sender<Inbox>,
    /// How its start goes.
    pub started: watch::Receiver<Started>,
}

/// The registry of live sessions, by session id.
#[derive(Debug, Default)]
pub struct LiveSessions {
    map: Mutex<HashMap<String, Handle>>,
}

impl LiveSessions {
    /// The registry locked (a poisoned lock still holds a consistent map: entries are only
    /// inserted and removed whole).
    pub fn lock(&self) -> MutexGuard<'_, HashMap<String, Handle>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handle of session `id`, when it is live.
    pub fn get(&self, id: &str) -> Option<Handle> {
        self.lock().get(id).cloned()
    }

    /// Session `id` is gone.
    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
