//! The dev container's checks, its run arguments and its probe (decision 0161).

use super::*;
use crate::facts::PathKind;
use crate::plan::DockerFacts;
use crate::validate_spec;
use serde_json::json;

const FOLDER: &str = "/home/u/app";

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn key_of(v: Value, layout: Layout) -> String {
    match check(&obj(v), layout, FOLDER) {
        Err(DevcontainerError::Refused { key, .. }) => key,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn each_key_that_reaches_the_host_or_widens_the_container_is_refused_by_name() {
    let img = |extra: Value| {
        let mut m = obj(json!({"image": "localhost/base:1"}));
        m.extend(obj(extra));
        Value::Object(m)
    };
    for (extra, key) in [
        (
            json!({"initializeCommand": "touch /tmp/x"}),
            "initializeCommand",
        ),
        (json!({"privileged": true}), "privileged"),
        (json!({"capAdd": ["SYS_ADMIN"]}), "capAdd"),
        (
            json!({"securityOpt": ["seccomp=unconfined"]}),
            "securityOpt",
        ),
        (
            json!({"workspaceMount": "source=/,target=/w,type=bind"}),
            "workspaceMount",
        ),
        (json!({"appPort": [3000]}), "appPort"),
        (json!({"dockerComposeFile": "c.yml"}), "dockerComposeFile"),
        (json!({"somethingNew": 1}), "somethingNew"),
        (
            json!({"runArgs": ["--env", "A=1", "--network=host"]}),
            "runArgs[2]",
        ),
        (json!({"runArgs": ["--privileged"]}), "runArgs[0]"),
        (json!({"runArgs": ["-v", "/:/host"]}), "runArgs[0]"),
        (json!({"runArgs": ["--env"]}), "runArgs[0]"),
        (
            json!({"runArgs": ["--label", "ok=1", "-l", "handler.machine=other"]}),
            "runArgs[2]",
        ),
        (
            json!({"runArgs": ["--label=devcontainer.local_folder=/x"]}),
            "runArgs[0]",
        ),
        (
            json!({"mounts": ["type=volume,source=v,target=/v", "source=/home/u/.ssh,target=/s,type=bind"]}),
            "mounts[1]",
        ),
        (
            json!({"mounts": [{"type": "bind", "source": "/etc", "target": "/e"}]}),
            "mounts[0]",
        ),
        (
            json!({"mounts": ["type=volume,source=x,target=/x,volume-opt=device=/etc"]}),
            "mounts[0]",
        ),
        (
            json!({"mounts": ["type=volume,source=handler-filter-abc,target=/f"]}),
            "mounts[0]",
        ),
        (
            json!({"containerEnv": {"K": "${localEnv:ANTHROPIC_API_KEY}"}}),
            "containerEnv.K",
        ),
        (
            json!({"remoteEnv": {"P": "${localEnv:PATH}"}}),
            "remoteEnv.P",
        ),
        (
            json!({"features": {"../../escape": {}}}),
            "features.../../escape",
        ),
    ] {
        assert_eq!(key_of(img(extra.clone()), Layout::Folder), key, "{extra}");
    }
}

#[test]
fn a_builds_own_ways_out_are_refused_by_name() {
    for (build, key) in [
        (
            json!({"dockerfile": "../../Dockerfile"}),
            "build.dockerfile",
        ),
        (
            json!({"dockerfile": "Dockerfile", "context": "../.."}),
            "build.context",
        ),
        (
            json!({"dockerfile": "Dockerfile", "options": ["--volume=/:/h"]}),
            "build.options",
        ),
        (json!({"context": ".."}), "build.dockerfile"),
    ] {
        assert_eq!(
            key_of(json!({ "build": build }), Layout::Folder),
            key,
            "{build}"
        );
    }
    // A file at the folder's root brings no other file.
    assert_eq!(
        key_of(json!({"build": {"dockerfile": "Dockerfile"}}), Layout::Root),
        "build.dockerfile"
    );
    assert_eq!(
        key_of(json!({"image": "i", "features": {"./f": {}}}), Layout::Root),
        "features../f"
    );
    assert_eq!(key_of(json!({"name": "no image"}), Layout::Folder), "image");
}

#[test]
fn what_only_shapes_the_container_is_kept_and_the_build_context_made_absolute() {
    let file = json!({
        "name": "app",
        "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}},
        "features": {"./local-feature": {"x": true}, "ghcr.io/devcontainers/features/node:1": {}},
        "containerEnv": {"CE": "1"},
        "remoteEnv": {"PATH": "${containerEnv:PATH}:/x", "W": "${localWorkspaceFolder}/${localWorkspaceFolderBasename}"},
        "remoteUser": "vscode",
        "runArgs": ["--env", "A=1", "--label=x=y", "--hostname", "box"],
        "mounts": ["source=app-cache,target=/cache,type=volume", {"type": "tmpfs", "target": "/t"}],
        "privileged": false,
        "capAdd": [],
        "postCreateCommand": "npm ci",
    });
    let out = check(&obj(file), Layout::Folder, FOLDER).unwrap();
    assert_eq!(out["build"]["context"], "/home/u/app");
    assert_eq!(out["build"]["dockerfile"], "Dockerfile");
    assert!(!out.contains_key("privileged") && !out.contains_key("capAdd"));
    assert_eq!(out["postCreateCommand"], "npm ci");
    // The folder is written out: the CLI would fill in its staged copy's.
    assert_eq!(out["remoteEnv"]["W"], "/home/u/app/app");
    // No context: the file's folder, absolute.
    let out = check(
        &obj(json!({"build": {"dockerfile": "Dockerfile"}})),
        Layout::Folder,
        FOLDER,
    )
    .unwrap();
    assert_eq!(out["build"]["context"], "/home/u/app/.devcontainer");
}

#[test]
fn the_file_reads_with_comments_and_trailing_commas() {
    let m = parse("f", "// c\n{ /* x */ \"image\": \"a\", }\n").unwrap();
    assert_eq!(m["image"], "a");
    assert!(matches!(
        parse("f", "[1]"),
        Err(DevcontainerError::Parse { .. })
    ));
    assert!(matches!(
        parse("f", "{\"image\": "),
        Err(DevcontainerError::Parse { .. })
    ));
}

fn facts() -> HostFacts {
    HostFacts {
        uid: 1000,
        gid: 1000,
        subuid_count: None,
        subgid_count: None,
        has_fuse: false,
        has_tun: false,
        cgroup_memory: false,
        cgroup_cpu: false,
        paths: [(FOLDER.to_string(), PathKind::Directory)]
            .into_iter()
            .collect(),
        image_path: None,
        image_ids: Default::default(),
        instance_dir: "/d/handler-sandbox/machines/handler-m-dev".into(),
        launcher: crate::LauncherId {
            pid: 1,
            start: 2,
            boot: "b".into(),
        },
        git: Vec::new(),
        canonical_sources: Default::default(),
        nproc_hard: Some(2048),
        cgroup_pids: true,
        containers_conf: Default::default(),
        host_addresses: Vec::new(),
        exec_server: None,
    }
}

fn spec(network: &str) -> SandboxSpec {
    serde_json::from_value(json!({
        "apiVersion": "handler.sandbox/v1",
        "name": "handler-m-dev",
        "image": "devcontainer",
        "argv": ["sh"],
        "env": {},
        "workdir": "/workspaces/app",
        "user": {"mode": "host-user", "home": "/home/handler"},
        "mounts": [{"source": FOLDER, "target": "/workspaces/app", "readOnly": false, "kind": "state"}],
        "files": [],
        "writablePaths": [],
        "network": {"mode": network},
        "labels": {"handler.machine.made-by": "handlerd"},
    }))
    .unwrap()
}

#[test]
fn handlers_run_arguments_on_each_engine() {
    let s = spec("none");
    let v = validate_spec(&s).unwrap();
    let podman = plan_up(Engine::Podman, &v, &facts()).unwrap().run_args;
    let d = DockerFacts {
        rootless: true,
        ..DockerFacts::default()
    };
    let s_open = spec("open");
    let v_open = validate_spec(&s_open).unwrap();
    let docker = plan_up(Engine::Docker(&d), &v_open, &facts())
        .unwrap()
        .run_args;
    insta::assert_debug_snapshot!((&podman, &docker));
    for a in [&podman, &docker] {
        let line = a.join(" ");
        assert!(
            line.contains("--cap-drop all --security-opt no-new-privileges"),
            "{line}"
        );
        assert!(line.contains("--name handler-m-dev --init"), "{line}");
    }
    assert!(podman.join(" ").contains("--network none"), "{podman:?}");
}

/// Filtered: no route, the proxy's variables, the forwarder as the entrypoint of Handler's own
/// feature (the container ends, 66, when its proxy never answers), the machine's kept proxy.
#[test]
fn a_filtered_dev_container_gets_the_forwarder_and_its_machines_own_proxy() {
    let mut filtered = spec("none");
    filtered.network = NetworkPolicy::Filtered {
        allow: serde_json::from_value(json!(["api.example.com:443"])).unwrap(),
        enforcement: handler_contracts::sandbox::Enforcement::Enforce,
    };
    let v = validate_spec(&filtered).unwrap();
    let up = plan_up(Engine::Podman, &v, &facts()).unwrap();
    let line = up.run_args.join(" ");
    assert!(line.contains("--network none"), "{line}");
    assert!(
        line.contains("--env HTTPS_PROXY=http://127.0.0.1:"),
        "{line}"
    );
    let entry = up.egress_entrypoint.clone().unwrap();
    assert!(
        entry.contains(" shim --listen 127.0.0.1:") && entry.ends_with(" -- true || exit 66"),
        "{entry}"
    );
    assert!(
        up.own_mounts()
            .iter()
            .any(|(s, d)| s == "localhost/handler-network-filter:latest"
                && d.starts_with("/run/handler")),
        "{:?}",
        up.own_mounts()
    );
    let proxy = up.proxy.as_ref().expect("the machine's own proxy");
    assert!(
        proxy.args.join(" ").contains("handler-m-dev-egress"),
        "{:?}",
        proxy.args
    );
    let (json, install) = egress_feature(&entry);
    let j: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["entrypoint"], entry.as_str());
    assert!(install.starts_with("#!/bin/sh"));
    let o = override_config(
        &obj(json!({"image": "i", "features": {"./f": {}}})),
        FOLDER,
        &up,
    );
    assert_eq!(
        o["features"],
        json!({"./f": {}, "./handler-egress": {}}),
        "Handler's feature beside the file's"
    );
}

#[test]
fn the_override_mounts_the_folder_itself_and_puts_handlers_arguments_last() {
    let checked = obj(json!({"image": "i", "runArgs": ["--env", "A=1"]}));
    let up = UpPlan {
        run_args: vec!["--cap-drop".into(), "all".into()],
        egress_entrypoint: None,
        proxy: None,
        image_volumes: Vec::new(),
        stage: Vec::new(),
    };
    let o = override_config(&checked, FOLDER, &up);
    assert!(!o.contains_key("features"));
    assert_eq!(
        o["workspaceMount"],
        "type=bind,source=/home/u/app,target=/workspaces/app"
    );
    assert_eq!(o["workspaceFolder"], "/workspaces/app");
    assert_eq!(o["runArgs"], json!(["--env", "A=1", "--cap-drop", "all"]));
    let l = labels(&spec("none"), "dev", FOLDER);
    let argv = up_argv("/d/machines/dev/devcontainer", "podman", &l);
    insta::assert_debug_snapshot!(argv);
    // A value with a comma (two parts, two agents) is no id label: Podman's `ps --filter` splits
    // at commas. It is a run argument instead.
    let mut two = spec("none");
    two.labels.insert(
        "handler.parts".into(),
        "fakeh@fakeh 1.0,greet@greet 1.0".into(),
    );
    let l = labels(&two, "dev", FOLDER);
    assert!(!l.contains_key("handler.parts"), "{l:?}");
    assert!(l.contains_key(MACHINE_LABEL));
    let v = validate_spec(&two).unwrap();
    let run = plan_up(Engine::Podman, &v, &facts()).unwrap().run_args;
    assert!(
        run.windows(2)
            .any(|w| w[0] == "--label" && w[1] == "handler.parts=fakeh@fakeh 1.0,greet@greet 1.0"),
        "{run:?}"
    );
}

#[test]
fn what_the_engine_made_is_judged_again() {
    let ok = json!({
        "HostConfig": {"Privileged": false, "CapAdd": null, "SecurityOpt": ["no-new-privileges", "label=disable"],
            "NetworkMode": "none", "Devices": []},
        "Mounts": [
            {"Type": "bind", "Source": FOLDER, "Destination": "/workspaces/app"},
            {"Type": "bind", "Source": "/home/u/app/.git", "Destination": "/workspaces/app/.git"},
            {"Type": "volume", "Name": "app-cache", "Source": "/v", "Destination": "/cache"},
        ],
    });
    assert_eq!(post_check(&ok, FOLDER, &NetworkPolicy::None, &[]), Ok(()));
    let with = |path: &[&str], v: Value| {
        let mut x = ok.clone();
        let mut at = &mut x;
        for p in path {
            at = &mut at[*p];
        }
        *at = v;
        x
    };
    for (bad, what) in [
        (
            with(&["HostConfig", "Privileged"], json!(true)),
            "privileged",
        ),
        (
            with(&["HostConfig", "CapAdd"], json!(["SYS_ADMIN"])),
            "capabilities",
        ),
        (
            with(
                &["HostConfig", "SecurityOpt"],
                json!(["seccomp=unconfined"]),
            ),
            "security option",
        ),
        (with(&["HostConfig", "PidMode"], json!("host")), "PidMode"),
        (
            with(&["HostConfig", "NetworkMode"], json!("slirp4netns")),
            "network",
        ),
        (
            with(
                &["HostConfig", "Devices"],
                json!([{"PathOnHost": "/dev/kvm"}]),
            ),
            "devices",
        ),
        (
            with(
                &["Mounts"],
                json!([{"Type": "bind", "Source": "/home/u/app-other", "Destination": "/x"}]),
            ),
            "mounts bind",
        ),
        (
            with(
                &["Mounts"],
                json!([{"Type": "volume", "Name": "handler-filter-1", "Destination": "/x"}]),
            ),
            "mounts volume",
        ),
    ] {
        let e = post_check(&bad, FOLDER, &NetworkPolicy::None, &[]).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
}

/// Handler's own mounts (the filter, the proxy's socket) are accepted where it put them.
#[test]
fn handlers_own_mounts_are_accepted_at_their_destinations_only() {
    let ok = json!({
        "HostConfig": {"Privileged": false, "NetworkMode": "none"},
        "Mounts": [],
    });
    let with = |path: &[&str], v: Value| {
        let mut x = ok.clone();
        let mut at = &mut x;
        for p in path {
            at = &mut at[*p];
        }
        *at = v;
        x
    };
    let filter = with(
        &["Mounts"],
        json!([{"Type": "image", "Source": "localhost/handler-network-filter:latest", "Destination": "/run/handler/filter"}]),
    );
    let own = [(
        "localhost/handler-network-filter:latest".to_string(),
        "/run/handler/filter".to_string(),
    )];
    assert_eq!(
        post_check(&filter, FOLDER, &NetworkPolicy::None, &own),
        Ok(())
    );
    assert!(post_check(&filter, FOLDER, &NetworkPolicy::None, &[]).is_err());
    let elsewhere = with(
        &["Mounts"],
        json!([{"Type": "bind", "Source": "/etc", "Destination": "/run/other"}]),
    );
    assert!(post_check(&elsewhere, FOLDER, &NetworkPolicy::None, &own).is_err());
    let host = with(&["HostConfig", "NetworkMode"], json!("host"));
    assert!(post_check(&host, FOLDER, &NetworkPolicy::Open, &own).is_err());
}

#[test]
fn each_exec_gets_the_login_shells_variables_and_the_files_remote_env() {
    let environ =
        b"PATH=/usr/local/bin:/usr/bin\0HOME=/root\0PWD=/\0SHLVL=1\0NVM_DIR=/n\0CE=cont\0";
    let container = vec!["PATH=/usr/bin".to_string(), "CE=cont".to_string()];
    let meta = r#"[{"id":"./f"},{"remoteEnv":{"RE":"r","P2":"${containerEnv:PATH}:/x","GONE":null}},{"remoteEnv":{"NVM_DIR":null}}]"#;
    let env = probe_env(environ, &container, meta);
    assert_eq!(
        env,
        BTreeMap::from([
            ("P2".to_string(), "/usr/local/bin:/usr/bin:/x".to_string()),
            ("PATH".to_string(), "/usr/local/bin:/usr/bin".to_string()),
            ("RE".to_string(), "r".to_string()),
        ])
    );
    // A hostile value never loops the filling.
    let meta = r#"[{"remoteEnv":{"X":"${containerEnv:Y}${containerEnv:Y}"}}]"#;
    let env = probe_env(b"Y=${containerEnv:Y}\0", &[], meta);
    assert_eq!(env["X"], "${containerEnv:Y}${containerEnv:Y}");
    assert_eq!(
        parse_up("log\n{\"outcome\":\"error\",\"message\":\"m\",\"description\":\"d\"}"),
        Err("m: d".into())
    );
    let up = parse_up("{\"outcome\":\"success\",\"containerId\":\"c1\",\"remoteUser\":\"vscode\",\"remoteWorkspaceFolder\":\"/workspaces/app\"}").unwrap();
    assert_eq!(
        (up.container_id.as_str(), up.remote_user.as_str()),
        ("c1", "vscode")
    );
}

#[test]
fn the_engine_the_cli_is_given_replays_events_from_the_start_of_up() {
    let s = engine_script("/usr/bin/pod'man", 1_796_539_222);
    assert_eq!(
        s,
        "#!/bin/sh\n# Handler's engine for the Dev Container CLI (decision 0161).\nif [ \"$1\" = events ]; then exec '/usr/bin/pod'\\''man' \"$@\" --since 1796539222; fi\nexec '/usr/bin/pod'\\''man' \"$@\"\n"
    );
}

#[test]
fn a_container_made_by_hand_is_reached_as_its_files_user_where_the_folder_is_mounted() {
    let c = json!({
        "Config": {"User": "1000", "Labels": {"devcontainer.metadata": r#"[{"remoteUser":"node"},{"remoteUser":"vscode"}]"#}},
        "Mounts": [{"Type": "bind", "Source": FOLDER, "Destination": "/workspaces/mine"}],
    });
    assert_eq!(
        adopted_user_and_folder(&c, FOLDER),
        ("vscode".to_string(), "/workspaces/mine".to_string())
    );
    let bare = json!({"Config": {"User": ""}, "Mounts": []});
    assert_eq!(
        adopted_user_and_folder(&bare, FOLDER),
        ("root".to_string(), "/workspaces/app".to_string())
    );
}

#[test]
fn the_parts_bin_folders_go_before_the_path_each_exec_is_given() {
    let parts = ["/opt/handler/parts/node/bin".to_string()];
    let container = ["PATH=/usr/bin:/bin".to_string()];
    let probed = BTreeMap::from([(
        "PATH".to_string(),
        "/home/v/.local/bin:/usr/bin".to_string(),
    )]);
    assert_eq!(
        parts_path(probed.clone(), &container, &parts)["PATH"],
        "/opt/handler/parts/node/bin:/home/v/.local/bin:/usr/bin",
        "the login shell's PATH when it differs from the container's"
    );
    assert_eq!(
        parts_path(BTreeMap::new(), &container, &parts)["PATH"],
        "/opt/handler/parts/node/bin:/usr/bin:/bin",
        "else the container's own"
    );
    assert_eq!(
        parts_path(BTreeMap::new(), &[], &parts)["PATH"],
        format!("/opt/handler/parts/node/bin:{}", crate::plan::DEFAULT_PATH)
    );
    assert_eq!(
        parts_path(probed.clone(), &container, &[]),
        probed,
        "no parts: as it is"
    );
}

/// Decision 0169: a dev container made for an agent gets the agent's sandbox mounts beside its
/// folder — its scope at its own path (its git directory read-only there and under the
/// folder's mount both), its state slot, its home (a staged folder holding its state's place)
/// and its staged files read-only — and nothing of them before the folder, which the CLI
/// mounts. Without agents, nothing of the kind.
#[test]
fn a_dev_container_made_for_an_agent_has_its_sandboxes_mounts() {
    use crate::facts::{GitEntryKind, GitPath, GitRepo};
    let base = spec("none");
    let agent: SandboxSpec = serde_json::from_value(json!({
        "apiVersion": "handler.sandbox/v1",
        "name": "h-a_one-s_1",
        "image": "localhost/handler-fake:latest",
        "argv": ["fake-acp-agent"],
        "env": {"FAKE_HOME": "/home/agent/.fake"},
        "workdir": FOLDER,
        "user": {"mode": "host-user", "home": "/home/agent"},
        "mounts": [
            {"source": FOLDER, "target": FOLDER, "readOnly": false, "kind": "scope"},
            {"source": "/d/slots/fake", "target": "/home/agent/.fake", "readOnly": false, "kind": "state"},
        ],
        "files": [{"target": "/home/agent/.fake/config.toml", "content": "x = 1\n"}],
        "writablePaths": ["/tmp"],
        "network": {"mode": "none"},
        "labels": {},
    }))
    .unwrap();
    let machine = crate::machine::session::for_agents(
        &crate::machine::session::MachineBase {
            id: "dev".into(),
            image: Some("devcontainer".into()),
            argv: vec!["sh".into()],
            workdir: "/workspaces/app".into(),
            work: FOLDER.into(),
            network: NetworkPolicy::None,
            resources: None,
            labels: base.labels.clone(),
        },
        &[("a_one", &agent)],
    )
    .unwrap();
    let mut f = facts();
    f.paths.insert("/d/slots/fake".into(), PathKind::Directory);
    f.git = vec![GitRepo {
        entry: format!("{FOLDER}/.git"),
        kind: GitEntryKind::Dir,
        paths: vec![GitPath {
            what: "gitdir".into(),
            path: format!("{FOLDER}/.git"),
            exists: true,
        }],
    }];
    let v = validate_spec(&machine).unwrap();
    let up = plan_up(Engine::Podman, &v, &f).unwrap();
    let from = up
        .run_args
        .iter()
        .position(|a| a == "--pids-limit")
        .unwrap()
        + 2;
    insta::assert_debug_snapshot!((&up.run_args[from..], &up.stage));
    let own: Vec<String> = up.own_mounts().into_iter().map(|(_, d)| d).collect();
    assert!(
        own.contains(&format!("{FOLDER}/.git")) && own.contains(&"/workspaces/app/.git".into()),
        "{own:?}"
    );
    assert!(!own.contains(&"/workspaces/app".to_string()), "{own:?}");
    let none = validate_spec(&base).unwrap();
    assert!(plan_up(Engine::Podman, &none, &f).unwrap().stage.is_empty());
}
