//! The web UI in a real browser (issue 17's "Must show"): Debian's chromium driven by
//! `playwright-core` (`handler-core/web/e2e/suite.mjs`) against a real handlerd, run as the
//! unprivileged test user, whose agents are the scripted fake agent in real rootless Podman
//! sandboxes. The script creates a project from a preset, widens its agent (the risks, then the
//! confirmation), starts a session, sees streamed text and a tool call, reloads while a
//! permission waits, shares it with a second tab (the first answer wins), follows the Files pane
//! (a change and its earlier version), names a file with `@`, stops the session and resumes it
//! from the project's page, answers a denied host's question (allow always / once) and learns
//! hosts in a filtered agent's network panel, makes a machine and follows it live (the change
//! channel), checks the CSP (an inline script refused) and that the token never
//! appears in a request URL; it measures the bundle and the time to the first session render.
//! Skipped, saying why, only when chromium is absent (CI installs it: `.ci/setup-browser.sh`);
//! missing podman or user FAILS unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use test_support::user::{free_port, id_of};

const IMAGE: &str = "localhost/handler-test-busybox";
const CHROMIUM: &str = "/usr/bin/chromium";
const TOKEN: &str = "fk-WebUi0Token111aaaa2222bbbb3333cccc";

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../handler-core/web")
}

/// The unprivileged test user (as root), or none when this is already an unprivileged user.
fn test_user() -> Option<Option<(String, u32, u32)>> {
    let o = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&o.stdout).trim() != "0" {
        return Some(None);
    }
    let name = std::env::var("HANDLER_TEST_USER").unwrap_or_else(|_| "handler-test".into());
    match id_of("-u", &name) {
        Some(uid) => Some(Some((name.clone(), uid, id_of("-g", &name).unwrap()))),
        None if std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1") => None,
        None => panic!("no user {name}: run .ci/setup-podman.sh as root first"),
    }
}

fn as_user(
    user: &Option<(String, u32, u32)>,
    program: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> Command {
    match user {
        Some((u, _, _)) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", u, "--regid", u, "--init-groups", "env", "-i"]);
            c.arg(format!("USER={u}")).arg(format!("LOGNAME={u}"));
            c.arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
            // No warm proxy pool but in its own test (decision 0175).
            c.arg("HANDLER_PROXY_POOL=0");
            for (k, v) in env {
                c.arg(format!("{k}={v}"));
            }
            c.arg(program).args(args);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
            c
        }
    }
}

fn give(user: &Option<(String, u32, u32)>, p: &Path) {
    let Some((_, uid, gid)) = user else { return };
    let mut todo = vec![p.to_path_buf()];
    while let Some(e) = todo.pop() {
        std::os::unix::fs::lchown(&e, Some(*uid), Some(*gid)).unwrap();
        if e.is_dir() && !e.is_symlink() {
            todo.extend(std::fs::read_dir(&e).unwrap().flatten().map(|x| x.path()));
        }
    }
}

fn copy_exe(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The project folder: a git repository whose README.md is committed (its earlier version).
fn make_scope(scope: &Path) {
    std::fs::create_dir_all(scope.join(".bin")).unwrap();
    std::fs::write(scope.join("README.md"), "old text\n").unwrap();
    std::fs::write(scope.join("notes.txt"), "a note\n").unwrap();
    std::fs::write(scope.join(".gitignore"), ".bin/\n.fake-agent-script.json\n").unwrap();
    std::fs::write(
        scope.join(".fake-agent-script.json"),
        r#"{"loadReplay": true, "configOptions": true}"#,
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "-C",
            ])
            .arg(scope)
            .args(args)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "start"]);
}

