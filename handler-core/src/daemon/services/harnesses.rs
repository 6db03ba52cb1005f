//! GET /v1/harnesses: each harness's descriptor as the API shows it (D.1 HarnessInfo), its
//! login (B.1) and the permission modes it offers.

use axum::Json;
use axum::extract::{Path, State};
use handler_contracts::HarnessDescriptor;
use handler_contracts::control::HarnessInfo;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

fn info(d: &HarnessDescriptor) -> HarnessInfo {
    HarnessInfo {
        name: d.name.clone(),
        product: d.product.clone(),
        image: d.image.clone(),
        // Image facts come from the runtime (A.7); this daemon does not query it yet.
        image_present: false,
        version: None,
        built_at: None,
        provider_protocols: d
            .provider_protocols
            .iter()
            .map(|p| p.as_str().to_string())
            .collect(),
        login: d.login.clone(),
        login_file: d.login.as_ref().and_then(|l| l.file.clone()),
        permissions: d.permissions.keys().copied().collect(),
    }
}

/// GET /v1/harnesses
pub async fn list(State(app): State<AppState>) -> Json<Vec<HarnessInfo>> {
    Json(app.snapshot().descriptors.values().map(info).collect())
}

/// GET /v1/harnesses/{name}
pub async fn get(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<HarnessInfo>> {
    app.snapshot()
        .descriptors
        .get(&name)
        .map(|d| Json(info(d)))
        .ok_or_else(|| ApiError::not_found(format!("harness {name:?}")))
}
