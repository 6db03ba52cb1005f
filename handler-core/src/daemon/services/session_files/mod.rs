//! A session's files (F.8): the baseline recorded at its first start, the changes since, All
//! files, a file with its earlier version, and reveal. Every path is opened one name at a time
//! from the folder with `O_NOFOLLOW` (`open`), a walk never opens what is not a folder (`walk`),
//! and git is read only by the `handler-git-read` child (`git`). The rules are
//! `handler_contracts::files`'; these functions take the folder (the session's, or a browsable
//! mount's) and the session's own folder (where `baseline.json` is), so the sessions service
//! calls them with what it knows.

mod git;
pub(crate) mod open;
mod reveal;
mod walk;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use handler_contracts::files::{
    BASELINE_FILE, Baseline, ChangeKind, Changes, EntryKind, FileContent, FileView, FolderListing,
    MAX_READ_BYTES, PathRefusal, RelPath, Reveal, file_uri,
};
use rustix::fs::FileType;

use crate::daemon::fsutil;
use crate::daemon::problem::ApiError;

pub use git::{
    GIT_READ_BIN, GIT_READ_ENV, GIT_READ_MEMORY, GIT_READ_TIMEOUT, GitReadError, GitReader,
    MEMORY_ENV,
};
pub use walk::{MAX_DEPTH, walk};

/// What the files endpoints answer when they cannot (each maps to the spec's status).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// 400 path not shown: absolute, `.`/`..`, `.git`, a link, not a regular file.
    #[error(transparent)]
    Path(#[from] PathRefusal),
    /// 404: it does not exist (nor was deleted during the session).
    #[error("{0:?} does not exist (nor was deleted during the session)")]
    NotFound(String),
    /// 409: the session never started (no baseline).
    #[error("no baseline: the session has not started yet")]
    NoBaseline,
    /// 409 cannot show it: no desktop's file manager answered.
    #[error("cannot show it: {0}")]
    NoDesktop(String),
    /// 500: reading the folder failed.
    #[error("reading {path:?}: {error}")]
    Io {
        /// The path (relative to the folder) being read.
        path: String,
        /// Why (shown in the message, not a `source`: decision 0053).
        error: std::io::Error,
    },
    /// 500: `baseline.json` is not one.
    #[error("{path}: not a baseline: {reason}")]
    BadBaseline {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

impl FilesError {
    pub(crate) fn io(path: String, error: std::io::Error) -> Self {
        FilesError::Io { path, error }
    }
    /// The HTTP status it answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            FilesError::Path(_) => StatusCode::BAD_REQUEST,
            FilesError::NotFound(_) => StatusCode::NOT_FOUND,
            FilesError::NoBaseline | FilesError::NoDesktop(_) => StatusCode::CONFLICT,
            FilesError::Io { .. } | FilesError::BadBaseline { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        match &e {
            FilesError::Path(_) => ApiError::bad_request("path not shown", e.to_string()),
            FilesError::NotFound(_) => ApiError::not_found(e.to_string()),
            FilesError::NoBaseline => ApiError::conflict("not started", e.to_string()),
            FilesError::NoDesktop(_) => ApiError::conflict("cannot show it", e.to_string()),
            FilesError::Io { .. } | FilesError::BadBaseline { .. } => ApiError::internal(e),
        }
    }
}

/// Runs blocking folder work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FilesError> + Send + 'static,
) -> Result<T, FilesError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FilesError::io(String::new(), std::io::Error::other(e.to_string())))?
}

/// Whether `.git` is a folder in `folder` (a link or a gitfile is not a repository here).
fn is_repository(folder: &Path) -> bool {
    open::open_root(folder)
        .ok()
        .and_then(|fd| open::stat_at(&fd, ".git").ok().flatten())
        .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
}

/// The session's baseline, if it started (`session_dir/baseline.json`).
pub fn load_baseline(session_dir: &Path) -> Result<Option<Baseline>, FilesError> {
    let path = session_dir.join(BASELINE_FILE);
    let shown = || path.display().to_string();
    let Some(text) = fsutil::read_optional(&path).map_err(|e| FilesError::io(shown(), e))? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| FilesError::BadBaseline {
            path: shown(),
            reason: e.to_string(),
        })
}

