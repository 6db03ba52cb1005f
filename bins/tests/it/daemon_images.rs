//! The images room (D.4) against the real runtime: handlerd runs as the test user
//! (`handler-test`) with handler-sandbox-podman, and builds small harness images FROM
//! `localhost/handler-test-busybox` carrying the scripted fake ACP agent, through its API only:
//! a good one is built untagged, checked (initialize, session/new, every mapped mode, through
//! resolve and a real sandbox without network) and switched to `:latest` (its version in
//! `GET /v1/harnesses`), the image it replaces kept while a container uses it; one whose agent
//! is missing from PATH fails its check and `:latest` is unchanged, its new image removed; a
//! build cancelled mid-way leaves no image; a daemon stopped mid-build marks it failed
//! ("daemon restarted") on its next start. Missing podman or user FAILS, unless
//! HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::{USER, as_user, free_port, is_root};

pub(crate) const BASE: &str = "localhost/handler-test-busybox";

/// One of these tests at a time: a cancelled build removes the working containers that appeared
/// while it ran, which would include another build's running at the same moment.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) fn ready() -> bool {
    let ok = is_root()
        && as_user("podman", &["image", "exists", BASE])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1"),
            "the images tests run as root with {USER}'s rootless podman and {BASE} (.ci/setup-podman.sh), or set HANDLER_SKIP_PODMAN_TESTS=1"
        );
    }
    ok
}

pub(crate) fn podman(args: &[&str]) -> (bool, String) {
    let o = as_user("podman", args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
    )
}

pub(crate) fn image_id(image: &str) -> Option<String> {
    let (ok, out) = podman(&["image", "inspect", "--format", "{{.Id}}", image]);
    ok.then_some(out)
}

/// A harness descriptor `name` of image `image`, its agent `fake-acp-agent` found on PATH.
pub(crate) fn descriptor(name: &str, image: &str) -> String {
    format!(
        "apiVersion = \"handler.harness/v1\"\nname = \"{name}\"\nproduct = \"Fake {name}\"\nimage = \"{image}\"\nacpCommand = [\"fake-acp-agent\"]\nhome = \"/home/agent\"\n\
         [stateSlots.history]\ntarget = \"~/.fake/history\"\nkind = \"dir\"\nrequired = true\n\
         [login]\nunattended = \"allowed\"\nterms = \"https://example.com/terms\"\nsubscription = \"Fake\"\ntoken = \"FAKE_TOKEN\"\ntokenPrefix = \"fk-\"\nhosts = [\"api.fake.test:443\"]\n\
         [permissions.ask]\nsessionMode = \"default\"\n[permissions.bypass]\nsessionMode = \"bypassPermissions\"\n"
    )
}

pub(crate) struct Images {
    pub(crate) root: PathBuf,
    pub(crate) tag: String,
}

