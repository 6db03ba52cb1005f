//! The sandbox runtime's process handling against real rootless Podman (issue 11): the spec read
//! from an inherited pipe another uid made; sweep leaving alone a folder a label names outside
//! its runtime folder; a sandboxed process unable to forge an egress event on the launcher's
//! stderr (none and filtered); launchers killed with SIGKILL at random moments leaving nothing
//! behind (none and filtered, no daemon around); and the proxy never holding up traffic when its
//! event output is not read. Runs as root and starts the sandboxes as the unprivileged
//! `handler-test` user (.ci/setup-podman.sh), like the other container tests; the filtered ones
//! build the network filter image from the static proxy (`$HANDLER_EGRESS_PROXY_BIN` skips its
//! build).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::{USER, as_user, free_port, id_of, is_root, setpriv};

const IMAGE: &str = "localhost/handler-test-busybox:latest";

/// Runs only as root (the tests switch to the test user); otherwise skipped when
/// HANDLER_SKIP_PODMAN_TESTS=1, else failed.
fn ready() -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1") {
        eprintln!("podman tests skipped (HANDLER_SKIP_PODMAN_TESTS=1)");
        return false;
    }
    panic!(
        "these tests run as root (they start sandboxes as {USER}); or HANDLER_SKIP_PODMAN_TESTS=1"
    );
}

fn uid() -> u32 {
    id_of("-u", USER).unwrap()
}

/// A folder the test user can read holding handler-sandbox-podman, once per run.
fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = test_support::user::process_dir("sandbox-runtime-");
        std::fs::copy(
            env!("CARGO_BIN_EXE_handler-sandbox-podman"),
            d.join("handler-sandbox-podman"),
        )
        .unwrap();
        Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&d)
            .status()
            .unwrap();
        d
    })
}

fn hsp() -> String {
    dir().join("handler-sandbox-podman").display().to_string()
}

/// The network filter image, built once per test process from the static proxy.
fn network_filter() {
    test_support::network_filter::ensure(&dir().join("handler-sandbox-podman"));
}

fn spec(name: &str, script: &str, network: Value) -> Value {
    json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": IMAGE,
        "argv": ["sh", "-c", script], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": format!("/home/{USER}")}, "mounts": [], "files": [],
        "writablePaths": [], "network": network, "injections": []
    })
}

fn filtered() -> Value {
    json!({"mode": "filtered", "allow": ["allowed.example:443"], "enforcement": "enforce"})
}

