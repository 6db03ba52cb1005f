//! The image builds' records and logs (D.4): `<state>/builds/<id>.json` (a Build, unknown
//! fields kept) and `<state>/builds/<id>.log` (the runtime's output and the check's lines,
//! ANSI escapes removed by the caller, capped at [`LOG_CAP`]). Opening the store marks a build
//! still running as failed ("daemon restarted"): the daemon that ran it is gone.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use handler_contracts::control::{Build, BuildLog, BuildState};
use tokio::sync::Notify;

use crate::daemon::fsutil;

/// The largest log kept: what comes after is dropped, with one line saying so.
pub const LOG_CAP: u64 = 8 * 1024 * 1024;
/// The most a log read answers at once.
pub const LOG_READ_MAX: u64 = 1024 * 1024;
const TRUNCATED: &str = "\n[log truncated at 8 MiB]\n";

/// A build record that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BuildStoreError {
    /// The file system said no.
    #[error("builds store {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A record is not a Build.
    #[error("builds store {path}: {source}")]
    Json {
        /// The file.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildStoreError + '_ {
    move |source| BuildStoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The image ids of `stale-images.txt`: one per line, only hex ids (anything else a hand edit
/// left is ignored, never given to the engine).
fn stale_ids(text: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for l in text.lines().map(str::trim) {
        let id = !l.is_empty() && l.len() <= 64 && l.bytes().all(|b| b.is_ascii_hexdigit());
        if id && !v.iter().any(|x| x == l) {
            v.push(l.to_string());
        }
    }
    v
}

/// The builds: their records, logs, the one-at-a-time lock and the cancel handles.
#[derive(Debug)]
pub struct BuildStore {
    dir: PathBuf,
    lock: Mutex<()>,
    /// Held by the build that runs: one at a time (D.4).
    pub queue: tokio::sync::Mutex<()>,
    /// A running or waiting build's cancel handle, by id.
    pub cancels: Mutex<HashMap<String, Arc<Notify>>>,
    /// What each image id installed (`/usr/share/handler/version`), once read.
    pub versions: Mutex<HashMap<String, Option<String>>>,
    /// The daemon is stopping: a build stopped now stays recorded as running, so the next
    /// start marks it failed ("daemon restarted").
    pub stopping: std::sync::atomic::AtomicBool,
    /// Images a switch replaced while a container used them: removed after a later build.
    /// Kept in `stale-images.txt` too, so a restart does not forget them.
    stale: Mutex<Vec<String>>,
    /// Whether the network filter's image is built: [`FILTER_UNKNOWN`], [`FILTER_PRESENT`] or
    /// [`FILTER_MISSING`] (then agents needing it do not start).
    pub filter: std::sync::atomic::AtomicU8,
    /// An automatic update run is going on (D.4).
    pub updates_running: std::sync::atomic::AtomicBool,
    /// Each image's facts as last read (issue 34 item 5): listings answer from here.
    pub facts: Mutex<HashMap<String, FactsSlot>>,
    /// Bumped by every build's end: facts read before it are read again.
    pub generation: std::sync::atomic::AtomicU64,
}

/// What `GET /v1/harnesses` shows of an image's `:latest`: present, version, built at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFacts {
    /// `:latest` exists.
    pub present: bool,
    /// Its `/usr/share/handler/version`.
    pub version: Option<String>,
    /// When it was built.
    pub built_at: Option<String>,
    /// Its image id (a part's record names the source's it was built from).
    pub id: Option<String>,
}

/// One image's facts as last read — when, under which [`BuildStore::generation`] — so callers
/// arriving together wait for one read.
pub type FactsSlot = Arc<crate::daemon::memo::Memo<ImageFacts>>;

/// The runtime could not say whether the network filter is built (nothing is refused).
pub const FILTER_UNKNOWN: u8 = 0;
/// The network filter is built.
pub const FILTER_PRESENT: u8 = 1;
/// The network filter is not built (yet).
pub const FILTER_MISSING: u8 = 2;

impl BuildStore {
    /// Opens `<state>/builds`, marking a build left running as failed ("daemon restarted").
    pub fn open(state_dir: &Path) -> Result<BuildStore, BuildStoreError> {
        let dir = state_dir.join("builds");
        fsutil::create_dir_private(&dir).map_err(io(&dir))?;
        let s = BuildStore {
            dir,
            lock: Mutex::new(()),
            queue: tokio::sync::Mutex::new(()),
            cancels: Mutex::new(HashMap::new()),
            versions: Mutex::new(HashMap::new()),
            stopping: false.into(),
            stale: Mutex::new(Vec::new()),
            filter: FILTER_UNKNOWN.into(),
            updates_running: false.into(),
            facts: Mutex::new(HashMap::new()),
            generation: 0.into(),
        };
        let stale = s.stale_path();
        if let Some(text) = fsutil::read_optional(&stale).map_err(io(&stale))? {
            *s.stale.lock().unwrap_or_else(PoisonError::into_inner) = stale_ids(&text);
        }
        for mut b in s.list()? {
            if b.state == BuildState::Running {
                b.state = BuildState::Failed;
                b.error = Some("daemon restarted".into());
                b.ended_at = Some(fsutil::now_rfc3339());
                s.append_log(&b.id, "\nfailed: daemon restarted\n")?;
                s.put(&b)?;
            }
        }
        Ok(s)
    }

    fn stale_path(&self) -> PathBuf {
        self.dir.join("stale-images.txt")
    }

    /// Remembers an image to remove once no container uses it (kept across restarts).
    pub fn add_stale(&self, image: &str) -> Result<(), BuildStoreError> {
        let mut list = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
        if !list.iter().any(|i| i == image) {
            list.push(image.to_string());
        }
        self.write_stale(&list)
    }

    /// The images to try removing again, forgotten until [`BuildStore::keep_stale`] gives back
    /// those still in use.
    pub fn take_stale(&self) -> Vec<String> {
        std::mem::take(&mut *self.stale.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The images still in use after a try: remembered again, with any added meanwhile.
    pub fn keep_stale(&self, kept: Vec<String>) -> Result<(), BuildStoreError> {
        let mut list = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
        for k in kept {
            if !list.contains(&k) {
                list.push(k);
            }
        }
        self.write_stale(&list)
    }

    fn write_stale(&self, list: &[String]) -> Result<(), BuildStoreError> {
        let p = self.stale_path();
        let text: String = list.iter().map(|i| format!("{i}\n")).collect();
        fsutil::write_atomic(&p, text.as_bytes(), 0o600).map_err(io(&p))
    }

    fn record(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// A build's log file.
    pub fn log_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.log"))
    }

    /// A folder for a build's own files (its build context, its check), removed with it.
    pub fn work_dir(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.work"))
    }

    /// Every build, oldest first.
    pub fn list(&self) -> Result<Vec<Build>, BuildStoreError> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .flatten()
        {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                let text = std::fs::read_to_string(&p).map_err(io(&p))?;
                out.push(serde_json::from_str::<Build>(&text).map_err(|source| {
                    BuildStoreError::Json {
                        path: p.display().to_string(),
                        source,
                    }
                })?);
            }
        }
        out.sort_by(|a, b| (&a.started_at, &a.id).cmp(&(&b.started_at, &b.id)));
        Ok(out)
    }

    /// One build.
    pub fn get(&self, id: &str) -> Result<Option<Build>, BuildStoreError> {
        let p = self.record(id);
        match fsutil::read_optional(&p).map_err(io(&p))? {
            None => Ok(None),
            Some(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|source| BuildStoreError::Json {
                    path: p.display().to_string(),
                    source,
                }),
        }
    }

    /// Writes a build's record.
    pub fn put(&self, b: &Build) -> Result<(), BuildStoreError> {
        // A build that ended may have changed an image: the facts are read again.
        if b.state != BuildState::Running {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let p = self.record(&b.id);
        let bytes = serde_json::to_vec_pretty(b).map_err(|source| BuildStoreError::Json {
            path: p.display().to_string(),
            source,
        })?;
        fsutil::write_atomic(&p, &bytes, 0o600).map_err(io(&p))
    }

    /// Changes a build's record under the lock.
    pub fn update(
        &self,
        id: &str,
        f: impl FnOnce(&mut Build),
    ) -> Result<Option<Build>, BuildStoreError> {
        let Some(mut b) = self.get(id)? else {
            return Ok(None);
        };
        f(&mut b);
        self.put(&b)?;
        Ok(Some(b))
    }

    /// Appends to a build's log, up to [`LOG_CAP`] (then one line says it was cut).
    pub fn append_log(&self, id: &str, text: &str) -> Result<(), BuildStoreError> {
        let p = self.log_path(id);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(io(&p))?;
        let len = f.metadata().map_err(io(&p))?.len();
        let room = LOG_CAP.saturating_sub(len);
        if room == 0 {
            return Ok(());
        }
        let bytes = text.as_bytes();
        let cut = TRUNCATED.len() as u64;
        if (bytes.len() as u64) + cut <= room {
            f.write_all(bytes).map_err(io(&p))
        } else {
            let keep = floor_char(text, room.saturating_sub(cut) as usize);
            f.write_all(&bytes[..keep]).map_err(io(&p))?;
            let last = &TRUNCATED.as_bytes()[..(room as usize - keep).min(TRUNCATED.len())];
            f.write_all(last).map_err(io(&p))
        }
    }

    /// The log from `offset` (at most [`LOG_READ_MAX`] bytes, whole characters).
    pub fn read_log(
        &self,
        id: &str,
        offset: u64,
        complete: bool,
    ) -> Result<BuildLog, BuildStoreError> {
        let p = self.log_path(id);
        let mut buf = Vec::new();
        match std::fs::File::open(&p) {
            Ok(mut f) => {
                f.seek(SeekFrom::Start(offset)).map_err(io(&p))?;
                f.take(LOG_READ_MAX).read_to_end(&mut buf).map_err(io(&p))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p)(e)),
        }
        let valid = match std::str::from_utf8(&buf) {
            Ok(_) => buf.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&buf[..valid]).into_owned();
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        let next = offset + valid as u64;
        Ok(BuildLog {
            text,
            next_offset: next,
            complete: complete && next >= len,
        })
    }
}

/// The largest index ≤ `at` on a character boundary of `s`.
fn floor_char(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn build(id: &str, state: BuildState) -> Build {
        Build {
            id: id.into(),
            target: "fake".into(),
            state,
            stage: Some("build fake".into()),
            step: None,
            steps: None,
            versions: Default::default(),
            error: None,
            started_at: "2026-12-01T12:00:00Z".into(),
            ended_at: None,
            extra: Map::new(),
        }
    }

    #[test]
    fn a_build_left_running_is_failed_when_the_store_opens_again() {
        let d = tempfile::tempdir().unwrap();
        let s = BuildStore::open(d.path()).unwrap();
        let mut b = build("b_1", BuildState::Running);
        b.extra.insert("future".into(), serde_json::json!(1));
        s.put(&b).unwrap();
        s.put(&build("b_2", BuildState::Succeeded)).unwrap();
        drop(s);
        let s = BuildStore::open(d.path()).unwrap();
        let b = s.get("b_1").unwrap().unwrap();
        assert_eq!(b.state, BuildState::Failed);
        assert_eq!(b.error.as_deref(), Some("daemon restarted"));
        assert!(b.ended_at.is_some());
        assert_eq!(b.extra["future"], 1, "unknown fields kept");
        assert_eq!(s.get("b_2").unwrap().unwrap().state, BuildState::Succeeded);
        assert!(
            s.read_log("b_1", 0, true)
                .unwrap()
                .text
                .contains("daemon restarted")
        );
    }

    #[test]
    fn images_kept_in_use_are_remembered_across_a_restart() {
        let d = tempfile::tempdir().unwrap();
        let s = BuildStore::open(d.path()).unwrap();
        s.add_stale("aaaa1111").unwrap();
        s.add_stale("bbbb2222").unwrap();
        s.add_stale("aaaa1111").unwrap();
        drop(s);
        let s = BuildStore::open(d.path()).unwrap();
        assert_eq!(s.take_stale(), ["aaaa1111", "bbbb2222"]);
        s.add_stale("cccc3333").unwrap();
        s.keep_stale(vec!["bbbb2222".into()]).unwrap();
        drop(s);
        let s = BuildStore::open(d.path()).unwrap();
        assert_eq!(s.take_stale(), ["cccc3333", "bbbb2222"]);
        s.keep_stale(Vec::new()).unwrap();
        drop(s);
        let s = BuildStore::open(d.path()).unwrap();
        assert!(s.take_stale().is_empty(), "removed images are forgotten");
        // The file is not a build record, and a hand-edited line is never an image name.
        assert!(s.list().unwrap().is_empty());
        assert_eq!(
            stale_ids("abc123\n--rm\n\nabc123\nlocalhost/x\n"),
            ["abc123"]
        );
    }

    #[test]
    fn the_log_is_capped_and_read_from_an_offset() {
        let d = tempfile::tempdir().unwrap();
        let s = BuildStore::open(d.path()).unwrap();
        s.append_log("b", "héllo\n").unwrap();
        let l = s.read_log("b", 0, false).unwrap();
        assert_eq!(l.text, "héllo\n");
        assert_eq!(l.next_offset, 7);
        assert!(!l.complete);
        let l = s.read_log("b", 7, true).unwrap();
        assert_eq!((l.text.as_str(), l.next_offset, l.complete), ("", 7, true));
        let chunk = "x".repeat(1024 * 1024);
        for _ in 0..9 {
            s.append_log("b", &chunk).unwrap();
        }
        let len = std::fs::metadata(s.log_path("b")).unwrap().len();
        assert_eq!(len, LOG_CAP);
        let mut all = String::new();
        let mut off = 0;
        loop {
            let l = s.read_log("b", off, true).unwrap();
            all.push_str(&l.text);
            off = l.next_offset;
            if l.complete {
                break;
            }
        }
        assert!(all.ends_with(TRUNCATED), "{}", &all[all.len() - 40..]);
    }
}
