//! Agent-writable data read as hostile (security review 2, "the rule behind most of these"):
//! every read of a path an agent can write — its scope, its session folder, its git directory,
//! `work/`, a skill, addon or app it authored — goes through here. A path is walked one name at a
//! time from a folder descriptor Handler opened itself (`base`, Handler's own path), each name
//! with `O_NOFOLLOW`; a file is opened `O_NONBLOCK` (a FIFO never blocks), judged on the open
//! descriptor (regular files only: no device, no `/dev/zero`) and read up to a bound — a larger
//! one is refused, never cut short silently.
//!
//! [`ALL_READERS`] names every caller, so the test over them (`agent_writable_reads`) is
//! generated from one list.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// A folder's flags: never a link, never inherited by a child.
pub(crate) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
/// A file's flags: never a link, never waiting (a FIFO), never a controlling terminal.
pub(crate) const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// The bound of a small control file (HEAD, a ref, a gitfile, `commondir`).
pub const SMALL: u64 = 64 << 10;

/// Every place in handlerd that reads an agent-writable path, each through this module — the
/// list the test over links, FIFOs and oversize files is generated from.
pub const ALL_READERS: &[&str] = &[
    // <scope>/.git, its gitfile, commondir, HEAD, refs, packed-refs.
    "gitguard::gather",
    // The session's own git directory: HEAD, refs, packed-refs.
    "gitguard::follow_facts",
    // The session's own git directory (or the copy's checkout `.git`) before a helper binds it.
    "gitguard::check_own_git_dir",
    // A session's `work/` brought into the skills library (import-session).
    "skills::import",
    // The Files pane: its own walk under the same rules (session_files/open.rs).
    "session_files",
    // A file state slot's own content, which a seed is merged over (launch/seed.rs).
    "seed::file_slot",
    // A mini app's folder: its app.toml at register, what a deploy copies (decision 0157).
    "apps::folder",
    // A dev container's folder: its devcontainer.json and what `.devcontainer` holds, staged
    // for the Dev Container CLI (decision 0161).
    "machines::devcontainer",
];

/// Why an agent-writable path was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentFsError {
    /// A link on the way or at the end: never followed.
    #[error("{path}: a symbolic link, which Handler never follows in a folder an agent can write")]
    Link {
        /// The path.
        path: String,
    },
    /// Not a regular file (a FIFO, a device, a socket), or not a folder on the way.
    #[error("{path}: not a regular file (a FIFO, device or socket is never read)")]
    NotRegular {
        /// The path.
        path: String,
    },
    /// Larger than the reader's bound.
    #[error("{path}: larger than {limit} bytes, refused")]
    TooLarge {
        /// The path.
        path: String,
        /// The bound.
        limit: u64,
    },
    /// A name that is not one plain name (`..`, an absolute path).
    #[error("{path}: not a path below its folder")]
    OutOfFolder {
        /// The path.
        path: String,
    },
    /// The system said no.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl AgentFsError {
    fn io(path: &Path, e: Errno) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source: e.into(),
        }
    }
}

type Result<T> = std::result::Result<T, AgentFsError>;

/// Opens Handler's own folder `base` (a session folder, a data folder: not the agent's to swap).
pub fn open_base(base: &Path) -> Result<OwnedFd> {
    rustix::fs::open(base, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
        .map_err(|e| AgentFsError::io(base, e))
}

/// The plain names of `rel` (refused: `..`, an absolute path).
fn names(rel: &Path, shown: &Path) -> Result<Vec<String>> {
    rel.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(n) => Ok(n.to_string_lossy().into_owned()),
            _ => Err(AgentFsError::OutOfFolder {
                path: shown.display().to_string(),
            }),
        })
        .collect()
}

/// Opens the folder `name` in `dir`: `Ok(None)` when missing; a link or a non-folder refused.
pub fn open_dir_at(dir: impl AsFd, name: &str, shown: &Path) -> Result<Option<OwnedFd>> {
    let dir = dir.as_fd();
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => Err(refusal(dir, name, shown)),
        Err(e) => Err(AgentFsError::io(shown, e)),
    }
}

/// What `name` in `dir` is, for a refusal: a link, else not what was wanted.
fn refusal(dir: impl AsFd, name: &str, shown: &Path) -> AgentFsError {
    let path = shown.display().to_string();
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            AgentFsError::Link { path }
        }
        _ => AgentFsError::NotRegular { path },
    }
}

/// Opens the folder `rel` below Handler's folder `base`, one name at a time (`Ok(None)`: a
/// folder on the way is missing).
pub fn open_dir_in(base: &Path, rel: &Path) -> Result<Option<OwnedFd>> {
    let shown = base.join(rel);
    let mut dir = open_base(base)?;
    let mut walked = base.to_path_buf();
    for n in names(rel, &shown)? {
        walked.push(&n);
        match open_dir_at(&dir, &n, &walked)? {
            Some(next) => dir = next,
            None => return Ok(None),
        }
    }
    Ok(Some(dir))
}

