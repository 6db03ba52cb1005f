//! The git guard's decisions (issue 14, `gitGuard = "fetch"`): a sandbox whose scope is in a git
//! repository gets a git directory of its own, never a writable path of the host's. What to mount
//! ([`mounts`]), what that directory starts with ([`seed`]), what refuses a start ([`check`]),
//! the git argv the host runs (always with [`HOST_GIT_SAFETY`]) and the one the sandbox's bundle
//! comes from, the bundle's header ([`parse_bundle_header`]), what happens to each branch that
//! comes back ([`decide`]) and when a host commit follows into the sandbox ([`follow`]). Pure:
//! handler-core reads the repository, runs git and the helper container.

use handler_contracts::sandbox::{Mount, MountKind};

/// Where the session's own git directory is in the sandbox for a linked worktree (for a main
/// checkout it is mounted over `<root>/.git`), and in the bring-back's helper container.
pub const SANDBOX_GIT_DIR: &str = "/opt/handler/git";
/// Where the host repository's `objects/` is mounted read-only (named by the session's
/// `objects/info/alternates`), never inside a path the sandbox's git directory holds.
pub const HOST_OBJECTS: &str = "/opt/handler/host-objects";
/// The options every git command Handler runs passes first: no fsmonitor, no submodule
/// recursion, no hooks (issue 14, item 6), no attributes file of the user's (security F1; the
/// host's git also runs with `GIT_CONFIG_NOSYSTEM=1` and `GIT_CONFIG_GLOBAL=/dev/null`).
pub const HOST_GIT_SAFETY: [&str; 8] = [
    "-c",
    "core.fsmonitor=",
    "-c",
    "submodule.recurse=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.attributesFile=/dev/null",
];

/// How the repository's `.git` entry reaches the scope's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<root>/.git` is the git directory (a main checkout).
    Main,
    /// `<root>/.git` is a gitfile naming `<common>/worktrees/<name>` (a linked worktree).
    Worktree,
}

/// What HEAD of the host's tree is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// On a branch (its short name); `commit` is `None` for a branch with no commit yet.
    Branch {
        /// The branch's short name (`main`).
        name: String,
        /// The commit it is at.
        commit: Option<String>,
    },
    /// A detached HEAD at a commit.
    Detached {
        /// The commit.
        commit: String,
    },
}

/// A symbolic link found where git writes none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The link's path.
    pub path: String,
    /// What it points at, as written.
    pub target: String,
}

/// What handler-core read of a repository before a guarded start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFacts {
    /// The working tree's top folder (where `.git` is).
    pub root: String,
    /// A main checkout or a linked worktree.
    pub layout: Layout,
    /// The tree's git directory (`<root>/.git`, or `<common>/worktrees/<name>`).
    pub git_dir: String,
    /// The common git directory (holds `objects/`; the git directory for a main checkout).
    pub common_dir: String,
    /// HEAD of the tree.
    pub head: Head,
    /// Symbolic links under the git directory's root, `logs/`, `refs/`, `objects/` and the
    /// worktree's own entry.
    pub links: Vec<Link>,
    /// The text of `objects/info/alternates`, when the file exists.
    pub alternates: Option<String>,
    /// The text of the `shallow` file (a shallow clone), when it exists.
    pub shallow: Option<String>,
    /// `user.name` as the host's git answers it for the tree.
    pub user_name: Option<String>,
    /// `user.email` as the host's git answers it for the tree.
    pub user_email: Option<String>,
}

