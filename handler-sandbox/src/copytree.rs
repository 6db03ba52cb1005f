//! The git guard's `sessionTree = "copy"` decisions (issue 14, last item; decision 0103): the
//! sandbox gets, at the scope's own path, a checkout Handler keeps in the session's (or
//! connection's) folder — working tree and `.git` together — and nothing of the host's tree.
//! What refuses it ([`check`]), what to mount ([`mounts`]), how the checkout is made
//! ([`checkout_argvs`]), how the host's tree takes the work back ([`decide`],
//! [`merge_argv`]) and where uncommitted work is kept ([`uncommitted_ref`],
//! [`uncommitted_script`]). Pure: handler-core runs git and the helper container.

use handler_contracts::sandbox::{Mount, MountKind};

use crate::guard::{self, Action, GuardError, HOST_OBJECTS, HostBranch, RepoFacts};

/// The agent option `sessionTree`: what the sandbox sees at the scope's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionTree {
    /// The host's tree is bound (the default; the guard gives only the git directory).
    #[default]
    Shared,
    /// A checkout of Handler's own, kept in the session's (or connection's) folder.
    Copy,
}

/// Why `sessionTree` is refused (400 at save, 409 at start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// A value `sessionTree` cannot have.
    #[error("sessionTree: {0:?} is not one of \"shared\", \"copy\"")]
    Value(String),
    /// The scope is not in a git repository: there is nothing to check out.
    #[error(
        "sessionTree: \"copy\" needs the scope {scope} to be in a git repository, and it is not"
    )]
    NotARepository {
        /// The scope's path.
        scope: String,
    },
    /// The repository has no commit to check out.
    #[error("sessionTree: \"copy\" needs a commit to check out, and {root} has none yet")]
    NoCommit {
        /// The repository's root.
        root: String,
    },
    /// A guard refusal (links, alternates, a ref name).
    #[error("sessionTree: {0}")]
    Guard(#[from] GuardError),
}

impl SessionTree {
    /// Parses the option's value (`shared`, `copy`); an absent option is [`SessionTree::Shared`].
    pub fn parse(value: Option<&str>) -> Result<Self, CopyError> {
        match value {
            None | Some("shared") => Ok(Self::Shared),
            Some("copy") => Ok(Self::Copy),
            Some(other) => Err(CopyError::Value(other.to_string())),
        }
    }
}

/// The refusals before a copy start: the scope must be in a repository (`facts`), the tree at a
/// commit, and the guard's own refusals hold. Returns the commit the copy is reset to.
pub fn check<'a>(scope: &str, facts: Option<&'a RepoFacts>) -> Result<&'a str, CopyError> {
    let facts = facts.ok_or_else(|| CopyError::NotARepository {
        scope: scope.to_string(),
    })?;
    guard::check(facts)?;
    head_commit(facts).ok_or_else(|| CopyError::NoCommit {
        root: facts.root.clone(),
    })
}

fn head_commit(facts: &RepoFacts) -> Option<&str> {
    match &facts.head {
        guard::Head::Branch { commit, .. } => commit.as_deref(),
        guard::Head::Detached { commit } => Some(commit),
    }
}

/// The scope's path below the repository's root, `""` at the root itself; `None` when `scope`
/// is not the root nor inside it (or names `.`/`..`/an empty component on the way).
pub fn scope_below_root(facts: &RepoFacts, scope: &str) -> Option<String> {
    let root = facts.root.trim_end_matches('/');
    let scope = scope.trim_end_matches('/');
    if scope == root {
        return Some(String::new());
    }
    let rel = scope.strip_prefix(root)?.strip_prefix('/')?;
    rel.split('/')
        .all(|c| !c.is_empty() && c != "." && c != "..")
        .then(|| rel.to_string())
}

