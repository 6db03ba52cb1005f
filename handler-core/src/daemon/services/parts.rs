//! Parts (issue 30 item 2, decision 0164): `GET /v1/parts` lists the parts there are and the
//! image each has now; `POST /v1/parts/build` and a machine's `parts` make them ready —
//! requirements first, each not built yet built by a build `part:<id>` (one at a time with
//! every other build, its log under `/v1/builds`), and one that cannot be built left out by
//! name with its build's reason, with what requires it; the rest stand.

use std::collections::BTreeSet;

use handler_contracts::machine::parts::{PartInfo, PartLeftOut, PartsOutcome, ReadyPart};
use handler_harness::parts as pure;

use super::images::{self, part_job};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

fn catalog(app: &AppState) -> ApiResult<std::collections::BTreeMap<String, pure::Part>> {
    part_job::catalog(app).map_err(|e| ApiError::unprocessable("invalid part", e.to_string()))
}

/// `GET /v1/parts`: every part, and the one built from its source's current image.
pub async fn list(app: &AppState) -> ApiResult<Vec<PartInfo>> {
    let mut out = Vec::new();
    for p in catalog(app)?.into_values() {
        out.push(PartInfo {
            // From memory (decision 0145): a listing never waits on the engine.
            built: part_job::ready(app, &p, false).await,
            id: p.id,
            source: p.source.name().to_string(),
            requires: p.requires,
            bin: p.bin,
        });
    }
    Ok(out)
}

/// The parts `asked` needs ready: requirements first, each ready or built now (a build per
/// part, awaited); one that fails, and what requires it, left out with the reason. An id no
/// part has: 422 naming it, before anything is built.
pub async fn ensure(app: &AppState, asked: &[String]) -> ApiResult<PartsOutcome> {
    let cat = catalog(app)?;
    let order = pure::closure(&cat, asked)
        .map_err(|e| ApiError::unprocessable("unknown part", format!("parts: {e}")))?;
    let mut failed = BTreeSet::new();
    let mut out = PartsOutcome {
        ready: Vec::new(),
        left_out: Vec::new(),
    };
    for p in order.iter().map(|i| &cat[i]) {
        if let Some(r) = pure::blocked_by(p, &failed) {
            let reason = format!("it requires part {r:?}, which could not be built");
            left_out(&mut out, &mut failed, p, reason);
            continue;
        }
        if let Some(part) = part_job::ready(app, p, true).await {
            out.ready.push(ReadyPart { part, built: false });
            continue;
        }
        match build(app, &p.id).await {
            Ok(()) => match part_job::ready(app, p, true).await {
                Some(part) => out.ready.push(ReadyPart { part, built: true }),
                None => left_out(&mut out, &mut failed, p, "its image is gone".into()),
            },
            Err(reason) => left_out(&mut out, &mut failed, p, reason),
        }
    }
    Ok(out)
}

fn left_out(out: &mut PartsOutcome, failed: &mut BTreeSet<String>, p: &pure::Part, reason: String) {
    tracing::warn!(part = %p.id, %reason, "part left out");
    out.left_out.push(PartLeftOut {
        id: p.id.clone(),
        reason,
    });
    failed.insert(p.id.clone());
}

/// Starts the build `part:<id>` and waits for its end: its error when it did not succeed.
async fn build(app: &AppState, id: &str) -> Result<(), String> {
    images::run_to_end(app, format!("{}{id}", images::target::PART_PREFIX)).await
}
