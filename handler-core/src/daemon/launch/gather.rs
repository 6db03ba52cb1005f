//! The I/O step of a launch: everything resolve needs read from the world — the stores, the
//! scope and knowledge folders checked now (links resolved), the bindings' addons, the skill
//! folders, the caches made, the credential (its secret reference resolved, its files read),
//! the state folders made (E6), the Wayland socket (A.6), the scope's repository for the git
//! guard. Decides nothing resolve decides: where it must know what to read, it asks resolve's
//! own pure helpers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use handler_contracts::allow::AllowEntry;
use handler_contracts::containment::containment;
use handler_contracts::control::{ModelAccess, NetworkMode};
use handler_contracts::harness::SlotKind;
use handler_contracts::validate::{AccessCatalog, expand_home};
use handler_contracts::{FileSource, HarnessDescriptor};
use handler_sandbox::egress::phantom::RandomSource;

use handler_contracts::control::GitGuard;
use handler_sandbox::copytree::SessionTree;

use super::caches;
use super::gitguard;
use super::resolve::{
    self, AddonLaunch, AgentFacts, Credential, Delivered, GuardFacts, ResolveError,
};
use super::sources::Sources;
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::secretref::{self, SecretRefError};
use crate::daemon::state::AppState;
use crate::daemon::store::skills;
use crate::daemon::store::{StoredAgent, StoredProject};

/// The operating system's randomness, for phantoms.
pub(crate) struct OsRandom;

impl RandomSource for OsRandom {
    fn next_u32(&mut self) -> u32 {
        rand::random()
    }
}

/// [`resolve::deliver`] with the operating system's randomness (an addon's secrets, G4).
pub(crate) fn deliver(
    name: &str,
    value: String,
    hosts: Vec<AllowEntry>,
    network: NetworkMode,
) -> Delivered {
    resolve::deliver(name, value, hosts, network, None, &mut OsRandom)
}

/// What gather read for one launch: resolve's inputs, owned.
pub(crate) struct Gathered {
    /// The catalog, read once.
    pub(crate) catalog: Box<dyn AccessCatalog>,
    /// The project's context (D.19).
    pub(crate) context: Option<String>,
    /// The agent.
    pub(crate) agent: AgentFacts,
    /// The scope, checked now, canonical.
    pub(crate) scope: String,
    /// The knowledge folders, canonical.
    pub(crate) knowledge: Vec<String>,
    /// What its bindings add.
    pub(crate) addons: AddonLaunch,
    /// Its own skills and its project's: name → canonical folder.
    pub(crate) skills: Vec<(String, String)>,
    /// The caches, made.
    pub(crate) caches: BTreeMap<String, String>,
    /// Its credential.
    pub(crate) credential: Credential,
    /// The Wayland socket, when it has a display.
    pub(crate) display: Option<String>,
    /// The scope's repository, for the git guard.
    pub(crate) guard: GuardFacts,
}

/// A problem of resolve's, as the API answers it.
pub(crate) fn problem(e: ResolveError) -> ApiError {
    use axum::http::StatusCode;
    let detail = e.to_string();
    match e {
        ResolveError::Unusable(_) => ApiError::bad_request("model access unusable", detail),
        ResolveError::Context(_) => ApiError::conflict("not for this project's context", detail),
        ResolveError::NoFolder => ApiError::bad_request("works in sessions only", detail),
        ResolveError::SkillTwice(_) => ApiError::bad_request("skill unusable", detail),
        ResolveError::Binding(_) => ApiError::bad_request("binding unusable", detail),
        ResolveError::Guard(_) => ApiError::conflict("git guard refused the scope", detail),
        ResolveError::Copy(_) | ResolveError::CopyWithoutScope => {
            ApiError::conflict("sessionTree refused", detail)
        }
        ResolveError::Render { .. } => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "render failed", detail)
        }
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "compose failed", detail),
    }
}

fn unusable(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("model access unusable", detail)
}

