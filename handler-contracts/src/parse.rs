//! Reading documents: TOML (hand-written) and JSON, with errors that name the field's path and,
//! for TOML, its line and column. An error never quotes the document's text: a hand-written
//! file may hold a secret where a reference belongs.

use serde::de::DeserializeOwned;

/// A document that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// A TOML document with a syntax or shape error.
    #[error("{what}: {path_prefix}{message} (line {line}, column {column})", path_prefix = path_prefix(path))]
    Toml {
        what: String,
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A JSON document with a syntax or shape error.
    #[error("{what}: {path_prefix}{message} (line {line}, column {column})", path_prefix = path_prefix(path))]
    Json {
        what: String,
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!("{path}: ")
    }
}

impl DocumentError {
    /// The field's path in the document ("" for the document itself), e.g. `models[0].id`.
    pub fn path(&self) -> &str {
        match self {
            DocumentError::Toml { path, .. } | DocumentError::Json { path, .. } => path,
        }
    }
    /// The message without its place.
    pub fn message(&self) -> &str {
        match self {
            DocumentError::Toml { message, .. } | DocumentError::Json { message, .. } => message,
        }
    }
    /// Line and column (1-based).
    pub fn position(&self) -> (usize, usize) {
        match self {
            DocumentError::Toml { line, column, .. } | DocumentError::Json { line, column, .. } => {
                (*line, *column)
            }
        }
    }
}

/// 1-based line and column of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Reads a TOML document; `what` names it in errors (e.g. `providers/llamacpp.toml`).
pub fn from_toml<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, DocumentError> {
    let de = match toml::Deserializer::parse(text) {
        Ok(de) => de,
        Err(e) => return Err(toml_error(what, text, String::new(), &e)),
    };
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = clean_path(e.path().to_string());
        toml_error(what, text, path, e.inner())
    })
}

fn toml_error(what: &str, text: &str, path: String, e: &toml::de::Error) -> DocumentError {
    let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
    DocumentError::Toml {
        what: what.to_string(),
        path,
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

/// Reads a JSON document; `what` names it in errors.
pub fn from_json<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, DocumentError> {
    let json_error = |path: String, inner: &serde_json::Error| DocumentError::Json {
        what: what.to_string(),
        path,
        line: inner.line(),
        column: inner.column(),
        message: strip_json_position(&inner.to_string()),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| json_error(clean_path(e.path().to_string()), e.inner()))?;
    de.end().map_err(|e| json_error(String::new(), &e))?;
    Ok(value)
}

fn strip_json_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

fn clean_path(p: String) -> String {
    if p == "." { String::new() } else { p }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_columns() {
        assert_eq!(line_column("a\nbc\nd", 0), (1, 1));
        assert_eq!(line_column("a\nbc\nd", 3), (2, 2));
        assert_eq!(line_column("a\nbc\nd", 5), (3, 1));
    }
}
