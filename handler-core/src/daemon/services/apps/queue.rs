//! Queued routes (H.10, decision 0159): a request to a route the manifest marks `queued` is
//! written to the app's queue on disk and answered 202 at once; one deliverer per app passes
//! the queue to the backend in order — starting it when needed, waiting and trying again while
//! it cannot start or answers 5xx — and removes an item only once the backend answered it. Each
//! item carries its id in `Handler-Queue-Id`, the same at every try, so a backend that records
//! the ids it handled applies each exactly once even when a delivery is repeated (a handlerd
//! killed between the answer and the removal). Bounded: 1000 items, 1 MiB a body. The queue is
//! files, so a restart (even SIGKILL) loses nothing: the next daemon resumes delivery at start.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{app_dir, apps_dir, backend, log, proxy, record};
use crate::daemon::fsutil;
use crate::daemon::state::AppState as Daemon;

/// At most this many requests wait per app.
pub const MAX_QUEUED: usize = 1000;
/// At most this many bytes in a queued request's body.
pub const MAX_BODY: usize = 1 << 20;
/// The header a delivery carries its item's id in.
pub const ID_HEADER: &str = "handler-queue-id";

/// A queued request as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// `q_<seq>`: its order and its id.
    pub id: String,
    /// The method.
    pub method: String,
    /// The path and query.
    pub target: String,
    /// Its `Content-Type`, if any.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Its body, base64.
    pub body: String,
    /// When it was queued.
    pub queued_at: String,
}

fn dir(d: &Daemon, name: &str) -> PathBuf {
    app_dir(d, name).join("queue")
}

/// The items waiting, in order (`<seq>.json`, seq zero-padded).
fn waiting(d: &Daemon, name: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir(d, name))
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether `method path` is one of the served version's queued routes.
pub fn is_queued(d: &Daemon, name: &str, method: &str, path: &str) -> bool {
    super::served(d, name).is_some_and(|s| s.queued.contains(&format!("{method} {path}")))
}

fn answer(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Queues `req` for `name`'s backend: 202 `{queued, position}`; 413 for a body over 1 MiB, 503
/// when the queue is full.
pub async fn enqueue(d: &Daemon, name: &str, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::json!({"error": format!("a queued request's body is at most {MAX_BODY} bytes")}),
        );
    };
    let lock = d.apps.lock_of(&format!("{name}/queue"));
    let _g = lock.lock().await;
    let waiting = waiting(d, name);
    if waiting.len() >= MAX_QUEUED {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": format!("{MAX_QUEUED} requests are waiting already")}),
        );
    }
    let seq = next_seq(d, name);
    let item = Item {
        id: format!("q_{seq:012}"),
        method: parts.method.to_string(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), ToString::to_string),
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: base64::engine::general_purpose::STANDARD.encode(&bytes),
        queued_at: fsutil::now_rfc3339(),
    };
    let path = dir(d, name).join(format!("{seq:012}.json"));
    let written = fsutil::create_dir_private(&dir(d, name)).and_then(|()| {
        fsutil::write_atomic(&path, &serde_json::to_vec(&item).unwrap_or_default(), 0o600)
    });
    if let Err(e) = written {
        return answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"error": format!("the queue could not be written: {e}")}),
        );
    }
    log(
        d,
        name,
        &format!("queued {} {} as {}", item.method, item.target, item.id),
    );
    poke(d, name);
    answer(
        StatusCode::ACCEPTED,
        serde_json::json!({"queued": item.id, "position": waiting.len() + 1}),
    )
}

/// The next sequence number: one past the highest ever given (kept in `queue/next`, so a
/// delivered item's number is never given again).
fn next_seq(d: &Daemon, name: &str) -> u64 {
    let file = dir(d, name).join("next");
    let kept = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(1);
    let highest = waiting(d, name)
        .last()
        .and_then(|p| p.file_stem()?.to_str()?.parse::<u64>().ok())
        .map_or(0, |s| s + 1);
    let seq = kept.max(highest).max(1);
    let _ = fsutil::create_dir_private(&dir(d, name));
    let _ = fsutil::write_atomic(&file, format!("{}\n", seq + 1).as_bytes(), 0o600);
    seq
}

/// Starts `name`'s deliverer unless one runs.
pub fn poke(d: &Daemon, name: &str) {
    if d.apps.start_delivering(name) {
        tokio::spawn(deliver(d.clone(), name.to_string()));
    }
}

/// At handlerd's start: a deliverer for every app whose queue has items.
pub fn resume_all(d: &Daemon) {
    let Ok(entries) = std::fs::read_dir(apps_dir(d)) else {
        return;
    };
    for e in entries.flatten() {
        if let Some(name) = e.file_name().to_str()
            && !waiting(d, name).is_empty()
        {
            log(d, name, "resuming the queue's delivery");
            poke(d, name);
        }
    }
}

/// Delivers `name`'s queue in order until it is empty.
async fn deliver(d: Daemon, name: String) {
    let mut pause = Duration::from_secs(1);
    loop {
        let next = waiting(&d, &name).into_iter().next();
        let Some(path) = next else {
            // Checked again under the flag: an item queued meanwhile is not left behind.
            if d.apps
                .stop_delivering(&name, || waiting(&d, &name).is_empty())
            {
                return;
            }
            continue;
        };
        if record(&d, &name).ok().flatten().is_none() {
            d.apps.stop_delivering(&name, || true);
            return;
        }
        match deliver_one(&d, &name, &path).await {
            Ok(()) => pause = Duration::from_secs(1),
            Err(why) => {
                log(
                    &d,
                    &name,
                    &format!("queue: {why}; trying again in {} s", pause.as_secs()),
                );
                let wake = d.apps.waker(&name);
                tokio::select! {
                    () = tokio::time::sleep(pause) => pause = (pause * 2).min(Duration::from_secs(60)),
                    () = wake.notified() => pause = Duration::from_secs(1),
                }
            }
        }
    }
}

async fn deliver_one(d: &Daemon, name: &str, path: &std::path::Path) -> Result<(), String> {
    let item: Item = std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let h = backend::ensure(d, name).await.map_err(|e| {
        format!(
            "the backend is not running: {}",
            e.detail.unwrap_or(e.title)
        )
    })?;
    let body = base64::engine::general_purpose::STANDARD
        .decode(&item.body)
        .map_err(|e| e.to_string())?;
    let mut req = Request::builder()
        .method(item.method.as_str())
        .uri(item.target.as_str())
        .header(header::HOST, format!("{name}.localhost"))
        .header(ID_HEADER, item.id.as_str());
    if let Some(ct) = &item.content_type {
        req = req.header(header::CONTENT_TYPE, ct.as_str());
    }
    let req = req.body(Body::from(body)).map_err(|e| e.to_string())?;
    h.touch();
    let res = proxy::send(&h.socket, req).await?;
    let status = res.status();
    // Read to its end: the backend handled it once it answered whole.
    let _ = http_body_util::BodyExt::collect(res.into_body()).await;
    if status.is_server_error() {
        return Err(format!("{} answered {status}", item.id));
    }
    std::fs::remove_file(path).map_err(|e| e.to_string())?;
    log(d, name, &format!("delivered {} ({status})", item.id));
    Ok(())
}
