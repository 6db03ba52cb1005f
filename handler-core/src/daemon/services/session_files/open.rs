//! Opening what is in a session's folder one name at a time from the folder with `O_NOFOLLOW`
//! (F.8): no link leads out of it, and a file is opened `O_NONBLOCK` and read only if it is
//! regular, so a FIFO never blocks handlerd.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use handler_contracts::files::{EntryKind, FileStamp, PathRefusal, RelPath, join};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::FilesError;

use crate::daemon::agentfs::{DIR_FLAGS, FILE_FLAGS};

/// Opens the session's folder (or a browsable mount) itself: the daemon's own path.
pub(crate) fn open_root(root: &Path) -> Result<OwnedFd, FilesError> {
    rustix::fs::open(root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
        .map_err(|e| FilesError::io(root.display().to_string(), e.into()))
}

/// Opens the folder `name` inside `dir` (`Ok(None)`: it is a link, not a folder, or gone).
pub(crate) fn open_dir_at(dir: impl AsFd, name: &str) -> Result<Option<OwnedFd>, Errno> {
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `lstat` of `name` in `dir` (`None`: gone).
pub(crate) fn stat_at(dir: impl AsFd, name: &str) -> Result<Option<Stat>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What an `lstat` says: a file, a link or a folder (`None`: a FIFO, socket or device).
pub(crate) fn stamp(st: &Stat) -> Option<FileStamp> {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Symlink => EntryKind::Link,
        FileType::Directory => EntryKind::Dir,
        _ => return None,
    };
    #[allow(
        clippy::useless_conversion,
        reason = "the stat fields' types differ between targets"
    )]
    let secs = i64::try_from(st.st_mtime).unwrap_or(i64::MAX / 1_000_000_000);
    #[allow(
        clippy::useless_conversion,
        reason = "the stat fields' types differ between targets"
    )]
    let nsec = i64::try_from(st.st_mtime_nsec).unwrap_or(0);
    Some(FileStamp {
        kind,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_ns: secs.saturating_mul(1_000_000_000).saturating_add(nsec),
    })
}

/// Reads `name` in `dir` when it is a regular file: at most `limit` bytes, and its size. A link,
/// a FIFO or anything else is refused without blocking; `Ok(None)` when it does not exist.
pub(crate) fn read_regular_at(
    dir: impl AsFd,
    name: &str,
    shown: &str,
    limit: usize,
) -> Result<Option<(Vec<u8>, u64)>, FilesError> {
    let io = |e: Errno| FilesError::io(shown.to_string(), e.into());
    let dir = dir.as_fd();
    let Some(st) = stat_at(dir, name).map_err(io)? else {
        return Ok(None);
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Symlink => return Err(PathRefusal::Link(shown.into()).into()),
        _ => return Err(PathRefusal::NotRegular(shown.into()).into()),
    }
    let fd = match rustix::fs::openat(dir, name, FILE_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(PathRefusal::Link(shown.into()).into()),
        Err(e) => return Err(io(e)),
    };
    // Swapped for something else between the lstat and the open: judged again on what is open.
    let st = rustix::fs::fstat(&fd).map_err(io)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(PathRefusal::NotRegular(shown.into()).into());
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(limit as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| FilesError::io(shown.to_string(), e))?;
    Ok(Some((bytes, size)))
}

/// Where a path leads: its folder opened one name at a time (no link on the way) and its last
/// name (`""` for the folder itself).
pub(super) struct Located {
    /// The folder the last name is in.
    pub(super) dir: OwnedFd,
    /// The last name (empty: the path is the folder itself).
    pub(super) name: String,
}

/// Opens every folder on `path`'s way from `root` with `O_NOFOLLOW`: a link on the way is
/// refused (400), a missing folder is `Ok(None)` (404 for the caller).
pub(super) fn locate(root: &Path, path: &RelPath) -> Result<Option<Located>, FilesError> {
    let mut dir = open_root(root)?;
    let names: Vec<&str> = path.names().collect();
    let Some((last, way)) = names.split_last() else {
        return Ok(Some(Located {
            dir,
            name: String::new(),
        }));
    };
    let mut walked = String::new();
    for name in way {
        walked = join(&walked, name);
        let io = |e: Errno| FilesError::io(walked.clone(), e.into());
        match open_dir_at(&dir, name).map_err(io)? {
            Some(next) => dir = next,
            None => {
                let st = stat_at(&dir, name).map_err(io)?;
                if st.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink) {
                    return Err(PathRefusal::LinkOnTheWay(path.as_str().into()).into());
                }
                return Ok(None);
            }
        }
    }
    Ok(Some(Located {
        dir,
        name: (*last).to_string(),
    }))
}
