//! The filtered topology with real rootless Podman (A.3, A4): an allowed host on this machine,
//! reached as host.containers.internal through the proxy; an unlisted one refused 403 with a
//! denied event; direct egress failing; nothing left after. Runs as root like the other sandbox
//! tests and starts the sandbox as the unprivileged `handler-test` user (.ci/setup-podman.sh);
//! the network filter image is built first from `$HANDLER_EGRESS_PROXY_BIN`
//! (fixtures/egress/build-static-proxy.sh prints it).

use std::io::Write as _;
use std::process::{Command, Stdio};

const USER: &str = "handler-test";

fn as_user(args: &[&str]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", USER, "--", "env", "-C", "/tmp"]).args(args);
    c
}

#[test]
fn a_filtered_sandbox_reaches_only_its_allowed_host() {
    let proxy_bin = std::env::var("HANDLER_EGRESS_PROXY_BIN")
        .expect("HANDLER_EGRESS_PROXY_BIN: the static proxy (fixtures/egress/build-static-proxy.sh prints it)");
    // The binaries must be readable by the test user.
    let dir = tempfile::Builder::new().prefix("egress-podman").tempdir_in("/tmp").unwrap();
    let hsp = dir.path().join("handler-sandbox-podman");
    let proxy = dir.path().join("handler-egress-proxy");
    std::fs::copy(env!("CARGO_BIN_EXE_handler-sandbox-podman"), &hsp).unwrap();
    std::fs::copy(&proxy_bin, &proxy).unwrap();
    Command::new("chmod").args(["-R", "a+rX"]).arg(dir.path()).status().unwrap();
    let hsp_s = hsp.to_string_lossy().to_string();
    let bin_env = format!("HANDLER_EGRESS_PROXY_BIN={}", proxy.display());
    let built = as_user(&[&bin_env, &hsp_s, "image", "build-proxy"]).output().unwrap();
    assert!(built.status.success(), "build-proxy: {}", String::from_utf8_lossy(&built.stderr));

    // A server on this machine, on every address.
    let server = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 2048];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
        }
    });
    let name = format!("egtest-{}", std::process::id());
    let req = |h: &str| {
        format!(
            "{{ printf 'GET http://{h}:{port}/ HTTP/1.1\\r\\nHost: {h}:{port}\\r\\nConnection: close\\r\\n\\r\\n'; sleep 2; }} | nc {name}-egress 3128 | head -1"
        )
    };
    let script = format!(
        "{}; {}; nc -w 3 host.containers.internal {port} </dev/null && echo DIRECT-OK || echo DIRECT-FAILED",
        req("host.containers.internal"),
        req("example.com")
    );
    let spec = serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": "localhost/handler-test-busybox",
        "argv": ["sh", "-c", script], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/handler-test"}, "mounts": [], "files": [],
        "writablePaths": [],
        "network": {"mode": "filtered", "allow": [format!("host.containers.internal:{port}")], "enforcement": "enforce"}
    });
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    Command::new("chmod").arg("a+r").arg(&spec_path).status().unwrap();
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "sh", "-c", &format!("cd /tmp && {hsp_s} launch 3<{}", spec_path.display())])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "launch: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some("HTTP/1.1 200 OK"), "allowed through the proxy: {stdout} {stderr}");
    assert_eq!(lines.get(1).copied(), Some("HTTP/1.1 403 Forbidden"), "{stdout}");
    assert!(stdout.contains("DIRECT-FAILED"), "no route out: {stdout}");
    assert!(stderr.contains(&format!(r#"handler-egress {{"decision":"allowed","host":"host.containers.internal:{port}"}}"#)), "{stderr}");
    assert!(stderr.contains(&format!(r#"handler-egress {{"decision":"denied","host":"example.com:{port}"}}"#)), "{stderr}");
    // Nothing left: no container, no network of this instance.
    let ps = as_user(&["podman", "ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(&name));
    let nets = as_user(&["podman", "network", "ls", "--format", "{{.Name}}"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&nets.stdout).contains(&name));
}
