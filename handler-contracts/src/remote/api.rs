//! The daemon API's bodies of remote control (`/v1/remote…`, D.7): the light, the gateway's
//! setting, a pairing's code, the paired devices.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The connector's light (D.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RemoteState {
    /// No gateway set.
    #[default]
    Off,
    /// Polling the gateway, no device attached.
    Idle,
    /// A device is attached to a shared session.
    Ok,
    /// The gateway refused this daemon's credential.
    Unauthorized,
    /// The gateway did not answer (the detail says how); polling goes on.
    Unreachable,
}

/// `GET /v1/remote`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteStatus {
    /// The light.
    pub state: RemoteState,
    /// The gateway's URL, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// This daemon's id at the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_id: Option<String>,
    /// Paired devices.
    pub devices: usize,
    /// Shared sessions.
    pub shared: usize,
    /// Devices' attachments.
    pub attached: usize,
    /// What the gateway last answered, when it was not an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `PUT /v1/remote`: the gateway to register with (and poll).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteSetup {
    /// `https://…` (`http://` only for a loopback host).
    pub gateway: String,
}

/// `POST /v1/remote/pairings`: a code to pair one device with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairingStarted {
    /// The one-time code (`ABCD-EFGH-…`), to type on the device.
    pub code: String,
    /// What the QR code holds: the gateway's device page with the code in its fragment (which a
    /// browser never sends).
    pub uri: String,
    /// The QR code as an SVG picture.
    pub qr_svg: String,
    /// Until when it can be claimed (RFC 3339).
    pub expires_at: String,
}

/// A paired device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceInfo {
    /// Its id (`v_…`).
    pub id: String,
    /// Its name, as the device gave it.
    pub name: String,
    /// When it was paired.
    pub paired_at: String,
    /// When it last sent an envelope that opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at: Option<String>,
    /// Sessions it is attached to now.
    pub attached: Vec<String>,
}
