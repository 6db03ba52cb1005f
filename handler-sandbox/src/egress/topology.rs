//! The filtered topology (A.3) as a pure plan: the sandbox on a per-instance internal network
//! (`podman network create --internal --disable-dns`: no route out, and no DNS server that would
//! forward lookups to the host's resolvers, decision 0023), its proxy container on that network
//! at a fixed address (the sandbox finds it through `--add-host`) and on a second one with egress, the proxy variables (and with injections the CA bundle and its
//! variables) in the sandbox's environment, the proxy's configuration and first settings. An
//! `open` sandbox with injections gets a reporting proxy beside its direct route.

use std::collections::BTreeMap;

use handler_contracts::sandbox::{
    CA_BUNDLE_PATH, CA_ENV_VARS, NetworkPolicy, PROXY_ENV_VARS, SandboxSpec,
};

use crate::egress::config::{ProxyConfig, ProxyMode, Settings};

/// The network filter image `image build-proxy` builds.
pub const PROXY_IMAGE: &str = "localhost/handler-network-filter:latest";
/// The port the proxy listens on in its container.
pub const PROXY_PORT: u16 = 3128;
/// Where the proxy finds its settings folder (the instance's `egress/`, read-only).
pub const PROXY_SETTINGS_DIR: &str = "/run/handler-egress";
/// Where the proxy writes the CA bundle (the instance's `egress-ca/`).
pub const PROXY_CA_DIR: &str = "/run/handler-ca";
/// The roots in the network filter image (Mozilla's, from the build host).
pub const PROXY_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How many /24 subnets the launcher may try for an internal network (see [`internal_subnet`]).
pub const SUBNET_CANDIDATES: u32 = 1024;

/// The `i`-th candidate subnet of an internal network (modulo [`SUBNET_CANDIDATES`]), in
/// 10.208.0.0/14 (away from podman's own 10.88/10.89 defaults), and the proxy's address in it.
/// The launcher picks the first one podman does not refuse as in use.
pub fn internal_subnet(i: u32) -> (String, std::net::Ipv4Addr) {
    let i = i % SUBNET_CANDIDATES;
    let (b, c) = (208 + (i / 256) as u8, (i % 256) as u8);
    (
        format!("10.{b}.{c}.0/24"),
        std::net::Ipv4Addr::new(10, b, c, 2),
    )
}

/// Names and paths of one instance's egress resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The internal network the sandbox is on (filtered), else none.
    pub internal_network: Option<String>,
    /// The network with egress the proxy is also on.
    pub egress_network: String,
    pub proxy_container: String,
    /// Host folders under the instance folder: settings (`egress/`), CA bundle (`egress-ca/`).
    pub settings_dir: String,
    pub ca_dir: String,
    pub mode: ProxyMode,
    pub injections: bool,
}

impl Topology {
    /// The egress resources `spec` needs, if any (filtered, or open with injections).
    pub fn of(spec: &SandboxSpec, instance_dir: &str) -> Option<Topology> {
        let mode = match &spec.network {
            NetworkPolicy::Filtered { .. } => ProxyMode::Filter,
            NetworkPolicy::Open if !spec.injections.is_empty() => ProxyMode::Report,
            _ => return None,
        };
        let inst = instance_dir.trim_end_matches('/');
        Some(Topology {
            internal_network: (mode == ProxyMode::Filter).then(|| format!("{}-int", spec.name)),
            egress_network: format!("{}-ext", spec.name),
            proxy_container: format!("{}-egress", spec.name),
            settings_dir: format!("{inst}/egress"),
            ca_dir: format!("{inst}/egress-ca"),
            mode,
            injections: !spec.injections.is_empty(),
        })
    }

    /// The settings file on the host (what set-egress/set-allow rewrite).
    pub fn settings_file(&self) -> String {
        format!("{}/settings.json", self.settings_dir)
    }

    /// The CA bundle on the host.
    pub fn ca_bundle(&self) -> String {
        format!("{}/ca-bundle.pem", self.ca_dir)
    }

    /// The proxy's URL as the sandbox reaches it.
    pub fn proxy_url(&self) -> String {
        format!("http://{}:{PROXY_PORT}", self.proxy_container)
    }

    /// `podman network create` arguments of each network (name last). The internal network's
    /// are completed with its subnet by [`Topology::internal_network_args`] at creation.
    pub fn networks(&self) -> Vec<(String, Vec<String>)> {
        let mut n = Vec::new();
        if let Some(int) = &self.internal_network {
            n.push((
                int.clone(),
                vec!["--internal".into(), "--disable-dns".into(), int.clone()],
            ));
        }
        n.push((
            self.egress_network.clone(),
            vec![self.egress_network.clone()],
        ));
        n
    }

