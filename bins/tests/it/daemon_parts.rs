//! Parts (issue 30 item 2, decision 0164) through handlerd as the test user, on real rootless
//! Podman and Docker (whose 20.10 takes no image mount: a part reaches the machine as a volume
//! filled from its image): harnesses' CLIs and Node built once per version into images of their own (FROM
//! scratch), mounted read-only into a busybox machine with their commands first on its PATH —
//! Node from a toolbox runs there, with no libc in the image; a part whose build fails left out
//! by name while the rest stand; a second machine takes the same images without a build; a
//! new version of a source makes a new tag; `handler part ls|build`, `machine show`.

use serde_json::{Value, json};

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

/// The toolbox with node and patchelf .ci/setup-podman.sh builds (none without node).
const NODE_TOOLBOX: &str = "localhost/handler-test-node";

/// Each test harness: its name, its source image's Containerfile lines after FROM, its part.
const HARNESSES: [(&str, &str, &str); 3] = [
    (
        "fakeh",
        "COPY fake-acp-agent /usr/local/bin/fake-acp-agent\n",
        "bin = [\"fake-acp-agent\"]\n",
    ),
    (
        "greet",
        "RUN mkdir -p /usr/local/bin && printf '#!/bin/sh\\necho \"greet: $(command -v fake-acp-agent)\"\\n' > /usr/local/bin/greet && chmod 755 /usr/local/bin/greet\n",
        "bin = [\"greet\"]\nrequires = [\"fakeh\"]\n",
    ),
    ("broken", "", "bin = [\"no-such-tool\"]\n"),
];

fn source_image(name: &str) -> String {
    format!("localhost/handler-test-part-src-{name}")
}

/// The daemon's engine: `docker` when it runs on Docker, else `podman`.
fn cli(d: &TempDaemon) -> &'static str {
    if d.env
        .iter()
        .any(|(k, v)| *k == "HANDLER_RUNTIME" && v == "docker")
    {
        "docker"
    } else {
        "podman"
    }
}

/// The daemon's engine's CLI as its user: whether it succeeded, what it printed.
fn engine(d: &TempDaemon, args: &[&str]) -> (bool, String) {
    d.engine_cli(cli(d), args, &[])
}

/// Harness `name`'s source image, built as the user at `version` (its
/// `/usr/share/handler/version`).
fn build_source(d: &TempDaemon, name: &str, version: &str) {
    let (_, lines, _) = HARNESSES.iter().find(|h| h.0 == name).unwrap();
    let ctx = d.root.join(format!("src-{name}"));
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::copy(
        &test_support::static_build::fakes().agent,
        ctx.join("fake-acp-agent"),
    )
    .unwrap();
    std::fs::write(
        ctx.join("Containerfile"),
        format!(
            "FROM {IMAGE}\n{lines}RUN mkdir -p /usr/share/handler && echo '{version}' > /usr/share/handler/version\n"
        ),
    )
    .unwrap();
    d.user.give(&ctx);
    let tag = format!("{}:latest", source_image(name));
    let (ok, out) = engine(
        d,
        &[
            "build",
            "-q",
            "-f",
            ctx.join("Containerfile").to_str().unwrap(),
            "-t",
            &tag,
            ctx.to_str().unwrap(),
        ],
    );
    assert!(ok, "building {tag}: {out}");
}

/// The builds of parts so far, by target.
async fn part_builds(d: &TempDaemon) -> Vec<String> {
    let (_, v) = d.call(reqwest::Method::GET, "/v1/builds", None).await;
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["target"].as_str())
        .filter(|t| t.starts_with("part:"))
        .map(String::from)
        .collect()
}

fn ids(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_are_built_once_mounted_read_only_left_out_by_name_and_bumped() {
    parts_on(None).await;
}

/// The same on the Docker runtime: the parts built by Docker, mounted as it takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_on_docker_are_built_once_mounted_read_only_left_out_by_name_and_bumped() {
    parts_on(Some("docker")).await;
}