/// The mounts a copy sandbox gets in place of its scope (`scope`, at or below the
/// repository's root): the checkout (`checkout`, Handler's folder, writable; its `.git` inside
/// it) at the repository's root — or, for a scope below it, only the checkout's part at the
/// scope's path and the checkout's `.git` at `<root>/.git` (the checkout is sparse: [`sparse`])
/// — and the host's `objects/` read-only at [`HOST_OBJECTS`]. The caller binds nothing of the
/// host's tree. `None` when the scope is not in the repository.
pub fn mounts(facts: &RepoFacts, checkout: &str, scope: &str) -> Option<Vec<Mount>> {
    let rel = scope_below_root(facts, scope)?;
    let rw = |source: String, target: String| Mount {
        source,
        target,
        read_only: false,
        kind: MountKind::State,
    };
    let mut out = if rel.is_empty() {
        // The checkout's `.git` bound again over itself: a mount point the agent can neither
        // remove nor swap for a link, so the helper containers that bind it later bind
        // Handler's folder (security F8).
        vec![
            rw(checkout.to_string(), facts.root.clone()),
            rw(format!("{checkout}/.git"), format!("{}/.git", facts.root)),
        ]
    } else {
        vec![
            rw(format!("{checkout}/{rel}"), scope.to_string()),
            rw(format!("{checkout}/.git"), format!("{}/.git", facts.root)),
        ]
    };
    out.push(Mount {
        source: format!("{}/objects", facts.common_dir),
        target: HOST_OBJECTS.to_string(),
        read_only: true,
        kind: MountKind::State,
    });
    Some(out)
}

/// The environment a copy sandbox of a scope below the root gets, so its git finds the
/// checkout's `.git` at `root`: across the scope's mount (git stops at a filesystem boundary
/// otherwise), and `root` a safe directory (in the sandbox it is a folder the runtime made, not
/// the user's; git's command-line config, the only kind besides the user's own it takes this
/// from).
pub fn below_root_env(root: &str) -> Vec<(String, String)> {
    [
        ("GIT_DISCOVERY_ACROSS_FILESYSTEM", "1"),
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "safe.directory"),
        ("GIT_CONFIG_VALUE_0", root),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec()
}

