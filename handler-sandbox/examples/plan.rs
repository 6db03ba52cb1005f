//! Plan a sandbox launch from a spec and host facts: validate a SandboxSpec (contract A),
//! describe the host, and print the podman argv the runtime would execute — the sandbox's, and
//! its egress proxy's when the network is filtered. Pure: nothing is started.
//!
//! `cargo run -p handler-sandbox --example plan`
#![allow(
    unreachable_pub,
    reason = "its items are also a module of the crate's test binary"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "an example is a program: it may exit with a status"
)]

use std::collections::BTreeMap;

use handler_contracts::SandboxSpec;
use handler_sandbox::{HostFacts, LauncherId, PathKind, SpecError, plan_launch, validate_spec};

/// The plan of a small filtered sandbox, as text: the sandbox's argv, the names podman gets in
/// its environment (never their values), what is staged, and the proxy's argv.
pub fn plan_text() -> Result<String, SpecError> {
    let spec: SandboxSpec = serde_json::from_str(
        r#"{
            "apiVersion": "handler.sandbox/v1",
            "name": "handler-demo",
            "image": "localhost/handler-test-busybox:latest",
            "argv": ["sh", "-c", "echo hello"],
            "env": {"API_KEY": "not-in-argv"},
            "workdir": "/home/alice/proj",
            "user": {"mode": "host-user", "home": "/home/agent"},
            "mounts": [{"source": "/home/alice/proj", "target": "/home/alice/proj",
                        "readOnly": false, "kind": "scope"}],
            "network": {"mode": "filtered", "allow": ["api.example.com:443"],
                        "enforcement": "enforce"}
        }"#,
    )
    .expect("a SandboxSpec document");
    // What the launcher found out about the host (handler-core gathers these by I/O).
    let facts = HostFacts {
        uid: 1000,
        gid: 1000,
        subuid_count: Some(65536),
        subgid_count: Some(65536),
        has_fuse: true,
        has_tun: true,
        cgroup_memory: false,
        cgroup_cpu: false,
        paths: BTreeMap::from([("/home/alice/proj".to_string(), PathKind::Directory)]),
        image_path: None,
        image_ids: BTreeMap::new(),
        instance_dir: "/run/user/1000/handler-sandbox/handler-demo".into(),
        launcher: LauncherId {
            pid: 4242,
            start: 1,
            boot: "boot".into(),
        },
        git: Vec::new(),
        canonical_sources: BTreeMap::new(),
        nproc_hard: None,
        cgroup_pids: false,
        containers_conf: Default::default(),
        host_addresses: Vec::new(),
        exec_server: None,
    };
    let plan = plan_launch(&validate_spec(&spec)?, &facts)?;
    let mut out = format!("podman {}\n", plan.args.join(" "));
    let names: Vec<&String> = plan.podman_env.keys().collect();
    out.push_str(&format!("podman's environment: {names:?}\n"));
    for s in &plan.stage {
        out.push_str(&format!("stage {s:?}\n"));
    }
    if let Some(p) = &plan.proxy {
        out.push_str(&format!("proxy: podman {}\n", p.args.join(" ")));
    }
    Ok(out)
}

fn main() {
    match plan_text() {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(e.exit_code());
        }
    }
}
