//! A mini app's registered folder read as hostile data (decision 0157): its `app.toml`, and at
//! deploy the manifest, the server folder and the UI folder copied into Handler's store. The
//! folder is an agent's: it is opened from its parent's descriptor without following a link,
//! walked one name at a time (`agentfs`), and a link, FIFO, device or socket anywhere in what is
//! copied refuses the copy naming it — a kept link could point out of the folder.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use handler_contracts::miniapp::MiniAppManifest;
use rustix::fs::FileType;

use crate::daemon::agentfs::{self, AgentFsError};
use crate::daemon::problem::{ApiError, ApiResult};

/// The manifest's name in the folder.
pub const MANIFEST: &str = "app.toml";
/// The bound of `app.toml`.
const MANIFEST_MAX: u64 = 64 << 10;
/// At most this many entries copied per deploy.
pub const MAX_ENTRIES: usize = 5000;
/// At most this many bytes copied per deploy.
pub const MAX_BYTES: u64 = 128 << 20;
/// At most this many bytes in one file.
pub const FILE_MAX: u64 = 32 << 20;

fn refused(detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request("app folder refused", detail.to_string())
}

/// Opens the registered folder: its parent is the person's, its last name is opened without
/// following a link. `Ok(None)`: it is gone.
pub fn open(folder: &Path) -> ApiResult<Option<OwnedFd>> {
    let (Some(parent), Some(name)) = (folder.parent(), folder.file_name()) else {
        return Err(ApiError::bad_request(
            "invalid folder",
            format!("folder: {} is not a folder below another", folder.display()),
        ));
    };
    let base = agentfs::open_base(parent).map_err(refused)?;
    agentfs::open_dir_at(&base, &name.to_string_lossy(), folder).map_err(refused)
}

/// The folder's `app.toml`, parsed and validated (H.1): 400 naming the field or the path.
pub fn manifest(dir: impl AsFd, folder: &Path) -> ApiResult<MiniAppManifest> {
    parse_manifest(&manifest_text(dir, folder)?)
}

/// Reads the manifest of the folder at `folder` (open + [`manifest`]).
pub fn read_manifest(folder: &Path) -> ApiResult<MiniAppManifest> {
    let dir = open(folder)?.ok_or_else(|| {
        ApiError::bad_request(
            "no such folder",
            format!("folder: {} does not exist", folder.display()),
        )
    })?;
    manifest(&dir, folder)
}

/// What a copy has used of its bounds.
#[derive(Debug, Default)]
pub struct Budget {
    entries: usize,
    bytes: u64,
}

impl Budget {
    fn entry(&mut self, shown: &Path) -> ApiResult<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(refused(format!(
                "{}: more than {MAX_ENTRIES} files and folders",
                shown.display()
            )));
        }
        Ok(())
    }
}

/// Opens the folder `rel` (a relative, normalized path) below `dir`: `Ok(None)` when missing.
pub fn open_rel(dir: &OwnedFd, folder: &Path, rel: &str) -> ApiResult<Option<OwnedFd>> {
    let mut at = folder.to_path_buf();
    let mut cur: Option<OwnedFd> = None;
    for name in rel.split('/') {
        at.push(name);
        let next = match &cur {
            Some(c) => agentfs::open_dir_at(c, name, &at),
            None => agentfs::open_dir_at(dir, name, &at),
        }
        .map_err(refused)?;
        match next {
            Some(n) => cur = Some(n),
            None => return Ok(None),
        }
    }
    Ok(cur)
}

