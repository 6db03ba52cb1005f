//! Handler installed, not run from a source tree (issue 15 item 8, decision 0071): the binaries
//! copied into a fresh folder the way `.ci/install.sh` puts them (handlerd, handler,
//! handler-sandbox-podman, the static handler-egress-proxy beside them), handlerd started there
//! as the test user with neither `HANDLER_SANDBOX_COMMAND` nor `HANDLER_EGRESS_PROXY_BIN`, its
//! working folder `/`: it finds the runtime beside itself, the runtime finds the proxy beside
//! itself, and the network filter build succeeds through the API. Without the proxy beside it
//! the build fails naming the path it looked at. Missing podman or user FAILS, unless
//! HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::network_filter::PROXY_IMAGE;
use test_support::user::{USER, as_user, free_port, is_root};

fn ready() -> bool {
    let ok = is_root()
        && as_user("podman", &["--version"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1"),
            "the installed-Handler test runs as root with {USER}'s rootless podman (.ci/setup-podman.sh), or set HANDLER_SKIP_PODMAN_TESTS=1"
        );
    }
    ok
}

fn filter_id() -> Option<String> {
    let o = as_user(
        "podman",
        &["image", "inspect", "--format", "{{.Id}}", PROXY_IMAGE],
    )
    .output()
    .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Copies `src` to `<bin>/<name>`, executable by everyone.
fn install(bin: &Path, name: &str, src: &Path) {
    std::fs::copy(src, bin.join(name)).unwrap();
    std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The folder, removed at the end even after a failed assertion.
struct Installed(PathBuf);

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Api {
    port: u16,
    token: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let res = r.send().await.unwrap();
        (
            res.status().as_u16(),
            res.json().await.unwrap_or(Value::Null),
        )
    }

    /// Builds the network filter through the API; the ended build and its log.
    async fn build_filter(&self) -> (Value, String) {
        let (s, b) = self
            .call(
                reqwest::Method::POST,
                "/v1/builds",
                Some(json!({"target": "network-filter"})),
            )
            .await;
        assert_eq!(s, 202, "{b}");
        let id = b["id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let (_, b) = self
                .call(reqwest::Method::GET, &format!("/v1/builds/{id}"), None)
                .await;
            if b["state"] != "running" {
                let (_, l) = self
                    .call(reqwest::Method::GET, &format!("/v1/builds/{id}/log"), None)
                    .await;
                return (b, l["text"].as_str().unwrap_or_default().to_string());
            }
            assert!(Instant::now() < deadline, "build {id} still running: {b}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// handlerd of `root/bin` as the test user, in `/`, with a clean environment: its folders under
/// `root`, and the test servers' CA among the filter's roots (as every test's filter has it).
async fn start(root: &Path, ca: &Path) -> (std::process::Child, Api) {
    let port = free_port();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        "--reuid",
        USER,
        "--regid",
        USER,
        "--init-groups",
        "env",
        "-i",
    ])
    .arg(format!("HOME=/home/{USER}"))
    .arg(format!("USER={USER}"))
    .arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    .arg("HANDLER_PROXY_POOL=0")
    .arg("TMPDIR=/var/tmp")
    .arg(format!("HANDLER_EGRESS_EXTRA_ROOTS={}", ca.display()));
    let harnesses = root.join("harnesses");
    for (k, v) in test_support::handlerd::env(root, &harnesses, port) {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(root.join("bin/handlerd")).current_dir("/");
    let (child, token) = test_support::handlerd::spawn(cmd, root, port).await;
    let api = Api {
        port,
        token,
        http: reqwest::Client::new(),
    };
    (child, api)
}

#[tokio::test]
async fn an_installed_handlerd_builds_the_network_filter_from_the_proxy_beside_it() {
    if !ready() {
        return;
    }
    // This process's filter (the test CA among its roots), so a rebuild here changes nothing
    // for the other sandbox tests of this binary.
    let hsp = Path::new(env!("CARGO_BIN_EXE_handler-sandbox-podman"));
    let ca = test_support::network_filter::ensure(hsp).join("test-ca.pem");
    let root = Installed(PathBuf::from(format!("/tmp/hdinst-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    let bin = root.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(root.0.join("harnesses")).unwrap();
    for (name, src) in [
        ("handlerd", env!("CARGO_BIN_EXE_handlerd")),
        ("handler", env!("CARGO_BIN_EXE_handler")),
        ("handler-sandbox-podman", hsp.to_str().unwrap()),
    ] {
        install(&bin, name, Path::new(src));
    }
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(&root.0)
        .status()
        .unwrap();
    assert!(chown.success());
    let (mut child, api) = start(&root.0, &ca).await;

    // No proxy beside the runtime yet: the build fails and says where it looked.
    let (b, log) = api.build_filter().await;
    assert_eq!(b["state"], "failed", "{b}\n{log}");
    let looked = bin.join("handler-egress-proxy").display().to_string();
    assert!(
        b["error"].as_str().unwrap_or_default().contains(&looked) || log.contains(&looked),
        "the failure names {looked}: {b}\n{log}"
    );

    // The static proxy installed beside it, as .ci/install.sh does: the build succeeds.
    let before = filter_id();
    install(
        &bin,
        "handler-egress-proxy",
        &test_support::static_build::static_proxy(),
    );
    let (b, log) = api.build_filter().await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    let after = filter_id().expect("the network filter image exists");
    assert_ne!(
        before.as_deref(),
        Some(after.as_str()),
        "a new image: {log}"
    );
    let (s, nf) = api
        .call(reqwest::Method::GET, "/v1/network-filter", None)
        .await;
    assert_eq!(s, 200, "{nf}");
    assert_eq!(nf["imagePresent"], true, "{nf}");
    test_support::handlerd::stop(&mut child);
}

/// Decision 0118: the platform data travels inside handlerd — an installed copy, started in `/`
/// with its data folder empty, writes it out under `<data>/platform/<digest>/` and serves its
/// provider templates from there, with the executable bits of the harnesses' files kept.
#[tokio::test]
async fn an_installed_handlerd_has_its_platform_data_without_a_source_tree() {
    if !ready() {
        return;
    }
    let hsp = Path::new(env!("CARGO_BIN_EXE_handler-sandbox-podman"));
    let ca = test_support::network_filter::ensure(hsp).join("test-ca.pem");
    let root = Installed(PathBuf::from(format!("/tmp/hdplat-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    let bin = root.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(root.0.join("harnesses")).unwrap();
    install(&bin, "handlerd", Path::new(env!("CARGO_BIN_EXE_handlerd")));
    install(&bin, "handler-sandbox-podman", hsp);
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(&root.0)
        .status()
        .unwrap();
    assert!(chown.success());
    let (mut child, api) = start(&root.0, &ca).await;
    let (s, t) = api
        .call(reqwest::Method::GET, "/v1/provider-templates", None)
        .await;
    assert_eq!(s, 200, "{t}");
    let names: Vec<&str> = t
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert!(names.contains(&"openrouter"), "{t}");
    let platform: Vec<PathBuf> = std::fs::read_dir(root.0.join("data/platform"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(platform.len(), 1, "{platform:?}");
    let p = &platform[0];
    assert!(
        p.join("handler-core/data/templates/providers/openrouter.toml")
            .is_file()
    );
    let env = p.join("handler-harness/data/bin/handler-sandbox-env");
    let mode = std::fs::metadata(&env).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "{}", env.display());
    test_support::handlerd::stop(&mut child);
}
