//! Remote control's live side (D.7), held by `App`: the connector's light, the pairings shown
//! and not yet claimed, the devices' attachments and the outbox towards devices. The rules that
//! use it are `services::remote`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use handler_contracts::remote::api::RemoteState;
use handler_contracts::remote::pairing;
use tokio::sync::{Notify, mpsc};

/// What goes to devices, in order: (device id, plaintext).
pub type Outbox = mpsc::UnboundedSender<(String, String)>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A device's attachment to a session: how the connector feeds it and closes it.
#[derive(Debug)]
pub struct Attached {
    /// The device.
    pub device: String,
    /// The session.
    pub session: String,
    /// The device's ACP to the attachment.
    pub to_hub: mpsc::Sender<String>,
    /// Closes it (code, reason).
    pub close: Option<tokio::sync::oneshot::Sender<(u16, String)>>,
}

/// Remote control's live side, held by `App`.
#[derive(Debug, Default)]
pub struct Remote {
    /// The light and what the gateway last answered when it was not an answer.
    pub light: Mutex<(RemoteState, Option<String>)>,
    /// Pairings shown and not yet claimed: pairing id → the code's keys, until when.
    pub pending: Mutex<HashMap<String, (pairing::CodeKeys, Instant)>>,
    /// The devices' attachments.
    pub attached: Mutex<Vec<Attached>>,
    /// Told when the settings changed (the connector starts again).
    pub changed: Notify,
    /// Guards the records' read-modify-write.
    pub records: Mutex<()>,
    /// What goes to devices (while the connector runs).
    pub outbox: Mutex<Option<Outbox>>,
}

impl Remote {
    /// Sets the light.
    pub fn set_light(&self, s: RemoteState, detail: Option<String>) {
        *lock(&self.light) = (s, detail);
    }

    /// Devices' attachments now.
    pub fn attached_count(&self) -> usize {
        lock(&self.attached).len()
    }
}
