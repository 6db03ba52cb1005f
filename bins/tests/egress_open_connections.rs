//! A policy change applies to connections already open (A.4, egress-lessons), with real rootless
//! Podman: a process in a filtered busybox sandbox holds four long-lived connections through its
//! proxy to servers on this machine (reached as host.containers.internal) — a streamed plain
//! http:// response, a CONNECT tunnel, a WebSocket (ws://, the handshake and a masked frame
//! written by hand to busybox `nc`; the frame's phantom reaches the server as the value of the
//! sandbox's injection, the server's echo comes back with the phantom) and a second streamed
//! response to a host that stays allowed — then
//! `handler-sandbox-podman set-allow` removes three hosts: those three connections end (the
//! servers see their writes fail or a masked close frame 1012; the WebSocket client reads an
//! unmasked close frame 1012), the fourth streams on to its end, and a new request to a removed
//! host is refused with a denied event. Runs as root like the other sandbox tests and starts the
//! sandbox as the unprivileged `handler-test` user (.ci/setup-podman.sh); builds the static
//! proxy and probe unless `$HANDLER_EGRESS_PROXY_BIN` / `$HANDLER_EGRESS_PROBE_BIN` are given,
//! and rebuilds the network filter image from that proxy.

#[path = "support/static_build.rs"]
mod static_build;

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite;

const USER: &str = "handler-test";
const HCI: &str = "host.containers.internal";
const PROXY_IMAGE: &str = "localhost/handler-network-filter:latest";
/// The sandbox holds the phantom; the WebSocket server's host gets the value.
const PHANTOM: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
const VALUE: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";

/// A command run as the test user (setpriv execs: signals reach the program itself).
fn as_user(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        USER,
        "--regid",
        USER,
        "--init-groups",
        "env",
        "-i",
        "-C",
        "/tmp",
    ]);
    c.args([
        format!("USER={USER}"),
        format!("LOGNAME={USER}"),
        format!("HOME=/home/{USER}"),
        "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into(),
    ]);
    c.arg(program).args(args);
    c
}

/// A folder the test user can read, holding handler-sandbox-podman and the probe; the network
/// filter image built from this workspace's static proxy.
struct Setup {
    dir: PathBuf,
    hsp: String,
    probe_dir: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup() -> Setup {
    let proxy_bin = static_build::static_proxy();
    let probe_bin = static_build::static_probe();
    let dir = PathBuf::from(format!("/tmp/egress-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("probe")).unwrap();
    let hsp = dir.join("handler-sandbox-podman");
    std::fs::copy(env!("CARGO_BIN_EXE_handler-sandbox-podman"), &hsp).unwrap();
    std::fs::copy(&proxy_bin, dir.join("handler-egress-proxy")).unwrap();
    std::fs::copy(&probe_bin, dir.join("probe/egress-probe")).unwrap();
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status()
        .unwrap();
    let hsp_s = hsp.to_string_lossy().to_string();
    let built = as_user(
        "env",
        &[
            &format!(
                "HANDLER_EGRESS_PROXY_BIN={}",
                dir.join("handler-egress-proxy").display()
            ),
            &hsp_s,
            "image",
            "build-proxy",
        ],
    )
    .output()
    .unwrap();
    assert!(
        built.status.success(),
        "build-proxy: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let exists = as_user("podman", &["image", "exists", PROXY_IMAGE])
        .status()
        .unwrap();
    assert!(exists.success(), "{PROXY_IMAGE} after build-proxy");
    Setup {
        probe_dir: dir.join("probe"),
        hsp: hsp_s,
        dir,
    }
}

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
                    self.stderr()
                ),
            }
        }
    }
    /// Whether stderr holds `needle` within 10 s.
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

/// Launches `script` (sh) as a filtered busybox sandbox named `name` allowing `allow`, the probe
/// at /probe and `ctl` (read-only) at /ctl, with an injection (PHANTOM → VALUE) for `inject`.
fn launch(
    setup: &Setup,
    name: &str,
    script: &str,
    allow: &[String],
    inject: &str,
    ctl: &Path,
) -> Launch {
    let mounts = serde_json::json!([
        {"source": setup.probe_dir, "target": "/probe", "readOnly": true, "kind": "app"},
        {"source": ctl, "target": "/ctl", "readOnly": true, "kind": "state"},
    ]);
    let spec = serde_json::json!({
        "apiVersion": "handler.sandbox/v1", "name": name, "image": "localhost/handler-test-busybox",
        "argv": ["sh", "-c", script], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": "/home/handler-test"}, "mounts": mounts, "files": [],
        "writablePaths": [],
        "network": {"mode": "filtered", "allow": allow, "enforcement": "enforce"},
        "injections": [{"name": "test/apiKey", "phantom": PHANTOM, "value": VALUE, "hosts": [inject]}]
    });
    let spec_path = setup.dir.join(format!("{name}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    Command::new("chmod")
        .arg("a+r")
        .arg(&spec_path)
        .status()
        .unwrap();
    // `exec`: the launcher is this child itself, so SIGTERM reaches it.
    let inner = as_user(&setup.hsp, &["launch"]);
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

fn wait_exit(l: &mut Launch, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if l.child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the launcher did not exit within {within:?}");
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

#[test]
fn set_allow_closes_the_open_connections_it_no_longer_allows_and_keeps_the_others() {
    let setup = setup();
    // The dropped stream would last 20 s, the kept one 8 s: the change comes at about 2 s.
    let (http, http_log) = streaming_http(80, Duration::from_millis(250));
    let (tunnel, tunnel_log) = ticker();
    let (ws, ws_log) = websocket();
    let (keep, keep_log) = streaming_http(32, Duration::from_millis(250));
    let name = format!("egopen-{}", std::process::id());
    let ctl = setup.dir.join(format!("ctl-{name}"));
    std::fs::create_dir_all(&ctl).unwrap();
    Command::new("chmod").arg("755").arg(&ctl).status().unwrap();
    let entry = |p: u16| format!("{HCI}:{p}");
    let mut l = launch(
        &setup,
        &name,
        &script(http, tunnel, ws, keep),
        &[entry(http), entry(tunnel), entry(ws), entry(keep)],
        &entry(ws),
        &ctl,
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
    // The WebSocket message reached its server with the value in place of the phantom.
    let w = wait_log(&ws_log, "text ", Duration::from_secs(10));
    assert!(
        w.contains(&format!("text key={VALUE}")),
        "the server read the value: {w:?}; stderr: {}",
        l.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));

    let o = as_user(&setup.hsp, &["set-allow", &name, &entry(keep)])
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
        l.stderr_has(&format!(
            r#"handler-egress {{"decision":"denied","host":"{}"}}"#,
            entry(http)
        )),
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
