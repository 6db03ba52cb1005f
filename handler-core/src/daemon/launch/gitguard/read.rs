//! Reading the host repository's facts from what an agent can write (a scope's `.git`, its
//! gitfile, `commondir`, HEAD, refs, `packed-refs`, links), without following a link or
//! blocking, and Handler's records of each folder's `.git` at first sight.

use std::fs;
use std::path::{Path, PathBuf};

use handler_sandbox::guard::{self, GuardError, Head, Layout, Link, RepoFacts};

use super::git::git_with;
use super::{GitGuardError, Result, TREE_SCOPE, io};
use crate::daemon::{agentfs, fsutil};

/// The folder of Handler's records of what each folder's `.git` was at first sight (security
/// F1), under the daemon's data folder.
pub fn seen_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("git-seen")
}

/// What `<folder>/.git` is now, read from the folder's descriptor without following it.
fn dot_git_now(folder: &std::os::fd::OwnedFd, dot_git: &Path) -> Result<guard::DotGit> {
    use rustix::fs::FileType;
    let Some(st) = agentfs::lstat_at(folder, ".git", dot_git)? else {
        return Ok(guard::DotGit::Absent);
    };
    #[allow(clippy::useless_conversion, reason = "the stat fields' types differ")]
    let (dev, ino) = (u64::from(st.st_dev), u64::from(st.st_ino));
    Ok(match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => guard::DotGit::Dir { dev, ino },
        FileType::RegularFile => {
            let text = agentfs::read_at(folder, ".git", dot_git, agentfs::SMALL)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let target = guard_gitfile_target(&text).unwrap_or_default();
            guard::DotGit::File { dev, ino, target }
        }
        _ => guard::DotGit::Other,
    })
}

/// Security F1: `now`, what `<folder>/.git` is, against Handler's record of its first sight in
/// `seen` (made now when there is none): refused when it appeared or changed since.
fn check_seen(seen: &Path, folder: &Path, now: &guard::DotGit) -> Result<()> {
    use sha2::Digest;
    let key = format!(
        "{:x}",
        sha2::Sha256::digest(folder.as_os_str().as_encoded_bytes())
    );
    let record = seen.join(&key);
    let dot_git = folder.join(".git").display().to_string();
    let first = match fs::read_to_string(&record) {
        Ok(text) => text
            .lines()
            .nth(1)
            .and_then(guard::DotGit::parse)
            .ok_or_else(|| GitGuardError::Io {
                path: record.display().to_string(),
                source: std::io::Error::other(
                    "not a record Handler wrote; remove it to start again",
                ),
            })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // First sight: kept by a link of a complete file, so two starts at once agree.
            let text = format!("{}\n{}\n", folder.display(), now.to_line());
            let tmp = seen.join(format!(".{key}.{}", rand::random::<u64>()));
            fsutil::write_atomic(&tmp, text.as_bytes(), 0o600).map_err(io(&tmp))?;
            let linked = fs::hard_link(&tmp, &record);
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return check_seen(seen, folder, now);
                }
                Err(e) => return Err(io(&record)(e)),
            }
        }
        Err(e) => return Err(io(&record)(e)),
    };
    guard::check_seen(&dot_git, &first, now, &record.display().to_string())?;
    Ok(())
}

