//! An app's `/api` request passed to its backend's socket (H.4; decision 0158): HTTP/1.1 over
//! the unix socket on one of the backend's idle connections (one is kept after its answer was
//! read to the end; a new one when none is free), hop-by-hop headers and Handler's own cookie left out, the
//! answer streamed back as it comes (server-sent events work), each chunk counting as use and
//! the stream counted while it lasts, so an idle stop never cuts it.

use std::path::Path;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode, header};
use futures_util::StreamExt as _;
use hyper::body::Incoming;

use super::backend::Handle;
use crate::daemon::state::apps::IdleConnections;

type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// A new HTTP/1.1 connection to the backend listening on `socket`.
async fn connect(socket: &Path) -> Result<Sender, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach the backend's socket: {e}"))?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends `req` to the backend listening on `socket`, on a connection of its own.
pub async fn send(socket: &Path, req: Request<Body>) -> Result<Response<Incoming>, String> {
    let mut sender = connect(socket).await?;
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// The most idle connections kept per backend.
const IDLE_MAX: usize = 8;

/// An idle connection of `pool` that can carry a request now (a closed or busy one is dropped).
fn take(pool: &IdleConnections) -> Option<Sender> {
    let mut idle = pool.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(s) = idle.pop() {
        if s.is_ready() {
            return Some(s);
        }
    }
    None
}

/// `s` back into `pool`, its answer read to the end (unless closed, or the pool is full).
fn give(pool: &IdleConnections, s: Sender) {
    let mut idle = pool.lock().unwrap_or_else(PoisonError::into_inner);
    if idle.len() < IDLE_MAX && !s.is_closed() {
        idle.push(s);
    }
}

/// How many connections `pool` holds idle now.
pub fn idle(pool: &IdleConnections) -> usize {
    pool.lock().unwrap_or_else(PoisonError::into_inner).len()
}

/// Sends `req` on an idle connection of `pool`, or a new one to `socket` (also when the idle one
/// closed before it took the request); answers the connection with the response.
async fn pooled_send(
    pool: &IdleConnections,
    socket: &Path,
    req: Request<Body>,
) -> Result<(Sender, Response<Incoming>), String> {
    let req = match take(pool) {
        Some(mut s) => match s.try_send_request(req).await {
            Ok(res) => return Ok((s, res)),
            Err(mut e) => match e.take_message() {
                Some(req) => req,
                None => return Err(e.into_error().to_string()),
            },
        },
        None => req,
    };
    let mut s = connect(socket).await?;
    let res = s.send_request(req).await.map_err(|e| e.to_string())?;
    Ok((s, res))
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(*n);
    }
}

/// The request as the backend gets it: no hop-by-hop header, no `handler_app` cookie.
fn outgoing(mut req: Request<Body>) -> Request<Body> {
    strip_hop_by_hop(req.headers_mut());
    let cookies: Vec<String> = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';').map(|c| c.trim().to_string()))
        .filter(|c| !c.is_empty() && !c.starts_with("handler_app="))
        .collect();
    req.headers_mut().remove(header::COOKIE);
    if !cookies.is_empty()
        && let Ok(v) = cookies.join("; ").parse()
    {
        req.headers_mut().insert(header::COOKIE, v);
    }
    req
}

/// Counts a streamed answer while it lasts; its connection goes back to the pool once the
/// answer was read to its end.
struct Streaming {
    handle: Handle,
    sender: Option<Sender>,
    ended: bool,
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.handle.touch();
        self.handle.streams.fetch_sub(1, Ordering::SeqCst);
        if let Some(s) = self.sender.take().filter(|_| self.ended) {
            give(&self.handle.pool, s);
        }
    }
}

