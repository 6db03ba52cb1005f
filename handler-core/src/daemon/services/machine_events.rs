//! The machines' change channel (issue 29 item 3, decision 0143): a WebSocket that sends a
//! snapshot, then what changed. One poller reads the list (the runtime's state of each machine)
//! while anyone watches — every [`POLL`], and at once when this daemon changed a machine — and
//! each watcher is sent [`changes`] between what it was told and the list now.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use handler_contracts::machine::MachineInfo;
use handler_contracts::machine::events::{MachineEvent, changes};

use super::machines;
use super::ws::close_msg;
use crate::daemon::state::AppState;

/// How often the poller asks the runtime while someone watches: a machine stopped outside
/// Handler (`podman stop`) is seen within this.
pub const POLL: Duration = Duration::from_secs(2);

/// Tells the watchers now that this daemon changed a machine.
pub fn poke(app: &AppState) {
    app.machines_seen.poke.notify_one();
}

/// Reads the list while there are watchers; ends when the last one left.
async fn poll(app: AppState) {
    let seen = &app.machines_seen;
    loop {
        if seen.now.receiver_count() == 0 {
            seen.polling.store(false, Ordering::SeqCst);
            // A watcher that subscribed meanwhile saw `polling` still set, so started none.
            if seen.now.receiver_count() == 0 || seen.polling.swap(true, Ordering::SeqCst) {
                return;
            }
        }
        match machines::list(&app).await {
            Ok(list) => {
                seen.now.send_if_modified(|old| {
                    let changed = **old != list;
                    if changed {
                        *old = Arc::new(list);
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!(error = %e, "machines not listed for the change channel"),
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = seen.poke.notified() => {}
        }
    }
}

fn text(ev: &MachineEvent) -> Message {
    Message::Text(serde_json::to_string(ev).unwrap_or_default().into())
}

/// Serves one watcher: the snapshot, then the changes, until it closes.
pub async fn watch(app: AppState, mut socket: WebSocket) {
    let mut rx = app.machines_seen.now.subscribe();
    if !app.machines_seen.polling.swap(true, Ordering::SeqCst) {
        tokio::spawn(poll(app.clone()));
    }
    let mut told: Vec<MachineInfo> = match machines::list(&app).await {
        Ok(l) => l,
        Err(e) => {
            let _ = socket
                .send(close_msg(1011, &super::ws::truncate(&e.to_string(), 120)))
                .await;
            return;
        }
    };
    let first = MachineEvent::Snapshot {
        machines: told.clone(),
    };
    if socket.send(text(&first)).await.is_err() {
        return;
    }
    rx.mark_unchanged();
    loop {
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    return;
                }
                let now = rx.borrow_and_update().clone();
                for ev in changes(&told, &now) {
                    if socket.send(text(&ev)).await.is_err() {
                        return;
                    }
                }
                told = now.to_vec();
            }
            m = socket.recv() => match m {
                None | Some(Err(_) | Ok(Message::Close(_))) => return,
                // The channel is one way: what a client sends is read and dropped.
                Some(Ok(_)) => {}
            },
        }
    }
}
