//! Why a SandboxSpec is refused before anything starts: invalid (65) or unenforceable here (64).

use handler_contracts::sandbox::exit;

/// A spec refused before anything starts, with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The spec breaks a rule of contract A (exit 65).
    #[error("invalid spec: {field}: {message}")]
    Invalid {
        /// The field the refusal is about, e.g. `mounts[1].target`.
        field: String,
        /// Why, in words (never a secret value).
        message: String,
    },
    /// The spec is valid but cannot be fully enforced on this host (A1, exit 64).
    #[error("unenforceable spec: {field}: {message}")]
    Unenforceable {
        /// The field the refusal is about, e.g. `mounts[1].target`.
        field: String,
        /// Why, in words (never a secret value).
        message: String,
    },
}

impl SpecError {
    /// An invalid spec (65) about `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// An unenforceable spec (64) about `field`.
    pub fn unenforceable(field: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError::Unenforceable {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The exit code of contract A: 65 invalid, 64 unenforceable.
    pub fn exit_code(&self) -> i32 {
        match self {
            SpecError::Invalid { .. } => exit::INVALID_SPEC,
            SpecError::Unenforceable { .. } => exit::UNENFORCEABLE,
        }
    }

    /// The field the error is about, e.g. `mounts[1].target`.
    pub fn field(&self) -> &str {
        match self {
            SpecError::Invalid { field, .. } | SpecError::Unenforceable { field, .. } => field,
        }
    }
}
