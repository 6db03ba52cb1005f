//! Fuzz target: the SandboxSpec a launcher reads on fd 3 (`handler-core/src/sandbox/launch.rs`
//! `read_spec`): JSON → `parse::from_json::<SandboxSpec>` → `validate_spec`, and for a valid
//! spec the pure plan (`plan_launch` with fixed host facts), the egress topology and its first
//! settings. Oracles: no panic; no error message quotes an injection's value (the spec carries
//! secrets: A.3) — the reader's never, the validator's and the plan's unless the input also wrote
//! the value into the field they quote.
//!
//! Input: the spec's JSON text.
#![no_main]

use std::collections::BTreeMap;

use handler_contracts::parse::from_json;
use handler_contracts::sandbox::SandboxSpec;
use handler_sandbox::egress::topology::{Topology, initial_settings};
use handler_sandbox::{HostFacts, LauncherId, PathKind, plan_launch, validate_spec};
use libfuzzer_sys::fuzz_target;

fn facts(spec: &SandboxSpec) -> HostFacts {
    let mut paths = BTreeMap::new();
    for m in &spec.mounts {
        paths.insert(m.source.clone(), PathKind::Directory);
    }
    if let Some(d) = &spec.display {
        paths.insert(d.socket.clone(), PathKind::Socket);
    }
    HostFacts {
        uid: 1000,
        gid: 1000,
        subuid_count: Some(65536),
        subgid_count: Some(65536),
        has_fuse: true,
        has_tun: true,
        cgroup_memory: true,
        cgroup_cpu: true,
        paths,
        image_path: Some("/usr/local/bin:/usr/bin:/bin".into()),
        image_ids: spec
            .image_mounts
            .iter()
            .map(|m| (m.image.clone(), "sha256:0123".into()))
            .collect(),
        instance_dir: "/run/user/1000/handler/i".into(),
        launcher: LauncherId {
            pid: 42,
            start: 7,
            boot: "b".into(),
        },
        git: Vec::new(),
        canonical_sources: BTreeMap::new(),
        nproc_hard: None,
        cgroup_pids: false,
        containers_conf: Default::default(),
        host_addresses: vec!["10.0.0.1".parse().unwrap()],
    }
}

/// Secrets of the input: the `value` strings of its injections, read leniently (so that a spec
/// the reader refuses is checked too).
fn values(text: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    v.get("injections")
        .and_then(|i| i.as_array())
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("value").and_then(|v| v.as_str()))
        .filter(|s| s.len() >= 8)
        .map(str::to_string)
        .collect()
}

fn quiet(what: &str, secrets: &[String], msg: &str) {
    for s in secrets {
        assert!(
            !msg.contains(s.as_str()),
            "{what} error quotes a value: {msg}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let secrets = values(text);
    let spec: SandboxSpec = match from_json("SandboxSpec", text) {
        Ok(s) => s,
        Err(e) => {
            quiet("reader", &secrets, &e.to_string());
            return;
        }
    };
    // A validator or a plan quotes a wrong field; a value the input also wrote into such a field
    // (a path, a name) is quoted with it. Only values that appear once (in their injection) count.
    let secrets: Vec<String> = secrets
        .into_iter()
        .filter(|v| text.matches(v.as_str()).count() == 1)
        .collect();
    let valid = match validate_spec(&spec) {
        Ok(v) => v,
        Err(e) => {
            let _ = e.exit_code();
            quiet("validator", &secrets, &e.to_string());
            return;
        }
    };
    match plan_launch(&valid, &facts(&spec)) {
        Ok(plan) => {
            let _ = format!("{plan:?}");
            // What the launcher hands the proxy must be what the proxy accepts.
            if let Some(p) = &plan.proxy {
                let json = serde_json::to_string(&p.config).expect("a proxy configuration serializes");
                if let Err(e) = handler_sandbox::egress::ProxyConfig::parse(&json) {
                    panic!("the proxy refuses the planned configuration: {e}");
                }
            }
        }
        Err(e) => {
            // The plan checks the injections (`plan_network`): only a planned spec goes on.
            quiet("plan", &secrets, &e.to_string());
            return;
        }
    }
    if let Some(t) = Topology::of(&spec, "/run/user/1000/handler/i") {
        let _ = t.sandbox_podman_args();
        let _ = t.proxy_run_args(&[]);
        let _ = t.sandbox_env();
        let _ = t.argv_prefix();
        // What the launcher hands the proxy must be what the proxy accepts.
        let cfg = t.proxy_config(&spec, vec!["10.0.0.1".parse().unwrap()]);
        let json = serde_json::to_string(&cfg).expect("a proxy configuration serializes");
        if let Err(e) = handler_sandbox::egress::ProxyConfig::parse(&json) {
            panic!("the proxy refuses the launcher's configuration: {e}");
        }
    }
    if let Some(s) = initial_settings(&spec) {
        let text = s.render();
        let back =
            handler_sandbox::egress::Settings::parse(&text).expect("rendered settings read back");
        assert_eq!(back, s);
    }
});
