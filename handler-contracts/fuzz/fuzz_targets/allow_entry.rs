//! Fuzz target: allow-list entries (A.3). Oracles: parsing never panics; a parsed entry displays
//! as text that parses back to the same entry (and the same target); an entry allows what its
//! target allows, and an exact entry allows its own host:port; `entry_for_url` never panics.
//!
//! Input: the entry text (UTF-8); also read as a URL.
#![no_main]

use handler_contracts::allow::{AllowEntry, AllowTarget, entry_for_url, parse_allow_entry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = entry_for_url(s);
    match parse_allow_entry(s) {
        Err(e) => {
            let _ = e.to_string();
            assert!(AllowEntry::parse(s).is_err(), "{s:?}");
        }
        Ok(target) => {
            let shown = target.to_string();
            let again = parse_allow_entry(&shown)
                .unwrap_or_else(|e| panic!("{s:?} → {shown:?} does not parse back: {e}"));
            assert_eq!(again, target, "{s:?} → {shown:?}");
            let entry = AllowEntry::parse(s).expect("the target parsed");
            assert_eq!(entry.as_str(), shown);
            assert_eq!(entry.to_string(), shown);
            assert_eq!(AllowEntry::parse(entry.as_str()).as_ref(), Ok(&entry));
            assert_eq!(entry.target(), target);
            let (host, port) = match &target {
                AllowTarget::Exact { host, port } => (host.clone(), *port),
                AllowTarget::Subdomains { domain, port } => (format!("a.{domain}"), *port),
                AllowTarget::Ipv4 { addr, port } => (addr.to_string(), *port),
            };
            assert!(
                entry.allows(&host, port),
                "{shown} does not allow {host}:{port}"
            );
            assert!(
                !entry.allows(&host, port.wrapping_add(1).max(1)) || port == u16::MAX,
                "{shown} allows another port"
            );
            if let AllowTarget::Subdomains { domain, port } = &target {
                assert!(
                    !entry.allows(domain, *port),
                    "{shown} allows its bare domain"
                );
            }
        }
    }
});
