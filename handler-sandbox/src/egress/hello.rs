//! What a relayed tunnel starts with (decision 0034): the client's first bytes, read before the
//! tunnel is spliced, say whether it speaks TLS (then its ClientHello's server name must name the
//! CONNECT target: no domain fronting through a shared CDN address), plain HTTP/1 or something
//! else (both relayed as they are; their bytes name no server the proxy checks). A small parser
//! of the ClientHello (RFC 8446 §4.1.2, RFC 6066 §3) that reads the records without consuming
//! anything: pure, bytes in, a verdict out.

use crate::egress::authority::{self, Authority, Mismatch};

/// The most the proxy reads of a tunnel's start while waiting for a whole ClientHello.
pub const MAX_HELLO: usize = 64 * 1024;

/// Why a tunnel's first bytes, which claim to be a TLS handshake, are not a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HelloError {
    #[error("the TLS record is not a handshake")]
    /// The first TLS record is not a handshake record.
    NotHandshake,
    #[error("the first TLS handshake message is not a ClientHello")]
    /// The first handshake message is not a ClientHello.
    NotClientHello,
    #[error("the ClientHello is cut short or longer than its record says")]
    /// The ClientHello ends early or runs past its record.
    Truncated,
    #[error("the ClientHello is longer than {MAX_HELLO} bytes")]
    /// The ClientHello is longer than the proxy reads.
    TooLong,
    #[error("the ClientHello's server name is not a host name")]
    /// The server_name extension holds no valid host name.
    BadServerName,
    #[error("the ClientHello has two server_name extensions")]
    /// The ClientHello has two server_name extensions.
    DuplicateServerName,
}

/// What a tunnel's first bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// A TLS ClientHello, with the server name it asks for (none: no `server_name`).
    Tls {
        /// The server name the ClientHello asks for, if any.
        sni: Option<String>,
    },
    /// A plain HTTP/1 request (a method token and a space), relayed as it is.
    Http,
    /// Neither: another protocol (SSH, a database's), relayed as it is.
    Other,
    /// Claims to be TLS but is no ClientHello that can be read.
    Malformed(HelloError),
}

/// The longest HTTP method token waited for (`OPTIONS`, `CONNECT`, `PROPFIND`… fit).
const MAX_METHOD: usize = 16;

/// Reads the start of a tunnel's client bytes.
pub fn classify(buf: &[u8]) -> Start {
    let Some(&first) = buf.first() else {
        return Start::NeedMore;
    };
    if first == 0x16 {
        return match client_hello(buf) {
            Ok(Some(sni)) => Start::Tls { sni },
            Ok(None) => Start::NeedMore,
            Err(e) => Start::Malformed(e),
        };
    }
    let token = buf.iter().take_while(|b| b.is_ascii_uppercase()).count();
    match buf.get(token) {
        Some(b' ') if token > 0 => Start::Http,
        None if token == buf.len() && token < MAX_METHOD => Start::NeedMore,
        _ => Start::Other,
    }
}

/// Whether a tunnel to `connect` that starts so may go on. A ClientHello must name `connect`
/// (none only for an IP address target, as clients send no SNI for those); one that cannot be
/// read is refused.
pub fn check_start(connect: &Authority, start: &Start) -> Result<(), Mismatch> {
    match start {
        Start::Tls { sni } => authority::check_sni(connect, sni.as_deref()),
        Start::Malformed(e) => Err(Mismatch::BadHello {
            connect: connect.to_string(),
            reason: e.to_string(),
        }),
        Start::NeedMore | Start::Http | Start::Other => Ok(()),
    }
}

/// The handshake bytes of the TLS records at the start of `buf`, until `want` of them are there
/// (`Ok(None)`: more records needed).
fn handshake_bytes(buf: &[u8], want: usize) -> Result<Option<Vec<u8>>, HelloError> {
    let mut out = Vec::new();
    let mut rest = buf;
    while out.len() < want {
        if rest.len() < 5 {
            return Ok(None);
        }
        if rest[0] != 0x16 {
            return Err(HelloError::NotHandshake);
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if rest.len() < 5 + len {
            return Ok(None);
        }
        out.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    Ok(Some(out))
}

/// The server name of the ClientHello at the start of `buf`: `Ok(None)` while it is incomplete,
/// `Ok(Some(None))` when it has no `server_name` extension.
pub fn client_hello(buf: &[u8]) -> Result<Option<Option<String>>, HelloError> {
    let Some(head) = handshake_bytes(buf, 4)? else {
        return if buf.len() > MAX_HELLO {
            Err(HelloError::TooLong)
        } else {
            Ok(None)
        };
    };
    if head[0] != 0x01 {
        return Err(HelloError::NotClientHello);
    }
    let len = (usize::from(head[1]) << 16) | (usize::from(head[2]) << 8) | usize::from(head[3]);
    if len + 4 > MAX_HELLO {
        return Err(HelloError::TooLong);
    }
    let Some(hs) = handshake_bytes(buf, len + 4)? else {
        return Ok(None);
    };
    let body = &hs[4..4 + len];
    sni_of(body).map(Some)
}

/// A cursor over a ClientHello's body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<usize, HelloError> {
        Ok(usize::from(self.take(1)?[0]))
    }
    fn u16(&mut self) -> Result<usize, HelloError> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    /// A vector with a length prefix of `prefix` bytes (1 or 2).
    fn vec(&mut self, prefix: usize) -> Result<Reader<'a>, HelloError> {
        let n = if prefix == 1 { self.u8()? } else { self.u16()? };
        Ok(Reader(self.take(n)?))
    }
}

