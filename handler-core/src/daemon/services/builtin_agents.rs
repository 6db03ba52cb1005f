//! The built-in agents (D.18): platform data (`handler-core/data/builtin-agents/<name>/`:
//! `agent.toml`, `instructions.md`, `interface.json`, `skills/`), listed with the agent set up
//! from each; an ad-hoc agent created with one as its `origin` (at most one each: 400 unknown,
//! 409 already set up) gets its defaults for what the request leaves out, and its skills are
//! installed in the library first unless one of that name is there.

use std::path::{Path, PathBuf};

use handler_contracts::control::{AdHocAgentRequest, AgentInterface, BuiltinAgent, NetworkMode};
use handler_contracts::harness::PermissionMode;
use handler_contracts::sandbox::{Confinement, Enforcement};
use handler_contracts::validate::validate_skill_name;
use serde::Deserialize;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// Where the built-in agents are in the platform data.
const BUILTIN_AGENTS: &str = "handler-core/data/builtin-agents";

/// A built-in agent's `agent.toml`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AgentToml {
    description: String,
    agent_name: String,
    #[serde(default)]
    agent_description: Option<String>,
    network: NetworkMode,
    #[serde(default)]
    egress: Option<Enforcement>,
    confinement: Confinement,
    permissions: PermissionMode,
}

fn dir(app: &AppState) -> PathBuf {
    app.config.platform_dir.join(BUILTIN_AGENTS)
}

/// The skills that come with a built-in agent: its `skills/` folders, sorted.
fn skills_of(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d.join("skills"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| validate_skill_name(n).is_ok())
        .collect();
    v.sort();
    v
}

/// One built-in agent read from its folder (500 when the platform data is broken).
fn read(app: &AppState, name: &str) -> ApiResult<Option<BuiltinAgent>> {
    let d = dir(app).join(name);
    if validate_skill_name(name).is_err() || !d.join("agent.toml").is_file() {
        return Ok(None);
    }
    let broken = |e: String| ApiError::internal(format!("built-in agent {name}: {e}"));
    let text = std::fs::read_to_string(d.join("agent.toml")).map_err(|e| broken(e.to_string()))?;
    let t: AgentToml = toml::from_str(&text).map_err(|e| broken(e.to_string()))?;
    let instructions = std::fs::read_to_string(d.join("instructions.md")).ok();
    let interface = match std::fs::read_to_string(d.join("interface.json")) {
        Ok(j) => {
            Some(serde_json::from_str::<AgentInterface>(&j).map_err(|e| broken(e.to_string()))?)
        }
        Err(_) => None,
    };
    let agent_id = app
        .agents
        .agents()
        .iter()
        .find(|a| a.origin.as_deref() == Some(name))
        .map(|a| a.id.clone());
    Ok(Some(BuiltinAgent {
        name: name.to_owned(),
        description: t.description,
        agent_name: t.agent_name,
        agent_description: t.agent_description,
        instructions,
        network: t.network,
        egress: t.egress,
        allow: Vec::new(),
        confinement: t.confinement,
        permissions: t.permissions,
        skills: skills_of(&d),
        interface,
        agent_id,
    }))
}

/// GET /v1/builtin-agents: every built-in agent, by name.
pub async fn list(app: &AppState) -> ApiResult<Vec<BuiltinAgent>> {
    let mut names: Vec<String> = std::fs::read_dir(dir(app))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut v = Vec::new();
    for n in names {
        if let Some(b) = read(app, &n)? {
            v.push(b);
        }
    }
    Ok(v)
}

/// POST /v1/agents with `origin`: the built-in agent (400 unknown built-in agent, 409 built-in
/// agent already set up), its defaults filled into what `req` leaves out, its skills installed
/// in the library (a skill of that name already there is kept).
pub(crate) fn set_up(app: &AppState, req: &AdHocAgentRequest) -> ApiResult<AdHocAgentRequest> {
    let Some(origin) = &req.origin else {
        return Ok(req.clone());
    };
    let b = read(app, origin)?.ok_or_else(|| {
        ApiError::bad_request(
            "unknown built-in agent",
            format!("origin: no built-in agent {origin:?}"),
        )
    })?;
    if b.agent_id.is_some() {
        return Err(ApiError::conflict(
            "built-in agent already set up",
            format!("origin: an agent of {origin:?} exists (delete it to set it up again)"),
        ));
    }
    let mut r = req.clone();
    r.name = r.name.or(Some(b.agent_name));
    r.description = r.description.or(b.agent_description);
    r.instructions = r.instructions.or(b.instructions);
    let o = &mut r.options;
    o.interface = o.interface.take().or(b.interface);
    o.network = o.network.or(Some(b.network));
    if o.network == Some(NetworkMode::Filtered) {
        o.egress = o.egress.or(b.egress);
    }
    o.confinement = o.confinement.or(Some(b.confinement));
    o.permissions = o.permissions.or(Some(b.permissions));
    for s in &b.skills {
        install_skill(app, origin, s)?;
        if !r.skills.contains(s) {
            r.skills.push(s.clone());
        }
    }
    Ok(r)
}

/// A built-in agent's skill copied into the library, unless one of that name is there.
fn install_skill(app: &AppState, origin: &str, skill: &str) -> ApiResult<()> {
    let to = app.config.skills_dir.join(skill);
    if std::fs::symlink_metadata(&to).is_ok() {
        return Ok(());
    }
    let from = dir(app).join(origin).join("skills").join(skill);
    let staging = app.config.skills_dir.join(format!(".install-{skill}"));
    let _ = std::fs::remove_dir_all(&staging);
    copy_tree(&from, &staging)
        .and_then(|()| std::fs::rename(&staging, &to))
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&staging);
            ApiError::internal(format!("installing the skill {skill}: {e}"))
        })?;
    tracing::info!(%skill, %origin, "built-in agent's skill installed in the library");
    Ok(())
}

/// Copies a folder of regular files and folders (the platform data has nothing else).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = e.file_type()?;
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &dest)?;
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}