/// Reads everything a launch of `agent` with `access` needs, in the order the checks have
/// always answered in (400 model access unusable, 409 context, 400 for what a start checks
/// again).
pub(crate) fn gather(
    app: &AppState,
    agent: &StoredAgent,
    access: &ModelAccess,
    session: Option<&std::path::Path>,
    shared_state: Option<&str>,
) -> ApiResult<Gathered> {
    let catalog = app.catalog();
    let project = agent
        .project_id
        .as_ref()
        .and_then(|p| app.agents.project(p));
    let context = project.as_ref().and_then(|p| p.context.clone());
    let (_, d) = resolve::access(&*catalog, access, context.as_deref()).map_err(problem)?;
    let d = d.clone();
    let folder = project.as_ref().map(|p| p.folder.as_str());
    let mut fresh_work = false;
    let scope = match (
        resolve::scope_source(folder, agent.scope.as_deref()),
        session,
    ) {
        // F.2: a folderless agent's session works in its session folder's `work/`.
        (Err(ResolveError::NoFolder), Some(f)) => {
            fresh_work = std::fs::symlink_metadata(f).is_err();
            crate::daemon::store::folders::check_session_work(&app.config, f)?
        }
        // Checked again now (D.13): what the stored folder resolves to may have changed since
        // the save (a sandbox that can write its parent can swap it for a link).
        (source, _) => {
            let (field, scope) = source.map_err(problem)?;
            app.check_scope(field, &scope)?
        }
    }
    .display()
    .to_string();
    let network = containment(&agent.options).network;
    let knowledge = app.knowledge(&agent.options.knowledge)?;
    let addons = app.addons(agent, network)?;
    let skills = library_skills(app, agent, project.as_ref())?;
    // D.8: the toolbox's caches where its project keeps them (ad hoc: the global ones).
    let caches = caches::resolve(&app.config, project.as_ref())
        .map_err(|e| ApiError::bad_request("caches unusable", e.to_string()))?;
    let (credential, who) = credential(app, &*catalog, &d, access)?;
    let data_dir = app.config.data_dir.display().to_string();
    let owner = match shared_state {
        Some(p) => resolve::StateOwner::Profile(p),
        None => resolve::StateOwner::Agent(&agent.id),
    };
    make_state(&resolve::state_slots(&data_dir, owner, &d, &who))?;
    // Decision 0154: "start from my own settings", once per seed.
    super::seed::at_launch(app, agent, &d, &who);
    let display = if agent.options.display {
        Some(
            wayland_socket()
                .map_err(|e| ApiError::bad_request("display unusable", e.to_string()))?,
        )
    } else {
        None
    };
    let guard = guard_facts(app, agent, &scope, fresh_work)?;
    Ok(Gathered {
        catalog,
        context,
        agent: AgentFacts {
            id: agent.id.clone(),
            options: agent.options.clone(),
            instructions: agent.instructions.clone(),
        },
        scope,
        knowledge,
        addons,
        skills,
        caches,
        credential,
        display,
        guard,
    })
}

/// What the git guard needs of the scope (decision 0103): under `sessionTree = "copy"` the
/// repository it is in, else — unless `gitGuard = "open"` — the one it is the root of; read
/// without following links or running anything the repository configures (security F1). A
/// `.git` the guard refuses on sight is a 409 naming it. A new session's own `work/`
/// (`fresh_work`: made with its record, after this) holds no repository.
fn guard_facts(
    app: &AppState,
    agent: &StoredAgent,
    scope: &str,
    fresh_work: bool,
) -> ApiResult<GuardFacts> {
    let tree = SessionTree::parse(agent.options.session_tree.as_deref())
        .map_err(|e| ApiError::bad_request("sessionTree unusable", e.to_string()))?;
    let seen = gitguard::seen_dir(&app.config.data_dir);
    let scope = std::path::Path::new(scope);
    let repo = match tree {
        _ if fresh_work => Ok(None),
        SessionTree::Copy => gitguard::gather_enclosing(&seen, scope),
        SessionTree::Shared if agent.options.git_guard == Some(GitGuard::Open) => Ok(None),
        SessionTree::Shared => gitguard::gather(&seen, scope),
    };
    let repo = repo.map_err(|e| match (e.is_refusal(), tree) {
        (true, SessionTree::Copy) => {
            ApiError::conflict("sessionTree refused", format!("git guard: {e}"))
        }
        (true, SessionTree::Shared) => {
            ApiError::conflict("git guard refused the scope", format!("git guard: {e}"))
        }
        (false, _) => ApiError::internal(e),
    })?;
    Ok(GuardFacts { tree, repo })
}

/// D.17: its own skills and its project's, from the library, each checked now.
fn library_skills(
    app: &AppState,
    agent: &StoredAgent,
    project: Option<&StoredProject>,
) -> ApiResult<Vec<(String, String)>> {
    let project_skills = project.map(|p| p.skills.clone()).unwrap_or_default();
    agent
        .skills
        .iter()
        .chain(&project_skills)
        .map(|s| {
            skills::library_skill(&app.config.skills_dir, s)
                .map(|dir| (s.clone(), dir.display().to_string()))
                .map_err(|e| ApiError::bad_request("skill unusable", e.to_string()))
        })
        .collect()
}

