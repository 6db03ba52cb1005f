//! The launchers this daemon started, one small file each in `<state>/launchers/` (the daemon's
//! own folder, never an agent's), so the next daemon knows them (issue 28, security F13): at its
//! start, the previous daemon's agent sandboxes still ending are told to stop (F.6.5: they are
//! gone), and its terminals — which outlive handlerd by design (D.16) — are taken back under its
//! control. A launcher is known by pid, start time and boot, as the runtime's sweep knows it.

use std::path::{Path, PathBuf};

use handler_contracts::control::AgentConnection;
use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;
use crate::daemon::state::LiveAllow;

/// The folder of the records, under the daemon's state folder.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("launchers")
}

/// A launcher process, recognised again only when its pid, start time and boot all match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherPid {
    /// Its pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot, `/proc/<pid>/stat`).
    pub start: u64,
    /// The boot it started in.
    pub boot: String,
}

impl LauncherPid {
    /// The process `pid` now (None when there is none).
    pub fn of(pid: u32) -> Option<Self> {
        Some(LauncherPid {
            pid,
            start: start_of(pid)?,
            boot: boot_id(),
        })
    }

    /// Whether this very process is still running (not a later one with its pid; a zombie —
    /// ended, its parent gone without reaping it — is not).
    pub fn alive(&self) -> bool {
        let zombie = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
            .unwrap_or(false);
        !zombie
            && handler_sandbox::host::launcher_alive(
                &handler_sandbox::facts::LauncherId {
                    pid: self.pid,
                    start: self.start,
                    boot: self.boot.clone(),
                },
                start_of(self.pid),
                &boot_id(),
            )
    }

    /// Sends `sig` to it when it is still this process.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if self.alive()
            && let Ok(pid) = i32::try_from(self.pid)
        {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
}

fn start_of(pid: u32) -> Option<u64> {
    handler_sandbox::host::stat_start_time(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What a terminal's record keeps to take it back: its agent, the connection the API showed,
/// its allow-list (A.4).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TerminalRecord {
    /// The agent's id.
    pub agent: String,
    /// The connection as `GET /v1/agents/{id}` showed it.
    pub connection: AgentConnection,
    /// Its allow-list (None unless filtered).
    pub allow: Option<LiveAllowRecord>,
}

/// [`LiveAllow`] as a record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveAllowRecord {
    /// The entries fixed at launch.
    pub base: Vec<handler_contracts::allow::AllowEntry>,
    /// The list in force.
    pub now: Vec<handler_contracts::allow::AllowEntry>,
}

impl From<&LiveAllow> for LiveAllowRecord {
    fn from(a: &LiveAllow) -> Self {
        LiveAllowRecord {
            base: a.base.clone(),
            now: a.now.clone(),
        }
    }
}

impl From<LiveAllowRecord> for LiveAllow {
    fn from(a: LiveAllowRecord) -> Self {
        LiveAllow {
            base: a.base,
            now: a.now,
        }
    }
}

/// One launcher started by a daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The sandbox's name (the spec's).
    pub name: String,
    /// The launcher process.
    pub launcher: LauncherPid,
    /// Set for a terminal (D.16): taken back by the next daemon, never stopped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalRecord>,
    /// Set for a session's kept agent (issue 28 item 6): the launcher is its keeper, which the
    /// next daemon connects to and takes over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptRecord>,
}

/// What a kept agent's record holds for the daemon that takes it over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeptRecord {
    /// The session.
    pub session: String,
    /// The agent.
    pub agent: String,
    /// The keeper's socket.
    pub socket: PathBuf,
    /// The machine its agent runs in by exec (decision 0167); None: a sandbox of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// What the session's opening learnt, once it is open (None: still starting — a daemon
    /// that finds it so cannot take it over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<OpenRecord>,
}

/// A session's opening as the hub knew it (`initialize`'s and `session/new|load`'s answers).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenRecord {
    /// The agent's initialize result (raw JSON), answered to clients' initialize.
    pub init_result: String,
    /// The session's id as the agent knows it.
    pub agent_session: String,
    /// Whether the agent advertised loadSession.
    pub load_session: bool,
    /// The modes (as the last update left them).
    pub modes: serde_json::Value,
    /// The configuration options (as the last update left them).
    pub config_options: serde_json::Value,
}

/// The records' errors.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The launcher ended before it could be recorded.
    #[error("launcher {0} is not running")]
    Gone(u32),
    /// The folder or a file cannot be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A sandbox name as a file name: its own characters (the spec's name is `[a-z0-9-]`), anything
/// else refused.
fn file_of(dir: &Path, name: &str) -> Option<PathBuf> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !name.starts_with('.');
    ok.then(|| dir.join(format!("{name}.json")))
}

/// Records launcher `pid` of sandbox `name` (and prunes the records of launchers that ended).
pub fn record(
    state_dir: &Path,
    name: &str,
    pid: u32,
    terminal: Option<TerminalRecord>,
) -> Result<Record, RecordError> {
    let dir = dir(state_dir);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecordError::Io { path, source }
    };
    fsutil::create_dir_private(&dir).map_err(io(&dir))?;
    let launcher = LauncherPid::of(pid).ok_or(RecordError::Gone(pid))?;
    let r = Record {
        name: name.to_string(),
        launcher,
        terminal,
        kept: None,
    };
    write(state_dir, &r)?;
    for old in list(state_dir) {
        if !old.launcher.alive() {
            forget(state_dir, &old.name);
        }
    }
    Ok(r)
}

