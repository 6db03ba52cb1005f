//! The sessions store (F.2, F.5): one folder per session, `<state>/sessions/<id>/` (0700),
//! holding `session.json` (the record, written atomically, unknown fields kept) and
//! `events.ndjson` (the event log, appended and flushed one line per event).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use handler_contracts::session::{
    ParsedLog, Session, SessionEvent, SessionEventKind, SessionState, parse_log,
};

use crate::daemon::fsutil;

/// The record's file name in a session's folder.
pub const RECORD: &str = "session.json";
/// The event log's file name in a session's folder.
pub const EVENTS: &str = "events.ndjson";

/// Why the store could not do something.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionStoreError + '_ {
    move |source| SessionStoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The sessions, held in memory, each written to its folder on change.
#[derive(Debug)]
pub struct SessionStore {
    dir: PathBuf,
    records: Mutex<HashMap<String, Session>>,
}

impl SessionStore {
    /// Opens `<state>/sessions`, reading every session's record (unreadable ones are skipped
    /// and logged).
    pub fn open(state_dir: &Path) -> Self {
        let dir = state_dir.join("sessions");
        let mut records = HashMap::new();
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path().join(RECORD);
            let read = fs::read_to_string(&path).map_err(|e| e.to_string());
            match read.and_then(|t| serde_json::from_str::<Session>(&t).map_err(|e| e.to_string()))
            {
                Ok(s) => {
                    records.insert(s.id.clone(), s);
                }
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "session record unreadable");
                }
            }
        }
        SessionStore {
            dir,
            records: Mutex::new(records),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A session's folder.
    pub fn folder(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Creates a session's folder (0700) and writes its first record.
    pub fn create(&self, s: &Session) -> Result<PathBuf, SessionStoreError> {
        let folder = self.folder(&s.id);
        fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&folder)
            .map_err(io(&folder))?;
        self.put(s)?;
        Ok(folder)
    }

    /// Writes a session's record.
    pub fn put(&self, s: &Session) -> Result<(), SessionStoreError> {
        // A stopped session is no longer shared (F.1, D.7).
        let stopped;
        let s = if s.remote && matches!(s.state, SessionState::Stopped | SessionState::Failed) {
            stopped = Session {
                remote: false,
                ..s.clone()
            };
            &stopped
        } else {
            s
        };
        let path = self.folder(&s.id).join(RECORD);
        let bytes = serde_json::to_vec_pretty(s).unwrap_or_default();
        fsutil::write_atomic(&path, &bytes, 0o600).map_err(io(&path))?;
        self.lock().insert(s.id.clone(), s.clone());
        Ok(())
    }

    /// Read-modify-write of a session's record; `None` when it is unknown.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Session)) -> Option<Session> {
        let mut s = self.get(id)?;
        f(&mut s);
        if let Err(e) = self.put(&s) {
            tracing::warn!(session = %id, error = %e, "session record not written");
        }
        Some(s)
    }

    /// One session.
    pub fn get(&self, id: &str) -> Option<Session> {
        self.lock().get(id).cloned()
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<Session> {
        let mut v: Vec<Session> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Removes a session and its whole folder (F.2).
    pub fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        let folder = self.folder(id);
        match fs::remove_dir_all(&folder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&folder)(e)),
        }
        self.lock().remove(id);
        Ok(())
    }

    /// Opens a session's event log for appending.
    pub fn log(&self, id: &str) -> Result<EventLog, SessionStoreError> {
        EventLog::open(&self.folder(id).join(EVENTS))
    }
}

/// Reads an event log (missing: empty); a torn last line is dropped (F.5).
pub fn read_log(path: &Path) -> Result<ParsedLog, SessionStoreError> {
    let text = fsutil::read_optional(path).map_err(io(path))?;
    Ok(parse_log(&text.unwrap_or_default()))
}

/// An event log open for appending: each event one line, written whole and at once.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: fs::File,
    next: u64,
    has_updates: bool,
    agent_line: u64,
}

impl EventLog {
    /// Opens (creating, 0600) `path`; a torn last line is cut off first, so the next event
    /// starts on its own line.
    pub fn open(path: &Path) -> Result<Self, SessionStoreError> {
        let text = fsutil::read_optional(path)
            .map_err(io(path))?
            .unwrap_or_default();
        let parsed = parse_log(&text);
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(io(path))?;
        if parsed.torn_tail {
            let keep = text.rfind('\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64).map_err(io(path))?;
        }
        Ok(EventLog {
            path: path.to_path_buf(),
            file,
            next: parsed.next_seq(),
            has_updates: parsed.has_updates(),
            agent_line: parsed
                .events
                .iter()
                .filter_map(|e| e.agent_line)
                .max()
                .unwrap_or(0),
        })
    }

    /// The last agent line an event came from (0: none): a daemon taking the agent over
    /// reads on after it (issue 28 item 6).
    pub fn last_agent_line(&self) -> u64 {
        self.agent_line
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The seq of the last event written (0: none).
    pub fn last_seq(&self) -> u64 {
        self.next - 1
    }

    /// Whether the log holds an update.
    pub fn has_updates(&self) -> bool {
        self.has_updates
    }

    /// Appends the event `make(seq)` builds, with the next seq; `redact` is applied to the
    /// line (secret values, F.2). Returns the event's seq.
    pub fn append(
        &mut self,
        make: impl FnOnce(u64) -> SessionEvent,
        redact: impl FnOnce(String) -> String,
    ) -> Result<u64, SessionStoreError> {
        let seq = self.next;
        let e = make(seq);
        if let Some(n) = e.agent_line {
            self.agent_line = self.agent_line.max(n);
        }
        if matches!(e.kind, SessionEventKind::Update { .. }) {
            self.has_updates = true;
        }
        let mut line = redact(e.to_line());
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(io(&self.path))?;
        self.next += 1;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_contracts::session::StopHow;

    #[test]
    fn appends_continue_after_a_torn_line_which_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("hs-log-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(EVENTS);
        let mut log = EventLog::open(&path).unwrap();
        log.append(|s| SessionEvent::started(s, "t", None), |l| l)
            .unwrap();
        log.append(
            |s| SessionEvent::update(s, "t", serde_json::json!({"text": "key sk-123"})),
            |l| l.replace("sk-123", "[redacted]"),
        )
        .unwrap();
        drop(log);
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":3,\"t\":").unwrap();
        let mut log = EventLog::open(&path).unwrap();
        assert_eq!(log.last_seq(), 2);
        assert!(log.has_updates());
        log.append(
            |s| SessionEvent::stopped(s, "t", StopHow::Idle, None),
            |l| l,
        )
        .unwrap();
        let p = read_log(&path).unwrap();
        assert!(!p.torn_tail);
        assert_eq!(
            p.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("sk-123") && text.contains("[redacted]"),
            "{text}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
