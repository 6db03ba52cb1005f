//! handlerd's unix socket (decision 0135), shared by the daemon and its clients: where it is —
//! `$HANDLER_SOCKET`, else `$XDG_RUNTIME_DIR/handler/handlerd.sock`, else
//! `<config dir>/run/handlerd.sock` — and the check its folder passes before the daemon binds
//! it: a folder (not a link) of this user, of mode 0700.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The socket's file name in its folder.
pub const SOCKET_FILE_NAME: &str = "handlerd.sock";

/// The socket's folder under `$XDG_RUNTIME_DIR`.
pub const RUNTIME_DIR_NAME: &str = "handler";

/// The socket's path, from `env` (`HANDLER_SOCKET`, `XDG_RUNTIME_DIR`) and Handler's
/// configuration folder.
pub fn path(env: &dyn Fn(&str) -> Option<String>, config_dir: &Path) -> PathBuf {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = set("HANDLER_SOCKET") {
        return PathBuf::from(p);
    }
    match set("XDG_RUNTIME_DIR") {
        Some(d) => Path::new(&d).join(RUNTIME_DIR_NAME).join(SOCKET_FILE_NAME),
        None => config_dir.join("run").join(SOCKET_FILE_NAME),
    }
}

/// This process's effective uid: the only one a peer of the socket may have.
pub fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The socket's folder is not one only this user can reach.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// The socket's path has no folder (`HANDLER_SOCKET` is a bare name or `/`).
    #[error("the socket {0} has no folder")]
    NoFolder(PathBuf),
    /// The folder cannot be made or read.
    #[error("the socket's folder {path}: {source}")]
    Io {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The folder is a link or not a folder.
    #[error("the socket's folder {0} is not a folder (a link is refused)")]
    NotAFolder(PathBuf),
    /// The folder belongs to another user.
    #[error("the socket's folder {path} is owned by uid {uid}, not by this user ({own})")]
    NotOurs {
        /// The folder.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// This process's uid.
        own: u32,
    },
    /// Others may reach the folder.
    #[error("the socket's folder {path} has mode {mode:o}: it must be 0700 (chmod 700 it)")]
    Open {
        /// The folder.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
}

/// Makes the socket's folder (mode 0700) when it is missing, then checks it is a folder of
/// this user that nobody else may enter (0700, no link); its folder, or why not.
pub fn prepare_folder(socket: &Path) -> Result<PathBuf, FolderError> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| FolderError::NoFolder(socket.to_path_buf()))?;
    let io = |source| FolderError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if let Err(e) = std::fs::symlink_metadata(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(io(e));
        }
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    check_folder(dir)?;
    Ok(dir.to_path_buf())
}

/// Whether `dir` is a folder (not a link) of this user, of mode 0700.
pub fn check_folder(dir: &Path) -> Result<(), FolderError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| FolderError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_dir() {
        return Err(FolderError::NotAFolder(dir.to_path_buf()));
    }
    let own = own_uid();
    if meta.uid() != own {
        return Err(FolderError::NotOurs {
            path: dir.to_path_buf(),
            uid: meta.uid(),
            own,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(FolderError::Open {
            path: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_variable_else_the_runtime_dir_else_the_config_dir() {
        let cfg = Path::new("/c");
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_string())
            }
        };
        assert_eq!(
            path(
                &env(&[
                    ("HANDLER_SOCKET", "/s/h.sock"),
                    ("XDG_RUNTIME_DIR", "/run/user/1")
                ]),
                cfg
            ),
            Path::new("/s/h.sock")
        );
        assert_eq!(
            path(
                &env(&[("HANDLER_SOCKET", ""), ("XDG_RUNTIME_DIR", "/run/user/1")]),
                cfg
            ),
            Path::new("/run/user/1/handler/handlerd.sock")
        );
        assert_eq!(path(&env(&[]), cfg), Path::new("/c/run/handlerd.sock"));
    }

    #[test]
    fn the_folder_is_made_0700_and_an_open_or_linked_one_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = prepare_folder(&t.path().join("a/run/handlerd.sock")).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_folder(&dir.join("handlerd.sock")).unwrap_err();
        assert!(matches!(e, FolderError::Open { mode: 0o755, .. }), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = prepare_folder(&link.join("handlerd.sock")).unwrap_err();
        assert!(matches!(e, FolderError::NotAFolder(_)), "{e}");
        if own_uid() == 0 {
            std::os::unix::fs::chown(&dir, Some(1), None).unwrap();
            let e = prepare_folder(&dir.join("handlerd.sock")).unwrap_err();
            assert!(matches!(e, FolderError::NotOurs { uid: 1, .. }), "{e}");
        }
    }
}
