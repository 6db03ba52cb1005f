//! The egress filter with real rootless Podman (A.3, A.4, A4, E3): each sandbox is a busybox
//! container with no interface but loopback whose only way out is its proxy container (the
//! network filter image, built here from the static proxy), through the socket its forwarder
//! relays to (decision 0024); the test servers run on this machine, over
//! real TLS with rcgen certificates, reached as host.containers.internal; the client inside is
//! fixtures/egress-probe (static). Covered: an allowed host reached, an unlisted one refused
//! with a denied event, no direct route; injection (the server receives the value in a header,
//! Basic credentials, the query and the body while the process reads only the phantom, with an
//! injected event); a phantom sent to another allowed host refused 403 with a leak event; an
//! SSE stream arriving event by event; a tunnel to a host without injections not decrypted (the
//! client sees the server's own certificate); set-allow and set-egress (log-only → unlisted) on
//! the running sandbox deciding the next request, and closing the connections already open that
//! it no longer allows (WebSockets with a close 1012); a server on the host's loopback; an open
//! sandbox with an injection; a proxy that cannot start failing the launch; nothing left after
//! exit or SIGTERM. Runs as
//! root like the other sandbox tests and starts the sandboxes as the unprivileged `handler-test`
//! user (.ci/setup-podman.sh). Builds the static proxy and probe itself unless
//! `$HANDLER_EGRESS_PROXY_BIN` / `$HANDLER_EGRESS_PROBE_BIN` are given.

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rcgen::{CertificateParams, CertifiedIssuer, DnType, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use test_support::network_filter::test_ca;
use test_support::static_build;
use test_support::user::as_user;
use tokio_tungstenite::tungstenite;

const HCI: &str = "host.containers.internal";

/// What every test shares: a folder the test user can read holding handler-sandbox-podman and
/// the probe, the test servers' CA, and the network filter image built with that CA among its
/// roots (as a company CA would be, `HANDLER_EGRESS_EXTRA_ROOTS`), once per run.
struct Shared {
    dir: PathBuf,
    hsp: String,
    probe_dir: PathBuf,
    ca: &'static CertifiedIssuer<'static, KeyPair>,
}

/// The runtime the case on this thread runs against (set by the generated test, issue 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rt {
    Podman,
    Docker,
}

thread_local! {
    static RT: std::cell::Cell<Rt> = const { std::cell::Cell::new(Rt::Podman) };
}

fn rt() -> Rt {
    RT.with(std::cell::Cell::get)
}

impl Rt {
    fn cli(self) -> &'static str {
        match self {
            Rt::Podman => "podman",
            Rt::Docker => "docker",
        }
    }
}

fn shared() -> &'static Shared {
    static PODMAN: OnceLock<Shared> = OnceLock::new();
    static DOCKER: OnceLock<Shared> = OnceLock::new();
    let (cell, exe, ensure): (_, &str, fn(&Path) -> &'static Path) = match rt() {
        Rt::Podman => (
            &PODMAN,
            env!("CARGO_BIN_EXE_handler-sandbox-podman"),
            test_support::network_filter::ensure,
        ),
        Rt::Docker => (
            &DOCKER,
            env!("CARGO_BIN_EXE_handler-sandbox-docker"),
            test_support::network_filter::ensure_docker,
        ),
    };
    cell.get_or_init(|| {
        let proxy_bin = static_build::static_proxy();
        let probe_bin = static_build::static_probe();
        let dir = test_support::user::process_dir(&format!("egress-{}-", rt().cli()));
        std::fs::create_dir_all(dir.join("probe")).unwrap();
        let hsp = dir.join(Path::new(exe).file_name().unwrap());
        std::fs::copy(exe, &hsp).unwrap();
        std::fs::copy(&proxy_bin, dir.join("handler-egress-proxy")).unwrap();
        std::fs::copy(&probe_bin, dir.join("probe/egress-probe")).unwrap();

        Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&dir)
            .status()
            .unwrap();
        let hsp_s = hsp.to_string_lossy().to_string();
        // The image, with the test servers' CA among its roots, shared by the whole binary.
        ensure(&hsp);
        let ca = test_ca();
        Shared {
            probe_dir: dir.join("probe"),
            hsp: hsp_s,
            dir,
            ca,
        }
    })
}

/// What a test server received, one dump per request.
type Seen = Arc<Mutex<Vec<String>>>;

/// A server on every address of this machine (a container reaches it as
/// host.containers.internal): HTTPS with a leaf for host.containers.internal named `cn` signed
/// by the test CA, or plain HTTP. `/sse` streams three events 500 ms apart; anything else
/// echoes the path, the x-api-key header, the Basic credentials (decoded) and the body.
fn server(cn: Option<&str>) -> (u16, Seen) {
    server_on("0.0.0.0:0", cn)
}

/// [`server`] listening on `bind` only (e.g. the host's loopback).
fn server_on(bind: &str, cn: Option<&str>) -> (u16, Seen) {
    let tls = cn.map(|cn| {
        let mut p = CertificateParams::new(vec![HCI.to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, shared().ca).unwrap();
        Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                )
                .unwrap(),
        )
    });
    let l = TcpListener::bind(bind).unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (tls, seen) = (tls.clone(), seen2.clone());
            std::thread::spawn(move || match tls {
                Some(cfg) => {
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    let mut s = rustls::StreamOwned::new(conn, s);
                    serve(&mut s, &seen);
                    s.conn.send_close_notify();
                    let _ = s.flush();
                }
                None => {
                    let mut s = s;
                    serve(&mut s, &seen);
                }
            });
        }
    });
    (port, seen)
}

fn serve<S: Read + Write>(s: &mut S, seen: &Seen) {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let path = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut out = format!("path {path}\n");
    let mut len = 0;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        match k.as_str() {
            "x-api-key" => out.push_str(&format!("x-api-key {v}\n")),
            "authorization" => {
                let dec = v
                    .strip_prefix("Basic ")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .map(|d| String::from_utf8_lossy(&d).to_string())
                    .unwrap_or_default();
                out.push_str(&format!("basic {dec}\n"));
            }
            "content-length" => len = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    while buf.len() < head_end + len {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    if len > 0 {
        out.push_str(&format!(
            "body {}\n",
            String::from_utf8_lossy(&buf[head_end..])
        ));
    }
    seen.lock().unwrap().push(out.clone());
    if path.starts_with("/sse") {
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
        );
        for i in 1..=3 {
            let _ = s.write_all(format!("data: event {i}\n\n").as_bytes());
            let _ = s.flush();
            std::thread::sleep(Duration::from_millis(500));
        }
        return;
    }
    let _ = s.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        )
        .as_bytes(),
    );
    let _ = s.flush();
}