/// The repository `scope` is the root of (`<scope>/.git`), read without running git except for
/// `user.name`/`user.email`; `None` when the scope is no repository's root (a folder below a
/// root sees no git directory in the sandbox at all). A `.git` that is a link is refused; one
/// that appeared or changed since Handler first looked (`seen`: [`seen_dir`]) is refused
/// (security F1), and a gitfile is followed only to a linked worktree that names it back. Every
/// file is read through [`agentfs`]: no link followed, nothing blocking, bounded.
pub fn gather(seen: &Path, scope: &Path) -> Result<Option<RepoFacts>> {
    let dot_git = scope.join(".git");
    let folder = agentfs::open_base(scope)?;
    let now = dot_git_now(&folder, &dot_git)?;
    check_seen(seen, scope, &now)?;
    let (layout, git_dir) = match &now {
        guard::DotGit::Absent => return Ok(None),
        guard::DotGit::Other => {
            let target = fs::read_link(&dot_git).map_err(io(&dot_git))?;
            return Err(GuardError::Links {
                links: vec![Link {
                    path: dot_git.display().to_string(),
                    target: target.display().to_string(),
                }],
            }
            .into());
        }
        guard::DotGit::Dir { .. } => (Layout::Main, dot_git.clone()),
        guard::DotGit::File { target, .. } if target.is_empty() => return Ok(None),
        guard::DotGit::File { target, .. } => (Layout::Worktree, scope.join(target)),
    };
    let git_dir = fs::canonicalize(&git_dir).map_err(io(&git_dir))?;
    let commondir = agentfs::read_text_in(&git_dir, Path::new("commondir"), agentfs::SMALL)?;
    let commondir = commondir
        .as_deref()
        .and_then(handler_sandbox::git::commondir_target);
    if layout == Layout::Worktree {
        let me = fs::canonicalize(&dot_git).map_err(io(&dot_git))?;
        let back = agentfs::read_text_in(&git_dir, Path::new("gitdir"), agentfs::SMALL)?
            .map(|t| git_dir.join(t.trim_end_matches('\n')))
            .and_then(|b| fs::canonicalize(b).ok());
        guard::check_worktree(
            &me.display().to_string(),
            &git_dir.display().to_string(),
            commondir,
            back.as_ref().map(|b| b.display().to_string()).as_deref(),
        )?;
    }
    let common_dir = match commondir {
        Some(c) => {
            let c = git_dir.join(c);
            fs::canonicalize(&c).map_err(io(&c))?
        }
        None => git_dir.clone(),
    };
    let head = read_head(&GitDir::whole(&git_dir), &GitDir::whole(&common_dir))?;
    let mut links = Vec::new();
    scan_links(&common_dir, &mut links)?;
    if layout == Layout::Worktree {
        scan_tree(&git_dir, &mut links)?;
    }
    let small = |rel: &str| agentfs::read_text_in(&common_dir, Path::new(rel), 1 << 20);
    let alternates = small("objects/info/alternates")?;
    let shallow = small("shallow")?;
    let (user_name, user_email) = user_identity(scope, &git_dir);
    Ok(Some(RepoFacts {
        root: scope.display().to_string(),
        layout,
        git_dir: git_dir.display().to_string(),
        common_dir: common_dir.display().to_string(),
        head,
        links,
        alternates,
        shallow,
        user_name,
        user_email,
    }))
}

/// The repository `scope` is in: [`gather`] of the nearest of the scope and its parents that
/// holds a `.git` (under `sessionTree = "copy"` a scope below the root is checked out too;
/// decision 0121). `None` when none does. The scope's own `.git` is checked against `seen`.
pub fn gather_enclosing(seen: &Path, scope: &Path) -> Result<Option<RepoFacts>> {
    if let Some(f) = gather(seen, scope)? {
        return Ok(Some(f));
    }
    for dir in scope.ancestors().skip(1) {
        if fs::symlink_metadata(dir.join(".git")).is_ok() {
            return gather(seen, dir);
        }
    }
    Ok(None)
}

/// Under `sessionTree = "copy"`, the folder of the checkout in `guard_dir` the session's scope
/// is (the Files pane reads it: decision 0121); `None` for any other session, or when a
/// component on the way is not a folder (a link the agent planted leads nowhere here).
pub fn copy_folder(guard_dir: &Path) -> Option<PathBuf> {
    let tree = guard_dir.join("tree");
    let is_dir = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !is_dir(&tree) {
        return None;
    }
    let rel = fsutil::read_optional(&guard_dir.join(TREE_SCOPE)).ok()??;
    let mut at = tree;
    for c in rel
        .trim_end_matches('\n')
        .split('/')
        .filter(|c| !c.is_empty())
    {
        if c == "." || c == ".." {
            return None;
        }
        at.push(c);
        if !is_dir(&at) {
            return None;
        }
    }
    Some(at)
}

fn guard_gitfile_target(text: &str) -> Option<String> {
    handler_sandbox::git::gitfile_target(text).map(str::to_string)
}

