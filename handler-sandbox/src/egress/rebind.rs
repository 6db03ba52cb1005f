//! The DNS-rebinding guard (egress-lessons): an allowed name that resolves to loopback,
//! link-local (169.254.0.0/16: cloud metadata), an unspecified address or one of the host's own
//! addresses is refused, unless the allow-list names that address itself. The proxy resolves once
//! per connection and dials the address judged here. An IP literal naming such an address
//! (`CONNECT 10.0.2.2:PORT`, the host's loopback through slirp4netns) is refused the same way
//! unless an entry names exactly that address:port — in log-only too (decision 0035).
//!
//! `host.containers.internal` (and `host.docker.internal`) name the host on purpose: a sandbox
//! reaches a service on the host that way (A.3). An entry naming one of them exactly (not a
//! wildcard) is the person's consent to reach the host, so the host's addresses are accepted for
//! that name; loopback and link-local still are not (see docs/decisions).

use std::net::IpAddr;

use handler_contracts::allow::AllowEntry;

/// The address slirp4netns gives the host's loopback (`allow_host_loopback=true`, decision
/// 0024): always one of the host's own addresses for the proxy.
pub const SLIRP_HOST_LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 2, 2));

/// The names that stand for the container's host.
pub const HOST_ALIASES: [&str; 2] = ["host.containers.internal", "host.docker.internal"];

/// Why no resolved address may be dialed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rebinding {
    #[error("{host} resolves to no address")]
    /// The name resolves to no address at all.
    NoAddress {
        /// The name that was resolved.
        host: String,
    },
    #[error(
        "{host} resolves to {addr}, a loopback, link-local or host address the allow-list does not name"
    )]
    /// The name resolves to a loopback, link-local or host address the allow-list does not name.
    Guarded {
        /// The name that was resolved.
        host: String,
        /// The guarded address it resolves to.
        addr: IpAddr,
    },
}

