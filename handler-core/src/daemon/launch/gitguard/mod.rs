//! The git guard's I/O (issue 14; the decisions are `handler_sandbox::guard`'s): reading a
//! scope's repository before a start (links, alternates, HEAD — by reading files, git only for
//! `user.name`/`user.email`), making the session's own git directory under Handler's data, and
//! the bring-back: the bundle from the runtime's `git-bundle` helper container, fetched here with
//! `transfer.fsckObjects` into `refs/handler/sessions/<session>/<branch>` (`guard::hidden_ref`), each branch then
//! fast-forwarded, created or left waiting. Every git run here passes
//! `handler_sandbox::guard::HOST_GIT_SAFETY`, in a child with a time and a memory limit; the
//! host's git never opens the session's git directory.
//!
//! The files, one job each: `read.rs` (the repository's facts, read from what an agent can
//! write), `make.rs` (the session's git directory or copy), `git.rs` (running the host's git),
//! `bring_back.rs` (the bring-back), `follow.rs` (follow before a turn).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use handler_sandbox::copytree;
use handler_sandbox::guard::{GuardError, RepoFacts};

use super::launcher::LauncherError;
use crate::daemon::agentfs;

mod bring_back;
mod follow;
mod git;
mod make;
mod read;

pub use bring_back::{BroughtBack, bring_back};
pub use follow::follow;
// Only the test over agent-writable readers (`services::agent_writable_reads`) names it here.
#[cfg(test)]
pub(crate) use follow::follow_facts;
pub use git::{At, git};
pub use make::{make_copy, make_git_dir};
pub use read::{copy_folder, gather, gather_enclosing, seen_dir};

use read::GitDir;

/// The file in a session's folder the bring-back's lines are appended to.
pub const LOG: &str = "git-guard.log";
/// The runtime verb's exit codes (`runtime::sandbox::git_bundle`).
const NOTHING_NEW: i32 = 3;
const NO_GIT: i32 = 4;

/// A helper container's failure as the guard's: exit [`NO_GIT`] says `image` has no git for
/// the git directory `git_dir`.
fn helper_error(
    e: crate::daemon::launch::launcher::LauncherError,
    image: &str,
    git_dir: &std::path::Path,
) -> GitGuardError {
    match e {
        crate::daemon::launch::launcher::LauncherError::Verb {
            code: Some(NO_GIT), ..
        } => GitGuardError::NoGit {
            image: image.to_string(),
            git_dir: git_dir.display().to_string(),
        },
        e => e.into(),
    }
}

