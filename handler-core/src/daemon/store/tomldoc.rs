//! Hand-written TOML files changed through the API: edited with toml_edit so that the comments
//! and layout a person wrote around the keys the API does not change stay where they were;
//! written atomically.

use std::path::Path;

use handler_contracts::{FileSource, SecretRef};
use toml_edit::{Array, DocumentMut, InlineTable, Item, Value};

use crate::daemon::fsutil;

/// The document in `path`, or an empty one when there is none. A file that is not TOML is
/// replaced (its error was shown before).
pub fn load(path: &Path) -> std::io::Result<DocumentMut> {
    Ok(fsutil::read_optional(path)?
        .and_then(|t| t.parse::<DocumentMut>().ok())
        .unwrap_or_default())
}

/// Writes the document atomically (0600: it may name where secrets are).
pub fn save(path: &Path, doc: &DocumentMut) -> std::io::Result<()> {
    fsutil::write_atomic(path, doc.to_string().as_bytes(), 0o600)
}

/// Sets or removes a string key, keeping the key's decoration when it exists.
pub fn set_str(doc: &mut DocumentMut, key: &str, value: Option<&str>) {
    match value {
        Some(v) => set_value(doc, key, Value::from(v)),
        None => {
            doc.remove(key);
        }
    }
}

/// Sets or removes a value, keeping decoration of the existing key.
pub fn set_value(doc: &mut DocumentMut, key: &str, mut value: Value) {
    if let Some(Item::Value(old)) = doc.get(key) {
        *value.decor_mut() = old.decor().clone();
    }
    doc[key] = Item::Value(value);
}

/// A list of strings, or none.
pub fn set_str_list(doc: &mut DocumentMut, key: &str, values: Option<&[String]>) {
    match values {
        Some(vs) => {
            let arr: Array = vs.iter().map(std::string::String::as_str).collect();
            set_value(doc, key, Value::Array(arr));
        }
        None => {
            doc.remove(key);
        }
    }
}

/// A secret reference as an inline table `{ secret = "…" }`.
pub fn secret_ref_value(r: &SecretRef) -> Value {
    let mut t = InlineTable::new();
    match r {
        SecretRef::Secret(s) => t.insert("secret", s.as_str().into()),
        SecretRef::Env(s) => t.insert("env", s.as_str().into()),
        SecretRef::File(s) => t.insert("file", s.as_str().into()),
        SecretRef::Command(c) => t.insert(
            "command",
            Value::Array(c.iter().map(std::string::String::as_str).collect()),
        ),
    };
    Value::InlineTable(t)
}

/// A file source as an inline table.
pub fn file_source_value(f: &FileSource) -> Value {
    let mut t = InlineTable::new();
    match f {
        FileSource::File(s) => t.insert("file", s.as_str().into()),
        FileSource::Env(s) => t.insert("env", s.as_str().into()),
        FileSource::Content(s) => t.insert("content", s.as_str().into()),
    };
    Value::InlineTable(t)
}

/// Converts any serializable value to a TOML item (for tables the API replaces whole).
pub fn to_item<T: serde::Serialize>(v: &T) -> Item {
    let text = toml::to_string(&Wrap { v }).unwrap_or_default();
    text.parse::<DocumentMut>()
        .ok()
        .and_then(|d| d.get("v").cloned())
        .unwrap_or(Item::None)
}

#[derive(serde::Serialize)]
struct Wrap<'a, T: serde::Serialize> {
    v: &'a T,
}
