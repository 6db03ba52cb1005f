//! The proxy's two inputs: its configuration, given once at start on stdin (mode, where to
//! listen, the injections with their values — never in argv or a file), and the live settings
//! file (enforcement and allow-list) that `set-egress`/`set-allow` rewrite and the proxy reads
//! again for each request (A.4).

use std::collections::BTreeMap;
use std::net::IpAddr;

use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::{Enforcement, Injection};
use serde::{Deserialize, Serialize};

use crate::egress::inject::{InjectionError, validate_injections};

/// The live part of a filtered sandbox's network (A.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// Whether a denied request is refused (enforce) or only reported.
    pub enforcement: Enforcement,
    /// The destinations the sandbox may reach (A.3).
    pub allow: Vec<AllowEntry>,
}

/// Why a settings or configuration file cannot be used; the proxy then refuses (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    #[error("the egress settings are not valid: {0}")]
    /// The settings file is not valid JSON of the settings' shape.
    Syntax(String),
    #[error("the egress proxy configuration is not valid: {0}")]
    /// The proxy's configuration is not valid (its text is never quoted: it holds secrets).
    Config(String),
    #[error(transparent)]
    /// An injection of the configuration is not valid.
    Injection(#[from] InjectionError),
}

impl Settings {
    /// Reads a settings file's text.
    pub fn parse(text: &str) -> Result<Self, SettingsError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            SettingsError::Syntax(if path == "." {
                e.inner().to_string()
            } else {
                format!("{path}: {}", e.inner())
            })
        })
    }

    /// The file's text (one JSON object, ending with a newline).
    pub fn render(&self) -> String {
        let mut s = serde_json::to_string(self).expect("settings serialize");
        s.push('\n');
        s
    }

    /// Reads `set-allow` arguments; an invalid entry names itself (exit 65).
    pub fn parse_entries(
        args: &[String],
    ) -> Result<Vec<AllowEntry>, handler_contracts::allow::AllowEntryError> {
        args.iter().map(|a| AllowEntry::parse(a)).collect()
    }
}

/// What the proxy does with requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ProxyMode {
    /// A filtered sandbox: judge every request against the live settings.
    Filter,
    /// An open sandbox with injections: let everything through, report only injections.
    Report,
}

/// The proxy's configuration, read once from stdin at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyConfig {
    /// Whether the proxy filters or only reports injections.
    pub mode: ProxyMode,
    /// Where to listen, e.g. `0.0.0.0:3128` (`127.0.0.1:0` picks a port, printed when ready).
    pub listen: String,
    /// A unix socket to listen on too (the sandbox's forwarder connects there), made when the
    /// proxy is ready: its presence says so.
    #[serde(default)]
    pub listen_unix: Option<String>,
    /// The live settings file (filter mode).
    #[serde(default)]
    pub settings_file: Option<String>,
    /// Where to write the CA bundle (the roots and the proxy's own CA) the sandbox trusts.
    #[serde(default)]
    pub ca_bundle_out: Option<String>,
    /// The roots the proxy trusts towards upstreams (PEM files; the image's Mozilla roots, and a
    /// company CA where one is needed). They also go into the bundle.
    #[serde(default)]
    pub roots_files: Vec<String>,
    #[serde(default)]
    /// The secrets the proxy swaps in for their phantoms, towards their hosts only (E3).
    pub injections: Vec<Injection>,
    /// The host's own addresses (the DNS-rebinding guard refuses names resolving there).
    #[serde(default)]
    pub host_addresses: Vec<IpAddr>,
    /// Fixed name → address answers, consulted before DNS (a hosts file of the proxy's own).
    #[serde(default)]
    pub resolve: BTreeMap<String, IpAddr>,
    /// A machine's proxy: the socket on which each exec gives it its own injections for as
    /// long as the exec's connection stays open (decision 0166).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_socket: Option<String>,
}

impl ProxyConfig {
    /// Reads and checks the configuration: a listen address, injections valid, a settings file
    /// in filter mode.
    pub fn parse(text: &str) -> Result<Self, SettingsError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let c: ProxyConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            // Never echo the input: it holds secret values.
            SettingsError::Config(format!(
                "at {}: {}",
                e.path(),
                redact(&e.inner().to_string())
            ))
        })?;
        if c.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(SettingsError::Config(format!(
                "listen {:?} is not an address:port",
                c.listen
            )));
        }
        if c.mode == ProxyMode::Filter && c.settings_file.is_none() {
            return Err(SettingsError::Config(
                "a filtering proxy needs settingsFile".into(),
            ));
        }
        if c.mode == ProxyMode::Report && c.injections.is_empty() {
            return Err(SettingsError::Config(
                "a reporting proxy without injections has nothing to do".into(),
            ));
        }
        validate_injections(&c.injections)?;
        Ok(c)
    }
}

/// serde's messages quote the offending value; a configuration error must not show a secret.
fn redact(msg: &str) -> String {
    match msg.find(['"', '`']) {
        Some(i) => format!("{}…", &msg[..i]),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip() {
        let s = Settings {
            enforcement: Enforcement::LogOnly,
            allow: vec![
                AllowEntry::parse("a.com:443").unwrap(),
                AllowEntry::parse("*.b.io:80").unwrap(),
            ],
        };
        let text = s.render();
        assert_eq!(
            text,
            "{\"enforcement\":\"log-only\",\"allow\":[\"a.com:443\",\"*.b.io:80\"]}\n"
        );
        assert_eq!(Settings::parse(&text).unwrap(), s);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let e = Settings::parse(r#"{"enforcement":"enforce","allow":["a.com:443","b.com"]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("allow[1]"), "{e}");
        assert!(e.to_string().contains("no port"), "{e}");
        let e = Settings::parse(r#"{"enforcement":"sometimes","allow":[]}"#).unwrap_err();
        assert!(e.to_string().contains("enforcement"), "{e}");
        assert!(Settings::parse("").is_err());
        assert!(Settings::parse(r#"{"enforcement":"enforce"}"#).is_err());
        let e = Settings::parse_entries(&["ok.com:1".into(), "bad".into()]).unwrap_err();
        assert!(e.to_string().contains("\"bad\""));
    }

    #[test]
    fn config_checks_and_never_echoes_secrets() {
        let ok = r#"{"mode":"filter","listen":"0.0.0.0:3128","settingsFile":"/s.json"}"#;
        assert!(ProxyConfig::parse(ok).is_ok());
        let e = ProxyConfig::parse(r#"{"mode":"filter","listen":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("listen"));
        let e = ProxyConfig::parse(r#"{"mode":"filter","listen":"0.0.0.0:1"}"#).unwrap_err();
        assert!(e.to_string().contains("settingsFile"));
        let with_bad_value = r#"{"mode":"report","listen":"0.0.0.0:1","injections":[
            {"name":"n","phantom":"abcdefgh12","value":"TOPSECRETVALUE","hosts":["a.com:443"]}]}"#;
        let e = ProxyConfig::parse(with_bad_value).unwrap_err().to_string();
        assert!(e.contains("as long as"), "{e}");
        assert!(!e.contains("TOPSECRET"));
        let wrong_type = r#"{"mode":"report","listen":"0.0.0.0:1","injections":[
            {"name":"n","phantom":"abcdefgh12","value":12345678901,"hosts":["a.com:443"]}]}"#;
        let e = ProxyConfig::parse(wrong_type).unwrap_err().to_string();
        assert!(!e.contains("12345678901"), "{e}");
    }
}
