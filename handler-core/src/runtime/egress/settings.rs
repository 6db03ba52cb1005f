//! The live settings (A.4): the file `set-egress`/`set-allow` rewrite, read again for every
//! request, and watched so that a change also closes open connections the new policy no longer
//! allows (egress-lessons). A file that cannot be read or parsed denies everything (fail closed).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use handler_sandbox::egress::Settings;
use tokio::sync::watch;

use crate::runtime::egress::events::Events;

/// How often the file is checked for changes, for open connections (requests read it anyway).
pub const POLL: Duration = Duration::from_millis(100);

/// Why the settings file gives no settings (every request is then refused).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiveSettingsError {
    /// The file could not be read.
    #[error("cannot read the egress settings {path}: {source}")]
    Unreadable {
        /// The settings file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file is not valid settings.
    #[error("{path}: {source}")]
    Invalid {
        /// The settings file.
        path: PathBuf,
        /// What is wrong in it.
        source: handler_sandbox::egress::SettingsError,
    },
}

/// The settings read, or why there are none.
pub type SettingsRead = Result<Settings, LiveSettingsError>;

/// The settings file and the last settings read from it.
#[derive(Debug)]
pub struct LiveSettings {
    path: PathBuf,
    tx: watch::Sender<Arc<SettingsRead>>,
    last_text: std::sync::Mutex<String>,
}

impl LiveSettings {
    /// Reads the file; it must be valid at start.
    pub async fn open(path: &Path) -> Result<Arc<Self>, LiveSettingsError> {
        let text = tokio::fs::read_to_string(path).await.map_err(|source| {
            LiveSettingsError::Unreadable {
                path: path.to_path_buf(),
                source,
            }
        })?;
        let s = Settings::parse(&text).map_err(|source| LiveSettingsError::Invalid {
            path: path.to_path_buf(),
            source,
        })?;
        let (tx, _) = watch::channel(Arc::new(Ok(s)));
        Ok(Arc::new(LiveSettings {
            path: path.to_path_buf(),
            tx,
            last_text: std::sync::Mutex::new(text),
        }))
    }

    /// The settings in force now (read from the file); `Err` denies everything.
    pub async fn current(&self) -> Arc<SettingsRead> {
        let text = match tokio::fs::read_to_string(&self.path).await {
            Ok(t) => t,
            Err(source) => {
                let r = Arc::new(Err(LiveSettingsError::Unreadable {
                    path: self.path.clone(),
                    source,
                }));
                self.tx.send_replace(r.clone());
                return r;
            }
        };
        {
            let mut last = self.last_text.lock().expect("settings lock");
            if *last == text {
                return self.tx.borrow().clone();
            }
            *last = text.clone();
        }
        let r = Arc::new(
            Settings::parse(&text).map_err(|source| LiveSettingsError::Invalid {
                path: self.path.clone(),
                source,
            }),
        );
        self.tx.send_replace(r.clone());
        r
    }

    /// Notified at every change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<SettingsRead>> {
        self.tx.subscribe()
    }

    /// Checks the file for changes every [`POLL`], so connections learn of them.
    pub fn spawn_watcher(self: &Arc<Self>, events: Events) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut was_ok = true;
            loop {
                tokio::time::sleep(POLL).await;
                let Some(me) = me.upgrade() else { return };
                let now = me.current().await;
                if let Err(e) = &*now {
                    if was_ok {
                        events.log(&format!("{e}; refusing every request until it is fixed"));
                    }
                }
                was_ok = now.is_ok();
            }
        });
    }
}

/// Writes settings atomically (a new file with a name of its own, renamed over the old one in
/// the same folder): the proxy sees the whole old file or the whole new one, and two writers
/// never share a temporary file. The file is readable by the proxy (0644, no secret in it).
pub fn write_settings(path: &Path, s: &Settings) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".settings.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(s.render().as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