/// Why a guarded start is refused (A1, exit 64 / 409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// Symbolic links where git writes none: planted or a person's; nothing is removed.
    #[error(
        "the repository's git directory holds symbolic links git never writes, refused until a person looks at them (nothing was removed): {}",
        links.iter().map(|l| format!("{} -> {}", l.path, l.target)).collect::<Vec<_>>().join(", ")
    )]
    Links {
        /// Each link and what it points at.
        links: Vec<Link>,
    },
    /// `objects/info/alternates` names other object folders, which the sandbox would not see.
    #[error(
        "{file} names other object folders ({names}): they are not mounted in a guarded sandbox, whose git would fail on the first object it could not read"
    )]
    Alternates {
        /// The alternates file.
        file: String,
        /// What it names, comma-separated.
        names: String,
    },
    /// A name a git ref cannot have (a session id, a branch from the sandbox).
    #[error("{what} {name:?} cannot be part of a git ref name")]
    RefName {
        /// What was named (`session id`, `branch`).
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A bundle whose header is not git's.
    #[error("the sandbox's bundle is not a git bundle: {0}")]
    Bundle(String),
    /// A folder's `.git` is not what it was when Handler first looked (security F1): it may have
    /// been planted by an agent, whose sandbox can write the folder, so host git never uses it.
    #[error(
        "{path} is {now}, but when Handler first started an agent on this folder it was {first}: an agent may have planted it, so Handler's git will not use it; if you made this change yourself, remove {record} and start again"
    )]
    DotGitChanged {
        /// `<folder>/.git`.
        path: String,
        /// What it was at first sight ([`DotGit::describe`]).
        first: String,
        /// What it is now.
        now: String,
        /// Handler's record of the first sight.
        record: String,
    },
    /// A gitfile naming a git directory that is not a linked worktree of a repository pointing
    /// back at this folder (security F1: `gitdir:` may name any repository on the machine).
    #[error("{path}: {reason}; Handler only follows a gitfile that `git worktree add` made")]
    NotAWorktree {
        /// `<folder>/.git`.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// What a folder's `.git` entry is (security F1): recorded the first time Handler starts an agent
/// on the folder and compared at every later start ([`check_seen`]). `dev`/`ino` are the entry's
/// own (not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DotGit {
    /// No `.git` at all.
    Absent,
    /// A git directory.
    Dir {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
    },
    /// A gitfile (`gitdir: <target>`).
    File {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// The `gitdir:` target as written.
        target: String,
    },
    /// Anything else (a link, a FIFO…): never used.
    Other,
}

impl DotGit {
    /// One line for Handler's record (`absent`, `dir <dev> <ino>`, `file <dev> <ino> <target>`).
    pub fn to_line(&self) -> String {
        match self {
            Self::Absent => "absent".into(),
            Self::Dir { dev, ino } => format!("dir {dev} {ino}"),
            Self::File { dev, ino, target } => format!("file {dev} {ino} {target}"),
            Self::Other => "other".into(),
        }
    }

    /// The record's line read back (`None`: not one [`to_line`](Self::to_line) writes).
    pub fn parse(line: &str) -> Option<Self> {
        let line = line.trim_end_matches('\n');
        let mut it = line.splitn(4, ' ');
        let kind = it.next()?;
        let mut num = || it.next()?.parse::<u64>().ok();
        match kind {
            "absent" if line == "absent" => Some(Self::Absent),
            "other" if line == "other" => Some(Self::Other),
            "dir" => {
                let (dev, ino) = (num()?, num()?);
                (line == format!("dir {dev} {ino}")).then_some(Self::Dir { dev, ino })
            }
            "file" => {
                let (dev, ino) = (num()?, num()?);
                let target = it.next()?.to_string();
                Some(Self::File { dev, ino, target })
            }
            _ => None,
        }
    }

    /// How it reads in a refusal.
    pub fn describe(&self) -> String {
        match self {
            Self::Absent => "absent (no repository)".into(),
            Self::Dir { ino, .. } => format!("a git directory (inode {ino})"),
            Self::File { target, ino, .. } => format!("a gitfile naming {target:?} (inode {ino})"),
            Self::Other => "neither a folder nor a file".into(),
        }
    }
}

