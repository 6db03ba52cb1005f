//! The toolbox's base before its build (B.6, decisions 0073–0074): the image its `FROM` names is
//! pulled when a registry may serve it, and [`base::plan`] decides; a Debian base nobody can
//! pull is made by the runtime's `image base` (debootstrap) as `localhost/handler-debian-base:
//! <suite>` — or taken when an earlier build made it — and the build goes FROM it, saying so in
//! its log.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::Notify;

use super::job::log_line;
use super::{base, ca, verbs};
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::{BaseArgs, ImageError};
use crate::daemon::state::AppState;

/// How the toolbox build starts FROM its base.
#[derive(Debug, Default)]
pub struct Start {
    /// Build arguments to add (`BASE_IMAGE=<local base>`).
    pub build_args: Vec<String>,
    /// A Containerfile to build instead of the toolbox's (its `FROM` replaced).
    pub file: Option<String>,
}

/// Why the base could not be had.
#[derive(Debug)]
pub enum NoBase {
    /// Cancelled meanwhile.
    Cancelled,
    /// The reason.
    Failed(String),
}

/// The last line of a verb's reason (podman's own words).
fn short(e: &ImageError) -> String {
    match e {
        ImageError::Failed { reason, .. } => reason
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed")
            .trim()
            .to_string(),
        e => e.to_string(),
    }
}

/// Pulls the toolbox's `FROM` and makes its local base when needed; how the build starts.
pub async fn prepare(
    app: &AppState,
    id: &str,
    work: &Path,
    cancel: &Arc<Notify>,
) -> Result<Start, NoBase> {
    let file = app.config.toolbox_dir.join("Containerfile");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| NoBase::Failed(format!("{}: {e}", file.display())))?;
    let Some(from) = base::from_image(&text, &BTreeMap::new()) else {
        return Ok(Start::default());
    };
    let v = verbs(app);
    let present = v.exists(&from).await == Some(true);
    let pull = if base::pullable(&from) {
        log_line(app, id, &format!("pulling {from}"));
        match v
            .pull(&from, |l| log_line(app, id, &l), cancel.clone())
            .await
        {
            Ok(_) => base::Pull::Pulled,
            Err(ImageError::Cancelled) => return Err(NoBase::Cancelled),
            Err(e) => base::Pull::Failed(short(&e)),
        }
    } else {
        base::Pull::NotTried
    };
    match base::plan(&from, present, &pull) {
        base::Plan::Build { log } => {
            if let Some(l) = log {
                log_line(app, id, &l);
            }
            Ok(Start::default())
        }
        base::Plan::Fail(m) => Err(NoBase::Failed(m)),
        base::Plan::Debootstrap {
            suite,
            image,
            build_arg,
            log,
        } => {
            log_line(app, id, &log);
            make(app, id, &suite, &image, cancel).await?;
            start(&text, &image, &build_arg, work)
        }
    }
}

/// The local base `image` made by debootstrap of `suite`, unless an earlier build made it.
async fn make(
    app: &AppState,
    id: &str,
    suite: &str,
    image: &str,
    cancel: &Arc<Notify>,
) -> Result<(), NoBase> {
    let v = verbs(app);
    if v.exists(image).await == Some(true) {
        log_line(
            app,
            id,
            &format!("{image} is there (made by an earlier build): used"),
        );
        return Ok(());
    }
    super::job::stage(app, id, &format!("make base {image}"));
    let args = BaseArgs {
        suite: suite.to_string(),
        tag: image.to_string(),
        mirror: app.config.debian_mirror.clone(),
        ca_bundle: ca::for_build(app, id).map_err(|e| NoBase::Failed(e.to_string()))?,
    };
    match v
        .base(&args, |l| log_line(app, id, &l), cancel.clone())
        .await
    {
        Ok(i) => {
            log_line(app, id, &format!("made {image} ({i})"));
            Ok(())
        }
        Err(ImageError::Cancelled) => Err(NoBase::Cancelled),
        Err(e) => Err(NoBase::Failed(format!(
            "making the local base {image}: {e}"
        ))),
    }
}

/// The build argument, or a Containerfile in `work` whose `FROM` is the local base.
fn start(text: &str, image: &str, build_arg: &str, work: &Path) -> Result<Start, NoBase> {
    match base::use_base(text, image, build_arg) {
        (Some(a), _) => Ok(Start {
            build_args: vec![a],
            file: None,
        }),
        (None, rewritten) => {
            let f = work.join("Containerfile.local-base");
            fsutil::create_dir_private(work)
                .and_then(|()| {
                    fsutil::write_atomic(&f, rewritten.unwrap_or_default().as_bytes(), 0o644)
                })
                .map_err(|e| NoBase::Failed(format!("{}: {e}", f.display())))?;
            Ok(Start {
                build_args: Vec::new(),
                file: Some(f.display().to_string()),
            })
        }
    }
}