/// For a scope `rel` below the repository's root: the checkout's `info/sparse-checkout` (one
/// pattern, the scope's folder, git's pattern characters escaped) and the config lines that turn
/// it on, so `reset --hard` writes only the scope's files, the others stay in the index
/// (skip-worktree) and no commit of the agent's deletes them. `None` at the root.
pub fn sparse(rel: &str) -> Option<(String, &'static str)> {
    if rel.is_empty() {
        return None;
    }
    let mut pattern = String::from("/");
    for c in rel.chars() {
        if "\\*?[]!# ".contains(c) {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("/\n");
    Some((pattern, "[core]\n\tsparseCheckout = true\n"))
}

/// The git commands (argv, host safety options first) that make the checkout once
/// [`guard::seed`]'s files are written to `<checkout>/.git`. Its alternates name
/// [`HOST_OBJECTS`], so the reset runs where that is mounted (the helper container), or on the
/// host with `GIT_ALTERNATE_OBJECT_DIRECTORIES=<common>/objects`. `reset --hard` writes only
/// tracked files, so no git-ignored file (`.env`, `node_modules`) is in the copy.
pub fn checkout_argvs(checkout: &str, commit: &str) -> Vec<Vec<String>> {
    vec![guard::host_git(&[
        "-C", checkout, "reset", "--quiet", "--hard", commit,
    ])]
}

/// What the host knows of the tree's own branch when work comes back under copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFacts {
    /// The branch checked out in the host's tree (`None`: detached).
    pub head: Option<String>,
    /// Paths the host's tree has changed, staged or not, against its HEAD.
    pub host_changed: Vec<String>,
    /// Paths the fetched commits write, against the host branch's commit.
    pub agent_writes: Vec<String>,
    /// The sandbox's scope below the repository's root (`""`: the root): a commit writing
    /// outside it waits (decision 0121).
    pub scope: String,
}

/// The decision for branch `name` fetched at `fetched` under copy: a fast-forward moves the
/// host, by `merge --ff-only` when the branch is the host tree's HEAD — unless the host changed
/// a file the agent's commits write, or they write outside a scope below the root, then (as
/// when it is no fast-forward) the work waits. A branch the host has none of is made as is.
pub fn decide(name: &str, fetched: &str, host: Option<&HostBranch>, tree: &TreeFacts) -> Action {
    // The guard's own decision first (nothing staged counts here: `merge --ff-only` keeps it).
    match guard::decide(name, fetched, host, tree.head.as_deref(), false) {
        Action::FastForward { .. } => {}
        other => return other,
    }
    if !tree.scope.is_empty() {
        let inside = format!("{}/", tree.scope);
        let outside: Vec<&str> = tree
            .agent_writes
            .iter()
            .filter(|p| !p.starts_with(&inside))
            .map(String::as_str)
            .collect();
        if !outside.is_empty() {
            return Action::Wait {
                reason: format!(
                    "the agent's commit writes {} outside its scope {}: the work waits",
                    outside.join(", "),
                    tree.scope
                ),
            };
        }
    }
    if tree.head.as_deref() != Some(name) {
        return Action::FastForward { reset_index: false };
    }
    let both: Vec<&str> = tree
        .agent_writes
        .iter()
        .filter(|p| tree.host_changed.contains(p))
        .map(String::as_str)
        .collect();
    if both.is_empty() {
        Action::MergeFfOnly
    } else {
        Action::Wait {
            reason: format!(
                "the host changed {} which the agent's commit writes: kept, the work waits",
                both.join(", ")
            ),
        }
    }
}

/// The host's `merge --ff-only` of the session's hidden ref for `branch` into its tree (`root`);
/// git itself refuses to overwrite a local change, a second guard behind [`decide`].
pub fn merge_argv(root: &str, session: &str, branch: &str) -> Result<Vec<String>, GuardError> {
    let hidden = guard::hidden_ref(session, branch)?;
    Ok(guard::host_git(&[
        "-C",
        root,
        "merge",
        "--quiet",
        "--ff-only",
        "--no-edit",
        &hidden,
    ]))
}

/// The host ref where a session's (or connection's) uncommitted work is kept at its end:
/// `refs/handler/sessions/<session>/uncommitted`, in the session's own namespace, where
/// [`guard::hidden_ref`] puts no branch (a branch named `uncommitted` comes back to
/// `…/uncommitted_`).
pub fn uncommitted_ref(session: &str) -> Result<String, GuardError> {
    guard::check_ref_name("session id", session)?;
    Ok(format!(
        "refs/handler/sessions/{session}/{}",
        guard::UNCOMMITTED
    ))
}

/// The shell script the helper container (which already reads the copy's git directory) runs
/// to commit the copy's working tree — tracked and untracked, not ignored — with a throwaway
/// index in its git directory (the helper's root and `/tmp` are not writable), a copy of the
/// checkout's own (so a sparse checkout's files outside the scope stay in the commit), under
/// `refs/heads/handler-uncommitted` of the copy so the bundle carries it. Prints
/// nothing and changes nothing when the tree is clean. The host's git never runs on the
/// agent's folder (F.8).
pub fn uncommitted_script(tree: &str) -> String {
    let safety = guard::HOST_GIT_SAFETY.join(" ");
    let tree = tree.replace('\'', "'\\''");
    format!(
        "set -eu\ncd '{tree}'\ng() {{ git {safety} \"$@\"; }}\n\
         [ -z \"$(g status --porcelain --untracked-files=all)\" ] && exit 0\n\
         d=\"$(g rev-parse --absolute-git-dir)\"\n\
         export GIT_INDEX_FILE=\"$d/handler-uncommitted.index\"\n\
         if [ -f \"$d/index\" ]; then cp \"$d/index\" \"$GIT_INDEX_FILE\"; else g read-tree HEAD; fi\n\
         g add -A\n\
         t=$(g write-tree)\n\
         c=$(g -c user.name=Handler -c user.email=handler@localhost commit-tree -p HEAD -m 'uncommitted work at the end of the session' \"$t\")\n\
         g update-ref refs/heads/handler-uncommitted \"$c\"\nrm -f \"$GIT_INDEX_FILE\"\n"
    )
}