/// A git directory read through [`agentfs`]: `rel` below Handler's (or the person's) folder
/// `base`, each name on the way opened without following a link.
pub(super) struct GitDir {
    pub(super) base: PathBuf,
    pub(super) rel: PathBuf,
}

impl GitDir {
    /// The folder `dir` itself (a host repository's, canonical).
    fn whole(dir: &Path) -> Self {
        Self {
            base: dir.to_path_buf(),
            rel: PathBuf::new(),
        }
    }

    /// `name` in it, a regular file of at most `limit` bytes (`None`: missing).
    fn read(&self, name: &str, limit: u64) -> Result<Option<String>> {
        Ok(agentfs::read_text_in(
            &self.base,
            &self.rel.join(name),
            limit,
        )?)
    }
}

/// The most of `packed-refs` read (a large repository's is megabytes; more is refused).
const PACKED_REFS_MAX: u64 = 32 << 20;

/// HEAD: a branch (its commit from the loose ref or `packed-refs`) or a detached commit.
pub(super) fn read_head(git_dir: &GitDir, common: &GitDir) -> Result<Head> {
    let text = git_dir.read("HEAD", agentfs::SMALL)?.unwrap_or_default();
    let text = text.trim();
    if let Some(r) = text.strip_prefix("ref:") {
        let r = r.trim();
        let name = r.strip_prefix("refs/heads/").unwrap_or(r).to_string();
        guard::check_ref_name("branch", &name)?;
        return Ok(Head::Branch {
            commit: read_ref(common, r)?,
            name,
        });
    }
    Ok(Head::Detached {
        commit: text.to_string(),
    })
}

fn read_ref(common: &GitDir, full: &str) -> Result<Option<String>> {
    if let Some(loose) = common.read(full, agentfs::SMALL)? {
        return Ok(Some(loose.trim().to_string()));
    }
    let packed = common.read("packed-refs", PACKED_REFS_MAX)?;
    Ok(packed.and_then(|t| {
        t.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
            .find_map(|l| {
                let (oid, name) = l.split_once(' ')?;
                (name == full).then(|| oid.to_string())
            })
    }))
}

/// Links directly under the git directory's root and anywhere in `logs/`, `refs/`, `objects/`
/// (a worktree's own entry is scanned whole by [`scan_tree`]).
fn scan_links(common: &Path, out: &mut Vec<Link>) -> Result<()> {
    for e in fs::read_dir(common).map_err(io(common))?.flatten() {
        let p = e.path();
        let ft = e.file_type().map_err(io(&p))?;
        if ft.is_symlink() {
            push_link(&p, out)?;
        }
    }
    for sub in ["logs", "refs", "objects"] {
        let d = common.join(sub);
        // A link here was found above; only a real folder is walked.
        if fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
            scan_tree(&d, out)?;
        }
    }
    Ok(())
}

/// Every link anywhere under `dir` (links are not followed).
fn scan_tree(dir: &Path, out: &mut Vec<Link>) -> Result<()> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).map_err(io(&d))?.flatten() {
            let p = e.path();
            let ft = e.file_type().map_err(io(&p))?;
            if ft.is_symlink() {
                push_link(&p, out)?;
            } else if ft.is_dir() {
                todo.push(p);
            }
        }
    }
    Ok(())
}

fn push_link(p: &Path, out: &mut Vec<Link>) -> Result<()> {
    let target = fs::read_link(p).map_err(io(p))?;
    out.push(Link {
        path: p.display().to_string(),
        target: target.display().to_string(),
    });
    Ok(())
}

/// `user.name` and `user.email` as the host's git answers them for the tree (the one git run
/// that reads the person's global configuration: `config --get` runs no program).
fn user_identity(root: &Path, git_dir: &Path) -> (Option<String>, Option<String>) {
    let dir = git_dir.display().to_string();
    let get = |key: &str| {
        git_with(
            root,
            &["--git-dir", &dir, "config", "--get", key],
            &[],
            true,
        )
        .ok()
        .map(|o| o.trim_end().to_string())
        .filter(|s| !s.is_empty())
    };
    (get("user.name"), get("user.email"))
}
