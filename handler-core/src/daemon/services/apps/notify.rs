//! A mini app's notifications (H.9, decision 0160): while a backend with `needs.notify` runs,
//! handlerd listens on a unix socket in a folder of its own state, mounted read-only into the
//! sandbox; each line is hostile data — bounded (4 KiB, 10 s idle), parsed by
//! [`AppNotifyMessage::parse`], rate-limited (10 a minute) — and the last 50 are kept in the
//! app's folder for `GET /v1/apps/{name}/notifications`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use handler_contracts::miniapp::{
    AppNotification, AppNotifications, AppNotifyMessage, NOTIFY_LINE_MAX,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc;

use super::{app_dir, log};
use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState as Daemon;
use crate::daemon::state::apps::AbortOnDrop;

/// How many are kept per app.
pub const KEEP: usize = 50;
/// How many an app may send a minute; more are dropped.
const PER_MINUTE: usize = 10;
/// A connection that sends nothing this long is closed.
const IDLE: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const CONNECTIONS: usize = 4;

/// The folder of an app's notification socket (handlerd's state, never the backend's).
pub fn notify_dir(d: &Daemon, name: &str) -> PathBuf {
    d.config.state_dir.join("apps-notify").join(name)
}

fn store(d: &Daemon, name: &str) -> PathBuf {
    app_dir(d, name).join("notifications.json")
}

/// The notifications kept for `name`, oldest first (none yet: an empty list).
pub fn list(d: &Daemon, name: &str) -> ApiResult<AppNotifications> {
    match std::fs::read(store(d, name)) {
        Ok(b) => serde_json::from_slice(&b).map_err(ApiError::internal),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AppNotifications::default()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Binds `name`'s socket (a stale one removed) and serves it until the answer is dropped;
/// answers the folder to mount.
pub fn listen(d: &Daemon, name: &str, version: &str) -> ApiResult<(PathBuf, AbortOnDrop)> {
    use std::os::unix::fs::PermissionsExt;
    let dir = notify_dir(d, name);
    fsutil::create_dir_private(&dir).map_err(ApiError::internal)?;
    let socket = dir.join(handler_sandbox::app::NOTIFY_SOCKET);
    super::backend::socket_path_ok(&socket)?;
    let _ = std::fs::remove_file(&socket);
    let listener = tokio::net::UnixListener::bind(&socket).map_err(ApiError::internal)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(ApiError::internal)?;
    let (tx, rx) = mpsc::channel::<AppNotifyMessage>(PER_MINUTE);
    let keeper = tokio::spawn(keep(d.clone(), name.to_string(), version.to_string(), rx));
    let (d2, n2) = (d.clone(), name.to_string());
    let task = tokio::spawn(async move {
        let _keeper = AbortOnDrop(keeper.abort_handle());
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (d3, n3, tx) = (d2.clone(), n2.clone(), tx.clone());
            tokio::spawn(async move {
                read_lines(&d3, &n3, stream, &tx).await;
                drop(permit);
            });
        }
    });
    Ok((dir, AbortOnDrop(task.abort_handle())))
}

/// Reads one connection's lines: each at most [`NOTIFY_LINE_MAX`] bytes, within [`IDLE`].
async fn read_lines(
    d: &Daemon,
    name: &str,
    stream: tokio::net::UnixStream,
    tx: &mpsc::Sender<AppNotifyMessage>,
) {
    let mut r = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        let mut bounded = (&mut r).take(NOTIFY_LINE_MAX as u64 + 1);
        let read = bounded.read_until(b'\n', &mut line);
        match tokio::time::timeout(IDLE, read).await {
            Ok(Ok(0)) | Err(_) => return,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                log(d, name, &format!("notify: the connection failed: {e}"));
                return;
            }
        }
        // A last line without its newline, at the end of the stream, is read as one; a line
        // that filled the bound without one is too long.
        if line.last() != Some(&b'\n') && line.len() > NOTIFY_LINE_MAX {
            log(
                d,
                name,
                &format!("notify: a line over {NOTIFY_LINE_MAX} bytes: connection closed"),
            );
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            continue;
        }
        match AppNotifyMessage::parse(text) {
            Ok(m) => {
                if tx.send(m).await.is_err() {
                    return;
                }
            }
            Err(e) => log(d, name, &format!("notify: dropped: {e}")),
        }
    }
}

/// Keeps what arrives, at most [`PER_MINUTE`] a minute, the last [`KEEP`].
async fn keep(d: Daemon, name: String, version: String, mut rx: mpsc::Receiver<AppNotifyMessage>) {
    let mut window: VecDeque<Instant> = VecDeque::new();
    let mut dropped = 0usize;
    while let Some(m) = rx.recv().await {
        let now = Instant::now();
        if !admit(&mut window, now) {
            dropped += 1;
            if dropped % 10 == 1 {
                log(
                    &d,
                    &name,
                    &format!(
                        "notify: over {PER_MINUTE} a minute: {dropped} dropped since this backend started"
                    ),
                );
            }
            continue;
        }
        let n = AppNotification {
            at: fsutil::now_rfc3339(),
            version: version.clone(),
            title: m.title,
            body: m.body,
        };
        let (d2, name2) = (d.clone(), name.clone());
        let saved = tokio::task::spawn_blocking(move || append(&store(&d2, &name2), n, KEEP)).await;
        match saved {
            Ok(Ok(())) => log(&d, &name, "notify: a notification was kept"),
            Ok(Err(e)) => log(&d, &name, &format!("notify: not kept: {e}")),
            Err(e) => log(&d, &name, &format!("notify: not kept: {e}")),
        }
    }
}

/// Whether one more fits the last minute's window (which it then joins).
fn admit(window: &mut VecDeque<Instant>, now: Instant) -> bool {
    while window
        .front()
        .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
    {
        window.pop_front();
    }
    if window.len() >= PER_MINUTE {
        return false;
    }
    window.push_back(now);
    true
}

/// Adds `n` to the list at `path`, the oldest dropped past `keep`; written whole by rename.
fn append(path: &Path, n: AppNotification, keep: usize) -> std::io::Result<()> {
    let mut all: AppNotifications = match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => AppNotifications::default(),
        Err(e) => return Err(e),
    };
    all.notifications.push(n);
    let over = all.notifications.len().saturating_sub(keep);
    all.notifications.drain(..over);
    let bytes = serde_json::to_vec(&all).map_err(std::io::Error::other)?;
    fsutil::write_atomic(path, &bytes, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_a_minute_then_none_until_the_first_is_a_minute_old() {
        let mut w = VecDeque::new();
        let t0 = Instant::now();
        for i in 0..10 {
            assert!(admit(&mut w, t0 + Duration::from_secs(i)), "{i}");
        }
        assert!(!admit(&mut w, t0 + Duration::from_secs(30)));
        assert!(!admit(&mut w, t0 + Duration::from_secs(59)));
        assert!(admit(&mut w, t0 + Duration::from_secs(60)));
        assert!(!admit(&mut w, t0 + Duration::from_secs(60)));
    }

    #[test]
    fn the_list_keeps_the_last_ones_oldest_first() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("notifications.json");
        for i in 0..5 {
            let n = AppNotification {
                at: format!("2026-12-06T00:00:0{i}Z"),
                version: "1.0.0".into(),
                title: format!("n{i}"),
                body: String::new(),
            };
            append(&p, n, 3).unwrap();
        }
        let all: AppNotifications = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let titles: Vec<&str> = all.notifications.iter().map(|n| n.title.as_str()).collect();
        assert_eq!(titles, ["n2", "n3", "n4"]);
    }
}