/// Passes `req` to the backend `h` and streams its answer back.
pub async fn forward(h: &Handle, req: Request<Body>) -> Response<Body> {
    h.touch();
    let (sender, res) = match pooled_send(&h.pool, &h.socket, outgoing(req)).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = Response::new(Body::from(format!("the backend did not answer: {e}\n")));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            return r;
        }
    };
    let (mut parts, body) = res.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    h.streams.fetch_add(1, Ordering::SeqCst);
    let mut guard = Streaming {
        handle: h.clone(),
        sender: Some(sender),
        ended: false,
    };
    // The frames, then one `None` at the end that marks the answer read whole (the guard,
    // dropped with the stream, gives the connection back only then).
    let frames = http_body_util::BodyStream::new(body)
        .map(Some)
        .chain(futures_util::stream::once(async { None }));
    let chunks = frames.filter_map(move |frame| {
        guard.handle.touch();
        let out = match frame {
            Some(Ok(f)) => f.into_data().ok().map(Ok),
            Some(Err(e)) => Some(Err(e)),
            None => {
                guard.ended = true;
                None
            }
        };
        std::future::ready(out)
    });
    Response::from_parts(parts, Body::from_stream(chunks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A backend on a unix socket answering "ok" to every request (closing each connection
    /// after one answer unless `keep_alive`); counts its connections.
    async fn backend(socket: &Path, keep_alive: bool) -> Arc<AtomicUsize> {
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                        ))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        accepted
    }

    fn handle(socket: &Path) -> Handle {
        Handle {
            socket: socket.to_path_buf(),
            last_used: Arc::new(std::sync::Mutex::new(std::time::Instant::now())),
            streams: Arc::new(AtomicUsize::new(0)),
            pool: IdleConnections::default(),
        }
    }

    async fn get(h: &Handle, read_whole: bool) -> StatusCode {
        let res = forward(h, Request::get("/api/x").body(Body::empty()).unwrap()).await;
        let status = res.status();
        if read_whole {
            let body = http_body_util::BodyExt::collect(res.into_body())
                .await
                .unwrap()
                .to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        status
    }

    #[tokio::test]
    async fn a_connection_whose_answer_was_read_whole_carries_the_next_request() {
        let t = tempfile::tempdir().unwrap();
        let socket = t.path().join("http.sock");
        let accepted = backend(&socket, true).await;
        let h = handle(&socket);
        for _ in 0..5 {
            assert_eq!(get(&h, true).await, StatusCode::OK);
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for five"
        );
        assert_eq!(idle(&h.pool), 1);
        assert_eq!(h.streams.load(Ordering::SeqCst), 0);
        // An answer dropped before its end: its connection is not given back.
        assert_eq!(get(&h, false).await, StatusCode::OK);
        assert_eq!(idle(&h.pool), 0);
        assert_eq!(get(&h, true).await, StatusCode::OK);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_idle_connection_the_backend_closed_is_replaced_without_losing_the_request() {
        let t = tempfile::tempdir().unwrap();
        let socket = t.path().join("http.sock");
        // A backend that answers one request per connection, then closes it.
        let accepted = backend(&socket, false).await;
        let h = handle(&socket);
        for _ in 0..3 {
            assert_eq!(get(&h, true).await, StatusCode::OK);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_backend_never_gets_handlers_cookie_nor_hop_by_hop_headers() {
        let req = Request::post("/api/x")
            .header("cookie", "theme=dark; handler_app=abc123")
            .header("connection", "keep-alive, x-private")
            .header("x-private", "1")
            .header("x-kept", "2")
            .body(Body::empty())
            .unwrap();
        let out = outgoing(req);
        assert_eq!(out.headers()["cookie"], "theme=dark");
        assert!(!out.headers().contains_key("connection"));
        assert!(!out.headers().contains_key("x-private"));
        assert_eq!(out.headers()["x-kept"], "2");
        let only = outgoing(
            Request::get("/")
                .header("cookie", "handler_app=abc")
                .body(Body::empty())
                .unwrap(),
        );
        assert!(!only.headers().contains_key("cookie"));
    }
}