fn sni_of(body: &[u8]) -> Result<Option<String>, HelloError> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    r.vec(1)?; // legacy_session_id
    r.vec(2)?; // cipher_suites
    r.vec(1)?; // legacy_compression_methods
    if r.0.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut exts = r.vec(2)?;
    let mut sni = None;
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let mut data = exts.vec(2)?;
        if kind != 0 {
            continue;
        }
        if sni.is_some() {
            return Err(HelloError::DuplicateServerName);
        }
        let mut list = data.vec(2)?;
        let mut name = None;
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let n = list.vec(2)?.0;
            // Only host_name (0) is defined; one of them.
            if name_type == 0 {
                if name.is_some() {
                    return Err(HelloError::DuplicateServerName);
                }
                let s = std::str::from_utf8(n).map_err(|_| HelloError::BadServerName)?;
                if s.is_empty()
                    || !s
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
                {
                    return Err(HelloError::BadServerName);
                }
                name = Some(s.to_string());
            }
        }
        // An extension present but naming no host: as good as none, which only an IP
        // target accepts.
        sni = Some(name);
    }
    Ok(sni.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as clients write it (test side, from RFC 8446 §4.1.2), with these
    /// extensions, in one record or cut into records of `record` bytes.
    fn hello(exts: &[(u16, Vec<u8>)], record: usize) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(32);
        body.extend_from_slice(&[9u8; 32]);
        body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
        body.extend_from_slice(&[1, 0]);
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend_from_slice(&kind.to_be_bytes());
            e.extend_from_slice(&(data.len() as u16).to_be_bytes());
            e.extend_from_slice(data);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut hs = vec![0x01];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut out = Vec::new();
        for chunk in hs.chunks(record) {
            out.extend_from_slice(&[0x16, 0x03, 0x01]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn sni(name: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![0];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name.as_bytes());
        let mut d = (entry.len() as u16).to_be_bytes().to_vec();
        d.extend_from_slice(&entry);
        (0, d)
    }

    fn target(s: &str) -> Authority {
        Authority::parse(s, None).unwrap()
    }

    #[test]
    fn reads_the_server_name_whole_or_over_records_and_waits_for_the_rest() {
        let exts = [
            (10, vec![0, 2, 0, 29]),
            sni("api.example.com"),
            (43, vec![2, 3, 4]),
        ];
        for record in [16_384, 40, 7] {
            let h = hello(&exts, record);
            assert_eq!(
                classify(&h),
                Start::Tls {
                    sni: Some("api.example.com".into())
                },
                "records of {record}"
            );
            for cut in 0..h.len() {
                assert_eq!(classify(&h[..cut]), Start::NeedMore, "cut at {cut}");
            }
        }
        assert_eq!(
            classify(&hello(&[(10, vec![0, 2, 0, 29])], 512)),
            Start::Tls { sni: None }
        );
    }

    #[test]
    fn a_server_name_other_than_the_connect_target_is_refused() {
        let t = target("api.example.com:443");
        let front = classify(&hello(&[sni("evil.example.net")], 512));
        assert!(matches!(check_start(&t, &front), Err(Mismatch::Sni { .. })));
        assert!(check_start(&t, &classify(&hello(&[sni("API.example.com.")], 512))).is_ok());
        assert!(matches!(
            check_start(&t, &classify(&hello(&[], 512))),
            Err(Mismatch::NoSni { .. })
        ));
        // An IP target: no SNI is fine, a name is not.
        let ip = target("93.184.216.34:443");
        assert!(check_start(&ip, &classify(&hello(&[], 512))).is_ok());
        assert!(check_start(&ip, &classify(&hello(&[sni("evil.example.net")], 512))).is_err());
    }

    #[test]
    fn what_cannot_be_read_as_a_client_hello_is_refused() {
        let t = target("api.example.com:443");
        let mut two = hello(&[sni("api.example.com"), sni("evil.example.net")], 512);
        assert_eq!(
            classify(&two),
            Start::Malformed(HelloError::DuplicateServerName)
        );
        assert!(check_start(&t, &classify(&two)).is_err());
        two = hello(&[sni("evil.example.net\0api.example.com")], 512);
        assert_eq!(classify(&two), Start::Malformed(HelloError::BadServerName));
        // A ServerHello (2) where a ClientHello belongs.
        let mut h = hello(&[sni("api.example.com")], 512);
        h[5] = 0x02;
        assert_eq!(classify(&h), Start::Malformed(HelloError::NotClientHello));
        // A handshake that never ends.
        let mut big = vec![0x16, 3, 1, 0, 4, 0x01, 0x7f, 0xff, 0xff];
        big.resize(200, 0);
        assert_eq!(classify(&big), Start::Malformed(HelloError::TooLong));
        // Lengths that run past the message.
        let mut bad = hello(&[sni("api.example.com")], 512);
        let n = bad.len();
        bad[n - 20] = 0xff;
        assert!(
            matches!(classify(&bad), Start::Malformed(_)),
            "{:?}",
            classify(&bad)
        );
    }

    #[test]
    fn plain_http_and_other_protocols_are_told_apart() {
        assert_eq!(classify(b"GET / HTTP/1.1\r\n"), Start::Http);
        assert_eq!(classify(b"POST"), Start::NeedMore);
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.6\r\n"), Start::Other);
        assert_eq!(classify(b"\x00\x00\x00\x08"), Start::Other);
        assert_eq!(classify(b""), Start::NeedMore);
        let t = target("api.example.com:443");
        assert!(check_start(&t, &Start::Http).is_ok());
        assert!(check_start(&t, &Start::Other).is_ok());
    }

    #[test]
    fn never_panics_on_any_bytes() {
        let h = hello(&[(10, vec![0, 2, 0, 29]), sni("api.example.com")], 30);
        for i in 0..h.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = h.clone();
                m[i] = v;
                let _ = classify(&m);
            }
        }
    }
}