    /// `podman network create` arguments of the internal network on `subnet` (name last): no
    /// route out, no DNS server (aardvark-dns would forward the sandbox's lookups to the host's
    /// resolvers: a channel around the proxy). None when the sandbox is not filtered.
    pub fn internal_network_args(&self, subnet: &str) -> Option<Vec<String>> {
        let int = self.internal_network.as_ref()?;
        Some(vec![
            "--internal".into(),
            "--disable-dns".into(),
            "--subnet".into(),
            subnet.into(),
            int.clone(),
        ])
    }

    /// The sandbox's options naming its proxy's address (its network has no DNS), added to its
    /// `podman run`/`create` once the launcher knows the address; none when not filtered.
    pub fn sandbox_host_args(&self, proxy_ip: Option<std::net::Ipv4Addr>) -> Vec<String> {
        match (&self.internal_network, proxy_ip) {
            (Some(_), Some(ip)) => vec![
                "--add-host".into(),
                format!("{}:{ip}", self.proxy_container),
            ],
            _ => Vec::new(),
        }
    }

    /// The sandbox container's network options.
    pub fn sandbox_podman_args(&self) -> Vec<String> {
        let net = self
            .internal_network
            .clone()
            .unwrap_or_else(|| self.egress_network.clone());
        let mut a = vec!["--network".into(), net];
        if self.injections {
            a.extend([
                "--mount".into(),
                format!(
                    "type=bind,source={},destination={CA_BUNDLE_PATH},ro=true",
                    self.ca_bundle()
                ),
            ]);
        }
        a
    }

    /// The variables the sandbox gets: the proxy's (A.3), and the CA bundle's with injections.
    pub fn sandbox_env(&self) -> BTreeMap<String, String> {
        let url = self.proxy_url();
        let mut env = BTreeMap::new();
        for v in PROXY_ENV_VARS {
            let value = if v.eq_ignore_ascii_case("no_proxy") {
                "localhost,127.0.0.1,::1".to_string()
            } else {
                url.clone()
            };
            env.insert(v.to_string(), value);
        }
        if self.injections {
            for v in CA_ENV_VARS {
                env.insert(v.to_string(), CA_BUNDLE_PATH.to_string());
            }
        }
        env
    }

    /// `podman run` arguments of the proxy container, from `run` to the image (its entrypoint is
    /// the proxy; its configuration comes on stdin). Always strict (A.5). `labels` are the
    /// instance's and its launcher's, for cleanup and sweep. `proxy_ip` is its fixed address on
    /// the internal network (filtered); its egress network keeps DNS (it resolves allowed hosts).
    pub fn proxy_run_args(
        &self,
        labels: &[(String, String)],
        proxy_ip: Option<std::net::Ipv4Addr>,
    ) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--rm", "-i", "--name", &self.proxy_container]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(int) = &self.internal_network {
            let net = match proxy_ip {
                Some(ip) => format!("{int}:ip={ip}"),
                None => int.clone(),
            };
            a.extend(["--network".into(), net]);
        }
        a.extend(["--network".into(), self.egress_network.clone()]);
        a.extend(
            [
                "--read-only",
                "--cap-drop",
                "all",
                "--security-opt",
                "no-new-privileges",
                "--ulimit",
                "host",
                "--pull",
                "never",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        for (k, v) in labels {
            a.extend(["--label".into(), format!("{k}={v}")]);
        }
        a.extend([
            "--mount".into(),
            format!(
                "type=bind,source={},destination={PROXY_SETTINGS_DIR},ro=true",
                self.settings_dir
            ),
            "--mount".into(),
            format!(
                "type=bind,source={},destination={PROXY_CA_DIR}",
                self.ca_dir
            ),
            PROXY_IMAGE.into(),
        ]);
        a
    }

    /// The proxy's configuration (it holds the injections' values: given on stdin only).
    pub fn proxy_config(
        &self,
        spec: &SandboxSpec,
        host_addresses: Vec<std::net::IpAddr>,
    ) -> ProxyConfig {
        ProxyConfig {
            mode: self.mode,
            listen: format!("0.0.0.0:{PROXY_PORT}"),
            settings_file: (self.mode == ProxyMode::Filter)
                .then(|| format!("{PROXY_SETTINGS_DIR}/settings.json")),
            ca_bundle_out: self
                .injections
                .then(|| format!("{PROXY_CA_DIR}/ca-bundle.pem")),
            roots_files: vec![PROXY_ROOTS.into()],
            injections: spec.injections.clone(),
            host_addresses,
            resolve: BTreeMap::new(),
        }
    }
}

