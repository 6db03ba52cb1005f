//! The git guard's `sessionTree = "copy"` decisions (issue 14, last item; decision 0103): the
//! sandbox gets, at the scope's own path, a checkout Handler keeps in the session's (or
//! connection's) folder — working tree and `.git` together — and nothing of the host's tree.
//! What refuses it ([`check`]), what to mount ([`mounts`]), how the checkout is made
//! ([`checkout_argvs`]), how the host's tree takes the work back ([`decide`],
//! [`merge_argv`]) and where uncommitted work is kept ([`uncommitted_ref`],
//! [`uncommitted_script`]). Pure: handler-core runs git and the helper container.

use handler_contracts::sandbox::{Mount, MountKind};

use crate::guard::{self, GuardError, HOST_OBJECTS, HostBranch, RepoFacts};

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

/// The mounts a copy sandbox gets in place of its scope: the checkout (`checkout`, Handler's
/// folder, writable; its `.git` inside it) at the repository's root, and the host's `objects/`
/// read-only at [`HOST_OBJECTS`]. The caller binds nothing of the host's tree.
pub fn mounts(facts: &RepoFacts, checkout: &str) -> Vec<Mount> {
    vec![
        Mount {
            source: checkout.to_string(),
            target: facts.root.clone(),
            read_only: false,
            kind: MountKind::State,
        },
        Mount {
            source: format!("{}/objects", facts.common_dir),
            target: HOST_OBJECTS.to_string(),
            read_only: true,
            kind: MountKind::State,
        },
    ]
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
}

/// What happens to one branch that came back under copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyAction {
    /// The host branch is already there.
    Unchanged,
    /// The host has no branch of that name: create it at the fetched commit.
    Create,
    /// Move the ref only: the branch is not checked out in the host's tree.
    MoveRef,
    /// `git merge --ff-only` the hidden ref into the host's tree (its checked-out branch).
    MergeFfOnly,
    /// The work waits under the hidden ref; why, for the session's log.
    Wait {
        /// Why it was not moved.
        reason: String,
    },
}

/// The decision for branch `name` fetched at `fetched` under copy: a fast-forward moves the
/// host, by `merge --ff-only` when the branch is the host tree's HEAD — unless the host changed
/// a file the agent's commits write, then (as when it is no fast-forward) the work waits.
pub fn decide(
    name: &str,
    fetched: &str,
    host: Option<&HostBranch>,
    tree: &TreeFacts,
) -> CopyAction {
    let Some(h) = host else {
        return CopyAction::Create;
    };
    if h.commit == fetched {
        return CopyAction::Unchanged;
    }
    if !h.ancestor_of_fetched {
        return CopyAction::Wait {
            reason: format!("the host's {name} moved meanwhile: not a fast-forward"),
        };
    }
    if tree.head.as_deref() != Some(name) {
        return CopyAction::MoveRef;
    }
    let both: Vec<&str> = tree
        .agent_writes
        .iter()
        .filter(|p| tree.host_changed.contains(p))
        .map(String::as_str)
        .collect();
    if both.is_empty() {
        CopyAction::MergeFfOnly
    } else {
        CopyAction::Wait {
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

/// The host ref where a session's (or connection's) uncommitted work is kept at its end. Under
/// `refs/handler/uncommitted/`, not the session's branch namespace, where a branch named
/// `uncommitted` would collide.
pub fn uncommitted_ref(session: &str) -> Result<String, GuardError> {
    guard::check_ref_name("session id", session)?;
    Ok(format!("refs/handler/uncommitted/{session}/uncommitted"))
}

/// The shell script the helper container (which already reads the copy's git directory) runs
/// to commit the copy's working tree — tracked and untracked, not ignored — with a throwaway
/// index in its git directory (the helper's root and `/tmp` are not writable), under `refs/heads/handler-uncommitted` of the copy so the bundle carries it. Prints
/// nothing and changes nothing when the tree is clean. The host's git never runs on the
/// agent's folder (F.8).
pub fn uncommitted_script(tree: &str) -> String {
    let safety = guard::HOST_GIT_SAFETY.join(" ");
    let tree = tree.replace('\'', "'\\''");
    format!(
        "set -eu\ncd '{tree}'\ng() {{ git {safety} \"$@\"; }}\n\
         [ -z \"$(g status --porcelain --untracked-files=all)\" ] && exit 0\n\
         export GIT_INDEX_FILE=\"$(g rev-parse --absolute-git-dir)/handler-uncommitted.index\"\n\
         g read-tree HEAD\ng add -A\n\
         t=$(g write-tree)\n\
         c=$(g -c user.name=Handler -c user.email=handler@localhost commit-tree -p HEAD -m 'uncommitted work at the end of the session' \"$t\")\n\
         g update-ref refs/heads/handler-uncommitted \"$c\"\nrm -f \"$GIT_INDEX_FILE\"\n"
    )
}
