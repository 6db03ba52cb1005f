//! The daemon's shared state (low: every layer may import it; it names only the stores, the
//! launcher and the low helpers it holds): the configuration, the token, the stores, the
//! launcher, the running connections and sessions, and the egress events recorded.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use handler_contracts::allow::AllowEntry;
use handler_contracts::control::AgentConnection;
use handler_contracts::sandbox::EgressEvent;
use tokio::sync::Notify;

use crate::daemon::config::DaemonConfig;
use crate::daemon::fsutil;
use crate::daemon::launch::launcher::Launcher;
use crate::daemon::store::agents::AgentStore;
use crate::daemon::store::builds::BuildStore;
use crate::daemon::store::catalog;
use crate::daemon::store::documents::{TomlDocs, TomlFile};
use crate::daemon::store::secrets::SecretStore;
use crate::daemon::store::sessions::SessionStore;
use handler_contracts::control::EgressRecord;

pub mod apps;
pub mod remote;
pub mod sessions;

/// A running filtered sandbox's allow-list: the part that stays (the model's and harness's
/// hosts, fixed at launch) and the list in force now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAllow {
    /// The entries fixed at launch (the model's and harness's hosts).
    pub base: Vec<AllowEntry>,
    /// The list in force now.
    pub now: Vec<AllowEntry>,
}

/// A running connection's handle: how to stop it.
#[derive(Debug)]
pub struct LiveConnection {
    /// What the API shows of it.
    pub info: AgentConnection,
    /// Notified to stop it (its sandbox gets SIGTERM).
    pub stop: Arc<Notify>,
    /// A filtered sandbox's allow-list, switched live when the agent changes (A.4).
    pub allow: Option<LiveAllow>,
}

/// How many egress events are kept per agent.
pub const EGRESS_EVENTS_KEPT: usize = 1000;

/// The daemon's shared state.
#[derive(Debug)]
pub struct App {
    /// The configuration.
    pub config: DaemonConfig,
    /// The API token (replaced by `POST /v1/token/rotate`: read it with [`App::token`]).
    pub token: std::sync::RwLock<String>,
    /// The web UI's one-time codes (`POST /v1/ui/code`) and when each stops being valid.
    pub ui_codes: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The mini apps' login codes, browser sessions and locks (decision 0157).
    pub apps: apps::AppsLive,
    /// The secret store (D.14).
    pub secrets: SecretStore,
    /// The agents and projects (D.8).
    pub agents: AgentStore,
    /// The sessions (F).
    pub sessions: SessionStore,
    /// The live sessions' hubs, by session id (decision 0057).
    pub live_sessions: sessions::LiveSessions,
    /// The accounts' documents (`<accounts>/<name>.toml`, D.9).
    pub accounts: TomlDocs,
    /// The providers' documents (`<providers>/<name>.toml`, D.12).
    pub providers: TomlDocs,
    /// The bindings' documents (`<bindings>/<name>.toml`, G.2).
    pub bindings: TomlDocs,
    /// The contexts (`contexts.toml`, D.19).
    pub contexts: TomlFile,
    /// The work folders (`folders.toml`, D.13).
    pub folders: TomlFile,
    /// Starts and drives sandboxes.
    pub launcher: Arc<dyn Launcher>,
    /// Serializes writes of files and stores.
    pub write_lock: tokio::sync::Mutex<()>,
    /// The port bound (the configured one, or the one picked for 0).
    pub bound_port: std::sync::atomic::AtomicU16,
    /// The running connections, by agent id.
    pub connections: Mutex<HashMap<String, Vec<LiveConnection>>>,
    /// Notified when a connection ends.
    pub connections_changed: Notify,
    /// The egress events recorded, by agent id (the last `EGRESS_EVENTS_KEPT`).
    pub egress_events: Mutex<HashMap<String, std::collections::VecDeque<EgressRecord>>>,
    /// The image builds (D.4).
    pub builds: BuildStore,
    /// How many times the catalog was read ([`App::snapshot`]): what a request costs, which
    /// tests hold to once per `POST /v1/sessions` (issue 28, item 2).
    pub catalog_reads: std::sync::atomic::AtomicUsize,
    /// The machines as the change channel last saw them (issue 29 item 3).
    pub machines_seen: MachinesSeen,
    /// Held while a machine is counted and made (decision 0148: the maximum is a maximum).
    pub machine_make: tokio::sync::Mutex<()>,
    /// Disposable machines with no session in them: since when their delay counts (decision
    /// 0148; a session's start sets it ahead, so a machine being started in is not taken).
    pub disposable_idle: Mutex<HashMap<String, std::time::Instant>>,
    /// Remote control's live side (D.7).
    pub remote: remote::Remote,
    /// The runtime's host check as last read (`GET /v1/runtime`, decision 0149).
    pub runtime_check: Arc<
        crate::daemon::memo::Memo<
            Result<handler_contracts::sandbox::RuntimeCheck, crate::daemon::problem::ApiError>,
        >,
    >,
}

/// The machines' change channel's shared side (decision 0143): the list last read, the
/// watchers subscribed to it, a poke for the daemon's own changes and whether the poller runs.
#[derive(Debug)]
pub struct MachinesSeen {
    /// The list last read (sorted by id).
    pub now: tokio::sync::watch::Sender<Arc<Vec<handler_contracts::machine::MachineInfo>>>,
    /// Notified when this daemon made, deleted, started or stopped a machine.
    pub poke: Notify,
    /// Whether the poller runs.
    pub polling: std::sync::atomic::AtomicBool,
}

impl Default for MachinesSeen {
    fn default() -> Self {
        MachinesSeen {
            now: tokio::sync::watch::channel(Arc::new(Vec::new())).0,
            poke: Notify::new(),
            polling: false.into(),
        }
    }
}

/// The state handlers get.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

impl Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl App {
    /// The API token requests must carry now.
    pub fn token(&self) -> String {
        self.token
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Accounts, providers and descriptors as they are on disk now.
    pub fn snapshot(&self) -> catalog::Snapshot {
        self.catalog_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        catalog::Snapshot::read(&self.config)
    }
    /// The port the API listens on.
    pub fn port(&self) -> u16 {
        self.bound_port.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// An agent's running sandboxes.
    pub fn connections_of(&self, agent: &str) -> Vec<AgentConnection> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .map(|v| v.iter().map(|c| c.info.clone()).collect())
            .unwrap_or_default()
    }
    /// Asks an agent's connections to stop (their sandboxes get SIGTERM).
    pub async fn stop_connections(&self, agent: &str) {
        let stops: Vec<Arc<Notify>> = self
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .map(|v| v.iter().map(|c| c.stop.clone()).collect())
            .unwrap_or_default();
        for s in stops {
            s.notify_one();
        }
    }
    /// Records an egress event of one of an agent's sandboxes.
    pub fn record_egress(&self, agent: &str, sandbox: &str, event: EgressEvent) {
        let mut m = self
            .egress_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let q = m.entry(agent.to_string()).or_default();
        q.push_back(EgressRecord {
            at: fsutil::now_rfc3339(),
            sandbox: sandbox.to_string(),
            event,
        });
        while q.len() > EGRESS_EVENTS_KEPT {
            q.pop_front();
        }
    }
    pub(crate) fn live_count(&self) -> usize {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(Vec::len)
            .sum()
    }
}
