//! The git guard's I/O (issue 14; the decisions are `handler_sandbox::guard`'s): reading a
//! scope's repository before a start (links, alternates, HEAD — by reading files, git only for
//! `user.name`/`user.email`), making the session's own git directory under Handler's data, and
//! the bring-back: the bundle from the runtime's `git-bundle` helper container, fetched here with
//! `transfer.fsckObjects` into `refs/handler/sessions/<session>/<branch>` (`guard::hidden_ref`), each branch then
//! fast-forwarded, created or left waiting. Every git run here passes
//! `handler_sandbox::guard::HOST_GIT_SAFETY`, in a child with a time and a memory limit; the
//! host's git never opens the session's git directory.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use handler_sandbox::copytree;
use handler_sandbox::guard::{self, Action, GuardError, Head, Layout, Link, RepoFacts};
use handler_sandbox::verbs;

use super::launcher::{Launcher, LauncherError};
use crate::daemon::{agentfs, fsutil};

/// The address space a git child may take (packs are mapped).
const GIT_MEMORY: u64 = 4 << 30;
/// How long one git child may run.
const GIT_TIME: Duration = Duration::from_secs(120);
/// The most output kept of one git child.
const GIT_OUTPUT_MAX: u64 = 16 << 20;
/// The file in a session's folder the bring-back's lines are appended to.
pub const LOG: &str = "git-guard.log";
/// The runtime verb's exit codes (`runtime::sandbox::git_bundle`).
const NOTHING_NEW: i32 = 3;
const NO_GIT: i32 = 4;

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

/// The branch of a copy's checkout that carries its uncommitted work at the end
/// (`copytree::uncommitted_script`); kept on the host at `copytree::uncommitted_ref`.
const UNCOMMITTED_BRANCH: &str = "handler-uncommitted";

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

