//! The skills library (D.17): `$HANDLER_SKILLS_DIR` (default `<config>/skills`), one folder per
//! skill in the Agent Skills format. Created (maybe as a copy of another's files), read (with
//! its SKILL.md, files, digest and scan), replaced and renamed (agents and projects follow),
//! deleted (they lose it); who gets it (`projects`, stored with each project); its files one at
//! a time (`files`); imported from a zip or an `https://` URL (`import`).

pub mod files;
pub mod import;

use std::path::{Path, PathBuf};

use handler_contracts::control::{CreateSkillRequest, SkillFile, SkillInfo, SkillRequest};
use handler_contracts::skill::frontmatter;
use handler_contracts::skill_scan::{ScanFile, digest, scan};
use handler_contracts::validate::validate_skill_name;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::agents::AgentStore;
use crate::daemon::store::skills::{LibFile, check_skill_dir, library_names, skill_files};

/// A skill's SKILL.md.
pub(crate) const SKILL_MD: &str = "SKILL.md";

/// The name a SKILL.md's frontmatter gives, checked (400 `skill invalid`, naming `field`).
pub(crate) fn name_of(field: &str, content: &str) -> ApiResult<String> {
    let bad = |d: String| ApiError::bad_request("skill invalid", format!("{field}: {d}"));
    let fm = frontmatter(content).map_err(|e| bad(e.to_string()))?;
    validate_skill_name(&fm.name).map_err(|e| bad(format!("name: {}", e.message)))?;
    Ok(fm.name)
}

/// The folder of a skill of the library that exists (404 otherwise; a name that is not a
/// skill's is not found either).
pub(crate) fn existing(app: &AppState, name: &str) -> ApiResult<PathBuf> {
    let dir = app.config.skills_dir.join(name);
    let is_dir = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
    if validate_skill_name(name).is_err() || !is_dir {
        return Err(ApiError::not_found(format!(
            "no skill {name:?} in the library"
        )));
    }
    Ok(dir)
}

/// The agents that picked a skill: `agents/<project name>/<agent name>`, `ad-hoc/<agent id>`.
fn used_by(agents: &AgentStore, skill: &str) -> Vec<String> {
    let projects = agents.projects();
    let mut v: Vec<String> = agents
        .agents()
        .iter()
        .filter(|a| a.skills.iter().any(|s| s == skill))
        .map(|a| match &a.project_id {
            Some(pid) => format!(
                "agents/{}/{}",
                projects
                    .iter()
                    .find(|p| &p.id == pid)
                    .map_or_else(|| pid.clone(), |p| p.name.clone()),
                a.name.clone().unwrap_or_default()
            ),
            None => format!("ad-hoc/{}", a.id),
        })
        .collect();
    v.sort();
    v
}

/// Reads the bytes of a skill's files (for the digest and the scan).
fn read_all(dir: &Path, files: &[LibFile]) -> ApiResult<Vec<(LibFile, Vec<u8>)>> {
    files
        .iter()
        .map(|f| {
            std::fs::read(dir.join(&f.path))
                .map(|b| (f.clone(), b))
                .map_err(|e| ApiError::internal(format!("{}: {e}", f.path)))
        })
        .collect()
}

/// A skill as the library shows it; `full`: with its SKILL.md, digest and scan.
pub(crate) fn info(app: &AppState, name: &str, full: bool) -> ApiResult<SkillInfo> {
    let dir = existing(app, name)?;
    let checked = check_skill_dir(&dir, name);
    let content = std::fs::read_to_string(dir.join(SKILL_MD)).ok();
    let description = content
        .as_deref()
        .and_then(|c| frontmatter(c).ok())
        .map(|f| f.description);
    let all = skill_files(&dir).map_err(|e| ApiError::internal(format!("{name}: {e}")))?;
    let mut v = SkillInfo {
        name: name.to_string(),
        description,
        projects: app
            .agents
            .projects()
            .iter()
            .filter(|p| p.skills.iter().any(|s| s == name))
            .map(|p| p.id.clone())
            .collect(),
        files: all
            .iter()
            .filter(|f| f.path != SKILL_MD)
            .map(|f| SkillFile {
                path: f.path.clone(),
                size: f.size,
                executable: f.executable,
                text: None,
            })
            .collect(),
        error: checked.err().map(|e| e.problem.to_string()),
        used_by: used_by(&app.agents, name),
        content: None,
        digest: None,
        scan: None,
    };
    if full {
        let read = read_all(&dir, &all)?;
        let sf: Vec<ScanFile<'_>> = read
            .iter()
            .map(|(f, b)| ScanFile {
                path: &f.path,
                bytes: b,
                executable: f.executable,
            })
            .collect();
        v.digest = Some(digest(&sf));
        v.scan = Some(scan(&sf));
        v.content = content;
    }
    Ok(v)
}

/// The rules behind GET /v1/skills: every skill, without content, digest or scan.
pub async fn list(app: &AppState) -> ApiResult<Vec<SkillInfo>> {
    library_names(&app.config.skills_dir)
        .iter()
        .filter(|n| validate_skill_name(n).is_ok())
        .map(|n| info(app, n, false))
        .collect()
}

/// The rules behind GET /v1/skills/{name}.
pub async fn get(app: &AppState, name: String) -> ApiResult<SkillInfo> {
    info(app, &name, true)
}

/// Creates a folder (and its parents) readable by the sandbox's user: skills are mounted
/// read-only into agents, so they are 0755 like a hand-made folder.
pub(crate) fn make_dir(dir: &Path) -> ApiResult<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| ApiError::internal(format!("{}: {e}", dir.display())))
}

