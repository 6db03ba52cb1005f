//! The egress proxy's part of a launch plan (A.3, decision 0024): what to stage for it (its
//! settings, CA and socket folders, the first settings, the CA bundle the sandbox mounts), the
//! `podman run` arguments of its container and the configuration it reads on stdin. Every
//! decision is the topology's (`crate::egress::topology`); the runtime only executes the plan.

use handler_contracts::sandbox::SandboxSpec;

use super::{Engine, Stage, labels};
use crate::egress::config::{ProxyConfig, ProxyMode};
use crate::egress::topology::{PROXY_IMAGE, Topology, initial_settings};
use crate::facts::HostFacts;

/// The egress proxy of one sandbox, planned: started before the sandbox's process may run, and
/// stopped with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPlan {
    /// Its container's name (`<sandbox>-egress`), what the runtime removes at the end.
    pub container: String,
    /// Whether it filters (set-egress/set-allow apply) or only reports injections.
    pub mode: ProxyMode,
    /// What to create under the instance folder before it starts, in order.
    pub stage: Vec<Stage>,
    /// podman's arguments for its container, from `run` to the image.
    pub args: Vec<String>,
    /// Its configuration, given on its stdin once (it holds the injections' values: never in
    /// argv or a file; its Debug shows no value).
    pub config: ProxyConfig,
    /// The file the runtime creates once the proxy said it is ready (set-egress/set-allow wait
    /// for it).
    pub ready_file: String,
    /// The network filter image it runs (when it does not start, the runtime says whether the
    /// image is missing).
    pub image: String,
    /// Whether a member of the warm pool may stand in for it (a launch's; a machine keeps a
    /// proxy of its own, decision 0175).
    pub pooled: bool,
}

/// The proxy of `spec` in instance folder `inst` on a host with `facts`, if it needs one
/// (filtered, or open with injections); a `machine`'s with its control folder (decision 0166).
pub(super) fn plan_proxy(
    engine: Engine<'_>,
    spec: &SandboxSpec,
    facts: &HostFacts,
    (inst, machine): (&str, bool),
) -> Option<ProxyPlan> {
    let topo = Topology::of_kind(spec, inst, machine)?;
    let l = &facts.launcher;
    // The instance's and its launcher's labels, for cleanup and sweep.
    let labels: Vec<(String, String)> = vec![
        (labels::LAUNCHER_PID.into(), l.pid.to_string()),
        (labels::LAUNCHER_START.into(), l.start.to_string()),
        (labels::LAUNCHER_BOOT.into(), l.boot.clone()),
        (labels::SANDBOX.into(), spec.name.clone()),
    ];
    let mut stage: Vec<Stage> = [&topo.settings_dir, &topo.ca_dir, &topo.socket_dir]
        .into_iter()
        .map(|d| Stage::Dir {
            path: d.clone(),
            mode: 0o755,
        })
        .collect();
    if let Some(d) = &topo.control_dir {
        // Only the proxy and the host user reach it: the machine never mounts it.
        stage.push(Stage::Dir {
            path: d.clone(),
            mode: 0o700,
        });
    }
    if let Some(s) = initial_settings(spec) {
        stage.push(Stage::File {
            path: topo.settings_file(),
            content: s.render(),
            mode: 0o644,
        });
    }
    if topo.injections {
        // The sandbox mounts this file; the proxy writes the bundle into it in place.
        stage.push(Stage::File {
            path: topo.ca_bundle(),
            content: String::new(),
            mode: 0o644,
        });
    }
    Some(ProxyPlan {
        container: topo.proxy_container.clone(),
        mode: topo.mode,
        stage,
        args: topo.proxy_run_args_on(engine, &labels),
        config: topo.proxy_config(spec, facts.host_addresses.clone()),
        ready_file: topo.ready_file(),
        image: PROXY_IMAGE.to_string(),
        pooled: !machine,
    })
}
