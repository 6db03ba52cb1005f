//! Bodies through the proxy: streamed frame by frame (never buffered whole), with phantoms and
//! values swapped by the pure streaming replacer, so an SSE event goes out as soon as it
//! arrives, less at most a phantom's length held back while it could still be one.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use handler_sandbox::egress::{Hits, Replacer, Rules};
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};

/// Any error of a body in flight.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;
/// The body type the proxy moves around.
pub type ProxyBody = BoxBody<Bytes, BodyError>;

/// A body with these bytes.
pub fn full(b: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed()
}

/// The error a request body ends with when it carries a phantom to a host it is not for.
#[derive(Debug, thiserror::Error)]
#[error("a secret's stand-in was going to a host it is not for")]
pub struct LeakAbort;

/// Where a streamed body records the leak it was cut at.
pub type LeakSlot = Arc<Mutex<Option<Hits>>>;

/// A body whose bytes go through a replacer.
pub struct Rewriting {
    inner: ProxyBody,
    rules: Arc<Rules>,
    rep: Replacer,
    /// End the body with [`LeakAbort`] as soon as a phantom is seen going the wrong way, and
    /// keep there what leaked.
    abort_on_leak: Option<LeakSlot>,
    on_end: Option<Box<dyn FnOnce(Hits) + Send + Sync>>,
    trailers: Option<HeaderMap>,
    done: bool,
}

impl Rewriting {
    /// Wraps `inner`; `on_end` gets what was injected once the body is complete.
    pub fn new(
        inner: ProxyBody,
        rules: Arc<Rules>,
        abort_on_leak: Option<LeakSlot>,
        on_end: impl FnOnce(Hits) + Send + Sync + 'static,
    ) -> Self {
        let rep = rules.replacer();
        Rewriting {
            inner,
            rules,
            rep,
            abort_on_leak,
            on_end: Some(Box::new(on_end)),
            trailers: None,
            done: false,
        }
    }

    fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.rep.finish(&mut out);
        self.done = true;
        if let Some(f) = self.on_end.take() {
            f(self.rules.hits_of(self.rep.hits()));
        }
        out
    }

    fn leaked(&self) -> bool {
        let Some(slot) = &self.abort_on_leak else {
            return false;
        };
        if !self.rep.hits().iter().any(|n| *n > 0) {
            return false;
        }
        let hits = self.rules.hits_of(self.rep.hits());
        if !hits.is_leak() {
            return false;
        }
        *slot.lock().expect("leak slot") = Some(hits);
        true
    }
}

impl Body for Rewriting {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let mut out = Vec::with_capacity(data.len());
                        this.rep.push(&data, &mut out);
                        if this.leaked() {
                            this.done = true;
                            return Poll::Ready(Some(Err(Box::new(LeakAbort))));
                        }
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            this.trailers = Some(t);
                        }
                        let out = this.finish();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    let out = this.finish();
                    if this.leaked() {
                        return Poll::Ready(Some(Err(Box::new(LeakAbort))));
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Phantoms and values have the same length: the total does not change.
        self.inner.size_hint()
    }
}