/// The file in a copy's guard folder naming the scope's path below the checkout's root (empty
/// at the root), for the Files pane ([`copy_folder`]).
const TREE_SCOPE: &str = "tree.scope";

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
struct GitDir {
    base: PathBuf,
    rel: PathBuf,
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
fn read_head(git_dir: &GitDir, common: &GitDir) -> Result<Head> {
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

/// Makes (or, on a restart, keeps) the sandbox's own git directory in `dir` for `facts`, as
/// resolve planned it (`GuardPlan::GitDir`: its mounts are in the spec, its refusals made).
pub fn make_git_dir(facts: RepoFacts, dir: &Path) -> Result<Guarded> {
    let g = Guarded {
        facts,
        dir: dir.to_path_buf(),
        copy: None,
    };
    let git_dir = g.git_dir();
    let gitfile = dir.join("gitfile");
    if !git_dir.exists() {
        seed(&g.facts, dir, &git_dir)?;
    }
    fsutil::write_atomic(&gitfile, guard::gitfile().as_bytes(), 0o644).map_err(io(&gitfile))?;
    Ok(g)
}

/// `sessionTree = "copy"` (decision 0103) as resolve planned it (`GuardPlan::Copy`: the
/// mounts that put the checkout at the scope are in the spec): the checkout made (or, on a
/// restart, kept) in `<dir>/tree` of `commit` — seeded as the guard's git directory (sparse to
/// `rel`, the scope's folder below the root: decision 0121), then reset hard in a helper
/// container run in `image`, so only tracked files are in it.
pub async fn make_copy(
    launcher: &dyn Launcher,
    facts: RepoFacts,
    dir: &Path,
    (commit, rel): (&str, &str),
    image: &str,
) -> Result<Guarded> {
    let (d2, r2) = (dir.to_path_buf(), rel.to_string());
    let (g, fresh) = blocking("sessionTree", move || copy_seed(facts, &d2, &r2)).await?;
    let tree = g.copy.clone().unwrap_or_default();
    if let Some(new) = fresh {
        copy_reset(launcher, &g, &new, commit, image).await?;
        fs::rename(&new, &tree).map_err(io(&tree))?;
    }
    let (t2, r2, d2) = (tree.clone(), rel.to_string(), dir.to_path_buf());
    blocking("sessionTree", move || copy_scope_folder(&t2, &r2, &d2)).await?;
    Ok(g)
}

/// A fresh checkout's seed, made in `<dir>/tree.new` (`None` for it when `<dir>/tree` is kept
/// from an earlier start): the guard's, sparse to the scope's folder `rel` below the root.
fn copy_seed(facts: RepoFacts, dir: &Path, rel: &str) -> Result<(Guarded, Option<PathBuf>)> {
    let tree = dir.join("tree");
    let g = Guarded {
        facts,
        dir: dir.to_path_buf(),
        copy: Some(tree.clone()),
    };
    if tree.exists() {
        return Ok((g, None));
    }
    let new = dir.join("tree.new");
    let _ = fs::remove_dir_all(&new);
    fsutil::create_dir_private(&new).map_err(io(&new))?;
    let git_dir = new.join(".git");
    seed(&g.facts, dir, &git_dir)?;
    if let Some((pattern, config)) = copytree::sparse(rel) {
        let p = git_dir.join("info/sparse-checkout");
        fsutil::create_dir_private(&git_dir.join("info")).map_err(io(&p))?;
        fsutil::write_atomic(&p, pattern.as_bytes(), 0o644).map_err(io(&p))?;
        append(&git_dir.join("config"), config).map_err(io(&git_dir))?;
    }
    Ok((g, Some(new)))
}

/// The helper container's `reset --hard` of the fresh checkout `new` to `commit`.
async fn copy_reset(
    launcher: &dyn Launcher,
    g: &Guarded,
    new: &Path,
    commit: &str,
    image: &str,
) -> Result<()> {
    let copy = verbs::Copy::new(
        image.into(),
        new.display().to_string(),
        format!("{}/objects", g.facts.common_dir),
        verbs::CopyAction::Reset(commit.into()),
    );
    match launcher.git_copy(&copy).await {
        Ok(()) => Ok(()),
        Err(LauncherError::Verb {
            code: Some(NO_GIT), ..
        }) => Err(GitGuardError::NoGit {
            image: image.to_string(),
            git_dir: new.join(".git").display().to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The scope's folder in the checkout (made when the commit has no file there), each
/// component a folder and no link, and [`TREE_SCOPE`] naming it for the Files pane.
fn copy_scope_folder(tree: &Path, rel: &str, dir: &Path) -> Result<()> {
    let mut at = tree.to_path_buf();
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(GitGuardError::Io {
                    path: at.display().to_string(),
                    source: std::io::Error::other("the scope's folder in the copy is not a folder"),
                });
            }
            Err(_) => fsutil::create_dir_private(&at).map_err(io(&at))?,
        }
    }
    let p = dir.join(TREE_SCOPE);
    fsutil::write_atomic(&p, format!("{rel}\n").as_bytes(), 0o600).map_err(io(&p))
}

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

/// Writes the seed into `<dest>.new`, reads the index from the tree's commit (host git on
/// Handler's own fresh directory, the host's objects given by environment), then renames it to
/// `dest` (`<dir>/git`, or a copy's `<checkout>/.git`); the seeded commit is noted in `dir`.
fn seed(facts: &RepoFacts, dir: &Path, dest: &Path) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.new", dest.display()));
    fsutil::create_dir_private(dir).map_err(io(dir))?;
    let _ = fs::remove_dir_all(&tmp);
    fsutil::create_dir_private(&tmp.join("refs/heads")).map_err(io(&tmp))?;
    for sub in ["objects/info", "objects/pack", "refs/tags"] {
        fsutil::create_dir_private(&tmp.join(sub)).map_err(io(&tmp))?;
    }
    let s = guard::seed(facts);
    let mut alternates = None;
    for (rel, text) in &s.files {
        if rel == "objects/info/alternates" {
            alternates = Some(text.clone());
            continue;
        }
        let p = tmp.join(rel);
        fsutil::write_atomic(&p, text.as_bytes(), 0o644).map_err(io(&p))?;
    }
    if let Some(c) = &s.index_from {
        let objects = format!("{}/objects", facts.common_dir);
        let git_dir = tmp.display().to_string();
        git(
            dir,
            &["--git-dir", &git_dir, "read-tree", c],
            &[("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects)],
        )?;
    }
    if let Some(a) = alternates {
        let p = tmp.join("objects/info/alternates");
        fsutil::write_atomic(&p, a.as_bytes(), 0o644).map_err(io(&p))?;
    }
    let seeded = head_commit(&facts.head).unwrap_or_default();
    let p = dir.join("seeded");
    fsutil::write_atomic(&p, format!("{seeded}\n").as_bytes(), 0o600).map_err(io(&p))?;
    fs::rename(&tmp, dest).map_err(io(dest))
}

fn head_commit(h: &Head) -> Option<String> {
    match h {
        Head::Branch { commit, .. } => commit.clone(),
        Head::Detached { commit } => Some(commit.clone()),
    }
}

/// Where host git runs: a folder of Handler's, or the person's repository — named by
/// `--git-dir`/`--work-tree`, never found by discovery (security F1).
#[derive(Clone, Copy)]
pub enum At<'a> {
    /// A folder (Handler's own git directories are named in the arguments).
    Dir(&'a Path),
    /// The host repository the guard read.
    Repo(&'a RepoFacts),
}

impl<'a> From<&'a Path> for At<'a> {
    fn from(p: &'a Path) -> Self {
        Self::Dir(p)
    }
}

impl<'a> From<&'a RepoFacts> for At<'a> {
    fn from(f: &'a RepoFacts) -> Self {
        Self::Repo(f)
    }
}

/// Runs host git at `at` with the safety options first, stdin empty, with no system or global
/// configuration (nothing the person's or an agent's settings could make it run), in a child
/// limited to `GIT_MEMORY` of address space and `GIT_TIME`; its stdout.
pub fn git<'a>(at: impl Into<At<'a>>, args: &[&str], env: &[(&str, &str)]) -> Result<String> {
    git_with(at, args, env, false)
}

/// [`git`], reading the person's global configuration when `global` (only `config --get`).
fn git_with<'a>(
    at: impl Into<At<'a>>,
    args: &[&str],
    env: &[(&str, &str)],
    global: bool,
) -> Result<String> {
    let out = git_run(at.into(), args, env, global)?;
    if out.0.success() {
        Ok(String::from_utf8_lossy(&out.1).into_owned())
    } else {
        Err(GitGuardError::Git {
            args: args.join(" "),
            status: out.0.to_string(),
            stderr: out.2,
        })
    }
}

/// [`git`]'s exit status, stdout and stderr (bounded), whatever the status.
fn git_output<'a>(
    at: impl Into<At<'a>>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(std::process::ExitStatus, Vec<u8>, String)> {
    git_run(at.into(), args, env, false)
}

