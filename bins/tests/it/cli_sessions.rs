//! The `handler` CLI's sessions against a real handlerd running as the unprivileged test user
//! and the scripted fake agent in real rootless sandboxes: `handler run` without a terminal (one
//! turn, its answer printed, exit 0), refused for an account of another context (and `--anyway`
//! without a terminal), `handler acp` refusing options that differ from the agent and saving
//! them with `--save` (driven over stdio), `handler session list|show|log|stop|rm`; and through
//! a pseudo-terminal: the streamed text, a permission answered with a key, Ctrl-C cancelling the
//! turn and a second detaching, then `handler attach` re-attaching with the replay.
//! Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::User;

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const TOKEN: &str = "fk-CliSessions0Token111aaaa2222bbbb";

fn user() -> Option<User> {
    test_support::user::podman_user(IMAGE, "the CLI sessions tests")
}

/// handlerd as the test user, the fake agent in its scope.
struct Daemon(TempDaemon);

impl std::ops::Deref for Daemon {
    type Target = TempDaemon;
    fn deref(&self) -> &TempDaemon {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut TempDaemon {
        &mut self.0
    }
}

/// handlerd in `/tmp/hcli-<pid>-<tag>` as the test user, the fake agent in the project folder
/// with its own terminal program (D.16, the fake agent's terminal mode).
async fn start(u: User, tag: &str) -> Daemon {
    let l = Layout::new(&format!("hcli-{}-{tag}", std::process::id()), true);
    l.fake_harness(&format!(
        "[terminal]\ncommand = [\"{}\", \"--terminal\"]\n[terminal.permissions]\nask = []\nbypass = [\"--yolo\"]\n",
        l.scope.join(".bin/fake-acp-agent").display()
    ));
    // A Wayland socket the daemon is pointed at (A.6): a listening socket of the user's.
    let wayland = l.root.join("wayland");
    std::fs::create_dir_all(&wayland).unwrap();
    let socket = wayland.join("wayland-9");
    std::mem::forget(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    u.give(&wayland);
    Daemon(
        l.spawn(
            u,
            &[
                ("TERM", "xterm-256color".to_string()),
                ("HANDLER_WAYLAND_SOCKET", socket.display().to_string()),
            ],
        )
        .await,
    )
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> Value {
        let (s, v) = self.call(reqwest::Method::POST, path, Some(body)).await;
        assert!((200..300).contains(&s), "{path}: {s} {v}");
        v
    }
    async fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None).await.1
    }
    /// Waits (60 s at most) until the session's turn has ended.
    async fn idle(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.get(&format!("/v1/sessions/{id}")).await["busy"] == json!(true) {
            assert!(Instant::now() < deadline, "session {id} still busy");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    /// A context Work, accounts `work` (for it) and `perso` (Personal), and project `app` in the
    /// scope with its agent Dev on `work` (no network, permissions bypass).
    async fn project(&self) -> Value {
        for c in ["Work", "Personal"] {
            self.post("/v1/contexts", json!({"name": c, "color": "blue"}))
                .await;
        }
        for (name, ctx) in [("work", "Work"), ("perso", "Personal")] {
            self.post(
                "/v1/accounts",
                json!({"name": name, "harness": "fake", "contexts": [ctx], "token": {"value": TOKEN}}),
            )
            .await;
        }
        self.post(
            "/v1/projects",
            json!({"folder": self.scope, "context": "Work", "agent": {"name": "Dev",
                "models": [{"account": "work"}], "network": "none", "permissions": "bypass",
                "confirmRisks": true}}),
        )
        .await
    }
    /// `handler ARGS` in the project folder as the test user.
    fn handler(&self, args: &[&str]) -> Command {
        let bin = self.root.join("bin/handler");
        let env: Vec<(&str, String)> = self.env.clone();
        let mut c = self.user.cmd(bin.to_str().unwrap(), args, &env);
        c.current_dir(&self.scope);
        c
    }
    fn output(&self, args: &[&str], stdin: &str) -> Output {
        let mut c = self.handler(args);
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_run_without_a_terminal_runs_one_turn_and_acp_refuses_or_saves_what_differs() {
    let Some(u) = user() else { return };
    let d = start(u, "plain").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    // One turn: the answer on stdout, exit 0 on end_turn; a Session with origin cli.
    let o = d.output(&["run", "--", "hello", "from the cli"], "");
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    assert_eq!(text(&o.stdout).trim(), "hello from the cli");
    let sessions = d.get("/v1/sessions").await;
    let s = &sessions[0];
    assert_eq!(
        (s["origin"].as_str(), s["agentId"].as_str()),
        (Some("cli"), Some(dev.as_str())),
        "{s}"
    );
    let id = s["id"].as_str().unwrap();
    // An account of another context: refused, saying how to run it anyway; --anyway needs a
    // terminal to type yes in.
    let o = d.output(&["run", "perso", "--", "x"], "");
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("not made for project app's context \"Work\"") && e.contains("--anyway"),
        "{e}"
    );
    let o = d.output(&["run", "perso", "--anyway", "--", "x"], "yes\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no terminal to type yes in"),
        "{}",
        text(&o.stderr)
    );
    // The sessions' verbs.
    let o = d.output(&["session", "list", "--json"], "");
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let o = d.output(&["session", "show", id], "");
    assert!(
        text(&o.stdout).contains("origin: cli"),
        "{}",
        text(&o.stdout)
    );
    // The log comes through the API (GET /v1/sessions/{id}/events), not the state folder: a
    // state folder that does not exist changes nothing.
    let mut env = d.env.clone();
    env.retain(|(k, _)| *k != "HANDLER_STATE_DIR");
    env.push(("HANDLER_STATE_DIR", "/nonexistent".into()));
    let bin = d.root.join("bin/handler");
    let o = d
        .user
        .cmd(bin.to_str().unwrap(), &["session", "log", id], &env)
        .output()
        .unwrap();
    let log = text(&o.stdout);
    assert!(
        log.contains("hello from the cli") && log.contains("(turn ended: end_turn)"),
        "{log}: {}",
        text(&o.stderr)
    );
    let events = d.get(&format!("/v1/sessions/{id}/events")).await;
    let seqs: Vec<u64> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.len() >= 3 && seqs.windows(2).all(|w| w[0] < w[1]),
        "{events}"
    );
    let after = d
        .get(&format!("/v1/sessions/{id}/events?afterSeq={}", seqs[1]))
        .await;
    assert_eq!(after.as_array().unwrap().len(), seqs.len() - 2, "{after}");
    let o = d.output(
        &[
            "session",
            "log",
            id,
            "--after-seq",
            &seqs[seqs.len() - 1].to_string(),
        ],
        "",
    );
    assert_eq!((o.status.code(), text(&o.stdout)), (Some(0), String::new()));
    let (status, _) = d
        .call(
            reqwest::Method::GET,
            "/v1/sessions/s_0000000000000000/events",
            None,
        )
        .await;
    assert_eq!(status, 404);
    // handler acp in the folder: an option that differs is refused without --save …
    let o = d.output(&["acp", "--permissions", "ask"], "");
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("permissions: bypass → ask") && e.contains("--save"),
        "{e}"
    );
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "bypass"
    );
    // … and saved with it, then the editor's ACP flows over stdio.
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": d.scope, "mcpServers": []}}),
    ];
    let mut c = d.handler(&["acp", "--permissions", "ask", "--save"]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in &lines {
        writeln!(stdin, "{l}").unwrap();
    }
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        if v.get("id").is_some() {
            got.push(v);
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(got.len(), 2, "{got:?}: {err}: {}", d.log());
    assert_eq!(
        got[1]["result"]["modes"]["currentModeId"], "default",
        "{got:?}"
    );
    assert!(err.contains("saved to agent Dev"), "{err}");
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "ask"
    );
    // stop, rm.
    assert_eq!(
        d.output(&["session", "stop", id], "").status.code(),
        Some(0)
    );
    assert_eq!(
        d.get(&format!("/v1/sessions/{id}")).await["state"],
        "stopped"
    );
    assert_eq!(d.output(&["session", "rm", id], "").status.code(), Some(0));
    assert!(d.get("/v1/sessions").await.as_array().unwrap().is_empty());
}

