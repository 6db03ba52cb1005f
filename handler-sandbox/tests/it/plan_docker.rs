//! Snapshot tests of the Docker plan (issue 19): the same spec and facts as the podman plan's
//! tests, planned for rootless Docker — container uid 0 as the host user (decision 0080), image
//! mounts as volumes filled from the image (decision 0081), the bridge network for `open` and
//! the proxy — and its refusals (a rootful daemon without the opt-in, nested, no filter image).

use handler_contracts::SandboxSpec;
use handler_sandbox::plan::{DockerFacts, plan_launch_docker};
use handler_sandbox::{HostFacts, LaunchPlan, SpecError, validate_spec};
use serde_json::json;

use crate::plan::{base, facts, spec, with};

fn rootless() -> DockerFacts {
    DockerFacts {
        rootless: true,
        allow_rootful: false,
        oci_runtime: None,
        filter_image_id: Some(format!("sha256:{}", "f".repeat(64))),
        image_mounts: false,
    }
}

fn plan(s: &SandboxSpec, f: &HostFacts, d: &DockerFacts) -> Result<LaunchPlan, SpecError> {
    plan_launch_docker(&validate_spec(s)?, f, d)
}

#[test]
fn docker_strict_none_plan() {
    let p = plan(&spec(base()), &facts(), &rootless()).unwrap();
    let a = p.args.join(" ");
    assert!(a.contains("--user 0:0") && !a.contains("keep-id"), "{a}");
    assert!(a.contains("--cap-drop all --security-opt no-new-privileges"));
    assert!(a.contains("--read-only") && a.contains("--init"));
    let at = p.args.iter().position(|x| x == "--entrypoint").unwrap();
    assert_eq!(
        p.args[at + 1],
        "",
        "docker clears the entrypoint with an empty value"
    );
    insta::assert_debug_snapshot!(p);
}

#[test]
fn docker_values_reach_docker_by_name_and_its_own_names_go_through_the_env_file() {
    let s = with(json!({"env": {
        "MISTRAL_API_KEY": "sk-secret-value-123",
        "DOCKER_HOST": "tcp://secret-host:1",
        "LD_PRELOAD": "/elsewhere.so"
    }}));
    let p = plan(&s, &facts(), &rootless()).unwrap();
    let argv = p.args.join(" ");
    for v in [
        "sk-secret-value-123",
        "tcp://secret-host:1",
        "/elsewhere.so",
    ] {
        assert!(!argv.contains(v), "a value in argv: {argv}");
    }
    assert_eq!(p.podman_env["MISTRAL_API_KEY"], "sk-secret-value-123");
    assert!(!p.podman_env.contains_key("DOCKER_HOST") && !p.podman_env.contains_key("LD_PRELOAD"));
    let env_file = p
        .stage
        .iter()
        .find_map(|s| match s {
            handler_sandbox::Stage::File { path, content, .. } if path.ends_with("/env") => {
                Some(content.clone())
            }
            _ => None,
        })
        .expect("an env file");
    assert!(env_file.contains("DOCKER_HOST=tcp://secret-host:1\n"));
}

#[test]
fn docker_full_plan_mounts_images_as_volumes_pinned_to_their_id() {
    let s = with(json!({
        "mounts": [
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"},
            {"source": "/home/alice/.cache/handler-ai/cargo", "target": "/home/agent/.cargo", "readOnly": false, "kind": "cache"}
        ],
        "imageMounts": [{"image": "localhost/handler-addon-gh:latest", "target": "/opt/handler/addons/gh"}],
        "pathAppend": ["/opt/handler/addons/gh/bin"],
        "files": [
            {"target": "/home/agent/.vibe/config.toml", "content": "model = 'x'\n", "seed": true},
            {"target": "/etc/handler/policy.json", "content": "{}", "mode": "0600"}
        ],
        "writablePaths": ["/var/cache/agent"],
        "tty": true
    }));
    let p = plan(&s, &facts(), &rootless()).unwrap();
    let id = "a".repeat(64);
    assert_eq!(p.image_volumes.len(), 1);
    assert_eq!(p.image_volumes[0].name, format!("handler-image-{id}"));
    assert!(p.args.contains(&format!(
        "handler.image-mount.{id}=localhost/handler-addon-gh:latest"
    )));
    assert!(!p.args.join(" ").contains("type=image"));
    insta::assert_debug_snapshot!(p);
}