impl Images {
    pub(crate) fn image(&self, name: &str) -> String {
        format!("localhost/handler-test-img-{}-{name}", self.tag)
    }
    /// A harness folder: its descriptor and a Containerfile FROM the test base; `agent`: the
    /// fake agent copied onto PATH; `extra`: more instructions.
    pub(crate) fn harness(&self, name: &str, agent: bool, extra: &str) {
        let dir = self.root.join("home/harnesses").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("harness.toml"),
            descriptor(name, &self.image(name)),
        )
        .unwrap();
        let copy = if agent {
            std::fs::copy(
                &test_support::static_build::fakes().agent,
                dir.join("fake-acp-agent"),
            )
            .unwrap();
            std::fs::set_permissions(
                dir.join("fake-acp-agent"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
            "COPY fake-acp-agent /usr/local/bin/fake-acp-agent\n"
        } else {
            ""
        };
        std::fs::write(
            dir.join("Containerfile"),
            format!(
                "ARG TOOLBOX_IMAGE\nFROM ${{TOOLBOX_IMAGE}}\nLABEL handler.test.images={tag}\n{copy}RUN mkdir -p /usr/share/handler && echo \"Fake {name} 1.0\" > /usr/share/handler/version\n{extra}",
                tag = self.tag
            ),
        )
        .unwrap();
    }
    /// The images of this run left in the store (any tag, intermediate ones too).
    pub(crate) fn left(&self) -> Vec<String> {
        let (_, out) = podman(&[
            "images",
            "-a",
            "--filter",
            &format!("label=handler.test.images={}", self.tag),
            "--format",
            "{{.ID}}",
        ]);
        out.lines().map(String::from).collect()
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        // Every name of this run (tags of the base included), then its images.
        let (_, names) = podman(&[
            "images",
            "--filter",
            &format!("reference={}*", self.image("")),
            "--format",
            "{{.Repository}}:{{.Tag}}",
        ]);
        // podman lists every name of a matching image: the base's own name too, when the
        // toolbox is a second name of it. Only this run's names are removed.
        for n in names.lines().filter(|n| n.starts_with(&self.image(""))) {
            let _ = podman(&["rmi", n]);
        }
        for id in self.left() {
            let _ = podman(&["rmi", "-f", &id]);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(crate) fn setup(tag: &str) -> Images {
    let root = PathBuf::from(format!("/tmp/hdi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, src) in [
        ("handlerd", env!("CARGO_BIN_EXE_handlerd")),
        (
            "handler-sandbox-podman",
            env!("CARGO_BIN_EXE_handler-sandbox-podman"),
        ),
    ] {
        std::fs::copy(src, bin.join(name)).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::create_dir_all(root.join("home/harnesses")).unwrap();
    std::fs::create_dir_all(root.join("home/code")).unwrap();
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::write(
        root.join("config/folders.toml"),
        format!("roots = [\"{}\"]\n", root.join("home/code").display()),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("toolbox")).unwrap();
    let im = Images {
        root,
        tag: format!("{}{tag}", std::process::id()),
    };
    // The toolbox the harness images are built FROM: the test base, tagged as this run's.
    std::fs::write(
        im.root.join("toolbox/Containerfile"),
        format!(
            "FROM {BASE}\nLABEL handler.test.images={}\nRUN true\n",
            im.tag
        ),
    )
    .unwrap();
    assert!(podman(&["tag", BASE, &format!("{}:latest", im.image("toolbox"))]).0);
    im
}

pub(crate) struct Daemon {
    child: Child,
    port: u16,
    token: String,
    http: reqwest::Client,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
    }
}

fn give(root: &Path) {
    let uid = test_support::user::id_of("-u", USER).unwrap();
    let gid = test_support::user::id_of("-g", USER).unwrap();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).unwrap();
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        }
    }
}

pub(crate) async fn start(im: &Images) -> Daemon {
    start_with(im, &[]).await
}

/// handlerd as the test user, with `extra` variables too.
pub(crate) async fn start_with(im: &Images, extra: &[(&'static str, String)]) -> Daemon {
    give(&im.root);
    let port = free_port();
    let root = &im.root;
    let mut env = test_support::handlerd::env(root, &root.join("home/harnesses"), port);
    env.extend([
        ("HOME", format!("/home/{USER}")),
        (
            "HANDLER_SANDBOX_COMMAND",
            root.join("bin/handler-sandbox-podman")
                .display()
                .to_string(),
        ),
        ("TMPDIR", "/var/tmp".to_string()),
        (
            "HANDLER_TOOLBOX_DIR",
            root.join("toolbox").display().to_string(),
        ),
        ("HANDLER_TOOLBOX_IMAGE", im.image("toolbox")),
    ]);
    env.extend(extra.iter().cloned());
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
    .arg(format!("USER={USER}"))
    .arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    // No warm proxy pool but in its own test (decision 0175).
    .arg("HANDLER_PROXY_POOL=0");
    for (k, v) in &env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(root.join("bin/handlerd"));
    let (child, token) = test_support::handlerd::spawn(cmd, root, port).await;
    Daemon {
        child,
        port,
        token,
        http: reqwest::Client::new(),
    }
}

impl Daemon {
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
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
    pub(crate) async fn get(&self, path: &str) -> Value {
        let (s, v) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "{path}: {v}");
        v
    }
    pub(crate) async fn build(&self, target: &str) -> String {
        let (s, b) = self
            .call(
                reqwest::Method::POST,
                "/v1/builds",
                Some(json!({"target": target})),
            )
            .await;
        assert_eq!(s, 202, "{b}");
        assert_eq!(b["state"], "running");
        b["id"].as_str().unwrap().to_string()
    }
    /// Waits (`secs` at most) until build `id` satisfies `f`.
    pub(crate) async fn until(&self, id: &str, secs: u64, f: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let b = self.get(&format!("/v1/builds/{id}")).await;
            if f(&b) {
                return b;
            }
            assert!(
                Instant::now() < deadline,
                "build {id}: {b}\n{}",
                self.log(id).await
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    pub(crate) async fn ended(&self, id: &str) -> Value {
        self.until(id, 240, |b| b["state"] != "running").await
    }
    /// The whole log, read in pieces from offset 0.
    pub(crate) async fn log(&self, id: &str) -> String {
        let mut text = String::new();
        let mut off = 0;
        for _ in 0..100 {
            let (_, l) = self
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/builds/{id}/log?offset={off}"),
                    None,
                )
                .await;
            let piece = l["text"].as_str().unwrap_or_default();
            text.push_str(piece);
            off = l["nextOffset"].as_u64().unwrap_or(off);
            if piece.is_empty() || l["complete"] == true {
                break;
            }
        }
        text
    }
}

#[tokio::test]
async fn a_harness_is_built_checked_and_switched_and_a_broken_one_leaves_latest_alone() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("ok");
    im.harness("imgok", true, "");
    im.harness("imgbroken", false, "");
    // The broken harness's :latest before (the base): a failed rebuild must leave it.
    let broken_latest = format!("{}:latest", im.image("imgbroken"));
    assert!(podman(&["tag", BASE, &broken_latest]).0);
    let d = start(&im).await;
    let h = d.get("/v1/harnesses/imgok").await;
    assert_eq!(h["imagePresent"], false, "{h}");

    let id = d.build("imgok").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    assert_eq!(b["versions"]["imgok"], "Fake imgok 1.0", "{b}");
    assert!(b["endedAt"].is_string(), "{b}");
    assert!(log.contains("STEP 1/"), "{log}");
    assert!(log.contains("check imgok: passed"), "{log}");
    assert!(!log.contains('\u{1b}'), "ANSI escapes in the log");
    let h = d.get("/v1/harnesses/imgok").await;
    assert_eq!(h["imagePresent"], true, "{h}");
    assert_eq!(h["version"], "Fake imgok 1.0", "{h}");
    assert!(h["builtAt"].is_string(), "{h}");
    let first = image_id(&format!("{}:latest", im.image("imgok"))).unwrap();
    // A session on it records the version of the image it starts on (B.6: harnessVersion).
    let (s, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/accounts",
            Some(json!({"name": "perso", "harness": "imgok", "token": {"value": "fk-ImagesTestToken0123456789abcdef"}})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, a) = d
        .call(
            reqwest::Method::POST,
            "/v1/agents",
            Some(json!({"models": [{"account": "perso"}], "scope": im.root.join("home/code").display().to_string(), "network": "none"})),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    let (s, sess) = d
        .call(
            reqwest::Method::POST,
            "/v1/sessions",
            Some(json!({"agentId": a["id"], "origin": "ui"})),
        )
        .await;
    assert_eq!(s, 201, "{sess}");
    assert_eq!(sess["harnessVersion"], "Fake imgok 1.0", "{sess}");
    let (s, _) = d
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{}", sess["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert!(s < 300, "the session is removed: {s}");

    // A container uses :latest: the next switch keeps that image for it.
    let (ok, ctr) = podman(&[
        "run",
        "-d",
        "--rm",
        "--entrypoint",
        "sleep",
        &format!("{}:latest", im.image("imgok")),
        "300",
    ]);
    assert!(ok, "{ctr}");
    let id2 = d.build("imgok").await;
    let b2 = d.ended(&id2).await;
    let log2 = d.log(&id2).await;
    assert_eq!(b2["state"], "succeeded", "{b2}\n{log2}");
    let second = image_id(&format!("{}:latest", im.image("imgok"))).unwrap();
    assert_ne!(first, second, "no cache: a new image");
    assert!(image_id(&first).is_some(), "the image in use was removed");
    assert!(log2.contains("still in use"), "{log2}");
    let (_, running) = podman(&[
        "ps",
        "--filter",
        &format!("id={ctr}"),
        "--format",
        "{{.ID}}",
    ]);
    assert!(
        !running.is_empty(),
        "the container using the old image stopped"
    );
    let _ = podman(&["rm", "-f", &ctr]);

    // The agent missing from PATH: the check fails, :latest stays, its new image is removed.
    let before = image_id(&broken_latest).unwrap();
    let id3 = d.build("imgbroken").await;
    let b3 = d.ended(&id3).await;
    let log3 = d.log(&id3).await;
    assert_eq!(b3["state"], "failed", "{b3}\n{log3}");
    let err = b3["error"].as_str().unwrap();
    assert!(err.starts_with("check imgbroken: initialize"), "{err}");
    assert_eq!(image_id(&broken_latest), Some(before), "{log3}");
    let built = log3
        .lines()
        .find_map(|l| l.strip_prefix("built "))
        .unwrap_or_else(|| panic!("{log3}"));
    assert!(
        image_id(built).is_none(),
        "the failed build's image is left"
    );
    let h = d.get("/v1/harnesses/imgbroken").await;
    assert!(h.get("version").is_none(), "{h}");
    let _ = podman(&["rmi", &broken_latest]);

    let all = d.get("/v1/builds").await;
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [id3.as_str(), id2.as_str(), id.as_str()],
        "newest first"
    );
    let (s, p) = d
        .call(
            reqwest::Method::POST,
            "/v1/builds",
            Some(json!({"target": "nope"})),
        )
        .await;
    assert_eq!(s, 422, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("\"nope\""), "{p}");
    let (s, p) = d
        .call(
            reqwest::Method::POST,
            &format!("/v1/builds/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(s, 409, "an ended build cannot be cancelled: {p}");
}

#[tokio::test]
async fn a_cancelled_build_leaves_no_image_and_a_restart_fails_a_running_one() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("cancel");
    im.harness("imgslow", true, "RUN sleep 120\n");
    let d = start(&im).await;
    let working = || podman(&["ps", "-a", "--external", "--format", "{{.ID}}"]).1;
    let before = working();
    let id = d.build("imgslow").await;
    let running = d
        .until(&id, 120, |b| {
            b["step"].as_u64() >= Some(5) && b["steps"] == 5
        })
        .await;
    assert_eq!(running["stage"], "build imgslow", "{running}");
    let (s, b) = d
        .call(
            reqwest::Method::POST,
            &format!("/v1/builds/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["state"], "cancelled", "{b}");
    assert_eq!(
        im.left(),
        Vec::<String>::new(),
        "the cancelled build left an image"
    );
    let after = working();
    let new: Vec<&str> = after.lines().filter(|l| !before.contains(l)).collect();
    assert!(new.is_empty(), "working containers left: {new:?}");

    // Stopped mid-build: the next start says so.
    let id2 = d.build("imgslow").await;
    d.until(&id2, 120, |b| b["step"].as_u64() >= Some(5)).await;
    drop(d);
    let d = start(&im).await;
    let b = d.get(&format!("/v1/builds/{id2}")).await;
    assert_eq!(b["state"], "failed", "{b}");
    assert_eq!(b["error"], "daemon restarted", "{b}");
    assert!(d.log(&id2).await.contains("daemon restarted"));
    assert_eq!(
        im.left(),
        Vec::<String>::new(),
        "the stopped build left an image"
    );
}

#[tokio::test]
async fn a_toolbox_rebuild_where_one_harness_fails_switches_nothing() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("toolbox");
    im.harness("imgok", true, "");
    im.harness("imgother", true, "");
    im.harness("imgzbroken", false, "");
    let toolbox = format!("{}:latest", im.image("toolbox"));
    let zulu = format!("{}:latest", im.image("imgzbroken"));
    let other = format!("{}:latest", im.image("imgother"));
    let d = start(&im).await;
    let t = d.get("/v1/toolbox").await;
    assert_eq!(t["imagePresent"], true, "{t}");
    assert_eq!(
        t["directory"],
        im.root.join("toolbox").display().to_string()
    );
    let c = d.get("/v1/toolbox/containerfile").await;
    assert!(
        c["content"]
            .as_str()
            .unwrap()
            .contains("handler.test.images"),
        "the user's kept"
    );
    assert!(
        c["defaultContent"]
            .as_str()
            .unwrap()
            .contains("ARG BASE_IMAGE"),
        "{c}"
    );
    let id = d.build("imgok").await;
    assert_eq!(
        d.ended(&id).await["state"],
        "succeeded",
        "{}",
        d.log(&id).await
    );
    let ok_before = image_id(&format!("{}:latest", im.image("imgok"))).unwrap();
    // imgzbroken is built FROM the toolbox (its :latest present) but its recipe no longer
    // installs its agent; imgother's :latest was not built FROM the toolbox (a person's own).
    assert!(podman(&["tag", &toolbox, &zulu]).0);
    assert!(podman(&["tag", "localhost/handler-test-git:latest", &other]).0);
    let other_before = image_id(&other).unwrap();
    let toolbox_before = image_id(&toolbox).unwrap();
    let zulu_before = image_id(&zulu).unwrap();

    let id = d.build("toolbox").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "failed", "{b}\n{log}");
    let err = b["error"].as_str().unwrap();
    assert!(err.starts_with("check imgzbroken: "), "{err}");
    assert!(err.ends_with("nothing switched"), "{err}");
    assert!(
        log.contains("check imgok: passed"),
        "imgok was rebuilt and passed first: {log}"
    );
    assert_eq!(
        image_id(&toolbox),
        Some(toolbox_before),
        "the toolbox switched"
    );
    assert_eq!(
        image_id(&format!("{}:latest", im.image("imgok"))),
        Some(ok_before.clone())
    );
    assert_eq!(image_id(&zulu), Some(zulu_before));
    assert!(
        log.contains(&format!(
            "{other} is not built FROM {toolbox}: left as it is"
        )),
        "{log}"
    );
    assert!(
        !log.contains("check imgother"),
        "imgother was rebuilt: {log}"
    );
    assert_eq!(image_id(&other), Some(other_before));
    let _ = podman(&["rmi", &other]);
    let left = im.left();
    assert!(
        left.len() == 1 && ok_before.starts_with(&left[0]),
        "the toolbox build left {left:?} (imgok's :latest is {ok_before})\n{log}"
    );
    let _ = podman(&["rmi", &zulu]);

    let (s, p) = d
        .call(
            reqwest::Method::PUT,
            "/v1/toolbox/containerfile",
            Some(json!({"content": "RUN true\n"})),
        )
        .await;
    assert_eq!(
        (s, p["title"].as_str()),
        (400, Some("containerfile invalid")),
        "{p}"
    );
    let big = format!("FROM x\n{}", "#".repeat(256 * 1024));
    let (s, _) = d
        .call(
            reqwest::Method::PUT,
            "/v1/toolbox/containerfile",
            Some(json!({"content": big})),
        )
        .await;
    assert_eq!(s, 413);
    let (s, p) = d
        .call(
            reqwest::Method::PUT,
            "/v1/toolbox/containerfile",
            Some(json!({"content": "FROM mine\n"})),
        )
        .await;
    assert_eq!(
        (s, p["content"].as_str()),
        (200, Some("FROM mine\n")),
        "{p}"
    );
    assert_eq!(
        std::fs::read_to_string(im.root.join("toolbox/Containerfile")).unwrap(),
        "FROM mine\n"
    );
}

#[tokio::test]
async fn the_build_ca_bundle_reaches_a_harness_build_as_a_secret_not_a_layer() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("ca");
    let pem = test_support::network_filter::test_ca().pem();
    let marker = pem.lines().nth(1).unwrap().to_string();
    std::fs::write(im.root.join("build-ca.pem"), &pem).unwrap();
    // The step fails unless the bundle is there, and prints what it counted (the command line
    // podman echoes holds the $(…) itself, not the count).
    im.harness(
        "imgca",
        true,
        &format!(
            "RUN --mount=type=secret,id=handler-ca-bundle grep -qF '{marker}' /run/secrets/handler-ca-bundle \\\n && echo \"bundle: $(grep -c 'BEGIN CERTIFICATE' /run/secrets/handler-ca-bundle) certificate(s)\"\n"
        ),
    );
    let bundle = im.root.join("build-ca.pem").display().to_string();
    let d = start_with(&im, &[("HANDLER_BUILD_CA_BUNDLE", bundle.clone())]).await;
    let id = d.build("imgca").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    assert!(log.contains("bundle: 1 certificate(s)"), "{log}");
    assert!(
        log.contains(&format!("extra CAs: 1 certificate(s) of {bundle}")),
        "{log}"
    );
    let latest = format!("{}:latest", im.image("imgca"));
    let (ok, out) = podman(&[
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        &latest,
        "-c",
        "test ! -e /run/secrets/handler-ca-bundle && ! grep -rqs 'BEGIN CERTIFICATE' /run /etc/ssl",
    ]);
    assert!(ok, "the bundle is in the image: {out}");
    drop(d);

    // Without the setting the same step fails: the bundle came from it, and :latest stays.
    let first = image_id(&latest).unwrap();
    let d = start(&im).await;
    let id = d.build("imgca").await;
    let b = d.ended(&id).await;
    assert_eq!(b["state"], "failed", "{b}\n{}", d.log(&id).await);
    assert_eq!(image_id(&latest), Some(first));

    // A bundle that is no bundle: refused before building, the error naming the setting.
    drop(d);
    std::fs::write(im.root.join("build-ca.pem"), "not a certificate\n").unwrap();
    let d = start_with(&im, &[("HANDLER_BUILD_CA_BUNDLE", bundle.clone())]).await;
    let id = d.build("imgca").await;
    let b = d.ended(&id).await;
    assert_eq!(b["state"], "failed", "{b}");
    assert_eq!(
        b["error"],
        format!("HANDLER_BUILD_CA_BUNDLE {bundle}: no PEM certificate in it"),
        "{b}"
    );
}

/// Removes the local base image a test made, when it ends.
struct Remove(&'static str);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = podman(&["rmi", self.0]);
    }
}

/// B.6 / decision 0074: a toolbox whose `FROM` (a literal Debian image of a registry) cannot be
/// pulled here builds FROM `localhost/handler-debian-base:bookworm`, made by Handler's own
/// `image base` (debootstrap as rootless podman's namespace root), and its log says so. Slow
/// (debootstrap fetches the whole minbase from the Debian mirror: 1–3 minutes here).
#[tokio::test]
async fn a_toolbox_whose_from_cannot_be_pulled_builds_from_a_local_debian_base() {
    if !ready() {
        return;
    }
    const LOCAL: &str = "localhost/handler-debian-base:bookworm";
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("base");
    // No other test makes the bookworm base: made here, removed at the end.
    let _ = podman(&["rmi", LOCAL]);
    let _base = Remove(LOCAL);
    std::fs::write(
        im.root.join("toolbox/Containerfile"),
        format!(
            "FROM docker.io/library/debian:bookworm\nLABEL handler.test.images={}\nRUN grep -q '^12' /etc/debian_version && echo made > /etc/handler-probe\n",
            im.tag
        ),
    )
    .unwrap();
    let d = start(&im).await;
    let id = d.build("toolbox").await;
    let b = d.until(&id, 1200, |b| b["state"] != "running").await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    assert!(
        log.contains("FROM docker.io/library/debian:bookworm cannot be pulled (")
            && log.contains(
                "building from a local base made by debootstrap of Debian bookworm (localhost/handler-debian-base:bookworm)"
            ),
        "{log}"
    );
    assert!(
        log.contains("== make base localhost/handler-debian-base:bookworm"),
        "{log}"
    );
    assert!(
        image_id(LOCAL).is_some(),
        "the local base is kept for later builds"
    );
    let toolbox = format!("{}:latest", im.image("toolbox"));
    let read = as_user(
        &im.root
            .join("bin/handler-sandbox-podman")
            .display()
            .to_string(),
        &["image", "read", &toolbox, "/etc/handler-probe"],
    )
    .output()
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout), "made\n", "{log}");
    let t = d.get("/v1/toolbox").await;
    assert_eq!(t["imagePresent"], true, "{t}");

    // A second build takes the base made earlier; a FROM that is not Debian fails clearly.
    let id = d.build("toolbox").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    assert!(
        log.contains(
            "localhost/handler-debian-base:bookworm is there (made by an earlier build): used"
        ) && !log.contains("== make base"),
        "{log}"
    );
    std::fs::write(
        im.root.join("toolbox/Containerfile"),
        "FROM docker.io/library/ubuntu:24.04\nRUN true\n",
    )
    .unwrap();
    let id = d.build("toolbox").await;
    let b = d.ended(&id).await;
    let err = b["error"].as_str().unwrap_or_default();
    assert_eq!(b["state"], "failed", "{b}");
    assert!(
        err.starts_with("FROM docker.io/library/ubuntu:24.04 cannot be pulled (")
            && err.ends_with("it is not a Debian image a local base can replace"),
        "{err}"
    );
    // The first switch moved `:latest` off the shared test base (the toolbox was a second name
    // of it); the image it replaced still has its own name, so no build removes it.
    assert!(
        image_id(BASE).is_some(),
        "a toolbox switch removed {BASE}, another name's image"
    );
}

/// D.4 switch, for the network filter: `image build-proxy` tags the new image `:latest` and
/// removes the one it replaces — kept while a container uses it, removed by the next build once
/// none does (it used to stay behind untagged: one `<none>` image per rebuild).
#[tokio::test]
async fn a_network_filter_rebuild_removes_the_image_it_replaces_unless_a_container_uses_it() {
    if !ready() {
        return;
    }
    const PROXY: &str = test_support::network_filter::PROXY_IMAGE;
    let _one = ONE_AT_A_TIME.lock().await;
    // This process's filter (its test CA): rebuilt from the same inputs, so that the other
    // tests' sandboxes get the same image.
    let dir = test_support::network_filter::ensure(Path::new(env!(
        "CARGO_BIN_EXE_handler-sandbox-podman"
    )));
    let rebuild = || {
        let o = as_user(
            "env",
            &[
                &format!(
                    "HANDLER_EGRESS_PROXY_BIN={}",
                    dir.join("handler-egress-proxy").display()
                ),
                &format!(
                    "HANDLER_EGRESS_EXTRA_ROOTS={}",
                    dir.join("test-ca.pem").display()
                ),
                &dir.join("handler-sandbox-podman").display().to_string(),
                "image",
                "build-proxy",
            ],
        )
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "build-proxy: {err}");
        err
    };
    rebuild();
    let first = image_id(PROXY).unwrap();
    let (ok, ctr) = podman(&["create", &first, "--version"]);
    assert!(ok, "{ctr}");
    let err = rebuild();
    let second = image_id(PROXY).unwrap();
    assert_ne!(first, second, "no cache: a new image");
    let in_use = image_id(&first).is_some();
    let _ = podman(&["rm", "-f", &ctr]);
    assert!(in_use, "the image a container uses was removed: {err}");
    assert!(err.contains("kept "), "{err}");
    let err = rebuild();
    assert!(image_id(&first).is_none(), "left once unused: {err}");
    assert!(
        image_id(&second).is_none(),
        "the replaced image is left: {err}"
    );
    assert!(err.contains("removed the image it replaces"), "{err}");
}