/// A program on a pseudo-terminal: what it printed so far, keys typed into it.
struct Pty {
    master: std::fs::File,
    seen: Arc<Mutex<String>>,
    child: Child,
}

impl Pty {
    /// `c` in a session of its own whose controlling terminal is the pty (`setsid --ctty`), as a
    /// shell runs a program: the terminal's size changes reach it as SIGWINCH.
    fn spawn_session(c: Command) -> Pty {
        let mut s = Command::new("setsid");
        s.arg("--ctty").arg(c.get_program()).args(c.get_args());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => s.env(k, v),
                None => s.env_remove(k),
            };
        }
        if let Some(d) = c.get_current_dir() {
            s.current_dir(d);
        }
        Pty::spawn(s)
    }
    /// The terminal resized, as a terminal emulator does: both sides in one TIOCSWINSZ on the
    /// master (one SIGWINCH to its foreground process group). `stty rows R cols C` would make
    /// two changes, and a program may read the size between them.
    #[allow(unsafe_code)]
    fn resize(&self, rows: u16, cols: u16) {
        use std::os::fd::AsRawFd;
        nix::ioctl_write_ptr_bad!(set_winsize, nix::libc::TIOCSWINSZ, nix::pty::Winsize);
        let size = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: the master is an open pty; `size` outlives the call.
        unsafe { set_winsize(self.master.as_raw_fd(), &size) }.expect("TIOCSWINSZ on the pty");
    }
    fn spawn(mut c: Command) -> Pty {
        let size = nix::pty::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        let slave = std::fs::File::from(pty.slave);
        c.stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        let child = c.spawn().unwrap();
        let master = std::fs::File::from(pty.master);
        let seen = Arc::new(Mutex::new(String::new()));
        let (mut r, s) = (master.try_clone().unwrap(), seen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Pty {
            master,
            seen,
            child,
        }
    }
    /// Waits (60 s at most) until the output after `from` holds `what`; the offset after it.
    fn expect(&self, from: usize, what: &str, d: &Daemon) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.seen.lock().unwrap().clone();
            if let Some(i) = s.get(from..).and_then(|t| t.find(what)) {
                return from + i + what.len();
            }
            assert!(
                Instant::now() < deadline,
                "no {what:?} after {from} in {s:?}: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fn send(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }
    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            assert!(
                Instant::now() < deadline,
                "still running: {}",
                self.seen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A.6 end to end: `handler run --display --save` gives the agent the display, and its next
/// session's sandbox has the socket the daemon was pointed at as its Wayland display (named
/// `wayland-0` inside, whatever its host name); taken
/// back with `handler agent edit --no-display`, the next one has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_run_display_gives_the_session_the_daemons_wayland_socket() {
    let Some(u) = user() else { return };
    let d = start(u, "display").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    let probe = "sh: echo wd=${WAYLAND_DISPLAY-none}; test -S \"$XDG_RUNTIME_DIR/$WAYLAND_DISPLAY\" && echo is-a-socket; echo x=${DISPLAY-unset}";
    let o = d.output(&["run", "--display", "--save", "--", probe], "");
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    let out = text(&o.stdout);
    // The answer's lines (after the prompt's echo).
    let said = |out: &str, l: &str| out.lines().any(|x| x == l);
    assert!(
        said(&out, "wd=wayland-0") && said(&out, "is-a-socket"),
        "{out}"
    );
    assert!(said(&out, "x=unset"), "no X display: {out}");
    assert!(
        text(&o.stderr).contains("draw on your screen"),
        "what it gives is said: {}",
        text(&o.stderr)
    );
    assert_eq!(d.get(&format!("/v1/agents/{dev}")).await["display"], true);
    let o = d.output(&["agent", "edit", &dev, "--no-display"], "");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = d.output(&["run", "--", probe], "");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(said(&out, "wd=none") && !said(&out, "is-a-socket"), "{out}");
}

/// Issue 33 item 5: `handler terminal --display` gives the harness's program the daemon's
/// Wayland socket as `wayland-0` (no X display), says so, and the agent keeps it; taken back, the
/// next terminal has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_terminal_display_gives_the_program_the_daemons_wayland_socket() {
    let Some(u) = user() else { return };
    let d = start(u, "tdisplay").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    let mut t = Pty::spawn_session(d.handler(&["terminal", "--display", "--save", "--", "x"]));
    let at = t.expect(0, "draw on your screen", &d);
    let at = t.expect(at, "fake terminal: tty=true", &d);
    t.send("display\r");
    t.expect(
        at,
        "fake terminal display: wd=wayland-0 socket=true x=unset",
        &d,
    );
    t.send("exit 0\r");
    assert_eq!(t.exit_code(), Some(0), "{}", t.seen.lock().unwrap());
    assert_eq!(d.get(&format!("/v1/agents/{dev}")).await["display"], true);
    let o = d.output(&["agent", "edit", &dev, "--no-display"], "");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let mut t = Pty::spawn_session(d.handler(&["terminal", "--", "y"]));
    let at = t.expect(0, "fake terminal: tty=true", &d);
    t.send("display\r");
    t.expect(
        at,
        "fake terminal display: wd=none socket=false x=unset",
        &d,
    );
    t.send("exit 0\r");
    assert_eq!(t.exit_code(), Some(0), "{}", t.seen.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_run_in_a_terminal_answers_with_keys_cancels_detaches_and_reattaches() {
    let Some(u) = user() else { return };
    let d = start(u, "pty").await;
    d.project().await;
    let mut t = Pty::spawn(d.handler(&["run"]));
    let at = t.expect(0, "Ctrl-C cancels the turn", &d);
    let id = {
        let s = t.seen.lock().unwrap().clone();
        let i = s.find("handler: session ").unwrap() + "handler: session ".len();
        s[i..].split_whitespace().next().unwrap().to_string()
    };
    // A prompt: its text streamed back (the agent's line, not the echo of the typed one).
    t.send("say hi\r");
    let at = t.expect(at, "\u{1b}[2Ksay hi", &d);
    d.idle(&id).await;
    // A permission: asked with a key per option, answered with one.
    t.send("ask: may I\r");
    let at = t.expect(at, "[y] Allow  [n] Reject", &d);
    t.send("y");
    let at = t.expect(at, "answered \"yes\"", &d);
    d.idle(&id).await;
    // Ctrl-C while the agent asks: the turn is cancelled.
    t.send("ask: again\r");
    let at = t.expect(at, "[y] Allow", &d);
    t.send("\x03");
    let at = t.expect(at, "cancelling the turn", &d);
    let at = t.expect(at, "(turn cancelled)", &d);
    // Not busy: Ctrl-C detaches; the session goes on.
    t.send("\x03");
    let at = t.expect(at, "detached; the session goes on: handler attach ", &d);
    assert_eq!(t.exit_code(), Some(0));
    let s = t.seen.lock().unwrap().clone();
    let id: String = s[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    assert_eq!(
        d.get(&format!("/v1/sessions/{id}")).await["state"],
        "running",
        "{s}"
    );
    // Re-attached: the history replayed, then the chat goes on.
    let mut t = Pty::spawn(d.handler(&["attach", &id]));
    let at = t.expect(0, "answered \"yes\"", &d);
    t.send("back again\r");
    let at = t.expect(at, "back again", &d);
    t.send("/stop\r");
    t.expect(at, "the session is stopped", &d);
    assert_eq!(t.exit_code(), Some(0));
    assert_eq!(
        d.get(&format!("/v1/sessions/{id}")).await["state"],
        "stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_run_in_a_terminal_asks_before_saving_options_and_before_running_anyway() {
    let Some(u) = user() else { return };
    // The ad-hoc agent below has the default network, filtered: the network filter must be
    // there, whichever test of this process built it (a fresh machine's first run met it
    // missing, and the session was rightly refused with 503).
    test_support::network_filter::ensure(std::path::Path::new(env!(
        "CARGO_BIN_EXE_handler-sandbox-podman"
    )));
    let d = start(u, "ask").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    // Options that differ from the agent's: what differs, then the question; no starts nothing.
    let mut t = Pty::spawn(d.handler(&["run", "--permissions", "ask"]));
    let at = t.expect(0, "permissions: bypass → ask", &d);
    t.expect(at, "Save this to the agent? [y/N]", &d);
    t.send("n\r");
    t.expect(at, "nothing started", &d);
    assert_eq!(t.exit_code(), Some(1));
    assert!(d.get("/v1/sessions").await.as_array().unwrap().is_empty());
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "bypass"
    );
    // Yes saves it through PUT, then the session starts.
    let mut t = Pty::spawn(d.handler(&["run", "--permissions", "ask"]));
    t.expect(0, "Save this to the agent? [y/N]", &d);
    t.send("y\r");
    let at = t.expect(0, "saved to agent Dev", &d);
    let at = t.expect(at, "Ctrl-C cancels the turn", &d);
    t.send("\x03");
    t.expect(at, "detached", &d);
    assert_eq!(t.exit_code(), Some(0));
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "ask"
    );
    // An account of another context with --anyway: the warning, the typed yes, then an ad-hoc
    // agent of the folder, outside the project.
    let mut t = Pty::spawn(d.handler(&["run", "perso", "--anyway"]));
    let at = t.expect(0, "outside project app", &d);
    t.expect(at, "Type yes to run it anyway:", &d);
    t.send("yes\r");
    let at = t.expect(at, "made the ad-hoc agent", &d);
    let at = t.expect(at, "Ctrl-C cancels the turn", &d);
    t.send("\x03");
    t.expect(at, "detached", &d);
    assert_eq!(t.exit_code(), Some(0));
    let agents = d.get("/v1/agents").await;
    let adhoc: Vec<&Value> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["projectId"].is_null())
        .collect();
    assert_eq!(adhoc.len(), 1, "{agents}");
    assert_eq!(adhoc[0]["scope"], d.scope.as_str());
    assert_eq!(adhoc[0]["models"][0]["account"], "perso");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_terminal_runs_the_harness_program_on_this_terminal_past_a_handlerd_restart() {
    let Some(u) = user() else { return };
    let mut d = start(u, "term").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    let mut t = Pty::spawn_session(d.handler(&["terminal", "--", "hello"]));
    // Who it runs as, then the program itself on this terminal (TERM passed on, the mode's flags
    // and the person's arguments).
    let at = t.expect(0, "the program runs as fake as account work", &d);
    let at = t.expect(
        at,
        "fake terminal: tty=true TERM=xterm-256color args=--yolo hello",
        &d,
    );
    t.send("ping\r");
    let at = t.expect(at, "fake terminal got: ping", &d);
    // The program sees this terminal's size, and its new size once resized.
    t.send("size\r");
    let at = t.expect(at, "fake terminal size: 40 120", &d);
    t.resize(50, 100);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut at = at;
    loop {
        t.send("size\r");
        at = t.expect(at, "fake terminal size: ", &d);
        let seen = t.seen.lock().unwrap().clone();
        if seen[at..].starts_with("50 100") {
            break;
        }
        let tail: String = seen
            .chars()
            .rev()
            .take(800)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        assert!(Instant::now() < deadline, "never resized: …{tail}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // One of the agent's connections, with the model it runs with.
    let conns = d.get(&format!("/v1/agents/{dev}")).await["connections"].clone();
    assert_eq!(conns.as_array().map(Vec::len), Some(1), "{conns}");
    assert_eq!(conns[0]["terminal"]["account"], "work", "{conns}");
    // handlerd restarted underneath: the program does not notice; the new handlerd takes it
    // back as the same connection (security F13).
    d.restart().await;
    t.send("after the restart\r");
    t.expect(at, "fake terminal got: after the restart", &d);
    let again = d.get(&format!("/v1/agents/{dev}")).await["connections"].clone();
    assert_eq!(
        again, conns,
        "the terminal is one of the agent's connections again"
    );
    // Its exit code is handler terminal's; its end is seen by the handlerd that took it back.
    t.send("exit 7\r");
    assert_eq!(t.exit_code(), Some(7), "{}", t.seen.lock().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.get(&format!("/v1/agents/{dev}")).await["connections"] != json!([]) {
        assert!(
            Instant::now() < deadline,
            "a terminal that ended is still listed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A terminal taken back is stopped when its agent is deleted, as one handlerd started.
    let mut t = Pty::spawn_session(d.handler(&["terminal", "--", "again"]));
    t.expect(0, "fake terminal: tty=true", &d);
    d.restart().await;
    let pid = p["id"].as_str().unwrap();
    let (s, _) = d
        .call(
            reqwest::Method::POST,
            &format!("/v1/projects/{pid}/agents"),
            Some(json!({"name": "Other", "default": true, "models": [{"account": "work"}], "network": "none"})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, v) = d
        .call(reqwest::Method::DELETE, &format!("/v1/agents/{dev}"), None)
        .await;
    assert_eq!(s, 204, "{v}");
    // Ended (exit_code waits 30 s at most), not by the program's own exit.
    let code = t.exit_code();
    assert_ne!(code, Some(0), "{}", t.seen.lock().unwrap());
}

/// The README's main job, as its quickstart runs it (decision 0126): outside any project,
/// `handler run ACCOUNT SCOPE --permissions bypass -- "write hello.txt"` makes the folder's
/// ad-hoc agent, runs one turn in a real sandbox without a terminal and the file is in the
/// scope, owned by the person who ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_main_job_handler_run_writes_hello_txt_in_the_scope() {
    use std::os::unix::fs::MetadataExt;
    let Some(u) = user() else { return };
    let (uid, gid) = (u.uid, u.gid);
    let d = start(u, "readme").await;
    d.post(
        "/v1/accounts",
        json!({"name": "demo", "harness": "fake", "token": {"value": TOKEN}}),
    )
    .await;
    let scope = d.scope.clone();
    let args = [
        "run",
        "demo",
        scope.as_str(),
        "--network",
        "none",
        "--permissions",
        "bypass",
        "--",
        "write hello.txt",
    ];
    let o = d.output(&args, "");
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    assert!(
        text(&o.stdout).contains("write hello.txt"),
        "{}",
        text(&o.stdout)
    );
    let file = Path::new(&scope).join("hello.txt");
    assert_eq!(
        std::fs::read_to_string(&file).ok().as_deref(),
        Some("hello\n"),
        "{}",
        d.log()
    );
    let m = std::fs::metadata(&file).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, gid), "hello.txt's owner");
    // The ad-hoc agent of the folder, made with the options typed, and its Session (origin cli).
    let agents = d.get("/v1/agents").await;
    let a = &agents[0];
    assert_eq!(
        (
            a["scope"].as_str(),
            a["network"].as_str(),
            a["permissions"].as_str()
        ),
        (Some(scope.as_str()), Some("none"), Some("bypass")),
        "{agents}"
    );
    let sessions = d.get("/v1/sessions").await;
    assert_eq!(sessions[0]["origin"], "cli", "{sessions}");
}

/// What the SDK-driven editor (fixtures/editor/acp_sdk_editor.mjs) reported.
fn sdk_editor(d: &Daemon, args: &[&str], prompt: &str) -> Value {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../handler-core/web/node_modules/@agentclientprotocol/sdk");
    assert!(
        sdk.join("package.json").exists(),
        "no {}: run .ci/setup-browser.sh (npm ci in handler-core/web)",
        sdk.display()
    );
    let script = d.root.join("acp_sdk_editor.mjs");
    if !script.exists() {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/editor/acp_sdk_editor.mjs");
        std::fs::copy(src, &script).unwrap();
        d.user.give(&script);
    }
    let sdk = std::fs::canonicalize(sdk).unwrap().display().to_string();
    let handler = d.root.join("bin/handler").display().to_string();
    let mut a = vec![
        script.to_str().unwrap(),
        "--sdk",
        sdk.as_str(),
        "--cwd",
        d.scope.as_str(),
        "--prompt",
        prompt,
        "--",
        handler.as_str(),
        "acp",
    ];
    a.extend_from_slice(args);
    let o = d.user.cmd("node", &a, &d.env).output().unwrap();
    let out = text(&o.stdout);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{e}: {out}\n{}\n{}", text(&o.stderr), d.log()))
}

/// `handler acp` as an editor runs it (D.16), driven over stdio by the official TypeScript ACP
/// SDK in the project's folder: the project's agent answers a prompt; an option that differs
/// from the agent is refused before any ACP, saying what differs and `--save`; with `--save`
/// it is saved and the prompt answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_acp_driven_by_the_typescript_sdk_answers_refuses_what_differs_and_saves() {
    let Some(u) = user() else { return };
    let d = start(u, "sdk").await;
    let p = d.project().await;
    let dev = p["agents"][0]["id"].as_str().unwrap().to_string();
    let r = sdk_editor(&d, &[], "hello from the editor");
    assert_eq!(r["stopReason"], "end_turn", "{r}\n{}", d.log());
    assert!(
        r["text"]
            .as_str()
            .unwrap()
            .contains("hello from the editor"),
        "{r}"
    );
    let r = sdk_editor(&d, &["--permissions", "ask"], "not sent");
    assert_eq!(r["exitCode"], 2, "{r}");
    let e = r["stderr"].as_str().unwrap();
    assert!(
        e.contains("permissions: bypass → ask") && e.contains("--save"),
        "{r}"
    );
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "bypass"
    );
    let r = sdk_editor(&d, &["--permissions", "ask", "--save"], "saved, then asked");
    assert_eq!(r["stopReason"], "end_turn", "{r}\n{}", d.log());
    assert!(
        r["text"].as_str().unwrap().contains("saved, then asked"),
        "{r}"
    );
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["permissions"],
        "ask"
    );
    // Every conversation above that ran went through the project's agent.
    assert_eq!(
        d.get(&format!("/v1/agents/{dev}")).await["projectId"],
        p["id"],
    );
}

/// Runs from the command line (D.18, decision 0131): `handler agent builtin` lists the skill
/// reviewer not set up, `handler agent new --origin skill-review` sets it up with the person's
/// model, `handler skill review NAME --expect …` runs it in a real sandbox on the skill and
/// prints the verdict and findings (exit 0); `handler agent run … --json` gives the session with
/// its valid output; an invalid result exits 1 saying why; a form field typed wrong is refused
/// (exit 2) before anything starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_from_the_command_line_review_a_skill_and_print_its_result() {
    let Some(u) = user() else { return };
    let d = start(u, "runs").await;
    d.post(
        "/v1/accounts",
        json!({"name": "demo", "harness": "fake", "token": {"value": TOKEN}}),
    )
    .await;
    d.post(
        "/v1/skills",
        json!({"content": "---\nname: pdf-tools\ndescription: Fills PDF forms.\n---\n# PDF\n"}),
    )
    .await;
    let o = d.output(&["agent", "builtin"], "");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let listed = text(&o.stdout);
    assert!(
        listed.contains("skill-review")
            && listed.contains("handler agent new --origin skill-review"),
        "{listed}"
    );
    assert!(
        listed.contains("set-up fetches the skill skill-creator, Apache-2.0, from https://github.com/anthropics/skills/tree/9d2f1ae187231d8199c64b5b762e1bdf2244733d/skills/skill-creator"),
        "the skill it fetches said before set-up: {listed}"
    );
    let scope = d.scope.clone();
    let o = d.output(
        &[
            "agent",
            "new",
            "--origin",
            "skill-review",
            "--account",
            "demo",
            "--scope",
            scope.as_str(),
            "--network",
            "none",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    let agents = d.get("/v1/agents").await;
    let reviewer = &agents[0];
    assert_eq!(reviewer["origin"], "skill-review", "{agents}");
    assert!(reviewer["interface"].is_object(), "{reviewer}");
    // The fake agent's final message: a valid review.
    let review = json!({
        "verdict": "caution", "summary": "Fills forms.", "whenUsed": "PDF work",
        "capabilities": {"commands": [], "hosts": ["pdf.example.com"], "files": [], "env": []},
        "mismatches": [],
        "findings": [{"severity": "low", "where": {"path": "SKILL.md", "lines": [4, 5]}, "text": "a host"}]
    });
    let answers = |a: &[String]| {
        let p = Path::new(&scope).join(".fake-agent-script.json");
        std::fs::write(&p, json!({"answers": a}).to_string()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    let block = format!("Reviewed.\n```json handler-result\n{review}\n```\n");
    answers(std::slice::from_ref(&block));
    let o = d.output(
        &["skill", "review", "pdf-tools", "--expect", "fills forms"],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    let shown = text(&o.stdout);
    assert!(
        shown.starts_with("verdict: caution\nsummary: Fills forms.\n")
            && shown.contains("hosts: pdf.example.com")
            && shown.contains("[low] SKILL.md:4-5: a host"),
        "{shown}"
    );
    // The run handlerd kept: its input as typed, origin cli.
    let sessions = d.get("/v1/sessions").await;
    let run = &sessions[0];
    assert_eq!(
        (
            run["origin"].clone(),
            run["input"]["fields"].clone(),
            run["input"]["subject"]["skill"].clone()
        ),
        (
            json!("cli"),
            json!({"expectation": "fills forms"}),
            json!("pdf-tools")
        ),
        "{run}"
    );
    // --json: the session, its output valid.
    answers(std::slice::from_ref(&block));
    let o = d.output(
        &[
            "--json",
            "agent",
            "run",
            "skill-review",
            "-f",
            "expectation=x",
            "--skill",
            "pdf-tools",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), d.log());
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["output"]["valid"], true, "{s}");
    assert_eq!(s["output"]["value"]["verdict"], "caution", "{s}");
    // No result block twice (the first turn and its one retry): exit 1, saying why.
    answers(&["no block".into(), "still none".into()]);
    let o = d.output(&["skill", "review", "pdf-tools"], "");
    assert_eq!(o.status.code(), Some(1), "{}\n{}", text(&o.stdout), d.log());
    let e = text(&o.stderr);
    assert!(
        e.contains("the run's result is not valid") && e.contains("handler session log s_"),
        "{e}"
    );
    // A field typed wrong: refused before anything starts.
    let before = d.get("/v1/sessions").await.as_array().map(Vec::len);
    let o = d.output(&["agent", "run", "skill-review", "-F", "n=not json"], "");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("-F n: not JSON"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(d.get("/v1/sessions").await.as_array().map(Vec::len), before);
}
