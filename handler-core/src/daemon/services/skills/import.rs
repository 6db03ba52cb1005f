//! Importing a skill (D.17): from a zip archive sent in the body or fetched from an `https://`
//! URL (an archive, or a GitHub repository's folder through its zip archive). The entries are
//! judged by `handler_contracts::skill_archive` (≤ 32 MiB, ≤ 2000 entries, no absolute path,
//! no link out, no device; the shallowest SKILL.md) before anything is written; the skill is
//! unpacked into a hidden staging folder of the library, then renamed into place.

use std::io::Read as _;
use std::path::Path;

use handler_contracts::control::{SkillImportQuery, SkillInfo, SkillUrlRequest};
use handler_contracts::skill_archive::{
    ArchiveError, Entry, EntryKind, MAX_BYTES, fetch_location, plan, under_top_folder,
};

use super::{SKILL_MD, info, make_dir, name_of, set_projects, write_file};
use crate::daemon::agentfs;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// A file to write: its path in the skill, its bytes, its executable bit.
pub(crate) type NewFile = (String, Vec<u8>, bool);

fn refused(detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("archive refused", detail.to_string())
}

/// A new hidden staging folder in the library (removed when dropped unless renamed away).
pub(crate) fn stage(app: &AppState) -> ApiResult<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    make_dir(&app.config.skills_dir)?;
    let t = tempfile::Builder::new()
        .prefix(".import-")
        .tempdir_in(&app.config.skills_dir)
        .map_err(ApiError::internal)?;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(ApiError::internal)?;
    Ok(t)
}

/// Writes the files into the staging folder.
pub(crate) fn fill(staged: &tempfile::TempDir, files: &[NewFile]) -> ApiResult<()> {
    for (rel, bytes, exec) in files {
        write_file(&staged.path().join(rel), bytes, *exec)?;
    }
    Ok(())
}

/// Renames the staging folder to the skill's; `replace`: the skill there before goes.
pub(crate) fn put_in_place(staged: &tempfile::TempDir, dir: &Path, replace: bool) -> ApiResult<()> {
    let old = dir.with_file_name(format!(
        ".old-{}-{:08x}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("skill"),
        rand::random::<u32>()
    ));
    let had = replace && std::fs::symlink_metadata(dir).is_ok();
    if had {
        std::fs::rename(dir, &old).map_err(ApiError::internal)?;
    }
    if let Err(e) = std::fs::rename(staged.path(), dir) {
        if had {
            let _ = std::fs::rename(&old, dir);
        }
        return Err(ApiError::internal(e));
    }
    if had {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(())
}

/// What a zip's entry is, from its Unix mode.
fn kind_of(f: &mut zip::read::ZipFile<'_, std::io::Cursor<&[u8]>>) -> EntryKind {
    let mode = f.unix_mode().unwrap_or(0);
    match mode & 0o170_000 {
        0o120_000 => {
            let mut target = String::new();
            let _ = f.by_ref().take(4096).read_to_string(&mut target);
            EntryKind::Link { target }
        }
        0o020_000 | 0o060_000 | 0o010_000 | 0o140_000 => EntryKind::Special,
        _ if f.is_dir() => EntryKind::Dir,
        _ => EntryKind::File {
            executable: mode & 0o111 != 0,
        },
    }
}

/// Unpacks the skill of a zip in memory: its files, judged first. `folder`: a repository
/// archive's folder (below its top folder) to look in.
pub(crate) fn unzip(bytes: &[u8], folder: Option<&str>) -> ApiResult<Vec<NewFile>> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| refused(format!("not a zip archive ({e})")))?;
    if z.len() > handler_contracts::skill_archive::MAX_FILES {
        return Err(refused(ArchiveError::TooManyFiles(z.len())));
    }
    let mut entries = Vec::with_capacity(z.len());
    for i in 0..z.len() {
        let mut f = z
            .by_index(i)
            .map_err(|e| refused(format!("entry {i}: {e}")))?;
        let path = f.name().to_string();
        let size = f.size();
        entries.push(Entry {
            kind: kind_of(&mut f),
            path,
            size,
        });
    }
    let within = folder.and_then(|f| under_top_folder(&entries, f));
    let p = plan(&entries, within.as_deref()).map_err(refused)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(p.files.len());
    for (i, rel, exec) in p.files {
        let f = z.by_index(i).map_err(|e| refused(format!("{rel}: {e}")))?;
        let mut b = Vec::new();
        f.take(MAX_BYTES + 1 - total)
            .read_to_end(&mut b)
            .map_err(|e| refused(format!("{rel}: {e}")))?;
        total += b.len() as u64;
        if total > MAX_BYTES {
            return Err(refused(ArchiveError::TooLarge));
        }
        out.push((rel, b, exec));
    }
    Ok(out)
}

