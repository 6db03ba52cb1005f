//! Bringing work back: the bundle of the session's git directory from the runtime's helper
//! container, fetched with objects checked into the hidden refs, each branch then moved as the
//! guard (or, under copy, `copytree`) decides, and each bring-back's lines logged.

use std::fs;

use handler_sandbox::copytree;
use handler_sandbox::guard::{self, Action, RepoFacts};
use handler_sandbox::verbs;

use super::git::{git, git_output};
use super::{
    GitGuardError, GuardSession, Guarded, NOTHING_NEW, Result, TREE_SCOPE, append, blocking,
    helper_error, io,
};
use crate::daemon::fsutil;
use crate::daemon::launch::launcher::{Launcher, LauncherError};

/// The branch of a copy's checkout that carries its uncommitted work at the end
/// (`copytree::uncommitted_script`); kept on the host at `copytree::uncommitted_ref`.
const UNCOMMITTED_BRANCH: &str = "handler-uncommitted";

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
        Err(e) => return Err(helper_error(e, image, &g.git_dir())),
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

impl GuardSession {
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
