//! Snapshot tests of the podman plan (argv, podman's environment names, staged files) and the
//! refusals (65 invalid with the field named, 64 unenforceable) as pure functions of spec + facts.

use std::collections::BTreeMap;

use handler_contracts::SandboxSpec;
use handler_sandbox::plan::nested_subids;
use handler_sandbox::{HostFacts, LauncherId, PathKind, SpecError, plan_launch};
use serde_json::json;

fn facts() -> HostFacts {
    let mut paths = BTreeMap::new();
    paths.insert("/home/alice/proj".to_string(), PathKind::Directory);
    paths.insert(
        "/home/alice/.cache/handler-ai/cargo".to_string(),
        PathKind::Directory,
    );
    paths.insert(
        "/home/alice/.local/state/handler-ai/agents/a1/vibe-session".to_string(),
        PathKind::Directory,
    );
    paths.insert("/run/user/1000/wayland-1".to_string(), PathKind::Socket);
    paths.insert("/run/user/1000/not-a-socket".to_string(), PathKind::File);
    let mut image_ids = BTreeMap::new();
    image_ids.insert(
        "localhost/handler-addon-gh:latest".to_string(),
        "a".repeat(64),
    );
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
        image_ids,
        instance_dir: "/run/user/1000/handler-sandbox/handler-a1-c1".into(),
        launcher: LauncherId {
            pid: 4242,
            start: 987654,
            boot: "b00t".into(),
        },
    }
}

fn base() -> serde_json::Value {
    json!({
        "apiVersion": "handler.sandbox/v1",
        "name": "handler-a1-c1",
        "image": "localhost/handler-vibe:latest",
        "argv": ["vibe-acp"],
        "env": {"MISTRAL_API_KEY": "sk-secret-value-123", "XDG_CONFIG_HOME": "/home/agent/.config"},
        "workdir": "/home/alice/proj",
        "user": {"mode": "host-user", "home": "/home/agent"},
        "mounts": [
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"}
        ],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"},
        "labels": {"handler.agent": "a1"}
    })
}

fn spec(v: serde_json::Value) -> SandboxSpec {
    serde_json::from_value(v).expect("a valid SandboxSpec document")
}

fn with(patch: serde_json::Value) -> SandboxSpec {
    let mut v = base();
    for (k, x) in patch.as_object().unwrap() {
        v[k] = x.clone();
    }
    spec(v)
}

fn err(s: &SandboxSpec) -> SpecError {
    plan_launch(s, &facts()).expect_err("refused")
}

#[test]
fn strict_none_plan() {
    let plan = plan_launch(&spec(base()), &facts()).unwrap();
    insta::assert_debug_snapshot!(plan);
}

#[test]
fn secrets_reach_podman_by_name_only() {
    let plan = plan_launch(&spec(base()), &facts()).unwrap();
    assert!(
        plan.args.iter().all(|a| !a.contains("sk-secret-value-123")),
        "a secret in argv: {:?}",
        plan.args
    );
    assert_eq!(
        plan.podman_env.get("MISTRAL_API_KEY").map(String::as_str),
        Some("sk-secret-value-123")
    );
    let i = plan
        .args
        .iter()
        .position(|a| a == "MISTRAL_API_KEY")
        .unwrap();
    assert_eq!(plan.args[i - 1], "--env");
    // A name podman reads itself goes through the instance's env file, not podman's env.
    assert!(!plan.podman_env.contains_key("XDG_CONFIG_HOME"));
    assert!(plan.args.iter().any(|a| a == "--env-file"));
}

#[test]
fn full_plan_with_files_seeds_writable_paths_image_mounts_resources() {
    let s = with(json!({
        "mounts": [
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"},
            {"source": "/home/alice/.cache/handler-ai/cargo", "target": "/home/agent/.cargo", "readOnly": false, "kind": "cache"},
            {"source": "/home/alice/.local/state/handler-ai/agents/a1/vibe-session", "target": "/home/agent/.vibe/logs/session", "readOnly": false, "kind": "state"}
        ],
        "imageMounts": [{"image": "localhost/handler-addon-gh:latest", "target": "/opt/handler/addons/gh"}],
        "pathAppend": ["/opt/handler/addons/gh/bin"],
        "files": [
            {"target": "/home/agent/.vibe/config.toml", "content": "model = 'x'\n", "seed": true},
            {"target": "/etc/handler/policy.json", "content": "{}", "mode": "0600"}
        ],
        "writablePaths": ["/var/cache/agent"],
        "resources": {"memory": "2g", "cpus": "1.5"},
        "tty": true
    }));
    let plan = plan_launch(&s, &facts()).unwrap();
    insta::assert_debug_snapshot!(plan);
}

#[test]
fn open_network_reaches_the_hosts_loopback() {
    let plan = plan_launch(&with(json!({"network": {"mode": "open"}})), &facts()).unwrap();
    let a = plan.args.join(" ");
    assert!(
        a.contains("--network slirp4netns:allow_host_loopback=true"),
        "{a}"
    );
    assert!(
        a.contains("--add-host host.containers.internal:10.0.2.2"),
        "{a}"
    );
}

#[test]
fn nested_and_privileged() {
    let plan = plan_launch(&with(json!({"confinement": "nested"})), &facts()).unwrap();
    insta::assert_debug_snapshot!("nested", plan.args);
    let a = plan.args.join(" ");
    assert!(!a.contains("--cap-drop") && !a.contains("no-new-privileges"));
    assert!(a.contains("--device /dev/fuse") && a.contains("--device /dev/net/tun"));
    let plan = plan_launch(&with(json!({"confinement": "privileged"})), &facts()).unwrap();
    assert!(plan.args.iter().any(|a| a == "--privileged"));
    assert!(plan.args.iter().any(|a| a == "--userns=keep-id"));
}

