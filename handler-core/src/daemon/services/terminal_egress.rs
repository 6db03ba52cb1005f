//! A terminal's egress events (D.16, decision 0152): its launcher writes its stderr into
//! `<state>/terminals/<connection>.log` (decision 0102), where the launcher is the only writer of
//! event lines (decision 0037); this follows that file, split by `lines::Splitter`, and records
//! each event for the agent as a connection's stderr is, so a terminal's network shows in the agent's network page and in
//! `GET /v1/agents/{id}/egress-events`.

use std::io::{Read as _, Seek as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use handler_contracts::sandbox::EgressEvent;

use crate::daemon::state::AppState;
use crate::lines::{MAX_LINE, Splitter};

/// How often the file is looked at.
const POLL: Duration = Duration::from_millis(250);
/// The most read at one look.
const CHUNK: u64 = 256 * 1024;

/// The events among the file's whole lines as its bytes come (`lines::Splitter`): a piece of a
/// line longer than [`MAX_LINE`] is never one.
#[derive(Debug)]
pub struct Lines(Splitter);

impl Default for Lines {
    fn default() -> Self {
        Lines(Splitter::new(MAX_LINE))
    }
}

impl Lines {
    /// The events among the whole lines `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<EgressEvent> {
        let mut out = Vec::new();
        self.0.push(bytes, &mut |p| {
            if p.whole() {
                out.extend(EgressEvent::from_line(&String::from_utf8_lossy(p.bytes)));
            }
        });
        out
    }
}

/// The file's length now (where a follower taking a terminal back starts: what came before was
/// the previous handlerd's to record).
pub fn end_of(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Follows `path` from byte `from`, recording each event for `agent`'s sandbox `sandbox`,
/// until the task is aborted (the terminal's end).
pub async fn follow(app: AppState, agent: String, sandbox: String, path: PathBuf, from: u64) {
    let mut at = from;
    let mut lines = Lines::default();
    loop {
        tokio::time::sleep(POLL).await;
        let p = path.clone();
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::task::spawn_blocking(move || read_from(&p, at)),
        )
        .await;
        let Ok(Ok(Ok(bytes))) = read else { continue };
        at += bytes.len() as u64;
        for ev in lines.push(&bytes) {
            tracing::info!(agent = %agent, sandbox = %sandbox, decision = ?ev.decision, host = %ev.host, "egress (terminal)");
            app.record_egress(&agent, &sandbox, ev);
        }
    }
}

/// At most [`CHUNK`] bytes of `path` from `from`: a regular file opened without following a
/// link.
fn read_from(path: &Path, from: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    f.seek(std::io::SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(CHUNK).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::Lines;
    use crate::lines::MAX_LINE;

    #[test]
    fn events_are_whole_lines_and_a_long_line_is_skipped_to_its_end() {
        let ev = r#"handler-egress {"decision": "denied", "host": "denied.example.org:80"}"#;
        let mut l = Lines::default();
        // Split anywhere: one event once its line ends.
        assert!(l.push(b"handler-ready\npodman: x\n").is_empty());
        assert!(l.push(&ev.as_bytes()[..20]).is_empty());
        let got = l.push(format!("{}\n", &ev[20..]).as_bytes());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].host, "denied.example.org:80");
        // A line past the bound: nothing of it, even what reads as an event after the bound.
        let long = format!("{}{ev}\n{ev}\n", "x".repeat(MAX_LINE + 100));
        let got = l.push(long.as_bytes());
        assert_eq!(got.len(), 1, "only the next whole line");
        // Not at a line's start: no event.
        assert!(l.push(format!("sandbox: {ev}\n").as_bytes()).is_empty());
    }
}