fn git_run(
    at: At<'_>,
    args: &[&str],
    env: &[(&str, &str)],
    global: bool,
) -> Result<(std::process::ExitStatus, Vec<u8>, String)> {
    let mut full: Vec<&str> = Vec::new();
    let cwd = match at {
        At::Dir(d) => d,
        At::Repo(f) => {
            full.extend(["--git-dir", &f.git_dir, "--work-tree", &f.root]);
            Path::new(&f.root)
        }
    };
    full.extend(args);
    let mut c = Command::new("git");
    c.args(guard::host_git(&full)).current_dir(cwd);
    // Nothing of handlerd's environment steers it (GIT_DIR, GIT_CONFIG_COUNT…).
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            c.env_remove(k);
        }
    }
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ATTR_NOSYSTEM", "1");
    if !global {
        c.env("GIT_CONFIG_GLOBAL", "/dev/null");
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    limit_memory(&mut c);
    let mut child = c.spawn().map_err(|source| GitGuardError::Io {
        path: "git".into(),
        source,
    })?;
    let read = |s: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(s) = s {
                let _ = s.take(GIT_OUTPUT_MAX).read_to_end(&mut out);
            }
            out
        })
    };
    let so = read(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let se = read(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + GIT_TIME;
    let status = loop {
        match child.try_wait().map_err(io(cwd))? {
            Some(st) => break st,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GitGuardError::Git {
                    args: args.join(" "),
                    status: "timed out".into(),
                    stderr: format!("killed after {} s", GIT_TIME.as_secs()),
                });
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let out = so.join().unwrap_or_default();
    let err = String::from_utf8_lossy(&se.join().unwrap_or_default())
        .trim()
        .chars()
        .take(2000)
        .collect();
    Ok((status, out, err))
}

#[allow(unsafe_code)]
fn limit_memory(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing is allocated between fork and exec.
    unsafe {
        c.pre_exec(|| {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_AS,
                GIT_MEMORY,
                GIT_MEMORY,
            )
            .map_err(std::io::Error::from)
        });
    }
}

/// What one bring-back did: a line per branch for the session's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BroughtBack {
    /// One line per branch that came back (fast-forwarded, created, waiting).
    pub lines: Vec<String>,
}

