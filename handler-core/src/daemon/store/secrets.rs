//! Handler's secret store (D.14): values named by paths, kept with a description in
//! `<data>/secrets.json` (0600). No function here returns a value to the API: only
//! [`SecretStore::value`] reads one, for a launch.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use handler_contracts::validate::validate_secret_path;
use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;
use handler_contracts::control::SecretInfo;

/// A stored value. Its `Debug` never shows the value.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Where its owner sends it (E3), for people reading the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_at: Option<String>,
}

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    /// The path is not a secret path.
    InvalidPath(String),
    #[error("secret {0} is not set")]
    /// No value is stored at the path.
    NotSet(String),
    #[error("a secret value is empty")]
    /// An empty value.
    Empty,
    #[error("the secret store {path}: {source}")]
    /// Reading or writing the store's file failed.
    Io {
        /// The store's file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("the secret store {path} is not valid JSON: {message}")]
    /// The store's file is not valid JSON.
    Corrupt {
        /// The store's file.
        path: String,
        /// Why.
        message: String,
    },
}

/// The store, one file, read and written whole under a lock.
#[derive(Debug)]
pub struct SecretStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl SecretStore {
    /// The store in `<data>/secrets.json`.
    pub fn new(path: PathBuf) -> Self {
        SecretStore {
            path,
            lock: Mutex::new(()),
        }
    }

    fn io(&self, source: std::io::Error) -> SecretError {
        SecretError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn load(&self) -> Result<BTreeMap<String, Entry>, SecretError> {
        match fsutil::read_optional(&self.path).map_err(|e| self.io(e))? {
            None => Ok(BTreeMap::new()),
            Some(text) => serde_json::from_str(&text).map_err(|e| SecretError::Corrupt {
                path: self.path.display().to_string(),
                // serde_json's messages do not quote values, only positions and expectations.
                message: format!("line {}, column {}", e.line(), e.column()),
            }),
        }
    }

    fn save(&self, map: &BTreeMap<String, Entry>) -> Result<(), SecretError> {
        let text = serde_json::to_vec_pretty(map).expect("secrets serialize");
        fsutil::write_atomic(&self.path, &text, 0o600).map_err(|e| self.io(e))
    }

    /// Every secret, without values.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(self
            .load()?
            .into_iter()
            .map(|(path, e)| info(path, &e))
            .collect())
    }

    /// One secret, without its value.
    pub fn info(&self, path: &str) -> Result<Option<SecretInfo>, SecretError> {
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(self.load()?.get(path).map(|e| info(path.to_string(), e)))
    }

    /// Whether a value is set.
    pub fn is_set(&self, path: &str) -> bool {
        self.info(path).ok().flatten().is_some()
    }

    /// Sets a value (any path; the API refuses `accounts/` before calling this).
    pub fn set(
        &self,
        path: &str,
        value: &str,
        description: Option<String>,
        hosts: Vec<String>,
    ) -> Result<(), SecretError> {
        validate_secret_path(path).map_err(|e| SecretError::InvalidPath(e.message))?;
        if value.is_empty() {
            return Err(SecretError::Empty);
        }
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut map = self.load()?;
        let description = description.or_else(|| map.get(path).and_then(|e| e.description.clone()));
        let hosts = if hosts.is_empty() {
            map.get(path).map(|e| e.hosts.clone()).unwrap_or_default()
        } else {
            hosts
        };
        map.insert(
            path.to_string(),
            Entry {
                value: value.to_string(),
                description,
                hosts,
                updated_at: Some(fsutil::now_rfc3339()),
            },
        );
        self.save(&map)
    }

    /// Removes a value; whether there was one.
    pub fn remove(&self, path: &str) -> Result<bool, SecretError> {
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut map = self.load()?;
        let had = map.remove(path).is_some();
        if had {
            self.save(&map)?;
        }
        Ok(had)
    }

    /// Removes every value under `prefix/`.
    pub fn remove_under(&self, prefix: &str) -> Result<(), SecretError> {
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut map = self.load()?;
        let before = map.len();
        map.retain(|k, _| !k.starts_with(&format!("{prefix}/")));
        if map.len() != before {
            self.save(&map)?;
        }
        Ok(())
    }

    /// The value itself: for a launch only (E3), never for an answer.
    pub fn value(&self, path: &str) -> Result<String, SecretError> {
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.load()?
            .get(path)
            .map(|e| e.value.clone())
            .ok_or_else(|| SecretError::NotSet(path.to_string()))
    }
}

fn info(path: String, e: &Entry) -> SecretInfo {
    SecretInfo {
        path,
        description: e.description.clone(),
        hosts: e.hosts.clone(),
        updated_at: e.updated_at.clone(),
    }
}