/// Copies the folder `from` (shown as `shown`) into `to` (made here), hidden names left out.
pub fn copy_dir(from: &OwnedFd, shown: &Path, to: &Path, budget: &mut Budget) -> ApiResult<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).map_err(ApiError::internal)?;
    for (name, kind) in agentfs::list(from, shown).map_err(refused)? {
        if name.starts_with('.') {
            continue;
        }
        let at = shown.join(&name);
        budget.entry(&at)?;
        match kind {
            FileType::Directory => {
                let sub = agentfs::open_dir_at(from, &name, &at)
                    .map_err(refused)?
                    .ok_or_else(|| refused(format!("{}: gone while copied", at.display())))?;
                copy_dir(&sub, &at, &to.join(&name), budget)?;
            }
            FileType::RegularFile => {
                let exec = agentfs::lstat_at(from, &name, &at)
                    .map_err(refused)?
                    .is_some_and(|st| st.st_mode & 0o111 != 0);
                let limit = FILE_MAX.min(MAX_BYTES - budget.bytes);
                let bytes = match agentfs::read_at(from, &name, &at, limit) {
                    Ok(Some(b)) => b,
                    Ok(None) => {
                        return Err(refused(format!("{}: gone while copied", at.display())));
                    }
                    Err(AgentFsError::TooLarge { .. }) if limit == FILE_MAX => {
                        return Err(refused(format!(
                            "{}: larger than {} MiB, the bound of one file",
                            at.display(),
                            FILE_MAX >> 20
                        )));
                    }
                    Err(AgentFsError::TooLarge { .. }) => {
                        return Err(refused(format!(
                            "{}: the app is larger than {} MiB",
                            at.display(),
                            MAX_BYTES >> 20
                        )));
                    }
                    Err(e) => return Err(refused(e)),
                };
                budget.bytes += bytes.len() as u64;
                let dest = to.join(&name);
                std::fs::write(&dest, &bytes).map_err(ApiError::internal)?;
                let mode = if exec { 0o755 } else { 0o644 };
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode))
                    .map_err(ApiError::internal)?;
            }
            FileType::Symlink => {
                return Err(refused(AgentFsError::Link {
                    path: at.display().to_string(),
                }));
            }
            _ => {
                return Err(refused(AgentFsError::NotRegular {
                    path: at.display().to_string(),
                }));
            }
        }
    }
    Ok(())
}

/// What a deploy installed from the folder.
#[derive(Debug)]
pub struct Installed {
    /// The manifest copied.
    pub manifest: MiniAppManifest,
    /// Whether the server entry's folder was there (an app with a backend).
    pub backend: bool,
}

/// The server entry's folder (`server/main.ts` → `server`).
pub fn server_dir(m: &MiniAppManifest) -> &str {
    m.server_entry()
        .rsplit_once('/')
        .map_or("server", |(d, _)| d)
}

/// Whether the folder has the manifest's server folder (an app with a backend).
pub fn has_backend(dir: &OwnedFd, folder: &Path, m: &MiniAppManifest) -> ApiResult<bool> {
    Ok(open_rel(dir, folder, server_dir(m))?.is_some())
}

/// Copies what a deploy installs — `app.toml` as read, the server folder (whole) when there,
/// the UI folder (which must hold `index.html`) — from the folder `dir` into `to`.
pub fn install(
    dir: &OwnedFd,
    folder: &Path,
    m: &MiniAppManifest,
    manifest_text: &str,
    to: &Path,
) -> ApiResult<Installed> {
    let mut budget = Budget::default();
    std::fs::create_dir_all(to).map_err(ApiError::internal)?;
    std::fs::write(to.join(MANIFEST), manifest_text).map_err(ApiError::internal)?;
    let server = server_dir(m);
    let backend = match open_rel(dir, folder, server)? {
        Some(fd) => {
            copy_dir(&fd, &folder.join(server), &to.join(server), &mut budget)?;
            true
        }
        None => false,
    };
    let ui = m.ui_dir();
    let ui_fd = open_rel(dir, folder, ui)?.ok_or_else(|| {
        ApiError::bad_request(
            "no UI",
            format!(
                "ui.dir: {} does not exist (the built UI, with an index.html)",
                folder.join(ui).display()
            ),
        )
    })?;
    copy_dir(&ui_fd, &folder.join(ui), &to.join(ui), &mut budget)?;
    if !to.join(ui).join("index.html").is_file() {
        return Err(ApiError::bad_request(
            "no UI",
            format!("ui.dir: {} has no index.html", folder.join(ui).display()),
        ));
    }
    Ok(Installed {
        manifest: m.clone(),
        backend,
    })
}

/// The folder's `app.toml` text (≤ 64 KiB, UTF-8): what is parsed is what is installed.
pub fn manifest_text(dir: impl AsFd, folder: &Path) -> ApiResult<String> {
    let shown = folder.join(MANIFEST);
    let bytes = agentfs::read_at(dir, MANIFEST, &shown, MANIFEST_MAX)
        .map_err(refused)?
        .ok_or_else(|| {
            ApiError::bad_request(
                "no app.toml",
                format!("{}: missing (a mini app's manifest, H.1)", shown.display()),
            )
        })?;
    String::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("invalid app.toml", "app.toml: not UTF-8 text"))
}

/// Parses and validates a manifest's text.
pub fn parse_manifest(text: &str) -> ApiResult<MiniAppManifest> {
    let m: MiniAppManifest = handler_contracts::parse::from_toml(MANIFEST, text)
        .map_err(|e| ApiError::bad_request("invalid app.toml", e.to_string()))?;
    handler_contracts::validate::validate_miniapp(&m)
        .map_err(|e| ApiError::bad_request("invalid app.toml", format!("app.toml: {e}")))?;
    Ok(m)
}
