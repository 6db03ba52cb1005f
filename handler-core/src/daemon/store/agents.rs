//! The agents and projects store (D.8): `<state>/agents.json` (ad-hoc agents and projects'
//! agents) and `<state>/projects.json`, held in memory and written atomically on each change.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use handler_contracts::control::{AgentOptions, CacheChoice, ModelAccess};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::daemon::fsutil;

/// An agent as stored: its settings as given, resolved views are computed on read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredAgent {
    /// Its id (`a…`).
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its project, if it is a project's.
    pub project_id: Option<String>,
    /// Its models, the first the default (E1).
    pub models: Vec<ModelAccess>,
    #[serde(default)]
    /// Its settings as given.
    pub options: AgentOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// An ad-hoc agent's scope as given.
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its name (a project's agents).
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its description.
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its instructions.
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Where it came from (a duplicate names its original).
    pub origin: Option<String>,
    #[serde(default)]
    /// Its skills (D.17).
    pub skills: Vec<String>,
    #[serde(default)]
    /// Whether a remote client may start it.
    pub remote_start: bool,
    /// When it was made (RFC 3339).
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it was last connected to.
    pub last_used_at: Option<String>,
    /// Fields a newer Handler wrote: kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A project as stored (its agents are in agents.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredProject {
    /// Its id (`p…`).
    pub id: String,
    /// Its name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its description.
    pub description: Option<String>,
    /// Its work folder, as given.
    pub folder: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The agent a connection to the project gets.
    pub default_agent: Option<String>,
    #[serde(default)]
    /// Its caches (D.8).
    pub caches: CacheChoice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its context (D.19).
    pub context: Option<String>,
    /// The skills it gives to all its agents (D.17).
    #[serde(default)]
    pub skills: Vec<String>,
    /// When it was made (RFC 3339).
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When one of its agents was last connected to.
    pub last_used_at: Option<String>,
    #[serde(flatten)]
    /// Fields a newer Handler wrote: kept.
    pub extra: Map<String, Value>,
}

#[derive(Debug, Default)]
struct Data {
    agents: Vec<StoredAgent>,
    projects: Vec<StoredProject>,
}

/// The store.
#[derive(Debug)]
pub struct AgentStore {
    agents_path: PathBuf,
    projects_path: PathBuf,
    data: Mutex<Data>,
}

/// Reading or writing the store failed.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct StoreError {
    /// The file.
    pub path: String,
    /// What failed.
    pub message: String,
}

fn read_list<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, StoreError> {
    let err = |message: String| StoreError {
        path: path.display().to_string(),
        message,
    };
    match fsutil::read_optional(path).map_err(|e| err(e.to_string()))? {
        None => Ok(Vec::new()),
        Some(t) => handler_contracts::parse::from_json(&path.display().to_string(), &t)
            .map_err(|e| err(e.to_string())),
    }
}

impl AgentStore {
    /// Loads `<state>/agents.json` and `<state>/projects.json`.
    pub fn open(state_dir: &std::path::Path) -> Result<Self, StoreError> {
        let agents_path = state_dir.join("agents.json");
        let projects_path = state_dir.join("projects.json");
        let data = Data {
            agents: read_list(&agents_path)?,
            projects: read_list(&projects_path)?,
        };
        Ok(AgentStore {
            agents_path,
            projects_path,
            data: Mutex::new(data),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Data> {
        self.data
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every agent.
    pub fn agents(&self) -> Vec<StoredAgent> {
        self.lock().agents.clone()
    }
    /// One agent.
    pub fn agent(&self, id: &str) -> Option<StoredAgent> {
        self.lock().agents.iter().find(|a| a.id == id).cloned()
    }
    /// Every project.
    pub fn projects(&self) -> Vec<StoredProject> {
        self.lock().projects.clone()
    }
    /// One project.
    pub fn project(&self, id: &str) -> Option<StoredProject> {
        self.lock().projects.iter().find(|p| p.id == id).cloned()
    }

    /// Changes the data under the lock and writes both files; nothing changes when `f` fails
    /// or a write fails.
    pub fn update<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut Vec<StoredAgent>, &mut Vec<StoredProject>) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut d = self.lock();
        let mut agents = d.agents.clone();
        let mut projects = d.projects.clone();
        let r = f(&mut agents, &mut projects)?;
        let write = |p: &PathBuf, v: &serde_json::Value| {
            fsutil::write_atomic(p, &serde_json::to_vec_pretty(v).unwrap_or_default(), 0o600)
                .map_err(|e| StoreError {
                    path: p.display().to_string(),
                    message: e.to_string(),
                })
        };
        if agents != d.agents {
            write(
                &self.agents_path,
                &serde_json::to_value(&agents).unwrap_or_default(),
            )?;
        }
        if projects != d.projects {
            write(
                &self.projects_path,
                &serde_json::to_value(&projects).unwrap_or_default(),
            )?;
        }
        d.agents = agents;
        d.projects = projects;
        Ok(r)
    }

    /// Records a use (a connection) of an agent and its project.
    pub fn touch(&self, agent_id: &str) {
        let now = fsutil::now_rfc3339();
        let _ = self.update::<(), StoreError>(|agents, projects| {
            if let Some(a) = agents.iter_mut().find(|a| a.id == agent_id) {
                a.last_used_at = Some(now.clone());
                if let Some(p) = projects
                    .iter_mut()
                    .find(|p| Some(&p.id) == a.project_id.as_ref())
                {
                    p.last_used_at = Some(now);
                }
            }
            Ok(())
        });
    }
}

/// A new id: `prefix` + 10 hex digits.
pub fn new_id(prefix: &str) -> String {
    let n: u64 = rand::random::<u64>() & 0xff_ffff_ffff;
    format!("{prefix}{n:010x}")
}