/// Puts an unpacked skill in the library: named by its SKILL.md; 409 `skill exists` unless
/// `replace`; given to `project` when one is named. Answers whether it is new, and the skill.
async fn install(
    app: &AppState,
    files: Vec<NewFile>,
    q: &SkillImportQuery,
) -> ApiResult<(bool, SkillInfo)> {
    let content = files
        .iter()
        .find(|(rel, _, _)| rel == SKILL_MD)
        .map(|(_, b, _)| String::from_utf8(b.clone()))
        .ok_or_else(|| refused("no SKILL.md in the archive"))?
        .map_err(|_| ApiError::bad_request("skill invalid", "SKILL.md: not UTF-8 text"))?;
    let name = name_of("SKILL.md", &content)?;
    let _w = app.write_lock.lock().await;
    if let Some(p) = &q.project
        && app.agents.project(p).is_none()
    {
        return Err(ApiError::bad_request(
            "project unknown",
            format!("project: no project {p:?}"),
        ));
    }
    let dir = app.config.skills_dir.join(&name);
    let exists = std::fs::symlink_metadata(&dir).is_ok();
    if exists && !q.replace {
        return Err(ApiError::conflict(
            "skill exists",
            format!("SKILL.md: name: the library has a skill {name:?} (replace=true replaces it)"),
        ));
    }
    let staged = stage(app)?;
    fill(&staged, &files)?;
    put_in_place(&staged, &dir, q.replace)?;
    if let Some(p) = &q.project {
        let mut giving: Vec<String> = app
            .agents
            .projects()
            .into_iter()
            .filter(|x| x.skills.contains(&name))
            .map(|x| x.id)
            .collect();
        giving.push(p.clone());
        set_projects(app, &name, &giving)?;
    }
    drop(_w);
    Ok((!exists, info(app, &name, true)?))
}

/// The rules behind POST /v1/skills/import-zip: a zip archive in the body.
pub async fn from_zip(
    app: &AppState,
    body: Vec<u8>,
    q: SkillImportQuery,
) -> ApiResult<(bool, SkillInfo)> {
    let files = tokio::task::spawn_blocking(move || unzip(&body, None))
        .await
        .map_err(ApiError::internal)??;
    install(app, files, &q).await
}

/// A folder's entries as an archive's (D.18: hidden files and links left out, nothing
/// followed), at most one more than the archive limit (which `plan` then refuses). The folder is
/// the agent's: it is read one name at a time from its descriptor ([`agentfs`], security F3).
fn folder_entries(
    dir: &std::os::fd::OwnedFd,
    shown: &Path,
    rel: &str,
    out: &mut Vec<Entry>,
) -> ApiResult<()> {
    use rustix::fs::FileType;
    let refuse = |e: agentfs::AgentFsError| refused(e);
    for (name, kind) in agentfs::list(dir, shown).map_err(refuse)? {
        if name.starts_with('.') || out.len() > handler_contracts::skill_archive::MAX_FILES {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let at = shown.join(&name);
        let Some(st) = agentfs::lstat_at(dir, &name, &at).map_err(refuse)? else {
            continue;
        };
        let kind = match kind {
            FileType::Symlink => continue,
            FileType::Directory => EntryKind::Dir,
            FileType::RegularFile => EntryKind::File {
                executable: st.st_mode & 0o111 != 0,
            },
            _ => EntryKind::Special,
        };
        let is_dir = kind == EntryKind::Dir;
        out.push(Entry {
            path: path.clone(),
            kind,
            size: u64::try_from(st.st_size).unwrap_or(0),
        });
        if is_dir {
            // Swapped for a link since it was listed: refused by the open, not followed.
            let Some(sub) = agentfs::open_dir_at(dir, &name, &at).map_err(refuse)? else {
                continue;
            };
            folder_entries(&sub, &at, &path, out)?;
        }
    }
    Ok(())
}

/// The skill in `rel` below Handler's folder `base` (a session's `work/`), judged like an
/// archive's (the shallowest SKILL.md, the same limits); each file opened `O_NOFOLLOW` one name
/// at a time and judged on the open descriptor, so a link swapped in reads nothing.
pub(crate) fn from_folder(base: &Path, rel: &Path) -> ApiResult<Vec<NewFile>> {
    let shown = base.join(rel);
    let dir = agentfs::open_dir_in(base, rel)
        .map_err(refused)?
        .ok_or_else(|| refused(format!("{}: gone", shown.display())))?;
    let mut found = Vec::new();
    folder_entries(&dir, &shown, "", &mut found)?;
    if found.len() > handler_contracts::skill_archive::MAX_FILES {
        return Err(refused(ArchiveError::TooManyFiles(found.len())));
    }
    let p = plan(&found, None).map_err(refused)?;
    let mut total = 0u64;
    let mut out = Vec::with_capacity(p.files.len());
    for (i, name, exec) in p.files {
        let file = rel.join(&found[i].path);
        let b = match agentfs::read_in(base, &file, MAX_BYTES - total) {
            Ok(Some(b)) => b,
            Ok(None) => return Err(refused(format!("{name}: gone"))),
            Err(agentfs::AgentFsError::TooLarge { .. }) => {
                return Err(refused(ArchiveError::TooLarge));
            }
            Err(e) => return Err(refused(e)),
        };
        total += b.len() as u64;
        out.push((name, b, exec));
    }
    Ok(out)
}

/// The rules behind POST /v1/skills/import-session/{sessionId} (D.18): a folderless agent's
/// session folder (`work/`) brought into the library as an archive's import; 404 an unknown
/// session, 409 a session with a scope.
pub async fn from_session(
    app: &AppState,
    session: &str,
    q: SkillImportQuery,
) -> ApiResult<(bool, SkillInfo)> {
    let s = app
        .sessions
        .get(session)
        .ok_or_else(|| ApiError::not_found(format!("session {session:?}")))?;
    let work = std::fs::canonicalize(app.sessions.folder(session).join("work"));
    if work.as_ref().ok().map(std::path::PathBuf::as_path) != Some(Path::new(&s.scope)) {
        return Err(ApiError::conflict(
            "session has a scope",
            "sessionId: only a folderless agent's session, which works in its own folder",
        ));
    }
    let base = app.sessions.folder(session);
    let files = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::task::spawn_blocking(move || from_folder(&base, Path::new("work"))),
    )
    .await
    .map_err(|_| refused("reading the session's folder took over 60 s"))?
    .map_err(ApiError::internal)??;
    // The agent wrote SKILL.md, so it chose the name: it replaces a skill of the library only
    // when the person named that skill too (security F3).
    if q.replace {
        let content = files
            .iter()
            .find(|(rel, _, _)| rel == SKILL_MD)
            .and_then(|(_, b, _)| std::str::from_utf8(b).ok())
            .unwrap_or_default();
        let name = name_of("SKILL.md", content)?;
        if q.name.as_deref() != Some(name.as_str())
            && std::fs::symlink_metadata(app.config.skills_dir.join(&name)).is_ok()
        {
            return Err(ApiError::conflict(
                "skill exists",
                format!(
                    "name: the session's SKILL.md is named {name:?}, which the library has; replace it by naming it too (name={name}&replace=true)"
                ),
            ));
        }
    }
    install(app, files, &q).await
}