struct Root(PathBuf);
impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_ui_in_a_real_browser() {
    if !Path::new(CHROMIUM).exists() {
        eprintln!(
            "skipped: {CHROMIUM} is absent (.ci/setup-browser.sh installs Debian's chromium)"
        );
        return;
    }
    let web = web_dir();
    assert!(
        web.join("node_modules/playwright-core").exists(),
        "{}: no node_modules: run .ci/setup-browser.sh (npm ci)",
        web.display()
    );
    let Some(user) = test_user() else {
        eprintln!("skipped (HANDLER_SKIP_PODMAN_TESTS=1): no test user");
        return;
    };
    let home_of = |u: &Option<(String, u32, u32)>| match u {
        Some((n, _, _)) => format!("/home/{n}"),
        None => std::env::var("HOME").unwrap(),
    };
    let ok = as_user(
        &user,
        "podman",
        &["image", "exists", IMAGE],
        &[("HOME", home_of(&user))],
    )
    .status()
    .is_ok_and(|s| s.success());
    if !ok {
        assert_eq!(
            std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref(),
            Ok("1"),
            "podman cannot find {IMAGE}: run .ci/setup-podman.sh"
        );
        eprintln!("skipped (HANDLER_SKIP_PODMAN_TESTS=1): no {IMAGE}");
        return;
    }
    // Machines a failed run of the suite left (a machine is the person's: it outlives its
    // daemon, and its name would be taken for this run).
    // (The suite's own names, `ui…`: the daemon suites run beside it on the same engine.)
    for name in [
        "uibox",
        "uipbox",
        "uipartbox",
        "uimbox",
        "uidevbox",
        "uiagentbox",
    ] {
        let _ = as_user(
            &user,
            "podman",
            &["rm", "-f", "-t", "0", &format!("handler-m-{name}")],
            &[("HOME", home_of(&user))],
        )
        .output();
    }
    // The network filter's image, for the filtered agent's denied host and Learn hosts.
    if user.is_some() {
        test_support::network_filter::ensure(Path::new(env!(
            "CARGO_BIN_EXE_handler-sandbox-podman"
        )));
    }
    let root = Root(PathBuf::from(format!("/tmp/hwui-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    let home = root.0.join("home");
    let scope = home.join("code/app");
    let bin = root.0.join("bin");
    for d in [&bin, &home.join("harnesses/fake"), &root.0.join("config")] {
        std::fs::create_dir_all(d).unwrap();
    }
    make_scope(&scope);
    copy_exe(
        Path::new(env!("CARGO_BIN_EXE_handlerd")),
        &bin.join("handlerd"),
    );
    copy_exe(
        Path::new(env!("CARGO_BIN_EXE_handler-sandbox-podman")),
        &bin.join("handler-sandbox-podman"),
    );
    copy_exe(
        Path::new(env!("CARGO_BIN_EXE_handler-git-read")),
        &bin.join("handler-git-read"),
    );
    copy_exe(
        &test_support::static_build::fakes().agent,
        &scope.join(".bin/fake-acp-agent"),
    );
    let descriptor = test_support::descriptor::sandbox_fake(
        "Fake ACP agent",
        IMAGE,
        &format!("\"{}\"", scope.join(".bin/fake-acp-agent").display()),
        "api.fake.test:443",
    );
    // Its own terminal program (D.16), for the terminal page: the fake agent's terminal mode.
    let descriptor = format!(
        "{descriptor}[terminal]\ncommand = [\"{}\", \"--terminal\"]\n[terminal.permissions]\nask = []\nbypass = [\"--yolo\"]\n",
        scope.join(".bin/fake-acp-agent").display()
    );
    std::fs::write(home.join("harnesses/fake/harness.toml"), descriptor).unwrap();
    // A folderless agent's program (F.2: no scope, its session's folder its own): the same fake
    // agent, reached through a knowledge folder (`/knowledge/fakebin`) under the knowledge root
    // the suite sets (`<home>/knowledge-ui`), as harness `fakefree`.
    std::fs::create_dir_all(home.join("knowledge-ui/fakebin")).unwrap();
    copy_exe(
        &test_support::static_build::fakes().agent,
        &home.join("knowledge-ui/fakebin/fake-acp-agent"),
    );
    std::fs::create_dir_all(home.join("harnesses/fakefree")).unwrap();
    std::fs::write(
        home.join("harnesses/fakefree/harness.toml"),
        test_support::descriptor::sandbox_fake(
            "Fake folderless agent",
            IMAGE,
            "\"/knowledge/fakebin/fake-acp-agent\"",
            "api.fake.test:443",
        )
        .replace("name = \"fake\"", "name = \"fakefree\""),
    )
    .unwrap();
    // A file-login harness and a terminal emulator that records what Log in opens in it.
    std::fs::create_dir_all(home.join("harnesses/filefake")).unwrap();
    std::fs::write(
        home.join("harnesses/filefake/harness.toml"),
        test_support::descriptor::file_login("\"/bin/true\"", None),
    )
    .unwrap();
    let window = root.0.join("login-window.txt");
    std::fs::write(
        bin.join("fake-terminal"),
        format!("#!/bin/sh\necho \"$*\" > {}\n", window.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        bin.join("fake-terminal"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        root.0.join("config/folders.toml"),
        format!("roots = [\"{}\"]\n", home.join("code").display()),
    )
    .unwrap();
    // Decision 0156: a profile made ahead of time, and a disposable one.
    std::fs::write(
        root.0.join("config/profiles.toml"),
        format!(
            "[profiles.plain]\ntitle = \"Plain\"\nimage = \"{IMAGE}\"\n\
             [profiles.scratch]\ntitle = \"Scratch\"\ndisposable = true\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&root.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    give(&user, &root.0);
    let port = free_port();
    let mut env = test_support::handlerd::env(&root.0, &home.join("harnesses"), port);
    env.extend([
        ("HOME", home_of(&user)),
        (
            "HANDLER_SANDBOX_COMMAND",
            bin.join("handler-sandbox-podman").display().to_string(),
        ),
        (
            "HANDLER_GIT_READ",
            bin.join("handler-git-read").display().to_string(),
        ),
        ("HANDLER_LOG", "info".to_string()),
        (
            "HANDLER_TERMINAL",
            bin.join("fake-terminal").display().to_string(),
        ),
        ("HANDLER_CLI", "/opt/handler/handler".to_string()),
        ("HANDLER_MACHINE_IMAGES", format!("{IMAGE}:*")),
    ]);
    let (mut child, token) = test_support::handlerd::spawn(
        as_user(&user, bin.join("handlerd").to_str().unwrap(), &[], &env),
        &root.0,
        port,
    )
    .await;
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{url}/v1/accounts"))
        .bearer_auth(&token)
        .json(&json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // A remote control gateway the Settings → Remote step sets up (D.7).
    let gw_data = tempfile::tempdir().unwrap();
    let gw_port = free_port();
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_handler-gateway"))
        .args(["--listen", &format!("127.0.0.1:{gw_port}")])
        .arg("--data")
        .arg(gw_data.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let shots = std::env::var("HANDLER_UI_SCREENSHOTS").unwrap_or_default();
    let out = Command::new("node")
        .arg(web.join("e2e/suite.mjs"))
        .env("HANDLER_URL", &url)
        .env("HANDLER_TOKEN", &token)
        .env("HANDLER_SCOPE", scope.display().to_string())
        .env("HANDLER_LOGIN_WINDOW", window.display().to_string())
        .env(
            "HANDLER_SECRETS_FILE",
            root.0.join("data/secrets.json").display().to_string(),
        )
        .env("HANDLER_MACHINE_IMAGE", IMAGE)
        .env("HANDLER_GATEWAY_URL", format!("http://127.0.0.1:{gw_port}"))
        .env("HANDLER_UI_SCREENSHOTS", &shots)
        .env("CHROMIUM", CHROMIUM)
        .current_dir(&web)
        .output()
        .unwrap();
    test_support::handlerd::stop(&mut child);
    let _ = gateway.kill();
    let _ = gateway.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(root.0.join("handlerd.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the browser suite failed:\n{stdout}\n{stderr}\nhandlerd's log:\n{}",
        log.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("{stderr}");
    let summary: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the suite's summary line");
    eprintln!("web UI: {summary}");
    assert!(
        summary["passed"].as_array().is_some_and(|p| p.len() >= 10),
        "{summary}"
    );
    for want in [
        "the model selector (configOptions) and the Files pane's Access tab",
        "a denied host is asked in the session and allowed; Learn hosts adds a host tried",
        "machines: made from the page, live from the change channel, stats, stopped elsewhere, deleted after a confirm",
        "a machine made for an agent, picked in the agent's form, deleted with its session stopped; a disposable machine per session",
        "remote control: a session shared by its switch, a gateway set up, a phone paired from the QR code's page, attached and prompting",
    ] {
        assert!(
            summary["passed"]
                .as_array()
                .is_some_and(|p| p.iter().any(|s| s == want)),
            "{want:?} did not pass: {summary}"
        );
    }
    assert!(
        !stdout.contains(&token) && !stderr.contains(&token),
        "the token in the suite's output"
    );
}