/// Records `folder` in `session_dir/baseline.json` (F.8), before the session's first sandbox:
/// files and links with size and time, not `.git`, not what git ignores; with git, the commit
/// HEAD is at and `.git/info/exclude`'s patterns (from the reader). Beyond `limit` files only
/// that (`notFollowed`; the spec's is `MAX_BASELINE_FILES`). An existing baseline is kept and
/// returned: restarts keep it.
pub async fn record_baseline(
    folder: &Path,
    session_dir: &Path,
    git: &GitReader,
    now: String,
    limit: usize,
) -> Result<Baseline, FilesError> {
    record_baseline_in(folder, folder, session_dir, git, now, limit).await
}

/// [`record_baseline`] of `folder` with its git part (HEAD, `info/exclude`) read from the
/// repository at `git_folder` instead: under `sessionTree = "copy"` the folder is the session's
/// checkout, written by the agent, and the reader is given the host's repository, never the
/// checkout's `.git` (decision 0121).
pub async fn record_baseline_in(
    folder: &Path,
    git_folder: &Path,
    session_dir: &Path,
    git: &GitReader,
    now: String,
    limit: usize,
) -> Result<Baseline, FilesError> {
    if let Some(b) = load_baseline(session_dir)? {
        return Ok(b);
    }
    let (head, exclude) = if is_repository(git_folder) {
        let dir = git::git_dir(git_folder);
        let (head, exclude) = tokio::join!(git.head(&dir), git.exclude(&dir));
        (logged(head, "HEAD"), logged(exclude, "info/exclude"))
    } else {
        (None, None)
    };
    let root = folder.to_path_buf();
    let ex = exclude.clone();
    let (listing, _) = blocking(move || walk(&root, ex.as_deref(), limit)).await?;
    let exclude = exclude.map(|b| String::from_utf8_lossy(&b).into_owned());
    let baseline = Baseline::new(&listing, now, head, exclude);
    let path = session_dir.join(BASELINE_FILE);
    let json = serde_json::to_vec_pretty(&baseline).map_err(|e| FilesError::BadBaseline {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    fsutil::write_atomic(&path, &json, 0o600)
        .map_err(|e| FilesError::io(path.display().to_string(), e))?;
    Ok(baseline)
}

/// A reader's answer, or `None` with the reason logged (the answer then has no git part).
fn logged<T>(r: Result<Option<T>, GitReadError>, what: &str) -> Option<T> {
    r.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "git reader: {what}");
        None
    })
}

/// The changes in `folder` since its baseline (GET …/changes), through the same rules.
pub async fn changes(
    folder: &Path,
    session_dir: &Path,
    limit: usize,
) -> Result<Changes, FilesError> {
    let baseline = load_baseline(session_dir)?.ok_or(FilesError::NoBaseline)?;
    let root = folder.to_path_buf();
    let exclude = baseline.git_exclude.clone();
    let (now, rules) =
        blocking(move || walk(&root, exclude.as_deref().map(str::as_bytes), limit)).await?;
    Ok(handler_contracts::files::changes(&baseline, &now, &rules))
}

/// All files of `folder` (the session's, with its baseline's exclude patterns, or a mount's).
pub async fn list_all(
    folder: &Path,
    session_dir: Option<&Path>,
    limit: usize,
) -> Result<FolderListing, FilesError> {
    let exclude = match session_dir {
        Some(dir) => load_baseline(dir)?.and_then(|b| b.git_exclude),
        None => None,
    };
    let root = folder.to_path_buf();
    let (listing, _) =
        blocking(move || walk(&root, exclude.as_deref().map(str::as_bytes), limit)).await?;
    Ok(listing.into())
}

/// A file of `folder` now and, for a session's folder (`session`: its own folder and the git
/// reader), how it changed and its version in the commit HEAD was at when the session started.
pub async fn read_file(
    folder: &Path,
    path: &str,
    session: Option<(&Path, &GitReader)>,
) -> Result<FileView, FilesError> {
    read_file_in(folder, folder, path, session).await
}

