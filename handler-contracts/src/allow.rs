//! Allow-list entries (A.3): `host:port`, `*.domain:port`, `a.b.c.d:port`, and how one matches a
//! destination. Pure: used by the validators, the egress proxy and the policy's P3.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// Why a string is not an allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowEntryError {
    #[error(
        "{entry:?} has no port: write it as HOST:PORT (e.g. {entry}:443); a bare host is invalid"
    )]
    /// A bare host: an entry always names its port.
    MissingPort {
        /// The entry as written.
        entry: String,
    },
    /// The port is not a number from 1 to 65535.
    #[error("{entry:?} has an invalid port {port:?}: a port is a number from 1 to 65535")]
    BadPort {
        /// The entry as written.
        entry: String,
        /// The port part, which is not a number from 1 to 65535.
        port: String,
    },
    /// A `*` anywhere but as the whole first label.
    #[error("{entry:?}: a wildcard may only be the whole first label (*.example.com:443)")]
    MisplacedWildcard {
        /// The entry as written.
        entry: String,
    },
    /// The host is not a DNS name or an IPv4 address.
    #[error("{entry:?}: {reason}")]
    BadHost {
        /// The entry as written.
        entry: String,
        /// What is wrong with its host.
        reason: &'static str,
    },
}

/// What an entry names, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AllowTarget {
    /// `example.com:443`: that host exactly (lowercased).
    Exact {
        /// The host, lowercased.
        host: String,
        /// The port.
        port: u16,
    },
    /// `*.example.com:443`: every subdomain of `domain`, not `domain` itself.
    Subdomains {
        /// The domain whose subdomains are allowed (without `*.`).
        domain: String,
        /// The port.
        port: u16,
    },
    /// `192.168.1.20:11434`.
    Ipv4 {
        /// The address.
        addr: Ipv4Addr,
        /// The port.
        port: u16,
    },
}

/// One validated allow-list entry, kept as written (lowercased host).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllowEntry(String);

impl AllowEntry {
    /// Parses and validates an entry.
    pub fn parse(s: &str) -> Result<Self, AllowEntryError> {
        let target = parse_allow_entry(s)?;
        Ok(AllowEntry(target.to_string()))
    }

    /// The entry as text, `host:port`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The parsed target.
    pub fn target(&self) -> AllowTarget {
        parse_allow_entry(&self.0).expect("an AllowEntry is valid by construction")
    }

    /// Whether a request to `host:port` is allowed by this entry.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.target().allows(host, port)
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for AllowTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowTarget::Exact { host, port } => write!(f, "{host}:{port}"),
            AllowTarget::Subdomains { domain, port } => write!(f, "*.{domain}:{port}"),
            AllowTarget::Ipv4 { addr, port } => write!(f, "{addr}:{port}"),
        }
    }
}

impl AllowTarget {
    /// Whether a request to `host:port` is allowed. `host` is compared case-insensitively, a
    /// trailing dot ignored.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self {
            AllowTarget::Exact { host: h, port: p } => *p == port && *h == host,
            AllowTarget::Subdomains { domain, port: p } => {
                *p == port
                    && host.len() > domain.len() + 1
                    && host.ends_with(domain.as_str())
                    && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
            }
            AllowTarget::Ipv4 { addr, port: p } => {
                *p == port && host.parse::<Ipv4Addr>().is_ok_and(|a| a == *addr)
            }
        }
    }

    /// Whether every request `other` allows, this allows too (a machine's allow-list is no
    /// wider than an agent's when each of its entries is covered by one of the agent's).
    pub fn covers(&self, other: &AllowTarget) -> bool {
        match other {
            AllowTarget::Exact { host, port } => self.allows(host, *port),
            AllowTarget::Ipv4 { addr, port } => self.allows(&addr.to_string(), *port),
            AllowTarget::Subdomains {
                domain: d2,
                port: p2,
            } => match self {
                AllowTarget::Subdomains {
                    domain: d1,
                    port: p1,
                } => {
                    p1 == p2
                        && (d1 == d2
                            || (d2.len() > d1.len()
                                && d2.ends_with(d1.as_str())
                                && d2.as_bytes()[d2.len() - d1.len() - 1] == b'.'))
                }
                _ => false,
            },
        }
    }
}

