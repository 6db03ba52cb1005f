//! Where a request goes: parsing an authority (`host[:port]`), and the agreement rules that bind
//! a secret to the host actually dialed (egress-lessons): a tunnel's CONNECT target, its TLS SNI
//! and its requests' Host must name the same host:port; a plain http:// request's Host must
//! equal its URI's authority (anti-fronting).

use std::fmt;
use std::net::IpAddr;

/// A destination: lowercase host without a trailing dot (IPv6 without brackets), and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    /// The host: a lowercase name without a trailing dot, or an IP address (IPv6 without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

/// Why an authority cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error("{0:?} is not a host:port")]
    /// The text is not a host:port.
    Malformed(String),
    #[error("{0:?} has no port")]
    /// The text has no port (and none can be implied).
    NoPort(String),
}

/// Two names of one request that disagree; the request is refused (403) and reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Mismatch {
    #[error("the tunnel was opened to {connect} but its TLS names {sni}")]
    /// The TLS server name differs from the CONNECT target.
    Sni {
        /// The CONNECT target.
        connect: String,
        /// The server name the ClientHello asks for.
        sni: String,
    },
    #[error("the tunnel was opened to {connect} but its TLS names no server")]
    /// The TLS ClientHello names no server.
    NoSni {
        /// The CONNECT target.
        connect: String,
    },
    #[error("the tunnel was opened to {connect} but its TLS start cannot be read: {reason}")]
    /// The tunnel's first bytes claim TLS but are no readable ClientHello.
    BadHello {
        /// The CONNECT target.
        connect: String,
        /// Why the ClientHello cannot be read.
        reason: String,
    },
    #[error("the tunnel was opened to {connect} but the request's Host is {host}")]
    /// The inner request's Host differs from the CONNECT target.
    Host {
        /// The CONNECT target.
        connect: String,
        /// The request's Host header.
        host: String,
    },
    #[error("the request has no Host header")]
    /// The request has no Host header.
    NoHost,
    #[error("the request is for {uri} but its Host is {host}")]
    /// A plain http request whose Host differs from its URI's authority (domain fronting).
    Fronting {
        /// The request URI's authority.
        uri: String,
        /// The request's Host header.
        host: String,
    },
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::egress::judge::event_host(&self.host, self.port))
    }
}

impl Authority {
    /// Parses `host:port`, `[v6]:port`, or `host` alone when `default_port` is given.
    pub fn parse(s: &str, default_port: Option<u16>) -> Result<Self, AuthorityError> {
        let bad = || AuthorityError::Malformed(s.to_string());
        if s.is_empty() || s.contains(['/', '@', ' ', '?', '#']) {
            return Err(bad());
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(bad)?;
            h.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or_else(bad)?)),
            }
        } else {
            match s.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => return Err(bad()),
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            }
        };
        let port = match port {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?
            }
            Some(_) => return Err(bad()),
            None => default_port.ok_or_else(|| AuthorityError::NoPort(s.to_string()))?,
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Authority { host, port })
    }

    /// Whether the host is an IP address literal.
    pub fn is_ip(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok()
    }
}