/// The model's credential (E2, D.9) and whose state it is (the account's or provider's name).
fn credential(
    app: &AppState,
    catalog: &dyn AccessCatalog,
    d: &HarnessDescriptor,
    access: &ModelAccess,
) -> ApiResult<(Credential, String)> {
    if let Some(name) = &access.account {
        let (acc, login) = resolve::account(catalog, name, d).map_err(problem)?;
        if !app.logged_in(name, acc, d) {
            return Err(unusable(format!("account {name:?} is not logged in")));
        }
        if login.is_file_login() {
            let cred = app.credential_path(name).display().to_string();
            return Ok((Credential::LoginFile(cred), name.clone()));
        }
        let token = match &acc.token {
            Some(t) => {
                let value = app
                    .secret(t)
                    .map_err(|e| unusable(format!("account {name:?}: token: {e}")))?;
                Some((app.token_name(name), value))
            }
            None => None,
        };
        return Ok((Credential::Token(token), name.clone()));
    }
    let name = access.provider.clone().unwrap_or_default();
    let prov = resolve::provider(catalog, &name).map_err(problem)?;
    let api_key = match &prov.api_key {
        Some(k) => {
            let value = app
                .secret(k)
                .map_err(|e| unusable(format!("provider {name:?}: apiKey: {e}")))?;
            Some((app.key_name(&name), value))
        }
        None => None,
    };
    let home = app.config.home.to_string_lossy().into_owned();
    let files = prov
        .files
        .get(&d.name)
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|(slot, f)| resolve_file(&home, slot, f).map(|c| (slot.clone(), c)))
        .collect::<Result<BTreeMap<_, _>, _>>()
        .map_err(|e| unusable(format!("provider {name:?}: {e}")))?;
    Ok((Credential::Provider { api_key, files }, name))
}

/// A provider's file for a harness that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FileError {
    /// `{ env }` names a variable handlerd does not have.
    #[error("files.{slot}: environment variable {var} is not set")]
    EnvUnset {
        /// The file's slot.
        slot: String,
        /// The variable.
        var: String,
    },
    /// `{ file }` is not a path.
    #[error(transparent)]
    Path(#[from] handler_contracts::ValidationError),
    /// It is not a regular file of at most 1 MiB, or cannot be read (the reason as the system
    /// gives it).
    #[error("files.{slot}: {source}")]
    Read {
        /// The file's slot.
        slot: String,
        /// Why.
        source: SecretRefError,
    },
    /// It is not text.
    #[error("files.{slot}: {path} is not UTF-8 text")]
    NotText {
        /// The file's slot.
        slot: String,
        /// The host file.
        path: String,
    },
}

/// A provider's file for a harness, its content read now (render takes content only).
fn resolve_file(home: &str, slot: &str, f: &FileSource) -> Result<FileSource, FileError> {
    match f {
        FileSource::Content(_) => Ok(f.clone()),
        FileSource::Env(v) => {
            std::env::var(v)
                .map(FileSource::Content)
                .map_err(|_| FileError::EnvUnset {
                    slot: slot.to_string(),
                    var: v.clone(),
                })
        }
        FileSource::File(p) => {
            let path = expand_home(slot, p, home)?;
            // Bounded whatever `stat` says: `/dev/zero` is refused, never read without end.
            let bytes = secretref::read_small_file(&path).map_err(|source| FileError::Read {
                slot: slot.to_string(),
                source,
            })?;
            String::from_utf8(bytes)
                .map(FileSource::Content)
                .map_err(|_| FileError::NotText {
                    slot: slot.to_string(),
                    path,
                })
        }
    }
}

/// E6: the state folders and files made, with their initial content when missing, never
/// rewritten.
pub(crate) fn make_state(slots: &[resolve::StateSlotPlan]) -> ApiResult<()> {
    for s in slots {
        let p = PathBuf::from(&s.path);
        match s.kind {
            SlotKind::Dir => fsutil::create_dir_private(&p).map_err(ApiError::internal)?,
            SlotKind::File if !p.exists() => {
                fsutil::write_atomic(&p, s.initial.as_bytes(), 0o600)
                    .map_err(ApiError::internal)?;
            }
            SlotKind::File => {}
        }
    }
    Ok(())
}