/// The first settings of a filtered spec.
pub fn initial_settings(spec: &SandboxSpec) -> Option<Settings> {
    match &spec.network {
        NetworkPolicy::Filtered { allow, enforcement } => Some(Settings {
            enforcement: *enforcement,
            allow: allow.clone(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(network: serde_json::Value, injections: serde_json::Value) -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1", "name": "sb1", "image": "img", "argv": ["sh"],
            "workdir": "/w", "user": {"mode": "host-user", "home": "/home/u"}, "network": network,
            "injections": injections,
        }))
        .unwrap()
    }

    #[test]
    fn filtered_puts_the_sandbox_on_an_internal_network_behind_its_proxy() {
        let s = spec(
            serde_json::json!({"mode":"filtered","allow":["a.com:443"],"enforcement":"enforce"}),
            serde_json::json!([]),
        );
        let t = Topology::of(&s, "/run/x/sb1/").unwrap();
        assert_eq!(
            t.networks()[0],
            (
                "sb1-int".to_string(),
                vec![
                    "--internal".to_string(),
                    "--disable-dns".to_string(),
                    "sb1-int".to_string()
                ]
            )
        );
        // No DNS on the internal network: the sandbox cannot resolve (so exfiltrate through
        // lookups); it finds its proxy by the fixed address the launcher gives it.
        let (subnet, ip) = internal_subnet(3);
        assert_eq!(
            (subnet.as_str(), ip.to_string().as_str()),
            ("10.208.3.0/24", "10.208.3.2")
        );
        assert_eq!(
            t.internal_network_args(&subnet).unwrap(),
            [
                "--internal",
                "--disable-dns",
                "--subnet",
                "10.208.3.0/24",
                "sb1-int"
            ]
        );
        assert_eq!(
            t.sandbox_host_args(Some(ip)),
            ["--add-host", "sb1-egress:10.208.3.2"]
        );
        assert_eq!(t.sandbox_podman_args(), ["--network", "sb1-int"]);
        let env = t.sandbox_env();
        for v in PROXY_ENV_VARS {
            assert!(env.contains_key(v), "{v}");
        }
        assert_eq!(env["HTTPS_PROXY"], "http://sb1-egress:3128");
        assert!(
            !env.contains_key("SSL_CERT_FILE"),
            "no CA without injections"
        );
        let args = t
            .proxy_run_args(&[("handler.sandbox".into(), "sb1".into())], Some(ip))
            .join(" ");
        assert!(
            args.contains("--network sb1-int:ip=10.208.3.2 --network sb1-ext"),
            "{args}"
        );
        assert!(
            args.contains("--cap-drop all")
                && args.contains("--read-only")
                && args.contains("no-new-privileges")
        );
        assert!(args.ends_with(PROXY_IMAGE));
        assert_eq!(t.settings_file(), "/run/x/sb1/egress/settings.json");
        assert_eq!(
            initial_settings(&s).unwrap().render(),
            "{\"enforcement\":\"enforce\",\"allow\":[\"a.com:443\"]}\n"
        );
    }

    #[test]
    fn injections_bring_the_ca_bundle_and_never_put_a_value_in_argv() {
        let inj = serde_json::json!([{"name":"n","phantom":"abcdefgh12","value":"zyxwvuts98","hosts":["a.com:443"]}]);
        let s = spec(
            serde_json::json!({"mode":"filtered","allow":["a.com:443"],"enforcement":"enforce"}),
            inj.clone(),
        );
        let t = Topology::of(&s, "/i").unwrap();
        let env = t.sandbox_env();
        for v in CA_ENV_VARS {
            assert_eq!(env[v], CA_BUNDLE_PATH);
        }
        assert!(t.sandbox_podman_args().join(" ").contains(
            "source=/i/egress-ca/ca-bundle.pem,destination=/run/handler/ca-bundle.pem,ro=true"
        ));
        let argv = format!(
            "{:?}{:?}",
            t.proxy_run_args(&[], None),
            t.sandbox_podman_args()
        );
        assert!(!argv.contains("zyxwvuts98"));
        assert_eq!(t.proxy_config(&s, vec![]).injections.len(), 1);
        // open + injections: a reporting proxy, the sandbox on a network with egress.
        let o = spec(serde_json::json!({"mode":"open"}), inj);
        let t = Topology::of(&o, "/i").unwrap();
        assert_eq!(t.mode, ProxyMode::Report);
        assert_eq!(t.internal_network, None);
        assert_eq!(t.sandbox_podman_args()[..2], ["--network", "sb1-ext"]);
        assert_eq!(t.networks().len(), 1);
        assert_eq!(t.internal_network_args("10.208.0.0/24"), None);
        assert!(t.sandbox_host_args(Some(internal_subnet(0).1)).is_empty());
        assert!(
            t.proxy_run_args(&[], None)
                .join(" ")
                .contains("--name sb1-egress --network sb1-ext --read-only")
        );
        assert_eq!(internal_subnet(SUBNET_CANDIDATES + 257).0, "10.209.1.0/24");
        assert_eq!(internal_subnet(SUBNET_CANDIDATES - 1).0, "10.211.255.0/24");
        assert!(
            Topology::of(
                &spec(serde_json::json!({"mode":"none"}), serde_json::json!([])),
                "/i"
            )
            .is_none()
        );
    }
}