#[test]
fn nested_subordinate_ids_leave_out_the_agents_own() {
    assert_eq!(nested_subids(1000, 65536), "1000:1:999\n1000:1001:64536\n");
    assert_eq!(nested_subids(1, 65536), "1:2:65535\n");
}

#[test]
fn nested_refused_without_fuse_or_tun() {
    let s = with(json!({"confinement": "nested"}));
    for (fuse, tun) in [(false, true), (true, false)] {
        let mut f = facts();
        f.has_fuse = fuse;
        f.has_tun = tun;
        let e = plan_launch(&s, &f).unwrap_err();
        assert_eq!(e.exit_code(), 64, "{e}");
        assert_eq!(e.field(), "confinement");
    }
}

#[test]
fn display_gives_only_its_socket() {
    let s = with(json!({"display": {"mode": "wayland", "socket": "/run/user/1000/wayland-1"}}));
    let plan = plan_launch(&s, &facts()).unwrap();
    let a = plan.args.join(" ");
    assert!(
        a.contains(
            "type=bind,source=/run/user/1000/wayland-1,destination=/run/user/1000/wayland-0"
        ),
        "{a}"
    );
    assert!(
        a.contains("--env WAYLAND_DISPLAY=wayland-0")
            && a.contains("--env XDG_RUNTIME_DIR=/run/user/1000")
    );
    assert!(a.contains("--unsetenv DISPLAY"));
    let none = plan_launch(&spec(base()), &facts()).unwrap().args.join(" ");
    for v in ["DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR"] {
        assert!(none.contains(&format!("--unsetenv {v}")), "{none}");
    }
    for socket in ["/run/user/1000/missing", "/run/user/1000/not-a-socket"] {
        let e = err(&with(
            json!({"display": {"mode": "wayland", "socket": socket}}),
        ));
        assert_eq!((e.exit_code(), e.field()), (64, "display.socket"), "{e}");
    }
}

#[test]
fn root_is_refused() {
    let mut f = facts();
    f.uid = 0;
    let e = plan_launch(&spec(base()), &f).unwrap_err();
    assert_eq!(e.exit_code(), 64);
}

#[test]
fn resources_refused_where_rootless_podman_would_ignore_them() {
    let mut f = facts();
    f.cgroup_memory = false;
    let e = plan_launch(&with(json!({"resources": {"memory": "1g"}})), &f).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "resources.memory"));
}

#[test]
fn invalid_specs_name_the_field() {
    let cases = [
        (json!({"name": "bad name"}), "name"),
        (json!({"argv": []}), "argv"),
        (json!({"workdir": "rel/dir"}), "workdir"),
        (
            json!({"user": {"mode": "host-user", "home": "/home/../etc"}}),
            "user.home",
        ),
        (json!({"env": {"HOME": "/root"}}), "env.HOME"),
        (json!({"env": {"DISPLAY": ":0"}}), "env.DISPLAY"),
        (json!({"env": {"1BAD": "x"}}), "env.1BAD"),
        (
            json!({"pathAppend": ["/opt/x"], "env": {"PATH": "/bin"}}),
            "env.PATH",
        ),
        (
            json!({"mounts": [{"source": "/home/alice/proj", "target": "/work", "readOnly": false, "kind": "scope"}]}),
            "mounts[0].target",
        ),
        (
            json!({"mounts": [{"source": "relative", "target": "/x", "readOnly": true, "kind": "cache"}]}),
            "mounts[0].source",
        ),
        (
            json!({"mounts": [{"source": "/home/alice/nope", "target": "/x", "readOnly": true, "kind": "cache"}]}),
            "mounts[0].source",
        ),
        (
            json!({"mounts": [{"source": "/home/alice/proj", "target": "/k", "readOnly": false, "kind": "knowledge"}]}),
            "mounts[0].readOnly",
        ),
        (json!({"writablePaths": ["/"]}), "writablePaths[0]"),
        (
            json!({"files": [{"target": "/etc/x", "content": "", "mode": "rwx"}]}),
            "files[0].mode",
        ),
        (
            json!({"files": [{"target": "/etc/x", "content": "", "seed": true}]}),
            "files[0].target",
        ),
        (json!({"resources": {"memory": "lots"}}), "resources.memory"),
        (
            json!({"labels": {"handler.launcher.pid": "1"}}),
            "labels.handler.launcher.pid",
        ),
        (
            json!({"injections": [{"name": "k", "phantom": "phantom12", "value": "secret12", "hosts": ["a.b:443"]}]}),
            "injections",
        ),
    ];
    for (patch, field) in cases {
        let e = err(&with(patch.clone()));
        assert_eq!((e.exit_code(), e.field()), (65, field), "{patch}: {e}");
    }
}

#[test]
fn filtered_plan_has_no_route_and_starts_through_the_forwarder() {
    let plan = plan_launch(
        &with(json!({"network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"}})),
        &facts(),
    )
    .unwrap();
    // `--network none`, the forwarder's image and socket folder, the process after `shim --`.
    let at = plan.args.iter().position(|a| a == "--network").unwrap();
    assert_eq!(plan.args[at + 1], "none");
    let dd = plan.args.iter().position(|a| a == "--").unwrap();
    assert_eq!(plan.args[dd - 5], "shim");
    assert_eq!(plan.args[dd + 1..], spec(base()).argv[..]);
    insta::assert_debug_snapshot!(plan);
}
