//! GET /v1/harnesses: each harness's descriptor as the API shows it (D.1 HarnessInfo), its
//! login (B.1) and the permission modes it offers.

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

/// The rules behind GET /v1/harnesses
pub async fn list(app: &AppState) -> Vec<HarnessInfo> {
    app.snapshot().descriptors.values().map(info).collect()
}

/// The rules behind GET /v1/harnesses/{name}
pub async fn get(app: &AppState, name: String) -> ApiResult<HarnessInfo> {
    app.snapshot()
        .descriptors
        .get(&name)
        .map(info)
        .ok_or_else(|| ApiError::not_found(format!("harness {name:?}")))
}