/// Security F1: a later start is refused when `<folder>/.git` (`path`) is not what Handler first
/// saw there (`first`, recorded in `record`): it appeared, went from a file to a folder, is
/// another inode, or names another `gitdir:`. Gone since is no repository: nothing to trust.
pub fn check_seen(
    path: &str,
    first: &DotGit,
    now: &DotGit,
    record: &str,
) -> Result<(), GuardError> {
    if first == now || *now == DotGit::Absent {
        return Ok(());
    }
    Err(GuardError::DotGitChanged {
        path: path.to_string(),
        first: first.describe(),
        now: now.describe(),
        record: record.to_string(),
    })
}

/// Security F1: a gitfile at `dot_git` is followed only to a linked worktree's entry —
/// `git_dir` (canonical) is `<common>/worktrees/<name>`, its `commondir` is relative, and its
/// `gitdir` file (`backlink`, canonical) names `dot_git` back — as `git worktree add` makes it.
/// Anything else (`gitdir: /any/other/repo/.git`) is refused.
pub fn check_worktree(
    dot_git: &str,
    git_dir: &str,
    commondir: Option<&str>,
    backlink: Option<&str>,
) -> Result<(), GuardError> {
    let refuse = |reason: String| {
        Err(GuardError::NotAWorktree {
            path: dot_git.to_string(),
            reason,
        })
    };
    let parent = git_dir.rsplit_once('/').map(|(p, _)| p);
    if !parent.is_some_and(|p| p.ends_with("/worktrees")) {
        return refuse(format!("it names {git_dir}, which is no worktree's entry"));
    }
    match commondir {
        None => return refuse(format!("{git_dir} has no commondir")),
        Some(c) if c.starts_with('/') => {
            return refuse(format!("{git_dir}/commondir is absolute ({c})"));
        }
        Some(_) => {}
    }
    match backlink {
        Some(b) if b == dot_git => Ok(()),
        Some(b) => refuse(format!("{git_dir}/gitdir names {b}, not this folder")),
        None => refuse(format!("{git_dir}/gitdir is missing")),
    }
}

/// The refusals before a guarded start (item 4): links, then alternates naming anything.
pub fn check(facts: &RepoFacts) -> Result<(), GuardError> {
    if !facts.links.is_empty() {
        return Err(GuardError::Links {
            links: facts.links.clone(),
        });
    }
    if let Some(text) = &facts.alternates {
        let names: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if !names.is_empty() {
            return Err(GuardError::Alternates {
                file: format!("{}/objects/info/alternates", facts.common_dir),
                names: names.join(", "),
            });
        }
    }
    Ok(())
}

/// The mounts a guarded sandbox gets on top of its scope: the session's git directory
/// (`session_git`, Handler's, writable) over `<root>/.git` — or at [`SANDBOX_GIT_DIR`] with
/// `gitfile` (a file Handler wrote naming it) read-only over `<root>/.git` for a worktree — and
/// the host's `objects/` read-only at [`HOST_OBJECTS`]. Nothing else of the host's git directory.
pub fn mounts(facts: &RepoFacts, session_git: &str, gitfile: &str) -> Vec<Mount> {
    let dot_git = format!("{}/.git", facts.root);
    let mut out = Vec::new();
    match facts.layout {
        Layout::Main => out.push(mount(session_git, &dot_git, false)),
        Layout::Worktree => {
            out.push(mount(session_git, SANDBOX_GIT_DIR, false));
            out.push(mount(gitfile, &dot_git, true));
        }
    }
    out.push(mount(
        &format!("{}/objects", facts.common_dir),
        HOST_OBJECTS,
        true,
    ));
    out
}

fn mount(source: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        source: source.to_string(),
        target: target.to_string(),
        read_only,
        kind: MountKind::State,
    }
}

/// The files a session's git directory starts with (paths relative to it, contents), and the
/// commit its index is read from (by `git read-tree`, on Handler's own fresh directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// Relative path → content, written in this order (folders created as needed).
    pub files: Vec<(String, String)>,
    /// The commit the index is read from; `None` for a branch with no commit.
    pub index_from: Option<String>,
}

