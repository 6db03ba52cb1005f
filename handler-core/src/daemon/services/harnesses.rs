//! GET /v1/harnesses: each harness's descriptor as the API shows it (D.1 HarnessInfo), its
//! login (B.1), the permission modes it offers and its image's `:latest` (present, version,
//! built at: the runtime's `image inspect` and `image read`).

use handler_contracts::HarnessDescriptor;
use handler_contracts::control::HarnessInfo;

use super::images;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

fn info(d: &HarnessDescriptor, f: images::ImageFacts) -> HarnessInfo {
    HarnessInfo {
        name: d.name.clone(),
        product: d.product.clone(),
        image: d.image.clone(),
        // The image's facts, from the runtime (A.7).
        image_present: f.present,
        version: f.version,
        built_at: f.built_at,
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

/// The rules behind GET /v1/harnesses: the images' facts from memory, asked now when `fresh`.
pub async fn list(app: &AppState, fresh: bool) -> Vec<HarnessInfo> {
    let descriptors: Vec<HarnessDescriptor> = app.snapshot().descriptors.into_values().collect();
    // The runtime is asked about every image at once.
    let facts = futures_util::future::join_all(
        descriptors
            .iter()
            .map(|d| images::facts(app, &d.image, fresh)),
    )
    .await;
    descriptors
        .iter()
        .zip(facts)
        .map(|(d, f)| info(d, f))
        .collect()
}

/// The rules behind GET /v1/harnesses/{name}
pub async fn get(app: &AppState, name: String, fresh: bool) -> ApiResult<HarnessInfo> {
    let d = app
        .snapshot()
        .descriptors
        .get(&name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("harness {name:?}")))?;
    Ok(info(&d, images::facts(app, &d.image, fresh).await))
}