/// Parses `host:port`, `*.domain:port` or `a.b.c.d:port` (A.3).
pub fn parse_allow_entry(s: &str) -> Result<AllowTarget, AllowEntryError> {
    let entry = || s.to_string();
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(AllowEntryError::MissingPort { entry: entry() });
    };
    if host.contains(':') || host.starts_with('[') {
        return Err(AllowEntryError::BadHost {
            entry: entry(),
            reason: "IPv6 addresses are not supported in allow-lists",
        });
    }
    if port.is_empty() {
        return Err(AllowEntryError::MissingPort {
            entry: host.to_string(),
        });
    }
    let port_num = match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => {
            return Err(AllowEntryError::BadPort {
                entry: entry(),
                port: port.to_string(),
            });
        }
    };
    let host = host.to_ascii_lowercase();
    if let Some(domain) = host.strip_prefix("*.") {
        if domain.contains('*') {
            return Err(AllowEntryError::MisplacedWildcard { entry: entry() });
        }
        check_hostname(domain, s)?;
        if !domain.contains('.') {
            return Err(AllowEntryError::BadHost {
                entry: entry(),
                reason: "a wildcard needs a domain of at least two labels (*.example.com)",
            });
        }
        return Ok(AllowTarget::Subdomains {
            domain: domain.to_string(),
            port: port_num,
        });
    }
    if host.contains('*') {
        return Err(AllowEntryError::MisplacedWildcard { entry: entry() });
    }
    if host.is_empty() {
        return Err(AllowEntryError::BadHost {
            entry: entry(),
            reason: "the host is empty",
        });
    }
    if looks_numeric(&host) {
        return match host.parse::<Ipv4Addr>() {
            Ok(addr) => Ok(AllowTarget::Ipv4 {
                addr,
                port: port_num,
            }),
            Err(_) => Err(AllowEntryError::BadHost {
                entry: entry(),
                reason: "not a valid IPv4 address (a.b.c.d)",
            }),
        };
    }
    check_hostname(&host, s)?;
    Ok(AllowTarget::Exact {
        host,
        port: port_num,
    })
}