/// What the session's git directory holds at start: HEAD on the tree's branch (or detached) at
/// the tree's commit, alternates naming [`HOST_OBJECTS`], the host's `shallow` file, and a config
/// with only `user.name`/`user.email` — no remote, hook path, include or filter.
pub fn seed(facts: &RepoFacts) -> Seed {
    let mut files = Vec::new();
    let mut config = String::from(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
    );
    if facts.user_name.is_some() || facts.user_email.is_some() {
        config.push_str("[user]\n");
        for (k, v) in [("name", &facts.user_name), ("email", &facts.user_email)] {
            if let Some(v) = v {
                config.push_str(&format!("\t{k} = {}\n", quote(v)));
            }
        }
    }
    let (head, index_from) = match &facts.head {
        Head::Branch { name, commit } => {
            if let Some(c) = commit {
                files.push((format!("refs/heads/{name}"), format!("{c}\n")));
            }
            (format!("ref: refs/heads/{name}\n"), commit.clone())
        }
        Head::Detached { commit } => (format!("{commit}\n"), Some(commit.clone())),
    };
    files.push(("HEAD".into(), head));
    files.push(("config".into(), config));
    files.push((
        "objects/info/alternates".into(),
        format!("{HOST_OBJECTS}\n"),
    ));
    if let Some(s) = &facts.shallow {
        files.push(("shallow".into(), s.clone()));
    }
    Seed { files, index_from }
}

/// A git config value, quoted, with `\` `"` and newlines escaped.
fn quote(v: &str) -> String {
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The gitfile Handler binds read-only over a worktree's `<root>/.git`.
pub fn gitfile() -> String {
    format!("gitdir: {SANDBOX_GIT_DIR}\n")
}

/// `git` with [`HOST_GIT_SAFETY`] before `args`: every git command Handler runs on the host.
pub fn host_git(args: &[&str]) -> Vec<String> {
    HOST_GIT_SAFETY
        .iter()
        .chain(args)
        .map(|s| (*s).to_string())
        .collect()
}

/// The git argv run in the bring-back's helper container: a bundle of every branch of the
/// session's git directory, to stdout, without the commits the host already has (`known`).
pub fn bundle_argv(known: &[String]) -> Vec<String> {
    let mut a = vec!["git".to_string()];
    a.extend(HOST_GIT_SAFETY.iter().map(|s| (*s).to_string()));
    for s in [
        "--git-dir",
        SANDBOX_GIT_DIR,
        "bundle",
        "create",
        "-q",
        "-",
        "--branches",
    ] {
        a.push(s.to_string());
    }
    if !known.is_empty() {
        a.push("--not".into());
        a.extend(known.iter().cloned());
    }
    a
}

/// A git bundle's header: the commits it needs, the refs it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleHeader {
    /// Prerequisite commits (the host must have them).
    pub prerequisites: Vec<String>,
    /// Branch short name → commit, for every `refs/heads/…` the bundle holds.
    pub branches: Vec<(String, String)>,
}

/// Reads a v2/v3 bundle's header (the text before the pack). Branch names are checked as ref
/// components (they come from the sandbox); refs other than branches are ignored.
pub fn parse_bundle_header(bytes: &[u8]) -> Result<BundleHeader, GuardError> {
    let bad = |m: &str| GuardError::Bundle(m.to_string());
    let end = bytes
        .windows(2)
        .position(|w| w == b"\n\n")
        .ok_or_else(|| bad("no end of header"))?;
    let text = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("header is not UTF-8"))?;
    let mut lines = text.lines();
    match lines.next() {
        Some("# v2 git bundle" | "# v3 git bundle") => {}
        _ => return Err(bad("no bundle signature")),
    }
    let mut h = BundleHeader {
        prerequisites: Vec::new(),
        branches: Vec::new(),
    };
    for line in lines {
        if line.starts_with('@') {
            continue; // v3 capabilities
        }
        if let Some(rest) = line.strip_prefix('-') {
            let oid = rest.split(' ').next().unwrap_or_default();
            h.prerequisites.push(check_oid(oid)?.to_string());
            continue;
        }
        let (oid, name) = line
            .split_once(' ')
            .ok_or_else(|| bad("a ref line without a name"))?;
        if let Some(branch) = name.strip_prefix("refs/heads/") {
            check_ref_name("branch", branch)?;
            h.branches
                .push((branch.to_string(), check_oid(oid)?.to_string()));
        }
    }
    Ok(h)
}