/// A running launcher: its stdout lines as they come, its stderr so far.
struct Launch {
    child: Child,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Launch {
    /// Reads stdout until a line equal to `marker`, returning the lines read since the last call.
    fn until(&mut self, marker: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stdout.push(l.clone());
                    let done = l == marker;
                    got.push(l);
                    if done {
                        return got;
                    }
                }
                Err(_) => panic!(
                    "no {marker:?} within {within:?}; stdout: {:?}; stderr: {}",
                    self.stdout,
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }
    /// The next stdout line.
    fn next_line(&mut self, within: Duration) -> String {
        let l = self.lines.recv_timeout(within).unwrap_or_else(|_| {
            panic!(
                "no line within {within:?}; stdout: {:?}; stderr: {}",
                self.stdout,
                self.stderr()
            )
        });
        self.stdout.push(l.clone());
        l
    }
    /// Whether stderr holds `needle` within 10 s (stderr and stdout are separate pipes).
    fn stderr_has(&self, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.stderr().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// Launches `script` (sh) as a filtered busybox sandbox named `name`, the probe at /probe.
fn launch(
    name: &str,
    script: &str,
    network: serde_json::Value,
    injections: serde_json::Value,
    ctl: Option<&Path>,
) -> Launch {
    launch_env(name, script, (network, injections), ctl, &[])
}

/// [`launch`] with `env` (`NAME=value`) added to the launcher's environment.
fn launch_env(
    name: &str,
    script: &str,
    (network, injections): (serde_json::Value, serde_json::Value),
    ctl: Option<&Path>,
    env: &[&str],
) -> Launch {
    let sh = shared();
    let mut mounts = vec![serde_json::json!({
        "source": sh.probe_dir, "target": "/probe", "readOnly": true, "kind": "app"
    })];
    if let Some(c) = ctl {
        mounts.push(
            serde_json::json!({"source": c, "target": "/ctl", "readOnly": true, "kind": "state"}),
        );
    }
    let spec = serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": "localhost/handler-test-busybox",
        "argv": ["sh", "-c", script], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/handler-test"}, "mounts": mounts, "files": [],
        "writablePaths": [], "network": network, "injections": injections
    });
    let spec_path = sh.dir.join(format!("{name}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    Command::new("chmod")
        .arg("a+r")
        .arg(&spec_path)
        .status()
        .unwrap();
    // `exec`: the launcher is this child itself, so SIGTERM reaches it.
    let mut words: Vec<&str> = env.to_vec();
    words.extend([sh.hsp.as_str(), "launch"]);
    let inner = as_user("env", &words);
    let argv: Vec<String> = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| a.to_string_lossy().to_string())
        .collect();
    let mut child = Command::new("sh")
        .args([
            "-c",
            &format!("exec \"$@\" 3<{}", spec_path.display()),
            "sh",
        ])
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let stderr: Arc<Mutex<String>> = Arc::default();
    let (err, e2) = (child.stderr.take().unwrap(), stderr.clone());
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let mut s = e2.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    Launch {
        child,
        lines: rx,
        stdout: Vec::new(),
        stderr,
    }
}

fn event(decision: &str, host: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) => {
            format!(r#"handler-egress {{"decision":"{decision}","host":"{host}","secret":"{s}"}}"#)
        }
        None => format!(r#"handler-egress {{"decision":"{decision}","host":"{host}"}}"#),
    }
}

fn filtered(allow: &[String], enforcement: &str) -> serde_json::Value {
    serde_json::json!({"mode": "filtered", "allow": allow, "enforcement": enforcement})
}

/// Nothing of the instance left: no container, no network.
fn assert_nothing_left(name: &str) {
    let ps = as_user(rt().cli(), &["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout).to_string();
    assert!(!ps.contains(name), "containers left: {ps}");
    let nets = as_user(rt().cli(), &["network", "ls", "--format", "{{.Name}}"])
        .output()
        .unwrap();
    let nets = String::from_utf8_lossy(&nets.stdout).to_string();
    assert!(!nets.contains(name), "networks left: {nets}");
}

fn wait_exit(l: &mut Launch, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = l.child.try_wait().unwrap() {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "the launcher did not exit: {}",
            l.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn a_filtered_sandbox_reaches_only_its_allowed_host() {
    let (port, _seen) = server(None);
    let name = format!("egtest-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "/probe/egress-probe http://{HCI}:{port}/a; /probe/egress-probe http://example.com:{port}/b; \
         nc -w 3 {HCI} {port} </dev/null && echo DIRECT-OK || echo DIRECT-FAILED; echo DONE"
    );
    let mut l = launch(
        &name,
        &script,
        filtered(&[format!("{HCI}:{port}")], "enforce"),
        serde_json::json!([]),
        None,
    );
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    let st = wait_exit(&mut l, Duration::from_secs(30));
    assert!(st.success(), "launch: {}", l.stderr());
    let stderr = l.stderr();
    let statuses: Vec<&str> = out.lines().filter(|x| x.starts_with("STATUS")).collect();
    assert_eq!(
        statuses,
        ["STATUS 200", "STATUS 403"],
        "allowed, then refused: {out}"
    );
    assert!(
        out.contains("LINE") && out.contains("path /a"),
        "the allowed server answered: {out}"
    );
    assert!(out.contains("DIRECT-FAILED"), "no route out: {out}");
    assert!(
        stderr.contains(&event("allowed", &format!("{HCI}:{port}"), None)),
        "{stderr}"
    );
    assert!(
        stderr.contains(&event("denied", &format!("example.com:{port}"), None)),
        "{stderr}"
    );
    assert_nothing_left(&name);
}

/// A model server that listens only on the host's loopback (as llama.cpp's does by default) is
/// reached from a filtered sandbox as host.containers.internal:PORT through its proxy, when that
/// entry is allowed; the process itself has no route to it.
fn a_filtered_sandbox_reaches_a_server_on_the_hosts_loopback() {
    let (port, seen) = server_on("127.0.0.1:0", None);
    let name = format!("eglo-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "/probe/egress-probe http://{HCI}:{port}/v1/models; \
         nc -w 3 {HCI} {port} </dev/null && echo DIRECT-OK || echo DIRECT-FAILED; echo DONE"
    );
    let mut l = launch(
        &name,
        &script,
        filtered(&[format!("{HCI}:{port}")], "enforce"),
        serde_json::json!([]),
        None,
    );
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    let st = wait_exit(&mut l, Duration::from_secs(30));
    assert!(st.success(), "launch: {}", l.stderr());
    assert!(
        out.contains("STATUS 200") && out.contains("path /v1/models"),
        "the loopback-only server answered through the proxy: {out}\n{}",
        l.stderr()
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "one request reached it");
    assert!(out.contains("DIRECT-FAILED"), "no route of its own: {out}");
    assert!(
        l.stderr()
            .contains(&event("allowed", &format!("{HCI}:{port}"), None)),
        "{}",
        l.stderr()
    );
    assert_nothing_left(&name);
}

/// A filtered sandbox has no DNS server (a resolver would forward its lookups to the host's: a
/// channel around the proxy, decisions 0023, 0024): an outside name does not resolve inside it,
/// nor the proxy's container name, while its allowed host is still reached through the proxy.
fn a_filtered_sandbox_cannot_resolve_outside_names() {
    let (port, _seen) = server(None);
    let name = format!("egdns-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "nslookup deb.debian.org && echo RESOLVED || echo UNRESOLVED; \
         nslookup {name}-egress && echo RESOLVED-INTERNAL || echo UNRESOLVED-INTERNAL; \
         /probe/egress-probe http://{HCI}:{port}/a; echo DONE"
    );
    let mut l = launch(
        &name,
        &script,
        filtered(&[format!("{HCI}:{port}")], "enforce"),
        serde_json::json!([]),
        None,
    );
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    let st = wait_exit(&mut l, Duration::from_secs(30));
    assert!(st.success(), "launch: {}", l.stderr());
    assert!(
        out.lines().any(|x| x == "UNRESOLVED") && !out.lines().any(|x| x == "RESOLVED"),
        "an outside name must not resolve in a filtered sandbox: {out}"
    );
    assert!(out.contains("UNRESOLVED-INTERNAL"), "{out}");
    assert!(
        out.contains("STATUS 200") && out.contains("path /a"),
        "the allowed host is still reached through the proxy: {out}"
    );
    assert_nothing_left(&name);
}

/// The lines of `out` after the line `from` and before the line `to`.
fn section<'a>(out: &'a [String], from: &str, to: &str) -> Vec<&'a str> {
    out.iter()
        .skip_while(|l| *l != from)
        .skip(1)
        .take_while(|l| *l != to)
        .map(std::string::String::as_str)
        .collect()
}

/// An `open` sandbox with an injection: its reporting proxy injects the value towards the
/// injection's host (the process reads the phantom back), reports only the injection, and the
/// sandbox keeps its direct route (A.3).
fn an_open_sandbox_with_an_injection_keeps_its_route_and_gets_the_value_injected() {
    let (inj, inj_seen) = server(Some("egress-test-injected"));
    let (plain, _plain_seen) = server(None);
    let phantom = format!("sk-open-{}", "Ph4nt0m1".repeat(4));
    let value = format!("sk-open-{}", "R3alV4lu".repeat(4));
    let name = format!("egopen-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "/probe/egress-probe https://{HCI}:{inj}/echo -H \"x-api-key: {phantom}\"; \
         nc -w 3 {HCI} {plain} </dev/null && echo DIRECT-OK || echo DIRECT-FAILED; echo DONE"
    );
    let injections = serde_json::json!([{
        "name": "test/openKey", "phantom": phantom, "value": value, "hosts": [format!("{HCI}:{inj}")]
    }]);
    let mut l = launch(
        &name,
        &script,
        serde_json::json!({"mode": "open"}),
        injections,
        None,
    );
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    let st = wait_exit(&mut l, Duration::from_secs(30));
    let stderr = l.stderr();
    assert!(st.success(), "launch: {stderr}");
    let got = inj_seen.lock().unwrap().join("\n");
    assert!(got.contains(&format!("x-api-key {value}")), "{got}");
    assert!(
        out.contains(&format!("x-api-key {phantom}")) && !out.contains(&value),
        "{out}"
    );
    assert!(
        out.contains("DIRECT-OK"),
        "an open sandbox keeps its route: {out}"
    );
    assert!(
        stderr.contains(&event(
            "injected",
            &format!("{HCI}:{inj}"),
            Some("test/openKey")
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains(r#""decision":"allowed""#),
        "a reporting proxy reports only injections: {stderr}"
    );
    assert_nothing_left(&name);
}

fn injection_leak_stream_and_undecrypted_tunnel() {
    let (inj, inj_seen) = server(Some("egress-test-injected"));
    let (other, other_seen) = server(Some("egress-test-other"));
    let (plain, plain_seen) = server(None);
    let phantom = format!("sk-test-{}", "Ph4nt0m1".repeat(4));
    let value = format!("sk-test-{}", "R3alV4lu".repeat(4));
    let name = format!("eginj-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "P=/probe/egress-probe; PH={phantom}\n\
         echo '== inject'; $P \"https://{HCI}:{inj}/echo?key=$PH\" -H \"x-api-key: $PH\" -u \"user:$PH\" -d \"key=$PH\"\n\
         echo '== sse'; $P https://{HCI}:{inj}/sse\n\
         echo '== leak'; $P \"http://{HCI}:{plain}/echo\" -H \"x-api-key: $PH\"\n\
         echo '== tunnel'; $P https://{HCI}:{other}/echo -H \"x-api-key: $PH\"\n\
         echo '== env'; echo \"SSL_CERT_FILE=$SSL_CERT_FILE\"; env | grep -c R3alV4lu; echo DONE\n"
    );
    let allow: Vec<String> = [inj, other, plain]
        .iter()
        .map(|p| format!("{HCI}:{p}"))
        .collect();
    let injections = serde_json::json!([{
        "name": "test/apiKey", "phantom": phantom, "value": value, "hosts": [format!("{HCI}:{inj}")],
        // The form body's phantom is swapped too: an opt-in (decision 0033).
        "body": true
    }]);
    let mut l = launch(
        &name,
        &script,
        filtered(&allow, "enforce"),
        injections,
        None,
    );
    l.until("DONE", Duration::from_secs(90));
    let st = wait_exit(&mut l, Duration::from_secs(30));
    let (out, stderr) = (l.stdout.clone(), l.stderr());
    assert!(st.success(), "launch: {stderr}");
    let all = out.join("\n");
    assert!(
        !all.contains(&value) && !stderr.contains(&value),
        "the value reached the process or the log: {all}"
    );

    // Injection: the server received the value everywhere the phantom was…
    let got = inj_seen.lock().unwrap().join("\n");
    for want in [
        format!("path /echo?key={value}"),
        format!("x-api-key {value}"),
        format!("basic user:{value}"),
        format!("body key={value}"),
    ] {
        assert!(
            got.contains(&want),
            "the server should have received {want:?}: {got}"
        );
    }
    assert!(
        !got.contains(&phantom),
        "a phantom reached the injection host: {got}"
    );
    // …and echoed it back; the process read the phantom.
    let inject = section(&out, "== inject", "== sse");
    assert!(inject.contains(&"STATUS 200"), "{inject:?}");
    for want in [
        format!("path /echo?key={phantom}"),
        format!("x-api-key {phantom}"),
        format!("basic user:{phantom}"),
        format!("body key={phantom}"),
    ] {
        assert!(
            inject.iter().any(|l| l.ends_with(&want)),
            "the process should read {want:?}: {inject:?}"
        );
    }
    // Decrypted by the proxy: the certificate the client saw is the proxy's, not the server's.
    assert!(
        inject.contains(&format!("CERT CN={HCI}").as_str()),
        "{inject:?}"
    );
    assert!(
        stderr.contains(&event(
            "injected",
            &format!("{HCI}:{inj}"),
            Some("test/apiKey")
        )),
        "{stderr}"
    );

    // SSE through the decrypting proxy: event by event, not at the end.
    let sse = section(&out, "== sse", "== leak");
    let times: Vec<u64> = sse
        .iter()
        .filter(|l| l.contains("data: event"))
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), 3, "three events: {sse:?}");
    assert!(
        times[1] - times[0] >= 300 && times[2] - times[1] >= 300,
        "events arrived together (buffered): {sse:?}"
    );

    // A phantom towards another (allowed) host: refused before it leaves, reported.
    let leak = section(&out, "== leak", "== tunnel");
    assert!(leak.contains(&"STATUS 403"), "{leak:?}");
    assert!(
        stderr.contains(&event(
            "leak",
            &format!("{HCI}:{plain}"),
            Some("test/apiKey")
        )),
        "{stderr}"
    );
    assert!(
        plain_seen.lock().unwrap().is_empty(),
        "the leaking request reached its server"
    );

    // A host without injections: the tunnel is relayed, never decrypted.
    let tunnel = section(&out, "== tunnel", "== env");
    assert!(tunnel.contains(&"STATUS 200"), "{tunnel:?}");
    assert!(
        tunnel.contains(&"CERT CN=egress-test-other"),
        "the server's own certificate: {tunnel:?}"
    );
    let other_got = other_seen.lock().unwrap().join("\n");
    assert!(
        other_got.contains(&format!("x-api-key {phantom}")),
        "{other_got}"
    );

    let env = section(&out, "== env", "DONE");
    assert_eq!(
        env,
        ["SSL_CERT_FILE=/run/handler/ca-bundle.pem", "0"],
        "the bundle, no value in env"
    );
    assert_nothing_left(&name);
}

fn set_allow_and_set_egress_decide_the_next_request_then_sigterm_leaves_nothing() {
    let (a, _) = server(None);
    let (b, b_seen) = server(None);
    let sh = shared();
    let name = format!("eglive-{}-{}", std::process::id(), rt().cli());
    let ctl = sh.dir.join(format!("ctl-{name}"));
    std::fs::create_dir_all(&ctl).unwrap();
    Command::new("chmod").arg("755").arg(&ctl).status().unwrap();
    let script = format!(
        "w() {{ while [ ! -e /ctl/$1 ]; do sleep 0.1; done; }}; P=/probe/egress-probe\n\
         echo '== 1'; $P http://{HCI}:{b}/1; echo '-- 1'\n\
         w a; echo '== 2'; $P http://{HCI}:{b}/2; echo '-- 2'\n\
         IP=$(sed -n 's/^\\([0-9.]*\\)[[:space:]].*host\\.containers\\.internal.*/\\1/p' /etc/hosts | head -1); echo \"IP $IP\"\n\
         w b; echo '== 3'; $P http://$IP:{b}/3; echo '-- 3'\n\
         w c; echo '== 4'; $P http://$IP:{b}/4; echo '-- 4'\n\
         exec sleep 600\n"
    );
    let (ha, hb) = (format!("{HCI}:{a}"), format!("{HCI}:{b}"));
    let mut l = launch(
        &name,
        &script,
        filtered(std::slice::from_ref(&ha), "enforce"),
        serde_json::json!([]),
        Some(&ctl),
    );
    let verb = |args: &[&str]| {
        let o = as_user(&sh.hsp, args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let status = |lines: &[String]| lines.iter().find(|l| l.starts_with("STATUS")).cloned();

    let r = l.until("-- 1", Duration::from_secs(60));
    assert_eq!(
        status(&r).as_deref(),
        Some("STATUS 403"),
        "not listed yet: {r:?}"
    );
    assert!(l.stderr_has(&event("denied", &hb, None)), "{}", l.stderr());

    verb(&["set-allow", &name, &ha, &hb]);
    std::fs::write(ctl.join("a"), "").unwrap();
    let r = l.until("-- 2", Duration::from_secs(30));
    assert_eq!(
        status(&r).as_deref(),
        Some("STATUS 200"),
        "listed now: {r:?}"
    );
    assert!(l.stderr_has(&event("allowed", &hb, None)), "{}", l.stderr());

    // log-only lets an unlisted name through, reported `unlisted` (the host test
    // `log_only_lets_an_unlisted_host_through_and_reports_it`); but the host's own address,
    // written out as an IP literal (as the sandbox's /etc/hosts gives it), stays refused unless
    // an entry names exactly that address:port, log-only or not (decision 0035): from a real
    // sandbox, the host's services (handlerd among them) are not reached by switching to
    // log-only.
    let ip_line = l.next_line(Duration::from_secs(10));
    let ip = ip_line.strip_prefix("IP ").unwrap_or("").to_string();
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "the host's address in the sandbox's /etc/hosts: {ip_line:?}"
    );
    let hip = format!("{ip}:{b}");
    verb(&["set-allow", &name, &ha]);
    verb(&["set-egress", &name, "log-only"]);
    std::fs::write(ctl.join("b"), "").unwrap();
    let r = l.until("-- 3", Duration::from_secs(30));
    assert_eq!(
        status(&r).as_deref(),
        Some("STATUS 403"),
        "log-only does not open the host's address: {r:?}"
    );
    assert!(
        r.iter()
            .any(|l| l.contains(&format!("names {hip} exactly"))),
        "the 403 says how to allow it: {r:?}"
    );
    assert!(l.stderr_has(&event("denied", &hip, None)), "{}", l.stderr());
    assert!(
        !l.stderr_has(&event("unlisted", &hip, None)),
        "not let through as unlisted: {}",
        l.stderr()
    );

    verb(&["set-egress", &name, "enforce"]);
    std::fs::write(ctl.join("c"), "").unwrap();
    let r = l.until("-- 4", Duration::from_secs(30));
    assert_eq!(
        status(&r).as_deref(),
        Some("STATUS 403"),
        "enforced again: {r:?}"
    );
    assert!(l.stderr_has(&event("denied", &hip, None)), "{}", l.stderr());
    let seen: Vec<String> = b_seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.lines().next().unwrap().to_string())
        .collect();
    assert_eq!(
        seen,
        ["path /2"],
        "only the allowed request reached the server"
    );

    // SIGTERM: the launcher removes the sandbox and its proxy.
    Command::new("kill")
        .args(["-TERM", &l.child.id().to_string()])
        .status()
        .unwrap();
    wait_exit(&mut l, Duration::from_secs(60));
    assert_nothing_left(&name);
}

/// Fail closed (A1, decision 0024): when the proxy container cannot start, the launch fails
/// with 66 saying so, the process never runs (the sandbox started beside the proxy is held by
/// its forwarder, then removed), and nothing is left.
fn a_proxy_that_cannot_start_fails_the_launch_before_the_process_runs() {
    let sh = shared();
    let name = format!("egfail-{}-{}", std::process::id(), rt().cli());
    // podman, except that the proxy's container (named <name>-egress) cannot be run.
    let wrapper = sh.dir.join(format!("podman-no-proxy-{name}"));
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in *-egress) \
         echo 'Error: simulated: the proxy container cannot start' >&2; exit 125;; esac; done\n\
         exec {} \"$@\"\n",
            rt().cli()
        ),
    )
    .unwrap();
    let work = sh.dir.join(format!("work-{name}"));
    std::fs::create_dir_all(&work).unwrap();
    for p in [&wrapper, &work] {
        Command::new("chmod").arg("a+rwx").arg(p).status().unwrap();
    }
    let spec = serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": "localhost/handler-test-busybox",
        "argv": ["sh", "-c", "echo RAN > /work/ran; echo RAN"], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/handler-test"},
        "mounts": [{"source": work, "target": "/work", "readOnly": false, "kind": "state"}],
        "files": [], "writablePaths": [],
        "network": filtered(&["example.com:443".to_string()], "enforce"),
    });
    let spec_path = sh.dir.join(format!("{name}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    Command::new("chmod")
        .arg("a+r")
        .arg(&spec_path)
        .status()
        .unwrap();
    let var = match rt() {
        Rt::Podman => "HANDLER_PODMAN",
        Rt::Docker => "HANDLER_DOCKER",
    };
    let podman_env = format!("{var}={}", wrapper.display());
    let inner = as_user("env", &[&podman_env, &sh.hsp, "launch"]);
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("exec \"$@\" 3<{}", spec_path.display()),
            "sh",
        ])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(66), "{stderr}");
    assert!(
        stderr.contains("egress proxy did not start"),
        "the error says why: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("RAN") && !work.join("ran").exists(),
        "the process ran without its proxy"
    );
    assert_nothing_left(&name);
}

