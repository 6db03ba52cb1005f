//! Snapshot tests of the podman plan (argv, podman's environment names, staged files) and the
//! refusals (65 invalid with the field named, 64 unenforceable) as pure functions of spec + facts.

use std::collections::BTreeMap;

use handler_contracts::SandboxSpec;
use handler_sandbox::plan::nested_subids;
use handler_sandbox::{HostFacts, LaunchPlan, LauncherId, PathKind, SpecError, validate_spec};

/// The plan of `s` on a host with `f`: validated first, as the runtime does.
fn plan_launch(s: &SandboxSpec, f: &HostFacts) -> Result<LaunchPlan, SpecError> {
    handler_sandbox::plan_launch(&validate_spec(s)?, f)
}
use serde_json::json;

pub(crate) fn facts() -> HostFacts {
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
        git: Vec::new(),
        canonical_sources: BTreeMap::new(),
        nproc_hard: None,
        cgroup_pids: false,
        containers_conf: Default::default(),
        host_addresses: Vec::new(),
        exec_server: None,
    }
}

pub(crate) fn base() -> serde_json::Value {
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

pub(crate) fn spec(v: serde_json::Value) -> SandboxSpec {
    serde_json::from_value(v).expect("a valid SandboxSpec document")
}

pub(crate) fn with(patch: serde_json::Value) -> SandboxSpec {
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
        (json!({"image": "-x"}), "image"),
        (json!({"image": "--rootfs=/"}), "image"),
        (
            json!({"imageMounts": [{"image": "-x", "target": "/opt/addons/x"}]}),
            "imageMounts[0].image",
        ),
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

/// Issue 12, item 5: the plan holds the proxy's part too, and an injection's value is only in
/// the configuration the proxy reads on stdin: never in an argv, never in the plan's Debug.
#[test]
fn the_proxy_is_planned_with_its_staging_argv_and_configuration() {
    let mut f = facts();
    f.host_addresses = vec!["192.0.2.7".parse().unwrap()];
    let s = with(json!({
        "network": {"mode": "open"},
        "injections": [{"name": "k", "phantom": "phantom-012345678", "value": "secret-9876543210", "hosts": ["api.example.com:443"]}]
    }));
    let plan = plan_launch(&s, &f).unwrap();
    let p = plan.proxy.as_ref().expect("injections bring a proxy");
    assert_eq!(p.container, "handler-a1-c1-egress");
    assert_eq!(p.mode, handler_sandbox::egress::ProxyMode::Report);
    assert_eq!(p.config.host_addresses, f.host_addresses);
    assert_eq!(p.config.injections[0].value, "secret-9876543210");
    // open: no settings file; injections: the empty CA bundle the sandbox mounts.
    let staged = format!("{:?}", p.stage);
    assert!(!staged.contains("settings.json"), "{staged}");
    assert!(
        staged.contains("egress-ca/ca-bundle.pem, 644, 0 bytes"),
        "{staged}"
    );
    for text in [plan.args.join(" "), p.args.join(" "), format!("{plan:?}")] {
        assert!(!text.contains("secret-9876543210"), "{text}");
    }
    assert!(plan_launch(&spec(base()), &f).unwrap().proxy.is_none());
}

fn git_path(what: &str, path: &str, exists: bool) -> handler_sandbox::facts::GitPath {
    handler_sandbox::facts::GitPath {
        what: what.into(),
        path: path.into(),
        exists,
    }
}

/// The read-only mounts a plan adds (`ro=true` binds), in order.
fn read_only_binds(plan: &handler_sandbox::LaunchPlan) -> Vec<String> {
    plan.args
        .iter()
        .filter(|a| a.starts_with("type=bind") && a.ends_with(",ro=true"))
        .cloned()
        .collect()
}

/// Issue 11, item 5: a scope's git directory, and everything else the host's git takes from the
/// repository inside a writable mount (hooks, config, includes, a worktree's `.git` file), is
/// mounted read-only over itself; what lies outside every writable mount adds no mount (the
/// sandbox does not see it at all).
#[test]
fn a_writable_scopes_git_is_read_only() {
    use handler_sandbox::facts::{GitEntryKind, GitRepo};
    let mut f = facts();
    f.canonical_sources
        .insert("/home/alice/proj".into(), "/home/alice/proj".into());
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Dir,
        paths: vec![
            git_path("gitdir", "/home/alice/proj/.git", true),
            git_path("hooks", "/home/alice/proj/.git/hooks", true),
            git_path("config", "/home/alice/proj/.git/config", true),
            git_path("core.hooksPath", "/home/alice/proj/.husky", true),
            git_path("~/.gitconfig", "/home/alice/.gitconfig", true),
        ],
    }];
    let plan = plan_launch(&spec(base()), &f).unwrap();
    insta::assert_debug_snapshot!(read_only_binds(&plan), @r#"
    [
        "type=bind,source=/home/alice/proj/.git,destination=/home/alice/proj/.git,ro=true",
        "type=bind,source=/home/alice/proj/.husky,destination=/home/alice/proj/.husky,ro=true",
    ]
    "#);

    // A worktree: its `.git` file is read-only (else the sandbox points it at a git directory
    // of its making); its git and common directories elsewhere add nothing.
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::File,
        paths: vec![
            git_path("gitdir", "/home/alice/main/.git/worktrees/proj", true),
            git_path("commondir", "/home/alice/main/.git", true),
        ],
    }];
    let plan = plan_launch(&spec(base()), &f).unwrap();
    insta::assert_debug_snapshot!(read_only_binds(&plan), @r#"
    [
        "type=bind,source=/home/alice/proj/.git,destination=/home/alice/proj/.git,ro=true",
    ]
    "#);

    // A mount whose source is reached through a link is compared by its canonical path, and the
    // git paths appear at their place under its target.
    let s = with(json!({
        "mounts": [
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"},
            {"source": "/home/alice/.cache/handler-ai/cargo", "target": "/home/agent/.cargo", "readOnly": false, "kind": "cache"}
        ]
    }));
    f.canonical_sources.insert(
        "/home/alice/.cache/handler-ai/cargo".into(),
        "/data/cargo".into(),
    );
    f.git[0].paths = vec![git_path("include", "/data/cargo/git.cfg", true)];
    let plan = plan_launch(&s, &f).unwrap();
    assert_eq!(
        read_only_binds(&plan),
        vec![
            "type=bind,source=/data/cargo/git.cfg,destination=/home/agent/.cargo/git.cfg,ro=true",
            "type=bind,source=/home/alice/proj/.git,destination=/home/alice/proj/.git,ro=true",
        ]
    );
}

