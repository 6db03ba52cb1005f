//! The hosts an agent's model requires (E4): its account's login hosts, its provider's
//! endpoint, the machine's loopback named as the container host sees it.

use crate::allow::{AllowEntry, entry_for_url};
use crate::control::{ModelAccess, RequiredHost};
use crate::validate::{AccessCatalog, check_model_access};

/// The name a container reaches the machine's loopback by.
pub const CONTAINER_HOST: &str = "host.containers.internal";

/// The host a container reaches for a host URL (E4: the machine's loopback is the container
/// host's name in a container).
pub fn container_host(host: &str) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h == "localhost" || h == "::1" || h.starts_with("127.") {
        CONTAINER_HOST.to_string()
    } else {
        host.to_string()
    }
}

/// E4: the hosts a model's account or provider requires, each with what requires it.
pub fn required_hosts(catalog: &dyn AccessCatalog, m: &ModelAccess) -> Vec<RequiredHost> {
    let mut out = Vec::new();
    if let Some(a) = &m.account
        && let Some(Ok(acc)) = catalog.account(a)
        && let Some(login) = catalog
            .descriptor(&acc.harness)
            .and_then(|d| d.login.as_ref())
    {
        for h in &login.hosts {
            out.push(RequiredHost {
                host: h.clone(),
                by: format!("account {a}"),
            });
        }
    }
    if let Some(p) = &m.provider
        && let Ok(r) = check_model_access(m, catalog)
        && let (Some(proto), Some(Ok(prov))) = (r.protocol, catalog.provider(p))
        && let Some(url) = prov.endpoints.get(&proto)
        && let Some((host, port)) = entry_for_url(url)
        && let Ok(e) = AllowEntry::parse(&format!("{}:{port}", container_host(&host)))
    {
        out.push(RequiredHost {
            host: e,
            by: format!("provider {p}"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_the_container_host() {
        for h in ["localhost", "127.0.0.1", "127.1.2.3", "[::1]", "::1"] {
            assert_eq!(container_host(h), CONTAINER_HOST, "{h}");
        }
        for h in [
            "api.example.com",
            "10.0.0.1",
            "[fe80::1]",
            "localhost.example",
        ] {
            assert_eq!(container_host(h), h);
        }
    }
}
