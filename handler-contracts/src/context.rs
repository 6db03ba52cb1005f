//! Project contexts (D.19): a project with a context runs only accounts and providers made for
//! it or for any.

use crate::control::ModelAccess;
use crate::validate::AccessCatalog;

/// The contexts an account or a provider may be used in (`None`: it names none, or it is
/// unknown or invalid).
pub fn contexts_of(catalog: &dyn AccessCatalog, m: &ModelAccess) -> Option<Vec<String>> {
    if let Some(a) = &m.account {
        catalog.account(a)?.ok()?.contexts.clone()
    } else if let Some(p) = &m.provider {
        catalog.provider(p)?.ok()?.contexts.clone()
    } else {
        None
    }
}

/// A model that may not run in a project of this context (D.19).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is not made for this project's context {context:?} (its contexts: {})",
    if .made_for.is_empty() { "none".to_string() } else { .made_for.join(", ") })]
pub struct NotForContext {
    /// `account "name"` or `provider "name"`.
    pub what: String,
    /// The project's context.
    pub context: String,
    /// The contexts the account or provider is made for.
    pub made_for: Vec<String>,
}

/// D.19: whether the model may run in a project of `context` (none: any model may).
pub fn check(
    catalog: &dyn AccessCatalog,
    context: Option<&str>,
    m: &ModelAccess,
) -> Result<(), NotForContext> {
    let Some(ctx) = context else {
        return Ok(());
    };
    let list = contexts_of(catalog, m).unwrap_or_default();
    if list.iter().any(|c| c == "any" || c == ctx) {
        return Ok(());
    }
    let what = m
        .account
        .as_ref()
        .map(|a| format!("account {a:?}"))
        .or_else(|| m.provider.as_ref().map(|p| format!("provider {p:?}")))
        .unwrap_or_default();
    Err(NotForContext {
        what,
        context: ctx.to_string(),
        made_for: list,
    })
}