/// Records keeper `pid` of session sandbox `name`.
pub fn record_kept(
    state_dir: &Path,
    name: &str,
    pid: u32,
    kept: KeptRecord,
) -> Result<Record, RecordError> {
    let mut r = record(state_dir, name, pid, None)?;
    r.kept = Some(kept);
    write(state_dir, &r)?;
    Ok(r)
}

/// A kept agent's session is open (or changed its modes): the record says so.
pub fn kept_opened(state_dir: &Path, name: &str, open: OpenRecord) {
    let Some(mut r) = list(state_dir).into_iter().find(|r| r.name == name) else {
        return;
    };
    if let Some(k) = r.kept.as_mut() {
        k.open = Some(open);
        if let Err(e) = write(state_dir, &r) {
            tracing::warn!(sandbox = %name, error = %e, "kept agent's record not updated");
        }
    }
}

/// Writes `r` (its file replaced whole).
fn write(state_dir: &Path, r: &Record) -> Result<(), RecordError> {
    let dir = dir(state_dir);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RecordError::Io { path, source }
    };
    let name = &r.name;
    let path = file_of(&dir, name).ok_or_else(|| RecordError::Io {
        path: dir.join(name),
        source: std::io::Error::other("not a sandbox name"),
    })?;
    let bytes = serde_json::to_vec(r).map_err(|e| RecordError::Io {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    fsutil::write_atomic(&path, &bytes, 0o600).map_err(io(&path))
}

/// Forgets sandbox `name`'s record.
pub fn forget(state_dir: &Path, name: &str) {
    if let Some(p) = file_of(&dir(state_dir), name) {
        let _ = std::fs::remove_file(p);
    }
}

/// Every record (unreadable ones skipped, with a warning).
pub fn list(state_dir: &Path) -> Vec<Record> {
    let Ok(entries) = std::fs::read_dir(dir(state_dir)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => out.push(r),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "launcher record unreadable: removed");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What a starting daemon takes back from the previous one.
#[derive(Debug, Default)]
pub struct TakenBack {
    /// Terminals still running (D.16).
    pub terminals: Vec<Record>,
    /// Kept agents whose keeper runs and whose session was open (issue 28 item 6).
    pub kept: Vec<Record>,
}

/// At a daemon's start: the previous daemon's agent sandboxes (their stdio died with it) still
/// running are sent SIGTERM — they stop and clean up (A4), and a new launch of the same name
/// waits for that — and their records forgotten; terminals and open kept agents still running
/// are returned, to be taken back (a kept agent still starting is stopped: its opening died with
/// its daemon); every other record is forgotten.
pub fn at_start(state_dir: &Path) -> TakenBack {
    let mut back = TakenBack::default();
    for r in list(state_dir) {
        if !r.launcher.alive() {
            forget(state_dir, &r.name);
        } else if r.terminal.is_some() {
            back.terminals.push(r);
        } else if r.kept.as_ref().is_some_and(|k| k.open.is_some()) {
            back.kept.push(r);
        } else {
            tracing::info!(sandbox = %r.name, pid = r.launcher.pid, "a sandbox of the previous daemon is still ending: stopping it");
            r.launcher.signal(nix::sys::signal::Signal::SIGTERM);
            forget(state_dir, &r.name);
        }
    }
    back
}

#[cfg(test)]
mod tests {
    //! Records over real processes: this test's own and a child's.

    use super::*;

    #[test]
    fn a_record_names_its_process_until_it_ends_and_a_later_daemon_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let r = record(dir.path(), "handler-a-c1", child.id(), None).unwrap();
        assert!(r.launcher.alive());
        assert_eq!(list(dir.path()).len(), 1);
        // The same pid with another start time is another process.
        let other = LauncherPid {
            start: r.launcher.start + 1,
            ..r.launcher.clone()
        };
        assert!(!other.alive());
        assert!(at_start(dir.path()).terminals.is_empty());
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(st.signal(), Some(libc::SIGTERM), "the orphan got SIGTERM");
        assert!(list(dir.path()).is_empty(), "its record is forgotten");
        assert!(!r.launcher.alive());
    }

    #[test]
    fn a_terminals_record_is_kept_for_the_next_daemon_and_dead_ones_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let term = TerminalRecord {
            agent: "a".into(),
            connection: AgentConnection {
                id: "c2".into(),
                sandbox: "handler-a-c2".into(),
                since: "2026-12-02T00:00:00Z".into(),
                terminal: None,
            },
            allow: None,
        };
        record(dir.path(), "handler-a-c2", child.id(), Some(term)).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        // Recorded while it runs (a zombie until waited for still has its /proc entry).
        record(dir.path(), "handler-a-c3", gone_pid, None).unwrap();
        gone.wait().unwrap();
        let kept = at_start(dir.path()).terminals;
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].name, "handler-a-c2");
        assert_eq!(
            list(dir.path()).len(),
            1,
            "the dead one's record is forgotten"
        );
        assert!(file_of(dir.path(), "../x").is_none());
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
