//! The mini apps' live side (decisions 0157, 0158): one-time login codes, the browsers' sessions
//! on each app's origin (in memory: a restart logs them out), one lock per app that serializes
//! its deploy, rollback and delete, each backend's slot (the one start, the running
//! sandbox) with the state the API shows, and what each app serves (read from its record once,
//! forgotten at every write of it: the app origin's requests read no file).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use handler_contracts::miniapp::AppState as Phase;

/// How long a login code stays valid.
pub const CODE_TTL: Duration = Duration::from_secs(60);

/// The apps' live state.
#[derive(Debug, Default)]
pub struct AppsLive {
    /// Login codes: code → (app, valid until).
    codes: Mutex<HashMap<String, (String, Instant)>>,
    /// Browser sessions: cookie value → app.
    sessions: Mutex<HashMap<String, String>>,
    /// One lock per app.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each backend's slot.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Each backend's state as the API shows it.
    phases: Mutex<HashMap<String, Phase>>,
    /// The apps whose queue a deliverer runs for (H.10).
    delivering: Mutex<std::collections::HashSet<String>>,
    /// Wakes an app's deliverer waiting to try again (a deploy, a rollback, a secret set).
    wakers: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// What each registered app serves, as its record and deployed manifest said when read;
    /// with a count of the forgets, so a read that began before a write is not kept after it.
    served: Mutex<(u64, HashMap<String, Arc<Served>>)>,
}

/// What an app's origin needs of its record on every request (its deployed version, whether it
/// has a backend, its queued routes): kept in memory between writes of the record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The version served, if one is deployed.
    pub deployed: Option<String>,
    /// Whether that version has a backend.
    pub backend: bool,
    /// Its routes marked `queued` (H.10), as `METHOD /path`.
    pub queued: std::collections::BTreeSet<String>,
}

/// A backend's slot: held while it starts or stops, so concurrent first requests wait on one
/// start.
#[derive(Debug, Default)]
pub struct Slot {
    /// The running backend.
    pub running: Option<Running>,
    /// Bumped at each start and stop: an idle watcher of an older one does nothing.
    pub generation: u64,
}

/// A running backend.
#[derive(Debug)]
pub struct Running {
    /// The launcher process.
    pub child: tokio::process::Child,
    /// Its HTTP socket on the host.
    pub socket: std::path::PathBuf,
    /// When it was last used.
    pub last_used: Arc<Mutex<Instant>>,
    /// Answers being streamed now.
    pub streams: Arc<std::sync::atomic::AtomicUsize>,
    /// Its notification socket's listener (`needs.notify`), stopped with it.
    pub notify: Option<AbortOnDrop>,
    /// Its idle connections (closed with it).
    pub pool: IdleConnections,
}

/// A backend's idle HTTP/1.1 connections to its socket (`services::apps::proxy` takes and gives
/// them back).
pub type IdleConnections =
    Arc<Mutex<Vec<hyper::client::conn::http1::SendRequest<axum::body::Body>>>>;

