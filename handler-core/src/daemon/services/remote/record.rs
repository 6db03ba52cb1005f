//! What remote control keeps (`<state>/remote/`, 0700): `gateway.json` (the gateway and this
//! daemon's id there) and `devices.json` (each paired device's id, name, public key and
//! counters). The keys and the gateway's credential are in the secret store, not here.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::daemon::fsutil;

fn dir(state: &Path) -> PathBuf {
    state.join("remote")
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let text = fsutil::read_optional(path).ok().flatten()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "remote record unreadable: ignored");
            None
        }
    }
}

fn write<T: Serialize>(state: &Path, name: &str, v: &T) -> std::io::Result<()> {
    let d = dir(state);
    fsutil::create_dir_private(&d)?;
    let bytes = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
    fsutil::write_atomic(&d.join(name), &bytes, 0o600)
}

/// Forgets both records.
pub(super) fn remove(state: &Path) -> std::io::Result<()> {
    for f in ["gateway.json", "devices.json"] {
        match std::fs::remove_file(dir(state).join(f)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The gateway this daemon polls.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Settings {
    /// Its URL.
    pub gateway: String,
    /// This daemon's id there.
    pub daemon_id: String,
}

impl Settings {
    pub(super) fn read(state: &Path) -> Option<Settings> {
        read(&dir(state).join("gateway.json"))
    }

    pub(super) fn write(&self, state: &Path) -> std::io::Result<()> {
        write(state, "gateway.json", self)
    }
}

/// One paired device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Device {
    pub id: String,
    pub name: String,
    /// Its X25519 public key (base64url).
    pub public_key: String,
    pub paired_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at: Option<String>,
    /// The last counter accepted from it.
    #[serde(default)]
    pub recv_n: u64,
    /// The counters towards it are reserved up to this one (a restart goes on above it).
    #[serde(default)]
    pub send_reserved: u64,
}

/// The paired devices.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Devices {
    pub list: Vec<Device>,
}

impl Devices {
    pub(super) fn read(state: &Path) -> Devices {
        read(&dir(state).join("devices.json")).unwrap_or_default()
    }

    pub(super) fn write(&self, state: &Path) -> std::io::Result<()> {
        write(state, "devices.json", self)
    }
}
