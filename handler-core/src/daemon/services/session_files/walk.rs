//! Walking a session's folder (F.8): every folder opened from its parent with `O_NOFOLLOW`
//! (links are listed, never followed), entries `lstat`ed and never opened (a FIFO never blocks),
//! `.git` folders left out, each folder's `.gitignore` read the same way (up to 1 MB) and
//! applied with `.git/info/exclude`'s patterns.

use std::os::fd::OwnedFd;
use std::path::Path;

use handler_contracts::files::{EntryKind, IgnoreRules, Listing, MAX_IGNORE_FILE_BYTES, join};
use rustix::io::Errno;

use super::FilesError;
use super::open::{open_dir_at, open_root, read_regular_at, stamp, stat_at};

/// Folders deeper than this are not followed (the listing says `notFollowed`): one descriptor
/// is open per level.
pub const MAX_DEPTH: usize = 128;

/// A folder being walked: its descriptor, its path and the names left to look at.
struct Frame {
    fd: OwnedFd,
    path: String,
    names: std::vec::IntoIter<String>,
}

/// Lists `root`: files, links and folders, not in a `.git` folder and not ignored. Stops past
/// `limit` files or folders (`notFollowed`). Returns the rules the walk read too (every
/// `.gitignore` it met), for the changes.
pub fn walk(
    root: &Path,
    exclude: Option<&[u8]>,
    limit: usize,
) -> Result<(Listing, IgnoreRules), FilesError> {
    let mut rules = IgnoreRules::new(exclude);
    let mut listing = Listing::default();
    let (mut files, mut dirs) = (0usize, 0usize);
    let mut stack = vec![enter(
        open_root(root)?,
        String::new(),
        &mut rules,
        &mut listing.nested_git,
    )?];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.next() else {
            stack.pop();
            continue;
        };
        let path = join(&frame.path, &name);
        let io = |e: Errno| FilesError::io(path.clone(), e.into());
        let Some(st) = stat_at(&frame.fd, &name).map_err(io)? else {
            continue; // gone since it was listed
        };
        let Some(s) = stamp(&st) else {
            continue; // a FIFO, a socket, a device: never opened, not listed
        };
        let is_dir = s.kind == EntryKind::Dir;
        if rules.is_ignored(&path, is_dir) {
            continue;
        }
        if is_dir {
            dirs += 1;
            let Some(fd) = open_dir_at(&frame.fd, &name).map_err(io)? else {
                continue; // swapped for a link or gone: not followed
            };
            listing.entries.insert(path.clone(), s);
            if dirs > limit || stack.len() >= MAX_DEPTH {
                listing.not_followed = true;
                break;
            }
            stack.push(enter(fd, path, &mut rules, &mut listing.nested_git)?);
        } else {
            files += 1;
            if files > limit {
                listing.not_followed = true;
                break;
            }
            listing.entries.insert(path, s);
        }
    }
    Ok((listing, rules))
}

/// Reads a folder's names (sorted; not `.`, `..`, `.git`; names that are not UTF-8 left out, a
/// path is a string in the API) and adds its `.gitignore` to the rules; a `.git` below the root
/// is noted in `nested_git`, never entered.
fn enter(
    fd: OwnedFd,
    path: String,
    rules: &mut IgnoreRules,
    nested_git: &mut Vec<String>,
) -> Result<Frame, FilesError> {
    let io = |e: Errno| {
        FilesError::io(
            if path.is_empty() {
                ".".into()
            } else {
                path.clone()
            },
            e.into(),
        )
    };
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd).map_err(io)? {
        let entry = entry.map_err(io)?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name == ".git" && !path.is_empty() {
            nested_git.push(join(&path, name));
        }
        if !matches!(name, "." | ".." | ".git") {
            names.push(name.to_string());
        }
    }
    names.sort();
    if names.iter().any(|n| n == ".gitignore") {
        let shown = join(&path, ".gitignore");
        // A .gitignore that is a link, a FIFO or a folder is not read (and not an error).
        if let Ok(Some((bytes, _))) =
            read_regular_at(&fd, ".gitignore", &shown, MAX_IGNORE_FILE_BYTES)
        {
            rules.add_gitignore(&path, &bytes);
        }
    }
    Ok(Frame {
        fd,
        path,
        names: names.into_iter(),
    })
}
