//! A part's build (issue 30 item 2, decision 0164): target `part:<id>` builds the part and
//! what it requires, each from its source's checked `:latest` (the toolbox for Node, the
//! harness's image for a harness's CLI) with the Containerfile `handler_harness::parts`
//! writes, then tags it `<version>-<recipe hash>` with the version the build found in its
//! source. A part whose record names the same source image and recipe, and whose image is
//! there, is not built again: a part is built once per version.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use handler_contracts::machine::parts::MountedPart;
use handler_harness::parts::{self as pure, Part, Source};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::job::{Outcome, built, log_line, remove, stage};
use super::verbs;
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::BuildArgs;
use crate::daemon::state::AppState;

/// The file the part's tree holds its version in (its root, so `/version` in its image).
const VERSION_FILE: &str = "/version";

/// What was built for a part last: from which source image, by which recipe, as which image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartRecord {
    /// The source image's id the part was copied from.
    pub source_id: String,
    /// The recipe's hash.
    pub hash: String,
    /// The part's image (its tag).
    pub image: String,
    /// The version its source installed.
    pub version: String,
}

/// Every part there is now, from the daemon's harness descriptors.
pub fn catalog(app: &AppState) -> Result<BTreeMap<String, Part>, pure::PartError> {
    pure::catalog(app.snapshot().descriptors.values())
}

fn records_dir(app: &AppState) -> PathBuf {
    app.config.state_dir.join("parts")
}

/// Part `id`'s record, if one was written.
pub fn record(app: &AppState, id: &str) -> Option<PartRecord> {
    let bytes = std::fs::read(records_dir(app).join(format!("{id}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_record(app: &AppState, id: &str, r: &PartRecord) -> Result<(), String> {
    let dir = records_dir(app);
    fsutil::create_dir_private(&dir).map_err(|e| e.to_string())?;
    let bytes = serde_json::to_vec_pretty(r).map_err(|e| e.to_string())?;
    fsutil::write_atomic(&dir.join(format!("{id}.json")), &bytes, 0o600).map_err(|e| e.to_string())
}

/// The image `part` is copied from (`:latest`) and what to build first when it is missing.
fn source_image(app: &AppState, part: &Part) -> Result<(String, String), String> {
    match &part.source {
        Source::Toolbox => Ok((
            format!("{}:latest", app.config.toolbox_image),
            "toolbox".into(),
        )),
        Source::Harness(h) => app
            .snapshot()
            .descriptors
            .get(h)
            .map(|d| (format!("{}:latest", d.image), h.clone()))
            .ok_or_else(|| format!("part {}: harness {h:?} is gone", part.id)),
    }
}

/// The source image's id now (asked of the runtime when `fresh`, else from memory as the
/// listings are, decision 0145), or why the part cannot be built from it.
async fn source_id(app: &AppState, part: &Part, fresh: bool) -> Result<(String, String), String> {
    let (image, target) = source_image(app, part)?;
    let f = super::facts_of(app, &image, fresh).await;
    if !f.present {
        return Err(format!(
            "part {}: its source {image} is not built: handler build start {target}",
            part.id
        ));
    }
    let id =
        f.id.ok_or_else(|| format!("part {}: {image} has no id", part.id))?;
    Ok((image, id))
}

/// `part` as a machine gets it, when the image built from its source's current image by the
/// current recipe is there; none: it is to be built. `fresh`: the engine asked now (what is
/// built or mounted decides on that); else from memory (a listing).
pub async fn ready(app: &AppState, part: &Part, fresh: bool) -> Option<MountedPart> {
    let (_, id) = source_id(app, part, fresh).await.ok()?;
    let r = record(app, &part.id)?;
    let hash = pure::recipe_hash(&pure::containerfile(part));
    if r.source_id != id || r.hash != hash || !super::facts_of(app, &r.image, fresh).await.present {
        return None;
    }
    Some(MountedPart {
        id: part.id.clone(),
        version: r.version,
        image: r.image,
    })
}

/// The build `bid` of part `id` and what it requires, each not built yet (one log, one
/// record). The first that fails ends the build, naming it.
pub(super) async fn run(app: &AppState, bid: &str, id: &str, cancel: &Arc<Notify>) -> Outcome {
    let cat = match catalog(app) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let order = match pure::closure(&cat, &[id.to_string()]) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    for p in order.iter().map(|i| &cat[i]) {
        if let Some(m) = ready(app, p, true).await {
            log_line(app, bid, &format!("part {}: {} is there", p.id, m.image));
            continue;
        }
        if let Err(o) = build_one(app, bid, p, cancel).await {
            return o;
        }
    }
    Outcome::Succeeded
}

/// Builds `part` from its source, reads the version it found, tags and records it.
async fn build_one(
    app: &AppState,
    bid: &str,
    part: &Part,
    cancel: &Arc<Notify>,
) -> Result<MountedPart, Outcome> {
    stage(app, bid, &format!("build part:{}", part.id));
    let failed = |m: String| Outcome::Failed(m);
    let (image, source) = source_id(app, part, true).await.map_err(failed)?;
    let file = pure::containerfile(part);
    let hash = pure::recipe_hash(&file);
    let work = app.builds.work_dir(bid).join(format!("part-{}", part.id));
    fsutil::create_dir_private(&work).map_err(|e| failed(e.to_string()))?;
    fsutil::write_atomic(&work.join("Containerfile"), file.as_bytes(), 0o644)
        .map_err(|e| failed(e.to_string()))?;
    log_line(
        app,
        bid,
        &format!("part {}: from {image} ({source})", part.id),
    );
    // By name: the build holds the queue, so `:latest` cannot move under it.
    let args = BuildArgs {
        context: work.display().to_string(),
        file: None,
        build_args: vec![format!("SOURCE_IMAGE={image}")],
        no_cache: false,
        ca_bundle: None,
    };
    let new = built(app, bid, &args, cancel).await.map_err(|o| match o {
        Outcome::Failed(m) => Outcome::Failed(format!("part {}: {m}", part.id)),
        o => o,
    })?;
    let done = tag_and_record(app, bid, part, &new, source, hash).await;
    if done.is_err() {
        remove(app, bid, &new).await;
    }
    done
}

async fn tag_and_record(
    app: &AppState,
    bid: &str,
    part: &Part,
    new: &str,
    source_id: String,
    hash: String,
) -> Result<MountedPart, Outcome> {
    let v = verbs(app);
    let text = v
        .read(new, VERSION_FILE)
        .await
        .map_err(|e| Outcome::Failed(format!("part {}: its {VERSION_FILE}: {e}", part.id)))?;
    let version = pure::version_line(&text).ok_or_else(|| {
        Outcome::Failed(format!(
            "part {}: the image built has an empty {VERSION_FILE}",
            part.id
        ))
    })?;
    let image = pure::tag(&part.id, &version, &hash);
    v.tag(new, &image)
        .await
        .map_err(|e| Outcome::Failed(format!("part {}: tag {image}: {e}", part.id)))?;
    let r = PartRecord {
        source_id,
        hash,
        image: image.clone(),
        version: version.clone(),
    };
    write_record(app, &part.id, &r).map_err(Outcome::Failed)?;
    log_line(app, bid, &format!("part {}: {image} ({version})", part.id));
    let _ = app.builds.update(bid, |b| {
        b.versions
            .insert(format!("part:{}", part.id), version.clone());
    });
    Ok(MountedPart {
        id: part.id.clone(),
        version,
        image,
    })
}
