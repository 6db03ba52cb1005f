//! The daemon's side of the git reader (F.8): handlerd never runs git and never reads `.git`; it
//! asks `handler-git-read`, a child limited to 1 GiB of address space that it stops waiting for
//! (and kills) after 10 s. A malformed repository only costs that child, and gives nothing.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use handler_contracts::files::{MAX_IGNORE_FILE_BYTES, MAX_READ_BYTES};
use tokio::io::AsyncReadExt;

/// The reader's name, looked for beside the current executable.
pub const GIT_READ_BIN: &str = "handler-git-read";
/// Overrides where the reader is (tests, packaging).
pub const GIT_READ_ENV: &str = "HANDLER_GIT_READ";
/// How long handlerd waits for one answer (F.8).
pub const GIT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The reader's address-space limit (F.8: 1 GB).
pub const GIT_READ_MEMORY: u64 = 1 << 30;

/// Why the reader gave nothing (logged; the answer then has no earlier version).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitReadError {
    /// The reader could not be started.
    #[error("cannot start {program}: {error}")]
    Spawn {
        /// The program.
        program: String,
        /// Why (in the message, not a `source`: decision 0053).
        error: std::io::Error,
    },
    /// No answer in time: killed.
    #[error("the git reader did not answer within {0:?}: stopped")]
    TimedOut(Duration),
    /// It failed (a malformed repository, out of memory…).
    #[error("the git reader failed ({status}): {stderr}")]
    Failed {
        /// Its exit status.
        status: String,
        /// The beginning of what it said.
        stderr: String,
    },
    /// Its answer was not what it prints.
    #[error("the git reader's answer is malformed")]
    Malformed,
}

/// How to run the git reader: where it is, how long to wait, how much memory it may map.
#[derive(Debug, Clone)]
pub struct GitReader {
    program: PathBuf,
    timeout: Duration,
    memory: u64,
}

impl GitReader {
    /// The reader at `program`, with the spec's limits.
    pub fn at(program: impl Into<PathBuf>) -> Self {
        GitReader {
            program: program.into(),
            timeout: GIT_READ_TIMEOUT,
            memory: GIT_READ_MEMORY,
        }
    }
    /// `$HANDLER_GIT_READ`, else `handler-git-read` beside the current executable.
    pub fn locate() -> Self {
        if let Some(p) = std::env::var_os(GIT_READ_ENV).filter(|p| !p.is_empty()) {
            return Self::at(p);
        }
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join(GIT_READ_BIN)));
        Self::at(beside.unwrap_or_else(|| PathBuf::from(GIT_READ_BIN)))
    }
    /// The same reader waiting `timeout` instead of 10 s.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The commit HEAD of the repository at `git_dir` is at (`None`: unborn).
    pub async fn head(&self, git_dir: &Path) -> Result<Option<String>, GitReadError> {
        let out = self
            .run(&["head".as_ref(), git_dir.as_os_str()], 128)
            .await?;
        let Some(out) = out else { return Ok(None) };
        let id = String::from_utf8(out).map_err(|_| GitReadError::Malformed)?;
        let id = id.trim();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GitReadError::Malformed);
        }
        Ok(Some(id.to_string()))
    }

    /// The patterns of `<git_dir>/info/exclude` (`None`: there is none), up to 1 MB.
    pub async fn exclude(&self, git_dir: &Path) -> Result<Option<Vec<u8>>, GitReadError> {
        let args = ["exclude".as_ref(), git_dir.as_os_str()];
        self.run(&args, MAX_IGNORE_FILE_BYTES).await
    }

    /// `path` as it is in `commit` (`None`: not there): its first [`MAX_READ_BYTES`] and size.
    pub async fn show(
        &self,
        git_dir: &Path,
        commit: &str,
        path: &str,
    ) -> Result<Option<(Vec<u8>, u64)>, GitReadError> {
        let args: [&OsStr; 4] = [
            "show".as_ref(),
            git_dir.as_os_str(),
            commit.as_ref(),
            path.as_ref(),
        ];
        let Some(out) = self.run(&args, MAX_READ_BYTES + 32).await? else {
            return Ok(None);
        };
        let nl = out
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(GitReadError::Malformed)?;
        let size = std::str::from_utf8(&out[..nl])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(GitReadError::Malformed)?;
        Ok(Some((out[nl + 1..].to_vec(), size)))
    }

    /// Runs the reader with `args`: its stdout (at most `cap` bytes) when it exits 0, `None`
    /// when it exits 1 (nothing there), an error otherwise or after the timeout (killed).
    async fn run(&self, args: &[&OsStr], cap: usize) -> Result<Option<Vec<u8>>, GitReadError> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(args)
            .env_clear()
            .env(MEMORY_ENV, self.memory.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|error| GitReadError::Spawn {
            program: self.program.display().to_string(),
            error,
        })?;
        if let Some(pid) = child.id() {
            limit_memory(pid, self.memory);
        }
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(GitReadError::Malformed);
        };
        let answer = tokio::time::timeout(self.timeout, async {
            let read_out = async {
                let mut out = Vec::new();
                let _ = stdout.take(cap as u64).read_to_end(&mut out).await;
                out // the pipe closes here: a reader writing more stops
            };
            let read_err = async {
                let mut err = Vec::new();
                let _ = stderr.take(2048).read_to_end(&mut err).await;
                err
            };
            let (out, err) = tokio::join!(read_out, read_err);
            (out, err, child.wait().await)
        })
        .await;
        let Ok((out, err, status)) = answer else {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(GitReadError::TimedOut(self.timeout));
        };
        let status = status.map_err(|_| GitReadError::Malformed)?;
        match status.code() {
            Some(0) => Ok(Some(out)),
            Some(1) => Ok(None),
            _ => Err(GitReadError::Failed {
                status: status.to_string(),
                stderr: String::from_utf8_lossy(&err).trim().to_string(),
            }),
        }
    }
}

/// The variable telling the reader its own limit (it sets it first thing: no moment without).
pub const MEMORY_ENV: &str = "HANDLER_GIT_READ_MEMORY";

/// Sets the child's address-space limit from here too (`prlimit`), whatever it does itself.
fn limit_memory(pid: u32, bytes: u64) {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let limit = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    if let Err(e) = rustix::process::prlimit(Some(pid), rustix::process::Resource::As, limit) {
        tracing::debug!(error = %e, "prlimit on the git reader (it limits itself too)");
    }
}

/// The `.git` folder of a session's folder, as the reader is given it.
pub(super) fn git_dir(folder: &Path) -> PathBuf {
    let mut p = OsString::from(folder.as_os_str());
    p.push("/.git");
    PathBuf::from(p)
}