fn looks_numeric(host: &str) -> bool {
    host.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

fn check_hostname(host: &str, entry: &str) -> Result<(), AllowEntryError> {
    let bad = |reason| {
        Err(AllowEntryError::BadHost {
            entry: entry.to_string(),
            reason,
        })
    };
    if host.is_empty() {
        return bad("the host is empty");
    }
    if host.len() > 253 {
        return bad("the host is longer than 253 characters");
    }
    for label in host.split('.') {
        if label.is_empty() {
            return bad("the host has an empty label");
        }
        if label.len() > 63 {
            return bad("a label of the host is longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return bad("a host may hold only letters, digits, '-' and '_'");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return bad("a label of the host starts or ends with '-'");
        }
    }
    Ok(())
}

/// The allow-list entry a URL needs (A.3): its host and its port, or its scheme's (443 for
/// https/wss, 80 for http/ws) when it has none. `None` for a URL that is not http(s)/ws(s).
pub fn entry_for_url(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let host = &authority[1..end];
        let port = match &authority[end + 1..] {
            "" => default_port,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        return Some((host.to_ascii_lowercase(), port));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (authority, default_port),
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

impl Serialize for AllowEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: Cow<'de, str> = Deserialize::deserialize(d)?;
        AllowEntry::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for AllowEntry {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("AllowEntry")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "An allow-list entry (A.3): host:port, *.domain:port or a.b.c.d:port; the port is always written out.",
            "pattern": r"^(\*\.)?[A-Za-z0-9_.-]+:[0-9]{1,5}$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_covers_what_it_allows_and_no_wider_wildcard() {
        let t = |s: &str| parse_allow_entry(s).unwrap();
        assert!(t("*.example.com:443").covers(&t("api.example.com:443")));
        assert!(t("*.example.com:443").covers(&t("*.eu.example.com:443")));
        assert!(t("*.example.com:443").covers(&t("*.example.com:443")));
        assert!(!t("*.example.com:443").covers(&t("example.com:443")));
        assert!(!t("*.example.com:443").covers(&t("api.example.com:80")));
        assert!(!t("*.eu.example.com:443").covers(&t("*.example.com:443")));
        assert!(!t("*.ample.com:443").covers(&t("*.example.com:443")));
        assert!(!t("api.example.com:443").covers(&t("*.example.com:443")));
        assert!(t("api.example.com:443").covers(&t("API.example.com:443")));
        assert!(t("10.0.0.2:11434").covers(&t("10.0.0.2:11434")));
        assert!(!t("10.0.0.2:11434").covers(&t("10.0.0.3:11434")));
    }

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            parse_allow_entry("Example.com:443").unwrap(),
            AllowTarget::Exact {
                host: "example.com".into(),
                port: 443
            }
        );
        assert_eq!(
            parse_allow_entry("*.example.com:443").unwrap(),
            AllowTarget::Subdomains {
                domain: "example.com".into(),
                port: 443
            }
        );
        assert_eq!(
            parse_allow_entry("192.168.1.20:11434").unwrap(),
            AllowTarget::Ipv4 {
                addr: Ipv4Addr::new(192, 168, 1, 20),
                port: 11434
            }
        );
        assert!(parse_allow_entry("host.containers.internal:3000").is_ok());
    }

    #[test]
    fn refuses_bad_forms_with_a_reason() {
        let cases = [
            ("example.com", "has no port"),
            ("example.com:", "has no port"),
            ("example.com:0", "invalid port"),
            ("example.com:65536", "invalid port"),
            ("example.com:+80", "invalid port"),
            ("example.com:https", "invalid port"),
            ("api.*.example.com:443", "wildcard may only be"),
            ("*example.com:443", "wildcard may only be"),
            ("*.*.example.com:443", "wildcard may only be"),
            ("*.com:443", "at least two labels"),
            ("999.1.1.1:80", "not a valid IPv4"),
            ("exa mple.com:80", "only letters"),
            (":80", "host is empty"),
            ("[::1]:80", "IPv6"),
        ];
        for (entry, want) in cases {
            let err = parse_allow_entry(entry).unwrap_err().to_string();
            assert!(err.contains(want), "{entry}: {err}");
        }
    }

    #[test]
    fn matches_hosts() {
        let sub = AllowEntry::parse("*.example.com:443").unwrap();
        assert!(sub.allows("api.example.com", 443));
        assert!(sub.allows("a.b.example.com", 443));
        assert!(!sub.allows("example.com", 443), "subdomains only");
        assert!(!sub.allows("badexample.com", 443));
        assert!(!sub.allows("api.example.com", 80));
        let exact = AllowEntry::parse("example.com:443").unwrap();
        assert!(exact.allows("EXAMPLE.com.", 443));
        assert!(!exact.allows("api.example.com", 443));
        let ip = AllowEntry::parse("10.0.0.1:80").unwrap();
        assert!(ip.allows("10.0.0.1", 80));
        assert!(!ip.allows("10.0.0.2", 80));
    }

    #[test]
    fn url_entries_use_the_scheme_port() {
        assert_eq!(
            entry_for_url("https://mcp.example.org/x"),
            Some(("mcp.example.org".into(), 443))
        );
        assert_eq!(
            entry_for_url("http://127.0.0.1:3000/v1"),
            Some(("127.0.0.1".into(), 3000))
        );
        assert_eq!(entry_for_url("http://u:p@h.io/"), Some(("h.io".into(), 80)));
        assert_eq!(entry_for_url("ftp://h.io/"), None);
    }
}