#[test]
fn docker_with_type_image_mounts_the_images_themselves_and_fills_no_volume() {
    let s = with(json!({
        "imageMounts": [{"image": "localhost/handler-addon-gh:latest", "target": "/opt/handler/addons/gh"}],
        "pathAppend": ["/opt/handler/addons/gh/bin"],
        "network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"}
    }));
    let d = DockerFacts {
        image_mounts: true,
        ..rootless()
    };
    let p = plan(&s, &facts(), &d).unwrap();
    let id = "a".repeat(64);
    assert!(p.image_volumes.is_empty(), "{:?}", p.image_volumes);
    let a = p.args.join(" ");
    assert!(
        a.contains(&format!(
            "type=image,source={id},destination=/opt/handler/addons/gh"
        )),
        "{a}"
    );
    assert!(!a.contains("type=volume"), "{a}");
    assert!(
        a.contains(&format!(
            "type=image,source=sha256:{},destination=/run/handler/filter",
            "f".repeat(64)
        )),
        "the forwarder comes from the filter image itself: {a}"
    );
    // A rootful daemon that takes type=image (opted in) mounts images too: no root-owned volume.
    let rootful = DockerFacts {
        rootless: false,
        allow_rootful: true,
        ..d.clone()
    };
    assert!(
        plan(&s, &facts(), &rootful)
            .unwrap()
            .image_volumes
            .is_empty()
    );
}

#[test]
fn docker_filtered_plan_mounts_the_forwarder_from_the_filter_images_volume() {
    let s = with(
        json!({"network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"}}),
    );
    let p = plan(&s, &facts(), &rootless()).unwrap();
    let at = p.args.iter().position(|a| a == "--network").unwrap();
    assert_eq!(p.args[at + 1], "none");
    assert_eq!(
        p.image_volumes[0].name,
        format!("handler-image-{}", "f".repeat(64))
    );
    let proxy = p.proxy.as_ref().unwrap().args.join(" ");
    assert!(
        proxy.contains("--network bridge --add-host host.docker.internal:10.0.2.2"),
        "{proxy}"
    );
    assert!(!proxy.contains("--ulimit host"), "{proxy}");
    insta::assert_debug_snapshot!(p);
    // Without the filter image: refused before anything starts, naming the verb that builds it.
    let d = DockerFacts {
        filter_image_id: None,
        ..rootless()
    };
    let e = plan(&s, &facts(), &d).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "network"));
    assert!(e.to_string().contains("image build-proxy"), "{e}");
}

#[test]
fn docker_open_network_is_the_bridge_with_the_hosts_loopback() {
    let p = plan(
        &with(json!({"network": {"mode": "open"}})),
        &facts(),
        &rootless(),
    )
    .unwrap();
    let a = p.args.join(" ");
    assert!(
        a.contains("--network bridge --add-host host.docker.internal:10.0.2.2 --add-host host.containers.internal:10.0.2.2"),
        "{a}"
    );
}

#[test]
fn docker_rootful_is_refused_unless_opted_in() {
    let d = DockerFacts {
        rootless: false,
        ..rootless()
    };
    let e = plan(&spec(base()), &facts(), &d).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "user.mode"));
    let d = DockerFacts {
        allow_rootful: true,
        ..d
    };
    let p = plan(&spec(base()), &facts(), &d).unwrap();
    let a = p.args.join(" ");
    assert!(a.contains("--user 1000:1000"), "{a}");
    assert!(
        a.contains("--tmpfs /home/agent:rw,exec,mode=700,uid=1000,gid=1000"),
        "{a}"
    );
}

#[test]
fn docker_refuses_nested_and_passes_the_oci_runtime_as_given() {
    let e = plan(
        &with(json!({"confinement": "nested"})),
        &facts(),
        &rootless(),
    )
    .unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "confinement"));
    let d = DockerFacts {
        oci_runtime: Some("runsc".into()),
        ..rootless()
    };
    let a = plan(&spec(base()), &facts(), &d).unwrap().args;
    let at = a.iter().position(|x| x == "--runtime").unwrap();
    assert_eq!(a[at + 1], "runsc");
    // No containers.conf rule on Docker: podman's file does not apply to it.
    let mut f = facts();
    f.containers_conf.settings.insert(
        "volumes".into(),
        ("/etc/containers/containers.conf".into(), json!(["/x:/x"])),
    );
    assert!(plan(&spec(base()), &f, &rootless()).is_ok());
    assert!(handler_sandbox::plan_launch(&validate_spec(&spec(base())).unwrap(), &f).is_err());
}
