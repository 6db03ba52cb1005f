//! The sandbox's network as podman options (A.3): `none` (loopback only) and `open` (slirp4netns,
//! the host's loopback reachable as host.containers.internal). `filtered` and injections need the
//! per-sandbox egress proxy: until it lands they are refused here, in this one place (A1: never
//! a silent fallback to another mode). The egress work replaces `plan_network`'s filtered arm.

use std::collections::BTreeMap;

use handler_contracts::sandbox::{NetworkPolicy, SandboxSpec};

use crate::error::SpecError;

/// The address slirp4netns gives the host's loopback (with `allow_host_loopback=true`).
pub const SLIRP_HOST_LOOPBACK: &str = "10.0.2.2";

/// How the sandbox container is networked, and what the runtime must set up around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkPlan {
    /// The mode, as the spec names it.
    pub mode: &'static str,
    /// podman run options for the sandbox container (`--network …`, `--add-host …`).
    pub podman_args: Vec<String>,
    /// Variables the runtime sets in the sandbox (e.g. the proxy variables); never secrets.
    pub env: BTreeMap<String, String>,
    /// Per-instance resources the runtime creates before the sandbox and removes with it (a
    /// network, a proxy container); empty for none and open.
    pub resources: Vec<NetworkResource>,
}

/// A resource of the sandbox's network, created by the runtime and removed with the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkResource {
    /// A podman network, created with these `podman network create` arguments (name last).
    Network {
        name: String,
        create_args: Vec<String>,
    },
}

/// The network of `spec` (A.3), or why it cannot be given.
///
/// `filtered` and injections: refused with 64 (unenforceable) until the egress proxy exists.
pub fn plan_network(spec: &SandboxSpec) -> Result<NetworkPlan, SpecError> {
    if !spec.injections.is_empty() {
        return Err(SpecError::unenforceable(
            "injections",
            "injections need the sandbox's egress proxy, which this build does not have yet",
        ));
    }
    match &spec.network {
        NetworkPolicy::None => Ok(NetworkPlan {
            mode: "none",
            podman_args: vec!["--network".into(), "none".into()],
            env: BTreeMap::new(),
            resources: Vec::new(),
        }),
        NetworkPolicy::Open => Ok(NetworkPlan {
            mode: "open",
            podman_args: vec![
                "--network".into(),
                "slirp4netns:allow_host_loopback=true".into(),
                "--add-host".into(),
                format!("host.containers.internal:{SLIRP_HOST_LOOPBACK}"),
            ],
            env: BTreeMap::new(),
            resources: Vec::new(),
        }),
        NetworkPolicy::Filtered { .. } => Err(SpecError::unenforceable(
            "network.mode",
            "filtered networks are not available yet (no egress proxy in this build); never run unfiltered instead",
        )),
    }
}