/// Decision 0169: a repository reached through two writable mounts — one folder mounted at two
/// places (a dev container's folder and an agent's scope), or a scope inside a writable folder mounted
/// elsewhere — is
/// read-only through each: guarding the innermost alone left `/outer/proj/.git/hooks`
/// writable. What git would read that does not exist yet is refused unless it is covered
/// through every way in.
#[test]
fn a_repository_mounted_writable_twice_is_read_only_through_both() {
    use handler_sandbox::facts::{GitEntryKind, GitRepo};
    let mut f = facts();
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Dir,
        paths: vec![
            git_path("gitdir", "/home/alice/proj/.git", true),
            git_path("hooks", "/home/alice/proj/.git/hooks", true),
        ],
    }];
    let twice = with(json!({
        "mounts": [
            {"source": "/home/alice/proj", "target": "/workspaces/proj", "readOnly": false, "kind": "state"},
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"}
        ]
    }));
    assert_eq!(
        read_only_binds(&plan_launch(&twice, &f).unwrap()),
        vec![
            "type=bind,source=/home/alice/proj/.git,destination=/home/alice/proj/.git,ro=true",
            "type=bind,source=/home/alice/proj/.git,destination=/workspaces/proj/.git,ro=true",
        ]
    );
    f.paths.insert(
        "/home/alice".into(),
        handler_sandbox::facts::PathKind::Directory,
    );
    let nested = with(json!({
        "mounts": [
            {"source": "/home/alice", "target": "/outer", "readOnly": false, "kind": "state"},
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"}
        ]
    }));
    assert_eq!(
        read_only_binds(&plan_launch(&nested, &f).unwrap()),
        vec![
            "type=bind,source=/home/alice/proj/.git,destination=/home/alice/proj/.git,ro=true",
            "type=bind,source=/home/alice/proj/.git,destination=/outer/proj/.git,ro=true",
        ]
    );
    // A hooks path that does not exist yet, outside `.git`: creatable through either mount.
    f.git[0]
        .paths
        .push(git_path("core.hooksPath", "/home/alice/proj/.husky", false));
    let e = plan_launch(&twice, &f).unwrap_err();
    assert!(e.to_string().contains(".husky"), "{e}");
}