async fn parts_on(runtime: Option<&str>) {
    let Some(u) = test_support::user::podman_user(IMAGE, "the parts tests") else {
        return;
    };
    let l = Layout::new(
        &format!("hdp-{}-{}", std::process::id(), runtime.unwrap_or("podman")),
        true,
    );
    l.fake_harness("");
    for (name, _, part) in HARNESSES {
        let dir = l.home.join("harnesses").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let descriptor = test_support::descriptor::sandbox_fake(
            name,
            &source_image(name),
            "\"fake-acp-agent\"",
            "api.fake.test:443",
        )
        .replace("name = \"fake\"", &format!("name = \"{name}\""));
        std::fs::write(
            dir.join("harness.toml"),
            format!("{descriptor}[part]\n{part}"),
        )
        .unwrap();
    }
    let d = l
        .spawn_on(
            u,
            &[
                (
                    "HANDLER_MACHINE_IMAGES",
                    "localhost/handler-test-busybox:*".to_string(),
                ),
                ("HANDLER_TOOLBOX_IMAGE", NODE_TOOLBOX.to_string()),
            ],
            runtime,
        )
        .await;
    for name in ["pbox", "pbox2", "pdev", "abox", "adev", "nobox"] {
        engine(&d, &["rm", "-f", &format!("handler-m-{name}")]);
    }
    for (name, _, _) in HARNESSES {
        build_source(&d, name, &format!("{name} 1.0"));
    }
    let node = engine(&d, &["image", "inspect", NODE_TOOLBOX]).0;
    if !node {
        eprintln!(
            "parts: {NODE_TOOLBOX} is not built (no node on this machine): Node's part skipped"
        );
    }

    let (st, v) = d.call(reqwest::Method::GET, "/v1/parts", None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        ids(&v),
        [
            "broken",
            "claude-code",
            "codex",
            "fakeh",
            "gemini",
            "greet",
            "node"
        ],
        "the built-in npm CLIs and the test's; the fake harness has no part: {v}"
    );
    let greet = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "greet")
        .unwrap();
    assert_eq!(greet["requires"], json!(["fakeh"]), "{v}");
    assert!(
        v.as_array().unwrap().iter().all(|p| p["built"].is_null()),
        "{v}"
    );

    // An id no part has: refused before anything is built.
    let (st, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "pbox", "image": IMAGE, "parts": ["goose"]})),
        )
        .await;
    assert_eq!(st, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("\"goose\""), "{v}");

    let mut asked = vec!["greet", "broken"];
    if node {
        asked.push("node");
    }
    let (st, m) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "pbox", "image": IMAGE, "parts": asked})),
        )
        .await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    let mut want = vec!["fakeh", "greet"];
    if node {
        want.push("node");
    }
    assert_eq!(ids(&m["parts"]), want, "requirements first: {m}");
    assert_eq!(m["parts"][0]["version"], "fakeh 1.0", "{m}");
    let image = m["parts"][0]["image"].as_str().unwrap().to_string();
    assert!(
        image.starts_with("localhost/handler-part-fakeh:1.0-"),
        "{image}"
    );
    assert_eq!(ids(&m["partsLeftOut"]), ["broken"], "{m}");
    let why = m["partsLeftOut"][0]["reason"].as_str().unwrap();
    assert!(why.contains("no command no-such-tool"), "{why}");
    let built = part_builds(&d).await;
    assert_eq!(built.len(), want.len() + 1, "one build per part: {built:?}");

    let script = format!(
        "greet; {}echo \"$PATH\"; touch /opt/handler/parts/greet/x 2>/dev/null && echo writable || echo read-only",
        if node {
            "node -e 'console.log(6*7)'; "
        } else {
            ""
        }
    );
    let (code, out, err) = d.handler(&["machine", "exec", "pbox", "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{out}{err}");
    let path: Vec<String> = want
        .iter()
        .map(|p| format!("/opt/handler/parts/{p}/bin"))
        .collect();
    assert_eq!(
        out,
        format!(
            "greet: /opt/handler/parts/fakeh/bin/fake-acp-agent\n{}{}:/usr/local/bin:/usr/bin:/bin\nread-only\n",
            if node { "42\n" } else { "" },
            path.join(":")
        ),
        "{err}"
    );
    let (_, label) = engine(
        &d,
        &[
            "inspect",
            "handler-m-pbox",
            "--format",
            "{{index .Config.Labels \"handler.parts\"}}",
        ],
    );
    assert!(
        label.starts_with("fakeh@fakeh 1.0,greet@greet 1.0"),
        "{label}"
    );
    let (code, out, err) = d.handler(&["machine", "show", "pbox"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  part     greet greet 1.0\n"), "{out}");
    assert!(out.contains("  left out broken: "), "{out}");

    // A second machine takes the same images: nothing is built.
    let (st, m2) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "pbox2", "image": IMAGE, "parts": ["greet"]})),
        )
        .await;
    assert_eq!(st, 201, "{m2}");
    assert_eq!(m2["parts"][0]["image"], image.as_str(), "{m2}");
    assert_eq!(
        part_builds(&d).await,
        built,
        "no build for the second machine"
    );

    in_a_dev_container(&d, &image, &built).await;

    // A new version of the source: a new tag, built once.
    build_source(&d, "fakeh", "fakeh 1.1");
    let (code, out, err) = d.handler(&["part", "build", "fakeh"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("✓ localhost/handler-part-fakeh:1.1-")
            && out.ends_with(" fakeh 1.1 (built)\n"),
        "{out}"
    );
    let (code, again, _) = d.handler(&["part", "build", "fakeh"]);
    assert_eq!(code, 0);
    assert!(again.ends_with("(there)\n"), "{again}");
    let (code, out, err) = d.handler(&["part", "build", "broken"]);
    assert_eq!(code, 1, "a part left out: exit 1\n{out}{err}");
    assert!(out.contains("✗ broken: "), "{out}");
    let (code, out, _) = d.handler(&["--json", "part", "ls"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    let fakeh = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "fakeh")
        .unwrap();
    assert_eq!(fakeh["built"]["version"], "fakeh 1.1", "{v}");
    assert_ne!(fakeh["built"]["image"], image.as_str());

    for name in ["pbox", "pbox2"] {
        let (st, v) = d
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/machines/{name}"),
                None,
            )
            .await;
        assert_eq!(st, 204, "{v}");
    }
    if runtime.is_none() {
        an_agents_cli_reaches_its_machine_as_its_part(&d).await;
    }
    // What this test built, removed: its tags are its own (the other engine's store is another).
    let (_, list) = engine(&d, &["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    for i in list.lines().filter(|i| {
        ["fakeh", "greet", "broken", "node"].iter().any(|p| {
            i.starts_with(&format!("localhost/handler-part-{p}:"))
                || i.starts_with(&source_image(p))
        })
    }) {
        engine(&d, &["rmi", "-f", i]);
    }
}

