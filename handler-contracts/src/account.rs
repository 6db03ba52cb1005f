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

/// How a token with a known lifetime stands (B.1 `tokenLifetimeDays`, `AccountInfo.expiry`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TokenExpiry {
    /// More than the warning window left.
    Valid,
    /// Within the warning window: renew it (`handler account token NAME`).
    Soon,
    /// Past its lifetime: the vendor refuses it.
    Expired,
}

/// Seconds in a day.
const DAY: u64 = 86_400;

/// When a token given at `given` (seconds since the epoch) with a lifetime of `lifetime_days`
/// expires, and how it stands at `now` (decision 0150): `soon` within the last 30 days of its
/// lifetime, or its last third when that is shorter.
#[must_use]
pub fn token_expiry(given: u64, lifetime_days: u32, now: u64) -> (u64, TokenExpiry) {
    let lifetime = u64::from(lifetime_days) * DAY;
    let expires = given.saturating_add(lifetime);
    let window = (30 * DAY).min(lifetime / 3);
    let state = if now >= expires {
        TokenExpiry::Expired
    } else if expires - now <= window {
        TokenExpiry::Soon
    } else {
        TokenExpiry::Valid
    };
    (expires, state)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_is_valid_then_soon_for_its_last_30_days_then_expired() {
        use super::{TokenExpiry as E, token_expiry};
        let day = 86_400;
        let given = 1_000_000;
        let at = |d: u64| token_expiry(given, 365, given + d * day);
        assert_eq!(at(0), (given + 365 * day, E::Valid));
        assert_eq!(at(334).1, E::Valid);
        assert_eq!(at(335).1, E::Soon);
        assert_eq!(at(364).1, E::Soon);
        assert_eq!(at(365).1, E::Expired);
        // A short lifetime warns in its last third.
        assert_eq!(token_expiry(given, 9, given + 5 * day).1, E::Valid);
        assert_eq!(token_expiry(given, 9, given + 6 * day).1, E::Soon);
        // A clock before the token was given: valid, never a panic.
        assert_eq!(token_expiry(given, 1, 0).1, E::Valid);
    }

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
