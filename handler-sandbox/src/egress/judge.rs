//! Judging a destination `host:port` against the allow-list and the enforcement in force (A.3,
//! A.4), and the words a refusal says (egress-lessons: say why in the 403).

use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::{EgressDecision, Enforcement};

/// The header carrying the proxy's refusal for programs (`denied`, `leak`, `mismatch`).
pub const EGRESS_HEADER: &str = "x-handler-egress";

/// What the allow-list says about one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An entry allows it.
    Allowed,
    /// No entry allows it and the list is enforced.
    Denied,
    /// No entry allows it, let through because the list is only logged (log-only).
    Unlisted,
}

impl Verdict {
    /// Whether the request goes on.
    pub fn passes(self) -> bool {
        !matches!(self, Verdict::Denied)
    }

    /// The egress event's decision.
    pub fn decision(self) -> EgressDecision {
        match self {
            Verdict::Allowed => EgressDecision::Allowed,
            Verdict::Denied => EgressDecision::Denied,
            Verdict::Unlisted => EgressDecision::Unlisted,
        }
    }
}

/// Judges `host:port` (A.3): allowed when an entry allows it; otherwise denied when enforced,
/// unlisted in log-only.
pub fn judge(allow: &[AllowEntry], enforcement: Enforcement, host: &str, port: u16) -> Verdict {
    if allow.iter().any(|e| e.allows(host, port)) {
        Verdict::Allowed
    } else {
        match enforcement {
            Enforcement::Enforce => Verdict::Denied,
            Enforcement::LogOnly => Verdict::Unlisted,
        }
    }
}

/// `host:port` as an event names it: as the entry that would allow it (lowercase, no trailing
/// dot, IPv6 in brackets).
pub fn event_host(host: &str, port: u16) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The body of the 403 for a destination no entry allows.
pub fn denied_body(host_port: &str) -> String {
    format!(
        "handler egress filter: {host_port} is not on this sandbox's allow-list, so the request \
         was refused. This is a policy decision, not a network failure: do not try to go around \
         the proxy. The person running this agent can allow it by adding {host_port} to the \
         agent's network allow-list.\n"
    )
}

/// The body of the 403 for a name that resolves to an address it must not reach.
pub fn rebinding_body(host_port: &str, addr: &str) -> String {
    format!(
        "handler egress filter: {host_port} resolves to {addr}, a loopback, link-local or host \
         address that this sandbox's allow-list does not name, so the request was refused. The \
         person running this agent can allow it by adding {addr}:{port} to the allow-list.\n",
        port = host_port.rsplit_once(':').map_or("PORT", |(_, p)| p)
    )
}

/// The body of the 403 for an IP address literal that is loopback, link-local or the host's own
/// and that no entry names exactly (log-only included).
pub fn literal_body(host_port: &str) -> String {
    format!(
        "handler egress filter: {host_port} is a loopback, link-local or host address, which a \
         sandbox reaches only when its allow-list names {host_port} exactly (also in log-only), \
         so the request was refused. The person running this agent can allow it by adding \
         {host_port} to the allow-list.\n"
    )
}

/// The body of the 403 for a request carrying a secret's phantom to a host it is not for.
pub fn leak_body(host_port: &str, secret: &str) -> String {
    format!(
        "handler egress filter: this request to {host_port} carries the stand-in of the secret \
         {secret}, which is only given to its own hosts, so the request was refused.\n"
    )
}

/// Whether a plain http:// request to `host` may carry a secret's value (decision 0036): only
/// to the machine itself (`host.containers.internal`, `host.docker.internal`), a hop that never
/// leaves this machine — a model server on the host's loopback, such as E.4's llama.cpp, with a
/// key. Every other host gets values over TLS only.
pub fn cleartext_stays_on_this_machine(host: &str) -> bool {
    super::rebind::HOST_ALIASES
        .iter()
        .any(|a| host.trim_end_matches('.').eq_ignore_ascii_case(a))
}

/// The body of the 403 for a plain http:// request that would carry a secret's value.
pub fn cleartext_body(host_port: &str, secret: &str) -> String {
    format!(
        "handler egress filter: this request to {host_port} carries the stand-in of the secret \
         {secret} over plain http://, where its value would travel unencrypted, so the request \
         was refused. Use https:// for this host.\n"
    )
}

/// The body of the 502 for an answer from an injection's host that came encoded although the
/// proxy asked for it uncompressed (a secret's value in it could not be replaced).
pub fn encoded_body(host_port: &str, what: &str) -> String {
    format!(
        "handler egress filter: the answer from {host_port} came with {what} although it was \
         asked uncompressed, so a secret's value in it could not be replaced by its stand-in; \
         the answer was refused.\n"
    )
}

