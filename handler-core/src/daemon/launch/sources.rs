//! What gather asks of the daemon's resources, over the shared state: the catalog, the scope
//! and knowledge checks, the bindings' addons, an account's login, the secret store. The one
//! file of `launch/` that names the resources above it (docs/decisions/0052): gather sees only
//! the `Sources` trait, so this implementation can live with the services.

use std::path::PathBuf;

use handler_contracts::control::NetworkMode;
use handler_contracts::validate::{AccessCatalog, expand_home};
use handler_contracts::{Account, HarnessDescriptor, SecretRef};

use super::resolve::AddonLaunch;
use crate::daemon::problem::ApiResult;
use crate::daemon::secretref::{self, SecretRefError};
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;

/// A secret reference that gave no value (E2). Names the reference, never a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SecretValueError {
    /// The secret store has none, or cannot be read.
    #[error(transparent)]
    Store(#[from] crate::daemon::store::secrets::SecretError),
    /// `{ env }` names a variable handlerd does not have.
    #[error("environment variable {0} is not set")]
    EnvUnset(String),
    /// `{ file }` is not a path.
    #[error(transparent)]
    Path(#[from] handler_contracts::ValidationError),
    /// `{ file }` or `{ command }` gave nothing.
    #[error(transparent)]
    Read(#[from] SecretRefError),
    /// It gave an empty value.
    #[error("the value is empty")]
    Empty,
}

/// Reads a secret reference's value (E2) for a launch.
pub(crate) fn resolve_secret(app: &AppState, r: &SecretRef) -> Result<String, SecretValueError> {
    let home = app.config.home.to_string_lossy().into_owned();
    let v = match r {
        SecretRef::Secret(p) => app.secrets.value(p)?,
        SecretRef::Env(v) => std::env::var(v).map_err(|_| SecretValueError::EnvUnset(v.clone()))?,
        SecretRef::File(f) => secretref::read_file(&expand_home("file", f, &home)?)?,
        SecretRef::Command(argv) => {
            secretref::run_command(argv, app.config.secret_command_timeout)?
        }
    };
    if v.is_empty() {
        return Err(SecretValueError::Empty);
    }
    Ok(v)
}

/// What gather reads through the daemon's resources.
pub(crate) trait Sources {
    /// The descriptors, accounts and providers, read now.
    fn catalog(&self) -> Box<dyn AccessCatalog>;
    /// D.13: the scope checked now, canonical.
    fn check_scope(&self, field: &str, scope: &str) -> ApiResult<PathBuf>;
    /// D.5 K1–K3: the knowledge folders checked, each canonical (host paths).
    fn knowledge(&self, folders: &[String]) -> ApiResult<Vec<String>>;
    /// G4: what the agent's bindings add (checked again: G2, G3).
    fn addons(&self, agent: &StoredAgent, network: NetworkMode) -> ApiResult<AddonLaunch>;
    /// D.9: whether the account can start an agent now.
    fn logged_in(&self, name: &str, account: &Account, d: &HarnessDescriptor) -> bool;
    /// Where a file login's credential is kept.
    fn credential_path(&self, account: &str) -> PathBuf;
    /// The store name of an account's token.
    fn token_name(&self, account: &str) -> String;
    /// The store name of a provider's key.
    fn key_name(&self, provider: &str) -> String;
    /// E2: a reference's value.
    fn secret(&self, r: &SecretRef) -> Result<String, SecretValueError>;
}

impl Sources for AppState {
    fn catalog(&self) -> Box<dyn AccessCatalog> {
        Box::new(self.snapshot())
    }
    fn check_scope(&self, field: &str, scope: &str) -> ApiResult<PathBuf> {
        crate::daemon::store::folders::check_scope(&self.config, field, scope)
    }
    fn knowledge(&self, folders: &[String]) -> ApiResult<Vec<String>> {
        use crate::daemon::problem::ApiError;
        use crate::daemon::store::knowledge::{check_knowledge, knowledge_root};
        let list = check_knowledge(&self.config, folders)?;
        let root = knowledge_root(&self.config);
        list.iter()
            .map(|k| std::fs::canonicalize(root.join(k)).map(|p| p.display().to_string()))
            .collect::<Result<_, _>>()
            .map_err(|e| ApiError::bad_request("knowledge unusable", e.to_string()))
    }
    fn addons(&self, agent: &StoredAgent, network: NetworkMode) -> ApiResult<AddonLaunch> {
        super::addons::resolve_for_launch(self, agent, network)
    }
    fn logged_in(&self, name: &str, account: &Account, d: &HarnessDescriptor) -> bool {
        crate::daemon::store::accounts::login_state(
            &self.config,
            &self.secrets,
            name,
            account,
            Some(d),
        )
        .0
    }
    fn credential_path(&self, account: &str) -> PathBuf {
        crate::daemon::store::accounts::credential_path(&self.config, account)
    }
    fn token_name(&self, account: &str) -> String {
        crate::daemon::store::accounts::token_secret_path(account)
    }
    fn key_name(&self, provider: &str) -> String {
        crate::daemon::store::providers::key_secret_path(provider)
    }
    fn secret(&self, r: &SecretRef) -> Result<String, SecretValueError> {
        resolve_secret(self, r)
    }
}
