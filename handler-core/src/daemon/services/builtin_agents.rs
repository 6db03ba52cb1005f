//! The built-in agents (D.18): platform data (`handler-core/data/builtin-agents/<name>/`:
//! `agent.toml`, `instructions.md`, `interface.json`, `skills/`, `upstream.toml`), listed with
//! the agent set up from each; an ad-hoc agent created with one as its `origin` (at most one
//! each: 400 unknown, 409 already set up) gets its defaults for what the request leaves out, and
//! its skills are installed in the library first unless one of that name is there: the shipped
//! ones copied, the upstream ones fetched and pinned by their digest (decision 0123).

use std::path::{Path, PathBuf};

use handler_contracts::control::{
    AdHocAgentRequest, AgentInterface, BuiltinAgent, NetworkMode, UpstreamSkill,
};
use handler_contracts::harness::PermissionMode;
use handler_contracts::sandbox::{Confinement, Enforcement};
use handler_contracts::skill_archive::fetch_location;
use handler_contracts::skill_scan::{ScanFile, digest};
use handler_contracts::validate::validate_skill_name;
use serde::Deserialize;

use super::skills::import::{self, NewFile};
use crate::daemon::config::UpstreamOverride;
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

/// A built-in agent's `upstream.toml`: the skills fetched when it is set up (decision 0123).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamToml {
    #[serde(default)]
    skill: Vec<UpstreamEntry>,
}

/// One `[[skill]]` of an `upstream.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamEntry {
    name: String,
    url: String,
    license: String,
    digest: String,
}

/// The settings that point an upstream skill elsewhere: the config's override and the names
/// of its environment variables (for the errors' hints).
fn override_of<'a>(app: &'a AppState, skill: &str) -> Option<(&'a UpstreamOverride, &'static str)> {
    (skill == "skill-creator").then_some((
        &app.config.skill_creator_source,
        "HANDLER_SKILL_CREATOR_URL (and HANDLER_SKILL_CREATOR_DIGEST for another copy)",
    ))
}

/// The upstream skills of a built-in agent's folder, with the config's overrides applied.
fn upstream_of(app: &AppState, d: &Path) -> Result<Vec<UpstreamSkill>, String> {
    let text = match std::fs::read_to_string(d.join("upstream.toml")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("upstream.toml: {e}")),
    };
    let t: UpstreamToml = toml::from_str(&text).map_err(|e| format!("upstream.toml: {e}"))?;
    let mut v = Vec::new();
    for e in t.skill {
        validate_skill_name(&e.name).map_err(|x| format!("upstream.toml: name: {}", x.message))?;
        let o = override_of(app, &e.name).map(|(o, _)| o.clone());
        let o = o.unwrap_or_default();
        v.push(UpstreamSkill {
            url: o.url.unwrap_or(e.url),
            digest: o.digest.unwrap_or(e.digest),
            name: e.name,
            license: e.license,
        });
    }
    Ok(v)
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
    let fetches = upstream_of(app, &d).map_err(broken)?;
    let mut skills = skills_of(&d);
    skills.extend(fetches.iter().map(|u| u.name.clone()));
    skills.sort();
    skills.dedup();
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
        skills,
        interface,
        fetches,
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

/// A built-in agent's upstream skills fetched and checked by [`fetch_upstream`], by name.
#[derive(Debug, Default)]
pub(crate) struct Fetched(Vec<(String, Vec<NewFile>)>);

impl Fetched {
    fn take(&mut self, skill: &str) -> Option<Vec<NewFile>> {
        let i = self.0.iter().position(|(n, _)| n == skill)?;
        Some(self.0.swap_remove(i).1)
    }
}

/// Before the write lock (a slow server never blocks writes): the upstream skills of `req`'s
/// origin that the library lacks, fetched and checked against their digests — 502 when one
/// cannot be fetched or is not what was pinned, with nothing written. Nothing to fetch for a
/// request without origin, an unknown origin or one set up already ([`set_up`] answers those).
pub(crate) async fn fetch_upstream(app: &AppState, req: &AdHocAgentRequest) -> ApiResult<Fetched> {
    let mut out = Fetched::default();
    let Some(origin) = &req.origin else {
        return Ok(out);
    };
    let Some(b) = read(app, origin)? else {
        return Ok(out);
    };
    if b.agent_id.is_some() {
        return Ok(out);
    }
    for up in &b.fetches {
        if std::fs::symlink_metadata(app.config.skills_dir.join(&up.name)).is_err() {
            out.0
                .push((up.name.clone(), fetch_one(app, origin, up).await?));
        }
    }
    Ok(out)
}