// A policy change applies to connections already open (A.4, egress-lessons): a process in a
// filtered sandbox holds four long-lived connections through its proxy — a streamed plain
// http:// response, a CONNECT tunnel, a WebSocket (ws://, the handshake and a masked frame
// written by hand to busybox `nc`; the frame's phantom reaches the server as the phantom, ws://
// being plain and a message content (decisions 0033, 0036), the server's echo comes back with
// the phantom) and a second streamed
// response to a host that stays allowed — then `set-allow` removes three hosts: those three
// connections end (the servers see their writes fail or a masked close frame 1012; the
// WebSocket client reads an unmasked close frame 1012), the fourth streams on to its end, and a
// new request to a removed host is refused with a denied event.

/// The sandbox holds the phantom; the WebSocket server's host gets the value.
const PHANTOM: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
const VALUE: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";

/// What a server did, one entry per event.
type Log = Arc<Mutex<Vec<String>>>;

fn log(l: &Log, s: String) {
    l.lock().unwrap().push(s);
}

/// A server on every address of this machine, one thread per connection.
fn listen(serve: impl Fn(TcpStream, &Log) + Send + Sync + 'static) -> (u16, Log) {
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let logged: Log = Arc::default();
    let (logged2, serve) = (logged.clone(), Arc::new(serve));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (logged, serve) = (logged2.clone(), serve.clone());
            std::thread::spawn(move || serve(s, &logged));
        }
    });
    (port, logged)
}

