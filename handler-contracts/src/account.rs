//! Building an account from what the API was given (E, D.9): its harness known, the document
//! valid before its token is placed and again after (the token step is the caller's: a pasted
//! token goes to the secret store, which is I/O).

use crate::access::{Account, SecretRef};
use crate::harness::HarnessDescriptor;
use crate::validate::{ValidationError, validate_account};

/// An account that cannot be built. `E` is the token step's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError<E> {
    /// No descriptor for its harness.
    #[error("harness: unknown harness {0:?}")]
    UnknownHarness(String),
    /// The document breaks a rule (E).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The token step failed.
    #[error("the account's token cannot be placed")]
    Token(E),
}

/// `draft` (its token left out) checked against `d`, its token given by `token`, checked again.
pub fn build_account<E>(
    mut draft: Account,
    d: Option<&HarnessDescriptor>,
    token: impl FnOnce(&HarnessDescriptor) -> Result<Option<SecretRef>, E>,
) -> Result<Account, BuildError<E>> {
    let Some(d) = d else {
        return Err(BuildError::UnknownHarness(draft.harness));
    };
    draft.token = None;
    validate_account(&draft, Some(d))?;
    draft.token = token(d).map_err(BuildError::Token)?;
    validate_account(&draft, Some(d))?;
    Ok(draft)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_version::AccountApiVersion;

    fn draft(harness: &str) -> Account {
        Account {
            api_version: AccountApiVersion,
            harness: harness.into(),
            description: None,
            plan: None,
            connectors: false,
            token: None,
            contexts: None,
        }
    }

    #[test]
    fn an_unknown_harness_is_named_and_the_token_step_not_run() {
        let e = build_account(draft("nope"), None, |_| -> Result<_, ()> {
            panic!("the token step ran")
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "harness: unknown harness \"nope\"");
    }

    #[test]
    fn the_token_steps_error_is_the_callers() {
        let d: HarnessDescriptor = toml::from_str(include_str!(
            "../../handler-harness/data/harnesses/claude-code/harness.toml"
        ))
        .unwrap();
        assert_eq!(
            build_account(draft("claude-code"), Some(&d), |_| Err("store full")),
            Err(BuildError::Token("store full"))
        );
        let a = build_account(draft("claude-code"), Some(&d), |_| {
            Ok::<_, ()>(Some(SecretRef::Env("CLAUDE_TOKEN".into())))
        })
        .unwrap();
        assert_eq!(a.token, Some(SecretRef::Env("CLAUDE_TOKEN".into())));
    }
}