/// Whether an address is one a name must not lead to unless listed.
pub fn is_sensitive(addr: IpAddr, host_addresses: &[IpAddr]) -> bool {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    let local = match addr {
        IpAddr::V4(a) => {
            a.is_loopback() || a.is_link_local() || a.is_unspecified() || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    local || host_addresses.contains(&addr)
}

/// An IP literal `host` (brackets allowed) that is a loopback, link-local, unspecified or host
/// address is refused unless an entry names exactly `host:port` (whatever the enforcement: in
/// log-only it is not let through as unlisted). Names pass (their addresses are judged by
/// [`pick_address`]).
pub fn check_literal(
    host: &str,
    port: u16,
    allow: &[AllowEntry],
    host_addresses: &[IpAddr],
) -> Result<(), Rebinding> {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    let h = h.trim_start_matches('[').trim_end_matches(']');
    let Ok(ip) = h.parse::<IpAddr>() else {
        return Ok(());
    };
    if !is_sensitive(ip, host_addresses) || allow.iter().any(|e| e.allows(h, port)) {
        return Ok(());
    }
    Err(Rebinding::Guarded {
        host: h.to_string(),
        addr: ip,
    })
}

/// Picks the address to dial for `host:port` among those it resolved to, in order. An IP
/// literal is its own address, guarded by [`check_literal`].
pub fn pick_address(
    host: &str,
    port: u16,
    resolved: &[IpAddr],
    allow: &[AllowEntry],
    host_addresses: &[IpAddr],
) -> Result<IpAddr, Rebinding> {
    let host_lc = host.trim_end_matches('.').to_ascii_lowercase();
    if let Ok(ip) = host_lc.parse::<IpAddr>() {
        check_literal(&host_lc, port, allow, host_addresses)?;
        return Ok(ip);
    }
    let named_host_alias = HOST_ALIASES.contains(&host_lc.as_str())
        && allow
            .iter()
            .any(|e| e.as_str() == format!("{host_lc}:{port}"));
    let mut refused = None;
    for &addr in resolved {
        if !is_sensitive(addr, host_addresses) {
            return Ok(addr);
        }
        let listed = allow.iter().any(|e| e.allows(&addr.to_string(), port));
        let host_own = host_addresses.contains(&addr) && !is_sensitive(addr, &[]);
        if listed || (named_host_alias && host_own) {
            return Ok(addr);
        }
        refused.get_or_insert(addr);
    }
    Err(match refused {
        Some(addr) => Rebinding::Guarded {
            host: host_lc,
            addr,
        },
        None => Rebinding::NoAddress { host: host_lc },
    })
}

/// The addresses a hosts file gives the host aliases (podman writes host.containers.internal
/// there): the proxy counts them among the host's own addresses.
pub fn host_alias_addresses(hosts_file: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for line in hosts_file.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(Ok(addr)) = words.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        if words.any(|w| HOST_ALIASES.iter().any(|a| a.eq_ignore_ascii_case(w)))
            && !out.contains(&addr)
        {
            out.push(addr);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(e: &[&str]) -> Vec<AllowEntry> {
        e.iter().map(|x| AllowEntry::parse(x).unwrap()).collect()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_public_address_is_dialed() {
        let l = list(&["api.x.com:443"]);
        assert_eq!(
            pick_address("api.x.com", 443, &[ip("93.184.216.34")], &l, &[]),
            Ok(ip("93.184.216.34"))
        );
    }

    #[test]
    fn loopback_link_local_and_host_addresses_are_refused_for_a_name() {
        let l = list(&["api.x.com:443"]);
        let host = [ip("192.168.1.5")];
        for bad in [
            "127.0.0.1",
            "127.8.9.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "192.168.1.5",
        ] {
            let r = pick_address("api.x.com", 443, &[ip(bad)], &l, &host);
            assert!(matches!(r, Err(Rebinding::Guarded { .. })), "{bad}: {r:?}");
        }
        // A good address after a bad one is used instead.
        assert_eq!(
            pick_address("api.x.com", 443, &[ip("127.0.0.1"), ip("1.2.3.4")], &l, &[]),
            Ok(ip("1.2.3.4"))
        );
        assert_eq!(
            pick_address("x.com", 443, &[], &l, &[]),
            Err(Rebinding::NoAddress {
                host: "x.com".into()
            })
        );
    }

    #[test]
    fn unless_the_allow_list_names_the_address() {
        let l = list(&["model.lan:11434", "127.0.0.1:11434"]);
        assert_eq!(
            pick_address("model.lan", 11434, &[ip("127.0.0.1")], &l, &[]),
            Ok(ip("127.0.0.1"))
        );
        assert!(
            pick_address("model.lan", 8080, &[ip("127.0.0.1")], &l, &[]).is_err(),
            "its port only"
        );
    }

    #[test]
    fn the_host_alias_listed_by_name_reaches_the_host() {
        let host = [ip("10.88.0.1"), ip("192.168.1.5")];
        let l = list(&["host.containers.internal:3000"]);
        assert_eq!(
            pick_address(
                "host.containers.internal",
                3000,
                &[ip("192.168.1.5")],
                &l,
                &host
            ),
            Ok(ip("192.168.1.5"))
        );
        // Not through a wildcard, not on another port, never loopback or metadata.
        let w = list(&["*.containers.internal:3000"]);
        assert!(
            pick_address(
                "host.containers.internal",
                3000,
                &[ip("192.168.1.5")],
                &w,
                &host
            )
            .is_err()
        );
        assert!(
            pick_address(
                "host.containers.internal",
                3001,
                &[ip("192.168.1.5")],
                &l,
                &host
            )
            .is_err()
        );
        assert!(
            pick_address(
                "host.containers.internal",
                3000,
                &[ip("169.254.169.254")],
                &l,
                &host
            )
            .is_err()
        );
        // Another name resolving to the host is refused.
        let o = list(&["evil.com:3000"]);
        assert!(pick_address("evil.com", 3000, &[ip("192.168.1.5")], &o, &host).is_err());
    }

    #[test]
    fn reads_the_host_aliases_of_a_hosts_file() {
        let f = "127.0.0.1 localhost\n# 1.1.1.1 host.containers.internal\n192.168.1.5\thost.containers.internal host.docker.internal\n10.0.0.9 other\n";
        assert_eq!(host_alias_addresses(f), vec![ip("192.168.1.5")]);
    }

    #[test]
    fn an_ip_literal_listed_exactly_is_dialed() {
        assert_eq!(
            pick_address("127.0.0.1", 80, &[], &list(&["127.0.0.1:80"]), &[]),
            Ok(ip("127.0.0.1"))
        );
        assert_eq!(
            pick_address("93.184.216.34", 443, &[], &[], &[]),
            Ok(ip("93.184.216.34")),
            "a public address is the allow-list's (or log-only's) to judge"
        );
    }

    #[test]
    fn a_sensitive_ip_literal_is_refused_unless_listed_exactly() {
        let host = [SLIRP_HOST_LOOPBACK, ip("192.168.1.5")];
        let l = list(&["host.containers.internal:8080", "10.0.2.2:3000"]);
        for (h, port) in [
            ("10.0.2.2", 8080),
            ("10.0.2.2", 3001),
            ("169.254.169.254", 80),
            ("127.0.0.1", 8080),
            ("127.1.2.3", 3000),
            ("0.0.0.0", 80),
            ("192.168.1.5", 22),
            ("::1", 8080),
            ("[::1]", 8080),
            ("::ffff:127.0.0.1", 80),
            ("fe80::1", 80),
        ] {
            assert!(
                matches!(
                    check_literal(h, port, &l, &host),
                    Err(Rebinding::Guarded { .. })
                ),
                "{h}:{port}"
            );
            assert!(pick_address(h, port, &[], &l, &host).is_err(), "{h}:{port}");
        }
        assert_eq!(check_literal("10.0.2.2", 3000, &l, &host), Ok(()));
        assert_eq!(
            check_literal("host.containers.internal", 8080, &l, &host),
            Ok(())
        );
        assert_eq!(check_literal("8.8.8.8", 53, &[], &host), Ok(()));
    }
}