/// Reads the regular file `name` in `dir` (at most `limit` bytes; larger refused). `Ok(None)`
/// when it does not exist; a link, FIFO or device refused without blocking.
pub fn read_at(dir: impl AsFd, name: &str, shown: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let dir = dir.as_fd();
    let fd = match rustix::fs::openat(dir, name, FILE_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(AgentFsError::Link {
                path: shown.display().to_string(),
            });
        }
        Err(Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(AgentFsError::io(shown, e)),
    };
    // Judged on what is open: whatever the name was swapped for before the open.
    let st = rustix::fs::fstat(&fd).map_err(|e| AgentFsError::io(shown, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(AgentFsError::NotRegular {
            path: shown.display().to_string(),
        });
    }
    let too_large = || AgentFsError::TooLarge {
        path: shown.display().to_string(),
        limit,
    };
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AgentFsError::Io {
            path: shown.display().to_string(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(Some(bytes))
}

/// Reads the regular file `rel` below Handler's folder `base` ([`open_dir_in`], [`read_at`]).
pub fn read_in(base: &Path, rel: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let shown = base.join(rel);
    let (parent, name) = split(rel, &shown)?;
    let Some(dir) = open_dir_in(base, &parent)? else {
        return Ok(None);
    };
    read_at(&dir, &name, &shown, limit)
}

/// [`read_in`] as text (invalid UTF-8 refused as not a regular file of text).
pub fn read_text_in(base: &Path, rel: &Path, limit: u64) -> Result<Option<String>> {
    read_in(base, rel, limit)?
        .map(|b| {
            String::from_utf8(b).map_err(|_| AgentFsError::NotRegular {
                path: base.join(rel).display().to_string(),
            })
        })
        .transpose()
}

/// A path's folder part and last name (refused: no last name).
fn split(rel: &Path, shown: &Path) -> Result<(PathBuf, String)> {
    let mut n = names(rel, shown)?;
    let last = n.pop().ok_or_else(|| AgentFsError::OutOfFolder {
        path: shown.display().to_string(),
    })?;
    Ok((n.iter().collect(), last))
}

/// What `name` in `dir` is, not followed (`None`: missing).
pub fn lstat_at(dir: impl AsFd, name: &str, shown: &Path) -> Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(AgentFsError::io(shown, e)),
    }
}

/// The entries of the folder `dir` (names and kinds, `.`/`..` left out), links not followed.
pub fn list(dir: impl AsFd, shown: &Path) -> Result<Vec<(String, FileType)>> {
    let fd = rustix::fs::openat(dir, ".", DIR_FLAGS, Mode::empty())
        .map_err(|e| AgentFsError::io(shown, e))?;
    let d = rustix::fs::Dir::read_from(&fd).map_err(|e| AgentFsError::io(shown, e))?;
    let mut out = Vec::new();
    for e in d {
        let e = e.map_err(|e| AgentFsError::io(shown, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let kind = match e.file_type() {
            FileType::Unknown => lstat_at(&fd, &name, shown)?
                .map(|st| FileType::from_raw_mode(st.st_mode))
                .unwrap_or(FileType::Unknown),
            k => k,
        };
        out.push((name, kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The first FIFO, device or socket anywhere below the folder `dir` (links not followed, at
/// most `max` entries looked at: more is refused as too large): what a program that opens
/// files without `O_NONBLOCK` (git, in a helper container) would block on.
pub fn find_special(dir: impl AsFd, shown: &Path, max: usize) -> Result<Option<PathBuf>> {
    let mut seen = 0usize;
    let first = rustix::fs::openat(dir, ".", DIR_FLAGS, Mode::empty())
        .map_err(|e| AgentFsError::io(shown, e))?;
    let mut todo = vec![(first, shown.to_path_buf())];
    while let Some((d, at)) = todo.pop() {
        for (name, kind) in list(&d, &at)? {
            seen += 1;
            if seen > max {
                return Err(AgentFsError::TooLarge {
                    path: shown.display().to_string(),
                    limit: max as u64,
                });
            }
            let p = at.join(&name);
            match kind {
                FileType::Directory => {
                    if let Some(sub) = open_dir_at(&d, &name, &p)? {
                        todo.push((sub, p));
                    }
                }
                FileType::RegularFile | FileType::Symlink => {}
                _ => return Ok(Some(p)),
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_regular_file_is_read_and_a_link_on_the_way_or_at_the_end_is_refused() {
        let t = tmp();
        let base = t.path();
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::write(base.join("a/b/f"), "hi").unwrap();
        std::fs::write(base.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(base.join("a"), base.join("l")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("a/b/g")).unwrap();
        assert_eq!(
            read_in(base, Path::new("a/b/f"), 10).unwrap().unwrap(),
            b"hi"
        );
        assert!(read_in(base, Path::new("a/b/none"), 10).unwrap().is_none());
        assert!(read_in(base, Path::new("none/f"), 10).unwrap().is_none());
        assert!(matches!(
            read_in(base, Path::new("l/b/f"), 10),
            Err(AgentFsError::Link { .. })
        ));
        assert!(matches!(
            read_in(base, Path::new("a/b/g"), 10),
            Err(AgentFsError::Link { .. })
        ));
        assert!(matches!(
            read_in(base, Path::new("../x"), 10),
            Err(AgentFsError::OutOfFolder { .. })
        ));
    }

    #[test]
    fn a_fifo_a_device_and_an_oversize_file_are_refused_without_blocking() {
        let t = tmp();
        let base = t.path();
        nix::unistd::mkfifo(&base.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::write(base.join("big"), vec![b'x'; 11]).unwrap();
        assert!(matches!(
            read_in(base, Path::new("fifo"), 10),
            Err(AgentFsError::NotRegular { .. })
        ));
        assert!(matches!(
            read_in(base, Path::new("big"), 10),
            Err(AgentFsError::TooLarge { limit: 10, .. })
        ));
        let found = find_special(open_base(base).unwrap(), base, 100).unwrap();
        assert_eq!(found, Some(base.join("fifo")));
        std::fs::remove_file(base.join("fifo")).unwrap();
        assert_eq!(
            find_special(open_base(base).unwrap(), base, 100).unwrap(),
            None
        );
        let dev = open_base(Path::new("/dev")).unwrap();
        assert!(matches!(
            read_at(&dev, "zero", Path::new("/dev/zero"), 10),
            Err(AgentFsError::NotRegular { .. })
        ));
    }
}
