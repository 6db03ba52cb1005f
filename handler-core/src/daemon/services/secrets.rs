//! The secret store's rules (D.14): paths and descriptions only, never a value; `accounts/`
//! is set through the account.

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::secrets::SecretError;
use handler_contracts::control::{SecretInfo, SecretRequest};

fn check_path(path: &str) -> ApiResult<()> {
    handler_contracts::validate::validate_secret_path(path)
        .map_err(|e| ApiError::bad_request("secret path invalid", e.message))
}

/// The rules behind GET /v1/secrets
pub async fn list(app: &AppState) -> ApiResult<Vec<SecretInfo>> {
    app.secrets.list().map_err(ApiError::internal)
}

/// The rules behind GET /v1/secrets/{path}
pub async fn get(app: &AppState, path: String) -> ApiResult<SecretInfo> {
    check_path(&path)?;
    app.secrets
        .info(&path)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found(format!("secret {path}")))
}

/// The rules behind PUT /v1/secrets/{path}: sets a value; `accounts/` is refused (D.9: set through the account).
pub async fn put(app: &AppState, path: String, req: SecretRequest) -> ApiResult<SecretInfo> {
    check_path(&path)?;
    if path.starts_with("accounts/") {
        return Err(ApiError::bad_request(
            "secret path reserved",
            "accounts/…: an account's token is set through PUT /v1/accounts/{name}/token",
        ));
    }
    if path.starts_with("remote/") {
        return Err(ApiError::bad_request(
            "secret path reserved",
            "remote/…: remote control's keys are made by `handler remote setup` and `pair`",
        ));
    }
    match app
        .secrets
        .set(&path, &req.value, req.description, Vec::new())
    {
        Ok(()) => {}
        Err(SecretError::Empty) => {
            return Err(ApiError::unprocessable("secret invalid", "value: empty"));
        }
        Err(SecretError::InvalidPath(m)) => {
            return Err(ApiError::bad_request("secret path invalid", m));
        }
        Err(e) => return Err(ApiError::internal(e)),
    }
    tracing::info!(secret = %path, "secret set");
    app.secrets
        .info(&path)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::internal("secret vanished"))
}

/// The rules behind DELETE /v1/secrets/{path}
pub async fn delete(app: &AppState, path: String) -> ApiResult<()> {
    check_path(&path)?;
    if app.secrets.remove(&path).map_err(ApiError::internal)? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("secret {path}")))
    }
}