/// The Wayland socket cannot be found (A.6).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WaylandError {
    /// Neither variable is set.
    #[error("no Wayland display: set HANDLER_WAYLAND_SOCKET")]
    NoDisplay,
    /// The runtime folder cannot be read.
    #[error("{dir}: {error}")]
    Unreadable {
        /// `$XDG_RUNTIME_DIR`.
        dir: String,
        /// Why.
        error: std::io::Error,
    },
    /// No socket in it.
    #[error("no Wayland socket in XDG_RUNTIME_DIR: set HANDLER_WAYLAND_SOCKET")]
    None,
    /// More than one.
    #[error("several Wayland sockets: choose one with HANDLER_WAYLAND_SOCKET")]
    Several,
}

/// A.6: the Wayland socket, found at each start.
fn wayland_socket() -> Result<String, WaylandError> {
    wayland_socket_in(&|k| std::env::var(k).ok())
}

/// [`wayland_socket`] with the environment `var` gives: `HANDLER_WAYLAND_SOCKET`, else
/// `WAYLAND_DISPLAY` (a path, or a name in `XDG_RUNTIME_DIR`), else the only `wayland-*`
/// socket in `XDG_RUNTIME_DIR` (a systemd user service often lacks `WAYLAND_DISPLAY`).
fn wayland_socket_in(var: &dyn Fn(&str) -> Option<String>) -> Result<String, WaylandError> {
    use std::os::unix::fs::FileTypeExt as _;
    if let Some(s) = var("HANDLER_WAYLAND_SOCKET") {
        return Ok(s);
    }
    let runtime = var("XDG_RUNTIME_DIR");
    if let Some(w) = var("WAYLAND_DISPLAY") {
        if w.starts_with('/') {
            return Ok(w);
        }
        if let Some(r) = &runtime {
            return Ok(format!("{r}/{w}"));
        }
    }
    let r = runtime.ok_or(WaylandError::NoDisplay)?;
    let found: Vec<String> = std::fs::read_dir(&r)
        .map_err(|error| WaylandError::Unreadable {
            dir: r.clone(),
            error,
        })?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("wayland-").then(|| format!("{r}/{n}"))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(WaylandError::None),
        _ => Err(WaylandError::Several),
    }
}

#[cfg(test)]
mod tests {
    use super::{WaylandError, wayland_socket_in};
    use std::collections::HashMap;

    fn find(vars: &[(&str, &str)]) -> Result<String, WaylandError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        wayland_socket_in(&|k| m.get(k).cloned())
    }

    #[test]
    fn the_wayland_socket_is_found_as_a6_says() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().display().to_string();
        // The setting first, then WAYLAND_DISPLAY (a path, or a name in the runtime folder).
        assert_eq!(
            find(&[
                ("HANDLER_WAYLAND_SOCKET", "/s/w"),
                ("WAYLAND_DISPLAY", "/x")
            ])
            .unwrap(),
            "/s/w"
        );
        assert_eq!(
            find(&[("WAYLAND_DISPLAY", "/run/w-1")]).unwrap(),
            "/run/w-1"
        );
        assert_eq!(
            find(&[("WAYLAND_DISPLAY", "wayland-1"), ("XDG_RUNTIME_DIR", &r)]).unwrap(),
            format!("{r}/wayland-1")
        );
        assert!(matches!(find(&[]), Err(WaylandError::NoDisplay)));
        // Else the only wayland-* socket there: a lock file or a regular file is none.
        std::fs::write(dir.path().join("wayland-0.lock"), "").unwrap();
        std::fs::write(dir.path().join("wayland-9"), "").unwrap();
        assert!(matches!(
            find(&[("XDG_RUNTIME_DIR", &r)]),
            Err(WaylandError::None)
        ));
        let _one = std::os::unix::net::UnixListener::bind(dir.path().join("wayland-0")).unwrap();
        assert_eq!(
            find(&[("XDG_RUNTIME_DIR", &r)]).unwrap(),
            format!("{r}/wayland-0")
        );
        let _two = std::os::unix::net::UnixListener::bind(dir.path().join("wayland-1")).unwrap();
        assert!(matches!(
            find(&[("XDG_RUNTIME_DIR", &r)]),
            Err(WaylandError::Several)
        ));
        assert!(matches!(
            find(&[("XDG_RUNTIME_DIR", "/nonexistent-runtime")]),
            Err(WaylandError::Unreadable { .. })
        ));
    }
}
