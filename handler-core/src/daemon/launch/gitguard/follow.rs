//! Follow before a turn: a commit made on the host's branch of the sandbox's HEAD handed to
//! the sandbox, where nothing of the sandbox's would be lost.

use handler_sandbox::guard::{self, Head};
use handler_sandbox::verbs;

use super::git::{git, git_output};
use super::read::read_head;
use super::{GuardSession, Guarded, Result, append, blocking, helper_error, io};
use crate::daemon::fsutil;
use crate::daemon::launch::launcher::Launcher;

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
            moved.map_err(|e| helper_error(e, image, &g.git_dir()))?;
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
