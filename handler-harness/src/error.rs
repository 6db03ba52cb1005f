//! render's errors: what the harness cannot honour (B5) and what is invalid, each naming the field.
//! No message ever carries a secret value.

/// Why render refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// An input the harness cannot honour (B5): never silently dropped.
    #[error("{field}: {harness} cannot honour it (B5): {reason}")]
    Unsupported {
        /// The harness's name.
        harness: String,
        /// The input's field it cannot honour, e.g. `permissionMode`.
        field: String,
        /// Why, naming what the descriptor lacks.
        reason: String,
    },
    /// An input that is wrong whatever the harness.
    #[error("{field}: {reason}")]
    Invalid {
        /// The input's field, e.g. `agent.accountLogin`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The CLI's input is not a render request: the field and the place, never its text.
    #[error(transparent)]
    Json(#[from] handler_contracts::DocumentError),
    /// The launch could not be written as JSON (a map with a key JSON cannot hold).
    #[error("the launch cannot be written as JSON")]
    Output,
}

impl RenderError {
    pub(crate) fn unsupported(
        harness: &str,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        RenderError::Unsupported {
            harness: harness.to_string(),
            field: field.into(),
            reason: reason.into(),
        }
    }
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        RenderError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