/// Issue 14, item 5: `gitWritable` (an agent's `gitGuard = "open"`, confirmed) lifts decision
/// 0031: no read-only git mount, and a `.git` link is no refusal either.
#[test]
fn a_git_writable_spec_gets_no_read_only_git_mounts() {
    use handler_sandbox::facts::{GitEntryKind, GitRepo};
    let mut f = facts();
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Dir,
        paths: vec![
            git_path("gitdir", "/home/alice/proj/.git", true),
            git_path("core.hooksPath", "/home/alice/proj/.husky", true),
        ],
    }];
    let open = with(json!({"gitWritable": true}));
    assert_eq!(
        read_only_binds(&plan_launch(&open, &f).unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(
        read_only_binds(&plan_launch(&spec(base()), &f).unwrap()).len(),
        2
    );
    f.git[0].kind = GitEntryKind::Symlink;
    assert!(plan_launch(&open, &f).is_ok());
    assert!(plan_launch(&spec(base()), &f).is_err());
}

#[test]
fn a_git_the_sandbox_could_redirect_is_refused() {
    use handler_sandbox::facts::{GitEntryKind, GitRepo};
    let mut f = facts();
    // `.git` a link inside the scope: the sandbox could point it anywhere.
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Symlink,
        paths: vec![git_path("gitdir", "/home/alice/elsewhere", true)],
    }];
    let e = plan_launch(&spec(base()), &f).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "mounts[0].source"), "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A link above the scope (the sandbox cannot touch it) is followed: its target is guarded.
    f.git = vec![GitRepo {
        entry: "/home/alice/.git".into(),
        kind: GitEntryKind::Symlink,
        paths: vec![git_path("gitdir", "/home/alice/proj/.realgit", true)],
    }];
    let plan = plan_launch(&spec(base()), &f).unwrap();
    assert_eq!(
        read_only_binds(&plan),
        vec![
            "type=bind,source=/home/alice/proj/.realgit,destination=/home/alice/proj/.realgit,ro=true"
        ]
    );
    // A path git would read that does not exist yet, where the sandbox could create it.
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Dir,
        paths: vec![
            git_path("gitdir", "/home/alice/proj/.git", true),
            git_path("core.hooksPath", "/home/alice/proj/hooks", false),
        ],
    }];
    let e = plan_launch(&spec(base()), &f).unwrap_err();
    assert_eq!(e.exit_code(), 64, "{e}");
    assert!(e.to_string().contains("/home/alice/proj/hooks"), "{e}");
    // A scope inside what git reads: its hooks folder.
    let mut g = f.clone();
    g.git[0].paths = vec![git_path("hooks", "/home/alice", true)];
    let e = plan_launch(&spec(base()), &g).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "mounts[0].source"), "{e}");
    // Missing inside a guarded folder (no hooks folder in .git) is fine.
    f.git[0].paths[1] = git_path("hooks", "/home/alice/proj/.git/hooks", false);
    assert!(plan_launch(&spec(base()), &f).is_ok());
    // A read-only scope needs nothing but itself.
    let ro = with(json!({"mounts": [
        {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": true, "kind": "scope"}
    ]}));
    f.git[0].kind = GitEntryKind::Symlink;
    assert_eq!(
        read_only_binds(&plan_launch(&ro, &f).unwrap()),
        vec!["type=bind,source=/home/alice/proj,destination=/home/alice/proj,ro=true"]
    );
}