/// [`read_file`] of `folder` with its earlier version read from the repository at
/// `git_folder` (under copy the host's, never the agent's checkout's `.git`).
pub async fn read_file_in(
    folder: &Path,
    git_folder: &Path,
    path: &str,
    session: Option<(&Path, &GitReader)>,
) -> Result<FileView, FilesError> {
    let rel = RelPath::parse(path)?;
    let (root, r) = (folder.to_path_buf(), rel.clone());
    let now = blocking(move || read_now(&root, &r)).await?;
    let mut view = FileView {
        path: rel.as_str().to_string(),
        change: None,
        content: now
            .as_ref()
            .map(|(bytes, size, _)| FileContent::new(bytes, *size)),
        earlier: None,
    };
    let baseline = match session {
        Some((dir, _)) => load_baseline(dir)?,
        None => None,
    };
    let was = baseline.as_ref().and_then(|b| b.files.get(rel.as_str()));
    if baseline.as_ref().is_some_and(|b| !b.not_followed) {
        view.change = match (was, &now) {
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Deleted),
            (Some(w), Some((_, _, is))) if w != is => Some(ChangeKind::Modified),
            _ => None,
        };
    }
    if let (Some((_, git)), Some(head)) = (
        session,
        baseline.as_ref().and_then(|b| b.git_head.as_deref()),
    ) {
        let earlier = logged(
            git.show(&git::git_dir(git_folder), head, rel.as_str())
                .await,
            "show",
        );
        view.earlier = earlier.map(|(bytes, size)| FileContent::new(&bytes, size));
    }
    if view.content.is_none() && view.earlier.is_none() && was.is_none() {
        return Err(FilesError::NotFound(rel.as_str().to_string()));
    }
    Ok(view)
}

/// The file at `rel` now: its first bytes, size and stamp (`None`: it does not exist).
fn read_now(
    root: &Path,
    rel: &RelPath,
) -> Result<Option<(Vec<u8>, u64, handler_contracts::files::FileStamp)>, FilesError> {
    let Some(at) = open::locate(root, rel)? else {
        return Ok(None);
    };
    if at.name.is_empty() {
        return Err(PathRefusal::NotRegular(String::new()).into());
    }
    let io = |e: rustix::io::Errno| FilesError::io(rel.as_str().to_string(), e.into());
    let stamp = open::stat_at(&at.dir, &at.name)
        .map_err(io)?
        .and_then(|st| open::stamp(&st));
    let read = open::read_regular_at(&at.dir, &at.name, rel.as_str(), MAX_READ_BYTES)?;
    Ok(match (read, stamp) {
        (Some((bytes, size)), Some(stamp)) => Some((bytes, size, stamp)),
        _ => None,
    })
}

/// Shows `path` of `folder` in the desktop's file manager (POST …/reveal): a file or link
/// selected in its folder, a folder opened; checked like a read (no link on the way; the link
/// itself may be shown). 409 when nothing answered.
pub async fn reveal(folder: &Path, path: &str) -> Result<(), FilesError> {
    let rel = RelPath::parse(path)?;
    let (root, r) = (folder.to_path_buf(), rel.clone());
    // Security F11: what is shown is the folder actually opened (its real path read from the
    // open descriptor, still inside the session's folder), never the path's text again: a
    // folder the agent swaps for a link after the check shows nothing of the host.
    let (is_dir, real) = blocking(move || {
        let at = open::locate(&root, &r)?.ok_or_else(|| FilesError::NotFound(r.as_str().into()))?;
        let io = |e: rustix::io::Errno| FilesError::io(r.as_str().to_string(), e.into());
        let (is_dir, dir) = if at.name.is_empty() {
            (true, at.dir)
        } else {
            let st = open::stat_at(&at.dir, &at.name)
                .map_err(io)?
                .ok_or_else(|| FilesError::NotFound(r.as_str().into()))?;
            if open::stamp(&st).is_some_and(|s| s.kind == EntryKind::Dir) {
                let d = open::open_dir_at(&at.dir, &at.name)
                    .map_err(io)?
                    .ok_or_else(|| FilesError::NotFound(r.as_str().into()))?;
                (true, d)
            } else {
                (false, at.dir)
            }
        };
        let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|e| FilesError::io(r.as_str().to_string(), e))?;
        let inside = std::fs::canonicalize(&root).is_ok_and(|c| real.starts_with(&c));
        if !inside {
            return Err(PathRefusal::LinkOnTheWay(r.as_str().into()).into());
        }
        let name = if is_dir { String::new() } else { at.name };
        Ok((is_dir, (real, name)))
    })
    .await?;
    let (dir, name) = real;
    let target: PathBuf = if name.is_empty() {
        dir.clone()
    } else {
        dir.join(&name)
    };
    let uri = file_uri(target.as_os_str().as_encoded_bytes());
    // A trailing `/`: `xdg-open` is only ever handed a folder (a file there would be run).
    let open_folder = PathBuf::from(format!("{}/", dir.display()));
    let what = if is_dir {
        Reveal::Folders(uri)
    } else {
        Reveal::Items(uri)
    };
    reveal::show(&what, &open_folder).await
}
