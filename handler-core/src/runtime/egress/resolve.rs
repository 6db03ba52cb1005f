//! Name resolution for the proxy: fixed answers from its configuration, then a pure-Rust DNS
//! resolver (hickory, reading /etc/resolv.conf and /etc/hosts), so a static binary in a
//! `FROM scratch` image resolves without glibc's NSS.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hickory_resolver::TokioResolver;
use tokio::sync::OnceCell;

/// Why a name has no address.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The system's resolver configuration could not be read (kept: every look-up says it).
    #[error("no DNS resolver: {0}")]
    NoResolver(String),
    /// The look-up failed.
    #[error("cannot resolve {host}: {reason}")]
    Lookup {
        /// The name looked up.
        host: String,
        /// The resolver's words.
        reason: String,
    },
}

/// Resolves names to addresses.
#[derive(Debug)]
pub struct Resolver {
    fixed: BTreeMap<String, IpAddr>,
    dns: OnceCell<Result<TokioResolver, ResolveError>>,
}

impl Resolver {
    /// A resolver with fixed answers consulted first.
    pub fn new(fixed: BTreeMap<String, IpAddr>) -> Self {
        let fixed = fixed
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        Resolver {
            fixed,
            dns: OnceCell::new(),
        }
    }

    /// Every address of `host` (an IP literal is its own).
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        if let Some(ip) = self.fixed.get(&host.to_ascii_lowercase()) {
            return Ok(vec![*ip]);
        }
        let dns = self
            .dns
            .get_or_init(|| async {
                TokioResolver::builder_tokio()
                    .and_then(hickory_resolver::ResolverBuilder::build)
                    .map_err(|e| ResolveError::NoResolver(e.to_string()))
            })
            .await;
        let dns = dns.as_ref().map_err(Clone::clone)?;
        let fqdn = if host.ends_with('.') {
            host.to_string()
        } else {
            format!("{host}.")
        };
        let ips = dns
            .lookup_ip(fqdn.as_str())
            .await
            .map_err(|e| ResolveError::Lookup {
                host: host.to_string(),
                reason: e.to_string(),
            })?;
        Ok(ips.iter().collect())
    }
}