/// Writes a file of a skill: 0755 when executable, else 0644.
pub(crate) fn write_file(path: &Path, bytes: &[u8], executable: bool) -> ApiResult<()> {
    if let Some(parent) = path.parent() {
        make_dir(parent)?;
    }
    let mode = if executable { 0o755 } else { 0o644 };
    crate::daemon::fsutil::write_atomic(path, bytes, mode)
        .map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))
}

/// The rules behind POST /v1/skills: a new skill named by its SKILL.md (409 when one of that
/// name exists), with `copyOf`'s other files, given to `projects`.
pub async fn create(app: &AppState, req: CreateSkillRequest) -> ApiResult<SkillInfo> {
    let _w = app.write_lock.lock().await;
    let name = name_of("content", &req.content)?;
    let dir = app.config.skills_dir.join(&name);
    if std::fs::symlink_metadata(&dir).is_ok() {
        return Err(ApiError::conflict(
            "skill exists",
            format!("content: name: the library has a skill {name:?}"),
        ));
    }
    let copied = match &req.copy_of {
        Some(src) => {
            let from = existing(app, src).map_err(|_| {
                ApiError::bad_request("skill unusable", format!("copyOf: no skill {src:?}"))
            })?;
            let files = skill_files(&from).map_err(ApiError::internal)?;
            let files: Vec<LibFile> = files.into_iter().filter(|f| f.path != SKILL_MD).collect();
            read_all(&from, &files)?
        }
        None => Vec::new(),
    };
    if let Some(p) = &req.projects {
        check_projects(app, p)?;
    }
    let staged = import::stage(app)?;
    let mut files: Vec<(String, Vec<u8>, bool)> = copied
        .into_iter()
        .map(|(f, b)| (f.path, b, f.executable))
        .collect();
    files.push((SKILL_MD.into(), req.content.into_bytes(), false));
    import::fill(&staged, &files)?;
    import::put_in_place(&staged, &dir, false)?;
    if let Some(p) = &req.projects {
        set_projects(app, &name, p)?;
    }
    drop(_w);
    info(app, &name, true)
}

/// The rules behind PUT /v1/skills/{name}: its SKILL.md replaced; a SKILL.md naming another
/// skill renames it (409 when taken), and the agents and projects that have it follow.
pub async fn replace(app: &AppState, name: String, req: SkillRequest) -> ApiResult<SkillInfo> {
    let _w = app.write_lock.lock().await;
    let dir = existing(app, &name)?;
    let new = name_of("content", &req.content)?;
    if let Some(p) = &req.projects {
        check_projects(app, p)?;
    }
    let target = app.config.skills_dir.join(&new);
    if new != name {
        if std::fs::symlink_metadata(&target).is_ok() {
            return Err(ApiError::conflict(
                "skill exists",
                format!("content: name: the library has a skill {new:?}"),
            ));
        }
        std::fs::rename(&dir, &target).map_err(ApiError::internal)?;
        rename_everywhere(app, &name, Some(&new))?;
    }
    write_file(&target.join(SKILL_MD), req.content.as_bytes(), false)?;
    if let Some(p) = &req.projects {
        set_projects(app, &new, p)?;
    }
    drop(_w);
    info(app, &new, true)
}

/// The rules behind DELETE /v1/skills/{name}: its folder removed; the agents that picked it
/// and the projects that gave it lose it.
pub async fn delete(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let dir = existing(app, &name)?;
    std::fs::remove_dir_all(&dir).map_err(ApiError::internal)?;
    rename_everywhere(app, &name, None)
}

/// Every agent's pick and project's gift of `old` becomes `new` (none: removed).
fn rename_everywhere(app: &AppState, old: &str, new: Option<&str>) -> ApiResult<()> {
    let swap = |list: &mut Vec<String>| {
        if list.iter().any(|s| s == old) {
            list.retain(|s| s != old);
            if let Some(n) = new {
                list.push(n.to_string());
            }
            list.sort();
            list.dedup();
        }
    };
    app.agents
        .update::<_, ApiError>(|agents, projects| {
            agents.iter_mut().for_each(|a| swap(&mut a.skills));
            projects.iter_mut().for_each(|p| swap(&mut p.skills));
            Ok(())
        })
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Each of `projects` is a project's id (400 `project unknown`, naming it).
fn check_projects(app: &AppState, projects: &[String]) -> ApiResult<()> {
    for (i, p) in projects.iter().enumerate() {
        if app.agents.project(p).is_none() {
            return Err(ApiError::bad_request(
                "project unknown",
                format!("projects[{i}]: no project {p:?}"),
            ));
        }
    }
    Ok(())
}

/// Exactly `projects` give the skill to all their agents; their agents' own picks of it are
/// dropped (they get it from their project).
pub(crate) fn set_projects(app: &AppState, name: &str, projects: &[String]) -> ApiResult<()> {
    app.agents
        .update::<_, ApiError>(|agents, all| {
            for p in all.iter_mut() {
                let gives = projects.contains(&p.id);
                p.skills.retain(|s| s != name);
                if gives {
                    p.skills.push(name.to_string());
                    p.skills.sort();
                }
            }
            for a in agents.iter_mut() {
                if a.project_id.as_ref().is_some_and(|p| projects.contains(p)) {
                    a.skills.retain(|s| s != name);
                }
            }
            Ok(())
        })
        .map_err(|e| ApiError::internal(e.to_string()))
}