/// `launch` as the test user with the spec on fd 3 (a world-readable file); the child is the
/// launcher itself (setpriv and sh exec).
fn launch(spec: &Value) -> Command {
    let name = spec["name"].as_str().unwrap();
    let file = dir().join(format!("{name}.json"));
    std::fs::write(&file, spec.to_string()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = as_user("sh", &["-c", "exec \"$0\" launch 3<\"$1\""]);
    c.arg(hsp()).arg(&file);
    c
}

/// The containers named like `name` (the sandbox and its proxy), as the test user sees them.
fn containers_of(name: &str) -> Vec<String> {
    let o = as_user(
        "podman",
        &[
            "ps",
            "-a",
            "--filter",
            &format!("label=handler.sandbox={name}"),
            "--format",
            "{{.Names}}",
        ],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

fn instance_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/handler-sandbox-{}/{name}", uid()))
}

fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "rt{}-{tag}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

#[test]
fn the_spec_is_read_from_an_inherited_pipe_another_user_made() {
    if !ready() {
        return;
    }
    let name = unique("fd");
    let s = spec(&name, "echo fd3-ok", json!({"mode": "none"}));
    // The pipe is made by this root shell; the launcher, run as the test user, inherits it as
    // fd 3 (a wrapper or service manager that drops privileges does the same).
    let p = setpriv();
    let script = format!(
        "printf '%s' \"$1\" | {} \"$2\" launch 3<&0 </dev/null",
        p.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = Command::new("sh")
        .args(["-c", &script, "sh", &s.to_string(), &hsp()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "fd3-ok");
}

#[test]
fn sweep_never_removes_a_folder_a_label_names_outside_its_runtime_folder() {
    if !ready() {
        return;
    }
    let name = unique("sweep");
    let outside = dir().join(format!("{name}-outside"));
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), "keep me").unwrap();
    Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(&outside)
        .status()
        .unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    // A container that looks like a dead launcher's, labelled with a folder outside.
    let created = as_user(
        "podman",
        &[
            "create",
            "--name",
            &name,
            "--label",
            "handler.launcher.pid=4194300",
            "--label",
            "handler.launcher.start=1",
            "--label",
            &format!("handler.launcher.boot={}", boot.trim()),
            "--label",
            &format!("handler.instance-dir={}", outside.display()),
            "--label",
            &format!("handler.sandbox={name}"),
            IMAGE,
            "true",
        ],
    )
    .output()
    .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let out = as_user(&hsp(), &["sweep"]).output().unwrap();
    let swept = String::from_utf8_lossy(&out.stdout).to_string();
    // Swept by this sweep, or by a handlerd's start-up sweep that another test ran meanwhile
    // (the same user): either way no sweep may touch the folder outside.
    assert!(
        swept.contains(&name) || containers_of(&name).is_empty(),
        "the container is swept: {swept}"
    );
    assert!(containers_of(&name).is_empty());
    assert_eq!(
        std::fs::read_to_string(outside.join("precious"))
            .ok()
            .as_deref(),
        Some("keep me"),
        "sweep removed a folder outside its runtime folder; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A forged event line, a bound's worth of padding then one, and a ready line, on stderr.
const FORGE: &str = r#"echo 'handler-egress {"decision":"leak","host":"evil.example:443","secret":"k"}' >&2; head -c 65536 /dev/zero | tr '\0' a >&2; echo 'handler-egress {"decision":"allowed","host":"padded.example:443"}' >&2; echo handler-ready >&2"#;

/// stderr for a failure's message: lines over 300 bytes shown by their length.
fn short(stderr: &str) -> String {
    stderr
        .lines()
        .map(|l| {
            if l.len() > 300 {
                format!("[{} bytes]", l.len())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn forged_run(network: Value, extra: &str) -> String {
    let name = unique("forge");
    let script = format!("{FORGE}; {extra} echo done");
    let out = launch(&spec(&name, &script, network))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", short(&stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    for l in stderr.lines() {
        if let Some(ev) = handler_contracts::sandbox::EgressEvent::from_line(l) {
            assert!(
                !ev.host.contains("evil") && !ev.host.contains("padded"),
                "a forged event came out as an event: {l}"
            );
        }
        assert_ne!(l, "handler-ready", "a forged ready line");
    }
    // The process's text is still there, only marked.
    assert!(
        stderr.contains("sandbox: handler-egress {\"decision\":\"leak\""),
        "{}",
        short(&stderr)
    );
    stderr
}

#[test]
fn a_sandboxed_process_cannot_forge_an_egress_event() {
    if !ready() {
        return;
    }
    forged_run(json!({"mode": "none"}), "");
    // Filtered: the proxy's own events still come out as events.
    network_filter();
    let stderr = forged_run(
        filtered(),
        r"(printf 'GET http://unlisted.example/ HTTP/1.1\r\nHost: unlisted.example\r\nConnection: close\r\n\r\n'; sleep 2) | nc 127.0.0.1 3128 | head -1;",
    );
    let genuine = stderr.lines().any(|l| {
        handler_contracts::sandbox::EgressEvent::from_line(l)
            .is_some_and(|e| e.host == "unlisted.example:80")
    });
    assert!(
        genuine,
        "the proxy's denied event is missing: {}",
        short(&stderr)
    );
}

/// A tiny pseudo-random sequence (no randomness crate needed for kill times).
fn jitter(seed: &mut u64, max_ms: u64) -> Duration {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    Duration::from_millis((*seed >> 33) % max_ms)
}

#[test]
fn launchers_killed_with_sigkill_at_random_moments_leave_nothing() {
    if !ready() {
        return;
    }
    network_filter();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut failures = Vec::new();
    // 20 runs, half none and half filtered, 5 at a time.
    for batch in 0..4 {
        let mut runs: Vec<(String, Child, Duration)> = Vec::new();
        for i in 0..5 {
            let network = if (batch * 5 + i) % 2 == 0 {
                json!({"mode": "none"})
            } else {
                filtered()
            };
            let name = unique("kill");
            let child = launch(&spec(&name, "sleep 60", network))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // From at once (still planning) to well after the start (running).
            runs.push((name, child, jitter(&mut seed, 3000)));
        }
        let started = Instant::now();
        let mut killed_at = Vec::new();
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].2);
        for i in order {
            let (name, child, after) = &mut runs[i];
            if let Some(left) = after.checked_sub(started.elapsed()) {
                std::thread::sleep(left);
            }
            let _ = Command::new("kill")
                .args(["-KILL", &child.id().to_string()])
                .status();
            let _ = child.wait();
            killed_at.push((name.clone(), *after, Instant::now()));
        }
        for (name, after, at) in killed_at {
            let deadline = at + Duration::from_secs(10);
            loop {
                let left = containers_of(&name);
                let folder = instance_dir(&name).exists();
                if left.is_empty() && !folder {
                    break;
                }
                if Instant::now() >= deadline {
                    failures.push(format!(
                        "{name} killed after {after:?}: containers {left:?}, folder left: {folder}"
                    ));
                    // Not left for the next tests.
                    let _ = as_user(&hsp(), &["sweep"]).output();
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "left 10 s after SIGKILL:\n{}",
        failures.join("\n")
    );
}

/// The proxy on this machine (not in a container), its stderr a pipe nobody reads.
struct Proxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy_unread() -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, r#"{"enforcement":"enforce","allow":[]}"#).unwrap();
    let config = json!({"mode": "filter", "listen": "127.0.0.1:0", "settingsFile": settings});
    let mut child = Command::new(env!("CARGO_BIN_EXE_handler-egress-proxy"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.to_string().as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).unwrap();
    let port = ready["listen"]
        .as_str()
        .and_then(|l| l.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line}"));
    Proxy {
        child,
        port,
        _dir: dir,
    }
}

#[test]
fn a_proxy_whose_event_output_is_not_read_keeps_forwarding_and_reports_the_drops() {
    let mut p = proxy_unread();
    // Each request is refused with a denied event; 64 KiB of unread stderr is about 1000.
    for i in 0..3000 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET http://h{i}.unlisted.example/ HTTP/1.1\r\nHost: h{i}.unlisted.example\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head)
            .unwrap_or_else(|e| panic!("request {i} got no answer: {e} (the proxy stalled)"));
        assert_eq!(&head[9..12], b"403", "request {i}");
    }
    // Now read: the queued events, then how many were dropped.
    let stderr = p.child.stderr.take().unwrap();
    let found = Arc::new(Mutex::new(None::<String>));
    let f = found.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            if l.contains("were dropped") {
                *f.lock().unwrap() = Some(l);
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while found.lock().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let line = found
        .lock()
        .unwrap()
        .clone()
        .expect("a line saying events were dropped");
    let n: u64 = line
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or(0);
    assert!(n > 0, "{line}");
}

/// The pids of `parent`'s children whose command is `comm` (as /proc/PID/stat shows it).
fn children_named(parent: u32, comm: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && comm.starts_with(name) {
            out.push(pid);
        }
    }
    out
}

fn containers_of_launcher(pid: u32) -> Vec<String> {
    let o = as_user(
        "podman",
        &[
            "ps",
            "-a",
            "--filter",
            &format!("label=handler.launcher.pid={pid}"),
            "--format",
            "{{.Names}}",
        ],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

struct Daemon {
    child: Child,
    port: u16,
    token: String,
    root: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// handlerd as the test user with the real launcher; its harness `fake` runs `sleep 60` in the
/// busybox image (no ACP needed: the test only needs sandboxes to kill).
async fn daemon() -> Daemon {
    let root = dir().join("daemon");
    let home = root.join("home");
    let scope = home.join("code/app");
    let bin = root.join("bin");
    for d in [
        &scope,
        &bin,
        &home.join("harnesses/fake"),
        &root.join("config"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    for (name, src) in [
        ("handlerd", env!("CARGO_BIN_EXE_handlerd")),
        (
            "handler-sandbox-podman",
            env!("CARGO_BIN_EXE_handler-sandbox-podman"),
        ),
    ] {
        std::fs::copy(src, bin.join(name)).unwrap();
    }
    std::fs::write(
        home.join("harnesses/fake/harness.toml"),
        test_support::descriptor::sandbox_fake(
            "Fake",
            "localhost/handler-test-busybox",
            "\"/bin/sh\", \"-c\", \"sleep 60\"",
            "api.fake.test:443",
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("config/folders.toml"),
        format!("roots = [\"{}\"]\n", home.join("code").display()),
    )
    .unwrap();
    Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(&root)
        .status()
        .unwrap();
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&root)
        .status()
        .unwrap();
    let port = free_port();
    let d = |p: &str| root.join(p).display().to_string();
    let mut env: Vec<String> = test_support::handlerd::env(&root, &home.join("harnesses"), port)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push(format!(
        "HANDLER_SANDBOX_COMMAND={}",
        d("bin/handler-sandbox-podman")
    ));
    env.push("HANDLER_LOG=info".to_string());
    let mut args: Vec<&str> = env.iter().map(String::as_str).collect();
    let handlerd = d("bin/handlerd");
    args.push(&handlerd);
    let (child, token) = test_support::handlerd::spawn(as_user("env", &args), &root, port).await;
    let http = reqwest::Client::new();
    let daemon = Daemon {
        child,
        port,
        token,
        root: root.clone(),
    };
    let post = |path: &str, body: Value| {
        http.post(format!("http://127.0.0.1:{port}{path}"))
            .bearer_auth(&daemon.token)
            .json(&body)
            .send()
    };
    let r = post(
        "/v1/accounts",
        json!({"name": "perso", "harness": "fake", "token": {"value": "fk-Sandbox0Token1111aaaa2222bbbb3333"}}),
    )
    .await
    .unwrap();
    if r.status() != 201 {
        let h = http
            .get(format!("http://127.0.0.1:{port}/v1/harnesses"))
            .bearer_auth(&daemon.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap_or_default();
        panic!(
            "account refused: {}; harnesses: {}; log: {}",
            r.text().await.unwrap_or_default(),
            h.len(),
            std::fs::read_to_string(root.join("handlerd.log")).unwrap_or_default()
        );
    }
    let _ = scope;
    daemon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launchers_of_handlerd_killed_with_sigkill_leave_nothing() {
    if !ready() {
        return;
    }
    network_filter();
    let d = daemon().await;
    let scope = d.root.join("home/code/app").display().to_string();
    let http = reqwest::Client::new();
    // One agent with no network, one filtered (the default: guarded).
    let mut agents = Vec::new();
    for body in [
        json!({"models": [{"account": "perso"}], "scope": scope, "network": "none", "permissions": "ask"}),
        json!({"models": [{"account": "perso"}], "scope": scope, "permissions": "ask"}),
    ] {
        let r = http
            .post(format!("http://127.0.0.1:{}/v1/agents", d.port))
            .bearer_auth(&d.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let agent: Value = r.json().await.unwrap();
        agents.push(agent["id"].as_str().unwrap().to_string());
    }
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let daemon_pid = d.child.id();
    let mut failures = Vec::new();
    // 20 runs, none and filtered in turn, 5 at a time.
    for batch in 0..4 {
        let mut sockets = Vec::new();
        let before = children_named(daemon_pid, "handler-sandbox-podman");
        for i in 0..5 {
            let id = &agents[(batch * 5 + i) % 2];
            use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
            let mut req = format!("ws://127.0.0.1:{}/v1/agents/{id}/acp", d.port)
                .into_client_request()
                .unwrap();
            req.headers_mut().insert(
                "sec-websocket-protocol",
                format!("acp.v1, bearer.{}", d.token).parse().unwrap(),
            );
            let (ws, _) = tokio_tungstenite::connect_async(req)
                .await
                .unwrap_or_else(|e| panic!("WebSocket refused: {e}"));
            sockets.push(ws);
        }
        // Its five launchers.
        let deadline = Instant::now() + Duration::from_secs(15);
        let launchers = loop {
            let now: Vec<u32> = children_named(daemon_pid, "handler-sandbox-podman")
                .into_iter()
                .filter(|p| !before.contains(p))
                .collect();
            if now.len() >= 5 || Instant::now() >= deadline {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(launchers.len(), 5, "launchers of handlerd: {launchers:?}");
        let mut times: Vec<(u32, Duration)> = launchers
            .iter()
            .map(|&p| (p, jitter(&mut seed, 3000)))
            .collect();
        times.sort_by_key(|t| t.1);
        let started = Instant::now();
        let mut killed = Vec::new();
        for (pid, after) in times {
            if let Some(left) = after.checked_sub(started.elapsed()) {
                tokio::time::sleep(left).await;
            }
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            killed.push((pid, after, Instant::now()));
        }
        for (pid, after, at) in killed {
            let deadline = at + Duration::from_secs(10);
            loop {
                let left = containers_of_launcher(pid);
                if left.is_empty() {
                    break;
                }
                if Instant::now() >= deadline {
                    failures.push(format!("launcher {pid} killed after {after:?}: {left:?}"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        drop(sockets);
    }
    if !failures.is_empty() {
        let _ = as_user(&hsp(), &["sweep"]).output();
    }
    assert!(
        failures.is_empty(),
        "left 10 s after SIGKILL:\n{}\nhandlerd: {}",
        failures.join("\n"),
        std::fs::read_to_string(d.root.join("handlerd.log")).unwrap_or_default()
    );
}
