//! The egress proxy's topology (A.3) as a pure plan. A filtered sandbox has no network
//! interface but loopback (`--network none`: no route out, no DNS, decision 0024); its proxy
//! container is on a network with egress of its own (slirp4netns, the host's loopback reachable
//! as host.containers.internal) and listens on a unix socket in a folder both containers mount.
//! Inside the sandbox a small forwarder (the proxy binary's `shim`, from the network filter image
//! mounted read-only) listens on 127.0.0.1:3128, waits for the proxy, and starts the process;
//! the proxy variables (and with injections the CA bundle and its variables) are in the
//! sandbox's environment. An `open` sandbox with injections gets a reporting proxy the same way,
//! beside its direct route.

use std::collections::BTreeMap;

use handler_contracts::sandbox::{
    CA_BUNDLE_PATH, CA_ENV_VARS, NetworkPolicy, PROXY_ENV_VARS, SandboxSpec,
};

use crate::egress::config::{ProxyConfig, ProxyMode, Settings};
use crate::plan::engine::{
    Engine, image_mount, no_route_args, open_network_args, proxy_extra_args,
};

/// The network filter image `image build-proxy` builds.
pub const PROXY_IMAGE: &str = "localhost/handler-network-filter:latest";
/// The port the sandbox's forwarder listens on, on the sandbox's loopback.
pub const PROXY_PORT: u16 = 3128;
/// Where the proxy finds its settings folder (the instance's `egress/`, read-only).
pub const PROXY_SETTINGS_DIR: &str = "/run/handler-egress";
/// Where the proxy writes the CA bundle (the instance's `egress-ca/`).
pub const PROXY_CA_DIR: &str = "/run/handler-ca";
/// Where the proxy makes its socket (the instance's `egress-sock/`).
pub const PROXY_SOCKET_DIR: &str = "/run/handler-egress-sock";
/// The proxy's socket's file name in that folder.
pub const PROXY_SOCKET: &str = "proxy.sock";
/// Where the sandbox sees the socket folder (read-only).
pub const SANDBOX_SOCKET_DIR: &str = "/run/handler/egress";
/// Where the sandbox mounts the network filter image (read-only), for its forwarder.
pub const SANDBOX_FILTER_DIR: &str = "/run/handler/filter";
/// The proxy binary in the network filter image.
pub const PROXY_BINARY: &str = "handler-egress-proxy";
/// The roots in the network filter image (Mozilla's, from the build host).
pub const PROXY_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The proxy container's network: egress of its own, the host's loopback as
/// host.containers.internal (a model server listening on 127.0.0.1 only).
pub const PROXY_NETWORK: &str = "slirp4netns:allow_host_loopback=true";

/// The label of a machine's proxy container: the machine's id (decision 0153).
pub const MACHINE_PROXY_LABEL: &str = "handler.machine-proxy";
/// A machine's proxy's configuration file in its settings folder (it holds no secret).
pub const MACHINE_PROXY_CONFIG: &str = "config.json";
/// Where a machine's proxy makes its control socket (the instance's `egress-ctl/`, 0700, mounted
/// into the proxy only: never into the machine). Decision 0166.
pub const PROXY_CONTROL_DIR: &str = "/run/handler-egress-ctl";
/// The control socket's file name in that folder.
pub const CONTROL_SOCKET: &str = "control.sock";

/// The log a machine's proxy keeps of its events (an engine difference: each engine's own
/// file driver, bounded).
pub fn kept_log_args(engine: Engine<'_>) -> Vec<String> {
    match engine {
        Engine::Podman => vec![
            "--log-driver=k8s-file".into(),
            "--log-opt".into(),
            "max-size=10mb".into(),
        ],
        Engine::Docker(_) => vec![
            "--log-driver=json-file".into(),
            "--log-opt".into(),
            "max-size=10m".into(),
        ],
    }
}

/// The instance's settings folder's name (under the instance folder).
pub const SETTINGS_SUBDIR: &str = "egress";
/// The instance's CA bundle folder's name.
pub const CA_SUBDIR: &str = "egress-ca";
/// The instance's proxy socket folder's name.
pub const SOCKET_SUBDIR: &str = "egress-sock";