/// An object id (40 or 64 hex digits), else refused.
pub fn check_oid(oid: &str) -> Result<&str, GuardError> {
    let ok = matches!(oid.len(), 40 | 64) && oid.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then_some(oid)
        .ok_or_else(|| GuardError::Bundle(format!("{oid:?} is not an object id")))
}

/// A name that may be put under `refs/` (a subset of `git check-ref-format`: components not
/// empty, not starting with `.` nor ending with `.lock`; no `..`, `@{`, space, control
/// characters, `~^:?*[\`).
pub fn check_ref_name(what: &'static str, name: &str) -> Result<(), GuardError> {
    let bad_char = |c: char| c.is_control() || " ~^:?*[\\".contains(c);
    let ok = !name.is_empty()
        && !name.contains("..")
        && !name.contains("@{")
        && name != "@"
        && !name.ends_with('.')
        && !name.chars().any(bad_char)
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"));
    ok.then_some(()).ok_or_else(|| GuardError::RefName {
        what,
        name: name.to_string(),
    })
}

/// The first component of the one ref in a session's hidden namespace that is no branch's:
/// `refs/handler/sessions/<session>/uncommitted`, a copy's uncommitted work at its end
/// (decision 0103). [`hidden_ref`] keeps every branch off it.
pub const UNCOMMITTED: &str = "uncommitted";

/// The hidden ref a session's branch comes back to: `refs/handler/sessions/<session>/<branch>`,
/// except that a branch whose first component is `uncommitted` followed by any number of `_`
/// gets one `_` more there (`uncommitted` → `uncommitted_`, `uncommitted_/x` →
/// `uncommitted__/x`): one-to-one, and no branch's hidden ref is, or is a folder of, the
/// uncommitted ref.
pub fn hidden_ref(session: &str, branch: &str) -> Result<String, GuardError> {
    check_ref_name("session id", session)?;
    check_ref_name("branch", branch)?;
    let (first, rest) = match branch.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (branch, None),
    };
    let escaped = first
        .strip_prefix(UNCOMMITTED)
        .is_some_and(|t| t.bytes().all(|b| b == b'_'));
    let first = if escaped {
        format!("{first}_")
    } else {
        first.to_string()
    };
    Ok(match rest {
        Some(r) => format!("refs/handler/sessions/{session}/{first}/{r}"),
        None => format!("refs/handler/sessions/{session}/{first}"),
    })
}

/// The host's `git fetch` of a bundle of `branches` into the session's hidden refs
/// ([`hidden_ref`], one refspec each), objects checked.
pub fn fetch_argv(
    bundle: &str,
    session: &str,
    branches: &[String],
) -> Result<Vec<String>, GuardError> {
    check_ref_name("session id", session)?;
    let mut argv: Vec<String> = [
        "-c",
        "transfer.fsckObjects=true",
        "-c",
        "fetch.fsckObjects=true",
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        bundle,
    ]
    .map(String::from)
    .to_vec();
    for b in branches {
        argv.push(format!("+refs/heads/{b}:{}", hidden_ref(session, b)?));
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Ok(host_git(&argv))
}

/// What the host knows of a branch that came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBranch {
    /// The host branch's commit.
    pub commit: String,
    /// The host's commit is an ancestor of the fetched one (a fast-forward).
    pub ancestor_of_fetched: bool,
}