/// The rules behind POST /v1/skills/import-url: an `https://` archive or GitHub folder.
pub async fn from_url(
    app: &AppState,
    req: SkillUrlRequest,
    q: SkillImportQuery,
) -> ApiResult<(bool, SkillInfo)> {
    let bad = |d: &str| ApiError::bad_request("url invalid", format!("url: {d}"));
    let parsed = reqwest::Url::parse(&req.url).map_err(|e| bad(&e.to_string()))?;
    if parsed.scheme() != "https" || parsed.host_str().is_none() {
        return Err(bad(
            "an https:// URL (a repository's folder or a zip archive)",
        ));
    }
    let (location, folder) = fetch_location(parsed.as_str());
    let body = fetch(app, &location, refused).await?;
    let files = tokio::task::spawn_blocking(move || unzip(&body, folder.as_deref()))
        .await
        .map_err(ApiError::internal)??;
    install(app, files, &q).await
}

/// handlerd's client for the outside: https only (through redirects too), the system's roots, the
/// bundled ones and `$HANDLER_BUILD_CA_BUNDLE`'s, `timeout` in all.
pub(crate) fn https_client(
    app: &AppState,
    timeout: std::time::Duration,
) -> ApiResult<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(std::time::Duration::from_secs(20))
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::limited(5))
        .user_agent(concat!("handlerd/", env!("CARGO_PKG_VERSION")));
    if let Some(ca) = &app.config.build_ca_bundle {
        let pem =
            std::fs::read(ca).map_err(|e| ApiError::internal(format!("{}: {e}", ca.display())))?;
        for c in reqwest::Certificate::from_pem_bundle(&pem).map_err(ApiError::internal)? {
            b = b.add_root_certificate(c);
        }
    }
    b.build().map_err(ApiError::internal)
}

/// GETs `url` over TLS (the system's roots and `$HANDLER_BUILD_CA_BUNDLE`'s), https only even
/// through redirects, at most 32 MiB (more: `too_large`'s error, the caller's status: a skill's
/// 400, an addon's 422). 502 `fetch failed` when it cannot. Also the addons' fetch of an
/// `https://` `.tar.gz` (G.5) and the built-in agents' upstream skills (decision 0123).
pub(crate) async fn fetch(
    app: &AppState,
    url: &str,
    too_large: fn(String) -> ApiError,
) -> ApiResult<Vec<u8>> {
    let failed = |d: String| {
        ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "fetch failed",
            format!("url: {d}"),
        )
    };
    let client = https_client(app, std::time::Duration::from_secs(120))?;
    let mut res = client
        .get(url)
        .send()
        .await
        .map_err(|e| failed(format!("{url}: {e}")))?;
    if !res.status().is_success() {
        return Err(failed(format!("{url} answered {}", res.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = res
        .chunk()
        .await
        .map_err(|e| failed(format!("{url}: {e}")))?
    {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > MAX_BYTES {
            return Err(too_large(format!("{url}: more than 32 MiB")));
        }
    }
    Ok(body)
}