/// One upstream skill: fetched like an import from its URL (the same fetch, limits and archive
/// rules), named as declared, its digest the pinned one.
async fn fetch_one(app: &AppState, origin: &str, up: &UpstreamSkill) -> ApiResult<Vec<NewFile>> {
    let setting = override_of(app, &up.name).map_or("no setting", |(_, s)| s);
    let hint = format!(
        "the built-in agent {origin} fetches its skill {} from {} when set up: try again once it \
         is reachable, or point {setting} at a mirror",
        up.name, up.url
    );
    let gateway = |title: &str, d: String| {
        ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            title,
            format!("{d}; {hint}"),
        )
    };
    let (location, folder) = fetch_location(&up.url);
    let body = import::fetch(app, &location, |d| {
        ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "fetch failed", d)
    })
    .await
    .map_err(|e| match e.status {
        axum::http::StatusCode::BAD_GATEWAY => gateway(
            &e.title,
            format!("url: {}: {}", up.url, e.detail.unwrap_or_default()),
        ),
        _ => e,
    })?;
    let files = tokio::task::spawn_blocking(move || import::unzip(&body, folder.as_deref()))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| {
            let d = e.detail.unwrap_or_default();
            gateway(
                "upstream skill refused",
                format!("url: {}: {}: {d}", up.url, e.title),
            )
        })?;
    let named = files
        .iter()
        .find(|(rel, _, _)| rel == super::skills::SKILL_MD)
        .and_then(|(_, b, _)| std::str::from_utf8(b).ok())
        .and_then(|c| super::skills::name_of("SKILL.md", c).ok());
    if named.as_deref() != Some(up.name.as_str()) {
        let d = format!("url: {}: no SKILL.md named {:?} there", up.url, up.name);
        return Err(gateway("upstream skill refused", d));
    }
    let got = digest_of(&files);
    if got != up.digest {
        let d = format!(
            "url: {}: its digest is {got}, not the pinned {}",
            up.url, up.digest
        );
        return Err(gateway("upstream skill differs", d));
    }
    Ok(files)
}

/// The digest of a skill's files, as `SkillInfo.digest` gives it once they are in the library.
fn digest_of(files: &[NewFile]) -> String {
    let sf: Vec<ScanFile<'_>> = files
        .iter()
        .map(|(path, bytes, executable)| ScanFile {
            path,
            bytes,
            executable: *executable,
        })
        .collect();
    digest(&sf)
}

/// POST /v1/agents with `origin`: the built-in agent (400 unknown built-in agent, 409 built-in
/// agent already set up), its defaults filled into what `req` leaves out, its skills installed
/// in the library (a skill of that name already there is kept; the upstream ones from
/// `fetched`, which [`fetch_upstream`] gave before the write lock was taken).
pub(crate) fn set_up(
    app: &AppState,
    req: &AdHocAgentRequest,
    mut fetched: Fetched,
) -> ApiResult<AdHocAgentRequest> {
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
        if let Some(files) = fetched.take(s) {
            install_fetched(app, origin, s, &files)?;
        } else if b.fetches.iter().any(|u| &u.name == s) {
            super::skills::existing(app, s).map_err(|_| {
                ApiError::conflict(
                    "skill removed meanwhile",
                    format!("skills: {s:?} was removed while the set-up ran: try again"),
                )
            })?;
        } else {
            install_skill(app, origin, s)?;
        }
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

/// An upstream skill's checked files written into the library (through a staging folder,
/// renamed), unless a skill of that name came meanwhile (kept).
fn install_fetched(app: &AppState, origin: &str, skill: &str, files: &[NewFile]) -> ApiResult<()> {
    let to = app.config.skills_dir.join(skill);
    if std::fs::symlink_metadata(&to).is_ok() {
        return Ok(());
    }
    let staged = import::stage(app)?;
    import::fill(&staged, files)?;
    import::put_in_place(&staged, &to, false)?;
    tracing::info!(%skill, %origin, "built-in agent's upstream skill installed in the library");
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
