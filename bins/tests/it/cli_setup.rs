//! `handler daemon …` and `handler setup` against a real handlerd: `daemon start` starts it in
//! the background (its log in the state folder, without colours), `status` says where it runs
//! and which runtime it uses, `logs` prints its log, `ui --print` the URL with the token in its
//! fragment only, `stop` stops it, `install --no-start` writes the user unit. `setup` starts
//! handlerd, shows the host check (which runtime runs and why) and, when something required is
//! missing, stops there (exit 1) naming the fix; on a ready host it builds nothing that is there
//! (a sandbox executable that answers the check and says every image exists).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use test_support::user::free_port;

/// A folder whose handlerd (started by `handler daemon start`) is stopped at the end.
struct Home {
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Home {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.path().join("state/handlerd.pid"));
        if let Ok(pid) = pid {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

fn home(sandbox: &str) -> Home {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::create_dir_all(dir.path().join("harnesses")).unwrap();
    let script = dir.path().join("sandbox.sh");
    std::fs::write(&script, sandbox).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Home {
        dir,
        port: free_port(),
    }
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

impl Home {
    fn run(&self, args: &[&str]) -> Run {
        let p = self.dir.path();
        let mut c = assert_cmd::Command::new(env!("CARGO_BIN_EXE_handler"));
        c.args(args).write_stdin("");
        for (k, v) in test_support::handlerd::env(p, &p.join("harnesses"), self.port) {
            c.env(k, v);
        }
        c.env("HOME", p.join("home"))
            .env("XDG_CONFIG_HOME", p.join("home/.config"))
            .env("HANDLER_SANDBOX_COMMAND", p.join("sandbox.sh"))
            .env("HANDLER_CHECK", p.join("check.json"))
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("NO_COLOR");
        let o = c.output().unwrap();
        Run {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "handler {args:?}: {}{}", r.out, r.err);
        r
    }
    fn check(&self, ok: bool) {
        let check = serde_json::json!({"runtime": "fake 1.0", "ok": ok, "items": [
            {"name": "podman", "ok": true, "required": true, "detail": "podman 5.4"},
            {"name": "subuid", "ok": ok, "required": true, "detail": if ok { "ok" } else { "no subuid range: sudo usermod --add-subuids 100000-165535 $USER" }},
        ]});
        std::fs::write(self.dir.path().join("check.json"), check.to_string()).unwrap();
    }
}

/// A sandbox executable that answers `check` with $HANDLER_CHECK and says every image exists.
const READY: &str = "#!/bin/sh\ncase \"$1\" in\ncheck) cat \"$HANDLER_CHECK\" ;;\nimage) echo '[{\"Id\":\"sha256:0\",\"Labels\":{}}]' ;;\n*) exit 2 ;;\nesac\n";

fn log_of(p: &Path) -> String {
    std::fs::read_to_string(p.join("state/handlerd.log")).unwrap_or_default()
}

#[test]
fn daemon_start_status_logs_ui_stop_and_install() {
    let h = home(READY);
    h.check(true);
    assert_eq!(h.run(&["daemon", "status"]).code, 3);
    let r = h.ok(&["daemon", "start"]);
    assert!(
        r.err
            .contains(&format!("handlerd started on 127.0.0.1:{}", h.port)),
        "{}",
        r.err
    );
    // A second start finds it running.
    assert!(
        h.ok(&["daemon", "start"])
            .err
            .contains("handlerd is running")
    );
    let r = h.ok(&["daemon", "status"]);
    assert!(
        r.out
            .contains(&format!("handlerd is running on 127.0.0.1:{}", h.port)),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("runtime: fake 1.0 (can run sandboxes)"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("(chosen by HANDLER_SANDBOX_COMMAND)"),
        "{}",
        r.out
    );
    let log = log_of(h.dir.path());
    assert!(log.contains("request"), "{log}");
    assert!(!log.contains('\u{1b}'), "colours in a log file: {log}");
    assert!(h.ok(&["daemon", "logs", "-n", "3"]).out.lines().count() <= 3);
    // `handler ui` prints a one-time code, never the token (decision 0133); the page's
    // exchange of that code answers the token once.
    let url = h.ok(&["ui", "--print"]).out;
    let token = std::fs::read_to_string(h.dir.path().join("config/token")).unwrap();
    let base = format!("http://127.0.0.1:{}", h.port);
    let code = url
        .strip_prefix(&format!("{base}/#code="))
        .and_then(|c| c.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("not a code URL: {url}"));
    assert!(!url.contains(token.trim()), "{url}");
    let exchange = |code: &str| {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let r = reqwest::Client::new()
                .post(format!("{base}/ui/exchange"))
                .header("origin", &base)
                .json(&serde_json::json!({ "code": code }))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    let (status, body) = exchange(code);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(token.trim()), "{body}");
    assert_eq!(exchange(code).0, 401, "a code is good once");
    assert_eq!(h.ok(&["daemon", "stop"]).out, "handlerd stopped\n");
    assert_eq!(h.run(&["daemon", "status"]).code, 3);
    assert!(!h.dir.path().join("state/handlerd.pid").exists());
    h.ok(&["daemon", "install", "--no-start"]);
    let unit = std::fs::read_to_string(
        h.dir
            .path()
            .join("home/.config/systemd/user/handlerd.service"),
    )
    .unwrap();
    assert!(
        unit.contains("ExecStart=") && unit.contains("/handlerd\n"),
        "{unit}"
    );
    assert!(
        unit.contains(&format!("Environment=\"HANDLER_PORT={}\"", h.port)),
        "{unit}"
    );
    assert!(unit.contains("WantedBy=default.target"), "{unit}");
}

#[test]
fn setup_stops_at_what_the_host_lacks_and_builds_nothing_that_is_there() {
    let h = home(READY);
    h.check(false);
    let r = h.run(&["setup", "--yes"]);
    assert_eq!(r.code, 1, "{}{}", r.out, r.err);
    assert!(r.err.contains("handlerd started"), "{}", r.err);
    assert!(r.out.contains("runtime: fake 1.0"), "{}", r.out);
    assert!(
        r.out
            .contains("✗ subuid: no subuid range: sudo usermod --add-subuids"),
        "{}",
        r.out
    );
    assert!(r.out.contains("✓ selected: "), "{}", r.out);
    assert!(
        r.err
            .contains("fix what is marked ✗ above, then run `handler setup` again"),
        "{}",
        r.err
    );
    h.check(true);
    let r = h.ok(&[
        "setup",
        "--yes",
        "--provider-template",
        "llamacpp",
        "--provider-name",
        "local",
    ]);
    assert!(
        r.out
            .contains("✓ network-filter: built\n✓ toolbox: built\nnothing to build"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("✓ provider local: added from llamacpp"),
        "{}",
        r.out
    );
    assert!(r.out.contains("next: "), "{}", r.out);
    // Idempotent: the provider is there, nothing is built.
    let r = h.ok(&[
        "setup",
        "--yes",
        "--provider-template",
        "llamacpp",
        "--provider-name",
        "local",
    ]);
    assert!(
        r.out.contains("nothing to build") && r.out.contains("✓ provider local: there"),
        "{}",
        r.out
    );
    assert_eq!(h.ok(&["--json", "build", "list"]).out.trim(), "[]");
    h.ok(&["daemon", "stop"]);
}

/// `handler setup --yes --harness H` as the test user against the real runtime: handlerd
/// started by it (handler-sandbox-podman beside it), the host check passing, the network filter
/// and the toolbox found built, the tiny fixture harness (the fake agent FROM the test base)
/// really built and checked with its progress shown, then a second run that builds nothing.
/// Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.
#[tokio::test]
async fn setup_builds_a_harness_image_for_real_then_nothing() {
    use test_support::user::{USER, as_user, is_root};
    const BASE: &str = "localhost/handler-test-busybox";
    let ready = is_root()
        && as_user("podman", &["image", "exists", BASE])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        assert!(
            std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1"),
            "the setup test runs as root with {USER}'s rootless podman and {BASE}, or set HANDLER_SKIP_PODMAN_TESTS=1"
        );
        return;
    }
    let hsp = Path::new(env!("CARGO_BIN_EXE_handler-sandbox-podman"));
    test_support::network_filter::ensure(hsp);
    let tag = format!("clisetup{}", std::process::id());
    let image = |n: &str| format!("localhost/handler-test-img-{tag}-{n}");
    let root = Cleanup {
        root: std::path::PathBuf::from(format!("/tmp/hcs-{tag}")),
        images: vec![image("toolbox"), image("fakeh")],
    };
    let r = &root.root;
    let _ = std::fs::remove_dir_all(r);
    let bin = r.join("bin");
    let harness = r.join("harnesses/fakeh");
    for d in [&bin, &harness, &r.join("toolbox")] {
        std::fs::create_dir_all(d).unwrap();
    }
    for (name, src) in [
        ("handlerd", env!("CARGO_BIN_EXE_handlerd")),
        ("handler", env!("CARGO_BIN_EXE_handler")),
        ("handler-sandbox-podman", hsp.to_str().unwrap()),
    ] {
        std::fs::copy(src, bin.join(name)).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        harness.join("harness.toml"),
        format!(
            "apiVersion = \"handler.harness/v1\"\nname = \"fakeh\"\nproduct = \"Fake\"\nimage = \"{}\"\nacpCommand = [\"fake-acp-agent\"]\nhome = \"/home/agent\"\n\
             [stateSlots.history]\ntarget = \"~/.fake/history\"\nkind = \"dir\"\nrequired = true\n\
             [login]\nunattended = \"allowed\"\nterms = \"https://example.com/terms\"\nsubscription = \"Fake\"\ntoken = \"FAKE_TOKEN\"\ntokenPrefix = \"fk-\"\nhosts = [\"api.fake.test:443\"]\n\
             [permissions.ask]\nsessionMode = \"default\"\n[permissions.bypass]\nsessionMode = \"bypassPermissions\"\n",
            image("fakeh")
        ),
    )
    .unwrap();
    std::fs::copy(
        &test_support::static_build::fakes().agent,
        harness.join("fake-acp-agent"),
    )
    .unwrap();
    std::fs::set_permissions(
        harness.join("fake-acp-agent"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        harness.join("Containerfile"),
        format!("ARG TOOLBOX_IMAGE\nFROM ${{TOOLBOX_IMAGE}}\nLABEL handler.test.images={tag}\nCOPY fake-acp-agent /usr/local/bin/fake-acp-agent\nRUN mkdir -p /usr/share/handler && echo 'Fake 1.0' > /usr/share/handler/version\n"),
    )
    .unwrap();
    std::fs::write(r.join("toolbox/Containerfile"), format!("FROM {BASE}\n")).unwrap();
    assert!(
        as_user(
            "podman",
            &["tag", BASE, &format!("{}:latest", image("toolbox"))]
        )
        .status()
        .unwrap()
        .success()
    );
    assert!(
        Command::new("chown")
            .args(["-R", &format!("{USER}:{USER}")])
            .arg(r)
            .status()
            .unwrap()
            .success()
    );
    let port = free_port();
    let setup = |args: &[&str]| {
        let mut c = as_user("env", &["-i"]);
        c.arg(format!("HOME=/home/{USER}"))
            .arg(format!("USER={USER}"))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .arg("TMPDIR=/var/tmp")
            .arg(format!(
                "HANDLER_TOOLBOX_DIR={}",
                r.join("toolbox").display()
            ))
            .arg(format!("HANDLER_TOOLBOX_IMAGE={}", image("toolbox")));
        for (k, v) in test_support::handlerd::env(r, &r.join("harnesses"), port) {
            c.arg(format!("{k}={v}"));
        }
        let o = c
            .arg(bin.join("handler"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "handler {args:?}: {text}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let first = setup(&["setup", "--yes", "--harness", "fakeh"]);
    assert!(
        first.contains("✓ network-filter: built\n✓ toolbox: built\n"),
        "{first}"
    );
    assert!(first.contains("✓ fakeh: built (build "), "{first}");
    assert!(first.contains("(chosen by "), "{first}");
    let again = setup(&["setup", "--yes", "--harness", "fakeh"]);
    assert!(
        again.contains("✓ fakeh: built\nnothing to build"),
        "{again}"
    );
    let builds = setup(&["--json", "build", "list"]);
    let builds: serde_json::Value = serde_json::from_str(&builds).unwrap();
    assert_eq!(builds.as_array().map(Vec::len), Some(1), "{builds}");
    assert_eq!(builds[0]["state"], "succeeded", "{builds}");
    setup(&["daemon", "stop"]);
}

/// The test's folder and images, removed at the end; its handlerd stopped.
struct Cleanup {
    root: std::path::PathBuf,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        use test_support::user::as_user;
        if let Ok(pid) = std::fs::read_to_string(self.root.join("state/handlerd.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        for i in &self.images {
            let _ = as_user("podman", &["rmi", "-f", i]).output();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
