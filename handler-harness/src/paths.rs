//! In-sandbox paths ("~" = the harness home) and host path segments.

use crate::error::RenderError;

/// Expands "~" and "~/…" against `home`; an absolute path stays; anything else is an error.
pub fn expand(field: &str, path: &str, home: &str) -> Result<String, RenderError> {
    let home = home.trim_end_matches('/');
    let out = if path == "~" {
        home.to_string()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else {
        path.to_string()
    };
    if !out.starts_with('/') {
        return Err(RenderError::invalid(
            field,
            format!("{path:?} is neither absolute nor under ~"),
        ));
    }
    if out.split('/').any(|s| s == "..") {
        return Err(RenderError::invalid(
            field,
            format!("{path:?} contains `..`"),
        ));
    }
    Ok(out)
}

/// A name used as one host path segment (agent id, account, provider, skill folder).
pub fn segment(field: &str, s: &str) -> Result<(), RenderError> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') || s.contains('\0') {
        return Err(RenderError::invalid(
            field,
            format!("{s:?} is not a valid path segment"),
        ));
    }
    Ok(())
}

/// An absolute host path without `..`.
pub fn absolute(field: &str, p: &str) -> Result<(), RenderError> {
    if !p.starts_with('/') || p.split('/').any(|s| s == "..") {
        return Err(RenderError::invalid(
            field,
            format!("{p:?} is not an absolute, canonical host path"),
        ));
    }
    Ok(())
}
