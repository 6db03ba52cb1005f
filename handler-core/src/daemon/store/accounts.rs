//! Where an account's files and secrets are kept (D.9), and whether it is logged in.

use std::path::PathBuf;

use handler_contracts::{Account, HarnessDescriptor, SecretRef};

use crate::daemon::config::DaemonConfig;
use crate::daemon::store::secrets::SecretStore;

/// Where a file login's credential is kept.
pub fn credential_path(config: &DaemonConfig, name: &str) -> PathBuf {
    config
        .data_dir
        .join("accounts")
        .join(name)
        .join("credential")
}

/// An account's file.
pub fn account_path(config: &DaemonConfig, name: &str) -> PathBuf {
    config.accounts_dir.join(format!("{name}.toml"))
}

/// The store path of an account's pasted token.
pub fn token_secret_path(name: &str) -> String {
    format!("accounts/{name}/token")
}

/// Whether an account can start an agent now, and when it logged in.
pub fn login_state(
    config: &DaemonConfig,
    secrets: &SecretStore,
    name: &str,
    a: &Account,
    d: Option<&HarnessDescriptor>,
) -> (bool, Option<String>) {
    let file_login = d
        .and_then(|d| d.login.as_ref())
        .is_some_and(handler_contracts::harness::Login::is_file_login);
    if file_login {
        let p = credential_path(config, name);
        match std::fs::metadata(&p) {
            Ok(m) => (
                true,
                m.modified()
                    .ok()
                    .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            ),
            Err(_) => (false, None),
        }
    } else {
        match &a.token {
            None => (false, None),
            Some(SecretRef::Secret(p)) => match secrets.info(p) {
                Ok(Some(i)) => (true, i.updated_at),
                _ => (false, None),
            },
            Some(_) => (true, None),
        }
    }
}