/// The file in the settings folder the launcher creates once the proxy answers; set-egress and
/// set-allow wait for it.
pub const READY_MARKER: &str = "ready";

/// Names and paths of one instance's egress resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Whether the sandbox keeps a direct route (open with injections) or has none (filtered).
    pub direct_route: bool,
    /// The proxy container's name: `<sandbox>-egress`.
    pub proxy_container: String,
    /// Host folders under the instance folder: settings (`egress/`), CA bundle (`egress-ca/`),
    /// the proxy's socket (`egress-sock/`).
    pub settings_dir: String,
    /// The host folder the proxy writes the CA bundle into (`egress-ca/`).
    pub ca_dir: String,
    /// The host folder holding the proxy's socket (`egress-sock/`).
    pub socket_dir: String,
    /// Whether the proxy filters (a filtered network) or only reports (open with injections).
    pub mode: ProxyMode,
    /// Whether the spec has injections (then the sandbox trusts the proxy's CA).
    pub injections: bool,
    /// A machine's: the host folder of the proxy's control socket (`egress-ctl/`), through
    /// which each exec gives the running proxy its own injections (decision 0166).
    pub control_dir: Option<String>,
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
            direct_route: mode == ProxyMode::Report,
            proxy_container: format!("{}-egress", spec.name),
            settings_dir: format!("{inst}/{SETTINGS_SUBDIR}"),
            ca_dir: format!("{inst}/{CA_SUBDIR}"),
            socket_dir: format!("{inst}/{SOCKET_SUBDIR}"),
            mode,
            injections: !spec.injections.is_empty(),
            control_dir: None,
        })
    }

    /// A machine's egress resources (decision 0166): a filtered machine's proxy takes each
    /// exec's injections on its control socket, so the machine trusts the proxy's CA from the
    /// start (its processes reach an injection's host through it); None unless filtered.
    pub fn of_machine(spec: &SandboxSpec, instance_dir: &str) -> Option<Topology> {
        let mut t = Self::of(spec, instance_dir)?;
        if t.mode != ProxyMode::Filter {
            return None;
        }
        t.injections = true;
        t.control_dir = Some(format!("{}/egress-ctl", instance_dir.trim_end_matches('/')));
        Some(t)
    }

    /// [`Topology::of_machine`] for a machine, [`Topology::of`] for a launch.
    pub fn of_kind(spec: &SandboxSpec, instance_dir: &str, machine: bool) -> Option<Topology> {
        if machine {
            Self::of_machine(spec, instance_dir)
        } else {
            Self::of(spec, instance_dir)
        }
    }

    /// The control socket on the host, for a machine's proxy.
    pub fn control_socket(&self) -> Option<String> {
        self.control_dir
            .as_ref()
            .map(|d| format!("{d}/{CONTROL_SOCKET}"))
    }

    /// The settings file on the host (what set-egress/set-allow rewrite).
    pub fn settings_file(&self) -> String {
        format!("{}/settings.json", self.settings_dir)
    }

    /// The ready marker on the host ([`READY_MARKER`] in the settings folder).
    pub fn ready_file(&self) -> String {
        format!("{}/{READY_MARKER}", self.settings_dir)
    }

    /// The CA bundle on the host.
    pub fn ca_bundle(&self) -> String {
        format!("{}/ca-bundle.pem", self.ca_dir)
    }

    /// The proxy's socket on the host.
    pub fn socket(&self) -> String {
        format!("{}/{PROXY_SOCKET}", self.socket_dir)
    }

    /// The proxy's URL as the sandbox's process reaches it (its forwarder).
    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{PROXY_PORT}")
    }

    /// The sandbox container's network options and mounts: no interface but loopback when
    /// filtered (slirp4netns as `open` with injections), the network filter image for the
    /// forwarder, the proxy's socket folder, and with injections the CA bundle.
    pub fn sandbox_podman_args(&self) -> Vec<String> {
        let (filter, _) = image_mount(Engine::Podman, PROXY_IMAGE, PROXY_IMAGE, SANDBOX_FILTER_DIR);
        self.sandbox_args(Engine::Podman, filter)
    }

    /// The sandbox container's network options and mounts on `engine`, the forwarder's image
    /// mounted by `filter_mount` (a `--mount` value; [`crate::plan::engine::filter_image_mount`]).
    pub fn sandbox_args(&self, engine: Engine<'_>, filter_mount: String) -> Vec<String> {
        let mut a: Vec<String> = if self.direct_route {
            open_network_args(engine)
        } else {
            no_route_args(engine)
        };
        a.extend([
            "--mount".into(),
            filter_mount,
            "--mount".into(),
            format!(
                "type=bind,source={},destination={SANDBOX_SOCKET_DIR},ro=true",
                self.socket_dir
            ),
        ]);
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

    /// What comes before the process's argv: the forwarder, which listens on the sandbox's
    /// loopback, waits for the proxy's socket (the process never starts without its proxy, A1)
    /// and then becomes the process (exec).
    pub fn argv_prefix(&self) -> Vec<String> {
        vec![
            format!("{SANDBOX_FILTER_DIR}/{PROXY_BINARY}"),
            "shim".into(),
            "--listen".into(),
            format!("127.0.0.1:{PROXY_PORT}"),
            "--socket".into(),
            format!("{SANDBOX_SOCKET_DIR}/{PROXY_SOCKET}"),
            "--".into(),
        ]
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
    /// instance's and its launcher's, for cleanup and sweep.
    pub fn proxy_run_args(&self, labels: &[(String, String)]) -> Vec<String> {
        self.proxy_run_args_on(Engine::Podman, labels)
    }

    /// The proxy container's `run` arguments on `engine` (see [`Topology::proxy_run_args`]).
    pub fn proxy_run_args_on(
        &self,
        engine: Engine<'_>,
        labels: &[(String, String)],
    ) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--rm", "-i", "--name", &self.proxy_container]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        // Its stderr (events) reaches the launcher attached; nothing is kept on disk.
        a.push("--log-driver=none".into());
        self.proxy_common_args(engine, labels, &mut a);
        a
    }

    /// The `run` arguments of a **machine's** proxy (decision 0153): detached and kept (the
    /// engine starts it again with the machine), labelled [`MACHINE_PROXY_LABEL`]`=<id>` and none
    /// of a launcher's, its events kept in a bounded log (`machine exec` follows it), its
    /// configuration read from [`MACHINE_PROXY_CONFIG`] in its settings folder.
    pub fn machine_proxy_run_args(&self, engine: Engine<'_>, id: &str) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--detach", "--name", &self.proxy_container]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        a.extend(kept_log_args(engine));
        let labels = [(MACHINE_PROXY_LABEL.to_string(), id.to_string())];
        if let Some(d) = &self.control_dir {
            a.extend([
                "--mount".into(),
                format!("type=bind,source={d},destination={PROXY_CONTROL_DIR}"),
            ]);
        }
        self.proxy_common_args(engine, &labels, &mut a);
        a.extend([
            "--config".into(),
            format!("{PROXY_SETTINGS_DIR}/{MACHINE_PROXY_CONFIG}"),
        ]);
        a
    }

    /// What every proxy container has: its network, strictness, labels, mounts and image.
    pub(crate) fn proxy_common_args(
        &self,
        engine: Engine<'_>,
        labels: &[(String, String)],
        a: &mut Vec<String>,
    ) {
        a.extend(open_network_args(engine));
        a.extend(
            [
                "--read-only",
                "--cap-drop",
                "all",
                "--security-opt",
                "no-new-privileges",
            ]
            .iter()
            .map(std::string::ToString::to_string),
        );
        a.extend(
            proxy_extra_args(engine)
                .iter()
                .map(std::string::ToString::to_string),
        );
        a.extend(["--pull".into(), "never".into()]);
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
            "--mount".into(),
            format!(
                "type=bind,source={},destination={PROXY_SOCKET_DIR}",
                self.socket_dir
            ),
            PROXY_IMAGE.into(),
        ]);
    }

    /// The proxy's configuration (it holds the injections' values: given on stdin only).
    pub fn proxy_config(
        &self,
        spec: &SandboxSpec,
        host_addresses: Vec<std::net::IpAddr>,
    ) -> ProxyConfig {
        ProxyConfig {
            mode: self.mode,
            listen: format!("127.0.0.1:{PROXY_PORT}"),
            listen_unix: Some(format!("{PROXY_SOCKET_DIR}/{PROXY_SOCKET}")),
            settings_file: (self.mode == ProxyMode::Filter)
                .then(|| format!("{PROXY_SETTINGS_DIR}/settings.json")),
            ca_bundle_out: self
                .injections
                .then(|| format!("{PROXY_CA_DIR}/ca-bundle.pem")),
            roots_files: vec![PROXY_ROOTS.into()],
            injections: spec.injections.clone(),
            host_addresses,
            resolve: BTreeMap::new(),
            control_socket: self
                .control_dir
                .as_ref()
                .map(|_| format!("{PROXY_CONTROL_DIR}/{CONTROL_SOCKET}")),
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
    fn filtered_leaves_the_sandbox_only_loopback_and_its_proxy_socket() {
        let s = spec(
            serde_json::json!({"mode":"filtered","allow":["a.com:443"],"enforcement":"enforce"}),
            serde_json::json!([]),
        );
        let t = Topology::of(&s, "/run/x/sb1/").unwrap();
        // No interface but loopback: no route out, no DNS (decision 0024).
        let args = t.sandbox_podman_args();
        assert_eq!(args[..2], ["--network", "none"]);
        assert!(args.contains(&format!(
            "type=image,source={PROXY_IMAGE},destination=/run/handler/filter"
        )));
        assert!(
            args.contains(
                &"type=bind,source=/run/x/sb1/egress-sock,destination=/run/handler/egress,ro=true"
                    .to_string()
            )
        );
        assert_eq!(
            t.argv_prefix(),
            [
                "/run/handler/filter/handler-egress-proxy",
                "shim",
                "--listen",
                "127.0.0.1:3128",
                "--socket",
                "/run/handler/egress/proxy.sock",
                "--"
            ]
        );
        let env = t.sandbox_env();
        for v in PROXY_ENV_VARS {
            assert!(env.contains_key(v), "{v}");
        }
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert!(
            !env.contains_key("SSL_CERT_FILE"),
            "no CA without injections"
        );
        let args = t
            .proxy_run_args(&[("handler.sandbox".into(), "sb1".into())])
            .join(" ");
        assert!(
            args.contains(
                "--network slirp4netns:allow_host_loopback=true --add-host host.containers.internal:10.0.2.2"
            ),
            "{args}"
        );
        assert!(
            args.contains("--cap-drop all")
                && args.contains("--read-only")
                && args.contains("no-new-privileges")
                && args.contains(
                    "type=bind,source=/run/x/sb1/egress-sock,destination=/run/handler-egress-sock "
                )
        );
        assert!(args.ends_with(PROXY_IMAGE));
        let c = t.proxy_config(&s, vec![]);
        assert_eq!(
            c.listen_unix.as_deref(),
            Some("/run/handler-egress-sock/proxy.sock")
        );
        assert_eq!(t.settings_file(), "/run/x/sb1/egress/settings.json");
        assert_eq!(t.socket(), "/run/x/sb1/egress-sock/proxy.sock");
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
            "{:?}{:?}{:?}",
            t.proxy_run_args(&[]),
            t.sandbox_podman_args(),
            t.argv_prefix()
        );
        assert!(!argv.contains("zyxwvuts98"));
        assert_eq!(t.proxy_config(&s, vec![]).injections.len(), 1);
        // open + injections: a reporting proxy, the sandbox keeping its direct route.
        let o = spec(serde_json::json!({"mode":"open"}), inj);
        let t = Topology::of(&o, "/i").unwrap();
        assert_eq!(t.mode, ProxyMode::Report);
        assert!(t.direct_route);
        assert_eq!(
            t.sandbox_podman_args()[..4],
            [
                "--network",
                "slirp4netns:allow_host_loopback=true",
                "--add-host",
                "host.containers.internal:10.0.2.2"
            ]
        );
        assert_eq!(t.argv_prefix()[1], "shim");
        assert!(
            Topology::of(
                &spec(serde_json::json!({"mode":"none"}), serde_json::json!([])),
                "/i"
            )
            .is_none()
        );
    }
}
