//! The work folders (D.13, `folders.toml`): the roots as written and resolved, Handler's own
//! folders, and the check of an agent's scope against them.

use std::path::{Path, PathBuf};

use handler_contracts::validate::expand_home;
use handler_sandbox::validate::{
    Reserved, check_root_placement, check_scope_placement, check_session_work_placement,
};

use crate::daemon::config::DaemonConfig;
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::store::tomldoc;

/// The work folders' file.
pub fn path(config: &DaemonConfig) -> PathBuf {
    config.config_dir.join("folders.toml")
}

/// The roots as written (`~/code` when unset).
pub fn roots(config: &DaemonConfig) -> Vec<String> {
    let doc = tomldoc::load(&path(config)).unwrap_or_default();
    match doc.get("roots").and_then(|i| i.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        None => vec!["~/code".to_string()],
    }
}

/// The folders Handler keeps for itself, each as configured and, when it exists, canonical.
pub fn reserved(config: &DaemonConfig) -> Vec<Reserved> {
    let c = config;
    let mut dirs: Vec<(&str, &Path)> = vec![
        ("config", &c.config_dir),
        ("data", &c.data_dir),
        ("state", &c.state_dir),
        ("cache", &c.cache_dir),
        ("accounts", &c.accounts_dir),
        ("providers", &c.providers_dir),
        ("skills", &c.skills_dir),
        ("toolbox", &c.toolbox_dir),
        ("addons", &c.addons_dir),
        ("bindings", &c.bindings_dir),
    ];
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("handler-sandbox"));
    let tmp = PathBuf::from(format!(
        "/tmp/handler-sandbox-{}",
        nix::unistd::getuid().as_raw()
    ));
    if let Some(r) = &runtime {
        dirs.push(("sandbox runtime", r));
    }
    dirs.push(("sandbox runtime", &tmp));
    let mut out = Vec::new();
    for (what, d) in dirs {
        let mut forms = vec![d.to_path_buf()];
        if let Ok(canon) = std::fs::canonicalize(d) {
            forms.push(canon);
        }
        for f in forms {
            let r = Reserved {
                what: what.to_string(),
                dir: f.display().to_string(),
            };
            if f.is_absolute() && !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// The roots, expanded and canonical; those that do not exist, or are or lie inside one of
/// Handler's own folders (a hand-edited folders.toml), are left out.
pub fn resolved_roots(config: &DaemonConfig) -> Vec<PathBuf> {
    let home = config.home.to_string_lossy().into_owned();
    let reserved = reserved(config);
    roots(config)
        .iter()
        .filter_map(|r| expand_home("roots", r, &home).ok())
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .filter(|r| check_root_placement(&r.display().to_string(), &reserved).is_ok())
        .collect()
}

/// D.13: `scope` must be a folder inside a work folder, and not one of Handler's own folders,
/// inside one or holding one; returns it canonical (symbolic links resolved now: checked at
/// every save and every start). 400 otherwise, naming the field and the folder.
pub fn check_scope(config: &DaemonConfig, field: &str, scope: &str) -> ApiResult<PathBuf> {
    let home = config.home.to_string_lossy().into_owned();
    let expanded = expand_home(field, scope, &home)
        .map_err(|e| ApiError::bad_request("scope invalid", e.to_string()))?;
    let canon = std::fs::canonicalize(&expanded)
        .map_err(|e| ApiError::bad_request("scope invalid", format!("{field}: {expanded}: {e}")))?;
    if !canon.is_dir() {
        return Err(ApiError::bad_request(
            "scope invalid",
            format!("{field}: {expanded} is not a folder"),
        ));
    }
    let roots_now: Vec<String> = resolved_roots(config)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    match check_scope_placement(&canon.display().to_string(), &roots_now, &reserved(config)) {
        Ok(()) => Ok(canon),
        Err(e @ handler_sandbox::validate::PlacementError::OutsideWorkFolders { .. }) => {
            Err(ApiError::bad_request(
                "scope outside work folders",
                format!(
                    "{field}: {e} ({}); add one in Settings → Folders (PUT /v1/folders)",
                    roots(config).join(", ")
                ),
            ))
        }
        Err(e) => Err(ApiError::bad_request(
            "scope is Handler's",
            format!("{field}: {e}: Handler's own folders never reach a sandbox"),
        )),
    }
}

/// H.9, decision 0160: a mini app's `needs.files` entry — absolute or `~/…`, resolved now,
/// a regular file or a folder (never a socket, device or pipe), inside a work folder and clear
/// of Handler's own folders, as a scope is. Returns it canonical; 400 naming the field otherwise.
pub fn check_app_file(config: &DaemonConfig, field: &str, path: &str) -> ApiResult<PathBuf> {
    let bad = |title: &str, d: String| ApiError::bad_request(title, format!("{field}: {d}"));
    let home = config.home.to_string_lossy().into_owned();
    let expanded = expand_home(field, path, &home)
        .map_err(|e| ApiError::bad_request("file invalid", e.to_string()))?;
    if !Path::new(&expanded).is_absolute() {
        return Err(bad(
            "file invalid",
            format!("{path} is neither absolute nor ~/…"),
        ));
    }
    let canon = std::fs::canonicalize(&expanded)
        .map_err(|e| bad("file invalid", format!("{expanded}: {e}")))?;
    let kind = std::fs::metadata(&canon)
        .map_err(|e| bad("file invalid", format!("{expanded}: {e}")))?
        .file_type();
    if !kind.is_file() && !kind.is_dir() {
        return Err(bad(
            "file invalid",
            format!(
                "{expanded} is neither a regular file nor a folder (a socket, device or pipe never reaches an app)"
            ),
        ));
    }
    let roots_now: Vec<String> = resolved_roots(config)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    match check_scope_placement(&canon.display().to_string(), &roots_now, &reserved(config)) {
        Ok(()) => Ok(canon),
        Err(e @ handler_sandbox::validate::PlacementError::OutsideWorkFolders { .. }) => Err(bad(
            "file outside work folders",
            format!(
                "{e} ({}); move it into one, or add a work folder in Settings → Folders (PUT /v1/folders)",
                roots(config).join(", ")
            ),
        )),
        Err(e) => Err(bad(
            "file is Handler's",
            format!("{e}: Handler's own folders never reach a sandbox"),
        )),
    }
}

/// F.2, decision 0111: a folderless agent's session works in its session folder's `work/`.
/// It is checked as a scope is, except that it lies in Handler's state folder: its canonical
/// path must be exactly the session folder's canonical path + `work` (a link put in its place
/// is refused), and it may neither be nor hold one of Handler's folders. For a new session,
/// whose folder the store makes next (before any sandbox), the path it will have; the caller
/// makes it (`work_folder`). Returns it canonical; 400 naming the field otherwise.
pub fn check_session_work(config: &DaemonConfig, session_folder: &Path) -> ApiResult<PathBuf> {
    let refuse = |d: String| ApiError::bad_request("scope is Handler's", format!("work: {d}"));
    let canon_of =
        |p: &Path| std::fs::canonicalize(p).map_err(|e| refuse(format!("{}: {e}", p.display())));
    let (Some(parent), Some(name)) = (session_folder.parent(), session_folder.file_name()) else {
        return Err(refuse(format!(
            "{}: no session folder",
            session_folder.display()
        )));
    };
    let expected = match std::fs::symlink_metadata(session_folder) {
        Err(_) => {
            fsutil::create_dir_private(parent)
                .map_err(|e| refuse(format!("{}: {e}", parent.display())))?;
            canon_of(parent)?.join(name).join("work")
        }
        Ok(_) => canon_of(session_folder)?.join("work"),
    };
    let canon = if session_folder.exists() {
        let work = work_folder(session_folder).map_err(|e| refuse(e.to_string()))?;
        canon_of(&work)?
    } else {
        expected.clone()
    };
    let (c, x) = (canon.display().to_string(), expected.display().to_string());
    check_session_work_placement(&c, &x, &reserved(config)).map_err(|e| refuse(e.to_string()))?;
    Ok(canon)
}

/// Why a session folder's `work/` cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum WorkFolderError {
    /// Something else than a folder is in its place (a link, a file).
    #[error("{} is not a folder", .0.display())]
    NotAFolder(PathBuf),
    /// It could not be made.
    #[error("{}: {source}", path.display())]
    Create {
        /// The folder.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

/// A session folder's `work/`, made 0700 when missing; a link or a file there is refused.
pub fn work_folder(session_folder: &Path) -> Result<PathBuf, WorkFolderError> {
    let work = session_folder.join("work");
    match std::fs::symlink_metadata(&work) {
        Ok(m) if m.is_dir() => Ok(work),
        Ok(_) => Err(WorkFolderError::NotAFolder(work)),
        Err(_) => match fsutil::create_dir_private(&work) {
            Ok(()) => Ok(work),
            Err(source) => Err(WorkFolderError::Create { path: work, source }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> (tempfile::TempDir, DaemonConfig) {
        let t = tempfile::tempdir().unwrap();
        let c = DaemonConfig::with_home(t.path());
        std::fs::create_dir_all(t.path().join("code/out")).unwrap();
        std::fs::write(t.path().join("code/runs.csv"), "1,2\n").unwrap();
        std::fs::write(t.path().join("outside.txt"), "x").unwrap();
        std::fs::create_dir_all(&c.config_dir).unwrap();
        (t, c)
    }

    #[test]
    fn an_apps_file_is_a_file_or_folder_in_a_work_folder() {
        let (t, c) = config();
        let canon = std::fs::canonicalize(t.path()).unwrap();
        assert_eq!(
            check_app_file(&c, "needs.files[0].path", "~/code/runs.csv").unwrap(),
            canon.join("code/runs.csv")
        );
        let out = t.path().join("code/out").display().to_string();
        assert_eq!(
            check_app_file(&c, "needs.files[1].path", &out).unwrap(),
            canon.join("code/out")
        );
    }

    #[test]
    fn outside_work_folders_missing_relative_or_a_link_out_is_refused_naming_the_field() {
        let (t, c) = config();
        let e = check_app_file(&c, "needs.files[0].path", "~/outside.txt").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(e.title, "file outside work folders");
        assert!(
            e.detail
                .as_deref()
                .unwrap_or("")
                .starts_with("needs.files[0].path: "),
            "{:?}",
            e.detail
        );
        let e = check_app_file(&c, "needs.files[1].path", "~/code/nothing").unwrap_err();
        assert_eq!(e.title, "file invalid");
        assert!(
            e.detail
                .as_deref()
                .unwrap_or("")
                .starts_with("needs.files[1].path: "),
            "{:?}",
            e.detail
        );
        let e = check_app_file(&c, "needs.files[2].path", "code/runs.csv").unwrap_err();
        assert_eq!(e.title, "file invalid");
        std::os::unix::fs::symlink(t.path().join("outside.txt"), t.path().join("code/link"))
            .unwrap();
        let e = check_app_file(&c, "needs.files[3].path", "~/code/link").unwrap_err();
        assert_eq!(e.title, "file outside work folders", "resolved now");
    }

    #[test]
    fn handlers_own_folders_and_sockets_are_refused() {
        let (t, mut c) = config();
        // A work folder that holds Handler's own: the config folder inside it is still refused.
        c.config_dir = t.path().join("code/handler-config");
        std::fs::create_dir_all(&c.config_dir).unwrap();
        std::fs::write(
            c.config_dir.join("folders.toml"),
            format!("roots = [\"{}\"]\n", t.path().join("code").display()),
        )
        .unwrap();
        let e = check_app_file(&c, "needs.files[0].path", "~/code/handler-config").unwrap_err();
        assert_eq!(e.title, "file is Handler's", "{:?}", e.detail);
        let sock = t.path().join("code/engine.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = check_app_file(&c, "needs.files[1].path", "~/code/engine.sock").unwrap_err();
        assert!(
            e.detail
                .as_deref()
                .unwrap_or("")
                .contains("neither a regular file nor a folder"),
            "{:?}",
            e.detail
        );
    }
}