/// Why the guard could not do its part.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitGuardError {
    /// A refusal before start (409 / 64), or a bundle or name the guard refuses.
    #[error(transparent)]
    Refused(#[from] GuardError),
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A git command on the host failed.
    #[error("git {args} failed ({status}): {stderr}")]
    Git {
        /// Its arguments after the safety options.
        args: String,
        /// How it ended.
        status: String,
        /// Its stderr, bounded.
        stderr: String,
    },
    /// The image has no git: nothing committed in the sandbox can come back.
    #[error(
        "the image {image} has no git, so nothing committed in the sandbox can come back; its git directory stays at {git_dir}"
    )]
    NoGit {
        /// The image.
        image: String,
        /// The session's git directory, kept.
        git_dir: String,
    },
    /// The helper container failed.
    #[error("the bring-back's helper container failed: {0}")]
    Helper(#[from] LauncherError),
    /// `sessionTree = "copy"` refused (409 at start): no repository, no commit, a guard refusal.
    #[error(transparent)]
    Copy(#[from] copytree::CopyError),
    /// An agent-writable file refused (a link, a FIFO, too large: security F4).
    #[error(transparent)]
    AgentFs(#[from] agentfs::AgentFsError),
    /// The guard's work did not finish in time (a blocked read, a stuck helper).
    #[error("{what} did not finish within {secs} s")]
    TimedOut {
        /// What was being done.
        what: String,
        /// The bound.
        secs: u64,
    },
}

impl GitGuardError {
    /// A refusal before start (a 409): the guard's or `sessionTree`'s.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Refused(_) | Self::Copy(_))
    }
}

type Result<T> = std::result::Result<T, GitGuardError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GitGuardError + '_ {
    move |source| GitGuardError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A guarded repository: its facts and the session's folder for the guard (`git/`, `gitfile`,
/// `seeded`), which the sandbox never sees except `git/`.
#[derive(Debug, Clone)]
pub struct Guarded {
    /// What was read of the host repository at start.
    pub facts: RepoFacts,
    /// The session's (or connection's) folder for the guard.
    pub dir: PathBuf,
    /// Under `sessionTree = "copy"` (decision 0103): the checkout, its `.git` inside.
    pub copy: Option<PathBuf>,
}

impl Guarded {
    /// The session's own git directory (under copy, the checkout's `.git`).
    pub fn git_dir(&self) -> PathBuf {
        match &self.copy {
            Some(tree) => tree.join(".git"),
            None => self.dir.join("git"),
        }
    }

    /// The session's own git directory as the sandbox left it, below the session's folder.
    fn own_git_dir(&self) -> GitDir {
        GitDir {
            base: self.dir.clone(),
            rel: match &self.copy {
                Some(_) => PathBuf::from("tree/.git"),
                None => PathBuf::from("git"),
            },
        }
    }

    /// Security F8: under copy the checkout's `.git` is in the agent's tree; before a helper
    /// container binds it, it must still be a folder (no link the agent swapped in).
    /// It also holds no FIFO, device or socket, which git in the helper would block on
    /// (security F4; one made after this look only costs the helper's deadline).
    pub(crate) fn check_own_git_dir(&self) -> Result<()> {
        let own = self.own_git_dir();
        let shown = self.git_dir();
        let Some(dir) = agentfs::open_dir_in(&own.base, &own.rel)? else {
            return Err(GitGuardError::Io {
                path: shown.display().to_string(),
                source: std::io::Error::other("the session's git directory is gone"),
            });
        };
        match agentfs::find_special(&dir, &shown, 2_000_000)? {
            None => Ok(()),
            Some(p) => Err(agentfs::AgentFsError::NotRegular {
                path: p.display().to_string(),
            }
            .into()),
        }
    }
}

/// The file in a copy's guard folder naming the scope's path below the checkout's root (empty
/// at the root), for the Files pane ([`copy_folder`]).
const TREE_SCOPE: &str = "tree.scope";

/// How long the guard's host side (reads, host git) may take on a blocking thread before the
/// caller gives up on it: beyond a few git runs' worth, it is stuck.
const GUARD_TIME: Duration = Duration::from_secs(300);

/// `f` on a blocking thread, off the caller's task, given up after [`GUARD_TIME`] (`what`
/// names it then, or if the thread is lost).
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::time::timeout(GUARD_TIME, tokio::task::spawn_blocking(f)).await {
        Ok(joined) => joined.map_err(|e| GitGuardError::Io {
            path: what.to_string(),
            source: std::io::Error::other(e.to_string()),
        })?,
        Err(_) => Err(GitGuardError::TimedOut {
            what: what.to_string(),
            secs: GUARD_TIME.as_secs(),
        }),
    }
}

/// A session's (or connection's) guard while its sandbox lives: what to bring back from, with
/// which image, one bring-back at a time; each one's lines appended to `log`.
#[derive(Debug)]
pub struct GuardSession {
    /// The guarded repository and the session's folder for it.
    pub guarded: Guarded,
    /// The sandbox's image (the helper container's).
    pub image: String,
    /// The session (or connection) id: the hidden refs' folder.
    pub session: String,
    /// Where the bring-back's lines are appended.
    pub log: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

impl GuardSession {
    /// A guard for `session`'s sandbox of `image`, logging to `log`.
    pub fn new(guarded: Guarded, image: String, session: String, log: PathBuf) -> Self {
        Self {
            guarded,
            image,
            session,
            log,
            lock: tokio::sync::Mutex::new(()),
        }
    }
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}