/// What happens to one branch after the fetch (item 2), under `shared` ([`decide`]) and
/// `copy` (`copytree::decide`) alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The host branch is already there.
    Unchanged,
    /// Fast-forward the host branch; `reset_index` when it is the tree's HEAD (the tree already
    /// holds the files: only the ref and the index move, `git reset -q`).
    FastForward {
        /// The branch is checked out in the tree.
        reset_index: bool,
    },
    /// The host has no branch of that name: create it at the fetched commit.
    Create,
    /// Under `sessionTree = "copy"` only (`copytree::decide`), the host tree's own branch:
    /// `git merge --ff-only` of the hidden ref, since the tree does not hold the agent's files.
    MergeFfOnly,
    /// The work waits under the hidden ref; why, for the session's log.
    Wait {
        /// Why it was not moved.
        reason: String,
    },
}

/// The decision for branch `name` fetched at `fetched`: fast-forward when that is one and,
/// for the tree's own branch (`head`), nothing is staged; create when the host has none; else
/// wait. Nothing is lost, nothing overwritten.
pub fn decide(
    name: &str,
    fetched: &str,
    host: Option<&HostBranch>,
    head: Option<&str>,
    staged: bool,
) -> Action {
    let Some(h) = host else {
        return Action::Create;
    };
    if h.commit == fetched {
        return Action::Unchanged;
    }
    if !h.ancestor_of_fetched {
        return Action::Wait {
            reason: format!(
                "the host's {name} moved to {} meanwhile: not a fast-forward",
                short(&h.commit)
            ),
        };
    }
    let checked_out = head == Some(name);
    if checked_out && staged {
        return Action::Wait {
            reason: format!("{name} is checked out with staged changes"),
        };
    }
    Action::FastForward {
        reset_index: checked_out,
    }
}

fn short(oid: &str) -> &str {
    oid.get(..12).unwrap_or(oid)
}

/// What the sandbox's repository and the host say before a turn, for follow (item 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowFacts {
    /// The sandbox's HEAD branch and its commit (`None`: detached or no commit).
    pub sandbox: Option<(String, String)>,
    /// That branch's commit as last fetched by the host (its hidden ref), if any.
    pub fetched: Option<String>,
    /// The commit the sandbox was seeded or last followed at.
    pub seeded: String,
    /// The host's branch of that name now.
    pub host: Option<String>,
    /// The host's commit leads on from the sandbox's (the sandbox's is its ancestor).
    pub host_leads_on: bool,
}

/// Follow's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Follow {
    /// Nothing to hand over.
    Nothing,
    /// `update-ref` the branch to the commit and `reset -q` in the sandbox.
    To(String),
    /// The sandbox keeps working where it is; why, for the log.
    Keep(String),
}

/// Follow's condition: the host's branch moved on from the sandbox's commit, and the sandbox
/// holds nothing the host has not fetched (its commit is the seeded one or the fetched one).
pub fn follow(f: &FollowFacts) -> Follow {
    let Some((branch, at)) = &f.sandbox else {
        return Follow::Nothing;
    };
    let Some(host) = &f.host else {
        return Follow::Nothing;
    };
    if host == at {
        return Follow::Nothing;
    }
    let known = *at == f.seeded || f.fetched.as_deref() == Some(at.as_str());
    if !known {
        return Follow::Keep(format!(
            "the sandbox's {branch} is at {}, which the host has not fetched",
            short(at)
        ));
    }
    if !f.host_leads_on {
        return Follow::Keep(format!(
            "the host's {branch} at {} does not lead on from the sandbox's {}",
            short(host),
            short(at)
        ));
    }
    Follow::To(host.clone())
}

/// The engine argv (after the program) of the bring-back's helper container: `image` run once,
/// removed after, no network, read-only root, every capability dropped, as the sandbox's user,
/// with the session's git directory and the host's objects both read-only at the sandbox's
/// paths; the bundle comes out on its stdout ([`bundle_argv`]). Refused as the sandbox would be
/// (a rootful Docker without the opt-in).
pub fn helper_run_args(
    engine: crate::plan::Engine<'_>,
    ids: (u32, u32),
    (name, launcher): (&str, &crate::facts::LauncherId),
    image: &str,
    session_git: &str,
    host_objects: &str,
    known: &[String],
) -> Result<Vec<String>, crate::SpecError> {
    let h = Helper {
        image,
        session_git,
        host_objects,
        git_dir_writable: false,
        name,
        launcher,
    };
    helper_args(engine, ids, &h, bundle_argv(known))
}

