//! An app's `/api` request passed to its backend's socket (H.4; decision 0158): one HTTP/1.1
//! connection per request over the unix socket, hop-by-hop headers and Handler's own cookie left
//! out, the answer streamed back as it comes (server-sent events work), each chunk counting as
//! use and the stream counted while it lasts, so an idle stop never cuts it.

use std::path::Path;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode, header};
use futures_util::StreamExt as _;
use hyper::body::Incoming;

use super::backend::Handle;

/// Sends `req` to the backend listening on `socket`.
pub async fn send(socket: &Path, req: Request<Body>) -> Result<Response<Incoming>, String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot reach the backend's socket: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
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

/// Counts a streamed answer while it lasts.
struct Streaming(Handle);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.touch();
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Passes `req` to the backend `h` and streams its answer back.
pub async fn forward(h: &Handle, req: Request<Body>) -> Response<Body> {
    h.touch();
    let res = match send(&h.socket, outgoing(req)).await {
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
    let guard = Streaming(h.clone());
    let chunks = http_body_util::BodyStream::new(body).filter_map(move |frame| {
        guard.0.touch();
        let out = match frame {
            Ok(f) => f.into_data().ok().map(Ok),
            Err(e) => Some(Err(e)),
        };
        std::future::ready(out)
    });
    Response::from_parts(parts, Body::from_stream(chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

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