/// The body of the 403 for a request whose destinations disagree (CONNECT, SNI, Host, URI).
pub fn mismatch_body(detail: &str) -> String {
    format!(
        "handler egress filter: {detail}; the host a request names must be the host it is sent \
         to, so the request was refused.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_go_in_cleartext_only_to_this_machine() {
        for h in [
            "host.containers.internal",
            "HOST.docker.internal",
            "host.containers.internal.",
        ] {
            assert!(cleartext_stays_on_this_machine(h), "{h}");
        }
        for h in [
            "api.openai.com",
            "192.168.1.20",
            "host.containers.internal.evil.example",
            "xhost.containers.internal",
            "10.0.2.2",
        ] {
            assert!(!cleartext_stays_on_this_machine(h), "{h}");
        }
    }

    fn list(entries: &[&str]) -> Vec<AllowEntry> {
        entries
            .iter()
            .map(|e| AllowEntry::parse(e).unwrap())
            .collect()
    }

    #[test]
    fn enforce_denies_what_no_entry_allows() {
        let l = list(&["api.example.com:443", "*.svc.io:443", "10.1.2.3:8080"]);
        let e = Enforcement::Enforce;
        assert_eq!(judge(&l, e, "api.example.com", 443), Verdict::Allowed);
        assert_eq!(judge(&l, e, "API.Example.com.", 443), Verdict::Allowed);
        assert_eq!(
            judge(&l, e, "api.example.com", 80),
            Verdict::Denied,
            "the port is part of it"
        );
        assert_eq!(judge(&l, e, "x.svc.io", 443), Verdict::Allowed);
        assert_eq!(
            judge(&l, e, "svc.io", 443),
            Verdict::Denied,
            "subdomains only"
        );
        assert_eq!(judge(&l, e, "10.1.2.3", 8080), Verdict::Allowed);
        assert_eq!(judge(&l, e, "10.1.2.4", 8080), Verdict::Denied);
        assert_eq!(judge(&[], e, "anything.com", 443), Verdict::Denied);
    }

    #[test]
    fn log_only_lets_unlisted_through_and_says_so() {
        let l = list(&["api.example.com:443"]);
        let e = Enforcement::LogOnly;
        assert_eq!(judge(&l, e, "api.example.com", 443), Verdict::Allowed);
        let v = judge(&l, e, "other.com", 443);
        assert_eq!(v, Verdict::Unlisted);
        assert!(v.passes());
        assert_eq!(v.decision(), EgressDecision::Unlisted);
        assert!(!Verdict::Denied.passes());
    }

    #[test]
    fn the_refusal_says_why_and_what_to_do() {
        let b = denied_body("evil.com:443");
        assert!(b.contains("evil.com:443"));
        assert!(b.contains("not on this sandbox's allow-list"));
        assert!(b.contains("can allow it"));
        assert_eq!(event_host("Evil.COM.", 443), "evil.com:443");
        assert_eq!(event_host("::1", 80), "[::1]:80");
    }

    proptest! {
        #[test]
        fn an_exact_entry_allows_only_its_host_and_port(
            host in "[a-z][a-z0-9]{0,10}(\\.[a-z][a-z0-9]{0,10}){1,3}",
            other in "[a-z][a-z0-9]{0,10}(\\.[a-z][a-z0-9]{0,10}){1,3}",
            port in 1u16.., other_port in 1u16..,
        ) {
            let l = list(&[&format!("{host}:{port}")]);
            prop_assert_eq!(judge(&l, Enforcement::Enforce, &host, port), Verdict::Allowed);
            prop_assert_eq!(judge(&l, Enforcement::Enforce, &host.to_uppercase(), port), Verdict::Allowed);
            if other != host {
                prop_assert_eq!(judge(&l, Enforcement::Enforce, &other, port), Verdict::Denied);
            }
            if other_port != port {
                prop_assert_eq!(judge(&l, Enforcement::Enforce, &host, other_port), Verdict::Denied);
                prop_assert_eq!(judge(&l, Enforcement::LogOnly, &host, other_port), Verdict::Unlisted);
            }
            let sub = list(&[&format!("*.{host}:{port}")]);
            prop_assert_eq!(judge(&sub, Enforcement::Enforce, &format!("a.{host}"), port), Verdict::Allowed);
            prop_assert_eq!(judge(&sub, Enforcement::Enforce, &host, port), Verdict::Denied);
            prop_assert_eq!(judge(&sub, Enforcement::Enforce, &format!("a{host}"), port), Verdict::Denied);
        }
    }
}