/// A2 whatever containers.conf says: a `[containers]` setting that adds to what a container sees
/// refuses the launch (64) naming the file and the key; the distribution's defaults, the test
/// user's engine settings and what the plan overrides pass.
#[test]
fn containers_conf_that_adds_to_a_container_is_refused() {
    let set = |k: &str, v: serde_json::Value| {
        let mut f = facts();
        f.containers_conf.settings.insert(
            k.into(),
            ("/home/alice/.config/containers/containers.conf".into(), v),
        );
        f
    };
    for (k, v) in [
        ("volumes", json!(["/home/alice/.ssh:/ssh"])),
        ("devices", json!(["/dev/kvm"])),
        ("env", json!(["AWS_SECRET=x"])),
        ("mounts", json!(["type=bind,src=/etc,dst=/h"])),
        ("env_host", json!(true)),
        ("pidns", json!("host")),
        ("default_capabilities", json!(["SYS_ADMIN"])),
        ("label", json!(false)),
    ] {
        let e = plan_launch(&spec(base()), &set(k, v.clone())).unwrap_err();
        assert_eq!((e.exit_code(), e.field()), (64, "containers.conf"), "{k}");
        let m = e.to_string();
        assert!(
            m.contains("[containers] ") && m.contains(k) && m.contains("containers.conf:"),
            "{m}"
        );
        assert!(!m.contains("AWS_SECRET=x"), "{m}");
    }
    for (k, v) in [
        ("volumes", json!([])),
        ("env_host", json!(false)),
        (
            "default_capabilities",
            json!(["CHOWN", "CAP_KILL", "SETUID"]),
        ),
        ("default_sysctls", json!(["net.ipv4.ping_group_range=0 0"])),
        ("userns", json!("host")),
        ("log_driver", json!("k8s-file")),
    ] {
        plan_launch(&spec(base()), &set(k, v)).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    let mut f = facts();
    f.containers_conf.unreadable = Some("/etc/containers/containers.conf: bad".into());
    let e = plan_launch(&spec(base()), &f).unwrap_err();
    assert_eq!((e.exit_code(), e.field()), (64, "containers.conf"));
}

/// A process limit always (RLIMIT_NPROC, which rootless podman on cgroups v1 still applies),
/// `--pids-limit` too where cgroups v2 delegates the pids controller; never above the
/// launcher's own hard limit.
#[test]
fn the_sandbox_has_a_process_limit() {
    let a = plan_launch(&spec(base()), &facts()).unwrap().args.join(" ");
    assert!(a.contains("--ulimit nproc=4096:4096"), "{a}");
    assert!(
        !a.contains("--pids-limit") && !a.contains("--ulimit host"),
        "{a}"
    );
    let mut f = facts();
    f.cgroup_pids = true;
    f.nproc_hard = Some(1000);
    let a = plan_launch(&spec(base()), &f).unwrap().args.join(" ");
    assert!(
        a.contains("--ulimit nproc=1000:1000") && a.contains("--pids-limit 1000"),
        "{a}"
    );
}

/// Issue 14: under the git guard the session's own git directory lies over `<root>/.git`, so the
/// host's git directory is not in the sandbox at all: nothing of it is re-mounted read-only
/// (that would clash with the guard's mount), while a hooks path in the tree still is.
#[test]
fn a_guarded_scope_gets_no_read_only_mount_of_the_git_dir_it_no_longer_sees() {
    use handler_sandbox::facts::{GitEntryKind, GitRepo};
    let mut f = facts();
    f.canonical_sources
        .insert("/home/alice/proj".into(), "/home/alice/proj".into());
    f.paths
        .insert("/data/sessions/s1/git".into(), PathKind::Directory);
    f.paths
        .insert("/home/alice/proj/.git/objects".into(), PathKind::Directory);
    f.git = vec![GitRepo {
        entry: "/home/alice/proj/.git".into(),
        kind: GitEntryKind::Dir,
        paths: vec![
            git_path("gitdir", "/home/alice/proj/.git", true),
            git_path("hooks", "/home/alice/proj/.git/hooks", true),
            git_path("core.hooksPath", "/home/alice/proj/.husky", true),
        ],
    }];
    let s = with(json!({
        "mounts": [
            {"source": "/home/alice/proj", "target": "/home/alice/proj", "readOnly": false, "kind": "scope"},
            {"source": "/data/sessions/s1/git", "target": "/home/alice/proj/.git", "readOnly": false, "kind": "state"},
            {"source": "/home/alice/proj/.git/objects", "target": "/opt/handler/host-objects", "readOnly": true, "kind": "state"}
        ]
    }));
    let plan = plan_launch(&s, &f).unwrap();
    insta::assert_debug_snapshot!(read_only_binds(&plan), @r#"
    [
        "type=bind,source=/home/alice/proj/.git/objects,destination=/opt/handler/host-objects,ro=true",
        "type=bind,source=/home/alice/proj/.husky,destination=/home/alice/proj/.husky,ro=true",
    ]
    "#);
}
