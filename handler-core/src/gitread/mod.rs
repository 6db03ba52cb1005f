//! The git reader child, `handler-git-read` (F.8): what handlerd asks of a session's repository
//! without running git and without reading `.git` itself. `head <git-dir>` prints the commit
//! HEAD is at; `show <git-dir> <commit> <path>` prints the blob's size, a newline and its first
//! bytes; `exclude <git-dir>` prints `info/exclude`. Exit 0: answered, 1: nothing there (unborn
//! HEAD, no such path), 2: failed (a malformed repository). It limits its own address space to
//! 1 GiB first thing (handlerd limits it too and kills it after 10 s).
//!
//! Nothing from the repository runs (decision 0067): gix is built without its status,
//! attributes, filter, diff, network and command features, and the repository is opened
//! `isolated` (no system, global or user configuration, no `include.path`, no environment, no
//! git binary looked up); reading a commit's tree and a blob consults no hook, fsmonitor,
//! filter or diff driver.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rustix::fs::{FileType, Mode, OFlags};

/// The reader's default address-space limit (F.8: 1 GB).
pub const DEFAULT_MEMORY: u64 = 1 << 30;
/// The variable handlerd sets to the limit it wants.
pub const MEMORY_ENV: &str = "HANDLER_GIT_READ_MEMORY";
/// `show` prints at most this many bytes of a blob (handlerd answers no more).
pub const MAX_SHOW_BYTES: usize = handler_contracts::files::MAX_READ_BYTES;

/// Why the reader could not answer (exit 2, said on stderr).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The arguments are not one of the verbs.
    #[error(
        "usage: handler-git-read head <git-dir> | exclude <git-dir> | show <git-dir> <commit> <path>"
    )]
    Usage,
    /// The git folder is not a folder (a link, a file).
    #[error("{0}: not a git folder")]
    NotAGitDir(PathBuf),
    /// The commit is not a full hexadecimal object id.
    #[error("{0:?} is not a commit id")]
    BadCommit(String),
    /// gix could not read the repository.
    #[error("the repository: {0}")]
    Repository(String),
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The commit HEAD is at.
    Head(PathBuf),
    /// `info/exclude`'s patterns.
    Exclude(PathBuf),
    /// A blob at a commit.
    Show {
        /// The `.git` folder.
        git_dir: PathBuf,
        /// The commit (full hex id).
        commit: String,
        /// The path in its tree.
        path: String,
    },
}

impl Request {
    /// Reads the arguments (without the program's name).
    pub fn parse(args: &[OsString]) -> Result<Request, ReadError> {
        let s = |a: &OsString| a.to_str().map(str::to_string).ok_or(ReadError::Usage);
        match args {
            [verb, dir] if verb == "head" => Ok(Request::Head(dir.into())),
            [verb, dir] if verb == "exclude" => Ok(Request::Exclude(dir.into())),
            [verb, dir, commit, path] if verb == "show" => Ok(Request::Show {
                git_dir: dir.into(),
                commit: s(commit)?,
                path: s(path)?,
            }),
            _ => Err(ReadError::Usage),
        }
    }
}

/// The whole child: limit itself, answer, print. Returns the exit code.
pub fn run(args: &[OsString]) -> ExitCode {
    limit_memory();
    let answer = Request::parse(args).and_then(|r| answer(&r));
    match answer {
        Ok(Some(bytes)) => match std::io::stdout().lock().write_all(&bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(2),
        },
        Ok(None) => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "handler-git-read: {e}");
            ExitCode::from(2)
        }
    }
}

/// Sets RLIMIT_AS to `$HANDLER_GIT_READ_MEMORY` (default 1 GiB) before anything else.
fn limit_memory() {
    let bytes = std::env::var(MEMORY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_MEMORY);
    let limit = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    let _ = rustix::process::setrlimit(rustix::process::Resource::As, limit);
}

/// What to print for `req` (`None`: nothing there).
pub fn answer(req: &Request) -> Result<Option<Vec<u8>>, ReadError> {
    match req {
        Request::Head(dir) => head(&open(dir)?),
        Request::Exclude(dir) => exclude(dir),
        Request::Show {
            git_dir,
            commit,
            path,
        } => show(&open(git_dir)?, commit, path),
    }
}

/// Opens the repository at `git_dir` (a real folder, not a link) with nothing from outside it.
fn open(git_dir: &Path) -> Result<gix::Repository, ReadError> {
    let meta = std::fs::symlink_metadata(git_dir)?;
    if !meta.is_dir() {
        return Err(ReadError::NotAGitDir(git_dir.to_path_buf()));
    }
    let opts = gix::open::Options::isolated()
        .open_path_as_is(true)
        .strict_config(false);
    gix::open_opts(git_dir, opts).map_err(|e| ReadError::Repository(e.to_string()))
}

fn head(repo: &gix::Repository) -> Result<Option<Vec<u8>>, ReadError> {
    let mut head = repo
        .head()
        .map_err(|e| ReadError::Repository(e.to_string()))?;
    let id = head
        .try_peel_to_id()
        .map_err(|e| ReadError::Repository(e.to_string()))?;
    Ok(id.map(|id| format!("{}\n", id.detach()).into_bytes()))
}

fn show(repo: &gix::Repository, commit: &str, path: &str) -> Result<Option<Vec<u8>>, ReadError> {
    let id = gix::ObjectId::from_hex(commit.as_bytes())
        .map_err(|_| ReadError::BadCommit(commit.to_string()))?;
    let repo_err = |e: &dyn std::fmt::Display| ReadError::Repository(e.to_string());
    let commit = repo.find_commit(id).map_err(|e| repo_err(&e))?;
    let tree = commit.tree().map_err(|e| repo_err(&e))?;
    let Some(entry) = tree.lookup_entry_by_path(path).map_err(|e| repo_err(&e))? else {
        return Ok(None);
    };
    if !entry.mode().is_blob_or_symlink() {
        return Ok(None); // a folder or a submodule: no file there
    }
    let blob = entry.object().map_err(|e| repo_err(&e))?;
    let data = &blob.data;
    let mut out = format!("{}\n", data.len()).into_bytes();
    out.extend_from_slice(&data[..data.len().min(MAX_SHOW_BYTES)]);
    Ok(Some(out))
}

/// `info/exclude`, opened one name at a time with `O_NOFOLLOW`, read only if regular (a FIFO
/// does not block), up to 1 MB.
fn exclude(git_dir: &Path) -> Result<Option<Vec<u8>>, ReadError> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let not_there = |e: rustix::io::Errno| -> Result<Option<OwnedFd>, ReadError> {
        match e {
            rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                Ok(None)
            }
            e => Err(ReadError::Io(e.into())),
        }
    };
    let git = rustix::fs::open(git_dir, dir_flags, Mode::empty()).map_err(std::io::Error::from)?;
    let Some(info) = rustix::fs::openat(&git, "info", dir_flags, Mode::empty())
        .map(Some)
        .or_else(not_there)?
    else {
        return Ok(None);
    };
    let file_flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Some(fd) = rustix::fs::openat(&info, "exclude", file_flags, Mode::empty())
        .map(Some)
        .or_else(not_there)?
    else {
        return Ok(None);
    };
    let st = rustix::fs::fstat(&fd).map_err(std::io::Error::from)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(handler_contracts::files::MAX_IGNORE_FILE_BYTES as u64)
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}
