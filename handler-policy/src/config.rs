//! What one pipeline is configured with: the scope, the sandbox's network, the agent's secrets,
//! the launch's session defaults, unattended mode, size limit, and the path resolver for P2.

use handler_contracts::harness::SessionDefaults;
use handler_contracts::sandbox::NetworkPolicy;
use serde::{Deserialize, Serialize};

/// A pipeline's configuration (one agent connection or one Session's agent). Its `Debug` names
/// the secrets but never shows their values.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyConfig {
    /// The agent's folder: an absolute, canonical path (P2). `cwd` and `additionalDirectories`
    /// must be it or inside it.
    pub scope: String,
    /// The sandbox's network (P3).
    pub network: NetworkPolicy,
    /// `(name, value)` of every secret the agent holds (P5). Values are never logged.
    #[serde(default)]
    pub secrets: Vec<(String, String)>,
    /// Applied after each session/new|load (P7) and added to session/new|load|resume (P8).
    #[serde(default)]
    pub session_defaults: SessionDefaults,
    /// When set, the daemon answers permission requests itself (P9, D.18).
    #[serde(default)]
    pub unattended: Option<UnattendedMode>,
    /// The largest frame accepted (C.1: 16 MiB by default).
    #[serde(default = "default_max")]
    pub max_message_bytes: usize,
    /// The session id clients know when the agent runs under another one (F.6.2): the
    /// agent's id from the first successful session/new is translated to it both ways.
    #[serde(default)]
    pub client_session_id: Option<String>,
}

impl std::fmt::Debug for PolicyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secrets: Vec<(&str, &str)> = self
            .secrets
            .iter()
            .map(|(name, _)| (name.as_str(), "[redacted]"))
            .collect();
        f.debug_struct("PolicyConfig")
            .field("scope", &self.scope)
            .field("network", &self.network)
            .field("secrets", &secrets)
            .field("session_defaults", &self.session_defaults)
            .field("unattended", &self.unattended)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("client_session_id", &self.client_session_id)
            .finish()
    }
}

fn default_max() -> usize {
    handler_contracts::acp::DEFAULT_MAX_MESSAGE_BYTES
}

impl PolicyConfig {
    /// A configuration for `scope` with nothing else set: open network, no secrets, no
    /// defaults, attended, the default size limit.
    pub fn new(scope: impl Into<String>, network: NetworkPolicy) -> Self {
        PolicyConfig {
            scope: scope.into(),
            network,
            secrets: Vec::new(),
            session_defaults: SessionDefaults::default(),
            unattended: None,
            max_message_bytes: default_max(),
            client_session_id: None,
        }
    }
}

/// How an unattended run answers permission requests (P9, D.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnattendedMode {
    /// An agent with an interface (permission mode bypass): allow_once, else allow_always,
    /// else cancelled.
    Approve,
    /// An agent whose mode is ask-and-deny (skill-review): reject_once, else reject_always,
    /// else cancelled.
    AskAndDeny,
}

/// Resolves a path the way the host sees it (symlinks followed). P2's canonicalization is I/O,
/// so the caller provides it; the pipeline checks the answer lexically against the scope.
///
/// Any `Fn(&str) -> Result<String, E>` with a displayable `E` is a resolver (the error's text
/// becomes the reason P2 gives).
pub trait PathResolver: Send + Sync {
    /// The canonical form of `path`, or why it has none (it does not exist, …).
    fn canonicalize(&self, path: &str) -> Result<String, ResolveError>;
}

impl<F, E> PathResolver for F
where
    F: Fn(&str) -> Result<String, E> + Send + Sync,
    E: std::fmt::Display,
{
    fn canonicalize(&self, path: &str) -> Result<String, ResolveError> {
        self(path).map_err(|e| ResolveError {
            reason: e.to_string(),
        })
    }
}

/// Why a path has no canonical form, as the caller's resolver says (it does not exist, a link
/// loops, …): P2 refuses the path with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ResolveError {
    /// The resolver's reason, e.g. "No such file or directory (os error 2)".
    pub reason: String,
}

/// A configuration the pipeline cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("scope {0:?} must be an absolute path without `.` or `..` components")]
    /// The scope is not an absolute, normalized path.
    Scope(String),
    #[error("secret #{0} has an empty name")]
    /// The secret at this index has an empty name.
    SecretName(usize),
    #[error("maxMessageBytes must be at least 1")]
    /// maxMessageBytes is 0.
    MaxMessageBytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_secrets_but_never_shows_their_values() {
        let mut c = PolicyConfig::new("/work/p", NetworkPolicy::Open);
        c.secrets = vec![(
            "providers/x/apiKey".into(),
            "sk-live-QwErTyUi9876543210".into(),
        )];
        let d = format!("{c:?}");
        assert!(d.contains("providers/x/apiKey"), "{d}");
        assert!(d.contains("[redacted]"), "{d}");
        assert!(!d.contains("QwErTy"), "{d}");
        assert!(d.contains("/work/p"), "{d}");
    }
}
