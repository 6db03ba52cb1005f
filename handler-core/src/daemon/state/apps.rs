//! The mini apps' live side (decisions 0157, 0158): one-time login codes, the browsers' sessions
//! on each app's origin (in memory: a restart logs them out), one lock per app that serializes
//! its deploy, rollback and delete, and each backend's slot (the one start, the running
//! sandbox) with the state the API shows.

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
}

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
