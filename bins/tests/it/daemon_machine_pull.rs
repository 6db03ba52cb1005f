//! A machine's image pulled when the engine has none (issue 29 item 7, decision 0165), through
//! handlerd as the test user on real rootless Podman, from a real registry on this machine's
//! loopback (Debian's `docker-registry`, set up by .ci/setup-podman.sh; plain HTTP, declared
//! insecure to podman by the daemon's `CONTAINERS_REGISTRIES_CONF`): the pull is a build
//! (`pull:<image>`, its log under `/v1/builds`) and happens once; an image the registry does
//! not have is refused (422) naming it, with the pull's reason; only allowed images are pulled.
//! The same on rootless Docker, whose daemon reaches the host's loopback as 10.0.2.2 (declared
//! insecure by .ci/setup-docker.sh's `--insecure-registry`).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const REGISTRY: &str = "/usr/bin/docker-registry";

/// The registry, stopped when dropped.
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn podman(d: &TempDaemon, conf: &str, args: &[&str]) -> (bool, String) {
    d.engine_cli(
        "podman",
        args,
        &[("CONTAINERS_REGISTRIES_CONF", conf.to_string())],
    )
}

async fn pulls(d: &TempDaemon) -> Vec<Value> {
    let (_, v) = d.call(reqwest::Method::GET, "/v1/builds", None).await;
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["target"].as_str().is_some_and(|t| t.starts_with("pull:")))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machines_image_is_pulled_once_as_a_build_and_a_missing_one_is_named() {
    pull_on(None).await;
}

/// The same on the Docker runtime (its own pull, its own store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machines_image_is_pulled_once_on_docker_and_a_missing_one_is_named() {
    pull_on(Some("docker")).await;
}

async fn pull_on(runtime: Option<&str>) {
    let Some(u) = test_support::user::podman_user(IMAGE, "the machine pull test") else {
        return;
    };
    if !std::path::Path::new(REGISTRY).exists() {
        eprintln!(
            "no {REGISTRY} (Debian's docker-registry; .ci/setup-podman.sh installs it): the pull case is skipped"
        );
        return;
    }
    let port = test_support::user::free_port();
    let host = format!("127.0.0.1:{port}");
    // Where the engine's daemon finds that registry: rootless Docker's namespace sees the host's
    // loopback as 10.0.2.2 (slirp4netns), Podman pulls from the host itself.
    let pulled_from = match runtime {
        Some(_) => format!("10.0.2.2:{port}"),
        None => host.clone(),
    };
    let cli = runtime.unwrap_or("podman");
    let l = Layout::new(&format!("hdpull-{}-{cli}", std::process::id()), true);
    l.fake_harness("");
    let conf = l.root.join("registries.conf");
    std::fs::write(
        &conf,
        format!("[[registry]]\nlocation = \"{host}\"\ninsecure = true\n"),
    )
    .unwrap();
    let store = l.root.join("registry");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        l.root.join("registry.yml"),
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
            store.display()
        ),
    )
    .unwrap();
    let conf = conf.display().to_string();
    let d = l
        .spawn_on(
            u,
            &[
                (
                    "HANDLER_MACHINE_IMAGES",
                    format!("localhost/handler-test-busybox:*,{pulled_from}/pulled/*"),
                ),
                ("CONTAINERS_REGISTRIES_CONF", conf.clone()),
            ],
            runtime,
        )
        .await;
    let registry = Registry(
        d.user
            .cmd(
                REGISTRY,
                &["serve", d.root.join("registry.yml").to_str().unwrap()],
                &[("HOME", d.user.home())],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&host).is_err() {
        assert!(
            Instant::now() < deadline,
            "the registry did not listen on {host}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Pushed by podman to the registry on the loopback; the engine pulls it as it reaches it.
    let (ok, out) = podman(
        &d,
        &conf,
        &[
            "push",
            &format!("{IMAGE}:latest"),
            &format!("{host}/pulled/busybox:1"),
        ],
    );
    assert!(ok, "push: {out}");
    podman(
        &d,
        &conf,
        &["rmi", "-f", &format!("{host}/pulled/busybox:1")],
    );
    let image = format!("{pulled_from}/pulled/busybox:1");
    d.engine_cli(cli, &["rmi", "-f", &image], &[]);
    d.engine_cli(cli, &["rm", "-f", "handler-m-pulled"], &[]);

    // An allowed image the engine does not have: pulled, as a build, then made.
    let (code, out, err) = d.handler(&["machine", "create", "pulled", "--image", &image]);
    assert_eq!(code, 0, "{out}{err}\n{}", d.log());
    let p = pulls(&d).await;
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0]["target"], format!("pull:{image}"), "{p:?}");
    assert_eq!(p[0]["state"], "succeeded", "{p:?}");
    let (_, log) = d
        .call(
            reqwest::Method::GET,
            &format!("/v1/builds/{}/log", p[0]["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert!(log.to_string().contains("pulled "), "{log}");
    let (st, m) = d
        .call(reqwest::Method::GET, "/v1/machines/pulled", None)
        .await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["state"], "running", "{m}");

    // Once there, not pulled again.
    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/pulled", None)
        .await;
    assert_eq!(st, 204, "{v}");
    let (st, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "pulled", "image": image})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(pulls(&d).await.len(), 1, "no second pull");

    // One the registry does not have: 422 naming it, with the pull's reason.
    let missing = format!("{pulled_from}/pulled/nope:1");
    let (st, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "nope", "image": missing})),
        )
        .await;
    assert_eq!(st, 422, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(&format!(
            "image: {missing} is not on this machine and could not be pulled: "
        )),
        "{v}"
    );
    // Not allowed: refused before anything is pulled.
    let (st, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/machines",
            Some(json!({"name": "other", "image": format!("{pulled_from}/other/busybox:1")})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(
        pulls(&d).await.len(),
        2,
        "the missing one's pull, none for the other"
    );

    let (st, v) = d
        .call(reqwest::Method::DELETE, "/v1/machines/pulled", None)
        .await;
    assert_eq!(st, 204, "{v}");
    d.engine_cli(cli, &["rmi", "-f", &image], &[]);
    drop(registry);
}