/// Reads a request head.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).to_string()
}

/// HTTP: answers every request with `lines` lines ("line NN"), one every `every`, in a body of
/// known length; logs `request <path>`, then `done` or `cut after N` (a write failed: the peer
/// closed).
fn streaming_http(lines: usize, every: Duration) -> (u16, Log) {
    listen(move |mut s, logged| {
        let head = read_head(&mut s);
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        log(logged, format!("request {path}"));
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            lines * 8
        );
        if s.write_all(head.as_bytes()).is_err() {
            log(logged, "cut after 0".into());
            return;
        }
        for i in 0..lines {
            if s.write_all(format!("line {i:02}\n").as_bytes()).is_err() || s.flush().is_err() {
                log(logged, format!("cut after {i}"));
                return;
            }
            std::thread::sleep(every);
        }
        log(logged, "done".into());
    })
}

/// Raw TCP (for a tunnel): "tick NN" lines, one every 250 ms for 20 s; logs `open`, then `done` or
/// `cut after N`.
fn ticker() -> (u16, Log) {
    listen(|mut s, logged| {
        log(logged, "open".into());
        for i in 0..80 {
            if s.write_all(format!("tick {i:02}\n").as_bytes()).is_err() || s.flush().is_err() {
                log(logged, format!("cut after {i}"));
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        log(logged, "done".into());
    })
}

/// WebSocket (tungstenite): after the handshake sends the text "hello", then logs what comes:
/// `text <t>` (and answers `echo <t>`), `close <code> <reason>`, `message …`, `error …`, then
/// `end`.
fn websocket() -> (u16, Log) {
    listen(|s, logged| {
        let mut ws = match tungstenite::accept(s) {
            Ok(ws) => ws,
            Err(e) => {
                log(logged, format!("handshake failed {e}"));
                return;
            }
        };
        log(logged, "open".into());
        let _ = ws.send(tungstenite::Message::text("hello"));
        loop {
            match ws.read() {
                Ok(tungstenite::Message::Close(c)) => log(
                    logged,
                    match c {
                        Some(c) => format!("close {} {}", u16::from(c.code), c.reason),
                        None => "close".into(),
                    },
                ),
                Ok(tungstenite::Message::Text(t)) => {
                    log(logged, format!("text {t}"));
                    let _ = ws.send(tungstenite::Message::text(format!("echo {t}")));
                }
                Ok(m) => log(logged, format!("message {m:?}")),
                Err(tungstenite::Error::ConnectionClosed) => break,
                Err(e) => {
                    log(logged, format!("error {e}"));
                    break;
                }
            }
        }
        log(logged, "end".into());
    })
}

/// Waits until `l` holds an entry starting with `prefix`; returns the entries.
fn wait_log(l: &Log, prefix: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let now = l.lock().unwrap().clone();
        if now.iter().any(|e| e.starts_with(prefix)) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The sandbox's script: four connections held open (each in the background, its output in a
/// file in $HOME and a marker file when it ends), `== open`; once /ctl/changed exists, whether each of the
/// three to be dropped ended within 10 s (`ENDED x` / `OPEN x`) and what it received, a new
/// request to a dropped host, then the kept stream's end and `== done`.
fn script(http: u16, tunnel: u16, ws: u16, keep: u16) -> String {
    let len = 0x80 | ("key=".len() + PHANTOM.len());
    format!(
        r#"P=/probe/egress-probe
D=$HOME
w() {{ while [ ! -e /ctl/$1 ]; do sleep 0.1; done; }}
ended() {{ n=0; while [ ! -e $D/$1.end ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; if [ -e $D/$1.end ]; then echo "ENDED $1"; else echo "OPEN $1"; fi; }}
PX=${{HTTP_PROXY#http://}}; PX=${{PX%/}}; PH=${{PX%:*}}; PP=${{PX##*:}}
( $P http://{HCI}:{http}/slow > $D/http.out 2>&1; touch $D/http.end ) &
( $P http://{HCI}:{keep}/kept > $D/keep.out 2>&1; touch $D/keep.end ) &
mkfifo $D/tunnel.in $D/ws.in
( nc $PH $PP < $D/tunnel.in > $D/tunnel.out 2>&1; touch $D/tunnel.end ) &
( nc $PH $PP < $D/ws.in > $D/ws.out 2>&1; touch $D/ws.end ) &
exec 3>$D/tunnel.in 4>$D/ws.in
printf 'CONNECT {HCI}:{tunnel} HTTP/1.1\r\nHost: {HCI}:{tunnel}\r\n\r\n' >&3
printf 'GET http://{HCI}:{ws}/chat HTTP/1.1\r\nHost: {HCI}:{ws}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n' >&4
sleep 1
# A masked text frame (key 00000000: the payload as it is): "key=" and the phantom.
printf '\x81\x{len:02x}\x00\x00\x00\x00key={PHANTOM}' >&4
echo '== open'
w changed
ended http; ended tunnel; ended ws
sed 's/^/http: /' $D/http.out
sed 's/^/tunnel: /' $D/tunnel.out | tr -d '\r'
echo "ws: $(od -An -tx1 $D/ws.out | tr -s ' \n' '  ')"
echo '== after'; $P http://{HCI}:{http}/after; echo '-- after'
while [ ! -e $D/keep.end ]; do sleep 0.1; done
sed 's/^/keep: /' $D/keep.out
echo '== done'
exec sleep 600
"#
    )
}

fn set_allow_closes_the_open_connections_it_no_longer_allows_and_keeps_the_others() {
    let sh = shared();
    // The dropped stream would last 20 s, the kept one 8 s: the change comes at about 2 s.
    let (http, http_log) = streaming_http(80, Duration::from_millis(250));
    let (tunnel, tunnel_log) = ticker();
    let (ws, ws_log) = websocket();
    let (keep, keep_log) = streaming_http(32, Duration::from_millis(250));
    let name = format!("egopen-{}-{}", std::process::id(), rt().cli());
    let ctl = sh.dir.join(format!("ctl-{name}"));
    std::fs::create_dir_all(&ctl).unwrap();
    Command::new("chmod").arg("755").arg(&ctl).status().unwrap();
    let entry = |p: u16| format!("{HCI}:{p}");
    let injections = serde_json::json!([{
        "name": "test/apiKey", "phantom": PHANTOM, "value": VALUE, "hosts": [entry(ws)]
    }]);
    let mut l = launch(
        &name,
        &script(http, tunnel, ws, keep),
        filtered(
            &[entry(http), entry(tunnel), entry(ws), entry(keep)],
            "enforce",
        ),
        injections,
        Some(&ctl),
    );
    l.until("== open", Duration::from_secs(60));
    // All four connections are open and carrying data.
    let opened = [
        wait_log(&http_log, "request /slow", Duration::from_secs(10)),
        wait_log(&tunnel_log, "open", Duration::from_secs(10)),
        wait_log(&ws_log, "open", Duration::from_secs(10)),
        wait_log(&keep_log, "request /kept", Duration::from_secs(10)),
    ];
    assert!(
        opened.iter().all(|o| !o.is_empty()),
        "every connection reached its server: {opened:?}; stderr: {}",
        l.stderr()
    );
    // The WebSocket message reached its server with the phantom: ws:// is plain, and a value
    // never travels in cleartext (decisions 0033, 0036).
    let w = wait_log(&ws_log, "text ", Duration::from_secs(10));
    assert!(
        w.contains(&format!("text key={PHANTOM}")),
        "the server read the phantom: {w:?}; stderr: {}",
        l.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));

    let o = as_user(&sh.hsp, &["set-allow", &name, &entry(keep)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "set-allow: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let changed = Instant::now();
    std::fs::write(ctl.join("changed"), "").unwrap();

    // The servers see the three dropped connections end, well before their streams would.
    let h = wait_log(&http_log, "cut after", Duration::from_secs(10));
    let t = wait_log(&tunnel_log, "cut after", Duration::from_secs(10));
    let w = wait_log(&ws_log, "end", Duration::from_secs(10));
    let within = changed.elapsed();
    assert!(
        h.iter().any(|e| e.starts_with("cut after")),
        "the http stream was cut: {h:?}"
    );
    assert!(
        t.iter().any(|e| e.starts_with("cut after")),
        "the tunnel was cut: {t:?}"
    );
    assert!(
        w.contains(&"close 1012 egress policy changed".to_string()),
        "the WebSocket server got a (masked) close 1012: {w:?}"
    );
    assert!(within < Duration::from_secs(10), "closed within {within:?}");

    // The sandbox's process saw them end, and the WebSocket client read the close frame.
    let r = l.until("== after", Duration::from_secs(40));
    for c in ["http", "tunnel", "ws"] {
        assert!(r.contains(&format!("ENDED {c}")), "{c} ended: {r:?}");
    }
    let http_lines = r.iter().filter(|x| x.starts_with("http: LINE ")).count();
    assert!(
        (1..80).contains(&http_lines),
        "the http stream got some lines, not all: {r:?}"
    );
    assert!(
        r.iter().any(|x| x.starts_with("tunnel: HTTP/1.1 200")),
        "the tunnel was opened: {r:?}"
    );
    let ticks = r.iter().filter(|x| x.starts_with("tunnel: tick ")).count();
    assert!((1..80).contains(&ticks), "some ticks, not all: {r:?}");
    let ws_bytes = r
        .iter()
        .find_map(|x| x.strip_prefix("ws: "))
        .unwrap_or_default()
        .to_string();
    // The 101 answer, the server's "hello" (81 05 …), its echo with the phantom again (the value
    // swapped back), then the proxy's unmasked close 1012 with its reason (88 17 03 f4 "egress
    // policy changed").
    let hex = |t: &str| {
        t.bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        ws_bytes.contains(&{
            let echo = format!("echo key={PHANTOM}");
            format!("81 {:02x} {}", echo.len(), hex(&echo))
        }),
        "the echo came back with the phantom: {ws_bytes}"
    );
    assert!(
        !ws_bytes.contains(&hex(VALUE)),
        "never the value: {ws_bytes}"
    );
    let close_1012 = "88 17 03 f4 65 67 72 65 73 73 20 70 6f 6c 69 63 79 20 63 68 61 6e 67 65 64";
    assert!(
        ws_bytes.contains("81 05 68 65 6c 6c 6f") && ws_bytes.contains(close_1012),
        "the WebSocket client read hello then a close 1012: {ws_bytes}"
    );
    assert!(
        ws_bytes.trim_end().ends_with(close_1012),
        "nothing after the close frame: {ws_bytes}"
    );

    // A new request to a dropped host is refused, with a denied event.
    let r = l.until("-- after", Duration::from_secs(30));
    assert!(r.contains(&"STATUS 403".to_string()), "{r:?}");
    assert!(
        l.stderr_has(&event("denied", &entry(http), None)),
        "{}",
        l.stderr()
    );
    assert!(
        !http_log
            .lock()
            .unwrap()
            .contains(&"request /after".to_string()),
        "the refused request never reached the server"
    );

    // The connection to the host still allowed streamed on to its end.
    let r = l.until("== done", Duration::from_secs(30));
    let kept = r.iter().filter(|x| x.starts_with("keep: LINE ")).count();
    assert_eq!(kept, 32, "{r:?}");
    assert!(r.contains(&"keep: END".to_string()), "{r:?}");
    assert_eq!(
        wait_log(&keep_log, "done", Duration::from_secs(5))
            .last()
            .map(String::as_str),
        Some("done")
    );

    Command::new("kill")
        .args(["-TERM", &l.child.id().to_string()])
        .status()
        .unwrap();
    wait_exit(&mut l, Duration::from_secs(60));
}

/// `machine ARGS` of the runtime as the test user, `doc` (if any) on fd 3.
fn machine_verb(args: &[&str], doc: Option<&serde_json::Value>) -> std::process::Output {
    let sh = shared();
    let mut all = vec!["machine"];
    all.extend(args);
    let inner = as_user(&sh.hsp, &all);
    let argv: Vec<String> = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| a.to_string_lossy().to_string())
        .collect();
    let mut c = Command::new("sh");
    match doc {
        Some(d) => {
            // One file per call: cases run side by side in this process.
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = sh
                .dir
                .join(format!("machine-{}-{n}.json", std::process::id()));
            std::fs::write(&path, d.to_string()).unwrap();
            Command::new("chmod")
                .arg("a+r")
                .arg(&path)
                .status()
                .unwrap();
            c.args(["-c", &format!("exec \"$@\" 3<{}", path.display()), "sh"]);
        }
        None => {
            c.args(["-c", "exec \"$@\"", "sh"]);
        }
    }
    c.args(&argv).stdin(Stdio::null()).output().unwrap()
}

fn said(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout {}\nstderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Removes machine `id` when dropped (a case that fails leaves nothing).
struct MachineGone(String);

impl Drop for MachineGone {
    fn drop(&mut self) {
        let _ = machine_verb(&["rm", &self.0], None);
    }
}

/// Machine `id` made by the runtime: busybox with the probe mounted, filtered to `allow`,
/// enforced; removed when the answer drops.
fn filtered_machine(id: &str, allow: &[String]) -> MachineGone {
    let spec = serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": format!("handler-m-{id}"),
        "image": "localhost/handler-test-busybox",
        "argv": ["sh", "-c", "while :; do sleep 3600; done"], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/handler-test"},
        "mounts": [{"source": shared().probe_dir, "target": "/probe", "readOnly": true, "kind": "app"}],
        "files": [], "writablePaths": [], "network": filtered(allow, "enforce"),
        "injections": []
    });
    let o = machine_verb(&["create"], Some(&spec));
    let gone = MachineGone(id.to_string());
    assert!(o.status.success(), "{}", said(&o));
    gone
}

/// A filtered machine (issue 29, decision 0153): its proxy is made with it and lives as long
/// as it. An exec reaches only the allowed host (no route of its own), its egress events on the
/// exec's stderr; `set-allow` on the machine decides the next exec's request; the allow-list
/// and the filter hold after the machine is stopped and started again (its proxy with it); `rm`
/// leaves no container of it, the proxy's included.
fn a_filtered_machine_keeps_its_proxy_and_reaches_only_its_allowed_hosts() {
    let (a, _) = server(None);
    let (b, b_seen) = server(None);
    let sh = shared();
    let id = format!("eg{}{}", std::process::id(), &rt().cli()[..1]);
    let name = format!("handler-m-{id}");
    let (ha, hb) = (format!("{HCI}:{a}"), format!("{HCI}:{b}"));
    let _gone = filtered_machine(&id, std::slice::from_ref(&ha));
    let probe = |n: u32| {
        let script = format!(
            "/probe/egress-probe http://{ha}/a{n}; /probe/egress-probe http://{hb}/b{n}; \
             nc -w 3 {HCI} {a} </dev/null && echo DIRECT-OK || echo DIRECT-FAILED; sleep 1"
        );
        let x = serde_json::json!({"argv": ["sh", "-c", script]});
        let o = machine_verb(&["exec", &id], Some(&x));
        assert!(o.status.success(), "{}", said(&o));
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        let statuses: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("STATUS"))
            .map(String::from)
            .collect();
        assert!(out.contains("DIRECT-FAILED"), "no route out: {out}");
        (statuses, String::from_utf8_lossy(&o.stderr).to_string())
    };
    let (st, err) = probe(1);
    assert_eq!(st, ["STATUS 200", "STATUS 403"], "allowed, then refused");
    assert!(err.contains(&event("allowed", &ha, None)), "{err}");
    assert!(err.contains(&event("denied", &hb, None)), "{err}");
    let o = as_user(&sh.hsp, &["set-allow", &name, &ha, &hb])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", said(&o));
    let (st, _) = probe(2);
    assert_eq!(st, ["STATUS 200", "STATUS 200"], "listed now");
    for verb in ["stop", "start"] {
        let o = machine_verb(&[verb, &id], None);
        assert!(o.status.success(), "{verb}: {}", said(&o));
    }
    let (st, _) = probe(3);
    assert_eq!(
        st,
        ["STATUS 200", "STATUS 200"],
        "kept across a stop and start"
    );
    let o = as_user(&sh.hsp, &["set-allow", &name, &ha])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", said(&o));
    let (st, _) = probe(4);
    assert_eq!(st, ["STATUS 200", "STATUS 403"], "refused again");
    let paths: Vec<String> = b_seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.lines().next().unwrap().to_string())
        .collect();
    assert_eq!(
        paths,
        ["path /b2", "path /b3"],
        "only the allowed requests reached b"
    );
    let o = machine_verb(&["rm", &id], None);
    assert!(o.status.success(), "{}", said(&o));
    assert_nothing_left(&name);
}

/// Keys in a machine (issue 29 item 1, decision 0166): an exec's injections, given on fd 3, are
/// held by the machine's running proxy for as long as the exec runs. Its request to the key's
/// host carries the value and it reads back the phantom; the phantom towards another allowed host
/// is refused as a leak; no value is in its environment or any argv, inside or on the host (ps);
/// its events are on its stderr. The next exec, which brings no key, sends the phantom as it is
/// — the first's key left with it — over a tunnel that is not decrypted.
fn a_machines_exec_has_its_own_key_injected_only_while_it_runs() {
    let (inj, inj_seen) = server(Some("egress-test-injected"));
    let (plain, plain_seen) = server(None);
    let id = format!("ek{}{}", std::process::id(), &rt().cli()[..1]);
    let name = format!("handler-m-{id}");
    let (hi, hp) = (format!("{HCI}:{inj}"), format!("{HCI}:{plain}"));
    let phantom = format!("sk-mach-{}", "Ph4nt0m1".repeat(4));
    let value = format!("sk-mach-{}", "R3alV4lu".repeat(4));
    let _gone = filtered_machine(&id, &[hi.clone(), hp.clone()]);
    let script = format!(
        "P=/probe/egress-probe\n\
         echo '== inject'; $P https://{hi}/echo -H \"x-api-key: $K\"\n\
         echo '== leak'; $P http://{hp}/echo -H \"x-api-key: $K\"\n\
         echo '== env'; echo \"SSL_CERT_FILE=$SSL_CERT_FILE\"; \
         cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -c 'R3al[V]4lu'; echo DONE; sleep 1\n"
    );
    let keyed = serde_json::json!({
        "argv": ["sh", "-c", script], "env": {"K": phantom},
        "injections": [{"name": "test/machineKey", "phantom": phantom, "value": value, "hosts": [hi]}]
    });
    // The host's process table while the exec runs: no value in any argv (ps).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, value) = (stop.clone(), value.clone());
        std::thread::spawn(move || {
            let mut looks = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
                assert!(
                    !String::from_utf8_lossy(&ps.stdout).contains(&value),
                    "a value in an argv"
                );
                looks += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            looks
        })
    };
    let o = machine_verb(&["exec", &id], Some(&keyed));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(watcher.join().unwrap() > 0, "ps looked");
    assert!(o.status.success(), "{}", said(&o));
    let out: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let all = out.join("\n");
    assert!(
        !all.contains(&value) && !err.contains(&value),
        "{all}\n{err}"
    );
    let got = inj_seen.lock().unwrap().join("\n");
    assert!(got.contains(&format!("x-api-key {value}")), "{got}");
    assert!(!got.contains(&phantom), "{got}");
    let inject = section(&out, "== inject", "== leak");
    assert!(inject.contains(&"STATUS 200"), "{inject:?}");
    assert!(
        inject
            .iter()
            .any(|l| l.ends_with(&format!("x-api-key {phantom}"))),
        "the echo comes back as the phantom: {inject:?}"
    );
    assert!(
        inject.contains(&format!("CERT CN={HCI}").as_str()),
        "decrypted: {inject:?}"
    );
    let leak = section(&out, "== leak", "== env");
    assert!(leak.contains(&"STATUS 403"), "{leak:?}");
    assert!(
        plain_seen.lock().unwrap().is_empty(),
        "the leak reached its server"
    );
    assert_eq!(
        section(&out, "== env", "DONE"),
        ["SSL_CERT_FILE=/run/handler/ca-bundle.pem", "0"],
        "the bundle; no value in any process's environment or argv"
    );
    assert!(
        err.contains(&event("injected", &hi, Some("test/machineKey"))),
        "{err}"
    );
    assert!(
        err.contains(&event("leak", &hp, Some("test/machineKey"))),
        "{err}"
    );
    // The next exec brings no key: the first's left with it.
    inj_seen.lock().unwrap().clear();
    let bare = serde_json::json!({
        "argv": ["sh", "-c", format!("/probe/egress-probe https://{hi}/echo -H 'x-api-key: {phantom}'")]
    });
    let o = machine_verb(&["exec", &id], Some(&bare));
    assert!(o.status.success(), "{}", said(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("CERT CN=egress-test-injected"),
        "not decrypted: {out}"
    );
    let got = inj_seen.lock().unwrap().join("\n");
    assert!(got.contains(&format!("x-api-key {phantom}")), "{got}");
    let o = machine_verb(&["rm", &id], None);
    assert!(o.status.success(), "{}", said(&o));
    assert_nothing_left(&name);
}

/// The containers of this runtime's warm proxy pool (claimed ones too), by name.
fn pool_members() -> Vec<String> {
    let filter = format!("label=handler.proxy-pool={}", rt().cli());
    let o = as_user(
        rt().cli(),
        &["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"],
    )
    .output()
    .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// `proxy-pool ARGS` with `env`; its output.
fn pool_verb(args: &[&str], env: &[&str]) -> std::process::Output {
    let sh = shared();
    let mut words: Vec<&str> = env.to_vec();
    words.extend([sh.hsp.as_str(), "proxy-pool"]);
    words.extend(args);
    as_user("env", &words).output().unwrap()
}

/// Waits (20 s at most) until `ok` holds of the pool's members; them.
fn pool_until(what: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = pool_members();
        if ok(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}: the pool holds {m:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A filtered launch of `echo UP; sleep 60` named after `prefix` that claimed the pool's member
/// `member`, once it runs and the refill its start began is there (the refill starts a second
/// after the proxy answered: a launcher stopped before it would never have begun it — a race a
/// test lost under load, not what it checks).
fn claimed_sleeper(prefix: &str, port: u16, member: &str, pool: &[&str]) -> (String, Launch) {
    let name = format!("{prefix}-{}-{}", std::process::id(), rt().cli());
    let network = filtered(&[format!("{HCI}:{port}")], "enforce");
    let mut l = launch_env(
        &name,
        "echo UP; sleep 60",
        (network, serde_json::json!([])),
        None,
        pool,
    );
    l.until("UP", Duration::from_secs(60));
    pool_until("the refill the launch began", |m| {
        m.iter().any(|x| x != member)
    });
    (name, l)
}

/// The warm proxy pool (issue 34 item 1, decision 0175): `proxy-pool fill` starts one member and
/// no second; a filtered launch with an injection claims it — the allowed host gets the value,
/// the process only the phantom, an unlisted host is refused, and the events reach the
/// launcher's stderr over the claim connection — and the member goes with the instance while
/// another takes its place; a launcher killed by SIGKILL takes its claimed proxy with it (the
/// connection's end ends it), one stopped by SIGTERM lets it go before its folder; an unclaimed member ends after its idle time, and a launch that
/// finds only what it left starts a proxy of its own; `drain` removes the rest.
fn the_warm_proxy_pool_stands_in_for_a_proxys_start() {
    let pool = ["HANDLER_PROXY_POOL=1", "HANDLER_PROXY_POOL_IDLE=120"];
    let said = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let o = pool_verb(&["drain"], &pool);
    assert!(o.status.success(), "{}", said(&o));
    assert_eq!(pool_members(), Vec::<String>::new());
    let o = pool_verb(&["fill"], &pool);
    assert_eq!(said(&o).trim(), r#"{"started":1}"#);
    let first = pool_members();
    assert_eq!(first.len(), 1, "{first:?}");
    let o = pool_verb(&["fill"], &pool);
    assert_eq!(said(&o).trim(), r#"{"started":0}"#, "the pool is full");

    let (inj, inj_seen) = server(Some("egress-test-injected"));
    let (port, _seen) = server(None);
    let phantom = format!("sk-pool-{}", "Ph4nt0m1".repeat(4));
    let value = format!("sk-pool-{}", "R3alV4lu".repeat(4));
    let name = format!("egpool-{}-{}", std::process::id(), rt().cli());
    let script = format!(
        "/probe/egress-probe https://{HCI}:{inj}/echo -H \"x-api-key: {phantom}\"; \
         /probe/egress-probe http://example.com:{port}/b; echo DONE"
    );
    let injections = serde_json::json!([{
        "name": "test/poolKey", "phantom": phantom, "value": value, "hosts": [format!("{HCI}:{inj}")]
    }]);
    let network = filtered(&[format!("{HCI}:{inj}")], "enforce");
    let mut l = launch_env(&name, &script, (network, injections), None, &pool);
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    let st = wait_exit(&mut l, Duration::from_secs(30));
    let stderr = l.stderr();
    assert!(st.success(), "launch: {stderr}");
    let got = inj_seen.lock().unwrap().join("\n");
    assert!(got.contains(&format!("x-api-key {value}")), "{got}");
    assert!(
        out.contains(&format!("x-api-key {phantom}")) && !out.contains(&value),
        "{out}"
    );
    assert!(
        out.contains("STATUS 403"),
        "the unlisted host refused: {out}"
    );
    assert!(
        stderr.contains(&event(
            "injected",
            &format!("{HCI}:{inj}"),
            Some("test/poolKey")
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&event("denied", &format!("example.com:{port}"), None)),
        "{stderr}"
    );
    // The member served it: it went with the instance (unclaimed it would wait 120 s), and
    // another took its place.
    let second = pool_until("a new member after the launch", |m| {
        m.len() == 1 && m[0] != first[0]
    });
    assert_nothing_left(&name);

    let (_, mut l) = claimed_sleeper("egpoolkill", port, &second[0], &pool);
    l.child.kill().unwrap();
    let _ = l.child.wait();
    let third = pool_until(
        "the killed launcher's proxy gone, and the refill its start began",
        |m| m.len() == 1 && !m.contains(&second[0]),
    );

    // SIGTERM (a daemon's stop): the launcher lets its claimed proxy go before it removes the
    // instance's folder, so the proxy never runs on without its settings.
    let (name, mut l) = claimed_sleeper("egpoolterm", port, &third[0], &pool);
    Command::new("kill")
        .args(["-TERM", &l.child.id().to_string()])
        .status()
        .unwrap();
    let st = wait_exit(&mut l, Duration::from_secs(60));
    let stderr = l.stderr();
    assert_eq!(st.code(), Some(143), "{stderr}");
    assert!(
        !stderr.contains("cannot read the egress settings"),
        "the claimed proxy outlived its folder: {stderr}"
    );
    pool_until("the stopped launcher's proxy gone", |m| {
        m.len() == 1 && !m.contains(&third[0])
    });
    assert_nothing_left(&name);

    let o = pool_verb(&["drain"], &pool);
    assert!(o.status.success(), "{}", said(&o));
    let short = ["HANDLER_PROXY_POOL=1", "HANDLER_PROXY_POOL_IDLE=2"];
    let o = pool_verb(&["fill"], &short);
    assert_eq!(said(&o).trim(), r#"{"started":1}"#);
    pool_until(
        "an unclaimed member ends after its idle time",
        <[String]>::is_empty,
    );
    let name = format!("egpoolidle-{}-{}", std::process::id(), rt().cli());
    let network = filtered(&[format!("{HCI}:{port}")], "enforce");
    let mut l = launch_env(
        &name,
        &format!("/probe/egress-probe http://{HCI}:{port}/a; echo DONE"),
        (network, serde_json::json!([])),
        None,
        &pool,
    );
    let out = l.until("DONE", Duration::from_secs(60)).join("\n");
    assert!(
        wait_exit(&mut l, Duration::from_secs(30)).success(),
        "{}",
        l.stderr()
    );
    assert!(out.contains("STATUS 200"), "its own proxy: {out}");
    assert_nothing_left(&name);
    // The refill a launch starts, then drain.
    pool_until("the refill", |m| m.len() == 1);
    let o = pool_verb(&["drain"], &pool);
    assert_eq!(said(&o).trim(), r#"{"removed":1}"#);
    assert_eq!(pool_members(), Vec::<String>::new());
}

/// The egress cases, each run against both runtime executables (issue 19): the generated test
/// sets the thread's runtime, the case runs unchanged.
macro_rules! egress_cases {
    ($($case:ident),* $(,)?) => {
        mod podman {
            $( #[test] fn $case() { super::RT.with(|r| r.set(super::Rt::Podman)); super::$case() } )*
        }
        mod docker {
            $( #[test] fn $case() { super::RT.with(|r| r.set(super::Rt::Docker)); super::$case() } )*
        }
    };
}

egress_cases! {
    a_filtered_sandbox_reaches_only_its_allowed_host,
    a_filtered_sandbox_reaches_a_server_on_the_hosts_loopback,
    a_filtered_sandbox_cannot_resolve_outside_names,
    an_open_sandbox_with_an_injection_keeps_its_route_and_gets_the_value_injected,
    injection_leak_stream_and_undecrypted_tunnel,
    set_allow_and_set_egress_decide_the_next_request_then_sigterm_leaves_nothing,
    a_proxy_that_cannot_start_fails_the_launch_before_the_process_runs,
    set_allow_closes_the_open_connections_it_no_longer_allows_and_keeps_the_others,
    a_filtered_machine_keeps_its_proxy_and_reaches_only_its_allowed_hosts,
    a_machines_exec_has_its_own_key_injected_only_while_it_runs,
    the_warm_proxy_pool_stands_in_for_a_proxys_start,
}
