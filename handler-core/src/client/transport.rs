//! How a client reaches handlerd (decision 0135), in one place: its unix socket by default,
//! the peer checked to be this user (SO_PEERCRED) before a byte is sent; or, with
//! `HANDLER_TRANSPORT=tcp`, its loopback port, once the kernel says the socket that accepted the
//! connection belongs to this user (`/proc/net/tcp`, `tcp6`). Another user's listener on the
//! port gets a connection and nothing else: no token, no request.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// Where handlerd is dialled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Its unix socket (the default).
    Socket(PathBuf),
    /// `127.0.0.1:<port>` (`HANDLER_TRANSPORT=tcp`).
    Tcp(u16),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Socket(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(port) => write!(f, "127.0.0.1:{port}"),
        }
    }
}

/// Why handlerd could not be dialled, or was not talked to.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Nothing answers there (handlerd not started, or elsewhere).
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// Where.
        endpoint: Endpoint,
        /// Why.
        source: std::io::Error,
    },
    /// What answers is another user's: nothing was sent to it.
    #[error(
        "refused to talk to {endpoint}: it is held by uid {uid}, not by this user (uid {own}); nothing was sent"
    )]
    NotOurs {
        /// Where.
        endpoint: Endpoint,
        /// Who holds it.
        uid: u32,
        /// This process's uid.
        own: u32,
    },
    /// Who holds it cannot be told: nothing was sent to it.
    #[error("refused to talk to {endpoint}: who holds it cannot be told ({why}); nothing was sent")]
    Unknown {
        /// Where.
        endpoint: Endpoint,
        /// Why not.
        why: String,
    },
}

impl TransportError {
    /// Whether nothing answered (rather than someone who is not this user).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, TransportError::Connect { .. })
    }
}

/// A connection to handlerd, of either kind.
#[derive(Debug)]
pub enum Stream {
    /// Over its unix socket.
    Unix(UnixStream),
    /// Over its loopback port.
    Tcp(TcpStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Dials `endpoint` and checks that this user holds the other end; nothing is written before.
pub async fn connect(endpoint: &Endpoint) -> Result<Stream, TransportError> {
    let own = crate::socket::own_uid();
    let connect_err = |source| TransportError::Connect {
        endpoint: endpoint.clone(),
        source,
    };
    match endpoint {
        Endpoint::Socket(path) => {
            let s = UnixStream::connect(path).await.map_err(connect_err)?;
            let uid = s
                .peer_cred()
                .map_err(|e| TransportError::Unknown {
                    endpoint: endpoint.clone(),
                    why: e.to_string(),
                })?
                .uid();
            if uid != own {
                return Err(TransportError::NotOurs {
                    endpoint: endpoint.clone(),
                    uid,
                    own,
                });
            }
            Ok(Stream::Unix(s))
        }
        Endpoint::Tcp(port) => {
            let s = TcpStream::connect((Ipv4Addr::LOCALHOST, *port))
                .await
                .map_err(connect_err)?;
            let unknown = |why: String| TransportError::Unknown {
                endpoint: endpoint.clone(),
                why,
            };
            let (ours, theirs) = (
                s.local_addr().map_err(|e| unknown(e.to_string()))?,
                s.peer_addr().map_err(|e| unknown(e.to_string()))?,
            );
            match accepting_uid(theirs, ours).await {
                Ok(uid) if uid == own => Ok(Stream::Tcp(s)),
                Ok(uid) => Err(TransportError::NotOurs {
                    endpoint: endpoint.clone(),
                    uid,
                    own,
                }),
                Err(why) => Err(unknown(why)),
            }
        }
    }
}

/// The uid of the socket at `server` whose peer is `client` (the one a listener made when it
/// took our connection: it carries the listener's owner), from `/proc/net/tcp` and `tcp6`.
/// Tried a few times: the accepted socket may show up a moment after `connect` returns.
async fn accepting_uid(server: SocketAddr, client: SocketAddr) -> Result<u32, String> {
    for _ in 0..20 {
        let mut tables = String::new();
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            match std::fs::read_to_string(f) {
                Ok(t) => tables.push_str(&t),
                Err(e) if f.ends_with('6') && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{f}: {e}")),
            }
        }
        if let Some(uid) = uid_of(&tables, server, client) {
            return Ok(uid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("no socket in /proc/net/tcp took the connection".into())
}

/// In the lines of `/proc/net/tcp{,6}`, the uid of the socket whose local address is `local`
/// and remote address `remote` (IPv4-mapped IPv6 addresses compared as IPv4).
pub fn uid_of(tables: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let norm = |a: SocketAddr| match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    };
    let (local, remote) = (norm(local), norm(remote));
    tables.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid …
        if f.len() < 8 || !f[0].ends_with(':') {
            return None;
        }
        let (l, r) = (parse_addr(f[1])?, parse_addr(f[2])?);
        (norm(l) == local && norm(r) == remote)
            .then(|| f[7].parse().ok())
            .flatten()
    })
}

/// `0100007F:1D06` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit word as the kernel
/// prints it, in this machine's byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepting_socket_is_found_by_both_its_ends() {
        let le = cfg!(target_endian = "little");
        let v4 = if le { "0100007F" } else { "7F000001" };
        let tcp = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {v4}:1D06 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 1 1 0\n\
             1: {v4}:1D06 {v4}:C350 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0\n\
             2: {v4}:C350 {v4}:1D06 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0\n"
        );
        let server: SocketAddr = "127.0.0.1:7430".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        assert_eq!(uid_of(&tcp, server, client), Some(1001));
        assert_eq!(uid_of(&tcp, client, server), Some(0));
        let other: SocketAddr = "127.0.0.1:50001".parse().unwrap();
        assert_eq!(uid_of(&tcp, server, other), None);
        // A dual-stack listener's connection: ::ffff:127.0.0.1 in tcp6.
        let mapped = if le {
            "0000000000000000FFFF00000100007F"
        } else {
            "00000000000000000000FFFF7F000001"
        };
        let tcp6 = format!(
            "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {mapped}:1D06 {mapped}:C350 01 00000000:00000000 00:00000000 00000000  1234        0 4 1 0\n"
        );
        assert_eq!(uid_of(&tcp6, server, client), Some(1234));
    }
}
