//! The proxy's own certificate authority (A.3, trust): made when the proxy starts, its key never
//! leaving the process; leaf certificates minted per host for the tunnels it decrypts (only the
//! injections' hosts), cached; the TLS configurations both ways.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the proxy's CA: {0}")]
    /// The proxy's own CA cannot be made.
    Ca(String),
    #[error("cannot mint a certificate for {host}: {reason}")]
    /// No leaf certificate can be made for a host.
    Leaf {
        /// The host the leaf was for.
        host: String,
        /// Why, in rcgen's or rustls's words.
        reason: String,
    },
    #[error("cannot read the roots in {path}: {reason}")]
    /// A roots file cannot be read.
    Roots {
        /// The roots file.
        path: String,
        /// Why it cannot be read.
        reason: String,
    },
}

/// The proxy's CA and its cache of per-host server configurations.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: String,
    cache: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A new CA with a fresh key.
    pub fn new() -> Result<Self, TlsError> {
        let err = |e: rcgen::Error| TlsError::Ca(e.to_string());
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Handler sandbox egress proxy CA");
        dn.push(DnType::OrganizationName, "Handler");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(err)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(err)?;
        let pem = issuer.pem();
        Ok(Ca {
            issuer,
            pem,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate (PEM): public, for the sandbox's bundle.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server configuration presenting a certificate for `host` (a name or an IP address),
    /// minted once and cached. Only http/1.1 is offered.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        if let Some(c) = self.cache.lock().expect("ca cache").get(host) {
            return Ok(c.clone());
        }
        let leaf_err = |e: String| TlsError::Leaf {
            host: host.to_string(),
            reason: e,
        };
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| leaf_err(e.to_string()))?;
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.try_into()
                    .map_err(|e: rcgen::Error| leaf_err(e.to_string()))?,
            ),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(|e| leaf_err(e.to_string()))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| leaf_err(e.to_string()))?;
        let chain = vec![cert.der().clone()];
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| leaf_err(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| leaf_err(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.cache
            .lock()
            .expect("ca cache")
            .insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// The crypto provider (ring), explicit so no process-wide default is needed.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads PEM root certificates; the default is the system bundle.
pub fn load_roots(files: &[String]) -> Result<(RootCertStore, String), TlsError> {
    let defaults = ["/etc/ssl/certs/ca-certificates.crt".to_string()];
    let files = if files.is_empty() {
        &defaults[..]
    } else {
        files
    };
    let mut store = RootCertStore::empty();
    let mut pem = String::new();
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e)
                if files.as_ptr() == defaults.as_ptr()
                    && e.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(e) => {
                return Err(TlsError::Roots {
                    path: path.clone(),
                    reason: e.to_string(),
                });
            }
        };
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut text.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Roots {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        store.add_parsable_certificates(certs);
        pem.push_str(text.trim_end());
        pem.push('\n');
    }
    Ok((store, pem))
}

/// The client configuration towards upstreams: these roots, http/1.1.
pub fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, TlsError> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Ca(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}
