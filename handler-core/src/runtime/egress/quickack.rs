//! Upstream sockets that acknowledge what they receive at once (TCP_QUICKACK re-armed after
//! every read). A server without TCP_NODELAY holds a small answer until its previous segment
//! (e.g. TLS session tickets sent after the handshake) is acknowledged; with Linux's delayed
//! ACK that cost the first answer of every new upstream connection about 40 ms (the
//! `first answer` line of the egress benchmark). Acknowledging at once removes the wait.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TCP stream whose reads re-arm TCP_QUICKACK (the kernel leaves quick-ACK mode on its own).
#[derive(Debug)]
pub struct QuickAck(pub TcpStream);

impl QuickAck {
    /// Wraps `s`, quick-ACK mode on from the start.
    pub fn new(s: TcpStream) -> Self {
        let _ = socket2::SockRef::from(&s).set_tcp_quickack(true);
        QuickAck(s)
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // Also sends an ACK the kernel was holding back.
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
        r
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
