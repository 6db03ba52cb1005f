//! Reading documents: TOML (hand-written) and JSON, with errors that name the field's path and,
//! for TOML, its line and column. An error never quotes the document's text: a hand-written
//! file may hold a secret where a reference belongs.

use serde::de::DeserializeOwned;

/// A document that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// A TOML document with a syntax or shape error.
    #[error("{what}: {path_prefix}{message} (line {line}, column {column})", path_prefix = path_prefix(path))]
    Toml {
        /// What was read (a file name or a description).
        what: String,
        /// The field's path in the document, e.g. `models[0].id` ("" for the whole document).
        path: String,
        /// The line of the error, 1-based.
        line: usize,
        /// The column of the error, 1-based.
        column: usize,
        /// What is wrong, secret-looking words replaced by `…`.
        message: String,
    },
    /// A JSON document with a syntax or shape error.
    #[error("{what}: {path_prefix}{message} (line {line}, column {column})", path_prefix = path_prefix(path))]
    Json {
        /// What was read (a file name or a description).
        what: String,
        /// The field's path in the document, e.g. `models[0].id` ("" for the whole document).
        path: String,
        /// The line of the error, 1-based.
        line: usize,
        /// The column of the error, 1-based.
        column: usize,
        /// What is wrong, secret-looking words replaced by `…`.
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
        path: redact_secrets(&path, text),
        line,
        column,
        message: redact_secrets(e.message().trim(), text),
    }
}

fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'/' | b'=' | b'-')
}

/// Whether a word looks like a secret (an API key, a token): at least 8 of
/// `[A-Za-z0-9_+/=-]` with a digit, or at least 24 of them without a `/` (a store path such as
/// `providers/openrouter/apiKey` is not one, nor an apiVersion's tail such as `account/v1`).
fn secret_looking(w: &str) -> bool {
    let api_version_tail = w.split_once("/v").is_some_and(|(c, m)| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            && !m.is_empty()
            && m.bytes().all(|b| b.is_ascii_digit())
    });
    !api_version_tail
        && ((w.len() >= 8 && w.bytes().any(|b| b.is_ascii_digit()))
            || (w.len() >= 24 && !w.contains('/')))
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii() || !word_byte(c as u8))
}

/// Every secret-looking word of `s` becomes `…` (a message that has no document at hand).
pub(crate) fn redact_secret_words(s: &str) -> String {
    redact_secrets(s, s)
}

/// serde's and toml's messages quote the offending value or key, and a field's path names a
/// table's keys: every secret-looking word of the document `text` in `s` becomes `…` (0041).
fn redact_secrets(s: &str, text: &str) -> String {
    let mut words: Vec<&str> = words(text).filter(|w| secret_looking(w)).collect();
    words.sort_unstable_by_key(|w| std::cmp::Reverse(w.len()));
    words.dedup();
    let mut out = s.to_string();
    for w in words {
        if out.contains(w) {
            out = out.replace(w, "…");
        }
    }
    out
}

/// Reads a JSON document; `what` names it in errors.
pub fn from_json<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, DocumentError> {
    let json_error = |path: String, inner: &serde_json::Error| DocumentError::Json {
        what: what.to_string(),
        path: redact_secrets(&path, text),
        line: inner.line(),
        column: inner.column(),
        message: redact_secrets(&strip_json_position(&inner.to_string()), text),
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

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        flag: Option<bool>,
        api_version: Option<crate::api_version::AccountApiVersion>,
        token: Option<crate::access::SecretRef>,
    }

    /// Found by the `documents` fuzz target: serde quoted a pasted key in a wrong type, an
    /// unknown field (and its path), a secret reference's extra key, an apiVersion.
    #[test]
    fn errors_never_quote_a_secret_looking_word() {
        let key = "sk-abc1234567890xyz";
        for doc in [
            format!("flag = \"{key}\"\n"),
            format!("{key} = 1\n"),
            format!("[{key}]\nx = 1\n"),
            format!("token = {{ secret = \"a\", {key} = \"b\" }}\n"),
            format!("api_version = \"{key}\"\n"),
            format!("flag = \"x\" {key}\n"),
        ] {
            let e = from_toml::<Doc>("doc.toml", &doc).unwrap_err().to_string();
            assert!(!e.contains("abc1234567890"), "{doc}: {e}");
            assert!(e.starts_with("doc.toml: "), "{e}");
        }
        let json = format!("{{\"flag\": \"{key}\"}}");
        let e = from_json::<Doc>("doc.json", &json).unwrap_err().to_string();
        assert!(!e.contains("abc1234567890"), "{e}");
        assert!(e.contains("flag"), "{e}");
        // What is not secret-looking is still quoted.
        let e = from_toml::<Doc>("doc.toml", "flg = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`flg`"), "{e}");
        let e = from_toml::<Doc>("doc.toml", "api_version = \"handler.account/v2\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("v2"), "{e}");
    }
}