fn same_host(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// The TLS server name of a tunnel must name its CONNECT target. A client sends no SNI for an
/// IP address, so none is accepted only when the target is one.
pub fn check_sni(connect: &Authority, sni: Option<&str>) -> Result<(), Mismatch> {
    match sni {
        Some(sni) if same_host(sni, &connect.host) => Ok(()),
        Some(sni) => Err(Mismatch::Sni {
            connect: connect.to_string(),
            sni: sni.to_string(),
        }),
        None if connect.is_ip() => Ok(()),
        None => Err(Mismatch::NoSni {
            connect: connect.to_string(),
        }),
    }
}

/// A request inside a decrypted tunnel must name the tunnel's target in its Host (the port
/// written out unless it is 443) and, in absolute form, in its URI.
pub fn check_tunnel_request(
    connect: &Authority,
    host_header: Option<&str>,
    uri_authority: Option<&str>,
) -> Result<(), Mismatch> {
    let host = host_header.ok_or(Mismatch::NoHost)?;
    let named = |s: &str| Authority::parse(s, Some(443)).ok();
    for h in [Some(host), uri_authority].into_iter().flatten() {
        if named(h).as_ref() != Some(connect) {
            return Err(Mismatch::Host {
                connect: connect.to_string(),
                host: h.to_string(),
            });
        }
    }
    Ok(())
}

/// Anti-fronting for plain http://: the Host header must name the URI's authority (port 80
/// when not written).
pub fn check_forward(uri: &Authority, host_header: Option<&str>) -> Result<(), Mismatch> {
    let host = host_header.ok_or(Mismatch::NoHost)?;
    match Authority::parse(host, Some(80)) {
        Ok(h) if h == *uri => Ok(()),
        _ => Err(Mismatch::Fronting {
            uri: uri.to_string(),
            host: host.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a(s: &str) -> Authority {
        Authority::parse(s, None).unwrap()
    }

    #[test]
    fn parses_authorities() {
        assert_eq!(
            a("API.x.com.:443"),
            Authority {
                host: "api.x.com".into(),
                port: 443
            }
        );
        assert_eq!(
            a("[::1]:8080"),
            Authority {
                host: "::1".into(),
                port: 8080
            }
        );
        assert_eq!(Authority::parse("x.com", Some(80)).unwrap().port, 80);
        assert!(matches!(
            Authority::parse("x.com", None),
            Err(AuthorityError::NoPort(_))
        ));
        for bad in [
            "",
            "x.com:",
            "x.com:0",
            "x.com:99999",
            "x.com:+1",
            "u@x.com:1",
            "::1:80",
            "[zz]:1",
            ":80",
        ] {
            assert!(Authority::parse(bad, Some(80)).is_err(), "{bad}");
        }
        assert_eq!(a("[::1]:8080").to_string(), "[::1]:8080");
    }

    #[test]
    fn sni_must_name_the_connect_target() {
        let t = a("api.x.com:443");
        assert!(check_sni(&t, Some("API.x.com")).is_ok());
        assert!(matches!(
            check_sni(&t, Some("evil.com")),
            Err(Mismatch::Sni { .. })
        ));
        assert!(matches!(check_sni(&t, None), Err(Mismatch::NoSni { .. })));
        assert!(
            check_sni(&a("10.0.0.1:443"), None).is_ok(),
            "no SNI for an address"
        );
    }

    #[test]
    fn host_inside_a_tunnel_must_name_the_target() {
        let t = a("api.x.com:443");
        assert!(check_tunnel_request(&t, Some("api.x.com"), None).is_ok());
        assert!(check_tunnel_request(&t, Some("api.x.com:443"), Some("api.x.com")).is_ok());
        assert!(matches!(
            check_tunnel_request(&t, Some("evil.com"), None),
            Err(Mismatch::Host { .. })
        ));
        assert!(check_tunnel_request(&t, Some("api.x.com:8443"), None).is_err());
        assert!(check_tunnel_request(&t, Some("api.x.com"), Some("evil.com")).is_err());
        assert_eq!(check_tunnel_request(&t, None, None), Err(Mismatch::NoHost));
        let p = a("api.x.com:8443");
        assert!(
            check_tunnel_request(&p, Some("api.x.com"), None).is_err(),
            "443 implied"
        );
        assert!(check_tunnel_request(&p, Some("api.x.com:8443"), None).is_ok());
    }

    #[test]
    fn plain_http_host_must_equal_the_uri() {
        let u = a("x.com:80");
        assert!(check_forward(&u, Some("x.com")).is_ok());
        assert!(check_forward(&u, Some("X.com:80")).is_ok());
        assert!(matches!(
            check_forward(&u, Some("evil.com")),
            Err(Mismatch::Fronting { .. })
        ));
        assert!(check_forward(&a("x.com:8080"), Some("x.com")).is_err());
        assert_eq!(check_forward(&u, None), Err(Mismatch::NoHost));
    }

    proptest! {
        #[test]
        fn a_tunnel_agrees_only_with_its_own_names(
            h1 in "[a-z]{1,8}\\.[a-z]{2,4}", h2 in "[a-z]{1,8}\\.[a-z]{2,4}", port in 1u16..,
        ) {
            let t = Authority { host: h1.clone(), port };
            prop_assert!(check_sni(&t, Some(&h1.to_uppercase())).is_ok());
            prop_assert_eq!(check_sni(&t, Some(&h2)).is_ok(), h1 == h2);
            let host = format!("{h2}:{port}");
            prop_assert_eq!(check_tunnel_request(&t, Some(&host), None).is_ok(), h1 == h2);
            prop_assert_eq!(check_forward(&t, Some(&host)).is_ok(), h1 == h2);
        }
    }
}
