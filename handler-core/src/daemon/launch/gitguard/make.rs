//! Making what the plan names: the session's own git directory (seeded from the host's) or,
//! under `sessionTree = "copy"`, the checkout with its `.git` inside.

use std::fs;
use std::path::{Path, PathBuf};

use handler_sandbox::copytree;
use handler_sandbox::guard::{self, Head, RepoFacts};
use handler_sandbox::verbs;

use super::git::git;
use super::{GitGuardError, Guarded, Result, TREE_SCOPE, append, blocking, helper_error, io};
use crate::daemon::fsutil;
use crate::daemon::launch::launcher::Launcher;

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
    launcher
        .git_copy(&copy)
        .await
        .map_err(|e| helper_error(e, image, &new.join(".git")))
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