/// A helper container on a session's git directory (bring-back, follow).
#[derive(Debug, Clone, Copy)]
pub struct Helper<'a> {
    /// The sandbox's image.
    pub image: &'a str,
    /// The session's git directory on the host.
    pub session_git: &'a str,
    /// The host repository's `objects/`.
    pub host_objects: &'a str,
    /// Whether the session's git directory is writable in it (follow moves a ref).
    pub git_dir_writable: bool,
    /// The container's name (the runtime removes it by name when its deadline passes).
    pub name: &'a str,
    /// The runtime process that runs it: its labels let `sweep` remove a helper whose
    /// runtime died, like a sandbox (security F4).
    pub launcher: &'a crate::facts::LauncherId,
}

/// The engine argv of a helper container running `argv` (see [`helper_run_args`]); the host's
/// objects are always read-only.
pub fn helper_args(
    engine: crate::plan::Engine<'_>,
    ids: (u32, u32),
    h: &Helper<'_>,
    argv: Vec<String>,
) -> Result<Vec<String>, crate::SpecError> {
    let mut a: Vec<String> = [
        "run",
        "--rm",
        "--pull=never",
        "--network=none",
        "--read-only",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--label=handler.git-bundle=1",
    ]
    .map(String::from)
    .to_vec();
    if !crate::validate::is_sandbox_name(h.name) {
        return Err(crate::SpecError::invalid(
            "git-bundle",
            format!("{:?} is not a container name", h.name),
        ));
    }
    a.push(format!("--name={}", h.name));
    let l = h.launcher;
    for (k, v) in [
        (crate::plan::labels::LAUNCHER_PID, l.pid.to_string()),
        (crate::plan::labels::LAUNCHER_START, l.start.to_string()),
        (crate::plan::labels::LAUNCHER_BOOT, l.boot.clone()),
    ] {
        a.push(format!("--label={k}={v}"));
    }
    a.extend(crate::plan::engine::user_args_of(engine, ids)?);
    a.extend(crate::plan::engine::no_entrypoint(engine).map(String::from));
    for (source, target, ro) in [
        (h.session_git, SANDBOX_GIT_DIR, !h.git_dir_writable),
        (h.host_objects, HOST_OBJECTS, true),
    ] {
        if !source.starts_with('/') || source.contains(',') || source.contains('\n') {
            return Err(crate::SpecError::invalid(
                "git-bundle",
                format!("{source:?} is not an absolute path a mount option can carry"),
            ));
        }
        a.push("--mount".into());
        a.push(format!(
            "type=bind,source={source},destination={target},ro={ro}"
        ));
    }
    a.push(h.image.into());
    a.extend(argv);
    Ok(a)
}

/// Follow's two git commands in a helper container on the session's git directory (writable):
/// move `branch` from `from` to `to` (compare-and-swap), then read the index from `to` (what
/// `reset -q` does to the index; the tree is the host's and already holds `to`'s files).
pub fn follow_argvs(branch: &str, from: &str, to: &str) -> Result<[Vec<String>; 2], GuardError> {
    check_ref_name("branch", branch)?;
    check_oid(from)?;
    check_oid(to)?;
    let git = |rest: &[&str]| {
        let mut a = vec!["git".to_string()];
        a.extend(HOST_GIT_SAFETY.iter().map(|s| (*s).to_string()));
        a.extend(["--git-dir", SANDBOX_GIT_DIR].map(String::from));
        a.extend(rest.iter().map(|s| (*s).to_string()));
        a
    };
    Ok([
        git(&["update-ref", &format!("refs/heads/{branch}"), to, from]),
        git(&["read-tree", to]),
    ])
}
