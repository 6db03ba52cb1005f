//! The sandbox's network as podman options (A.3): `none` (loopback only) and `open` (slirp4netns,
//! the host's loopback reachable as host.containers.internal). `filtered` and injections get the
//! per-sandbox egress proxy's topology (`crate::egress::topology`): no route but through the
//! proxy, never a silent fallback to another mode (A1).

use std::collections::BTreeMap;

use handler_contracts::sandbox::{NetworkPolicy, SandboxSpec};

use crate::error::SpecError;
use crate::plan::engine::{Engine, ImageVolume, filter_image_mount, open_network_args};

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
    /// What the process's argv is prefixed with (the egress forwarder), if anything.
    pub argv_prefix: Vec<String>,
}

/// The network of `spec` (A.3), or why it cannot be given.
///
/// `filtered` (and `open` with injections): the sandbox's side of its proxy (options, variables,
/// the forwarder); the launcher starts the proxy container (handler-core's `egress::launch`).
pub fn plan_network(spec: &SandboxSpec, instance_dir: &str) -> Result<NetworkPlan, SpecError> {
    Ok(plan_network_on(Engine::Podman, spec, instance_dir, false)?.0)
}

/// The network of `spec` on `engine`, and the volume Docker fills from the network filter image
/// for the forwarder (decision 0081), when there is one. A `machine`'s trusts its proxy's CA
/// (decision 0166).
pub fn plan_network_on(
    engine: Engine<'_>,
    spec: &SandboxSpec,
    instance_dir: &str,
    machine: bool,
) -> Result<(NetworkPlan, Option<ImageVolume>), SpecError> {
    // filtered, or open with injections: the per-sandbox egress proxy (crate::egress::topology).
    if let Some(topo) = crate::egress::topology::Topology::of_kind(spec, instance_dir, machine) {
        if let Err(e) = crate::egress::inject::validate_injections(&spec.injections) {
            return Err(SpecError::invalid("injections", e.to_string()));
        }
        let (filter, volume) = filter_image_mount(engine)?;
        let plan = NetworkPlan {
            mode: spec.network.mode_name(),
            podman_args: topo.sandbox_args(engine, filter),
            env: topo.sandbox_env(),
            argv_prefix: topo.argv_prefix(),
        };
        return Ok((plan, volume));
    }
    let podman_args = match &spec.network {
        NetworkPolicy::None => vec!["--network".into(), "none".into()],
        NetworkPolicy::Open => open_network_args(engine),
        NetworkPolicy::Filtered { .. } => unreachable!("a filtered network has a topology"),
    };
    let plan = NetworkPlan {
        mode: spec.network.mode_name(),
        podman_args,
        env: BTreeMap::new(),
        argv_prefix: Vec::new(),
    };
    Ok((plan, None))
}
