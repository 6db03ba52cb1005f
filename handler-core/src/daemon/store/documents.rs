//! The store of hand-written TOML documents (accounts, providers, bindings in a folder, one
//! `<name>.toml` each; contexts and work folders in one file): list, get, put, delete, and
//! read-modify-write under the store's one lock. Documents are edited with toml_edit, so the
//! keys the API does not know and the comments a person wrote stay; every write is atomic
//! (sibling, fsync, rename) and 0600 (a document may name where secrets are).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use toml_edit::DocumentMut;

use crate::daemon::fsutil;
use crate::daemon::store::catalog::valid_name;
use crate::daemon::store::tomldoc;

/// The mode every document is written with.
const MODE: u32 = 0o600;

fn load(path: &Path) -> std::io::Result<DocumentMut> {
    tomldoc::load(path)
}

fn save(path: &Path, doc: &DocumentMut) -> std::io::Result<()> {
    fsutil::write_atomic(path, doc.to_string().as_bytes(), MODE)
}

fn locked(lock: &Mutex<()>) -> MutexGuard<'_, ()> {
    lock.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A folder of documents, `<dir>/<name>.toml`.
#[derive(Debug)]
pub struct TomlDocs {
    dir: PathBuf,
    lock: Mutex<()>,
}

impl TomlDocs {
    /// The documents of `dir` (made on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        TomlDocs {
            dir: dir.into(),
            lock: Mutex::new(()),
        }
    }

    /// The file of the document `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.toml"))
    }

    /// The names of the documents there are, sorted (files whose stem is not a name are left
    /// out).
    pub fn list(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let p = e.path();
                (p.extension()? == "toml").then_some(())?;
                let stem = p.file_stem()?.to_str()?.to_string();
                valid_name(&stem).then_some(stem)
            })
            .collect();
        v.sort();
        v
    }

    /// Whether the document `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.path(name).is_file()
    }

    /// The document `name`, None when there is none.
    pub fn get(&self, name: &str) -> std::io::Result<Option<DocumentMut>> {
        if !self.exists(name) {
            return Ok(None);
        }
        load(&self.path(name)).map(Some)
    }

    /// Writes the document `name` whole.
    pub fn put(&self, name: &str, doc: &DocumentMut) -> std::io::Result<()> {
        let _g = locked(&self.lock);
        save(&self.path(name), doc)
    }

    /// Reads the document `name` (empty when there is none), lets `f` change it and writes it,
    /// all under the store's lock; nothing is written when `f` fails.
    pub fn update<R, E: From<std::io::Error>>(
        &self,
        name: &str,
        f: impl FnOnce(&mut DocumentMut) -> Result<R, E>,
    ) -> Result<R, E> {
        let _g = locked(&self.lock);
        let path = self.path(name);
        let mut doc = load(&path)?;
        let r = f(&mut doc)?;
        save(&path, &doc)?;
        Ok(r)
    }

    /// Removes the document `name`; false when there was none.
    pub fn delete(&self, name: &str) -> std::io::Result<bool> {
        let _g = locked(&self.lock);
        match std::fs::remove_file(self.path(name)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// One document in one file (`contexts.toml`, `folders.toml`).
#[derive(Debug)]
pub struct TomlFile {
    path: PathBuf,
    lock: Mutex<()>,
}

impl TomlFile {
    /// The document in `path` (made on the first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TomlFile {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The document (empty when there is none).
    pub fn get(&self) -> std::io::Result<DocumentMut> {
        load(&self.path)
    }

    /// Reads the document, lets `f` change it and writes it, all under the lock; nothing is
    /// written when `f` fails.
    pub fn update<R, E: From<std::io::Error>>(
        &self,
        f: impl FnOnce(&mut DocumentMut) -> Result<R, E>,
    ) -> Result<R, E> {
        let _g = locked(&self.lock);
        let mut doc = load(&self.path)?;
        let r = f(&mut doc)?;
        save(&self.path, &doc)?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn list_get_put_delete() {
        let d = tmp();
        let s = TomlDocs::new(d.path().join("accounts"));
        assert!(s.list().is_empty());
        assert!(s.get("a").unwrap().is_none());
        let doc: DocumentMut = "harness = \"codex\"\n".parse().unwrap();
        s.put("b", &doc).unwrap();
        s.put("a", &doc).unwrap();
        std::fs::write(d.path().join("accounts/not a name.toml"), "").unwrap();
        std::fs::write(d.path().join("accounts/c.txt"), "").unwrap();
        assert_eq!(s.list(), ["a", "b"]);
        assert_eq!(s.get("a").unwrap().unwrap().to_string(), doc.to_string());
        assert!(s.delete("a").unwrap());
        assert!(!s.delete("a").unwrap());
        assert_eq!(s.list(), ["b"]);
    }

    #[test]
    fn writes_are_atomic_and_private() {
        let d = tmp();
        let s = TomlDocs::new(d.path());
        s.update::<_, std::io::Error>("a", |doc| {
            doc["k"] = toml_edit::value("v");
            Ok(())
        })
        .unwrap();
        let mode = std::fs::metadata(s.path("a")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // No sibling left behind.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.toml"]);
    }

    #[test]
    fn unknown_keys_and_comments_are_kept() {
        let d = tmp();
        let s = TomlDocs::new(d.path());
        let text = "# mine\nharness = \"codex\" # why\nnewer = { x = 1 }\n";
        std::fs::write(s.path("a"), text).unwrap();
        s.update::<_, std::io::Error>("a", |doc| {
            doc["plan"] = toml_edit::value("pro");
            Ok(())
        })
        .unwrap();
        let now = std::fs::read_to_string(s.path("a")).unwrap();
        assert!(now.starts_with(text), "{now}");
        assert!(now.contains("plan = \"pro\""));
    }

    #[test]
    fn a_failed_change_writes_nothing() {
        let d = tmp();
        let f = TomlFile::new(d.path().join("contexts.toml"));
        let r = f.update::<(), std::io::Error>(|doc| {
            doc["work"] = toml_edit::value("x");
            Err(std::io::Error::other("refused"))
        });
        assert!(r.is_err());
        assert!(!f.path().exists());
    }

    #[test]
    fn concurrent_read_modify_writes_keep_both() {
        let d = tmp();
        let f = Arc::new(TomlFile::new(d.path().join("contexts.toml")));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for j in 0..10 {
                        f.update::<_, std::io::Error>(|doc| {
                            doc[&format!("t{i}-{j}")] = toml_edit::value(true);
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let doc = f.get().unwrap();
        assert_eq!(doc.len(), 80);
    }
}