/// The bring-back (item 2): the runtime's helper container writes a bundle of every branch of
/// the session's git directory (run in `image`), fetched into the hidden refs of `session` with
/// objects checked, then each branch fast-forwarded, created or left waiting.
pub async fn bring_back(
    launcher: &dyn Launcher,
    g: &Guarded,
    session: &str,
    image: &str,
) -> Result<BroughtBack> {
    guard::check_ref_name("session id", session)?;
    let g2 = g.clone();
    let s2 = session.to_string();
    let known = blocking("the bring-back", move || known_commits(&g2, &s2)).await?;
    let bundle_of = verbs::Bundle {
        image: image.into(),
        git_dir: g.git_dir().display().to_string(),
        objects: format!("{}/objects", g.facts.common_dir),
        known,
    };
    let g2 = g.clone();
    blocking("the bring-back", move || g2.check_own_git_dir()).await?;
    let bundle = match launcher.git_bundle(&bundle_of).await {
        Ok(b) => b,
        Err(LauncherError::Verb {
            code: Some(NOTHING_NEW),
            ..
        }) => return Ok(BroughtBack::default()),
        Err(LauncherError::Verb {
            code: Some(NO_GIT), ..
        }) => {
            return Err(GitGuardError::NoGit {
                image: image.to_string(),
                git_dir: g.git_dir().display().to_string(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let g2 = g.clone();
    let s2 = session.to_string();
    blocking("the bring-back", move || apply(&g2, &s2, &bundle)).await
}

/// The commits the host has that the bundle can leave out: the seed and the session's hidden
/// refs (what earlier bring-backs fetched).
fn known_commits(g: &Guarded, session: &str) -> Result<Vec<String>> {
    let mut known: Vec<String> = fsutil::read_optional(&g.dir.join("seeded"))
        .map_err(io(&g.dir))?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .into_iter()
        .collect();
    let prefix = format!("refs/handler/sessions/{session}/");
    let root = &g.facts;
    let out = git(
        root,
        &["for-each-ref", "--format=%(objectname)", &prefix],
        &[],
    )?;
    for l in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !known.iter().any(|k| k == l) {
            known.push(l.to_string());
        }
    }
    Ok(known)
}

/// Fetches `bundle` into the hidden refs and moves each branch as [`guard::decide`] says.
fn apply(g: &Guarded, session: &str, bundle: &[u8]) -> Result<BroughtBack> {
    let header = guard::parse_bundle_header(bundle)?;
    let path = g.dir.join("bring-back.bundle");
    fsutil::write_atomic(&path, bundle, 0o600).map_err(io(&path))?;
    let root = &g.facts;
    let names: Vec<String> = header.branches.iter().map(|(b, _)| b.clone()).collect();
    if names.is_empty() {
        let _ = fs::remove_file(&path);
        return Ok(BroughtBack::default());
    }
    let argv = guard::fetch_argv(&path.display().to_string(), session, &names)?;
    let fetched = git(root, &as_strs(&argv[guard::HOST_GIT_SAFETY.len()..]), &[]);
    let _ = fs::remove_file(&path);
    fetched?;
    if g.copy.is_some() {
        let scope = fsutil::read_optional(&g.dir.join(TREE_SCOPE))
            .map_err(io(&g.dir))?
            .unwrap_or_default();
        return apply_copy(
            root,
            session,
            &header.branches,
            scope.trim_end_matches('\n'),
        );
    }
    let head = current_branch(root);
    let staged = !git_output(
        root,
        &["diff", "--cached", "--quiet", "--ignore-submodules"],
        &[],
    )?
    .0
    .success();
    let mut out = BroughtBack::default();
    for (branch, commit) in &header.branches {
        let line = move_branch(root, session, branch, commit, head.as_deref(), staged)?;
        if let Some(l) = line {
            out.lines.push(l);
        }
    }
    Ok(out)
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The tree's HEAD branch now (`None`: detached).
fn current_branch(root: &RepoFacts) -> Option<String> {
    git(root, &["symbolic-ref", "-q", "--short", "HEAD"], &[])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The host's branch `branch` (`refs/heads/…`) and, if it exists, whether it is an ancestor of
/// the fetched `commit`.
fn host_branch(
    root: &RepoFacts,
    branch: &str,
    commit: &str,
) -> (String, Option<guard::HostBranch>) {
    let full = format!("refs/heads/{branch}");
    let host = git(root, &["rev-parse", "--verify", "-q", &full], &[])
        .ok()
        .map(|s| s.trim().to_string());
    let host = host.map(|c| guard::HostBranch {
        ancestor_of_fetched: git_output(root, &["merge-base", "--is-ancestor", &c, commit], &[])
            .is_ok_and(|o| o.0.success()),
        commit: c,
    });
    (full, host)
}

fn move_branch(
    root: &RepoFacts,
    session: &str,
    branch: &str,
    commit: &str,
    head: Option<&str>,
    staged: bool,
) -> Result<Option<String>> {
    let (full, host) = host_branch(root, branch, commit);
    let action = guard::decide(branch, commit, host.as_ref(), head, staged);
    let old = host.map(|h| h.commit).unwrap_or_default();
    run_action(root, session, (branch, commit), (&full, &old), action)
}

/// Does what [`guard::decide`] or [`copytree::decide`] said for `branch` fetched at `commit`
/// (`full` its host ref, `old` the host's commit of it): the line for the session's log.
fn run_action(
    root: &RepoFacts,
    session: &str,
    (branch, commit): (&str, &str),
    (full, old): (&str, &str),
    action: Action,
) -> Result<Option<String>> {
    let hidden = guard::hidden_ref(session, branch)?;
    let short = commit.get(..12).unwrap_or(commit);
    Ok(match action {
        Action::Unchanged => None,
        Action::Create => {
            let zero = "0".repeat(commit.len());
            git(root, &["update-ref", full, commit, &zero], &[])?;
            Some(format!("{branch}: created at {short}"))
        }
        Action::FastForward { reset_index } => {
            git(root, &["update-ref", full, commit, old], &[])?;
            if reset_index {
                // The index to the new commit by plumbing that reads no file of the tree (no
                // clean filter runs on the host: security F1); unchanged entries keep their stat.
                git(root, &["read-tree", "-m", "-i", "HEAD"], &[])?;
            }
            Some(format!("{branch}: fast-forwarded to {short}"))
        }
        Action::MergeFfOnly => {
            let argv = copytree::merge_argv(&root.root, session, branch)?;
            match git(root, &as_strs(&argv[guard::HOST_GIT_SAFETY.len()..]), &[]) {
                Ok(_) => Some(format!(
                    "{branch}: merged --ff-only into the host's tree at {short}"
                )),
                Err(GitGuardError::Git { stderr, .. }) => Some(format!(
                    "{branch}: waits under {hidden} (git merge --ff-only refused: {})",
                    stderr.lines().next().unwrap_or_default()
                )),
                Err(e) => return Err(e),
            }
        }
        Action::Wait { reason } => Some(format!("{branch}: waits under {hidden} ({reason})")),
    })
}

/// Under copy, after the fetch: each branch moved as [`copytree::decide`] says — the host tree's
/// own branch by `merge --ff-only` — or left waiting; the uncommitted work's branch kept at
/// [`copytree::uncommitted_ref`].
fn apply_copy(
    root: &RepoFacts,
    session: &str,
    branches: &[(String, String)],
    scope: &str,
) -> Result<BroughtBack> {
    let head = current_branch(root);
    let host_changed = host_changes(root)?;
    let mut out = BroughtBack::default();
    for (branch, commit) in branches {
        let line = if branch == UNCOMMITTED_BRANCH {
            Some(keep_uncommitted(root, session, commit)?)
        } else {
            copy_branch(
                root,
                session,
                (branch, commit),
                (head.as_deref(), scope),
                &host_changed,
            )?
        };
        out.lines.extend(line);
    }
    Ok(out)
}

/// Paths split from git's `-z` output.
fn paths(out: &str) -> Vec<String> {
    out.split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// What the host's tree changed against its HEAD: staged, unstaged, untracked (not ignored).
fn host_changes(root: &RepoFacts) -> Result<Vec<String>> {
    let diff = [
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--ignore-submodules",
        "HEAD",
    ];
    let mut p = paths(&git(root, &diff, &[])?);
    let others = ["ls-files", "-z", "--others", "--exclude-standard"];
    p.extend(paths(&git(root, &others, &[])?));
    Ok(p)
}

fn copy_branch(
    root: &RepoFacts,
    session: &str,
    (branch, commit): (&str, &str),
    (head, scope): (Option<&str>, &str),
    host_changed: &[String],
) -> Result<Option<String>> {
    let (full, host) = host_branch(root, branch, commit);
    let agent_writes = match &host {
        Some(h) if h.ancestor_of_fetched => {
            let args = [
                "diff",
                "--name-only",
                "-z",
                "--no-renames",
                &h.commit,
                commit,
            ];
            paths(&git(root, &args, &[])?)
        }
        _ => Vec::new(),
    };
    let tree = copytree::TreeFacts {
        head: head.map(str::to_string),
        host_changed: host_changed.to_vec(),
        agent_writes,
        scope: scope.to_string(),
    };
    let action = copytree::decide(branch, commit, host.as_ref(), &tree);
    let old = host.map(|h| h.commit).unwrap_or_default();
    run_action(root, session, (branch, commit), (&full, &old), action)
}

/// The uncommitted work's commit (fetched under the hidden ref of [`UNCOMMITTED_BRANCH`]) kept
/// at [`copytree::uncommitted_ref`]; the hidden ref removed (no host branch is made of it).
fn keep_uncommitted(root: &RepoFacts, session: &str, commit: &str) -> Result<String> {
    let kept = copytree::uncommitted_ref(session)?;
    git(root, &["update-ref", &kept, commit], &[])?;
    let hidden = guard::hidden_ref(session, UNCOMMITTED_BRANCH)?;
    git(root, &["update-ref", "-d", &hidden], &[])?;
    Ok(format!(
        "uncommitted work kept as {kept} at {}",
        commit.get(..12).unwrap_or(commit)
    ))
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

    /// One bring-back (`when`: turn end, cancel, stop…), its lines logged; never fails the
    /// session: a failure is a line too.
    pub async fn bring_back(&self, launcher: &dyn Launcher, when: &str) -> Vec<String> {
        let _one = self.lock.lock().await;
        let lines = match bring_back(launcher, &self.guarded, &self.session, &self.image).await {
            Ok(b) => b.lines,
            Err(e) => vec![format!("bring-back failed: {e}")],
        };
        self.log_lines(when, &lines);
        lines
    }

    /// The last bring-back (session stop, connection close, after the sandbox is gone): under
    /// copy, the checkout's uncommitted work is first committed by a helper container
    /// (`copytree::uncommitted_script`), so it comes back to [`copytree::uncommitted_ref`].
    pub async fn bring_back_at_end(&self, launcher: &dyn Launcher, when: &str) -> Vec<String> {
        if let Some(tree) = &self.guarded.copy {
            let one = self.lock.lock().await;
            let copy = verbs::Copy::new(
                self.image.clone(),
                tree.display().to_string(),
                format!("{}/objects", self.guarded.facts.common_dir),
                verbs::CopyAction::Uncommitted,
            );
            let g2 = self.guarded.clone();
            let kept = match blocking("the bring-back", move || g2.check_own_git_dir()).await {
                Ok(()) => launcher.git_copy(&copy).await.map_err(GitGuardError::from),
                Err(e) => Err(e),
            };
            if let Err(e) = kept {
                self.log_lines(when, &[format!("keeping the uncommitted work failed: {e}")]);
            }
            drop(one);
        }
        self.bring_back(launcher, when).await
    }

    fn log_lines(&self, when: &str, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        let text: String = lines
            .iter()
            .map(|l| format!("{} {when}: {l}\n", fsutil::now_rfc3339()))
            .collect();
        let _ = append(&self.log, &text);
        for l in lines {
            tracing::info!(session = %self.session, %when, "git guard: {l}");
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

/// Follow (item 3): before a turn, a commit made on the host's branch of the sandbox's HEAD is
/// handed to the sandbox (`git-follow`: update-ref, then the index), only where the sandbox holds
/// nothing the host has not fetched and the host's commit leads on from the sandbox's
/// ([`guard::follow`]). The sandbox's HEAD and ref are read as small plain files, not by git.
/// Returns the line to log, if any.
pub async fn follow(
    launcher: &dyn Launcher,
    g: &Guarded,
    session: &str,
    image: &str,
) -> Result<Option<String>> {
    let (g2, s2) = (g.clone(), session.to_string());
    let facts = blocking("follow", move || follow_facts(&g2, &s2)).await?;
    let Some(f) = facts else {
        return Ok(None);
    };
    let (branch, at) = f.sandbox.clone().unwrap_or_default();
    match guard::follow(&f) {
        guard::Follow::Nothing => Ok(None),
        guard::Follow::Keep(why) => Ok(Some(format!(
            "follow: the sandbox keeps working where it is: {why}"
        ))),
        guard::Follow::To(to) => {
            let g2 = g.clone();
            blocking("follow", move || g2.check_own_git_dir()).await?;
            let objects = format!("{}/objects", g.facts.common_dir);
            let moved = match &g.copy {
                // Under copy the checkout's tree moves too: `merge --ff-only` in a helper.
                Some(tree) => {
                    let copy = verbs::Copy::new(
                        image.into(),
                        tree.display().to_string(),
                        objects,
                        verbs::CopyAction::Follow(to.clone()),
                    );
                    launcher.git_copy(&copy).await
                }
                None => {
                    let follow = verbs::Follow {
                        image: image.into(),
                        git_dir: g.git_dir().display().to_string(),
                        objects,
                        branch: branch.clone(),
                        from: at.clone(),
                        to: to.clone(),
                    };
                    launcher.git_follow(&follow).await
                }
            };
            match moved {
                Ok(()) => {}
                Err(LauncherError::Verb {
                    code: Some(NO_GIT), ..
                }) => {
                    return Err(GitGuardError::NoGit {
                        image: image.to_string(),
                        git_dir: g.git_dir().display().to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
            let p = g.dir.join("seeded");
            fsutil::write_atomic(&p, format!("{to}\n").as_bytes(), 0o600).map_err(io(&p))?;
            Ok(Some(format!(
                "follow: the sandbox's {branch} moved to the host's {}",
                to.get(..12).unwrap_or(&to)
            )))
        }
    }
}

/// What follow decides on: the sandbox's HEAD (read as plain files), the host's side by git.
pub(crate) fn follow_facts(g: &Guarded, session: &str) -> Result<Option<guard::FollowFacts>> {
    // The sandbox's own git directory, below the session's folder (Handler's): every name on the
    // way opened without following a link, packed-refs bounded, a FIFO refused (security F4).
    let own = g.own_git_dir();
    let Head::Branch {
        name,
        commit: Some(at),
    } = read_head(&own, &own)?
    else {
        return Ok(None);
    };
    let root = &g.facts;
    let rev = |r: &str| {
        git(root, &["rev-parse", "--verify", "-q", r], &[])
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let host = rev(&format!("refs/heads/{name}"));
    let fetched = rev(&guard::hidden_ref(session, &name)?);
    let seeded = fsutil::read_optional(&g.dir.join("seeded"))
        .map_err(io(&g.dir))?
        .unwrap_or_default()
        .trim()
        .to_string();
    let host_leads_on = host.as_ref().is_some_and(|h| {
        git_output(root, &["merge-base", "--is-ancestor", &at, h], &[]).is_ok_and(|o| o.0.success())
    });
    Ok(Some(guard::FollowFacts {
        sandbox: Some((name, at)),
        fetched,
        seeded,
        host,
        host_leads_on,
    }))
}

impl GuardSession {
    /// Follow before a turn, its line logged; never fails the turn (under copy the checkout's
    /// working tree moves with its branch, by `git-copy --follow`).
    pub async fn follow(&self, launcher: &dyn Launcher) {
        let _one = self.lock.lock().await;
        let line = match follow(launcher, &self.guarded, &self.session, &self.image).await {
            Ok(l) => l,
            Err(e) => Some(format!("follow failed: {e}")),
        };
        if let Some(l) = line {
            let _ = append(
                &self.log,
                &format!("{} turn start: {l}\n", fsutil::now_rfc3339()),
            );
            tracing::info!(session = %self.session, "git guard: {l}");
        }
    }
}