/// A task aborted when this is dropped (a listener that lives as long as a backend).
#[derive(Debug)]
pub struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// 32 random bytes, hex.
fn secret() -> String {
    let b: [u8; 32] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl AppsLive {
    /// A new login code for `app`, valid once for [`CODE_TTL`] from `now`.
    pub fn new_code(&self, app: &str, now: Instant) -> String {
        let code = secret();
        let mut codes = self.codes.lock().unwrap_or_else(PoisonError::into_inner);
        codes.retain(|_, (_, until)| *until > now);
        codes.insert(code.clone(), (app.to_string(), now + CODE_TTL));
        code
    }

    /// Takes `code` for `app` (once): a new session's cookie value, or `None`.
    pub fn redeem(&self, app: &str, code: &str, now: Instant) -> Option<String> {
        let mut codes = self.codes.lock().unwrap_or_else(PoisonError::into_inner);
        let (owner, until) = codes.remove(code)?;
        if owner != app || until <= now {
            return None;
        }
        drop(codes);
        let cookie = secret();
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cookie.clone(), app.to_string());
        Some(cookie)
    }

    /// Whether `cookie` is a session on `app`'s origin.
    pub fn session_ok(&self, app: &str, cookie: &str) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cookie)
            .is_some_and(|a| a == app)
    }

    /// What `app` serves, if it was read since its record was last written; else the count to
    /// give [`AppsLive::keep_served`] with what the caller reads now.
    pub fn served(&self, app: &str) -> Result<Arc<Served>, u64> {
        let g = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        g.1.get(app).cloned().ok_or(g.0)
    }

    /// Keeps what `app` serves, read after [`AppsLive::served`] answered `count`: dropped if a
    /// record was written since (the read may be older than the write).
    pub fn keep_served(&self, app: &str, s: Arc<Served>, count: u64) {
        let mut g = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        if g.0 == count {
            g.1.insert(app.to_string(), s);
        }
    }

    /// Forgets what `app` serves: its record is being written.
    pub fn forget_served(&self, app: &str) {
        let mut g = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        g.0 += 1;
        g.1.remove(app);
    }

    /// Ends every session and code of `app` (it was deleted).
    pub fn forget(&self, app: &str) {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, a| a != app);
        self.codes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, (a, _)| a != app);
    }

    /// The slot of `app`'s backend.
    pub fn slot(&self, app: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(app.to_string())
            .or_default()
            .clone()
    }

    /// `app`'s backend's state (stopped when never started).
    pub fn phase(&self, app: &str) -> Phase {
        self.phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(app)
            .copied()
            .unwrap_or(Phase::Stopped)
    }

    /// Sets `app`'s backend's state.
    pub fn set_phase(&self, app: &str, p: Phase) {
        self.phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(app.to_string(), p);
    }

    /// Marks `app`'s queue as delivered: `true` when no deliverer ran (start one).
    pub fn start_delivering(&self, app: &str) -> bool {
        self.delivering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(app.to_string())
    }

    /// Ends `app`'s deliverer if `done()` holds, checked under the mark's lock (an item queued
    /// meanwhile is delivered by it rather than left behind): whether it ended.
    pub fn stop_delivering(&self, app: &str, done: impl FnOnce() -> bool) -> bool {
        let mut set = self
            .delivering
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if done() {
            set.remove(app);
            true
        } else {
            false
        }
    }

    /// What wakes `app`'s deliverer.
    pub fn waker(&self, app: &str) -> Arc<tokio::sync::Notify> {
        self.wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(app.to_string())
            .or_default()
            .clone()
    }

    /// The lock of `app`.
    pub fn lock_of(&self, app: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(app.to_string())
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_an_app_serves_is_kept_until_its_record_is_written_and_a_read_from_before_is_dropped() {
        let live = AppsLive::default();
        let s = Arc::new(Served {
            deployed: Some("1.0.0".into()),
            backend: true,
            queued: Default::default(),
        });
        let count = live.served("counter").unwrap_err();
        live.keep_served("counter", s.clone(), count);
        assert_eq!(live.served("counter").unwrap(), s);
        live.forget_served("counter");
        let before = live.served("counter").unwrap_err();
        // A read that began before another write: not kept.
        live.forget_served("counter");
        live.keep_served("counter", s.clone(), before);
        assert!(live.served("counter").is_err());
    }

    use super::*;

    #[test]
    fn a_code_logs_in_once_for_its_app_within_its_minute() {
        let live = AppsLive::default();
        let t0 = Instant::now();
        let code = live.new_code("counter", t0);
        assert!(live.redeem("other", &code, t0).is_none(), "another app's");
        let code = live.new_code("counter", t0);
        let cookie = live.redeem("counter", &code, t0).unwrap();
        assert!(live.redeem("counter", &code, t0).is_none(), "used once");
        assert!(live.session_ok("counter", &cookie));
        assert!(!live.session_ok("other", &cookie), "scoped to its app");
        let late = live.new_code("counter", t0);
        assert!(
            live.redeem("counter", &late, t0 + CODE_TTL).is_none(),
            "expired"
        );
        live.forget("counter");
        assert!(
            !live.session_ok("counter", &cookie),
            "deleting the app ends it"
        );
    }
}