/// A folder holding `.devcontainer/devcontainer.json` that names the busybox image, given to
/// the daemon's user.
fn dev_repo(d: &TempDaemon, name: &str) -> std::path::PathBuf {
    let repo = d.root.join(name);
    std::fs::create_dir_all(repo.join(".devcontainer")).unwrap();
    std::fs::write(
        repo.join(".devcontainer/devcontainer.json"),
        format!("{{\"image\": \"{IMAGE}\"}}"),
    )
    .unwrap();
    d.user.give(&repo);
    repo
}

/// Issue 30's must-show: the parts a plain machine got (`fakeh`'s image is `image`, the builds so
/// far `built`) mounted read-only into a dev container made by the Dev Container CLI, with no
/// build, their commands first on the PATH each exec gets.
async fn in_a_dev_container(d: &TempDaemon, image: &str, built: &[String]) {
    let repo = dev_repo(d, "pdev-repo");
    let (st, m) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(
                json!({"name": "pdev", "source": "devcontainer", "devcontainer": repo,
                "parts": ["greet"]}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    assert_eq!(ids(&m["parts"]), ["fakeh", "greet"], "{m}");
    assert_eq!(m["parts"][0]["image"], image, "{m}");
    assert_eq!(
        part_builds(d).await,
        built,
        "no build for the dev container"
    );
    let (code, out, err) = d.handler(&[
        "machine",
        "exec",
        "pdev",
        "--",
        "sh",
        "-c",
        "greet; touch /opt/handler/parts/fakeh/x 2>/dev/null && echo writable || echo read-only",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out, "greet: /opt/handler/parts/fakeh/bin/fake-acp-agent\nread-only\n",
        "{err}"
    );
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/pdev", None)
        .await;
    assert_eq!(st, 204, "{v}");
}

const TOKEN: &str = "fk-Parts0Token111aaaa2222bbbb3333cccc";

async fn call(d: &TempDaemon, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    d.call(method, path, Some(body)).await
}

/// A session's log so far.
fn events(d: &TempDaemon, id: &str) -> String {
    std::fs::read_to_string(d.root.join("state/sessions").join(id).join("events.ndjson"))
        .unwrap_or_default()
}

/// A session of `agent` asked for: the status, and its answer with its log so far.
async fn session_answer(d: &TempDaemon, agent: &str) -> (u16, String) {
    let (st, s) = call(
        d,
        reqwest::Method::POST,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": "sh: true"}),
    )
    .await;
    (
        st,
        format!("{s}{}", events(d, s["id"].as_str().unwrap_or_default())),
    )
}

/// An agent on harness `fakeh` (whose image holds its CLI, `fake-acp-agent`) in a busybox
/// machine made for it: the machine gets the harness's part by itself, and a session's agent is
/// found on the machine's PATH there. Without the part (its source gone, so its build fails),
/// the machine is made, naming it left out, and a session in it is refused naming the part.
async fn an_agents_cli_reaches_its_machine_as_its_part(d: &TempDaemon) {
    use reqwest::Method;
    let (st, v) = call(
        d,
        Method::POST,
        "/v1/accounts",
        json!({"name": "fk", "harness": "fakeh", "token": {"value": TOKEN}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let body = json!({"models": [{"account": "fk"}], "scope": d.scope, "network": "none",
        "permissions": "bypass", "confirmRisks": true});
    let (st, a) = call(d, Method::POST, "/v1/agents", body.clone()).await;
    assert_eq!(st, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (st, m) = call(
        d,
        Method::POST,
        "/v1/machines",
        json!({"name": "abox", "image": IMAGE, "agents": [agent]}),
    )
    .await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    assert_eq!(ids(&m["parts"]), ["fakeh"], "the agent's own part: {m}");
    let set = |machine: &str| {
        let mut b = body.clone();
        b["machine"] = json!(machine);
        b
    };
    let (st, v) = call(d, Method::PUT, &format!("/v1/agents/{agent}"), set("abox")).await;
    assert_eq!(st, 200, "{v}");
    let (st, s) = call(
        d,
        Method::POST,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": "sh: command -v fake-acp-agent"}),
    )
    .await;
    assert_eq!(st, 201, "{s}\n{}", d.log());
    let id = s["id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !events(d, &id).contains("/opt/handler/parts/fakeh/bin/fake-acp-agent") {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's CLI was not the part's: {}\n{}",
            events(d, &id),
            d.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (st, _) = call(
        d,
        Method::POST,
        &format!("/v1/sessions/{id}/stop"),
        json!({}),
    )
    .await;
    assert!(st == 200 || st == 204, "{st}");

    // A dev container made for it (decision 0169): the project's image, the agent's CLI its
    // part, its session there.
    let repo = dev_repo(d, "adev-repo");
    let (st, m) = call(
        d,
        Method::POST,
        "/v1/machines",
        json!({"name": "adev", "source": "devcontainer", "devcontainer": repo,
            "agents": [agent]}),
    )
    .await;
    assert_eq!(st, 201, "{m}\n{}", d.log());
    assert_eq!(ids(&m["parts"]), ["fakeh"], "the agent's own part: {m}");
    let (st, v) = call(d, Method::PUT, &format!("/v1/agents/{agent}"), set("adev")).await;
    assert_eq!(st, 200, "{v}");
    let (st, s) = call(
        d,
        Method::POST,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": "sh: command -v fake-acp-agent; echo in-dev"}),
    )
    .await;
    assert_eq!(st, 201, "{s}\n{}", d.log());
    let id = s["id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !events(d, &id).contains("/opt/handler/parts/fakeh/bin/fake-acp-agent\\nin-dev") {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's CLI in the dev container was not the part's: {}\n{}",
            events(d, &id),
            d.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (st, v) = d
        .call(Method::DELETE, "/v1/machines/adev?force=true", None)
        .await;
    assert_eq!(st, 204, "{v}");

    // Its source gone, the part cannot be built: the machine is made without it, and a session
    // in it refused, naming the part.
    engine(
        d,
        &["rmi", "-f", &format!("{}:latest", source_image("fakeh"))],
    );
    let (st, m) = call(
        d,
        Method::POST,
        "/v1/machines",
        json!({"name": "nobox", "image": IMAGE, "agents": [agent]}),
    )
    .await;
    assert_eq!(st, 201, "{m}");
    assert_eq!(ids(&m["partsLeftOut"]), ["fakeh"], "{m}");
    let (st, v) = call(d, Method::PUT, &format!("/v1/agents/{agent}"), set("nobox")).await;
    assert_eq!(st, 200, "{v}");
    let (st, said) = session_answer(d, &agent).await;
    assert!(
        said.contains("has no part \\\"fakeh\\\", which agent"),
        "{st}: {said}"
    );
    // A machine made for one session (a disposable profile's) is not made without its agent's
    // part: the session is refused, naming it, and no container is left.
    std::fs::write(
        d.root.join("config/profiles.toml"),
        format!("[profiles.scratch]\nimage = \"{IMAGE}\"\ndisposable = true\n"),
    )
    .unwrap();
    let (st, v) = call(
        d,
        Method::PUT,
        &format!("/v1/agents/{agent}"),
        set("disposable:scratch"),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let (st, said) = session_answer(d, &agent).await;
    assert!(
        said.contains("runs its CLI from part \\\"fakeh\\\", which could not be built"),
        "{st}: {said}"
    );
    let (_, all) = d.call(Method::GET, "/v1/machines", None).await;
    let mut machines = ids(&all);
    machines.sort_unstable();
    assert_eq!(
        machines,
        ["abox", "nobox"],
        "no disposable machine was made: {all}"
    );
    for name in ["abox", "nobox"] {
        let (st, v) = d
            .call(
                Method::DELETE,
                &format!("/v1/machines/{name}?force=true"),
                None,
            )
            .await;
        assert_eq!(st, 204, "{v}");
    }
}
